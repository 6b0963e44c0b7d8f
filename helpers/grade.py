"""`make grade`: re-run the lesson notebooks under nbval and print a table of exercises.

    python -m helpers.grade                 # every lesson
    python -m helpers.grade --lesson 02     # one lesson

Each notebook is executed from top to bottom in a fresh kernel by nbval, which
reads the notebook and never writes it: your work is not touched. Every
`check()` appends its result to a results file made for this run; the table at
the end lists each exercise as pass, fail, not done or not run, with the reason
it is not passing, and a last line sums it up. Cells that fail only because
they use the result of an unfinished exercise are counted, not listed; any
other failing cell gets one line. nbval's full output, tracebacks included,
goes to build/grade.log, with each cell named as you would find it (its
exercise, or its first line).
The exit status is 0 when every exercise passes or is simply not done yet, and
1 when an answer fails its check or a cell fails for another reason.

This module is also the pytest plugin (`-p helpers.grade`) that records, for
each notebook cell nbval runs, its outcome and the exception it raised.
"""

import argparse
import ast
import collections
import json
import os
import pathlib
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

from helpers import exercises, records
from helpers.notebooks import NOTEBOOKS, ROOT, defined_names, learner_notebooks

CELL_TIMEOUT_S = 300
LOG = ROOT / "build" / "grade.log"
EVENTS_ENV = "COURSE_GRADE_EVENTS"  # set by run_notebooks: where the plugin writes one JSON line per cell

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# A frame of an IPython traceback: "Cell In[3], line 5, in fused_chain(x)" or "File /p/x.py:12, in f(a)"
_FRAME = re.compile(r"^(?:Cell In\[\d+\], line \d+|File .+?:\d+), in (\w+)", re.M)
_CHECK_CALL = re.compile(r"""\bcheck\(\s*["'](\w+)["']""")


def strip_ansi(text):
    return _ANSI.sub("", text or "")


# ---------------------------------------------------------------- the pytest plugin (inside nbval's run)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Attach what the cell raised to the report (in the process that ran the cell: an xdist worker)."""
    report = yield
    cell = getattr(item, "cell", None)  # nbval's IPyNbCell; other items are left alone
    if os.environ.get(EVENTS_ENV) and cell is not None and (report.when == "call" or not report.passed):
        info = {"path": os.path.abspath(item.path), "cell": getattr(item, "cell_num", -1),
                "source": cell.source, "tags": list(cell.get("metadata", {}).get("tags", []))}
        outputs = getattr(item, "test_outputs", None) or []
        error = next((o for o in outputs if o.get("output_type") == "error"), None)
        if error is not None:
            tb = strip_ansi("\n".join(error.get("traceback", [])))
            info.update(ename=error.get("ename", ""), evalue=strip_ansi(error.get("evalue", ""))[:2000],
                        frames=_FRAME.findall(tb))
        if call.excinfo is not None:
            info.update(raised=call.excinfo.typename, message=str(call.excinfo.value)[:2000])
        stdout = "".join(o.get("text", "") for o in outputs
                         if o.get("output_type") == "stream" and o.get("name") == "stdout")
        info["stdout"] = strip_ansi(stdout)[:2000]
        report.user_properties = [*report.user_properties, ("course_cell", info)]  # not item's own list
    return report


class KernelDied(RuntimeError):
    """The notebook's Python kernel exited while a cell ran (a crash, or killed for memory)."""


