"""Lesson 04: the solutions pass their checks, typical mistakes fail them, and the matmul moves the
bytes the tiling formula predicts."""

import pytest
import torch
import triton
import triton.language as tl

from helpers import DEVICE, check, exercises
from helpers.check import CheckFailed
from helpers.solutions import load_solution
from helpers.traffic import triton_traffic

lesson04 = load_solution("04")


@pytest.mark.parametrize("name, fn", [("add_2d", lesson04.add_2d), ("grouped_order", lesson04.grouped_order),
                                      ("matmul", lesson04.matmul),
                                      ("matmul_bias_gelu", lesson04.matmul_bias_gelu)])
def test_solutions_pass(name, fn):
    check(name, fn)


@triton.jit
def add_2d_contiguous_kernel(x_ptr, y_ptr, out_ptr, M, N, BLOCK: tl.constexpr):
    offs_m = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offs_n = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    offs = offs_m[:, None] * N + offs_n[None, :]  # assumes every tensor is contiguous: wrong for views
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def test_add_2d_ignoring_strides_fails():
    def ignores_strides(x, y):
        out = torch.empty(x.shape, device=x.device, dtype=x.dtype)
        M, N = x.shape
        add_2d_contiguous_kernel[(triton.cdiv(M, 32), triton.cdiv(N, 32))](x, y, out, M, N, BLOCK=32)
        return out
    with pytest.raises(CheckFailed, match="view"):
        check("add_2d", ignores_strides)


def test_grouped_order_row_major_fails():
    with pytest.raises(CheckFailed, match="groups of 2"):
        check("grouped_order", lambda pid, m, n, g: (pid // n, pid % n))


def test_grouped_order_with_a_full_last_group_fails():
    def full_groups(pid, num_pid_m, num_pid_n, group_m):
        per_group = group_m * num_pid_n
        first_m = (pid // per_group) * group_m
        return first_m + (pid % per_group) % group_m, (pid % per_group) // group_m  # forgets the short group
    with pytest.raises(CheckFailed, match="the last group"):
        check("grouped_order", full_groups)


@triton.jit
def sloppy_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                         stride_cm, stride_cn, BLOCK: tl.constexpr, MASK_K: tl.constexpr,
                         B_CONTIGUOUS: tl.constexpr, MASK_M_STORE: tl.constexpr, ACC16: tl.constexpr):
    """A plain tiled matmul with one of four mistakes: no mask on K, b assumed contiguous, no mask on
    the rows of the store, or a float16 accumulator."""
    offs_m = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offs_n = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float16 if ACC16 else tl.float32)
    for k0 in range(0, K, BLOCK):
        offs_k = k0 + tl.arange(0, BLOCK)
        k_ok = offs_k < K if MASK_K else offs_k >= 0
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak,
                    mask=(offs_m[:, None] < M) & k_ok[None, :], other=0.0)
        if B_CONTIGUOUS:
            b_ptrs = b_ptr + offs_k[:, None] * N + offs_n[None, :]
        else:
            b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
        b = tl.load(b_ptrs, mask=k_ok[:, None] & (offs_n[None, :] < N), other=0.0)
        if ACC16:
            acc = tl.dot(a, b, acc, out_dtype=tl.float16)
        else:
            acc = tl.dot(a, b, acc)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N) if MASK_M_STORE else offs_n[None, :] < N
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)


def sloppy_matmul(mask_k=True, b_contiguous=False, mask_m_store=True, acc16=False):
    def run(a, b):
        M, K = a.shape
        N = b.shape[1]
        c = torch.empty((M, N), device=a.device, dtype=a.dtype)
        grid = (triton.cdiv(M, 64), triton.cdiv(N, 64))
        sloppy_matmul_kernel[grid](a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride(), BLOCK=64,
                                   MASK_K=mask_k, B_CONTIGUOUS=b_contiguous, MASK_M_STORE=mask_m_store,
                                   ACC16=acc16)
        return c
    return run


def test_sloppy_matmul_without_mistakes_passes():
    check("matmul", sloppy_matmul())


