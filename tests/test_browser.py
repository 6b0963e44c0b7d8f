"""End to end, as a learner works: JupyterLab in a real (headless) Chromium.

Starts JupyterLab on a free local port, opens lesson 01 (a solved copy, so that every check
passes), runs all cells from the Run menu, saves, and requires no error output; then turns a
flashcard over by clicking it, answers it, and checks the answer reached the review schedule.
A screenshot is saved to build/artifacts/. The server it started is stopped at the end.

Needs Debian's chromium and Playwright's Python package (`make install-browser-test`, which runs
.ci/install-browser-test.sh); skipped without them. Playwright drives the system Chromium through
its executable path: it never downloads a browser.
"""

import contextlib
import json
import os
import pathlib
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import nbformat
import pytest

from helpers import cards
from helpers.notebooks import solved_copy

ROOT = pathlib.Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "build" / "artifacts"
LESSON = ROOT / "notebooks" / "01_what_is_a_kernel.ipynb"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
RUN_ALL_TIMEOUT_S = 600  # lesson 01 takes about a minute under the interpreter on two cores

pytestmark = pytest.mark.notebooks


def _chromium():
    for candidate in ("/usr/bin/chromium", shutil.which("chromium"), shutil.which("chromium-browser")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _settings(folder):
    """JupyterLab settings for a quiet, deterministic session (no news, every cell in the page)."""
    for plugin, values in {
        "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
        "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
    }.items():
        package, name = plugin.rsplit("/", 1)
        path = folder / package / f"{name}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))


@pytest.fixture
def lab_root(request, tmp_path):
    """The folder JupyterLab serves: the course's root, or the folder a test's parameter makes in tmp_path
    (`@pytest.mark.parametrize("lab_root", [make_folder], indirect=True)`)."""
    make = getattr(request, "param", None)
    return make(tmp_path) if make else ROOT


@pytest.fixture
def lab(tmp_path, lab_root):
    """A JupyterLab server of our own: (base url, token, env); stopped, with its kernels, at the end."""
    browser = _chromium()
    if browser is None:
        pytest.skip("no Chromium (Debian: apt-get install chromium; or make install-browser-test)")
    pytest.importorskip("playwright.sync_api", reason="no Playwright (make install-browser-test)")
    port, token = _free_port(), secrets.token_hex(16)
    _settings(tmp_path / "lab-settings")
    env = dict(os.environ,
               COURSE_STATE=str(tmp_path / "review.json"),       # the kernel inherits these
               COURSE_RESULTS=str(tmp_path / "results.jsonl"),
               JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "lab-settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "lab-workspaces"),
               JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    jupyter = pathlib.Path(sys.executable).parent / "jupyter"
    cmd = [str(jupyter), "lab"] if jupyter.exists() else [sys.executable, "-m", "jupyterlab"]
    cmd += ["--no-browser", f"--port={port}", "--ServerApp.port_retries=0", "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.token={token}", f"--ServerApp.root_dir={lab_root}",
            "--LabApp.news_url=None",
            "--LabApp.check_for_updates_class=jupyterlab.handlers.announcements.NeverCheckForUpdate"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    base = f"http://127.0.0.1:{port}"
    running = {}

    def start():
        log = running["log"] = open(tmp_path / "jupyter.log", "ab")
        server = running["server"] = subprocess.Popen(cmd, cwd=lab_root, env=env, stdout=log,
                                                      stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=5):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    tail = (tmp_path / "jupyter.log").read_text()[-3000:]
                    pytest.fail(f"JupyterLab did not start:\n{tail}")
                time.sleep(0.5)

    def stop():
        server = running.pop("server", None)
        if server is None:
            return
        server.send_signal(signal.SIGTERM)  # Jupyter shuts its kernels down, then exits
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        running.pop("log").close()

    def restart():
        """Stop the server (and its kernels), and start it again on the same port and token."""
        stop()
        start()

    try:
        start()
        yield {"base": base, "token": token, "env": env, "browser": browser, "tmp": tmp_path,
               "root": lab_root, "restart": restart}
    finally:
        stop()


def _target(folder):
    """A solved copy of lesson 01 under the server's root (the review notebook until lesson 01 exists)."""
    if LESSON.exists():
        return solved_copy(LESSON, folder)
    fallback = folder / "review.ipynb"
    shutil.copy(ROOT / "notebooks" / "review.ipynb", fallback)
    return fallback


@pytest.fixture
def scratch():
    """A folder under the server's root for a test's notebooks (build/browser-test/<random>), removed
    at the end."""
    folder = ROOT / "build" / "browser-test" / secrets.token_hex(4)
    folder.mkdir(parents=True)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)
    with contextlib.suppress(OSError):
        folder.parent.rmdir()  # build/browser-test, when no other run is using it


@contextlib.contextmanager
def _page(lab):
    """A page of a headless Chromium (the system's, driven by Playwright), closed at the end."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=lab["browser"], headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser.new_page(viewport={"width": 1400, "height": 1000})
        finally:
            browser.close()


def _accept_kernel_dialog(page):
    """JupyterLab sometimes asks which kernel to start (when it opens a notebook before it has listed
    the kernels); the preselected one is the notebook's own: accept it, as a learner would."""
    dialog = page.locator(".jp-Dialog", has_text="Select Kernel")
    if dialog.count():
        dialog.locator("button.jp-mod-accept").click()


def _wait(page, condition, what, timeout_s, poll_s=1.0):
    deadline = time.monotonic() + timeout_s
    while not page.evaluate(condition):
        _accept_kernel_dialog(page)
        if time.monotonic() > deadline:
            page.screenshot(path=str(ARTIFACTS / "browser-timeout.png"))
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}; prompts: "
                                 f"{page.evaluate(PROMPTS)} (see build/artifacts/browser-timeout.png)")
        time.sleep(poll_s)


