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
# - see where you stand: every lesson's exercises (pass, fail, not done) and cards (new, due, learned).
#
# ## How the spacing works
#
# Each card sits in one of five boxes (the Leitner system). A new card starts in box 1.
#
# | box | a card you know here comes back after |
# |---|---|
# | 1 (new or missed) | 1 day, in box 2 |
# | 2 | 3 days, in box 3 |
# | 3 | 7 days, in box 4 |
# | 4 | 21 days, in box 5 |
# | 5 | 21 days, staying in box 5 |
#
# A card you miss drops back to box 1 and comes round again at the end of today's session. A card in
# box 4 or 5 counts as *learned*. Answering a card before it is due (in a lesson's own flashcards,
# say) does not move it up: only recall after a gap counts.
#
# Your schedule is one small file, `.course/review.json` in the course folder (git ignores it). The
# same schedule drives `make review` in a terminal, and the lessons' flashcards write into it too;
# answers from here and from a terminal at the same time are all kept. If the file cannot be used
# (unreadable, damaged, or from a newer version of the course), it is never moved or replaced: a
# warning says how to fix it, and the drill goes on without saving.

# %%
from helpers.cards import review
from helpers.review import progress_rows, progress_text

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
# from your schedule: new (not seen yet), due today, and learned (box 4 or 5). The same table is
# `make progress` in a terminal.

# %%
print(progress_text(progress_rows()))

# %% [markdown]
# ## Away from the screen
#
# `make flashcards` writes every card to `build/flashcards.html` (and `build/flashcards.pdf` when
# Chromium is installed to print it): five cards a page, question and answer side by side. Cut them
# out, fold each along the dashed line, and you have a deck for the train.
