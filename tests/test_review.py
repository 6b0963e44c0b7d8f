"""The flashcard review: Leitner scheduling, the state file, the drill, the deck, progress, widgets.

Cards come from small fixture files in tests/fixtures/cards, never from the lessons, and the
schedule and the check results live in temporary files (COURSE_STATE, COURSE_RESULTS), never
the learner's.
"""

import datetime
import errno
import json
import os
import pathlib
import shutil
import subprocess
import sys
import threading
import time
import types
import warnings

import pytest

from helpers import cards, review

FIXTURES = pathlib.Path(__file__).resolve().parent / "fixtures" / "cards"
V1_SCHEDULE = pathlib.Path(__file__).resolve().parent / "fixtures" / "review_v1.json"
ROOT = pathlib.Path(__file__).resolve().parent.parent
DAY = datetime.date(2025, 3, 10)


def later(days):
    return DAY + datetime.timedelta(days=days)


@pytest.fixture
def state(tmp_path, monkeypatch):
    """A private schedule file, also handed to anything that reads COURSE_STATE, and a private
    results file (COURSE_RESULTS) where no lesson is started yet."""
    path = tmp_path / "state" / "review.json"
    monkeypatch.setenv("COURSE_STATE", str(path))
    monkeypatch.setenv("COURSE_RESULTS", str(tmp_path / "results.jsonl"))
    return path


def start(*lessons):
    """Start lessons as a learner does: try an exercise in each (a pass or fail in the results file)."""
    from helpers import records

    for lesson in lessons:
        records.append(lesson, f"exercise_of_{lesson}", "fail")


def warned(record_list):
    return [str(w.message) for w in record_list if issubclass(w.category, review.ReviewStateWarning)]


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


def test_nothing_is_due_before_a_lesson_is_started(state, deck):
    assert review.due(deck, today=DAY) == []
    assert review.counts(deck, review.load_state(), DAY) == {"total": 5, "new": 5, "due": 0, "learned": 0}


def test_new_cards_come_only_from_started_lessons(state, deck):
    from helpers import records

    records.append("01", "untouched_stub", "not done")  # make grade finds every stub: not a start
    start("02")  # a check in lesson 02
    assert review.started_lessons(deck, review.load_state()) == {"02"}
    assert ids(review.due(deck, today=DAY)) == ids(deck[3:])
    review.record(deck[0]["id"], True, today=DAY)  # a card of lesson 01 answered in the lesson
    assert review.started_lessons(deck, review.load_state()) == {"01", "02"}
    assert ids(review.due(deck, today=DAY)) == ids(deck[1:])


def test_due_order_shakiest_first_then_most_overdue_then_new(state, deck):
    a1, a2, a3, b1, b2 = deck
    review.record(a1["id"], True, today=later(-10))          # box 2, due later(-9)
    review.record(a2["id"], True, today=later(-2))           # box 2, due later(-1)
    review.record(a3["id"], False, today=later(-1))          # box 1, due later(-1)
    review.record(b1["id"], True, today=DAY)                 # box 2, due tomorrow: not due
    order = review.due(deck, today=DAY)
    assert ids(order) == ids([a3, a1, a2, b2])


def test_new_cards_are_capped_per_day_across_sessions_but_reviews_are_not(state, deck):
    start("01", "02")
    first = review.due(deck, new=2, today=DAY)
    assert ids(first) == ids(deck[:2])
    for card in first:                                       # one session: both missed
        review.record(card["id"], False, today=DAY)
    assert review.new_today(review.load_state(), DAY) == 2
    # a second session the same day (a fresh read of the file): the reviews, no more new cards
    assert ids(review.due(deck, new=2, today=DAY)) == ids(deck[:2])
    assert ids(review.due(deck, new=3, today=DAY)) == ids(deck[:3])
    # the next day: the missed cards are still due, and two new ones
    assert ids(review.due(deck, new=2, today=later(1))) == ids(deck[:4])
    assert review.due(deck, new=None, today=DAY)[-1] == deck[4], "new=None: no limit"


def test_known_cards_come_back_when_their_interval_is_over(state, deck):
    card = deck[0]
    review.record(card["id"], True, today=DAY)  # box 2: one day
    assert card["id"] not in [c["id"] for c in review.due(deck, today=DAY)]
    assert card["id"] in [c["id"] for c in review.due(deck, today=later(1))]


