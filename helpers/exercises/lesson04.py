"""Lesson 04 exercises: a 2-D kernel over strided tensors, grouped tile order, a tiled matmul, and a
matmul with a fused bias + GELU epilogue."""

import random

import torch
import torch.nn.functional as F

from helpers.device import DEVICE, ON_GPU, pick
from helpers.exercises import Case, Exercise

# ---------------------------------------------------------------- add_2d


def add_2d_reference(x, y):
    return x + y  # read 2MN elements (or fewer, for a broadcast view), write MN


def _add_2d_cases():
    def randn(*shape, dtype=torch.float32):
        return torch.randn(*shape, device=DEVICE, dtype=dtype)

    m, n = pick((150, 70), (3000, 2500))
    return [
        Case("1x1 (a single element)", (randn(1, 1), randn(1, 1))),
        Case(f"{m}x{n}, both contiguous (not multiples of the block)", (randn(m, n), randn(m, n))),
        Case(f"{m}x{n}, y a transposed view (stride_ym = 1)", (randn(m, n), randn(n, m).t())),
        Case(f"{m}x{n}, x every other column of a wider matrix (stride_xn = 2)",
             (randn(m, 2 * n)[:, ::2], randn(m, n))),
        Case(f"{m}x{n}, y one row broadcast down (stride_ym = 0): a bias add",
             (randn(m, n), randn(1, n).expand(m, n))),
        Case("37x5 float16, both transposed views", (randn(5, 37, dtype=torch.float16).t(),
                                                      randn(5, 37, dtype=torch.float16).t())),
    ]


# ---------------------------------------------------------------- grouped_order


def grouped_order_reference(pid, num_pid_m, num_pid_n, group_m):
    per_group = group_m * num_pid_n
    first_m = (pid // per_group) * group_m
    rows = min(num_pid_m - first_m, group_m)
    return first_m + (pid % per_group) % rows, (pid % per_group) // rows


def _every_program(fn, num_pid_m, num_pid_n, group_m):
    """The tile of every program id, in order: [(pid_m, pid_n), ...]."""
    out = []
    for pid in range(num_pid_m * num_pid_n):
        tile = fn(pid, num_pid_m, num_pid_n, group_m)
        if tile is None:
            return None
        out.append(tuple(int(t) for t in tile))
    return out


def _grouped_order_cases():
    r = random.Random()
    cases = [Case("4x4 tiles, groups of 2 rows", (4, 4, 2)),
             Case("7x5 tiles, groups of 3 rows (the last group has only one)", (7, 5, 3)),
             Case("3x6 tiles, group_m = 1: plain row-major order", (3, 6, 1)),
             Case("2x9 tiles, groups of 8 rows (more than there are)", (2, 9, 8)),
             Case("9x1 tiles, one tile column", (9, 1, 4))]
    m, n, g = r.randint(5, 40), r.randint(5, 40), r.choice([4, 8])
    cases.append(Case(f"{m}x{n} tiles, groups of {g} (random sizes)", (m, n, g)))
    return cases


# ---------------------------------------------------------------- matmul, matmul_silu


def matmul_reference(a, b):
    return a @ b  # 2MNK FLOPs; read MK + KN elements, write MN


def matmul_bias_gelu_reference(a, b, bias):
    c = a @ b                                  # read MK + KN, write MN
    c = c + bias                               # read MN + N, write MN
    return F.gelu(c, approximate="tanh")       # read MN, write MN: two round trips the epilogue avoids


def _with_bias(cases):
    return [Case(c.label, (*c.args, torch.randn(c.args[1].shape[1], device=DEVICE, dtype=c.args[0].dtype)))
            for c in cases]


def _matmul_cases():
    """Fresh fp16 (a, b) pairs; b is scaled by 1/sqrt(K) so that outputs stay of order one."""
    def operands(M, N, K, layout="contiguous"):
        def randn(rows, cols, scale=1.0):
            return (torch.randn(rows, cols, device=DEVICE) * scale).half()

        a = randn(M, 2 * K)[:, ::2] if layout == "a strided" else randn(M, K)
        b = randn(N, K, K**-0.5).t() if layout == "b transposed" else randn(K, N, K**-0.5)
        return a, b

    big = pick((150, 130, 200), (1500, 1000, 700))
    cases = [Case("1x1x1", operands(1, 1, 1)),
             Case("64x64x64 (exact multiples of the blocks)", operands(64, 64, 64)),
             Case("100x37x70: nothing is a multiple of the block", operands(100, 37, 70)),
             Case("{}x{}x{} (M, N, K)".format(*big), operands(*big)),
             Case("96x80x72, b a transposed view", operands(96, 80, 72, "b transposed")),
             Case("65x33x40, a every other column of a wider matrix", operands(65, 33, 40, "a strided"))]
    if ON_GPU:
        cases.append(Case("2048x2048x4096 (a long inner dimension)", operands(2048, 2048, 4096)))
    return cases


EXERCISES = [
    Exercise("04", "add_2d", "x + y over strided 2-D views", add_2d_reference, _add_2d_cases),
    Exercise("04", "grouped_order", "grouped tile order", grouped_order_reference, _grouped_order_cases,
             run=_every_program, reference_in_float64=False),
    Exercise("04", "matmul", "tiled matmul with tl.dot", matmul_reference, _matmul_cases),
    Exercise("04", "matmul_bias_gelu", "matmul + bias + GELU epilogue", matmul_bias_gelu_reference,
             lambda: _with_bias(_matmul_cases())),
]
