"""Lesson 05: softmax_rows, online_softmax_torch, softmax_tiled, rmsnorm_linear and groupnorm_mish."""

import math

import torch
import triton
import triton.language as tl

from helpers.solutions import load_solution
from mutants import Right, Wrong, edit


def torch_softmax(x, *_, **__):
    """What torch.softmax gives, with the course's zeros for fully masked rows."""
    return torch.softmax(x, dim=-1).nan_to_num(0.0)


# ---------------------------------------------------------------- 1. softmax_rows

INT64_ROW = "    row = tl.program_id(0).to(tl.int64)  # int64: row * stride_xm can pass the int32 limit, 2^31 - 1\n"
INT32_ROW = "    row = tl.program_id(0)\n"
ROW_LOAD = "    x = tl.load(x_ptr + row * stride_xm + offs * stride_xn, mask=mask, other=-float(\"inf\"))\n"

WRONG = [
    Wrong("softmax_rows", "pure PyTorch, no kernel", torch_softmax),
    Wrong("softmax_rows", "the block written in as 2048 columns", edit(
        "05", "softmax_rows", ("BLOCK_N = triton.next_power_of_2(n_cols)", "BLOCK_N = 2048"))),
    Wrong("softmax_rows", "the block written in as 4096 columns", edit(
        "05", "softmax_rows", ("BLOCK_N = triton.next_power_of_2(n_cols)", "BLOCK_N = 4096"))),
    Wrong("softmax_rows", "no max subtracted", edit("05", "softmax_rows", ("    e = tl.exp(x - m)\n", "    e = tl.exp(x)\n"))),
    Wrong("softmax_rows", "no safe max for fully masked rows", edit(
        "05", "softmax_rows", ("    m = tl.where(m == -float(\"inf\"), 0.0, m)   # fully", "    # fully"))),
    Wrong("softmax_rows", "no safe sum for fully masked rows", edit(
        "05", "softmax_rows", ("    l = tl.where(l == 0.0, 1.0, l)             # fully", "    # fully"))),
    # A finite stand-in for the masked lanes, and no guards: a row with a lane past its end comes out 0
    # by luck (that lane is its max, and adds exp(0) to the sum); a row as wide as the block is NaN.
    Wrong("softmax_rows", "masked lanes load -1e30, no guards: fully masked rows of a power-of-two width", edit(
        "05", "softmax_rows", (ROW_LOAD, ROW_LOAD.replace('other=-float("inf")', "other=-1e30")),
        ("    m = tl.where(m == -float(\"inf\"), 0.0, m)   # fully", "    # fully"),
        ("    l = tl.where(l == 0.0, 1.0, l)             # fully", "    # fully"))),
    # tl.exp takes float32 or float64 only: x - max computed in float16, converted just for the exp.
    # (The interpreter's where() follows NumPy and would turn m into float32: m's dtype is pinned,
    # as Triton keeps it on a GPU.)
    Wrong("softmax_rows", "x - max in float16, converted only for tl.exp", edit(
        "05", "softmax_rows", ("    x = x.to(tl.float32)                       # float16 in", "    # float16 in"),
        ("    m = tl.where(m == -float(\"inf\"), 0.0, m)   # fully",
         "    m = tl.where(m == -float(\"inf\"), 0.0, m).to(x.dtype)   # fully"),
        ("    e = tl.exp(x - m)\n", "    e = tl.exp((x - m).to(tl.float32))\n"))),
    Wrong("softmax_rows", "exponentials and their sum in the input's dtype", edit(
        "05", "softmax_rows", ("    e = tl.exp(x - m)\n", "    e = tl.exp(x - m).to(x_ptr.dtype.element_ty)\n"))),
    Wrong("softmax_rows", "the sum of exponentials kept in float16", edit(
        "05", "softmax_rows", ("    l = tl.sum(e, axis=0)  ", "    l = tl.sum(e.to(tl.float16), axis=0).to(tl.float32)  "))),
    Wrong("softmax_rows", "launcher: out = torch.empty_like(x), transposed for a transposed x", edit(
        "05", "softmax_rows", ("    out = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)\n    BLOCK_N",
                               "    out = torch.empty_like(x)\n    BLOCK_N"))),
    Wrong("softmax_rows", "stride_xn ignored", edit(
        "05", "softmax_rows", (ROW_LOAD, ROW_LOAD.replace("offs * stride_xn", "offs")))),
    Wrong("softmax_rows", "stride_xm ignored (rows taken to be n_cols apart)", edit(
        "05", "softmax_rows", (ROW_LOAD, ROW_LOAD.replace("row * stride_xm", "row * n_cols")))),
    Wrong("softmax_rows", "max clamped at 0 (fully masked rows handled by max(m, 0))", edit(
        "05", "softmax_rows", ("    m = tl.where(m == -float(\"inf\"), 0.0, m)   # fully", "    m = tl.maximum(m, 0.0)   # fully"))),
    Wrong("softmax_rows", "masked lanes load 0", edit(
        "05", "softmax_rows", (ROW_LOAD, ROW_LOAD.replace("other=-float(\"inf\")", "other=0.0")))),
    Wrong("softmax_rows", "exercise 3's tiled kernel: x read twice", lambda x: edit("05", "softmax_tiled")(x)),
    Wrong("softmax_rows", "row index left in int32: row * stride_xm wraps past 2**31 elements", edit(
        "05", "softmax_rows", (INT64_ROW + "    offs = tl.arange(0, BLOCK_N)\n    mask = offs < n_cols\n    # Lanes",
                               INT32_ROW + "    offs = tl.arange(0, BLOCK_N)\n    mask = offs < n_cols\n    # Lanes")),
          gpu_only=True),
    Wrong("softmax_rows", "the output's row offset in int32: program_id(0) * stride_om wraps past 2**31", edit(
        "05", "softmax_rows", ("tl.store(out_ptr + row * stride_om + offs, (e / l)",
                               "tl.store(out_ptr + tl.program_id(0) * stride_om + offs, (e / l)")),
          gpu_only=True),
]