def write_schedule(path, entries, version=review.VERSION, **extra):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"version": version, "cards": entries, **extra}))


def test_counts_and_outlook(state, deck):
    for card in deck[:3]:
        review.record(card["id"], True, today=DAY)
    entries = review.load_state()["cards"]
    entries[deck[0]["id"]]["box"] = review.LEARNED_BOX
    write_schedule(state, entries)
    assert review.counts(deck, review.load_state(), DAY) == {"total": 5, "new": 2, "due": 0, "learned": 1}
    assert review.counts(deck, review.load_state(), later(1)) == {"total": 5, "new": 2, "due": 3,
                                                                  "learned": 1}
    assert review.outlook(today=DAY) == f"Next review: 3 card(s) due tomorrow ({later(1).isoformat()})."
    assert review.describe_card(deck[0]["id"], today=DAY) == "box 4 of 5, due tomorrow"
    assert review.describe_card(deck[4]["id"], today=DAY) == "new"


# ---------------------------------------------------------------- undo


def test_undo_restores_the_cards_entry_exactly(state, deck):
    card = deck[0]["id"]
    review.record(card, True, today=later(-1))
    review.record(card, False, today=DAY)
    before = json.loads(state.read_text())["cards"][card]
    review.record(card, True, today=later(1))                 # the mis-click
    assert review.undo(today=later(1)) == "undone: box 1 of 5, due now"
    assert json.loads(state.read_text())["cards"][card] == before
    assert review.undo() is None, "only the last answer can be undone"


def test_undoing_a_new_cards_first_answer_makes_it_new_again(state, deck):
    review.record(deck[0]["id"], True, today=DAY)
    assert review.new_today(review.load_state(), DAY) == 1
    assert review.undo(deck[0]["id"], today=DAY) == "undone: the card is new again"
    assert review.load_state()["cards"] == {}
    assert review.new_today(review.load_state(), DAY) == 0, "the day's allowance of new cards is back"


def test_undo_never_takes_back_an_answer_given_elsewhere_since(state, deck):
    review.record(deck[0]["id"], True, today=DAY)             # the widget
    review.record(deck[1]["id"], True, today=DAY)             # then the terminal
    assert review.undo(deck[0]["id"], today=DAY) is None      # the widget's undo: too late
    assert set(review.load_state()["cards"]) == {deck[0]["id"], deck[1]["id"]}
    assert review.undo(deck[1]["id"], today=DAY) == "undone: the card is new again"


def test_drill_u_takes_the_last_answer_back_and_asks_again(state, deck):
    start("01")
    alpha = [c for c in deck if c["lesson"] == "01"]
    said = []
    # card 1 known, card 2 missed by mistake, u, card 2 known, card 3 known, u at the end, card 3 missed,
    # then card 3 again: known
    replies = scripted("", "y", "", "n", "u", "", "y", "", "y", "u", "", "n", "", "y", "")
    assert review.drill(alpha, today=DAY, say=said.append, ask=replies) == (3, 1)
    entries = review.load_state()["cards"]
    assert [(entries[c["id"]]["box"], entries[c["id"]]["lapses"]) for c in alpha] == [(2, 0), (2, 0), (2, 1)]
    text = "\n".join(said)
    assert text.count("undone: the card is new again") == 2
    assert "Knew 3, missed 1." in text
    said.clear()
    review.drill(alpha, today=later(1), say=said.append, ask=scripted("u", "q"))
    assert "  Nothing to undo." in said


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
    assert review.load_state() == {"version": review.VERSION, "cards": {}, "undo": None}
    assert not warned(recwarn)
    assert not review.read_only()


def listing(folder):
    return sorted(p.name for p in folder.iterdir() if not p.name.endswith(".lock"))


