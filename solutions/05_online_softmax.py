"""Lesson 05 solutions: softmax and RMSNorm one row per program, online softmax (in PyTorch, then a
tiled kernel for rows longer than a block), RMSNorm fused into the linear layer after it, and GroupNorm
+ Mish (a diffusion U-Net's normalisation, whose "row" is a group of channels: two passes in tiles).

Every softmax here gives 0 for a row that is entirely -inf (torch.softmax gives NaN there).
"""

import itertools
import math

import torch
import torch.nn.functional as F

import helpers  # noqa: F401  (first: picks the GPU or the interpreter)
import triton
import triton.language as tl

from helpers.bench import Bench
from helpers.device import ON_GPU, pick
from helpers.launch import Launcher, next_power_of_2

# The widest row a single program holds in registers (16 warps x 32 threads x 32 values).
MAX_ROW_BLOCK = 16384


def row_warps(block):
    """Warps for a program that holds `block` values of one row: 16 values per thread, up to 16 warps.

    Chosen by timing rows of 1,024 to 16,384 values on an H200 (`make bench` does not record that
    sweep): fewer warps leave too few loads in flight; more make programs too small to keep the
    memory busy.
    """
    return min(16, max(2, block // 512))


# ---------------------------------------------------------------- RMSNorm, one row per program


@triton.jit
def rms_norm_kernel(x_ptr, g_ptr, out_ptr, n_cols, eps, stride_xm, stride_xn, stride_om,
                    BLOCK_N: tl.constexpr):
    """out[row] = x[row] / sqrt(mean(x[row]^2) + eps) * g, the whole row in registers."""
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride_xm can pass the int32 limit, 2^31 - 1
    offs = tl.arange(0, BLOCK_N)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * stride_xm + offs * stride_xn, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(g_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    inv_rms = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)  # masked lanes add 0 to the sum
    tl.store(out_ptr + row * stride_om + offs, (x * inv_rms * g).to(out_ptr.dtype.element_ty), mask=mask)


_rms_norm_launcher = Launcher(rms_norm_kernel)   # launches prepared once per key (helpers.launch)


def rms_norm_rows(x, gamma, eps=1e-6):
    """RMSNorm over the last dimension of a 2-D tensor, one row per program."""
    assert x.dim() == 2 and gamma.shape == (x.shape[1],), "x (M, K) and gamma (K,)"
    n_rows, n_cols = x.shape
    out = x.new_empty((n_rows, n_cols))
    BLOCK_N = next_power_of_2(n_cols)   # triton.next_power_of_2, at a tenth of its host time
    assert BLOCK_N <= MAX_ROW_BLOCK, f"rows of at most {MAX_ROW_BLOCK} values fit one program"
    _rms_norm_launcher((n_rows,), x, gamma, out, n_cols, eps, *x.stride(), out.stride(0),
                       BLOCK_N=BLOCK_N, num_warps=row_warps(BLOCK_N))
    return out


# ---------------------------------------------------------------- 1. softmax, one row per program


@triton.jit
def softmax_rows_kernel(x_ptr, out_ptr, n_cols, stride_xm, stride_xn, stride_om, BLOCK_N: tl.constexpr):
    """Softmax of row program_id(0) of x, its n_cols <= BLOCK_N values held in registers."""
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride_xm can pass the int32 limit, 2^31 - 1
    offs = tl.arange(0, BLOCK_N)
    mask = offs < n_cols
    # Lanes past the end load -inf: they leave the max alone and add exp(-inf) = 0 to the sum.
    x = tl.load(x_ptr + row * stride_xm + offs * stride_xn, mask=mask, other=-float("inf"))
    x = x.to(tl.float32)                       # float16 in, float32 arithmetic
    m = tl.max(x, axis=0)
    m = tl.where(m == -float("inf"), 0.0, m)   # fully masked row: exp(-inf - 0) = 0, not NaN
    e = tl.exp(x - m)
    l = tl.sum(e, axis=0)                      # >= 1 (the max gives exp(0)), or 0 if fully masked
    l = tl.where(l == 0.0, 1.0, l)             # fully masked row: 0 / 1 = 0, not 0 / 0
    tl.store(out_ptr + row * stride_om + offs, (e / l).to(out_ptr.dtype.element_ty), mask=mask)


def softmax_rows(x):
    """Softmax over the rows of a 2-D tensor whose rows fit one block; fully masked rows give 0."""
    assert x.dim() == 2, "softmax_rows takes a 2-D tensor"
    n_rows, n_cols = x.shape
    out = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    BLOCK_N = triton.next_power_of_2(n_cols)
    assert BLOCK_N <= MAX_ROW_BLOCK, f"rows of at most {MAX_ROW_BLOCK} values: use softmax_tiled"
    softmax_rows_kernel[(n_rows,)](x, out, n_cols, x.stride(0), x.stride(1), out.stride(0),
                                   BLOCK_N=BLOCK_N, num_warps=row_warps(BLOCK_N))
    return out


# ---------------------------------------------------------------- 2. online softmax in PyTorch


def online_softmax_torch(x, chunk):
    """Softmax over the rows of x, reading the columns `chunk` at a time with a running max and sum."""
    n_rows, n_cols = x.shape
    m = torch.full((n_rows,), -math.inf, dtype=x.dtype, device=x.device)  # running max
    l = torch.zeros(n_rows, dtype=x.dtype, device=x.device)               # running sum of exp(x - m)
    for start in range(0, n_cols, chunk):
        xc = x[:, start:start + chunk]
        m_new = torch.maximum(m, xc.amax(dim=1))
        safe = torch.where(m_new == -math.inf, 0.0, m_new)  # all -inf so far: keep l at 0, not NaN
        l = l * torch.exp(m - safe) + torch.exp(xc - safe[:, None]).sum(dim=1)
        m = m_new
    safe = torch.where(m == -math.inf, 0.0, m)
    l = torch.where(l == 0, 1.0, l)                         # fully masked row: outputs 0
    out = torch.empty_like(x)
    for start in range(0, n_cols, chunk):
        out[:, start:start + chunk] = torch.exp(x[:, start:start + chunk] - safe[:, None]) / l[:, None]
    return out


# ---------------------------------------------------------------- 3. tiled online softmax


@triton.jit
def softmax_tiled_kernel(x_ptr, out_ptr, n_cols, stride_xm, stride_xn, stride_om, BLOCK: tl.constexpr,
                         REVERSE: tl.constexpr = False):
    """Softmax of row program_id(0), any length: pass 1 finds its max and sum tile by tile, pass 2 writes.

    REVERSE: pass 2 walks the tiles from the last one back (lesson 08's change)."""
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride_xm can pass the int32 limit, 2^31 - 1
    x_row = x_ptr + row * stride_xm
    out_row = out_ptr + row * stride_om
    offs = tl.arange(0, BLOCK)
    # Pass 1: each lane keeps a running max m and sum l over the values it has seen.
    m = tl.full((BLOCK,), -float("inf"), tl.float32)
    l = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + offs
        x = tl.load(x_row + cols * stride_xn, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        safe = tl.where(m_new == -float("inf"), 0.0, m_new)  # nothing finite seen yet: l stays 0
        l = l * tl.exp(m - safe) + tl.exp(x - safe)           # rescale the old sum, add the new value
        m = m_new
    # Merge the lanes: the row's max, and every lane's sum rescaled to it.
    m_row = tl.max(m, axis=0)
    m_row = tl.where(m_row == -float("inf"), 0.0, m_row)
    l_row = tl.sum(l * tl.exp(m - m_row), axis=0)
    l_row = tl.where(l_row == 0.0, 1.0, l_row)                # fully masked row: outputs 0
    # Pass 2: read the row again and write exp(x - max) / sum.
    n_tiles = tl.cdiv(n_cols, BLOCK)
    for i in range(0, n_tiles):
        tile = n_tiles - 1 - i if REVERSE else i
        cols = tile * BLOCK + offs
        mask = cols < n_cols
        x = tl.load(x_row + cols * stride_xn, mask=mask, other=-float("inf")).to(tl.float32)
        tl.store(out_row + cols, (tl.exp(x - m_row) / l_row).to(out_ptr.dtype.element_ty), mask=mask)


def softmax_tiled(x, block=1024):
    """Softmax over the rows of a 2-D tensor of any width, read in tiles of `block` columns."""
    assert x.dim() == 2, "softmax_tiled takes a 2-D tensor"
    n_rows, n_cols = x.shape
    out = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    softmax_tiled_kernel[(n_rows,)](x, out, n_cols, x.stride(0), x.stride(1), out.stride(0),
                                    BLOCK=block, num_warps=row_warps(block))
    return out


# The tile size that is fastest depends on the row length and the dtype: let the autotuner time
# a few on the first call for each (n_cols, dtypes) and remember the winner.
TILED_CONFIGS = pick(cpu=[triton.Config({"BLOCK": 1024}, num_warps=4)],
                     gpu=[triton.Config({"BLOCK": b}, num_warps=w)
                          for b, w in [(1024, 4), (2048, 4), (2048, 8), (4096, 8), (4096, 16), (8192, 16)]])
softmax_tiled_tuned_kernel = triton.autotune(configs=TILED_CONFIGS, key=["n_cols"])(softmax_tiled_kernel)


def softmax_tiled_tuned(x):
    """softmax_tiled with the tile size and warps chosen by the autotuner, per row length and dtype."""
    assert x.dim() == 2, "softmax_tiled_tuned takes a 2-D tensor"
    n_rows, n_cols = x.shape
    out = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    softmax_tiled_tuned_kernel[(n_rows,)](x, out, n_cols, x.stride(0), x.stride(1), out.stride(0))
    return out


def softmax(x):
    """Softmax over the rows of any 2-D tensor: one read when a row fits one program, tiled otherwise."""
    if triton.next_power_of_2(x.shape[1]) <= MAX_ROW_BLOCK:
        return softmax_rows(x)
    return softmax_tiled_tuned(x)


# ---------------------------------------------------------------- 4. RMSNorm fused into the linear layer


@triton.jit
def rmsnorm_linear_kernel(x_ptr, g_ptr, w_ptr, out_ptr, M, N, K, eps,
                          stride_xm, stride_xk, stride_wn, stride_wk, stride_om, stride_on,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """One (BLOCK_M, BLOCK_N) tile of rms_norm(x) * g @ w.T; the normalized x never leaves registers.

    Row scaling commutes with the matmul: (s * x) @ W = s * (x @ W). So the loop over K feeds
    x * g to the dot and, from the same loaded tile, sums x^2; the epilogue scales each row of the
    accumulator by 1 / rms once the sum of squares is complete. x is read once per tile, no pre-pass.
    """
    pid = tl.program_id(0)
    n_tiles_n = tl.cdiv(N, BLOCK_N)
    pid_m, pid_n = pid // n_tiles_n, pid % n_tiles_n   # neighbouring programs share rows of x
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)  # int64: offs_m * stride_xm and
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)  # offs_n * stride_wn may pass 2^31
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    sum_sq = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + offs_k
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + k[None, :] * stride_xk,
                    mask=(offs_m[:, None] < M) & (k[None, :] < K), other=0.0)
        g = tl.load(g_ptr + k, mask=k < K, other=0.0)
        w = tl.load(w_ptr + offs_n[None, :] * stride_wn + k[:, None] * stride_wk,   # a (BLOCK_K, BLOCK_N)
                    mask=(offs_n[None, :] < N) & (k[:, None] < K), other=0.0)      # tile of w.T
        xf = x.to(tl.float32)
        sum_sq += tl.sum(xf * xf, axis=1)                   # float32: x*x overflows float16 at |x| > 255
        xg = (xf * g.to(tl.float32)[None, :]).to(x.dtype)   # the dot takes 16-bit operands
        acc = tl.dot(xg, w, acc)
    inv_rms = tl.rsqrt(sum_sq / K + eps)
    out = acc * inv_rms[:, None]
    tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :] * stride_on,
             out.to(out_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


RMSNORM_LINEAR_CONFIGS = pick(
    cpu=[triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32}, num_warps=4)],
    gpu=[triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk}, num_warps=w, num_stages=s)
         for bm, bn, bk, w, s in [(128, 128, 64, 8, 3), (128, 256, 64, 8, 3), (64, 128, 64, 4, 4),
                                  (128, 128, 64, 4, 4), (64, 256, 64, 8, 4)]])
