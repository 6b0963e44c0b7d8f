"""No measured figure typed into a lesson's prose or its cards.

A speed or a time written into a markdown cell drifts from the measurement it came from. The rule
(course-design.md, "Performance and recorded figures"): a code cell prints the figure from the
recorded data (`helpers.bench.recorded_rows`) or measures it live on a GPU, and the prose refers
to it ("the table above"). Datasheet values live in `helpers/roofline.py` and are printed from it.

This test reads the markdown cells of every lesson's paired .py (notebooks/NN_slug.py) and fails on
a number followed by a speed or time unit (GB/s, TB/s, TFLOP/s, ms, µs, ...), or on a typed speed
ratio ("3x faster", "1.3–1.6×"). The few figures that are not measurements are listed in ALLOWED,
each with the reason.
"""

import pathlib
import re

import pytest

NOTEBOOKS = pathlib.Path(__file__).resolve().parent.parent / "notebooks"
LESSONS = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.py"))

_NUMBER = r"\d[\d,]*(?:\.\d+)?"
_RANGE = rf"{_NUMBER}(?:\s*(?:[-–—]|to)\s*{_NUMBER})?"
_UNITS = (r"[GTP]B/s|[GTP]FLOP/s|[GTP]FLOPS|ms|µs|μs|us|ns|"
          r"milliseconds?|microseconds?|nanoseconds?")
FIGURE = re.compile(
    rf"(?<![\w.]){_RANGE}\s*(?:{_UNITS})(?![\w/])"                        # 4.28 TB/s, 18–22 µs
    rf"|(?<![\w.]){_RANGE}\s*[x×]\s+(?:faster|slower|quicker|speed-?up)\b"  # 3x faster
    rf"|(?<![\w.]){_NUMBER}\s*[-–—]\s*{_NUMBER}\s*[x×](?![\w\d])"           # 1.3–1.6×
    rf"|(?<![\w.])\d+\.\d+\s*×(?!\s*\d)"                                    # 0.93×
    rf"|(?<![\w.]){_RANGE}\s+times\s+(?:faster|slower|quicker|as\s+fast)\b"   # 6 to 7 times faster
    rf"|(?<![\w.]){_RANGE}\s*%\s+(?:faster|slower|of\s+(?:the\s+)?copy)"  # 12% faster, 101% of copy
)

# (notebook, text around the figure as it reads in the cell, lines joined by spaces; why it is
# not a measurement). A figure is allowed when an entry's text covers it.
ALLOWED = [
    ("03_arithmetic_intensity.py", "warms up for 25 ms, runs for about 100 ms more",
     "do_bench's argument values (warmup=25, rep=100), not a timing"),
    ("03_arithmetic_intensity.py", "is served from cache, 3x faster",
     "how the simulated GPU (SimulatedGPU) is built, not a measurement"),
    ("03_arithmetic_intensity.py", "Its kernel takes 0.5 ms",
     "the simulated GPU's kernel time, a parameter of SimulatedGPU"),
]


def markdown_cells(path):
    """(first line number, [lines without the leading '# ']) of each markdown cell of a percent .py."""
    cells, current = [], None
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if line.startswith("# %%"):
            current = [] if "[markdown]" in line else None
            if current is not None:
                cells.append((number + 1, current))
        elif current is not None:
            current.append(line[2:] if line.startswith("# ") else line.lstrip("#"))
    return cells


def typed_figures(path):
    """(line number, figure, the line) of each figure typed into a markdown cell, not allowed."""
    allowed = [text for name, text, _ in ALLOWED if name == path.name]
    found = []
    for first, lines in markdown_cells(path):
        text = " ".join(lines)
        starts = [0]
        for line in lines:
            starts.append(starts[-1] + len(line) + 1)
        covered = [(m.start(), m.end()) for a in allowed for m in re.finditer(re.escape(a), text)]
        for match in FIGURE.finditer(text):
            if any(lo <= match.start() and match.end() <= hi for lo, hi in covered):
                continue
            row = max(i for i, s in enumerate(starts[:-1]) if s <= match.start())
            found.append((first + row, match.group(0), lines[row].strip()))
    return found


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_no_measured_figure_typed_in_markdown(path):
    found = typed_figures(path)
    assert not found, (
        f"{path.name}: measured figures typed into markdown, where they drift from the data:\n"
        + "\n".join(f"  line {n}: {figure!r} in: {line}" for n, figure, line in found)
        + "\nPrint each figure in a code cell from the recorded data (helpers.bench.recorded_rows, "
          "naming the GPU) or measure it live on a GPU, and let the prose refer to it "
          "('the table above'). A figure that is not a measurement (a simulated timing, do_bench's "
          "arguments, a datasheet value also printed from helpers.roofline) goes into ALLOWED in "
          "tests/test_figures.py, with the reason.")


def test_allowed_entries_are_still_used():
    for name, text, why in ALLOWED:
        path = NOTEBOOKS / name
        cells = [" ".join(lines) for _, lines in markdown_cells(path)] if path.exists() else []
        assert any(text in cell for cell in cells), (
            f"ALLOWED in tests/test_figures.py lists {text!r} for {name} ({why}), but no markdown "
            f"cell of {name} holds it any more: remove the entry")


