"""Lesson 11: rope_qk, swiglu_linear and decoder_block_fused.

The block's mutants are written out here from the solution's launchers (not text edits of its
forward), so that they keep applying while the solution's SwiGLU kernel and layout change.
"""

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from helpers.block import decoder_block, rms_norm, rope
from helpers.solutions import load_solution
from mutants import Right, Wrong, edit

course = load_solution("11")
lesson05, lesson06, lesson10 = course.lesson05, course.lesson06, course.lesson10

# ---------------------------------------------------------------- 1. rope_qk

ROPE_MASK = "    mask = (offs_pos[:, None] < seq) & (offs_half[None, :] < half)\n"
ROPE_Q = "    rotate_tile(q_ptr + b * sq_b + h * sq_h, qo_ptr + out_head, sq_n, sq_d,"
ROPE_SIN = "    sin = tl.load(sin_ptr + offs_pos[:, None] * s_sin + offs_half[None, :], mask=mask, other=0.0)"
ROPE_FIRST = "    first = src_ptr + offs_pos[:, None] * s_pos + offs_half[None, :] * s_dim\n"
ROPE_K = ("    rotate_tile(k_ptr + b * sk_b + h * sk_h, ko_ptr + out_head, sk_n, sk_d, offs_pos, offs_half, half,\n"
          "                cos, sin, mask)\n")
ROPE_POS = "    offs_pos = (tl.program_id(0) * BLOCK_POS + tl.arange(0, BLOCK_POS)).to(tl.int64)\n"
ROPE_BH = "    b, h = (bh // n_heads).to(tl.int64), (bh % n_heads).to(tl.int64)\n"
ROPE_X1 = "    x1 = tl.load(first, mask=mask, other=0.0).to(tl.float32)\n"
ROPE_X2 = "    x2 = tl.load(first + half * s_dim, mask=mask, other=0.0).to(tl.float32)\n"
ROPE_STORE = "    tl.store(out, (x1 * cos - x2 * sin).to(dst_ptr.dtype.element_ty), mask=mask)\n"


def rope_two_launches(q, k, cos, sin):
    """Right values: Q rotated by one launch, K by another."""
    q_rot, _ = course.rope_qk(q, q, cos, sin)
    _, k_rot = course.rope_qk(k, k, cos, sin)
    return q_rot, k_rot


def rope_not_contiguous(q, k, cos, sin):
    """Right values, returned as views of (B, H, D, N) copies: not contiguous."""
    return tuple(t.transpose(2, 3).contiguous().transpose(2, 3) for t in course.rope_qk(q, k, cos, sin))


