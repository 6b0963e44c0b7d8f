"""`make grade`'s report: the table, one line per failing cell that matters, cascades counted.

The notebooks here are small fixtures written into tmp_path: they start a Jupyter
kernel (a few seconds) but run no Triton kernel, and their `check` is a stand-in
that records a result the way helpers.check does inside Jupyter: an unfinished
exercise is recorded as not done, and the notebook goes on.
"""

import hashlib
import time

import nbformat
import pytest

from helpers import exercises, grade

LESSON = "01"
EX1, EX2 = [ex.name for ex in exercises.by_lesson()[LESSON]][:2]

FAKE_CHECK = '''\
from helpers import records

def check(name, fn):
    try:
        fn(1)
    except NotImplementedError as e:
        records.append("01", name, "not done", f"{e}\\nsecond line of the message")
        print(f"{name}: not done yet")
        return
    if fn(1) != 1:
        records.append("01", name, "fail", "wrong value")
        raise AssertionError(f"{name}: wrong value")
    records.append("01", name, "pass", "1 case")'''


def _notebook(path, cells):
    """Write a notebook of code cells; a cell is source, or (tags, source)."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    for cell in cells:
        tags, source = cell if isinstance(cell, tuple) else ([], cell)
        nb.cells.append(nbformat.v4.new_code_cell(source, metadata={"tags": tags} if tags else {}))
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


LESSON_CELLS = [
    FAKE_CHECK,                                                                     # 0
    (["exercise"], f'def {EX1}(x):\n    raise NotImplementedError("write {EX1}")'),  # 1
    f'check("{EX1}", {EX1})',                                                       # 2: not done
    f"y = {EX1}(2)  # a cell of the learner's own, without passed()",              # 3: cascade
    "print(y + 1)",                                                                 # 4: cascade (NameError)
    "# a worked example, edited by the learner\nz = [1, 2][5]",                     # 5: its own failure
    "print(z)",                                                                     # 6: uses cell 5's result
    (["exercise"], f"def {EX2}(x):\n    return x"),                                 # 7
    f'check("{EX2}", {EX2})',                                                       # 8: pass
    'print("the end")',                                                             # 9
]


def test_grade_prints_a_table_a_line_per_real_failure_and_counts_the_cascade(tmp_path, capsys):
    folder = tmp_path / "notebooks"
    nb = _notebook(folder / "01_fixture.ipynb", LESSON_CELLS)
    _notebook(folder / "02_fixture.ipynb", ["print('lesson two')"])
    before = {p.name: (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
              for p in folder.iterdir()}
    log = tmp_path / "build" / "grade.log"

    code = grade.main(["--notebooks", str(folder), "--log", str(log), "--workers", "2"])
    out = capsys.readouterr().out

    assert code == 1  # a cell failed for a reason of its own
    assert "FAILED" not in out and "Traceback" not in out and "Error" not in out.replace("IndexError", "")
    lines = [line.strip() for line in out.splitlines()]
    row = next(line for line in lines if line.startswith(f"01     {EX1} "))
    assert "not done" in row and row.endswith(f"write {EX1}")  # the first line only
    assert "✓ pass" in next(line for line in lines if line.startswith(f"01     {EX2} "))
    assert "lesson 01, cell `z = [1, 2][5]`: IndexError: list index out of range " \
           "(and 1 later cell that uses its result)" in lines
    assert f"lesson 01: 2 later cells failed because they use the result of an unfinished exercise " \
           f"({EX1})." in lines
    assert sum("lesson 01" in line for line in lines) == 2, out
    assert "01_fixture" in out and "02_fixture" in out  # progress, one line per notebook
    assert lines[-1] == ("Summary: 1 of 4 exercises pass, 1 not done, 2 not run, 1 other cell failed: "
                         f"fix the failures listed above. Full log, with every traceback: {log}")
    full = log.read_text()
    assert "FAILED" in full and "IndexError" in full and "\x1b[" not in full
    # the log names cells as the learner sees them, not by nbval's numbering
    assert "::Cell" not in full and "\nCell " not in full
    assert "01_fixture.ipynb, cell `z = [1, 2][5]`" in full
    # grading read the notebooks and wrote nothing beside them
    after = {p.name: (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
             for p in folder.iterdir()}
    assert after == before
    assert nb.exists()


def test_a_timeout_and_a_dead_kernel_are_reported_with_the_cells_they_took_down(tmp_path):
    nb = _notebook(tmp_path / "01_stops.ipynb", [
        "import time",
        "time.sleep(60)\nu = 1",         # 1: times out (the limit is 3 s here)
        "print(u)",                      # 2: uses its result
        "x = 1",
        "import os\nos._exit(3)",        # 4: the kernel dies
        "print(x)",                      # 5, 6: cannot run
        f'check("{EX1}", print)',
    ])
    results, events = tmp_path / "results.jsonl", tmp_path / "cells.jsonl"
    started = time.monotonic()
    code = grade.run_notebooks([nb], results, ["--nbval-cell-timeout=3"], log=tmp_path / "log", events=events)
    assert time.monotonic() - started < 60, "waited for a dead kernel until the cell timeout"
    summary = grade.summarize(grade.read_events(events), grade.table(results, {LESSON}))
    assert code == 1
    assert summary["other"] == [
        (LESSON, 1, "cell `time.sleep(60)`", "Timeout of 3 seconds exceeded executing cell", 1, False),
        (LESSON, 4, "cell `import os`", "the Python kernel died in this cell (exit status 3)", 2, True)]
    assert summary["why"][EX1] == "not reached: the kernel died in cell `import os`"
    assert not summary["cascade"]


# ---------------------------------------------------------------- summarize() on made-up events


def _ev(cell, source, outcome="passed", tags=(), **error):
    return {"path": "/x/01_made_up.ipynb", "cell": cell, "source": source, "tags": list(tags),
            "when": "call", "outcome": outcome, **error}


def _rows(**status):
    return [(LESSON, name, "", status.get(name, "not run"), "") for name in (EX1, EX2)]


def test_a_typo_in_an_exercise_cell_is_reported_and_its_check_says_it_did_not_run():
    events = [
        _ev(0, f"def {EX1}(x)\n    return x", "failed", tags=["exercise"],
            ename="SyntaxError", evalue="expected ':' (<cell>, line 1)"),
        _ev(1, f'check("{EX1}", {EX1})', "failed", ename="NameError", evalue=f"name '{EX1}' is not defined"),
        _ev(2, f"print({EX1}(3))", "failed", ename="NameError", evalue=f"name '{EX1}' is not defined"),
    ]
    summary = grade.summarize(events, _rows())
    assert summary["other"] == [(LESSON, 0, f"the exercise cell of {EX1}",
                                 "SyntaxError: expected ':' (<cell>, line 1)", 0, False)]
    assert summary["why"][EX1] == (f"its check cell failed before grading: "
                                  f"NameError: name '{EX1}' is not defined")
    assert summary["cascade"] == {LESSON: ([EX1], 2)}


def test_a_failure_that_uses_no_unfinished_result_is_listed_not_counted():
    events = [
        _ev(0, f"def {EX1}(x):\n    pass", tags=["exercise"]),
        _ev(1, f'check("{EX1}", {EX1})', "failed", ename="CheckFailed", evalue="wrong"),
        _ev(2, "%%time\nw = undefined_thing + 1", "failed", ename="NameError",
            evalue="name 'undefined_thing' is not defined"),
        _ev(3, f"print({EX1}(1), w)", "failed", ename="NameError", evalue="name 'w' is not defined"),
        _ev(4, "import torch\ntorch.ones(2)[5]", "skipped", xfail=True, ename="IndexError", evalue="index 5"),
    ]
    summary = grade.summarize(events, _rows(**{EX1: "fail"}))
    assert [o[1:4] for o in summary["other"]] == [
        (2, "cell `%%time`", "NameError: name 'undefined_thing' is not defined"),
        (4, "cell `import torch`", "IndexError: index 5")]
    assert summary["cascade"] == {LESSON: ([EX1], 1)}  # cell 3 reads both; the exercise is named
    assert summary["why"] == {}


def test_the_table_shortens_each_reason_to_one_line(capsys):
    rows = [(LESSON, EX1, "", "fail", "x" * 500), (LESSON, EX2, "", "pass", "3 cases")]
    grade.print_table(rows, {}, width=100)
    lines = capsys.readouterr().out.splitlines()
    row = next(line for line in lines if EX1 in line)
    assert len(row) <= 100 and row.endswith("x…")
    assert next(line for line in lines if EX2 in line).rstrip().endswith("✓ pass")


@pytest.mark.parametrize("source, names", [
    ("y = f(x)\nprint(y)", {"y", "f", "x", "print"}),
    ("%timeit f(x)  # not g", {"timeit", "f", "x"}),
])
def test_names_used(source, names):
    assert grade.names_used(source) == names


def test_a_notebook_nbval_cannot_read_is_named_once_and_its_exercises_say_why():
    message = "nbformat/reader.py:19: in parse_json\n    raise NotJSONError\nE   NotJSONError: not JSON"
    events = [{"nodeid": "x/01_broken.ipynb", "when": "collect", "outcome": "failed", "message": message}] * 2
    summary = grade.summarize(events, _rows())
    assert summary["broken"] == [("01_broken.ipynb", "NotJSONError: not JSON")]
    assert summary["why"] == {EX1: "its notebook could not be read", EX2: "its notebook could not be read"}
    lines = grade.summary_lines(summary)
    assert "  01_broken.ipynb: nbval could not read it: NotJSONError: not JSON" in lines


def test_unfinished_exercises_alone_exit_0_with_a_one_line_summary(tmp_path, capsys):
    folder = tmp_path / "notebooks"
    _notebook(folder / "01_untouched.ipynb", [
        FAKE_CHECK,
        (["exercise"], f'def {EX1}(x):\n    raise NotImplementedError("write {EX1}")'),
        f'check("{EX1}", {EX1})',
        f'if "{EX1}" == "done":  # a cell that needs the answer, guarded as the lessons guard it\n'
        f'    print({EX1}(2))',
        (["exercise"], f"def {EX2}(x):\n    return x"),
        f'check("{EX2}", {EX2})',
    ])
    code = grade.main(["--notebooks", str(folder), "--log", str(tmp_path / "grade.log")])
    lines = capsys.readouterr().out.strip().splitlines()
    assert code == 0
    assert lines[-1].startswith("Summary: 1 of 2 exercises pass, 1 not done; nothing is broken.")
    assert not any("Failures" in line for line in lines)


def test_each_notebook_reports_its_own_time(capsys):
    on_event = grade._progress({"/x/01_a.ipynb": 1, "/x/02_b.ipynb": 1})
    for path, when, seconds in [("/x/01_a.ipynb", "setup", 5.0), ("/x/02_b.ipynb", "setup", 4.0),
                                ("/x/01_a.ipynb", "call", 20.0), ("/x/02_b.ipynb", "call", 3.0)]:
        on_event({"path": path, "cell": 0, "when": when, "outcome": "passed", "duration": seconds})
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in out] == ["01_a", "02_b"]
    assert out[0].endswith(" 25 s") and out[1].endswith("  7 s")


def test_the_log_names_cells_as_the_learner_finds_them(tmp_path):
    nb = _notebook(tmp_path / "01_x.ipynb", [
        "import math",
        (["exercise"], f"# write it\ndef {EX1}(x):\n    return x"),
        f'check("{EX1}", {EX1})',
        "\n# a comment first\nz = [1][3]",
    ])
    text = (f"FAILED {nb.name}::Cell 3 - nbval...\n____ {nb.name}::Cell 1 ____\n"
            f"Notebook cell execution failed\nCell 1: Cell execution caused an exception\n")
    assert grade.relabel_log(text, [nb]).splitlines() == [
        f"FAILED {nb.name}, cell `z = [1][3]` - nbval...",
        f"____ {nb.name}, the exercise cell of {EX1} ____",
        "Notebook cell execution failed",
        f"the exercise cell of {EX1}: Cell execution caused an exception"]
