"""Lesson 11: rope_qk, swiglu_linear and decoder_block_fused.

The block's mutants are written out here from the solution's launchers (not text edits of its
forward), so that they keep applying while the solution's SwiGLU kernel and layout change.
"""

import torch.nn.functional as F

from helpers.block import decoder_block, rms_norm
from helpers.solutions import load_solution
from mutants import Right, Wrong, edit

course = load_solution("11")
lesson05, lesson06 = course.lesson05, course.lesson06

# ---------------------------------------------------------------- 1. rope_qk

ROPE_MASK = "    mask = (offs_pos[:, None] < seq) & (offs_half[None, :] < half)\n"
ROPE_Q = "    rotate_tile(q_ptr + b * sq_b + h * sq_h, qo_ptr + out_head, sq_n, sq_d,"

WRONG = [
    Wrong("rope_qk", "pure PyTorch, no kernel", course.rope_qk_reference),
    Wrong("rope_qk", "the sine's sign flipped in the first half", edit(
        "11", "rope_qk", ("x1 * cos - x2 * sin", "x1 * cos + x2 * sin"))),
    Wrong("rope_qk", "q read with k's position and dimension strides", edit(
        "11", "rope_qk", (ROPE_Q, ROPE_Q.replace("sq_n, sq_d,", "sk_n, sk_d,")))),
    Wrong("rope_qk", "lanes past D / 2 not masked (BLOCK_HALF, not half)", edit(
        "11", "rope_qk", (ROPE_MASK, ROPE_MASK.replace("< half)", "< BLOCK_HALF)")))),
    Wrong("rope_qk", "the output offset forgets the head", edit(
        "11", "rope_qk", ("    out_head = bh.to(tl.int64) * seq * 2 * half", "    out_head = b * seq * 2 * half"))),
    Wrong("rope_qk", "outputs allocated in float32, whatever q's dtype", edit(
        "11", "rope_qk", ("q_rot = torch.empty((B, H, N, D), device=q.device, dtype=q.dtype)",
                          "q_rot = torch.empty((B, H, N, D), device=q.device, dtype=torch.float32)"),
        ("k_rot = torch.empty((B, H, N, D), device=q.device, dtype=q.dtype)",
         "k_rot = torch.empty((B, H, N, D), device=q.device, dtype=torch.float32)"))),
    Wrong("rope_qk", "half the head dimension hard-coded to 32 (D = 64)", edit(
        "11", "rope_qk", ("H, N, D // 2, *q.stride()", "H, N, 32, *q.stride()"),
        ("BLOCK_HALF=triton.next_power_of_2(D // 2)", "BLOCK_HALF=32"))),
]

RIGHT = [
    Right("rope_qk", "blocks of 4 positions", edit(
        "11", "rope_qk", ("    BLOCK_POS = pick(cpu=16, gpu=64)", "    BLOCK_POS = pick(cpu=4, gpu=16)"))),
]

# ---------------------------------------------------------------- 2. swiglu_linear

SPLIT = "        gate, up = tl.split(tl.reshape(acc, (BLOCK_M, BLOCK_N // 2, 2)))"
STORE = "        out_desc.store([off_m, off_n // 2], y.to(out_desc.dtype))"
WALK = ("                                         block_shape=[BLOCK_M, BLOCK_N // 2])\n"
        "    n_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)\n"
        "    for tile in tl.range(tl.program_id(0), n_tiles, tl.num_programs(0), flatten=True):\n"
        "        off_m, off_n = tile_origin(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)")

WRONG += [
    Wrong("swiglu_linear", "pure PyTorch, no kernel", course.swiglu_linear_reference),
    Wrong("swiglu_linear", "gate and up swapped: SiLU of the up projection", edit(
        "11", "swiglu_linear", (SPLIT, SPLIT.replace("gate, up =", "up, gate =")))),
    Wrong("swiglu_linear", "no SiLU: gate * up", edit(
        "11", "swiglu_linear", ("        y = gate * tl.sigmoid(gate) * up", "        y = gate * up"))),
    Wrong("swiglu_linear", "pairs taken as halves of the tile, not as (even, odd) columns", edit(
        "11", "swiglu_linear", (SPLIT, "        gate, up = tl.split(tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), "
                                       "(0, 2, 1)))"))),
    Wrong("swiglu_linear", "stored at column off_n, not off_n / 2", edit(
        "11", "swiglu_linear", (STORE, STORE.replace("off_n // 2", "off_n")))),
    Wrong("swiglu_linear", "each program computes one tile and stops", edit(
        "11", "swiglu_linear", (WALK, WALK.replace("tl.range(tl.program_id(0), n_tiles, tl.num_programs(0), flatten=True)",
                                                   "tl.range(tl.program_id(0), tl.program_id(0) + 1)")))),
    Wrong("swiglu_linear", "h's row stride taken to be K", edit(
        "11", "swiglu_linear", ('contiguous."""\n    h_desc = tl.make_tensor_descriptor(h_ptr, shape=[M, K], strides=[stride_h, 1],',
                                'contiguous."""\n    h_desc = tl.make_tensor_descriptor(h_ptr, shape=[M, K], strides=[K, 1],'))),
    Wrong("swiglu_linear", "the output allocated in float32, whatever h's dtype", edit(
        "11", "swiglu_linear", ("    out = torch.empty((M, N // 2), device=h.device, dtype=h.dtype)",
                                "    out = torch.empty((M, N // 2), device=h.device, dtype=torch.float32)"))),
]