KERNEL_IDLE = ("Array.from(document.querySelectorAll('.jp-StatusBar-TextItem'))"
               ".some(e => /\\| Idle$/.test(e.textContent.trim()))")
PROMPTS = ("Array.from(document.querySelectorAll('.jp-CodeCell .jp-InputPrompt'))"
           ".map(e => e.textContent.trim())")


def test_lesson_runs_in_jupyterlab_and_a_flashcard_turns_over(lab, scratch):
    notebook = _target(scratch)
    rel = notebook.relative_to(ROOT).as_posix()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "browser-timeout.png").unlink(missing_ok=True)  # from an earlier run
    shot = ARTIFACTS / f"browser-{notebook.stem}.png"
    with _page(lab) as page:
        _open(page, lab, rel)

        # run, save, and read the outputs back: error outputs are unambiguous in the file
        _run_all_and_save(page, notebook)
        saved = nbformat.read(notebook, as_version=4)
        errors = [(i, o.get("ename"), o.get("evalue")) for i, c in enumerate(saved.cells)
                  if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
        assert saved.cells and not errors, f"cells raised: {errors}"

        # turn the first flashcard over, say "knew it", and find it in the schedule
        lesson = notebook.name[:2] if notebook.name[:2].isdigit() else None
        first = cards.flashcard_list([lesson] if lesson else None)[0]
        card = page.locator(".course-card").first
        card.scroll_into_view_if_needed()
        front = card.locator(".course-card-front")
        assert _plain(first["front"]) in _plain(front.text_content())
        assert _plain(card.locator(".course-card-back").text_content()) == ""
        card.locator(".course-card-flip button, button.course-card-flip").first.click()
        back = card.locator(".course-card-back")
        back.filter(has_text="Answer").wait_for(timeout=30_000)
        assert _plain(first["back"]) in _plain(back.text_content())
        page.screenshot(path=str(shot))
        card.locator(".course-card-knew button, button.course-card-knew").first.click()
        card.locator(".course-card-verdict", has_text="next review in").wait_for(timeout=30_000)
        schedule = json.loads(pathlib.Path(lab["env"]["COURSE_STATE"]).read_text())
        assert schedule["cards"][first["id"]]["answers"][-1][1] == "knew"
    assert shot.stat().st_size > 10_000


def _plain(text):
    return " ".join((text or "").replace("`", "").split())


# ---------------------------------------------------------------- the deck: once, and after a restart

VISIBLE = "e => !!(e.offsetWidth || e.offsetHeight || e.getClientRects().length)"
DECKS_SHOWN = ("Array.from(document.querySelectorAll('.course-static, .course-flashcards'))"
               f".filter({VISIBLE}).map(e => e.classList.contains('course-static') ? 'static' : 'live')")
CARDS_SHOWN = f"Array.from(document.querySelectorAll('.course-card')).filter({VISIBLE}).length"
WIDGET_TROUBLE = (f"Array.from(document.querySelectorAll('.jp-OutputArea-output')).filter({VISIBLE})"
                  ".filter(e => /Error displaying widget|Loading widget/.test(e.textContent))"
                  ".map(e => e.textContent.trim().slice(0, 80))")


def _run_all(page):
    """Run > Run All Cells, as a learner would. Every prompt reads [ ]: until a cell starts; on a busy
    machine the first request can go out before the kernel is connected and be dropped, so a learner
    would ask again: so do we, at most three times."""
    for attempt in range(3):
        _accept_kernel_dialog(page)
        page.locator(".lm-MenuBar-itemLabel", has_text=re.compile("^Run$")).click()
        page.locator(".lm-Menu-itemLabel", has_text=re.compile("^Run All Cells$")).click()
        try:
            _wait(page, f"{PROMPTS}.some(p => p !== '[ ]:')", "a cell to start", 30, 0.2)
            return
        except AssertionError:
            if attempt == 2:
                raise


def _open(page, lab, rel):
    page.goto(f"{lab['base']}/lab/tree/{rel}?token={lab['token']}")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
    _wait(page, KERNEL_IDLE, "the kernel to start", 180)


def _save(page, notebook):
    """Ctrl+S in the notebook in view, and wait until the file on disk has changed."""
    before = notebook.stat().st_mtime_ns
    page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook").first.click()
    page.keyboard.press("Control+s")
    deadline = time.monotonic() + 30
    while notebook.stat().st_mtime_ns == before and time.monotonic() < deadline:
        time.sleep(0.5)
    assert notebook.stat().st_mtime_ns != before, f"{notebook.name} was not saved"


def _run_all_and_save(page, notebook):
    """Run > Run All Cells, then save with Ctrl+S."""
    _run_all(page)
    _wait(page, f"{PROMPTS}.every(p => /^\\[\\d+\\]:$/.test(p))", "every cell to finish", RUN_ALL_TIMEOUT_S)
    _save(page, notebook)


def test_the_deck_shows_once_and_after_a_restart_shows_its_static_form(lab, scratch):
    """Run a lesson: its flashcards appear once, as the live widget. Save, stop the server (its kernels
    go with it), start it again and reopen the notebook: the widget's model is gone, and the cell
    shows the cards folded (static), with no "Error displaying widget" in view."""
    notebook = _target(scratch)
    rel = notebook.relative_to(ROOT).as_posix()
    lesson = notebook.name[:2] if notebook.name[:2].isdigit() else None
    fronts = [_plain(c["front"]) for c in cards.flashcard_list([lesson] if lesson else None)]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with _page(lab) as page:
        _open(page, lab, rel)
        _run_all_and_save(page, notebook)
        page.locator(".course-flashcards").first.scroll_into_view_if_needed()
        assert page.evaluate(DECKS_SHOWN) == ["live"], "the deck appears once, live"
        assert page.evaluate(CARDS_SHOWN) == len(fronts), "every card, once"
        page.screenshot(path=str(ARTIFACTS / "browser-deck-live.png"))

    saved = nbformat.read(notebook, as_version=4)
    deck_cell = [c for c in saved.cells if c.cell_type == "code" and "flashcards(" in c.source][-1]
    kinds = [sorted(o.get("data", {})) for o in deck_cell.outputs]
    assert ["text/html"] in kinds and any("application/vnd.jupyter.widget-view+json" in k for k in kinds)

    lab["restart"]()
    with _page(lab) as page:
        _open(page, lab, rel)
        static = page.locator(".course-static").first
        static.scroll_into_view_if_needed()
        # the widget manager gives up on the missing model once it has asked the new kernel
        _wait(page, f"{DECKS_SHOWN}.join() === 'static' && {WIDGET_TROUBLE}.length === 0",
              "the static deck, and no widget error in view", 60)
        time.sleep(3)  # and it stays that way
        page.screenshot(path=str(ARTIFACTS / "browser-deck-reopened.png"))
        assert page.evaluate(WIDGET_TROUBLE) == [], "no widget error in view"
        assert page.evaluate(DECKS_SHOWN) == ["static"], "the deck once, folded"
        text = _plain(static.text_content())
        assert all(front in text for front in fronts), "every card's question is there"
        static.locator("summary").first.click()             # a folded card opens
        assert _plain(static.locator("details").first.text_content()) != fronts[0]


PLOTS = ("Array.from(document.querySelectorAll('.jp-OutputArea-output img'))"
         ".filter(i => i.src.startsWith('data:image/png') && i.complete && i.naturalWidth > 200)"
         ".map(i => i.alt)")


def test_a_recorded_comparison_is_shown_as_a_plot(lab, scratch):
    """Lesson 01 (solved) run in JupyterLab: its recorded launch-overhead comparison is a plot image, with
    the recorded tables folded under it."""
    notebook = solved_copy(LESSON, scratch)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with _page(lab) as page:
        _open(page, lab, notebook.relative_to(ROOT).as_posix())
        _run_all(page)
        _wait(page, f"{PLOTS}.some(alt => alt.startsWith('launch_overhead on NVIDIA'))",
              "the plot of the recorded launch overhead", RUN_ALL_TIMEOUT_S)
        plot = page.locator("img[alt^='launch_overhead']")
        output = page.locator(".jp-OutputArea-output", has=plot)
        output.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "browser-plot.png"))
        folded = output.locator("details")
        assert "the figures as a table" in folded.locator("summary").text_content()
        assert not folded.evaluate("d => d.open")                    # folded until clicked
        folded.locator("summary").click()
        assert "4096 launches" in folded.locator("pre").text_content()