def _watch_for_dead_kernels():
    """Make nbval notice a dead kernel within a second, instead of waiting out the cell timeout.

    nbval waits for a cell's reply for up to --nbval-cell-timeout seconds even when the
    kernel process has exited; this wraps its wait so it looks every second.
    """
    try:
        from nbval.kernel import RunningKernel
    except ImportError:
        return
    original = RunningKernel.await_reply
    if getattr(original, "_course_watch", False):
        return

    def await_reply(self, msg_id, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = 1.0 if deadline is None else min(1.0, max(deadline - time.monotonic(), 0.01))
            try:
                return original(self, msg_id, timeout=left)
            except queue.Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    raise
                if not self.is_alive():
                    raise KernelDied(f"the Python kernel died in this cell ({_ended(self)})") from None

    await_reply._course_watch = True
    RunningKernel.await_reply = await_reply


def _ended(kernel):
    """How a dead kernel's process ended, as far as jupyter_client can tell."""
    provisioner = getattr(getattr(kernel, "km", None), "provisioner", None)
    process = getattr(provisioner, "process", None)
    code = process.poll() if process is not None else None
    if code is None or code == 0:
        return "it exited"
    if code < 0:
        return f"killed by signal {-code}" + (", perhaps for lack of memory" if code == -9 else "")
    return f"exit status {code}"


_worker = False  # set by pytest_configure: True in an xdist worker


def pytest_configure(config):
    global _worker
    _worker = hasattr(config, "workerinput")
    if os.environ.get(EVENTS_ENV):
        _watch_for_dead_kernels()


def _write_event(event):
    if _worker:  # a worker's reports reach the controller (pytest-xdist), which writes them
        return
    path = os.environ.get(EVENTS_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(event) + "\n")


def pytest_runtest_logreport(report):
    infos = [info for key, info in report.user_properties if key == "course_cell"]
    if infos:
        _write_event(dict(infos[-1], nodeid=report.nodeid, when=report.when, outcome=report.outcome,
                          xfail=hasattr(report, "wasxfail"), duration=report.duration))


def pytest_collectreport(report):
    if report.failed:
        _write_event({"nodeid": report.nodeid, "when": "collect", "outcome": "failed",
                      "message": strip_ansi(str(report.longrepr))[-2000:]})


# ---------------------------------------------------------------- running nbval


def read_events(path):
    """The plugin's JSON lines, in the order they were written; a damaged line is skipped."""
    events = []
    p = pathlib.Path(path)
    if p.exists():
        for line in p.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                events.append(json.loads(line))
            except ValueError:
                continue
    return events


def run_notebooks(paths, results_file, extra_args=(), log=None, events=None, on_event=None):
    """Execute notebooks under nbval (pytest), results of check() going to `results_file`.

    With `log`, pytest's output (ANSI colours removed, cells named by relabel_log) goes
    to that file instead of the terminal. With `events`, each cell's outcome is written there as a JSON line,
    and `on_event(event)` is called for each while the run goes on. Returns pytest's
    exit status.
    """
    env = dict(os.environ, COURSE_RESULTS=str(results_file), PYTHONDONTWRITEBYTECODE="1")
    for name in [n for n in env if n.startswith(("PYTEST_XDIST_", "PYTEST_CURRENT_TEST"))]:
        del env[name]  # when called from a test running under xdist: nbval's pytest is a run of its own
    plugin = []
    if events is not None:
        pathlib.Path(events).write_text("")
        env[EVENTS_ENV] = str(events)
        plugin = ["-p", "helpers.grade"]
    # A kernel that does not answer within nbval's startup timeout is shut down, and with jupyter_client
    # 8.10 that shutdown can block for good (seen on a busy 2-core machine): give it time to start.
    cmd = [sys.executable, "-m", "pytest", "--nbval-lax", f"--nbval-cell-timeout={CELL_TIMEOUT_S}",
           f"--nbval-kernel-startup-timeout={CELL_TIMEOUT_S}", "--nbval-kernel-name=python3",
           "--continue-on-collection-errors", "-p", "no:cacheprovider", *plugin, "-q", "--no-header",
           "-o", "addopts=", *extra_args, *map(str, paths)]
    out = proc = None
    if log is not None:
        log = pathlib.Path(log)
        log.parent.mkdir(parents=True, exist_ok=True)
        out = open(log, "w", encoding="utf-8")
        cmd.insert(cmd.index("-q"), "--color=no")
    try:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT if out else None)
        seen = 0
        while True:
            done = proc.poll() is not None
            if events is not None and on_event is not None:
                new = read_events(events)
                for event in new[seen:]:
                    on_event(event)
                seen = len(new)
            if done:
                break
            time.sleep(0.5)
    finally:
        if proc is not None and proc.poll() is None:  # interrupted (Ctrl-C): stop nbval and its kernels
            proc.terminate()
            proc.wait()
        if out is not None:
            out.close()
    if log is not None:
        text = strip_ansi(log.read_text(encoding="utf-8", errors="replace"))
        log.write_text(relabel_log(text, paths), encoding="utf-8")
    return proc.returncode


