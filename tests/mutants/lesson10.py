"""Lesson 10: causal_attention, ring_waits, atomic_backward, softmax_long. Most mutants are one-line edits of the
solution."""

import torch
import torch.nn.functional as F

from mutants import Right, Wrong, edit

# ---------------------------------------------------------------- 1. causal_attention

FIRST_CALL = ("    acc, l_i, m_i = attention_tiles(acc, l_i, m_i, q, k_desc, v_desc, offs_m, 0, start_m, qk_scale,\n"
              "                                    BLOCK_N, False)\n")
DIAGONAL_CALL = ("    acc, l_i, m_i = attention_tiles(acc, l_i, m_i, q, k_desc, v_desc, offs_m, start_m, "
                 "start_m + BLOCK_M,\n                                    qk_scale, BLOCK_N, True)\n")
EVERY_KEY_MASKED = ("    acc, l_i, m_i = attention_tiles(acc, l_i, m_i, q, k_desc, v_desc, offs_m, 0, "
                    "tl.cdiv(n_ctx, BLOCK_N) * BLOCK_N,\n                                    qk_scale, BLOCK_N, True)\n")
ASSERT = '    tl.static_assert(BLOCK_M % BLOCK_N == 0, "causal: the key tiles must end where a query block starts")\n'
CPU_TILES = 'cpu=[triton.Config({"BLOCK_M": 32, "BLOCK_N": 16}, num_warps=4, num_stages=1)]'
CONTIGUOUS = "n_heads * n_ctx * HEAD_DIM, n_ctx * HEAD_DIM, HEAD_DIM"


def _sdpa_heads_side_by_side(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).contiguous()