def _seeded_workspace(tmp_path):
    """A learner's workspace as `make lab` seeds it, from this course's notebooks."""
    from helpers import workspace

    course = tmp_path / "course"
    course.mkdir()
    (course / "notebooks").symlink_to(ROOT / "notebooks", target_is_directory=True)
    workspace.seed(course, say=lambda _: None)
    return course / "workspace"


@pytest.mark.parametrize("lab_root", [_seeded_workspace], indirect=True)
def test_the_lab_opens_on_the_workspace_and_a_lesson_opens_unmodified(lab):
    """`make lab`: the lab shows the workspace, each lesson once; a lesson opens not marked modified
    once its kernel has started, saving it writes no .py twin, and the lessons' figures are served."""
    root = lab["root"]
    lesson = root / "05_online_softmax.ipynb"
    with _page(lab) as page:
        _open(page, lab, lesson.name)
        time.sleep(2)  # what JupyterLab does on the kernel's first reply (language_info) is done
        dirty = page.evaluate("Array.from(document.querySelectorAll('.lm-TabBar-tab.jp-mod-dirty'))"
                              ".map(e => e.textContent.trim())")
        assert dirty == [], f"opened marked modified: {dirty}"

        page.wait_for_selector(".jp-DirListing-itemText", timeout=30_000)
        listed = page.evaluate("Array.from(document.querySelectorAll('.jp-DirListing-itemText'))"
                               ".map(e => e.textContent.trim())")
        assert sorted(listed) == sorted(["figures", *(p.name for p in root.glob("*.ipynb"))]), listed

        _save(page, lesson)
        assert not list(root.glob("*.py")), "saving wrote a paired .py into the workspace"
    figure = next((root / "figures").glob("*.png"))
    with urllib.request.urlopen(f"{lab['base']}/files/figures/{figure.name}?token={lab['token']}") as reply:
        assert reply.status == 200 and reply.read() == figure.read_bytes()