@pytest.mark.parametrize("text, figures", [
    ("a copy moves 4.28 TB/s, and cuBLAS 695 TFLOP/s", ["4.28 TB/s", "695 TFLOP/s"]),
    ("about 18–22 µs per launch, 0.141 ms against", ["18–22 µs", "0.141 ms"]),
    ("it runs 1.3–1.6× as fast; 12x faster; 0.93×", ["1.3–1.6×", "12x faster", "0.93×"]),
    ("4,370 GB/s at 2^28", ["4,370 GB/s"]),
    ("12% faster on zeros, at 101% of copy; 6 to 7 times faster",
     ["12% faster", "101% of copy", "6 to 7 times faster"]),
])
def test_the_pattern_finds_typed_figures(text, figures):
    assert [m.group(0) for m in FIGURE.finditer(text)] == figures


@pytest.mark.parametrize("text", [
    "an 8192 × 8192 matrix", "a 4096x4096 tile", "BLOCK_M x BLOCK_N", "the H100's 132 SMs",
    "a 256 MB buffer", "lesson 02 counted 3·MN", "x2 = x * 2", "2^28 elements", "items/s",
    "B is read M times", "5% of the elements", "a 0.5 probability",
])
def test_the_pattern_leaves_other_numbers_alone(text):
    assert not FIGURE.search(text)


# A recorded group reaches the learner as a plot through helpers.bench: compare(), timed() or show().
_SHOWN = re.compile(r"\b(?:compare|show)\(\s*\"(\w+)\"|\btimed\(\s*\w+,\s*\"(\w+)\"")
_READ = re.compile(r"\brecorded_rows\(\s*\"(\w+)\"")


def test_every_recorded_group_a_lesson_reads_is_also_shown_as_a_plot():
    """A lesson that reads a group's rows to discuss them (recorded_rows("group")) shows that group as a
    plot somewhere in the course, so that the learner sees the comparison, not only figures picked from it."""
    sources = {path.name: path.read_text() for path in LESSONS}
    shown = {a or b for text in sources.values() for a, b in _SHOWN.findall(text)}
    read = {(name, group) for name, text in sources.items() for group in _READ.findall(text)}
    assert shown and read
    missing = sorted((name, group) for name, group in read if group not in shown)
    assert not missing, f"read with recorded_rows but never shown by compare, timed or show: {missing}"


# The cards (helpers/cards/NN_slug.toml: self-check and flashcards) are prose a learner reads too.
CARDS = NOTEBOOKS.parent / "helpers" / "cards"
CARD_ALLOWED = [  # (card file, text covering the figures, why it is not a measurement)
    ("03_arithmetic_intensity.toml", "on an H100 (989 TFLOP/s fp16, 3.35 TB/s)", "datasheet values"),
    ("03_arithmetic_intensity.toml", "1365 · 3.35 ≈ 4,600 TFLOP/s", "arithmetic on the datasheet values"),
    ("03_arithmetic_intensity.toml", "units (989 TFLOP/s fp16) and faster memory (4.8 against 3.35 TB/s)",
     "datasheet values"),
    ("03_arithmetic_intensity.toml", "runs up to 1.43x faster", "the ratio of the datasheet bandwidths"),
    ("03_arithmetic_intensity.toml", "Your kernel reports 6 TB/s on an H100 whose memory does 3.35 TB/s",
     "a made-up reading set against the datasheet"),
    ("03_arithmetic_intensity.toml", "H100 SXM: 3.35 TB/s, 989 TFLOP/s. H200: 4.8 TB/s, 989 TFLOP/s. "
     "A100 SXM 80GB: 2.0 TB/s, 312 TFLOP/s", "datasheet values"),
    ("03_arithmetic_intensity.toml", "warms up (25 ms by default)", "do_bench's default"),
    ("08_profiling.toml", "a 2 ms cuBLAS matmul", "a made-up trace in a question"),
]


def card_texts(path):
    """Every question, answer, front and back of a card file."""
    import tomllib

    cards = tomllib.loads(path.read_text())
    return [card[key] for kind in cards.values() for card in kind for key in card]


@pytest.mark.parametrize("path", sorted(CARDS.glob("[0-9][0-9]_*.toml")), ids=lambda p: p.name)
def test_no_measured_figure_typed_in_cards(path):
    allowed = [text for name, text, _ in CARD_ALLOWED if name == path.name]
    found = []
    for text in card_texts(path):
        covered = [(m.start(), m.end()) for a in allowed for m in re.finditer(re.escape(a), text)]
        found += [m.group(0) for m in FIGURE.finditer(text)
                  if not any(lo <= m.start() and m.end() <= hi for lo, hi in covered)]
    assert not found, (f"{path.name}: measured figures typed into a card, where they drift from the data: "
                       f"{found}. Have the card point to the lesson's printed figure instead, or, for a "
                       f"figure that is not a measurement, add it to CARD_ALLOWED with the reason.")


def test_card_allowed_entries_are_still_used():
    for name, text, why in CARD_ALLOWED:
        assert any(text in t for t in card_texts(CARDS / name)), (
            f"CARD_ALLOWED lists {text!r} for {name} ({why}), but no card holds it any more: remove it")
