"""Lesson 10 solutions: Hopper speed. Lesson 04's matmul and lesson 06's attention, taken towards
cuBLAS and cuDNN with what an H100 adds and Triton reaches: tensor descriptors (TMA), persistent
programs, software pipelining and warp specialisation.

Exercise 1: tma_matmul_kernel         one program per tile, every tile moved by a tensor descriptor
Exercise 2: persistent_matmul_kernel  one program per SM, walking the tiles a tile scheduler hands out
Exercise 3: softmax_long_kernel       a long row in two passes, the second walking the row backwards

and, built from them:

    matmul          a @ b (or a @ b.T), persistent, TMA-fed, autotuned on CUDA-graph timings so that the
                    choice does not flip between runs; an optional per-row scale in the epilogue
    rmsnorm_linear  RMSNorm then a linear layer for inference: gamma folded into W once, 1/rms once
                    per row, then `matmul` with the row scale in its epilogue
    attention       FlashAttention forward (full or causal) through tensor descriptors, with a wider
                    space of tile shapes, stages and warp specialisation than lesson 06's
    attention_backward  dQ, dK and dV in one kernel: dQ added up with float32 atomics in the dK/dV pass
    trainable_attention the two as an autograd function
"""

import torch

import helpers  # noqa: F401  (first: picks the GPU or the interpreter)
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from helpers.bench import measure
from helpers.device import DEVICE, ON_GPU, pick
from helpers.solutions import load_solution

lesson05 = load_solution("05")   # inv_rms: 1 / rms of each row
lesson06 = load_solution("06")   # LOG2E, LN2 and the attention reference

# Programs of a persistent kernel: one per SM on a GPU; on the CPU two, so that each walks several tiles.
SMS = torch.cuda.get_device_properties(DEVICE).multi_processor_count if ON_GPU else 2


def descriptor(t, block_shape):
    """A tensor descriptor of t, built on the host: t's rows must be contiguous and 16-byte aligned."""
    assert t.stride(-1) == 1, "a tensor descriptor needs the last dimension contiguous (stride 1)"
    assert t.data_ptr() % 16 == 0 and all(s * t.element_size() % 16 == 0 for s in t.stride()[:-1]), \
        (f"a tensor descriptor needs its start and its strides {tuple(t.stride()[:-1])} (in values of "
         f"{t.element_size()} bytes) to be multiples of 16 bytes; copy the tensor into an aligned one")
    return TensorDescriptor.from_tensor(t, block_shape)


def _descriptor_scratch(size, alignment, stream):
    """Global memory in which programs build their tensor descriptors (128 bytes each)."""
    return torch.empty(size, device=DEVICE, dtype=torch.int8)


# Kernels that build descriptors themselves (tl.make_tensor_descriptor: the notebook's examples, or an
# exercise written that way) need it on a GPU. The lesson's own kernels take descriptors from the host.
triton.set_allocator(_descriptor_scratch)


# ---------------------------------------------------------------- exercise 1: a TMA-fed tile loop


@triton.jit
def tma_matmul_kernel(a_desc, b_desc, c_desc, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      BLOCK_K: tl.constexpr):
    """C = A @ B for the tile (program_id(0), program_id(1)): every tile loaded and stored by descriptor."""
    off_m = tl.program_id(0) * BLOCK_M
    off_n = tl.program_id(1) * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = a_desc.load([off_m, k])            # (BLOCK_M, BLOCK_K): zeros past A's edges
        b = b_desc.load([k, off_n])            # (BLOCK_K, BLOCK_N)
        acc = tl.dot(a, b, acc)
    c_desc.store([off_m, off_n], acc.to(c_desc.dtype))   # rows and columns past C's edges are dropped


TMA_TILE = pick(cpu=(32, 32, 32), gpu=(128, 128, 64))   # BLOCK_M, BLOCK_N, BLOCK_K


def tma_matmul(a, b):
    """a @ b, a (M, K) and b (K, N) with contiguous, 16-byte aligned rows; one program per output tile."""
    assert a.dim() == b.dim() == 2 and a.shape[1] == b.shape[0], "tma_matmul takes (M, K) and (K, N)"
    assert a.dtype == b.dtype, "a and b must share a dtype"
    (M, K), N = a.shape, b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    BM, BN, BK = TMA_TILE
    grid = (triton.cdiv(M, BM), triton.cdiv(N, BN))
    tma_matmul_kernel[grid](descriptor(a, [BM, BK]), descriptor(b, [BK, BN]), descriptor(c, [BM, BN]), K,
                            BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK)
    return c