RIGHT = [
    Right("softmax_rows", "a block twice as wide as needed, exp2", edit(
        "05", "softmax_rows",
        ("    BLOCK_N = triton.next_power_of_2(n_cols)\n    assert BLOCK_N <= MAX_ROW_BLOCK, f\"rows of at most "
         "{MAX_ROW_BLOCK} values: use",
         "    BLOCK_N = 2 * triton.next_power_of_2(n_cols)\n    assert BLOCK_N <= 2 * MAX_ROW_BLOCK, f\"rows of at "
         "most {MAX_ROW_BLOCK} values: use"),
        ("    e = tl.exp(x - m)\n", "    e = tl.exp2((x - m) * 1.4426950408889634)\n"))),
]


# ---------------------------------------------------------------- 2. online_softmax_torch


def two_pass_full_rows(x, chunk):
    """The max of whole rows first, then chunks."""
    m = x.amax(dim=1)
    safe = torch.where(m == -math.inf, 0.0, m)
    l = torch.zeros(x.shape[0], dtype=x.dtype, device=x.device)
    for s in range(0, x.shape[1], chunk):
        l = l + torch.exp(x[:, s:s + chunk] - safe[:, None]).sum(dim=1)
    l = torch.where(l == 0, 1.0, l)
    out = torch.empty_like(x)
    for s in range(0, x.shape[1], chunk):
        out[:, s:s + chunk] = torch.exp(x[:, s:s + chunk] - safe[:, None]) / l[:, None]
    return out


def three_passes(x, chunk):
    """Chunked, but not online: one pass for the max, one for the sum, one for the output."""
    m = torch.full((x.shape[0],), -math.inf, dtype=x.dtype, device=x.device)
    for s in range(0, x.shape[1], chunk):
        m = torch.maximum(m, x[:, s:s + chunk].amax(dim=1))
    safe = torch.where(m == -math.inf, 0.0, m)
    l = torch.zeros(x.shape[0], dtype=x.dtype, device=x.device)
    for s in range(0, x.shape[1], chunk):
        l = l + torch.exp(x[:, s:s + chunk] - safe[:, None]).sum(dim=1)
    l = torch.where(l == 0, 1.0, l)
    out = torch.empty_like(x)
    for s in range(0, x.shape[1], chunk):
        out[:, s:s + chunk] = torch.exp(x[:, s:s + chunk] - safe[:, None]) / l[:, None]
    return out


def row_by_row(x, chunk):
    """Online and chunked, but one row at a time: a Python loop over the rows."""
    out = torch.empty_like(x)
    for r in range(x.shape[0]):
        m, l = torch.tensor(-math.inf, dtype=x.dtype), torch.tensor(0.0, dtype=x.dtype)
        for s in range(0, x.shape[1], chunk):
            xc = x[r, s:s + chunk]
            m_new = torch.maximum(m, xc.amax())
            safe = torch.where(m_new == -math.inf, 0.0, m_new)
            l = l * torch.exp(m - safe) + torch.exp(xc - safe).sum()
            m = m_new
        safe, l = torch.where(m == -math.inf, 0.0, m), torch.where(l == 0, 1.0, l)
        for s in range(0, x.shape[1], chunk):
            out[r, s:s + chunk] = torch.exp(x[r, s:s + chunk] - safe) / l
    return out


ONLINE_STORE = ("        out[:, start:start + chunk] = torch.exp(x[:, start:start + chunk] - safe[:, None]) "
                "/ l[:, None]\n    return out")
ONLINE_RESCALE = "        l = l * torch.exp(m - safe) + torch.exp(xc - safe[:, None]).sum(dim=1)\n"

WRONG += [
    Wrong("online_softmax_torch", "torch.softmax on whole rows", torch_softmax),
    Wrong("online_softmax_torch", "the max of whole rows first", two_pass_full_rows),
    Wrong("online_softmax_torch", "three chunked passes: max, then sum, then output", three_passes),
    Wrong("online_softmax_torch", "online and chunked, but a Python loop over the rows", row_by_row),
    Wrong("online_softmax_torch", "running sum not rescaled when the max grows", edit(
        "05", "online_softmax_torch", (ONLINE_RESCALE, ONLINE_RESCALE.replace("l * torch.exp(m - safe)", "l")))),
    Wrong("online_softmax_torch", "running maximum starts at 0, not -inf", edit(
        "05", "online_softmax_torch", ("    m = torch.full((n_rows,), -math.inf, dtype=x.dtype, device=x.device)",
                                       "    m = torch.zeros(n_rows, dtype=x.dtype, device=x.device)"))),
    Wrong("online_softmax_torch", "no safe max", edit(
        "05", "online_softmax_torch",
        ("        safe = torch.where(m_new == -math.inf, 0.0, m_new)  # all", "        safe = m_new  # all"))),
    Wrong("online_softmax_torch", "running sum kept in float16", edit(
        "05", "online_softmax_torch", (ONLINE_RESCALE, ONLINE_RESCALE.replace(".sum(dim=1)\n",
                                                                              ".sum(dim=1)\n        l = l.half()\n")),
        ("    l = torch.where(l == 0, 1.0, l)  ", "    l = torch.where(l == 0, 1.0, l).to(x.dtype)  "))),
    Wrong("online_softmax_torch", "output divided by the sum afterwards, whole rows", edit(
        "05", "online_softmax_torch",
        (ONLINE_STORE, "        out[:, start:start + chunk] = torch.exp(x[:, start:start + chunk] - safe[:, None])\n"
                       "    return out / l[:, None]"))),
    Wrong("online_softmax_torch", "the chunk size it is given ignored: 8 columns at a time",
          lambda x, chunk: edit("05", "online_softmax_torch")(x, 8)),
    Wrong("online_softmax_torch", "exponentials written first, divided in a third pass", edit(
        "05", "online_softmax_torch",
        (ONLINE_STORE, "        out[:, start:start + chunk] = torch.exp(x[:, start:start + chunk] - safe[:, None])\n"
                       "    for start in range(0, n_cols, chunk):\n"
                       "        out[:, start:start + chunk] /= l[:, None]\n    return out"))),
]


