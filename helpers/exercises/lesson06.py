"""Lesson 06 exercises: FlashAttention, tiled in PyTorch, then forward, causal and backward in Triton.

Inputs are (B, H, N, D). On the CPU the kernels run through the interpreter on
tiny sizes, in float32 and in one float16 case; on a GPU in float16 at sizes
that span several blocks. Every sequence length is odd, so no block divides it;
every set of cases has a strided (B, N, H, D) layout seen through a transpose,
scores large enough that exp() overflows unless the running maximum is
subtracted, and random scales sm_scale besides the default 1/sqrt(D).

The backward comes in four steps, each checked against PyTorch's autograd
through the naive reference in float64: the gradients in plain PyTorch, the
dK/dV kernel, the dQ kernel (both through launchers given in the lesson), and
the torch.autograd.Function that runs them. The first three get what the
forward pass saves (out, lse) and the output's gradient dout.

On a GPU, the forward kernels and the two backward kernels also meet a case past
2**31 elements per tensor (the lesson asks for int64 offsets), compared on its
last head. The autograd.Function wires those same kernels, and has no such case.

Once the values are right, each check measures what the lesson teaches: the
tiled PyTorch version never makes a tensor larger than q (a whole row of scores
per query block is) and reads each element of k once per query block (one pass
over the keys, not two), the forward kernels compute each score once (as many
multiply-adds in Q K^T as in P V), the causal kernels skip the tiles right of the diagonal
(counted in K/V bytes loaded and in the matrix products' multiply-adds, then program
by program against the exact count for the kernel's own blocks), the
PyTorch backward writes the gradients itself (autograd records nothing), and the
autograd.Function's backward runs Triton kernels, holds no N x N tensor, and reads what
its own forward kept (two calls, then one backward through both). The forward kernels run
once more with 128 query rows and key tiles of 16 (their autotuner given that one
configuration): on a GPU short sequences run with square 64 x 64 blocks, where BLOCK_M and
BLOCK_N mixed up give the right values, and on the CPU every block is 64 x 32, where a causal
diagonal that ends two key tiles on, not at the query block's end, does, and so does a 64
written for BLOCK_M. The backward kernels likewise run once more, causal and full, with the
block they hold four times the one they stream (128 x 32 for dQ, 32 x 128 for dK/dV), where
every other case has it twice.
"""

import collections
import math

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from helpers import interpreter
from helpers.device import DEVICE, ON_GPU, pick
from helpers.exercises import (
    UNEQUAL_BLOCKS_WHY,
    Case,
    Exercise,
    later,
    rerun,
    rerun_with_config,
    room_for,
    tuned_over,
)
from helpers.traffic import ReadsOf, largest_tensor, triton_traffic