RIGHT += [
    Right("swiglu_linear", "SiLU written as gate / (1 + exp(-gate))", edit(
        "11", "swiglu_linear", ("        y = gate * tl.sigmoid(gate) * up", "        y = gate / (1.0 + tl.exp(-gate)) * up"))),
    Right("swiglu_linear", "three programs in flight, whatever the tiles", edit(
        "11", "swiglu_linear", ("swiglu_linear_kernel[lesson09._persistent_grid(M, N)]",
                                "swiglu_linear_kernel[(3,)]"))),
]

# ---------------------------------------------------------------- 3. decoder_block_fused


def _qkv(x2, w, cfg):
    """The solution's Q|K|V projection: gamma folded into wqkv, 1 / rms as the row scale."""
    return course.linear(x2, w["wqkv"], scale=lesson05.inv_rms(x2, cfg.eps))


def _parts(x, w, cfg, rotate=True, qkv_order=(0, 1, 2), project=_qkv):
    """The solution's forward up to the attention's output, (T, d), and x as (T, d)."""
    B, N, d = x.shape
    H, D = cfg.n_heads, cfg.head_dim
    x2 = x.reshape(B * N, d)
    qkv = project(x2, w, cfg)
    views = [qkv[:, i * d:(i + 1) * d].view(B, N, H, D).transpose(1, 2) for i in range(3)]
    q, k, v = (views[i] for i in qkv_order)
    if rotate:
        cos, sin = course.rope_tables(cfg, N, x.device)
        q, k = course.rope_qk(q, k, cos, sin)
    else:
        q, k = q.contiguous(), k.contiguous()
    a, _ = lesson06.flash_forward_causal(q, k, v.contiguous())
    return a.transpose(1, 2).reshape(B * N, d), x2


def _mlp(x2, w, cfg, norm="mlp_norm"):
    h = lesson05.rms_norm_rows(x2, w[norm], cfg.eps)
    return course.linear(course.swiglu_linear(h, w["w_gate_up"]), w["w_down"], residual=x2)


def no_rope(x, w, cfg):
    w = course.pack_weights(w, cfg)
    a, x2 = _parts(x, w, cfg, rotate=False)
    return _mlp(course.linear(a, w["wo"], residual=x2), w, cfg).view(x.shape)


def k_and_q_swapped(x, w, cfg):
    w = course.pack_weights(w, cfg)
    a, x2 = _parts(x, w, cfg, qkv_order=(1, 0, 2))
    return _mlp(course.linear(a, w["wo"], residual=x2), w, cfg).view(x.shape)


def attn_norm_twice(x, w, cfg):
    w = course.pack_weights(w, cfg)
    a, x2 = _parts(x, w, cfg)
    return _mlp(course.linear(a, w["wo"], residual=x2), w, cfg, norm="attn_norm").view(x.shape)


def mlp_residual_from_the_input(x, w, cfg):
    """The MLP's residual is the block's input, not the stream after attention."""
    w = course.pack_weights(w, cfg)
    a, x2 = _parts(x, w, cfg)
    h = lesson05.rms_norm_rows(course.linear(a, w["wo"], residual=x2), w["mlp_norm"], cfg.eps)
    return course.linear(course.swiglu_linear(h, w["w_gate_up"]), w["w_down"], residual=x2).view(x.shape)


def sdpa_in_the_middle(x, w, cfg):
    """Triton everywhere but the attention, which PyTorch's SDPA does."""
    B, N, d = x.shape
    H, D = cfg.n_heads, cfg.head_dim
    w = course.pack_weights(w, cfg)
    x2 = x.reshape(B * N, d)
    qkv = _qkv(x2, w, cfg)
    q, k, v = (qkv[:, i * d:(i + 1) * d].view(B, N, H, D).transpose(1, 2) for i in range(3))
    q, k = course.rope_qk(q, k, *course.rope_tables(cfg, N, x.device))
    a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B * N, d)
    return _mlp(course.linear(a, w["wo"], residual=x2), w, cfg).view(x.shape)