def online_by_merging(x, chunk):
    """Each chunk's own (max, sum), merged into the running state; the output through split views."""
    m = torch.full((x.shape[0], 1), -math.inf, dtype=x.dtype, device=x.device)
    l = torch.zeros((x.shape[0], 1), dtype=x.dtype, device=x.device)
    for xc in x.split(chunk, dim=1):
        m_c = xc.amax(dim=1, keepdim=True)
        safe_c = m_c.nan_to_num(neginf=0.0)
        l_c = torch.exp(xc - safe_c).sum(dim=1, keepdim=True)
        m_new = torch.maximum(m, m_c)
        safe = m_new.nan_to_num(neginf=0.0)
        l = l * torch.exp(m - safe) + l_c * torch.exp(m_c - safe)
        m = m_new
    safe = m.nan_to_num(neginf=0.0)
    l = l.masked_fill(l == 0, 1.0)
    out = torch.empty_like(x)
    for xc, oc in zip(x.split(chunk, dim=1), out.split(chunk, dim=1)):
        torch.div(torch.exp(xc - safe), l, out=oc)
    return out


RIGHT += [Right("online_softmax_torch", "chunk states merged, split views", online_by_merging)]


# ---------------------------------------------------------------- 3. softmax_tiled

TILED_LOAD_1 = ("        x = tl.load(x_row + cols * stride_xn, mask=cols < n_cols, other=-float(\"inf\"))"
                ".to(tl.float32)\n")
TILED_SUM = "        l = l * tl.exp(m - safe) + tl.exp(x - safe)           # rescale"


@triton.jit
def _three_pass_kernel(x_ptr, out_ptr, n_cols, stride_xm, stride_xn, stride_om, BLOCK: tl.constexpr):
    """Pass 1: the max; pass 2: the sum; pass 3: the output."""
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    m = tl.full((BLOCK,), -float("inf"), tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + offs
        x = tl.load(x_ptr + row * stride_xm + cols * stride_xn, mask=cols < n_cols, other=-float("inf"))
        m = tl.maximum(m, x.to(tl.float32))
    m_row = tl.max(m, axis=0)
    m_row = tl.where(m_row == -float("inf"), 0.0, m_row)
    l = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + offs
        x = tl.load(x_ptr + row * stride_xm + cols * stride_xn, mask=cols < n_cols, other=-float("inf"))
        l += tl.exp(x.to(tl.float32) - m_row)
    l_row = tl.sum(l, axis=0)
    l_row = tl.where(l_row == 0.0, 1.0, l_row)
    for start in range(0, n_cols, BLOCK):
        cols = start + offs
        x = tl.load(x_ptr + row * stride_xm + cols * stride_xn, mask=cols < n_cols, other=-float("inf"))
        tl.store(out_ptr + row * stride_om + cols, (tl.exp(x.to(tl.float32) - m_row) / l_row)
                 .to(out_ptr.dtype.element_ty), mask=cols < n_cols)


def three_pass_tiled(x, block=1024):
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    _three_pass_kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), x.stride(1), out.stride(0), BLOCK=block)
    return out


