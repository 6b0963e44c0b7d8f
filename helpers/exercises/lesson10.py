"""Lesson 10 exercises: Hopper attention.

1. `causal_attention`: the causal forward through descriptors each program builds over its
   (batch, head) slice. Q, K and V come as column slices of one projection (rows 3·H·D apart) or in
   three different layouts at once; N = 1 and lengths no block divides; float32 and float16; rows
   whose every score is about -280 (each exponential underflows unless the running max is
   subtracted, so a running max started at 0 gives 0 / 0) and scores of about +400 (exp overflows).
   The output must be (B, N, H, D), contiguous: the heads side by side (contiguous_output). On a GPU,
   one more case: q's three sequences 2**30 + 64 values apart, so the last starts past 2**31 (b and h
   must be int64 before they meet a stride).
2. `ring_waits`: the Gluon forward's ring of K/V slots, (slot, ready parity, empty parity) for each tile,
   judged by what those waits do: the producer and two consumers run over rings of 1 to 4 slots, in
   every interleaving, on a model of mbarriers; the first early read, overwrite or hang is reported.
   Any num_stages tiles in a row must go to different slots (the ring used in full). Every tile is asked
   for again, from the last back to the first, and must get the same answer: each partition works out
   a tile's waits in its own loop, so an answer that keeps state between calls (a phase bit flipped at
   each wrap, as a kernel's loop carries it) is right only when asked once, in order.
3. `atomic_backward`: the key-block program's step of the one-kernel backward (`_attend_backward`),
   against autograd through PyTorch's attention in float64: full and causal, random scales, lengths
   no block divides and several key blocks adding into every query row of dQ. No case past 2**31: the
   given kernel moves dq_ptr, lse_ptr and delta_ptr to their head in int64 before the step runs, and
   the step's own offsets stay below N * D.
4. `softmax_long`: softmax over rows longer than one tile, in two passes (a running max and sum,
   then the output), the second walking the row from its last tile back to its first. Rows that
   begin with a whole tile of -inf, values of 1e4, float16, and rows of a wider matrix; on a GPU,
   a contiguous x whose last rows start past element 2**31, in x and in the output (the row index
   must be int64 before it meets either stride).

Beyond the values, each check measures what the lesson teaches, with the interpreter's record of
every load and store (on a GPU too, on small inputs):
1. every byte moved through a tensor descriptor, the bytes of K read against the causal count (tiles
   right of the diagonal skipped), no N x N tensor, V's loads in V's own storage (no copy), no copy
   of q, k or the output beside the kernel, and the block rule: run with 16 query rows and
   tiles of 32 keys, the kernel must refuse to compile (`tl.static_assert`) or still be right; and
   run with 64 query rows and tiles of 16 keys it must be right (on a GPU the autotuner may choose
   square blocks for every case, where BLOCK_M and BLOCK_N mixed up give the right values, and the
   CPU's blocks are 32 x 16, where a diagonal that ends two key tiles on is right);
3. one launch writes dQ, dK and dV, and every write into dQ is an atomic add of the whole launch's
   scope, not scope="cta" (full and causal, at a length no block divides: every MASK branch runs);
4. x read exactly twice, one exponential per element in each pass (the interpreter's exp is
   counted), the first pass visiting the tiles from the first to the last and the second from the
   last to the first, in those orders.
"""


import dataclasses
import pathlib
import traceback

import numpy as np
import torch
import torch.nn.functional as F
import triton
from torch.utils._python_dispatch import TorchDispatchMode

from helpers import interpreter
from helpers.device import DEVICE, ON_GPU, pick
from helpers.exercises import (
    UNEQUAL_BLOCKS_WHY,
    Case,
    Exercise,
    later,
    rerun_with_config,
    room_for,
    tuned_over,
)
from helpers.exercises.lesson05 import PAST_INT32, SOFTMAX_TOL, int32_hint, past_int32_case
from helpers.traffic import EagerWork, source_line

F16, F32 = torch.float16, torch.float32
NEG_INF = float("-inf")


