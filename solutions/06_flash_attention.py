"""Lesson 06 solutions: FlashAttention (forward, causal, backward) in plain PyTorch and in Triton.

Tensors are (B, H, N, D): batch, heads, sequence length, head dimension.
Scores are s = sm_scale * q . k (sm_scale = 1/sqrt(D) unless given), and the
log-sum-exp saved for the backward pass is lse[i] = log(sum_j exp(s[i, j]))
in natural-log units. Inside the kernels the exponentials are base 2:
exp(x) = exp2(x * log2(e)), with log2(e) folded into the score scale.

Exercise 1: attention_tiled        (plain PyTorch, online softmax over tiles)
Exercise 2: fwd_tile_loop, flash_fwd_kernel, flash_forward
Exercise 3: flash_fwd_causal_kernel, flash_forward_causal
Exercise 4: attention_backward_torch  (plain PyTorch, the gradients derived by hand)
Exercise 5: bwd_dkdv_loop, bwd_dkdv_kernel, flash_backward_dkdv
Exercise 6: bwd_dq_loop, bwd_dq_kernel, flash_backward_dq
Exercise 7: FlashAttention (with flash_backward and attention)
"""

import math
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

import helpers  # noqa: F401  (first: picks the GPU or the interpreter)
import triton
import triton.language as tl

from helpers import ON_GPU, pick
from helpers.bench import Bench
from helpers.launch import Launcher, cdiv

# Constants a kernel may read must be tl.constexpr; on the host, LOG2E.value is the float.
LOG2E = tl.constexpr(1.4426950408889634)  # log2(e): exp(x) == exp2(x * LOG2E)
LN2 = tl.constexpr(0.6931471805599453)    # ln(2):   log(x) == log2(x) * LN2


# ---------------------------------------------------------------- the reference


def attention_reference(q, k, v, causal=False, sm_scale=None):
    """softmax(q k^T * sm_scale) v, the naive way; returns (out, lse). Memory per (b, h): N x N."""
    sm_scale = q.shape[-1] ** -0.5 if sm_scale is None else sm_scale
    s = (q @ k.transpose(-2, -1)) * sm_scale        # read 2ND, write N^2
    if causal:
        n = q.shape[-2]
        future = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
        s = s.masked_fill(future, float("-inf"))     # read N^2, write N^2
    lse = torch.logsumexp(s, dim=-1)                 # read N^2, write N
    p = torch.exp(s - lse[..., None])                # read N^2 + N, write N^2
    return p @ v, lse                                # read N^2 + ND, write ND


# ---------------------------------------------------------------- exercise 1


def attention_tiled(q, k, v, causal=False, sm_scale=None, block_m=32, block_n=16):
    """FlashAttention's algorithm in plain PyTorch: (out, lse), one block_m x block_n score tile at a time."""
    B, H, N, D = q.shape
    sm_scale = D ** -0.5 if sm_scale is None else sm_scale
    stats = torch.promote_types(q.dtype, torch.float32)             # m, l, acc, lse: float32 at least
    out = torch.empty_like(q)
    lse = torch.empty(B, H, N, dtype=stats, device=q.device)
    for i in range(0, N, block_m):
        qi = q[:, :, i:i + block_m]                                  # stays "on chip"
        rows = torch.arange(i, i + qi.shape[2], device=q.device)
        m = torch.full(qi.shape[:3], float("-inf"), dtype=stats, device=q.device)  # running max
        l = torch.zeros(qi.shape[:3], dtype=stats, device=q.device)                # running sum
        acc = torch.zeros(qi.shape, dtype=stats, device=q.device)                 # unnormalized output
        stop = min(N, i + block_m) if causal else N                  # causal: no tile right of the diagonal
        for j in range(0, stop, block_n):
            kj, vj = k[:, :, j:j + block_n], v[:, :, j:j + block_n]  # streamed past
            s = (qi @ kj.transpose(-2, -1)).to(stats) * sm_scale
            if causal:
                cols = torch.arange(j, j + kj.shape[2], device=q.device)
                s = s.masked_fill(cols[None, :] > rows[:, None], float("-inf"))
            m_new = torch.maximum(m, s.amax(dim=-1))
            alpha = torch.exp(m - m_new)                             # rescales what was summed so far
            p = torch.exp(s - m_new[..., None])
            l = l * alpha + p.sum(dim=-1)
            acc = acc * alpha[..., None] + p @ vj.to(stats)
            m = m_new
        out[:, :, i:i + block_m] = acc / l[..., None]
        lse[:, :, i:i + block_m] = m + torch.log(l)
    return out, lse


# ---------------------------------------------------------------- launch settings

# One config under the interpreter (autotuning needs a GPU); a handful on a GPU.
# Causal kernels need BLOCK_M to be a multiple of BLOCK_N (forward, dQ) or the
# reverse (dK/dV), so that the diagonal tiles line up.


def _configs(cpu, gpu):
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
            for bm, bn, w, s in pick(cpu=cpu, gpu=gpu)]