CAUSAL_WRONG = [
    Wrong("causal_attention", "the last block placed at (n_ctx // BLOCK_M) * BLOCK_M: where N is a whole number "
          "of blocks, block 0 is never computed", edit(
        "10", "causal_attention", ("    start_m = (tl.num_programs(0) - 1 - tl.program_id(0)) * BLOCK_M      # the longest",
                                   "    start_m = (n_ctx // BLOCK_M - tl.program_id(0)) * BLOCK_M      # the longest"))),
    Wrong("causal_attention", "pure PyTorch, no kernel", _sdpa_heads_side_by_side),
    Wrong("causal_attention", "the running max starts at 0, not -inf", edit(
        "10", "causal_attention", ('    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)\n',
                                   "    m_i = tl.zeros([BLOCK_M], tl.float32)\n"))),
    Wrong("causal_attention", "the causal mask keeps keys after the query: > instead of >=", edit(
        "10", "causal_attention", ("s = tl.where(offs_m[:, None] >= offs_n[None, :], s,",
                                   "s = tl.where(offs_m[:, None] > offs_n[None, :], s,"))),
    Wrong("causal_attention", "the diagonal block unmasked", edit(
        "10", "causal_attention", (DIAGONAL_CALL, DIAGONAL_CALL.replace("BLOCK_N, True)", "BLOCK_N, False)")))),
    Wrong("causal_attention", "every key tile loaded, the future ones masked instead of skipped", edit(
        "10", "causal_attention", (FIRST_CALL + DIAGONAL_CALL, EVERY_KEY_MASKED))),
    Wrong("causal_attention", "V read with Q's strides", edit(
        "10", "causal_attention", ("head_descriptor(v_ptr, b, h, sv_b, sv_h, sv_n,",
                                   "head_descriptor(v_ptr, b, h, sq_b, sq_h, sq_n,"))),
    Wrong("causal_attention", "V taken to be a contiguous (B, H, N, D) tensor", edit(
        "10", "causal_attention", ("head_descriptor(v_ptr, b, h, sv_b, sv_h, sv_n,",
                                   f"head_descriptor(v_ptr, b, h, {CONTIGUOUS},"))),
    Wrong("causal_attention", "the output written as a contiguous (B, H, N, D) tensor", edit(
        "10", "causal_attention", ("head_descriptor(o_ptr, b, h, so_b, so_h, so_n,",
                                   f"head_descriptor(o_ptr, b, h, {CONTIGUOUS},"))),
    Wrong("causal_attention", "a (B, H, N, D) output returned through a transpose: not contiguous", edit(
        "10", "causal_attention",
        ("    out = q.new_empty((B, N, H, D))\n", "    out = q.new_empty((B, H, N, D))\n"),
        ("    o = out.transpose(1, 2)                                # the (B, H, N, D) view the kernel writes "
         "through\n", "    o, out = out, out.transpose(1, 2)\n"))),
    Wrong("causal_attention", "the scale applied twice: q scaled, and qk_scale in the loop", edit(
        "10", "causal_attention", ("    q = q_desc.load([start_m, 0])\n",
                                   "    q = (q_desc.load([start_m, 0]) * qk_scale).to(q_desc.dtype)\n"))),
    Wrong("causal_attention", "exp2 without LOG2E in the scale", edit(
        "10", "causal_attention", ("N, H, D ** -0.5 * lesson06.LOG2E.value,", "N, H, D ** -0.5,"))),
    Wrong("causal_attention", "the block rule as a Python assert: a no-op once compiled", edit(
        "10", "causal_attention", (ASSERT, '    assert BLOCK_M % BLOCK_N == 0, "causal: BLOCK_N must divide BLOCK_M"\n'))),
    # every CPU case has one head or two
    Wrong("causal_attention", "the heads written in as 2: b = pid // 2, h = pid % 2", edit(
        "10", "causal_attention", ("    b = (tl.program_id(1) // n_heads).to(tl.int64)\n"
                                   "    h = (tl.program_id(1) % n_heads).to(tl.int64)\n",
                                   "    b = (tl.program_id(1) // 2).to(tl.int64)\n"
                                   "    h = (tl.program_id(1) % 2).to(tl.int64)\n"))),
    # right wherever BLOCK_M = 2 BLOCK_N: the CPU's configuration, not the check's extra one
    Wrong("causal_attention", "the diagonal's keys end two key tiles past start_m, not at start_m + BLOCK_M",
          edit("10", "causal_attention", (DIAGONAL_CALL, DIAGONAL_CALL.replace("start_m + BLOCK_M,",
                                                                               "start_m + 2 * BLOCK_N,")))),
    Wrong("causal_attention", "the diagonal loop one key tile past the block: masked, but loaded", edit(
        "10", "causal_attention", (DIAGONAL_CALL, DIAGONAL_CALL.replace("start_m + BLOCK_M,",
                                                                        "start_m + BLOCK_M + BLOCK_N,")))),
    Wrong("causal_attention", "K read with Q's strides", edit(
        "10", "causal_attention", ("head_descriptor(k_ptr, b, h, sk_b, sk_h, sk_n,",
                                   "head_descriptor(k_ptr, b, h, sq_b, sq_h, sq_n,"))),
    Wrong("causal_attention", "K's batch stride taken from q (a K cache longer than N reads wrong rows)", edit(
        "10", "causal_attention", ("head_descriptor(k_ptr, b, h, sk_b, sk_h, sk_n,",
                                   "head_descriptor(k_ptr, b, h, sq_b, sk_h, sk_n,"))),
    Wrong("causal_attention", "the output's head stride taken from q", edit(
        "10", "causal_attention", ("head_descriptor(o_ptr, b, h, so_b, so_h, so_n,",
                                   "head_descriptor(o_ptr, b, h, so_b, sq_h, so_n,"))),
    Wrong("causal_attention", "no static_assert: tiles of 32 keys run on blocks of 16 rows", edit(
        "10", "causal_attention", (ASSERT, ""))),
    Wrong("causal_attention", "no static_assert, and key tiles longer than the query blocks", edit(
        "10", "causal_attention", (ASSERT, ""),
        (CPU_TILES, CPU_TILES.replace('"BLOCK_M": 32, "BLOCK_N": 16', '"BLOCK_M": 16, "BLOCK_N": 32')))),
    Wrong("causal_attention", "Q loaded through pointers, not a descriptor", edit(
        "10", "causal_attention", ("    q = q_desc.load([start_m, 0])\n",
                                   "    offs_d = tl.arange(0, HEAD_DIM)\n"
                                   "    q = tl.load(q_ptr + b * sq_b + h * sq_h + offs_m[:, None] * sq_n + "
                                   "offs_d[None, :],\n                mask=offs_m[:, None] < n_ctx, other=0.0)\n"))),
    Wrong("causal_attention", "b and h left int32: b * sq_b wraps past 2**31", edit(
        "10", "causal_attention", ("    b = (tl.program_id(1) // n_heads).to(tl.int64)\n"
                                   "    h = (tl.program_id(1) % n_heads).to(tl.int64)\n",
                                   "    b = tl.program_id(1) // n_heads\n    h = tl.program_id(1) % n_heads\n")),
          gpu_only=True),
    Wrong("causal_attention", "K's and V's offsets in int32 (b and h cast back): wraps past 2**31", edit(
        "10", "causal_attention", ("head_descriptor(k_ptr, b, h,", "head_descriptor(k_ptr, b.to(tl.int32), h.to(tl.int32),"),
        ("head_descriptor(v_ptr, b, h,", "head_descriptor(v_ptr, b.to(tl.int32), h.to(tl.int32),")),
          gpu_only=True),
    Wrong("causal_attention", "V copied into a contiguous tensor first", edit(
        "10", "causal_attention", ("    out = q.new_empty((B, N, H, D))\n",
                                   "    v = v.contiguous()\n    out = q.new_empty((B, N, H, D))\n"))),
    Wrong("causal_attention", "K copied into a contiguous tensor first", edit(
        "10", "causal_attention", ("    out = q.new_empty((B, N, H, D))\n",
                                   "    k = k.contiguous()\n    out = q.new_empty((B, N, H, D))\n"))),
    Wrong("causal_attention", "the output written as a contiguous (B, H, N, D) tensor, then copied into (B, N, H, D)",
          edit("10", "causal_attention",
               ("    out = q.new_empty((B, N, H, D))\n", "    out = q.new_empty((B, H, N, D))\n"),
               ("    o = out.transpose(1, 2)                                # the (B, H, N, D) view the kernel "
                "writes through\n", "    o = out\n"),
               ("HEAD_DIM=D)\n    return out\n", "HEAD_DIM=D)\n    return out.transpose(1, 2).contiguous()\n"))),
]