def matmul_down_projection(x, w, cfg):
    """The MLP's down projection and residual add in PyTorch."""
    w = course.pack_weights(w, cfg)
    a, x2 = _parts(x, w, cfg)
    x2 = course.linear(a, w["wo"], residual=x2)
    h = lesson05.rms_norm_rows(x2, w["mlp_norm"], cfg.eps)
    return (x2 + course.swiglu_linear(h, w["w_gate_up"]) @ w["w_down"].T).view(x.shape)


def eager_mlp_norm(x, w, cfg):
    """Right values, but the MLP's RMSNorm and SwiGLU in eager PyTorch."""
    p = course.pack_weights(w, cfg)
    a, x2 = _parts(x, p, cfg)
    x2 = course.linear(a, p["wo"], residual=x2)
    h = rms_norm(x2, w["mlp_norm"], cfg.eps)
    mlp = F.silu(h @ w["w_gate"].T) * (h @ w["w_up"].T)
    return course.linear(mlp, p["w_down"], residual=x2).view(x.shape)


def three_projections(x, w, cfg):
    """Q, K and V by three rmsnorm_linear launches on the unpacked weights; the rest as the solution."""
    B, N, d = x.shape
    H, D = cfg.n_heads, cfg.head_dim
    p = course.pack_weights(w, cfg)
    x2 = x.reshape(B * N, d)
    q, k, v = (lesson05.rmsnorm_linear(x2, w["attn_norm"], w[n], cfg.eps).view(B, N, H, D).transpose(1, 2)
               for n in ("wq", "wk", "wv"))
    q, k = course.rope_qk(q, k, *course.rope_tables(cfg, N, x.device))
    a, _ = lesson06.flash_forward_causal(q, k, v.contiguous())
    x2 = course.linear(a.transpose(1, 2).reshape(B * N, d), p["wo"], residual=x2)
    return _mlp(x2, p, cfg).view(x.shape)


def gamma_twice(x, w, cfg):
    """lesson 05's rmsnorm_linear on the packed weights, whose columns already carry gamma."""
    p = course.pack_weights(w, cfg)
    project = lambda x2, p, cfg: lesson05.rmsnorm_linear(x2, w["attn_norm"], p["wqkv"], cfg.eps)  # noqa: E731
    a, x2 = _parts(x, p, cfg, project=project)
    return _mlp(course.linear(a, p["wo"], residual=x2), p, cfg).view(x.shape)


def no_row_scale(x, w, cfg):
    """The Q|K|V matmul on the folded weights without the 1 / rms row scale."""
    p = course.pack_weights(w, cfg)
    a, x2 = _parts(x, p, cfg, project=lambda x2, p, cfg: course.linear(x2, p["wqkv"]))
    return _mlp(course.linear(a, p["wo"], residual=x2), p, cfg).view(x.shape)


WRONG += [
    Wrong("decoder_block_fused", "RMSNorm's gamma applied twice (rmsnorm_linear on the packed weights)",
          gamma_twice),
    Wrong("decoder_block_fused", "the Q|K|V matmul without the 1 / rms row scale", no_row_scale),
    Wrong("decoder_block_fused", "the eager block, no kernel",
          lambda x, w, cfg: decoder_block(x, w, cfg, attention="sdpa")),
    Wrong("decoder_block_fused", "RoPE left out", no_rope),
    Wrong("decoder_block_fused", "K used as the queries and Q as the keys", k_and_q_swapped),
    Wrong("decoder_block_fused", "the attention's RMSNorm weights used before the MLP too", attn_norm_twice),
    Wrong("decoder_block_fused", "the MLP's residual taken from the block's input", mlp_residual_from_the_input),
    Wrong("decoder_block_fused", "attention by PyTorch's SDPA", sdpa_in_the_middle),
    Wrong("decoder_block_fused", "the down projection as a PyTorch matmul", matmul_down_projection),
    Wrong("decoder_block_fused", "the MLP's norm and SwiGLU in eager PyTorch", eager_mlp_norm),
]

def lesson06_attention(x, w, cfg):
    """Lesson 06's attention on contiguous copies instead of causal_attention: two copies more, same values."""
    p = course.pack_weights(w, cfg)
    a, x2 = _parts(x, p, cfg)
    return _mlp(course.linear(a, p["wo"], residual=x2), p, cfg).view(x.shape)


RIGHT += [Right("decoder_block_fused", "three projections, unpacked Q, K, V weights", three_projections),
          Right("decoder_block_fused", "lesson 06's attention, on copies", lesson06_attention)]