# ---------------------------------------------------------------- the table


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


def shorten(text, width):
    """The first line of `text`, cut to `width` characters with an ellipsis."""
    line = " ".join(strip_ansi(text).strip().splitlines()[:1]).strip()
    return line if len(line) <= width else line[:max(width - 1, 0)].rstrip() + "…"


def print_table(rows, why=None, width=None):
    """The per-exercise table; `why` ({exercise: reason}) fills the note of exercises not passing."""
    why = why or {}
    width = width or shutil.get_terminal_size((120, 24)).columns
    marks = {"pass": "✓ pass", "fail": "✗ fail", "not done": "· not done", "not run": "? not run"}
    name_w = max([len(r[1]) for r in rows] + [8])
    note_w = max(width - 7 - (name_w + 2) - 12, 40)
    print(f"\n{'lesson':<7}{'exercise':<{name_w + 2}}{'result':<12}why not passing")
    for lesson, name, _title, status, message in rows:
        note = why.get(name) or message or ("its check() did not run" if status == "not run" else "")
        note = "" if status == "pass" else shorten(note, note_w)
        print(f"{lesson:<7}{name:<{name_w + 2}}{marks.get(status, status):<12}{note}".rstrip())


# ---------------------------------------------------------------- which failures are a cascade


def names_used(source):
    """Identifiers a cell reads (an over-estimate where the cell is not plain Python)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # IPython magics or a learner's typo: fall back to every identifier
        return set(re.findall(r"[A-Za-z_]\w*", re.sub(r"#.*", "", source)))
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}


def names_assigned(source):
    """Names a cell binds at top level (functions, classes, assignments, loop and with targets)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # a typo: the names its top-level lines would have bound
        bound = re.findall(r"^(?:async\s+)?(?:def|class)\s+(\w+)|^(\w+)\s*=[^=]", source, re.M)
        return {a or b for a, b in bound}
    found = set(defined_names(source))
    for node in tree.body:
        targets = []
        if isinstance(node, (ast.For, ast.AsyncFor)):
            targets = [node.target]
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            targets = [i.optional_vars for i in node.items if i.optional_vars is not None]
        elif isinstance(node, ast.AugAssign):
            targets = [node.target]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            found |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.Assign):
            targets = node.targets
        for t in targets:
            found |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
    return found


def first_line(source):
    lines = [ln.strip() for ln in source.splitlines() if ln.strip()]
    code = [ln for ln in lines if not ln.startswith("#")]
    return (code or lines or [""])[0]


def cell_labels(sources, tags):
    """How a learner finds each code cell: 'the exercise cell of NAME', or its first line in backquotes."""
    labels = []
    for i, (source, cell_tags) in enumerate(zip(sources, tags)):
        graded = next((m.group(1) for s in sources[i + 1:] if (m := _CHECK_CALL.search(s))), None)
        if "exercise" in cell_tags and graded:
            labels.append(f"the exercise cell of {graded}")
        else:
            labels.append(f"cell `{shorten(first_line(source), 60)}`")
    return labels


def notebook_cell_labels(path):
    """cell_labels() of a notebook's code cells, in nbval's order; [] if it cannot be read."""
    import nbformat

    try:
        cells = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    except Exception:  # noqa: BLE001  (a damaged notebook: nbval reports it)
        return []
    return cell_labels([c.source for c in cells], [c.get("metadata", {}).get("tags", []) for c in cells])


