"""Lesson 06: attention_tiled, flash_forward(_causal), the four backward steps (PyTorch, dK/dV, dQ, autograd)."""

import numpy as np
import torch

from helpers.exercises.lesson06 import attention_reference
from mutants import Right, Wrong, edit

# The first lines of both forward kernels' bodies: the running max, and the same one started at 0.
FWD_M_INIT = "    m_i = tl.full([BLOCK_M], float(\"-inf\"), tl.float32)\n    l_i = tl.zeros([BLOCK_M], tl.float32)\n"
FWD_M_ZERO = "    m_i = tl.zeros([BLOCK_M], tl.float32)\n    l_i = tl.zeros([BLOCK_M], tl.float32)\n"


def naive(q, k, v, causal=False, sm_scale=None, block_m=32, block_n=16):
    """The N x N reference itself, with the exercise's signature."""
    return attention_reference(q, k, v, causal, sm_scale)


def whole_rows(q, k, v, causal=False, sm_scale=None, block_m=32, block_n=16):
    """Query blocks, but each sees all N keys at once: an exact softmax over a whole row of scores."""
    B, H, N, D = q.shape
    sm_scale = D ** -0.5 if sm_scale is None else sm_scale
    stats = torch.promote_types(q.dtype, torch.float32)
    out, lse = torch.empty_like(q), torch.empty(B, H, N, dtype=stats, device=q.device)
    for i in range(0, N, block_m):
        s = q[:, :, i:i + block_m].to(stats) @ k.to(stats).transpose(-2, -1) * sm_scale
        if causal:
            rows = torch.arange(i, i + s.shape[2], device=q.device)
            s = s.masked_fill(torch.arange(N, device=q.device)[None, :] > rows[:, None], float("-inf"))
        lse[:, :, i:i + block_m] = torch.logsumexp(s, dim=-1)
        out[:, :, i:i + block_m] = (torch.softmax(s, dim=-1) @ v.to(stats)).to(q.dtype)
    return out, lse


def naive_out(q, k, v, causal=False, sm_scale=None):
    return attention_reference(q, k, v, causal, sm_scale)[0]


def naive_grads(q, k, v, out, lse, dout, causal=False, sm_scale=None):
    """The gradients by autograd through the naive reference, in the inputs' dtype."""
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    with torch.enable_grad():
        o = attention_reference(q, k, v, causal, sm_scale)[0]
    return torch.autograd.grad(o, (q, k, v), dout)


forward, forward_causal = edit("06", "flash_forward"), edit("06", "flash_forward_causal")
attention_backward_torch = edit("06", "attention_backward_torch")
flash_backward = edit("06", "flash_backward")


def numpy_beside_a_kernel(q, k, v, sm_scale=None):
    """out and lse computed in NumPy, where neither meter looks, beside the lesson's kernel launched on
    one token of one head (so that a kernel ran), no PyTorch op on the data."""
    forward(q[:1, :1, :1], k[:1, :1, :1], v[:1, :1, :1], sm_scale)
    qn, kn, vn = (t.detach().cpu().numpy().astype(np.float64) for t in (q, k, v))
    s = qn @ kn.swapaxes(-1, -2) * (q.shape[-1] ** -0.5 if sm_scale is None else sm_scale)
    m = s.max(-1, keepdims=True)
    e = np.exp(s - m)
    out, lse = (e / e.sum(-1, keepdims=True)) @ vn, (m + np.log(e.sum(-1, keepdims=True)))[..., 0]
    return (torch.from_numpy(out.astype(qn.dtype)).to(q.device, q.dtype),
            torch.from_numpy(lse.astype(np.float32)).to(q.device))


class TritonForwardAutogradBackward(torch.autograd.Function):
    """The Triton forward, then a backward that lets autograd differentiate the naive formula (in float32)."""

    @staticmethod
    def forward(ctx, q, k, v, causal, sm_scale):
        ctx.save_for_backward(q, k, v)
        ctx.causal, ctx.sm_scale = causal, sm_scale
        return (forward_causal if causal else forward)(q, k, v, sm_scale)[0]

    @staticmethod
    def backward(ctx, dout):
        q, k, v = (t.detach().float().requires_grad_() for t in ctx.saved_tensors)
        with torch.enable_grad():
            out = attention_reference(q, k, v, ctx.causal, ctx.sm_scale)[0]
        grads = torch.autograd.grad(out, (q, k, v), dout.float())
        return (*(g.to(dout.dtype) for g in grads), None, None)


def autograd_backward(q, k, v, causal=False, sm_scale=None):
    return TritonForwardAutogradBackward.apply(q, k, v, causal, sm_scale)


# The running sums kept in the inputs' dtype between tiles (each tl.dot still adds in float32), and
# started in float16 so that the loop compiles on a GPU (Triton refuses a loop-carried value whose dtype
# changes): the checks' float16 cases whose sums pass 65504 before they come back see them overflow.
F16_ACC = ("        acc = tl.dot(p.to(v.dtype), v, acc)\n",
           "        acc = tl.dot(p.to(v.dtype), v, acc.to(tl.float32)).to(v.dtype)\n")
F16_ACC_FULL = [F16_ACC, ("    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)\n    n_full",
                          "    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float16)\n    n_full")]
F16_ACC_CAUSAL = [F16_ACC, ("    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)\n    # keys 0",
                            "    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float16)\n    # keys 0")]
F16_DKDV = [("        dv = tl.dot(pT.to(do.dtype), do, dv)  ",
             "        dv = tl.dot(pT.to(do.dtype), do, dv.to(tl.float32)).to(do.dtype)  "),
            ("        dk = tl.dot(dsT.to(qT.dtype), tl.trans(qT), dk)  ",
             "        dk = tl.dot(dsT.to(qT.dtype), tl.trans(qT), dk.to(tl.float32)).to(qT.dtype)  "),
            ("    dk = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)\n    dv = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)\n",
             "    dk = tl.zeros([BLOCK_N, HEAD_DIM], tl.float16)\n    dv = tl.zeros([BLOCK_N, HEAD_DIM], tl.float16)\n")]
F16_DQ = [("        dq = tl.dot(ds.to(kT.dtype), tl.trans(kT), dq)  ",
           "        dq = tl.dot(ds.to(kT.dtype), tl.trans(kT), dq.to(tl.float32)).to(kT.dtype)  "),
          ("    dq = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)\n",
           "    dq = tl.zeros([BLOCK_M, HEAD_DIM], tl.float16)\n")]
