"""Lesson 10 solutions: Hopper attention. Lesson 06's FlashAttention taken towards cuDNN with tensor
descriptors, a wider search timed as CUDA graphs, a one-kernel backward; and softmax over rows too long
for one program, at the least traffic a two-pass softmax can move.

Exercises:

    causal_attention_kernel  lesson 06's causal forward through descriptors that each program builds over
                             its (batch, head) slice: reads Q, K, V in any layout with contiguous rows (the
                             Q|K|V projection's column slices, in place), writes the heads side by side
    _attend_backward         the key-block program's step of the one-kernel backward: dK and dV here,
                             these keys' share of dQ added into memory with atomic adds
    ring_waits               the Gluon forward's ring of K/V slots: the slot of tile j and the phase
                             parities its consumers and its producer wait for
    softmax_long_kernel      a long row in two passes, one exponential per element, the second pass
                             walking the row backwards

and:

    attention           FlashAttention forward (full or causal) through descriptors built on the host,
                        with a wider space of tile shapes, stages and warp specialisation than lesson 06's
    attention_backward  dQ, dK and dV in one kernel: dQ added up with float32 atomics in the dK/dV pass
    trainable_attention the two as an autograd function
"""

import itertools

import torch
import torch.nn.functional as F

import helpers  # noqa: F401  (first: picks the GPU or the interpreter)
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from helpers import interpreter
from helpers.compiled import compiler_quiet
from helpers.device import pick
from helpers.launch import Launcher, cdiv, power_of_2_bucket
from helpers.solutions import load_solution

lesson05 = load_solution("05")   # the tiled softmax, the row kernels profiled beside the compiler's
lesson06 = load_solution("06")   # LOG2E, LN2, the tile configurations and the attention reference
lesson09 = load_solution("09")   # descriptors, and the autotuner's graph timing
descriptor, _graph_timed = lesson09.descriptor, lesson09._graph_timed


# ---------------------------------------------------------------- exercise: a long row, read twice
#
# A row too long for one program's registers is read twice: pass 1 keeps a running max and sum tile by
# tile, pass 2 reads it again to write exp(x - max) / sum. The first read must come from memory; the
# second need not. Walked forwards, pass 2 starts with the row's first tiles, the ones read longest ago
# and the first to have left the L2 cache. Walked backwards it starts with the tiles pass 1 read last,
# still in L2, and only the row's head comes from memory again.
# Pass 1 takes one exponential per element: each tile's max is found first (a reduction across the
# tile), then the running sum is rescaled once per tile, not once per element.


@triton.jit
def softmax_long_kernel(x_ptr, out_ptr, n_cols, stride_xm, stride_om, BLOCK: tl.constexpr):
    """Softmax of row program_id(0), read in tiles of BLOCK: pass 1 forwards, pass 2 backwards."""
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_xm
    out_row = out_ptr + row * stride_om
    offs = tl.arange(0, BLOCK)
    m = tl.full((1,), -float("inf"), tl.float32)       # the row's running max
    l = tl.zeros((1,), tl.float32)                      # the running sum of exp(x - m)
    for start in range(0, n_cols, BLOCK):
        x = tl.load(x_row + start + offs, mask=start + offs < n_cols, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        shift = tl.where(m_new == -float("inf"), 0.0, m_new)   # nothing finite yet: add zeros, not NaNs
        l = l * tl.exp(m - shift) + tl.sum(tl.exp(x - shift), axis=0)
        m = m_new
    n_tiles = tl.cdiv(n_cols, BLOCK)
    for i in range(0, n_tiles):
        cols = (n_tiles - 1 - i) * BLOCK + offs         # the last tile first
        x = tl.load(x_row + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
        tl.store(out_row + cols, (tl.exp(x - m) / l).to(out_ptr.dtype.element_ty), mask=cols < n_cols)


SOFTMAX_CONFIGS = pick(cpu=[triton.Config({"BLOCK": 256}, num_warps=4)],
                       gpu=[triton.Config({"BLOCK": b}, num_warps=w, num_stages=s)
                            for b, w, s in [(4096, 8, 2), (8192, 16, 2), (16384, 8, 3), (16384, 16, 1),
                                            (16384, 16, 2), (16384, 16, 3)]])
softmax_long_tuned_kernel = triton.autotune(configs=SOFTMAX_CONFIGS, key=["n_cols"])(softmax_long_kernel)


def softmax_long(x):
    """Softmax over the rows of x (M, n), rows of any length; each row's values contiguous."""
    assert x.dim() == 2 and x.stride(1) == 1, "softmax_long takes a 2-D tensor with contiguous rows"
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    softmax_long_tuned_kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), out.stride(0))
    return out


# ---------------------------------------------------------------- exercise: attention on the projection

# Q, K and V are column slices of the Q|K|V matmul's (T, 3d) output: (B, H, N, D) views whose rows
# are 3d values apart. Lesson 06's kernel reads contiguous (B, H, N, D) tensors and writes one, so
# the block around it needed two copies: V into that layout, and the output back to (T, d) for the
# output projection. This kernel is lesson 06's causal forward with its loads and its store through
# tensor descriptors, one per (batch, head) slice: a descriptor takes the slice's row stride, so any
# layout with contiguous rows reads in place, and the output is written as (B, N, H, D), which is the
# (T, d) matrix the output projection reads. Rows past the sequence read as zeros and are not stored.
#
# The block rule: keys 0 .. start_m go through unmasked tiles of BLOCK_N, then the query block's own
# keys through masked ones. The unmasked tiles must end exactly at start_m, a multiple of BLOCK_M, so
# BLOCK_N must divide BLOCK_M. With 64 query rows and tiles of 128 keys, the block at start_m = 64
# would take keys 0..127 unmasked: its rows would see keys past the diagonal, and the masked loop
# would count keys 64..127 a second time. tl.static_assert turns such a configuration into a
# compile error instead of wrong numbers.


