"""The flashcard review: Leitner scheduling, the state file, the drill, the deck, progress, widgets.

Cards come from small fixture files in tests/fixtures/cards, never from the lessons,
and the schedule lives in a temporary file (COURSE_STATE), never the learner's.
"""

import datetime
import json
import os
import pathlib
import subprocess
import sys

import pytest

from helpers import cards, review

FIXTURES = pathlib.Path(__file__).resolve().parent / "fixtures" / "cards"
ROOT = pathlib.Path(__file__).resolve().parent.parent
DAY = datetime.date(2025, 3, 10)


def later(days):
    return DAY + datetime.timedelta(days=days)


@pytest.fixture
def state(tmp_path, monkeypatch):
    """A private schedule file, also handed to anything that reads COURSE_STATE."""
    path = tmp_path / "state" / "review.json"
    monkeypatch.setenv("COURSE_STATE", str(path))
    return path


@pytest.fixture
def deck():
    return cards.flashcard_list(folder=FIXTURES)


def ids(card_list):
    return [c["front"] + "|" + c["back"] for c in card_list]


# ---------------------------------------------------------------- cards and their ids


def test_fixture_cards_load_in_course_order(deck):
    assert [c["lesson"] for c in deck] == ["01", "01", "01", "02", "02"]
    assert [c["index"] for c in deck] == [0, 1, 2, 0, 1]
    assert cards.lesson_title("01", FIXTURES) == "Alpha"
    assert cards.lesson_title("02", FIXTURES) == "Beta, titled"  # the file's own title wins


def test_card_ids_survive_reordering_and_spacing_but_not_rewording():
    assert cards.card_id("01", "What is a kernel?") == cards.card_id("01", "What  is a\nkernel? ")
    assert cards.card_id("01", "What is a kernel?") != cards.card_id("01", "What is a warp?")
    assert cards.card_id("01", "Same?") != cards.card_id("02", "Same?")


def test_two_cards_with_one_question_get_two_ids(deck):
    beta = [c for c in deck if c["lesson"] == "02"]
    assert beta[0]["front"] == beta[1]["front"] and beta[0]["id"] != beta[1]["id"]
    assert len({c["id"] for c in deck}) == len(deck)


# ---------------------------------------------------------------- the Leitner schedule


def test_a_new_card_known_moves_to_box_2_due_tomorrow():
    entry = review.schedule(None, True, DAY)
    assert (entry["box"], entry["due"], entry["reviews"], entry["lapses"]) == (2, later(1).isoformat(), 1, 0)


def test_each_spaced_recall_moves_up_a_box_and_waits_longer():
    entry, today, seen = None, DAY, []
    for _ in range(6):
        entry = review.schedule(entry, True, today)
        seen.append((entry["box"], (datetime.date.fromisoformat(entry["due"]) - today).days))
        today = datetime.date.fromisoformat(entry["due"])
    assert seen == [(2, 1), (3, 3), (4, 7), (5, 21), (5, 21), (5, 21)]  # box 5 is the top


def test_a_missed_card_drops_to_box_1_due_today():
    entry = {"box": 4, "due": DAY.isoformat(), "reviews": 3, "lapses": 0}
    missed = review.schedule(entry, False, DAY)
    assert (missed["box"], missed["due"], missed["lapses"], missed["reviews"]) == (1, DAY.isoformat(), 1, 4)
    assert entry["box"] == 4, "schedule must not change the entry it was given"


def test_knowing_a_card_before_it_is_due_does_not_promote_it():
    entry = {"box": 3, "due": later(3).isoformat(), "reviews": 2, "lapses": 0}
    again = review.schedule(entry, True, DAY)
    assert (again["box"], again["due"]) == (3, later(3).isoformat())


def test_an_overdue_card_known_is_scheduled_from_today():
    entry = {"box": 2, "due": later(-5).isoformat(), "reviews": 1, "lapses": 0}
    assert review.schedule(entry, True, DAY)["due"] == later(3).isoformat()


# ---------------------------------------------------------------- what is due, in which order


def test_everything_is_due_at_first_in_course_order(state, deck):
    assert ids(review.due(deck, today=DAY)) == ids(deck)


def test_due_order_shakiest_first_then_most_overdue_then_new(state, deck):
    a1, a2, a3, b1, b2 = deck
    review.record(a1["id"], True, today=later(-10))          # box 2, due later(-9)
    review.record(a2["id"], True, today=later(-2))           # box 2, due later(-1)
    review.record(a3["id"], False, today=later(-1))          # box 1, due later(-1)
    review.record(b1["id"], True, today=DAY)                 # box 2, due tomorrow: not due
    order = review.due(deck, today=DAY)
    assert ids(order) == ids([a3, a1, a2, b2])


