"""Lesson 01 solutions: vector add and axpy, one block of elements per program."""

import torch

import helpers  # noqa: F401  (first: picks the GPU or the interpreter)
import triton
import triton.language as tl

from helpers.bench import Bench


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """out[i] = x[i] + y[i] for the BLOCK elements this program owns."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n  # the last program's block runs past the end
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


def add(x, y):
    """x + y for two vectors of the same length."""
    assert x.shape == y.shape and x.dim() == 1, "add takes two vectors of the same length"
    x, y = x.contiguous(), y.contiguous()  # the kernel walks memory one element after another
    out = torch.empty_like(x)
    n = out.numel()
    grid = (triton.cdiv(n, 1024),)
    add_kernel[grid](x, y, out, n, BLOCK=1024)
    return out


@triton.jit
def axpy_kernel(alpha, x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """out[i] = alpha * x[i] + y[i]; alpha is a scalar passed by value."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, alpha * x + y, mask=mask)


def axpy(alpha, x, y):
    """alpha * x + y for a float alpha and two vectors of the same length."""
    assert x.shape == y.shape and x.dim() == 1, "axpy takes two vectors of the same length"
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    n = out.numel()
    BLOCK = 1024
    axpy_kernel[(triton.cdiv(n, BLOCK),)](alpha, x, y, out, n, BLOCK=BLOCK)
    return out


def add_in_launches(x, y, piece=1024):
    """x + y made by one launch per `piece` elements: the same work as add, many launches."""
    out = torch.empty_like(x)
    n = x.numel()
    for start in range(0, n, piece):
        add_kernel[(1,)](x[start:], y[start:], out[start:], min(piece, n - start), BLOCK=piece)
    return out


def benchmarks():
    """What `make bench` times for this lesson (GPU only)."""
    for n in (2**20, 2**24, 2**28):
        x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        yield Bench("vector_add", n, bytes=3 * 4 * n, flops=n, label=f"n=2^{n.bit_length() - 1}",
                    impls={"triton": lambda: add(x, y), "torch": lambda: x + y})
    n = 2**22
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    yield Bench("launch_overhead", n, bytes=3 * 4 * n, flops=n, label="n=2^22",
                impls={"1 launch": lambda: add(x, y), "4096 launches": lambda: add_in_launches(x, y)})
