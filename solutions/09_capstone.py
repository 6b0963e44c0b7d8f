"""Lesson 09 solutions: the decoder block of helpers/block.py, built from the course's kernels.

New kernels, each a launcher (check shapes, allocate, launch) beside a PyTorch reference:

    linear           scale[:, None] * (h @ w.T) + residual: a persistent matmul fed by tensor
                     descriptors (TMA on Hopper), the row scale and the residual add in its epilogue
    swiglu_linear    SiLU(h @ w_gate.T) * (h @ w_up.T): one matmul, the product in the epilogue
    rope_qk          RoPE on Q and K in one launch, read from any strides, written contiguous
    causal_attention lesson 06's causal FlashAttention through tensor descriptors: reads Q, K, V in
                     any layout with contiguous rows, writes the heads side by side
    groupnorm_mish   GroupNorm then Mish, one program per (sample, group), read in (channels x
                     positions) tiles: not in the block, the same two-pass reduction on a
                     convolutional layer's activations (groupnorm_mish_split: for few groups)

and `decoder_block_fused`, the block from these and lesson 05's kernels (RMSNorm, and 1/rms per row
for the norm folded into the next matmul).
Weights are in nn.Linear's (out, in) layout throughout; `pack_weights` concatenates them once.
"""

import functools
import itertools

import torch
import torch.nn.functional as F

import helpers  # noqa: F401  (first: picks the GPU or the interpreter)
import triton
import triton.language as tl

from helpers.block import BlockConfig, rope, rope_tables
from helpers.device import DEVICE, ON_GPU, pick
from helpers.solutions import load_solution

lesson04 = load_solution("04")   # the simple matmul, timed beside this lesson's in make bench
lesson05 = load_solution("05")   # inv_rms and rms_norm_rows
lesson06 = load_solution("06")   # flash_forward_causal


# ---------------------------------------------------------------- 1. the block's matmuls, persistent, TMA-fed

# Lesson 04's mainloop computes an address and a mask for every element of every tile, and runs one
# program per output tile. At the block's shapes it falls well short of cuBLAS (make bench, group
# block_matmuls_fp16). Two changes close the gap, both plain Triton:
#
# * Tensor descriptors. tl.make_tensor_descriptor describes a 2-D tensor once: its base, shape,
#   strides and the tile shape to move. desc.load([row, col]) then fetches a whole tile, and on a
#   Hopper GPU one TMA instruction does it (the chip's tensor memory accelerator): no address
#   arithmetic in the program, no masks. Rows and columns past the tensor's edge read as zeros, and
#   a store drops them. The price: the innermost dimension must be contiguous, and the other strides
#   and the base multiples of 16 bytes.
# * Persistent programs. One program per SM, each walking the tiles tile, tile + P, tile + 2P, ...
#   (P programs). tl.range(..., flatten=True) lets the compiler pipeline across tiles: the next tile's
#   first loads are in flight while this tile's epilogue runs.
#
# linear_tile is the mainloop; each kernel below is the persistent walk plus its own epilogue.


def _descriptor_scratch(size, alignment, stream):
    """Global memory in which kernels build their tensor descriptors on a GPU (128 bytes each)."""
    return torch.empty(size, device=DEVICE, dtype=torch.int8)


triton.set_allocator(_descriptor_scratch)


def _linear_config(bm, bn, warps, stages, **loop):
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 64, "GROUP_M": 8, **loop},
                         num_warps=warps, num_stages=stages)


# On a GPU: 128 x 256 tiles and 3 stages were the fastest at most of the block's prefill shapes on an
# H100; the smaller tiles are for few rows (decoding), where more tiles keep more SMs reading weights.
# Each tile: (BLOCK_M, BLOCK_N, warps, stages).
LINEAR_TILES = pick(cpu=[(64, 64, 4, 1)],
                    gpu=[(128, 256, 8, 3), (256, 128, 8, 3), (128, 128, 8, 4), (128, 128, 4, 4),
                         (64, 128, 4, 4), (64, 64, 4, 4)])