def attention_reference(q, k, v, causal=False, sm_scale=None):
    """softmax(q k^T * sm_scale) v with the N x N scores materialized; returns (out, lse).

    The lse is kept in float32 at least (float64 stays float64): it is summed over N
    exponentials and the backward pass exponentiates it again, so float16 is too coarse.
    """
    sm_scale = q.shape[-1] ** -0.5 if sm_scale is None else sm_scale
    s = (q @ k.transpose(-2, -1)) * sm_scale
    if causal:
        n = q.shape[-2]
        future = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
        s = s.masked_fill(future, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    out = torch.exp(s - lse[..., None]) @ v
    return out, lse.to(torch.promote_types(lse.dtype, torch.float32))


# The `scale` of a case whose odd query rows score every key around far_below(dtype) (at the default
# sm_scale): exp() of every such score underflows to 0 unless the row's true maximum is subtracted, so
# a running maximum that starts at 0 gives 0/0 there. -120 is past float32's smallest exp (about
# e**-103) and keeps the scores' float32 rounding (|score| * 2**-24 per term) well inside the tolerance;
# float64 needs -1000 (its exp underflows below about -745).
FAR = "far below zero"
FAR_WHY = ("query rows 1, 3, 5, ... score every key at about -120 (-1000 in float64): every value in those "
           "rows is far below zero, so exp() underflows to 0 there unless the row's true max is subtracted, "
           "and their lse is that low too")


def far_below(dtype):
    return -1000.0 if dtype == torch.float64 else -120.0


def qkv(B, H, N, D, dtype, scale=1.0, strided=False, count=3):
    """`count` fresh (B, H, N, D) tensors; q and k multiplied by `scale` (scores grow as scale**2).

    scale=FAR: q and k unscaled, except that the first coordinate of every key is 40 and that of the
    odd queries is chosen so that their scores (at sm_scale = 1/sqrt(D)) are far_below(dtype) + about N(0, 1).
    """
    def one(i):
        if strided:  # stored (B, N, H, D), as a projection produces it, seen as (B, H, N, D)
            t = torch.randn(B, N, H, D, device=DEVICE, dtype=dtype).transpose(1, 2)
        else:
            t = torch.randn(B, H, N, D, device=DEVICE, dtype=dtype)
        return t * scale if i < 2 and scale != FAR else t
    tensors = tuple(one(i) for i in range(count))
    if scale == FAR:
        q, k = tensors[:2]
        k[..., 0] = 40.0
        q[..., 0] = 0.0
        q[..., 1::2, 0] = far_below(dtype) * D ** 0.5 / 40.0
    return tensors


def random_sm_scale(D):
    """A score scale 0.3 to 0.7 times the default 1/sqrt(D): a hard-coded default is far off."""
    return round(float(torch.empty(()).uniform_(0.3, 0.7)) * D ** -0.5, 4)


KERNEL_DTYPE = pick(cpu=torch.float32, gpu=torch.float16)
BIG_SCALE = 5.0  # scores = 25 * N(0, 1): the largest pass 88, where exp() overflows float32
# (B, H, N, D, dtype, scale of q and k, strided, why). Every N is odd: no block of 16 or more divides it.
KERNEL_SPECS = pick(
    cpu=[(1, 1, 1, 16, KERNEL_DTYPE, 1.0, False, "a single query and key"),
         (2, 2, 99, 64, KERNEL_DTYPE, 1.0, False, "N not a multiple of the blocks"),
         (1, 2, 17, 32, KERNEL_DTYPE, 1.0, False, "fewer keys than one block"),
         (1, 1, 41, 128, KERNEL_DTYPE, 1.0, False, "head dimension 128"),
         (1, 2, 77, 32, torch.float16, 1.0, False, "float16 inputs, float32 arithmetic"),
         (1, 2, 91, 64, KERNEL_DTYPE, BIG_SCALE, False, "scores up to ~100: exp overflows without the max"),
         (2, 2, 51, 32, KERNEL_DTYPE, 1.0, True, "strided views of a (B, N, H, D) tensor"),
         (1, 2, 37, 32, KERNEL_DTYPE, FAR, False, FAR_WHY),
         (1, 2, 128, 32, KERNEL_DTYPE, 1.0, False, "N a multiple of every block: no tile cut")],
    gpu=[(1, 1, 1, 64, KERNEL_DTYPE, 1.0, False, "a single query and key"),
         (2, 3, 1001, 64, KERNEL_DTYPE, 1.0, False, "N not a multiple of the blocks"),
         (4, 2, 129, 16, KERNEL_DTYPE, 1.0, False, "head dimension 16, one key past a block"),
         (1, 4, 257, 128, KERNEL_DTYPE, 1.0, False, "head dimension 128"),
         (2, 8, 999, 128, KERNEL_DTYPE, 1.0, False, "16 heads, one key short of whole blocks"),
         (1, 4, 701, 128, KERNEL_DTYPE, BIG_SCALE, False, "scores up to ~100: exp overflows without the max"),
         (2, 2, 333, 64, KERNEL_DTYPE, 1.0, True, "strided views of a (B, N, H, D) tensor"),
         (1, 2, 37, 32, KERNEL_DTYPE, FAR, False, FAR_WHY),
         (1, 2, 512, 64, KERNEL_DTYPE, 1.0, False, "N a multiple of every block: no tile cut")])


# float16 cases whose running sums pass float16's largest value (65504) on the way to a result that
# fits: an accumulator kept in float16 between tiles overflows to inf there; float32 ones do not.
LARGE_SUMS_N, LARGE_SUMS_D = 701, 32
F16_LARGE_SUMS_WHY = "float16; the running sums pass float16's largest value, 65504, before they come back"


def _forward_large_sums_case():
    """Every score equal (q = 0) and v near 100: the unnormalised output, the sum of p·v over the keys
    with every p = 1, reaches about 100 N before the division by l."""
    N, D = LARGE_SUMS_N, LARGE_SUMS_D
    q = torch.zeros(1, 1, N, D, device=DEVICE, dtype=torch.float16)
    k = torch.randn(1, 1, N, D, device=DEVICE, dtype=torch.float16)
    v = (100 + torch.randn(1, 1, N, D, device=DEVICE)).half()
    return Case(_label(1, 1, N, D, torch.float16, f"{F16_LARGE_SUMS_WHY}: every score equal (q = 0), v near "
                       f"100, so the sum of p·v before the division by l is about 100 N"), (q, k, v))


def _backward_large_sums_case(saved):
    """Key 0 takes nearly all of every query's attention and v = 0, and dO is +200 on the first half of
    the queries and -200 on the second: dV's running sum for key 0 passes 65504 halfway, then returns
    to a few tens."""
    N, D = LARGE_SUMS_N, LARGE_SUMS_D
    k = torch.randn(1, 1, N, D, device=DEVICE)
    k[..., 0, :] = 0.0
    k[..., 0, 0] = 30.0
    q = torch.randn(1, 1, N, D, device=DEVICE) * 0.3
    q[..., 0] = 3.0
    q, k = q.half(), k.half()
    v = torch.zeros(1, 1, N, D, device=DEVICE, dtype=torch.float16)
    dout = torch.randn(1, 1, N, D, device=DEVICE)
    dout[..., : N // 2, :] += 200.0
    dout[..., N // 2:, :] -= 200.0
    dout = dout.half()
    label = _label(1, 1, N, D, torch.float16, f"{F16_LARGE_SUMS_WHY}: key 0 takes every query's attention, "
                   f"v = 0, dO = +200 on the first half of the queries and -200 on the second, so dV's "
                   f"running sum for key 0 reaches about 200 N / 2") + ", full"
    return _full_backward_case(label, q, k, v, dout, saved)


def _halves(first, second, N, D):
    """(1, 1, N, D) float16: `first` in the first half of the rows, `second` in the second."""
    t = torch.full((1, 1, N, D), float(first), device=DEVICE, dtype=torch.float16)
    t[..., N // 2:, :] = second
    return t


def _ds_large_sums_case(saved, gradient):
    """Every score 0 and P = 1/N, v = +30 on the first half of the keys and -30 on the second, dO = 30:
    dP = dO V^T = +-28,800 and dS = +-56.25. For dQ = dS K: q = 0, and k = 100 on the first half of the
    keys, 98 on the second; for dK = dS^T Q: k = 0, and q = 100 on the first half of the queries, -98
    on the second. Either running sum reaches 1.44 million, then comes back to 28,800 (about 5,000 once
    scaled): float16's tolerance, relative, covers float32's roundings on the way there."""
    N, D = 512, 32
    zeros, hundreds = torch.zeros(1, 1, N, D, device=DEVICE, dtype=torch.float16), _halves(100, 98, N, D)
    q, k = (zeros, hundreds) if gradient == "dQ" else (_halves(100, -98, N, D), zeros)
    v, dout = _halves(30, -30, N, D), _halves(30, 30, N, D)
    how = "k = 0, q = 100 then -98" if gradient == "dK" else "q = 0, k = 100 then 98"
    label = _label(1, 1, N, D, torch.float16, f"{F16_LARGE_SUMS_WHY}: every score 0 ({how}), v = +30 on the "
                   f"first half of the keys and -30 on the second, dO = 30, so {gradient}'s running sum "
                   f"reaches about 1.4 million before it comes back to about 5,000") + ", full"
    return _full_backward_case(label, q, k, v, dout, saved)


def _full_backward_case(label, q, k, v, dout, saved):
    """A case of full attention for the backward: (q, k, v, out, lse, dout) if `saved`, else (q, k, v,
    dout)."""
    if not saved:
        return Case(label, (q, k, v, dout), {"causal": False})
    return Case(label, (q, k, v, *_saved(q, k, v, False, None), dout), {"causal": False})


def _label(B, H, N, D, dtype, why):
    return f"B{B} H{H} N{N} D{D} {str(dtype).removeprefix('torch.')} ({why})"


STRIDED_HINT = ("This case's inputs are strided views of (B, N, H, D) tensors (in the backward, out and lse "
                "too). If the other cases pass, a tensor reached the kernel with its strides while the "
                "kernel walks rows of D contiguous values: the launcher makes each one contiguous first.")
INT32_HINT = ("This case has more than 2**31 elements per tensor: an offset computed in int32 wraps past "
              "2**31 and points outside the tensor (wrong values, or an illegal memory access). Make the "
              "(batch, head) program id tl.int64 before it is multiplied by n_ctx * HEAD_DIM.")


def _last_head(out):
    """The last head of a (B, H, ...) output, or of each in a tuple of them ((out, lse), (dk, dv));
    anything else as it is (the comparison then says what is wrong)."""
    if isinstance(out, torch.Tensor) and out.dim() >= 2:
        return out[:, -1:]
    if isinstance(out, (tuple, list)) and all(isinstance(t, torch.Tensor) and t.dim() >= 2 for t in out):
        return tuple(t[:, -1:] for t in out)
    return out


def past_int32_case(H=2**15 + 1, N=512, D=128, dtype=torch.float16):
    """(1, H, N, D) inputs of just over 2**31 elements each (4 GiB in float16), for a GPU: the last head
    starts past element 2**31. The reference runs on the last head alone, compared with the output's.

    H stays below 65536, the grid's limit on its second axis (one program per (b, h) there); N = 512
    keeps the kernel's work to milliseconds. Unguarded (no copies of the inputs), the check holds q, k,
    v, the output and one transient copy: about 20 GiB at the default size. None on a GPU without room.
    """
    if not room_for(5 * H * N * D * dtype.itemsize):
        return None
    q, k, v = qkv(1, H, N, D, dtype)
    return Case(_label(1, H, N, D, dtype, "past 2**31 elements per tensor; compared on its last head"),
                (q, k, v), {}, hint=INT32_HINT, reference_args=tuple(t[:, -1:] for t in (q, k, v)),
                part=_last_head, guard=False)


def _saved_by_heads(q, k, v, causal, heads=256):
    """_saved() for inputs too large to upcast whole: float32 scores, `heads` heads at a time, and the
    last head (the one compared) in float64 as the other cases have it."""
    out, lse = torch.empty_like(q), torch.empty(q.shape[:-1], device=q.device, dtype=torch.float32)
    for h in range(0, q.shape[1], heads):
        chunk = slice(h, h + heads)
        o, l = attention_reference(*(t[:, chunk].float() for t in (q, k, v)), causal)
        out[:, chunk], lse[:, chunk] = o, l
    out[:, -1:], lse[:, -1:] = _saved(*(t[:, -1:] for t in (q, k, v)), causal, None)
    return out, lse


def backward_past_int32_case(gradients, H=2**15 + 1, N=512, D=128, dtype=torch.float16):
    """Causal (1, H, N, D) inputs past 2**31 elements each, for the backward kernels on a GPU, with the
    out and lse the forward saves; the reference runs on the last head. `gradients`: how many tensors
    of that size the kernel returns (2 for dK and dV, 1 for dQ). Unguarded, the check holds q, k, v,
    dO, out and the gradients, 4 GiB each: 24 to 28 GiB. None on a GPU without room."""
    if not room_for((5 + gradients) * H * N * D * dtype.itemsize):
        return None
    q, k, v, dout = qkv(1, H, N, D, dtype, count=4)
    args = (q, k, v, *_saved_by_heads(q, k, v, causal=True), dout)
    return Case(_label(1, H, N, D, dtype, "past 2**31 elements per tensor; compared on its last head")
                + ", causal", args, {"causal": True}, hint=INT32_HINT,
                reference_args=tuple(t[:, -1:] for t in args), part=_last_head, guard=False)


# A running maximum started at a large negative number in place of -inf (-1e4, say) is right wherever a
# row has a score above it. Here the odd query rows score every key -2e4 (about -2.9e4 in exp2's units):
# such a start stays the row's "max", every p underflows to 0, and out is 0/0.
BELOW_STAND_INS = -2e4
BELOW_STAND_INS_WHY = ("query rows 1, 3, 5, ... score every key -2e4: below -1e4 and any other finite "
                       "stand-in for -inf that the running max might start at")


def _below_stand_ins_case():
    """qkv's far-below-zero construction (every key's first coordinate 40), with the odd queries zero but
    for their first coordinate, so that each of them scores every key the same, BELOW_STAND_INS (at the
    default sm_scale): float32's rounding of a score that large (about 2e-3) is then the same for every
    key, and the softmax is exactly uniform."""
    B, H, N, D = 1, 2, 37, 32
    q, k, v = qkv(B, H, N, D, KERNEL_DTYPE, FAR)
    q[..., 1::2, :] = 0.0
    q[..., 1::2, 0] = BELOW_STAND_INS * D ** 0.5 / 40.0
    return Case(_label(B, H, N, D, KERNEL_DTYPE, BELOW_STAND_INS_WHY), (q, k, v))


def _kernel_cases():
    """Cases for the forward kernels: every other one with a random sm_scale (never the large-score one),
    then the float16 large-sums case and the case below -1e4; on a GPU, a last one past 2**31 elements
    (the lesson asks for int64 offsets)."""
    cases = []
    for i, (B, H, N, D, dtype, scale, strided, why) in enumerate(KERNEL_SPECS):
        label, kwargs = _label(B, H, N, D, dtype, why), {}
        if i % 2 == 0 and scale == 1.0:
            kwargs["sm_scale"] = random_sm_scale(D)
            label += f", sm_scale={kwargs['sm_scale']}"
        cases.append(Case(label, qkv(B, H, N, D, dtype, scale, strided), kwargs,
                          hint=STRIDED_HINT if strided else ""))
    cases += [_forward_large_sums_case(), _below_stand_ins_case()]
    return cases + ([later("past 2**31 elements per tensor", past_int32_case)] if ON_GPU else [])


def _saved(q, k, v, causal, sm_scale):
    """What the forward pass saves for the backward: out in the inputs' dtype, lse in float32 at least."""
    with torch.no_grad():
        out, lse = attention_reference(*(t.to(torch.float64) for t in (q, k, v)), causal, sm_scale)
    return out.to(q.dtype), lse.to(torch.promote_types(q.dtype, torch.float32))


def _backward_case(B, H, N, D, dtype, scale, strided, why, causal, with_scale, saved):
    """(q, k, v, out, lse, dout) if `saved`, else (q, k, v, dout); causal and sm_scale as keywords."""
    q, k, v, dout = qkv(B, H, N, D, dtype, scale, strided, count=4)
    if scale == FAR:   # scores near -120 carry float32's rounding (about 1e-5 of P), which dQ multiplies
        dout = dout * 0.1   # by the keys' common coordinate: smaller gradients keep it inside the tolerance
    label = _label(B, H, N, D, dtype, why) + (", causal" if causal else ", full")
    kwargs = {"causal": causal}
    if with_scale:
        kwargs["sm_scale"] = random_sm_scale(D)
        label += f", sm_scale={kwargs['sm_scale']}"
    hint = STRIDED_HINT if strided else ""
    if not saved:
        return Case(label, (q, k, v, dout), kwargs, hint=hint)
    out, lse = _saved(q, k, v, causal, kwargs.get("sm_scale"))
    if strided:   # out and lse stored (B, N, H, ...) too: every tensor the launchers read is a strided view
        out, lse = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (out, lse))
    return Case(label, (q, k, v, out, lse, dout), kwargs, hint=hint)


# Said after a failure of the far-below-zero case run with full attention. The dQ kernel's keys past N
# load as zeros, and their share dS K is 0 however large dS is, unless dS is inf: the scores of those
# keys are 0, and exp2(0 - lse2) is inf once the lse is below about -88.
FAR_KEYS_HINT = ("This case is full attention, and rows 1, 3, 5, ... score every key near -120, so their "
                 "lse is that low too. A key past n_ctx loads as zeros and scores 0, and exp2(0 - lse2) "
                 "overflows to inf; its K row being 0 does not help (inf * 0 is NaN). Hide the keys past "
                 "n_ctx with -inf in the scores (MASK == \"keys\") before the exponential, as the forward "
                 "does.")


def _backward_cases(saved=True, gradients=2):
    """The kernel sizes for the backward: causal every other case and the strided one (whose lse then
    differs from row to row: at N(0, 1) scores every full row's lse is near log N, and float16's
    tolerance hid a kernel that read lse's rows in the wrong order), and a random sm_scale in all but
    the large-score case and one causal one (so that causal cases meet both); then the far-below-zero
    case once more, full (FAR_KEYS_HINT). On a GPU, the kernels' own exercises (saved=True) end with a
    case past 2**31 elements per tensor; attention_backward (saved=False) grades the wiring of those
    same kernels through autograd, and has none."""
    cases = []
    for i, spec in enumerate(KERNEL_SPECS):
        strided = spec[6]
        cases.append(_backward_case(*spec, causal=i % 2 == 1 or strided,
                                    with_scale=i % 4 != 3 and spec[5] == 1.0, saved=saved))
    # The FAR case above is causal, where the diagonal's mask hides the keys past N too; in full
    # attention only the "keys" mask does.
    far = next(spec for spec in KERNEL_SPECS if spec[5] == FAR)
    cases.append(_backward_case(*far, causal=False, with_scale=False, saved=saved))
    cases[-1].hint = FAR_KEYS_HINT
    cases += [_backward_large_sums_case(saved), *(_ds_large_sums_case(saved, grad) for grad in ("dQ", "dK"))]
    if saved and ON_GPU:
        cases.append(later("past 2**31 elements per tensor", lambda: backward_past_int32_case(gradients)))
    return cases


def _torch_backward_cases():
    """The plain-PyTorch backward: float32 and float64, both masks, on either device (it is small)."""
    specs = [(1, 1, 65, 32, torch.float32, 1.0, False, "one row past a power of two", False, True),
             (2, 3, 99, 64, torch.float32, 1.0, False, "several heads", True, False),
             (2, 1, 131, 32, torch.float64, 1.0, False, "float64", True, True),
             (1, 2, 77, 16, torch.float64, 1.0, False, "float64", False, False),
             (1, 2, 91, 64, torch.float32, BIG_SCALE, False, "scores up to ~100", False, False),
             (1, 2, 91, 64, torch.float64, BIG_SCALE, False, "scores up to ~100", True, False),
             (2, 2, 51, 32, torch.float32, 1.0, True, "strided views", True, True),
             (1, 2, 37, 32, torch.float32, FAR, False, FAR_WHY, True, False),
             (1, 1, 29, 16, torch.float64, FAR, False, FAR_WHY, False, False)]
    cases = [_backward_case(*spec, saved=True) for spec in specs]
    for case in cases:
        case.hint = ""   # PyTorch follows any strides: the kernels' hint is not for this exercise
    return cases


F16_STATS_WHY = "float16 inputs: m, l, acc and the lse in float32, the output in float16"


def _tiled_reference(q, k, v, causal=False, sm_scale=None, block_m=None, block_n=None):
    """attention_reference: the tiles change nothing in the result."""
    return attention_reference(q, k, v, causal, sm_scale)


def _tiled_cases():
    """The plain-PyTorch exercise: float32 and float64 (float16 once: the running statistics in float32),
    both masks, on either device (it is small). Two causal cases pass other tiles than the default
    32 x 16, block_n larger than block_m and block_n not dividing it: a tile then straddles the diagonal
    in blocks other than the query block's own."""
    # (B, H, N, D, dtype, causal, scale, strided, (block_m, block_n) or None for the default, why)
    specs = [(1, 1, 65, 32, torch.float32, False, 1.0, False, None, "one row past whole tiles"),
             (2, 3, 99, 64, torch.float32, False, 1.0, False, None, "N not a multiple of the tiles"),
             (1, 2, 77, 16, torch.float32, True, 1.0, False, (16, 32), "causal, key tiles longer than the "
                                                                      "query blocks"),
             (2, 1, 131, 32, torch.float64, True, 1.0, False, (24, 16), "causal, float64, key tiles that do "
                                                                       "not divide the query blocks"),
             (1, 2, 91, 64, torch.float32, False, BIG_SCALE, False, None, "scores up to ~100"),
             (1, 2, 91, 64, torch.float64, True, BIG_SCALE, False, None, "scores up to ~100, causal"),
             # the last query block holds 15 rows: a loop to i + block_m, not cut at N, ends on an empty tile
             (2, 2, 47, 32, torch.float32, True, 1.0, True, None,
              "strided views, causal, a last query block of 15 rows: its diagonal ends past N"),
             (1, 2, 37, 32, torch.float32, False, FAR, False, None, FAR_WHY),
             (1, 1, 29, 16, torch.float64, True, FAR, False, None, FAR_WHY + ", causal"),
             (1, 2, 70, 32, torch.float16, False, 1.0, False, None, F16_STATS_WHY)]
    cases = []
    for i, (B, H, N, D, dtype, causal, scale, strided, blocks, why) in enumerate(specs):
        label, kwargs = _label(B, H, N, D, dtype, why), {"causal": causal}
        if blocks:
            kwargs["block_m"], kwargs["block_n"] = blocks
            label += f", block_m={blocks[0]}, block_n={blocks[1]}"
        if i % 2 == 1 and scale == 1.0:
            kwargs["sm_scale"] = random_sm_scale(D)
            label += f", sm_scale={kwargs['sm_scale']}"
        cases.append(Case(label, qkv(B, H, N, D, dtype, scale, strided), kwargs))
    return cases


def _gradients(q, k, v, out, lse, dout, causal=False, sm_scale=None):
    """(dq, dk, dv) by autograd through the naive reference (which needs neither out nor lse)."""
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    with torch.enable_grad():
        o = attention_reference(q, k, v, causal, sm_scale)[0]
    return torch.autograd.grad(o, (q, k, v), dout)


def _dkdv(*args, **kwargs):
    return _gradients(*args, **kwargs)[1:]


def _dq(*args, **kwargs):
    return _gradients(*args, **kwargs)[0]


def _forward_backward(fn, q, k, v, dout, **kwargs):
    """Run fn(q, k, v, **kwargs) forward, then backward with the fixed dout: {out, dq, dk, dv}."""
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    from helpers.check import CheckFailed  # here, not at the top: helpers.check imports this module

    out = fn(q, k, v, **kwargs)
    if out is None:
        return None
    if not isinstance(out, torch.Tensor):
        raise CheckFailed(f"your function returned a {type(out).__name__}, not the output tensor: "
                          f"FlashAttention.forward returns out alone (what backward needs goes to ctx), and "
                          f"autograd hands backward one gradient per tensor forward returns.")
    out.backward(dout)

    for name, t in zip("qkv", (q, k, v)):
        if t.grad is None:
            raise CheckFailed(f"no gradient reached {name}: does backward return (dq, dk, dv, None, None)?")
    return {"out": out.detach(), "dq": q.grad, "dk": k.grad, "dv": v.grad}


def _full(q, k, v, sm_scale=None):
    return attention_reference(q, k, v, causal=False, sm_scale=sm_scale)


def _causal(q, k, v, sm_scale=None):
    return attention_reference(q, k, v, causal=True, sm_scale=sm_scale)


def _attention_out(q, k, v, causal=False, sm_scale=None):
    return attention_reference(q, k, v, causal, sm_scale)[0]


# ---------------------------------------------------------------- the structure each exercise teaches

# One (b, h) slice, several blocks long, small enough for the interpreter.
MEASURE_N, MEASURE_D = 512, 16


def _calling(fn, *args, **kwargs):
    """(result, None), or (None, a message) if the call raised."""
    try:
        return fn(*args, **kwargs), None
    except Exception as e:  # noqa: BLE001  (the learner's code, measured: say what it raised)
        return None, f"measuring it, your function raised {type(e).__name__}: {e}"


def _once_unmeasured(call):
    """On a GPU, `call()` once before it is measured: an autotuner times its configs on the first call
    at a new size, and the meters would count those runs (and their cache-flushing buffer) as its own."""
    return _calling(call)[1] if ON_GPU else None


class _FloatingTensors(TorchDispatchMode):
    """Inside `with _FloatingTensors() as seen:`, seen.made lists (op, shape) of every floating-point
    tensor an ATen op made."""

    def __init__(self):
        super().__init__()
        self.made = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and t.is_floating_point():
                self.made.append((func.overloadpacket.__name__, tuple(t.shape)))
        return out


def _tiles_only(fn):
    """attention_tiled never holds more than a tile of scores.

    At N = 256 and D = 16 with block_m=32, block_n=64, no tensor it makes is larger than q (a whole
    row of scores per query block, block_m x N, is; so is N x N). With tiles of 8 x 8, no tensor is
    larger than a tile (block_m x max(block_n, D)) except those the size of q, and the lse: one query's
    whole row of N scores is, so an exact softmax taken one query at a time shows. Last, full attention
    with tiles of 32 x 64 reads each element of k once per query block: two passes over the key tiles
    (the max and the sum first, then the output) read it twice.
    """
    n, d = MEASURE_N // 2, MEASURE_D
    q, k, v = qkv(1, 1, n, d, torch.float32)
    for causal in (False, True):
        with largest_tensor() as largest:
            _, problem = _calling(fn, q, k, v, causal=causal, block_m=32, block_n=64)
        if problem:
            return problem
        if largest.numel > q.numel():
            return (f"called with N = {n}, D = {d}, block_m=32, block_n=64 and "
                    f"causal={causal}, it made a tensor larger than q: {largest}. A query block should "
                    f"meet the keys one tile of block_n at a time; a whole row of scores (or the N x N "
                    f"matrix) is the memory FlashAttention exists to avoid.")
    tile = 8
    limit = tile * max(tile, d)
    lse_shapes = ((1, 1, n), (1, 1, n, 1))
    for causal in (False, True):
        with _FloatingTensors() as seen:
            _, problem = _calling(fn, q, k, v, causal=causal, block_m=tile, block_n=tile)
        if problem:
            return problem
        for op, shape in seen.made:
            numel = math.prod(shape)
            if numel > limit and numel != q.numel() and shape not in lse_shapes:
                return (f"called with N = {n}, D = {d}, block_m={tile}, block_n={tile} and causal={causal}, "
                        f"{op} made a tensor of shape {shape}: more values than one tile of the computation "
                        f"holds (block_m x max(block_n, D) = {limit}). A whole row of scores, even for one "
                        f"query, grows with N; each query block should meet the keys one tile of block_n at "
                        f"a time, the running max and sum carrying the rest.")
    blocks = math.ceil(n / 32)
    with ReadsOf(k) as reads:
        _, problem = _calling(fn, q, k, v, causal=False, block_m=32, block_n=64)
    if problem:
        return problem
    if reads.elements > 1.5 * blocks * k.numel():
        return (f"called with N = {n}, D = {d}, block_m=32, block_n=64 and causal=False, it read every "
                f"element of k {reads.elements / (blocks * k.numel()):.1f} times per query block. Two "
                f"passes over the key tiles (the max and the sum first, then the output) read K twice and "
                f"compute every score twice. The recurrence needs one pass: when the max grows, alpha "
                f"rescales l and acc, so that acc / l is exact after the last tile.")
    return None


def _measured(fn, *args, **kwargs):
    """(traffic, its tl.dot calls, None) of one call of fn, seen by the interpreter after one call left
    unmeasured on a GPU; or (None, None, a message) if either call raised."""
    problem = _once_unmeasured(lambda: fn(*args, **kwargs))
    if problem:
        return None, None, problem
    with interpreter.dots() as dots:
        traffic, problem = _calling(triton_traffic, fn, *args, **kwargs)
    return traffic, dots, problem


def _tile_width(dots, own):
    """The widest tile a kernel streams past its programs' blocks of `own`: what is left of a tl.dot's
    (M, K, N) once the head dimension and `own` are taken out. None if a dot lacks either."""
    widths = []
    for dot in dots:
        dims = list(dot.shape)
        for known in (MEASURE_D, own):
            if known not in dims:
                return None
            dims.remove(known)
        widths.append(dims[0])
    return max(widths, default=None)


def _one_tile_too_many(dots, every_tile, held="queries", streamed="keys"):
    """None if no program of a causal kernel does a whole tile more than the diagonal needs; else why.

    The tl.dot calls, program by program, against the exact count for the kernel's own blocks.
    `every_tile`: the multiply-adds of visiting every tile. Each of the P programs holds a block of
    own = N / P `held` rows and streams the `streamed` ones past it in tiles of w. Counted from the
    end where the triangle is narrowest, the i-th block needs i * own of them, in whole tiles
    ceil(i * own / w) * w (w divides N, so either end gives the same count). Programs are matched to
    blocks by their work, smallest first: a kernel may number its blocks in any order. A correct
    kernel stays within a tile of that (tiles placed otherwise, smaller ones on the diagonal); a loop
    that runs one block past the diagonal, masked, adds a whole tile in every program it does not clip.
    """
    work = collections.Counter()
    for dot in dots:
        work[dot.program] += dot.multiply_adds
    own = MEASURE_N // max(len(work), 1)
    w = _tile_width(dots, own)
    if w is None or own * len(work) != MEASURE_N:
        return None   # not one block of rows per program: nothing to compare with
    per_row = every_tile / MEASURE_N / len(work)   # one program, one streamed row
    done = sorted(work.values())
    needed = [math.ceil(i * own / w) * w * per_row for i in range(1, len(work) + 1)]
    extra = sum(d - n >= w * per_row for d, n in zip(done, needed))
    if not extra:
        return None
    return (f"its tl.dot calls did {sum(done):,} multiply-adds where its own blocks need exactly "
            f"{round(sum(needed)):,}. Each of its {len(work)} programs holds {own} {held} and streams the "
            f"{streamed} past them in tiles of {w}; {extra} of them visited a whole tile more than the "
            f"tiles holding a score they need. That is a loop that starts or ends one block past the "
            f"diagonal, on a tile whose scores are all masked: the values stay right, but the tile is "
            f"still loaded and multiplied. Look at the bound of the loop that reaches the diagonal.")


def _scores_twice(fn, dots):
    """None if a forward kernel's score products (tl.dot(q, kT): (BLOCK_M, D, BLOCK_N), the head dimension
    summed over) do no more multiply-adds than its products with V ((BLOCK_M, BLOCK_N, D)), as one pass
    over the keys does; else why not. A first pass for the row max, then a second for the sums, computes
    every score twice. `dots`: fn's products at D = MEASURE_D; where key tiles of BLOCK_N = MEASURE_D make
    the two shapes the same, fn is measured once more at twice that D."""
    D = MEASURE_D
    if any(dot.shape[1] == dot.shape[2] == D for dot in dots):
        D = 2 * MEASURE_D
        _, dots, problem = _measured(fn, *qkv(1, 1, MEASURE_N, D, KERNEL_DTYPE))
        if problem:
            return problem
    scores = sum(dot.multiply_adds for dot in dots if dot.shape[1] == D != dot.shape[2])
    values = sum(dot.multiply_adds for dot in dots if dot.shape[2] == D != dot.shape[1])
    if not values or scores <= 1.2 * values:
        return None
    return (f"at N = {MEASURE_N}, D = {D} your kernel's score products (tl.dot(q, kT)) did {scores:,} "
            f"multiply-adds, {scores / values:.1f} times those of its products with V ({values:,}): every "
            f"score was computed more than once. A first pass over the K tiles for the row max, then a "
            f"second for the sums, reads K twice and multiplies it twice. The online softmax needs one "
            f"pass: when the max grows, alpha rescales l_i and acc.")


def _single_pass(fn):
    """The forward kernel streams the K tiles once: measured on full attention at N = 512 (_scores_twice)."""
    q, k, v = qkv(1, 1, MEASURE_N, MEASURE_D, KERNEL_DTYPE)
    _, dots, problem = _measured(fn, q, k, v)
    return problem or _scores_twice(fn, dots)


# The extra runs of every kernel exercise: N = 200 cut by each block (two blocks of 128 rows, the second
# of 72; tiles of 16 or 32, the last of 8), in float32 at D = 16 in the interpreter.
BLOCKS_N, BLOCKS_D = 200, 16


def _unequal_blocks(kernel_name, causal):
    """A structure check: one more forward in the interpreter with the autotuner of `kernel_name` given
    BLOCK_M = 128 query rows and key tiles of BLOCK_N = 16 for the call (rerun_with_config), out and
    lse against the reference. On a GPU the first configuration, the one short sequences run with, is
    64 x 64; on the CPU every configuration is 64 x 32, where a causal diagonal that ends two key tiles
    past its start, not where the query block ends, is right, and so is a kernel that writes 64 where
    BLOCK_M belongs. N = 200: two query blocks, the second cut by N (a first row taken as
    program_id(0) * BLOCK_N leaves rows 144 to 199 unwritten), and thirteen key tiles, the last cut
    too."""
    def check(fn):
        import triton

        B, H, N, D = 1, 2, BLOCKS_N, BLOCKS_D
        q, k, v = (torch.randn(B, H, N, D, device=DEVICE) for _ in range(3))
        config = triton.Config({"BLOCK_M": 128, "BLOCK_N": 16}, num_warps=4, num_stages=1)
        why = UNEQUAL_BLOCKS_WHY + ("the query block's rows and the rows of out and lse go with BLOCK_M, "
                                    "the key tiles and the loop's step with BLOCK_N" +
                                    (", the diagonal's keys end where the query block ends" if causal
                                     else "") + ", and no block size is written as a number.")
        want = attention_reference(*(t.double() for t in (q, k, v)), causal=causal)
        where = (f"run with BLOCK_M = 128 query rows and key tiles of BLOCK_N = 16 (the check gave your "
                 f"autotuner this one configuration for one call), at B{B} H{H} N{N} D{D} float32 in the "
                 f"interpreter, your kernel")
        return rerun_with_config(fn, kernel_name, config, (q, k, v), tuple(want), where, why,
                                 names=("out", "lse"))
    return check


def _backward_blocks(kernel_name, block_m, block_n, held):
    """A structure check: the backward kernel `kernel_name` run once more in the interpreter, causal and
    full, its autotuner given BLOCK_M = block_m and BLOCK_N = block_n for the call, the gradients against
    the reference. Every configuration the checks otherwise run has the held block twice the streamed
    one (64 x 32 for dQ, 32 x 64 for dK/dV): a diagonal that ends two streamed blocks past its start, or
    a 64 written where the held block's size belongs, gives the right values there. Here the ratio is 4
    and the held block is 128. The streamed block stays 32: a loop that steps by a number smaller than
    it, dividing it, still visits every row once, masked at n_ctx, and is right."""
    def check(fn):
        import triton

        kernel = getattr(fn, "__globals__", {}).get(kernel_name)
        if not hasattr(kernel, "configs"):
            return None   # a design of the learner's own: nothing to give blocks to
        B, H, N, D = 1, 2, BLOCKS_N, BLOCKS_D
        q, k, v, dout = (torch.randn(B, H, N, D, device=DEVICE) for _ in range(4))
        config = triton.Config({"BLOCK_M": block_m, "BLOCK_N": block_n}, num_warps=4, num_stages=1)
        gradients = ("dk", "dv") if held == "keys" else ("dq",)
        own, streamed = ("BLOCK_N", "BLOCK_M") if held == "keys" else ("BLOCK_M", "BLOCK_N")
        why = (f" Every other case runs with {own} = 2 {streamed} (on a GPU too, below 1024 keys), where a "
               f"diagonal that ends two blocks past its start, or a block size written as a number, still "
               f"gives the right values. Check each use of BLOCK_M and BLOCK_N: the {held} a program holds "
               f"go with {own}, the blocks its loop streams and the loop's step with {streamed}, the masked "
               f"blocks on the diagonal end where the program's own block ends, and no block size is "
               f"written as a number.")
        for causal in (True, False):
            out, lse = _saved(q, k, v, causal, None)
            want = _gradients(*(t.double() for t in (q, k, v)), None, None, dout.double(), causal=causal)
            want = tuple(want[1:]) if held == "keys" else want[0]
            where = (f"run with BLOCK_M = {block_m} and BLOCK_N = {block_n} (the check gave your autotuner "
                     f"this one configuration for one call), at B{B} H{H} N{N} D{D} float32, "
                     f"causal={causal}, in the interpreter, your kernel")
            problem = rerun(tuned_over(kernel, [config]), lambda *a: fn(*a, causal=causal),
                            (q, k, v, out, lse, dout), want, where, why, names=gradients, tol=1e-3)
            if problem:
                return problem
        return None
    return check


def _skips_tiles(fn):
    """The causal kernel loads clearly fewer K/V bytes than query blocks that visit every tile.

    Counted by the interpreter at N = 512: whatever BLOCK_M is, a query block that loads every K/V
    tile reads 2 N D elements, and the launch has one program per query block. Skipping the tiles
    right of the diagonal brings that to about (blocks + 1) / (2 blocks) of it. The matrix products
    are counted too: a loop that visits every tile with its loads masked off loads as little, but
    still multiplies every query by every key. Both rules leave room for any block sizes; program by
    program, the products are then held to the exact count for the kernel's own blocks, which catches
    a loop one tile past the diagonal (at blocks of 64 x 32 it does 62% of every tile, not 56%). First,
    though, the score products are held to those with V (_scores_twice): a second pass over the keys
    would otherwise be taken for tiles right of the diagonal.
    """
    q, k, v = qkv(1, 1, MEASURE_N, MEASURE_D, KERNEL_DTYPE)
    traffic, dots, problem = _measured(fn, q, k, v)
    if problem:
        return problem
    twice = _scores_twice(fn, dots)
    if twice:
        return twice
    multiply_adds = sum(dot.multiply_adds for dot in dots)
    if not traffic.launches:
        return "the traffic meter saw no Triton launch."
    blocks = max(math.prod(launch.grid) for launch in traffic.launches)
    item = q.element_size()
    kv_loaded = traffic.bytes_loaded - MEASURE_N * MEASURE_D * item  # all but the one read of Q
    every_tile = blocks * 2 * MEASURE_N * MEASURE_D * item
    if kv_loaded > 0.8 * every_tile:
        return (f"at N = {MEASURE_N} your causal kernel loaded {kv_loaded:,} bytes of K and V, "
                f"{kv_loaded / every_tile:.0%} of what its {blocks} query blocks load when each visits "
                f"every key tile ({every_tile:,}). A tile right of the diagonal holds only future keys: "
                f"masking it gives the right answer, but it should not be loaded at all.")
    every_dot = 2 * MEASURE_N * MEASURE_N * MEASURE_D   # QK^T and PV, every query against every key
    if multiply_adds > 0.8 * every_dot:
        return (f"at N = {MEASURE_N} your causal kernel loaded few K/V bytes, yet its tl.dot calls did "
                f"{multiply_adds:,} multiply-adds, {multiply_adds / every_dot:.0%} of what visiting every "
                f"key tile takes ({every_dot:,}): the loop still visits the tiles right of the diagonal, "
                f"with their loads masked off. Skipping a tile means the loop's bounds stop at the "
                f"diagonal, so neither its loads nor its matrix products run.")
    too_many = _one_tile_too_many(dots, every_dot)
    if too_many:
        return (f"at N = {MEASURE_N} your causal kernel still visits a few tiles right of the diagonal: "
                f"{too_many}")
    return None


def _backward_skips_tiles(fn, held, streamed):
    """A backward kernel, causal, does clearly fewer multiply-adds (tl.dot, counted by the interpreter)
    than the same kernel on full attention: the blocks that see none of each other are skipped.

    At N = 512 either kernel visits about (blocks + 1) / (2 blocks) of the tiles when it skips (0.56 to
    0.63 at blocks of 32 to 128); one that visits every tile and masks the future does them all. The
    ratio to its own full run holds whatever the kernel computes per tile. Then, as in the forward,
    program by program against the exact count for the kernel's own blocks (`_one_tile_too_many`)."""
    case = _backward_case(1, 1, MEASURE_N, MEASURE_D, KERNEL_DTYPE, 1.0, False, "", False, False,
                          saved=True)
    dots = {}
    for causal in (False, True):
        out, lse = _saved(*case.args[:3], causal, None)
        _, dots[causal], problem = _measured(fn, *case.args[:3], out, lse, case.args[5], causal=causal)
        if problem:
            return problem
    full, causal = (sum(dot.multiply_adds for dot in dots[c]) for c in (False, True))
    if full and causal > 0.8 * full:
        return (f"at N = {MEASURE_N} your kernel's tl.dot calls did {causal:,} multiply-adds with "
                f"causal=True and {full:,} with causal=False ({causal / full:.0%}): the causal run still "
                f"visits the blocks that see none of each other, masked. Start the loop where the "
                f"diagonal begins (the lesson's bullet on causal): those blocks are then never loaded or "
                f"multiplied.")
    too_many = full and _one_tile_too_many(dots[True], full, held, streamed)
    if too_many:
        return (f"at N = {MEASURE_N} with causal=True your kernel still visits a few blocks that see none of "
                f"each other: {too_many}")
    return None


def _by_hand(fn):
    """attention_backward_torch computes the gradients itself: autograd records no graph while it runs.

    Autograd saves tensors for a backward pass whenever it records an operation; a hook counts them.
    """
    case = _backward_case(1, 1, 33, 16, torch.float32, 1.0, False, "", True, False, saved=True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.shape) or t, lambda t: t):
        _, problem = _calling(fn, *case.args, **case.kwargs)
    if problem and "saved tensor hooks" in problem:   # torch.func refuses to run under the meter
        return ("your function differentiates through torch.func (vjp, grad, ...): the gradients come from "
                "autograd, not from the formulas. Write dV, dP, dS, dQ and dK yourself, with P recomputed "
                "from the lse, as the kernels will.")
    if problem:
        return problem
    if saved:
        return (f"autograd recorded a graph while your function ran (it saved {len(saved)} tensors for a "
                f"backward pass): the gradients came from autograd, not from the formulas. Write dV, dP, "
                f"dS, dQ and dK yourself, with P recomputed from the lse, as the kernels will.")
    return None


def _recomputes(fn):
    """The backward runs Triton kernels, and nothing forward or backward grows as N x N."""
    *inputs, dout = qkv(1, 1, MEASURE_N // 2, MEASURE_D, KERNEL_DTYPE, count=4)
    n = dout.shape[2]
    leaves = lambda: [t.detach().clone().requires_grad_() for t in inputs]  # noqa: E731
    for causal in (False, True):
        problem = _once_unmeasured(lambda: fn(*leaves(), causal=causal).backward(dout))
        if problem:
            return problem
        with largest_tensor() as forward:
            out, problem = _calling(fn, *leaves(), causal=causal)
        if problem:
            return problem
        before = interpreter.launch_count()
        with largest_tensor() as backward:
            _, problem = _calling(out.backward, dout)
        if problem:
            return problem
        if interpreter.launch_count() == before:
            return (f"the backward pass (causal={causal}) ran no Triton kernel: autograd went through "
                    f"PyTorch operations. FlashAttention.backward should launch your dK/dV and dQ kernels.")
        for where, largest in (("forward", forward), ("backward", backward)):
            if largest.numel >= n * n // 2:
                return (f"at N = {n} (causal={causal}) the {where} pass made a tensor that grows as "
                        f"N x N: {largest}. The backward recomputes P one tile at a time from the saved "
                        f"lse; nothing of size N x N is ever stored.")
    return None


def _each_call_its_own(fn):
    """Two calls of the autograd.Function, causal then full, each with its own sm_scale, and one backward
    through both, as a model with two attention layers runs them: each call's gradients must come from
    what that call saved. Both forwards run before either backward, so state kept between calls (a
    global, a class attribute) holds the second call's tensors or flags when the first call's runs."""
    calls = [({"causal": causal, "sm_scale": random_sm_scale(MEASURE_D)},
              qkv(1, 2, 48, MEASURE_D, KERNEL_DTYPE, count=4)) for causal in (True, False)]
    leaves = [[t.detach().clone().requires_grad_() for t in inputs[:3]] for _, inputs in calls]
    outs = []
    for (kwargs, _), mine in zip(calls, leaves):
        out, problem = _calling(fn, *mine, **kwargs)
        if problem:
            return problem
        outs.append(out)
    _, problem = _calling(torch.autograd.backward, outs, [inputs[3] for _, inputs in calls])
    if problem:
        return problem
    atol, rtol = GRADS[KERNEL_DTYPE]
    for which, ((kwargs, inputs), mine) in enumerate(zip(calls, leaves)):
        want = _gradients(*(t.double() for t in inputs[:3]), None, None, inputs[3].double(), **kwargs)
        for name, got, ref in zip(("dq", "dk", "dv"), (t.grad for t in mine), want):
            if got is None or not torch.allclose(got.double(), ref, atol=atol, rtol=rtol):
                return (f"two calls of your function at B1 H2 N48 D{MEASURE_D}, the first with "
                        f"causal=True and the second with causal=False (each with its own sm_scale), "
                        f"then one backward through both, as two attention layers of a model run: the "
                        f"{('first', 'second')[which]} call's {name} came out wrong, though each call "
                        f"alone is right. Both forwards ran before either backward: a backward "
                        f"must read what its own forward kept on ctx (ctx.save_for_backward, ctx.causal, "
                        f"ctx.sm_scale), not a global or a class attribute that the next call "
                        f"overwrites.")
    return None


# float32 on the CPU: a score of size ~100 carries a rounding error of ~100 * 2**-24 * sqrt(D), and exp()
# hands it on as a relative error of the weights; with BIG_SCALE that reaches ~3e-5, over the default 1e-5.
FP32 = {torch.float32: (1e-4, 1e-4)}
# float16 gradients: P and dS are rounded to float16 (a unit of 2**-11) before the matrix products, as
# in FlashAttention-2, and dQ, dK sum N such products whose size grows with the scores. Measured on an
# H200: on the large-score case PyTorch's flash backend is off by up to 1.4e-2 (on elements near 0.04),
# exactly as much as the course's kernels; elsewhere both stay under 1e-3. 3e-2 leaves room for other
# random draws; a wrong formula is off by the size of the gradient itself.
# float32 gradients: on the large-score case softmax is nearly one-hot, and dS = P * (dP - delta)
# subtracts two nearly equal numbers for the dominant key; an exact float32 computation is then off by
# up to 3e-4 on gradients of size ~20 (seen on the CPU). 1e-3 covers that; a wrong formula is off by
# the size of the gradient itself.
GRADS = {torch.float32: (1e-3, 1e-4), torch.float16: (3e-2, 1e-2)}
CAUSAL_NAN = "Causal: query i sees keys 0..i, itself included, so no row of scores is ever all -inf."

# The launchers the lesson gives make q, k, v (and dO, the saved out and lse) contiguous:
# copies_inputs=True in its kernel exercises.
EXERCISES = [
    Exercise("06", "attention_tiled", "tiled attention, online softmax (PyTorch)", _tiled_reference,
             _tiled_cases, tol=FP32, structure=_tiles_only, nan_hint=CAUSAL_NAN, outputs=("out", "lse")),
    Exercise("06", "flash_forward", "FlashAttention forward (Triton)", _full, _kernel_cases, tol=FP32,
             kernel=True, copies_inputs=True, outputs=("out", "lse"),
             structure=lambda fn: _single_pass(fn) or _unequal_blocks("flash_fwd_kernel", causal=False)(fn)),
    Exercise("06", "flash_forward_causal", "causal forward, tiles skipped", _causal, _kernel_cases,
             tol=FP32, kernel=True, copies_inputs=True, nan_hint=CAUSAL_NAN, outputs=("out", "lse"),
             structure=lambda fn: (_skips_tiles(fn)
                                   or _unequal_blocks("flash_fwd_causal_kernel", causal=True)(fn))),
    Exercise("06", "attention_backward_torch", "attention gradients by hand (PyTorch)", _gradients,
             _torch_backward_cases, tol=GRADS, structure=_by_hand, nan_hint=CAUSAL_NAN,
             outputs=("dq", "dk", "dv")),
    Exercise("06", "flash_backward_dkdv", "dK/dV kernel (Triton)", _dkdv, _backward_cases, tol=GRADS,
             kernel=True, copies_inputs=True, nan_hint=CAUSAL_NAN, outputs=("dk", "dv"),
             structure=lambda fn: (_backward_skips_tiles(fn, held="keys", streamed="queries")
                                   or _backward_blocks("bwd_dkdv_kernel", 32, 128, held="keys")(fn)),
             timeout_s=300.0 if ON_GPU else 120.0),
    Exercise("06", "flash_backward_dq", "dQ kernel (Triton)", _dq, lambda: _backward_cases(gradients=1),
             tol=GRADS, kernel=True, copies_inputs=True, nan_hint=CAUSAL_NAN,
             structure=lambda fn: (_backward_skips_tiles(fn, held="queries", streamed="keys")
                                   or _backward_blocks("bwd_dq_kernel", 128, 32, held="queries")(fn)),
             timeout_s=300.0 if ON_GPU else 120.0),
    Exercise("06", "attention_backward", "autograd.Function over the kernels", _attention_out,
             lambda: _backward_cases(saved=False), run=_forward_backward, tol=GRADS, kernel=True,
             copies_inputs=True, structure=lambda fn: _recomputes(fn) or _each_call_its_own(fn),
             nan_hint=CAUSAL_NAN,
             timeout_s=300.0 if ON_GPU else 120.0,
             # delta = rowsum(dO * O) may be PyTorch's (O(N D), no P: the lesson's step 6); what is graded
             # here is the wiring of the kernels through autograd
             torch_ops=frozenset({"mul", "sum", "_to_copy"})),
]