_NODE = re.compile(r"(\S*?([^\s/]+\.ipynb))::Cell (\d+)")
_CELL_LINE = re.compile(r"^Cell (\d+): ", re.M)
_IN_CELL = re.compile(r"^Cell In\[\d+\], ")  # IPython's frame of a cell: its In[] count is 1 under nbval


def relabel_log(text, paths):
    """nbval's log with "x.ipynb::Cell 12" and "Cell 12:" replaced by the cell's label, and IPython's
    "Cell In[1], line 2" (the same count for every cell) by "a notebook cell, line 2"."""
    labels = {pathlib.Path(p).name: notebook_cell_labels(p) for p in paths}

    def label(name, num):
        found = labels.get(name, [])
        return found[int(num)] if int(num) < len(found) else f"code cell {int(num) + 1}"

    out, current = [], None
    for line in text.splitlines():
        nodes = list(_NODE.finditer(line))
        if nodes:
            current = nodes[-1].group(2)
            line = _NODE.sub(lambda m: f"{m.group(1)}, {label(m.group(2), m.group(3))}", line)
        elif current and _CELL_LINE.match(line):
            line = _CELL_LINE.sub(lambda m: f"{label(current, m.group(1))}: ", line)
        line = _IN_CELL.sub("a notebook cell, ", line)
        out.append(line)
    return "\n".join(out) + "\n"


def _cells_by_notebook(events):
    """{notebook path: [the event that decides each cell's outcome]}, in cell order."""
    cells = collections.defaultdict(dict)
    for ev in events:
        if "cell" not in ev:
            continue
        prev = cells[ev["path"]].get(ev["cell"])
        # the call decides, unless its setup or teardown failed
        if prev is None or _failed(ev) and not _failed(prev):
            cells[ev["path"]][ev["cell"]] = ev
    return {path: [c[k] for k in sorted(c)] for path, c in cells.items()}


def _failed(ev):
    """The cell raised: a plain failure, or one nbval expected after an earlier cell timed out."""
    return ev["outcome"] == "failed" or (ev["outcome"] == "skipped" and ev.get("xfail", False))


def _kernel_dead(ev):
    """A kernel that is gone (or never started): nothing after this cell runs."""
    message = ev.get("message", "")
    gone = ("Kernel dead", "Failed to interrupt", "waiting for output", "idle kernel")
    return ev.get("raised") == "KernelDied" or ev.get("when") == "setup" or any(w in message for w in gone)


def _error(ev):
    """'ValueError: what it said' for a failed cell (nbval's own words for a timeout or a dead kernel)."""
    if ev.get("ename") and ev["ename"] != "KeyboardInterrupt":
        return f"{ev['ename']}: {ev.get('evalue', '')}".rstrip(": ")
    if ev.get("raised") in ("NbCellError", "KernelDied"):
        return ev.get("message", "") or "nbval could not run the cell"
    return f"{ev.get('raised') or 'error'}: {ev.get('message', '')}".rstrip(": ")