FWD_CONFIGS = _configs(cpu=[(64, 32, 4, 1)],
                       gpu=[(64, 64, 4, 3), (128, 64, 8, 3), (128, 64, 8, 4), (128, 128, 8, 2),
                            (128, 128, 8, 3)])
DKDV_CONFIGS = _configs(cpu=[(32, 64, 4, 1)],
                        gpu=[(32, 64, 4, 3), (64, 128, 8, 2), (64, 128, 8, 3), (32, 128, 8, 3),
                             (64, 64, 4, 3)])
DQ_CONFIGS = _configs(cpu=[(64, 32, 4, 1)],
                      gpu=[(64, 32, 4, 3), (128, 64, 8, 3), (128, 64, 8, 2), (128, 32, 8, 3),
                           (64, 64, 4, 3)])


def small_problems_one_config(configs, named_args, **kwargs):
    """Autotuning pays off on long sequences only: below 1024 keys, take the first config."""
    return configs[:1] if named_args["n_ctx"] < 1024 else configs


PRUNE = {"early_config_prune": small_problems_one_config}


# ---------------------------------------------------------------- exercise 2


@triton.jit
def fwd_tile_loop(acc, l_i, m_i, q, k_ptr, v_ptr, offs_m, lo, hi, n_ctx, qk_scale,
                  HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, MASK: tl.constexpr,
                  SOFTCAP: tl.constexpr = 0.0):
    """Stream the K/V tiles lo..hi past one Q block, updating (acc, l_i, m_i) by online softmax.

    MASK: "none" (every key valid), "keys" (hide keys >= n_ctx), "causal" (hide keys after the query).
    Scores are kept in base-2 units: s2 = (q . k) * sm_scale * log2(e).
    SOFTCAP > 0 soft-caps the scores (lesson 07): cap * tanh(score / cap), with SOFTCAP = cap * log2(e).
    """
    offs_d = tl.arange(0, HEAD_DIM)
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kT_ptrs = k_ptr + offs_n[None, :] * HEAD_DIM + offs_d[:, None]   # K^T tile: (HEAD_DIM, BLOCK_N)
        v_ptrs = v_ptr + offs_n[:, None] * HEAD_DIM + offs_d[None, :]    # V tile: (BLOCK_N, HEAD_DIM)
        if MASK == "none":
            kT = tl.load(kT_ptrs)
            v = tl.load(v_ptrs)
        else:
            kT = tl.load(kT_ptrs, mask=offs_n[None, :] < n_ctx, other=0.0)
            v = tl.load(v_ptrs, mask=offs_n[:, None] < n_ctx, other=0.0)
        s = tl.dot(q, kT)                                                # (BLOCK_M, BLOCK_N), fp32
        if SOFTCAP > 0:   # in base-2 units the cap is the same formula: SOFTCAP * tanh(s2 / SOFTCAP)
            t = s * (qk_scale / SOFTCAP)                                 # tanh(t) = 2 sigmoid(2t) - 1
            s = (2 * tl.sigmoid(2 * t) - 1) * (SOFTCAP / qk_scale)       # back in q . k units
        if MASK == "keys":
            s = tl.where(offs_n[None, :] < n_ctx, s, float("-inf"))
        if MASK == "causal":
            s = tl.where(offs_m[:, None] >= offs_n[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
        alpha = tl.exp2(m_i - m_new)                  # how much the old maximum overstated the new one
        p = tl.exp2(s * qk_scale - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new
    return acc, l_i, m_i


@triton.autotune(configs=FWD_CONFIGS, key=["n_ctx", "HEAD_DIM"], prune_configs_by=PRUNE)
@triton.jit
def flash_fwd_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, n_ctx, qk_scale,
                     HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     SOFTCAP: tl.constexpr = 0.0):
    """One program: BLOCK_M query rows of one (batch, head); out and lse for those rows."""
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1).to(tl.int64)                # int64: B*H*N*D may pass 2**31
    q_ptr += bh * n_ctx * HEAD_DIM
    k_ptr += bh * n_ctx * HEAD_DIM
    v_ptr += bh * n_ctx * HEAD_DIM
    o_ptr += bh * n_ctx * HEAD_DIM
    lse_ptr += bh * n_ctx
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < n_ctx
    q = tl.load(q_ptr + offs_m[:, None] * HEAD_DIM + offs_d[None, :], mask=row_ok[:, None], other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    n_full = (n_ctx // BLOCK_N) * BLOCK_N             # whole tiles need no mask; the last partial one does
    acc, l_i, m_i = fwd_tile_loop(acc, l_i, m_i, q, k_ptr, v_ptr, offs_m, 0, n_full, n_ctx, qk_scale,
                                  HEAD_DIM, BLOCK_N, "none", SOFTCAP)
    acc, l_i, m_i = fwd_tile_loop(acc, l_i, m_i, q, k_ptr, v_ptr, offs_m, n_full, n_ctx, n_ctx, qk_scale,
                                  HEAD_DIM, BLOCK_N, "keys", SOFTCAP)
    out = acc / l_i[:, None]
    tl.store(o_ptr + offs_m[:, None] * HEAD_DIM + offs_d[None, :], out.to(o_ptr.dtype.element_ty),
             mask=row_ok[:, None])
    tl.store(lse_ptr + offs_m, (m_i + tl.log2(l_i)) * LN2, mask=row_ok)   # back to natural log


def _prepare(q, k, v, sm_scale):
    """Check shapes, make the rows contiguous, and settle the score scale."""
    assert q.dim() == 4 and q.shape == k.shape == v.shape, "q, k, v must all be (B, H, N, D)"
    assert q.dtype == k.dtype == v.dtype, "q, k, v must share a dtype"
    D = q.shape[-1]
    assert D in (16, 32, 64, 128), "head dimension must be 16, 32, 64 or 128"
    sm_scale = D ** -0.5 if sm_scale is None else sm_scale
    return q.contiguous(), k.contiguous(), v.contiguous(), sm_scale


def _forward(kernel, q, k, v, sm_scale, **constexprs):
    q, k, v, sm_scale = _prepare(q, k, v, sm_scale)
    B, H, N, D = q.shape
    out = torch.empty_like(q)
    lse = torch.empty(B, H, N, device=q.device, dtype=torch.float32)
    grid = lambda meta: (triton.cdiv(N, meta["BLOCK_M"]), B * H)
    kernel[grid](q, k, v, out, lse, N, sm_scale * LOG2E.value, HEAD_DIM=D, **constexprs)
    return out, lse


def flash_forward(q, k, v, sm_scale=None, softcap=None):
    """Non-causal attention of (B, H, N, D) tensors with the Triton kernel: (out, lse).

    softcap: soft-cap the scaled scores at +-softcap (softcap * tanh(score / softcap)), lesson 07.
    """
    constexprs = {"SOFTCAP": softcap * LOG2E.value} if softcap else {}
    return _forward(flash_fwd_kernel, q, k, v, sm_scale, **constexprs)


# ---------------------------------------------------------------- exercise 3


@triton.autotune(configs=FWD_CONFIGS, key=["n_ctx", "HEAD_DIM"], prune_configs_by=PRUNE)
@triton.jit
def flash_fwd_causal_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, n_ctx, qk_scale,
                            HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Causal: tiles left of the diagonal in full, diagonal tiles masked, tiles right of it skipped."""
    # the last query blocks have the most tiles to visit: launch them first, so none is left running alone
    start_m = (tl.num_programs(0) - 1 - tl.program_id(0)) * BLOCK_M
    bh = tl.program_id(1).to(tl.int64)
    q_ptr += bh * n_ctx * HEAD_DIM
    k_ptr += bh * n_ctx * HEAD_DIM
    v_ptr += bh * n_ctx * HEAD_DIM
    o_ptr += bh * n_ctx * HEAD_DIM
    lse_ptr += bh * n_ctx
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < n_ctx
    q = tl.load(q_ptr + offs_m[:, None] * HEAD_DIM + offs_d[None, :], mask=row_ok[:, None], other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    # keys 0 .. start_m-1 come before every query of this block: no mask
    acc, l_i, m_i = fwd_tile_loop(acc, l_i, m_i, q, k_ptr, v_ptr, offs_m, 0, start_m, n_ctx, qk_scale,
                                  HEAD_DIM, BLOCK_N, "none")
    # keys start_m .. start_m+BLOCK_M-1 share the diagonal: mask the future (and the keys past n_ctx)
    hi = tl.minimum(start_m + BLOCK_M, n_ctx)
    acc, l_i, m_i = fwd_tile_loop(acc, l_i, m_i, q, k_ptr, v_ptr, offs_m, start_m, hi, n_ctx, qk_scale,
                                  HEAD_DIM, BLOCK_N, "causal")
    out = acc / l_i[:, None]
    tl.store(o_ptr + offs_m[:, None] * HEAD_DIM + offs_d[None, :], out.to(o_ptr.dtype.element_ty),
             mask=row_ok[:, None])
    tl.store(lse_ptr + offs_m, (m_i + tl.log2(l_i)) * LN2, mask=row_ok)


def flash_forward_causal(q, k, v, sm_scale=None):
    """Causal attention (query i sees keys 0..i) with the Triton kernel: (out, lse)."""
    return _forward(flash_fwd_causal_kernel, q, k, v, sm_scale)


# ---------------------------------------------------------------- exercise 4


def attention_backward_torch(q, k, v, out, lse, dout, causal=False, sm_scale=None):
    """(dq, dk, dv) in plain PyTorch from the saved out and lse: P recomputed, the gradients by hand."""
    sm_scale = q.shape[-1] ** -0.5 if sm_scale is None else sm_scale
    s = (q @ k.transpose(-2, -1)) * sm_scale
    if causal:
        n = q.shape[-2]
        future = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
        s = s.masked_fill(future, float("-inf"))
    p = torch.exp(s - lse[..., None])                      # P, exactly normalised by the saved lse
    dv = p.transpose(-2, -1) @ dout                        # dV = P^T dO
    dp = dout @ v.transpose(-2, -1)                        # dP = dO V^T
    delta = (dout * out).sum(dim=-1, keepdim=True)         # delta_i = dO_i . O_i
    ds = p * (dp - delta)                                  # dS = P o (dP - delta)
    dq = (ds @ k) * sm_scale                               # dQ = scale dS K
    dk = (ds.transpose(-2, -1) @ q) * sm_scale             # dK = scale dS^T Q
    return dq, dk, dv


# ---------------------------------------------------------------- backward: preprocessing


@triton.jit
def bwd_preprocess_kernel(o_ptr, do_ptr, delta_ptr, n_rows, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr):
    """delta[i] = sum_d dO[i, d] * O[i, d], over all B*H*N rows."""
    offs_m = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offs_d = tl.arange(0, HEAD_DIM)
    mask = offs_m[:, None] < n_rows
    ptrs = offs_m.to(tl.int64)[:, None] * HEAD_DIM + offs_d[None, :]
    o = tl.load(o_ptr + ptrs, mask=mask, other=0.0).to(tl.float32)
    do = tl.load(do_ptr + ptrs, mask=mask, other=0.0).to(tl.float32)
    tl.store(delta_ptr + offs_m, tl.sum(o * do, 1), mask=offs_m < n_rows)


_delta_launcher = Launcher(bwd_preprocess_kernel)   # launches prepared once per key (helpers.launch)


def backward_delta(out, dout):
    """delta = rowsum(dO * O), (B, H, N) in float32, by the preprocessing kernel."""
    out, dout = out.contiguous(), dout.contiguous()
    B, H, N, D = out.shape
    delta = torch.empty(B, H, N, device=out.device, dtype=torch.float32)
    rows = B * H * N
    block = pick(cpu=32, gpu=64)
    _delta_launcher((cdiv(rows, block),), out, dout, delta, rows, HEAD_DIM=D, BLOCK=block)
    return delta


# ---------------------------------------------------------------- exercise 5


@triton.jit
def bwd_dkdv_loop(dk, dv, k, v, q_ptr, do_ptr, lse_ptr, delta_ptr, offs_n, lo, hi, n_ctx, qk_scale,
                  HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, CAUSAL_MASK: tl.constexpr):
    """Stream Q blocks lo..hi past one K/V block, accumulating dK (unscaled) and dV."""
    offs_d = tl.arange(0, HEAD_DIM)
    for start_m in range(lo, hi, BLOCK_M):
        offs_m = start_m + tl.arange(0, BLOCK_M)
        row_ok = offs_m < n_ctx
        qT = tl.load(q_ptr + offs_m[None, :] * HEAD_DIM + offs_d[:, None], mask=row_ok[None, :], other=0.0)
        do = tl.load(do_ptr + offs_m[:, None] * HEAD_DIM + offs_d[None, :], mask=row_ok[:, None], other=0.0)
        # lse = +inf past the end makes P = 0 in those rows: they add nothing
        lse2 = tl.load(lse_ptr + offs_m, mask=row_ok, other=float("inf")) * LOG2E
        delta = tl.load(delta_ptr + offs_m, mask=row_ok, other=0.0)
        sT = tl.dot(k, qT)                                      # S^T tile: (BLOCK_N, BLOCK_M)
        if CAUSAL_MASK:
            sT = tl.where(offs_m[None, :] >= offs_n[:, None], sT, float("-inf"))
        pT = tl.exp2(sT * qk_scale - lse2[None, :])             # P^T, recomputed from the saved lse
        dv = tl.dot(pT.to(do.dtype), do, dv)                    # dV += P^T dO
        dpT = tl.dot(v, tl.trans(do))                           # dP^T = V dO^T
        dsT = pT * (dpT - delta[None, :])                       # dS = P * (dP - delta)
        dk = tl.dot(dsT.to(qT.dtype), tl.trans(qT), dk)         # dK += dS^T Q
    return dk, dv


@triton.autotune(configs=DKDV_CONFIGS, key=["n_ctx", "HEAD_DIM", "CAUSAL"], prune_configs_by=PRUNE)
@triton.jit
def bwd_dkdv_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr,
                    n_ctx, qk_scale, sm_scale, HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """One program: dK and dV for BLOCK_N keys of one (batch, head), streaming the Q blocks that see them."""
    start_n = tl.program_id(0) * BLOCK_N
    bh = tl.program_id(1).to(tl.int64)
    q_ptr += bh * n_ctx * HEAD_DIM
    k_ptr += bh * n_ctx * HEAD_DIM
    v_ptr += bh * n_ctx * HEAD_DIM
    do_ptr += bh * n_ctx * HEAD_DIM
    dk_ptr += bh * n_ctx * HEAD_DIM
    dv_ptr += bh * n_ctx * HEAD_DIM
    lse_ptr += bh * n_ctx
    delta_ptr += bh * n_ctx
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    kv_ptrs = offs_n[:, None] * HEAD_DIM + offs_d[None, :]
    key_ok = offs_n[:, None] < n_ctx
    k = tl.load(k_ptr + kv_ptrs, mask=key_ok, other=0.0)
    v = tl.load(v_ptr + kv_ptrs, mask=key_ok, other=0.0)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    if CAUSAL:
        # queries before start_n never see these keys; those on the diagonal see some of them
        hi = tl.minimum(start_n + BLOCK_N, n_ctx)
        dk, dv = bwd_dkdv_loop(dk, dv, k, v, q_ptr, do_ptr, lse_ptr, delta_ptr, offs_n, start_n, hi,
                               n_ctx, qk_scale, HEAD_DIM, BLOCK_M, True)
        dk, dv = bwd_dkdv_loop(dk, dv, k, v, q_ptr, do_ptr, lse_ptr, delta_ptr, offs_n, start_n + BLOCK_N,
                               n_ctx, n_ctx, qk_scale, HEAD_DIM, BLOCK_M, False)
    else:
        dk, dv = bwd_dkdv_loop(dk, dv, k, v, q_ptr, do_ptr, lse_ptr, delta_ptr, offs_n, 0, n_ctx,
                               n_ctx, qk_scale, HEAD_DIM, BLOCK_M, False)
    tl.store(dk_ptr + kv_ptrs, (dk * sm_scale).to(dk_ptr.dtype.element_ty), mask=key_ok)
    tl.store(dv_ptr + kv_ptrs, dv.to(dv_ptr.dtype.element_ty), mask=key_ok)


def flash_backward_dkdv(q, k, v, out, lse, dout, causal=False, sm_scale=None, delta=None):
    """dk, dv by the dK/dV kernel; delta = rowsum(dO * O) is computed here unless given."""
    q, k, v, sm_scale = _prepare(q, k, v, sm_scale)
    B, H, N, D = q.shape
    if delta is None:
        delta = backward_delta(out, dout)
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    grid = lambda meta: (triton.cdiv(N, meta["BLOCK_N"]), B * H)
    bwd_dkdv_kernel[grid](q, k, v, dout.contiguous(), lse.contiguous(), delta, dk, dv, N,
                          sm_scale * LOG2E.value, sm_scale, HEAD_DIM=D, CAUSAL=causal)
    return dk, dv


# ---------------------------------------------------------------- exercise 6


@triton.jit
def bwd_dq_loop(dq, q, do, lse2, delta, k_ptr, v_ptr, offs_m, lo, hi, n_ctx, qk_scale,
                HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, MASK: tl.constexpr):
    """Stream K/V tiles lo..hi past one Q block, accumulating dQ (unscaled)."""
    offs_d = tl.arange(0, HEAD_DIM)
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kvT_ptrs = offs_n[None, :] * HEAD_DIM + offs_d[:, None]          # (HEAD_DIM, BLOCK_N)
        if MASK == "none":
            kT = tl.load(k_ptr + kvT_ptrs)
            vT = tl.load(v_ptr + kvT_ptrs)
        else:
            kT = tl.load(k_ptr + kvT_ptrs, mask=offs_n[None, :] < n_ctx, other=0.0)
            vT = tl.load(v_ptr + kvT_ptrs, mask=offs_n[None, :] < n_ctx, other=0.0)
        s = tl.dot(q, kT)
        if MASK == "keys":
            s = tl.where(offs_n[None, :] < n_ctx, s, float("-inf"))
        if MASK == "causal":
            s = tl.where(offs_m[:, None] >= offs_n[None, :], s, float("-inf"))
        p = tl.exp2(s * qk_scale - lse2[:, None])                         # P, recomputed from the saved lse
        dp = tl.dot(do, vT)                                               # dP = dO V^T
        ds = p * (dp - delta[:, None])
        dq = tl.dot(ds.to(kT.dtype), tl.trans(kT), dq)                    # dQ += dS K
    return dq


@triton.autotune(configs=DQ_CONFIGS, key=["n_ctx", "HEAD_DIM", "CAUSAL"], prune_configs_by=PRUNE)
@triton.jit
def bwd_dq_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr, n_ctx, qk_scale, sm_scale,
                  HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """One program: dQ for BLOCK_M queries of one (batch, head), streaming the K/V tiles they see."""
    start_m = tl.program_id(0) * BLOCK_M
    if CAUSAL:  # the last query blocks see the most keys: start them first
        start_m = (tl.num_programs(0) - 1 - tl.program_id(0)) * BLOCK_M
    bh = tl.program_id(1).to(tl.int64)
    q_ptr += bh * n_ctx * HEAD_DIM
    k_ptr += bh * n_ctx * HEAD_DIM
    v_ptr += bh * n_ctx * HEAD_DIM
    do_ptr += bh * n_ctx * HEAD_DIM
    dq_ptr += bh * n_ctx * HEAD_DIM
    lse_ptr += bh * n_ctx
    delta_ptr += bh * n_ctx
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < n_ctx
    q_ptrs = offs_m[:, None] * HEAD_DIM + offs_d[None, :]
    q = tl.load(q_ptr + q_ptrs, mask=row_ok[:, None], other=0.0)
    do = tl.load(do_ptr + q_ptrs, mask=row_ok[:, None], other=0.0)
    lse2 = tl.load(lse_ptr + offs_m, mask=row_ok, other=0.0) * LOG2E
    delta = tl.load(delta_ptr + offs_m, mask=row_ok, other=0.0)
    dq = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    if CAUSAL:
        dq = bwd_dq_loop(dq, q, do, lse2, delta, k_ptr, v_ptr, offs_m, 0, start_m, n_ctx, qk_scale,
                         HEAD_DIM, BLOCK_N, "none")
        hi = tl.minimum(start_m + BLOCK_M, n_ctx)
        dq = bwd_dq_loop(dq, q, do, lse2, delta, k_ptr, v_ptr, offs_m, start_m, hi, n_ctx, qk_scale,
                         HEAD_DIM, BLOCK_N, "causal")
    else:
        n_full = (n_ctx // BLOCK_N) * BLOCK_N
        dq = bwd_dq_loop(dq, q, do, lse2, delta, k_ptr, v_ptr, offs_m, 0, n_full, n_ctx, qk_scale,
                         HEAD_DIM, BLOCK_N, "none")
        dq = bwd_dq_loop(dq, q, do, lse2, delta, k_ptr, v_ptr, offs_m, n_full, n_ctx, n_ctx, qk_scale,
                         HEAD_DIM, BLOCK_N, "keys")
    tl.store(dq_ptr + q_ptrs, (dq * sm_scale).to(dq_ptr.dtype.element_ty), mask=row_ok[:, None])


def flash_backward_dq(q, k, v, out, lse, dout, causal=False, sm_scale=None, delta=None):
    """dq by the dQ kernel; delta = rowsum(dO * O) is computed here unless given."""
    q, k, v, sm_scale = _prepare(q, k, v, sm_scale)
    B, H, N, D = q.shape
    if delta is None:
        delta = backward_delta(out, dout)
    dq = torch.empty_like(q)
    grid = lambda meta: (triton.cdiv(N, meta["BLOCK_M"]), B * H)
    bwd_dq_kernel[grid](q, k, v, dout.contiguous(), lse.contiguous(), delta, dq, N,
                        sm_scale * LOG2E.value, sm_scale, HEAD_DIM=D, CAUSAL=causal)
    return dq


# ---------------------------------------------------------------- exercise 7


def flash_backward(q, k, v, out, lse, dout, causal=False, sm_scale=None):
    """dq, dk, dv: delta once, then the dK/dV and the dQ kernel (each recomputes P from the lse)."""
    dout = dout.contiguous()
    delta = backward_delta(out, dout)  # shared by both kernels
    dk, dv = flash_backward_dkdv(q, k, v, out, lse, dout, causal, sm_scale, delta)
    dq = flash_backward_dq(q, k, v, out, lse, dout, causal, sm_scale, delta)
    return dq, dk, dv


class FlashAttention(torch.autograd.Function):
    """Forward by the Triton kernels; backward recomputes P from q, k and the saved lse."""

    @staticmethod
    def forward(ctx, q, k, v, causal, sm_scale):
        out, lse = (flash_forward_causal if causal else flash_forward)(q, k, v, sm_scale)
        ctx.save_for_backward(q, k, v, out, lse)   # O(N) per head: no N x N tensor is kept
        ctx.causal, ctx.sm_scale = causal, sm_scale
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = flash_backward(q, k, v, out, lse, dout, ctx.causal, ctx.sm_scale)
        return dq, dk, dv, None, None


def attention(q, k, v, causal=False, sm_scale=None):
    """Attention of (B, H, N, D) tensors, differentiable: loss.backward() runs the Triton backward."""
    sm_scale = q.shape[-1] ** -0.5 if sm_scale is None else sm_scale
    return FlashAttention.apply(q, k, v, causal, sm_scale)


# ---------------------------------------------------------------- make bench


def _sdpa(backend):
    from torch.nn.attention import sdpa_kernel

    def run(q, k, v, causal):
        with sdpa_kernel(backend):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return run


def _naive(q, k, v, causal):
    return attention_reference(q, k, v, causal)[0]


def _fwd_bwd(fn, q, k, v, dout, causal):
    out = fn(q, k, v, causal)
    return torch.autograd.grad(out, (q, k, v), dout)


def _works(fn):
    """True if `fn()` runs here (a backend may be missing on this GPU or build)."""
    try:
        fn()
        torch.cuda.synchronize()
        return True
    except (RuntimeError, torch.OutOfMemoryError):
        torch.cuda.empty_cache()
        return False


def attention_impls(causal):
    """name -> fn(q, k, v, causal): the course's kernel first, then the baselines."""
    from torch.nn.attention import SDPBackend

    ours = lambda q, k, v, c: (flash_forward_causal if c else flash_forward)(q, k, v)[0]
    return {"triton (ours)": ours,
            "SDPA flash": _sdpa(SDPBackend.FLASH_ATTENTION),
            "SDPA cuDNN": _sdpa(SDPBackend.CUDNN_ATTENTION),
            "SDPA mem-efficient": _sdpa(SDPBackend.EFFICIENT_ATTENTION),
            "naive (materialized S)": _naive}


def benchmarks():
    """What `make bench` times for this lesson: fp16, H=16, D=128, B*N = 16384 tokens."""
    H, D = 16, 128
    free = torch.cuda.mem_get_info()[0]
    for causal in (False, True):
        group = "attention_fwd_causal" if causal else "attention_fwd"
        for B, N in ((16, 1024), (8, 2048), (4, 4096), (2, 8192), (1, 16384)):
            q, k, v = (torch.randn(B, H, N, D, device="cuda", dtype=torch.float16) for _ in range(3))
            impls = {}
            for name, fn in attention_impls(causal).items():
                if name.startswith("naive") and 3 * B * H * N * N * 2 > free / 2:
                    continue  # S, P and a temporary: more memory than we want to ask for
                call = lambda fn=fn, q=q, k=k, v=v, causal=causal: fn(q, k, v, causal)
                if name == "triton (ours)" or _works(call):
                    impls[name] = call
            flops = 4 * B * H * N * N * D // (2 if causal else 1)
            yield Bench(group, N, bytes=4 * B * H * N * D * 2, flops=flops, impls=impls,
                        label=f"B{B} N{N}", metric="TFLOP/s")
    for B, N in ((16, 1024), (4, 4096), (1, 16384)):
        q, k, v, dout = (torch.randn(B, H, N, D, device="cuda", dtype=torch.float16) for _ in range(4))
        q, k, v = (t.requires_grad_() for t in (q, k, v))
        baselines = attention_impls(True)
        named = {"triton (ours)": lambda q, k, v, c: attention(q, k, v, causal=c)}
        named.update((name, fn) for name, fn in baselines.items() if name.startswith("SDPA"))
        impls = {}
        for name, fn in named.items():
            call = lambda fn=fn, q=q, k=k, v=v, dout=dout: _fwd_bwd(fn, q, k, v, dout, True)
            if name == "triton (ours)" or _works(call):
                impls[name] = call
        flops = int(3.5 * 4 * B * H * N * N * D // 2)  # forward 1x + backward 2.5x, causal halves both
        yield Bench("attention_fwd_bwd_causal", N, bytes=8 * B * H * N * D * 2, flops=flops, impls=impls,
                    label=f"B{B} N{N}", metric="TFLOP/s")


# ---------------------------------------------------------------- helpers the lesson's notebook calls


class PeakMemory(TorchDispatchMode):
    """Inside `with PeakMemory() as meter:`, meter.peak is the most bytes of new tensors alive at once.

    It sees every tensor PyTorch allocates inside the block; views and in-place results share memory
    with an input and are not counted twice; a tensor's bytes are freed when it dies.
    """

    def __init__(self):
        super().__init__()
        self.live = self.peak = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.is_view:
            return out
        inputs = {t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs))
                  if isinstance(t, torch.Tensor)}
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in inputs:
                nbytes = t.untyped_storage().nbytes()
                self.live += nbytes
                self.peak = max(self.peak, self.live)
                weakref.finalize(t, self._free, nbytes)  # when the tensor dies, its memory is free
        return out

    def _free(self, nbytes):
        self.live -= nbytes


def peak_memory(fn, *args, **kwargs):
    """Peak bytes of the tensors fn allocates (PeakMemory on the CPU, PyTorch's own count on a GPU)."""
    if ON_GPU:
        fn(*args, **kwargs)  # compile and autotune first: the autotuner's timing buffers are not fn's
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        out = fn(*args, **kwargs)
        torch.cuda.synchronize()
        del out
        return torch.cuda.max_memory_allocated() - before
    with PeakMemory() as meter:
        fn(*args, **kwargs)
    return meter.peak


def tile_kinds(n, block_m, block_n):
    """Causal attention's (query block, key tile) grid: 0 skipped, 1 on the diagonal (masked), 2 full."""
    kinds = torch.zeros(math.ceil(n / block_m), math.ceil(n / block_n), dtype=torch.int64)
    for i in range(kinds.shape[0]):
        for j in range(kinds.shape[1]):
            first_q, last_q = i * block_m, min(n, (i + 1) * block_m) - 1
            first_k, last_k = j * block_n, min(n, (j + 1) * block_n) - 1
            kinds[i, j] = 2 if last_k <= first_q else (1 if first_k <= last_q else 0)
    return kinds


def plot_tile_kinds(n, block_m, block_n):
    """Draw tile_kinds(n, block_m, block_n) and print how many tiles are computed; return the kinds."""
    import matplotlib.pyplot as plt

    kinds = tile_kinds(n, block_m, block_n)
    fig, ax = plt.subplots(figsize=(6, 3.6))
    ax.imshow(kinds, cmap=plt.matplotlib.colors.ListedColormap(["#eeeeee", "#f4a261", "#2a9d8f"]),
              aspect="auto", interpolation="nearest")
    ax.set_xlabel(f"key tile ({block_n} keys each)")
    ax.set_ylabel(f"query block ({block_m} queries each)")
    ax.set_title(f"causal attention, N = {n}: green full, orange masked, grey skipped", fontsize=9)
    fig.tight_layout()
    counts = torch.bincount(kinds.flatten(), minlength=3).tolist()
    print(f"tiles computed: {counts[1] + counts[2]} of {kinds.numel()} ({counts[1]} of them masked)")
    return kinds


def _runs_here(fn):
    try:
        fn()
        return True
    except RuntimeError:
        return False


def forward_benches(ours, causal):
    """Bench items at the notebook's sizes, for compare(): `ours(q, k, v) -> (out, lse)` first, then
    SDPA's flash, cuDNN and mem-efficient backends and the naive version (where it fits)."""
    from torch.nn.attention import SDPBackend

    H, D = 16, 128
    impls = {"your kernel": lambda q, k, v: ours(q, k, v)[0],
             "SDPA flash": lambda q, k, v: _sdpa(SDPBackend.FLASH_ATTENTION)(q, k, v, causal),
             "SDPA cuDNN": lambda q, k, v: _sdpa(SDPBackend.CUDNN_ATTENTION)(q, k, v, causal),
             "SDPA mem-efficient": lambda q, k, v: _sdpa(SDPBackend.EFFICIENT_ATTENTION)(q, k, v, causal),
             "naive (materialized S)": lambda q, k, v: _naive(q, k, v, causal)}
    benches = []
    for B, N in ((16, 1024), (4, 4096), (1, 16384)):
        q, k, v = (torch.randn(B, H, N, D, device="cuda", dtype=torch.float16) for _ in range(3))
        fits = 3 * B * H * N * N * 2 < torch.cuda.mem_get_info()[0] / 2
        calls = {name: (lambda fn=fn, q=q, k=k, v=v: fn(q, k, v)) for name, fn in impls.items()
                 if fits or not name.startswith("naive")}
        calls = {name: fn for name, fn in calls.items() if name == "your kernel" or _runs_here(fn)}
        benches.append(Bench("attention_fwd_causal" if causal else "attention_fwd", N,
                             bytes=4 * B * H * N * D * 2, flops=4 * B * H * N * N * D // (2 if causal else 1),
                             impls=calls, label=f"B{B} N{N}", metric="TFLOP/s"))
    return benches


def training_benches(attention):
    """Bench items of a causal forward + backward: `attention(q, k, v, causal=True)` (differentiable)
    against SDPA flash and cuDNN. FLOPs: the forward's times 3.5 (the backward does 2.5x its matrix work)."""
    from torch.nn.attention import SDPBackend

    H, D = 16, 128
    fwd_bwd = lambda fn, q, k, v, dout: torch.autograd.grad(fn(q, k, v), (q, k, v), dout)  # noqa: E731
    impls = {"your kernels": lambda q, k, v: attention(q, k, v, causal=True),
             "SDPA flash": lambda q, k, v: _sdpa(SDPBackend.FLASH_ATTENTION)(q, k, v, True),
             "SDPA cuDNN": lambda q, k, v: _sdpa(SDPBackend.CUDNN_ATTENTION)(q, k, v, True)}
    benches = []
    for B, N in ((16, 1024), (4, 4096), (1, 16384)):
        q, k, v, dout = (torch.randn(B, H, N, D, device="cuda", dtype=torch.float16) for _ in range(4))
        q, k, v = (t.requires_grad_() for t in (q, k, v))
        calls = {name: (lambda fn=fn, q=q, k=k, v=v, dout=dout: fwd_bwd(fn, q, k, v, dout))
                 for name, fn in impls.items()}
        calls = {name: fn for name, fn in calls.items() if name == "your kernels" or _runs_here(fn)}
        benches.append(Bench("attention_fwd_bwd_causal", N, bytes=8 * B * H * N * D * 2,
                             flops=int(3.5 * 2 * B * H * N * N * D), impls=calls, label=f"B{B} N{N}",
                             metric="TFLOP/s"))
    return benches


OURS = ("your kernel", "your kernels", "triton (ours)")  # live runs in the notebook, then make bench's label


def summarise(title, rows):
    """Per implementation: lowest-highest TFLOP/s over the sizes, and lowest-highest time relative to ours."""
    if not rows:
        print(f"{title}: no figures yet (run `make bench` on a GPU, or this notebook on one)")
        return
    ours = {r["label"]: r["ms"] for r in rows if r["impl"] in OURS}
    device = rows[0].get("device") or torch.cuda.get_device_name()  # recorded rows name it; live: here
    print(f"{title}, on {device}:")
    for impl in dict.fromkeys(r["impl"] for r in rows):
        mine = [r for r in rows if r["impl"] == impl]
        tflops = [r["tflops"] for r in mine]
        line = f"  {impl:>24}: {min(tflops):4.0f} to {max(tflops):4.0f} TFLOP/s"
        relative = [r["ms"] / ours[r["label"]] for r in mine if r["label"] in ours]
        if impl not in OURS and relative:
            line += f"; time / yours {min(relative):5.2f} to {max(relative):5.2f}"
        print(line)
