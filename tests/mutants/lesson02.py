"""Lesson 02: fused_chain and bias_gelu."""

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from mutants import Right, Wrong, edit

CHAIN_BODY = ("    x = tl.load(x_ptr + offs, mask=mask)\n"
              "    bias = tl.load(bias_ptr + offs % n_cols, mask=mask)  # element (i, j) needs bias[j]\n"
              "    res = tl.load(res_ptr + offs, mask=mask)\n"
              "    y = tl.maximum(x + bias, 0.0) * scale + res          # all in registers: no HBM in between\n"
              "    tl.store(out_ptr + offs, y, mask=mask)")
CHAIN = "    y = tl.maximum(x + bias, 0.0) * scale + res"
GELU_LOADS = ("    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)\n"
              "    bias = tl.load(bias_ptr + offs % n_cols, mask=mask).to(tl.float32)\n")
GELU_LOADS_AS_IS = ("    x = tl.load(x_ptr + offs, mask=mask)\n"
                    "    bias = tl.load(bias_ptr + offs % n_cols, mask=mask)\n")

WRONG = [
    Wrong("fused_chain", "x loaded a second time in the kernel", edit(
        "02", "fused_chain", ("    y = tl.maximum(x + bias, 0.0) * scale + res  ",
                              "    y = tl.maximum(tl.load(x_ptr + offs, mask=mask) + bias, 0.0) * scale + res  "))),
    Wrong("fused_chain", "the residual copied into out by PyTorch, then the kernel adds into out", edit(
        "02", "fused_chain", ("    out = torch.empty_like(x)\n    n = x.numel()\n    fused_chain_kernel[(triton.cdiv(n, BLOCK),)](x, bias, residual, out,",
                              "    out = torch.empty_like(x)\n    out.copy_(residual)\n    n = x.numel()\n"
                              "    fused_chain_kernel[(triton.cdiv(n, BLOCK),)](x, bias, out, out,"))),
    Wrong("fused_chain", "pure PyTorch, no kernel", lambda x, b, r, s: torch.relu(x + b) * s + r),
    Wrong("fused_chain", "one kernel, but relu(x + bias) stored to out and loaded back", edit(
        "02", "fused_chain", (CHAIN, "    tl.store(out_ptr + offs, tl.maximum(x + bias, 0.0), mask=mask)\n"
                                     "    y = tl.load(out_ptr + offs, mask=mask) * scale + res"))),
    Wrong("fused_chain", "scale hard-coded to 0.5", edit(
        "02", "fused_chain", (CHAIN, "    y = tl.maximum(x + bias, 0.0) * 0.5 + res"))),
    Wrong("fused_chain", "scale applied before the relu", edit(
        "02", "fused_chain", (CHAIN, "    y = tl.maximum((x + bias) * scale, 0.0) + res"))),
    Wrong("fused_chain", "bias indexed by row (offs // n_cols)", edit(
        "02", "fused_chain", ("bias_ptr + offs % n_cols, mask=mask)  #",
                              "bias_ptr + offs // n_cols, mask=mask)  #"))),
    Wrong("fused_chain", "strided x used without .contiguous()", edit(
        "02", "fused_chain", ("    x, residual = x.contiguous(), residual.contiguous()\n",
                              "    residual = residual.contiguous()\n"))),
    Wrong("fused_chain", "strided residual used without .contiguous()", edit(
        "02", "fused_chain", ("    x, residual = x.contiguous(), residual.contiguous()\n",
                              "    x = x.contiguous()\n"))),
    Wrong("fused_chain", "no mask", edit(
        "02", "fused_chain", (CHAIN_BODY, CHAIN_BODY.replace(", mask=mask", "")))),
    Wrong("fused_chain", "residual added by PyTorch after the kernel", edit(
        "02", "fused_chain", (CHAIN, "    y = tl.maximum(x + bias, 0.0) * scale"),
        ("scale, BLOCK=BLOCK)\n    return out", "scale, BLOCK=BLOCK)\n    return out + residual"))),

    Wrong("bias_gelu", "pure PyTorch, no kernel", lambda x, b: F.gelu(x + b, approximate="tanh")),
    Wrong("bias_gelu", "inputs converted to float32 by PyTorch, the float32 result converted back", edit(
        "02", "bias_gelu", ("    x = x.contiguous()\n    out = torch.empty_like(x)\n    n = x.numel()\n"
                            "    bias_gelu_kernel[(triton.cdiv(n, BLOCK),)](x, bias, out, n, x.shape[-1], BLOCK=BLOCK)\n"
                            "    return out\n",
                            "    dtype = x.dtype\n    x, bias = x.contiguous().float(), bias.float()\n"
                            "    out = torch.empty_like(x)\n    n = x.numel()\n"
                            "    bias_gelu_kernel[(triton.cdiv(n, BLOCK),)](x, bias, out, n, x.shape[-1], BLOCK=BLOCK)\n"
                            "    return out.to(dtype)\n"))),
    Wrong("bias_gelu", "no float32 upcast", edit("02", "bias_gelu", (GELU_LOADS, GELU_LOADS_AS_IS))),
    Wrong("bias_gelu", "upcast only where tl.sigmoid demands it", edit(
        "02", "bias_gelu", (GELU_LOADS, GELU_LOADS_AS_IS),
        ("return x * tl.sigmoid(2.0 * u)", "return x * tl.sigmoid((2.0 * u).to(tl.float32))"))),
    Wrong("bias_gelu", "x + bias added in low precision, then upcast", edit(
        "02", "bias_gelu", (GELU_LOADS, GELU_LOADS_AS_IS),
        ("y = gelu_tanh(x + bias)", "y = gelu_tanh((x + bias).to(tl.float32))"))),
    Wrong("bias_gelu", "tanh(u) as (exp(2u) - 1) / (exp(2u) + 1): inf / inf for large x", edit(
        "02", "bias_gelu", ("return x * tl.sigmoid(2.0 * u)",
                            "return 0.5 * x * (1.0 + (tl.exp(2.0 * u) - 1.0) / (tl.exp(2.0 * u) + 1.0))"))),
    Wrong("bias_gelu", "exact GELU (erf) instead of the tanh approximation", edit(
        "02", "bias_gelu", ("return x * tl.sigmoid(2.0 * u)",
                            "return 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))"))),
    Wrong("bias_gelu", "output in float32 for low-precision inputs", edit(
        "02", "bias_gelu", ("    x = x.contiguous()\n    out = torch.empty_like(x)\n",
                            "    x = x.contiguous()\n    out = torch.empty_like(x, dtype=torch.float32)\n"))),
    Wrong("bias_gelu", "strided x used without .contiguous()", edit(
        "02", "bias_gelu", ("    x = x.contiguous()\n    out = torch.empty_like(x)\n",
                            "    out = torch.empty_like(x)\n"))),
    Wrong("bias_gelu", "bias indexed by row (offs // n_cols)", edit(
        "02", "bias_gelu", ("bias_ptr + offs % n_cols, mask=mask).to",
                            "bias_ptr + offs // n_cols, mask=mask).to"))),
]