def test_new_cards_are_capped_per_session_but_reviews_are_not(state, deck):
    a1, a2 = deck[:2]
    review.record(a1["id"], False, today=DAY)
    review.record(a2["id"], False, today=DAY)
    assert ids(review.due(deck, new=1, today=DAY)) == ids([a1, a2, deck[2]])
    assert ids(review.due(deck, new=0, today=DAY)) == ids([a1, a2])


def test_known_cards_come_back_when_their_interval_is_over(state, deck):
    card = deck[0]
    review.record(card["id"], True, today=DAY)  # box 2: one day
    assert card["id"] not in [c["id"] for c in review.due(deck, today=DAY)]
    assert card["id"] in [c["id"] for c in review.due(deck, today=later(1))]


def test_counts_and_outlook(state, deck):
    for card in deck[:3]:
        review.record(card["id"], True, today=DAY)
    s = review.load_state()
    s["cards"][deck[0]["id"]]["box"] = review.LEARNED_BOX
    review.save_state(s)
    assert review.counts(deck, review.load_state(), DAY) == {"total": 5, "new": 2, "due": 2, "learned": 1}
    assert review.outlook(today=DAY) == f"Next review: 3 card(s) due tomorrow ({later(1).isoformat()})."
    assert review.describe_card(deck[0]["id"], today=DAY) == "box 4 of 5, due tomorrow"
    assert review.describe_card(deck[4]["id"], today=DAY) == "new"


# ---------------------------------------------------------------- the state file


def test_answers_persist_across_a_restart(state, deck):
    assert "box 2 of 5, next review tomorrow" in review.record(deck[0]["id"], True, today=DAY)
    assert not list(state.parent.glob("*.tmp")), "the atomic write left its temporary file"
    code = (f"from helpers import review; import datetime; "
            f"print(review.load_state()['cards']['{deck[0]['id']}']['box'])")
    fresh_process = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                   env=dict(os.environ, PYTHONPATH=str(ROOT)), check=True)
    assert fresh_process.stdout.strip() == "2"
    assert json.loads(state.read_text())["version"] == review.VERSION


def test_the_default_state_file_is_ignored_by_git(monkeypatch):
    monkeypatch.delenv("COURSE_STATE", raising=False)
    path = review.state_path()
    assert path == ROOT / ".course" / "review.json"
    ignored = subprocess.run(["git", "check-ignore", "-q", str(path)], cwd=ROOT).returncode
    assert ignored == 0, ".course/ must stay out of git"


def test_a_missing_state_file_is_a_fresh_start_without_fuss(state, recwarn):
    assert review.load_state() == {"version": review.VERSION, "cards": {}}
    assert not [w for w in recwarn if issubclass(w.category, review.ReviewStateWarning)]


@pytest.mark.parametrize("content", [
    b"",                                        # an empty file (a crash mid-write, elsewhere)
    b"{\"version\": 1, \"cards\": {",           # truncated JSON
    b"\xff\xfe not even text",                  # not UTF-8
    b"[1, 2, 3]",                               # JSON, but not a schedule
    b"{\"version\": 99, \"cards\": {}}",        # a format this course does not know
], ids=["empty", "truncated", "binary", "wrong-shape", "unknown-version"])
def test_a_corrupt_state_file_is_set_aside_and_the_review_goes_on(state, deck, content):
    state.parent.mkdir(parents=True)
    state.write_bytes(content)
    with pytest.warns(review.ReviewStateWarning, match="Starting a fresh schedule"):
        assert review.load_state()["cards"] == {}
    backups = list(state.parent.glob("review.json.corrupt-*"))
    assert len(backups) == 1 and backups[0].read_bytes() == content, "the damaged file must be kept"
    review.record(deck[0]["id"], True, today=DAY)
    assert review.load_state()["cards"][deck[0]["id"]]["box"] == 2


def test_damaged_entries_are_dropped_and_the_good_ones_kept(state, deck):
    good = {"box": 3, "due": later(3).isoformat(), "reviews": 2, "lapses": 0}
    state.parent.mkdir(parents=True)
    state.write_text(json.dumps({"version": 1, "cards": {
        deck[0]["id"]: good,
        deck[1]["id"]: {"box": 9, "due": DAY.isoformat()},     # no box 9
        deck[2]["id"]: {"box": 2, "due": "next tuesday"},      # not a date
        deck[3]["id"]: "box 2",                                # not an entry
    }}))
    with pytest.warns(review.ReviewStateWarning, match="3 damaged card entries"):
        loaded = review.load_state()
    assert loaded["cards"] == {deck[0]["id"]: good}
    assert json.loads(state.read_text())["cards"] == {deck[0]["id"]: good}, "the cleaned schedule is saved"
    assert list(state.parent.glob("review.json.corrupt-*"))


