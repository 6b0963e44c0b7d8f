"""Lesson 01 exercises: a first kernel, and one with a scalar argument."""

import torch

from helpers.device import DEVICE, pick
from helpers.exercises import Case, Exercise


def vectors(count):
    """Cases of `count` fresh random vectors each: awkward lengths, then a strided view."""
    cases = [Case(f"n={n} ({why})", tuple(torch.randn(n, device=DEVICE) for _ in range(count)))
             for n, why in [(1, "a single element"),
                            (1000, "not a multiple of the block"),
                            (4096, "an exact multiple of the block"),
                            (pick(100_003, 10_000_019), "large and prime")]]
    cases.append(Case("n=1501, strided views (every other element of a longer vector)",
                      tuple(torch.randn(3002, device=DEVICE)[::2] for _ in range(count))))
    return cases


def add_reference(x, y):
    return x + y  # read 2n elements, write n


def axpy_reference(alpha, x, y):
    return alpha * x + y  # read 2n elements, write n


def _axpy_cases():
    cases = []
    for case in vectors(2):
        alpha = round(float(torch.randn(())), 3)
        cases.append(Case(f"{case.label}, alpha={alpha}", (alpha, *case.args)))
    return cases


EXERCISES = [
    Exercise("01", "vector_add", "vector add", add_reference, lambda: vectors(2), kernel=True),
    Exercise("01", "axpy", "alpha * x + y", axpy_reference, _axpy_cases, kernel=True),
]
