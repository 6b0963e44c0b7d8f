"""Spaced review of the flashcards (Leitner boxes), the printable deck, and `make progress`.

    python -m helpers.review                 # `make review`: drill today's due cards in the terminal
    python -m helpers.review --lesson 02     # only lesson 02's cards
    python -m helpers.review --print         # `make flashcards`: build/flashcards.html (+ .pdf)
    python -m helpers.review --progress      # `make progress`: exercises and cards, lesson by lesson

Every card sits in one of five boxes. A new card starts in box 1. Each time you
know a card that is due, it moves up a box and waits longer before it comes
back: box 2 after a day, box 3 after 3 days, box 4 after a week, box 5 after
three weeks. A card you miss drops to box 1 and is due again today. A card in
box 4 or 5 counts as learned. Knowing a card before it is due (say, in the
lesson's own flashcards) does not move it up: only spaced recall counts.

Your schedule is one small JSON file, `.course/review.json` in the repository
(ignored by git), or wherever COURSE_STATE points. It is rewritten atomically
after every answer; a damaged file is set aside (kept as `review.json.corrupt-*`)
with a warning, and the schedule starts afresh.
"""

import argparse
import contextlib
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
import time
import warnings

from helpers import cards as card_data

ROOT = pathlib.Path(__file__).resolve().parent.parent
VERSION = 1
BOXES = 5
INTERVAL_DAYS = {1: 0, 2: 1, 3: 3, 4: 7, 5: 21}  # how long a card waits once it reaches each box
LEARNED_BOX = 4
NEW_PER_SESSION = 20  # new cards introduced per session, at most (reviews are never capped)


class ReviewStateWarning(UserWarning):
    """The review schedule could not be read or saved; the review goes on regardless."""


def state_path():
    return pathlib.Path(os.environ.get("COURSE_STATE") or ROOT / ".course" / "review.json")


def _fresh():
    return {"version": VERSION, "cards": {}}


def _warn(message):
    warnings.warn(message, ReviewStateWarning, stacklevel=3)


def _parse_date(value):
    try:
        return datetime.date.fromisoformat(value)
    except (TypeError, ValueError):
        return None


def _valid_entry(entry):
    return (isinstance(entry, dict)
            and type(entry.get("box")) is int and 1 <= entry["box"] <= BOXES
            and _parse_date(entry.get("due")) is not None)


def _set_aside(p, why):
    """Move a damaged state file out of the way (kept for inspection) and warn."""
    backup = p.with_name(f"{p.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}")
    n = 1
    while backup.exists():
        n += 1
        backup = backup.with_name(f"{p.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}-{n}")
    try:
        os.replace(p, backup)
        kept = f"it is kept as {backup.name}"
    except OSError as e:
        kept = f"it could not be moved aside ({e})"
    _warn(f"Your review schedule {p} {why}; {kept}. Starting a fresh schedule.")


def load_state(path=None):
    """The schedule: {"version": 1, "cards": {card id: {"box", "due", "reviews", "lapses", "last"}}}.

    A missing file is a fresh start; a damaged one is set aside with a warning. Never raises.
    """
    p = pathlib.Path(path or state_path())
    try:
        raw = p.read_bytes()
    except (FileNotFoundError, NotADirectoryError):  # nothing saved yet (or nowhere it could be)
        return _fresh()
    except OSError as e:
        _set_aside(p, f"could not be read ({e.strerror or e})")
        return _fresh()
    try:
        data = json.loads(raw.decode("utf-8"))
    except ValueError:
        _set_aside(p, "is not valid JSON")
        return _fresh()
    if not (isinstance(data, dict) and data.get("version") == VERSION
            and isinstance(data.get("cards"), dict)):
        _set_aside(p, f"is not a version-{VERSION} review schedule")
        return _fresh()
    good = {k: v for k, v in data["cards"].items() if isinstance(k, str) and _valid_entry(v)}
    if len(good) != len(data["cards"]):
        bad = len(data["cards"]) - len(good)
        _set_aside(p, f"has {bad} damaged card entr{'y' if bad == 1 else 'ies'}")
        data["cards"] = good
        save_state(data, p)
    return data