def test_matmul_without_k_mask_fails():
    # the interpreter stops the stray loads; on a GPU they read whatever lies there (often NaN)
    with pytest.raises(CheckFailed, match="out of bounds|off by|NaN"):
        check("matmul", sloppy_matmul(mask_k=False))


def test_matmul_assuming_contiguous_b_fails():
    with pytest.raises(CheckFailed, match="transposed"):
        check("matmul", sloppy_matmul(b_contiguous=True))


def test_matmul_store_without_the_row_mask_is_caught():
    # the interpreter names the stray store; on a GPU the guard band after the output catches it
    with pytest.raises(CheckFailed, match="stored out of bounds|past the end"):
        check("matmul", sloppy_matmul(mask_m_store=False))


def test_matmul_with_a_float16_accumulator_fails():
    with pytest.raises(CheckFailed, match="off by"):
        check("matmul", sloppy_matmul(acc16=True))


@pytest.mark.parametrize("name", ["add_2d", "matmul", "matmul_bias_gelu"])
def test_every_size_is_awkward_against_every_block(name):
    for case in exercises.get(name).cases():
        if "exact multiples" in case.label:
            continue
        sizes = [n for t in case.args for n in t.shape]
        assert all(n % 2 == 1 for n in sizes), f"{case.label}: {sizes}"


def test_epilogue_without_bias_or_without_gelu_fails():
    with pytest.raises(CheckFailed, match="off by"):
        check("matmul_bias_gelu", lambda a, b, bias: torch.nn.functional.gelu(lesson04.matmul(a, b),
                                                                               approximate="tanh"))
    with pytest.raises(CheckFailed, match="off by"):
        check("matmul_bias_gelu", lambda a, b, bias: lesson04.matmul(a, b) + bias)


def _matmul_in_float32(a, b):
    """The solution's matmul kernel, storing C in float32: no rounding before the epilogue."""
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.float32)
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)  # noqa: E731
    lesson04.matmul_kernel[grid](a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride())
    return c


def test_epilogue_run_by_pytorch_fails_though_its_values_pass():
    def gelu_in_pytorch(a, b, bias):  # float32 throughout, rounded once: only the structure is wrong
        return torch.nn.functional.gelu(_matmul_in_float32(a, b) + bias, approximate="tanh").to(a.dtype)
    beside = r"right values, but PyTorch computed beside your kernel(.|\n)*gelu"
    with pytest.raises(CheckFailed, match=beside):
        check("matmul_bias_gelu", gelu_in_pytorch)


def test_epilogue_in_a_second_kernel_fails():
    def two_kernels(a, b, bias):  # lesson 02's fused bias + GELU kernel, after the matmul, writing a's dtype
        c, lesson02 = _matmul_in_float32(a, b), load_solution("02")
        out = torch.empty(c.shape, device=a.device, dtype=a.dtype)
        n = c.numel()
        lesson02.bias_gelu_kernel[(triton.cdiv(n, 1024),)](c, bias, out, n, c.shape[1], BLOCK=1024)
        return out
    with pytest.raises(CheckFailed, match="right values, but it launched 2 Triton kernels"):
        check("matmul_bias_gelu", two_kernels)


def test_tiled_matmul_traffic_matches_the_formula():
    M, N, K = 100, 70, 90
    a = torch.randn(M, K, device=DEVICE, dtype=torch.float16)
    b = torch.randn(K, N, device=DEVICE, dtype=torch.float16)
    lesson04.matmul(a, b)  # on a GPU, tune first, so that the meter below replays one config
    meter = triton_traffic(lesson04.matmul, a, b)
    cfg = lesson04.matmul_kernel.best_config.kwargs if hasattr(lesson04.matmul_kernel, "best_config") \
        else lesson04.MATMUL_CONFIGS[0].kwargs
    tiles_m, tiles_n = -(-M // cfg["BLOCK_M"]), -(-N // cfg["BLOCK_N"])
    assert meter.kernels == 1
    assert meter.bytes == 2 * (M * K * tiles_n + K * N * tiles_m + M * N)