# ---------------------------------------------------------------- exercise 2: persistent programs


@triton.jit
def tile_coords(tile, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """(pid_m, pid_n) of output tile number `tile` in lesson 04's grouped order: GROUP_M rows of tiles
    at a time, column by column, so that tiles computed together share rows of A and columns of B."""
    per_group = GROUP_M * num_pid_n
    first_m = (tile // per_group) * GROUP_M
    rows = min(num_pid_m - first_m, GROUP_M)
    return first_m + (tile % per_group) % rows, (tile % per_group) // rows


@triton.jit
def persistent_matmul_kernel(a_desc, b_desc, c_desc, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                             BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """C = A @ B with a fixed number of programs: program p computes tiles p, p + P, p + 2P, ..."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    for tile in range(tl.program_id(0), num_pid_m * num_pid_n, tl.num_programs(0)):
        pid_m, pid_n = tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, K, BLOCK_K):
            acc = tl.dot(a_desc.load([pid_m * BLOCK_M, k]), b_desc.load([k, pid_n * BLOCK_N]), acc)
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_desc.dtype))


def persistent_matmul(a, b, programs=None):
    """a @ b with `programs` programs (default: one per SM), each walking several output tiles."""
    assert a.dim() == b.dim() == 2 and a.shape[1] == b.shape[0], "persistent_matmul takes (M, K) and (K, N)"
    assert a.dtype == b.dtype, "a and b must share a dtype"
    (M, K), N = a.shape, b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    BM, BN, BK = TMA_TILE
    programs = SMS if programs is None else programs
    assert programs >= 1, f"programs must be at least 1, not {programs}"
    # float32 tiles take twice the shared memory: two K steps in flight instead of Triton's default three
    persistent_matmul_kernel[(programs,)](descriptor(a, [BM, BK]), descriptor(b, [BK, BN]),
                                          descriptor(c, [BM, BN]), M, N, K,
                                          BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK, GROUP_M=8,
                                          num_stages=2 if a.element_size() == 4 else 3)
    return c


# ---------------------------------------------------------------- the fast matmul
#
# The persistent kernel above, plus what the autotuner may switch on:
#   FLATTEN          tl.range(..., flatten=True): the tile loop and the K loop become one loop, so the
#                    pipeline runs on across tiles (the next tile's loads in flight during the epilogue)
#   WARP_SPECIALIZE  some warps only issue TMA loads, the others only run the matmul (Triton's
#                    tl.range option; on Hopper only some tile shapes compile with it)
#   num_stages       how many K steps of A and B tiles are in flight in shared memory
# B_NK: b is given as (N, K), nn.Linear's layout, and the kernel multiplies by its transpose.
# HAS_SCALE: each row of the product is multiplied by s[row] (RMSNorm's 1 / rms) before the store.


def _set_block_shapes(args):
    """Config pre-hook: the host's descriptors move tiles of the configuration being run."""
    BM, BN, BK = args["BLOCK_M"], args["BLOCK_N"], args["BLOCK_K"]
    args["a_desc"].block_shape = [BM, BK]
    args["b_desc"].block_shape = [BN, BK] if args["B_NK"] else [BK, BN]
    args["c_desc"].block_shape = [BM, BN]


def _matmul_config(bm, bn, warps, stages, flatten=True, ws=False):
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 64, "GROUP_M": 8, "FLATTEN": flatten,
                          "WARP_SPECIALIZE": ws}, num_warps=warps, num_stages=stages,
                         pre_hook=_set_block_shapes)


MATMUL_CONFIGS = pick(
    cpu=[_matmul_config(32, 32, 4, 1)],
    gpu=[_matmul_config(128, 256, 8, 3), _matmul_config(128, 256, 8, 3, flatten=False, ws=True),
         _matmul_config(256, 128, 8, 3), _matmul_config(128, 128, 8, 4), _matmul_config(128, 128, 4, 4),
         _matmul_config(128, 64, 4, 4), _matmul_config(64, 128, 4, 4), _matmul_config(64, 64, 4, 4)])


def _tiles_for_the_shape(configs, named_args, **kwargs):
    """Prune the search before timing: keep the tile sizes that give at least half the SMs a tile (the
    large ones only where there are enough of them), so that fewer configurations are timed."""
    M, N = named_args["M"], named_args["N"]
    tiles = lambda c: triton.cdiv(M, c.kwargs["BLOCK_M"]) * triton.cdiv(N, c.kwargs["BLOCK_N"])  # noqa: E731
    kept = [c for c in configs if tiles(c) >= SMS // 2]
    return kept or [max(configs, key=tiles)]


def _graph_timed(kernel_call, quantiles):
    """How the autotuner times each candidate: as `make bench` times kernels, CUDA-graph replays with the
    L2 cache flushed before each. A 10 µs kernel launched from Python reads mostly the launch, and the
    choice flipped from run to run (lesson 10 shows it)."""
    return measure(kernel_call, graph=True, quantiles=quantiles)


@triton.autotune(configs=MATMUL_CONFIGS, key=["M", "N", "K", "B_NK", "HAS_SCALE"],
                 prune_configs_by={"early_config_prune": _tiles_for_the_shape}, do_bench=_graph_timed)
@triton.jit
def matmul_kernel(a_desc, b_desc, c_desc, s_ptr, M, N, K, B_NK: tl.constexpr, HAS_SCALE: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                  FLATTEN: tl.constexpr, WARP_SPECIALIZE: tl.constexpr):
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    for tile in tl.range(tl.program_id(0), num_pid_m * num_pid_n, tl.num_programs(0), flatten=FLATTEN,
                         warp_specialize=WARP_SPECIALIZE):
        pid_m, pid_n = tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        off_m, off_n = pid_m * BLOCK_M, pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, K, BLOCK_K):
            a = a_desc.load([off_m, k])
            if B_NK:
                acc = tl.dot(a, b_desc.load([off_n, k]).T, acc)
            else:
                acc = tl.dot(a, b_desc.load([k, off_n]), acc)
        if HAS_SCALE:
            rows = off_m + tl.arange(0, BLOCK_M)
            acc = acc * tl.load(s_ptr + rows, mask=rows < M, other=0.0)[:, None]
        c_desc.store([off_m, off_n], acc.to(c_desc.dtype))


def matmul(a, b, scale=None, b_is_nk=False):
    """a @ b (b (K, N)), or a @ b.T when b_is_nk (b (N, K), as nn.Linear stores weights); with scale
    (M,) float32, row i of the product is multiplied by scale[i]. Rows contiguous and 16-byte aligned."""
    assert a.dim() == b.dim() == 2, "matmul takes two 2-D tensors"
    assert a.dtype == b.dtype, "a and b must share a dtype"
    M, K = a.shape
    N = b.shape[0] if b_is_nk else b.shape[1]
    assert (b.shape[1] if b_is_nk else b.shape[0]) == K, \
        f"inner dimensions differ: a {tuple(a.shape)}, b {tuple(b.shape)}"
    if scale is not None:
        assert scale.shape == (M,) and scale.dtype == torch.float32 and scale.stride(0) == 1, \
            "scale: (M,) float32, contiguous: one factor per row"
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    # The block shapes are placeholders: each configuration's pre-hook sets its own.
    a_desc, b_desc, c_desc = descriptor(a, [16, 16]), descriptor(b, [16, 16]), descriptor(c, [16, 16])
    grid = lambda meta: (min(SMS, triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])),)  # noqa: E731
    matmul_kernel[grid](a_desc, b_desc, c_desc, scale, M, N, K, B_NK=b_is_nk, HAS_SCALE=scale is not None)
    return c