WRONG = [
    Wrong("rope_qk", "pure PyTorch, no kernel", course.rope_qk_reference),
    # the CPU's launcher passes BLOCK_POS = 16: only the check's run with BLOCK_POS = 32 sees it
    Wrong("rope_qk", "the block of positions written in as 16", edit(
        "11", "rope_qk", ("    offs_pos = (tl.program_id(0) * BLOCK_POS + tl.arange(0, BLOCK_POS)).to(tl.int64)\n",
                          "    offs_pos = (tl.program_id(0) * 16 + tl.arange(0, 16)).to(tl.int64)\n"))),
    Wrong("rope_qk", "the sine's sign flipped in the first half", edit(
        "11", "rope_qk", ("x1 * cos - x2 * sin", "x1 * cos + x2 * sin"))),
    Wrong("rope_qk", "q read with k's position and dimension strides", edit(
        "11", "rope_qk", (ROPE_Q, ROPE_Q.replace("sq_n, sq_d,", "sk_n, sk_d,")))),
    Wrong("rope_qk", "lanes past D / 2 not masked (BLOCK_HALF, not half)", edit(
        "11", "rope_qk", (ROPE_MASK, ROPE_MASK.replace("< half)", "< BLOCK_HALF)")))),
    Wrong("rope_qk", "the output offset forgets the head", edit(
        "11", "rope_qk", ("    out_head = bh.to(tl.int64) * seq * 2 * half", "    out_head = b * seq * 2 * half"))),
    Wrong("rope_qk", "the outputs' head offset in int32: bh * seq * D wraps past 2**31", edit(
        "11", "rope_qk", ("    out_head = bh.to(tl.int64) * seq * 2 * half", "    out_head = bh * seq * 2 * half")),
          gpu_only=True),
    Wrong("rope_qk", "outputs allocated in float32, whatever q's dtype", edit(
        "11", "rope_qk", ("q_rot, k_rot = q.new_empty((B, H, N, D)), q.new_empty((B, H, N, D))",
                          "q_rot, k_rot = (q.new_empty((B, H, N, D), dtype=torch.float32),\n"
                          "                    q.new_empty((B, H, N, D), dtype=torch.float32))"))),
    Wrong("rope_qk", "half the head dimension hard-coded to 32 (D = 64)", edit(
        "11", "rope_qk", ("H, N, D // 2, *q.stride()", "H, N, 32, *q.stride()"),
        ("BLOCK_HALF=next_power_of_2(D // 2)", "BLOCK_HALF=32"))),
    Wrong("rope_qk", "sin's rows read with cos's row stride", edit(
        "11", "rope_qk", (ROPE_SIN, ROPE_SIN.replace("* s_sin", "* s_cos")))),
    Wrong("rope_qk", "the head dimension taken to be contiguous (its stride ignored)", edit(
        "11", "rope_qk", (ROPE_FIRST, ROPE_FIRST.replace("offs_half[None, :] * s_dim", "offs_half[None, :]")),
        ("    x2 = tl.load(first + half * s_dim,", "    x2 = tl.load(first + half,"))),
    Wrong("rope_qk", "k's head dimension taken to be contiguous (sk_d ignored)", edit(
        "11", "rope_qk", (ROPE_K, ROPE_K.replace("sk_n, sk_d,", "sk_n, 1,")))),
    Wrong("rope_qk", "the rotation in float16: x1, x2 left in q's dtype, cos and sin cast to it", edit(
        "11", "rope_qk", (ROPE_X1, ROPE_X1.replace(".to(tl.float32)", "")),
        (ROPE_X2, ROPE_X2.replace(".to(tl.float32)", "")),
        (ROPE_STORE, "    cos, sin = cos.to(x1.dtype), sin.to(x1.dtype)\n" + ROPE_STORE))),
    Wrong("rope_qk", "cos and sin rounded to q's dtype before a float32 rotation", edit(
        "11", "rope_qk", (ROPE_STORE, "    cos = cos.to(dst_ptr.dtype.element_ty).to(tl.float32)\n"
                                      "    sin = sin.to(dst_ptr.dtype.element_ty).to(tl.float32)\n" + ROPE_STORE))),
    Wrong("rope_qk", "Q and K rotated by two launches", rope_two_launches),
    Wrong("rope_qk", "cos and sin loaded again for K", edit(
        "11", "rope_qk", (ROPE_K, ROPE_K.replace(
            "                cos, sin, mask)\n",
            "                tl.load(cos_ptr + offs_pos[:, None] * s_cos + offs_half[None, :], mask=mask, other=0.0),\n"
            "                tl.load(sin_ptr + offs_pos[:, None] * s_sin + offs_half[None, :], mask=mask, other=0.0),\n"
            "                mask)\n")))),
    Wrong("rope_qk", "outputs with the right values, not contiguous", rope_not_contiguous),
    Wrong("rope_qk", "offs_pos, b and h left int32: offs_pos * sq_n and b * sk_b wrap past 2**31", edit(
        "11", "rope_qk", (ROPE_POS, ROPE_POS.replace(".to(tl.int64)", "")),
        (ROPE_BH, "    b, h = bh // n_heads, bh % n_heads\n")), gpu_only=True),
    Wrong("rope_qk", "offs_pos left int32: offs_pos * sq_n wraps past 2**31", edit(
        "11", "rope_qk", (ROPE_POS, ROPE_POS.replace(".to(tl.int64)", ""))), gpu_only=True),
]

RIGHT = [
    Right("rope_qk", "blocks of 4 positions", edit(
        "11", "rope_qk", ("    BLOCK_POS = pick(cpu=16, gpu=64)", "    BLOCK_POS = pick(cpu=4, gpu=16)"))),
]

# ---------------------------------------------------------------- 2. swiglu_linear


