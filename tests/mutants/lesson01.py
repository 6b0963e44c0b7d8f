"""Lesson 01: vector_add and axpy."""

import torch
import triton
import triton.language as tl

from mutants import Right, Wrong, edit

WRONG = [
    Wrong("vector_add", "pure PyTorch, no kernel", lambda x, y: x + y),
    Wrong("vector_add", "no mask on the loads and the store", edit(
        "01", "add",
        ("    x = tl.load(x_ptr + offs, mask=mask)\n    y = tl.load(y_ptr + offs, mask=mask)\n"
         "    tl.store(out_ptr + offs, x + y, mask=mask)",
         "    x = tl.load(x_ptr + offs)\n    y = tl.load(y_ptr + offs)\n    tl.store(out_ptr + offs, x + y)"))),
    Wrong("vector_add", "mask off by one (offs <= n)", edit(
        "01", "add", ("mask = offs < n  # the last", "mask = offs <= n  # the last"))),
    Wrong("vector_add", "one block too few (n // 1024 programs)", edit(
        "01", "add", ("grid = (triton.cdiv(n, 1024),)", "grid = (n // 1024,)"))),
    Wrong("vector_add", "strided inputs used without .contiguous()", edit(
        "01", "add", ("    x, y = x.contiguous(), y.contiguous()  # the kernel walks", "    # the kernel walks"))),
    Wrong("vector_add", "output in bfloat16", edit(
        "01", "add", ("    out = torch.empty_like(x)\n    n = out.numel()\n    grid",
                      "    out = torch.empty_like(x, dtype=torch.bfloat16)\n    n = out.numel()\n    grid"))),
    Wrong("vector_add", "forgets `return out`", edit(
        "01", "add", ("    add_kernel[grid](x, y, out, n, BLOCK=1024)\n    return out",
                      "    add_kernel[grid](x, y, out, n, BLOCK=1024)"))),
    Wrong("vector_add", "1024 written into the kernel where BLOCK belongs (the launcher's BLOCK)", edit(
        "01", "add", ("    offs = pid * BLOCK + tl.arange(0, BLOCK)\n    mask = offs < n  # the last",
                      "    offs = pid * 1024 + tl.arange(0, 1024)\n    mask = offs < n  # the last"))),
    Wrong("vector_add", "programs stepped by 1024 written in (pid * 1024), blocks of BLOCK lanes", edit(
        "01", "add", ("    offs = pid * BLOCK + tl.arange(0, BLOCK)\n    mask = offs < n  # the last",
                      "    offs = pid * 1024 + tl.arange(0, BLOCK)\n    mask = offs < n  # the last"))),
    Wrong("axpy", "pure PyTorch, no kernel", lambda alpha, x, y: alpha * x + y),
    Wrong("axpy", "1024 written into the kernel where BLOCK belongs (the launcher's BLOCK)", edit(
        "01", "axpy", ("    offs = pid * BLOCK + tl.arange(0, BLOCK)\n    mask = offs < n\n",
                       "    offs = pid * 1024 + tl.arange(0, 1024)\n    mask = offs < n\n"))),
    Wrong("axpy", "alpha declared tl.constexpr: a compile for every new alpha", edit(
        "01", "axpy", ("def axpy_kernel(alpha, x_ptr", "def axpy_kernel(alpha: tl.constexpr, x_ptr"))),
    Wrong("axpy", "output allocated without the inputs' dtype: float32 for float16 vectors", edit(
        "01", "axpy", ("    out = torch.empty_like(x)\n    n = out.numel()\n    BLOCK",
                       "    out = torch.empty(x.numel(), device=x.device)\n    n = out.numel()\n    BLOCK"))),
    Wrong("axpy", "inputs made float32 (.float()): a float32 result for float16 vectors", edit(
        "01", "axpy", ("    x, y = x.contiguous(), y.contiguous()\n    out = torch.empty_like(x)\n    n = out.numel()\n"
                       "    BLOCK", "    x, y = x.float().contiguous(), y.float().contiguous()\n"
                       "    out = torch.empty_like(x)\n    n = out.numel()\n    BLOCK"))),
    Wrong("axpy", "alpha hard-coded to 2", edit("01", "axpy", ("alpha * x + y, mask=mask)", "2.0 * x + y, mask=mask)"))),
    Wrong("axpy", "x and y swapped (alpha * y + x)", edit(
        "01", "axpy", ("alpha * x + y, mask=mask)", "alpha * y + x, mask=mask)"))),
    Wrong("axpy", "no mask on the store", edit(
        "01", "axpy", ("tl.store(out_ptr + offs, alpha * x + y, mask=mask)", "tl.store(out_ptr + offs, alpha * x + y)"))),
    Wrong("axpy", "one launch per block of 1024 values", edit(
        "01", "axpy", ("    axpy_kernel[(triton.cdiv(n, BLOCK),)](alpha, x, y, out, n, BLOCK=BLOCK)",
                       "    for start in range(0, n, BLOCK):\n"
                       "        axpy_kernel[(1,)](alpha, x[start:], y[start:], out[start:], min(BLOCK, n - start),\n"
                       "                          BLOCK=BLOCK)"))),
    Wrong("axpy", "one launch per 8192 values (one launch below that)", edit(
        "01", "axpy", ("    axpy_kernel[(triton.cdiv(n, BLOCK),)](alpha, x, y, out, n, BLOCK=BLOCK)",
                       "    for s in range(0, n, 8192):\n"
                       "        m = min(8192, n - s)\n"
                       "        axpy_kernel[(triton.cdiv(m, BLOCK),)](alpha, x[s:], y[s:], out[s:], m, BLOCK=BLOCK)"))),
    Wrong("axpy", "programs counted in blocks of 128 while each covers BLOCK = 1024", edit(
        "01", "axpy", ("axpy_kernel[(triton.cdiv(n, BLOCK),)]", "axpy_kernel[(triton.cdiv(n, 128),)]"))),
    Wrong("axpy", "one program over the whole vector (a block of next_power_of_2(n))", edit(
        "01", "axpy", ("axpy_kernel[(triton.cdiv(n, BLOCK),)](alpha, x, y, out, n, BLOCK=BLOCK)",
                       "axpy_kernel[(1,)](alpha, x, y, out, n, BLOCK=triton.next_power_of_2(n))"))),
    Wrong("axpy", "no shape check: vectors of different lengths read past the shorter one", edit(
        "01", "axpy", ("    assert x.shape == y.shape and x.dim() == 1, \"axpy takes two vectors of the same length\"\n",
                       ""))),
    Wrong("axpy", "no shape check, n taken from the shorter y: a result of the wrong length", edit(
        "01", "axpy", ("    assert x.shape == y.shape and x.dim() == 1, \"axpy takes two vectors of the same length\"\n",
                       ""), ("    n = out.numel()\n    BLOCK = 1024\n", "    n = y.numel()\n    BLOCK = 1024\n"))),
    Wrong("axpy", "y cloned into the output by PyTorch, then alpha * x added into it by the kernel", edit(
        "01", "axpy", ("    out = torch.empty_like(x)\n    n = out.numel()\n    BLOCK = 1024\n"
                       "    axpy_kernel[(triton.cdiv(n, BLOCK),)](alpha, x, y, out, n, BLOCK=BLOCK)",
                       "    out = y.clone()\n    n = out.numel()\n    BLOCK = 1024\n"
                       "    axpy_kernel[(triton.cdiv(n, BLOCK),)](alpha, x, out, out, n, BLOCK=BLOCK)"))),
    Wrong("axpy", "a single program (grid of 1)", edit(
        "01", "axpy", ("axpy_kernel[(triton.cdiv(n, BLOCK),)]", "axpy_kernel[(1,)]"))),
    Wrong("axpy", "n // BLOCK + 1 programs: one that covers nothing where BLOCK divides n", edit(
        "01", "axpy", ("axpy_kernel[(triton.cdiv(n, BLOCK),)]", "axpy_kernel[(n // BLOCK + 1,)]"))),
    Wrong("axpy", "strided inputs used without .contiguous()", edit(
        "01", "axpy", ("    x, y = x.contiguous(), y.contiguous()\n    out = torch.empty_like(x)\n    n = out.numel()\n"
                       "    BLOCK", "    out = torch.empty_like(x)\n    n = out.numel()\n    BLOCK"))),
]