CAUSAL_RIGHT = [
    Right("causal_attention", "one masked loop over the keys up to the block's end (none right of it loaded)", edit(
        "10", "causal_attention", (FIRST_CALL + DIAGONAL_CALL, DIAGONAL_CALL.replace("offs_m, start_m, ", "offs_m, 0, ")))),
    Right("causal_attention", "blocks of 16 rows, tiles of 16 keys", edit(
        "10", "causal_attention", (CPU_TILES, CPU_TILES.replace('"BLOCK_M": 32', '"BLOCK_M": 16')))),
    Right("causal_attention", "query blocks in their plain order", edit(
        "10", "causal_attention", ("    start_m = (tl.num_programs(0) - 1 - tl.program_id(0)) * BLOCK_M      # the",
                                   "    start_m = tl.program_id(0) * BLOCK_M  # not"))),
]

# ---------------------------------------------------------------- 2. atomic_backward

ADD = '            tl.atomic_add(dq_ptrs, dq, sem="relaxed")\n'
ADD_MASKED = '            tl.atomic_add(dq_ptrs, dq, mask=offs_m[:, None] < n_ctx, sem="relaxed")\n'
SHARE = "        dq = tl.dot(dsT.T, k) * sm_scale                # these keys' share of dQ = dS K\n"
LSE = "            lse2 = tl.load(lse_ptr + offs_m) * lesson06.LOG2E\n"
LSE_MASKED = ('            lse2 = tl.load(lse_ptr + offs_m, mask=offs_m < n_ctx, other=float("inf")) * '
              "lesson06.LOG2E\n")