def save_state(state, path=None):
    """Write the schedule atomically (a temporary file, then a rename). False, with a warning, on failure."""
    p = pathlib.Path(path or state_path())
    tmp = None
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(state, f, indent=1, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
        return True
    except OSError as e:
        if tmp:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        _warn(f"Could not save your review schedule to {p} ({e.strerror or e}); "
              "this answer is not kept. Set COURSE_STATE to a writable file.")
        return False


def _today(today):
    return today or datetime.date.today()


def _days(n):
    return "today" if n <= 0 else "tomorrow" if n == 1 else f"in {n} days"


def schedule(entry, knew, today):
    """The card's next entry after an answer (a pure function of the old entry, the answer and the date)."""
    new = not entry
    entry = dict(entry or {"box": 1, "due": today.isoformat(), "reviews": 0, "lapses": 0})
    entry["reviews"] = entry.get("reviews", 0) + 1
    entry["last"] = today.isoformat()
    box, due = entry["box"], _parse_date(entry["due"])
    if not knew:
        entry["lapses"] = entry.get("lapses", 0) + 1
        box, due = 1, today
    elif new or due <= today:
        box = min(box + 1, BOXES)
        due = today + datetime.timedelta(days=INTERVAL_DAYS[box])
    entry["box"], entry["due"] = box, due.isoformat()
    return entry


def record(card_id, knew, path=None, today=None):
    """Record one answer and save; returns a sentence saying what happens to the card next."""
    today = _today(today)
    state = load_state(path)
    old = state["cards"].get(card_id)
    entry = schedule(old, knew, today)
    state["cards"][card_id] = entry
    saved = save_state(state, path)
    due_in = (_parse_date(entry["due"]) - today).days
    if not knew:
        message = "missed: back to box 1, due again today"
    elif old and old["box"] == entry["box"] and _parse_date(old["due"]) > today:
        message = f"knew it, but it was not due yet: it stays in box {entry['box']}, due {_days(due_in)}"
    else:
        message = f"knew it: box {entry['box']} of {BOXES}, next review {_days(due_in)}"
    return message if saved else message + " (not saved)"


def describe_card(card_id, path=None, today=None, state=None):
    """"new", or the card's box and when it is due."""
    entry = (state or load_state(path))["cards"].get(card_id)
    if entry is None:
        return "new"
    due_in = (_parse_date(entry["due"]) - _today(today)).days
    return f"box {entry['box']} of {BOXES}, " + ("due now" if due_in <= 0 else f"due {_days(due_in)}")


def due(cards, new=None, path=None, today=None, state=None):
    """The cards to review today, in order.

    Cards seen before and due come first: lowest box first (the shakiest), then the longest
    overdue, then course order. New cards follow in course order, at most `new` of them.
    """
    today = _today(today)
    entries = (state or load_state(path))["cards"]
    reviews, fresh = [], []
    for position, card in enumerate(cards):
        entry = entries.get(card["id"])
        if entry is None:
            fresh.append(card)
        elif _parse_date(entry["due"]) <= today:
            reviews.append((entry["box"], entry["due"], position, card))
    reviews.sort(key=lambda r: r[:3])
    return [r[3] for r in reviews] + (fresh if new is None else fresh[:max(new, 0)])


def counts(cards, state, today=None):
    """{"total", "new", "due", "learned"} for a list of cards (new cards count as due)."""
    today = _today(today)
    out = {"total": len(cards), "new": 0, "due": 0, "learned": 0}
    for card in cards:
        entry = state["cards"].get(card["id"])
        if entry is None:
            out["new"] += 1
            out["due"] += 1
            continue
        out["due"] += _parse_date(entry["due"]) <= today
        out["learned"] += entry["box"] >= LEARNED_BOX
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


def drill(cards, new=NEW_PER_SESSION, path=None, today=None, ask=input, say=print):
    """Ask today's due cards one by one: Enter shows the answer, then y (knew it) or n (didn't).

    A missed card comes back at the end of the session. q or end of input stops; every answer
    given so far is already saved. Returns (knew, missed).
    """
    queue = due(cards, new=new, path=path, today=today)
    if not queue:
        say("Nothing is due today. " + outlook(path, today, cards))
        return 0, 0
    fresh = sum(describe_card(c["id"], path, today) == "new" for c in queue)
    say(textwrap.fill(f"{len(queue)} card(s) due today ({fresh} new). Answer in your head, press Enter to "
                      "see the answer, then y if you knew it, n if not. q stops (your answers are saved "
                      "as you go).", width=88))
    knew = missed = 0
    wrap = textwrap.TextWrapper(width=88, initial_indent="  ", subsequent_indent="  ")
    wrap_answer = textwrap.TextWrapper(width=88, initial_indent="  → ", subsequent_indent="    ")
    while queue:
        card = queue.pop(0)
        say(f"\n[{card['lesson']} · {describe_card(card['id'], path, today)} · {len(queue)} left after this]")
        say(wrap.fill(card["front"]))
        try:
            if ask("  (Enter: show answer, q: stop) ").strip().lower() == "q":
                break
            say(wrap_answer.fill(card["back"]))
            reply = ""
            while reply not in ("y", "n", "q"):
                reply = ask("  Did you know it? [y/n, q: stop] ").strip().lower()[:1]
        except EOFError:
            break
        if reply == "q":
            break
        say("  " + record(card["id"], reply == "y", path, today))
        if reply == "y":
            knew += 1
        else:
            missed += 1
            queue.append(card)
    say(f"\nKnew {knew}, missed {missed}. {outlook(path, today, cards)}".rstrip())
    return knew, missed


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
    """The progress table as text."""
    title_w = max([len(r["title"]) for r in rows] + [5])
    name_w = max([len(n) for r in rows for n, _ in r["exercises"]] + [8])
    head = f"{'lesson':<7}{'title':<{title_w + 2}}{'exercise':<{name_w + 2}}{'result':<12}"
    lines = [head + "cards: due  learned  total", "-" * (len(head) + 26)]
    tally = {"pass": 0, "fail": 0, "not done": 0}
    for r in rows:
        c = r["cards"]
        card_cols = (f"{c['due']:>11}{c['learned']:>9}{c['total']:>7}" if c["total"] else f"{'-':>11}")
        exs = r["exercises"] or [("-", "")]
        for i, (name, status) in enumerate(exs):
            tally[status] = tally.get(status, 0) + bool(status)
            left = f"{r['lesson']:<7}{r['title']:<{title_w + 2}}" if i == 0 else " " * (7 + title_w + 2)
            line = f"{left}{name:<{name_w + 2}}{_MARKS.get(status, status):<12}"
            lines.append((line + card_cols) if i == 0 else line.rstrip())
    total = sum(len(r["exercises"]) for r in rows)
    c_due = sum(r["cards"]["due"] for r in rows)
    c_learned = sum(r["cards"]["learned"] for r in rows)
    c_total = sum(r["cards"]["total"] for r in rows)
    lines += ["", f"Exercises: {tally['pass']} of {total} pass, {tally['fail']} fail, {tally['not done']} "
                  f"not done.   Cards: {c_due} due today, {c_learned} of {c_total} learned.",
              "`make grade` re-runs your notebooks; `make review` drills the cards due today."]
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


# ---------------------------------------------------------------- command line


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lesson", action="append", help="only this lesson's cards (repeatable), e.g. 02")
    parser.add_argument("--new", type=int, default=NEW_PER_SESSION,
                        help=f"new cards to introduce this session, at most (default {NEW_PER_SESSION})")
    parser.add_argument("--print", dest="deck", action="store_true", help="write the printable deck")
    parser.add_argument("--out", default=str(ROOT / "build" / "flashcards.html"), help="where --print writes")
    parser.add_argument("--layout", choices=("sheet", "page"), default="sheet",
                        help="--print: five cards a sheet, or one a page")
    parser.add_argument("--no-pdf", action="store_true", help="--print: HTML only")
    parser.add_argument("--progress", action="store_true", help="print the progress table")
    parser.add_argument("--results", help="the results file --progress reads (default: the course's)")
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
        return 0
    drill(card_data.flashcard_list(lessons, args.cards), new=args.new, path=args.state)
    return 0


if __name__ == "__main__":
    sys.exit(main())