def test_a_directory_in_place_of_the_file_is_recovered_from(state):
    state.mkdir(parents=True)
    with pytest.warns(review.ReviewStateWarning):
        assert review.load_state()["cards"] == {}


def test_an_unwritable_location_warns_but_never_crashes(tmp_path, monkeypatch, deck):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("COURSE_STATE", str(blocker / "review.json"))
    with pytest.warns(review.ReviewStateWarning, match="Could not save"):
        message = review.record(deck[0]["id"], True, today=DAY)
    assert message.endswith("(not saved)")


# ---------------------------------------------------------------- the terminal drill


def scripted(*replies):
    queue = list(replies)

    def ask(_prompt):
        if not queue:
            raise EOFError
        return queue.pop(0)
    return ask


def test_drill_records_answers_and_repeats_missed_cards(state, deck):
    said = []
    alpha = [c for c in deck if c["lesson"] == "01"]
    # card 1 known, card 2 missed, card 3 known, then card 2 again: known
    knew, missed = review.drill(alpha, today=DAY, say=said.append,
                                ask=scripted("", "y", "", "n", "", "yes", "", "y"))
    assert (knew, missed) == (3, 1)
    entries = review.load_state()["cards"]
    assert [entries[c["id"]]["box"] for c in alpha] == [2, 2, 2]
    assert entries[alpha[1]["id"]]["lapses"] == 1
    text = "\n".join(said)
    assert "3 card(s) due today (3 new)" in text and "Alpha two?" in text and "→ Second answer." in text
    assert review.drill(alpha, today=DAY, say=said.append, ask=scripted()) == (0, 0)
    assert said[-1].startswith("Nothing is due today. Next review: 3 card(s) due tomorrow")


def test_drill_stops_cleanly_on_q_or_end_of_input_keeping_answers(state, deck):
    assert review.drill(deck, today=DAY, say=lambda _: None, ask=scripted("", "y", "q")) == (1, 0)
    assert review.drill(deck, today=DAY, say=lambda _: None, ask=scripted("", "maybe", "n", "")) == (0, 1)
    entries = review.load_state()["cards"]
    assert entries[deck[0]["id"]]["box"] == 2 and entries[deck[1]["id"]]["box"] == 1


def run_cli(*args, stdin="", state=None):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if state:
        env["COURSE_STATE"] = str(state)
    return subprocess.run([sys.executable, "-m", "helpers.review", "--cards", str(FIXTURES), *args],
                          input=stdin, capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)


def test_cli_drill_in_a_terminal_session(tmp_path):
    path = tmp_path / "review.json"
    done = run_cli("--lesson", "2", stdin="\ny\n\nn\n", state=path)
    assert done.returncode == 0, done.stderr
    assert "2 card(s) due today (2 new)" in done.stdout and "Beta answer." in done.stdout
    assert sorted(e["box"] for e in json.loads(path.read_text())["cards"].values()) == [1, 2]
    assert run_cli("--lesson", "9", state=path).returncode == 2


# ---------------------------------------------------------------- `make progress`


def test_progress_table_from_the_latest_results(state, deck, tmp_path):
    results = tmp_path / "results.jsonl"
    lines = [{"lesson": "01", "exercise": "ex_a", "status": "fail", "message": "", "time": 1},
             {"lesson": "01", "exercise": "ex_a", "status": "pass", "message": "", "time": 2},
             {"lesson": "01", "exercise": "ex_b", "status": "fail", "message": "", "time": 3}]
    results.write_text("\n".join(json.dumps(x) for x in lines) + "\nnot json\n")
    review.record(deck[0]["id"], True, today=DAY)
    rows = review.progress_rows(results, folder=FIXTURES, today=DAY,
                                exercises={"01": ["ex_a", "ex_b", "ex_c"], "03": ["ex_d"]})
    assert [r["lesson"] for r in rows] == ["01", "02", "03"]
    assert rows[0]["exercises"] == [("ex_a", "pass"), ("ex_b", "fail"), ("ex_c", "not done")]
    assert rows[0]["cards"] == {"total": 3, "new": 2, "due": 2, "learned": 0}
    assert rows[1]["exercises"] == [] and rows[2]["cards"]["total"] == 0
    text = review.progress_text(rows)
    assert "✓ pass" in text and "✗ fail" in text and "· not done" in text
    assert "Exercises: 1 of 4 pass, 1 fail, 2 not done." in text
    assert "Cards: 4 due today, 0 of 5 learned." in text


def test_cli_progress_runs_on_the_course_itself(tmp_path):
    done = run_cli("--progress", "--results", str(tmp_path / "none.jsonl"), state=tmp_path / "r.json")
    assert done.returncode == 0, done.stderr
    assert "Exercises: 0 of" in done.stdout


# ---------------------------------------------------------------- the printable deck