DELTA_MASKED = "            delta = tl.load(delta_ptr + offs_m, mask=offs_m < n_ctx, other=0.0)\n"
ELSE = "        else:\n" + ADD_MASKED
RACE = ("            row_ok = offs_m[:, None] < n_ctx\n"
        "            tl.store(dq_ptrs, tl.load(dq_ptrs, mask=row_ok) + dq, mask=row_ok)\n")


def _race_in(branch):
    """The step with dQ added by load, add, store in one MASK branch only, atomics in the others."""
    return edit("10", "attention_backward", (ELSE, f'        elif MASK == "{branch}":\n' + RACE + ELSE))


def _autograd_gradients(q, k, v, out, lse, dout, causal=False, sm_scale=None):
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    with torch.enable_grad():
        o = F.scaled_dot_product_attention(*leaves, is_causal=causal, scale=sm_scale)
    return torch.autograd.grad(o, leaves, dout)


BACKWARD_WRONG = [
    Wrong("atomic_backward", "pure PyTorch: autograd, no kernel", _autograd_gradients),
    Wrong("atomic_backward", "dQ's share stored, not added: the other key blocks' shares are lost", edit(
        "10", "attention_backward", (ADD, "            tl.store(dq_ptrs, dq)\n"),
        (ADD_MASKED, "            tl.store(dq_ptrs, dq, mask=offs_m[:, None] < n_ctx)\n"))),
    Wrong("atomic_backward", "load, add, store: right in the interpreter, a race on a GPU", edit(
        "10", "attention_backward", (ADD, "            tl.store(dq_ptrs, tl.load(dq_ptrs) + dq)\n"),
        (ADD_MASKED, "            row_ok = offs_m[:, None] < n_ctx\n"
                     "            tl.store(dq_ptrs, tl.load(dq_ptrs, mask=row_ok) + dq, mask=row_ok)\n"))),
    Wrong("atomic_backward", "atomic adds of scope \"cta\": atomic within one program only, a race on a GPU",
          edit("10", "attention_backward", (ADD, ADD.replace('sem="relaxed"', 'sem="relaxed", scope="cta"')),
               (ADD_MASKED, ADD_MASKED.replace('sem="relaxed"', 'sem="relaxed", scope="cta"')))),
    Wrong("atomic_backward", "load, add, store in the causal branch only: a race on a GPU", _race_in("causal")),
    Wrong("atomic_backward", "load, add, store in the \"ends\" branch only: a race on a GPU", _race_in("ends")),
    Wrong("atomic_backward", "dQ's share not scaled by sm_scale", edit(
        "10", "attention_backward", (SHARE, "        dq = tl.dot(dsT.T, k)\n"))),
    Wrong("atomic_backward", "dQ's share scaled by qk_scale (log2(e) too many)", edit(
        "10", "attention_backward", (SHARE, "        dq = tl.dot(dsT.T, k) * qk_scale\n"))),
    Wrong("atomic_backward", "P = exp2(S) / exp2(lse): both underflow when the scores are far below zero", edit(
        "10", "attention_backward", ("pT = tl.exp2(sT * qk_scale - lse2[None, :])", "pT = tl.exp2(sT * qk_scale) / tl.exp2(lse2[None, :])"))),
    Wrong("atomic_backward", "dS = P * dP: delta not subtracted", edit(
        "10", "attention_backward", ("        dsT = (pT * (dpT - delta[None, :])).to(q.dtype)",
                                     "        dsT = (pT * dpT).to(q.dtype)"))),
    Wrong("atomic_backward", "P from the natural-log lse in base 2 (no LOG2E)", edit(
        "10", "attention_backward", ("            lse2 = tl.load(lse_ptr + offs_m) * lesson06.LOG2E\n",
                                     "            lse2 = tl.load(lse_ptr + offs_m)\n"))),
    Wrong("atomic_backward", "the causal mask keeps keys after the query: > instead of >=", edit(
        "10", "attention_backward", ("sT = tl.where(offs_m[None, :] >= offs_n[:, None], sT,",
                                     "sT = tl.where(offs_m[None, :] > offs_n[:, None], sT,"))),
    Wrong("atomic_backward", "dV not accumulated over the query blocks", edit(
        "10", "attention_backward", ("        dv = tl.dot(pT.to(do.dtype), do, dv)",
                                     "        dv = tl.dot(pT.to(do.dtype), do)"))),
    Wrong("atomic_backward", "the adds of the last query block not masked at the rows past the end", edit(
        "10", "attention_backward", (ADD_MASKED, ADD))),
    Wrong("atomic_backward", "the causal branch's adds unmasked: rows past the end add past dQ's head", edit(
        "10", "attention_backward", ('        if MASK == "none":\n' + ADD, '        if MASK != "ends":\n' + ADD))),
    Wrong("atomic_backward", "the rows past the end read delta = inf: 0 * inf is NaN", edit(
        "10", "attention_backward", (DELTA_MASKED, DELTA_MASKED.replace("other=0.0", 'other=float("inf")')))),
    Wrong("atomic_backward", "dQ from lesson 06's separate dQ kernel", edit(
        "10", "attention_backward", ("    return dq.to(q.dtype), dk, dv\n",
                                     "    return lesson06.flash_backward_dq(q, k, v, out, lse, dout, causal, "
                                     "sm_scale), dk, dv\n"))),
]