@triton.jit
def attention_tiles(acc, l_i, m_i, q, k_desc, v_desc, offs_m, lo, hi, qk_scale,
                    BLOCK_N: tl.constexpr, CAUSAL_MASK: tl.constexpr):
    """Lesson 06's online softmax over the key tiles lo, lo + BLOCK_N, ... < hi, fetched by descriptor."""
    for start_n in range(lo, hi, BLOCK_N):
        k = k_desc.load([start_n, 0])                  # (BLOCK_N, HEAD_DIM)
        v = v_desc.load([start_n, 0])
        s = tl.dot(q, k.T)
        if CAUSAL_MASK:   # keys past the query (past the sequence too) get -inf
            offs_n = start_n + tl.arange(0, BLOCK_N)
            s = tl.where(offs_m[:, None] >= offs_n[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s * qk_scale - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def head_descriptor(ptr, b, h, s_b, s_h, s_n, n_ctx, HEAD_DIM: tl.constexpr, ROWS: tl.constexpr):
    """The (n_ctx, HEAD_DIM) slice of batch b, head h, moved in tiles of ROWS rows."""
    return tl.make_tensor_descriptor(ptr + b * s_b + h * s_h, shape=[n_ctx, HEAD_DIM], strides=[s_n, 1],
                                     block_shape=[ROWS, HEAD_DIM])


# Lesson 06's forward configurations on a GPU (every one with BLOCK_N dividing BLOCK_M); on the CPU
# smaller tiles, so that the checks' short sequences still span several query and key blocks.
CAUSAL_CONFIGS = pick(cpu=[triton.Config({"BLOCK_M": 32, "BLOCK_N": 16}, num_warps=4, num_stages=1)],
                      gpu=lesson06.FWD_CONFIGS)


@triton.autotune(configs=CAUSAL_CONFIGS, key=["n_ctx", "HEAD_DIM"], prune_configs_by=lesson06.PRUNE)
@triton.jit
def causal_attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, n_ctx, n_heads, qk_scale,
                            sq_b, sq_h, sq_n, sk_b, sk_h, sk_n, sv_b, sv_h, sv_n, so_b, so_h, so_n,
                            HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """One program: BLOCK_M query rows of one (batch, head), as lesson 06's flash_fwd_causal_kernel."""
    tl.static_assert(BLOCK_M % BLOCK_N == 0, "causal: the key tiles must end where a query block starts")
    start_m = (tl.num_programs(0) - 1 - tl.program_id(0)) * BLOCK_M      # the longest rows first
    b = (tl.program_id(1) // n_heads).to(tl.int64)
    h = (tl.program_id(1) % n_heads).to(tl.int64)
    q_desc = head_descriptor(q_ptr, b, h, sq_b, sq_h, sq_n, n_ctx, HEAD_DIM, BLOCK_M)
    k_desc = head_descriptor(k_ptr, b, h, sk_b, sk_h, sk_n, n_ctx, HEAD_DIM, BLOCK_N)
    v_desc = head_descriptor(v_ptr, b, h, sv_b, sv_h, sv_n, n_ctx, HEAD_DIM, BLOCK_N)
    o_desc = head_descriptor(o_ptr, b, h, so_b, so_h, so_n, n_ctx, HEAD_DIM, BLOCK_M)
    offs_m = start_m + tl.arange(0, BLOCK_M)
    q = q_desc.load([start_m, 0])
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    acc, l_i, m_i = attention_tiles(acc, l_i, m_i, q, k_desc, v_desc, offs_m, 0, start_m, qk_scale,
                                    BLOCK_N, False)
    acc, l_i, m_i = attention_tiles(acc, l_i, m_i, q, k_desc, v_desc, offs_m, start_m, start_m + BLOCK_M,
                                    qk_scale, BLOCK_N, True)
    o_desc.store([start_m, 0], (acc / l_i[:, None]).to(o_desc.dtype))


def causal_attention_reference(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).contiguous()


# launches prepared once per key, the configuration chosen once per bucket of lengths (helpers.launch)
LENGTH_BUCKETS = {"n_ctx": power_of_2_bucket}
_causal_launcher = Launcher(causal_attention_kernel, buckets=LENGTH_BUCKETS)


def causal_attention(q, k, v):
    """Causal attention of q, k, v, (B, H, N, D) of any strides whose rows are contiguous and 16-byte
    aligned (the projection's column slices are): the output as (B, N, H, D), contiguous.

    That is the heads side by side, as the output projection reads them: out.view(B * N, H * D)."""
    assert q.dim() == 4 and q.shape == k.shape == v.shape, "q, k, v must all be (B, H, N, D)"
    assert q.dtype == k.dtype == v.dtype, "q, k, v must share a dtype"
    B, H, N, D = q.shape
    assert D in (16, 32, 64, 128), "head dimension must be 16, 32, 64 or 128"
    for name, t in (("q", q), ("k", k), ("v", v)):
        *strides, last = t.stride()
        assert last == 1, f"{name}: each row of D values must be contiguous (stride(3) == 1)"
        assert all(s * t.itemsize % 16 == 0 for s in strides) and t.data_ptr() % 16 == 0, \
            f"{name}: its strides {tuple(strides)} and start must be multiples of 16 bytes (descriptors)"
    out = q.new_empty((B, N, H, D))
    o = out.transpose(1, 2)                                # the (B, H, N, D) view the kernel writes through
    grid = lambda meta: (cdiv(N, meta["BLOCK_M"]), B * H)  # noqa: E731
    _causal_launcher(grid, q, k, v, o, N, H, D ** -0.5 * lesson06.LOG2E.value,
                     *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *o.stride()[:3], HEAD_DIM=D)
    return out


# ---------------------------------------------------------------- FlashAttention forward, TMA-fed
#
# Lesson 06's forward with three changes:
# * Q, K, V and O move through tensor descriptors built on the host over (B * H, N, D) views, in boxes
#   of (1, rows, D): a box stays inside one head, rows past N read as zeros and are not stored, so no
#   load or store needs a mask. (Descriptors built by each program, as causal_attention's are, measured slower
#   on short sequences: every program writes its own descriptors before its first copy.)
# * the search covers 64 to 128 rows per tile, 4 or 8 warps, 2 to 4 stages, warp specialisation
#   (some warps load K and V, the others compute) where this Triton compiles it for the GPU, and at
#   D <= 64 a tile capped at 128 registers a thread so that two programs share an SM; timed as
#   CUDA-graph replays like the matmul's;
# * the scale is applied inside the exponential's argument (s * scale - m: one fused multiply-add),
#   and the interior tiles (every key valid) take no mask at all.


@triton.jit
def _softmax_step(s, m_i, l_i, qk_scale):
    """One tile's online softmax: its probabilities p, the factor alpha that rescales what came before,
    and the running sum and max after it."""
    m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
    p = tl.exp2(s * qk_scale - m_new[:, None])
    alpha = tl.exp2(m_i - m_new)
    return p, alpha, l_i * alpha + tl.sum(p, 1), m_new


@triton.jit
def _attend(acc, l_i, m_i, q, k_desc, v_desc, head, offs_m, lo, hi, n_ctx, qk_scale, BLOCK_N: tl.constexpr,
            HEAD_DIM: tl.constexpr, MASK: tl.constexpr, WARP_SPECIALIZE: tl.constexpr):
    """Online softmax over key tiles lo, lo + BLOCK_N, ... < hi. MASK: "none", "keys" or "causal"."""
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WARP_SPECIALIZE):
        k = k_desc.load([head, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)    # a (1, BLOCK_N, D) box
        v = v_desc.load([head, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
        s = tl.dot(q, k.T)
        if MASK != "none":
            offs_n = start_n + tl.arange(0, BLOCK_N)
            keep = offs_n[None, :] < n_ctx
            if MASK == "causal":
                keep = keep & (offs_m[:, None] >= offs_n[None, :])
            s = tl.where(keep, s, -float("inf"))
        p, alpha, l_i, m_i = _softmax_step(s, m_i, l_i, qk_scale)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
    return acc, l_i, m_i


@triton.jit
def _attend_shifted(acc, l_i, m_i, q, k_desc, v_desc, head, hi, qk_scale, BLOCK_N: tl.constexpr,
                    HEAD_DIM: tl.constexpr):
    """Key tiles 0 .. hi, unmasked, the loop shifted by one matrix multiply as FlashAttention-3 shifts
    it: each step issues tile j's scores and tile j - 1's P V, then runs tile j's softmax, which needs
    only the scores. Written to see whether the compiler overlaps the softmax with the P V (it does not:
    the lesson shows where it waits). A configuration made with shifted=True runs it; the search holds
    none (tests/gpu_shifted_forward.py times it)."""
    if hi > 0:
        k = k_desc.load([head, 0, 0]).reshape(BLOCK_N, HEAD_DIM)
        p, alpha, l_i, m_i = _softmax_step(tl.dot(q, k.T), m_i, l_i, qk_scale)
        acc = acc * alpha[:, None]
        for start_n in tl.range(BLOCK_N, hi, BLOCK_N):
            k = k_desc.load([head, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
            v = v_desc.load([head, start_n - BLOCK_N, 0]).reshape(BLOCK_N, HEAD_DIM)
            s = tl.dot(q, k.T)                          # tile j's scores ...
            acc = tl.dot(p.to(v.dtype), v, acc)         # ... and tile j - 1's P V, issued together
            p, alpha, l_i, m_i = _softmax_step(s, m_i, l_i, qk_scale)
            acc = acc * alpha[:, None]
        v = v_desc.load([head, hi - BLOCK_N, 0]).reshape(BLOCK_N, HEAD_DIM)
        acc = tl.dot(p.to(v.dtype), v, acc)
    return acc, l_i, m_i


def _set_attention_boxes(args):
    """Config pre-hook: Q and O move in boxes of BLOCK_M rows, K and V in boxes of BLOCK_N, one head each."""
    D = args["HEAD_DIM"]
    args["q_desc"].block_shape = args["o_desc"].block_shape = [1, args["BLOCK_M"], D]
    args["k_desc"].block_shape = args["v_desc"].block_shape = [1, args["BLOCK_N"], D]


def _attention_config(bm, bn, warps, stages, ws=False, shifted=False, maxnreg=None):
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "WARP_SPECIALIZE": ws, "SHIFTED": shifted},
                         num_warps=warps, num_stages=stages, maxnreg=maxnreg, pre_hook=_set_attention_boxes)


# (BLOCK_M, BLOCK_N, warps, stages[, warp-specialised]): at 128 query rows, 4 warps (one warpgroup holds
# every row) or 8 (two warpgroups of 64 rows each: half the registers per thread).
ATTENTION_SEARCH = [(128, 128, 8, 3), (128, 64, 4, 2), (64, 64, 4, 3), (128, 64, 8, 3), (128, 64, 8, 4),
                    (128, 64, 8, 3, True), (128, 128, 8, 2, True), (128, 64, 4, 2, True)]
# Two programs to an SM: 8 warps capped at 128 registers a thread (2 x 256 threads x 128 = the SM's
# 65,536), 128 x 128 tiles whose shared memory at D = 64 (about 113 KB) fits twice in the SM's 228 KB.
# While one program computes its softmax, the SM's warp schedulers can issue the other's matrix
# multiplies. At D = 128 a thread's share of the accumulator and the scores does not fit in 128
# registers, so the search keeps this configuration to D <= 64 (_attention_search).
TWO_PER_SM = _attention_config(128, 128, 8, 3, maxnreg=128)
ATTENTION_CONFIGS = pick(cpu=[_attention_config(32, 16, 4, 1)],
                         gpu=[_attention_config(*c) for c in ATTENTION_SEARCH] + [TWO_PER_SM])


SKIPPED_CONFIGS = []   # the warp-specialised configurations this Triton could not compile here (recorded)


def _attention_search(configs, named_args, **kwargs):
    """Prune before timing: lesson 06's rule (below 1024 keys, the first configuration), the register
    cap only at D <= 64, and only the warp-specialised configurations that this Triton compiles for this
    GPU, head size and mask."""
    configs = lesson06.small_problems_one_config(configs, named_args)
    constexprs = {k: v for k, v in kwargs.items() if k not in ("grid", "warmup")}   # HEAD_DIM, CAUSAL
    kept = []
    for config in configs:
        if config.maxnreg and constexprs["HEAD_DIM"] > 64:
            continue
        if config.kwargs["WARP_SPECIALIZE"]:
            args = {**named_args, **constexprs, **config.all_kwargs()}
            config.pre_hook(args)
            try:
                with compiler_quiet():   # a failing pass prints its whole module to stderr
                    attention_kernel.fn.warmup(**args, grid=(1,))
            except RuntimeError:    # e.g. "PassManager::run failed" in Triton 3.6's warp specialisation
                skipped = {"config": lesson09.describe_config(config), **constexprs}
                SKIPPED_CONFIGS.extend([skipped] if skipped not in SKIPPED_CONFIGS else [])
                continue
        kept.append(config)
    return kept


@triton.autotune(configs=ATTENTION_CONFIGS, key=["n_ctx", "HEAD_DIM", "CAUSAL"],
                 prune_configs_by={"early_config_prune": _attention_search}, do_bench=_graph_timed)
@triton.jit
def attention_kernel(q_desc, k_desc, v_desc, o_desc, lse_ptr, n_ctx, qk_scale, HEAD_DIM: tl.constexpr,
                     CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     WARP_SPECIALIZE: tl.constexpr, SHIFTED: tl.constexpr):
    """One program: BLOCK_M query rows of one (batch, head); out and lse (natural log) for those rows.
    The descriptors see q, k, v, o as (B * H, N, D): a box never crosses from one head into the next."""
    # Causal: the masked key tiles must end where the query block ends (64 rows, 128 keys would not).
    tl.static_assert(not CAUSAL or BLOCK_M % BLOCK_N == 0, "causal: BLOCK_M must be a multiple of BLOCK_N")
    if CAUSAL:    # the query blocks with the most key tiles first
        start_m = (tl.num_programs(0) - 1 - tl.program_id(0)) * BLOCK_M
    else:
        start_m = tl.program_id(0) * BLOCK_M
    head = tl.program_id(1)
    offs_m = start_m + tl.arange(0, BLOCK_M)
    q = q_desc.load([head, start_m, 0]).reshape(BLOCK_M, HEAD_DIM)
    m_i = tl.full([BLOCK_M], -float("inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    # Causal: the keys before the block are all visible, the block's own take the diagonal mask. Full:
    # whole key tiles take no mask; the last, partial one hides the keys past n_ctx.
    n_unmasked = start_m if CAUSAL else (n_ctx // BLOCK_N) * BLOCK_N
    if SHIFTED:
        acc, l_i, m_i = _attend_shifted(acc, l_i, m_i, q, k_desc, v_desc, head, n_unmasked, qk_scale,
                                        BLOCK_N, HEAD_DIM)
    else:
        acc, l_i, m_i = _attend(acc, l_i, m_i, q, k_desc, v_desc, head, offs_m, 0, n_unmasked, n_ctx,
                                qk_scale, BLOCK_N, HEAD_DIM, "none", WARP_SPECIALIZE)
    if CAUSAL:
        acc, l_i, m_i = _attend(acc, l_i, m_i, q, k_desc, v_desc, head, offs_m, start_m, start_m + BLOCK_M,
                                n_ctx, qk_scale, BLOCK_N, HEAD_DIM, "causal", WARP_SPECIALIZE)
    else:
        acc, l_i, m_i = _attend(acc, l_i, m_i, q, k_desc, v_desc, head, offs_m, n_unmasked, n_ctx, n_ctx,
                                qk_scale, BLOCK_N, HEAD_DIM, "keys", WARP_SPECIALIZE)
    out = (acc / l_i[:, None]).to(o_desc.dtype)
    o_desc.store([head, start_m, 0], out.reshape(1, BLOCK_M, HEAD_DIM))
    lse_ptr += head.to(tl.int64) * n_ctx
    tl.store(lse_ptr + offs_m, (m_i + tl.log2(l_i)) * lesson06.LN2, mask=offs_m < n_ctx)


def heads_descriptor(t):
    """A host descriptor of t (B, H, N, D), contiguous, seen as (B * H, N, D): a box never crosses from
    one head into the next. Its box is a placeholder that each configuration's pre-hook sets."""
    B, H, N, D = t.shape
    return TensorDescriptor(t, [B * H, N, D], [N * D, D, 1], [1, 16, D])


# Launched prepared once per key (helpers.launch): the pre-hook only sets the descriptors' boxes, which
# the compiled kernel carries itself.
_attention_launcher = Launcher(attention_kernel, boxes=_set_attention_boxes, buckets=LENGTH_BUCKETS)


def attention(q, k, v, causal=False, sm_scale=None):
    """softmax(q k^T * sm_scale) v for q, k, v (B, H, N, D): (out, lse), as lesson 06's `attention`."""
    assert q.dim() == 4 and q.shape == k.shape == v.shape, "q, k, v must all be (B, H, N, D)"
    assert q.dtype == k.dtype == v.dtype, "q, k, v must share a dtype"
    B, H, N, D = q.shape
    assert D in (16, 32, 64, 128), "head dimension must be 16, 32, 64 or 128"
    sm_scale = D ** -0.5 if sm_scale is None else sm_scale
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    out = torch.empty_like(q)
    lse = torch.empty((B, H, N), device=q.device, dtype=torch.float32)
    grid = lambda meta: (cdiv(N, meta["BLOCK_M"]), B * H)  # noqa: E731
    _attention_launcher(grid, *(heads_descriptor(t) for t in (q, k, v, out)), lse, N,
                        sm_scale * lesson06.LOG2E.value, HEAD_DIM=D, CAUSAL=causal)
    return out, lse


def wgmma_order(shifted, causal=False, head_dim=128):
    """attention_kernel compiled for Hopper (sm_90) here, with or without a GPU (128 x 128 tiles, 8 warps,
    2 stages; shifted: with the loop of _attend_shifted): its tensor-core instructions, their waits and
    its exponentials in the order of the PTX, one string. "8 wgmma": 8 wgmma instructions issued, one
    warpgroup's share of one product; "wait 0": wait until none of this warpgroup's wgmmas is still
    running; "66 ex2": 66 exponentials a thread; "|": a branch target, where a loop starts again."""
    from helpers.gpu_compile import compile_for_hopper

    signature = {**{name: f"tensordesc<fp16[1,128,{head_dim}]>" for name in ("q_desc", "k_desc", "v_desc",
                                                                              "o_desc")},
                 "lse_ptr": "*fp32", "n_ctx": "i32", "qk_scale": "fp32"}
    constexprs = {"HEAD_DIM": head_dim, "CAUSAL": causal, "BLOCK_M": 128, "BLOCK_N": 128,
                  "WARP_SPECIALIZE": False, "SHIFTED": shifted}
    signature.update(dict.fromkeys(constexprs, "constexpr"))
    with compiler_quiet():
        compiled = compile_for_hopper(attention_kernel.fn, signature, constexprs, num_warps=8, num_stages=2)

    def step(line):
        if line.startswith("wgmma.mma_async"):
            return "wgmma"
        if line.startswith("ex2.approx"):
            return "ex2"
        if line.startswith("wgmma.wait_group"):   # wgmma.wait_group.sync.aligned N;
            return "wait " + line.split()[-1].rstrip(";")
        return "|" if line.startswith("$L__BB") else None

    steps = [s for s in (step(line.strip()) for line in compiled.asm["ptx"].splitlines()) if s]
    runs = [(s, len(list(run))) for s, run in itertools.groupby(steps)]
    return "  ".join(f"{n} {s}" if s in ("wgmma", "ex2") else "  ".join([s] * n) for s, n in runs)


# ---------------------------------------------------------------- FlashAttention-3's arrangement, in Gluon
#
# solutions/gluon_attention.py: a producer warp issuing TMA copies into a ring of K/V slots, two consumer
# warpgroups of 64 query rows each, mbarriers between them. Gluon kernels compile without a GPU (ptxas
# runs on the host) but run only on one: there is no interpreter for them.


def ring_waits(j, num_stages):
    """(slot, ready_parity, empty_parity) for K/V tile j in a ring of num_stages slots. Tile j is the
    use-th tile in its slot; the consumers wait for ready's phase `use` to complete, the producer for
    empty's phase `use - 1` (both consumers done with the slot's previous tile). A fresh barrier counts
    as having completed the phase before its first, so the first round's producer waits pass at once."""
    use = j // num_stages
    return j % num_stages, use % 2, (use + 1) % 2


def gluon_module():
    """solutions/gluon_attention.py (Triton's NVIDIA backend compiles it; a Hopper GPU runs it)."""
    from helpers.solutions import ROOT, load_module

    return load_module(ROOT / "solutions" / "gluon_attention.py")


def gluon_build(head_dim=128, causal=True):
    """The Gluon forward compiled for sm_90 on this machine: what ptxas and the PTX say about it."""
    interpreter.restore_language()   # before Gluon's import: a launch stopped midway may leave it patched
    module = gluon_module()
    with compiler_quiet():
        compiled = module.compile_for_hopper(head_dim, causal)
        report = module.ptxas_report(compiled)
    ptx = compiled.asm["ptx"]
    setmaxnreg = sorted({(line.split()[0].split(".")[1], int(line.split()[-1].rstrip(";")))
                         for line in ptx.splitlines() if "setmaxnreg" in line})
    return {"registers": report["registers"], "spilled bytes": report["spill_stores"] + report["spill_loads"],
            "shared bytes": compiled.metadata.shared, "warps": compiled.metadata.num_warps,
            "wgmma": ptx.count("wgmma.mma_async"), "TMA copies": ptx.count("cp.async.bulk.tensor"),
            "mbarrier waits": ptx.count("mbarrier.try_wait"), "setmaxnreg": setmaxnreg}


def gluon_recorded():
    """{GPU name: tests/gpu_gluon_check.py's record}: the Gluon forward checked and timed on that GPU."""
    return lesson09.recorded("10_hopper_attention_gluon")


def shifted_recorded():
    """{GPU name: tests/gpu_shifted_forward.py's record}: the forward with the lesson's loop and with
    _attend_shifted's, each at a few configurations, timed beside cuDNN on that GPU."""
    return lesson09.recorded("10_hopper_attention_shifted")


def gluon_backward_recorded():
    """{GPU name: tests/gpu_gluon_backward_check.py's record}: the Gluon backward
    (solutions/gluon_attention_backward.py) checked on that GPU and timed beside this lesson's backward,
    lesson 06's and cuDNN's."""
    return lesson09.recorded("10_hopper_attention_gluon_backward")


def causal_mean_tiles(n, rows=192, block_n=128):
    """The key tiles a causal block of `rows` query rows walks (its last warpgroup's walk, up to its last
    row), on average over the blocks of a sequence of n."""
    blocks = cdiv(n, rows)
    return sum(cdiv(min(rows * (b + 1), n), block_n) for b in range(blocks)) / blocks


CAUSAL_MEAN_TILES = causal_mean_tiles(4096)   # the three-consumer kernel's blocks, causal, at N = 4096


def program_cost_fits(records):
    """{GPU: {D: {impl: fit, "recorded_full": ratio, "recorded_causal": ratio}}} from each record's
    program_cost rows (tests/gpu_gluon_check.py --program-cost), impl "gluon_three" or "cudnn". A fit:
    the rows' key tiles per block and µs per wave of programs (one block per SM), the least-squares line
    through them (fixed_us + tile_us * tiles) and its value at 32 tiles (full attention at N = 4096) and
    at CAUSAL_MEAN_TILES. The ratios are cuDNN's time over the three-consumer kernel's, recorded at B4
    N4096 with this D, full and causal."""
    from statistics import linear_regression

    from helpers.roofline import chip_for

    fits = {}
    for gpu, record in records.items():
        rows, chip = record.get("program_cost"), chip_for(gpu)
        if not rows or chip is None:
            continue
        fits[gpu] = {}
        for D in sorted({r["D"] for r in rows}):
            mine = [r for r in rows if r["D"] == D]
            tiles = [r["tiles"] for r in mine]
            by_impl = {}
            for impl in ("gluon_three", "cudnn"):
                us = [1000 * r[impl] * chip.sms / r["programs"] for r in mine]   # one wave: sms blocks
                line = linear_regression(tiles, us)
                at = lambda x, line=line: line.intercept + line.slope * x  # noqa: E731
                by_impl[impl] = {"tiles": tiles, "us_per_wave": us, "fixed_us": line.intercept,
                                 "tile_us": line.slope, "at_full": at(32), "at_causal": at(CAUSAL_MEAN_TILES)}
            for t in record["timings"]:
                if t["N"] == 4096 and t["D"] == D and "gluon_three" in t:
                    name = "recorded_causal" if t["causal"] else "recorded_full"
                    by_impl[name] = t["cudnn"]["graph_ms"] / t["gluon_three"]["graph_ms"]
            fits[gpu][D] = by_impl
    return fits


# ---------------------------------------------------------------- exercise: the backward, dQ by atomics
#
# Lesson 06's backward runs two kernels that each recompute P: dK/dV (4 matmuls per tile: S, dV, dP,
# dK) and dQ (3 more: S, dP, dQ), 7 in all. Here one program per key block does the first four and
# also dQ's share, dS K, for the query block in hand, and adds it into a float32 dQ with atomic adds:
# 5 matmuls per tile.
# Where the adds meet: every key block adds into every query row it sees. Causal, a program starts at
# its own diagonal and walks down to the last query block, so the last rows receive an add from every
# key block; the programs start at different rows, which spreads their adds out in time, not in
# place. Full attention, every program starts at query block 0 and walks the same rows in the same
# order, in lockstep: the most contended case. (Starting each program at a different query block,
# wrapping round, would spread them; the lesson's kernel keeps the plain order.)
# The order in which the adds arrive changes from run to run, and float32 addition is not
# associative, so dQ can differ in its last bits between two runs on the same inputs.


@triton.jit
def _attend_backward(dk, dv, k, v, q_desc, do_desc, dq_ptr, lse_ptr, delta_ptr, head, offs_n, lo, hi, n_ctx,
                     qk_scale, sm_scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, MASK: tl.constexpr):
    """Query blocks lo, lo + BLOCK_M, ... < hi past one key block: dK, dV accumulate here, dQ in memory.
    MASK: "none" (every query row and key exists, every row sees every key), "ends" (rows or keys may lie
    past n_ctx) or "causal"."""
    offs_d = tl.arange(0, HEAD_DIM)
    for start_m in range(lo, hi, BLOCK_M):
        offs_m = start_m + tl.arange(0, BLOCK_M)
        q = q_desc.load([head, start_m, 0]).reshape(BLOCK_M, HEAD_DIM)    # rows past the end read 0
        do = do_desc.load([head, start_m, 0]).reshape(BLOCK_M, HEAD_DIM)
        if MASK == "none":
            lse2 = tl.load(lse_ptr + offs_m) * lesson06.LOG2E
            delta = tl.load(delta_ptr + offs_m)
        else:   # lse = +inf past the end: those rows' P is 0 and they add nothing
            lse2 = tl.load(lse_ptr + offs_m, mask=offs_m < n_ctx, other=float("inf")) * lesson06.LOG2E
            delta = tl.load(delta_ptr + offs_m, mask=offs_m < n_ctx, other=0.0)
        sT = tl.dot(k, q.T)                             # S^T: (BLOCK_N, BLOCK_M)
        if MASK == "causal":
            sT = tl.where(offs_m[None, :] >= offs_n[:, None], sT, -float("inf"))
        elif MASK == "ends":    # keys past the end read 0: a score of 0, whose exp2(0 - lse2) can be inf
            sT = tl.where(offs_n[:, None] < n_ctx, sT, -float("inf"))
        pT = tl.exp2(sT * qk_scale - lse2[None, :])     # P^T, recomputed from the saved lse
        dv = tl.dot(pT.to(do.dtype), do, dv)            # dV += P^T dO
        dpT = tl.dot(v, do.T)                           # dP^T = V dO^T
        dsT = (pT * (dpT - delta[None, :])).to(q.dtype)  # dS = P * (dP - delta)
        dk = tl.dot(dsT, q, dk)                         # dK += dS^T Q
        dq = tl.dot(dsT.T, k) * sm_scale                # these keys' share of dQ = dS K
        dq_ptrs = dq_ptr + offs_m[:, None] * HEAD_DIM + offs_d[None, :]
        if MASK == "none":
            tl.atomic_add(dq_ptrs, dq, sem="relaxed")
        else:
            tl.atomic_add(dq_ptrs, dq, mask=offs_m[:, None] < n_ctx, sem="relaxed")
    return dk, dv


def _set_backward_boxes(args):
    """Config pre-hook: Q and dO move in boxes of BLOCK_M rows, K, V, dK and dV in boxes of BLOCK_N."""
    D = args["HEAD_DIM"]
    args["q_desc"].block_shape = args["do_desc"].block_shape = [1, args["BLOCK_M"], D]
    for name in ("k_desc", "v_desc", "dk_desc", "dv_desc"):
        args[name].block_shape = [1, args["BLOCK_N"], D]


def _backward_config(bm, bn, warps, stages):
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=warps, num_stages=stages,
                         pre_hook=_set_backward_boxes)


# BLOCK_N keys per program, BLOCK_M queries per step; causal needs BLOCK_N a multiple of BLOCK_M.
BACKWARD_CONFIGS = pick(
    cpu=[_backward_config(16, 32, 4, 1)],
    gpu=[_backward_config(*c) for c in [(64, 128, 8, 3), (64, 128, 8, 2), (64, 128, 8, 4), (32, 128, 8, 3),
                                        (64, 64, 4, 3), (64, 64, 4, 4), (32, 64, 4, 3)]])


@triton.autotune(configs=BACKWARD_CONFIGS, key=["n_ctx", "HEAD_DIM", "CAUSAL"], reset_to_zero=["dq_ptr"],
                 prune_configs_by={"early_config_prune": lesson06.small_problems_one_config})
@triton.jit
def attention_backward_kernel(q_desc, k_desc, v_desc, do_desc, dk_desc, dv_desc, dq_ptr, lse_ptr, delta_ptr,
                              n_ctx, qk_scale, sm_scale, HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr,
                              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """One program: dK and dV for BLOCK_N keys of one (batch, head), and those keys' share of dQ, added
    into dq (float32, zeroed, contiguous (B, H, N, D)). The descriptors see (B * H, N, D) tensors."""
    tl.static_assert(not CAUSAL or BLOCK_N % BLOCK_M == 0, "causal: BLOCK_N must be a multiple of BLOCK_M")
    start_n = tl.program_id(0) * BLOCK_N
    head = tl.program_id(1)
    dq_ptr += head.to(tl.int64) * n_ctx * HEAD_DIM
    lse_ptr += head.to(tl.int64) * n_ctx
    delta_ptr += head.to(tl.int64) * n_ctx
    offs_n = start_n + tl.arange(0, BLOCK_N)
    k = k_desc.load([head, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)   # keys past the end read 0: a score
    v = v_desc.load([head, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)   # of 0, masked in "ends" (exp2(-lse2))
    dk = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    n_full = (n_ctx // BLOCK_M) * BLOCK_M    # query blocks below this have every row,
    n_plain = tl.where(start_n + BLOCK_N <= n_ctx, n_full, 0)   # and every key, unless the keys run out
    lo = 0
    if CAUSAL:   # queries before start_n see none of these keys; those on the diagonal see some
        lo = start_n + BLOCK_N
        dk, dv = _attend_backward(dk, dv, k, v, q_desc, do_desc, dq_ptr, lse_ptr, delta_ptr, head, offs_n,
                                  start_n, tl.minimum(lo, n_ctx), n_ctx, qk_scale, sm_scale, HEAD_DIM,
                                  BLOCK_M, "causal")
    dk, dv = _attend_backward(dk, dv, k, v, q_desc, do_desc, dq_ptr, lse_ptr, delta_ptr, head, offs_n, lo,
                              n_plain, n_ctx, qk_scale, sm_scale, HEAD_DIM, BLOCK_M, "none")
    dk, dv = _attend_backward(dk, dv, k, v, q_desc, do_desc, dq_ptr, lse_ptr, delta_ptr, head, offs_n,
                              tl.maximum(lo, n_plain), n_ctx, n_ctx, qk_scale, sm_scale, HEAD_DIM, BLOCK_M,
                              "ends")
    dk_desc.store([head, start_n, 0], (dk * sm_scale).to(dk_desc.dtype).reshape(1, BLOCK_N, HEAD_DIM))
    dv_desc.store([head, start_n, 0], dv.to(dv_desc.dtype).reshape(1, BLOCK_N, HEAD_DIM))


_backward_launcher = Launcher(attention_backward_kernel, boxes=_set_backward_boxes,   # as the forward's
                              buckets=LENGTH_BUCKETS)


def attention_backward(q, k, v, out, lse, dout, causal=False, sm_scale=None):
    """dq, dk, dv of attention(q, k, v, causal) given dout: delta = rowsum(dO * O) by lesson 06's kernel,
    then one kernel for all three gradients."""
    B, H, N, D = q.shape
    sm_scale = D ** -0.5 if sm_scale is None else sm_scale
    q, k, v, dout = q.contiguous(), k.contiguous(), v.contiguous(), dout.contiguous()
    delta = lesson06.backward_delta(out, dout)
    dq = torch.zeros(q.shape, device=q.device, dtype=torch.float32)
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    grid = lambda meta: (cdiv(N, meta["BLOCK_N"]), B * H)  # noqa: E731
    _backward_launcher(grid, *(heads_descriptor(t) for t in (q, k, v, dout, dk, dv)), dq, lse, delta, N,
                       sm_scale * lesson06.LOG2E.value, sm_scale, HEAD_DIM=D, CAUSAL=causal)
    return dq.to(q.dtype), dk, dv


class Attention(torch.autograd.Function):
    """Lesson 10's forward and backward, for autograd (as lesson 06's FlashAttention)."""

    @staticmethod
    def forward(ctx, q, k, v, causal, sm_scale):
        out, lse = attention(q, k, v, causal, sm_scale)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal, ctx.sm_scale = causal, sm_scale
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = attention_backward(q, k, v, out, lse, dout, ctx.causal, ctx.sm_scale)
        return dq, dk, dv, None, None


def trainable_attention(q, k, v, causal=False, sm_scale=None):
    """attention(q, k, v, causal)'s output, differentiable: loss.backward() runs attention_backward."""
    return Attention.apply(q, k, v, causal, sm_scale)


# ---------------------------------------------------------------- make bench (GPU)

ATTENTION_SHAPES = ((16, 1024), (8, 2048), (4, 4096), (1, 16384))   # (B, N): B * N = 16384 tokens, H = 16


def benchmarks():
    """What `make bench` times for this lesson (GPU only): the attention forward, forward and backward,
    the backward alone, and the long-row softmax, each beside lessons 05 and 06's kernels and the vendor
    libraries."""
    from torch.nn.attention import SDPBackend

    from helpers.bench import Bench

    sdpa = {"cuDNN (SDPA)": lesson06._sdpa(SDPBackend.CUDNN_ATTENTION),
            "FlashAttention-2 (SDPA flash)": lesson06._sdpa(SDPBackend.FLASH_ATTENTION)}
    for D in (128, 64):
        for causal in (False, True):
            group = f"hopper_attention_fwd{'_causal' if causal else ''}_d{D}"
            for B, N in ATTENTION_SHAPES:
                q, k, v = (torch.randn(B, 16, N, D, device="cuda", dtype=torch.float16) for _ in range(3))
                impls = {"lesson 10: attention": lambda q=q, k=k, v=v, c=causal: attention(q, k, v, c)[0],
                         "lesson 06: attention":
                             lambda q=q, k=k, v=v, c=causal: lesson06.attention(q, k, v, c)}
                for name, fn in sdpa.items():
                    call = lambda fn=fn, q=q, k=k, v=v, c=causal: fn(q, k, v, c)  # noqa: E731
                    if lesson06._works(call):
                        impls[name] = call
                flops = 4 * B * 16 * N * N * D // (2 if causal else 1)
                # Graph replays, as for the matmul: the GPU's time, without the host's work (descriptors,
                # autotuner dispatch, and for the backward autograd), which varied between runs.
                yield Bench(group, N, bytes=4 * q.nbytes, flops=flops, label=f"B{B} N{N}", metric="TFLOP/s",
                            impls=impls, graph=True)
                del q, k, v

    for D in (128, 64):
        for B, N in ((16, 1024), (4, 4096), (1, 16384)):
            q, k, v, dout = (torch.randn(B, 16, N, D, device="cuda", dtype=torch.float16) for _ in range(4))
            q, k, v = (t.requires_grad_() for t in (q, k, v))
            named = {"lesson 10: attention + attention_backward": trainable_attention,
                     "lesson 06: attention": lesson06.attention, **sdpa}
            impls = {}
            for name, fn in named.items():
                call = lambda fn=fn, q=q, k=k, v=v, dout=dout: lesson06._fwd_bwd(fn, q, k, v, dout, True)  # noqa: E731
                if name.startswith("lesson") or lesson06._works(call):
                    impls[name] = call
            flops = int(3.5 * 4 * B * 16 * N * N * D // 2)   # forward 1x + backward 2.5x, causal halves both
            yield Bench(f"hopper_attention_fwd_bwd_causal_d{D}", N, bytes=8 * q.nbytes, flops=flops,
                        label=f"B{B} N{N}", metric="TFLOP/s", impls=impls, graph=True)
            del q, k, v, dout

    yield from _backward_benchmarks(sdpa)

    compiled_softmax = torch.compile(lesson05.softmax_naive, dynamic=False)
    for dtype, name in ((torch.float32, "fp32"), (torch.float16, "fp16")):
        for M, N in ((2048, 65536), (512, 262144)):
            x = torch.randn(M, N, device="cuda", dtype=dtype)
            # bytes: one read and one write, the least a softmax moves; both kernels read x twice
            yield Bench(f"hopper_softmax_long_{name}", N, bytes=2 * x.nbytes, flops=5 * M * N,
                        label=f"{M}x{N} {name}",
                        impls={"lesson 10: softmax_long": lambda x=x: softmax_long(x),
                               "lesson 05: tiled online": lambda x=x: lesson05.softmax_tiled_tuned(x),
                               "torch.compile(naive)": lambda x=x: compiled_softmax(x),
                               "torch.softmax": lambda x=x: torch.softmax(x, dim=1)})
            del x


def _graphable(fn):
    """True if fn() runs and can be captured in a CUDA graph here (a backend may be missing, or its
    backward may not capture)."""
    try:
        fn()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        torch.cuda.synchronize()
        return True
    except (RuntimeError, torch.OutOfMemoryError):
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        return False


def _backward_benchmarks(sdpa, adds_left_out=False):
    """The backward alone, causal: lesson 10's one kernel, lesson 06's two and the Gluon kernel (all from
    lesson 10's saved out and lse), and each SDPA backend's backward from its own forward, run once
    beforehand. Each is timed as CUDA-graph replays of the backward only. adds_left_out: also the Gluon
    kernel without its dQ reductions (dQ wrong; tests/gpu_gluon_backward_check.py records it)."""
    from helpers.bench import Bench
    from helpers.solutions import ROOT, load_module

    gluon = load_module(ROOT / "solutions" / "gluon_attention_backward.py")
    for D in (128, 64):
        for B, N in ((16, 1024), (4, 4096), (1, 16384)):
            q, k, v, dout = (torch.randn(B, 16, N, D, device="cuda", dtype=torch.float16) for _ in range(4))
            out, lse = attention(q, k, v, True)
            impls = {"lesson 10: attention_backward":
                         lambda q=q, k=k, v=v, out=out, lse=lse, dout=dout:
                             attention_backward(q, k, v, out, lse, dout, True),
                     "lesson 06: flash_backward (two kernels)":
                         lambda q=q, k=k, v=v, out=out, lse=lse, dout=dout:
                             lesson06.flash_backward(q, k, v, out, lse, dout, True)}
            if torch.cuda.get_device_capability() == (9, 0):   # the Gluon kernel is written for Hopper
                impls["Gluon backward"] = lambda q=q, k=k, v=v, out=out, lse=lse, dout=dout: (
                    gluon.gluon_attention_backward(q, k, v, out, lse, dout, True))
                if adds_left_out:
                    impls["Gluon, dQ adds left out"] = lambda q=q, k=k, v=v, out=out, lse=lse, dout=dout: (
                        gluon.gluon_attention_backward(q, k, v, out, lse, dout, True, add_dq=False))
            for name, fn in sdpa.items():
                leaves = [t.clone().requires_grad_() for t in (q, k, v)]
                # The forward on a side stream: autograd runs each backward op on its forward's stream,
                # which must not be the default stream while a graph is being captured.
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                try:
                    with torch.cuda.stream(side):
                        saved = fn(*leaves, True)
                except (RuntimeError, torch.OutOfMemoryError):
                    continue
                torch.cuda.current_stream().wait_stream(side)
                call = lambda saved=saved, leaves=leaves, dout=dout: torch.autograd.grad(  # noqa: E731
                    saved, leaves, dout, retain_graph=True)
                if _graphable(call):
                    impls[name.replace("(SDPA", "backward (SDPA")] = call
            flops = int(2.5 * 4 * B * 16 * N * N * D // 2)   # 2.5x the forward's; causal halves both
            yield Bench(f"hopper_attention_bwd_causal_d{D}", N, bytes=8 * q.nbytes, flops=flops,
                        label=f"B{B} N{N}", metric="TFLOP/s", impls=impls, graph=True)
            del q, k, v, dout, out, lse


# ---------------------------------------------------------------- recorded for the notebook (GPU)

LOOK_FOR_HOPPER = lesson09.LOOK_FOR_HOPPER   # TMA copies, wgmma, and the barriers that pace the pipeline
RECORDED = "10_hopper_attention"             # helpers/recorded/10_hopper_attention/<gpu>.json


def _warp_specialize_survey():
    """Which warp-specialised configurations of `attention_kernel` this Triton compiles on this GPU."""
    rows = []
    for D in (64, 128):
        for causal in (False, True):
            args = dict(_attention_descriptors(1, 1024, D), lse_ptr=torch.empty(1024, device="cuda"),
                        n_ctx=1024, qk_scale=1.0, HEAD_DIM=D, CAUSAL=causal)
            for config in (c for c in ATTENTION_CONFIGS if c.kwargs["WARP_SPECIALIZE"]):
                rows.append(lesson09.try_compile(attention_kernel, args, config, head_dim=D, causal=causal))
    return rows


def _attention_descriptors(heads, n, d, names=("q_desc", "k_desc", "v_desc", "o_desc")):
    """Descriptor arguments of an attention kernel, over fresh (heads, n, d) float16 tensors."""
    return {name: descriptor(torch.empty(heads, n, d, device="cuda", dtype=torch.float16), [1, 16, d])
            for name in names}


def ncu_targets():
    """name -> {run, kernel, bytes, flops, what}: the kernels of the goals this lesson misses, each beside
    the kernel it is measured against, for Nsight Compute (record_artifacts). `kernel` is a pattern of
    the profiled kernel's name; `bytes` and `flops` are the least the operation moves and does."""
    from torch.nn.attention import SDPBackend

    fp16 = dict(device="cuda", dtype=torch.float16)
    cudnn = lesson06._sdpa(SDPBackend.CUDNN_ATTENTION)
    compiled_softmax = torch.compile(lesson05.softmax_naive, dynamic=False)
    compiled_rms = torch.compile(lesson05.rms_norm_naive, dynamic=False)
    targets = {}

    def pair(name, ours, kernel, theirs_name, theirs, theirs_kernel, **counted):
        targets[name] = {"run": ours, "kernel": kernel, **counted}
        targets[theirs_name] = {"run": theirs, "kernel": theirs_kernel, **counted}

    B, H, N, D = 8, 16, 2048, 128
    q, k, v = (torch.randn(B, H, N, D, **fp16) for _ in range(3))
    pair("attention forward (10)", lambda: attention(q, k, v, True), "attention_kernel",
         "cuDNN forward", lambda: cudnn(q, k, v, True), "cudnn",
         bytes=4 * q.nbytes, flops=2 * B * H * N * N * D, what=f"B{B} H{H} N{N} D{D} causal")

    B, N = 4, 4096
    q2, k2, v2, dout = (torch.randn(B, H, N, D, **fp16) for _ in range(4))
    out, lse = attention(q2, k2, v2, True)
    qg, kg, vg = (t.clone().requires_grad_() for t in (q2, k2, v2))
    out_cudnn = cudnn(qg, kg, vg, True)                  # the forward once: only the backward is profiled
    cudnn_backward = lambda: torch.autograd.grad(out_cudnn, (qg, kg, vg), dout, retain_graph=True)  # noqa: E731
    pair("attention backward (10)", lambda: attention_backward(q2, k2, v2, out, lse, dout, True),
         "attention_backward_kernel", "cuDNN backward", cudnn_backward, "cudnn",
         bytes=8 * q2.nbytes, flops=5 * B * H * N * N * D, what=f"B{B} H{H} N{N} D{D} causal")

    long_rows = torch.randn(512, 262144, device="cuda")
    pair("long softmax (10)", lambda: softmax_long(long_rows), "softmax_long_kernel",
         "torch.compile softmax, long rows", lambda: compiled_softmax(long_rows), "triton_",
         bytes=2 * long_rows.nbytes, flops=5 * long_rows.numel(), what="512x262144 float32")

    rows = torch.randn(32768, 4096, device="cuda")
    pair("row softmax (05)", lambda: lesson05.softmax_rows(rows), "softmax_rows_kernel",
         "torch.compile softmax, rows", lambda: compiled_softmax(rows), "triton_",
         bytes=2 * rows.nbytes, flops=5 * rows.numel(), what="32768x4096 float32")

    x = torch.randn(16384, 8192, device="cuda", dtype=torch.bfloat16)
    g = (1 + 0.1 * torch.randn(8192, device="cuda")).to(torch.bfloat16)
    pair("RMSNorm (05)", lambda: lesson05.rms_norm_rows(x, g), "rms_norm_kernel",
         "torch.compile RMSNorm", lambda: compiled_rms(x, g), "triton_",
         bytes=2 * x.nbytes + g.nbytes, flops=4 * x.numel(), what="16384x8192 bfloat16")
    return targets


def _forward_args(D=128, causal=False, n=4096, heads=16):
    return dict(_attention_descriptors(heads, n, D), lse_ptr=torch.empty(heads, n, device="cuda"), n_ctx=n,
                qk_scale=0.1, HEAD_DIM=D, CAUSAL=causal)


def _backward_args(D=128, causal=True, n=4096, heads=16):
    names = ("q_desc", "k_desc", "v_desc", "do_desc", "dk_desc", "dv_desc")
    zeros = lambda *shape: torch.zeros(*shape, device="cuda")  # noqa: E731
    return dict(_attention_descriptors(heads, n, D, names), dq_ptr=zeros(heads, n, D),
                lse_ptr=zeros(heads, n), delta_ptr=zeros(heads, n), n_ctx=n, qk_scale=0.1, sm_scale=0.1,
                HEAD_DIM=D, CAUSAL=causal)


def _compiled(kernel, args, config):
    """kernel (an autotuner's JITFunction) compiled for one configuration, launched once."""
    config.pre_hook({**args, **config.all_kwargs()})
    return kernel.fn[(32, 16)](**args, **config.all_kwargs())


def _register_survey():
    """Registers per thread, spilled registers and shared memory of every configuration the two attention
    kernels' autotuners may pick: the forward at D = 128 and 64, the backward at 128 (a spill is a value
    the compiler keeps in local memory, for want of a register)."""
    rows = []
    surveyed = (("attention_kernel", attention_kernel, ATTENTION_CONFIGS, _forward_args, (128, 64)),
                ("attention_backward_kernel", attention_backward_kernel, BACKWARD_CONFIGS, _backward_args,
                 (128,)))
    for name, kernel, configs, make_args, head_dims in surveyed:
        for D in head_dims:
            for causal in (False, True):
                for config in configs:
                    row = {"kernel": name, "head_dim": D, "causal": causal,
                           "config": lesson09.describe_config(config)}
                    try:
                        with compiler_quiet():   # a failing pass prints its whole module to stderr
                            compiled = _compiled(kernel, make_args(D, causal), config)
                        row.update(registers=compiled.n_regs, spills=compiled.n_spills,
                                   shared=compiled.metadata.shared)
                    except Exception as e:  # noqa: BLE001  (a configuration this Triton cannot build: say why)
                        row["error"] = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
                    rows.append(row)
    return rows


def programs_per_sm(registers, warps, shared):
    """How many programs of a kernel one Hopper SM holds at once: its 65,536 registers, handed out 8 a
    thread at a time; its 228 KB of shared memory, less 1 KB the hardware keeps per program; 64 warps."""
    by_registers = 65536 // (-(-registers // 8) * 8 * 32 * warps)
    by_shared = 228 * 1024 // (shared + 1024)
    return min(by_registers, by_shared, 64 // warps)


def _two_per_sm_survey(n=4096, heads=64, D=64):
    """The forward at D = 64 (B = 4, H = 16, N = 4096), full and causal, with the 128 x 128, 8-warp tile
    capped at 128 registers a thread (TWO_PER_SM) and not: registers, shared memory and milliseconds
    (CUDA-graph replays)."""
    from helpers.bench import measure

    q, k, v = (torch.randn(heads, n, D, device="cuda", dtype=torch.float16) for _ in range(3))
    descriptors = {name: descriptor(t, [1, 16, D]) for name, t in
                   zip(("q_desc", "k_desc", "v_desc", "o_desc"), (q, k, v, torch.empty_like(q)))}
    rows = []
    for causal in (False, True):
        args = dict(descriptors, lse_ptr=torch.empty(heads, n, device="cuda"), n_ctx=n,
                    qk_scale=D ** -0.5 * lesson06.LOG2E.value, HEAD_DIM=D, CAUSAL=causal)
        for config in (_attention_config(128, 128, 8, 3), TWO_PER_SM):
            config.pre_hook({**args, **config.all_kwargs()})
            launch = attention_kernel.fn[(cdiv(n, 128), heads)]
            compiled = launch(**args, **config.all_kwargs())
            ms = measure(lambda: launch(**args, **config.all_kwargs()), graph=True)
            rows.append({"head_dim": D, "N": n, "heads": heads, "causal": causal,
                         "config": lesson09.describe_config(config), "warps": config.num_warps,
                         "registers": compiled.n_regs, "spills": compiled.n_spills,
                         "shared": compiled.metadata.shared, "ms": ms})
    return rows


def _autotuner_choices():
    """What the attention kernels' autotuners chose in this process (make bench's timings run first)."""
    return [{"kernel": kernel.fn.__name__, "key": [str(part) for part in key],
             "config": lesson09.describe_config(config)}
            for kernel in (attention_kernel, attention_backward_kernel)
            for key, config in kernel.cache.items()]


def record_artifacts(folder):
    """On a GPU (called by `make bench`): compiled-code excerpts of the forward (4 and 8 warps at 128
    rows) and the backward, the registers and spills of every configuration, the autotuners' choices,
    which warp-specialised configurations compile, and Nsight Compute's metrics of `ncu_targets()`, into
    folder/10_hopper_attention/<gpu>.json."""
    import json
    import pathlib
    import tempfile

    from helpers import profile
    from helpers.compiled import compiled_excerpt

    describe = lesson09.describe_config
    compiled = {}
    for key, config in (("attention_kernel", _attention_config(128, 64, 4, 2)),
                        ("attention_kernel, 8 warps", _attention_config(128, 64, 8, 3))):
        kernel = _compiled(attention_kernel, _forward_args(), config)
        compiled[key] = (f"# attention_kernel, D=128, {describe(config)}, float16\n" +
                         compiled_excerpt(kernel, LOOK_FOR_HOPPER))
    config = _backward_config(64, 128, 8, 3)
    kernel = _compiled(attention_backward_kernel, _backward_args(), config)
    compiled["attention_backward_kernel"] = (
        f"# attention_backward_kernel, D=128, causal, {describe(config)}, float16\n" +
        compiled_excerpt(kernel, {"ptx": ("cp.async.bulk.tensor", "wgmma.mma_async", "atom.global",
                                          "red.global")}))
    with tempfile.TemporaryDirectory() as scratch:       # where ncu writes its report, then reads it
        ncu = profile.ncu_profile("10", pathlib.Path(scratch))[0]
    record = {**profile.stamp(), "compiled": compiled, "warp_specialize": _warp_specialize_survey(),
              "registers": _register_survey(), "two_per_sm": _two_per_sm_survey(),
              "autotuned": _autotuner_choices(),
              "skipped_configs": SKIPPED_CONFIGS, "ncu": ncu}
    out = folder / RECORDED / (profile.slug(torch.cuda.get_device_name()) + ".json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1))


def recorded():
    """{GPU name: what record_artifacts recorded on it}: {} where nothing is recorded yet."""
    return lesson09.recorded(RECORDED)