def assert_read_only_session(state, deck, content):
    """The schedule's file is as it was, nothing beside it was added or renamed, and answers are
    taken (the drill works) but not saved, without another warning."""
    folder = state.parent
    names = listing(folder)
    with warnings.catch_warnings(record=True) as later_warnings:
        warnings.simplefilter("always")
        assert review.read_only()
        assert review.record(deck[0]["id"], True, today=DAY).endswith("(not saved)")
        assert review.describe_card(deck[0]["id"], today=DAY) == "box 2 of 5, due tomorrow"
        said = []
        review.drill(deck[1:2], today=DAY, say=said.append, ask=scripted("", "y", ""), started={"01"})
        assert "Read-only: this session's answers are not saved (see the warning above)." in said
        assert review.undo(today=DAY) == "undone: the card is new again (not saved)"
    assert not warned(later_warnings), "the learner is told once"
    assert listing(folder) == names, "nothing renamed, moved or added"
    if content is not None:
        assert state.read_bytes() == content, "the file is never replaced"


@pytest.mark.parametrize("error", [PermissionError(errno.EACCES, "Permission denied"),
                                   OSError(errno.EIO, "Input/output error")], ids=["permission", "io"])
def test_an_unreadable_schedule_is_left_alone_and_the_session_is_read_only(state, deck, monkeypatch, error):
    write_schedule(state, {})
    content = state.read_bytes()
    real_read = pathlib.Path.read_bytes

    def failing_read(self):
        if self == state:
            raise error
        return real_read(self)

    monkeypatch.setattr(pathlib.Path, "read_bytes", failing_read)  # works as root too, unlike chmod 000
    with pytest.warns(review.ReviewStateWarning, match=f"could not be read \\({error.strerror}\\)") as w:
        assert review.load_state()["cards"] == {}
    message = warned(w)[0]
    assert str(state) in message and "answers are not saved" in message and "permissions" in message
    monkeypatch.setattr(pathlib.Path, "read_bytes", real_read)  # readable again: still read-only
    assert_read_only_session(state, deck, content)


def test_a_directory_in_place_of_the_file_is_left_alone(state, deck):
    state.mkdir(parents=True)
    (state / "inside").write_text("the learner's")
    with pytest.warns(review.ReviewStateWarning, match="is a folder, not a file.*COURSE_STATE"):
        assert review.load_state()["cards"] == {}
    assert_read_only_session(state, deck, None)
    assert state.is_dir() and (state / "inside").read_text() == "the learner's"


@pytest.mark.parametrize("content", [
    b"",                                        # an empty file
    b"{\"version\": 1, \"cards\": {",           # truncated JSON
    b"\xff\xfe not even text",                  # not UTF-8
    b"[1, 2, 3]",                               # JSON, but not a schedule
    b"{\"version\": \"two\", \"cards\": {}}",   # no version number
], ids=["empty", "truncated", "binary", "wrong-shape", "bad-version"])
def test_a_damaged_schedule_is_kept_in_place_and_the_session_is_read_only(state, deck, content):
    state.parent.mkdir(parents=True)
    state.write_bytes(content)
    with pytest.warns(review.ReviewStateWarning, match="Repair it in an editor, or delete it") as w:
        assert review.load_state()["cards"] == {}
    assert f"rm {state}" in warned(w)[0]
    assert_read_only_session(state, deck, content)


def test_damaged_entries_keep_the_file_and_the_good_entries_are_used(state, deck):
    good = {"box": 3, "due": later(3).isoformat(), "reviews": 2, "lapses": 0}
    write_schedule(state, {
        deck[2]["id"]: good,
        deck[3]["id"]: {"box": 9, "due": DAY.isoformat()},     # no box 9
        deck[4]["id"]: {"box": 2, "due": "next tuesday"},      # not a date
        "03:0000000000": "box 2",                              # not an entry
    })
    content = state.read_bytes()
    with pytest.warns(review.ReviewStateWarning, match="3 damaged card entries .*Repair or delete"):
        loaded = review.load_state()
    assert loaded["cards"] == {deck[2]["id"]: good}
    assert_read_only_session(state, deck, content)


