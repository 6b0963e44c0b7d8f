"""Your workspace: your copies of the lessons, kept apart from the course's own files.

You work in workspace/, the folder `make lab` opens (git ignores it). The course's notebooks/
stay as the course ships them, so a course update never meets your work in git.

1. `make lab` seeds the workspace first (`seed`): each course notebook you have no copy of is
   copied from notebooks/; a copy you have is never overwritten. The course's pictures are
   copied to workspace/figures each time (JupyterLab, opened on workspace/, serves no file
   outside it, so a link to notebooks/figures would show nothing).
2. `make update` brings the course's update (`pull`: `git pull --ff-only`, refused while files
   of the course itself have changes of yours), then refreshes your copies (`refresh`). A
   refreshed copy holds the course's new cells, except:
   - your exercise cells (tagged `exercise`) keep your code. A cell is matched to the
     course's by the exercise its `check()` grades, else by the names it defines. An exercise
     you left as the course's stub takes the new stub;
   - cells you added stay after the course cell they followed, or, when the course removed
     that cell, in a section at the end headed as yours.
   A course cell you edited takes the course's new text (your version is in the backup).
3. Before a copy is rewritten it is saved to .course/backups/<date and time>/, and nothing of
   yours is ever deleted. The course's version each copy was last seeded or refreshed from is
   kept in .course/workspace/: it is how a refresh tells a cell you added from one the course
   removed, and an untouched stub from your answer.

    python -m helpers.workspace seed      # what `make lab` runs before JupyterLab starts
    python -m helpers.workspace update    # `make update`: pull, then refresh
    python -m helpers.workspace refresh   # refresh only, when the course's files came another way

Each copy is written with the `language_info` of this Python's kernel in its metadata.
JupyterLab writes that entry into a notebook when the kernel starts; a notebook without it
opens marked as modified. The workspace has no paired .py files: jupytext pairs notebooks by
the course's pyproject.toml, which a lab opened on workspace/ does not see.
"""

import argparse
import copy
import datetime
import functools
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import nbformat

from helpers.notebooks import ROOT, checked_exercise, is_exercise, names_in

KEPT_TAG = "kept-by-update"  # the heading of the section of cells moved to the end
KEPT_HEADING = ("## Your cells from before a course update\n\n"
                "`make update` moved these cells here: the course cell each one followed is no longer in "
                "the lesson. They are yours, as you left them: move them where you like, or delete them.")


class Folders:
    """Where a course checked out at `root` keeps things."""

    def __init__(self, root):
        self.root = pathlib.Path(root)
        self.course = self.root / "notebooks"            # the course's notebooks, tracked by git
        self.workspace = self.root / "workspace"         # the learner's copies
        self.base = self.root / ".course" / "workspace"  # the course version each copy came from
        self.backups = self.root / ".course" / "backups"


def course_notebooks(course):
    """The course's notebooks: every lesson, and the review notebook."""
    return sorted(pathlib.Path(course).glob("*.ipynb"))


# ---------------------------------------------------------------- make lab: seed


def seed(root=ROOT, say=print):
    """Copy each course notebook the workspace lacks into it; return the names copied."""
    f = Folders(root)
    first = not f.workspace.exists()
    _prepare(f)
    edited = set(_changed_files(f.root) or [])
    copied, moved = [], []
    for course_nb in course_notebooks(f.course):
        mine = f.workspace / course_nb.name
        if mine.exists():
            continue
        _write(mine, _read(course_nb))
        tracked = course_nb.relative_to(f.root).as_posix()
        if tracked in edited:  # the learner's own edits of the tracked notebook: the base is git's
            moved.append(course_nb.name)
            _save_base(f, course_nb.name, _committed(f.root, tracked))
        else:
            _save_base(f, course_nb.name, course_nb.read_bytes())
        copied.append(course_nb.name)
    new = [name for name in copied if name not in moved]
    if first:
        say(_wrap(f"Your workspace is {_shown(f.workspace)}/: your own copies of the {len(copied)} "
                  "notebooks, which JupyterLab opens. The course's notebooks/ stay as the course ships "
                  "them, so `make update` can bring its updates and keep your answers."))
    elif new:
        say(_wrap(f"New in the course, copied into {_shown(f.workspace)}/: {', '.join(new)}."))
    if moved:
        say(_wrap(f"Your edits of notebooks/ ({', '.join(moved)}) were copied into {_shown(f.workspace)}/: "
                  "work there from now on. Once you have seen your answers there, return notebooks/ to the "
                  "course's version with `git checkout -- notebooks/` (README: \"If you worked in "
                  "notebooks/ before\")."))
    return copied


