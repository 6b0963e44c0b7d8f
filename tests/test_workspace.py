"""The learner's workspace: seeded from the course, refreshed by a course update, never losing work.

A small course is written into tmp_path (notebooks/ with two lessons and the review notebook);
the learner answers an exercise and adds cells in workspace/; a course update changes both
lessons and adds a third. The last tests run the whole `make update` in a temporary git clone.
"""

import shutil
import subprocess

import nbformat
import pytest

from helpers import workspace
from helpers.notebooks import NOTEBOOKS, is_exercise, learner_notebooks, lesson_notebooks
from helpers.workspace import KEPT_TAG, match_exercises, merge, refresh, seed

STUB = "def add(x, y):\n    # YOUR CODE HERE\n    pass"
ANSWER = "def add(x, y):\n    return x + y  # my answer"
SCALE_STUB = "def scale(x, a):\n    # YOUR CODE HERE\n    pass"


def _md(text):
    return nbformat.v4.new_markdown_cell(text)


def _code(source, exercise=False):
    return nbformat.v4.new_code_cell(source, metadata={"tags": ["exercise"]} if exercise else {})


def _write(path, cells):
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)


def _read(path):
    return nbformat.read(path, as_version=4)


def _sources(path):
    return [c.source for c in _read(path).cells]


@pytest.fixture
def course(tmp_path):
    """A course folder: notebooks/ with lessons 01 and 02, the review notebook and a figure."""
    nbs = tmp_path / "notebooks"
    _write(nbs / "01_adding.ipynb", [
        _md("# 01 · Adding"), _code("from helpers import check"),
        _md("Add two tensors."), _code(STUB, exercise=True), _code('check("add", add)'),
        _md("Scale a tensor."), _code(SCALE_STUB, exercise=True), _code('check("scale", scale)'),
        _md("A worked example."), _code("print(add(1, 2))"),
        _md("![the plot](figures/plot.png)"), _md("## Takeaways")])
    _write(nbs / "02_more.ipynb", [_md("# 02 · More"), _code("x = 1")])
    _write(nbs / "review.ipynb", [_md("# Review"), _code("drill()")])
    (nbs / "figures").mkdir()
    (nbs / "figures" / "plot.png").write_bytes(b"\x89PNG not really")
    return tmp_path


def _learner_works(root):
    """The learner answers `add`, adds a cell after the worked example and one after the takeaways."""
    path = root / "workspace" / "01_adding.ipynb"
    nb = _read(path)
    cells = nb.cells
    next(c for c in cells if c.source == STUB).source = ANSWER
    example = next(i for i, c in enumerate(cells) if c.source == "print(add(1, 2))")
    cells.insert(example + 1, _code("print(add(40, 2))  # my own try"))
    cells.append(_md("my notes on the takeaways"))
    nbformat.write(nb, path)


def _course_updates(root):
    """The course's update: lesson 01's prose, scale's stub and its takeaways change (the takeaways
    cell replaced by a new one); lesson 02 gains a cell; lesson 03 is new."""
    path = root / "notebooks" / "01_adding.ipynb"
    nb = _read(path)
    for cell in nb.cells:
        if cell.source == "Add two tensors.":
            cell.source = "Add two tensors, element by element (new prose)."
        elif cell.source == SCALE_STUB:
            cell.source = SCALE_STUB.replace("(x, a)", "(x, a, out=None)")
    nb.cells = [c for c in nb.cells if c.source != "## Takeaways"] + [_md("## What to remember (new)")]
    nbformat.write(nb, path)
    path = root / "notebooks" / "02_more.ipynb"
    nb = _read(path)
    nb.cells.append(_code("y = x + 1  # new in the update"))
    nbformat.write(nb, path)
    _write(root / "notebooks" / "03_new.ipynb", [_md("# 03 · New lesson")])


def test_seed_copies_what_is_missing_and_never_overwrites(course):
    said = []
    assert seed(course, say=said.append) == ["01_adding.ipynb", "02_more.ipynb", "review.ipynb"]
    ws = course / "workspace"
    assert "Your workspace is" in said[0]
    names = sorted(p.name for p in ws.glob("*"))  # each lesson once: no .py twin
    assert names == ["01_adding.ipynb", "02_more.ipynb", "figures", "review.ipynb"]
    assert (ws / "figures" / "plot.png").read_bytes() == b"\x89PNG not really"  # `figures/...` resolves
    assert _read(ws / "01_adding.ipynb").metadata["language_info"]["name"] == "python"  # opens unmodified

    _learner_works(course)
    mine = (ws / "01_adding.ipynb").read_bytes()
    (ws / "02_more.ipynb").unlink()
    said.clear()
    assert seed(course, say=said.append) == ["02_more.ipynb"]
    assert (ws / "01_adding.ipynb").read_bytes() == mine
    told = " ".join(said[0].split())
    assert told.startswith("New in the course, copied into ") and told.endswith("/: 02_more.ipynb.")

    # a figure the course redrew (`make bench`) reaches the workspace at the next `make lab`
    (course / "notebooks" / "figures" / "plot.png").write_bytes(b"\x89PNG redrawn")
    seed(course, say=said.append)
    assert (ws / "figures" / "plot.png").read_bytes() == b"\x89PNG redrawn"


