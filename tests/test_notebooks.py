"""The lesson notebooks: in sync with their .py, clean, passing when solved, failing as shipped."""

import json

import jupytext
import nbformat
import pytest

from helpers import exercises
from helpers.grade import run_notebooks, table
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


def test_every_lesson_with_exercises_has_a_notebook():
    have = {p.name[:2] for p in LESSONS}
    assert set(exercises.by_lesson()) <= have


@pytest.mark.notebooks
def test_solved_notebooks_pass(tmp_path):
    solved = [solved_copy(p, tmp_path / "solved") for p in LESSONS]
    results = tmp_path / "results.jsonl"
    code = run_notebooks(solved, results, ["-n", "2", "--dist", "loadfile"])
    not_passing = [r for r in table(results, {p.name[:2] for p in LESSONS}) if r[3] != "pass"]
    assert code == 0 and not not_passing, f"nbval exit {code}; exercises not passing: {not_passing}"


@pytest.mark.notebooks
def test_shipped_stubs_fail_their_checks(tmp_path):
    results = tmp_path / "results.jsonl"
    run_notebooks(LESSONS, results, ["-n", "2", "--dist", "loadfile"])
    rows = table(results, {p.name[:2] for p in LESSONS})
    wrong = [(r[1], r[3]) for r in rows if r[3] not in ("fail", "not done")]
    assert rows and not wrong, f"as shipped, these exercises did not fail their check: {wrong}"