def _prepare(f):
    """The workspace folder, with the course's figures copied in (the lessons show `figures/...`)."""
    f.workspace.mkdir(parents=True, exist_ok=True)
    if (f.course / "figures").is_dir():
        shutil.copytree(f.course / "figures", f.workspace / "figures", dirs_exist_ok=True)


# ---------------------------------------------------------------- make update: pull, then refresh


def update(root=ROOT, say=print):
    """`make update`: pull the course's update, then refresh the workspace. Returns an exit status."""
    seed(root, say)  # first, so that answers written in notebooks/ have a copy in workspace/
    if not pull(root, say):
        return 1
    # the refresh runs in a fresh process, so that it is the updated course's own code
    return subprocess.run([sys.executable, "-m", "helpers.workspace", "refresh", "--root", str(root)],
                          cwd=root).returncode


def pull(root=ROOT, say=print):
    """`git pull --ff-only` of the course; False (after saying why and what to do) if it did not happen."""
    root = pathlib.Path(root)
    changed = _changed_files(root)
    if changed is None:
        say("This course folder is not a git clone (or git is not installed), so there is nothing to pull: "
            "your workspace is refreshed from notebooks/ as they are.")
        return True
    if changed:
        say(_refusal(changed))
        return False
    say("==> git pull --ff-only")
    if subprocess.run(["git", "pull", "--ff-only"], cwd=root).returncode != 0:
        say("\nmake update stopped: git could not bring the course's update (its message is above), and "
            "your workspace was not refreshed.\nIf it says the branches have diverged, this clone has "
            "commits of your own: `git log @{u}..` lists them.")
        return False
    return True


def _refusal(changed):
    """What to do when files of the course have changes of the learner's (git's paths, in `changed`)."""
    shown = changed if len(changed) <= 4 else sorted({p.split("/")[0] + "/" * ("/" in p) for p in changed})
    lines = ["make update stopped, leaving the course and your workspace as they were: these files of the",
             "course have changes of yours, which `git pull` would have to touch:",
             *[f"    {p}" for p in changed[:12]],
             *([f"    and {len(changed) - 12} more (`git status` lists them)"] if len(changed) > 12 else []),
             "Your own work belongs in workspace/, the folder `make lab` opens."]
    if any(p.startswith("notebooks/") for p in changed):
        lines.append(_wrap("Your edits in notebooks/ have copies in workspace/ (made by `make lab`, or just "
                           "now): open them there and check that your answers are in them."))
    lines += ["To go on, put these changes aside (git keeps them; `git stash pop` brings them back),",
              "then update:",
              "    git stash",
              "    make update",
              "or, if you do not need them, return these files to the course's version, then update:",
              "    git checkout -- " + " ".join(shown),
              "    make update"]
    return "\n".join(lines)


def refresh(root=ROOT, say=print, now=None):
    """Refresh every workspace copy from the course's notebooks; return {name: what was done}."""
    f = Folders(root)
    _prepare(f)
    backup = f.backups / (now or datetime.datetime.now()).strftime("%Y-%m-%d_%H%M%S")
    done = {}
    for course_nb in course_notebooks(f.course):
        name, mine = course_nb.name, f.workspace / course_nb.name
        course = _read(course_nb)
        if not mine.exists():
            _write(mine, course)
            done[name] = "new in the course: copied"
        else:
            try:
                learner = _read(mine)
            except Exception as e:  # damaged: leave it for the learner to look at
                done[name] = f"not refreshed: it could not be read ({type(e).__name__}); left as it is"
                continue
            merged, notes = merge(learner, course, _read_base(f, name))
            if _same(merged, learner):
                done[name] = "up to date"
            else:
                backup.mkdir(parents=True, exist_ok=True)
                shutil.copy2(mine, backup / name)
                _write(mine, merged)
                done[name] = "updated" + (f": {notes}" if notes else "")
        _save_base(f, name, course_nb.read_bytes())
    course_names = {p.name for p in course_notebooks(f.course)}
    for extra in sorted(p.name for p in f.workspace.glob("[0-9][0-9]_*.ipynb") if p.name not in course_names):
        done[extra] = "no longer in the course: left as it is"
    width = max(map(len, done), default=0)
    say(f"Your workspace, refreshed from the course's notebooks ({_shown(f.workspace)}/):")
    for name, what in done.items():
        say(f"  {name:<{width}}  {what}")
    if backup.exists():
        say(f"Your copies as they were before: {_shown(backup)}/\n"
            "If JupyterLab has one of these notebooks open, reload it from disk (File > Reload Notebook "
            "from Disk) before you go on working in it.")
    return done


