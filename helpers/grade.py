"""`make grade`: re-run the lesson notebooks under nbval and print a table of exercises.

    python -m helpers.grade                 # every lesson
    python -m helpers.grade --lesson 02     # one lesson

Each notebook is executed from top to bottom in a fresh kernel by nbval, which
reads the notebook and never writes it: your work is not touched. Every
`check()` appends its result to a results file made for this run; the table at
the end lists each exercise as pass, fail, not done or not run. The exit status
is non-zero while any exercise is not passing.
"""

import argparse
import os
import pathlib
import subprocess
import sys
import tempfile

from helpers import exercises, records
from helpers.notebooks import NOTEBOOKS, lesson_notebooks

CELL_TIMEOUT_S = 300


def run_notebooks(paths, results_file, extra_args=()):
    """Execute notebooks under nbval (pytest), results of check() going to `results_file`."""
    env = dict(os.environ, COURSE_RESULTS=str(results_file), PYTHONDONTWRITEBYTECODE="1")
    cmd = [sys.executable, "-m", "pytest", "--nbval-lax", f"--nbval-cell-timeout={CELL_TIMEOUT_S}",
           "--nbval-kernel-name=python3", "-p", "no:cacheprovider", "-q", "--no-header",
           "-o", "addopts=", *extra_args, *map(str, paths)]
    return subprocess.run(cmd, env=env).returncode


def table(results_file, lessons=None):
    """[(lesson, exercise, title, status, message)] for every exercise of the given lessons."""
    found = records.latest(results_file)
    rows = []
    for lesson, exs in exercises.by_lesson().items():
        if lessons and lesson not in lessons:
            continue
        for ex in exs:
            rec = found.get(ex.name)
            status = rec["status"] if rec else "not run"
            rows.append((lesson, ex.name, ex.title, status, rec["message"] if rec else ""))
    return rows


def print_table(rows):
    marks = {"pass": "✓ pass", "fail": "✗ fail", "not done": "· not done", "not run": "? not run"}
    width = max([len(r[1]) for r in rows] + [8])
    print(f"\n{'lesson':<7}{'exercise':<{width + 2}}{'result':<12}note")
    for lesson, name, _title, status, message in rows:
        note = message if status == "fail" else ""
        print(f"{lesson:<7}{name:<{width + 2}}{marks.get(status, status):<12}{note[:90]}")
    passed = sum(r[3] == "pass" for r in rows)
    print(f"\n{passed} of {len(rows)} exercises pass.")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lesson", help="only this lesson, e.g. 02")
    parser.add_argument("--notebooks", default=str(NOTEBOOKS), help="folder of the notebooks to grade")
    parser.add_argument("--workers", default="1", help="pytest-xdist workers ('auto' for one per core)")
    args = parser.parse_args(argv)
    lesson = args.lesson.zfill(2) if args.lesson else None
    paths = lesson_notebooks(lesson, args.notebooks)
    if not paths:
        print(f"no notebooks found for lesson {lesson or '*'} in {args.notebooks}")
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        results_file = pathlib.Path(tmp) / "results.jsonl"
        extra = ["-n", args.workers, "--dist", "loadfile"] if args.workers != "1" else []
        run_notebooks(paths, results_file, extra)
        rows = table(results_file, {p.name[:2] for p in paths})
        # keep the latest grading for `make progress`
        for lesson_, name, _t, status, message in rows:
            if status != "not run":
                records.append(lesson_, name, status, message)
    print_table(rows)
    return 0 if rows and all(r[3] == "pass" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
