"""Lesson 02 exercises: fuse an elementwise chain, and a bias + GELU epilogue."""

import torch
import torch.nn.functional as F

from helpers.device import DEVICE, pick
from helpers.exercises import Case, Exercise

SHAPES = [((1, 1), "a single element"),
          ((3, 1000), "rows not a multiple of the block"),
          ((257, 129), "odd sizes everywhere"),
          ((pick(96, 4096), pick(512, 4096)), "large")]


def matrices_and_bias(with_residual):
    """Fresh (x, bias[, residual]) cases, then one where x is a strided (transposed) view."""
    def make(m, n, x=None):
        x = torch.randn(m, n, device=DEVICE) if x is None else x
        bias = torch.randn(n, device=DEVICE)
        return (x, bias, torch.randn(m, n, device=DEVICE)) if with_residual else (x, bias)

    cases = [Case(f"{m}x{n} ({why})", make(m, n)) for (m, n), why in SHAPES]
    cases.append(Case("300x200, x a transposed view (not contiguous)",
                      make(300, 200, torch.randn(200, 300, device=DEVICE).t())))
    return cases


def chain_reference(x, bias, residual, scale):
    y = x + bias         # read MN + N, write MN
    y = torch.relu(y)    # read MN, write MN
    y = y * scale        # read MN, write MN
    return y + residual  # read 2MN, write MN


def _chain_cases():
    return [Case(c.label, (*c.args, 0.5)) for c in matrices_and_bias(with_residual=True)]


def bias_gelu_reference(x, bias):
    return F.gelu(x + bias, approximate="tanh")  # two kernels: read MN + N, write MN; read MN, write MN


EXERCISES = [
    Exercise("02", "fused_chain", "relu(x + bias) * scale + residual", chain_reference, _chain_cases),
    Exercise("02", "bias_gelu", "GELU(x + bias) epilogue", bias_gelu_reference,
             lambda: matrices_and_bias(with_residual=False)),
]
