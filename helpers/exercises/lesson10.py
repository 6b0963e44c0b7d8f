"""Lesson 10 exercises: Hopper attention.

1. `softmax_long`: softmax over rows longer than one tile, in two passes (a running max and sum,
   then the output), the second walking the row from its last tile back to its first. Rows that
   begin with a whole tile of -inf, values of 1e4, float16, and rows of a wider matrix.

Beyond the values, the check measures what the lesson teaches with the interpreter's record of every
load and store (on a GPU too, on small inputs): how many times x was read, and where each program's
second pass began.
"""

import numpy as np
import torch

from helpers.device import DEVICE, pick
from helpers.exercises import Case, Exercise
from helpers.exercises.lesson05 import SOFTMAX_TOL
from helpers.exercises.lesson09 import F16, F32, _name, _odd, _recorded

NEG_INF = float("-inf")


# ---------------------------------------------------------------- 1. softmax_long


def softmax_reference(x):
    """Softmax over each row of x (no row here is entirely -inf)."""
    return torch.softmax(x, dim=-1)            # read Mn, write Mn


def _rows(M, n, dtype, kind="randn", view=False):
    """(M, n) rows of one kind; view: a column slice of a wider matrix (row stride n + 13)."""
    width = n + 13 if view else n
    if kind == "randn":
        x = torch.randn(M, width, device=DEVICE) * 3
    elif kind == "huge":          # uniform in [-1e4, 1e4]: exp(x) overflows unless the max is subtracted
        x = (torch.rand(M, width, device=DEVICE) * 2 - 1) * 1e4
    elif kind == "ascending":     # each row climbs from -1e4 to 1e4: a new max in every tile
        x = torch.linspace(-1e4, 1e4, width, device=DEVICE).repeat(M, 1) + torch.rand(M, 1, device=DEVICE)
    elif kind == "flat":          # a level plus noise of 0.1: every output about 1 / n
        x = torch.rand(M, 1, device=DEVICE) * 10 - 5 + torch.rand(M, width, device=DEVICE) * 0.1
    elif kind == "-inf head":     # the first half of each row -inf (a whole tile of any size up to n / 2)
        x = torch.randn(M, width, device=DEVICE) * 3
        x[:, : n // 2] = NEG_INF
        x[1::2][torch.rand(x[1::2].shape, device=DEVICE) < 0.2] = NEG_INF   # and -inf scattered after it
        x[:, n - 1] = 0.0         # every row keeps a finite value
    else:
        raise ValueError(kind)
    return x.to(dtype)[:, :n]


def _softmax_cases():
    # On the CPU the solution's tile is 256 values; on a GPU 2048 to 8192. Rows are several tiles
    # long, odd (a multiple of no tile), and the -inf head is longer than a tile of either.
    long = pick((1001, 3071), (20_001, 40_001))
    headed = pick((2049, 3071), (20_001, 40_001))   # half a row: longer than a tile of 1024 (CPU), 8192 (GPU)
    specs = [(pick(3, 67), _odd(*long), F32, "randn", False, "rows of several tiles"),
             (4, _odd(*long), F16, "randn", False, "float16 inputs, float32 arithmetic"),
             (1, _odd(*long), F32, "randn", False, "a single row"),
             (4, _odd(*headed), F32, "-inf head", False,
              "the first half of each row -inf: the first tiles hold no finite value"),
             (3, _odd(*long), F32, "huge", False, "uniform in [-1e4, 1e4]: the max must be subtracted"),
             (3, _odd(*long), F16, "huge", False, "float16, uniform in [-1e4, 1e4]"),
             (2, _odd(*long), F32, "ascending", False, "rows ascending from -1e4 to 1e4: a new max in "
                                                      "every tile"),
             (2, _odd(*long), F16, "flat", False, "float16, every output about 1/n: float16 sums lose it"),
             (3, _odd(*long), F32, "randn", True, "a slice of a wider matrix: rows n + 13 values apart"),
             (2, _odd(*long), F16, "randn", True, "float16, a slice of a wider matrix"),
             (5, _odd(51, 199), F32, "randn", False, "rows shorter than a tile")]
    return [Case(f"{M}x{n} {_name(dtype)} ({why})", (_rows(M, n, dtype, kind, view),))
            for M, n, dtype, kind, view, why in specs]


# The tolerances of lesson 05's softmax (relative: the outputs are about 1/n, far below an absolute
# tolerance). The running sum over a row adds n values in float32, a tile at a time: about
# log2(tile) + n / tile roundings of 2**-24, under 2e-6 for these rows at any tile of 16 values or
# more, within float32's rtol of 1e-5. float16 outputs are rounded once, at the store (2**-12).
SOFTMAX_LONG_TOL = SOFTMAX_TOL

SOFTMAX_NAN_HINT = ("If this case's rows begin with whole tiles of -inf: the running max is still -inf after "
                    "such a tile, and -inf - (-inf) is NaN.")


def _second_pass_backwards(fn):
    """x read exactly twice, the output written once, and in every program the first load after the
    first pass has covered a row includes that row's last element: the second pass starts at the end."""
    M, n = pick((3, _odd(2001, 3071)), (2, _odd(20_001, 30_001)))
    x = torch.randn(M, n, device=DEVICE)
    launches, problem = _recorded(fn, x, touches=True)
    if problem:
        return problem
    loaded = sum(launch.bytes_loaded for launch in launches)
    stored = sum(launch.bytes_stored for launch in launches)
    loads = [(pid, arg, offs) for launch in launches for pid, arg, kind, offs in launch.touches
             if kind == "load"]
    reads, writes = loaded / x.nbytes, stored / x.nbytes
    widest = max((len(offs) for *_, offs in loads), default=0)
    where = f"for x of shape ({M}, {n}) float32, your kernel"
    if widest >= n:
        return (f"{where} loaded {widest:,} values at once, a whole row: this exercise is for rows "
                f"longer than any tile a program can hold. Walk each row in tiles shorter than the row.")
    if reads != 2:
        return (f"{where} loaded {loaded:,} bytes, {reads:.3g} times x ({x.nbytes:,} bytes). Read each row "
                f"exactly twice: once to update the running max and the running sum together, once to "
                f"write the output.")
    if writes != 1:
        return (f"{where} stored {stored:,} bytes, {writes:.3g} times the output ({x.nbytes:,} bytes): "
                f"store each output element once, in the second pass.")
    # x is the argument loaded most; its offsets are row * n + column (x is contiguous here).
    totals = {}
    for _pid, arg, offs in loads:
        totals[arg] = totals.get(arg, 0) + len(offs)
    x_arg = max(totals, key=totals.get)
    covered, judged = {}, set()
    for pid, arg, offs in loads:
        if arg != x_arg:
            continue
        seen = covered.setdefault(pid, np.zeros((M, n), dtype=bool))
        rows, cols = np.divmod(np.asarray(offs), n)
        for row in np.unique(rows):
            if (pid, row) in judged or not seen[row].all():
                continue
            judged.add((pid, row))
            tile = cols[rows == row]
            if n - 1 not in tile:
                return (f"{where} began its second pass over row {row} (program {pid[0]}) with columns "
                        f"{tile.min()}..{tile.max()} of {n}. Walk the second pass from the row's last tile "
                        f"back to its first: those are the tiles the first pass read last, still in the "
                        f"L2 cache when the second pass starts, where the row's head has long left it.")
        seen[rows, cols] = True
    return None


EXERCISES = [
    Exercise("10", "softmax_long", "softmax of long rows, the second pass backwards", softmax_reference,
             _softmax_cases, tol=SOFTMAX_LONG_TOL, kernel=True, nan_hint=SOFTMAX_NAN_HINT,
             structure=_second_pass_backwards),
]