def _odd(lo, hi):
    """A random odd integer in [lo, hi]."""
    return int(torch.randint(lo // 2, (hi - 1) // 2 + 1, ())) * 2 + 1


def _name(dtype):
    return str(dtype).removeprefix("torch.")


def _calling(fn, *args, **kwargs):
    """(result, None), or (None, a message) if the call raised."""
    try:
        return fn(*args, **kwargs), None
    except Exception as e:  # noqa: BLE001  (the learner's code, measured: say what it raised)
        return None, f"measuring it, your function raised {type(e).__name__}: {str(e)[:300]}"


def _recorded(fn, *args, touches=False, **kwargs):
    """(the interpreter's launches while fn(*args) ran, None), or (None, a message).

    On a GPU fn runs once before it is measured: an autotuner times its configurations on the first
    call at a new size, and the record would count those runs as the kernel's own."""
    if ON_GPU:
        _, problem = _calling(fn, *args, **kwargs)
        if problem:
            return None, problem
    with interpreter.record(touches=touches) as rec:
        _, problem = _calling(fn, *args, **kwargs)
    if problem:
        return None, problem
    if not rec.launches:
        return None, "the meters saw no Triton launch."
    return rec.launches, None


# ---------------------------------------------------------------- 1. causal_attention


def causal_attention_reference(q, k, v):
    """Causal attention of (B, H, N, D) q, k, v, returned as (B, N, H, D), contiguous."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).contiguous()


def projection_views(B, H, N, D, dtype, layout="projection"):
    """q, k, v as (B, H, N, D) tensors of one of two layouts:
    "projection": column slices of one (B, N, 3·H·D) matmul output, rows 3·H·D values apart;
    "mixed": q contiguous, k the first N positions of a (B, N + 3, H, D) buffer (a longer cache) seen
    through a transpose, v with rows padded to D + 8 values: three different sets of strides, the batch
    strides included."""
    if layout == "projection":
        qkv = torch.randn(B, N, 3 * H * D, device=DEVICE).to(dtype)
        return [qkv[..., i * H * D:(i + 1) * H * D].view(B, N, H, D).transpose(1, 2) for i in range(3)]
    q = torch.randn(B, H, N, D, device=DEVICE).to(dtype)
    k = torch.randn(B, N + 3, H, D, device=DEVICE).to(dtype)[:, :N].transpose(1, 2)
    v = torch.randn(B, H, N, D + 8, device=DEVICE).to(dtype)[..., :D]
    return [q, k, v]


# Scores of size ~1600 / sqrt(D): q's first column is +40 and k's -40 (or +40), exact in float16 and
# in TF32, so every score of a row shares that large part exactly and the rest is an ordinary softmax.
# -1600 / sqrt(32) is about -283 (natural log units): exp(-283) is 0 in float32, so a running max that
# starts at 0 instead of -inf leaves every weight 0 and the row 0 / 0.
LARGE = 40.0


def _causal_inputs(B, H, N, D, dtype, layout, scores):
    q, k, v = projection_views(B, H, N, D, dtype, layout)
    if scores != "randn":
        q[..., 0] = LARGE
        k[..., 0] = -LARGE if scores == "negative" else LARGE
    return q, k, v


# (B, H, N, D, dtype, layout, scores, why). Lengths: a multiple of no block (the CPU's tiles are 32
# query rows and 16 keys; a GPU's 64 or 128 rows and 64 or 128 keys).
CAUSAL_SPECS = pick(
    cpu=[(1, 1, 1, 16, F32, "projection", "randn", "one token"),
         (2, 2, 37, 32, F32, "projection", "randn", "q, k, v column slices of one projection"),
         (1, 2, 75, 64, F16, "projection", "randn", "float16"),
         (2, 3, 50, 32, F32, "mixed", "randn", "q contiguous, k a longer cache's first N positions "
                                                "through a transpose, v rows padded: three sets of strides, "
                                                "three heads"),
         (1, 2, 61, 32, F32, "projection", "negative",
          "every score near -280: each exp underflows unless the running max is subtracted"),
         (1, 1, 45, 16, F16, "mixed", "positive", "float16, scores near +400: exp overflows unless the "
                                                  "running max is subtracted"),
         (1, 1, 40, 128, F16, "mixed", "randn", "head dimension 128, float16"),
         (1, 2, 64, 32, F32, "projection", "randn", "N = 64: whole query blocks, none partial")],
    gpu=[(1, 1, 1, 64, F16, "projection", "randn", "one token"),
         (2, 4, 1001, 64, F16, "projection", "randn", "q, k, v column slices of one projection"),
         (1, 8, 777, 128, F16, "projection", "randn", "16 heads' worth of rows, head dimension 128"),
         (2, 2, 333, 64, F32, "mixed", "randn", "float32, three different strides"),
         (1, 4, 517, 64, F16, "projection", "negative",
          "every score near -200: each exp underflows unless the running max is subtracted"),
         (1, 2, 259, 32, F32, "mixed", "positive", "float32, scores near +280: exp overflows unless the "
                                                   "running max is subtracted"),
         (1, 2, 129, 128, F16, "mixed", "randn", "head dimension 128, one row past a block"),
         (1, 2, 512, 64, F16, "projection", "randn", "N = 512: whole query blocks, none partial")])


# On a GPU, a case whose offsets pass 2**31: a few rows, far apart. A tensor's rows (or sequences) are
# SPREAD values apart, so the third starts past 2**31 values from the tensor's start, while the tensor
# itself holds few values: the reference runs on it whole. SPREAD stays below 2**31, so the stride
# reaches the kernel as a 32-bit integer, and only the product with the row index passes 2**31. In
# float16 the span is 4.3 GB, and the check's NaN-surrounded copy of the input as much again.
SPREAD = 2**30 + 64        # values; 2**31 + 128 bytes in float16: 16-byte aligned, as descriptors need
SPAN_BYTES = 2 * SPREAD * 2  # a float16 span of three rows: built only where the GPU has room for its copies


def _far_apart(shape, dim, dtype):
    """A random tensor of `shape` whose index 0, 1, 2 along `dim` lie SPREAD values apart (the rest of
    the layout contiguous inside each): index 2 starts past 2**31 values from the start."""
    inner = list(shape)
    inner[dim] = 1
    strides = list(torch.empty(inner).stride())
    strides[dim] = SPREAD
    extent = 1 + sum((n - 1) * s for n, s in zip(shape, strides))
    t = torch.empty(extent, device=DEVICE, dtype=dtype).as_strided(shape, strides)
    return t.copy_(torch.randn(shape, device=DEVICE))


def int64_hint(what, index):
    """Said after any failure on a case whose offsets pass 2**31."""
    return (f"In this case {what} lie {SPREAD:,} values apart, so the third starts past 2**31 values from "
            f"the tensor's start: an offset computed in int32 wraps round to a negative number (an "
            f"illegal address on a GPU, or another tensor's values). Make {index} tl.int64 before any "
            f"product with a stride, so that every such product is computed in 64 bits.")


def _causal_int64_case():
    """q's, k's and v's three sequences SPREAD values apart (b = 2 starts past 2**31 in each): every
    input's offset needs 64 bits. None where the GPU has no room for the three spans and the check's
    copies of them."""
    if not room_for(6 * SPAN_BYTES):
        return None
    N, D = 200, 64
    q, k, v = (_far_apart((3, 1, N, D), 0, F16) for _ in range(3))
    return Case(f"B3 H1 N{N} D{D} float16 (q's, k's and v's three sequences {SPREAD:,} values apart: "
                f"offsets past 2**31)", (q, k, v), hint=int64_hint("q's, k's and v's sequences", "b (and h)"))


def _causal_cases():
    cases = [Case(f"B{B} H{H} N{N} D{D} {_name(dtype)} ({why})",
                  tuple(_causal_inputs(B, H, N, D, dtype, layout, scores)))
             for B, H, N, D, dtype, layout, scores, why in CAUSAL_SPECS]
    return cases + ([later("offsets past 2**31", _causal_int64_case)] if ON_GPU else [])


def _asserted(e):
    """Whether an exception is a tl.static_assert that failed: the compiler's
    CompileTimeAssertionFailure, or under the interpreter an AssertionError raised by tl.static_assert.
    A Python `assert` in the kernel also raises AssertionError under the interpreter, but compiled it
    becomes a device assert, a no-op unless TRITON_DEBUG is set: it refuses nothing on a GPU."""
    while e is not None:
        if isinstance(e, AssertionError):
            package = str(pathlib.Path(triton.__file__).parent)
            ours = [f for f in traceback.extract_tb(e.__traceback__) if not f.filename.startswith(package)]
            return bool(ours) and "static_assert" in (ours[-1].line or "")
        if "Assertion" in type(e).__name__:
            return True
        e = e.__cause__ or e.__context__
    return False


def _python_assert(e):
    """Whether an exception is an AssertionError raised by a plain `assert` (not tl.static_assert)."""
    while e is not None:
        if isinstance(e, AssertionError):
            return True
        e = e.__cause__ or e.__context__
    return False


def _block_rule(fn):
    """Run with 16 query rows per block and tiles of 32 keys (BLOCK_N > BLOCK_M): the kernel must stop
    at compile time (tl.static_assert) or, if it handles such tiles, still be right."""
    kernel = getattr(fn, "__globals__", {}).get("causal_attention_kernel")
    if not hasattr(kernel, "configs"):
        return ("the check runs your causal_attention_kernel with other block sizes through its "
                "autotuner, but found no autotuned causal_attention_kernel beside your causal_attention: "
                "keep the @triton.autotune line of the stub.")
    q, k, v = projection_views(1, 1, 40, 16, F32)
    try:
        with tuned_over(kernel, [triton.Config({"BLOCK_M": 16, "BLOCK_N": 32}, num_warps=4, num_stages=1)]):
            out = fn(q, k, v)
    except Exception as e:  # noqa: BLE001  (the learner's kernel, on purpose with a shape it should refuse)
        if _asserted(e):
            return None
        if _python_assert(e):
            return ("run with BLOCK_M = 16 query rows and key tiles of BLOCK_N = 32, your kernel stopped at "
                    "a Python `assert`. Here, in the interpreter, that runs; compiled for a GPU it becomes a "
                    "device assert, which does nothing unless TRITON_DEBUG is set, and the kernel returns "
                    "wrong values. Check the block rule at compile time: tl.static_assert(condition, "
                    "message).")
        return (f"run with BLOCK_M = 16 query rows and key tiles of BLOCK_N = 32, your kernel raised "
                f"{type(e).__name__}: {str(e)[:200]}. A configuration that breaks the causal loop's block "
                f"rule should stop at compile time with the rule's own message (tl.static_assert).")
    want = causal_attention_reference(*(t.double() for t in (q, k, v)))
    atol, rtol = CAUSAL_TOL[F32]
    if isinstance(out, torch.Tensor) and torch.allclose(out.double(), want, atol=atol, rtol=rtol):
        return None
    return ("run with BLOCK_M = 16 query rows and key tiles of BLOCK_N = 32, your kernel compiled and "
            "returned wrong values without complaint. The unmasked key tiles must end exactly where the "
            "query block starts, which holds only when BLOCK_N divides BLOCK_M: say so in the kernel "
            "with tl.static_assert, so that such a configuration cannot compile.")


class _LargestNew(TorchDispatchMode):
    """The largest tensor (in bytes) an ATen op made, leaving out ops on the inputs' own memory (the
    interpreter copies each argument's whole storage to the host and back, as bytes)."""

    def __init__(self, inputs):
        super().__init__()
        self.storages = {t.untyped_storage().data_ptr() for t in inputs}
        self.nbytes, self.what = 0, "no tensor was made"

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket.__name__ == "set_":      # relabels memory that exists already
            return out
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if (isinstance(t, torch.Tensor) and t.numel() * t.element_size() > self.nbytes
                    and t.untyped_storage().data_ptr() not in self.storages):
                self.nbytes = t.numel() * t.element_size()
                self.what = f"{func.overloadpacket.__name__} made {tuple(t.shape)}, {t.dtype}"
        return out


def _causal_structure(fn):
    """K's bytes against the causal count, no N x N tensor, V read in its own storage, the block rule."""
    B, H, N, D = 1, 2, 256, 16                    # N: a multiple of every block, so blocks = N / BLOCK_M
    q, k, v = projection_views(B, H, N, D, F32)
    if ON_GPU:   # an autotuner times its configurations at a new size (do_bench allocates a 256 MiB
        _, problem = _calling(fn, q, k, v)      # flush buffer): the first call stays outside the meter
        if problem:
            return problem
    with _LargestNew((q, k, v)) as largest, EagerWork() as eager:
        launches, problem = _recorded(fn, q, k, v, touches=True)
    if problem:
        return problem
    size = f"at N = {N}, D = {D}, {H} heads"
    where = f"{size}, your kernel"
    if largest.nbytes >= N * N * 2:               # half an N x N matrix of float32
        return (f"{where} made a tensor that grows as N x N ({largest.what}). The scores live one tile "
                f"at a time in the kernel's registers; nothing of size N x N is ever stored.")
    moved = sum(launch.bytes for launch in launches)
    by_descriptor = sum(launch.descriptor_bytes_loaded + launch.descriptor_bytes_stored
                        for launch in launches)
    if by_descriptor < moved:
        return (f"{where} moved {moved - by_descriptor:,} of its {moved:,} bytes through pointers "
                f"(tl.load / tl.store), not through tensor descriptors. Build a descriptor over each "
                f"(batch, head) slice of q, k, v and the output, and move every tile through them.")
    touches = [t for launch in launches for t in launch.touches]
    blocks = len({pid[0] for pid, *_ in touches})
    block_m = N // max(blocks, 1)
    k_loaded = sum(len(offs) for _pid, name, kind, offs in touches if name == "k_ptr" and kind == "load")
    causal = H * D * sum(min((i + 1) * block_m, N) for i in range(blocks))
    every = H * D * blocks * N
    if not k_loaded:
        return f"{where} loaded nothing through k_ptr: read K through a descriptor over the k_ptr argument."
    if k_loaded > causal:
        return (f"{where} ({blocks} query blocks per head) loaded {k_loaded:,} values of K: the causal "
                f"count is {causal:,} (each query block reads the keys up to the end of its own block), "
                f"and reading every key tile for every block would be {every:,}. A tile right of the "
                f"diagonal holds only future keys: masking it gives the right answer, but it should not "
                f"be loaded at all.")
    v_loaded = {int(o) for _pid, name, kind, offs in touches if name == "v_ptr" and kind == "load"
                for o in offs}
    s_b, s_h, s_n, _ = v.stride()
    own = {b * s_b + h * s_h + n * s_n + d for b in range(B) for h in range(H) for n in range(N)
           for d in range(D)}
    if v_loaded != own:
        return (f"{where} did not read V where V is: the values loaded through v_ptr are not the elements "
                f"of the projection's columns that V views (rows {s_n} values apart). Pass v itself, with "
                f"its strides, to a descriptor over its slice; a copy into another layout (.contiguous()) "
                f"is the extra read and write this kernel exists to remove.")
    return _copied_beside(eager, size) or _block_rule(fn) or _unequal_blocks(fn)


def _copied_beside(eager, size):
    """A message if the learner's Python ran PyTorch on tensor data beside the kernel, at the structure's
    size (q, k, v all strided, two heads): a copy of q or k, or the output written in another layout and
    copied into the one returned. check() itself watches only its smallest case with a strided input (one
    head there, q contiguous), where such copies do not run."""
    from helpers.check import _COPY_NAMES, _OP_NAMES, FILLS  # here: helpers.check imports this module

    for line, ops in eager.found.items():
        ops = list(dict.fromkeys(_COPY_NAMES.get(op.name) or _OP_NAMES.get(op.name, op.name)
                                 for op in ops if op.name not in FILLS))
        if ops:
            return (f"{size}, your function ran PyTorch's {', '.join(ops)} at {source_line(line)}. Every "
                    f"copy reads and writes a whole tensor once more: the traffic this kernel exists to "
                    f"remove. Pass q, k and v as they are, with their strides, and let the kernel store "
                    f"straight into the (B, N, H, D) output you return, through the strides of its "
                    f"(B, H, N, D) view.")
    return None


def _unequal_blocks(fn):
    """One more run, in the interpreter, with the autotuner given BLOCK_M = 64 query rows and key tiles
    of BLOCK_N = 16 for the call (rerun_with_config). The CPU's own configuration has BLOCK_M = 2 BLOCK_N,
    where a diagonal that ends two key tiles past start_m, not where the query block ends, is right.
    N = 100: two query blocks, the second cut by N (a first row taken as program_id(0) * BLOCK_N leaves
    rows 80 to 99 unwritten), with four key tiles on each diagonal."""
    B, H, N, D = 1, 2, 100, 16
    q, k, v = projection_views(B, H, N, D, F32)
    config = triton.Config({"BLOCK_M": 64, "BLOCK_N": 16}, num_warps=4, num_stages=1)
    why = UNEQUAL_BLOCKS_WHY + ("the query block's rows, Q's and the output's descriptors go with "
                                "BLOCK_M; K's and V's descriptors and the key loop's step with BLOCK_N; the "
                                "diagonal's keys end where the query block ends, at start_m + BLOCK_M.")
    want = causal_attention_reference(*(t.double() for t in (q, k, v)))
    where = (f"run with BLOCK_M = 64 query rows and key tiles of BLOCK_N = 16 (the check gave your "
             f"autotuner this one configuration for one call), at B{B} H{H} N{N} D{D} float32 in the "
             f"interpreter, your kernel")
    return rerun_with_config(fn, "causal_attention_kernel", config, (q, k, v), want, where, why,
                             names=("the (B, N, H, D) output",))


# float32 on the CPU: the interpreter multiplies exactly, but scores of size ~400 (in base 2) carry a
# rounding of 400 * 2**-24, about 2.4e-5, into each weight: 1e-4. float32 on a GPU: tl.dot takes
# float32 as TF32 (2**-11 per operand), 1e-2 as for lesson 09's matmul. float16: P is rounded to
# float16 before P V (2**-11 of each weight) and the output once more at the store: 2e-3.
CAUSAL_TOL = {F32: pick(cpu=(1e-4, 1e-4), gpu=(1e-2, 1e-2)), F16: (2e-3, 2e-3)}
CAUSAL_NAN = ("Query i sees keys 0..i, itself included, so no row of weights is empty: a NaN is a 0 / 0, "
              "a sum of weights that every exponential underflowed to 0.")


# ---------------------------------------------------------------- 2. atomic_backward


def attention_gradients(q, k, v, out, lse, dout, causal=False, sm_scale=None):
    """(dq, dk, dv) by autograd through PyTorch's attention (out and lse are what the forward saved;
    the reference does not need them)."""
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    with torch.enable_grad():
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=sm_scale)
    return torch.autograd.grad(o, (q, k, v), dout)


def _saved(q, k, v, causal, sm_scale):
    """What the forward saves: out in the inputs' dtype, lse (natural log, float32), (B, H, N)."""
    D = q.shape[-1]
    scale = D ** -0.5 if sm_scale is None else sm_scale
    q64, k64, v64 = (t.double() for t in (q, k, v))
    s = (q64 @ k64.transpose(-1, -2)) * scale
    if causal:
        n = q.shape[-2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), NEG_INF)
    lse = torch.logsumexp(s, -1)
    out = torch.exp(s - lse[..., None]) @ v64
    return out.to(q.dtype), lse.float().contiguous()