def test_a_version_1_schedule_is_migrated_at_the_next_answer(state, deck, recwarn):
    state.parent.mkdir(parents=True)
    shutil.copy(V1_SCHEDULE, state)
    old = json.loads(V1_SCHEDULE.read_text())["cards"]
    loaded = review.load_state()
    assert loaded["version"] == review.VERSION == 3 and loaded["undo"] is None
    for card_id, entry in old.items():
        assert {k: loaded["cards"][card_id][k] for k in entry} == entry, "every v1 entry is kept as it was"
    assert loaded["cards"]["01:5ab5b4f4db"]["first"] == "2025-03-09"  # answered once: its first answer
    assert loaded["cards"]["01:a39bd3f91d"]["first"] is None          # answered 4 times: unknown
    assert state.read_bytes() == V1_SCHEDULE.read_bytes(), "reading never writes"
    assert ids(review.due(deck, today=DAY)) == ids(deck[1:3]), "the v1 answers start lesson 01"

    review.record(deck[2]["id"], True, today=DAY)
    saved = json.loads(state.read_text())
    assert saved["version"] == 3 and set(saved["cards"]) == set(old) | {deck[2]["id"]}
    assert saved["cards"]["09:0123456789"]["box"] == 5, "cards of other lessons are kept"
    assert not warned(recwarn) and not review.read_only()
    assert review.undo(today=DAY) == "undone: the card is new again"


def test_a_schedule_from_a_newer_version_is_read_only(state, deck):
    entry = {"box": 3, "due": later(3).isoformat(), "reviews": 2, "lapses": 0, "first": None}
    write_schedule(state, {deck[2]["id"]: entry}, version=review.VERSION + 1, streaks={"01": 3})
    content = state.read_bytes()
    with pytest.warns(review.ReviewStateWarning, match="newer version of the course.*git pull"):
        assert review.load_state()["cards"] == {deck[2]["id"]: entry}
    assert_read_only_session(state, deck, content)


def test_an_unwritable_location_warns_once_and_never_crashes(tmp_path, monkeypatch, deck):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("COURSE_STATE", str(blocker / "review.json"))
    with pytest.warns(review.ReviewStateWarning, match="could not be saved.*COURSE_STATE"):
        message = review.record(deck[0]["id"], True, today=DAY)
    assert message.endswith("(not saved)")
    with warnings.catch_warnings(record=True) as again:
        warnings.simplefilter("always")
        assert review.record(deck[0]["id"], True, today=later(1)) == (
            "knew it: box 3 of 5, next review in 3 days (not saved)"), "this session's answers still count"
    assert not warned(again)
    assert blocker.read_text() == "not a folder"


# ---------------------------------------------------------------- two writers at once


def test_a_writer_waits_for_the_lock(state, deck):
    with review._locked(review._path(state)):
        writer = threading.Thread(target=review.record, args=(deck[0]["id"], True), kwargs={"today": DAY})
        writer.start()
        writer.join(0.5)
        assert writer.is_alive() and not state.exists(), "the answer must wait for the lock"
    writer.join(30)
    assert not writer.is_alive() and review.load_state()["cards"][deck[0]["id"]]["box"] == 2


def test_a_stale_copy_in_memory_never_overwrites_another_writers_answers(state, deck):
    in_memory = review.load_state()  # e.g. the drill's, read at the start of its session
    code = f"from helpers import review; review.record({deck[0]['id']!r}, True)"
    subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=str(ROOT)), check=True)
    assert deck[0]["id"] not in in_memory["cards"]
    review.record(deck[1]["id"], False, today=DAY)
    assert set(review.load_state()["cards"]) == {deck[0]["id"], deck[1]["id"]}


WRITER = """
import pathlib, sys, time
from helpers import review
name, n, go = sys.argv[1], int(sys.argv[2]), pathlib.Path(sys.argv[3])
pathlib.Path(sys.argv[3] + "." + name).touch()  # ready
while not go.exists():
    time.sleep(0.005)
for i in range(n):
    review.record(f"{name}:{i}", i % 2 == 0)
"""


def test_two_processes_answering_at_once_both_keep_every_answer(state, tmp_path):
    go, n = tmp_path / "go", 60
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, name, str(n), str(go)], env=env)
               for name in ("widget", "terminal")]
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"go.{name}").exists() for name in ("widget", "terminal")):
        assert time.monotonic() < deadline and all(w.poll() is None for w in writers)
        time.sleep(0.01)
    go.touch()
    assert [w.wait(timeout=120) for w in writers] == [0, 0]
    saved = json.loads(state.read_text())["cards"]
    assert len(saved) == 2 * n and {k.split(":")[0] for k in saved} == {"widget", "terminal"}
    assert not list(state.parent.glob("*.tmp"))