def test_run_all_on_an_untouched_lesson_reaches_the_last_cell(lab, scratch):
    """Lesson 02 as shipped: its exercises show "not done" boxes, and Run All goes on to the cards."""
    notebook = pathlib.Path(shutil.copy(ROOT / "notebooks" / "02_fusion.ipynb", scratch))
    rel = notebook.relative_to(ROOT).as_posix()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    exercises_here = sum("exercise" in c.get("metadata", {}).get("tags", [])
                         for c in nbformat.read(notebook, as_version=4).cells)
    with _page(lab) as page:
        _open(page, lab, rel)
        _run_all(page)
        # every cell ran, the last one included: Run All did not stop at an unfinished exercise
        _wait(page, f"{PROMPTS}.every(p => /^\\[\\d+\\]:$/.test(p))", "every cell to finish",
              RUN_ALL_TIMEOUT_S)
        boxes = page.locator(".jp-OutputArea-output .course-not-done")
        assert boxes.count() == exercises_here, "one not-done box per unfinished exercise"
        boxes.first.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "browser-not-done.png"))
        first_box = _plain(boxes.first.text_content())
        assert "Exercise 1 of lesson 02, fused_chain: not done yet." in first_box
        assert "run this check again" in first_box
        outputs = page.locator(".jp-OutputArea-output")
        assert outputs.filter(has_text="needs exercise 1 (fused_chain)").count()
        stderr = page.locator("[data-mime-type='application/vnd.jupyter.stderr']")
        assert not stderr.filter(has_text="Traceback").count(), "a cell raised"
        card = page.locator(".course-card").first
        card.scroll_into_view_if_needed()
        assert card.locator(".course-card-front").text_content().strip(), "the flashcards rendered"
        page.screenshot(path=str(ARTIFACTS / "browser-run-all-untouched.png"))