def _random_scale(D):
    """A score scale 0.3 to 0.7 times 1/sqrt(D): a hard-coded default is far off."""
    return round(float(torch.empty(()).uniform_(0.3, 0.7)) * D ** -0.5, 4)


# The scale "negative": every query row scores every key near -800 / sqrt(D) (D = 32: -141, past
# float32's smallest exp, e**-103), so the saved lse of every row is that low too, and P must be
# exp(S - lse): exp(S) and exp(lse) both underflow to 0. Half the causal exercise's scores: the
# rounding of a score (|score| * 2**-24) times k's first column (40) stays well inside dQ's tolerance.
NEGATIVE_WHY = ("every query row scores every key near -800 / sqrt(D) = -141: every value of every row is "
                "far below zero and so is the saved lse; exp() of either alone underflows to 0")
# (B, H, N, D, dtype, scale of q and k, strided, causal, random sm_scale, why). The CPU's tiles: 32 keys
# per program, 16 queries per step; a GPU's 64 or 128 keys. Every N spans several key blocks, so every
# query row of dQ receives shares from several programs.
BACKWARD_SPECS = pick(
    cpu=[(1, 2, 100, 32, F32, 1.0, False, False, True, "full: four key blocks add into every row of dQ"),
         (1, 2, 100, 32, F32, 1.0, False, True, True, "causal"),
         (2, 1, 77, 16, F16, 1.0, False, True, False, "float16 inputs, float32 sums"),
         (1, 1, 1, 16, F32, 1.0, False, True, False, "one token"),
         (1, 2, 65, 64, F32, 1.0, True, False, True, "strided (B, N, H, D) views"),
         (1, 1, 45, 128, F16, 1.0, False, False, True, "head dimension 128, float16"),
         (1, 1, 63, 32, F32, 5.0, False, True, False, "scores up to ~100"),
         (1, 1, 37, 32, F32, "negative", False, True, False, NEGATIVE_WHY),
         (1, 1, 37, 32, F32, "negative", False, False, False, "full, " + NEGATIVE_WHY)],
    gpu=[(1, 1, 1, 64, F16, 1.0, False, True, False, "one token"),
         (2, 2, 1001, 64, F16, 1.0, False, False, True, "full: several key blocks add into every row"),
         (1, 4, 999, 128, F16, 1.0, False, True, True, "causal, head dimension 128"),
         (1, 2, 513, 64, F32, 1.0, False, True, True, "float32 (TF32 in tl.dot)"),
         (2, 2, 333, 64, F16, 1.0, True, False, False, "strided (B, N, H, D) views"),
         (1, 2, 701, 128, F16, 5.0, False, True, False, "scores up to ~100"),
         (1, 2, 259, 32, F16, "negative", False, True, False, NEGATIVE_WHY),
         (1, 2, 259, 32, F16, "negative", False, False, False, "full, " + NEGATIVE_WHY)])