def test_without_fcntl_the_lock_uses_msvcrt(state, deck, monkeypatch):
    calls = []
    fake = types.SimpleNamespace(LK_LOCK=1, LK_UNLCK=0, locking=lambda fd, mode, n: calls.append(mode))
    monkeypatch.setattr(review, "fcntl", None)
    monkeypatch.setattr(review, "msvcrt", fake, raising=False)
    review.record(deck[0]["id"], True, today=DAY)
    assert calls == [fake.LK_LOCK, fake.LK_UNLCK]
    assert review.load_state()["cards"][deck[0]["id"]]["box"] == 2


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
    start("01")
    alpha = [c for c in deck if c["lesson"] == "01"]
    # card 1 known, card 2 missed, card 3 known, then card 2 again: known
    knew, missed = review.drill(alpha, today=DAY, say=said.append,
                                ask=scripted("", "y", "", "n", "", "yes", "", "y"))
    assert (knew, missed) == (3, 1)
    entries = review.load_state()["cards"]
    assert [entries[c["id"]]["box"] for c in alpha] == [2, 2, 2]
    assert entries[alpha[1]["id"]]["lapses"] == 1
    text = "\n".join(said)
    assert "3 card(s) for today (3 new)" in text and "Alpha two?" in text and "→ Second answer." in text
    assert review.drill(alpha, today=DAY, say=said.append, ask=scripted()) == (0, 0)
    assert said[-1].startswith("Nothing is due today. Next review: 3 card(s) due tomorrow")


def test_drill_says_where_new_cards_come_from(state, deck):
    said = []
    assert review.drill(deck, today=DAY, say=said.append, ask=scripted()) == (0, 0)
    assert said == ["Nothing is due today. New cards come from the lessons you have started "
                    "(run a check, or answer a card)."]


def test_drill_stops_cleanly_on_q_or_end_of_input_keeping_answers(state, deck):
    start("01", "02")
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
    path, results = tmp_path / "review.json", tmp_path / "results.jsonl"
    results.write_text(json.dumps({"lesson": "02", "exercise": "e", "status": "fail"}) + "\n")
    done = run_cli("--lesson", "2", "--results", str(results), stdin="\ny\n\nn\n", state=path)
    assert done.returncode == 0, done.stderr
    assert "2 card(s) for today (2 new)" in done.stdout and "Beta answer." in done.stdout
    assert sorted(e["box"] for e in json.loads(path.read_text())["cards"].values()) == [1, 2]
    assert run_cli("--lesson", "9", state=path).returncode == 2


def test_cli_drill_on_a_damaged_schedule_warns_and_leaves_it(tmp_path):
    path, results = tmp_path / "review.json", tmp_path / "results.jsonl"
    path.write_text("{not json")
    results.write_text(json.dumps({"lesson": "02", "exercise": "e", "status": "fail"}) + "\n")
    done = run_cli("--lesson", "2", "--results", str(results), stdin="\ny\n\ny\n\n", state=path)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("ReviewStateWarning") == 1 and "is not valid JSON" in done.stderr
    assert "Read-only" in done.stdout and "Knew 2, missed 0." in done.stdout
    assert path.read_text() == "{not json"
    assert sorted(os.listdir(tmp_path)) == ["results.jsonl", "review.json"], "nothing renamed or added"


# ---------------------------------------------------------------- `make progress`


