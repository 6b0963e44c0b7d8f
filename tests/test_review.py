"""The flashcard review: FSRS scheduling, the state file, the drill, the deck, progress, widgets.

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
    results file (COURSE_RESULTS) where no lesson is started yet. An answer given "now" is given at
    noon today: a learning step of minutes, taken just before midnight, would be due tomorrow."""
    path = tmp_path / "state" / "review.json"
    monkeypatch.setenv("COURSE_STATE", str(path))
    monkeypatch.setenv("COURSE_RESULTS", str(tmp_path / "results.jsonl"))
    moment = review._moment
    monkeypatch.setattr(review, "_moment", lambda today=None: moment(today or datetime.date.today()))
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


# ---------------------------------------------------------------- the FSRS schedule


def waits(entry, today):
    return (datetime.date.fromisoformat(entry["due"]) - today).days


def test_a_new_card_known_waits_two_days():
    entry = review.schedule(None, True, DAY)
    assert (entry["due"], entry["reviews"], entry["lapses"], entry["first"], entry["last"]) == (
        later(2).isoformat(), 1, 0, DAY.isoformat(), DAY.isoformat())
    assert [outcome for _, outcome in entry["answers"]] == ["knew"]
    assert review.status(entry, DAY) == "learning"


def test_each_recall_on_time_waits_longer_until_the_card_is_learned():
    entry, today, seen = None, DAY, []
    for _ in range(5):
        entry = review.schedule(entry, True, today)
        seen.append(waits(entry, today))
        today = datetime.date.fromisoformat(entry["due"])
    assert seen == sorted(seen) and seen[0] == 2 and seen[-1] > 100, seen
    assert seen[2] >= review.LEARNED_DAYS and review.status(entry, DAY) == "learned"


def test_a_missed_card_is_due_again_today_and_waits_less_after():
    entry = review.schedule(review.schedule(None, True, later(-2)), True, DAY)   # waits 11 days
    missed = review.schedule(entry, False, later(11))
    assert (missed["due"], missed["lapses"], missed["reviews"]) == (later(11).isoformat(), 1, 3)
    assert review.status(missed, later(11)) == "due"
    again = review.schedule(missed, True, later(11))
    assert 0 < waits(again, later(11)) < 11, "relearnt: a shorter wait than before the miss"
    assert len(entry["answers"]) == 2, "schedule must not change the entry it was given"


def test_knowing_a_card_before_it_is_due_counts_for_less():
    entry = review.schedule(None, True, later(-2))                                # due DAY
    on_time = review.schedule(entry, True, DAY)
    early = review.schedule(entry, True, later(-1))
    assert waits(early, later(-1)) < waits(on_time, DAY)


def test_an_overdue_card_known_is_scheduled_from_today():
    entry = review.schedule(None, True, later(-7))                                # due 5 days ago
    assert waits(review.schedule(entry, True, DAY), DAY) > 2


def test_replaying_a_cards_answers_gives_its_schedule():
    entry = None
    for day, knew in ((-30, True), (-28, False), (-28, True), (-20, True), (0, True)):
        entry = review.schedule(entry, knew, later(day))
    assert review.replay(entry).to_dict() == {"card_id": 0, **entry["fsrs"]}
    assert json.loads(json.dumps(entry)) == entry, "an entry is plain JSON"


# ---------------------------------------------------------------- what is due, in which order


def test_nothing_is_due_before_a_lesson_is_started(state, deck):
    assert review.due(deck, today=DAY) == []
    assert review.counts(deck, review.load_state(), DAY) == {"total": 5, "new": 5, "due": 0, "learning": 0,
                                                             "learned": 0}


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
    review.record(a1["id"], True, today=later(-10))          # due later(-8)
    review.record(a2["id"], True, today=later(-3))           # due later(-1), as stable as a1
    review.record(a3["id"], False, today=later(-1))          # missed: the least stable, due later(-1)
    review.record(b1["id"], True, today=DAY)                 # due in 2 days: not due
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
    review.record(card["id"], True, today=DAY)  # two days
    assert card["id"] not in [c["id"] for c in review.due(deck, today=later(1))]
    assert card["id"] in [c["id"] for c in review.due(deck, today=later(2))]


def write_schedule(path, entries, version=review.VERSION, **extra):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"version": version, "cards": entries, **extra}))


