"""Lesson 02: the fused kernels pass their checks, and typical mistakes fail them."""

import pytest
import torch
import triton
import triton.language as tl

from helpers import check
from helpers.check import CheckFailed
from helpers.solutions import load_solution

lesson02 = load_solution("02")


def test_solutions_pass():
    check("fused_chain", lesson02.fused_chain)
    check("bias_gelu", lesson02.bias_gelu)


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


def test_exact_gelu_is_not_the_tanh_approximation():
    with pytest.raises(CheckFailed, match="off by more than"):
        check("bias_gelu", lambda x, b: torch.nn.functional.gelu(x + b))


def test_strided_input_without_contiguous_fails():
    def no_contiguous(x, bias):
        out = torch.empty_like(x, memory_format=torch.contiguous_format)
        n = x.numel()
        lesson02.bias_gelu_kernel[(triton.cdiv(n, 1024),)](x, bias, out, n, x.shape[-1], BLOCK=1024)
        return out
    with pytest.raises(CheckFailed, match="transposed"):
        check("bias_gelu", no_contiguous)