def test_progress_table_from_the_latest_results(state, deck, tmp_path):
    results = tmp_path / "results.jsonl"
    lines = [{"lesson": "01", "exercise": "ex_a", "status": "fail", "message": "", "time": 1},
             {"lesson": "01", "exercise": "ex_a", "status": "pass", "message": "", "time": 2},
             {"lesson": "01", "exercise": "ex_b", "status": "fail", "message": "", "time": 3}]
    results.write_text("\n".join(json.dumps(x) for x in lines) + "\nnot json\n")
    review.record(deck[0]["id"], True, today=later(-1))       # due today
    review.record(deck[1]["id"], True, today=DAY)             # due tomorrow
    rows = review.progress_rows(results, folder=FIXTURES, today=DAY,
                                exercises={"01": ["ex_a", "ex_b", "ex_c"], "03": ["ex_d"]})
    assert [r["lesson"] for r in rows] == ["01", "02", "03"]
    assert rows[0]["exercises"] == [("ex_a", "pass"), ("ex_b", "fail"), ("ex_c", "not done")]
    assert rows[0]["cards"] == {"total": 3, "new": 1, "due": 1, "learned": 0}
    assert rows[1]["exercises"] == [] and rows[2]["cards"]["total"] == 0
    text = review.progress_text(rows)
    assert "✓ pass" in text and "✗ fail" in text and "· not done" in text
    header, _, first, *_ = text.splitlines()
    assert header.endswith("cards: new  due  learned  total")
    assert first.split()[-4:] == ["1", "1", "0", "3"], "lesson 01: 1 new, 1 due, 0 learned of 3"
    assert "Exercises: 1 of 4 pass, 1 fail, 2 not done." in text
    assert "Cards: 1 due today, 0 of 5 learned, 3 new (not seen yet)." in text


def test_cli_progress_runs_on_the_course_itself(tmp_path):
    done = run_cli("--progress", "--results", str(tmp_path / "none.jsonl"), state=tmp_path / "r.json")
    assert done.returncode == 0, done.stderr
    assert "Exercises: 0 of" in done.stdout and "0 due today" in done.stdout


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
    start("01")
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


def test_a_cards_undo_button_takes_the_answer_back(state, shown, deck):
    import ipywidgets

    card = cards.CardWidget(ipywidgets, deck[0], "card 1 of 3")
    assert card.undo.layout.display == "none"
    card.flip.click()
    card.missed.click()
    assert card.undo.layout.display == "flex" and "course-card-undo" in card.undo._dom_classes
    card.undo.click()
    assert "the card is new again" in card.verdict.value and card.answers.layout.display == "flex"
    assert review.load_state()["cards"] == {}
    card.knew.click()
    review.record(deck[1]["id"], True)  # answered elsewhere since: that one is not taken back
    card.undo.click()
    assert "nothing to undo" in card.verdict.value
    assert set(review.load_state()["cards"]) == {deck[0]["id"], deck[1]["id"]}


def test_review_session_undo_shows_the_card_again(state, shown, deck):
    start("01")
    session = cards.review(lessons=["01"], folder=FIXTURES)

    def answer(knew):
        current = session.slot.children[0]
        current.children[2].children[0].click()  # show answer
        current.children[2].children[1].children[0 if knew else 1].click()

    def front():
        return session.slot.children[0].children[0].value

    assert session.undo.layout.display == "none"
    answer(True)
    answer(False)                                              # a mis-click on "Alpha two?"
    assert "Alpha three?" in front() and session.undo.layout.display == "flex"
    session.undo.click()
    assert "Alpha two?" in front() and "the card is new again" in session.header.value
    assert (session.knew, session.missed, len(session.queue)) == (1, 0, 1)
    assert session.undo.layout.display == "none"
    answer(True)
    answer(True)
    assert "Done for today" in session.header.value
    session.undo.click()                                       # the last card, from the done screen
    assert "Alpha three?" in front() and "course-review-done" not in session.header._dom_classes
    answer(True)
    assert (session.knew, session.missed) == (3, 0)
    assert [e["box"] for e in review.load_state()["cards"].values()] == [2, 2, 2]


def test_review_session_missed_card_undone_and_an_answer_from_elsewhere(state, shown, deck):
    start("01")
    session = cards.review(lessons=["01"], folder=FIXTURES)
    front = lambda: session.slot.children[0].children[0].value

    def answer(knew):
        current = session.slot.children[0]
        current.children[2].children[0].click()
        current.children[2].children[1].children[0 if knew else 1].click()

    answer(False)                                              # Alpha one missed: it comes back last
    assert "Alpha two?" in front() and len(session.queue) == 2
    session.undo.click()
    assert "Alpha one" in front() and [c["index"] for c in session.queue] == [1, 2]
    answer(True)
    review.record(deck[4]["id"], True)                        # the terminal answers meanwhile
    session.undo.click()
    assert "Nothing to undo" in session.header.value and "Alpha two?" in front(), "the card stays"
    assert (session.knew, session.missed) == (1, 0) and len(review.load_state()["cards"]) == 2