HARD_CODED_SCALE = ("    sm_scale = D ** -0.5 if sm_scale is None else sm_scale\n    return q.contiguous()",
                    "    sm_scale = D ** -0.5\n    return q.contiguous()")
# The (batch, head) program id left in int32: bh * N * D wraps once a tensor passes 2**31 elements.
INT32_FWD = ("bh = tl.program_id(1).to(tl.int64)                # int64: B*H*N*D may pass 2**31",
             "bh = tl.program_id(1)")
INT32_CAUSAL = ("    start_m = (tl.num_programs(0) - 1 - tl.program_id(0)) * BLOCK_M\n    bh = tl.program_id(1).to(tl.int64)\n"
                "    q_ptr += bh * n_ctx * HEAD_DIM\n    k_ptr += bh * n_ctx * HEAD_DIM\n    v_ptr += bh * n_ctx * HEAD_DIM\n"
                "    o_ptr",
                "    start_m = (tl.num_programs(0) - 1 - tl.program_id(0)) * BLOCK_M\n    bh = tl.program_id(1)\n"
                "    q_ptr += bh * n_ctx * HEAD_DIM\n    k_ptr += bh * n_ctx * HEAD_DIM\n    v_ptr += bh * n_ctx * HEAD_DIM\n"
                "    o_ptr")


def per_query(q, k, v, causal=False, sm_scale=None, block_m=32, block_n=16):
    """An exact softmax one query at a time: no tile of keys, a whole row of N scores per query."""
    B, H, N, D = q.shape
    sm_scale = D ** -0.5 if sm_scale is None else sm_scale
    stats = torch.promote_types(q.dtype, torch.float32)
    out, lse = torch.empty_like(q), torch.empty(B, H, N, dtype=stats, device=q.device)
    for i in range(N):
        s = (q[:, :, i:i + 1] @ k.transpose(-2, -1)).to(stats) * sm_scale
        if causal:
            s[..., i + 1:] = float("-inf")
        lse[:, :, i] = torch.logsumexp(s, dim=-1)[..., 0]
        out[:, :, i:i + 1] = (torch.softmax(s, dim=-1) @ v.to(stats)).to(q.dtype)
    return out, lse


def two_passes(q, k, v, causal=False, sm_scale=None, block_m=32, block_n=16):
    """Key tiles of block_n, but two passes over them per query block: the max and the sum (the lse)
    first, then the output with every P exactly normalised. Right values, K read twice."""
    B, H, N, D = q.shape
    sm_scale = D ** -0.5 if sm_scale is None else sm_scale
    stats = torch.promote_types(q.dtype, torch.float32)
    out, lse = torch.empty_like(q), torch.empty(B, H, N, dtype=stats, device=q.device)
    for i in range(0, N, block_m):
        qi = q[:, :, i:i + block_m]
        rows = torch.arange(i, i + qi.shape[2], device=q.device)

        def scores(j):
            s = (qi @ k[:, :, j:j + block_n].transpose(-2, -1)).to(stats) * sm_scale
            if causal:
                cols = torch.arange(j, j + s.shape[-1], device=q.device)
                s = s.masked_fill(cols[None, :] > rows[:, None], float("-inf"))
            return s
        m = torch.full(qi.shape[:3], float("-inf"), dtype=stats, device=q.device)
        l = torch.zeros(qi.shape[:3], dtype=stats, device=q.device)
        for j in range(0, N, block_n):
            s = scores(j)
            m_new = torch.maximum(m, s.amax(dim=-1))
            l = l * torch.exp(m - m_new) + torch.exp(s - m_new[..., None]).sum(dim=-1)
            m = m_new
        row_lse = m + torch.log(l)
        acc = torch.zeros(qi.shape, dtype=stats, device=q.device)
        for j in range(0, N, block_n):
            acc = acc + torch.exp(scores(j) - row_lse[..., None]) @ v[:, :, j:j + block_n].to(stats)
        out[:, :, i:i + block_m], lse[:, :, i:i + block_m] = acc, row_lse
    return out, lse


def by_torch_func(q, k, v, out, lse, dout, causal=False, sm_scale=None):
    """The gradients by torch.func.vjp through the naive reference: autograd under another name."""
    _, pull = torch.func.vjp(lambda q, k, v: attention_reference(q, k, v, causal, sm_scale)[0], q, k, v)
    return pull(dout)


# One more tile than the diagonal needs, every score in it masked: the loop over the diagonal ends one
# key tile too late (forward, dQ) or starts one query block too early (dK/dV). The values stay right.
ONE_TILE_PAST = "a loop one tile past the diagonal (that tile all masked)"
FWD_ONE_PAST = ("    hi = tl.minimum(start_m + BLOCK_M, n_ctx)\n    acc, l_i, m_i",
                "    hi = tl.minimum(start_m + BLOCK_M + BLOCK_N, n_ctx)\n    acc, l_i, m_i")
DQ_ONE_PAST = ("        hi = tl.minimum(start_m + BLOCK_M, n_ctx)\n        dq = bwd_dq_loop(",
               "        hi = tl.minimum(start_m + BLOCK_M + BLOCK_N, n_ctx)\n        dq = bwd_dq_loop(")
DKDV_ONE_PAST = ("offs_n, start_n, hi,", "offs_n, tl.maximum(start_n - BLOCK_M, 0), hi,")

# A first pass over the K tiles for each query row's true max, before the loops that sum: the sums then
# never need rescaling. The values are right; every score is computed twice and K is read twice.
MAX_PASS = ("    for start in range(0, {hi}, BLOCK_N):\n"
            "        offs_n = start + tl.arange(0, BLOCK_N)\n"
            "        kT_ptrs = k_ptr + offs_n[None, :] * HEAD_DIM + offs_d[:, None]\n"
            "        kT = tl.load(kT_ptrs, mask=offs_n[None, :] < n_ctx, other=0.0)\n"
            "        s = tl.where({keep}, tl.dot(q, kT), float(\"-inf\"))\n"
            "        m_i = tl.maximum(m_i, tl.max(s, 1) * qk_scale)\n")
FWD_MAX_PASS = ("    n_full = (n_ctx // BLOCK_N) * BLOCK_N             # whole tiles",
                MAX_PASS.format(hi="n_ctx", keep="offs_n[None, :] < n_ctx")
                + "    n_full = (n_ctx // BLOCK_N) * BLOCK_N             # whole tiles")