rmsnorm_linear_tuned_kernel = triton.autotune(configs=RMSNORM_LINEAR_CONFIGS,
                                              key=["M", "N", "K"])(rmsnorm_linear_kernel)


def rmsnorm_linear(x, gamma, w, eps=1e-6):
    """rms_norm(x) * gamma @ w.T in one kernel; x (M, K), gamma (K,), w (N, K) as nn.Linear stores it."""
    assert x.dim() == 2 and w.dim() == 2 and x.shape[1] == w.shape[1] == gamma.shape[0], \
        "x (M, K), gamma (K,), w (N, K)"
    M, K = x.shape
    N = w.shape[0]
    out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    args = (x, gamma, w, out, M, N, K, eps, x.stride(0), x.stride(1), w.stride(0), w.stride(1),
            out.stride(0), out.stride(1))
    if M * N >= 2**22:
        # Autotuning compiles and times every config on the first call for each (M, N, K):
        # seconds, worth paying only for problems large enough to run many times.
        grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)
        rmsnorm_linear_tuned_kernel[grid](*args)
    else:
        BLOCK_M, BLOCK_N, BLOCK_K = pick(cpu=(32, 32, 32), gpu=(64, 64, 64))
        grid = (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N),)
        rmsnorm_linear_kernel[grid](*args, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, num_warps=4)
    return out