def _backward_cases():
    cases = []
    for B, H, N, D, dtype, scale, strided, causal, with_scale, why in BACKWARD_SPECS:
        shape = (B, N, H, D) if strided else (B, H, N, D)
        q, k, v, dout = (torch.randn(*shape, device=DEVICE).to(dtype) for _ in range(4))
        if strided:
            q, k, v, dout = (t.transpose(1, 2) for t in (q, k, v, dout))
        if scale == "negative":
            q[..., 0], k[..., 0] = LARGE / 2, -LARGE
            # dQ's first column is -LARGE times a row's sum of dS, which is 0 but for rounding: P's
            # rounding near -141 (about 1e-5 of it), times 40, reached 0.58 of the tolerance in 8 draws
            # and once passed it (2 of 1184 values, by 3%). With dO / 10: 0.08.
            dout = dout * 0.1
        else:
            q, k = q * scale, k * scale
        kwargs = {"causal": causal}
        label = f"B{B} H{H} N{N} D{D} {_name(dtype)} ({why}), {'causal' if causal else 'full'}"
        if with_scale:
            kwargs["sm_scale"] = _random_scale(D)
            label += f", sm_scale={kwargs['sm_scale']}"
        cases.append(Case(label, (q, k, v, *_saved(q, k, v, causal, kwargs.get("sm_scale")), dout), kwargs))
    return cases