WRONG += [
    Wrong("softmax_tiled", "the lanes' running max starts at -1e4 (a stand-in for -inf), with no guard", edit(
        "05", "softmax_tiled", ('    m = tl.full((BLOCK,), -float("inf"), tl.float32)', "    m = tl.full((BLOCK,), -1e4, tl.float32)"),
        ('        safe = tl.where(m_new == -float("inf"), 0.0, m_new)', "        safe = m_new"))),
    Wrong("softmax_tiled", "pure PyTorch, no kernel", torch_softmax),
    Wrong("softmax_tiled", "three passes: max, sum, output", three_pass_tiled),
    Wrong("softmax_tiled", "exercise 1's kernel: the whole row in registers, one read",
          lambda x, block=1024: edit("05", "softmax_rows")(x)),
    Wrong("softmax_tiled", "block ignored: tiles of 1024 whatever the caller asks", edit(
        "05", "softmax_tiled", ("                                    BLOCK=block, num_warps=row_warps(block))",
                                "                                    BLOCK=1024, num_warps=row_warps(1024))"))),
    Wrong("softmax_tiled", "old sum not rescaled when the max grows", edit(
        "05", "softmax_tiled", (TILED_SUM, TILED_SUM.replace("l * tl.exp(m - safe)", "l")))),
    Wrong("softmax_tiled", "no max subtracted", edit(
        "05", "softmax_tiled",
        (TILED_SUM, "        l = l + tl.exp(x)  # rescale"),
        ("    l_row = tl.sum(l * tl.exp(m - m_row), axis=0)", "    l_row = tl.sum(l, axis=0)"),
        ("(tl.exp(x - m_row) / l_row)", "(tl.exp(x) / l_row)"))),
    Wrong("softmax_tiled", "running maximum starts at 0, not -inf", edit(
        "05", "softmax_tiled", ("    m = tl.full((BLOCK,), -float(\"inf\"), tl.float32)", "    m = tl.zeros((BLOCK,), tl.float32)"))),
    Wrong("softmax_tiled", "a finite stand-in (-1e30) for masked lanes, no guards: rows of whole tiles", edit(
        "05", "softmax_tiled", ("    m = tl.full((BLOCK,), -float(\"inf\"), tl.float32)", "    m = tl.full((BLOCK,), -1e30, tl.float32)"),
        (TILED_LOAD_1, TILED_LOAD_1.replace('other=-float("inf"))', "other=0.0)")
         + "        x = tl.where(cols < n_cols, x, -1e30)\n"),
        ("        safe = tl.where(m_new == -float(\"inf\"), 0.0, m_new)  # nothing", "        safe = m_new  # nothing"),
        ("    m_row = tl.where(m_row == -float(\"inf\"), 0.0, m_row)\n", ""),
        ("    l_row = tl.where(l_row == 0.0, 1.0, l_row)                # fully masked row: outputs 0\n", ""))),
    Wrong("softmax_tiled", "no safe max while the row is all -inf", edit(
        "05", "softmax_tiled", ("        safe = tl.where(m_new == -float(\"inf\"), 0.0, m_new)  # nothing",
                                "        safe = m_new  # nothing"))),
    Wrong("softmax_tiled", "running sums kept in float16", edit(
        "05", "softmax_tiled", (TILED_SUM, "        l = (l * tl.exp(m - safe) + tl.exp(x - safe)).to(tl.float16)"
                                           ".to(tl.float32)  # rescale"))),
    Wrong("softmax_tiled", "running sums kept in the input's dtype", edit(
        "05", "softmax_tiled", (TILED_SUM, "        l = (l * tl.exp(m - safe) + tl.exp(x - safe))"
                                           ".to(x_ptr.dtype.element_ty).to(tl.float32)  # rescale"))),
    Wrong("softmax_tiled", "stride_xn ignored in pass 1", edit(
        "05", "softmax_tiled", (TILED_LOAD_1, TILED_LOAD_1.replace("cols * stride_xn", "cols")))),
    Wrong("softmax_tiled", "stride_xm ignored (rows taken to be n_cols apart)", edit(
        "05", "softmax_tiled", ("    x_row = x_ptr + row * stride_xm\n", "    x_row = x_ptr + row * n_cols\n"))),
    Wrong("softmax_tiled", "row index left in int32: row * stride_xm wraps past 2**31 elements", edit(
        "05", "softmax_tiled", (INT64_ROW + "    x_row = x_ptr", INT32_ROW + "    x_row = x_ptr")), gpu_only=True),
]


@triton.jit
def _scalar_state_kernel(x_ptr, out_ptr, n_cols, stride_xm, stride_xn, stride_om, BLOCK: tl.constexpr):
    """Pass 1 reduces each tile at once and keeps one running (max, sum) per row."""
    row = tl.program_id(0).to(tl.int64)   # x may pass 2**31 elements
    offs = tl.arange(0, BLOCK)
    m = -float("inf")
    l = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + offs
        x = tl.load(x_ptr + row * stride_xm + cols * stride_xn, mask=cols < n_cols, other=-float("inf"))
        x = x.to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        safe = tl.where(m_new == -float("inf"), 0.0, m_new)
        l = l * tl.exp(m - safe) + tl.sum(tl.exp(x - safe), axis=0)
        m = m_new
    safe = tl.where(m == -float("inf"), 0.0, m)
    l = tl.where(l == 0.0, 1.0, l)
    for start in range(0, n_cols, BLOCK):
        cols = start + offs
        x = tl.load(x_ptr + row * stride_xm + cols * stride_xn, mask=cols < n_cols, other=-float("inf"))
        tl.store(out_ptr + row * stride_om + cols, (tl.exp(x.to(tl.float32) - safe) / l)
                 .to(out_ptr.dtype.element_ty), mask=cols < n_cols)


def scalar_state_tiled(x, block=1024):
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    _scalar_state_kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), x.stride(1), out.stride(0), BLOCK=block)
    return out


RIGHT += [
    Right("softmax_tiled", "one running (max, sum) per row, each tile reduced in the loop", scalar_state_tiled),
    # x read 1.x times: pass 2 does not load the tile pass 1 ended on
    Right("softmax_tiled", "pass 1's last tile kept in registers for pass 2", edit(
        "05", "softmax_tiled",
        ("    l = tl.zeros((BLOCK,), tl.float32)\n    for start in range(0, n_cols, BLOCK):\n",
         "    l = tl.zeros((BLOCK,), tl.float32)\n    x_last = tl.full((BLOCK,), -float(\"inf\"), tl.float32)\n"
         "    for start in range(0, n_cols, BLOCK):\n"),
        ("add the new value\n        m = m_new\n", "add the new value\n        m = m_new\n        x_last = x\n"),
        ("    n_tiles = tl.cdiv(n_cols, BLOCK)\n    for i in range(0, n_tiles):\n",
         "    n_tiles = tl.cdiv(n_cols, BLOCK)\n    cols = (n_tiles - 1) * BLOCK + offs\n"
         "    tl.store(out_row + cols, (tl.exp(x_last - m_row) / l_row).to(out_ptr.dtype.element_ty), "
         "mask=cols < n_cols)\n    for i in range(0, n_tiles - 1):\n"))),
]