# ---------------------------------------------------------------- 4b. the same algebra, the matmul kept pure


@triton.jit
def inv_rms_kernel(x_ptr, inv_ptr, n_rows, n_cols, eps, stride_xm, stride_xn,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """inv[row] = 1 / sqrt(mean(x[row]^2) + eps) for BLOCK_M rows, walking them BLOCK_N columns at a time."""
    rows = (tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)  # rows * stride_xm: int64
    sum_sq = tl.zeros((BLOCK_M,), tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xn,
                    mask=(rows[:, None] < n_rows) & (cols[None, :] < n_cols), other=0.0).to(tl.float32)
        sum_sq += tl.sum(x * x, axis=1)
    tl.store(inv_ptr + rows, tl.rsqrt(sum_sq / n_cols + eps), mask=rows < n_rows)


@triton.jit
def matmul_row_scale_kernel(x_ptr, w_ptr, s_ptr, out_ptr, M, N, K,
                            stride_xm, stride_xk, stride_wn, stride_wk, stride_om, stride_on,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """out = s[:, None] * (x @ w.T): x goes to tl.dot exactly as loaded; the scale waits for the epilogue."""
    pid = tl.program_id(0)
    n_tiles_n = tl.cdiv(N, BLOCK_N)
    pid_m, pid_n = pid // n_tiles_n, pid % n_tiles_n
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)  # int64: offs_m * stride_xm and
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)  # offs_n * stride_wn may pass 2^31
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + offs_k
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + k[None, :] * stride_xk,
                    mask=(offs_m[:, None] < M) & (k[None, :] < K), other=0.0)
        w = tl.load(w_ptr + offs_n[None, :] * stride_wn + k[:, None] * stride_wk,
                    mask=(offs_n[None, :] < N) & (k[:, None] < K), other=0.0)
        acc = tl.dot(x, w, acc)
    s = tl.load(s_ptr + offs_m, mask=offs_m < M, other=0.0)
    out = acc * s[:, None]
    tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :] * stride_on,
             out.to(out_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


_inv_rms_launcher = Launcher(inv_rms_kernel)   # launches prepared once per key (helpers.launch)


def inv_rms(x, eps=1e-6):
    """1 / sqrt(mean(x^2) + eps) of each row of x (M, K), in float32: M values, one kernel."""
    assert x.dim() == 2, "x: (M, K)"
    M, K = x.shape
    out = x.new_empty(M, dtype=torch.float32)
    # One row per program, read in tiles of up to 4096 values: on an H100 this was the fastest
    # choice from 16 rows (a decoding step) to 8192, where more rows per program leave few programs,
    # each with a long serial walk.
    BLOCK_N = pick(64, min(next_power_of_2(K), 4096))
    _inv_rms_launcher((M,), x, out, M, K, eps, *x.stride(), BLOCK_M=1, BLOCK_N=BLOCK_N,
                      num_warps=pick(4, 8))
    return out


def rmsnorm_linear_epilogue(x, w_folded, eps=1e-6):
    """rms_norm(x) * gamma @ w.T for inference, with gamma folded into the weights once: w_folded = w * gamma.

    A small pass writes 1/rms per row (M floats); the matmul feeds x to tl.dot untouched, which keeps
    it a plain, fast matmul, and scales its rows in the epilogue. The normalized activations never
    reach memory; x is read twice (once by each kernel).
    """
    M, K = x.shape
    N = w_folded.shape[0]
    scale = inv_rms(x, eps)
    out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    BLOCK_M, BLOCK_N, BLOCK_K, warps, stages = pick(cpu=(32, 32, 32, 4, 1), gpu=(128, 256, 64, 8, 3))
    matmul_row_scale_kernel[(triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N),)](
        x, w_folded, scale, out, M, N, K, x.stride(0), x.stride(1), w_folded.stride(0), w_folded.stride(1),
        out.stride(0), out.stride(1), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
        num_warps=warps, num_stages=stages)
    return out