def test_the_review_notebook_is_not_a_lesson():
    from helpers.notebooks import lesson_notebooks

    assert (ROOT / "notebooks" / "review.ipynb").exists()
    assert all(p.name != "review.ipynb" for p in lesson_notebooks())


@pytest.mark.notebooks
def test_the_review_notebook_runs(tmp_path, monkeypatch):
    from helpers.grade import run_notebooks

    monkeypatch.setenv("COURSE_STATE", str(tmp_path / "review.json"))  # the kernel inherits it
    assert run_notebooks([ROOT / "notebooks" / "review.ipynb"], tmp_path / "results.jsonl") == 0


# ---------------------------------------------------------------- a record from before the renumbering

BEFORE_RENUMBERING = pathlib.Path(__file__).resolve().parent / "fixtures" / "before_renumbering"


def test_a_schedule_and_results_from_before_the_renumbering_keep_every_answer(state, recwarn):
    """A learner's schedule and check results made when lesson 09 was the capstone and lesson 10 the
    Hopper lesson: each card's history moves to its card's new id, and each result to its new lesson."""
    from helpers import records

    state.parent.mkdir(parents=True)
    shutil.copy(BEFORE_RENUMBERING / "review.json", state)
    shutil.copy(BEFORE_RENUMBERING / "results.jsonl", os.environ["COURSE_RESULTS"])
    old = json.loads((BEFORE_RENUMBERING / "review.json").read_text())["cards"]
    loaded = review.load_state()
    assert not warned(recwarn) and loaded["version"] == 3
    moved = {"09:203b39f142": "11:203b39f142",      # RoPE: the capstone is lesson 11
             "09:812dd485b6": "05:812dd485b6",      # Mish: GroupNorm + Mish is lesson 05's
             "09:782a6c081e": "10:a7372686dc",      # attention on the projection's layout, reworded
             "10:27c3270975": "09:27c3270975"}      # TMA: the Hopper matmul is lesson 09
    for before, after in moved.items():
        assert loaded["cards"][after] == old[before], before
    assert loaded["cards"]["07:818b60a0de"] == old["07:818b60a0de"], "unmoved lessons are untouched"
    assert loaded["cards"]["09:90d116a1fa"] == old["09:90d116a1fa"], "a card whose id did not change"
    assert loaded["cards"]["10:794372ac62"] == old["10:794372ac62"], "lesson 10's attention cards stay"
    # Two old cards merged into lesson 09's descriptor card: it keeps the history answered last, and
    # the other entry stays in the file under its old id.
    assert loaded["cards"]["09:59ae22a96b"] == old["09:ab0eaabd5b"]
    assert loaded["cards"]["10:59ae22a96b"] == old["10:59ae22a96b"]
    assert loaded["undo"]["card"] == "09:27c3270975", "the last answer can still be undone"
    deck_ids = {card["id"] for card in cards.flashcard_list()}
    assert set(review.RENAMED_CARDS.values()) <= deck_ids, "every renamed card is in today's deck"
    assert not set(review.RENAMED_CARDS) & deck_ids, "no old id is a card of today's deck"

    found = records.latest()
    assert {name: rec["lesson"] for name, rec in found.items()} == {
        "rope_qk": "11", "groupnorm_mish": "05", "tma_matmul": "09", "softmax_long": "10",
        "decoder_block_fused": "11"}
    assert (BEFORE_RENUMBERING / "results.jsonl").read_bytes() == pathlib.Path(
        os.environ["COURSE_RESULTS"]).read_bytes(), "reading never rewrites the results"
    rows = {row["lesson"]: dict(row["exercises"]) for row in review.progress_rows()}
    assert rows["11"]["rope_qk"] == "pass" and rows["05"]["groupnorm_mish"] == "fail"
    assert rows["09"]["tma_matmul"] == "pass" and rows["10"]["softmax_long"] == "fail"
    assert {"05", "09", "10"} <= review.started_lessons(cards.flashcard_list(), loaded)

    review.undo(today=datetime.date(2026, 11, 25))                 # saves: the file is now version 3
    saved = json.loads(state.read_text())
    assert saved["version"] == 3 and saved["cards"]["09:27c3270975"]["box"] == 3
    assert saved["cards"]["11:203b39f142"] == old["09:203b39f142"]