def test_counts_add_up_and_outlook(state, deck):
    for day in (-13, -11, 0):                                  # known three times on time: learned
        review.record(deck[0]["id"], True, today=later(day))
    review.record(deck[1]["id"], True, today=DAY)              # learning, due in 2 days
    review.record(deck[2]["id"], False, today=DAY)             # missed: due today
    counted = review.counts(deck, review.load_state(), DAY)
    assert counted == {"total": 5, "new": 2, "due": 1, "learning": 1, "learned": 1}
    assert sum(counted.values()) == 2 * counted["total"], "every card counts in one column"
    assert review.counts(deck, review.load_state(), later(2))["due"] == 2
    assert review.outlook(today=DAY) == f"Next review: 1 card(s) due in 2 days ({later(2).isoformat()})."
    assert review.describe_card(deck[0]["id"], today=DAY).startswith("learned, due in ")
    assert review.describe_card(deck[1]["id"], today=DAY) == "learning, due in 2 days"
    assert review.describe_card(deck[2]["id"], today=DAY) == "due now"
    assert review.describe_card(deck[4]["id"], today=DAY) == "new"


# ---------------------------------------------------------------- undo


def test_undo_restores_the_cards_entry_exactly(state, deck):
    card = deck[0]["id"]
    review.record(card, True, today=later(-1))
    review.record(card, False, today=DAY)
    before = json.loads(state.read_text())["cards"][card]
    review.record(card, True, today=later(1))                 # the mis-click
    assert review.undo(today=later(1)) == "undone: due now"
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
    assert [(len(entries[c["id"]]["answers"]), entries[c["id"]]["lapses"]) for c in alpha] == [
        (1, 0), (1, 0), (2, 1)]
    text = "\n".join(said)
    assert text.count("undone: the card is new again") == 2
    assert "Knew 3, missed 1." in text
    said.clear()
    review.drill(alpha, today=later(1), say=said.append, ask=scripted("u", "q"))
    assert "  Nothing to undo." in said


# ---------------------------------------------------------------- the state file


def test_answers_persist_across_a_restart(state, deck):
    assert "knew it: next review in 2 days" in review.record(deck[0]["id"], True, today=DAY)
    assert not list(state.parent.glob("*.tmp")), "the atomic write left its temporary file"
    code = (f"from helpers import review; import datetime; "
            f"print(review.load_state()['cards']['{deck[0]['id']}']['due'])")
    fresh_process = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                   env=child_env(), check=True)
    assert fresh_process.stdout.strip() == later(2).isoformat()
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
        assert review.describe_card(deck[0]["id"], today=DAY) == "learning, due in 2 days"
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
    good = review.schedule(None, True, later(-1))
    write_schedule(state, {
        deck[2]["id"]: good,
        deck[3]["id"]: {**good, "fsrs": {**good["fsrs"], "state": 9}},  # no FSRS state 9
        deck[4]["id"]: {**good, "due": "next tuesday"},                   # not a date
        "03:0000000000": "box 2",                                         # not an entry
    })
    content = state.read_bytes()
    with pytest.warns(review.ReviewStateWarning, match="3 damaged card entries .*Repair or delete"):
        loaded = review.load_state()
    assert loaded["cards"] == {deck[2]["id"]: good}
    assert_read_only_session(state, deck, content)


def test_damaged_entries_of_an_older_format_are_reported_not_migrated(state, deck):
    good = {"box": 2, "due": DAY.isoformat(), "reviews": 1, "lapses": 0, "last": later(-1).isoformat()}
    write_schedule(state, {
        deck[2]["id"]: good,
        deck[3]["id"]: {**good, "reviews": "three"},            # a count that is not a number
        deck[4]["id"]: {**good, "box": 7},                      # no box 7
    }, version=3, undo={"card": deck[3]["id"], "before": None, "after": {**good, "reviews": "three"}})
    content = state.read_bytes()
    with pytest.warns(review.ReviewStateWarning, match="2 damaged card entries .*Repair or delete"):
        loaded = review.load_state()
    assert list(loaded["cards"]) == [deck[2]["id"]] and loaded["cards"][deck[2]["id"]]["leitner"] == good
    assert_read_only_session(state, deck, content)