def test_course_update_keeps_the_answer_and_own_cells_and_brings_new_content(course):
    seed(course, say=lambda _: None)
    _learner_works(course)
    before = (course / "workspace" / "01_adding.ipynb").read_bytes()
    _course_updates(course)
    said = []
    done = refresh(course, say=said.append)

    lesson = _sources(course / "workspace" / "01_adding.ipynb")
    assert ANSWER in lesson and STUB not in lesson                               # the answer kept
    assert "Add two tensors, element by element (new prose)." in lesson          # new prose
    assert SCALE_STUB.replace("(x, a)", "(x, a, out=None)") in lesson            # untouched stub renewed
    assert "## What to remember (new)" in lesson and "## Takeaways" not in lesson
    own = lesson.index("print(add(40, 2))  # my own try")
    assert lesson[own - 1] == "print(add(1, 2))"                                  # after the cell it followed
    heading = next(i for i, c in enumerate(_read(course / "workspace" / "01_adding.ipynb").cells)
                   if KEPT_TAG in c.metadata.get("tags", []))
    assert lesson[heading + 1:] == ["my notes on the takeaways"]  # the cell it followed is gone
    assert "y = x + 1  # new in the update" in _sources(course / "workspace" / "02_more.ipynb")
    assert (course / "workspace" / "03_new.ipynb").exists()
    assert done["01_adding.ipynb"] == ("updated: kept your 1 answer (add); kept your 2 cells, 1 of them in a "
                                       "section at the end; 1 untouched exercise stub renewed")
    assert done["03_new.ipynb"] == "new in the course: copied"
    assert done["review.ipynb"] == "up to date"
    backups = list((course / ".course" / "backups").glob("*/01_adding.ipynb"))
    assert len(backups) == 1 and backups[0].read_bytes() == before               # the old copy saved
    assert any("before:" in line for line in said)

    # a second refresh with nothing new changes nothing, and the end section is not doubled
    again = refresh(course, say=lambda _: None)
    assert set(again.values()) == {"up to date"}
    assert _sources(course / "workspace" / "01_adding.ipynb") == lesson


def test_refresh_without_the_recorded_base_loses_nothing(course):
    """.course/workspace gone (or a workspace copied by hand): every cell the new course lacks is kept."""
    seed(course, say=lambda _: None)
    _learner_works(course)
    shutil.rmtree(course / ".course" / "workspace")
    _course_updates(course)
    refresh(course, say=lambda _: None)
    lesson = _sources(course / "workspace" / "01_adding.ipynb")
    assert ANSWER in lesson and "print(add(40, 2))  # my own try" in lesson
    assert "my notes on the takeaways" in lesson
    assert "Add two tensors, element by element (new prose)." in lesson


def test_answers_match_by_their_check_or_their_names():
    course = [_code(STUB, exercise=True), _code('check("add", add)'),
              _code(SCALE_STUB, exercise=True), _code('check("scale_renamed", scale)')]
    learner = [_code("def add(x, y)\n    return x + y  # a typo", exercise=True), _code('check("add", add)'),
               _code("def scale(x, a):\n    return a * x", exercise=True), _code('check("scale", scale)')]
    assert match_exercises(learner, course) == {0: 0, 2: 2}


def test_an_answer_whose_exercise_left_the_course_is_kept():
    base = nbformat.v4.new_notebook(cells=[_md("intro"), _code(STUB, exercise=True),
                                           _code('check("add", add)')])
    learner = nbformat.from_dict(nbformat.v4.new_notebook(cells=[c.copy() for c in base.cells]))
    learner.cells[1] = nbformat.from_dict({**learner.cells[1], "source": ANSWER})
    course = nbformat.v4.new_notebook(cells=[base.cells[0].copy(), _md("the exercise moved to lesson 03")])
    merged, notes = merge(learner, course, base)
    assert [c.source for c in merged.cells] == ["intro", ANSWER, "the exercise moved to lesson 03"]
    assert "kept your 1 cell" in notes