@triton.jit
def _silu_pairs_kernel(gu_ptr, out_ptr, f, BLOCK: tl.constexpr):
    """out[row, j] = SiLU(gu[row, 2j]) * gu[row, 2j + 1], gu (M, 2f) contiguous: one row per program."""
    row = tl.program_id(0)
    for start in range(0, f, BLOCK):
        j = start + tl.arange(0, BLOCK)
        gate = tl.load(gu_ptr + row * 2 * f + 2 * j, mask=j < f, other=0.0)
        up = tl.load(gu_ptr + row * 2 * f + 2 * j + 1, mask=j < f, other=0.0)
        tl.store(out_ptr + row * f + j, (gate * tl.sigmoid(gate) * up).to(out_ptr.dtype.element_ty), mask=j < f)


def silu_pairs(gate_up, dtype):
    """SiLU(gate) * up from a stored (M, 2f) product: the unfused epilogue, a second launch."""
    M, f = gate_up.shape[0], gate_up.shape[1] // 2
    out = torch.empty((M, f), device=gate_up.device, dtype=dtype)
    _silu_pairs_kernel[(M,)](gate_up, out, f, BLOCK=64)
    return out
# The stub gives the descriptors of h and w_gate_up, the persistent walk and the mainloop; the
# learner writes the output's descriptor and the epilogue. Most wrong answers are slips there.

SPLIT = "        gate, up = tl.split(tl.reshape(acc, (BLOCK_M, BLOCK_N // 2, 2)))"
SILU = "        y = gate * tl.sigmoid(gate) * up"
STORE = "        out_desc.store([off_m, off_n // 2], y.to(out_desc.dtype))"
OUT_DESC = "    out_desc = tl.make_tensor_descriptor(out_ptr, shape=[M, N // 2], strides=[N // 2, 1],"
WALK = ("                                         block_shape=[BLOCK_M, BLOCK_N // 2])\n"
        "    n_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)\n"
        "    for tile in tl.range(tl.program_id(0), n_tiles, tl.num_programs(0), flatten=True):\n"
        "        off_m, off_n = tile_origin(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)")
W_DESC = "    w_desc = tl.make_tensor_descriptor(w_ptr, shape=[N, K], strides=[stride_w, 1],"