LINEAR_CONFIGS = [_linear_config(*tile) for tile in LINEAR_TILES]
# linear_kernel's epilogue may read a residual tile, and that tile needs shared memory too. With
# flatten=True (the next tile's loads in flight during the epilogue) a 128 x 256 tile and its
# residual no longer fit an H100's 227 KB, and the autotuner fell back to 128 x 128 tiles, about 10%
# slower. Two more configurations for it, without flatten: 256 x 128, and 128 x 256 with warp
# specialisation (some warps only issue the loads, the others only compute; Triton's tl.range
# option), which on an H100 recovered what flatten's overlap bought.
EPILOGUE_CONFIGS = ([_linear_config(*tile, FLATTEN=True, WARP_SPECIALIZE=False) for tile in LINEAR_TILES]
                    + pick(cpu=[], gpu=[_linear_config(256, 128, 8, 3, FLATTEN=False, WARP_SPECIALIZE=False),
                                        _linear_config(128, 256, 8, 3, FLATTEN=False, WARP_SPECIALIZE=True)]))
# Programs in flight: one per SM on a GPU; on the CPU two, so that each walks several tiles.
PROGRAMS = pick(cpu=2, gpu=torch.cuda.get_device_properties(DEVICE).multi_processor_count if ON_GPU else 0)


def _persistent_grid(M, N):
    """As many programs as PROGRAMS, or as tiles if there are fewer."""
    return lambda meta: (min(PROGRAMS, triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])),)


def _check_tma(**tensors):
    """Tensor descriptors need rows of contiguous values, and 16-byte aligned row strides and bases."""
    for name, t in tensors.items():
        assert t.dim() == 2 and t.stride(1) == 1, f"{name}: a 2-D tensor with contiguous rows, stride(1) == 1"
        assert (t.stride(0) * t.element_size()) % 16 == 0 and t.data_ptr() % 16 == 0, \
            (f"{name}: its row stride ({t.stride(0)} values of {t.element_size()} bytes) and its start "
             f"must be multiples of 16 bytes for a tensor descriptor; copy it into a wider, aligned buffer")