def test_a_version_1_schedule_is_migrated_at_the_next_answer(state, deck, recwarn):
    state.parent.mkdir(parents=True)
    shutil.copy(V1_SCHEDULE, state)
    old = json.loads(V1_SCHEDULE.read_text())["cards"]
    loaded = review.load_state()
    assert loaded["version"] == review.VERSION == 4 and loaded["undo"] is None
    for card_id, entry in old.items():
        kept = loaded["cards"][card_id]["leitner"]
        assert {k: kept[k] for k in entry} == entry, "every v1 entry is kept as it was"
    assert loaded["cards"]["01:5ab5b4f4db"]["first"] == "2025-03-09"  # answered once: its first answer
    assert loaded["cards"]["01:a39bd3f91d"]["first"] is None          # answered 4 times: unknown
    assert (loaded["cards"]["01:a39bd3f91d"]["reviews"], loaded["cards"]["01:a39bd3f91d"]["lapses"]) == (4, 1)
    assert state.read_bytes() == V1_SCHEDULE.read_bytes(), "reading never writes"
    # replayed through FSRS, both answered cards fall due the day after; the v1 answers start
    # lesson 01, so its third card comes as a new one
    assert ids(review.due(deck, today=DAY)) == ids(deck[2:3]), "the v1 answers start lesson 01"
    assert sorted(ids(review.due(deck, new=0, today=later(1)))) == sorted(ids(deck[:2]))

    review.record(deck[2]["id"], True, today=DAY)
    saved = json.loads(state.read_text())
    assert saved["version"] == 4 and set(saved["cards"]) == set(old) | {deck[2]["id"]}
    assert saved["cards"]["09:0123456789"]["leitner"]["box"] == 5, "cards of other lessons are kept"
    assert not warned(recwarn) and not review.read_only()
    assert review.undo(today=DAY) == "undone: the card is new again"


def test_a_schedule_from_a_newer_version_is_read_only(state, deck):
    entry = review.schedule(None, True, DAY)
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
            "knew it before it was due: next review in 7 days (not saved)"), "this session's answers count"
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
    assert not writer.is_alive() and review.load_state()["cards"][deck[0]["id"]]["reviews"] == 1


def test_a_stale_copy_in_memory_never_overwrites_another_writers_answers(state, deck):
    in_memory = review.load_state()  # e.g. the drill's, read at the start of its session
    code = f"from helpers import review; review.record({deck[0]['id']!r}, True)"
    subprocess.run([sys.executable, "-c", code], env=child_env(), check=True)
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
    env = child_env()
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
    assert review.load_state()["cards"][deck[0]["id"]]["reviews"] == 1


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
    assert [entries[c["id"]]["answers"][-1][1] for c in alpha] == ["knew"] * 3
    assert entries[alpha[1]["id"]]["lapses"] == 1
    text = "\n".join(said)
    assert "3 card(s) for today (3 new)" in text and "Alpha two?" in text and "→ Second answer." in text
    assert review.drill(alpha, today=DAY, say=said.append, ask=scripted()) == (0, 0)
    assert "Knew 3, missed 1. Nothing more is due today." in text
    assert said[-1].startswith("Nothing is due today. Next review: 1 card(s) due tomorrow")  # the missed one


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
    assert entries[deck[0]["id"]]["lapses"] == 0 and entries[deck[1]["id"]]["lapses"] == 1


def child_env():
    """The environment of a child Python: this checkout first on its path, then whatever was there."""
    path = os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))
    return dict(os.environ, PYTHONPATH=path)


def run_cli(*args, stdin="", state=None):
    env = child_env()
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
    assert sorted(e["lapses"] for e in json.loads(path.read_text())["cards"].values()) == [0, 1]
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
    review.record(deck[0]["id"], True, today=later(-2))       # due today
    review.record(deck[1]["id"], True, today=DAY)             # learning: due in 2 days
    rows = review.progress_rows(results, folder=FIXTURES, today=DAY,
                                exercises={"01": ["ex_a", "ex_b", "ex_c"], "03": ["ex_d"]})
    assert [r["lesson"] for r in rows] == ["01", "02", "03"]
    assert rows[0]["exercises"] == [("ex_a", "pass"), ("ex_b", "fail"), ("ex_c", "not done")]
    assert rows[0]["cards"] == {"total": 3, "new": 1, "due": 1, "learning": 1, "learned": 0}
    assert rows[1]["exercises"] == [] and rows[2]["cards"]["total"] == 0
    text = review.progress_text(rows)
    assert "✓ pass" in text and "✗ fail" in text and "· not done" in text
    header, _, first, *_ = text.splitlines()
    assert header.endswith("cards: new  due  learning  learned  total")
    assert first.split()[-5:] == ["1", "1", "1", "0", "3"], "01: 1 new, 1 due, 1 learning, 0 learned of 3"
    assert "Exercises: 1 of 4 pass, 1 fail, 2 not done." in text
    assert ("Cards, 5 in all: 3 new (not seen yet), 1 due today, 1 learning, 0 learned (waiting 21 days or "
            "more).") in text


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