WRONG += [
    Wrong("swiglu_linear", "pure PyTorch, no kernel", course.swiglu_linear_reference),
    Wrong("swiglu_linear", "the output stored through pointers, not out_desc", edit(
        "11", "swiglu_linear", ("        out_desc.store([off_m, off_n // 2], y.to(out_desc.dtype))",
                                "        rows = off_m + tl.arange(0, BLOCK_M)\n"
                                "        cols = off_n // 2 + tl.arange(0, BLOCK_N // 2)\n"
                                "        tl.store(out_ptr + rows[:, None] * (N // 2) + cols[None, :],"
                                " y.to(out_ptr.dtype.element_ty),\n"
                                "                 mask=(rows[:, None] < M) & (cols[None, :] < N // 2))"))),
    Wrong("swiglu_linear", "gate and up swapped: SiLU of the up projection", edit(
        "11", "swiglu_linear", (SPLIT, SPLIT.replace("gate, up =", "up, gate =")))),
    Wrong("swiglu_linear", "SiLU(gate) rounded to the output's dtype before the product", edit(
        "11", "swiglu_linear", (SILU, "        y = (gate * tl.sigmoid(gate)).to(out_desc.dtype) * up.to(out_desc.dtype)"))),
    Wrong("swiglu_linear", "the accumulator rounded to the output's dtype before the epilogue", edit(
        "11", "swiglu_linear", (SPLIT, "        acc = acc.to(out_desc.dtype).to(tl.float32)\n" + SPLIT))),
    Wrong("swiglu_linear", "no SiLU: gate * up", edit(
        "11", "swiglu_linear", (SILU, "        y = gate * up"))),
    Wrong("swiglu_linear", "pairs taken as halves of the tile, not as (even, odd) columns", edit(
        "11", "swiglu_linear", (SPLIT, "        gate, up = tl.split(tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), "
                                       "(0, 2, 1)))"))),
    Wrong("swiglu_linear", "SiLU as e^g / (1 + e^g): inf / inf past g = 89", edit(
        "11", "swiglu_linear", (SILU, "        y = gate * tl.exp(gate) / (1.0 + tl.exp(gate)) * up"))),
    Wrong("swiglu_linear", "SiLU as 1 - e^-g / (1 + e^-g): inf / inf below g = -89", edit(
        "11", "swiglu_linear", (SILU, "        y = gate * (1.0 - tl.exp(-gate) / (1.0 + tl.exp(-gate))) * up"))),
    Wrong("swiglu_linear", "stored at column off_n, not off_n / 2", edit(
        "11", "swiglu_linear", (STORE, STORE.replace("off_n // 2", "off_n")))),
    Wrong("swiglu_linear", "the output's row stride taken to be N (the product's width), not N / 2", edit(
        "11", "swiglu_linear", (OUT_DESC, OUT_DESC.replace("strides=[N // 2, 1]", "strides=[N, 1]")))),
    Wrong("swiglu_linear", "the output descriptor N wide: nothing clips the last tile at f", edit(
        "11", "swiglu_linear", (OUT_DESC, OUT_DESC.replace("shape=[M, N // 2]", "shape=[M, N]")))),
    Wrong("swiglu_linear", "each program computes one tile and stops", edit(
        "11", "swiglu_linear", (WALK, WALK.replace("tl.range(tl.program_id(0), n_tiles, tl.num_programs(0), flatten=True)",
                                                   "tl.range(tl.program_id(0), tl.program_id(0) + 1)")))),
    Wrong("swiglu_linear", "the walk steps by 1, not by the programs: tiles computed and stored again", edit(
        "11", "swiglu_linear", (WALK, WALK.replace("tl.range(tl.program_id(0), n_tiles, tl.num_programs(0), flatten=True)",
                                                   "tl.range(tl.program_id(0), n_tiles, 1, flatten=True)")))),
    Wrong("swiglu_linear", "program 0 walks every tile, the other programs none", edit(
        "11", "swiglu_linear", (WALK, WALK.replace("tl.range(tl.program_id(0), n_tiles, tl.num_programs(0), flatten=True)",
                                                   "tl.range(tl.program_id(0) * n_tiles, n_tiles, 1, flatten=True)")))),
    Wrong("swiglu_linear", "every program walks as many tiles as program 0: past the last tile", edit(
        "11", "swiglu_linear", (WALK, WALK.replace(
            "tl.range(tl.program_id(0), n_tiles, tl.num_programs(0), flatten=True)",
            "tl.range(tl.program_id(0), tl.cdiv(n_tiles, tl.num_programs(0)) * tl.num_programs(0), "
            "tl.num_programs(0), flatten=True)")))),
    # the interpreter reverses a reshape that may reorder, as a GPU may reorder it
    Wrong("swiglu_linear", "the pairs split from a reshape that may reorder (can_reorder=True)", edit(
        "11", "swiglu_linear", ("tl.split(tl.reshape(acc, (BLOCK_M, BLOCK_N // 2, 2)))",
                                "tl.split(tl.reshape(acc, (BLOCK_M, BLOCK_N // 2, 2), can_reorder=True))"))),
    # BLOCK_N // 2 = BLOCK_M on the CPU's 64 x 128 tiles: only the check's 32 x 128 run sees it
    Wrong("swiglu_linear", "the pairs reshaped BLOCK_M wide, not BLOCK_N // 2", edit(
        "11", "swiglu_linear", ("tl.split(tl.reshape(acc, (BLOCK_M, BLOCK_N // 2, 2)))",
                                "tl.split(tl.reshape(acc, (BLOCK_M, BLOCK_M, 2)))"))),
    Wrong("swiglu_linear", "the output tile BLOCK_M // 2 wide, not BLOCK_N // 2", edit(
        "11", "swiglu_linear", ("                                         block_shape=[BLOCK_M, BLOCK_N // 2])",
                                "                                         block_shape=[BLOCK_M, BLOCK_M // 2])"))),
    Wrong("swiglu_linear", "h's row stride taken to be K", edit(
        "11", "swiglu_linear", ('contiguous."""\n    h_desc = tl.make_tensor_descriptor(h_ptr, shape=[M, K], strides=[stride_h, 1],',
                                'contiguous."""\n    h_desc = tl.make_tensor_descriptor(h_ptr, shape=[M, K], strides=[K, 1],'))),
    Wrong("swiglu_linear", "w_gate_up's row stride taken to be K", edit(
        "11", "swiglu_linear", (W_DESC, W_DESC.replace("strides=[stride_w, 1]", "strides=[K, 1]")))),
    Wrong("swiglu_linear", "the (M, 2f) product stored by lesson 09's linear, SiLU(gate) * up by a second kernel",
          lambda h, w: silu_pairs(course.lesson09.linear(h.float(), w.float()), h.dtype)),
    Wrong("swiglu_linear", "right values, returned as a view of an (f, M) copy: not contiguous",
          lambda h, w: course.swiglu_linear(h, w).T.contiguous().T),
    Wrong("swiglu_linear", "the output allocated in float32, whatever h's dtype", edit(
        "11", "swiglu_linear", ("    out = h.new_empty((M, N // 2))",
                                "    out = h.new_empty((M, N // 2), dtype=torch.float32)"))),
]