CAUSAL_MAX_PASS = ("    # keys 0 .. start_m-1 come before every query of this block: no mask\n",
                   MAX_PASS.format(hi="tl.minimum(start_m + BLOCK_M, n_ctx)",
                                   keep="offs_m[:, None] >= offs_n[None, :]")
                   + "    # keys 0 .. start_m-1 come before every query of this block: no mask\n")

FWD_FIRST = "acc, l_i, m_i = fwd_tile_loop(acc, l_i, m_i, q, k_ptr, v_ptr, offs_m, 0, n_full, n_ctx, qk_scale,"

# A number written where a block size belongs: the configurations' own value (64 query rows in the
# forward and dQ kernels, 64 keys in the dK/dV kernel, the first on a GPU below 1024 keys as well). Every
# other case runs with that value, and the check's extra run with other blocks is the one that sees it.
FWD_START = "    start_m = tl.program_id(0) * BLOCK_M\n    bh = tl.program_id(1).to(tl.int64)                # int64"
DKDV_START = "    start_n = tl.program_id(0) * BLOCK_N\n    bh = tl.program_id(1).to(tl.int64)\n"
DQ_START = "    start_m = tl.program_id(0) * BLOCK_M\n    if CAUSAL:"
# The causal diagonal's end written as two blocks of the streamed size: right wherever the held block is
# twice the streamed one, as in every configuration the CPU runs and the first on a GPU (dQ 64 x 32,
# dK/dV 32 x 64).
DKDV_DIAG = "        hi = tl.minimum(start_n + BLOCK_N, n_ctx)\n        dk, dv = bwd_dkdv_loop("
DKDV_SECOND = "offs_n, start_n + BLOCK_N,\n                               n_ctx, n_ctx,"


class SavedOnTheClass(torch.autograd.Function):
    """The Triton forward and backward, with what backward needs kept on the class: one slot, which the
    next call's forward overwrites before this call's backward runs."""

    @staticmethod
    def forward(ctx, q, k, v, causal, sm_scale):
        out, lse = (forward_causal if causal else forward)(q, k, v, sm_scale)
        SavedOnTheClass.saved = (q, k, v, out, lse, causal, sm_scale)
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse, causal, sm_scale = SavedOnTheClass.saved
        return (*flash_backward(q, k, v, out, lse, dout, causal, sm_scale), None, None)


def saved_on_the_class(q, k, v, causal=False, sm_scale=None):
    return SavedOnTheClass.apply(q, k, v, causal, q.shape[-1] ** -0.5 if sm_scale is None else sm_scale)


FWD_BLOCKS = [("FWD_CONFIGS = _configs(cpu=[(64, 32, 4, 1)]", "FWD_CONFIGS = _configs(cpu=[(32, 16, 4, 1)]"),
              ("gpu=[(64, 64, 4, 3), (128, 64, 8, 3)", "gpu=[(32, 32, 4, 2), (128, 64, 8, 3)")]