@triton.jit
def tile_origin(tile, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """The first row and column of output tile number `tile`, in lesson 04's grouped order."""
    per_group = GROUP_M * tl.cdiv(N, BLOCK_N)
    first_m = (tile // per_group) * GROUP_M
    rows = min(tl.cdiv(M, BLOCK_M) - first_m, GROUP_M)
    return (first_m + (tile % per_group) % rows) * BLOCK_M, ((tile % per_group) // rows) * BLOCK_N


@triton.jit
def linear_tile(a_desc, w_desc, off_m, off_n, K,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """The mainloop: A[off_m:, :] @ W[off_n:, :].T for one BLOCK_M x BLOCK_N tile, summed in float32.
    W is (N, K), as nn.Linear stores it: its rows are the columns of the product."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = a_desc.load([off_m, k * BLOCK_K])          # (BLOCK_M, BLOCK_K); zeros past the edges
        w = w_desc.load([off_n, k * BLOCK_K])          # (BLOCK_N, BLOCK_K)
        acc = tl.dot(a, w.T, acc)
    return acc


@triton.autotune(configs=EPILOGUE_CONFIGS, key=["M", "N", "K", "HAS_SCALE", "HAS_RESIDUAL"])
@triton.jit
def linear_kernel(h_ptr, w_ptr, s_ptr, r_ptr, out_ptr, M, N, K, stride_h, stride_w, stride_r,
                  HAS_SCALE: tl.constexpr, HAS_RESIDUAL: tl.constexpr, BLOCK_M: tl.constexpr,
                  BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                  FLATTEN: tl.constexpr, WARP_SPECIALIZE: tl.constexpr):
    """out = s[:, None] * (h @ w.T) + r, the scale and the residual optional; h (M, K), w (N, K), r and
    out (M, N), out contiguous; the stride_ arguments are the others' row strides."""
    h_desc = tl.make_tensor_descriptor(h_ptr, shape=[M, K], strides=[stride_h, 1],
                                       block_shape=[BLOCK_M, BLOCK_K])
    w_desc = tl.make_tensor_descriptor(w_ptr, shape=[N, K], strides=[stride_w, 1],
                                       block_shape=[BLOCK_N, BLOCK_K])
    out_desc = tl.make_tensor_descriptor(out_ptr, shape=[M, N], strides=[N, 1],
                                         block_shape=[BLOCK_M, BLOCK_N])
    if HAS_RESIDUAL:
        r_desc = tl.make_tensor_descriptor(r_ptr, shape=[M, N], strides=[stride_r, 1],
                                           block_shape=[BLOCK_M, BLOCK_N])
    n_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for tile in tl.range(tl.program_id(0), n_tiles, tl.num_programs(0), flatten=FLATTEN,
                         warp_specialize=WARP_SPECIALIZE):
        off_m, off_n = tile_origin(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = linear_tile(h_desc, w_desc, off_m, off_n, K, BLOCK_M, BLOCK_N, BLOCK_K)
        if HAS_SCALE:                                   # one float32 per row: RMSNorm's 1 / rms
            rows = off_m + tl.arange(0, BLOCK_M)
            acc = acc * tl.load(s_ptr + rows, mask=rows < M, other=0.0)[:, None]
        if HAS_RESIDUAL:                                # read once, added in float32
            acc = acc + r_desc.load([off_m, off_n]).to(tl.float32)
        out_desc.store([off_m, off_n], acc.to(out_desc.dtype))


def linear_reference(h, w, scale=None, residual=None):
    out = h @ w.T
    if scale is not None:
        out = scale[:, None] * out
    return out if residual is None else out + residual


def linear(h, w, scale=None, residual=None):
    """scale[:, None] * (h @ w.T) + residual in one kernel, scale and residual optional.

    h (M, K); w (N, K) as nn.Linear stores it; scale (M,) float32; residual (M, N) in h's dtype.
    Every matrix needs contiguous, 16-byte aligned rows (tensor descriptors read them)."""
    assert h.dim() == w.dim() == 2 and h.shape[1] == w.shape[1], "h (M, K) and w (N, K)"
    assert w.dtype == h.dtype, "h and w must share a dtype"
    M, K = h.shape
    N = w.shape[0]
    if scale is not None:
        assert scale.shape == (M,) and scale.dtype == torch.float32 and scale.stride(0) == 1, \
            "scale: (M,) float32, contiguous: one factor per row"
    out = torch.empty((M, N), device=h.device, dtype=h.dtype)
    _check_tma(h=h, w=w, out=out, **({} if residual is None else {"residual": residual}))
    if residual is not None:
        assert residual.shape == (M, N) and residual.dtype == h.dtype, "residual: (M, N), in h's dtype"
    linear_kernel[_persistent_grid(M, N)](h, w, scale, residual, out, M, N, K, h.stride(0), w.stride(0),
                                          0 if residual is None else residual.stride(0),
                                          HAS_SCALE=scale is not None, HAS_RESIDUAL=residual is not None)
    return out


# ---------------------------------------------------------------- 2. SwiGLU: gate and up in one matmul

# Layout: the rows of w_gate and w_up interleaved, one by one: row 2j of w_gate_up is w_gate's row j,
# row 2j + 1 is w_up's. Then any tile of the product h @ w_gate_up.T holds matching gate and up
# columns side by side, whatever BLOCK_N the autotuner picks, and the mainloop computes it unchanged:
# one A tile, one B tile, one accumulator per K step. The epilogue splits the tile's columns into
# (even, odd) = (gate, up). Measured on an H100 against two alternatives (same mainloop):
#   * two accumulators of BLOCK_N / 2 columns, from two descriptors (gate rows, up rows): slower
#     at every shape, and a mainloop of its own;
#   * interleaving in blocks of BLOCK_N / 2 rows: as fast at best, but the packed weights are then
#     tied to one tile width, which the autotuner could no longer choose.


def pack_gate_up(w_gate, w_up):
    """(2f, d): w_gate's and w_up's rows interleaved, row 2j gate, row 2j + 1 up. Done once."""
    assert w_gate.shape == w_up.shape and w_gate.dim() == 2, "w_gate and w_up: both (f, d)"
    return torch.stack((w_gate, w_up), dim=1).reshape(2 * w_gate.shape[0], w_gate.shape[1])


def swiglu_linear_reference(h, w_gate_up):
    """SiLU(h @ w_gate.T) * (h @ w_up.T), with w_gate and w_up read back from the interleaved rows."""
    return F.silu(h @ w_gate_up[0::2].T) * (h @ w_gate_up[1::2].T)


@triton.autotune(configs=LINEAR_CONFIGS, key=["M", "N", "K"])
@triton.jit
def swiglu_linear_kernel(h_ptr, w_ptr, out_ptr, M, N, K, stride_h, stride_w, BLOCK_M: tl.constexpr,
                         BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """Tiles of h @ w_gate_up.T (N = 2f interleaved columns), each stored as BLOCK_N / 2 columns of
    SiLU(gate) * up; out (M, N / 2) contiguous."""
    h_desc = tl.make_tensor_descriptor(h_ptr, shape=[M, K], strides=[stride_h, 1],
                                       block_shape=[BLOCK_M, BLOCK_K])
    w_desc = tl.make_tensor_descriptor(w_ptr, shape=[N, K], strides=[stride_w, 1],
                                       block_shape=[BLOCK_N, BLOCK_K])
    out_desc = tl.make_tensor_descriptor(out_ptr, shape=[M, N // 2], strides=[N // 2, 1],
                                         block_shape=[BLOCK_M, BLOCK_N // 2])
    n_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for tile in tl.range(tl.program_id(0), n_tiles, tl.num_programs(0), flatten=True):
        off_m, off_n = tile_origin(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = linear_tile(h_desc, w_desc, off_m, off_n, K, BLOCK_M, BLOCK_N, BLOCK_K)
        gate, up = tl.split(tl.reshape(acc, (BLOCK_M, BLOCK_N // 2, 2)))   # even columns, odd columns
        y = gate * tl.sigmoid(gate) * up                                    # float32, in registers
        out_desc.store([off_m, off_n // 2], y.to(out_desc.dtype))


def swiglu_linear(h, w_gate_up):
    """SiLU(h @ w_gate.T) * (h @ w_up.T) in one kernel; h (M, d), w_gate_up (2f, d) from pack_gate_up."""
    assert h.dim() == w_gate_up.dim() == 2 and h.shape[1] == w_gate_up.shape[1], "h (M, d), w_gate_up (2f, d)"
    assert w_gate_up.shape[0] % 2 == 0, "w_gate_up has two rows per output column: gate, up"
    assert w_gate_up.dtype == h.dtype, "h and w_gate_up must share a dtype"
    M, K = h.shape
    N = w_gate_up.shape[0]
    out = torch.empty((M, N // 2), device=h.device, dtype=h.dtype)
    _check_tma(h=h, w_gate_up=w_gate_up, out=out)
    swiglu_linear_kernel[_persistent_grid(M, N)](h, w_gate_up, out, M, N, K, h.stride(0), w_gate_up.stride(0))
    return out


# ---------------------------------------------------------------- 3. RoPE on Q and K, one launch


def rope_qk_reference(q, k, cos, sin):
    return rope(q, cos, sin), rope(k, cos, sin)


@triton.jit
def rotate_tile(src_ptr, dst_ptr, s_pos, s_dim, offs_pos, offs_half, half, cos, sin, mask):
    """Rotate the (first half, second half) pairs of BLOCK_POS rows of one head; write them contiguous."""
    first = src_ptr + offs_pos[:, None] * s_pos + offs_half[None, :] * s_dim
    x1 = tl.load(first, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(first + half * s_dim, mask=mask, other=0.0).to(tl.float32)
    out = dst_ptr + offs_pos[:, None] * (2 * half) + offs_half[None, :]    # rows of 2 * half = D values
    tl.store(out, (x1 * cos - x2 * sin).to(dst_ptr.dtype.element_ty), mask=mask)
    tl.store(out + half, (x1 * sin + x2 * cos).to(dst_ptr.dtype.element_ty), mask=mask)


@triton.jit
def rope_qk_kernel(q_ptr, k_ptr, cos_ptr, sin_ptr, qo_ptr, ko_ptr, n_heads, seq, half,
                   sq_b, sq_h, sq_n, sq_d, sk_b, sk_h, sk_n, sk_d, s_cos, s_sin,
                   BLOCK_POS: tl.constexpr, BLOCK_HALF: tl.constexpr):
    """BLOCK_POS positions of one (batch, head), of Q and of K: cos and sin are loaded once for both."""
    offs_pos = tl.program_id(0) * BLOCK_POS + tl.arange(0, BLOCK_POS)
    bh = tl.program_id(1)
    b, h = (bh // n_heads).to(tl.int64), (bh % n_heads).to(tl.int64)   # int64: b * sq_b may pass 2^31
    offs_half = tl.arange(0, BLOCK_HALF)
    mask = (offs_pos[:, None] < seq) & (offs_half[None, :] < half)
    cos = tl.load(cos_ptr + offs_pos[:, None] * s_cos + offs_half[None, :], mask=mask, other=0.0)
    sin = tl.load(sin_ptr + offs_pos[:, None] * s_sin + offs_half[None, :], mask=mask, other=0.0)
    out_head = bh.to(tl.int64) * seq * 2 * half                          # outputs: (B, H, N, D) contiguous
    rotate_tile(q_ptr + b * sq_b + h * sq_h, qo_ptr + out_head, sq_n, sq_d, offs_pos, offs_half, half,
                cos, sin, mask)
    rotate_tile(k_ptr + b * sk_b + h * sk_h, ko_ptr + out_head, sk_n, sk_d, offs_pos, offs_half, half,
                cos, sin, mask)


def rope_qk(q, k, cos, sin):
    """RoPE (half-split pairs) on q and k, (B, H, N, D) of any strides: (q_rot, k_rot), both contiguous.

    cos, sin: (N, D / 2) float32, as helpers.block.rope_tables gives them. The arithmetic is float32.
    Lesson 06's FlashAttention reads contiguous (B, H, N, D) tensors: writing that layout, the rotation
    also does the copy that the projection's views would otherwise need.
    """
    assert q.dim() == 4 and q.shape == k.shape and q.dtype == k.dtype, "q and k: (B, H, N, D), one dtype"
    B, H, N, D = q.shape
    assert D % 2 == 0 and cos.shape == sin.shape == (N, D // 2), "cos and sin: (N, D / 2), D even"
    assert cos.stride(1) == sin.stride(1) == 1, "cos and sin: rows of contiguous values"
    q_rot = torch.empty((B, H, N, D), device=q.device, dtype=q.dtype)
    k_rot = torch.empty((B, H, N, D), device=q.device, dtype=q.dtype)
    BLOCK_POS = pick(cpu=16, gpu=64)
    grid = (triton.cdiv(N, BLOCK_POS), B * H)
    rope_qk_kernel[grid](q, k, cos, sin, q_rot, k_rot, H, N, D // 2, *q.stride(), *k.stride(),
                         cos.stride(0), sin.stride(0), BLOCK_POS=BLOCK_POS,
                         BLOCK_HALF=triton.next_power_of_2(D // 2), num_warps=4)
    return q_rot, k_rot


# ---------------------------------------------------------------- 4. attention on the projection's layout

# Q, K and V are column slices of the Q|K|V matmul's (T, 3d) output: (B, H, N, D) views whose rows
# are 3d values apart. Lesson 06's kernel reads contiguous (B, H, N, D) tensors and writes one, so
# the block around it needed two copies: V into that layout, and the output back to (T, d) for the
# output projection. This kernel is lesson 06's causal forward with its loads and its store through
# tensor descriptors, one per (batch, head) slice: a descriptor takes the slice's row stride, so any
# layout with contiguous rows reads in place, and the output is written as (B, N, H, D), which is the
# (T, d) matrix the output projection reads. Rows past the sequence read as zeros and are not stored.


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


@triton.autotune(configs=lesson06.FWD_CONFIGS, key=["n_ctx", "HEAD_DIM"], prune_configs_by=lesson06.PRUNE)
@triton.jit
def causal_attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, n_ctx, n_heads, qk_scale,
                            sq_b, sq_h, sq_n, sk_b, sk_h, sk_n, sv_b, sv_h, sv_n, so_b, so_h, so_n,
                            HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """One program: BLOCK_M query rows of one (batch, head), as lesson 06's flash_fwd_causal_kernel."""
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


def causal_attention(q, k, v):
    """Causal attention of q, k, v, (B, H, N, D) of any strides whose rows are contiguous and 16-byte
    aligned (the projection's column slices are): the output as (B, N, H, D), contiguous.

    That is the heads side by side, as the output projection reads them: out.view(B * N, H * D)."""
    assert q.dim() == 4 and q.shape == k.shape == v.shape, "q, k, v must all be (B, H, N, D)"
    assert q.dtype == k.dtype == v.dtype, "q, k, v must share a dtype"
    B, H, N, D = q.shape
    assert D in (16, 32, 64, 128), "head dimension must be 16, 32, 64 or 128"
    for name, t in (("q", q), ("k", k), ("v", v)):
        assert t.stride(3) == 1, f"{name}: each row of D values must be contiguous (stride(3) == 1)"
        assert all((s * t.element_size()) % 16 == 0 for s in t.stride()[:3]) and t.data_ptr() % 16 == 0, \
            f"{name}: its strides {t.stride()[:3]} and start must be multiples of 16 bytes (descriptors)"
    out = torch.empty((B, N, H, D), device=q.device, dtype=q.dtype)
    o = out.transpose(1, 2)                                # the (B, H, N, D) view the kernel writes through
    grid = lambda meta: (triton.cdiv(N, meta["BLOCK_M"]), B * H)  # noqa: E731
    causal_attention_kernel[grid](q, k, v, o, N, H, D ** -0.5 * lesson06.LOG2E.value,
                                  *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *o.stride()[:3],
                                  HEAD_DIM=D)
    return out


# ---------------------------------------------------------------- 5. GroupNorm + Mish

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
        sms = pick(cpu=4, gpu=PROGRAMS)                       # PROGRAMS: the GPU's SM count
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


# ---------------------------------------------------------------- 6. the decoder block


def pack_weights(w, cfg: BlockConfig):
    """The block's weights as decoder_block_fused reads them, packed once (this copies the matrices):

    wqkv:      wq, wk, wv stacked, (3d, d), with the attention norm's gamma folded into its columns:
               rms_norm(x) * gamma @ W.T = (1 / rms(x))[:, None] * (x @ (W * gamma).T), so one matmul
               with a row scale in its epilogue makes the normalised Q, K and V
    w_gate_up: w_gate's and w_up's rows interleaved, (2f, d): pack_gate_up
    the others as they are, every matrix contiguous and (out, in).
    """
    assert w["wq"].shape == (cfg.dim, cfg.dim) and w["w_gate"].shape == (cfg.hidden, cfg.dim), \
        "weights of another BlockConfig"
    wqkv = torch.cat((w["wq"], w["wk"], w["wv"]), dim=0)
    return {"wqkv": (wqkv * w["attn_norm"].to(wqkv.dtype)[None, :]).contiguous(),
            "wo": w["wo"].contiguous(), "mlp_norm": w["mlp_norm"].contiguous(),
            "w_gate_up": pack_gate_up(w["w_gate"], w["w_up"]), "w_down": w["w_down"].contiguous()}


@functools.lru_cache(maxsize=16)
def _rope_tables(cfg, seq, device):
    """rope_tables, computed once per (config, length, device): the forward launches no kernel for them."""
    return rope_tables(cfg, seq, device)


def decoder_block_fused(x, w, cfg: BlockConfig):
    """helpers.block.decoder_block(x, w, cfg, attention="sdpa"), from the course's kernels.

    x: (batch, seq, dim). w: pack_weights(...)'s dict (given block_weights' dict instead, it is packed
    on every call). Launches 8 Triton kernels, in order, and no copy:
      1. lesson 05's inv_rms: 1 / rms of each row of x                     -> (T,) float32
      2. linear with that row scale: the Q|K|V matmul, gamma folded in     -> (T, 3d)
      3. rope_qk: Q and K rotated, from views of (2)                        -> 2 x (B, H, N, D)
      4. causal_attention: V read in place from (2), the heads side by side -> (T, d)
      5. linear with a residual: x + attention @ wo.T                       -> (T, d)
      6. lesson 05's rms_norm_rows                                          -> (T, d)
      7. swiglu_linear                                                      -> (T, f)
      8. linear with a residual: (5) + mlp @ w_down.T                       -> (T, d)
    Each intermediate is dropped (del) as soon as the next step has read it: the caching allocator
    then reuses its memory, which keeps the forward's peak memory low.
    """
    if "wqkv" not in w:
        w = pack_weights(w, cfg)
    B, N, d = x.shape
    H, D = cfg.n_heads, cfg.head_dim
    x2 = x.reshape(B * N, d)
    qkv = linear(x2, w["wqkv"], scale=lesson05.inv_rms(x2, cfg.eps))              # 1, 2
    q, k, v = (qkv[:, i * d:(i + 1) * d].view(B, N, H, D).transpose(1, 2) for i in range(3))
    cos, sin = _rope_tables(cfg, N, x.device)
    q, k = rope_qk(q, k, cos, sin)                                                 # 3
    a = causal_attention(q, k, v).view(B * N, d)                                   # 4
    del qkv, q, k, v
    x2 = linear(a, w["wo"], residual=x2)                                           # 5
    del a
    h = lesson05.rms_norm_rows(x2, w["mlp_norm"], cfg.eps)                         # 6
    mlp = swiglu_linear(h, w["w_gate_up"])                                         # 7
    del h
    return linear(mlp, w["w_down"], residual=x2).view(B, N, d)                     # 8


# ---------------------------------------------------------------- make bench (GPU)

BLOCK_SHAPES = ((1, 2048), (4, 2048), (1, 8192))   # (batch, sequence) of a prefill, at 7B width
DECODE_SHAPES = ((1, 16), (8, 16))                 # a few tokens: the step lesson 08 found launch-bound


def _block_impls(cfg, x, w, packed, compiled, autotuned=None):
    """The block's forward several ways, each a zero-argument callable."""
    from helpers.block import decoder_block

    impls = {"course kernels (lesson 09)": lambda: decoder_block_fused(x, packed, cfg),
             "eager + SDPA": lambda: decoder_block(x, w, cfg, attention="sdpa"),
             "torch.compile(eager + SDPA)": lambda: compiled(x, w, cfg, attention="sdpa")}
    if autotuned is not None:
        impls["torch.compile max-autotune"] = lambda: autotuned(x, w, cfg, attention="sdpa")
    return impls


def _block_benches(cfg, w, packed):
    """The block's forward: prefill shapes, then decoding shapes launched from Python and replayed as
    CUDA graphs (the same kernels, without the CPU's launches)."""
    from helpers.bench import Bench
    from helpers.block import block_flops, block_input, decoder_block

    compiled = torch.compile(decoder_block, dynamic=False)
    # max-autotune times Triton templates against cuBLAS for every matmul shape while compiling
    # (minutes per shape): timed at the first prefill shape only. Its CUDA graphs are left off so
    # that it is timed like the others.
    autotuned = torch.compile(decoder_block, dynamic=False, mode="max-autotune-no-cudagraphs")
    weights_bytes = sum(t.nbytes for t in w.values())
    for B, N in BLOCK_SHAPES:
        x = block_input(cfg, B, N, "cuda", torch.float16)
        yield Bench("block_forward_fp16", B * N, bytes=2 * x.nbytes + weights_bytes,
                    flops=block_flops(cfg, B, N), label=f"B{B} N{N}", metric="TFLOP/s",
                    impls=_block_impls(cfg, x, w, packed, compiled,
                                       autotuned if (B, N) == BLOCK_SHAPES[0] else None))
        del x
    for group, graph in (("block_decode_fp16", False), ("block_decode_graphed_fp16", True)):
        for B, N in DECODE_SHAPES:
            x = block_input(cfg, B, N, "cuda", torch.float16)
            yield Bench(group, B * N, bytes=2 * x.nbytes + weights_bytes, flops=block_flops(cfg, B, N),
                        label=f"B{B} N{N}", metric="GB/s", graph=graph,
                        impls=_block_impls(cfg, x, w, packed, compiled))
            del x


def benchmarks():
    """What `make bench` times for this lesson (GPU only): the block, its matmuls, the SwiGLU MLP,
    GroupNorm + Mish."""
    from helpers.bench import Bench
    from helpers.block import block_weights

    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    cfg = BlockConfig()
    w = block_weights(cfg, "cuda", torch.float16)
    packed = pack_weights(w, cfg)
    yield from _block_benches(cfg, w, packed)

    d, f = cfg.dim, cfg.hidden
    for T in (2048, 8192):   # the block's four matmuls: lesson 04's mainloop, this lesson's, cuBLAS
        for name, (N, K) in {"Q|K|V": (3 * d, d), "output": (d, d), "gate|up": (2 * f, d),
                             "down": (d, f)}.items():
            a = torch.randn(T, K, device="cuda", dtype=torch.float16)
            wt = torch.randn(N, K, device="cuda", dtype=torch.float16) / K**0.5
            yield Bench("block_matmuls_fp16", T * N * K, bytes=2 * (T * K + N * K + T * N),
                        flops=2 * T * N * K, label=f"{name} T{T}", metric="TFLOP/s", graph=True,
                        impls={"persistent, TMA (lesson 09)": lambda a=a, wt=wt: linear(a, wt),
                               "lesson 04's mainloop": lambda a=a, wt=wt: lesson04.matmul(a, wt.T),
                               "cuBLAS": lambda a=a, wt=wt: a @ wt.T})
            del a, wt

    swiglu_eager = lambda h, wg, wu: F.silu(h @ wg.T) * (h @ wu.T)  # noqa: E731
    swiglu_compiled = torch.compile(swiglu_eager, dynamic=False)
    wg, wu, wgu = w["w_gate"], w["w_up"], packed["w_gate_up"]
    w_cat = torch.cat((wg, wu), dim=0)

    def unfused(h):   # the same mainloop, then SiLU and the product as PyTorch kernels
        gate_up = linear(h, w_cat)
        return F.silu(gate_up[:, :f]) * gate_up[:, f:]

    for T in (2048, 4096, 16384):
        h = torch.randn(T, d, device="cuda", dtype=torch.float16)
        yield Bench("swiglu_fp16", T, bytes=2 * (T * d + 2 * f * d + T * f), flops=4 * T * d * f,
                    label=f"T{T} d{d} f{f}", metric="TFLOP/s", graph=True,
                    impls={"course: one matmul, SiLU*mul epilogue": lambda h=h: swiglu_linear(h, wgu),
                           "course matmul, then SiLU, mul": lambda h=h: unfused(h),
                           "eager: two matmuls, SiLU, mul": lambda h=h: swiglu_eager(h, wg, wu),
                           "torch.compile": lambda h=h: swiglu_compiled(h, wg, wu)})
        del h

    gn_eager = lambda x, g, wt, b: F.mish(F.group_norm(x, g, wt, b, 1e-5))  # noqa: E731
    gn_compiled = torch.compile(gn_eager, dynamic=False)
    # Kernels of 10 to 200 µs: timed launched from Python (what a U-Net in eager mode pays), and as
    # CUDA-graph replays (the GPU's time alone, as in a compiled or graphed model).
    shapes = ((8, 320, 64, 32), (8, 640, 32, 32), (2, 1280, 16, 32), (1, 128, 256, 32))
    timings = (("groupnorm_mish_fp16", False), ("groupnorm_mish_graphed_fp16", True))
    for (group, graph), (N, C, HW, G) in itertools.product(timings, shapes):
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


def record_artifacts(folder):
    """On a GPU (called by `make bench`): per forward of the block, for each implementation and shape,
    the peak memory, the kernels launched and the longest of them, into folder/09_block/<gpu>.json."""
    import json
    import pathlib
    import tempfile

    from helpers import profile
    from helpers.block import block_input, block_weights, decoder_block

    kernel_table = load_solution("08").kernel_table   # lesson 08: a trace's kernels grouped by name
    cfg = BlockConfig()
    w = block_weights(cfg, "cuda", torch.float16)
    packed = pack_weights(w, cfg)
    compiled = torch.compile(decoder_block, dynamic=False)
    rows = []
    for B, N in BLOCK_SHAPES + DECODE_SHAPES:
        x = block_input(cfg, B, N, "cuda", torch.float16)
        for name, fn in _block_impls(cfg, x, w, packed, compiled).items():
            fn()
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            fn()
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated() - base
            with tempfile.TemporaryDirectory() as tmp:
                trace = profile.save_trace(profile.profile_step(fn, warmup=1, memory=False),
                                           pathlib.Path(tmp) / "step.trace.json.gz")
            kernels = [{**k, "name": k["name"][:80]} for k in profile.kernel_events(trace)]
            longest = [[row["name"], round(row["total_us"], 1), row["calls"]]
                       for row in kernel_table(kernels)[:8]]
            rows.append({"label": f"B{B} N{N}", "impl": name, "peak_mib": round(peak / 2**20, 1),
                         "kernels": len(kernels), "longest_kernels": longest})
        del x
    out = folder / "09_block" / (profile.slug(torch.cuda.get_device_name()) + ".json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({**profile.stamp(), "rows": rows}, indent=1))
