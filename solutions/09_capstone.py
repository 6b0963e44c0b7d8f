"""Lesson 09 solutions: the decoder block of helpers/block.py, built from the course's kernels.

Four new kernels, each a launcher (check shapes, allocate, launch) beside a PyTorch reference:

    swiglu_linear    SiLU(h @ w_gate.T) * (h @ w_up.T): one matmul, the product in the epilogue
    linear_residual  residual + h @ w.T: the residual add in the epilogue
    rope_qk          RoPE on Q and K in one launch, read from any strides, written contiguous
    groupnorm_mish   GroupNorm then Mish, one program per (sample, group): not in the block, the
                     same two-pass reduction on a convolutional layer's activations

and `decoder_block_fused`, the block from these and the kernels of lessons 04 (the matmul
mainloop), 05 (RMSNorm, alone and folded into a matmul) and 06 (causal FlashAttention).
Weights are in nn.Linear's (out, in) layout throughout; `pack_weights` concatenates them once.
"""

import functools

import torch
import torch.nn.functional as F

import helpers  # noqa: F401  (first: picks the GPU or the interpreter)
import triton
import triton.language as tl

from helpers.block import BlockConfig, rope, rope_tables
from helpers.device import pick
from helpers.solutions import load_solution

lesson04 = load_solution("04")   # matmul_tile (the mainloop) and MATMUL_CONFIGS
lesson05 = load_solution("05")   # rms_norm_rows and rmsnorm_linear
lesson06 = load_solution("06")   # flash_forward_causal
matmul_tile = lesson04.matmul_tile


def _matmul_grid(M, N):
    """One program per BLOCK_M x BLOCK_N tile, in matmul_tile's grouped order."""
    return lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)


# ---------------------------------------------------------------- 1. SwiGLU: gate and up in one matmul

# Layout: the rows of w_gate and w_up interleaved, one by one: row 2j of w_gate_up is w_gate's row j,
# row 2j + 1 is w_up's. Then any tile of the product h @ w_gate_up.T holds matching gate and up
# columns side by side, whatever BLOCK_N the autotuner picks, and lesson 04's mainloop computes it
# unchanged: one A tile, one B tile, one accumulator per K step. The epilogue splits the tile's
# columns into (even, odd) = (gate, up). Two alternatives were weighed:
#   * interleaving in blocks of BLOCK_N rows ties the packed weights to one tile width, so the
#     autotuner could not change BLOCK_N without repacking;
#   * two accumulators over one A tile need a mainloop of their own (two loads of B, two dots),
#     a second copy of lesson 04's loop for the same number of FLOPs and registers.
# On a GPU each thread of a tensor-core accumulator holds pairs of neighbouring columns, so the
# (even, odd) split should stay in registers.


def pack_gate_up(w_gate, w_up):
    """(2f, d): w_gate's and w_up's rows interleaved, row 2j gate, row 2j + 1 up. Done once."""
    assert w_gate.shape == w_up.shape and w_gate.dim() == 2, "w_gate and w_up: both (f, d)"
    return torch.stack((w_gate, w_up), dim=1).reshape(2 * w_gate.shape[0], w_gate.shape[1])


def swiglu_linear_reference(h, w_gate_up):
    """SiLU(h @ w_gate.T) * (h @ w_up.T), with w_gate and w_up read back from the interleaved rows."""
    return F.silu(h @ w_gate_up[0::2].T) * (h @ w_gate_up[1::2].T)