BACKWARD_RIGHT = [
    Right("atomic_backward", "P in natural log: exp(S * sm_scale - lse), lse as saved", edit(
        "10", "attention_backward", (LSE, LSE.replace(" * lesson06.LOG2E", "")),
        (LSE_MASKED, LSE_MASKED.replace(" * lesson06.LOG2E", "")),
        ("        pT = tl.exp2(sT * qk_scale - lse2[None, :])", "        pT = tl.exp(sT * sm_scale - lse2[None, :])"))),
    Right("atomic_backward", "32 queries per step", edit(
        "10", "attention_backward", ("cpu=[_backward_config(16, 32, 4, 1)]", "cpu=[_backward_config(32, 32, 4, 1)]"))),
    Right("atomic_backward", "tl.trans, and atomics with their default ordering", edit(
        "10", "attention_backward", (SHARE, "        dq = tl.dot(tl.trans(dsT), k) * sm_scale\n"),
        (ADD, "            tl.atomic_add(dq_ptrs, dq)\n"),
        (ADD_MASKED, "            tl.atomic_add(dq_ptrs, dq, mask=offs_m[:, None] < n_ctx)\n"))),
]

# ---------------------------------------------------------------- 3. softmax_long

INIT = ('    m = tl.full((1,), -float("inf"), tl.float32)       # the row\'s running max\n'
        "    l = tl.zeros((1,), tl.float32)                      # the running sum of exp(x - m)\n")
SHIFT = '        shift = tl.where(m_new == -float("inf"), 0.0, m_new)   # nothing finite yet: add zeros, not NaNs\n'
SUM = "        l = l * tl.exp(m - shift) + tl.sum(tl.exp(x - shift), axis=0)\n"
LOAD_1 = ('        x = tl.load(x_row + start + offs, mask=start + offs < n_cols, other=-float("inf"))'
          ".to(tl.float32)\n")