def anki_notes(apkg, tmp_path):
    """(fields, tags) of every note in an .apkg: a zip holding Anki's SQLite collection."""
    import sqlite3
    import zipfile

    with zipfile.ZipFile(apkg) as archive:
        archive.extract("collection.anki2", tmp_path)
    db = sqlite3.connect(tmp_path / "collection.anki2")
    try:
        rows = db.execute("select flds, tags from notes").fetchall()
        decks = " ".join(row[0] for row in db.execute("select decks from col"))
    finally:
        db.close()
    return [(flds.split("\x1f"), tags.split()) for flds, tags in rows], decks


def test_cli_print_writes_an_anki_deck_holding_every_card(tmp_path, deck):
    out = tmp_path / "deck" / "flashcards.html"
    done = run_cli("--print", "--no-pdf", "--out", str(out))
    assert done.returncode == 0, done.stderr
    apkg = out.with_suffix(".apkg")
    assert f"wrote {apkg}" in done.stdout
    notes, decks = anki_notes(apkg, tmp_path)
    assert len(notes) == len(deck), "one note per card"
    assert sorted((f[0], f[1], tags) for f, tags in notes) == sorted(
        (cards.inline_html(c["front"]), cards.inline_html(c["back"]), [f"lesson{c['lesson']}"]) for c in deck)
    assert "Fast GPU kernels::01 Alpha" in decks and "Fast GPU kernels::02 Beta, titled" in decks


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


def test_lesson_flashcards_show_folded_cards_then_the_widget_and_return_nothing(state, shown):
    assert cards.flashcards("01", folder=FIXTURES) is None, "a returned widget would be shown twice"
    static, live = shown
    assert list(static) == ["text/html"] and static["text/html"].count("<details") == 3
    assert "<code>x</code>" in static["text/html"] and "class='course-static'" in static["text/html"]
    assert cards.STATIC_STYLE in static["text/html"], "the rule that shows one of the two"
    assert "application/vnd.jupyter.widget-view+json" in live, "JupyterLab shows the widget"
    assert live["text/plain"] == cards.WIDGET_NOTE, "not the widget's long repr"


def test_static_viewers_show_the_folded_cards(state, shown):
    import nbformat
    HTMLExporter = pytest.importorskip("nbconvert").HTMLExporter  # absent on the GPU image

    cards.flashcards("01", folder=FIXTURES)
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell('flashcards("01")')
    cell.outputs = [nbformat.v4.new_output("display_data", data=bundle) for bundle in shown]
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
    assert "next review in 2 days" in card.verdict.value
    assert "learning, due in 2 days" in card.front.value, "the card's label says what it is now"
    assert review.load_state()["cards"][deck[0]["id"]]["reviews"] == 1
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
    assert "Nothing more is due today. Next review: 1 card(s) due tomorrow" in session.header.value


def test_a_cards_undo_button_takes_the_answer_back(state, shown, deck):
    import ipywidgets

    card = cards.CardWidget(ipywidgets, deck[0], "card 1 of 3")
    assert card.undo.layout.display == "none"
    card.flip.click()
    card.missed.click()
    assert "· due now" in card.front.value, "answered: the label is no longer new"
    assert card.undo.layout.display == "flex" and "course-card-undo" in card.undo._dom_classes
    card.undo.click()
    assert "the card is new again" in card.verdict.value and card.answers.layout.display == "flex"
    assert "· new" in card.front.value, "the label is back to new"
    assert review.load_state()["cards"] == {}
    card.knew.click()
    review.record(deck[1]["id"], True)  # answered elsewhere since: that one is not taken back
    card.undo.click()
    assert "nothing to undo" in card.verdict.value
    assert set(review.load_state()["cards"]) == {deck[0]["id"], deck[1]["id"]}


