"""Spaced review of the flashcards (scheduled by FSRS), the decks, and `make progress`.

    python -m helpers.review                 # `make review`: drill today's cards in the terminal
    python -m helpers.review --lesson 02     # only lesson 02's cards
    python -m helpers.review --print         # `make flashcards`: build/flashcards.html (+ .pdf, .apkg)
    python -m helpers.review --progress      # `make progress`: exercises and cards, lesson by lesson

Cards are scheduled by FSRS (the `fsrs` package, the scheduler Anki uses). For every card it
keeps an estimate of how long you will remember it (its stability) and how hard it is for you,
and brings the card back when you are about to forget it. Each time you know a card, the wait
grows (a new card known comes back in 2 days, then about 11, then 46, ...); a card you miss
comes back the same day and starts growing again from a short wait. Knowing a card earlier
than it is due counts for little: the gap since you last saw it was short.

A card is "new" until you first answer it, "learning" while it waits less than three weeks,
and "learned" once it waits three weeks or more (Anki calls such cards mature). A card whose
day has come is "due", whatever it was before: new + due + learning + learned is every card.

Today's cards are the ones you have answered before that are due, then new ones (never
answered). New cards come only from lessons you have started: a lesson where an exercise has
passed or failed a `check(...)` (an untouched stub does not count), or where you have answered a
card. At most 20 new cards a day, counted across all of the day's sessions (the lessons' own
flashcards count too).

The last answer can be undone: `u` in the terminal, "undo" in a notebook, or `undo()`. The card
gets back exactly the entry it had.

Your schedule is one small JSON file, `.course/review.json` in the repository (ignored by git),
or wherever COURSE_STATE points. It is your work, so:

- Each answer is saved under a lock (`review.json.lock` beside the file): the file is read
  afresh, changed, and replaced atomically (a temporary file in the same folder, flushed to disk,
  then renamed over it). The notebook and the terminal can answer at the same time; neither loses
  the other's answers.
- A schedule that cannot be read, is not valid JSON, has damaged entries, or comes from a newer
  version of the course is never moved, replaced or reset. A warning says what is wrong and how
  to fix it, and the session goes on read-only: the drill works, but answers are not saved.
- A schedule from an older version is read as it is and saved in the current format at your
  next answer; nothing in it is dropped (see _migrate).

The format (version 4): {"version": 4, "cards": {card id: entry}, "undo": the last answer or
null}. An entry is {"answers": [[time (ISO, UTC), "knew" or "missed"], ...], "fsrs": FSRS's card
(state, step, stability, difficulty, due, last_review), "due": the day it is due, "reviews",
"lapses", "first", "last"}, plus "leitner" for a card answered before version 4: its entry as
the Leitner boxes of versions 1 to 3 kept it ({"box", "due", "reviews", "lapses", "last",
"first"}). "undo" is {"card", "before", "after"}: the card's entry before and after the last
answer. replay(entry) rebuilds "fsrs" from the entry's history alone.
"""

import argparse
import contextlib
import copy
import datetime
import html
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import textwrap
import warnings

import fsrs

from helpers import cards as card_data

try:
    import fcntl
except ImportError:  # Windows: lock with msvcrt instead
    fcntl = None
    import msvcrt

ROOT = pathlib.Path(__file__).resolve().parent.parent
VERSION = 4  # of the schedule's format; _migrate() reads older ones
NEW_PER_DAY = 20  # new cards a day, at most (reviews are never capped)
LEARNED_DAYS = 21  # a card that waits this long or longer before it is due again counts as learned

# FSRS with Anki's default parameters. One short step (10 minutes) after a first answer or a miss
# keeps a missed card due the same day; a known new card leaves it at once. No random fuzz, so a
# card's schedule is a function of its answers alone (replay() depends on that).
SCHEDULER = fsrs.Scheduler(learning_steps=(datetime.timedelta(minutes=10),),
                           relearning_steps=(datetime.timedelta(minutes=10),), enable_fuzzing=False)
RATING = {True: fsrs.Rating.Good, False: fsrs.Rating.Again}  # "knew it" and "didn't"

_read_only = {}  # schedule path -> what this session knows of it, for schedules it must not write


class ReviewStateWarning(UserWarning):
    """The review schedule could not be read or saved; it is left alone and the review goes on."""


def state_path():
    return pathlib.Path(os.environ.get("COURSE_STATE") or ROOT / ".course" / "review.json")


def _path(path):
    return pathlib.Path(path or state_path()).absolute()


def _fresh():
    return {"version": VERSION, "cards": {}, "undo": None}


def _parse_date(value):
    try:
        return datetime.date.fromisoformat(value)
    except (TypeError, ValueError):
        return None


def _counts_ok(entry):
    return all(type(entry.get(key, 0)) is int for key in ("reviews", "lapses"))


