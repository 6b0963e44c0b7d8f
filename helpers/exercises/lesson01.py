"""Lesson 01 exercises: a first kernel, and one with a scalar argument."""

import math

import torch

from helpers import interpreter
from helpers.device import DEVICE, pick
from helpers.exercises import Case, Exercise
from helpers.exercises.lesson02 import fused


def vectors(count):
    """Cases of `count` fresh random vectors each: awkward lengths, then a strided view.

    Every length is odd, so no power-of-two block divides it: the last program always has a ragged tail.
    """
    cases = [Case(f"n={n} ({why})", tuple(torch.randn(n, device=DEVICE) for _ in range(count)))
             for n, why in [(1, "a single element"),
                            (1001, "not a multiple of any block"),
                            (4097, "one element past a multiple of every block up to 4096"),
                            (pick(100_003, 10_000_019), "large and prime")]]
    cases.append(Case("n=1501, strided views (every other element of a longer vector)",
                      tuple(torch.randn(3002, device=DEVICE)[::2] for _ in range(count))))
    return cases


def add_reference(x, y):
    return x + y  # read 2n elements, write n


def axpy_reference(alpha, x, y):
    return alpha * x + y  # read 2n elements, write n


def _axpy_cases():
    """Each case gets a random alpha, the signs alternating: a hard-coded or dropped alpha fails."""
    sign = 1.0 if torch.rand(()) < 0.5 else -1.0
    cases = []
    for i, case in enumerate(vectors(2)):
        alpha = round(sign * (-1) ** i * float(torch.empty(()).uniform_(0.25, 2.5)), 3)
        cases.append(Case(f"{case.label}, alpha={alpha}", (alpha, *case.args)))
    return cases


def _refuses_other_lengths(fn):
    """axpy refuses vectors of different lengths before its kernel runs (the exercise: check the shapes).
    In the interpreter, on a GPU too: only the interpreter stops a kernel reading past the end."""
    from helpers.check import _find_cause  # not at the top: helpers.check imports this package

    x, y = torch.randn(100, device=DEVICE), torch.randn(99, device=DEVICE)
    try:
        with interpreter.interpreted():
            fn(0.5, x, y)
    except Exception as e:
        if _find_cause(e, interpreter.OutOfBounds) is None:
            return None   # refused: what the exercise asks
        return ("given x of 100 values and y of 99, its kernel read past the end of y (the interpreter "
                "stopped it; a GPU would read whatever lies there). Check the shapes in the launcher "
                "first, with an assert and a message.")
    return ("given x of 100 values and y of 99 it returned a result. Check the shapes in the launcher "
            "first, with an assert and a message, and refuse vectors of different lengths.")


def _one_launch(fn):
    """axpy launches its kernel once, on enough programs and no more: a launch per piece pays the CPU's
    cost of a launch each time (the lesson measures it), however little the piece holds; a program
    that covers no element is launched for nothing, and a handful of huge programs leave most of the
    GPU's SMs idle (a program runs on one SM). n is a multiple of every block up to 2**17: the value
    cases' lengths are all odd, where a grid of n // BLOCK + 1 happens to be cdiv(n, BLOCK); here it is
    one program too many."""
    n = 2**17
    x, y = torch.randn(n, device=DEVICE), torch.randn(n, device=DEVICE)
    with interpreter.record(touches=True) as rec:
        fn(0.5, x, y)
    if len(rec.launches) != 1:
        return (f"for vectors of {n:,} values it made {len(rec.launches)} launches. Launch axpy_kernel once, "
                f"on cdiv(n, BLOCK) programs: every launch costs the CPU microseconds however few values it "
                f"covers (the lesson's section on launch overhead, below, measures it).")
    (launch,) = rec.launches
    programs = math.prod(launch.grid)
    busy = len({pid for pid, _name, _kind, offs in launch.touches if len(offs)})
    if busy < programs:
        extra = (f" ({n:,} is a multiple of your BLOCK: cdiv(n, BLOCK) is then exactly n // BLOCK, and "
                 f"n // BLOCK + 1 is one program too many.)" if programs - busy == 1 else "")
        return (f"for vectors of {n:,} values it launched {programs:,} programs, and {programs - busy:,} of "
                f"them touched no element: launch cdiv(n, BLOCK) programs, as many as it takes to cover "
                f"the vector with blocks of BLOCK values.{extra}")
    if programs < math.ceil(n / 16384):
        return (f"for vectors of {n:,} values it launched {programs} program(s). A program runs on one SM, "
                f"so a few huge blocks leave most of a GPU idle: use blocks of BLOCK = 1024 values, "
                f"cdiv(n, BLOCK) programs.")
    return None


def _nothing_beside(fn):
    """Nothing but the kernel touches memory: no copy made by PyTorch (y cloned into the output, then
    added into), each input loaded once, the output stored once (lesson 02's fusion check)."""
    x, y = torch.randn(5000, device=DEVICE), torch.randn(5000, device=DEVICE)
    return fused(fn, 0.5, x, y, elementwise=True)


EXERCISES = [
    Exercise("01", "vector_add", "vector add", add_reference, lambda: vectors(2), kernel=True,
             copies_inputs=True),  # the lesson's launcher makes x and y contiguous
    Exercise("01", "axpy", "alpha * x + y", axpy_reference, _axpy_cases, kernel=True,
             copies_inputs=True,  # the exercise says: make x and y contiguous
             structure=lambda fn: _refuses_other_lengths(fn) or _one_launch(fn) or _nothing_beside(fn)),
]