# ---------------------------------------------------------------- 4. rmsnorm_linear

RMS_SUM = "        sum_sq += tl.sum(xf * xf, axis=1)  "
RMS_X_LOAD = "                    mask=(offs_m[:, None] < M) & (k[None, :] < K), other=0.0)\n        g = "
# the fused kernel's lines (the epilogue kernel further down has lines like them)
RMS_TILES = "    n_tiles_n = tl.cdiv(N, BLOCK_N)\n    pid_m, pid_n = pid // n_tiles_n, pid % n_tiles_n   # neighbouring"
RMS_OFFS_N = ("    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)  # offs_n * stride_wn may pass 2^31\n"
              "    offs_k = tl.arange(0, BLOCK_K)\n    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)\n    sum_sq")
RMS_K_LOOP = "    sum_sq = tl.zeros((BLOCK_M,), dtype=tl.float32)\n    for k0 in range(0, K, BLOCK_K):\n"

WRONG += [
    Wrong("rmsnorm_linear", "pure PyTorch, no kernel", lambda x, gamma, w, eps=1e-6:
          torch.nn.functional.rms_norm(x, (x.shape[1],), gamma, eps) @ w.t()),
    Wrong("rmsnorm_linear", "the accumulator kept in float16 between K steps", edit(
        "05", "rmsnorm_linear", ("        acc = tl.dot(xg, w, acc)", "        acc = tl.dot(xg, w, acc.to(tl.float32)).to(x.dtype)"),
        ("    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)\n    sum_sq",   # the loop compiles on a GPU
         "    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=x_ptr.dtype.element_ty)\n    sum_sq"))),
    Wrong("rmsnorm_linear", "eps left out", edit("05", "rmsnorm_linear",
                                                 ("    inv_rms = tl.rsqrt(sum_sq / K + eps)\n    out = acc",
                                                  "    inv_rms = tl.rsqrt(sum_sq / K)\n    out = acc"))),
    Wrong("rmsnorm_linear", "mean of squares over the wrong axis", edit(
        "05", "rmsnorm_linear", (RMS_SUM, RMS_SUM.replace("axis=1", "axis=0")))),
    Wrong("rmsnorm_linear", "mean over the padded length", edit(
        "05", "rmsnorm_linear", ("    inv_rms = tl.rsqrt(sum_sq / K + eps)\n    out = acc",
                                 "    inv_rms = tl.rsqrt(sum_sq / (tl.cdiv(K, BLOCK_K) * BLOCK_K) + eps)\n"
                                 "    out = acc"))),
    Wrong("rmsnorm_linear", "no K mask on x", edit(
        "05", "rmsnorm_linear", (RMS_X_LOAD, RMS_X_LOAD.replace(" & (k[None, :] < K)", "")))),
    Wrong("rmsnorm_linear", "squares in float16", edit(
        "05", "rmsnorm_linear", (RMS_SUM, "        sum_sq += tl.sum(x * x, axis=1).to(tl.float32)  "))),
    Wrong("rmsnorm_linear", "gamma applied to the output columns", edit(
        "05", "rmsnorm_linear",
        ("        xg = (xf * g.to(tl.float32)[None, :]).to(x.dtype)  ", "        xg = x  "),
        ("    out = acc * inv_rms[:, None]\n",
         "    out = acc * inv_rms[:, None] * tl.load(g_ptr + offs_n, mask=offs_n < N, other=0.0)[None, :]\n"))),
    Wrong("rmsnorm_linear", "stride_wk ignored (w assumed contiguous)", edit(
        "05", "rmsnorm_linear", ("offs_n[None, :] * stride_wn + k[:, None] * stride_wk,   # a",
                                 "offs_n[None, :] * stride_wn + k[:, None],   # a"))),
    Wrong("rmsnorm_linear", "stride_wn ignored (w's rows taken to be K apart)", edit(
        "05", "rmsnorm_linear", ("offs_n[None, :] * stride_wn + k[:, None] * stride_wk,   # a",
                                 "offs_n[None, :] * K + k[:, None] * stride_wk,   # a"))),
    Wrong("rmsnorm_linear", "stride_xk ignored (x's columns taken to be adjacent)", edit(
        "05", "rmsnorm_linear", ("        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + k[None, :] * stride_xk,\n"
                                 "                    mask=(offs_m[:, None] < M) & (k[None, :] < K), other=0.0)\n"
                                 "        g = ",
                                 "        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + k[None, :],\n"
                                 "                    mask=(offs_m[:, None] < M) & (k[None, :] < K), other=0.0)\n"
                                 "        g = "))),
    Wrong("rmsnorm_linear", "RMSNorm kernel, then lesson 04's matmul: the normalized x goes through memory",
          lambda x, gamma, w, eps=1e-6: load_solution("04").matmul(load_solution("05").rms_norm_rows(x, gamma, eps),
                                                                    w.t())),
    # the launcher's three blocks are equal: only the check's run with unequal blocks sees these
    Wrong("rmsnorm_linear", "offs_n built with BLOCK_M", edit(
        "05", "rmsnorm_linear", (RMS_OFFS_N, RMS_OFFS_N.replace("pid_n * BLOCK_N", "pid_n * BLOCK_M")))),
    Wrong("rmsnorm_linear", "the K loop steps by BLOCK_M", edit(
        "05", "rmsnorm_linear", (RMS_K_LOOP, RMS_K_LOOP.replace("range(0, K, BLOCK_K)", "range(0, K, BLOCK_M)")))),
    Wrong("rmsnorm_linear", "the tiles along N counted with BLOCK_M", edit(
        "05", "rmsnorm_linear", (RMS_TILES, RMS_TILES.replace("cdiv(N, BLOCK_N)", "cdiv(N, BLOCK_M)")))),
    Wrong("rmsnorm_linear", "x * gamma kept in float32 and w converted: tl.dot on float32 operands", edit(
        "05", "rmsnorm_linear", ("        xg = (xf * g.to(tl.float32)[None, :]).to(x.dtype)   # the dot takes 16-bit "
                                 "operands\n        acc = tl.dot(xg, w, acc)\n",
                                 "        acc = tl.dot(xf * g.to(tl.float32)[None, :], w.to(tl.float32), acc)\n"))),
    Wrong("rmsnorm_linear", "row offsets left in int32: offs_m * stride_xm wraps past 2**31 elements", edit(
        "05", "rmsnorm_linear",
        ("    pid_m, pid_n = pid // n_tiles_n, pid % n_tiles_n   # neighbouring programs share rows of x\n"
         "    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)",
         "    pid_m, pid_n = pid // n_tiles_n, pid % n_tiles_n   # neighbouring programs share rows of x\n"
         "    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M))")), gpu_only=True),
]


