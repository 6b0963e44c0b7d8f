"""Lesson 05: the solutions pass their checks, and typical mistakes fail them."""

import importlib
import math

import mutants.lesson05 as mutants_05
import pytest
import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from matmul_testing import assert_matches, double, randn
from mutants import edit

from helpers import DEVICE, check, exercises
from helpers.check import TOLERANCES, CheckFailed, NotDone
from helpers.exercises.lesson05 import GROUPNORM_TOL, softmax_reference
from helpers.solutions import load_solution

lesson05 = load_solution("05")


def test_solutions_pass():
    check("softmax_rows", lesson05.softmax_rows)
    check("online_softmax_torch", lesson05.online_softmax_torch)
    check("softmax_tiled", lesson05.softmax_tiled)
    check("rmsnorm_linear", lesson05.rmsnorm_linear)
    check("groupnorm_mish", lesson05.groupnorm_mish)


def test_worked_examples_and_dispatch():
    x = torch.randn(37, 300, device=DEVICE, dtype=torch.float16)
    g = torch.randn(300, device=DEVICE, dtype=torch.float16)
    want = F.rms_norm(x.float(), (300,), g.float(), 1e-6)
    torch.testing.assert_close(lesson05.rms_norm_rows(x, g).float(), want, atol=2e-3, rtol=2e-3)
    x = torch.randn(5, 3000, device=DEVICE)
    x[2] = -math.inf  # a fully masked row: zeros, where torch.softmax gives NaN
    for fn in (lesson05.softmax, lesson05.softmax_tiled_tuned, lesson05.softmax_rows):
        torch.testing.assert_close(fn(x), softmax_reference(x), atol=1e-6, rtol=1e-5)
    assert torch.isnan(torch.softmax(x, dim=1)[2]).all()


def test_epilogue_variant_matches_the_reference():
    from helpers.exercises.lesson05 import RMSNORM_LINEAR_TOL, rmsnorm_linear_reference

    x = torch.randn(70, 100, device=DEVICE, dtype=torch.float16)[:, :90]  # a strided view, K = 90
    g = (1 + 0.2 * torch.randn(90, device=DEVICE)).to(torch.float16)
    w = (torch.randn(50, 90, device=DEVICE) / math.sqrt(90)).to(torch.float16)
    w_folded = (w.float() * g.float()).to(torch.float16)
    want = rmsnorm_linear_reference(x.double(), g.double(), w.double())
    atol, rtol = RMSNORM_LINEAR_TOL[torch.float16]
    got = lesson05.rmsnorm_linear_epilogue(x, w_folded).double()
    torch.testing.assert_close(got, want, atol=atol, rtol=rtol)


# ---------------------------------------------------------------- broken versions fail


def rows_launcher(kernel):
    """A softmax_rows launcher around a kernel with softmax_rows_kernel's signature."""
    def run(x):
        out = torch.empty_like(x, memory_format=torch.contiguous_format)
        block = triton.next_power_of_2(x.shape[1])
        kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), x.stride(1), out.stride(0), BLOCK_N=block)
        return out
    return run


@triton.jit
def untouched_kernel(x_ptr, out_ptr, n_cols, stride_xm, stride_xn, stride_om, BLOCK_N: tl.constexpr):
    pass


