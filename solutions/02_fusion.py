"""Lesson 02 solutions: an elementwise chain and a bias + GELU epilogue, each fused into one kernel."""

import torch
import torch.nn.functional as F

import helpers  # noqa: F401  (first: picks the GPU or the interpreter)
import triton
import triton.language as tl

from helpers.bench import Bench

BLOCK = 1024


@triton.jit
def fused_chain_kernel(x_ptr, bias_ptr, res_ptr, out_ptr, n_elements, n_cols, scale, BLOCK: tl.constexpr):
    """out = relu(x + bias) * scale + residual over a contiguous (M, N) matrix, flattened."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask)
    bias = tl.load(bias_ptr + offs % n_cols, mask=mask)  # element (i, j) needs bias[j]
    res = tl.load(res_ptr + offs, mask=mask)
    y = tl.maximum(x + bias, 0.0) * scale + res          # all in registers: no HBM in between
    tl.store(out_ptr + offs, y, mask=mask)


def fused_chain(x, bias, residual, scale):
    """relu(x + bias) * scale + residual in one kernel; x, residual (M, N), bias (N,)."""
    assert x.shape == residual.shape and bias.shape == (x.shape[-1],), "x, residual (M, N) and bias (N,)"
    x, residual = x.contiguous(), residual.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    fused_chain_kernel[(triton.cdiv(n, BLOCK),)](x, bias, residual, out, n, x.shape[-1], scale, BLOCK=BLOCK)
    return out


@triton.jit
def gelu_tanh(x):
    """GELU, tanh approximation: 0.5 x (1 + tanh(u)) is x * sigmoid(2u)."""
    u = 0.7978845608028654 * (x + 0.044715 * x * x * x)  # sqrt(2/pi) * (x + 0.044715 x^3)
    return x * tl.sigmoid(2.0 * u)


@triton.jit
def bias_gelu_kernel(x_ptr, bias_ptr, out_ptr, n_elements, n_cols, BLOCK: tl.constexpr):
    """out = gelu_tanh(x + bias) over a contiguous (M, N) matrix, flattened."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    bias = tl.load(bias_ptr + offs % n_cols, mask=mask).to(tl.float32)
    y = gelu_tanh(x + bias)
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


def bias_gelu(x, bias):
    """gelu_tanh(x + bias) in one kernel; x (M, N), bias (N,)."""
    assert bias.shape == (x.shape[-1],), "bias must have one value per column of x"
    x = x.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    bias_gelu_kernel[(triton.cdiv(n, BLOCK),)](x, bias, out, n, x.shape[-1], BLOCK=BLOCK)
    return out


def chain_eager(x, bias, residual, scale):
    return torch.relu(x + bias) * scale + residual


def benchmarks():
    """What `make bench` times for this lesson (GPU only)."""
    compiled_chain = torch.compile(chain_eager)
    compiled_gelu = torch.compile(lambda x, b: F.gelu(x + b, approximate="tanh"))
    for m in (1024, 4096, 8192):
        n = 8192
        x, res = torch.randn(m, n, device="cuda"), torch.randn(m, n, device="cuda")
        bias = torch.randn(n, device="cuda")
        yield Bench("fused_chain", m * n, bytes=3 * 4 * m * n, flops=4 * m * n, label=f"{m}x{n}",
                    impls={"triton fused": lambda: fused_chain(x, bias, res, 0.5),
                           "torch eager (4 kernels)": lambda: chain_eager(x, bias, res, 0.5),
                           "torch.compile": lambda: compiled_chain(x, bias, res, 0.5)})
        yield Bench("bias_gelu", m * n, bytes=2 * 4 * m * n, flops=10 * m * n, label=f"{m}x{n}",
                    impls={"triton fused": lambda: bias_gelu(x, bias),
                           "torch eager (2 kernels)": lambda: F.gelu(x + bias, approximate="tanh"),
                           "torch.compile": lambda: compiled_gelu(x, bias)})
