"""Self-check questions and flashcards, kept as data: one TOML file per lesson.

`helpers/cards/NN_slug.toml` holds

    [[self_check]]              # questions that close the lesson, answers folded
    question = "..."
    answer = "..."

    [[flashcards]]              # short facts for spaced review
    front = "..."
    back = "..."

A lesson ends with `self_check("NN")` and `flashcards("NN")`. In JupyterLab the
flashcards are widgets: click "show answer", then "knew it" or "didn't", and the
answer goes into your review schedule (`helpers.review`, `make review`); "undo"
takes it back. `review()` is the review notebook's drill: today's cards from every
lesson, one at a time.

A widget lives only as long as the kernel that made it: a notebook saved and opened
again after a restart holds the widget's place but not the widget, and JupyterLab
shows "Error displaying widget: model not found" there (it picks the widget's output
whenever the notebook is trusted, whatever else sits beside it). So the cards are
shown as two outputs (see _show): the same cards as folded question/answer blocks,
then the live widget. A style rule in the first output shows whichever is alive: the
live widget while it runs, else the folded cards, with the dead widget's place hidden.
Static viewers (GitHub, nbconvert) show the folded cards.
"""

import hashlib
import html
import pathlib
import re
import tomllib

CARDS = pathlib.Path(__file__).resolve().parent / "cards"


def card_file(lesson, folder=None):
    found = sorted(pathlib.Path(folder or CARDS).glob(f"{lesson}_*.toml"))
    if len(found) != 1:
        raise FileNotFoundError(f"expected one helpers/cards/{lesson}_*.toml, found {len(found)}")
    return found[0]


def load(lesson, folder=None):
    """{'self_check': [...], 'flashcards': [...]} for lesson "NN"."""
    path = card_file(lesson, folder)
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    for key, fields in (("self_check", ("question", "answer")), ("flashcards", ("front", "back"))):
        for i, item in enumerate(data.get(key, [])):
            missing = [f for f in fields if not str(item.get(f, "")).strip()]
            if missing:
                raise ValueError(f"{path.name}: {key}[{i}] lacks {', '.join(missing)}")
    return data


def all_lessons(folder=None):
    return sorted(p.name[:2] for p in pathlib.Path(folder or CARDS).glob("[0-9][0-9]_*.toml"))


def lesson_title(lesson, folder=None):
    """"What is a kernel" for 01_what_is_a_kernel.toml (or the file's own `title`)."""
    path = card_file(lesson, folder)
    title = tomllib.loads(path.read_text(encoding="utf-8")).get("title")
    return title or path.stem[3:].replace("_", " ").capitalize()


def card_id(lesson, front):
    """A card's name in the review schedule: its lesson and a digest of its question.

    Reordering a lesson's cards keeps their history; rewording a question makes it a new card.
    """
    digest = hashlib.sha1(" ".join(front.split()).encode("utf-8")).hexdigest()[:10]
    return f"{lesson}:{digest}"


def flashcard_list(lessons=None, folder=None):
    """Every flashcard of the given lessons (default: all), in course order, as dicts with
    lesson, index, id, front and back."""
    out = []
    for lesson in lessons if lessons is not None else all_lessons(folder):
        seen = set()
        for i, card in enumerate(load(lesson, folder).get("flashcards", [])):
            cid = card_id(lesson, card["front"])
            while cid in seen:  # two cards with one question: keep both, apart
                cid += "+"
            seen.add(cid)
            out.append({"lesson": lesson, "index": i, "id": cid,
                        "front": card["front"], "back": card["back"]})
    return out


def inline_html(text):
    """Card text as HTML: escaped, with `backticked` spans set as code."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def _folded(summary, body):
    return (f"<details style='margin:0.3em 0'><summary>{inline_html(summary)}</summary>"
            f"<div style='margin:0.4em 1.2em'>{inline_html(body)}</div></details>")


def self_check_html(lesson, folder=None):
    items = load(lesson, folder).get("self_check", [])
    return "".join(_folded(f"{i}. {q['question']}", q["answer"]) for i, q in enumerate(items, 1))


def flashcards_html(lesson=None, folder=None, cards=None):
    """The folded question/answer blocks shown where widgets cannot run."""
    if cards is None:
        cards = load(lesson, folder).get("flashcards", [])
    return "".join(_folded(c["front"], c["back"]) for c in cards)


def self_check(lesson):
    """Show the lesson's self-check questions, each answer folded until clicked."""
    from IPython.display import HTML, display

    display(HTML(f"<b>Self-check</b> (answer before you unfold){self_check_html(lesson)}"))


def _widgets():
    try:
        import ipywidgets
    except ImportError:
        return None
    return ipywidgets