def test_every_exercise_of_the_real_lessons_is_matched(tmp_path):
    """On the course's own notebooks: an answer to every exercise survives a refresh."""
    for path in lesson_notebooks():
        learner = _read(path)
        exercises = [c for c in learner.cells if is_exercise(c)]
        for cell in exercises:
            cell.source += "\n# answered"
        merged, _ = merge(learner, _read(path), _read(path))
        kept = [c.source for c in merged.cells if is_exercise(c)]
        assert kept == [c.source for c in exercises], path.name


def test_grading_finds_the_workspace_copy_else_the_course_notebook(course):
    seed(course, say=lambda _: None)
    (course / "workspace" / "02_more.ipynb").unlink()
    found = learner_notebooks(course=course / "notebooks")
    assert found == [course / "workspace" / "01_adding.ipynb", course / "notebooks" / "02_more.ipynb"]
    assert [p.name for p in learner_notebooks("01")] == [p.name for p in lesson_notebooks("01", NOTEBOOKS)]


# ---------------------------------------------------------------- the whole `make update`, with git

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _git(cwd, *args):
    subprocess.run(["git", "-c", "user.name=Course", "-c", "user.email=course@example.com", *args],
                   cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def clone(course, tmp_path, monkeypatch):
    """The course as a git repository ("origin") and the learner's clone of it, seeded."""
    monkeypatch.setenv("HOME", str(tmp_path))  # no global git settings of this machine
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    (course / ".gitignore").write_text("workspace/\n.course/\n")
    _git(course, "init", "-q", "-b", "main")
    _git(course, "add", ".")
    _git(course, "commit", "-q", "-m", "the course")
    learner = tmp_path / "learner"
    _git(tmp_path, "clone", "-q", str(course), str(learner))
    seed(learner, say=lambda _: None)
    return learner


@needs_git
def test_make_update_pulls_and_refreshes(course, clone, capfd):
    _learner_works(clone)
    _course_updates(course)
    _git(course, "commit", "-q", "-am", "update")  # 03_new.ipynb stays out: added next
    _git(course, "add", ".")
    _git(course, "commit", "-q", "-m", "lesson 03")
    assert workspace.update(clone) == 0
    out = capfd.readouterr().out
    assert "01_adding.ipynb  updated: kept your 1 answer (add)" in out
    lesson = _sources(clone / "workspace" / "01_adding.ipynb")
    assert ANSWER in lesson and "Add two tensors, element by element (new prose)." in lesson
    assert (clone / "workspace" / "03_new.ipynb").exists()
    assert (clone / "notebooks" / "03_new.ipynb").exists()


@needs_git
def test_make_update_refuses_while_course_files_have_changes(course, clone):
    edited = clone / "notebooks" / "01_adding.ipynb"
    edited.write_text(edited.read_text().replace("Add two tensors.", "Add two tensors. (my note)"))
    (clone / "workspace" / "01_adding.ipynb").unlink()  # edited in notebooks/, no copy in workspace/ yet
    mine = (clone / "workspace" / "02_more.ipynb").read_bytes()
    _course_updates(course)
    _git(course, "commit", "-q", "-am", "update")
    said = []
    assert workspace.update(clone, say=said.append) == 1
    message = "\n".join(said)
    print(message)
    assert "leaving the course and your workspace as they were" in message
    assert "    notebooks/01_adding.ipynb" in message
    assert "git stash" in message and "git checkout -- notebooks/01_adding.ipynb" in message
    assert "(my note)" in edited.read_text() and "new prose" not in edited.read_text()  # nothing pulled
    assert (clone / "workspace" / "02_more.ipynb").read_bytes() == mine
    assert "(my note)" in (clone / "workspace" / "01_adding.ipynb").read_text()  # copied before refusing


@needs_git
def test_first_lab_moves_answers_made_in_notebooks(course, tmp_path, monkeypatch):
    """A learner who answered in the tracked notebooks/ before the workspace existed."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    _git(course, "init", "-q", "-b", "main")
    _git(course, "add", ".")
    _git(course, "commit", "-q", "-m", "the course")
    tracked = course / "notebooks" / "01_adding.ipynb"
    nb = _read(tracked)
    next(c for c in nb.cells if c.source == STUB).source = ANSWER
    nbformat.write(nb, tracked)
    said = []
    seed(course, say=said.append)
    assert ANSWER in _sources(course / "workspace" / "01_adding.ipynb")
    told = " ".join(" ".join(said).split())
    assert "Your edits of notebooks/ (01_adding.ipynb) were copied into" in told
    assert "`git checkout -- notebooks/`" in told
    # the recorded base is the course's committed version, so the answer is not taken for a stub
    _git(course, "checkout", "--", "notebooks/")
    refresh(course, say=lambda _: None)
    assert ANSWER in _sources(course / "workspace" / "01_adding.ipynb")

