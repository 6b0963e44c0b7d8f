"""Lesson 11 exercises: the capstone's kernels and the decoder block assembled from them.

1. `rope_qk`: rotary embeddings on Q and K in one launch, read through any strides (the views
   the Q|K|V projection makes, a head dimension that is not contiguous in q and in k, cos and sin as
   column slices of wider tables), written contiguous, arithmetic in float32 (float16 outputs within
   half a unit in the last place); on a GPU, q's positions and k's sequences 2**30 + 64 values apart,
   and q and k contiguous past 2**31 elements, outputs as large (int64 offsets, the outputs' too).
   Its structure: one launch, each value of cos and sin loaded once per (batch, head).
2. `swiglu_linear`: SiLU(h @ w_gate.T) * (h @ w_up.T) as one persistent matmul over the
   interleaved weights, the product in the epilogue: the pairing of the columns, SiLU's two tails
   (gates far past the point where exp overflows float32, in every draw), h and w_gate_up of
   their own (aligned) row strides, the output contiguous (M, f). Its structure: one launch stores,
   and it stores the output once and nothing of the (M, 2f) product.
3. `decoder_block_fused`: the forward of helpers/block.py's decoder block from the course's
   kernels. Checked against the eager block with PyTorch's SDPA (one case with MLP gates of about
   +-150, beyond where SiLU's exponential overflows, at both tails; one whose every attention score
   is near -150, where exp underflows unless the row's maximum is subtracted; one whose config has a
   random eps, with tokens so small that eps sets the norms' scale), then for its structure: exactly
   the lesson's eight Triton launches, and PyTorch runs nothing but views and allocations for it.

Sizes are odd on purpose; on the CPU everything runs through Triton's interpreter at small sizes.
"""

import collections
import contextlib
import dataclasses
import math
import pathlib

import torch
import torch.nn.functional as F

from helpers.block import SMALL, BlockConfig, block_input, block_weights, decoder_block, rope_tables
from helpers.device import DEVICE, ON_GPU, pick
from helpers.exercises import (
    UNEQUAL_BLOCKS_WHY,
    Case,
    Exercise,
    kernel_beside,
    later,
    rerun,
    rerun_with_config,
    room_for,
)
from helpers.exercises.lesson05 import int32_hint
from helpers.exercises.lesson09 import _past_the_last_tile, _unshared
from helpers.exercises.lesson10 import SPAN_BYTES, SPREAD, _recorded, int64_hint
from helpers.traffic import HARNESS, EagerWork, source_line

F16, F32 = torch.float16, torch.float32


