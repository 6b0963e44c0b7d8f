"""The lesson notebooks as files: finding them, finding exercise cells, and building solved copies.

The course's notebooks are in notebooks/; a learner works in their own copies in workspace/
(helpers/workspace.py makes and refreshes them), and `learner_notebooks()` finds those.

An exercise cell carries the tag `exercise` (in the paired `.py`:
`# %% tags=["exercise"]`). Its top-level definitions are the names the
solutions module of the same lesson defines. A *solved copy* of a notebook has
each exercise cell replaced by those names loaded from `solutions/`; CI runs the
solved copies to prove that every check passes with the reference solutions.
"""

import ast
import pathlib
import re

import nbformat

ROOT = pathlib.Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
WORKSPACE = ROOT / "workspace"  # the learner's copies (helpers/workspace.py); git ignores it

_CHECK_CALL = re.compile(r"""\bcheck\(\s*["'](\w+)["']""")


def lesson_notebooks(lesson=None, folder=NOTEBOOKS):
    """notebooks/NN_*.ipynb, in order (or just lesson NN's)."""
    found = sorted(pathlib.Path(folder).glob("[0-9][0-9]_*.ipynb"))
    return [p for p in found if lesson is None or p.name.startswith(str(lesson))]


def learner_notebooks(lesson=None, course=NOTEBOOKS):
    """The notebooks a learner works in: each lesson's copy in the workspace/ beside the course's
    notebooks/ folder, else (no copy yet) the course's own."""
    workspace = pathlib.Path(course).parent / WORKSPACE.name
    return [workspace / p.name if (workspace / p.name).exists() else p
            for p in lesson_notebooks(lesson, course)]


def is_exercise(cell):
    return cell.cell_type == "code" and "exercise" in cell.get("metadata", {}).get("tags", [])


def checked_exercise(cells, index):
    """The exercise that exercise cell `cells[index]` answers: the name in the first
    `check("name", ...)` after it (before the next exercise cell), or None."""
    for cell in cells[index + 1:]:
        if is_exercise(cell):
            return None
        found = _CHECK_CALL.search(cell.source) if cell.cell_type == "code" else None
        if found:
            return found.group(1)
    return None


def names_in(source):
    """defined_names(source), also for a cell that does not parse (a learner's typo): then the
    names its top-level `def`, `class` and `name = ...` lines would bind."""
    try:
        return defined_names(source)
    except SyntaxError:
        bound = re.findall(r"^(?:async\s+)?(?:def|class)\s+(\w+)|^(\w+)\s*=[^=]", source, re.M)
        return list(dict.fromkeys(a or b for a, b in bound))


def defined_names(source):
    """Names a cell defines at top level (functions, classes, assignments), in order."""
    names = []
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names += [t.id for t in targets if isinstance(t, ast.Name)]
    return list(dict.fromkeys(names))


def solved_source(lesson, names):
    lines = [f"# Solved copy: these names come from solutions/{lesson}_*.py.",
             "from helpers.solutions import load_solution",
             "",
             f'_solution = load_solution("{lesson}")']
    lines += [f"{name} = _solution.{name}" for name in names]
    return "\n".join(lines)


def solved_copy(path, out_dir):
    """Write a copy of notebook `path` into `out_dir` with its exercises solved; return its path."""
    path = pathlib.Path(path)
    nb = nbformat.read(path, as_version=4)
    lesson = path.name[:2]
    for cell in nb.cells:
        if is_exercise(cell):
            cell.source = solved_source(lesson, defined_names(cell.source))
    out = pathlib.Path(out_dir) / path.name
    out.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out)
    return out


def exercise_names(path):
    """{cell index: [names]} of a notebook's exercise cells."""
    nb = nbformat.read(path, as_version=4)
    return {i: defined_names(c.source) for i, c in enumerate(nb.cells) if is_exercise(c)}