def _valid_entry(entry):
    """Whether an entry of today's format can be used: its due day, counts, history and FSRS card."""
    if not (isinstance(entry, dict) and _parse_date(entry.get("due")) is not None and _counts_ok(entry)
            and isinstance(entry.get("answers"), list) and isinstance(entry.get("fsrs"), dict)):
        return False
    try:
        _card(entry)
    except (KeyError, TypeError, ValueError):
        return False
    return True


# The Leitner boxes of formats 1 to 3: a card known when due moved up a box and waited this long.
LEITNER_BOXES = 5
LEITNER_WAIT_DAYS = {1: 0, 2: 1, 3: 3, 4: 7, 5: 21}


def _valid_leitner(entry):
    return (isinstance(entry, dict)
            and type(entry.get("box")) is int and 1 <= entry["box"] <= LEITNER_BOXES
            and _parse_date(entry.get("due")) is not None and _counts_ok(entry))


# ---------------------------------------------------------------- reading and saving the schedule


# Cards whose id changed when lessons 08 onward were renumbered (the Hopper lessons became 09 and 10,
# the capstone 11, GroupNorm + Mish moved to lesson 05): old id -> new id. A card id is its lesson and
# a digest of its question (helpers.cards.card_id), so a moved card gets a new id. Two of the old
# capstone's cards taught what lesson 09 now teaches with its own card: their history goes to that card.
RENAMED_CARDS = {
    "09:203b39f142": "11:203b39f142", "09:27054a3c69": "11:27054a3c69", "09:6dcb344237": "11:6dcb344237",
    "09:4b002080cf": "11:4b002080cf", "09:b45637144a": "11:b45637144a",
    "09:782a6c081e": "10:a7372686dc",                   # attention on the projection's layout, reworded
    "09:812dd485b6": "05:812dd485b6", "09:f6593a1c1b": "05:f6593a1c1b", "09:4e1d39e34c": "05:4e1d39e34c",
    "09:ab0eaabd5b": "09:59ae22a96b",                   # a tensor descriptor: into lesson 09's card
    "09:76598aaa2a": "09:5e49aa481a",                   # a persistent matmul: into lesson 09's card
    "10:27c3270975": "09:27c3270975", "10:59ae22a96b": "09:59ae22a96b", "10:5c3888e81d": "09:5c3888e81d",
    "10:338fdff326": "09:338fdff326", "10:c4d814bc12": "09:c4d814bc12", "10:5e49aa481a": "09:5e49aa481a",
    "10:388ee3f7a9": "09:388ee3f7a9", "10:d31a5d780d": "09:d31a5d780d",
}


def _later(a, b):
    """The entry of the two answered last (a where they tie)."""
    return b if (b.get("last") or "") > (a.get("last") or "") else a


def _migrate(data):
    """A schedule of an older format, in the current one (the file is rewritten at the next answer)."""
    if data["version"] == 1:  # version 2 added each card's "first" day and the "undo" record
        for entry in data["cards"].values():
            if isinstance(entry, dict):  # a card answered once was first answered on its last day
                entry.setdefault("first", entry.get("last") if entry.get("reviews") == 1 else None)
        data["version"], data["undo"] = 2, None
    if data["version"] == 2:  # version 3: the renumbered lessons' cards under their new ids
        cards, merged = data["cards"], set()
        for old in sorted(set(cards) & set(RENAMED_CARDS)):   # in a fixed order, whatever the file's
            new, entry = RENAMED_CARDS[old], cards.pop(old)
            if not isinstance(entry, dict) or not isinstance(cards.get(new, {}), dict):
                cards[old] = entry                      # damaged: left where it is, for _read to report
            elif new in cards:         # two old cards merged into one: it keeps the later-answered history,
                cards[new] = dict(_later(cards[new], entry))
                cards[old] = entry     # and the other entry stays in the file, under its old id
                merged.add(new)
            else:
                cards[new] = entry
        undo = data.get("undo")
        if isinstance(undo, dict) and undo.get("card") in RENAMED_CARDS:
            undo["card"] = RENAMED_CARDS[undo["card"]]
            if undo["card"] in merged:                  # its entry may now be the other card's
                data["undo"] = None
        data["version"] = 3
    if data["version"] == 3:  # version 4: FSRS in place of the Leitner boxes
        data["cards"] = {k: _from_leitner(v) or v for k, v in data["cards"].items()}  # damaged: left as is
        undo = data.get("undo")
        if isinstance(undo, dict):
            sides = {side: undo.get(side) and _from_leitner(undo[side]) for side in ("before", "after")}
            if all(sides[side] or undo.get(side) is None for side in sides):
                undo.update(sides)
            else:
                data["undo"] = None
        data["version"] = 4
    return data