@triton.jit
def no_guard_kernel(x_ptr, out_ptr, n_cols, stride_xm, stride_xn, stride_om, BLOCK_N: tl.constexpr):
    offs = tl.arange(0, BLOCK_N)
    mask = offs < n_cols
    row = tl.program_id(0)
    x = tl.load(x_ptr + row * stride_xm + offs * stride_xn, mask=mask, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))  # a fully masked row: -inf - (-inf) = NaN
    out = e / tl.sum(e, axis=0)
    tl.store(out_ptr + row * stride_om + offs, out.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def no_max_kernel(x_ptr, out_ptr, n_cols, stride_xm, stride_xn, stride_om, BLOCK_N: tl.constexpr):
    offs = tl.arange(0, BLOCK_N)
    mask = offs < n_cols
    row = tl.program_id(0)
    x = tl.load(x_ptr + row * stride_xm + offs * stride_xn, mask=mask, other=-float("inf")).to(tl.float32)
    e = tl.exp(x)  # overflows to inf for x > 88
    l = tl.sum(e, axis=0)
    tl.store(out_ptr + row * stride_om + offs, (e / tl.where(l == 0.0, 1.0, l)).to(out_ptr.dtype.element_ty),
             mask=mask)


@triton.jit
def contiguous_only_kernel(x_ptr, out_ptr, n_cols, stride_xm, stride_xn, stride_om, BLOCK_N: tl.constexpr):
    offs = tl.arange(0, BLOCK_N)
    mask = offs < n_cols
    row = tl.program_id(0)
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=-float("inf")).to(tl.float32)  # ignores strides
    m = tl.max(x, axis=0)
    m = tl.where(m == -float("inf"), 0.0, m)
    e = tl.exp(x - m)
    l = tl.sum(e, axis=0)
    tl.store(out_ptr + row * stride_om + offs, (e / tl.where(l == 0.0, 1.0, l)).to(out_ptr.dtype.element_ty),
             mask=mask)


def test_untouched_row_kernel_is_not_done():
    with pytest.raises(NotDone):
        check("softmax_rows", rows_launcher(untouched_kernel))


@pytest.mark.parametrize("kernel, message", [(no_guard_kernel, "NaN"), (no_max_kernel, "NaN|worst at"),
                                             (contiguous_only_kernel, "worst at|column stride|rows")])
def test_broken_row_kernels_fail(kernel, message):
    with pytest.raises(CheckFailed, match=message):
        check("softmax_rows", rows_launcher(kernel))


def online_without_rescale(x, chunk):
    """Forgets to rescale the running sum when the max grows."""
    m = torch.full((x.shape[0],), -math.inf, dtype=x.dtype, device=x.device)
    l = torch.zeros(x.shape[0], dtype=x.dtype, device=x.device)
    for s in range(0, x.shape[1], chunk):
        m_new = torch.maximum(m, x[:, s:s + chunk].amax(dim=1))
        safe = torch.where(m_new == -math.inf, 0.0, m_new)
        l = l + torch.exp(x[:, s:s + chunk] - safe[:, None]).sum(dim=1)
        m = m_new
    safe = torch.where(m == -math.inf, 0.0, m)
    return torch.exp(x - safe[:, None]) / torch.where(l == 0, 1.0, l)[:, None]


def online_without_guard(x, chunk):
    """Rescales correctly but lets -inf - (-inf) make NaN."""
    m = torch.full((x.shape[0],), -math.inf, dtype=x.dtype, device=x.device)
    l = torch.zeros(x.shape[0], dtype=x.dtype, device=x.device)
    for s in range(0, x.shape[1], chunk):
        m_new = torch.maximum(m, x[:, s:s + chunk].amax(dim=1))
        l = l * torch.exp(m - m_new) + torch.exp(x[:, s:s + chunk] - m_new[:, None]).sum(dim=1)
        m = m_new
    return torch.exp(x - m[:, None]) / l[:, None]


def test_online_softmax_mistakes_fail():
    with pytest.raises(NotDone):
        check("online_softmax_torch", lambda x, chunk: (_ for _ in ()).throw(NotImplementedError("todo")))
    with pytest.raises(CheckFailed, match="worst at"):
        check("online_softmax_torch", online_without_rescale)
    with pytest.raises(CheckFailed, match="NaN"):
        check("online_softmax_torch", online_without_guard)