# ---------------------------------------------------------------- RMSNorm + linear, for inference
#
# rms_norm(x) * gamma @ W.T == diag(1 / rms(x)) @ x @ (W * gamma).T: fold gamma into W once, when the
# weights are loaded; then one small pass writes 1 / rms per row (M floats), and the matmul feeds x to
# the tensor cores untouched and scales each row of its result in the epilogue.


def fold_gamma(w, gamma):
    """W * gamma (each input column of W scaled), computed in float32, in W's dtype: done once."""
    return (w.float() * gamma.float()).to(w.dtype)


def rmsnorm_linear(x, w_folded, eps=1e-6):
    """rms_norm(x) * gamma @ w.T with w_folded = fold_gamma(w, gamma): x (M, K), w_folded (N, K)."""
    return matmul(x, w_folded, scale=lesson05.inv_rms(x, eps), b_is_nk=True)


def rmsnorm_linear_reference(x, gamma, w, eps=1e-6):
    return torch.nn.functional.rms_norm(x, (x.shape[1],), gamma, eps) @ w.T


# ---------------------------------------------------------------- exercise 3: a long row, read twice
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


# ---------------------------------------------------------------- FlashAttention forward, TMA-fed
#
# Lesson 06's forward with three changes:
# * Q, K, V and O move through tensor descriptors built on the host over (B * H, N, D) views, in boxes
#   of (1, rows, D): a box stays inside one head, rows past N read as zeros and are not stored, so no
#   load or store needs a mask. (Descriptors built by each program, as in lesson 09, measured slower
#   on short sequences: every program writes its own descriptors before its first copy.)
# * the search covers 64 to 128 rows per tile, 4 or 8 warps, 2 to 4 stages, and warp specialisation
#   (some warps load K and V, the others compute) where this Triton compiles it for the GPU, timed
#   as CUDA-graph replays like the matmul's;
# * the scale is applied inside the exponential's argument (s * scale - m: one fused multiply-add),
#   and the interior tiles (every key valid) take no mask at all.


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
        m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
        p = tl.exp2(s * qk_scale - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new
    return acc, l_i, m_i


def _set_attention_boxes(args):
    """Config pre-hook: Q and O move in boxes of BLOCK_M rows, K and V in boxes of BLOCK_N, one head each."""
    D = args["HEAD_DIM"]
    args["q_desc"].block_shape = args["o_desc"].block_shape = [1, args["BLOCK_M"], D]
    args["k_desc"].block_shape = args["v_desc"].block_shape = [1, args["BLOCK_N"], D]


def _attention_config(bm, bn, warps, stages, ws=False):
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "WARP_SPECIALIZE": ws}, num_warps=warps,
                         num_stages=stages, pre_hook=_set_attention_boxes)