@triton.jit
def _two_loop_kernel(x_ptr, g_ptr, w_ptr, out_ptr, M, N, K, eps,
                     stride_xm, stride_xk, stride_wn, stride_wk, stride_om, stride_on,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """The rms first (one loop over K), then the product with x already normalized (a second loop)."""
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)   # x may pass 2**31 elements
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    sum_sq = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + k[None, :] * stride_xk,
                    mask=(offs_m[:, None] < M) & (k[None, :] < K), other=0.0).to(tl.float32)
        sum_sq += tl.sum(x * x, axis=1)
    inv_rms = tl.rsqrt(sum_sq / K + eps)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + k[None, :] * stride_xk,
                    mask=(offs_m[:, None] < M) & (k[None, :] < K), other=0.0)
        g = tl.load(g_ptr + k, mask=k < K, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + offs_n[None, :] * stride_wn + k[:, None] * stride_wk,
                    mask=(offs_n[None, :] < N) & (k[:, None] < K), other=0.0)
        xn = (x.to(tl.float32) * inv_rms[:, None] * g[None, :]).to(x.dtype)
        acc = tl.dot(xn, w, acc)
    tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :] * stride_on,
             acc.to(out_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def rmsnorm_two_loops(x, gamma, w, eps=1e-6):
    M, K = x.shape
    N = w.shape[0]
    out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(M, 16), triton.cdiv(N, 64))
    _two_loop_kernel[grid](x, gamma, w, out, M, N, K, eps, x.stride(0), x.stride(1), w.stride(0), w.stride(1),
                           out.stride(0), out.stride(1), BLOCK_M=16, BLOCK_N=64, BLOCK_K=16)
    return out


RIGHT += [
    Right("rmsnorm_linear", "other blocks (16 x 64 x 16 on the CPU, 128 x 32 x 32 on a GPU)", edit(
        "05", "rmsnorm_linear", ("BLOCK_M, BLOCK_N, BLOCK_K = pick(cpu=(32, 32, 32), gpu=(64, 64, 64))",
                                 "BLOCK_M, BLOCK_N, BLOCK_K = pick(cpu=(16, 64, 16), gpu=(128, 32, 32))"))),
    Right("rmsnorm_linear", "two loops over K (the rms, then the product), a 2-D grid", rmsnorm_two_loops),
]

# ---------------------------------------------------------------- 5. groupnorm_mish

MISH = ("            e = tl.exp(tl.minimum(y, 20.0))\n            t = e * (e + 2.0)\n"
        "            tl.store(out_group + c * hw + p, (y * t / (t + 2.0)).to(")