def _leitner_answers(entry):
    """The answers a Leitner entry implies, oldest first, as (day, knew).

    The boxes kept counts and days, not each answer, so the history is rebuilt as the shortest
    one that leads to the entry: a miss where the card had lapsed, then the climb from box 1 to
    its box, each step answered on the day it fell due, the last on the day of its last answer
    (and, in the top box, one more answer for every further review it passed there).
    """
    box = entry["box"]
    last = _parse_date(entry.get("last")) or (_parse_date(entry["due"])
                                               - datetime.timedelta(days=LEITNER_WAIT_DAYS[box]))
    if box == 1:  # only a miss leaves a card in box 1
        return [(last, False)]
    climbed = box - 1
    stayed = (max(entry.get("reviews", 0) - entry.get("lapses", 0) - climbed, 0)
              if box == LEITNER_BOXES else 0)
    gaps = [LEITNER_WAIT_DAYS[LEITNER_BOXES]] * stayed + [LEITNER_WAIT_DAYS[b - 1] for b in range(box, 2, -1)]
    days = [last]
    for gap in gaps:
        days.insert(0, days[0] - datetime.timedelta(days=gap))
    missed = [(days[0], False)] if entry.get("lapses") else []
    return missed + [(day, True) for day in days]


def _from_leitner(old):
    """A Leitner entry in today's format: kept whole under "leitner", its FSRS card replayed
    (None for a damaged entry, which _read then reports)."""
    if not _valid_leitner(old):
        return None
    entry = {"answers": [], "leitner": dict(old), "reviews": old.get("reviews", 0),
             "lapses": old.get("lapses", 0), "first": old.get("first"), "last": old.get("last")}
    try:
        return _with_card(entry, replay(entry))
    except (TypeError, ValueError, OverflowError):  # counts that are not numbers, days out of range
        return None


def _usable(data):
    """What can be used of a schedule that must not be written: its valid card entries."""
    return {"version": VERSION, "undo": None,
            "cards": {k: v for k, v in data["cards"].items() if _valid_entry(v)}}


def _read(p):
    """(the schedule in file p, None), or where it cannot be used as it is:
    (what can be used of it, (what is wrong, what to do))."""
    try:
        raw = p.read_bytes()
    except (FileNotFoundError, NotADirectoryError):  # nothing saved yet
        return _fresh(), None
    except IsADirectoryError:
        return _fresh(), ("is a folder, not a file", "Move the folder away, or set COURSE_STATE to a file.")
    except OSError as e:
        return _fresh(), (f"could not be read ({e.strerror or e})", "Check the file and its permissions.")
    fix = f"Repair it in an editor, or delete it to start a fresh schedule (rm {p})."
    try:
        data = json.loads(raw.decode("utf-8"))
    except ValueError as e:
        return _fresh(), (f"is not valid JSON ({e})", fix)
    version = data.get("version") if isinstance(data, dict) else None
    if type(version) is not int or version < 1 or not isinstance(data.get("cards"), dict):
        return _fresh(), ('is not a review schedule (no "version" and "cards")', fix)
    if version > VERSION:
        return _usable(data), (f"comes from a newer version of the course (format {version}; this one "
                               f"reads up to {VERSION})", "Update the course (git pull) to save again.")
    data = _migrate(data)
    bad = sorted(k for k, v in data["cards"].items() if not _valid_entry(v))
    if bad:
        return _usable(data), (f"has {len(bad)} damaged card entr{'y' if len(bad) == 1 else 'ies'} "
                               f"({', '.join(bad[:3])}{', ...' if len(bad) > 3 else ''})",
                               "Repair or delete those entries in an editor.")
    return data, None


def _go_read_only(p, state, what, todo):
    """Stop writing schedule p for the rest of this session, and say so once."""
    _read_only[p] = state
    warnings.warn(f"Your review schedule {p} {what}. It is left as it is, and until you restart, "
                  f"answers are not saved (the drill still works). {todo}", ReviewStateWarning, stacklevel=4)


def read_only(path=None):
    """Whether this session has stopped saving to the schedule (see the warning it gave)."""
    return _path(path) in _read_only


def load_state(path=None):
    """The schedule (its format is in this module's docstring). Never raises, never writes.

    A missing file is an empty schedule. One that cannot be used as it is makes the session
    read-only, with a warning; then this is what could be read of it, plus this session's answers.
    """
    p = _path(path)
    if p not in _read_only:
        state, problem = _read(p)
        if problem is None:
            return state
        _go_read_only(p, state, *problem)
    return copy.deepcopy(_read_only[p])