@triton.autotune(configs=lesson04.MATMUL_CONFIGS, key=["M", "N", "K"])
@triton.jit
def swiglu_linear_kernel(h_ptr, w_ptr, out_ptr, M, N, K,
                         stride_hm, stride_hk, stride_wn, stride_wk, stride_om, stride_on,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                         GROUP_M: tl.constexpr):
    """One tile of h @ w_gate_up.T (N = 2f columns, interleaved), stored as BLOCK_N / 2 columns of
    SiLU(gate) * up."""
    acc, offs_m, offs_n = matmul_tile(h_ptr, w_ptr, M, N, K, stride_hm, stride_hk, stride_wk, stride_wn,
                                      BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M)   # w.T: (K, N) strides swapped
    gate, up = tl.split(tl.reshape(acc, (BLOCK_M, BLOCK_N // 2, 2)))    # even columns, odd columns
    cols = tl.split(tl.reshape(offs_n, (BLOCK_N // 2, 2)))[0] // 2      # output column of each pair
    y = gate * tl.sigmoid(gate) * up                                    # float32, in registers
    mask = (offs_m[:, None] < M) & (cols[None, :] < N // 2)
    tl.store(out_ptr + offs_m[:, None] * stride_om + cols[None, :] * stride_on,
             y.to(out_ptr.dtype.element_ty), mask=mask)


def swiglu_linear(h, w_gate_up):
    """SiLU(h @ w_gate.T) * (h @ w_up.T) in one kernel; h (M, d), w_gate_up (2f, d) from pack_gate_up."""
    assert h.dim() == w_gate_up.dim() == 2 and h.shape[1] == w_gate_up.shape[1], "h (M, d), w_gate_up (2f, d)"
    assert w_gate_up.shape[0] % 2 == 0, "w_gate_up has two rows per output column: gate, up"
    M, K = h.shape
    N = w_gate_up.shape[0]
    out = torch.empty((M, N // 2), device=h.device, dtype=h.dtype)
    swiglu_linear_kernel[_matmul_grid(M, N)](h, w_gate_up, out, M, N, K, h.stride(0), h.stride(1),
                                             w_gate_up.stride(0), w_gate_up.stride(1),
                                             out.stride(0), out.stride(1))
    return out


# ---------------------------------------------------------------- 2. the residual add in the epilogue


def linear_residual_reference(h, w, residual):
    return residual + h @ w.T


@triton.autotune(configs=lesson04.MATMUL_CONFIGS, key=["M", "N", "K"])
@triton.jit
def linear_residual_kernel(h_ptr, w_ptr, r_ptr, out_ptr, M, N, K,
                           stride_hm, stride_hk, stride_wn, stride_wk, stride_rm, stride_rn,
                           stride_om, stride_on,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                           GROUP_M: tl.constexpr):
    """One tile of residual + h @ w.T: the residual tile is read once, added in float32, stored once."""
    acc, offs_m, offs_n = matmul_tile(h_ptr, w_ptr, M, N, K, stride_hm, stride_hk, stride_wk, stride_wn,
                                      BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    r = tl.load(r_ptr + offs_m[:, None] * stride_rm + offs_n[None, :] * stride_rn, mask=mask, other=0.0)
    y = acc + r.to(tl.float32)
    tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :] * stride_on,
             y.to(out_ptr.dtype.element_ty), mask=mask)


def linear_residual(h, w, residual):
    """residual + h @ w.T in one kernel; h (M, K), w (N, K) as nn.Linear stores it, residual (M, N)."""
    assert h.dim() == w.dim() == 2 and h.shape[1] == w.shape[1], "h (M, K) and w (N, K)"
    assert residual.shape == (h.shape[0], w.shape[0]), "residual must be (M, N): one value per output"
    assert residual.dtype == h.dtype, "residual and h must share a dtype"
    M, K = h.shape
    N = w.shape[0]
    out = torch.empty((M, N), device=h.device, dtype=h.dtype)
    linear_residual_kernel[_matmul_grid(M, N)](h, w, residual, out, M, N, K, *h.stride(), *w.stride(),
                                               *residual.stride(), *out.stride())
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
    The outputs are contiguous because FlashAttention reads them that way: the rotation also does the
    (B, N, H, D) -> (B, H, N, D) copy that the projection's views would otherwise need.
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


# ---------------------------------------------------------------- 4. GroupNorm + Mish, one program per group

# One program reads its group twice: a statistics pass, then a pass that normalises, applies the
# affine and Mish, and stores. N * G programs must fill the GPU: with a batch of 1 and 32 groups of
# a 256 x 256 image (2 M values each), 32 programs would leave most of an H100's 132 SMs idle and
# each would stream megabytes alone. There a split reduction pays: a first kernel in which many
# programs per group write partial sums, a second that combines them and normalises, at the cost of
# a second launch and a few bytes per program. At the group sizes of typical convnets (and whenever
# N * G is a few hundred or more) one kernel is the better trade.


def groupnorm_mish_reference(x, num_groups, weight, bias, eps):
    return F.mish(F.group_norm(x, num_groups, weight, bias, eps))


@triton.jit
def _group_offsets(i, hw, width, s_c, s_h, s_w):
    """Memory offsets and channel of the group's flat indices i = (channel, row, column) in C, H, W order."""
    c, r = i // hw, i % hw
    return c * s_c + (r // width) * s_h + (r % width) * s_w, c


@triton.jit
def groupnorm_mish_kernel(x_ptr, w_ptr, b_ptr, out_ptr, n_groups, group_channels, hw, width, eps,
                          sx_n, sx_c, sx_h, sx_w, BLOCK: tl.constexpr):
    """GroupNorm then Mish over one (sample, group): its group_channels x H x W values, BLOCK at a time."""
    pid = tl.program_id(0)
    n, g = (pid // n_groups).to(tl.int64), (pid % n_groups).to(tl.int64)
    first_c = g * group_channels
    x_group = x_ptr + n * sx_n + first_c * sx_c
    out_group = out_ptr + (n * n_groups + g) * group_channels * hw       # output: (N, C, H, W) contiguous
    size = group_channels * hw
    offs = tl.arange(0, BLOCK)
    # Pass 1: sums of (x - shift) and its square, per lane. The shift (the group's first value) keeps
    # sum_sq / size - mean^2 from cancelling away when the mean is large against the spread.
    shift = tl.load(x_group).to(tl.float32)
    s = tl.zeros((BLOCK,), tl.float32)
    s2 = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, size, BLOCK):
        i = start + offs
        at, _ = _group_offsets(i, hw, width, sx_c, sx_h, sx_w)
        v = tl.load(x_group + at, mask=i < size, other=0.0).to(tl.float32)
        v = tl.where(i < size, v - shift, 0.0)
        s += v
        s2 += v * v
    mean_shifted = tl.sum(s, axis=0) / size
    var = tl.maximum(tl.sum(s2, axis=0) / size - mean_shifted * mean_shifted, 0.0)
    mean, inv_std = shift + mean_shifted, tl.rsqrt(var + eps)
    # Pass 2: normalise, scale and shift per channel, Mish, one store.
    for start in range(0, size, BLOCK):
        i = start + offs
        at, c = _group_offsets(i, hw, width, sx_c, sx_h, sx_w)
        v = tl.load(x_group + at, mask=i < size, other=0.0).to(tl.float32)
        gamma = tl.load(w_ptr + first_c + c, mask=i < size, other=0.0).to(tl.float32)
        beta = tl.load(b_ptr + first_c + c, mask=i < size, other=0.0).to(tl.float32)
        y = (v - mean) * inv_std * gamma + beta
        # Mish: y * tanh(softplus(y)), and tanh(log(1 + e)) = e (e + 2) / (e (e + 2) + 2) for e = exp(y):
        # one exp. It is capped at exp(20): past it t / (t + 2) is 1 in float32, and t stays finite.
        e = tl.exp(tl.minimum(y, 20.0))
        t = e * (e + 2.0)
        y = y * t / (t + 2.0)
        tl.store(out_group + i, y.to(out_ptr.dtype.element_ty), mask=i < size)


def groupnorm_mish(x, num_groups, weight, bias, eps=1e-5):
    """Mish(GroupNorm(x)) in one kernel; x (N, C, H, W) of any strides, weight and bias (C,)."""
    assert x.dim() == 4, "x: (N, C, H, W)"
    N, C, H, W = x.shape
    assert C % num_groups == 0, "the channels must split evenly into num_groups groups"
    assert weight.shape == bias.shape == (C,), "weight and bias: one value per channel"
    assert weight.stride(0) == bias.stride(0) == 1, "weight and bias: contiguous"
    out = torch.empty((N, C, H, W), device=x.device, dtype=x.dtype)
    BLOCK, warps = pick(cpu=(256, 4), gpu=(2048, 8))
    groupnorm_mish_kernel[(N * num_groups,)](x, weight, bias, out, num_groups, C // num_groups, H * W, W, eps,
                                             *x.stride(), BLOCK=BLOCK, num_warps=warps)
    return out


# ---------------------------------------------------------------- 5. the decoder block


def pack_weights(w, cfg: BlockConfig):
    """The block's weights as decoder_block_fused reads them, packed once (this copies the matrices):

    wqkv:      wq, wk, wv stacked, (3d, d): one matmul makes Q, K and V
    w_gate_up: w_gate's and w_up's rows interleaved, (2f, d): pack_gate_up
    the others as they are; every matrix stays (out, in), which the kernels read as w.T by strides.
    """
    assert w["wq"].shape == (cfg.dim, cfg.dim) and w["w_gate"].shape == (cfg.hidden, cfg.dim), \
        "weights of another BlockConfig"
    return {"attn_norm": w["attn_norm"].contiguous(), "mlp_norm": w["mlp_norm"].contiguous(),
            "wqkv": torch.cat((w["wq"], w["wk"], w["wv"]), dim=0),
            "wo": w["wo"].contiguous(), "w_down": w["w_down"].contiguous(),
            "w_gate_up": pack_gate_up(w["w_gate"], w["w_up"])}


@functools.lru_cache(maxsize=16)
def _rope_tables(cfg, seq, device):
    """rope_tables, computed once per (config, length, device): the forward launches no kernel for them."""
    return rope_tables(cfg, seq, device)


def decoder_block_fused(x, w, cfg: BlockConfig):
    """helpers.block.decoder_block(x, w, cfg, attention="sdpa"), from the course's kernels.

    x: (batch, seq, dim). w: pack_weights(...)'s dict (given block_weights' dict instead, it is packed
    on every call). Launches, in order (7 Triton kernels, 2 copies):
      1. lesson 05's rmsnorm_linear: RMSNorm folded into the Q|K|V matmul  -> (T, 3d)
      2. rope_qk: Q and K rotated, from views of (1), written (B, H, N, D)  -> 2 x (B, H, N, D)
      3. V's copy to (B, H, N, D) (a PyTorch copy kernel)
      4. lesson 06's flash_forward_causal                                    -> (B, H, N, D)
      5. the heads back to (T, d) (a PyTorch copy kernel)
      6. linear_residual: x + attention @ wo.T                              -> (T, d)
      7. lesson 05's rms_norm_rows                                          -> (T, d)
      8. swiglu_linear                                                      -> (T, f)
      9. linear_residual: (6) + mlp @ w_down.T                              -> (T, d)
    """
    if "wqkv" not in w:
        w = pack_weights(w, cfg)
    B, N, d = x.shape
    H, D = cfg.n_heads, cfg.head_dim
    x2 = x.reshape(B * N, d)
    qkv = lesson05.rmsnorm_linear(x2, w["attn_norm"], w["wqkv"], cfg.eps)          # 1
    q, k, v = (qkv[:, i * d:(i + 1) * d].view(B, N, H, D).transpose(1, 2) for i in range(3))
    cos, sin = _rope_tables(cfg, N, x.device)
    q, k = rope_qk(q, k, cos, sin)                                                 # 2
    a, _ = lesson06.flash_forward_causal(q, k, v.contiguous())                    # 3, 4
    a = a.transpose(1, 2).reshape(B * N, d)                                        # 5
    x2 = linear_residual(a, w["wo"], x2)                                           # 6
    h = lesson05.rms_norm_rows(x2, w["mlp_norm"], cfg.eps)                         # 7
    mlp = swiglu_linear(h, w["w_gate_up"])                                         # 8
    return linear_residual(mlp, w["w_down"], x2).view(B, N, d)                     # 9


# ---------------------------------------------------------------- make bench (GPU)

BLOCK_SHAPES = ((1, 2048), (4, 2048), (1, 8192))   # (batch, sequence) of a prefill, at 7B width


def _block_impls(cfg, x, w, packed, compiled):
    """The block's forward four ways, each a zero-argument callable."""
    from helpers.block import decoder_block

    return {"course kernels (lesson 09)": lambda: decoder_block_fused(x, packed, cfg),
            "eager + SDPA": lambda: decoder_block(x, w, cfg, attention="sdpa"),
            "torch.compile(eager + SDPA)": lambda: compiled(x, w, cfg, attention="sdpa"),
            "eager, naive attention": lambda: decoder_block(x, w, cfg, attention="naive")}


def benchmarks():
    """What `make bench` times for this lesson (GPU only): the block, the SwiGLU MLP, GroupNorm + Mish."""
    from helpers.bench import Bench
    from helpers.block import block_flops, block_input, block_weights, decoder_block

    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    cfg = BlockConfig()
    w = block_weights(cfg, "cuda", torch.float16)
    packed = pack_weights(w, cfg)
    compiled = torch.compile(decoder_block, dynamic=False)
    for B, N in BLOCK_SHAPES:
        x = block_input(cfg, B, N, "cuda", torch.float16)
        weights_bytes = sum(t.nbytes for t in w.values())
        yield Bench("block_forward_fp16", B * N, bytes=2 * x.nbytes + weights_bytes,
                    flops=block_flops(cfg, B, N), label=f"B{B} N{N}", metric="TFLOP/s",
                    impls=_block_impls(cfg, x, w, packed, compiled))
        del x

    swiglu_eager = lambda h, wg, wu: F.silu(h @ wg.T) * (h @ wu.T)  # noqa: E731
    swiglu_compiled = torch.compile(swiglu_eager, dynamic=False)
    d, f, wg, wu, wgu = cfg.dim, cfg.hidden, w["w_gate"], w["w_up"], packed["w_gate_up"]
    for T in (4096, 16384):
        h = torch.randn(T, d, device="cuda", dtype=torch.float16)
        yield Bench("swiglu_fp16", T, bytes=2 * (T * d + 2 * f * d + T * f), flops=4 * T * d * f,
                    label=f"T{T} d{d} f{f}", metric="TFLOP/s",
                    impls={"course: one matmul, SiLU*mul epilogue": lambda h=h: swiglu_linear(h, wgu),
                           "eager: two matmuls, SiLU, mul": lambda h=h: swiglu_eager(h, wg, wu),
                           "torch.compile": lambda h=h: swiglu_compiled(h, wg, wu)})
        del h

    gn_eager = lambda x, g, wt, b: F.mish(F.group_norm(x, g, wt, b, 1e-5))  # noqa: E731
    gn_compiled = torch.compile(gn_eager, dynamic=False)
    for N, C, HW, G in ((8, 320, 64, 32), (8, 640, 32, 32), (2, 1280, 16, 32), (1, 128, 256, 32)):
        x = torch.randn(N, C, HW, HW, device="cuda", dtype=torch.float16)
        wt = torch.randn(C, device="cuda", dtype=torch.float16)
        b = torch.randn(C, device="cuda", dtype=torch.float16)
        yield Bench("groupnorm_mish_fp16", x.numel(), bytes=2 * x.nbytes, flops=10 * x.numel(),
                    label=f"{N}x{C}x{HW}x{HW} G{G}",
                    impls={"course: one kernel": lambda x=x, wt=wt, b=b, G=G: groupnorm_mish(x, G, wt, b),
                           "eager: group_norm, mish": lambda x=x, wt=wt, b=b, G=G: gn_eager(x, G, wt, b),
                           "torch.compile": lambda x=x, wt=wt, b=b, G=G: gn_compiled(x, G, wt, b)})
        del x


def record_artifacts(folder):
    """On a GPU (called by `make bench`): the block's peak memory and kernel launches per forward, for
    each implementation and shape, into folder/09_block/<gpu>.json."""
    import json
    import pathlib
    import tempfile

    from helpers import profile
    from helpers.block import block_input, block_weights, decoder_block

    cfg = BlockConfig()
    w = block_weights(cfg, "cuda", torch.float16)
    packed = pack_weights(w, cfg)
    compiled = torch.compile(decoder_block, dynamic=False)
    rows = []
    for B, N in BLOCK_SHAPES:
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
            rows.append({"label": f"B{B} N{N}", "impl": name, "peak_mib": round(peak / 2**20, 1),
                         "kernels": len(profile.kernel_events(trace))})
        del x
    out = folder / "09_block" / (profile.slug(torch.cuda.get_device_name()) + ".json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({**profile.stamp(), "rows": rows}, indent=1))