# ---------------------------------------------------------------- GroupNorm + Mish

# One program per (sample, group) reads its group twice: a statistics pass, then a pass that
# normalises, applies the affine and Mish, and stores. The group is a (channels, H * W) matrix, read
# in tiles of CH_BLOCK channels x HW_BLOCK positions: a channel's index is the tile's row, so the
# per-channel weight and bias are one small vector per tile, and no offset needs a division.
# N * G programs must fill the GPU: with a batch of 1 and 32 groups of a 256 x 256 image (2 M values
# each), 32 programs leave most of an H100's 132 SMs idle. groupnorm_mish_split (below) splits each
# group's positions over several programs for such shapes; make bench times both.


def groupnorm_mish_reference(x, num_groups, weight, bias, eps):
    return F.mish(F.group_norm(x, num_groups, weight, bias, eps))


def _groupnorm_args(x, num_groups, weight, bias, positions, BLOCK):
    """Checks, then x as (N, C, H * W) and the tile shape: HW_BLOCK positions (at most BLOCK, and no
    more than a slice of `positions` needs) by CH_BLOCK channels, CH_BLOCK * HW_BLOCK <= BLOCK."""
    assert x.dim() == 4, "x: (N, C, H, W)"
    N, C, H, W = x.shape
    assert C % num_groups == 0, "the channels must split evenly into num_groups groups"
    assert weight.shape == bias.shape == (C,), "weight and bias: one value per channel"
    assert weight.stride(0) == bias.stride(0) == 1, "weight and bias: contiguous"
    # A view wherever H and W can be merged (contiguous NCHW and channels-last both can), else a copy.
    x3 = x.flatten(2)
    HW_BLOCK = min(triton.next_power_of_2(positions), BLOCK)
    CH_BLOCK = min(triton.next_power_of_2(C // num_groups), BLOCK // HW_BLOCK)
    return x3, CH_BLOCK, HW_BLOCK


@triton.jit
def _shifted_sums(x_group, shift, channels, p_start, p_end, sx_c, sx_p,
                  CH_BLOCK: tl.constexpr, HW_BLOCK: tl.constexpr):
    """Sums of (x - shift) and (x - shift)^2 over the group's channels and positions [p_start, p_end)."""
    s = tl.zeros((CH_BLOCK, HW_BLOCK), tl.float32)
    s2 = tl.zeros((CH_BLOCK, HW_BLOCK), tl.float32)
    for c0 in range(0, channels, CH_BLOCK):
        c = c0 + tl.arange(0, CH_BLOCK)[:, None]
        for p0 in range(p_start, p_end, HW_BLOCK):
            p = p0 + tl.arange(0, HW_BLOCK)[None, :]
            inside = (c < channels) & (p < p_end)
            v = tl.load(x_group + c * sx_c + p * sx_p, mask=inside, other=0.0).to(tl.float32)
            v = tl.where(inside, v - shift, 0.0)
            s += v
            s2 += v * v
    return tl.sum(tl.sum(s, axis=1), axis=0), tl.sum(tl.sum(s2, axis=1), axis=0)


@triton.jit
def _normalize_mish(x_group, out_group, w_group, b_group, mean, inv_std, channels, p_start, p_end, hw,
                    sx_c, sx_p, CH_BLOCK: tl.constexpr, HW_BLOCK: tl.constexpr):
    """Normalise positions [p_start, p_end) of the group's channels, scale and shift per channel, Mish,
    one store into the contiguous output."""
    for c0 in range(0, channels, CH_BLOCK):
        c = c0 + tl.arange(0, CH_BLOCK)
        scale = tl.load(w_group + c, mask=c < channels, other=0.0).to(tl.float32) * inv_std
        beta = tl.load(b_group + c, mask=c < channels, other=0.0).to(tl.float32)
        c, scale, beta = c[:, None], scale[:, None], beta[:, None]
        for p0 in range(p_start, p_end, HW_BLOCK):
            p = p0 + tl.arange(0, HW_BLOCK)[None, :]
            inside = (c < channels) & (p < p_end)
            v = tl.load(x_group + c * sx_c + p * sx_p, mask=inside, other=0.0).to(tl.float32)
            y = (v - mean) * scale + beta
            # Mish: y * tanh(softplus(y)), and tanh(log(1 + e)) = e (e + 2) / (e (e + 2) + 2) for e = exp(y):
            # one exp. It is capped at exp(20): past it t / (t + 2) is 1 in float32, and t stays finite.
            e = tl.exp(tl.minimum(y, 20.0))
            t = e * (e + 2.0)
            tl.store(out_group + c * hw + p, (y * t / (t + 2.0)).to(out_group.dtype.element_ty), mask=inside)


@triton.jit
def groupnorm_mish_kernel(x_ptr, w_ptr, b_ptr, out_ptr, n_groups, group_channels, hw, eps,
                          sx_n, sx_c, sx_p, CH_BLOCK: tl.constexpr, HW_BLOCK: tl.constexpr):
    """GroupNorm then Mish over one (sample, group): its group_channels x hw values, in tiles."""
    pid = tl.program_id(0)
    n, g = (pid // n_groups).to(tl.int64), (pid % n_groups).to(tl.int64)
    first_c = g * group_channels
    x_group = x_ptr + n * sx_n + first_c * sx_c
    out_group = out_ptr + (n * n_groups + g) * group_channels * hw       # output: (N, C, H, W) contiguous
    size = group_channels * hw
    # Pass 1: sums of (x - shift) and its square. The shift (the group's first value) keeps
    # sum_sq / size - mean^2 from cancelling away when the mean is large against the spread.
    shift = tl.load(x_group).to(tl.float32)
    s, s2 = _shifted_sums(x_group, shift, group_channels, 0, hw, sx_c, sx_p, CH_BLOCK, HW_BLOCK)
    mean_shifted = s / size
    var = tl.maximum(s2 / size - mean_shifted * mean_shifted, 0.0)
    # Pass 2: normalise, scale and shift per channel, Mish, one store.
    _normalize_mish(x_group, out_group, w_ptr + first_c, b_ptr + first_c, shift + mean_shifted,
                    tl.rsqrt(var + eps), group_channels, 0, hw, hw, sx_c, sx_p, CH_BLOCK, HW_BLOCK)


def groupnorm_mish(x, num_groups, weight, bias, eps=1e-5):
    """Mish(GroupNorm(x)) in one kernel; x (N, C, H, W) of any strides, weight and bias (C,)."""
    N, C, H, W = x.shape
    BLOCK, warps = pick(cpu=(256, 4), gpu=(4096, 16))
    x3, CH_BLOCK, HW_BLOCK = _groupnorm_args(x, num_groups, weight, bias, H * W, BLOCK)
    out = torch.empty((N, C, H, W), device=x.device, dtype=x.dtype)
    groupnorm_mish_kernel[(N * num_groups,)](x3, weight, bias, out, num_groups, C // num_groups, H * W, eps,
                                             *x3.stride(), CH_BLOCK=CH_BLOCK, HW_BLOCK=HW_BLOCK,
                                             num_warps=warps)
    return out


# The split reduction: when N * G programs cannot fill the GPU, each group's H * W positions are cut
# into `splits` slices of `chunk` positions (all of the group's channels). A first kernel writes each
# slice's two sums; a second combines a group's sums (a few floats) and normalises its slice. Two
# launches instead of one, and the same two reads of x, now spread over N * G * splits programs.


@triton.jit
def group_partial_sums_kernel(x_ptr, part_ptr, n_groups, group_channels, hw, chunk,
                              sx_n, sx_c, sx_p, CH_BLOCK: tl.constexpr, HW_BLOCK: tl.constexpr):
    """Program (group, slice): sums of (x - shift) and its square over the slice -> part[group, slice]."""
    pid, split = tl.program_id(0), tl.program_id(1)
    n, g = (pid // n_groups).to(tl.int64), (pid % n_groups).to(tl.int64)
    x_group = x_ptr + n * sx_n + g * group_channels * sx_c
    start = split * chunk
    shift = tl.load(x_group).to(tl.float32)               # the same shift in every slice of a group
    s, s2 = _shifted_sums(x_group, shift, group_channels, start, min(start + chunk, hw), sx_c, sx_p,
                          CH_BLOCK, HW_BLOCK)
    at = part_ptr + (pid * tl.num_programs(1) + split) * 2
    tl.store(at, s)
    tl.store(at + 1, s2)


@triton.jit
def groupnorm_mish_apply_kernel(x_ptr, part_ptr, w_ptr, b_ptr, out_ptr, n_groups, group_channels, hw,
                                chunk, eps, sx_n, sx_c, sx_p, SPLITS: tl.constexpr,
                                CH_BLOCK: tl.constexpr, HW_BLOCK: tl.constexpr):
    """Program (group, slice): the group's statistics from its SPLITS partial sums, then pass 2 on a slice."""
    pid, split = tl.program_id(0), tl.program_id(1)
    n, g = (pid // n_groups).to(tl.int64), (pid % n_groups).to(tl.int64)
    first_c = g * group_channels
    x_group = x_ptr + n * sx_n + first_c * sx_c
    size = group_channels * hw
    parts = part_ptr + pid * SPLITS * 2 + tl.arange(0, SPLITS) * 2
    mean_shifted = tl.sum(tl.load(parts), axis=0) / size
    var = tl.maximum(tl.sum(tl.load(parts + 1), axis=0) / size - mean_shifted * mean_shifted, 0.0)
    start = split * chunk
    _normalize_mish(x_group, out_ptr + (n * n_groups + g) * size, w_ptr + first_c, b_ptr + first_c,
                    tl.load(x_group).to(tl.float32) + mean_shifted, tl.rsqrt(var + eps), group_channels,
                    start, min(start + chunk, hw), hw, sx_c, sx_p, CH_BLOCK, HW_BLOCK)


def groupnorm_mish_split(x, num_groups, weight, bias, eps=1e-5, splits=None):
    """groupnorm_mish, each group's positions split over `splits` programs (a power of two).

    splits=None chooses: 1 (groupnorm_mish, one launch) where N * G programs already fill the GPU
    or a group is a few BLOCKs long; otherwise about four programs per SM."""
    N, C, H, W = x.shape
    groups, hw = N * num_groups, H * W
    BLOCK, warps = pick(cpu=(64, 4), gpu=(2048, 8))
    if splits is None:
        sms = pick(cpu=4, gpu=torch.cuda.get_device_properties(0).multi_processor_count if ON_GPU else 0)
        few_groups, long_groups = groups < sms, C // num_groups * hw > 8 * BLOCK
        per_group = triton.next_power_of_2(4 * sms // groups + 1) // 2     # 4 sms / groups, a power of 2
        splits = per_group if few_groups and long_groups else 1
    assert splits >= 1 and splits & (splits - 1) == 0, "splits: a power of two"
    if splits == 1:
        return groupnorm_mish(x, num_groups, weight, bias, eps)
    chunk = triton.cdiv(hw, splits)
    x3, CH_BLOCK, HW_BLOCK = _groupnorm_args(x, num_groups, weight, bias, chunk, BLOCK)
    chunk = triton.cdiv(chunk, HW_BLOCK) * HW_BLOCK                    # whole tiles per slice
    partial = torch.empty((groups, splits, 2), device=x.device, dtype=torch.float32)
    out = torch.empty((N, C, H, W), device=x.device, dtype=x.dtype)
    common = (num_groups, C // num_groups, hw, chunk)
    tiles = dict(CH_BLOCK=CH_BLOCK, HW_BLOCK=HW_BLOCK, num_warps=warps)
    group_partial_sums_kernel[(groups, splits)](x3, partial, *common, *x3.stride(), **tiles)
    groupnorm_mish_apply_kernel[(groups, splits)](x3, partial, weight, bias, out, *common, eps, *x3.stride(),
                                                  SPLITS=splits, **tiles)
    return out


# ---------------------------------------------------------------- baselines and make bench


def softmax_naive(x):
    """The numerically stable softmax, one PyTorch op at a time (5 kernels)."""
    m = x.amax(dim=1, keepdim=True)     # read MN, write M
    z = x - m                           # read MN + M, write MN
    e = torch.exp(z)                    # read MN, write MN
    s = e.sum(dim=1, keepdim=True)      # read MN, write M
    return e / s                        # read MN + M, write MN


def rms_norm_naive(x, gamma, eps=1e-6):
    """RMSNorm one PyTorch op at a time, in float32 like F.rms_norm."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps) * gamma).to(x.dtype)


def rms_norm_then_linear(x, gamma, w, eps=1e-6):
    """The unfused pair: F.rms_norm writes x_normed to memory, the matmul reads it back."""
    return torch.matmul(F.rms_norm(x, (x.shape[1],), gamma, eps), w.t())


def _compiled(fn):
    # Static shapes: Inductor specializes each shape, as our kernels do.
    return torch.compile(fn, dynamic=False)


def benchmarks():
    """What `make bench` times for this lesson (GPU only)."""
    # One static compile per shape and dtype; past the default limit of 8, torch.compile would
    # quietly fall back to eager.
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    compiled_softmax = _compiled(softmax_naive)
    for dtype, name in ((torch.float32, "fp32"), (torch.float16, "fp16")):
        for m, n in ((32768, 1024), (32768, 4096), (8192, 16384)):
            x = torch.randn(m, n, device="cuda", dtype=dtype)
            yield Bench(f"softmax_{name}", n, bytes=2 * x.nbytes, flops=5 * m * n, label=f"{m}x{n} {name}",
                        impls={"triton, one row per program": lambda x=x: softmax_rows(x),
                               "torch.softmax": lambda x=x: torch.softmax(x, dim=1),
                               "torch.compile(naive)": lambda x=x: compiled_softmax(x),
                               "torch eager naive (5 kernels)": lambda x=x: softmax_naive(x)})
        for m, n in ((2048, 65536), (512, 262144)):
            x = torch.randn(m, n, device="cuda", dtype=dtype)
            # bytes: one read and one write, the least any softmax moves. The tiled kernel reads
            # the row twice, so it moves 1.5x this; the lesson shows both figures.
            yield Bench(f"softmax_long_{name}", n, bytes=2 * x.nbytes, flops=5 * m * n,
                        label=f"{m}x{n} {name}",
                        impls={"triton tiled online": lambda x=x: softmax_tiled_tuned(x),
                               "torch.softmax": lambda x=x: torch.softmax(x, dim=1),
                               "torch.compile(naive)": lambda x=x: compiled_softmax(x)})
    compiled_rms = _compiled(rms_norm_naive)
    for m, k in ((32768, 4096), (16384, 8192)):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        g = (1 + 0.1 * torch.randn(k, device="cuda")).to(torch.bfloat16)
        yield Bench("rmsnorm", k, bytes=2 * x.nbytes + g.nbytes, flops=4 * m * k, label=f"{m}x{k} bf16",
                    impls={"triton, one row per program": lambda x=x, g=g: rms_norm_rows(x, g),
                           "F.rms_norm": lambda x=x, g=g: F.rms_norm(x, (x.shape[1],), g, 1e-6),
                           "torch.compile(naive)": lambda x=x, g=g: compiled_rms(x, g),
                           "torch eager naive": lambda x=x, g=g: rms_norm_naive(x, g)})
    compiled_pair = _compiled(rms_norm_then_linear)
    for m, k, n in ((8192, 4096, 4096), (8192, 4096, 1024)):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        g = (1 + 0.1 * torch.randn(k, device="cuda")).to(torch.bfloat16)
        w = (torch.randn(n, k, device="cuda") / math.sqrt(k)).to(torch.bfloat16)
        x_normed = F.rms_norm(x, (k,), g, 1e-6)
        w_folded = (w.float() * g.float()).to(torch.bfloat16)  # done once, when the weights are loaded
        yield Bench("rmsnorm_linear", n, bytes=(m * k + n * k + m * n) * 2, flops=2 * m * n * k,
                    label=f"M,K,N={m},{k},{n} bf16", metric="TFLOP/s",
                    impls={"triton fused": lambda x=x, g=g, w=w: rmsnorm_linear(x, g, w),
                           "triton 1/rms pass + matmul epilogue": lambda x=x, wf=w_folded:
                               rmsnorm_linear_epilogue(x, wf),
                           "F.rms_norm + matmul": lambda x=x, g=g, w=w: rms_norm_then_linear(x, g, w),
                           "torch.compile(both)": lambda x=x, g=g, w=w: compiled_pair(x, g, w),
                           "matmul alone (x normed in advance)": lambda xn=x_normed, w=w: xn @ w.t()})

    gn_eager = lambda x, g, wt, b: F.mish(F.group_norm(x, g, wt, b, 1e-5))  # noqa: E731
    gn_compiled = _compiled(gn_eager)
    # Kernels of 10 to 200 µs: timed launched from Python (what a U-Net in eager mode pays), and as
    # CUDA-graph replays (the GPU's time alone, as in a compiled or graphed model).
    shapes = ((8, 320, 64, 32), (8, 640, 32, 32), (2, 1280, 16, 32), (1, 128, 256, 32))
    for (group, graph), (N, C, HW, G) in itertools.product(
            (("groupnorm_mish_fp16", False), ("groupnorm_mish_graphed_fp16", True)), shapes):
        x = torch.randn(N, C, HW, HW, device="cuda", dtype=torch.float16)
        wt = torch.randn(C, device="cuda", dtype=torch.float16)
        b = torch.randn(C, device="cuda", dtype=torch.float16)
        yield Bench(group, x.numel(), bytes=2 * x.nbytes, flops=10 * x.numel(), graph=graph,
                    label=f"{N}x{C}x{HW}x{HW} G{G}",
                    impls={"course: one kernel": lambda x=x, wt=wt, b=b, G=G: groupnorm_mish(x, G, wt, b),
                           "course: split where it pays":
                               lambda x=x, wt=wt, b=b, G=G: groupnorm_mish_split(x, G, wt, b),
                           "eager: group_norm, mish": lambda x=x, wt=wt, b=b, G=G: gn_eager(x, G, wt, b),
                           "torch.compile": lambda x=x, wt=wt, b=b, G=G: gn_compiled(x, G, wt, b)})
        del x