def summarize(events, rows):
    """Sort a run's failed cells into what the learner needs to read.

    `events` are the plugin's records, `rows` table()'s. Returns a dict:
      why:      {exercise: reason} for exercises whose check() never recorded a result;
      cascade:  {lesson: (exercise names whose results later cells used, how many cells)};
      other:    [(lesson, cell number, label, error, n later cells, kernel died)]: failures
                that are not an exercise's check (a worked example's exception, a timeout,
                a dead kernel), each with the later cells that failed by using its result
                (or, where the kernel died, the later cells that could not run);
      broken:   [(notebook, message)] for notebooks nbval could not read.
    A failing cell is a cascade when it reads a name that an unfinished exercise's cell
    defines, or that an earlier cascading cell defines: it is counted, not listed. The
    check cell of an exercise with a recorded result is left to the exercise's row.
    """
    status = {r[1]: r[3] for r in rows}
    why, other, cascade = {}, [], {}
    broken = {}
    for ev in events:
        if ev.get("when") == "collect":  # each xdist worker reports it: once is enough
            lines = [ln for ln in ev.get("message", "").splitlines() if ln.strip()]
            said = [ln[1:].strip() for ln in lines if ln.startswith("E ")] or lines or ["?"]
            broken[pathlib.Path(ev.get("nodeid", "?")).name] = shorten(said[-1], 200)
    for lesson, name, _title, st, _message in rows:
        if st == "not run" and any(notebook[:2] == lesson for notebook in broken):
            why[name] = "its notebook could not be read"
    for path, order in _cells_by_notebook(events).items():
        lesson = pathlib.Path(path).name[:2]
        checks = [m.group(1) if (m := _CHECK_CALL.search(ev["source"])) else None for ev in order]
        labels = cell_labels([ev["source"] for ev in order], [ev.get("tags", []) for ev in order])
        tainted = {}  # name -> ("exercise", its name) or ("cell", index into `other`)
        dead = None   # the entry of `other` for the cell in which the kernel died
        for i, ev in enumerate(order):
            src, check = ev["source"], checks[i]
            if "exercise" in ev.get("tags", []):
                ex = next((c for c in checks[i + 1:] if c), None)  # the exercise the next check() grades
                if status.get(ex) != "pass":
                    for name in names_assigned(src):
                        tainted.setdefault(name, ("exercise", ex))
            if dead is not None:
                dead[4] += _failed(ev)
                if check and status.get(check) == "not run":
                    why[check] = f"not reached: the kernel died in {dead[2]}"
                continue
            if not _failed(ev):
                continue
            if check and status.get(check) in ("fail", "not done"):
                continue  # the exercise's own row says why
            if check and status.get(check) == "not run":
                why[check] = f"its check cell failed before grading: {_error(ev)}"
            missing = re.match(r"name '(\w+)' is not defined", ev.get("evalue", ""))
            used = names_used(src) | set(ev.get("frames", [])) | ({missing.group(1)} if missing else set())
            roots = [tainted[n] for n in sorted(used) if n in tainted]
            if roots and "exercise" not in ev.get("tags", []) and not _kernel_dead(ev):
                root = next((r for r in roots if r[0] == "exercise"), roots[0])
                if root[0] == "exercise":
                    names, n = cascade.get(lesson, ([], 0))
                    if root[1] and root[1] not in names:
                        names = names + [root[1]]
                    cascade[lesson] = (names, n + 1)
                else:
                    other[root[1]][4] += 1
            else:
                root = ("cell", len(other))
                died = _kernel_dead(ev)
                other.append([lesson, ev["cell"], labels[i], shorten(_error(ev), 120), 0, died])
                if died:
                    dead = other[-1]
            for name in names_assigned(src):
                tainted.setdefault(name, root)
    return {"why": why, "cascade": cascade, "other": [tuple(o) for o in other],
            "broken": sorted(broken.items())}


def summary_lines(summary):
    """The report on failed cells that are not an exercise's own check: one line each, cascades counted."""
    own = [f"  {name}: nbval could not read it: {message}" for name, message in summary["broken"]]
    for lesson, _cell, label, error, after, died in summary["other"]:
        more = ""
        if after:
            cells = "1 later cell" if after == 1 else f"{after} later cells"
            verb = "uses" if after == 1 else "use"
            more = f" ({cells} could not run)" if died else f" (and {cells} that {verb} its result)"
        own.append(f"  lesson {lesson}, {label}: {error}{more}")
    lines = ["", "Failures that are not an exercise's check:", *own] if own else []
    if summary["cascade"]:
        lines.append("")
    for lesson, (names, n) in sorted(summary["cascade"].items()):
        cells, they = ("1 later cell", "it uses") if n == 1 else (f"{n} later cells", "they use")
        lines.append(f"lesson {lesson}: {cells} failed because {they} the result of an unfinished exercise"
                     f" ({', '.join(names) or '?'}).")
    return lines


# ---------------------------------------------------------------- make grade