PASS_1 = ("    for start in range(0, n_cols, BLOCK):\n" + LOAD_1 +
          "        m_new = tl.maximum(m, tl.max(x, axis=0))\n" + SHIFT + SUM + "        m = m_new\n")
# pass 1 with the whole tiles loaded unmasked and one masked tail after the loop: right unless the row
# is a whole number of tiles, where the tail lies past the end and the last whole tile is never read
PEELED = ("    for start in range(0, n_cols - BLOCK, BLOCK):\n"
          "        x = tl.load(x_row + start + offs).to(tl.float32)\n"
          "        m_new = tl.maximum(m, tl.max(x, axis=0))\n" + SHIFT + SUM + "        m = m_new\n"
          "    start = (n_cols // BLOCK) * BLOCK\n" + LOAD_1.replace(" " * 8, " " * 4, 1)
          + "    m_new = tl.maximum(m, tl.max(x, axis=0))\n" + SHIFT.replace(" " * 8, " " * 4, 1)
          + SUM.replace(" " * 8, " " * 4, 1) + "    m = m_new\n")
PER_LANE = ('    m = tl.full((BLOCK,), -float("inf"), tl.float32)\n'
            "    l = tl.zeros((BLOCK,), tl.float32)\n"
            "    for start in range(0, n_cols, BLOCK):\n" + LOAD_1 +
            "        m_new = tl.maximum(m, x)\n"
            '        shift = tl.where(m_new == -float("inf"), 0.0, m_new)\n'
            "        l = l * tl.exp(m - shift) + tl.exp(x - shift)\n"
            "        m = m_new\n"
            "    m_row = tl.max(m, axis=0)\n"
            "    l = tl.sum(l * tl.exp(m - m_row), axis=0)\n"
            "    m = m_row\n")
THREE_PASSES = ("    for start in range(0, n_cols, BLOCK):\n" + LOAD_1 +
                "        m = tl.maximum(m, tl.max(x, axis=0))\n"
                "    for start in range(0, n_cols, BLOCK):\n" + LOAD_1 +
                "        l += tl.sum(tl.exp(x - m), axis=0)\n")
BACKWARDS = "        cols = (n_tiles - 1 - i) * BLOCK + offs         # the last tile first\n"
PASS_2 = (BACKWARDS +
          '        x = tl.load(x_row + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)\n'
          "        tl.store(out_row + cols, (tl.exp(x - m) / l).to(out_ptr.dtype.element_ty), mask=cols < n_cols)\n")
END_ALIGNED = ("        cols = n_cols - (i + 1) * BLOCK + offs        # tiles that end at the row's end\n"
               '        x = tl.load(x_row + cols, mask=(cols >= 0) & (cols < n_cols), other=-float("inf")).to(tl.float32)\n'
               "        tl.store(out_row + cols, (tl.exp(x - m) / l).to(out_ptr.dtype.element_ty),\n"
               "                 mask=(cols >= 0) & (cols < n_cols))\n")

