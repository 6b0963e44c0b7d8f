# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Review: the flashcards of every lesson, spaced
#
# Reading a lesson once is not remembering it. This notebook asks you the flashcards of all the
# lessons you have started, a few minutes a day, and spaces each card out by how well you know it.
# Come back whenever you like; it remembers where you are.
#
# **You will:**
# - answer today's cards, one at a time: think of the answer, turn the card over, say whether you
#   knew it (a mis-click? "undo last answer" takes it back);
# - see where you stand: every lesson's exercises (pass, fail, not done) and cards (new, due,
#   learning, learned).
#
# ## How the spacing works
#
# Cards are scheduled by FSRS, the scheduler Anki uses. For each card it keeps an estimate of how
# long you will remember it, and brings the card back when you are about to forget it: each time
# you know a card the wait grows, and a card you miss comes round again the same day and starts
# over from a short wait. Knowing a card before it is due (in a lesson's own flashcards, say)
# counts for little, since you saw it a short while ago. The cell below asks the scheduler itself.
#
# A card is *new* until you first answer it, *learning* while it waits less than three weeks, and
# *learned* once it waits three weeks or more; on the day it comes back it is *due*.
#
# Your schedule is one small file, `.course/review.json` in the course folder (git ignores it). The
# same schedule drives `make review` in a terminal, and the lessons' flashcards write into it too;
# answers from here and from a terminal at the same time are all kept. If the file cannot be used
# (unreadable, damaged, or from a newer version of the course), it is never moved or replaced: a
# warning says how to fix it, and the drill goes on without saving.

# %%
from helpers.cards import review
from helpers.review import progress_rows, progress_text, spacing_example

print(spacing_example())

# %% [markdown]
# Today's cards: every card that is due again, then new ones, only from lessons you have started (a
# `check(...)` run in the lesson, or one of its cards answered), at most 20 new cards a day. Run the
# cell again to start over with what is still due.

# %%
session = review()

# %% [markdown]
# ## Where you stand
#
# Exercise results are the latest from a `check(...)` in a notebook or from `make grade`; cards are
# from your schedule: new (not seen yet), due today, learning, and learned (waiting three weeks or
# more). Each card counts in one column, so they add up to the lesson's cards. The same table is
# `make progress` in a terminal.

# %%
print(progress_text(progress_rows()))

# %% [markdown]
# ## Away from the screen
#
# `make flashcards` writes every card to `build/flashcards.html` (and `build/flashcards.pdf` when
# Chromium is installed to print it): five cards a page, question and answer side by side. Cut them
# out, fold each along the dashed line, and you have a deck for the train. It also writes
# `build/flashcards.apkg`, the same cards for Anki (File > Import), one subdeck per lesson.