@triton.jit
def _chain_tile_kernel(x_ptr, bias_ptr, res_ptr, out_ptr, M, N, stride_xm, stride_xn, stride_rm, stride_rn,
                       scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    x = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_n[None, :] * stride_xn, mask=mask)
    res = tl.load(res_ptr + offs_m[:, None] * stride_rm + offs_n[None, :] * stride_rn, mask=mask)
    bias = tl.load(bias_ptr + offs_n, mask=offs_n < N)
    y = tl.maximum(x + bias[None, :], 0.0) * scale + res
    tl.store(out_ptr + offs_m[:, None] * N + offs_n[None, :], y, mask=mask)


def chain_tiles(x, bias, residual, scale):
    """2-D tiles of 16 x 64, strides passed to the kernel (no copies)."""
    M, N = x.shape
    out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(M, 16), triton.cdiv(N, 64))
    _chain_tile_kernel[grid](x, bias, residual, out, M, N, *x.stride(), *residual.stride(), scale,
                             BLOCK_M=16, BLOCK_N=64)
    return out


@triton.jit
def _bias_relu_kernel(x_ptr, bias_ptr, out_ptr, n_elements, n_cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x + tl.load(bias_ptr + offs % n_cols, mask=mask), 0.0), mask=mask)


@triton.jit
def _scale_add_kernel(y_ptr, res_ptr, out_ptr, n_elements, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    y = tl.load(y_ptr + offs, mask=mask) * scale + tl.load(res_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, y, mask=mask)


def chain_two_kernels(x, bias, residual, scale):
    """Right values from two Triton kernels: relu(x + bias) goes to memory, the second reads it back."""
    x, residual = x.contiguous(), residual.contiguous()
    y, out = torch.empty_like(x), torch.empty_like(x)
    n, grid = x.numel(), (triton.cdiv(x.numel(), 1024),)
    _bias_relu_kernel[grid](x, bias, y, n, x.shape[-1], BLOCK=1024)
    _scale_add_kernel[grid](y, residual, out, n, scale, BLOCK=1024)
    return out


@triton.jit
def _bias_add_kernel(x_ptr, bias_ptr, out_ptr, n_elements, n_cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    tl.store(out_ptr + offs, x + tl.load(bias_ptr + offs % n_cols, mask=mask).to(tl.float32), mask=mask)


@triton.jit
def _gelu_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask)
    u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    tl.store(out_ptr + offs, (x * tl.sigmoid(2.0 * u)).to(out_ptr.dtype.element_ty), mask=mask)


def bias_gelu_two_kernels(x, bias):
    """Right values from two Triton kernels: x + bias goes to memory in float32, a GELU kernel reads it back."""
    x = x.contiguous()
    y = torch.empty(x.shape, device=x.device, dtype=torch.float32)
    out = torch.empty_like(x)
    n, grid = x.numel(), (triton.cdiv(x.numel(), 1024),)
    _bias_add_kernel[grid](x, bias, y, n, x.shape[-1], BLOCK=1024)
    _gelu_kernel[grid](y, out, n, BLOCK=1024)
    return out


WRONG += [
    Wrong("fused_chain", "two kernels: relu(x + bias) stored, then * scale + residual", chain_two_kernels),
    Wrong("bias_gelu", "two kernels: x + bias stored, then GELU", bias_gelu_two_kernels),
]

RIGHT = [
    Right("fused_chain", "2-D tiles with strides, no .contiguous()", chain_tiles),
    Right("fused_chain", "BLOCK=128", edit("02", "fused_chain", ("BLOCK = 1024\n", "BLOCK = 128\n"))),
    Right("bias_gelu", "0.5 x (1 + tanh(u)), tanh from tl.exp, BLOCK=256", edit(
        "02", "bias_gelu", ("BLOCK = 1024\n", "BLOCK = 256\n"),
        ("return x * tl.sigmoid(2.0 * u)", "return 0.5 * x * (1.0 + (1.0 - 2.0 / (tl.exp(2.0 * u) + 1.0)))"))),
]