# ---------------------------------------------------------------- one notebook's refresh


def merge(learner, course, base=None):
    """The learner's notebook refreshed from the course's new one: (notebook, a note on what was kept).

    `base` is the course notebook the learner's copy was last seeded or refreshed from (None
    when unknown: every cell whose id the new course lacks is then kept as the learner's).
    """
    base_cells = base.cells if base is not None else []
    course_ids = {c.get("id") for c in course.cells} | {c.get("id") for c in base_cells}
    base_source = {c.get("id"): c.source for c in base_cells}
    stubs = {c.source for c in [*course.cells, *base_cells] if is_exercise(c)}
    by_id = {c.get("id"): j for j, c in enumerate(course.cells)}
    answers = match_exercises(learner.cells, course.cells)  # {course index: learner index}
    answer_at = {i: j for j, i in answers.items()}

    # each cell of the learner's that is not the course's, under the course cell it followed
    top, after, end = [], {}, []
    heading = nbformat.v4.new_markdown_cell(KEPT_HEADING, metadata={"tags": [KEPT_TAG]})
    place = top
    edited = moved = 0
    for i, cell in enumerate(learner.cells):
        if KEPT_TAG in cell.get("metadata", {}).get("tags", []):
            place = end  # the end section of an earlier refresh: its cells stay at the end
            heading.id = cell.get("id", heading.id)
        elif i in answer_at:
            place = place if place is end else after.setdefault(answer_at[i], [])
        elif cell.source in stubs if is_exercise(cell) else cell.get("id") in course_ids:
            if place is not end:
                place = after.setdefault(by_id[cell.id], []) if cell.get("id") in by_id else None
            old = base_source.get(cell.get("id"))
            edited += old is not None and cell.source != old and not is_exercise(cell)
        else:  # the learner's own cell
            if place is None:  # the course cell it followed is gone
                place = end
            moved += place is end
            place.append(copy.deepcopy(cell))

    kept, renewed = [], 0
    cells = list(top)
    for j, cell in enumerate(course.cells):
        mine = learner.cells[answers[j]] if j in answers else None
        if mine is not None and mine.source not in stubs:
            kept.append(checked_exercise(course.cells, j) or ", ".join(names_in(mine.source)) or "?")
            cells.append(_keep_answer(mine, cell))
        else:
            renewed += mine is not None and mine.source != cell.source
            cells.append(_course_cell(cell, learner))
        cells += after.get(j, [])
    if end:
        cells += [heading, *end]
    result = copy.deepcopy(course)
    result.metadata = _metadata(learner.metadata, course.metadata)
    result.cells = _unique_ids(cells)

    own = sum(map(len, after.values())) + len(top) + len(end)
    at_end = f", {moved} of them in a section at the end" if moved else ""
    notes = [f"kept your {_plural(len(kept), 'answer')} ({', '.join(kept)})" if kept else "",
             f"kept your {_plural(own, 'cell')}{at_end}" if own else "",
             f"{_plural(renewed, 'untouched exercise stub')} renewed" if renewed else "",
             f"{_plural(edited, 'course cell')} you had edited now the course's (yours are in the backup)"
             if edited else ""]
    return result, "; ".join(n for n in notes if n)


def match_exercises(learner_cells, course_cells):
    """{course cell index: learner cell index} of the exercise cells that answer the same exercise:
    first by the exercise the next `check()` grades, then by a name both cells define."""
    mine = {i: checked_exercise(learner_cells, i) for i, c in enumerate(learner_cells) if is_exercise(c)}
    theirs = {j: checked_exercise(course_cells, j) for j, c in enumerate(course_cells) if is_exercise(c)}
    matched = {}
    for j, name in theirs.items():
        i = next((i for i, n in mine.items() if name and n == name and i not in matched.values()), None)
        if i is not None:
            matched[j] = i
    for j in theirs.keys() - matched.keys():
        names = set(names_in(course_cells[j].source))
        i = next((i for i in mine if i not in matched.values()
                  and names & set(names_in(learner_cells[i].source))), None)
        if i is not None:
            matched[j] = i
    return matched