@triton.jit
def _mish_kernel(y_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    y = tl.load(y_ptr + offs, mask=mask).to(tl.float32)
    e = tl.exp(tl.minimum(y, 20.0))
    t = e * (e + 2.0)
    tl.store(out_ptr + offs, (y * t / (t + 2.0)).to(out_ptr.dtype.element_ty), mask=mask)


def groupnorm_torch_mish_triton(x, num_groups, weight, bias, eps=1e-5):
    """F.group_norm in float32, then a Triton Mish kernel: right values, but not one kernel."""
    y = torch.nn.functional.group_norm(x.float(), num_groups, weight.float(), bias.float(), eps).contiguous()
    out = torch.empty(x.shape, device=x.device, dtype=x.dtype)
    _mish_kernel[(triton.cdiv(y.numel(), 1024),)](y, out, y.numel(), BLOCK=1024)
    return out


GN_INDEX = ("    pid = tl.program_id(0)\n"
            "    n, g = (pid // n_groups).to(tl.int64), (pid % n_groups).to(tl.int64)\n"
            "    first_c = g * group_channels\n"
            "    x_group = x_ptr + n * sx_n + first_c * sx_c\n"
            "    out_group")

WRONG += [
    Wrong("groupnorm_mish", "pure PyTorch, no kernel", load_solution("05").groupnorm_mish_reference),
    Wrong("groupnorm_mish", "three passes: the mean, then the centred sum of squares, then the output", edit(
        "05", "groupnorm_mish",
        ("    shift = tl.load(x_group).to(tl.float32)\n"
         "    s, s2 = _shifted_sums(x_group, shift, group_channels, 0, hw, sx_c, sx_p, CH_BLOCK, HW_BLOCK)\n"
         "    mean_shifted = s / size\n"
         "    var = tl.maximum(s2 / size - mean_shifted * mean_shifted, 0.0)\n",
         "    s, _s2 = _shifted_sums(x_group, 0.0, group_channels, 0, hw, sx_c, sx_p, CH_BLOCK, HW_BLOCK)\n"
         "    shift = s / size\n"
         "    _s, s2 = _shifted_sums(x_group, shift, group_channels, 0, hw, sx_c, sx_p, CH_BLOCK, HW_BLOCK)\n"
         "    var = s2 / size\n"
         "    mean_shifted = 0.0\n"))),
    Wrong("groupnorm_mish", "no shift: E[x^2] - E[x]^2 cancels for a large mean", edit(
        "05", "groupnorm_mish", ("    shift = tl.load(x_group).to(tl.float32)\n    s, s2", "    shift = 0.0\n    s, s2"))),
    Wrong("groupnorm_mish", "one shift for the whole tensor (its first value), not one per group", edit(
        "05", "groupnorm_mish", ("    shift = tl.load(x_group).to(tl.float32)\n    s, s2",
                                 "    shift = tl.load(x_ptr).to(tl.float32)\n    s, s2"))),
    Wrong("groupnorm_mish", "exp(y) uncapped: inf / inf in Mish's upper tail", edit(
        "05", "groupnorm_mish", ("e = tl.exp(tl.minimum(y, 20.0))", "e = tl.exp(y)"))),
    Wrong("groupnorm_mish", "one weight and bias per group, not per channel", edit(
        "05", "groupnorm_mish",
        ("scale = tl.load(w_group + c,", "scale = tl.load(w_group + 0 * c,"),
        ("beta = tl.load(b_group + c,", "beta = tl.load(b_group + 0 * c,"))),
    Wrong("groupnorm_mish", "weight and bias of the tile's row, not of the channel", edit(
        "05", "groupnorm_mish",
        ("scale = tl.load(w_group + c,", "scale = tl.load(w_group + c - c0,"),
        ("beta = tl.load(b_group + c,", "beta = tl.load(b_group + c - c0,"))),
    Wrong("groupnorm_mish", "eps hard-coded to 1e-5, not the one passed in", edit(
        "05", "groupnorm_mish", ("tl.rsqrt(var + eps), group_channels, 0, hw", "tl.rsqrt(var + 1e-5), group_channels, 0, hw"))),
    Wrong("groupnorm_mish", "contiguous NCHW assumed: the positions' stride taken to be 1", edit(
        "05", "groupnorm_mish",
        ("x_group + c * sx_c + p * sx_p, mask=inside, other=0.0).to(tl.float32)\n            v = tl.where",
         "x_group + c * sx_c + p, mask=inside, other=0.0).to(tl.float32)\n            v = tl.where"),
        ("x_group + c * sx_c + p * sx_p, mask=inside, other=0.0).to(tl.float32)\n            y =",
         "x_group + c * sx_c + p, mask=inside, other=0.0).to(tl.float32)\n            y ="))),
    Wrong("groupnorm_mish", "channels past the group not masked: the next group's values counted", edit(
        "05", "groupnorm_mish",
        ("inside = (c < channels) & (p < p_end)\n            v = tl.load(x_group + c * sx_c + p * sx_p, mask=inside, other=0.0).to(tl.float32)\n            v = tl.where",
         "inside = (c >= 0) & (p < p_end)\n            v = tl.load(x_group + c * sx_c + p * sx_p, mask=inside, other=0.0).to(tl.float32)\n            v = tl.where"))),
    Wrong("groupnorm_mish", "sums accumulated in float16", edit(
        "05", "groupnorm_mish",
        ("    s = tl.zeros((CH_BLOCK, HW_BLOCK), tl.float32)\n    s2 = tl.zeros((CH_BLOCK, HW_BLOCK), tl.float32)",
         "    s = tl.zeros((CH_BLOCK, HW_BLOCK), tl.float16)\n    s2 = tl.zeros((CH_BLOCK, HW_BLOCK), tl.float16)"),
        ("            s += v\n            s2 += v * v", "            s += v.to(tl.float16)\n            s2 += (v * v).to(tl.float16)"))),
    Wrong("groupnorm_mish", "mean over one channel's H * W values, not the group's", edit(
        "05", "groupnorm_mish", ("    mean_shifted = s / size", "    mean_shifted = s / hw"))),
    Wrong("groupnorm_mish", "stored through x's strides, not into the contiguous output", edit(
        "05", "groupnorm_mish", ("tl.store(out_group + c * hw + p,", "tl.store(out_group + c * sx_c + p * sx_p,"))),
    Wrong("groupnorm_mish", "sx_n ignored: samples taken to be C * H * W values apart", edit(
        "05", "groupnorm_mish", (GN_INDEX, GN_INDEX.replace("x_ptr + n * sx_n", "x_ptr + n * n_groups * group_channels * hw")))),
    Wrong("groupnorm_mish", "Mish as y * tanh(softplus(y)), each through tl.exp: three exponentials per value", edit(
        "05", "groupnorm_mish", (MISH, "            s = tl.where(y > 20.0, y, tl.log(1.0 + tl.exp(tl.minimum(y, 20.0))))\n"
                                       "            tanh_s = (1.0 - tl.exp(-2.0 * s)) / (1.0 + tl.exp(-2.0 * s))\n"
                                       "            tl.store(out_group + c * hw + p, (y * tanh_s).to("))),
    Wrong("groupnorm_mish", "two launches: the split version's statistics kernel, then its apply kernel",
          lambda x, groups, weight, bias, eps: load_solution("05").groupnorm_mish_split(x, groups, weight, bias, eps,
                                                                                         splits=2)),
    Wrong("groupnorm_mish", "GroupNorm by PyTorch, Mish in a Triton kernel", groupnorm_torch_mish_triton),
    Wrong("groupnorm_mish", "sample and group left in int32: n * sx_n wraps past 2**31 elements", edit(
        "05", "groupnorm_mish", (GN_INDEX, GN_INDEX.replace(".to(tl.int64)", ""))), gpu_only=True),
    Wrong("groupnorm_mish", "the output's offset from program_id in int32: pid * C_g * HW wraps past 2**31", edit(
        "05", "groupnorm_mish", ("    out_group = out_ptr + (n * n_groups + g) * group_channels * hw",
                                 "    out_group = out_ptr + tl.program_id(0) * group_channels * hw")), gpu_only=True),
]

@triton.jit
def _flat_index_kernel(x_ptr, w_ptr, b_ptr, out_ptr, n_groups, group_channels, hw, eps,
                       sx_n, sx_c, sx_p, CH_BLOCK: tl.constexpr, HW_BLOCK: tl.constexpr):
    """The lesson's kernel with one flat index over the group: channel i // hw, position i % hw, and the
    channel's weight and bias loaded once per value (slower on a GPU, and right)."""
    BLOCK: tl.constexpr = CH_BLOCK * HW_BLOCK
    pid = tl.program_id(0)
    n, g = (pid // n_groups).to(tl.int64), (pid % n_groups).to(tl.int64)
    first_c = g * group_channels
    x_group = x_ptr + n * sx_n + first_c * sx_c
    out_group = out_ptr + (n * n_groups + g) * group_channels * hw
    size = group_channels * hw
    shift = tl.load(x_group).to(tl.float32)
    s = tl.zeros((BLOCK,), tl.float32)
    s2 = tl.zeros((BLOCK,), tl.float32)
    for i0 in range(0, size, BLOCK):
        i = i0 + tl.arange(0, BLOCK)
        v = tl.load(x_group + (i // hw) * sx_c + (i % hw) * sx_p, mask=i < size, other=0.0).to(tl.float32)
        v = tl.where(i < size, v - shift, 0.0)
        s += v
        s2 += v * v
    mean_shifted = tl.sum(s, axis=0) / size
    inv_std = tl.rsqrt(tl.maximum(tl.sum(s2, axis=0) / size - mean_shifted * mean_shifted, 0.0) + eps)
    for i0 in range(0, size, BLOCK):
        i = i0 + tl.arange(0, BLOCK)
        c = first_c + i // hw
        v = tl.load(x_group + (i // hw) * sx_c + (i % hw) * sx_p, mask=i < size, other=0.0).to(tl.float32)
        weight = tl.load(w_ptr + c, mask=i < size, other=0.0).to(tl.float32)
        bias = tl.load(b_ptr + c, mask=i < size, other=0.0).to(tl.float32)
        y = (v - shift - mean_shifted) * inv_std * weight + bias
        e = tl.exp(tl.minimum(y, 20.0))
        t = e * (e + 2.0)
        tl.store(out_group + i, (y * t / (t + 2.0)).to(out_ptr.dtype.element_ty), mask=i < size)


def groupnorm_mish_flat_index(x, num_groups, weight, bias, eps=1e-5):
    """The notebook's launcher (CPU tiles), around the flat-index kernel."""
    N, C, H, W = x.shape
    x3 = x.flatten(2)
    HW_BLOCK = min(triton.next_power_of_2(H * W), 256)
    CH_BLOCK = min(triton.next_power_of_2(C // num_groups), 256 // HW_BLOCK)
    out = torch.empty((N, C, H, W), device=x.device, dtype=x.dtype)
    _flat_index_kernel[(N * num_groups,)](x3, weight, bias, out, num_groups, C // num_groups, H * W, eps,
                                          *x3.stride(), CH_BLOCK=CH_BLOCK, HW_BLOCK=HW_BLOCK)
    return out


RIGHT += [
    # Its weight and bias loads, one per value, are as many bytes as a pass over x: x is read twice all the same.
    Right("groupnorm_mish", "one flat index over the group (// and %), weight and bias loaded per value",
          groupnorm_mish_flat_index),
    Right("groupnorm_mish", "tiles of 64 values, one warp", edit(
        "05", "groupnorm_mish", ("    BLOCK, warps = pick(cpu=(256, 4), gpu=(4096, 16))",
                                 "    BLOCK, warps = pick(cpu=(64, 1), gpu=(512, 4))"))),
    Right("groupnorm_mish", "tiles of one channel", edit(
        "05", "groupnorm_mish", ("    CH_BLOCK = min(triton.next_power_of_2(C // num_groups), BLOCK // HW_BLOCK)",
                                 "    CH_BLOCK = 1"))),
]