def _odd(lo, hi):
    """A random odd integer in [lo, hi]."""
    return int(torch.randint(lo // 2, (hi - 1) // 2 + 1, ())) * 2 + 1


def _name(dtype):
    return str(dtype).removeprefix("torch.")


# ---------------------------------------------------------------- 1. rope_qk


def _rope(x, cos, sin):
    """RoPE with half-split pairs, computed in float32 at least, returned in x's dtype."""
    x1, x2 = x.to(torch.promote_types(x.dtype, F32)).chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).to(x.dtype)


def rope_qk_reference(q, k, cos, sin):
    """(RoPE(q), RoPE(k)): q, k (B, H, N, D); cos, sin (N, D / 2)."""
    return _rope(q, cos, sin), _rope(k, cos, sin)


def _projection_views(B, H, N, D, dtype):
    """q, k as the block makes them: (B, H, N, D) views of one (B, N, 3 H D) projection output."""
    qkv = torch.randn(B, N, 3 * H * D, device=DEVICE).to(dtype)
    return [qkv[..., i * H * D:(i + 1) * H * D].view(B, N, H, D).transpose(1, 2) for i in range(2)]


def _dim_strided(B, H, N, D, dtype):
    """(B, H, N, D) whose head dimension is not contiguous: a (B, H, D, N) tensor, transposed."""
    return torch.randn(B, H, D, N, device=DEVICE).to(dtype).transpose(2, 3)


def _angles(N, half, sliced):
    """cos and sin of random angles (float32): every rotation, not only a model's small ones.
    sliced: each a column slice of a wider table of its own, so that their row strides differ from
    D / 2 and from each other (the kernel takes both)."""
    angles = torch.rand(N, half, device=DEVICE) * 6.3
    if not sliced:
        return angles.cos(), angles.sin()
    cos_table = torch.full((N, half + 3), float("nan"), device=DEVICE)
    sin_table = torch.full((N, half + 7), float("nan"), device=DEVICE)
    cos_table[:, 1:1 + half], sin_table[:, 5:5 + half] = angles.cos(), angles.sin()
    return cos_table[:, 1:1 + half], sin_table[:, 5:5 + half]


# float16: each output is one rotation computed in float32 and rounded once, at the store: within
# half a unit in the last place of the float64 reference (2**-11 of it, rtol), as swiglu_linear's
# float16 output. cos and sin rounded to float16 first, or the products, or the whole rotation done in
# float16, round once or twice more: off by about a unit, inside check's default of two units.
ROPE_TOL = {F16: (1e-4, 6e-4)}

ROPE_F16_HINT = ("q and k are float16 here, and the check holds the outputs to half a unit in float16's "
                 "last place: if the errors are about one unit, something was rounded to float16 before "
                 "the store (cos or sin, a product, the rotation). Load x1, x2, cos and sin as float32, "
                 "rotate in float32, and round once, when storing.")


def _rope_cases():
    long_n = _odd(*pick((65, 99), (1001, 2047)))
    # (B, H, N, D, dtype, layout of q and k, cos and sin sliced, why)
    specs = [(1, 1, 1, 8, F32, "views", True, "one position: T = 1"),
             (2, 3, _odd(17, 31), 12, F32, "views", True, "D / 2 = 6, not a power of two"),
             (2, 2, _odd(33, 63), 64, F16, "views", True, "float16 inputs, float32 arithmetic"),
             (1, 4, _odd(21, 41), 32, F32, "k contiguous", True, "q a view, k contiguous: different strides"),
             (2, 3, _odd(9, 25), 16, F32, "q dim-strided", True,
              "q's head dimension not contiguous (stride N), k a view"),
             (1, 2, _odd(9, 25), 24, F16, "k dim-strided", True,
              "k's head dimension not contiguous (stride N), q a view"),
             (2, 2, long_n, pick(16, 128), F32, "contiguous", False, "many positions, contiguous inputs"),
             (1, 2, _odd(9, 15), 20, F16, "views", True, "float16, D / 2 = 10")]
    cases = []
    for B, H, N, D, dtype, layout, sliced, why in specs:
        q, k = _projection_views(B, H, N, D, dtype)
        if layout == "k contiguous":
            k = k.contiguous()
        elif layout == "q dim-strided":
            q = _dim_strided(B, H, N, D, dtype)
        elif layout == "k dim-strided":
            k = _dim_strided(B, H, N, D, dtype)
        elif layout == "contiguous":
            q, k = q.contiguous(), k.contiguous()
        tables = "cos, sin column slices" if sliced else "cos, sin contiguous"
        which = layout.removesuffix(" dim-strided")
        hint = (f"In this case {which}'s head dimension is not contiguous: the values of one position lie "
                f"s{which}_d = {N} values apart, not 1. Read both halves of {which} through its own "
                f"s{which}_d."
                if layout.endswith("dim-strided") else "")
        hint = " ".join(filter(None, (hint, ROPE_F16_HINT if dtype == F16 else "")))
        cases.append(Case(f"B{B} H{H} N{N} D{D} {_name(dtype)} ({why}; {tables})",
                          (q, k, *_angles(N, D // 2, sliced)), hint=hint))
    return cases + ([later("offsets past 2**31", _rope_int64_case),
                     later("past 2**31 elements per tensor", _rope_past_int32_case)] if ON_GPU else [])


def _rope_int64_case(D=64):
    """On a GPU: q's three positions and k's three sequences SPREAD values apart, in one buffer of
    2 * SPREAD + 6 D values (4.3 GB in float16), so that position 2 of q and sequence 2 of k start
    past 2**31 values from the buffer's start: offs_pos * sq_n and b * sk_b pass 2**31, while each
    stride, below 2**31, reaches the kernel as a 32-bit integer. None where the GPU has no room for the
    buffer and the check's copies of q and k."""
    if not room_for(3 * SPAN_BYTES):
        return None
    shape = (3, 1, 3, D)                         # (B, H, N, D)
    buffer = torch.empty(2 * SPREAD + 6 * D, device=DEVICE, dtype=F16)
    q = buffer.as_strided(shape, (D, D, SPREAD, 1))                        # positions far apart
    k = buffer.as_strided(shape, (SPREAD, 3 * D, D, 1), 3 * D)             # sequences far apart
    q.copy_(torch.randn(shape, device=DEVICE))
    k.copy_(torch.randn(shape, device=DEVICE))
    return Case(f"B3 H1 N3 D{D} float16 (q's positions and k's sequences {SPREAD:,} values apart: offsets "
                f"past 2**31; cos, sin contiguous)", (q, k, *_angles(3, D // 2, False)),
                hint=int64_hint("q's positions and k's sequences", "offs_pos, b and h"))


def _rope_past_int32_case(H=2**15 + 3, N=1024, D=64, compared=3):
    """On a GPU: q and k (1, H, N, D) float16, contiguous, each just over 2**31 elements (4.3 GB), so
    the last `compared` heads start past 2**31, in the inputs and in contiguous outputs alike (h * sq_h
    and the outputs' head offsets wrap in int32). B * H stays below 65536, the grid's limit on its
    second axis. Compared on the last heads, the reference run on them alone; unguarded (no copies of
    q and k), the check holds q, k and the two outputs. None where the GPU has no room for them."""
    if not room_for(4 * H * N * D * F16.itemsize):
        return None
    q, k = (torch.randn(1, H, N, D, device=DEVICE, dtype=F16) for _ in range(2))
    cos, sin = _angles(N, D // 2, False)
    return Case(f"B1 H{H} N{N} D{D} float16 (q and k contiguous, each past 2**31 elements, outputs as "
                f"large; compared on the last {compared} heads; cos, sin contiguous)", (q, k, cos, sin),
                hint=int32_hint("the batch and head indices",
                                "`(bh // n_heads).to(tl.int64)`; `bh.to(tl.int64)` for the outputs' heads"),
                reference_args=(q[:, -compared:], k[:, -compared:], cos, sin),
                part=lambda out: tuple(t[:, -compared:] for t in out), guard=False)


def _rope_one_launch(fn):
    """One launch rotates Q and K, and reads each value of cos (and of sin) once per (batch, head)."""
    B, H, N, D = 2, 3, 21, 16
    q, k = _projection_views(B, H, N, D, F32)
    cos, sin = _angles(N, D // 2, True)
    launches, problem = _recorded(fn, q, k, cos, sin, touches=True)
    if problem:
        return problem
    where = f"for q and k of shape ({B}, {H}, {N}, {D}), your code"
    if len(launches) != 1:
        names = ", ".join(launch.kernel for launch in launches)
        return (f"{where} made {len(launches)} launches ({names}). The exercise rotates Q and K in one "
                f"launch: each program loads its tile of cos and sin once and uses it for both.")
    (launch,) = launches
    table = {name: sum(len(offs) for _pid, arg, kind, offs in launch.touches
                       if arg == name and kind == "load") for name in ("cos_ptr", "sin_ptr")}
    once = B * H * N * (D // 2)
    for name, loaded in table.items():
        if loaded > once:
            return (f"{where} loaded {loaded:,} values through {name}: {loaded / once:.3g} times each value "
                    f"per (batch, head). Load the program's tile of cos and of sin once, before rotating "
                    f"Q and K, and use it for both. Two ways to read it twice: a load for Q and another for "
                    f"K, or D lanes that index cos by d % half (each of its half values fetched twice): give "
                    f"the tile half lanes, one per pair, instead.")
    return None


ROPE_ARGS = ["q_ptr", "k_ptr", "cos_ptr", "sin_ptr", "qo_ptr", "ko_ptr", "n_heads", "seq", "half",
             "sq_b", "sq_h", "sq_n", "sq_d", "sk_b", "sk_h", "sk_n", "sk_d", "s_cos", "s_sin", "BLOCK_POS",
             "BLOCK_HALF"]


def _rope_other_block(fn):
    """The rope_qk_kernel beside fn (in its globals, as a notebook cell's function finds it) launched once
    more in the interpreter with BLOCK_POS = 32, the launcher's grid for it and outputs filled with NaN:
    the launcher passes 16 on the CPU and 64 on a GPU, and a kernel with the CPU's 16 written in passes
    every CPU case. Where fn has no such kernel, or one of another signature, there is nothing to run."""
    import triton

    kernel = kernel_beside(fn, "rope_qk_kernel", ROPE_ARGS)
    if kernel is None:
        return None
    B, H, N, D = 1, 2, 70, 16
    q, k = _projection_views(B, H, N, D, F32)
    cos, sin = _angles(N, D // 2, True)

    def launch(q, k, cos, sin):
        q_rot, k_rot = (torch.full((B, H, N, D), float("nan"), device=DEVICE) for _ in range(2))
        kernel[(triton.cdiv(N, 32), B * H)](q, k, cos, sin, q_rot, k_rot, H, N, D // 2, *q.stride(),
                                            *k.stride(), cos.stride(0), sin.stride(0), BLOCK_POS=32,
                                            BLOCK_HALF=D // 2)
        return q_rot, k_rot

    where = (f"launched once more with BLOCK_POS = 32 (a grid of cdiv(N, 32) x B * H programs, into outputs "
             f"filled with NaN) on q and k of shape ({B}, {H}, {N}, {D}), float32, in the interpreter, your "
             f"rope_qk_kernel")
    why = (" The launcher passes BLOCK_POS (16 here, 64 on a GPU): the program's positions are "
           "program_id(0) * BLOCK_POS + tl.arange(0, BLOCK_POS), with no number written in.")
    return rerun(contextlib.nullcontext(), launch, (q, k, cos, sin), rope_qk_reference(q, k, cos, sin), where,
                 why, names=("q_rot", "k_rot"))


# ---------------------------------------------------------------- 2. swiglu_linear


def swiglu_linear_reference(h, w_gate_up):
    """SiLU(h @ w_gate.T) * (h @ w_up.T); w_gate_up's even rows are w_gate's, its odd rows w_up's."""
    return F.silu(h @ w_gate_up[0::2].T) * (h @ w_gate_up[1::2].T)


EXP_OVERFLOW = 88.8   # exp(x) is inf in float32 from x = 88.73 on


def _aligned(rows, cols, dtype, view, scale=1.0):
    """(rows, cols) random values, or a column slice of a wider matrix (its own row stride, with its
    start and row stride 16-byte aligned, as tensor descriptors need)."""
    wide = torch.randn(rows, cols + 24, device=DEVICE) * scale
    return wide.to(dtype)[:, 8:8 + cols] if view else wide[:, :cols].to(dtype).contiguous()


def _gate_up(f, K, dtype, view, gate_scale):
    """w_gate_up (2f, K): rows 2j (gate) scaled by gate_scale, rows 2j + 1 (up) of unit outputs; made in
    float32, then copied into the layout asked for (a column slice where `view`: a conversion of the
    slice itself would be a contiguous copy)."""
    w = _aligned(2 * f, K, F32, False, scale=K ** -0.5)
    w[0::2] *= gate_scale
    return _aligned(2 * f, K, dtype, view).copy_(w)


def _with_both_tails(M, K, f, dtype):
    """h and w_gate_up whose gates reach past +-EXP_OVERFLOW in every draw: exp(gate) and exp(-gate)
    both overflow float32 somewhere, and SiLU must stay finite at both ends."""
    while True:
        h, w = _aligned(M, K, dtype, False), _gate_up(f, K, dtype, False, gate_scale=150.0)
        gates = h.double() @ w[0::2].double().T
        if gates.max() > EXP_OVERFLOW and gates.min() < -EXP_OVERFLOW:
            return h, w


def _swiglu_cases():
    """Shapes whose rows are 16-byte aligned, as tensor descriptors need: K and f multiples of 8.
    f is never a multiple of the half tile (32 or more), so the last tile of every row is partial."""
    # On a GPU the larger case has more tiles than the GPU has SMs (over 132 at every tile size the
    # autotuner may pick), so each program must walk several: one tile per program is not enough.
    M_big, K_big, f_big = pick((_odd(121, 191), 192, 72), (_odd(2049, 3071), 512, 1032))
    # (M, K, f, dtype, h a view, w_gate_up a view, why)
    specs = [(1, 64, 40, F32, False, False, "one token"),
             (_odd(67, 127), 136, 40, F16, False, False, "several tiles per program, odd M"),
             (_odd(21, 63), 72, 24, F16, True, False, "h a column slice: its own row stride"),
             (_odd(21, 63), 80, 56, F32, False, True, "w_gate_up a column slice: its own row stride"),
             # the smallest case with a strided operand, so the one check() runs once more to see what
             # PyTorch did: both operands strided there, so that a copy of either (.contiguous()) shows
             (_odd(5, 9), 64, 24, F16, True, True, "both operands column slices, few rows"),
             (M_big, K_big, f_big, F16, True, True, "larger, both operands strided")]
    cases = []
    for M, K, f, dtype, h_view, w_view, why in specs:
        h, w = _aligned(M, K, dtype, h_view), _gate_up(f, K, dtype, w_view, gate_scale=1.0)
        cases.append(Case(f"M={M} K={K} f={f} {_name(dtype)} ({why})", (h, w)))
    # float32 on the CPU; on a GPU float16 (TF32 would round gates of a hundred by about 0.1)
    M, dtype = _odd(9, 31), pick(F32, F16)
    tails = f"gates beyond +-{EXP_OVERFLOW:g}, both signs: exp overflows float32 at both of SiLU's tails"
    cases.insert(3, Case(f"M={M} K=64 f=48 {_name(dtype)} ({tails})", _with_both_tails(M, 64, 48, dtype),
                         hint=SWIGLU_TAILS_HINT))
    return cases


# float32 on the CPU: y = SiLU(gate) * up, and with gates in the hundreds an error in up is multiplied
# by the gate. up sums K products in float32, in an order that depends on the tiles: differences of a
# few units of 2**-24 in up become 1e-4 in y (1.4e-4 met once, in CI, with 16-wide K steps), so atol
# 1e-3 (a wrong pairing or a missing SiLU is off by O(1), a NaN is caught before any tolerance).
# On a GPU tl.dot takes float32 operands as TF32 (2**-11 relative each): 1e-2 for outputs of order
# one; the tails case is float16 there (exact products, float32 sums).
# float16: SiLU(gate) * up stays in float32 until its one store, so the output is within half a unit
# in the last place (2**-11 of it, rtol), as lesson 09's linear; the product or the accumulator
# rounded to float16 first rounds once more and lands outside.
SWIGLU_TOL = {F32: pick(cpu=(1e-3, 1e-5), gpu=(1e-2, 1e-2)), F16: (1e-4, 6e-4)}

SWIGLU_TAILS_HINT = ("This case's gates reach beyond +-89, where exp of the gate (or of minus the gate) is "
                     "inf in float32, and inf / inf, inf - inf and 0 * inf are NaN. SiLU(x) tends to x at "
                     "one end and to 0 at the other: write it so that an exponential that overflows can "
                     "only end up where an inf gives the right limit.")


def _quietly(fn, *args, **kwargs):
    """fn(*args): under the interpreter an exponential that overflows to inf (as it should, in
    sigmoid's denominator at SiLU's tails) makes NumPy warn; the check judges the values instead."""
    import numpy as np

    with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
        return fn(*args, **kwargs)


def _product_in_the_epilogue(fn):
    """One launch stores, and what it stores is the output, once: the (M, 2f) product of the matmul
    never goes to memory (SiLU(gate) * up is computed in the epilogue, from the accumulator). With
    several output tiles, the persistent walk the stub gives is kept: no program stores more than its
    share of the tiles, or a tile past the last. Then one more product with unequal tiles
    (_unequal_blocks)."""
    M, K, f = 37, 64, pick(160, 800)     # several tiles across the product: 3 at the CPU's 128 columns
    h, w = _aligned(M, K, F32, False), _gate_up(f, K, F32, False, 1.0)
    launches, problem = _recorded(fn, h, w, touches=True)
    if problem:
        return problem
    where = f"for h ({M}, {K}) and w_gate_up ({2 * f}, {K}), your code"
    storing = [launch for launch in launches if launch.bytes_stored]
    out_bytes = M * f * h.element_size()
    if len(storing) != 1:
        sizes = ", ".join(f"{launch.kernel} {launch.bytes_stored:,} bytes" for launch in storing)
        return (f"{where} stored from {len(storing)} launches ({sizes}). SwiGLU here is one matmul whose "
                f"epilogue pairs each gate column with its up column and stores SiLU(gate) * up: the "
                f"product h @ w_gate_up.T stays in registers, and only the (M, f) output is stored.")
    main = storing[0]
    if main.bytes_stored != out_bytes:
        return (f"{where} stored {main.bytes_stored:,} bytes, where the (M, f) = ({M}, {f}) output is "
                f"{out_bytes:,}: store each output element once, and nothing of the (M, 2f) product.")
    if main.descriptor_bytes_stored != main.bytes_stored:
        return (f"{where} stored {main.bytes_stored - main.descriptor_bytes_stored:,} of the output's "
                f"{main.bytes_stored:,} bytes through pointers (tl.store), not through out_desc: the "
                f"exercise stores each output tile by tensor descriptor, one TMA store of (BLOCK_M, "
                f"BLOCK_N / 2) per tile, the output's edges dropped by the descriptor, not by a mask.")
    past = _past_the_last_tile(main, where)
    if past:
        return past
    stores = [(pid, offs) for pid, _name, kind, offs in main.touches if kind == "store"]
    return _unshared(stores, math.prod(main.grid), where) or _unequal_blocks(fn)


def _unequal_blocks(fn):
    """One more product in the interpreter with the autotuner given tiles of 32 x 128 x 16 for the call
    (rerun_with_config: on a GPU it may choose square tiles for every case, and the CPU's 64 x 128 has
    BLOCK_N / 2 = BLOCK_M; here no two of BLOCK_M, BLOCK_N / 2 and BLOCK_K are equal): h (70, 40), 100
    output columns (200 interleaved rows of w_gate_up), 3 x 2 tiles, the last row and column cut, K in
    3 steps of 16, the last partial."""
    import triton

    M, K, f = 70, 40, 100
    h, w = _aligned(M, K, F32, False), _gate_up(f, K, F32, False, 1.0)
    config = triton.Config({"BLOCK_M": 32, "BLOCK_N": 128, "BLOCK_K": 16, "GROUP_M": 8}, num_warps=4,
                           num_stages=1)
    why = UNEQUAL_BLOCKS_WHY + ("rows of tiles and row offsets go with BLOCK_M; the product's columns, "
                                "and half of them in the output, with BLOCK_N (the output tile is BLOCK_N "
                                "// 2 wide); the K loop steps by BLOCK_K.")
    where = (f"run with BLOCK_M, BLOCK_N, BLOCK_K = 32, 128, 16 (the check gave your autotuner this one "
             f"configuration for one call) on h ({M}, {K}) and w_gate_up ({2 * f}, {K}), float32, in the "
             f"interpreter, your code")
    return rerun_with_config(fn, "swiglu_linear_kernel", config, (h, w), swiglu_linear_reference(h, w), where,
                             why, each_launch=_past_the_last_tile)


# ---------------------------------------------------------------- 3. decoder_block_fused

WEIGHT_NAMES = ("attn_norm", "wq", "wk", "wv", "wo", "mlp_norm", "w_gate", "w_up", "w_down")


def _run_block(fn, x, *weights, cfg):
    """Call fn(x, w, cfg) with the weights as a dict: the check sees (and guards) each tensor."""
    return fn(x, dict(zip(WEIGHT_NAMES, weights)), cfg)


def decoder_block_reference(x, w, cfg):
    return decoder_block(x, w, cfg, attention="sdpa")


GATES_HINT = ("In this case the MLP's gates reach about +-150, beyond +-89, where exp of the gate (or of "
              "minus the gate) is inf in float32: a SiLU that divides inf by inf, or multiplies 0 by inf, "
              "gives NaN. Check your swiglu_linear's SiLU at both tails.")


SCORES_HINT = ("In this case every attention score of every row lies near -150 (after the 1 / sqrt(D) "
               "scale): exp of any of them is 0 in float32 unless the row's own maximum is subtracted "
               "first, and a running maximum that starts at 0 instead of -inf leaves 0 / 0.")

EPS_HINT = ("In this case cfg.eps is {eps:.3g}, not BlockConfig's default 1e-5, and the tokens are so "
            "small that eps, more than their mean square, sets the norms' scale: both norms take "
            "cfg.eps, not a number of their own or a kernel's default.")

# The far-below-zero case: every token is nearly the same vector (u plus noise of 1%), and in every head
# the query's and the key's coordinate of RoPE's slowest pair (index D/2 - 1, turned by at most
# 500 * 1.3e-4 rad over the check's lengths) is made +ALPHA and -ALPHA: each scaled score is about
# -ALPHA**2 / sqrt(D) = -150, give or take a few. The values V are nearly the same for every token
# too, so the output hardly depends on how the weights are shared out (TF32's rounding of scores of
# 150 on a GPU stays inside the tolerance), while exp(score) alone underflows for every key.
ALPHA = (150 * SMALL.head_dim ** 0.5) ** 0.5


# A block of other sizes than SMALL's, every one of them: 6 heads of 32 (d = 192; SMALL's heads are 64
# wide), an MLP width that is a multiple of 8 (rows 16-byte aligned, as descriptors need) but of no tile,
# and another RoPE base.
# A forward that takes a size or the base from anywhere but cfg (SMALL, a notebook's globals, numbers
# written in) gets this case wrong.
OTHER_SIZES = BlockConfig(dim=192, n_heads=6, hidden=520, rope_base=500.0)


def _block_case(B, N, why, gate_scale=1.0, scores_far_below=False, tiny=False, base=SMALL):
    """base: the block's sizes and RoPE base (SMALL, or OTHER_SIZES).
    gate_scale: w_gate multiplied by it, so that the MLP's gates are of that size, and w_up divided by
    it, so that SiLU(gate) * up stays of order one (float32's rounding of a large product, summed by the
    down projection, would leave the outputs that cancel to near zero outside the tolerance).
    scores_far_below: every attention score near -150 (see ALPHA).
    tiny: a config whose eps is random, 3e-5 to 1e-4 (neither BlockConfig's 1e-5 nor the kernels' default
    1e-6), and tokens and the attention's output sqrt(eps / 10) times theirs (a few hundred times
    smaller), so that both norms see a mean square near eps / 10: any other eps changes their scale by a
    factor of 1.6 or more, visible at a GPU's tolerance too."""
    seed = int(torch.randint(0, 2**31 - 1, ()))
    w = block_weights(base, DEVICE, seed=seed)
    for norm in ("attn_norm", "mlp_norm"):   # norms of random scale: swapping them shows
        w[norm] = 1.0 + 0.5 * torch.randn(base.dim, device=DEVICE)
    w["w_gate"] *= gate_scale
    w["w_up"] /= gate_scale
    x = block_input(base, B, N, DEVICE, seed=seed + 1)
    cfg, hint = base, GATES_HINT if gate_scale != 1 else ""
    if tiny:
        cfg = dataclasses.replace(base, eps=float(3e-5 * (10 / 3) ** torch.rand(())))   # log-uniform
        scale = (cfg.eps / 10) ** 0.5
        x, w["wo"] = x * scale, w["wo"] * scale
        hint = EPS_HINT.format(eps=cfg.eps)
    if scores_far_below:
        u = torch.randn(SMALL.dim, device=DEVICE)
        x = u + 0.01 * x                                            # every token about u
        z = u * torch.rsqrt(u.pow(2).mean() + SMALL.eps) * w["attn_norm"]   # its normalised row
        slow = torch.arange(SMALL.n_heads, device=DEVICE) * SMALL.head_dim + SMALL.head_dim // 2 - 1
        w["wq"][slow] = ALPHA * z / z.pow(2).sum()                  # q's slow coordinate: about +ALPHA
        w["wk"][slow] = -ALPHA * z / z.pow(2).sum()                 # k's: about -ALPHA
        hint = SCORES_HINT
    eps = f", eps={cfg.eps:.3g}" if cfg.eps != SMALL.eps else ""
    rope_base = f", RoPE base {cfg.rope_base:g}" if cfg.rope_base != SMALL.rope_base else ""
    return Case(f"B{B} N{N}, d={cfg.dim}, {cfg.n_heads} heads, f={cfg.hidden}{eps}{rope_base} ({why})",
                (x, *(w[n] for n in WEIGHT_NAMES)), {"cfg": cfg}, hint=hint)


def _block_cases():
    return [_block_case(1, 1, "one token"),
            _block_case(2, _odd(21, 41), "two sequences, odd length"),
            _block_case(1, _odd(*pick((51, 71), (301, 501))), "longer than an attention block"),
            # gates of about +-150 (w_gate 150 times larger, w_up 150 times smaller): in every draw,
            # thousands of gates lie beyond +-89 on both sides, where exp of the gate or of its
            # negative overflows float32
            _block_case(1, _odd(9, 17), "MLP gates of about +-150: SiLU's exponential overflows float32 "
                                        "at both tails", gate_scale=150.0),
            _block_case(2, _odd(*pick((21, 41), (201, 401))), "every attention score near -150: exp "
                        "underflows for every key unless the row's maximum is subtracted",
                        scores_far_below=True),
            _block_case(2, _odd(9, 17), "another block's sizes and RoPE base: each taken from cfg",
                        base=OTHER_SIZES),
            _block_case(1, _odd(9, 17), "tokens a few hundred times smaller: both norms' mean squares lie "
                                        "below cfg.eps, which then sets their scale", tiny=True)]


# float32: the fused block rounds differently from the eager one at every step (RMSNorm folded
# into the matmul, the SiLU product and the residual adds in float32 before one rounding, the
# online softmax): a few units of 2**-24 per step on outputs of order one, summed over K = 688,
# about 1e-6 on the CPU. On a GPU tl.dot rounds float32 operands to TF32 (2**-11) in five
# matmuls, one after the other: a few 1e-3, so 3e-2 (as tests/test_lesson09.py).
BLOCK_TOL = {F32: pick(cpu=(1e-5, 1e-5), gpu=(3e-2, 3e-2))}

# What decoder_block_fused may ask of PyTorch: views (an op whose output is a view of its input),
# allocations and metadata (helpers/traffic.py's list of ops that move no data). Everything else is
# an eager kernel, named below with the course's kernel that does its work. Three exceptions, where
# the op is not the forward's own: Triton's runtime (the interpreter's host copies, the autotuner),
# helpers.block.rope_tables (cos and sin for a length) and the course's pack_weights (the check passes
# the weights unpacked): work a model does once, not at every step.
_INSTEAD = (  # (what PyTorch did, its ATen ops, what the lesson uses instead)
    ("a matrix multiply", {"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "mv", "addmv", "dot"},
     "lesson09.linear (scale= for the norm's 1 / rms, residual= for the adds) or swiglu_linear"),
    ("attention", {"_softmax", "softmax", "_safe_softmax", "tril", "triu", "masked_fill"},
     "lesson10.causal_attention, on the projection's views as they are"),
    ("SiLU", {"silu", "silu_", "sigmoid", "sigmoid_"},
     "swiglu_linear, whose epilogue computes SiLU(gate) * up"),
    ("a norm", {"rms_norm", "_fused_rms_norm", "pow", "mean", "rsqrt", "sqrt", "sum", "var", "norm",
                "linalg_vector_norm"},
     "lesson05.inv_rms and linear's scale= (gamma is already in wqkv), or lesson05.rms_norm_rows"),
    ("RoPE", {"cat", "neg", "stack", "cos", "sin", "split", "chunk"},
     "rope_qk, which reads Q and K through their strides and writes them contiguous"),
    ("a copy", {"clone", "copy_", "_to_copy", "contiguous", "index_select", "gather"},
     "views: rope_qk and causal_attention read strided views, and causal_attention's output is (T, d) "
     "after a .view"),
    ("element-wise arithmetic", {"add", "add_", "mul", "mul_", "sub", "sub_", "div", "div_", "exp", "where",
                                 "zero_", "fill_", "zeros", "ones", "full", "zeros_like", "ones_like"},
     "an epilogue (linear's residual= adds, its scale= multiplies rows); allocate with torch.empty"),
)
# A cat or a stack on a line with no other sign of RoPE: most often weights packed by hand.
_CONCAT = ("a concatenation", "views of the one projection for Q, K and V; weights are packed once per "
           "model, by pack_weights (wqkv, with the norm's gamma folded in) and pack_gate_up, as the "
           "exercise's first lines do")
_LAUNCHES = 8   # the lesson's table: one Triton launch per step
_STEPS = ("inv_rms", "linear (Q|K|V, row scale)", "rope_qk", "causal_attention", "linear (output, residual)",
          "rms_norm_rows", "swiglu_linear", "linear (down, residual)")
_COURSE = HARNESS + (str(pathlib.Path(__file__).resolve().parents[2] / "solutions"),)  # the course's kernels


def _kinds(ops):
    """{(what PyTorch did, what to use instead): [op, ...]} for the ATen ops one line of the forward ran.
    Element-wise ops and copies beside a named step (a norm's multiplies, RoPE's casts) belong to it."""
    kinds = {}
    rope = bool({"neg", "cos", "sin", "split", "chunk"} & set(ops))
    for op in ops:
        if "scaled_dot_product" in op or "attention" in op:
            what, instead = _INSTEAD[1][0], _INSTEAD[1][2]
        elif op in ("cat", "stack") and not rope:
            what, instead = _CONCAT
        else:
            what, instead = next(((w, i) for w, names, i in _INSTEAD if op in names),
                                 ("an eager kernel", "one of the course's kernels"))
        kinds.setdefault((what, instead), []).append(op)
    named = [kind for kind in kinds if kind[0] not in ("a copy", "element-wise arithmetic")]
    if named:
        for kind in [kind for kind in kinds if kind not in named]:
            kinds[named[0]] += kinds.pop(kind)
    return kinds


def _eager_message(found):
    lines = []
    for where, ops in list(found.items())[:4]:
        lines.append(f"  {source_line(where)}")
        for (what, instead), names in _kinds([op.name for op in ops]).items():
            listed = ", ".join(op if n == 1 else f"{op} x{n}" for op, n in collections.Counter(names).items())
            lines.append(f"    {what} ({listed}): use {instead}")
    more = f"\n  ... and {len(found) - 4} more line(s)" if len(found) > 4 else ""
    return ("PyTorch computed or copied inside your forward, besides views and allocations:\n"
            + "\n".join(lines) + more + "\nEach of those is an eager kernel, and a round trip through memory "
            "that the lesson's eight kernels do not make.")


def _all_in_triton(fn):
    """The lesson's eight Triton launches, and nothing from PyTorch but views and allocations."""
    from helpers import interpreter
    from helpers.solutions import load_solution

    course = load_solution("11")
    case = _block_case(1, 19, "")
    call = lambda: _run_block(fn, *case.args, **case.kwargs)  # noqa: E731
    if ON_GPU:   # the autotuners time their configs on the first call: not part of the forward
        call()
    # helpers.block.rope_tables (cos and sin for a length) and the course's pack_weights: once per model
    watch = EagerWork(course=_COURSE, once=(rope_tables, course.pack_weights, course.pack_gate_up))
    # the kernels' names, under the interpreter; a GPU runs the compiled kernels and counts them only
    recording = contextlib.nullcontext() if ON_GPU else interpreter.record()
    before = interpreter.launch_count()
    try:
        with torch.no_grad(), recording as rec, watch:
            call()
    except Exception as e:  # noqa: BLE001  (the learner's code, measured: say what it raised)
        return f"measuring it, your function raised {type(e).__name__}: {e}"
    if watch.found:
        return _eager_message(watch.found)
    launched = interpreter.launch_count() - before
    if launched != _LAUNCHES:
        names = f": {', '.join(launch.kernel for launch in rec.launches)}" if rec and rec.launches else ""
        more = "An extra launch is an extra pass over memory, and one more launch from Python."
        fewer = "A step is missing, or done by something other than a Triton kernel."
        why = more if launched > _LAUNCHES else fewer
        return (f"your forward made {launched} Triton launches{names}. The lesson's block makes "
                f"{_LAUNCHES}, one per step of its table: {', '.join(_STEPS)}. {why}")
    return None


EXERCISES = [
    Exercise("11", "rope_qk", "RoPE on Q and K, one launch", rope_qk_reference, _rope_cases, kernel=True,
             tol=ROPE_TOL, outputs=("rotated q", "rotated k"), contiguous_output=True,
             structure=lambda fn: _rope_one_launch(fn) or _rope_other_block(fn)),
    Exercise("11", "swiglu_linear", "SwiGLU as one persistent matmul, the product in its epilogue",
             swiglu_linear_reference, _swiglu_cases, run=_quietly, tol=SWIGLU_TOL, kernel=True,
             structure=_product_in_the_epilogue, contiguous_output=True),
    Exercise("11", "decoder_block_fused", "the decoder block from the course's kernels",
             decoder_block_reference, _block_cases, run=_run_block, tol=BLOCK_TOL, kernel=True,
             structure=_all_in_triton, timeout_s=300.0,
             torch_ops=None),  # its structure check names what PyTorch ran, with what to use instead
]