@pytest.mark.parametrize("layout", ["sheet", "page"])
def test_deck_holds_every_card_escaped(deck, layout):
    page = review.deck_html(deck, layout)
    assert f"<body class='{layout}'>" in page
    assert page.count("class='card'") == len(deck)
    assert "The first &lt;letter&gt; &amp; nothing else." in page  # escaped, not markup
    assert "<code>x</code>" in page


def test_deck_rejects_an_unknown_layout(deck):
    with pytest.raises(ValueError, match="layout"):
        review.deck_html(deck, "poster")


def test_cli_print_writes_the_html_deck(tmp_path):
    out = tmp_path / "deck" / "flashcards.html"
    done = run_cli("--print", "--no-pdf", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert out.exists() and out.read_text().count("class='card'") == 5


@pytest.mark.skipif(review.chromium() is None, reason="no Chromium to print with (make install-browser-test)")
def test_deck_prints_to_pdf_with_chromium(tmp_path):
    html_path, pdf_path = review.write_deck(tmp_path / "flashcards.html", folder=FIXTURES)
    assert pdf_path == tmp_path / "flashcards.pdf"
    assert pdf_path.read_bytes()[:5] == b"%PDF-"


# ---------------------------------------------------------------- the notebook widgets


@pytest.fixture
def shown(monkeypatch):
    """Collects what the cards display instead of sending it to a notebook."""
    import IPython.display

    out = []
    monkeypatch.setattr(IPython.display, "display", lambda obj, raw=False: out.append(obj))
    return out


def test_lesson_flashcards_are_a_widget_with_a_folded_fallback(state, shown):
    box = cards.flashcards("01", folder=FIXTURES)
    bundle = shown[0]
    assert "application/vnd.jupyter.widget-view+json" in bundle, "JupyterLab shows the widget"
    assert bundle["text/html"].count("<details") == 3, "a static viewer shows folded cards"
    assert "<code>x</code>" in bundle["text/html"]
    assert "course-card" in box.children[1]._dom_classes


def test_static_viewers_show_the_folded_cards(state, shown):
    import nbformat
    HTMLExporter = pytest.importorskip("nbconvert").HTMLExporter  # absent on the GPU image

    cards.flashcards("01", folder=FIXTURES)
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell('flashcards("01")')
    cell.outputs = [nbformat.v4.new_output("display_data", data=shown[0])]
    nb.cells.append(cell)
    page, _ = HTMLExporter().from_notebook_node(nb)
    assert "Alpha one: what is <code>x</code>?" in page and "<details" in page


def test_without_ipywidgets_the_cards_are_folded_html(state, shown, monkeypatch):
    from IPython.display import HTML

    monkeypatch.setattr(cards, "_widgets", lambda: None)
    assert cards.flashcards("01", folder=FIXTURES) is None
    assert isinstance(shown[0], HTML) and shown[0].data.count("<details") == 3


def test_turning_a_card_and_answering_records_it(state, shown, deck):
    import ipywidgets

    card = cards.CardWidget(ipywidgets, deck[0], "card 1 of 3")
    assert card.back.value == "" and card.answers.layout.display == "none"
    card.flip.click()
    assert "The first &lt;letter&gt;" in card.back.value and card.answers.layout.display == "flex"
    card.knew.click()
    assert "box 2 of 5" in card.verdict.value
    assert review.load_state()["cards"][deck[0]["id"]]["box"] == 2
    card.flip.click()
    assert card.back.value == "", "a second click turns the card back"


def test_review_session_brings_a_missed_card_back(state, shown, deck):
    session = cards.review(lessons=["01"], folder=FIXTURES)
    seen = []
    for knew in (True, False, True, True):  # the second card is missed, then comes back last
        current = session.slot.children[0]
        seen.append(current.children[0].value)
        answer = current.children[2].children[1].children[0 if knew else 1]  # the knew / didn't buttons
        current.children[2].children[0].click()  # show answer
        answer.click()
    assert "Alpha two?" in seen[1] and "Alpha two?" in seen[3]
    assert "Done for today" in session.header.value and session.slot.children == ()
    assert (session.knew, session.missed) == (3, 1)
    assert "Next review: 3 card(s) due tomorrow" in session.header.value


def test_the_review_notebook_is_not_a_lesson():
    from helpers.notebooks import lesson_notebooks

    assert (ROOT / "notebooks" / "review.ipynb").exists()
    assert all(p.name != "review.ipynb" for p in lesson_notebooks())


@pytest.mark.notebooks
def test_the_review_notebook_runs(tmp_path, monkeypatch):
    from helpers.grade import run_notebooks

    monkeypatch.setenv("COURSE_STATE", str(tmp_path / "review.json"))  # the kernel inherits it
    assert run_notebooks([ROOT / "notebooks" / "review.ipynb"], tmp_path / "results.jsonl") == 0