RIGHT += [
    Right("swiglu_linear", "SiLU written as gate / (1 + exp(-gate))", edit(
        "11", "swiglu_linear", (SILU, "        y = gate / (1.0 + tl.exp(-gate)) * up"))),
    Right("swiglu_linear", "pairs picked by a masked sum over the last axis, not by tl.split", edit(
        "11", "swiglu_linear", (SPLIT, "        pairs = tl.reshape(acc, (BLOCK_M, BLOCK_N // 2, 2))\n"
                                       "        is_gate = (tl.arange(0, 2) == 0)[None, None, :]\n"
                                       "        gate = tl.sum(tl.where(is_gate, pairs, 0.0), axis=2)\n"
                                       "        up = tl.sum(tl.where(is_gate, 0.0, pairs), axis=2)"))),
    Right("swiglu_linear", "three programs in flight, whatever the tiles", edit(
        "11", "swiglu_linear", ("_swiglu_launcher(lesson09._persistent_grid(M, N),",
                                "_swiglu_launcher((3,),"))),
]

# ---------------------------------------------------------------- 3. decoder_block_fused
# The structure check holds the forward to the lesson's eight Triton launches, with nothing from
# PyTorch but views and allocations. The first wrong answers compute the wrong block; the next ones
# compute the right block with work PyTorch should not do, or with launches the lesson does not make.


def _packed(w, cfg):
    return w if "wqkv" in w else course.pack_weights(w, cfg)


def _views(qkv, B, N, cfg):
    """q, k, v: (B, H, N, D) views of the projection's (T, 3d) output."""
    d, H, D = cfg.dim, cfg.n_heads, cfg.head_dim
    return [qkv[:, i * d:(i + 1) * d].view(B, N, H, D).transpose(1, 2) for i in range(3)]


def _block(x, w, cfg, project=None, qkv_order=(0, 1, 2), rotate=None, attend=None, mlp_norm=None,
           mlp_residual_from_input=False, down=None, swiglu=None):
    """The solution's forward, each step replaceable by a (wrong) variant."""
    w = _packed(w, cfg)
    B, N, d = x.shape
    x2 = x.reshape(B * N, d)
    qkv = project(x2, w, cfg) if project else course.linear(x2, w["wqkv"], scale=lesson05.inv_rms(x2, cfg.eps))
    views = _views(qkv, B, N, cfg)
    q, k, v = (views[i] for i in qkv_order)
    cos, sin = course.rope_tables(cfg, N, x.device)
    q, k = rotate(q, k, cos, sin) if rotate else course.rope_qk(q, k, cos, sin)
    a = attend(q, k, v) if attend else lesson10.causal_attention(q, k, v).view(B * N, d)
    h1 = course.linear(a, w["wo"], residual=x2)
    h = mlp_norm(h1, w, cfg) if mlp_norm else lesson05.rms_norm_rows(h1, w["mlp_norm"], cfg.eps)
    mlp = (swiglu or course.swiglu_linear)(h, w["w_gate_up"])
    residual = x2 if mlp_residual_from_input else h1
    out = down(mlp, w, residual) if down else course.linear(mlp, w["w_down"], residual=residual)
    return out.view(B, N, d)


