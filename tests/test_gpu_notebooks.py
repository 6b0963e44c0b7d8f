"""On a GPU: every lesson notebook, solved, executed at full size as a learner's JupyterLab would run
it. No cell may fail, and no cell may write to stderr: no compiler output, MLIR reproducer or
warning reaches a learner. The executed notebooks are kept in build/executed/ to read.

Skipped without a GPU (CI has none); .ci/gpu-grading.sh runs it on an H100 and an H200, with six
workers per GPU (`--dist load`) so that several lessons run at once.
"""

import pathlib

import nbformat
import pytest
from nbclient import NotebookClient

from helpers import INTERPRET
from helpers.notebooks import ROOT, lesson_notebooks, solved_copy

EXECUTED = ROOT / "build" / "executed"
CELL_TIMEOUT_S = 600

pytestmark = [pytest.mark.notebooks,
              pytest.mark.skipif(INTERPRET, reason="the lessons run at full size on a GPU only")]


def stderr_outputs(nb):
    """[(cell number, first line of the cell, what it wrote to stderr)] of an executed notebook."""
    found = []
    for i, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream" and output.get("name") == "stderr":
                found.append((i, cell.source.splitlines()[0] if cell.source else "", output.text))
    return found


@pytest.mark.parametrize("path", lesson_notebooks(), ids=lambda p: p.stem)
def test_a_solved_lesson_runs_on_a_gpu_with_nothing_on_stderr(path, tmp_path):
    solved = solved_copy(path, tmp_path)
    nb = nbformat.read(solved, as_version=4)
    client = NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(pathlib.Path(path).parent)}})
    client.execute()
    EXECUTED.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, EXECUTED / path.name)
    errors = [(i, o.get("ename"), o.get("evalue", "")[:300]) for i, c in enumerate(nb.cells)
              for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, f"{path.name}: cells failed: {errors}"
    noise = stderr_outputs(nb)
    assert not noise, f"{path.name}: cells wrote to stderr:\n" + "\n".join(
        f"cell {i} ({first!r}): {text[:400]!r}" for i, first, text in noise)
