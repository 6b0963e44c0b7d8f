"""The lesson notebooks: in sync with their .py, clean, passing when solved, running to the end as shipped."""

import json
import os
import re

import jupytext
import nbformat
import pytest
import triton

from helpers import exercises
from helpers.grade import read_events, run_notebooks, summarize, summary_lines, table
from helpers.notebooks import NOTEBOOKS, defined_names, is_exercise, lesson_notebooks, solved_copy
from helpers.solutions import load_solution

ALL = lesson_notebooks() + sorted(NOTEBOOKS.glob("[a-z]*.ipynb"))
LESSONS = lesson_notebooks()


def _cells(nb):
    return [(c.cell_type, c.source.strip(), sorted(c.get("metadata", {}).get("tags", []))) for c in nb.cells]


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_ipynb_matches_its_py(path):
    paired = path.with_suffix(".py")
    assert paired.exists(), f"{path.name} has no paired .py"
    assert _cells(jupytext.read(paired)) == _cells(jupytext.read(path)), \
        f"{path.name} and {paired.name} differ: edit the .py, then run `make sync`"


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_notebook_is_small_and_clean(path):
    assert path.stat().st_size < 400_000, "outputs or images embedded?"
    nb = json.loads(path.read_text())
    assert set(nb["metadata"]) <= {"kernelspec", "jupytext", "language_info"}
    assert nb["metadata"].get("kernelspec", {}).get("name", "python3") == "python3"
    for cell in nb["cells"]:
        assert "data:image" not in "".join(cell["source"]), "put images in notebooks/figures/, not base64"


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_exercise_cells_match_solutions_and_specs(path):
    lesson = path.name[:2]
    module = load_solution(lesson)
    nb = nbformat.read(path, as_version=4)
    stubs = [c for c in nb.cells if is_exercise(c)]
    for cell in stubs:
        missing = [n for n in defined_names(cell.source) if not hasattr(module, n)]
        assert not missing, f"solutions/{lesson}_*.py lacks {missing}"
    checked = {line.split('"')[1] for c in nb.cells if c.cell_type == "code"
               for line in c.source.splitlines() if line.startswith('check("')}
    specs = {ex.name for ex in exercises.by_lesson().get(lesson, [])}
    assert checked == specs, f"check() calls {sorted(checked)} vs exercise specs {sorted(specs)}"


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_each_exercise_cell_is_followed_by_its_check(path):
    cells = nbformat.read(path, as_version=4).cells
    for i, cell in enumerate(cells):
        if is_exercise(cell):
            after = cells[i + 1] if i + 1 < len(cells) else None
            first = after.source.strip().splitlines()[0] if after is not None and after.source.strip() else ""
            assert after is not None and after.cell_type == "code" and first.startswith('check("'), \
                f"the exercise cell defining {defined_names(cell.source)} is followed by " \
                f"{'nothing' if after is None else after.cell_type + ' ' + repr(first[:60])}, not its check()"


def test_every_lesson_with_exercises_has_a_notebook():
    have = {p.name[:2] for p in LESSONS}
    assert set(exercises.by_lesson()) <= have


# The Triton this run tests: `make test-oldest-triton` sets COURSE_EXPECT_TRITON=3.6.0 and puts that
# Triton first on PYTHONPATH, which the notebooks' kernels (subprocesses of nbval) inherit.
EXPECTED_TRITON = os.environ.get("COURSE_EXPECT_TRITON") or triton.__version__


def test_tests_and_notebook_kernels_import_the_expected_triton(tmp_path):
    assert triton.__version__ == EXPECTED_TRITON, f"the tests imported triton {triton.__version__}"
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(
        f"import triton\nprint('triton', triton.__version__, triton.__file__)\n"
        f"assert triton.__version__ == {EXPECTED_TRITON!r}, triton.__version__")]
    nbformat.write(nb, tmp_path / "versions.ipynb")
    events = tmp_path / "cells.jsonl"
    code = run_notebooks([tmp_path / "versions.ipynb"], tmp_path / "results.jsonl", log=tmp_path / "log",
                         events=events)
    said = [ev.get("stdout", "") + ev.get("evalue", "") for ev in read_events(events)]
    assert code == 0, f"the notebook kernel did not import triton {EXPECTED_TRITON}: {said}"


def _end_of(log, lines=40):
    """The last lines of nbval's log, for a failure's message."""
    return "\n".join(log.read_text().splitlines()[-lines:]) if log.exists() else ""


@pytest.mark.notebooks
def test_solved_notebooks_pass(tmp_path):
    solved = [solved_copy(p, tmp_path / "solved") for p in LESSONS]
    results, events_file, log = tmp_path / "results.jsonl", tmp_path / "cells.jsonl", tmp_path / "nbval.log"
    code = run_notebooks(solved, results, ["-n", "2", "--dist", "loadfile"], log=log, events=events_file)
    rows = table(results, {p.name[:2] for p in LESSONS})
    events = read_events(events_file)
    not_passing = [r for r in rows if r[3] != "pass"]
    cells = "\n".join(summary_lines(summarize(events, rows)))
    tail = _end_of(log)
    assert code == 0 and not not_passing, \
        f"nbval exit {code}; exercises not passing: {not_passing}{cells}\n--- end of {log}:\n{tail}"
    waiting = [(ev["path"].rsplit("/", 1)[-1], ev["cell"]) for ev in events if NEEDS in ev.get("stdout", "")]
    assert not waiting, f"solved, these cells still wait for an exercise: {waiting}"
    # each lesson prints describe() ("CPU: ... | torch ... | triton X") first: its kernel's own Triton
    describe = re.compile(r"^(?:CPU|GPU): .* \| triton (\S+)$", re.M)
    printed = {m.group(1) for ev in events for m in describe.finditer(ev.get("stdout", ""))}
    assert printed == {EXPECTED_TRITON}, \
        f"the notebooks' kernels imported triton {printed}, not {EXPECTED_TRITON}"


NEEDS = "· needs exercise "  # what passed() prints for an exercise not passed yet


@pytest.mark.notebooks
def test_shipped_notebooks_run_to_the_end_with_every_exercise_not_done(tmp_path):
    """As a learner's Run All on an untouched lesson: no cell raises, each check says "not done"."""
    results, events_file, log = tmp_path / "results.jsonl", tmp_path / "cells.jsonl", tmp_path / "nbval.log"
    code = run_notebooks(LESSONS, results, ["-n", "2", "--dist", "loadfile"], log=log, events=events_file)
    rows = table(results, {p.name[:2] for p in LESSONS})
    events = read_events(events_file)
    wrong = [(r[1], r[3]) for r in rows if r[3] != "not done"]
    failed = [(ev["path"].rsplit("/", 1)[-1], ev.get("source", "").strip().splitlines()[:1], ev.get("ename"),
               ev.get("evalue", "")[:200]) for ev in events if ev.get("outcome") != "passed"]
    tail = _end_of(log)
    assert rows and not wrong, (f"as shipped, these exercises were not recorded as not done: {wrong}; "
                                f"nbval exit {code}; cells that failed: {failed}\n--- end of {log}:\n{tail}")
    assert code == 0 and not failed, f"nbval exit {code}; cells that failed: {failed}"
    assert sum(NEEDS in ev.get("stdout", "") for ev in events) >= len(LESSONS) - 3, \
        "cells that need an unfinished exercise should say so"