def _keep_answer(mine, course_cell):
    """The learner's exercise cell (code, outputs), tagged as the course's cell now is."""
    cell = copy.deepcopy(mine)
    cell.metadata = _metadata(mine.get("metadata", {}), course_cell.metadata)
    return cell


def _course_cell(cell, learner):
    """The course's cell; where the learner's copy of it is unchanged, with its outputs and settings
    (a folded output, say)."""
    cell = copy.deepcopy(cell)
    same = next((c for c in learner.cells if c.get("id") == cell.get("id") and c.source == cell.source
                 and c.cell_type == cell.cell_type), None)
    if same is not None:
        cell.metadata = _metadata(same.get("metadata", {}), cell.metadata)
        if cell.cell_type == "code":
            cell.outputs = copy.deepcopy(same.get("outputs", []))
            cell.execution_count = same.get("execution_count")
    return cell


def _metadata(learner, course):
    """The learner's metadata with the course's entries over it; the tags are the course's alone."""
    merged = {k: v for k, v in copy.deepcopy(dict(learner)).items() if k != "tags"}
    return nbformat.from_dict({**merged, **copy.deepcopy(dict(course))})


def _unique_ids(cells):
    seen = set()
    for cell in cells:
        if cell.get("id") in seen or "id" not in cell:
            cell["id"] = nbformat.v4.new_code_cell().id  # a fresh random id
        seen.add(cell.id)
    return cells


def _same(a, b):
    """The same cells and metadata, whichever kernel's language_info they carry."""
    def strip(nb):
        return (nb.cells, {k: v for k, v in nb.metadata.items() if k != "language_info"})
    return strip(a) == strip(b)


# ---------------------------------------------------------------- files


def _read(path):
    return nbformat.read(path, as_version=4)


def _write(path, nb):
    """Write atomically (a temporary file beside it, then renamed over it), with this kernel's
    language_info in the metadata, as JupyterLab would write it once the kernel starts."""
    nb = copy.deepcopy(nb)
    info = _language_info()
    if info:
        nb.metadata["language_info"] = info
    path = pathlib.Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    nbformat.write(nb, tmp)
    os.replace(tmp, path)


@functools.cache
def _language_info():
    """What the kernel of this Python reports about its language (None without ipykernel)."""
    try:
        from ipykernel.ipkernel import IPythonKernel
    except ImportError:
        return None
    return copy.deepcopy(dict(IPythonKernel.language_info))


def _save_base(f, name, data):
    if data is None:
        return
    f.base.mkdir(parents=True, exist_ok=True)
    tmp = f.base / f".{name}.tmp"
    tmp.write_bytes(data)
    os.replace(tmp, f.base / name)


def _read_base(f, name):
    try:
        return _read(f.base / name)
    except Exception:  # missing or damaged: the refresh works without it
        return None


def _changed_files(root):
    """Tracked files with uncommitted changes (paths from the course root); None outside a git clone."""
    if not (pathlib.Path(root) / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "status", "--porcelain", "-z", "--untracked-files=no"], cwd=root,
                             capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    entries, changed = out.split("\0"), []
    while entries:
        entry = entries.pop(0)
        if entry:
            changed.append(entry[3:])
            if entry[0] in "RC":  # a rename or copy: the next entry is where it came from
                entries.pop(0)
    return changed


def _committed(root, tracked):
    """The committed version of a tracked file (bytes), or None."""
    try:
        return subprocess.run(["git", "show", f"HEAD:{tracked}"], cwd=root, capture_output=True,
                              check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None


def _shown(path):
    path = pathlib.Path(path)
    return os.path.relpath(path) if path.is_relative_to(pathlib.Path.cwd()) else str(path)


def _wrap(text):
    return textwrap.fill(text, width=100, break_on_hyphens=False, break_long_words=False)


def _plural(n, word):
    return f"{n} {word}{'s' * (n != 1)}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["seed", "update", "refresh"])
    parser.add_argument("--root", default=str(ROOT), help="the course's folder (default: this course)")
    args = parser.parse_args(argv)
    if args.action == "seed":
        seed(args.root)
        return 0
    if args.action == "update":
        return update(args.root)
    refresh(args.root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
