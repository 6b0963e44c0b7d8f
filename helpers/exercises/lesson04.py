"""Lesson 04 exercises: a 2-D kernel over strided tensors, grouped tile order, a tiled matmul, and a
matmul with a fused SiLU epilogue."""

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


def matmul_silu_reference(a, b):
    c = a @ b          # read MK + KN, write MN
    return F.silu(c)   # read MN, write MN: the round trip the fused epilogue avoids


def _matmul_cases():
    def randn(*shape):
        return torch.randn(*shape, device=DEVICE, dtype=torch.float16)

    big = pick((150, 200, 130), (1500, 1000, 700))
    cases = [Case("1x1x1", (randn(1, 1), randn(1, 1))),
             Case("64x64x64 (exact multiples of the blocks)", (randn(64, 64), randn(64, 64))),
             Case("100x37x70: nothing is a multiple of the block", (randn(100, 70), randn(70, 37))),
             Case("{}x{}x{} (M, N, K)".format(*big), (randn(big[0], big[2]), randn(big[2], big[1]))),
             Case("96x80x72, b a transposed view", (randn(96, 72), randn(80, 72).t())),
             Case("65x33x40, a every other column of a wider matrix", (randn(65, 80)[:, ::2], randn(40, 33)))]
    if ON_GPU:
        cases.append(Case("2048x2048x4096 (a long inner dimension)", (randn(2048, 4096), randn(4096, 2048))))
    return cases


EXERCISES = [
    Exercise("04", "add_2d", "x + y over strided 2-D views", add_2d_reference, _add_2d_cases),
    Exercise("04", "grouped_order", "grouped tile order", grouped_order_reference, _grouped_order_cases,
             run=_every_program, reference_in_float64=False),
    Exercise("04", "matmul", "tiled matmul with tl.dot", matmul_reference, _matmul_cases),
    Exercise("04", "matmul_silu", "matmul + SiLU epilogue", matmul_silu_reference, _matmul_cases),
]