def _progress(code_cells):
    """An on_event callback printing one line per notebook once all its cells have run, with the
    seconds that notebook took (its kernel's start and every cell)."""
    seen = collections.defaultdict(dict)
    seconds = collections.Counter()
    printed = set()

    def on_event(ev):
        path = ev.get("path")
        if path is None:
            return
        seconds[path] += ev.get("duration") or 0.0
        if ev["when"] != "call" and ev["outcome"] == "passed":
            return
        seen[path][ev["cell"]] = ev["outcome"] == "failed" and not ev.get("xfail")
        total = code_cells.get(path)
        if total and len(seen[path]) >= total and path not in printed:
            printed.add(path)
            failed = sum(seen[path].values())
            note = f"{failed} failed" if failed else "all ran"
            print(f"  {pathlib.Path(path).stem:<28}{total:>3} cell{'s' * (total > 1)}, {note:<11}"
                  f"{seconds[path]:5.0f} s", flush=True)
    return on_event


def _code_cells(path):
    import nbformat

    try:
        return sum(c.cell_type == "code" for c in nbformat.read(path, as_version=4).cells)
    except Exception:
        return None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lesson", help="only this lesson, e.g. 02")
    parser.add_argument("--notebooks", default=str(NOTEBOOKS), help="folder of the notebooks to grade")
    parser.add_argument("--workers", default="1", help="pytest-xdist workers ('auto' for one per core)")
    parser.add_argument("--log", default=str(LOG), help="where nbval's full output goes")
    args = parser.parse_args(argv)
    lesson = args.lesson.zfill(2) if args.lesson else None
    paths = learner_notebooks(lesson, args.notebooks)
    if not paths:
        print(f"no notebooks found for lesson {lesson or '*'} in {args.notebooks}")
        return 2
    log = pathlib.Path(args.log)
    print(f"Running {len(paths)} notebook{'s' * (len(paths) > 1)}, each top to bottom in a fresh kernel "
          f"(your notebooks are read, never changed):", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        results_file = pathlib.Path(tmp) / "results.jsonl"
        events_file = pathlib.Path(tmp) / "cells.jsonl"
        extra = ["-n", args.workers, "--dist", "loadfile"] if args.workers != "1" else []
        on_event = _progress({os.path.abspath(p): _code_cells(p) for p in paths})  # pytest's item.path
        code = run_notebooks(paths, results_file, extra, log=log, events=events_file, on_event=on_event)
        rows = table(results_file, {p.name[:2] for p in paths})
        events = read_events(events_file)
        # keep the latest grading for `make progress`
        for lesson_, name, _t, status, message in rows:
            if status != "not run":
                records.append(lesson_, name, status, message)
    summary = summarize(events, rows)
    shown = os.path.relpath(log) if log.is_relative_to(pathlib.Path.cwd()) else log
    if code not in (0, 1):  # pytest itself failed (usage error, internal error, interrupted)
        print(f"\nnbval stopped with exit status {code}; its last lines:")
        tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-15:] if log.exists() else []
        print("\n".join(f"  {line}" for line in tail))
    print_table(rows, summary["why"])
    for line in summary_lines(summary):
        print(line)
    broken = len(summary["other"]) + len(summary["broken"])
    print(f"\n{verdict(rows, broken)} Full log, with every traceback: {shown}")
    finished = all(r[3] in ("pass", "not done") for r in rows)
    return 0 if code in (0, 1) and finished and not broken else 1


def verdict(rows, broken_cells=0):
    """The one-line summary: how many exercises pass, are not done, fail; how many cells broke."""
    count = collections.Counter(r[3] for r in rows)
    parts = [f"{count['pass']} of {len(rows)} exercises pass"]
    parts += [f"{count[s]} {s}" for s in ("not done", "fail", "not run") if count[s]]
    if broken_cells:
        parts.append(f"{broken_cells} other cell{'s' * (broken_cells > 1)} failed")
    if count["fail"] or count["not run"] or broken_cells:
        return f"Summary: {', '.join(parts)}: fix the failures listed above."
    if count["not done"]:
        return f"Summary: {', '.join(parts)}; nothing is broken."
    return f"Summary: {', '.join(parts)}."


if __name__ == "__main__":
    sys.exit(main())