SOFTMAX_WRONG = [
    Wrong("softmax_long", "pure PyTorch, no kernel", lambda x: torch.softmax(x, dim=-1)),
    Wrong("softmax_long", "the second pass walks forwards", edit(
        "10", "softmax_long", (BACKWARDS, "        cols = i * BLOCK + offs\n"))),
    Wrong("softmax_long", "the second pass: the last tile, then 0, 1, 2, ...", edit(
        "10", "softmax_long", (BACKWARDS, "        cols = ((i + n_tiles - 1) % n_tiles) * BLOCK + offs\n"))),
    Wrong("softmax_long", "lesson 05's pass 1: a running max and sum per lane, two exps per element", edit(
        "10", "softmax_long", (INIT + PASS_1, PER_LANE))),
    Wrong("softmax_long", "both passes walk backwards: pass 2 starts with the tiles read longest ago", edit(
        "10", "softmax_long", (PASS_1, PASS_1.replace(
            "    for start in range(0, n_cols, BLOCK):\n",
            "    for i in range(0, tl.cdiv(n_cols, BLOCK)):\n        start = (tl.cdiv(n_cols, BLOCK) - 1 - i) * BLOCK\n")))),
    Wrong("softmax_long", "the row index left int32: row * stride_xm wraps past 2**31", edit(
        "10", "softmax_long", ("    row = tl.program_id(0).to(tl.int64)\n", "    row = tl.program_id(0)\n")),
          gpu_only=True),
    Wrong("softmax_long", "the output's row offset in int32: program_id(0) * stride_om wraps past 2**31", edit(
        "10", "softmax_long", ("    out_row = out_ptr + row * stride_om\n",
                               "    out_row = out_ptr + tl.program_id(0) * stride_om\n")),
          gpu_only=True),
    Wrong("softmax_long", "the running max starts at -1e4 (a stand-in for -inf), with no guard", edit(
        "10", "softmax_long", ("    m = tl.full((1,), -float(\"inf\"), tl.float32)", "    m = tl.full((1,), -1e4, tl.float32)"),
        (SHIFT, "        shift = m_new\n"))),
    Wrong("softmax_long", "pass 1 peeled: the whole tiles unmasked, then one masked tail (a row of whole "
          "tiles loses its last)", edit("10", "softmax_long", (PASS_1, PEELED))),
    Wrong("softmax_long", "three passes: the max, then the sum, then the output", edit(
        "10", "softmax_long", (PASS_1, THREE_PASSES))),
    Wrong("softmax_long", "exp(m - m_new) while both are -inf: NaN after a tile of -inf", edit(
        "10", "softmax_long", (SHIFT, "        shift = m_new\n"))),
    Wrong("softmax_long", "the running max set to the safe shift: 0 after a tile of -inf", edit(
        "10", "softmax_long", ("        m = m_new\n    n_tiles", "        m = shift\n    n_tiles"))),
    Wrong("softmax_long", "the running max starts at 0, not -inf", edit(
        "10", "softmax_long", (INIT, INIT.replace('tl.full((1,), -float("inf"), tl.float32)', "tl.zeros((1,), tl.float32)")))),
    Wrong("softmax_long", "the running sum not rescaled when the max grows", edit(
        "10", "softmax_long", (SUM, "        l = l + tl.sum(tl.exp(x - shift), axis=0)\n"))),
    Wrong("softmax_long", "no max subtracted: sum of exp(x), then exp(x) / sum", edit(
        "10", "softmax_long", (SUM, "        l = l + tl.sum(tl.exp(x), axis=0)\n"),
        ("(tl.exp(x - m) / l)", "(tl.exp(x) / l)"))),
    Wrong("softmax_long", "pass 1's lanes past the row's end loaded as 0, not -inf", edit(
        "10", "softmax_long", (LOAD_1, LOAD_1.replace('other=-float("inf")', "other=0.0")))),
    Wrong("softmax_long", "pass 2 in tiles that end at the row's end, the first one's lanes before the row unmasked",
          edit("10", "softmax_long", (BACKWARDS, "        cols = n_cols - (i + 1) * BLOCK + offs\n"))),
    Wrong("softmax_long", "rows taken to be n_cols apart, not x's row stride", edit(
        "10", "softmax_long", ("    x_row = x_ptr + row * stride_xm\n", "    x_row = x_ptr + row * n_cols\n"))),
    Wrong("softmax_long", "the output's rows placed x's row stride apart, not the output's", edit(
        "10", "softmax_long", ("    out_row = out_ptr + row * stride_om\n", "    out_row = out_ptr + row * stride_xm\n"))),
    Wrong("softmax_long", "the output allocated in float32, whatever x's dtype", edit(
        "10", "softmax_long", ("    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)\n",
                               "    out = torch.empty(x.shape, dtype=torch.float32, device=x.device)\n"))),
]

