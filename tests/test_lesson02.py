"""Lesson 02: the fused kernels pass their checks, and what the checks hold them to."""

import pytest
import torch
import triton
import triton.language as tl
from mutants import edit

from helpers import check, exercises
from helpers.check import CheckFailed
from helpers.device import DEVICE, ON_GPU
from helpers.exercises.lesson02 import LOW_PRECISION
from helpers.solutions import load_solution

lesson02 = load_solution("02")


def test_solutions_pass():
    check("fused_chain", lesson02.fused_chain)
    check("bias_gelu", lesson02.bias_gelu)


@pytest.mark.parametrize("name", ["fused_chain", "bias_gelu"])
def test_every_size_is_awkward_against_every_block(name):
    # odd sizes: no power-of-two block divides a row, a column or the whole matrix
    for case in exercises.get(name).cases():
        assert all(size % 2 == 1 for size in case.args[0].shape), case.label


def test_scale_is_random_with_both_signs():
    # a hard-coded scale fails, and so does relu((x + b) * s), which differs from relu(x + b) * s when s < 0
    scales = [[case.args[3] for case in exercises.get("fused_chain").cases()] for _ in range(3)]
    assert all(min(s) < 0 < max(s) for s in scales)
    assert len({s for run in scales for s in run}) > 5


def test_bias_gelu_has_low_precision_cases():
    dtypes = {case.args[0].dtype for case in exercises.get("bias_gelu").cases()}
    low = {torch.float16, torch.bfloat16} if ON_GPU else {torch.float16}  # no bfloat16 in the interpreter
    assert dtypes == {torch.float32} | low


@triton.jit
def bias_by_row_kernel(x_ptr, bias_ptr, res_ptr, out_ptr, n_elements, n_cols, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    bias = tl.load(bias_ptr + offs // n_cols, mask=mask)  # row index instead of column: wrong
    y = tl.maximum(tl.load(x_ptr + offs, mask=mask) + bias, 0.0) * scale + tl.load(res_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, y, mask=mask)


def test_bias_indexed_by_row_fails():
    def wrong(x, bias, residual, scale):
        x, residual = x.contiguous(), residual.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        bias_by_row_kernel[(triton.cdiv(n, 1024),)](x, bias, residual, out, n, x.shape[-1], scale, BLOCK=1024)
        return out
    with pytest.raises(CheckFailed):
        check("fused_chain", wrong)


def test_scale_before_relu_fails_on_a_negative_scale():
    wrong = edit("02", "fused_chain", ("    y = tl.maximum(x + bias, 0.0) * scale + res",
                                       "    y = tl.maximum((x + bias) * scale, 0.0) + res"))
    with pytest.raises(CheckFailed, match=r"scale=-"):
        check("fused_chain", wrong)


def test_exact_gelu_is_not_the_tanh_approximation():
    exact = edit("02", "bias_gelu", ("return x * tl.sigmoid(2.0 * u)",
                                     "return 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))"))
    with pytest.raises(CheckFailed, match="off by more than"):
        check("bias_gelu", exact)


def test_strided_input_without_contiguous_fails():
    def no_contiguous(x, bias):
        out = torch.empty_like(x, memory_format=torch.contiguous_format)
        n = x.numel()
        lesson02.bias_gelu_kernel[(triton.cdiv(n, 1024),)](x, bias, out, n, x.shape[-1], BLOCK=1024)
        return out
    with pytest.raises(CheckFailed, match="transposed"):
        check("bias_gelu", no_contiguous)


def test_a_low_precision_add_before_the_upcast_fails():
    # x + bias rounded to float16 (or bfloat16) before the upcast: one rounding too many
    loads = ("    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)\n"
             "    bias = tl.load(bias_ptr + offs % n_cols, mask=mask).to(tl.float32)\n")
    late = edit("02", "bias_gelu", (loads, loads.replace(".to(tl.float32)", "")),
                ("y = gelu_tanh(x + bias)", "y = gelu_tanh((x + bias).to(tl.float32))"))
    with pytest.raises(CheckFailed, match=r"float16 inputs':\noutput: \d+ of \d+ elements are off"):
        check("bias_gelu", late)


@pytest.mark.parametrize("dtype", LOW_PRECISION)
def test_the_float32_result_rounded_once_is_within_half_an_ulp(dtype):
    x = torch.randn(257, 129, dtype=dtype, device=DEVICE)
    bias = torch.randn(129, dtype=dtype, device=DEVICE)
    exact = torch.nn.functional.gelu(x.double() + bias.double(), approximate="tanh")
    err = (lesson02.bias_gelu(x, bias).double() - exact).abs()
    half_ulp = {torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}[dtype]  # relative, at most
    atol, rtol = exercises.get("bias_gelu").tol[dtype]
    assert (err <= half_ulp * 1.001 * exact.abs() + 1e-7).all()
    assert (err <= 0.85 * (atol + rtol * exact.abs())).all()  # with room to spare in the tolerance


def test_half_fused_chain_is_named():
    half = edit("02", "fused_chain", ("    y = tl.maximum(x + bias, 0.0) * scale + res",
                                      "    y = tl.maximum(x + bias, 0.0) * scale"),
                ("scale, BLOCK=BLOCK)\n    return out", "scale, BLOCK=BLOCK)\n    return out + residual"))
    named = r"right values, but PyTorch computed beside your kernel(.|\n)*`return out \+ residual`(.|\n)*add"
    with pytest.raises(CheckFailed, match=named):
        check("fused_chain", half)


def test_two_launches_are_not_fused():
    def twice(x, bias, residual, scale):
        lesson02.fused_chain(x, bias, residual, scale)
        return lesson02.fused_chain(x, bias, residual, scale)
    with pytest.raises(CheckFailed, match="launched 2 Triton kernels"):
        check("fused_chain", twice)