@contextlib.contextmanager
def _locked(p):
    """Hold the schedule's lock, the file `review.json.lock` beside it: one writer at a time."""
    p.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(p.with_name(p.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)  # waits while another process holds it
        else:
            msvcrt.locking(fd, msvcrt.LK_LOCK, 1)  # waits up to 10 s, then raises OSError
        try:
            yield
        finally:
            if fcntl is None:
                msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
    finally:
        os.close(fd)  # releases an flock


def _write(p, state):
    """Replace file p by `state` atomically: a temporary file in its folder, flushed to disk, renamed."""
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(state, f, indent=1, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if hasattr(os, "O_DIRECTORY"):  # make the rename itself durable too
        with contextlib.suppress(OSError):
            folder = os.open(p.parent, os.O_DIRECTORY)
            try:
                os.fsync(folder)
            finally:
                os.close(folder)


def _update(path, change):
    """Apply change(state) to the schedule and save it: (what change returned, whether it was saved).

    Under the lock, the file is read afresh, so that answers saved by another process since this
    one last read it are kept. In a read-only session the change is made in memory only.
    """
    p = _path(path)
    if p not in _read_only:
        try:
            with _locked(p):
                state = load_state(p)
                if p not in _read_only:
                    result = change(state)
                    _write(p, state)
                    return result, True
        except OSError as e:
            _go_read_only(p, _read(p)[0], f"could not be saved ({e.strerror or e})",
                          "Set COURSE_STATE to a file you can write, or fix the folder's permissions.")
    return change(_read_only[p]), False


# ---------------------------------------------------------------- the FSRS schedule


def _today(today):
    return today or datetime.date.today()


def _moment(today=None):
    """When an answer is given: now, or noon of the given day (local time), in UTC as FSRS wants."""
    if today is None:
        return datetime.datetime.now(datetime.timezone.utc)
    return datetime.datetime.combine(today, datetime.time(12)).astimezone().astimezone(datetime.timezone.utc)


def _local_day(moment):
    return moment.astimezone().date()


def _days(n):
    return "today" if n <= 0 else "tomorrow" if n == 1 else f"in {n} days"


def _card(entry):
    """The entry's FSRS card."""
    return fsrs.Card.from_dict({"card_id": 0, **entry["fsrs"]})


def _with_card(entry, card):
    """The entry with FSRS's card in it, and the day that card is due."""
    state = card.to_dict()
    del state["card_id"]  # the card's id is the schedule's key
    return {**entry, "fsrs": state, "due": _local_day(card.due).isoformat()}


def replay(entry):
    """The FSRS card an entry's history leads to: the answers its Leitner record implies (a card
    answered before version 4), then every answer recorded since, through the scheduler in order."""
    card = fsrs.Card(card_id=0, due=datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc))
    implied = _leitner_answers(entry["leitner"]) if entry.get("leitner") else []
    history = [(_moment(day), knew) for day, knew in implied]
    history += [(datetime.datetime.fromisoformat(when), outcome == "knew")
                for when, outcome in entry["answers"]]
    for moment, knew in history:
        card, _ = SCHEDULER.review_card(card, RATING[knew], moment)
    return card


def schedule(entry, knew, moment):
    """The card's next entry after an answer at `moment` (a datetime, or a day: its noon).

    A pure function of the old entry (None for a new card), the answer and the time.
    """
    if isinstance(moment, datetime.date) and not isinstance(moment, datetime.datetime):
        moment = _moment(moment)
    day = _local_day(moment).isoformat()
    if entry is None:
        entry = {"answers": [], "reviews": 0, "lapses": 0, "first": day}
        card = fsrs.Card(card_id=0, due=moment)
    else:
        card = _card(entry)
    card, _ = SCHEDULER.review_card(card, RATING[knew], moment)
    answer = [moment.isoformat(), "knew" if knew else "missed"]
    return _with_card({**entry, "answers": entry["answers"] + [answer], "last": day,
                       "reviews": entry.get("reviews", 0) + 1, "lapses": entry.get("lapses", 0) + (not knew)},
                      card)


def wait_days(entry):
    """How many days the card waits between its last answer and its due day."""
    last = _parse_date(entry.get("last")) or _parse_date(entry["due"])
    return (_parse_date(entry["due"]) - last).days


def status(entry, today=None):
    """"new", "due", "learning" or "learned": the column of `make progress` the card counts in."""
    if entry is None:
        return "new"
    if _parse_date(entry["due"]) <= _today(today):
        return "due"
    return "learned" if wait_days(entry) >= LEARNED_DAYS else "learning"


def spacing_example(answers=6, miss_at=3):
    """How FSRS spaces one card, in two sentences: known every time it falls due, and missed once."""
    def waits(misses):
        entry, day, out = None, datetime.date(2025, 1, 1), []
        for i in range(answers):
            if i in misses:
                entry = schedule(entry, False, day)
            entry = schedule(entry, True, day)
            out.append(wait_days(entry))
            day = _parse_date(entry["due"])
        return out

    def days(waits):
        return ", ".join(map(str, waits)) + " days"

    return (f"A card known each time it falls due waits {days(waits(()))}.\n"
            f"Missed at review {miss_at + 1} instead, it comes back the same day; known then, it waits "
            f"{days(waits((miss_at,))[miss_at:])}.")


def record(card_id, knew, path=None, today=None):
    """Record one answer and save it; returns a sentence saying what happens to the card next.

    undo() takes the answer back.
    """
    moment = _moment(today)
    today = _local_day(moment)

    def answer(state):
        old = state["cards"].get(card_id)
        state["cards"][card_id] = entry = schedule(old, knew, moment)
        state["undo"] = {"card": card_id, "before": old, "after": entry}
        return old, entry

    (old, entry), saved = _update(path, answer)
    due_in = (_parse_date(entry["due"]) - today).days
    if not knew:
        message = f"missed: due again {_days(due_in)}"
    else:
        early = " before it was due" if old and _parse_date(old["due"]) > today else ""
        learned = ", learned" if status(entry, today) == "learned" else ""
        message = f"knew it{early}: next review {_days(due_in)}{learned}"
    return message if saved else message + " (not saved)"


def undo(card_id=None, path=None, today=None):
    """Take back the last answer saved: its card gets back exactly the entry it had (or is new again).

    With card_id, only if the last answer was to that card (the drill and the widgets pass theirs,
    so as never to take back an answer given elsewhere since). Returns a sentence saying what the
    card is back to, or None when there is nothing to undo.
    """
    def take_back(state):
        last = state.get("undo")
        if not isinstance(last, dict) or last.get("card") not in state["cards"] or (
                card_id is not None and last["card"] != card_id):
            return False, None
        if last.get("before") is None:
            del state["cards"][last["card"]]
        else:
            state["cards"][last["card"]] = last["before"]
        state["undo"] = None
        return True, last.get("before")

    (done, before), saved = _update(path, take_back)
    if not done:
        return None
    message = "undone: " + ("the card is new again" if before is None else _describe(before, today))
    return message if saved else message + " (not saved)"


# ---------------------------------------------------------------- what is due, and what is new


def _describe(entry, today=None):
    if entry is None:
        return "new"
    due_in = (_parse_date(entry["due"]) - _today(today)).days
    if due_in <= 0:
        return "due now"
    return f"{status(entry, today)}, due {_days(due_in)}"


def describe_card(card_id, path=None, today=None, state=None):
    """"new", "due now", or whether the card is learning or learned and when it is due."""
    return _describe((state or load_state(path))["cards"].get(card_id), today)


def started_lessons(cards, state, results_path=None):
    """The lessons you have started: an exercise of it passed or failed a check (a stub that is
    "not done", as `make grade` finds every untouched one, does not count), or you answered a card of it."""
    from helpers import records

    try:
        checked = {rec.get("lesson") for rec in records.latest(results_path).values()
                   if rec.get("status") in ("pass", "fail")}
    except OSError:  # an unreadable results file: go by the schedule alone
        checked = set()
    return checked | {card["lesson"] for card in cards if card["id"] in state["cards"]}


def new_today(state, today=None):
    """How many cards were answered for the first time today."""
    day = _today(today).isoformat()
    return sum(entry.get("first") == day for entry in state["cards"].values())


def due(cards, new=NEW_PER_DAY, path=None, today=None, state=None, started=None):
    """Today's cards, in order.

    Cards answered before and due come first: the least stable first (the shakiest), then the
    longest overdue, then course order. New cards follow in course order, only from the `started` lessons
    (default: started_lessons()), and only as many as the day's allowance of `new` leaves
    (None: no limit).
    """
    today = _today(today)
    state = state or load_state(path)
    if started is None:
        started = started_lessons(cards, state)
    reviews, fresh = [], []
    for position, card in enumerate(cards):
        entry = state["cards"].get(card["id"])
        if entry is None:
            if card["lesson"] in started:
                fresh.append(card)
        elif _parse_date(entry["due"]) <= today:
            reviews.append((entry["fsrs"]["stability"] or 0.0, entry["due"], position, card))
    reviews.sort(key=lambda r: r[:3])
    allowance = len(fresh) if new is None else max(new - new_today(state, today), 0)
    return [r[3] for r in reviews] + fresh[:allowance]


def counts(cards, state, today=None):
    """{"total", "new", "due", "learning", "learned"} for a list of cards: each card counts in one
    column (see status()), so the four add up to the total. A new card is not due."""
    out = {"total": len(cards), "new": 0, "due": 0, "learning": 0, "learned": 0}
    for card in cards:
        out[status(state["cards"].get(card["id"]), today)] += 1
    return out


def outlook(path=None, today=None, cards=None, state=None):
    """When the next cards fall due, in a sentence (after today's are done)."""
    today = _today(today)
    entries = (state or load_state(path))["cards"]
    if cards is not None:
        wanted = {c["id"] for c in cards}
        entries = {k: v for k, v in entries.items() if k in wanted}
    later = sorted(d for d in (_parse_date(e["due"]) for e in entries.values()) if d > today)
    if not later:
        return ""
    first = later[0]
    when = f"{_days((first - today).days)} ({first.isoformat()})"
    return f"Next review: {later.count(first)} card(s) due {when}."


# ---------------------------------------------------------------- the terminal drill


def drill(cards, new=NEW_PER_DAY, path=None, today=None, ask=input, say=print, started=None):
    """Ask today's cards one by one: Enter shows the answer, then y (knew it) or n (didn't).

    A missed card comes back at the end of the session. u takes the last answer back and asks
    that card again. q or end of input stops; every answer given so far is already saved.
    Returns (knew, missed).
    """
    state = load_state(path)
    started = started_lessons(cards, state) if started is None else started
    queue = due(cards, new=new, today=today, state=state, started=started)
    if not queue:
        hint = "" if started & {c["lesson"] for c in cards} else (
            "New cards come from the lessons you have started (run a check, or answer a card).")
        say(" ".join(filter(None, ["Nothing is due today.", outlook(today=today, cards=cards, state=state),
                                   hint])))
        return 0, 0
    fresh = sum(c["id"] not in state["cards"] for c in queue)
    say(textwrap.fill(f"{len(queue)} card(s) for today ({fresh} new). Answer in your head, press Enter "
                      "to see the answer, then y if you knew it, n if not. u takes your last answer back; "
                      "q stops (your answers are saved as you go).", width=88))
    if read_only(path):
        say("Read-only: this session's answers are not saved (see the warning above).")
    knew = missed = 0
    last = None  # the last answer, (card, knew), while it can still be taken back
    wrap = textwrap.TextWrapper(width=88, initial_indent="  ", subsequent_indent="  ")
    wrap_answer = textwrap.TextWrapper(width=88, initial_indent="  → ", subsequent_indent="    ")
    while queue or last:
        try:
            if not queue:  # the last chance to take the last answer back
                reply = ask("  (Enter: finish, u: undo the last answer) ").strip().lower()
                reply = "u" if reply == "u" else "q"
            else:
                card = queue[0]
                say(f"\n[{card['lesson']} · {describe_card(card['id'], path, today)} · "
                    f"{len(queue) - 1} left after this]")
                say(wrap.fill(card["front"]))
                reply = ask("  (Enter: show answer, u: undo the last answer, q: stop) ").strip().lower()[:1]
                if reply not in ("q", "u"):
                    say(wrap_answer.fill(card["back"]))
                    reply = ""
                    while reply not in ("y", "n", "q"):
                        reply = ask("  Did you know it? [y/n, q: stop] ").strip().lower()[:1]
        except EOFError:
            break
        if reply == "q":
            break
        if reply == "u":
            message = undo(last[0]["id"], path, today) if last else None
            if message is None:
                say("  Nothing to undo.")
                continue
            card, was_known = last
            if was_known:
                knew -= 1
            else:
                missed -= 1
                queue.pop()  # its second go at the end of the session
            queue.insert(0, card)
            last = None
            say("  " + message)
            continue
        queue.pop(0)
        say("  " + record(card["id"], reply == "y", path, today))
        last = (card, reply == "y")
        if reply == "y":
            knew += 1
        else:
            missed += 1
            queue.append(card)
    say(f"\nKnew {knew}, missed {missed}. {still_due(cards, new, path, today, started)} "
        f"{outlook(path, today, cards)}".rstrip())
    return knew, missed


def still_due(cards, new=NEW_PER_DAY, path=None, today=None, started=None):
    """How many of the cards are still due today, in a sentence."""
    left = due(cards, new=new, path=path, today=today, started=started)
    if not left:
        return "Nothing more is due today."
    fresh = sum(c["id"] not in load_state(path)["cards"] for c in left)
    return f"Still due today: {len(left)} card(s)" + (f" ({fresh} new)." if fresh else ".")


# ---------------------------------------------------------------- `make progress`

_MARKS = {"pass": "✓ pass", "fail": "✗ fail", "not done": "· not done"}


def progress_rows(results_path=None, path=None, folder=None, today=None, exercises=None):
    """[{"lesson", "title", "exercises": [(name, status)], "cards": counts}] for every lesson.

    Exercise results are the latest recorded for each exercise (a `check` in a notebook or
    `make grade`); an exercise with none is "not done". `exercises` ({lesson: [names]})
    defaults to the course's exercises.
    """
    from helpers import records

    if exercises is None:
        from helpers import exercises as specs

        exercises = {lesson: [ex.name for ex in exs] for lesson, exs in specs.by_lesson().items()}
    found = records.latest(results_path)
    state = load_state(path)
    card_lessons = card_data.all_lessons(folder)
    rows = []
    for lesson in sorted(set(exercises) | set(card_lessons)):
        has_cards = lesson in card_lessons
        cards = card_data.flashcard_list([lesson], folder) if has_cards else []
        rows.append({"lesson": lesson,
                     "title": card_data.lesson_title(lesson, folder) if has_cards else "",
                     "exercises": [(name, found[name]["status"] if name in found else "not done")
                                   for name in exercises.get(lesson, [])],
                     "cards": counts(cards, state, today)})
    return rows


def progress_text(rows):
    """The progress table as text: each lesson's exercises, and its cards new, due today, learning and
    learned (the four add up to the lesson's cards)."""
    title_w = max([len(r["title"]) for r in rows] + [5])
    name_w = max([len(n) for r in rows for n, _ in r["exercises"]] + [8])
    head = f"{'lesson':<7}{'title':<{title_w + 2}}{'exercise':<{name_w + 2}}{'result':<12}"
    cards_head = "cards: new  due  learning  learned  total"
    lines = [head + cards_head, "-" * (len(head) + len(cards_head))]
    tally = {"pass": 0, "fail": 0, "not done": 0}
    for r in rows:
        c = r["cards"]
        card_cols = (f"{c['new']:>10}{c['due']:>5}{c['learning']:>10}{c['learned']:>9}{c['total']:>7}"
                     if c["total"]
                     else f"{'-':>10}")
        exs = r["exercises"] or [("-", "")]
        for i, (name, status) in enumerate(exs):
            tally[status] = tally.get(status, 0) + bool(status)
            left = f"{r['lesson']:<7}{r['title']:<{title_w + 2}}" if i == 0 else " " * (7 + title_w + 2)
            line = f"{left}{name:<{name_w + 2}}{_MARKS.get(status, status):<12}"
            lines.append((line + card_cols) if i == 0 else line.rstrip())
    total = sum(len(r["exercises"]) for r in rows)
    c_new, c_due, c_learning, c_learned, c_total = (sum(r["cards"][k] for r in rows)
                                                    for k in ("new", "due", "learning", "learned", "total"))
    lines += ["", f"Exercises: {tally['pass']} of {total} pass, {tally['fail']} fail, {tally['not done']} "
                  f"not done.",
              f"Cards, {c_total} in all: {c_new} new (not seen yet), {c_due} due today, "
              f"{c_learning} learning, {c_learned} learned (waiting {LEARNED_DAYS} days or more).",
              "`make grade` re-runs your notebooks; `make review` drills today's cards (new ones come "
              "from the lessons you have started)."]
    return "\n".join(lines)


# ---------------------------------------------------------------- the printable deck

_DECK_CSS = """
@page { size: A4; margin: 12mm; }
body { font-family: "DejaVu Sans", "Helvetica Neue", Arial, sans-serif; color: #111; margin: 0; }
h1 { font-size: 15pt; margin: 0 0 2mm; }
p.how { font-size: 9pt; color: #555; margin: 0 0 4mm; }
.card { display: flex; border: 1px solid #222; break-inside: avoid; page-break-inside: avoid; }
.face { flex: 1; padding: 4mm 5mm; display: flex; flex-direction: column; }
.tag { font-size: 7.5pt; color: #666; text-transform: uppercase; letter-spacing: 0.05em; }
.text { flex: 1; display: flex; align-items: center; font-size: 11pt; line-height: 1.35; }
.back .text { font-size: 10pt; }
code { font-family: "DejaVu Sans Mono", monospace; font-size: 0.92em; }
.sheet .card { height: 47mm; margin: 0 0 3mm; }
.sheet .back { border-left: 1px dashed #888; }
.page .card { flex-direction: column; height: 254mm; break-after: page; page-break-after: always; }
.page .card:last-child { break-after: auto; page-break-after: auto; }
.page .back { border-top: 1px dashed #888; }
.page .text { font-size: 16pt; justify-content: center; text-align: center; }
.page .back .text { font-size: 14pt; }
@media screen { body { margin: 8mm auto; max-width: 190mm; } }
"""

_HOW = {"sheet": "Five cards a page. Cut along the solid lines, fold along the dashed one, "
                 "and turn a card like a book page to check your answer.",
        "page": "One card a page. Fold along the dashed line and turn the card over "
                "top to bottom to check your answer."}


def deck_html(cards, layout="sheet", title="Fast GPU kernels · flashcards"):
    """The printable deck as one HTML page: several cards a sheet ("sheet") or one a page ("page")."""
    if layout not in _HOW:
        raise ValueError(f"layout must be 'sheet' or 'page', not {layout!r}")
    body = []
    for card in cards:
        tag = html.escape(f"{card['lesson']} · {card.get('title', '')}".rstrip(" ·"))
        body.append(f"<div class='card'>"
                    f"<div class='face front'><div class='tag'>{tag} · question</div>"
                    f"<div class='text'><div>{card_data.inline_html(card['front'])}</div></div></div>"
                    f"<div class='face back'><div class='tag'>{tag} · answer</div>"
                    f"<div class='text'><div>{card_data.inline_html(card['back'])}</div></div></div></div>")
    return (f"<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            f"<title>{html.escape(title)}</title><style>{_DECK_CSS}</style></head>\n"
            f"<body class='{layout}'>\n<h1>{html.escape(title)}</h1>"
            f"<p class='how'>{html.escape(_HOW[layout])} {len(cards)} cards.</p>\n" + "\n".join(body)
            + "\n</body></html>\n")


def chromium():
    """The path of a Chromium-family browser, or None."""
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def print_pdf(html_path, pdf_path, browser=None, timeout_s=120):
    """Print an HTML file to PDF with headless Chromium; the PDF's path, or None if that is not possible."""
    browser = browser or chromium()
    if browser is None:
        return None
    pdf_path = pathlib.Path(pdf_path)
    pdf_path.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory() as profile:
        cmd = [browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--no-pdf-header-footer",
               f"--print-to-pdf={pdf_path}", pathlib.Path(html_path).resolve().as_uri()]
        try:
            subprocess.run(cmd, capture_output=True, timeout=timeout_s, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
    return pdf_path if pdf_path.exists() and pdf_path.stat().st_size > 0 else None


def write_deck(out, lessons=None, layout="sheet", pdf=True, folder=None):
    """Write the deck to `out` (HTML) and, when a browser can print it, beside it as PDF.

    Returns (html path, pdf path or None).
    """
    out = pathlib.Path(out)
    cards = card_data.flashcard_list(lessons, folder)
    for card in cards:
        card["title"] = card_data.lesson_title(card["lesson"], folder)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(deck_html(cards, layout), encoding="utf-8")
    return out, (print_pdf(out, out.with_suffix(".pdf")) if pdf else None)


# ---------------------------------------------------------------- the Anki deck

ANKI_DECK = "Fast GPU kernels"
# Fixed ids, so that importing a newer deck into Anki updates the cards already there (each note's
# guid is its card id) instead of adding a second copy; numbers of our own, as genanki asks.
ANKI_MODEL_ID = 1_742_046_611
ANKI_DECK_ID = 1_742_046_612


def anki_deck(cards, folder=None):
    """The cards as a genanki Package: one note per card, in a subdeck per lesson
    ("Fast GPU kernels::01 What is a kernel"), tagged with its lesson ("lesson01")."""
    import genanki

    model = genanki.Model(
        ANKI_MODEL_ID, "Fast GPU kernels card",
        fields=[{"name": "Front"}, {"name": "Back"}, {"name": "Lesson"}],
        templates=[{"name": "Card", "qfmt": "<div class='lesson'>{{Lesson}}</div>{{Front}}",
                    "afmt": "{{FrontSide}}<hr id='answer'>{{Back}}"}],
        css=".card { font-family: sans-serif; font-size: 20px; text-align: left; }"
            ".lesson { font-size: 12px; color: #777; } code { font-family: monospace; }")
    decks = {}
    for card in cards:
        lesson = card["lesson"]
        if lesson not in decks:
            name = f"{ANKI_DECK}::{lesson} {card_data.lesson_title(lesson, folder)}"
            decks[lesson] = genanki.Deck(ANKI_DECK_ID + int(lesson), name)
        decks[lesson].add_note(genanki.Note(
            model=model, guid=genanki.guid_for(card["id"]), tags=[f"lesson{lesson}"],
            fields=[card_data.inline_html(card["front"]), card_data.inline_html(card["back"]),
                    html.escape(f"{lesson} · {card_data.lesson_title(lesson, folder)}")]))
    return genanki.Package(list(decks.values()))


def write_anki(out, lessons=None, folder=None):
    """Write the Anki deck (.apkg) to `out`; returns its path."""
    out = pathlib.Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    anki_deck(card_data.flashcard_list(lessons, folder), folder).write_to_file(str(out))
    return out


# ---------------------------------------------------------------- command line


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lesson", action="append", help="only this lesson's cards (repeatable), e.g. 02")
    parser.add_argument("--new", type=int, default=NEW_PER_DAY,
                        help=f"new cards a day, at most (default {NEW_PER_DAY})")
    parser.add_argument("--print", dest="deck", action="store_true", help="write the printable deck")
    parser.add_argument("--out", default=str(ROOT / "build" / "flashcards.html"),
                        help="where --print writes (the Anki deck goes beside it, as .apkg)")
    parser.add_argument("--layout", choices=("sheet", "page"), default="sheet",
                        help="--print: five cards a sheet, or one a page")
    parser.add_argument("--no-pdf", action="store_true", help="--print: HTML only")
    parser.add_argument("--progress", action="store_true", help="print the progress table")
    parser.add_argument("--results", help="the results file of check() (default: the course's)")
    parser.add_argument("--state", help="the schedule file (default: COURSE_STATE or .course/review.json)")
    parser.add_argument("--cards", help=argparse.SUPPRESS)  # a folder of card files, for tests
    args = parser.parse_args(argv)
    lessons = [x.zfill(2) for x in args.lesson] if args.lesson else None
    known = card_data.all_lessons(args.cards)
    if lessons and set(lessons) - set(known):
        print(f"no cards for lesson(s) {', '.join(sorted(set(lessons) - set(known)))}; "
              f"lessons with cards: {', '.join(known) or 'none'}")
        return 2
    if args.progress:
        print(progress_text(progress_rows(args.results, args.state, args.cards)))
        return 0
    if args.deck:
        html_path, pdf_path = write_deck(args.out, lessons, args.layout, not args.no_pdf, args.cards)
        print(f"wrote {html_path}" + (f" and {pdf_path}" if pdf_path else
                                      "" if args.no_pdf else " (no PDF: Chromium was not found to print it)"))
        anki_path = write_anki(pathlib.Path(args.out).with_suffix(".apkg"), lessons, args.cards)
        print(f"wrote {anki_path}: the same cards for Anki (File > Import; a newer deck updates them)")
        return 0
    cards = card_data.flashcard_list(lessons, args.cards)
    started = started_lessons(cards, load_state(args.state), args.results)
    drill(cards, new=args.new, path=args.state, started=started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