WRONG = [
    Wrong("attention_tiled", "the naive N x N reference", naive),
    Wrong("attention_tiled", "a whole row of scores per query block (no key tiles)", whole_rows),
    Wrong("attention_tiled", "acc not rescaled when the max grows", edit(
        "06", "attention_tiled", ("acc = acc * alpha[..., None] + p @ vj.to(stats)", "acc = acc + p @ vj.to(stats)"))),
    Wrong("attention_tiled", "sm_scale hard-coded to 1/sqrt(D)", edit(
        "06", "attention_tiled", ("    B, H, N, D = q.shape\n    sm_scale = D ** -0.5 if sm_scale is None else sm_scale",
                                  "    B, H, N, D = q.shape\n    sm_scale = D ** -0.5"))),
    Wrong("attention_tiled", "running maximum starts at 0, not -inf", edit(
        "06", "attention_tiled", ("m = torch.full(qi.shape[:3], float(\"-inf\"), dtype=stats, device=q.device)",
                                  "m = torch.zeros(qi.shape[:3], dtype=stats, device=q.device)"))),
    Wrong("attention_tiled", "causal mask off by one (keys j < i)", edit(
        "06", "attention_tiled", ("cols[None, :] > rows[:, None]", "cols[None, :] >= rows[:, None]"))),
    Wrong("attention_tiled", "lse without the max (log of l only)", edit(
        "06", "attention_tiled", ("= m + torch.log(l)", "= torch.log(l)"))),
    Wrong("attention_tiled", "an exact softmax one query at a time (a whole row of scores each)", per_query),
    Wrong("attention_tiled", "two passes over the key tiles: the lse first, then P V (K read twice)",
          two_passes),
    Wrong("attention_tiled", "causal loop stops before the diagonal tile", edit(
        "06", "attention_tiled", ("stop = min(N, i + block_m) if causal", "stop = i if causal"))),
    Wrong("attention_tiled", "m, l, acc and the lse kept in q's dtype: float16 for float16 inputs", edit(
        "06", "attention_tiled", ("stats = torch.promote_types(q.dtype, torch.float32)", "stats = q.dtype"))),
    # right wherever block_n divides block_m (the default 32 x 16): only then is every tile left of the
    # query block's own wholly in the past
    Wrong("attention_tiled", "the causal mask applied only to key tiles from the query block's start on", edit(
        "06", "attention_tiled", ("            if causal:\n                cols = torch.arange(",
                                  "            if causal and j >= i:\n                cols = torch.arange("))),
    # right unless the last query block is at most block_n rows: its loop then reaches a tile past N, empty
    Wrong("attention_tiled", "causal: the loop stops at i + block_m, not cut at N (an empty tile at the end)", edit(
        "06", "attention_tiled", ("stop = min(N, i + block_m) if causal else N", "stop = i + block_m if causal else N"))),

    Wrong("flash_forward", "pure PyTorch, no kernel", lambda q, k, v, sm_scale=None: attention_reference(
        q, k, v, False, sm_scale)),
    # the interpreter counts the bytes a kernel stores (on a GPU too, inside record())
    Wrong("flash_forward", "values from NumPy beside a kernel run on one token", numpy_beside_a_kernel),
    Wrong("flash_forward", "sm_scale hard-coded to 1/sqrt(D)", edit("06", "flash_forward", HARD_CODED_SCALE)),
    Wrong("flash_forward", "acc kept in float16 between tiles", edit("06", "flash_forward", *F16_ACC_FULL)),
    # right wherever N is no multiple of BLOCK_N: the masked loop then takes the last tile anyway
    Wrong("flash_forward", "the unmasked loop stops at n_ctx - BLOCK_N: the last whole tile dropped", edit(
        "06", "flash_forward", (FWD_FIRST, FWD_FIRST.replace("0, n_full, n_ctx", "0, n_ctx - BLOCK_N, n_ctx")))),
    Wrong("flash_forward", "acc not rescaled when the max grows", edit(
        "06", "flash_forward", ("        acc = acc * alpha[:, None]\n", ""))),
    Wrong("flash_forward", "keys past N loaded as 0 but not masked in the scores", edit(
        "06", "flash_forward", ("        if MASK == \"keys\":\n            s = tl.where(offs_n[None, :] < n_ctx, s, float(\"-inf\"))\n"
                                "        if MASK == \"causal\":\n"
                                "            s = tl.where(offs_m[:, None] >= offs_n[None, :], s, float(\"-inf\"))\n        m_new",
                                "        if MASK == \"causal\":\n"
                                "            s = tl.where(offs_m[:, None] >= offs_n[None, :], s, float(\"-inf\"))\n        m_new"))),
    Wrong("flash_forward", "running maximum starts at 0, not -inf", edit(
        "06", "flash_forward", (FWD_M_INIT + "    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)\n    n_full",
                                FWD_M_ZERO + "    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)\n    n_full"))),
    Wrong("flash_forward", "running maximum starts at -1e4, a finite stand-in for -inf", edit(
        "06", "flash_forward", (FWD_M_INIT + "    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)\n    n_full",
                                FWD_M_INIT.replace('float("-inf")', "-1e4")
                                + "    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)\n    n_full"))),
    Wrong("flash_forward", "lse without the max (log of l only)", edit(
        "06", "flash_forward", ("(m_i + tl.log2(l_i)) * LN2, mask=row_ok)   # back", "tl.log2(l_i) * LN2, mask=row_ok)   #"))),
    Wrong("flash_forward", "lse stored in the inputs' dtype", edit(
        "06", "flash_forward", ("lse = torch.empty(B, H, N, device=q.device, dtype=torch.float32)",
                                "lse = torch.empty(B, H, N, device=q.device, dtype=q.dtype)"))),
    Wrong("flash_forward", "strided inputs used without .contiguous()", edit(
        "06", "flash_forward", ("return q.contiguous(), k.contiguous(), v.contiguous(), sm_scale",
                                "return q, k, v, sm_scale"))),
    Wrong("flash_forward", "v used without .contiguous() (q and k made contiguous)", edit(
        "06", "flash_forward", ("return q.contiguous(), k.contiguous(), v.contiguous(), sm_scale",
                                "return q.contiguous(), k.contiguous(), v, sm_scale"))),
    Wrong("flash_forward", "a first pass over the K tiles for the row max (every score computed twice)", edit(
        "06", "flash_forward", FWD_MAX_PASS)),
    # key tiles of 16, the head dimension the check first measures at: its two products then share a shape
    Wrong("flash_forward", "a first pass for the row max, with blocks of 32 x 16", edit(
        "06", "flash_forward", FWD_MAX_PASS, *FWD_BLOCKS)),
    Wrong("flash_forward", "int32 offsets: bh * N * D wraps past 2**31 elements", edit(
        "06", "flash_forward", INT32_FWD), gpu_only=True),
    Wrong("flash_forward", "the query block's first row at program_id(0) * 64, not * BLOCK_M", edit(
        "06", "flash_forward", (FWD_START, FWD_START.replace("* BLOCK_M", "* 64")))),

    Wrong("flash_forward_causal", "pure PyTorch, no kernel", lambda q, k, v, sm_scale=None: attention_reference(
        q, k, v, True, sm_scale)),
    Wrong("flash_forward_causal", "the full kernel: no causal mask", forward),
    Wrong("flash_forward_causal", "acc kept in float16 between tiles", edit(
        "06", "flash_forward_causal", *F16_ACC_CAUSAL)),
    Wrong("flash_forward_causal", "no tile skipping: every tile loaded, then masked", edit(
        "06", "flash_forward_causal", ("    hi = tl.minimum(start_m + BLOCK_M, n_ctx)\n    acc, l_i, m_i",
                                       "    hi = n_ctx\n    acc, l_i, m_i"))),
    Wrong("flash_forward_causal", "every tile visited, the loads right of the diagonal masked off", edit(
        "06", "flash_forward_causal",
        ("    hi = tl.minimum(start_m + BLOCK_M, n_ctx)\n    acc, l_i, m_i", "    hi = n_ctx\n    acc, l_i, m_i"),
        ("kT = tl.load(kT_ptrs, mask=offs_n[None, :] < n_ctx, other=0.0)",
         "kT = tl.load(kT_ptrs, mask=(offs_n[None, :] < n_ctx) & (offs_n[None, :] <= tl.max(offs_m)), other=0.0)"),
        ("v = tl.load(v_ptrs, mask=offs_n[:, None] < n_ctx, other=0.0)",
         "v = tl.load(v_ptrs, mask=(offs_n[:, None] < n_ctx) & (offs_n[:, None] <= tl.max(offs_m)), other=0.0)"),
    )),
    Wrong("flash_forward_causal", ONE_TILE_PAST, edit("06", "flash_forward_causal", FWD_ONE_PAST)),
    # right wherever BLOCK_M = 2 BLOCK_N: every configuration the CPU runs but the check's extra one
    Wrong("flash_forward_causal", "the diagonal's keys end two key tiles past start_m, not at start_m + BLOCK_M",
          edit("06", "flash_forward_causal", (FWD_ONE_PAST[0], FWD_ONE_PAST[0].replace("start_m + BLOCK_M",
                                                                                        "start_m + 2 * BLOCK_N")))),
    Wrong("flash_forward_causal", "the diagonal's keys end at start_m + 64, not start_m + BLOCK_M", edit(
        "06", "flash_forward_causal", (FWD_ONE_PAST[0], FWD_ONE_PAST[0].replace("start_m + BLOCK_M", "start_m + 64")))),
    Wrong("flash_forward_causal", "causal mask off by one (keys j < i)", edit(
        "06", "flash_forward_causal", ("s = tl.where(offs_m[:, None] >= offs_n[None, :], s, float(\"-inf\"))\n        m_new",
                                       "s = tl.where(offs_m[:, None] > offs_n[None, :], s, float(\"-inf\"))\n        m_new"))),
    Wrong("flash_forward_causal", "diagonal tiles not masked", edit(
        "06", "flash_forward_causal", ("offs_m, start_m, hi, n_ctx, qk_scale,\n                                  HEAD_DIM, BLOCK_N, \"causal\")",
                                       "offs_m, start_m, hi, n_ctx, qk_scale,\n                                  HEAD_DIM, BLOCK_N, \"keys\")"))),
    Wrong("flash_forward_causal", "a first pass over the K tiles for the row max (each score computed twice)",
          edit("06", "flash_forward_causal", CAUSAL_MAX_PASS)),
    Wrong("flash_forward_causal", "a first pass for the row max, with blocks of 32 x 16", edit(
        "06", "flash_forward_causal", CAUSAL_MAX_PASS, *FWD_BLOCKS)),
    Wrong("flash_forward_causal", "int32 offsets: bh * N * D wraps past 2**31 elements", edit(
        "06", "flash_forward_causal", INT32_CAUSAL), gpu_only=True),
    Wrong("flash_forward_causal", "sm_scale hard-coded to 1/sqrt(D)", edit(
        "06", "flash_forward_causal", HARD_CODED_SCALE)),
    Wrong("flash_forward_causal", "running maximum starts at 0, not -inf", edit(
        "06", "flash_forward_causal", (FWD_M_INIT + "    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)\n    # keys 0",
                                       FWD_M_ZERO + "    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)\n    # keys 0"))),
    Wrong("flash_forward_causal", "lse without the max (log of l only)", edit(
        "06", "flash_forward_causal", ("(m_i + tl.log2(l_i)) * LN2, mask=row_ok)\n\n\ndef flash_forward_causal",
                                       "tl.log2(l_i) * LN2, mask=row_ok)\n\n\ndef flash_forward_causal"))),

    Wrong("attention_backward_torch", "autograd through the naive reference", naive_grads),
    Wrong("attention_backward_torch", "torch.func.vjp through the naive reference", by_torch_func),
    Wrong("attention_backward_torch", "dS = P * dP: delta not subtracted", edit(
        "06", "attention_backward_torch", ("ds = p * (dp - delta)  ", "ds = p * dp  "))),
    Wrong("attention_backward_torch", "dQ and dK not multiplied by sm_scale", edit(
        "06", "attention_backward_torch", ("dq = (ds @ k) * sm_scale", "dq = ds @ k"),
        ("dk = (ds.transpose(-2, -1) @ q) * sm_scale", "dk = ds.transpose(-2, -1) @ q"))),
    Wrong("attention_backward_torch", "dK = scale dS Q: dS not transposed", edit(
        "06", "attention_backward_torch", ("dk = (ds.transpose(-2, -1) @ q)", "dk = (ds @ q)"))),
    Wrong("attention_backward_torch", "delta = rowsum(dO): O left out", edit(
        "06", "attention_backward_torch", ("delta = (dout * out).sum(", "delta = dout.sum("))),
    Wrong("attention_backward_torch", "P recomputed without the causal mask", edit(
        "06", "attention_backward_torch", ("        s = s.masked_fill(future, float(\"-inf\"))\n    p = torch.exp",
                                           "    p = torch.exp"))),
    Wrong("attention_backward_torch", "P = exp(S) / exp(lse): both underflow when the lse is far below zero", edit(
        "06", "attention_backward_torch", ("p = torch.exp(s - lse[..., None])                      #",
                                           "p = torch.exp(s) / torch.exp(lse[..., None])  #"))),
    Wrong("attention_backward_torch", "P = exp(S): the lse not subtracted", edit(
        "06", "attention_backward_torch", ("p = torch.exp(s - lse[..., None])                      #", "p = torch.exp(s)  #"))),

    Wrong("flash_backward_dkdv", "pure PyTorch, no kernel", lambda *args, **kwargs: attention_backward_torch(
        *args[:6], **kwargs)[1:]),
    Wrong("flash_backward_dkdv", "dout passed to the kernel without .contiguous()", edit(
        "06", "flash_backward_dkdv", ("dout.contiguous(), lse.contiguous(), delta, dk, dv",
                                      "dout, lse.contiguous(), delta, dk, dv"))),
    Wrong("flash_backward_dkdv", "lse passed to the kernel without .contiguous()", edit(
        "06", "flash_backward_dkdv", ("dout.contiguous(), lse.contiguous(), delta, dk, dv",
                                      "dout.contiguous(), lse, delta, dk, dv"))),
    Wrong("flash_backward_dkdv", "int32 offsets: bh * N * D wraps past 2**31 elements", edit(
        "06", "flash_backward_dkdv", ("    start_n = tl.program_id(0) * BLOCK_N\n    bh = tl.program_id(1).to(tl.int64)",
                                      "    start_n = tl.program_id(0) * BLOCK_N\n    bh = tl.program_id(1)")),
          gpu_only=True),
    Wrong("flash_backward_dkdv", "causal: every query block visited, the ones before the keys masked", edit(
        "06", "flash_backward_dkdv", ("offs_n, start_n, hi,", "offs_n, 0, hi,"))),
    Wrong("flash_backward_dkdv", ONE_TILE_PAST, edit("06", "flash_backward_dkdv", DKDV_ONE_PAST)),
    Wrong("flash_backward_dkdv", "dK and dV kept in float16 between query blocks", edit(
        "06", "flash_backward_dkdv", *F16_DKDV)),
    Wrong("flash_backward_dkdv", "dK alone kept in float16 between query blocks", edit(
        "06", "flash_backward_dkdv", F16_DKDV[1],
        ("    dk = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)\n", "    dk = tl.zeros([BLOCK_N, HEAD_DIM], tl.float16)\n"))),
    Wrong("flash_backward_dkdv", "causal: the masked query blocks end two blocks past start_n, not at start_n + BLOCK_N",
          edit("06", "flash_backward_dkdv", (DKDV_DIAG, DKDV_DIAG.replace("start_n + BLOCK_N", "start_n + 2 * BLOCK_M")),
               (DKDV_SECOND, DKDV_SECOND.replace("start_n + BLOCK_N", "start_n + 2 * BLOCK_M")))),
    Wrong("flash_backward_dkdv", "the key block's first row at program_id(0) * 64, not * BLOCK_N", edit(
        "06", "flash_backward_dkdv", (DKDV_START, DKDV_START.replace("* BLOCK_N", "* 64")))),
    Wrong("flash_backward_dkdv", "dK not multiplied by sm_scale", edit(
        "06", "flash_backward_dkdv", ("(dk * sm_scale).to(dk_ptr.dtype.element_ty)", "dk.to(dk_ptr.dtype.element_ty)"))),
    Wrong("flash_backward_dkdv", "dS = P * dP: delta not subtracted", edit(
        "06", "flash_backward_dkdv", ("dsT = pT * (dpT - delta[None, :])", "dsT = pT * dpT"))),
    Wrong("flash_backward_dkdv", "causal mask off by one (keys j < i)", edit(
        "06", "flash_backward_dkdv", ("offs_m[None, :] >= offs_n[:, None]", "offs_m[None, :] > offs_n[:, None]"))),
    Wrong("flash_backward_dkdv", "diagonal query blocks not masked", edit(
        "06", "flash_backward_dkdv", ("n_ctx, qk_scale, HEAD_DIM, BLOCK_M, True)", "n_ctx, qk_scale, HEAD_DIM, BLOCK_M, False)"))),
    Wrong("flash_backward_dkdv", "P = exp2(S) / exp2(lse): both underflow when the lse is far below zero", edit(
        "06", "flash_backward_dkdv", ("pT = tl.exp2(sT * qk_scale - lse2[None, :])", "pT = tl.exp2(sT * qk_scale) / tl.exp2(lse2[None, :])"))),
    Wrong("flash_backward_dkdv", "lse used in natural-log units by exp2", edit(
        "06", "flash_backward_dkdv", ("other=float(\"inf\")) * LOG2E", "other=float(\"inf\"))"))),
    Wrong("flash_backward_dkdv", "causal: the query blocks below the diagonal skipped", edit(
        "06", "flash_backward_dkdv", ("offs_n, start_n + BLOCK_N,\n                               n_ctx, n_ctx,",
                                      "offs_n, start_n + BLOCK_N,\n                               start_n + BLOCK_N, n_ctx,"))),

    Wrong("flash_backward_dq", "pure PyTorch, no kernel", lambda *args, **kwargs: attention_backward_torch(
        *args[:6], **kwargs)[0]),
    Wrong("flash_backward_dq", "lse passed to the kernel without .contiguous()", edit(
        "06", "flash_backward_dq", ("dout.contiguous(), lse.contiguous(), delta, dq, N",
                                    "dout.contiguous(), lse, delta, dq, N"))),
    Wrong("flash_backward_dq", "int32 offsets: bh * N * D wraps past 2**31 elements", edit(
        "06", "flash_backward_dq", ("* BLOCK_M\n    bh = tl.program_id(1).to(tl.int64)\n    q_ptr += bh * n_ctx * HEAD_DIM\n"
                                    "    k_ptr += bh * n_ctx * HEAD_DIM\n    v_ptr += bh * n_ctx * HEAD_DIM\n    do_ptr",
                                    "* BLOCK_M\n    bh = tl.program_id(1)\n    q_ptr += bh * n_ctx * HEAD_DIM\n"
                                    "    k_ptr += bh * n_ctx * HEAD_DIM\n    v_ptr += bh * n_ctx * HEAD_DIM\n    do_ptr")),
          gpu_only=True),
    Wrong("flash_backward_dq", "causal: every key tile visited, the ones past the diagonal masked", edit(
        "06", "flash_backward_dq", ("        hi = tl.minimum(start_m + BLOCK_M, n_ctx)\n        dq = bwd_dq_loop(",
                                    "        hi = n_ctx\n        dq = bwd_dq_loop("))),
    Wrong("flash_backward_dq", ONE_TILE_PAST, edit("06", "flash_backward_dq", DQ_ONE_PAST)),
    Wrong("flash_backward_dq", "dQ kept in float16 between key tiles", edit("06", "flash_backward_dq", *F16_DQ)),
    Wrong("flash_backward_dq", "causal: the diagonal's keys end two tiles past start_m, not at start_m + BLOCK_M", edit(
        "06", "flash_backward_dq", (DQ_ONE_PAST[0], DQ_ONE_PAST[0].replace("start_m + BLOCK_M", "start_m + 2 * BLOCK_N")))),
    Wrong("flash_backward_dq", "the query block's first row at program_id(0) * 64, not * BLOCK_M", edit(
        "06", "flash_backward_dq", (DQ_START, DQ_START.replace("* BLOCK_M", "* 64")))),
    Wrong("flash_backward_dq", "dQ not multiplied by sm_scale", edit(
        "06", "flash_backward_dq", ("(dq * sm_scale).to(dq_ptr.dtype.element_ty)", "dq.to(dq_ptr.dtype.element_ty)"))),
    Wrong("flash_backward_dq", "dS = P * dP: delta not subtracted", edit(
        "06", "flash_backward_dq", ("ds = p * (dp - delta[:, None])", "ds = p * dp"))),
    Wrong("flash_backward_dq", "causal mask off by one (keys j < i)", edit(
        "06", "flash_backward_dq", ("s = tl.where(offs_m[:, None] >= offs_n[None, :], s, float(\"-inf\"))\n        p = tl.exp2",
                                    "s = tl.where(offs_m[:, None] > offs_n[None, :], s, float(\"-inf\"))\n        p = tl.exp2"))),
    Wrong("flash_backward_dq", "diagonal tiles not masked", edit(
        "06", "flash_backward_dq", ("offs_m, start_m, hi, n_ctx, qk_scale,\n                         HEAD_DIM, BLOCK_N, \"causal\")",
                                    "offs_m, start_m, hi, n_ctx, qk_scale,\n                         HEAD_DIM, BLOCK_N, \"keys\")"))),
    Wrong("flash_backward_dq", "keys past N loaded as 0 but not masked in the scores: exp2(0 - lse) is inf "
          "where the lse is far below zero, and inf * 0 is NaN", edit(
        "06", "flash_backward_dq", ("        if MASK == \"keys\":\n            s = tl.where(offs_n[None, :] < n_ctx, s, float(\"-inf\"))\n"
                                    "        if MASK == \"causal\":\n"
                                    "            s = tl.where(offs_m[:, None] >= offs_n[None, :], s, float(\"-inf\"))\n        p = tl.exp2",
                                    "        if MASK == \"causal\":\n"
                                    "            s = tl.where(offs_m[:, None] >= offs_n[None, :], s, float(\"-inf\"))\n        p = tl.exp2"))),
    Wrong("flash_backward_dq", "P = exp2(S) / exp2(lse): both underflow when the lse is far below zero", edit(
        "06", "flash_backward_dq", ("p = tl.exp2(s * qk_scale - lse2[:, None])", "p = tl.exp2(s * qk_scale) / tl.exp2(lse2[:, None])"))),
    Wrong("flash_backward_dq", "lse used in natural-log units by exp2", edit(
        "06", "flash_backward_dq", ("lse2 = tl.load(lse_ptr + offs_m, mask=row_ok, other=0.0) * LOG2E",
                                    "lse2 = tl.load(lse_ptr + offs_m, mask=row_ok, other=0.0)"))),
    Wrong("flash_backward_dq", "causal: the tiles left of the diagonal skipped", edit(
        "06", "flash_backward_dq", ("        dq = bwd_dq_loop(dq, q, do, lse2, delta, k_ptr, v_ptr, offs_m, 0, start_m, n_ctx, qk_scale,\n"
                                    "                         HEAD_DIM, BLOCK_N, \"none\")\n        hi", "        hi"))),

    Wrong("attention_backward", "autograd through the naive reference, no kernel", naive_out),
    Wrong("attention_backward", "Triton forward, autograd over the naive graph backward", autograd_backward),
    Wrong("attention_backward", "sm_scale hard-coded to 1/sqrt(D)", edit(
        "06", "attention", ("    sm_scale = q.shape[-1] ** -0.5 if sm_scale is None else sm_scale\n    return FlashAttention",
                            "    sm_scale = q.shape[-1] ** -0.5\n    return FlashAttention"))),
    Wrong("attention_backward", "gradients returned in the wrong order (dk, dq, dv)", edit(
        "06", "attention", ("return dq, dk, dv, None, None", "return dk, dq, dv, None, None"))),
    Wrong("attention_backward", "backward always full: ctx.causal not passed on", edit(
        "06", "attention", ("lse, dout, ctx.causal, ctx.sm_scale)", "lse, dout, False, ctx.sm_scale)"))),
    Wrong("attention_backward", "the forward kernels' running maximum starts at 0, not -inf", edit(
        "06", "attention", (FWD_M_INIT + "    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)\n    n_full",
                            FWD_M_ZERO + "    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)\n    n_full"),
        (FWD_M_INIT + "    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)\n    # keys 0",
         FWD_M_ZERO + "    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)\n    # keys 0"))),
    # each call alone is right: two calls, then one backward through both, see the first call's wrong
    Wrong("attention_backward", "what backward needs kept on the class, not on ctx", saved_on_the_class),
    Wrong("attention_backward", "the causal flag kept in a global, not on ctx", edit(
        "06", "attention", ("        ctx.causal, ctx.sm_scale = causal, sm_scale\n",
                            "        global LAST_CAUSAL\n        LAST_CAUSAL, ctx.sm_scale = causal, sm_scale\n"),
        ("lse, dout, ctx.causal, ctx.sm_scale)", "lse, dout, LAST_CAUSAL, ctx.sm_scale)"))),
    Wrong("attention_backward", "forward returns (out, lse)", edit(
        "06", "attention", ("        ctx.causal, ctx.sm_scale = causal, sm_scale\n        return out\n",
                            "        ctx.causal, ctx.sm_scale = causal, sm_scale\n        return out, lse\n"))),
    Wrong("attention_backward", "forward always full: causal ignored", edit(
        "06", "attention", ("out, lse = (flash_forward_causal if causal else flash_forward)(q, k, v, sm_scale)",
                            "out, lse = flash_forward(q, k, v, sm_scale)"))),
]

