"""Lesson 10: softmax_long. Each mutant is a one-line edit of the solution."""

import torch

from mutants import Right, Wrong, edit

# ---------------------------------------------------------------- 1. softmax_long

SHIFT = '        shift = tl.where(m_new == -float("inf"), 0.0, m_new)   # nothing finite yet: add zeros, not NaNs\n'
SUM = "        l = l * tl.exp(m - shift) + tl.sum(tl.exp(x - shift), axis=0)\n"
PASS_1 = ("    for start in range(0, n_cols, BLOCK):\n"
          '        x = tl.load(x_row + start + offs, mask=start + offs < n_cols, other=-float("inf")).to(tl.float32)\n'
          "        m_new = tl.maximum(m, tl.max(x, axis=0))\n" + SHIFT + SUM + "        m = m_new\n")
THREE_PASSES = ("    for start in range(0, n_cols, BLOCK):\n"
                '        x = tl.load(x_row + start + offs, mask=start + offs < n_cols, other=-float("inf")).to(tl.float32)\n'
                "        m = tl.maximum(m, tl.max(x, axis=0))\n"
                "    for start in range(0, n_cols, BLOCK):\n"
                '        x = tl.load(x_row + start + offs, mask=start + offs < n_cols, other=-float("inf")).to(tl.float32)\n'
                "        l += tl.sum(tl.exp(x - m), axis=0)\n")
BACKWARDS = "        cols = (n_tiles - 1 - i) * BLOCK + offs         # the last tile first\n"
PASS_2 = (BACKWARDS +
          '        x = tl.load(x_row + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)\n'
          "        tl.store(out_row + cols, (tl.exp(x - m) / l).to(out_ptr.dtype.element_ty), mask=cols < n_cols)\n")
END_ALIGNED = ("        cols = n_cols - (i + 1) * BLOCK + offs        # tiles that end at the row's end\n"
               '        x = tl.load(x_row + cols, mask=(cols >= 0) & (cols < n_cols), other=-float("inf")).to(tl.float32)\n'
               "        tl.store(out_row + cols, (tl.exp(x - m) / l).to(out_ptr.dtype.element_ty),\n"
               "                 mask=(cols >= 0) & (cols < n_cols))\n")

WRONG = [
    Wrong("softmax_long", "pure PyTorch, no kernel", lambda x: torch.softmax(x, dim=-1)),
    Wrong("softmax_long", "the second pass walks forwards", edit(
        "10", "softmax_long", (BACKWARDS, "        cols = i * BLOCK + offs\n"))),
    Wrong("softmax_long", "three passes: the max, then the sum, then the output", edit(
        "10", "softmax_long", (PASS_1, THREE_PASSES))),
    Wrong("softmax_long", "exp(m - m_new) while both are -inf: NaN after a tile of -inf", edit(
        "10", "softmax_long", (SHIFT, "        shift = m_new\n"))),
    Wrong("softmax_long", "the running sum not rescaled when the max grows", edit(
        "10", "softmax_long", (SUM, "        l = l + tl.sum(tl.exp(x - shift), axis=0)\n"))),
    Wrong("softmax_long", "no max subtracted: sum of exp(x), then exp(x) / sum", edit(
        "10", "softmax_long", (SUM, "        l = l + tl.sum(tl.exp(x), axis=0)\n"),
        ("(tl.exp(x - m) / l)", "(tl.exp(x) / l)"))),
    Wrong("softmax_long", "rows taken to be n_cols apart, not x's row stride", edit(
        "10", "softmax_long", ("    x_row = x_ptr + row * stride_xm\n", "    x_row = x_ptr + row * n_cols\n"))),
    Wrong("softmax_long", "the output allocated in float32, whatever x's dtype", edit(
        "10", "softmax_long", ("    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)\n",
                               "    out = torch.empty(x.shape, dtype=torch.float32, device=x.device)\n"))),
]

RIGHT = [
    Right("softmax_long", "tiles of 64 values", edit(
        "10", "softmax_long", ('cpu=[triton.Config({"BLOCK": 256}, num_warps=4)]',
                               'cpu=[triton.Config({"BLOCK": 64}, num_warps=4)]'))),
    Right("softmax_long", "the second pass in tiles that end at the row's end", edit(
        "10", "softmax_long", (PASS_2, END_ALIGNED))),
]