def gamma_twice(x, w, cfg):
    """lesson 05's rmsnorm_linear on the packed weights, whose columns already carry gamma."""
    return _block(x, w, cfg, project=lambda x2, p, cfg: lesson05.rmsnorm_linear(x2, w["attn_norm"], p["wqkv"], cfg.eps))


def no_row_scale(x, w, cfg):
    return _block(x, w, cfg, project=lambda x2, p, cfg: course.linear(x2, p["wqkv"]))


def no_rope(x, w, cfg):
    return _block(x, w, cfg, rotate=lambda q, k, cos, sin: (q.contiguous(), k.contiguous()))


def k_and_q_swapped(x, w, cfg):
    return _block(x, w, cfg, qkv_order=(1, 0, 2))


def attn_norm_twice(x, w, cfg):
    return _block(x, w, cfg, mlp_norm=lambda h1, p, cfg: lesson05.rms_norm_rows(h1, w["attn_norm"], cfg.eps))


def mlp_residual_from_the_input(x, w, cfg):
    return _block(x, w, cfg, mlp_residual_from_input=True)


def sdpa_in_the_middle(x, w, cfg):
    """Triton everywhere but the attention, which PyTorch's SDPA does."""
    B, N, d = x.shape
    return _block(x, w, cfg, attend=lambda q, k, v: F.scaled_dot_product_attention(
        q, k, v, is_causal=True).transpose(1, 2).reshape(B * N, d))


def naive_silu(x, w, cfg):
    """The block with a swiglu_linear whose SiLU is e^g / (1 + e^g): inf / inf past g = 89."""
    return _block(x, w, cfg, swiglu=edit("11", "swiglu_linear", (
        SILU, "        y = gate * tl.exp(gate) / (1.0 + tl.exp(gate)) * up")))


def attention_max_from_zero(x, w, cfg):
    """The block with a causal_attention whose running max starts at 0, not -inf."""
    B, N, d = x.shape
    attention = edit("10", "causal_attention", ('    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)\n',
                                                "    m_i = tl.zeros([BLOCK_M], tl.float32)\n"))
    return _block(x, w, cfg, attend=lambda q, k, v: attention(q, k, v).view(B * N, d))


def matmul_down_projection(x, w, cfg):
    return _block(x, w, cfg, down=lambda mlp, p, residual: residual + mlp @ p["w_down"].T)


def eager_mlp_norm(x, w, cfg):
    """Right values; the MLP's RMSNorm in eager PyTorch (pow, mean, rsqrt, mul), the rest as the lesson."""
    return _block(x, w, cfg, mlp_norm=lambda h1, p, cfg: rms_norm(h1, p["mlp_norm"], cfg.eps))


def eager_rope(x, w, cfg):
    """Right values; RoPE by helpers.block.rope (slices, products, a cat) instead of rope_qk."""
    return _block(x, w, cfg, rotate=lambda q, k, cos, sin: (rope(q, cos, sin), rope(k, cos, sin)))


def v_made_contiguous(x, w, cfg):
    """Right values; V copied by .contiguous() before the attention, which reads views as they are."""
    B, N, d = x.shape
    return _block(x, w, cfg, attend=lambda q, k, v: lesson10.causal_attention(q, k, v.contiguous()).view(B * N, d))


def lesson06_attention(x, w, cfg):
    """Right values; lesson 06's attention: its inputs made contiguous, its (B, H, N, D) output
    transposed and reshaped to (T, d), a copy."""
    B, N, d = x.shape
    return _block(x, w, cfg, attend=lambda q, k, v: lesson06.flash_forward_causal(q, k, v)[0]
                  .transpose(1, 2).reshape(B * N, d))


@triton.jit
def _copy_rows_kernel(src_ptr, dst_ptr, n_cols, stride_src, BLOCK: tl.constexpr):
    """dst[row] = src[row]: a Triton launch that only moves bytes."""
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    tl.store(dst_ptr + row * n_cols + offs, tl.load(src_ptr + row * stride_src + offs, mask=mask), mask=mask)