# In JupyterLab's output area of one cell: while the live widget (class course-live) is shown,
# hide the output holding the folded cards (course-static); while it is not (the kernel that made
# it is gone, or still loading), hide the widget's place, which would say "Error displaying widget".
STATIC_STYLE = ("<style>"
                ".jp-OutputArea:has(.course-live) .jp-OutputArea-child:has(.course-static) {display: none}"
                ".jp-OutputArea:has(.course-static) .jp-OutputArea-child:has(.jupyter-widgets)"
                ":not(:has(.course-live)) {display: none}"
                "</style>")
WIDGET_NOTE = "(the cards above, as a widget: run this cell to answer them here)"


def _show(widget, static_html):
    """Display the static form of the cards, then the live widget (see the module's docstring)."""
    from IPython.display import display

    widget.add_class("course-live")
    display({"text/html": f"{STATIC_STYLE}<div class='course-static'>{static_html}</div>"}, raw=True)
    bundle = dict(widget._repr_mimebundle_())
    bundle["text/plain"] = WIDGET_NOTE  # what a viewer without the widget shows, in place of its repr
    display(bundle, raw=True)


def flashcards(lesson, folder=None, state_path=None):
    """Show the lesson's flashcards: click "show answer", then say whether you knew it.

    Your answers go into the review schedule that `make review` and the review notebook drill.
    Returns None, so that the cards are shown once.
    """
    from IPython.display import HTML, display

    cards = flashcard_list([lesson], folder)
    fallback = f"<b>Flashcards</b> (click one to turn it over){flashcards_html(cards=cards)}"
    widgets = _widgets()
    if widgets is None:
        display(HTML(fallback))
        return None
    title = widgets.HTML("<b>Flashcards</b>: answer in your head, then turn the card over.")
    box = widgets.VBox([title] + [CardWidget(widgets, c, f"card {c['index'] + 1} of {len(cards)}",
                                             state_path).widget for c in cards])
    box.add_class("course-flashcards")
    _show(box, fallback)
    return None


class CardWidget:
    """One card: the question, a button that turns it over, then "knew it" / "didn't"."""

    def __init__(self, widgets, card, caption, state_path=None, on_answer=None):
        self.card, self.caption, self.state_path, self.on_answer = card, caption, state_path, on_answer
        self.front = widgets.HTML(self._face(card["front"], self._status()))
        self.front.add_class("course-card-front")
        self.back = widgets.HTML("")
        self.back.add_class("course-card-back")
        self.flip = widgets.Button(description="show answer", tooltip="turn the card over")
        self.flip.add_class("course-card-flip")
        self.knew = widgets.Button(description="✓ knew it", button_style="success")
        self.knew.add_class("course-card-knew")
        self.missed = widgets.Button(description="✗ didn't", button_style="warning")
        self.missed.add_class("course-card-missed")
        self.undo = widgets.Button(description="↶ undo", tooltip="take this answer back")
        self.undo.add_class("course-card-undo")
        self.undo.layout.display = "none"
        self.verdict = widgets.HTML("")
        self.verdict.add_class("course-card-verdict")
        self.flip.on_click(self.turn)
        self.knew.on_click(lambda _: self.answer(True))
        self.missed.on_click(lambda _: self.answer(False))
        self.undo.on_click(self.take_back)
        self.answers = widgets.HBox([self.knew, self.missed])
        self.answers.layout.display = "none"
        self.widget = widgets.VBox([self.front, self.back,
                                    widgets.HBox([self.flip, self.answers, self.undo]), self.verdict],
                                   layout=widgets.Layout(border="1px solid #bbb", padding="4px 8px",
                                                         margin="4px 0"))
        self.widget.add_class("course-card")

    def _status(self):
        from helpers import review

        return review.describe_card(self.card["id"], path=self.state_path)

    def _face(self, text, note=""):
        note = f" · {html.escape(note)}" if note else ""
        return (f"<div style='font-size:0.85em;color:#777'>{html.escape(self.card['lesson'])} · "
                f"{html.escape(self.caption)}{note}</div>"
                f"<div style='padding:0.3em 0;font-size:1.05em'>{inline_html(text)}</div>")

    def turn(self, _=None):
        if self.back.value:
            self.back.value = ""
            self.flip.description = "show answer"
            self.answers.layout.display = "none"
        else:
            self.back.value = (f"<div style='padding:0.3em 0;border-top:1px dashed #bbb'>"
                               f"<b>Answer:</b> {inline_html(self.card['back'])}</div>")
            self.flip.description = "hide answer"
            self.answers.layout.display = "flex"

    def answer(self, knew):
        from helpers import review

        message = review.record(self.card["id"], knew, path=self.state_path)
        self.front.value = self._face(self.card["front"], self._status())
        self.verdict.value = f"<i>{html.escape(message)}</i>"
        self.answers.layout.display = "none"
        self.undo.layout.display = "flex"
        if self.on_answer:
            self.on_answer(knew, message)

    def take_back(self, _=None):
        """Undo this card's answer (only if no other answer was saved since), and ask again."""
        from helpers import review

        message = review.undo(self.card["id"], path=self.state_path)
        self.front.value = self._face(self.card["front"], self._status())
        self.verdict.value = f"<i>{html.escape(message or 'nothing to undo: another answer came since')}</i>"
        self.undo.layout.display = "none"
        if message and self.back.value:
            self.answers.layout.display = "flex"