@triton.jit
def tiled_no_rescale_kernel(x_ptr, out_ptr, n_cols, stride_xm, stride_xn, stride_om, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    m = tl.full((BLOCK,), -float("inf"), tl.float32)
    l = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + offs
        x = tl.load(x_ptr + row * stride_xm + cols * stride_xn, mask=cols < n_cols, other=-float("inf"))
        m_new = tl.maximum(m, x.to(tl.float32))
        safe = tl.where(m_new == -float("inf"), 0.0, m_new)
        l = l + tl.exp(x.to(tl.float32) - safe)  # the old sum is not rescaled to the new max
        m = m_new
    m_row = tl.max(m, axis=0)
    m_row = tl.where(m_row == -float("inf"), 0.0, m_row)
    l_row = tl.sum(l * tl.exp(m - m_row), axis=0)
    l_row = tl.where(l_row == 0.0, 1.0, l_row)
    for start in range(0, n_cols, BLOCK):
        cols = start + offs
        x = tl.load(x_ptr + row * stride_xm + cols * stride_xn, mask=cols < n_cols, other=-float("inf"))
        tl.store(out_ptr + row * stride_om + cols,
                 (tl.exp(x.to(tl.float32) - m_row) / l_row).to(out_ptr.dtype.element_ty), mask=cols < n_cols)


def test_tiled_without_rescale_fails():
    def run(x, block=128):
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        tiled_no_rescale_kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), x.stride(1), out.stride(0),
                                               BLOCK=block)
        return out
    with pytest.raises(CheckFailed, match="worst at"):
        check("softmax_tiled", run)


def test_rmsnorm_linear_mistakes_fail():
    def no_eps(x, gamma, w, eps=1e-6):
        return lesson05.rmsnorm_linear(x, gamma, w, eps=0.0)

    squares_in_float16 = edit("05", "rmsnorm_linear", ("sum_sq += tl.sum(xf * xf, axis=1)",
                                                       "sum_sq += tl.sum(x * x, axis=1).to(tl.float32)"))
    with pytest.raises(CheckFailed, match="failed on case '[^']*eps dominates"):
        check("rmsnorm_linear", no_eps)
    with pytest.raises(CheckFailed, match="failed on case '[^']*overflows"):  # x*x overflows float16
        check("rmsnorm_linear", squares_in_float16)


# ---------------------------------------------------------------- groupnorm_mish


def nchw(N, C, H, W, dtype, layout, mean=0.0, scale=1.0):
    if layout == "channels_last":   # strides (HWC, 1, WC, C)
        return (randn(N, H, W, C, scale=scale) + mean).to(dtype).permute(0, 3, 1, 2)
    if layout == "every other column":   # W's stride 2: H and W cannot be merged into one stride
        return (randn(N, C, H, 2 * W, scale=scale) + mean).to(dtype)[..., ::2]
    return (randn(N, C, H, W, scale=scale) + mean).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("shape, groups, layout, mean, affine_scale", [
    ((2, 15, 7, 9), 5, "contiguous", 0.0, 1.0),        # 3 channels per group, 189 values: one tile
    ((1, 6, 1, 1), 2, "contiguous", 0.0, 1.0),         # H = W = 1: 3 values per group
    ((2, 9, 17, 19), 3, "channels_last", 0.0, 1.0),    # 969 values per group: several tiles, strided
    ((2, 10, 11, 13), 2, "contiguous", 300.0, 1.0),    # a large mean: the variance must not cancel
    ((1, 14, 5, 7), 7, "contiguous", 0.0, 30.0),       # outputs past +-20: Mish's two tails
    ((2, 8, 6, 5), 4, "every other column", 0.0, 1.0),  # strides that do not merge H and W
])
def test_groupnorm_mish(dtype, shape, groups, layout, mean, affine_scale):
    x = nchw(*shape, dtype, layout, mean=mean, scale=2.0)
    C = shape[1]
    weight, bias = randn(C, dtype=dtype, scale=affine_scale), randn(C, dtype=dtype, scale=affine_scale)
    want = lesson05.groupnorm_mish_reference(*double(x), groups, *double(weight, bias), 1e-5)
    tol = {**TOLERANCES, **GROUPNORM_TOL}   # float32: the exercise's tolerance, and its reasons
    assert_matches(lesson05.groupnorm_mish(x, groups, weight, bias, 1e-5), want, tol, dtype)