def v_copied_by_a_kernel(x, w, cfg):
    """Right values, no PyTorch copy: V copied to a contiguous tensor by a Triton kernel of its own,
    a ninth launch."""
    import torch

    B, N, d = x.shape
    H, D = cfg.n_heads, cfg.head_dim

    def attend(q, k, v):
        v_rows = v.transpose(1, 2).view(B * N, d)            # a view of the projection's V columns
        v_copy = torch.empty((B * N, d), device=x.device, dtype=x.dtype)
        _copy_rows_kernel[(B * N,)](v_rows, v_copy, d, v_rows.stride(0), BLOCK=triton.next_power_of_2(d))
        return lesson10.causal_attention(q, k, v_copy.view(B, N, H, D).transpose(1, 2)).view(B * N, d)
    return _block(x, w, cfg, attend=attend)


def three_projections(x, w, cfg):
    """Right values, no PyTorch copy: Q, K and V by three launches of lesson 09's linear on the packed
    weights' three blocks of rows (ten launches instead of eight)."""
    B, N, d = x.shape
    p = _packed(w, cfg)
    wq, wk, wv = (p["wqkv"][i * d:(i + 1) * d] for i in range(3))   # gamma already folded in

    def project(x2, p, cfg):
        inv = lesson05.inv_rms(x2, cfg.eps)
        return [course.linear(x2, m, scale=inv) for m in (wq, wk, wv)]

    def views3(parts):
        return [t.view(B, N, cfg.n_heads, cfg.head_dim).transpose(1, 2) for t in parts]

    x2 = x.reshape(B * N, d)
    q, k, v = views3(project(x2, p, cfg))
    q, k = course.rope_qk(q, k, *course.rope_tables(cfg, N, x.device))
    a = lesson10.causal_attention(q, k, v).view(B * N, d)
    h1 = course.linear(a, p["wo"], residual=x2)
    mlp = course.swiglu_linear(lesson05.rms_norm_rows(h1, p["mlp_norm"], cfg.eps), p["w_gate_up"])
    return course.linear(mlp, p["w_down"], residual=h1).view(B, N, d)


WRONG += [
    Wrong("decoder_block_fused", "RMSNorm's gamma applied twice (rmsnorm_linear on the packed weights)",
          gamma_twice),
    Wrong("decoder_block_fused", "the Q|K|V matmul without the 1 / rms row scale", no_row_scale),
    # SMALL's heads are 64 wide: the block of other sizes has heads of 32
    Wrong("decoder_block_fused", "the head size written in as 64", edit(
        "11", "decoder_block_fused", ("    H, D = cfg.n_heads, cfg.head_dim\n    x2 = x.reshape(B * N, d)\n    qkv",
                                      "    H, D = cfg.n_heads, 64\n    x2 = x.reshape(B * N, d)\n    qkv"))),
    Wrong("decoder_block_fused", "the eager block, no kernel",
          lambda x, w, cfg: decoder_block(x, w, cfg, attention="sdpa")),
    Wrong("decoder_block_fused", "the norms' eps left at the kernels' default, not cfg.eps", edit(
        "11", "decoder_block_fused", ("scale=lesson05.inv_rms(x2, cfg.eps))", "scale=lesson05.inv_rms(x2))"),
        ('lesson05.rms_norm_rows(x2, w["mlp_norm"], cfg.eps)', 'lesson05.rms_norm_rows(x2, w["mlp_norm"])'))),
    Wrong("decoder_block_fused", "the norms' eps written as 1e-5 (BlockConfig's default), not cfg.eps", edit(
        "11", "decoder_block_fused", ("scale=lesson05.inv_rms(x2, cfg.eps))", "scale=lesson05.inv_rms(x2, 1e-5))"),
        ('lesson05.rms_norm_rows(x2, w["mlp_norm"], cfg.eps)', 'lesson05.rms_norm_rows(x2, w["mlp_norm"], 1e-5)'))),
    Wrong("decoder_block_fused", "RoPE left out", no_rope),
    Wrong("decoder_block_fused", "K used as the queries and Q as the keys", k_and_q_swapped),
    Wrong("decoder_block_fused", "the attention's RMSNorm weights used before the MLP too", attn_norm_twice),
    Wrong("decoder_block_fused", "the MLP's residual taken from the block's input", mlp_residual_from_the_input),
    Wrong("decoder_block_fused", "attention by PyTorch's SDPA", sdpa_in_the_middle),
    Wrong("decoder_block_fused", "the down projection as a PyTorch matmul", matmul_down_projection),
    Wrong("decoder_block_fused", "SwiGLU's SiLU as e^g / (1 + e^g): inf / inf for gates past 89", naive_silu),
    Wrong("decoder_block_fused", "attention's running max started at 0: 0 / 0 when every score is far below zero",
          attention_max_from_zero),
    Wrong("decoder_block_fused", "the MLP's RMSNorm in eager PyTorch (pow, mean, rsqrt, mul)", eager_mlp_norm),
    Wrong("decoder_block_fused", "RoPE in eager PyTorch (slices, products, cat)", eager_rope),
    Wrong("decoder_block_fused", "V copied by .contiguous() before the attention", v_made_contiguous),
    Wrong("decoder_block_fused", "lesson 06's attention: V copied, its output reshaped by a copy",
          lesson06_attention),
    Wrong("decoder_block_fused", "V copied by an extra Triton kernel: nine launches", v_copied_by_a_kernel),
    Wrong("decoder_block_fused", "Q, K and V by three matmul launches: ten launches", three_projections),
]