def review(lessons=None, new=None, folder=None, state_path=None):
    """The review drill: today's cards from every lesson (or `lessons`), one at a time.

    Cards due again, then new cards from the lessons you have started (`new` a day, at most).
    """
    from IPython.display import HTML, display

    from helpers import review as schedule

    cards = flashcard_list(lessons, folder)
    due = schedule.due(cards, new=schedule.NEW_PER_DAY if new is None else new, path=state_path)
    fallback = (f"<b>Today: {len(due)} card(s)</b> (click one to turn it over)"
                f"{flashcards_html(cards=due)}")
    widgets = _widgets()
    if widgets is None:
        display(HTML(fallback))
        return None
    session = ReviewSession(widgets, due, state_path, cards=cards, new=new)
    _show(session.widget, fallback)
    return session


class ReviewSession:
    """Shows cards one after another; a missed card comes back at the end of the session.

    "undo" takes the last answer back and shows that card again. The session has no display
    of its own (review() shows its widget), so a cell ending in it shows the cards once.
    """

    def __init__(self, widgets, due, state_path=None, cards=None, new=None):
        from helpers import review as schedule

        self.widgets, self.state_path = widgets, state_path
        self.cards = due if cards is None else cards  # what "still due today" counts over
        self.new = schedule.NEW_PER_DAY if new is None else new
        self.queue, self.total = list(due), len(due)
        self.knew = self.missed = 0
        self.current = None  # the card on show
        self.answered = None  # the last answer, (card, knew), while it can be taken back
        self.last = ""
        self.header = widgets.HTML("")
        self.undo = widgets.Button(description="↶ undo last answer", tooltip="take your last answer back")
        self.undo.add_class("course-review-undo")
        self.undo.on_click(self.take_back)
        self.slot = widgets.VBox([])
        note = ("<i>Read-only: your schedule could not be used (see the warning above), so answers "
                "are not saved.</i>" if schedule.read_only(state_path) else "")
        self.widget = widgets.VBox([widgets.HTML(note), self.header, self.undo, self.slot])
        self.widget.add_class("course-review")
        self.next()

    def _ipython_display_(self):
        """Nothing: the session's widget is already on show."""

    def next(self):
        from helpers import review as schedule

        self.undo.layout.display = "flex" if self.answered else "none"
        if not self.queue:
            self.current = None
            outlook = html.escape(schedule.outlook(path=self.state_path))
            if self.total == 0:
                self.header.value = (f"<b>Nothing is due today.</b> {outlook} New cards come from the "
                                     "lessons you have started (run a check, or answer a card).")
            else:
                left = html.escape(schedule.still_due(self.cards, self.new, self.state_path))
                self.header.value = (f"<b>Done for today.</b> Knew {self.knew}, missed {self.missed}. "
                                     f"{left} {outlook}{self.last}")
            self.header.add_class("course-review-done")
            self.slot.children = ()
            return
        self.header.remove_class("course-review-done")
        card = self.current = self.queue.pop(0)
        self.header.value = (f"<b>{len(self.queue) + 1} card(s) left</b> "
                             f"({self.knew} known, {self.missed} missed so far){self.last}")
        shown = CardWidget(self.widgets, card, f"card {card['index'] + 1}", self.state_path,
                           on_answer=lambda knew, message: self._answered(card, knew, message))
        self.slot.children = (shown.widget,)

    def _answered(self, card, knew, message):
        self.last = f"<br><i>Last card: {html.escape(message)}</i>"
        self.answered = (card, knew)
        if knew:
            self.knew += 1
        else:
            self.missed += 1
            self.queue.append(card)
        self.next()

    def take_back(self, _=None):
        from helpers import review as schedule

        if self.answered is None:
            return
        card, knew = self.answered
        self.answered = None
        message = schedule.undo(card["id"], path=self.state_path)
        if self.current is not None:
            self.queue.insert(0, self.current)  # next() shows it again
        if message is None:
            self.last = "<br><i>Nothing to undo: another answer was saved since.</i>"
        else:
            self.last = f"<br><i>Last card: {html.escape(message)}</i>"
            if knew:
                self.knew -= 1
            else:
                self.missed -= 1
                self.queue.pop()  # its second go at the end of the session
            self.queue.insert(0, card)
        self.next()