def _run_backward(fn, *args, **kwargs):
    """fn's (dq, dk, dv); all three exactly zero on more than one token is the stub as shipped (its step
    returns dk, dv as given). (On one token dQ and dK are 0 and a wrong mask can zero dV too.)"""
    grads = fn(*args, **kwargs)
    if (isinstance(grads, (tuple, list)) and len(grads) == 3 and args[0].shape[-2] > 1
            and all(isinstance(g, torch.Tensor) and g.device.type != "meta" and g.numel() for g in grads)
            and not any(bool(g.any()) for g in grads)):
        from helpers.check import NotDone  # here: helpers.check imports this module

        raise NotDone("dq, dk and dv all came back 0: _attend_backward still returns dk and dv as given.")
    return grads


def _dq_by_atomics(fn):
    """One launch writes dQ, dK and dV, and every write into dQ is an atomic add: full attention and
    causal, at a length that no block divides, so that each of the step's masks ("none", "ends",
    "causal") runs."""
    for causal in (False, True):
        problem = _dq_writes(fn, causal)
        if problem:
            return problem
    return None


def _dq_writes(fn, causal):
    B, H, N, D = 1, 2, pick(100, 300), 16      # several key blocks per query row, the last one partial
    q, k, v, dout = (torch.randn(B, H, N, D, device=DEVICE) for _ in range(4))
    out, lse = _saved(q, k, v, causal, None)
    launches, problem = _recorded(fn, q, k, v, out, lse, dout, causal=causal, touches=True)
    if problem:
        return problem

    def grad(name):
        return next((g for g in ("dq", "dk", "dv") if name.startswith(g)), None)

    writers = [launch for launch in launches
               if any(kind == "store" and grad(name) for _pid, name, kind, _o in launch.touches)]
    where = f"at N = {N}, D = {D} ({'causal' if causal else 'full attention'}), your backward"
    if len(writers) != 1:
        return (f"{where} wrote its gradients from {len(writers)} launches "
                f"({', '.join(launch.kernel for launch in writers) or 'none'}). The lesson's backward is one "
                f"kernel: each key-block program computes dK and dV and adds its share of dQ.")
    launch = writers[0]
    written = {grad(name) for _pid, name, kind, _o in launch.touches if kind == "store" and grad(name)}
    if written != {"dq", "dk", "dv"}:
        return (f"{where} ran one kernel, {launch.kernel}, but it wrote only {sorted(written)}: it should "
                f"write dK and dV and add into dQ.")
    plain = sum(1 for i, (_pid, name, kind, _o) in enumerate(launch.touches)
                if kind == "store" and grad(name) == "dq" and i not in launch.atomic_touches)
    if plain:
        return (f"{where} wrote into dQ with {plain} plain store(s). On a GPU, programs of different key "
                f"blocks run at the same time and add into the same rows: a load, an add and a store from "
                f"two programs interleave, and one share is lost. The interpreter runs programs one after "
                f"another, so the values came out right here; tl.atomic_add does the read, the add and "
                f"the write as one step (in the L2 cache), and no share is lost on a GPU either.")
    narrow = sum(1 for i, (_pid, name, kind, _o) in enumerate(launch.touches)
                 if grad(name) == "dq" and i in launch.program_scoped_touches)
    if narrow:
        return (f"{where} added into dQ with {narrow} atomic add(s) of scope \"cta\": atomic only among the "
                f"threads of one program. Programs of other key blocks add into the same rows at the same "
                f"time on a GPU, and against them such an add is a plain load, add and store: shares are "
                f"lost. The interpreter runs programs one after another, so the values came out right "
                f"here. Leave the scope at its default, \"gpu\": atomic among every program of the launch.")
    return None


# float16 gradients: P and dS are rounded to float16 (2**-11) before the matrix products, and dQ, dK
# sum N such products whose size grows with the scores: lesson 06's tolerance, measured against
# PyTorch's own flash backward. float32 on the CPU: exact products, but on the large-score case dS
# = P (dP - delta) subtracts nearly equal numbers (up to 3e-4 on gradients of size ~20). float32 on a
# GPU: tl.dot takes float32 as TF32, the float16 tolerance.
GRADS_TOL = {F32: pick(cpu=(1e-3, 1e-4), gpu=(3e-2, 1e-2)), F16: (3e-2, 1e-2)}
BACKWARD_NAN = ("Rows past the sequence's end load lse = +inf, which makes their P exactly 0: a NaN "
                "there means a row's lse was read unmasked, or inf - inf appeared somewhere. Their delta "
                "must load as a finite 0: P = 0 times (dP - delta) is NaN where delta is infinite. Keys past "
                "the end read as zeros, a score of 0: unless masked (MASK == \"ends\"), exp2(0 - lse2) "
                "overflows to inf once every real score in the row is far below zero.")


# ---------------------------------------------------------------- 3. softmax_long


def softmax_reference(x):
    """Softmax over each row of x (no row here is entirely -inf)."""
    return torch.softmax(x, dim=-1)            # read Mn, write Mn