ATTENTION_CONFIGS = pick(
    cpu=[_attention_config(32, 16, 4, 1)],
    gpu=[_attention_config(*c) for c in [(128, 128, 8, 3), (128, 64, 4, 2), (64, 64, 4, 3), (128, 64, 8, 3),
                                         (128, 64, 8, 4), (128, 64, 8, 3, True), (128, 128, 8, 2, True),
                                         (128, 64, 4, 2, True)]])


def _attention_search(configs, named_args, **kwargs):
    """Prune before timing: lesson 06's rule (below 1024 keys, the first configuration), and only the
    warp-specialised configurations that this Triton compiles for this GPU, head size and mask."""
    configs = lesson06.small_problems_one_config(configs, named_args)
    constexprs = {k: v for k, v in kwargs.items() if k not in ("grid", "warmup")}   # HEAD_DIM, CAUSAL
    kept = []
    for config in configs:
        if config.kwargs["WARP_SPECIALIZE"]:
            args = {**named_args, **constexprs, **config.all_kwargs()}
            config.pre_hook(args)
            try:
                attention_kernel.fn.warmup(**args, grid=(1,))
            except RuntimeError:    # e.g. "PassManager::run failed" in Triton 3.6's warp specialisation
                continue
        kept.append(config)
    return kept


@triton.autotune(configs=ATTENTION_CONFIGS, key=["n_ctx", "HEAD_DIM", "CAUSAL"],
                 prune_configs_by={"early_config_prune": _attention_search}, do_bench=_graph_timed)
