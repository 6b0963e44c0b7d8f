"""Self-check questions and flashcards, kept as data: one TOML file per lesson.

`helpers/cards/NN_slug.toml` holds

    [[self_check]]              # questions that close the lesson, answers folded
    question = "..."
    answer = "..."

    [[flashcards]]              # short facts for spaced review
    front = "..."
    back = "..."

A lesson ends with `self_check("NN")` and `flashcards("NN")`. Both render as
folded HTML blocks, which any notebook viewer shows; in JupyterLab the
flashcards are also clickable widgets.
"""

import html
import pathlib
import tomllib

CARDS = pathlib.Path(__file__).resolve().parent / "cards"


def card_file(lesson):
    found = sorted(CARDS.glob(f"{lesson}_*.toml"))
    if len(found) != 1:
        raise FileNotFoundError(f"expected one helpers/cards/{lesson}_*.toml, found {len(found)}")
    return found[0]


def load(lesson):
    """{'self_check': [...], 'flashcards': [...]} for lesson "NN"."""
    data = tomllib.loads(card_file(lesson).read_text(encoding="utf-8"))
    for key, fields in (("self_check", ("question", "answer")), ("flashcards", ("front", "back"))):
        for i, item in enumerate(data.get(key, [])):
            missing = [f for f in fields if not str(item.get(f, "")).strip()]
            if missing:
                raise ValueError(f"{card_file(lesson).name}: {key}[{i}] lacks {', '.join(missing)}")
    return data


def all_lessons():
    return sorted(p.name[:2] for p in CARDS.glob("[0-9][0-9]_*.toml"))


def _folded(summary, body):
    return (f"<details style='margin:0.3em 0'><summary>{html.escape(summary)}</summary>"
            f"<div style='margin:0.4em 1.2em'>{html.escape(body)}</div></details>")


def self_check_html(lesson):
    items = load(lesson).get("self_check", [])
    return "".join(_folded(f"{i}. {q['question']}", q["answer"]) for i, q in enumerate(items, 1))


def flashcards_html(lesson):
    return "".join(_folded(c["front"], c["back"]) for c in load(lesson).get("flashcards", []))


def self_check(lesson):
    """Show the lesson's self-check questions, each answer folded until clicked."""
    from IPython.display import HTML, display

    display(HTML(f"<b>Self-check</b> (answer before you unfold){self_check_html(lesson)}"))


def flashcards(lesson):
    """Show the lesson's flashcards: click a card to turn it over."""
    from IPython.display import HTML, display

    cards = load(lesson).get("flashcards", [])
    try:
        import ipywidgets as widgets
    except ImportError:
        widgets = None
    if widgets is None:
        display(HTML(flashcards_html(lesson)))
        return
    display(widgets.VBox([_card_widget(widgets, c) for c in cards]))


def _card_widget(widgets, card):
    button = widgets.Button(description="", layout=widgets.Layout(width="100%", height="auto"),
                            tooltip="click to turn the card over")
    faces = [card["front"], card["back"]]
    state = {"side": 0}
    label = widgets.HTML(f"<div style='padding:0.5em'>{html.escape(faces[0])}</div>")

    def flip(_):
        state["side"] = 1 - state["side"]
        tag = "<b>Answer:</b> " if state["side"] else ""
        label.value = f"<div style='padding:0.5em'>{tag}{html.escape(faces[state['side']])}</div>"
        button.description = "show question" if state["side"] else "show answer"

    button.description = "show answer"
    button.on_click(flip)
    return widgets.VBox([label, button], layout=widgets.Layout(border="1px solid #ccc", margin="4px 0"))