def _rows(M, n, dtype, kind="randn", view=False):
    """(M, n) rows of one kind; view: a column slice of a wider matrix (row stride n + 13)."""
    width = n + 13 if view else n
    if kind == "randn":
        x = torch.randn(M, width, device=DEVICE) * 3
    elif kind == "huge":          # uniform in [-1e4, 1e4]: exp(x) overflows unless the max is subtracted
        x = (torch.rand(M, width, device=DEVICE) * 2 - 1) * 1e4
    elif kind == "ascending":     # each row climbs from -1e4 to 1e4: a new max in every tile
        x = torch.linspace(-1e4, 1e4, width, device=DEVICE).repeat(M, 1) + torch.rand(M, 1, device=DEVICE)
    elif kind == "flat":          # a level plus noise of 0.1: every output about 1 / n
        x = torch.rand(M, 1, device=DEVICE) * 10 - 5 + torch.rand(M, width, device=DEVICE) * 0.1
    elif kind == "negative":      # odd rows wholly in [-1e5 - 20, -1e5]: exp(x) is 0 there without the max
        x = torch.randn(M, width, device=DEVICE) * 3
        # -1e5, not -1e4: a running max started at -1e4 (a common stand-in for -inf) is then far off too
        x[1::2] = -1e5 - torch.rand(M // 2, width, device=DEVICE) * 20
    elif kind == "-inf head":     # the first half of each row -inf (a whole tile of any size up to n / 2)
        x = torch.randn(M, width, device=DEVICE) * 3
        x[2::4] = -1e4 - torch.rand(x[2::4].shape, device=DEVICE) * 20   # row 2: finite values far below 0
        x[:, : n // 2] = NEG_INF
        x[1::2][torch.rand(x[1::2].shape, device=DEVICE) < 0.2] = NEG_INF   # and -inf scattered after it
        x[:, n - 1] = x[:, n - 2].nan_to_num(neginf=0.0)   # every row keeps a finite value
    else:
        raise ValueError(kind)
    return x.to(dtype)[:, :n]


def _softmax_cases():
    # On the CPU the solution's tile is 256 values; on a GPU 4096 to 16384. Rows are several tiles
    # long, odd (a multiple of no tile), and the -inf head is longer than a tile of either.
    long = pick((1001, 3071), (20_001, 40_001))
    headed = pick((2049, 3071), (40_001, 60_001))   # half a row: longer than a tile (1024 CPU, 16384 GPU)
    specs = [(pick(3, 67), _odd(*long), F32, "randn", False, "rows of several tiles"),
             (4, _odd(*long), F16, "randn", False, "float16 inputs, float32 arithmetic"),
             (1, _odd(*long), F32, "randn", False, "a single row"),
             (4, _odd(*headed), F32, "-inf head", False,
              "the first half of each row -inf: the first tiles hold no finite value; in row 2 the rest "
              "lies in [-1e4 - 20, -1e4] (a max still 0 after those tiles leaves 0 / 0)"),
             (3, _odd(*long), F32, "huge", False, "uniform in [-1e4, 1e4]: the max must be subtracted"),
             (3, _odd(*long), F16, "huge", False, "float16, uniform in [-1e4, 1e4]"),
             (2, _odd(*long), F32, "ascending", False, "rows ascending from -1e4 to 1e4: a new max in "
                                                      "every tile"),
             (4, _odd(*long), F32, "negative", False, "rows 1 and 3 have every value far below zero, in "
              "[-1e5 - 20, -1e5]: exp(x) underflows to 0 in those rows unless the row's true max is "
              "subtracted (a running max that starts at 0, or at a stand-in for minus infinity such as -1e4, "
              "stays there)"),
             (3, pick(2048, 32768), F32, "randn", False, "rows of whole tiles: n a multiple of every tile "
                                                         "size, so the last tile is a full one"),
             (2, _odd(*long), F16, "flat", False, "float16, every output about 1/n: float16 sums lose it"),
             (3, _odd(*long), F32, "randn", True, "a slice of a wider matrix: rows n + 13 values apart"),
             (2, _odd(*long), F16, "randn", True, "float16, a slice of a wider matrix"),
             (5, _odd(51, 199), F32, "randn", False, "rows shorter than a tile")]
    cases = [Case(f"{M}x{n} {_name(dtype)} ({why})", (_rows(M, n, dtype, kind, view),))
             for M, n, dtype, kind, view, why in specs]
    if ON_GPU:
        n = _odd(*long)
        cases.append(later(PAST_INT32, lambda: past_int32_case(
            "", n, F16, 3, int32_hint("the row index", "`tl.program_id(0).to(tl.int64)`"))))
    return cases


# The tolerances of lesson 05's softmax (relative: the outputs are about 1/n, far below an absolute
# tolerance). The running sum over a row adds n values in float32, a tile at a time: about
# log2(tile) + n / tile roundings of 2**-24, under 2e-6 for these rows at any tile of 16 values or
# more, within float32's rtol of 1e-5. float16 outputs are rounded once, at the store (2**-12).
SOFTMAX_LONG_TOL = SOFTMAX_TOL

SOFTMAX_NAN_HINT = ("If this case's rows begin with whole tiles of -inf: the running max is still -inf after "
                    "such a tile, and -inf - (-inf) is NaN.")


def _two_reads_one_exp(fn):
    """x read exactly twice and the output written once; one exponential per element in each pass (as
    many tile-wide exponentials as tiles loaded); and in every program, the first pass over a row visits
    its tiles from the first to the last, the second from the last to the first, in that order."""
    M, n = pick((3, _odd(2001, 3071)), (2, _odd(40_001, 60_001)))   # 3 tiles at least, at any BLOCK
    x = torch.randn(M, n, device=DEVICE)
    with interpreter.exponentials() as exps:
        launches, problem = _recorded(fn, x, touches=True)
    if problem:
        return problem
    loaded = sum(launch.bytes_loaded for launch in launches)
    stored = sum(launch.bytes_stored for launch in launches)
    loads = [(pid, arg, offs) for launch in launches for pid, arg, kind, offs in launch.touches
             if kind == "load"]
    reads, writes = loaded / x.nbytes, stored / x.nbytes
    widest = max((len(offs) for *_, offs in loads), default=0)
    where = f"for x of shape ({M}, {n}) float32, your kernel"
    if widest >= n:
        return (f"{where} loaded {widest:,} values at once, a whole row: this exercise is for rows "
                f"longer than any tile a program can hold. Walk each row in tiles shorter than the row.")
    if reads < 2:
        return (f"{where} loaded {loaded:,} bytes, {reads:.3g} times x ({x.nbytes:,} bytes): less than two "
                f"full reads, so it kept some of pass 1's tiles (in registers) instead of reading them "
                f"again. That saves a little more, but this exercise asks for the two plain passes: pass 2 "
                f"loads every tile again, from the row's last to its first.")
    if reads != 2:
        return (f"{where} loaded {loaded:,} bytes, {reads:.3g} times x ({x.nbytes:,} bytes). Read each row "
                f"exactly twice: once to update the running max and the running sum together, once to "
                f"write the output.")
    if writes != 1:
        return (f"{where} stored {stored:,} bytes, {writes:.3g} times the output ({x.nbytes:,} bytes): "
                f"store each output element once, in the second pass.")
    # x is the argument loaded most; its offsets are row * n + column (x is contiguous here).
    totals = {}
    for _pid, arg, offs in loads:
        totals[arg] = totals.get(arg, 0) + len(offs)
    x_arg = max(totals, key=totals.get)
    tiles_loaded = sum(1 for _pid, arg, _offs in loads if arg == x_arg)
    tile_wide = sum(1 for size in exps if size > 1)
    if tile_wide > 1.25 * tiles_loaded:
        return (f"{where} loaded {tiles_loaded} tiles of x and computed {tile_wide} tile-wide exponentials: "
                f"{tile_wide / tiles_loaded:.2f} per value loaded, where one is enough. In pass 1, a running "
                f"max and sum kept per lane rescale the sum at every value (two exponentials per element): "
                f"take the tile's max first (a reduction), then rescale the row's single running sum once "
                f"per tile. In pass 2, one exponential per element: exp of (x - max), times 1 / sum.")
    covered, firsts, passes = {}, {}, {}
    for pid, arg, offs in loads:
        if arg != x_arg:
            continue
        seen = covered.setdefault(pid, np.zeros((M, n), dtype=bool))
        rows, cols = np.divmod(np.asarray(offs), n)
        for row in np.unique(rows):
            tile = cols[rows == row]
            # before pass 1 has covered the row, a load is pass 1's; after, pass 2's
            which = passes if seen[row].all() else firsts
            which.setdefault((pid, int(row)), []).append((int(tile.min()), int(tile.max())))
        seen[rows, cols] = True

    def listed(tiles):
        return ", ".join(f"{lo}..{hi}" for lo, hi in tiles[:6]) + (" ..." if len(tiles) > 6 else "")

    for (pid, row), tiles in firsts.items():
        forwards = tiles[0][0] == 0 and all(b[0] > a[1] for a, b in zip(tiles, tiles[1:]))
        if not forwards:
            return (f"{where} read row {row} the first time (program {pid[0]}) in this order of columns: "
                    f"{listed(tiles)} (of {n}). Walk pass 1 forwards, from the row's first tile to its "
                    f"last: pass 2, walking back, then starts with the tiles pass 1 read last, the "
                    f"likeliest still in the L2 cache.")
    for (pid, row), tiles in passes.items():
        order = listed(tiles)
        backwards = tiles[0][1] == n - 1 and all(b[1] < a[0] for a, b in zip(tiles, tiles[1:]))
        if not backwards:
            return (f"{where} read row {row} a second time (program {pid[0]}) in this order of columns: "
                    f"{order} (of {n}). Walk the whole second pass from the row's last tile back to its "
                    f"first, each tile before the one read just before it: the tiles pass 1 read last are "
                    f"the likeliest still in the L2 cache, and the further back, the likelier they have "
                    f"left it.")
    return None


# ---------------------------------------------------------------- the ring's barriers (Gluon)
#
# The Gluon forward's producer loads K/V tile j into a ring slot; two consumers read it. Each slot has a
# `ready` barrier (one arrival: the producer's load landing) and an `empty` one (two arrivals: each
# consumer releasing the slot). ring_waits(j, num_stages) -> (slot, ready_parity, empty_parity) says
# where tile j goes and which phase parity each side waits for. The check runs the protocol those waits
# make, every interleaving of the three partitions and the loads' landings, on a model of mbarriers:
# a barrier counts its completed phases, and wait(parity) returns once the count's parity differs from
# `parity` (a fresh barrier: wait(1) returns at once, wait(0) waits for the first completion).


def ring_waits_reference(j, num_stages):
    use = j // num_stages        # the how-many-th tile in this slot
    return j % num_stages, use % 2, 1 - use % 2


def _ring_cases():
    return [Case(f"{stages} slot{'s' if stages > 1 else ''}, {n} tiles", (stages, n))
            for stages, n in ((1, 5), (2, 7), (3, 8), (4, 10), (2, 2), (3, 1))]


def _run_ring(fn, num_stages, n_tiles):
    """The answer for every tile, asked in order; the answers asked again from the last tile back to the
    first, each (answer, None) or (None, what it raised); and the case they answer (for the explanation).
    In the kernel the producer and each consumer work out a tile's waits in their own loops, at their
    own times: an answer that holds state between calls (a phase bit flipped whenever the slot wraps to
    0, a count of each slot's tiles reset at tile 0) is right only when asked once, in order."""
    in_order = [fn(j, num_stages) for j in range(n_tiles)]
    backwards = [_calling(fn, j, num_stages) for j in reversed(range(n_tiles))][::-1]
    return in_order, backwards, (num_stages, n_tiles)


def _ring_table_problem(table, stages):
    """A message if the table is not (slot, parity, parity) of ints, slots in the ring, parities 0 or 1
    (a parity may be a bool, as `use % 2 == 0` gives: Python's True and False are the ints 1 and 0)."""
    for j, row in enumerate(table):
        if not (isinstance(row, (tuple, list)) and len(row) == 3
                and isinstance(row[0], (int, np.integer)) and not isinstance(row[0], bool)
                and all(isinstance(v, (int, np.integer, np.bool_)) for v in row[1:])):
            return (f"ring_waits({j}, {stages}) returned {row!r}: return three ints, "
                    f"(slot, ready_parity, empty_parity).")
        slot, ready, empty = (int(v) for v in row)
        if not 0 <= slot < stages:
            return (f"ring_waits({j}, {stages}) put tile {j} in slot {slot}: the ring's slots are 0 to "
                    f"{stages - 1}.")
        for name, parity in (("ready_parity", ready), ("empty_parity", empty)):
            if parity not in (0, 1):
                return (f"ring_waits({j}, {stages}) returned {name} = {parity}: a parity is 0 or 1 (an "
                        f"mbarrier keeps one bit of its phase: the last bit of a count of phases).")
    for j in range(len(table) - stages + 1):    # the ring used in full: any `stages` tiles in a row
        slots = [int(row[0]) for row in table[j:j + stages]]
        if len(set(slots)) < stages:
            return (f"tiles {j} to {j + stages - 1} go to slots {slots}: two of them share a slot, so the "
                    f"producer can never be {stages} tiles ahead of the consumers, which is what a ring of "
                    f"{stages} slots is for. Give any {stages} tiles in a row {stages} different slots.")
    return None


def simulate_ring(table, stages):
    """Run the producer and two consumers over len(table) tiles with the waits `table` gives, through
    every interleaving (breadth first, so the first problem met is the earliest possible one).
    None if every interleaving finishes with each consumer having read each tile; else what went wrong."""
    start = _Ring(0, (), (None,) * stages, (0,) * stages, (0,) * stages, (0,) * stages, (0,) * stages,
                  (0, 0), (False, False))
    seen, frontier = {start}, [start]
    try:
        while frontier:
            following = []
            for state in frontier:
                moves = _ring_moves(state, table)
                if not moves and not state.finished(len(table)):
                    return _hang(table, state)
                following += [move for move in moves if move not in seen]
                seen.update(moves)
            frontier = following
    except _Broken as broken:
        return str(broken)
    return None


class _Broken(Exception):
    """A tile read before it landed, or overwritten before both consumers read it."""


@dataclasses.dataclass(frozen=True)
class _Ring:
    producer: int      # the next tile the producer loads
    flight: tuple      # ((slot, tile), ...): copies issued, not landed yet
    holds: tuple       # per slot: the tile in it (None: none yet)
    readers: tuple     # per slot: consumers still to read that tile
    ready: tuple       # per slot: ready's completed phases
    empty: tuple       # per slot: empty's completed phases
    arrived: tuple     # per slot: consumers arrived on empty in its current phase
    next: tuple        # per consumer: the next tile it reads
    reading: tuple     # per consumer: reading that tile now

    def finished(self, n):
        return self.producer == n and min(self.next) == n


def _passes(completed, parity):
    """mbarrier.wait(parity) returns once the count of completed phases has the other parity."""
    return completed % 2 != parity


def _ring_moves(state, table):
    """Every state one step from `state`: the producer's next load, a copy landing, a consumer starting
    or finishing a read. Raises _Broken where the step breaks the ring."""
    r, moves = state, []
    if r.producer < len(table):                    # the producer: wait on empty, then load
        j = r.producer
        slot, _, parity = table[j]
        if _passes(r.empty[slot], parity):
            old = next((t for s, t in r.flight if s == slot), None)
            if old is None and r.readers[slot]:
                old = r.holds[slot]
            if old is not None:
                raise _Broken(f"the producer began loading tile {j} into slot {slot} before both consumers "
                              f"had read tile {old} from it: its wait on empty[{slot}] for parity {parity} "
                              f"returned too early, and tile {old} is lost.")
            moves.append(dataclasses.replace(r, producer=j + 1, flight=r.flight + ((slot, j),)))
    for i, (slot, tile) in enumerate(r.flight):    # a copy lands: ready completes a phase
        moves.append(dataclasses.replace(r, flight=r.flight[:i] + r.flight[i + 1:],
                                         holds=_put(r.holds, slot, tile), readers=_put(r.readers, slot, 2),
                                         ready=_put(r.ready, slot, r.ready[slot] + 1)))
    for c in (0, 1):                               # a consumer: wait on ready, read, release the slot
        j = r.next[c]
        if j == len(table):
            continue
        slot, parity, _ = table[j]
        if r.reading[c]:
            done = r.arrived[slot] == 1            # the second arrival completes empty's phase
            moves.append(dataclasses.replace(r, readers=_put(r.readers, slot, r.readers[slot] - 1),
                                             empty=_put(r.empty, slot, r.empty[slot] + done),
                                             arrived=_put(r.arrived, slot, 0 if done else 1),
                                             next=_put(r.next, c, j + 1), reading=_put(r.reading, c, False)))
        elif _passes(r.ready[slot], parity):
            if r.holds[slot] != j:
                there = "nothing yet" if r.holds[slot] is None else f"tile {r.holds[slot]}"
                raise _Broken(f"consumer {c} read slot {slot} for tile {j} while it held {there}: its wait "
                              f"on ready[{slot}] for parity {parity} returned before tile {j} had landed.")
            moves.append(dataclasses.replace(r, reading=_put(r.reading, c, True)))
    return moves


def _put(values, i, value):
    return values[:i] + (value,) + values[i + 1:]


def _hang(table, state):
    prod, ready, empty, nxt = state.producer, state.ready, state.empty, state.next
    waiting = []
    if prod < len(table):
        slot, _, parity = table[prod]
        waiting.append(f"the producer waits on empty[{slot}] for parity {parity} before tile {prod} "
                       f"({empty[slot]} phase{'s' if empty[slot] != 1 else ''} completed)")
    for c in (0, 1):
        if nxt[c] < len(table):
            slot, parity, _ = table[nxt[c]]
            waiting.append(f"consumer {c} waits on ready[{slot}] for parity {parity} before tile {nxt[c]} "
                           f"({ready[slot]} phase{'s' if ready[slot] != 1 else ''} completed)")
    return ("the kernel hangs: " + "; ".join(waiting) + ". None of those phases can complete. On a GPU "
            "nothing reports this: the kernel never returns.")


def _ring_state_problem(table, backwards, stages):
    """A message if a tile's answer, asked again from the last tile back, differs from the one it had
    when asked in order (or raised): the function keeps state between calls. The first such call made
    is named (the backward run starts at the last tile)."""
    for j in reversed(range(len(table))):
        row, (again, raised) = table[j], backwards[j]
        try:
            same = not raised and tuple(int(v) for v in again) == tuple(int(v) for v in row)
        except (TypeError, ValueError):
            same = False
        if same:
            continue
        later = (f"when they were asked for from the last tile back, {raised.removeprefix('measuring it, ')}"
                 if raised else f"{tuple(again) if isinstance(again, (tuple, list)) else again!r} when they "
                                f"were asked for from the last tile back")
        return (f"ring_waits({j}, {stages}) answered {tuple(row)} when the tiles were asked for in order "
                f"from 0, and {later}: your function keeps state between calls. In the kernel the producer "
                f"and each consumer work out tile j's waits in their own loops, at their own times: compute "
                f"the slot and both parities from j and num_stages alone.")
    return None


def _explain_ring(out, expected):
    table, backwards, (stages, n) = out
    if not isinstance(table, list) or any(row is None for row in table):
        return "ring_waits returned None for a tile: return (slot, ready_parity, empty_parity)."
    problem = _ring_table_problem(table, stages)
    if problem is None:
        problem = simulate_ring([tuple(int(v) for v in row) for row in table], stages)
    if problem is None:
        problem = _ring_state_problem(table, backwards, stages)
    if problem is None:
        return None
    return f"With {stages} slot{'s' if stages > 1 else ''} and {n} tiles, {problem}"


EXERCISES = [
    Exercise("10", "causal_attention", "causal attention on the projection's layout",
             causal_attention_reference, _causal_cases, tol=CAUSAL_TOL, kernel=True, nan_hint=CAUSAL_NAN,
             structure=_causal_structure,
             contiguous_output="the output projection reads it as a (B * N, H * D) matrix, the heads "
                               "side by side in each row"),
    Exercise("10", "ring_waits", "the ring's barriers: where each tile goes, which phase to wait for",
             ring_waits_reference, _ring_cases, run=_run_ring, explain=_explain_ring),
    Exercise("10", "atomic_backward", "the one-kernel backward: dQ by atomic adds", attention_gradients,
             _backward_cases, run=_run_backward, tol=GRADS_TOL, kernel=True, nan_hint=BACKWARD_NAN,
             outputs=("dq", "dk", "dv"),
             structure=_dq_by_atomics, timeout_s=300.0 if ON_GPU else 120.0,
             # the lesson's launcher makes q, k, v, dO contiguous (descriptors), and casts dQ, summed
             # in float32 by the atomics, to q's dtype at the end
             copies_inputs=True, torch_ops=frozenset({"_to_copy"})),
    Exercise("10", "softmax_long", "softmax of long rows, the second pass backwards", softmax_reference,
             _softmax_cases, tol=SOFTMAX_LONG_TOL, kernel=True, nan_hint=SOFTMAX_NAN_HINT,
             structure=_two_reads_one_exp),
]