@triton.jit
def _add_strided_kernel(x_ptr, y_ptr, out_ptr, n, stride_x, stride_y, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs * stride_x, mask=mask)
    y = tl.load(y_ptr + offs * stride_y, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


def add_strided(x, y):
    """Reads strided inputs in place (no copies), 128 elements per program."""
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    n = x.numel()
    _add_strided_kernel[(triton.cdiv(n, 128),)](x, y, out, n, x.stride(0), y.stride(0), BLOCK=128)
    return out


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """A grid-stride loop: each program adds every num_programs-th block. Named as the notebook's kernel,
    so that the check finds it beside add_looping and runs it with other blocks too."""
    for start in range(tl.program_id(0) * BLOCK, n, tl.num_programs(0) * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def add_looping(x, y):
    """At most 4 programs, each looping over blocks of 512 (the notebook's kernel name and arguments)."""
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    n = out.numel()
    add_kernel[(min(4, triton.cdiv(n, 512)),)](x, y, out, n, BLOCK=512)
    return out

RIGHT = [
    Right("vector_add", "strides passed to the kernel, BLOCK=128", add_strided),
    Right("vector_add", "a grid-stride loop over blocks, 4 programs", add_looping),
    Right("axpy", "BLOCK=256", edit("01", "axpy", ("    BLOCK = 1024\n", "    BLOCK = 256\n"))),
]