def test_a_cell_ending_in_the_review_session_shows_it_once(state, shown, deck):
    from IPython.core.formatters import DisplayFormatter

    start("01")
    session = cards.review(lessons=["01"], folder=FIXTURES)
    assert len(shown) == 2, "the folded cards and the widget, displayed by review()"
    assert DisplayFormatter().format(session) == ({}, {}), "the session itself shows nothing more"


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
    assert [e["answers"][-1][1] for e in review.load_state()["cards"].values()] == ["knew"] * 3


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
    assert not warned(recwarn) and loaded["version"] == review.VERSION
    kept = {card_id: entry.get("leitner") for card_id, entry in loaded["cards"].items()}  # as boxes kept it
    moved = {"09:203b39f142": "11:203b39f142",      # RoPE: the capstone is lesson 11
             "09:812dd485b6": "05:812dd485b6",      # Mish: GroupNorm + Mish is lesson 05's
             "09:782a6c081e": "10:a7372686dc",      # attention on the projection's layout, reworded
             "10:27c3270975": "09:27c3270975"}      # TMA: the Hopper matmul is lesson 09
    for before, after in moved.items():
        assert kept[after] == old[before], before
    assert kept["07:818b60a0de"] == old["07:818b60a0de"], "unmoved lessons are untouched"
    assert kept["09:90d116a1fa"] == old["09:90d116a1fa"], "a card whose id did not change"
    assert kept["10:794372ac62"] == old["10:794372ac62"], "lesson 10's attention cards stay"
    # Two old cards merged into lesson 09's descriptor card: it keeps the history answered last, and
    # the other entry stays in the file under its old id.
    assert kept["09:59ae22a96b"] == old["09:ab0eaabd5b"]
    assert kept["10:59ae22a96b"] == old["10:59ae22a96b"]
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

    review.undo(today=datetime.date(2026, 11, 25))                 # saves: the file is now version 4
    saved = json.loads(state.read_text())
    assert saved["version"] == review.VERSION and saved["cards"]["09:27c3270975"]["leitner"]["box"] == 3
    assert saved["cards"]["11:203b39f142"]["leitner"] == old["09:203b39f142"]


# ---------------------------------------------------------------- a record of the Leitner boxes (version 3)

LEITNER_RECORD = pathlib.Path(__file__).resolve().parent / "fixtures" / "leitner_v3" / "review.json"


def test_a_leitner_record_moves_to_fsrs_keeping_every_answer(state, recwarn):
    """A schedule of version 3 (the Leitner boxes, the format before FSRS): every card keeps its
    whole entry, its counts and days, and gets its FSRS schedule by replaying the answers its box
    implies; the last answer can still be undone, and new answers add to the history."""
    state.parent.mkdir(parents=True)
    shutil.copy(LEITNER_RECORD, state)
    old = json.loads(LEITNER_RECORD.read_text())
    loaded = review.load_state()
    assert not warned(recwarn) and loaded["version"] == review.VERSION == 4
    assert state.read_bytes() == LEITNER_RECORD.read_bytes(), "reading never writes"
    assert set(loaded["cards"]) == set(old["cards"]), "every card is kept"
    for card_id, before in old["cards"].items():
        entry = loaded["cards"][card_id]
        assert entry["leitner"] == before, card_id
        assert {k: entry[k] for k in ("reviews", "lapses", "first", "last")} == {
            k: before.get(k) for k in ("reviews", "lapses", "first", "last")}, card_id
        assert entry["answers"] == [] and review.replay(entry).to_dict() == {"card_id": 0, **entry["fsrs"]}
    cards_ = loaded["cards"]
    day = datetime.date(2026, 11, 25)
    # what the boxes implied, replayed: a card missed on its last day is due that day; a card that
    # climbed to the top box waits longer than one that reached box 2; every replayed card is due
    # after its last answer
    missed = cards_["01:aaaaaaaaaa"]
    assert missed["due"] == "2026-11-24" and review.status(missed, day) == "due"
    assert review.wait_days(cards_["01:eeeeeeeeee"]) > review.wait_days(cards_["01:bbbbbbbbbb"])
    assert review.status(cards_["01:eeeeeeeeee"], day) == "learned"
    assert all(e["due"] >= e["last"] for e in cards_.values())
    assert loaded["undo"]["card"] == "01:cccccccccc"
    assert loaded["undo"]["before"]["leitner"] == old["undo"]["before"]

    # an answer today adds to the history; undo takes exactly that answer back
    review.record("01:bbbbbbbbbb", True, today=day)
    saved = json.loads(state.read_text())
    assert saved["version"] == 4 and set(saved["cards"]) == set(old["cards"])
    grown = saved["cards"]["01:bbbbbbbbbb"]
    assert grown["leitner"] == old["cards"]["01:bbbbbbbbbb"] and len(grown["answers"]) == 1
    assert grown["reviews"] == old["cards"]["01:bbbbbbbbbb"]["reviews"] + 1
    assert review.replay(grown).to_dict() == {"card_id": 0, **grown["fsrs"]}
    assert review.undo("01:bbbbbbbbbb", today=day).startswith("undone: ")
    assert json.loads(state.read_text())["cards"] == loaded["cards"], "undone: the migrated record again"
    assert review.undo(today=day) is None, "the record's own last answer was replaced by today's"