@triton.jit
def attention_kernel(q_desc, k_desc, v_desc, o_desc, lse_ptr, n_ctx, qk_scale, HEAD_DIM: tl.constexpr,
                     CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     WARP_SPECIALIZE: tl.constexpr):
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
    if CAUSAL:   # keys before the block: all visible; the block's own keys: the diagonal mask
        acc, l_i, m_i = _attend(acc, l_i, m_i, q, k_desc, v_desc, head, offs_m, 0, start_m, n_ctx, qk_scale,
                                BLOCK_N, HEAD_DIM, "none", WARP_SPECIALIZE)
        acc, l_i, m_i = _attend(acc, l_i, m_i, q, k_desc, v_desc, head, offs_m, start_m, start_m + BLOCK_M,
                                n_ctx, qk_scale, BLOCK_N, HEAD_DIM, "causal", WARP_SPECIALIZE)
    else:        # whole key tiles: no mask; the last, partial one: hide the keys past n_ctx
        n_full = (n_ctx // BLOCK_N) * BLOCK_N
        acc, l_i, m_i = _attend(acc, l_i, m_i, q, k_desc, v_desc, head, offs_m, 0, n_full, n_ctx, qk_scale,
                                BLOCK_N, HEAD_DIM, "none", WARP_SPECIALIZE)
        acc, l_i, m_i = _attend(acc, l_i, m_i, q, k_desc, v_desc, head, offs_m, n_full, n_ctx, n_ctx,
                                qk_scale, BLOCK_N, HEAD_DIM, "keys", WARP_SPECIALIZE)
    out = (acc / l_i[:, None]).to(o_desc.dtype)
    o_desc.store([head, start_m, 0], out.reshape(1, BLOCK_M, HEAD_DIM))
    lse_ptr += head.to(tl.int64) * n_ctx
    tl.store(lse_ptr + offs_m, (m_i + tl.log2(l_i)) * lesson06.LN2, mask=offs_m < n_ctx)


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
    # (B * H, N, D) views; the box shapes are placeholders that each configuration's pre-hook sets
    descs = [descriptor(t.view(B * H, N, D), [1, 16, D]) for t in (q, k, v, out)]
    grid = lambda meta: (triton.cdiv(N, meta["BLOCK_M"]), B * H)  # noqa: E731
    attention_kernel[grid](*descs, lse, N, sm_scale * lesson06.LOG2E.value, HEAD_DIM=D, CAUSAL=causal)
    return out, lse


# ---------------------------------------------------------------- attention backward: dQ by atomics
#
# Lesson 06's backward runs two kernels that each recompute P: dK/dV (4 matmuls per tile: S, dV, dP,
# dK) and dQ (3 more: S, dP, dQ), 7 in all. Here one program per key block does the first four and
# also dQ's share, dS K, for the query block in hand, and adds it into a float32 dQ with atomic adds:
# 5 matmuls per tile. Many programs add into the same rows of dQ; float32 keeps the sum's rounding
# small, and a causal program begins at its own diagonal, so the programs seldom meet on a row.


@triton.jit
def _attend_backward(dk, dv, k, v, q_desc, do_desc, dq_ptr, lse_ptr, delta_ptr, head, offs_n, lo, hi, n_ctx,
                     qk_scale, sm_scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, MASK: tl.constexpr):
    """Query blocks lo, lo + BLOCK_M, ... < hi past one key block: dK, dV accumulate here, dQ in memory.
    MASK: "none" (every query row exists and sees every key), "rows" (rows past n_ctx) or "causal"."""
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
    k = k_desc.load([head, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)   # keys past the end read 0: they
    v = v_desc.load([head, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)   # add nothing to dQ
    dk = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    n_full = (n_ctx // BLOCK_M) * BLOCK_M    # query blocks below this have every row
    lo = 0
    if CAUSAL:   # queries before start_n see none of these keys; those on the diagonal see some
        lo = start_n + BLOCK_N
        dk, dv = _attend_backward(dk, dv, k, v, q_desc, do_desc, dq_ptr, lse_ptr, delta_ptr, head, offs_n,
                                  start_n, tl.minimum(lo, n_ctx), n_ctx, qk_scale, sm_scale, HEAD_DIM,
                                  BLOCK_M, "causal")
    dk, dv = _attend_backward(dk, dv, k, v, q_desc, do_desc, dq_ptr, lse_ptr, delta_ptr, head, offs_n, lo,
                              n_full, n_ctx, qk_scale, sm_scale, HEAD_DIM, BLOCK_M, "none")
    dk, dv = _attend_backward(dk, dv, k, v, q_desc, do_desc, dq_ptr, lse_ptr, delta_ptr, head, offs_n,
                              tl.maximum(lo, n_full), n_ctx, n_ctx, qk_scale, sm_scale, HEAD_DIM, BLOCK_M,
                              "rows")
    dk_desc.store([head, start_n, 0], (dk * sm_scale).to(dk_desc.dtype).reshape(1, BLOCK_N, HEAD_DIM))
    dv_desc.store([head, start_n, 0], dv.to(dv_desc.dtype).reshape(1, BLOCK_N, HEAD_DIM))


def attention_backward(q, k, v, out, lse, dout, causal=False, sm_scale=None):
    """dq, dk, dv of attention(q, k, v, causal) given dout: delta = rowsum(dO * O) by lesson 06's kernel,
    then one kernel for all three gradients."""
    B, H, N, D = q.shape
    sm_scale = D ** -0.5 if sm_scale is None else sm_scale
    q, k, v, dout = q.contiguous(), k.contiguous(), v.contiguous(), dout.contiguous()
    delta = lesson06.backward_delta(out, dout)
    dq = torch.zeros(q.shape, device=q.device, dtype=torch.float32)
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    descs = [descriptor(t.view(B * H, N, D), [1, 16, D]) for t in (q, k, v, dout, dk, dv)]
    grid = lambda meta: (triton.cdiv(N, meta["BLOCK_N"]), B * H)  # noqa: E731
    attention_backward_kernel[grid](*descs, dq, lse, delta, N, sm_scale * lesson06.LOG2E.value, sm_scale,
                                    HEAD_DIM=D, CAUSAL=causal)
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
    """What `make bench` times for this lesson (GPU only): matmul, attention forward, RMSNorm + linear,
    the long-row softmax, each beside lessons 04 to 06's kernels and the vendor libraries."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend

    from helpers.bench import Bench

    lesson04 = load_solution("04")
    for n in (1024, 2048, 4096, 8192):
        a = torch.randn(n, n, device="cuda", dtype=torch.float16)
        b = torch.randn(n, n, device="cuda", dtype=torch.float16)
        yield Bench("hopper_matmul_fp16", n, bytes=3 * 2 * n * n, flops=2 * n**3, label=f"{n}^3",
                    metric="TFLOP/s", graph=True,
                    impls={"lesson 10: matmul": lambda a=a, b=b: matmul(a, b),
                           "exercise 1: tma_matmul": lambda a=a, b=b: tma_matmul(a, b),
                           "exercise 2: persistent_matmul": lambda a=a, b=b: persistent_matmul(a, b),
                           "lesson 04: matmul": lambda a=a, b=b: lesson04.matmul(a, b),
                           "cuBLAS": lambda a=a, b=b: a @ b})
        del a, b

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

    pair = lambda x, g, w: F.linear(F.rms_norm(x, (x.shape[1],), g, 1e-6), w)  # noqa: E731
    compiled_pair = torch.compile(pair, dynamic=False)
    for M, K, N in ((8192, 4096, 4096), (8192, 4096, 1024)):
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        g = (1 + 0.1 * torch.randn(K, device="cuda")).to(torch.bfloat16)
        w = (torch.randn(N, K, device="cuda") / K**0.5).to(torch.bfloat16)
        wf = fold_gamma(w, g)                               # once, when the weights are loaded
        # Timed as graph replays: each call of rmsnorm_linear builds three descriptors and makes two
        # launches from Python, and launched from Python that host work (which varies from process to
        # process) showed in the timing of a 0.1 ms pair of kernels.
        yield Bench("hopper_rmsnorm_linear_bf16", N, bytes=2 * (M * K + N * K + M * N), flops=2 * M * N * K,
                    label=f"M{M} K{K} N{N}", metric="TFLOP/s", graph=True,
                    impls={"lesson 10: rmsnorm_linear": lambda x=x, wf=wf: rmsnorm_linear(x, wf),
                           "lesson 05: same algebra, lesson 04-style matmul":
                               lambda x=x, wf=wf: lesson05.rmsnorm_linear_epilogue(x, wf),
                           "F.rms_norm + cuBLAS": lambda x=x, g=g, w=w: pair(x, g, w),
                           "torch.compile(both)": lambda x=x, g=g, w=w: compiled_pair(x, g, w)})
        del x, w, wf

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


# ---------------------------------------------------------------- recorded for the notebook (GPU)

# What to look for in Hopper code: TMA copies, wgmma, and the barriers that pace the pipeline.
LOOK_FOR_HOPPER = {"ttgir": ("async_tma_copy_global_to_local", "warp_group_dot", "warp_specialize"),
                   "ptx": ("cp.async.bulk.tensor", "wgmma.mma_async", "mbarrier.try_wait", "ld.global")}
RECORDED = "10_hopper"      # helpers/recorded/10_hopper/<gpu>.json


def _describe_config(config):
    kw = config.kwargs
    extra = ", warp-specialised" if kw.get("WARP_SPECIALIZE") else ""
    extra += ", flattened" if kw.get("FLATTEN") else ""
    return f"{kw['BLOCK_M']}x{kw['BLOCK_N']}, {config.num_warps} warps, {config.num_stages} stages{extra}"


def _warp_specialize_survey():
    """Which warp-specialised configurations this Triton compiles on this GPU."""
    rows = []
    for D in (64, 128):
        for causal in (False, True):
            args = dict(_attention_descriptors(1, 1024, D), lse_ptr=torch.empty(1024, device="cuda"),
                        n_ctx=1024, qk_scale=1.0, HEAD_DIM=D, CAUSAL=causal)
            for config in (c for c in ATTENTION_CONFIGS if c.kwargs["WARP_SPECIALIZE"]):
                rows.append(_try_compile(attention_kernel, args, config, head_dim=D, causal=causal))
    a = torch.empty(1024, 1024, device="cuda", dtype=torch.float16)
    for config in (c for c in MATMUL_CONFIGS if c.kwargs["WARP_SPECIALIZE"]):
        for scale in (False, True):
            args = dict(a_desc=descriptor(a, [16, 16]), b_desc=descriptor(a, [16, 16]),
                        c_desc=descriptor(a, [16, 16]), s_ptr=a, M=1024, N=1024, K=1024, B_NK=False,
                        HAS_SCALE=scale)
            rows.append(_try_compile(matmul_kernel, args, config, head_dim=None, causal=None))
    return rows


def _attention_descriptors(heads, n, d, names=("q_desc", "k_desc", "v_desc", "o_desc")):
    """Descriptor arguments of an attention kernel, over fresh (heads, n, d) float16 tensors."""
    return {name: descriptor(torch.empty(heads, n, d, device="cuda", dtype=torch.float16), [1, 16, d])
            for name in names}


def _try_compile(kernel, args, config, **what):
    config.pre_hook({**args, **config.all_kwargs()})    # the descriptors' boxes for this configuration
    try:
        kernel.fn.warmup(**args, **config.all_kwargs(), grid=(1,))
        ok, error = True, ""
    except RuntimeError as e:
        ok, error = False, str(e).splitlines()[0][:200]
    return {"kernel": kernel.fn.__name__, **what, "config": _describe_config(config), "compiles": ok,
            "error": error}


# How the autotuner may time its candidates: the lesson's way last.
STABILITY_TIMINGS = {
    "launched from Python": None,   # the autotuner's default: do_bench on launches from Python
    "graph replays back to back":   # Triton's do_bench_cudagraph: no L2 flush, no gap between replays
        lambda kernel_call, quantiles: triton.testing.do_bench_cudagraph(kernel_call, rep=100,
                                                                         quantiles=quantiles),
    "graph replays, L2 flushed": _graph_timed,
}


def _stability_probe(timing):
    """In a fresh process: autotune `matmul` at 1024^3, 2048^3 and 4096^3, candidates timed one way (a key
    of STABILITY_TIMINGS); print JSON."""
    import json

    global matmul_kernel
    matmul_kernel = triton.autotune(configs=MATMUL_CONFIGS, key=["M", "N", "K", "B_NK", "HAS_SCALE"],
                                    prune_configs_by={"early_config_prune": _tiles_for_the_shape},
                                    do_bench=STABILITY_TIMINGS[timing])(matmul_kernel.fn)
    rows = []
    for n in (1024, 2048, 4096):
        a = torch.randn(n, n, device="cuda", dtype=torch.float16)
        b = torch.randn(n, n, device="cuda", dtype=torch.float16)
        ms, cublas_ms = measure(lambda: matmul(a, b), graph=True), measure(lambda: a @ b, graph=True)
        rows.append({"shape": f"{n}^3", "timing": timing,
                     "config": _describe_config(matmul_kernel.best_config), "tflops": 2 * n**3 / ms / 1e9,
                     "cublas_tflops": 2 * n**3 / cublas_ms / 1e9})
    print(json.dumps(rows))


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


def record_artifacts(folder):
    """On a GPU (called by `make bench`): compiled-code excerpts, which warp-specialised configurations
    compile, the autotuner's choice in three fresh processes, and Nsight Compute's metrics of
    `ncu_targets()`, into folder/10_hopper/<gpu>.json."""
    import json
    import pathlib
    import subprocess
    import sys
    import tempfile

    from helpers import profile
    from helpers.bench import ROOT
    from helpers.compiled import compiled_excerpt

    n = 4096
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    c = torch.empty_like(a)
    config = _matmul_config(128, 256, 8, 3)
    args = dict(a_desc=descriptor(a, [16, 16]), b_desc=descriptor(a, [16, 16]),
                c_desc=descriptor(c, [16, 16]), s_ptr=None, M=n, N=n, K=n, B_NK=False, HAS_SCALE=False)
    config.pre_hook({**args, **config.all_kwargs()})
    compiled = {"matmul_kernel": (f"# matmul_kernel, {_describe_config(config)}, float16\n" +
                                  compiled_excerpt(matmul_kernel.fn[(SMS,)](**args, **config.all_kwargs()),
                                                   LOOK_FOR_HOPPER))}
    config = _attention_config(128, 64, 4, 2)
    args = dict(_attention_descriptors(16, 4096, 128), lse_ptr=torch.empty(16, 4096, device="cuda"),
                n_ctx=4096, qk_scale=0.1, HEAD_DIM=128, CAUSAL=False)
    config.pre_hook({**args, **config.all_kwargs()})
    kernel = attention_kernel.fn[(32, 16)](**args, **config.all_kwargs())
    compiled["attention_kernel"] = (f"# attention_kernel, D=128, {_describe_config(config)}, float16\n" +
                                    compiled_excerpt(kernel, LOOK_FOR_HOPPER))
    config = _backward_config(64, 128, 8, 3)
    names = ("q_desc", "k_desc", "v_desc", "do_desc", "dk_desc", "dv_desc")
    zeros = lambda *shape: torch.zeros(*shape, device="cuda")  # noqa: E731
    args = dict(_attention_descriptors(16, 4096, 128, names), dq_ptr=zeros(16, 4096, 128),
                lse_ptr=zeros(16, 4096), delta_ptr=zeros(16, 4096), n_ctx=4096, qk_scale=0.1, sm_scale=0.1,
                HEAD_DIM=128, CAUSAL=True)
    config.pre_hook({**args, **config.all_kwargs()})
    kernel = attention_backward_kernel.fn[(32, 16)](**args, **config.all_kwargs())
    compiled["attention_backward_kernel"] = (
        f"# attention_backward_kernel, D=128, causal, {_describe_config(config)}, float16\n" +
        compiled_excerpt(kernel, {"ptx": ("cp.async.bulk.tensor", "wgmma.mma_async", "atom.global",
                                          "red.global")}))
    stability = []
    for timing in STABILITY_TIMINGS:
        for process in (1, 2, 3):
            code = ("from helpers.solutions import load_solution; "
                    f"load_solution('10')._stability_probe({timing!r})")
            out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                                 check=True).stdout
            stability += [{**row, "process": process} for row in json.loads(out.strip().splitlines()[-1])]
    with tempfile.TemporaryDirectory() as scratch:       # where ncu writes its report, then reads it
        ncu = profile.ncu_profile("10", pathlib.Path(scratch))[0]
    record = {**profile.stamp(), "compiled": compiled, "warp_specialize": _warp_specialize_survey(),
              "autotune_stability": stability, "ncu": ncu}
    out = folder / RECORDED / (profile.slug(torch.cuda.get_device_name()) + ".json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1))


def recorded_hopper():
    """{GPU name: what record_artifacts recorded on it}: {} where nothing is recorded yet."""
    import json

    from helpers.bench import ROOT

    found = {}
    for path in sorted((ROOT / "helpers" / "recorded" / RECORDED).glob("*.json")):
        data = json.loads(path.read_text())
        found[data["device"]] = data
    return found