@pytest.mark.parametrize("shape, groups, layout, splits", [
    ((2, 6, 9, 11), 3, "contiguous", 1),        # one slice: the same as one kernel per group
    ((1, 8, 13, 17), 2, "channels_last", 4),    # 4 slices of a group of 884 values: the last one short
    ((2, 4, 5, 7), 2, "contiguous", 8),         # more slices than the group has BLOCKs: empty slices
    ((1, 12, 33, 31), 2, "contiguous", None),   # the default: 2 groups of 6138 values, split on the CPU too
])
def test_groupnorm_mish_split(shape, groups, layout, splits):
    N, C, H, W = shape
    x = randn(N, H, W, C).permute(0, 3, 1, 2) if layout == "channels_last" else randn(N, C, H, W)
    x = x + 50.0                                # a large mean: the shift must be the same in every slice
    weight, bias = randn(C), randn(C)
    want = lesson05.groupnorm_mish_reference(*double(x), groups, *double(weight, bias), 1e-5)
    got = lesson05.groupnorm_mish_split(x, groups, weight, bias, 1e-5, splits=splits)
    assert_matches(got, want, GROUPNORM_TOL, torch.float32)


def test_the_groupnorm_reference_is_the_lessons_own():
    from helpers.exercises import lesson05 as spec

    x, weight, bias = randn(2, 6, 5, 3), randn(6), randn(6)
    torch.testing.assert_close(spec.groupnorm_mish_reference(x, 3, weight, bias, 1e-5),
                               lesson05.groupnorm_mish_reference(x, 3, weight, bias, 1e-5))


# ---------------------------------------------------------------- kinds of wrong answers (issue 28)


TWO = "launched 2 Triton kernels"


@pytest.mark.parametrize("why, phrase", [
    ("exercise 3's tiled kernel: x read twice", "2 times x"),
    ("RMSNorm kernel, then lesson 04's matmul: the normalized x goes through memory", TWO),
    ("Mish as y * tanh(softplus(y)), each through tl.exp: three exponentials per value", "3 per value of x"),
    ("two launches: the split version's statistics kernel, then its apply kernel", TWO),
    ("GroupNorm by PyTorch, Mish in a Triton kernel", "PyTorch ran native_group_norm"),
])
def test_the_rule_each_exercise_states_is_measured(why, phrase):
    """Right values, wrong structure: the structure check names what breaks the exercise's rule."""
    (wrong,) = [w for w in mutants_05.WRONG if w.why == why]
    problem = exercises.get(wrong.exercise).structure(wrong.fn)
    assert problem and phrase in problem, problem


@pytest.mark.parametrize("name", ["softmax_rows", "softmax_tiled", "rmsnorm_linear", "groupnorm_mish"])
def test_the_cases_past_int32_hold_together(monkeypatch, name):
    """The GPU's case past 2**31 elements, built on the CPU at a stand-in size: a slice of rows far apart,
    compared on its last rows against the reference run on those rows alone, with a hint naming int32."""
    spec = importlib.import_module("helpers.exercises.lesson05")
    monkeypatch.setattr(spec, "ON_GPU", True)
    monkeypatch.setattr(spec, "INT32_SPAN", 2**14)
    monkeypatch.setattr(spec, "INT32_ROW_STRIDE", 2**11)
    ex = exercises.get(name)
    make_cases = ex.cases
    (case,) = make_cases()[-1:]
    case = case.build()  # built when its turn comes, in check()
    x = case.args[0]
    assert "2**31" in case.label and "int32" in case.hint and "int64" in case.hint
    assert x.stride(0) * (x.shape[0] - 1) >= 2**14 and case.part(x).shape == case.reference_args[0].shape
    monkeypatch.setattr(ex, "cases", lambda: [case])
    check(name, getattr(lesson05, name))