def views_by_unbind(x, w, cfg):
    """Q, K and V as one (B, N, 3, H, D) view taken apart by unbind; outputs reshaped where that is
    a view; no `del`: the same eight launches, more memory held."""
    p = _packed(w, cfg)
    B, N, d = x.shape
    H, D = cfg.n_heads, cfg.head_dim
    x2 = x.view(B * N, d)
    qkv = course.linear(x2, p["wqkv"], scale=lesson05.inv_rms(x2, cfg.eps))
    q, k, v = (t.transpose(1, 2) for t in qkv.view(B, N, 3, H, D).unbind(2))
    q, k = course.rope_qk(q, k, *course.rope_tables(cfg, N, x.device))
    a = lesson10.causal_attention(q, k, v).reshape(B * N, d)   # contiguous: a view, no copy
    h1 = course.linear(a, p["wo"], residual=x2)
    mlp = course.swiglu_linear(lesson05.rms_norm_rows(h1, p["mlp_norm"], cfg.eps), p["w_gate_up"])
    return course.linear(mlp, p["w_down"], residual=h1).reshape(B, N, d)


RIGHT += [Right("decoder_block_fused", "views by unbind, reshapes that are views, no del", views_by_unbind),
          Right("decoder_block_fused", "the forward written out with replaceable steps", _block)]

# Found by writing the mistakes a learner would make: the copy shows only on a case where both operands
# are strided (the smallest strided case, which check() runs once more), the sizes only on a block of
# other sizes than SMALL's (OTHER_SIZES in helpers/exercises/lesson11.py).
WRONG += [
    Wrong("swiglu_linear", "w_gate_up copied contiguous in the wrapper: the weights read twice a call", edit(
        "11", "swiglu_linear", ("    M, K = h.shape\n    N = w_gate_up.shape[0]\n    out = h.new_empty",
                                "    w_gate_up = w_gate_up.contiguous()\n"
                                "    M, K = h.shape\n    N = w_gate_up.shape[0]\n    out = h.new_empty"))),
    Wrong("decoder_block_fused", "the heads written in as SMALL's: H, D = 4, 64", edit(
        "11", "decoder_block_fused", ("    H, D = cfg.n_heads, cfg.head_dim\n    x2 = x.reshape(B * N, d)\n    qkv",
                                      "    H, D = 4, 64\n    x2 = x.reshape(B * N, d)\n    qkv"))),
    Wrong("decoder_block_fused", "RoPE's tables at BlockConfig's default base, not cfg.rope_base", edit(
        "11", "decoder_block_fused", ("    cos, sin = _rope_tables(cfg, N, x.device)\n    q, k =",
                                      "    cos, sin = _rope_tables(BlockConfig(dim=cfg.dim, n_heads=cfg.n_heads), "
                                      "N, x.device)\n    q, k ="))),
]