SOFTMAX_RIGHT = [
    Right("softmax_long", "pass 2 as exp(x - m - log(l)), and m, l as Python scalars to start", edit(
        "10", "softmax_long", (INIT, '    m = -float("inf")\n    l = 0.0\n'),
        ("(tl.exp(x - m) / l)", "tl.exp(x - m - tl.log(l))"))),
    Right("softmax_long", "tiles of 64 values", edit(
        "10", "softmax_long", ('cpu=[triton.Config({"BLOCK": 256}, num_warps=4)]',
                               'cpu=[triton.Config({"BLOCK": 64}, num_warps=4)]'))),
    Right("softmax_long", "the second pass in tiles that end at the row's end", edit(
        "10", "softmax_long", (PASS_2, END_ALIGNED))),
]

# ---------------------------------------------------------------- ring_waits (the Gluon forward's barriers)
# (slot, ready_parity, empty_parity) for tile j of a ring of s slots; use = j // s.

def _phase_bit_kept():
    """ring_waits as a kernel's loop carries it: a phase bit flipped each time the slot wraps to 0, kept
    between calls (right only when the tiles are asked for once, in order from 0)."""
    state = {"phase": 0}

    def ring_waits(j, s):
        if j == 0:
            state["phase"] = 0
        elif j % s == 0:
            state["phase"] ^= 1
        return j % s, state["phase"], state["phase"] ^ 1
    return ring_waits


def _uses_counted():
    """ring_waits that counts each slot's tiles between calls, the count cleared at tile 0."""
    uses = {}

    def ring_waits(j, s):
        if j == 0:
            uses.clear()
        use = uses.get(j % s, 0)
        uses[j % s] = use + 1
        return j % s, use % 2, 1 - use % 2
    return ring_waits


RING_WRONG = [
    Wrong("ring_waits", "the parity of the tile, not of the slot's use: j % 2",
          lambda j, s: (j % s, j % 2, 1 - (j // s) % 2)),
    Wrong("ring_waits", "the producer waits for the consumers' parity: its first wait never returns",
          lambda j, s: (j % s, (j // s) % 2, (j // s) % 2)),
    Wrong("ring_waits", "the producer never really waits: parity 1 always", lambda j, s: (j % s, (j // s) % 2, 1)),
    Wrong("ring_waits", "the slot's use as the slot: j // s",
          lambda j, s: (j // s, (j // s) % 2, 1 - (j // s) % 2)),
    Wrong("ring_waits", "the phase count itself, not its parity", lambda j, s: (j % s, j // s, j // s + 1)),
    Wrong("ring_waits", "the consumers' parity flipped: they read before the first copy lands",
          lambda j, s: (j % s, 1 - (j // s) % 2, 1 - (j // s) % 2)),
    Wrong("ring_waits", "returns a list of two", lambda j, s: [j % s, (j // s) % 2]),
    Wrong("ring_waits", "every tile in slot 0: a correct protocol that never runs ahead",
          lambda j, s: (0, j % 2, 1 - j % 2)),
    Wrong("ring_waits", "a phase bit kept between calls, flipped at each wrap of the slot", _phase_bit_kept()),
    Wrong("ring_waits", "each slot's tiles counted between calls, the count cleared at tile 0", _uses_counted()),
]

RING_RIGHT = [
    Right("ring_waits", "bit operations, and the slots in another order",
          lambda j, s: ((j + 1) % s, (j // s) & 1, ((j // s) & 1) ^ 1)),
    Right("ring_waits", "the producer's parity as a bool: 1 while the slot's use is even",
          lambda j, s: (j % s, (j // s) % 2, (j // s) % 2 == 0)),
]

WRONG = CAUSAL_WRONG + RING_WRONG + BACKWARD_WRONG + SOFTMAX_WRONG
RIGHT = CAUSAL_RIGHT + RING_RIGHT + BACKWARD_RIGHT + SOFTMAX_RIGHT