RIGHT = [
    Right("attention_tiled", "causal: every key tile visited, the masked ones add nothing", edit(
        "06", "attention_tiled", ("stop = min(N, i + block_m) if causal else N", "stop = N"))),
    Right("attention_tiled", "tiles of 64 x 8 by default", edit(
        "06", "attention_tiled", ("block_m=32, block_n=16):\n    \"\"\"FlashAttention's",
                                  "block_m=64, block_n=8):\n    \"\"\"FlashAttention's"))),
    Right("flash_forward", "blocks of 32 x 16 (32 x 32 on a GPU)", edit("06", "flash_forward", *FWD_BLOCKS)),
    Right("flash_forward", "one loop over every tile, all masked at N", edit(
        "06", "flash_forward",
        ("    acc, l_i, m_i = fwd_tile_loop(acc, l_i, m_i, q, k_ptr, v_ptr, offs_m, 0, n_full, n_ctx, qk_scale,\n"
         "                                  HEAD_DIM, BLOCK_N, \"none\", SOFTCAP)\n", ""),
        ("q, k_ptr, v_ptr, offs_m, n_full, n_ctx,", "q, k_ptr, v_ptr, offs_m, 0, n_ctx,"))),
    Right("flash_forward_causal", "blocks of 32 x 16 (32 x 32 on a GPU)", edit(
        "06", "flash_forward_causal", *FWD_BLOCKS)),
    Right("flash_forward_causal", "every visited tile masked (no unmasked loop)", edit(
        "06", "flash_forward_causal",
        ("    acc, l_i, m_i = fwd_tile_loop(acc, l_i, m_i, q, k_ptr, v_ptr, offs_m, 0, start_m, n_ctx, qk_scale,\n"
         "                                  HEAD_DIM, BLOCK_N, \"none\")\n", ""),
        ("q, k_ptr, v_ptr, offs_m, start_m, hi,", "q, k_ptr, v_ptr, offs_m, 0, hi,"))),
    Right("flash_forward_causal", "BLOCK_N > BLOCK_M (32 x 64): masked from the key tile holding start_m", edit(
        "06", "flash_forward_causal",
        ("FWD_CONFIGS = _configs(cpu=[(64, 32, 4, 1)]", "FWD_CONFIGS = _configs(cpu=[(32, 64, 4, 1)]"),
        ("gpu=[(64, 64, 4, 3), (128, 64, 8, 3)", "gpu=[(32, 64, 4, 2), (128, 64, 8, 3)"),
        ("    acc, l_i, m_i = fwd_tile_loop(acc, l_i, m_i, q, k_ptr, v_ptr, offs_m, 0, start_m, n_ctx, qk_scale,",
         "    lo = start_m // BLOCK_N * BLOCK_N\n"
         "    acc, l_i, m_i = fwd_tile_loop(acc, l_i, m_i, q, k_ptr, v_ptr, offs_m, 0, lo, n_ctx, qk_scale,"),
        ("q, k_ptr, v_ptr, offs_m, start_m, hi,", "q, k_ptr, v_ptr, offs_m, lo, hi,"))),
    Right("flash_forward_causal", "query blocks numbered forwards, not backwards", edit(
        "06", "flash_forward_causal", (INT32_CAUSAL[0], INT32_CAUSAL[0].replace(
            "(tl.num_programs(0) - 1 - tl.program_id(0)) * BLOCK_M", "tl.program_id(0) * BLOCK_M")))),
    Right("flash_forward", "the lse in natural log directly: m_i * LN2 + log(l_i)", edit(
        "06", "flash_forward", ("(m_i + tl.log2(l_i)) * LN2, mask=row_ok)   # back", "m_i * LN2 + tl.log(l_i), mask=row_ok)   #"))),
    Right("attention_backward_torch", "P by softmax of the scores, delta as rowsum(P * dP)", edit(
        "06", "attention_backward_torch", ("p = torch.exp(s - lse[..., None])                      #", "p = torch.softmax(s, dim=-1)  #"),
        ("delta = (dout * out).sum(dim=-1, keepdim=True)", "delta = (p * (dout @ v.transpose(-2, -1))).sum(-1, True)"))),
    Right("flash_backward_dkdv", "other blocks (16 x 32; 16 x 32 first on a GPU)", edit(
        "06", "flash_backward_dkdv",
        ("DKDV_CONFIGS = _configs(cpu=[(32, 64, 4, 1)]", "DKDV_CONFIGS = _configs(cpu=[(16, 32, 4, 1)]"),
        ("gpu=[(32, 64, 4, 3), (64, 128, 8, 2)", "gpu=[(16, 32, 4, 2), (64, 128, 8, 2)"))),
    Right("flash_backward_dkdv", "FlashAttention-2 style: the diagonal in masked sub-blocks of BLOCK_M // 2", edit(
        "06", "flash_backward_dkdv", ("n_ctx, qk_scale, HEAD_DIM, BLOCK_M, True)", "n_ctx, qk_scale, HEAD_DIM, BLOCK_M // 2, True)"))),
    Right("flash_backward_dkdv", "BLOCK_M > BLOCK_N (64 x 32): masked from the query block holding start_n", edit(
        "06", "flash_backward_dkdv",
        ("DKDV_CONFIGS = _configs(cpu=[(32, 64, 4, 1)]", "DKDV_CONFIGS = _configs(cpu=[(64, 32, 4, 1)]"),
        ("gpu=[(32, 64, 4, 3), (64, 128, 8, 2)", "gpu=[(64, 32, 4, 2), (64, 128, 8, 2)"),
        ("        hi = tl.minimum(start_n + BLOCK_N, n_ctx)\n        dk, dv = bwd_dkdv_loop(",
         "        lo = start_n // BLOCK_M * BLOCK_M\n        hi = tl.minimum(start_n + BLOCK_N, n_ctx)\n"
         "        mid = lo + tl.cdiv(hi - lo, BLOCK_M) * BLOCK_M   # the end of the masked query blocks\n"
         "        dk, dv = bwd_dkdv_loop("),
        ("offs_n, start_n, hi,", "offs_n, lo, hi,"),
        ("offs_n, start_n + BLOCK_N,\n                               n_ctx, n_ctx,",
         "offs_n, mid,\n                               n_ctx, n_ctx,"))),
    # dO and delta load as 0 in those rows, so dV and dK get nothing from them either way
    Right("flash_backward_dkdv", "the lse of rows past n_ctx loaded as 0, not +inf", edit(
        "06", "flash_backward_dkdv", ("mask=row_ok, other=float(\"inf\")) * LOG2E", "mask=row_ok, other=0.0) * LOG2E"))),
    Right("flash_backward_dq", "other blocks (32 x 16; 32 x 16 first on a GPU)", edit(
        "06", "flash_backward_dq",
        ("DQ_CONFIGS = _configs(cpu=[(64, 32, 4, 1)]", "DQ_CONFIGS = _configs(cpu=[(32, 16, 4, 1)]"),
        ("gpu=[(64, 32, 4, 3), (128, 64, 8, 3)", "gpu=[(32, 16, 4, 2), (128, 64, 8, 3)"))),
    Right("flash_backward_dq", "full attention: every tile masked at N (one loop)", edit(
        "06", "flash_backward_dq",
        ("        dq = bwd_dq_loop(dq, q, do, lse2, delta, k_ptr, v_ptr, offs_m, 0, n_full, n_ctx, qk_scale,\n"
         "                         HEAD_DIM, BLOCK_N, \"none\")\n", ""),
        ("delta, k_ptr, v_ptr, offs_m, n_full, n_ctx, n_ctx,", "delta, k_ptr, v_ptr, offs_m, 0, n_ctx, n_ctx,"))),
    Right("attention_backward", "delta = rowsum(dO * O) in PyTorch", edit(
        "06", "attention", ("delta = backward_delta(out, dout)  # shared by both kernels",
                            "delta = (out.float() * dout.float()).sum(-1)"))),
    Right("attention_backward", "q, k, v saved alone; backward runs the forward kernel again for out and lse", edit(
        "06", "attention",
        ("        ctx.save_for_backward(q, k, v, out, lse)   # O(N) per head: no N x N tensor is kept\n",
         "        ctx.save_for_backward(q, k, v)\n"),
        ("        q, k, v, out, lse = ctx.saved_tensors\n",
         "        q, k, v = ctx.saved_tensors\n"
         "        out, lse = (flash_forward_causal if ctx.causal else flash_forward)(q, k, v, ctx.sm_scale)\n"))),
    Right("attention_backward", "backward calls the two launchers itself", edit(
        "06", "attention", ("        dq, dk, dv = flash_backward(q, k, v, out, lse, dout, ctx.causal, ctx.sm_scale)\n",
                            "        dk, dv = flash_backward_dkdv(q, k, v, out, lse, dout, ctx.causal, ctx.sm_scale)\n"
                            "        dq = flash_backward_dq(q, k, v, out, lse, dout, ctx.causal, ctx.sm_scale)\n"))),
]
