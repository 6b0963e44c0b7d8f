"""The lesson notebooks as files: finding exercise cells, and building solved copies.

An exercise cell carries the tag `exercise` (in the paired `.py`:
`# %% tags=["exercise"]`). Its top-level definitions are the names the
solutions module of the same lesson defines. A *solved copy* of a notebook has
each exercise cell replaced by those names loaded from `solutions/`; CI runs the
solved copies to prove that every check passes with the reference solutions.
"""

import ast
import pathlib

import nbformat

ROOT = pathlib.Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"


def lesson_notebooks(lesson=None, folder=NOTEBOOKS):
    """notebooks/NN_*.ipynb, in order (or just lesson NN's)."""
    found = sorted(pathlib.Path(folder).glob("[0-9][0-9]_*.ipynb"))
    return [p for p in found if lesson is None or p.name.startswith(str(lesson))]


def is_exercise(cell):
    return cell.cell_type == "code" and "exercise" in cell.get("metadata", {}).get("tags", [])


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
