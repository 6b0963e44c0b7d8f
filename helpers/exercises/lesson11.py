"""Lesson 11 exercises: the capstone's kernels and the decoder block assembled from them.

1. `rope_qk`: rotary embeddings on Q and K in one launch, read through any strides (the views
   the Q|K|V projection makes), written contiguous, arithmetic in float32.
2. `swiglu_linear`: SiLU(h @ w_gate.T) * (h @ w_up.T) as one persistent matmul over the
   interleaved weights, the product in the epilogue; every tile of every program, h of any
   (aligned) row stride, SiLU's tails.
3. `decoder_block_fused`: the forward of helpers/block.py's decoder block from the course's
   kernels. Checked against the eager block with PyTorch's SDPA, then for its structure: it
   launches Triton kernels, and PyTorch runs no matrix multiply, attention or activation for it.

Sizes are odd on purpose; on the CPU everything runs through Triton's interpreter at small sizes.
"""

import torch
import torch.nn.functional as F

from helpers.block import SMALL, block_input, block_weights, decoder_block
from helpers.device import DEVICE, ON_GPU, pick
from helpers.exercises import Case, Exercise
from helpers.traffic import eager_traffic

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


def _angles(N, half):
    """cos and sin of random angles (float32): every rotation, not only a model's small ones."""
    angles = torch.rand(N, half, device=DEVICE) * 6.3
    return angles.cos(), angles.sin()


def _rope_cases():
    long_n = _odd(*pick((65, 99), (1001, 2047)))
    specs = [(1, 1, 1, 8, F32, "views", "one position: T = 1"),
             (2, 3, _odd(17, 31), 12, F32, "views", "D / 2 = 6, not a power of two; strided views"),
             (2, 2, _odd(33, 63), 64, F16, "views", "float16 inputs, float32 arithmetic"),
             (1, 4, _odd(21, 41), 32, F32, "k contiguous", "q a view, k contiguous: different strides"),
             (2, 2, long_n, pick(16, 128), F32, "contiguous", "many positions, contiguous inputs"),
             (1, 2, _odd(9, 15), 20, F16, "views", "float16, D / 2 = 10")]
    cases = []
    for B, H, N, D, dtype, layout, why in specs:
        q, k = _projection_views(B, H, N, D, dtype)
        if layout == "k contiguous":
            k = k.contiguous()
        elif layout == "contiguous":
            q, k = q.contiguous(), k.contiguous()
        cases.append(Case(f"B{B} H{H} N{N} D{D} {_name(dtype)} ({why})", (q, k, *_angles(N, D // 2))))
    return cases


# ---------------------------------------------------------------- 2. swiglu_linear


def swiglu_linear_reference(h, w_gate_up):
    """SiLU(h @ w_gate.T) * (h @ w_up.T); w_gate_up's even rows are w_gate's, its odd rows w_up's."""
    return F.silu(h @ w_gate_up[0::2].T) * (h @ w_gate_up[1::2].T)


def _swiglu_cases():
    """Shapes whose rows are 16-byte aligned, as tensor descriptors need: K and f multiples of 8."""
    # On a GPU the larger case has more tiles than the GPU has SMs (over 132 at every tile size the
    # autotuner may pick), so each program must walk several: one tile per program is not enough.
    M_big, K_big, f_big = pick((_odd(121, 191), 192, 72), (_odd(2049, 3071), 512, 1032))
    specs = [(1, 64, 32, F32, 1.0, False, "one token"),
             (_odd(67, 127), 136, 40, F16, 1.0, False, "several tiles per program, odd M"),
             (_odd(21, 63), 72, 24, F16, 1.0, True, "h a column slice of a wider matrix: its own row stride"),
             (_odd(9, 31), 64, 48, pick(F32, F16), 30.0, False, "gate values of +-60: both of SiLU's tails"),
             (M_big, K_big, f_big, F16, 1.0, False, "larger")]
    cases = []
    for M, K, f, dtype, gate_scale, view, why in specs:
        h = torch.randn(M, K + 24, device=DEVICE).to(dtype)[:, 8:8 + K] if view else \
            torch.randn(M, K, device=DEVICE).to(dtype)
        w = torch.randn(2 * f, K, device=DEVICE) / K**0.5
        w[0::2] *= gate_scale                    # the gate rows: gate values of about +-2 gate_scale
        w = w.to(dtype)
        cases.append(Case(f"M={M} K={K} f={f} {_name(dtype)} ({why})", (h, w)))
    return cases


# float32 on the CPU: y = SiLU(gate) * up, and with gate values of +-60 an error of one unit of
# 2**-24 in `up` (of order one) becomes ~4e-6 in y even where y is near 0, and in one run of
# twenty-five the solution had an element past the default 1e-5. So atol 1e-4 (a wrong pairing or
# a missing SiLU is off by O(1)).
# On a GPU tl.dot takes float32 operands as TF32 (2**-11 relative each): 1e-2 for outputs of order
# one. With gate values of +-60 TF32 errs by a few 1e-2 absolute, so on a GPU the tails case is
# float16 (exact products, float32 sums).
SWIGLU_TOL = {F32: pick(cpu=(1e-4, 1e-5), gpu=(1e-2, 1e-2))}


# ---------------------------------------------------------------- 3. decoder_block_fused

WEIGHT_NAMES = ("attn_norm", "wq", "wk", "wv", "wo", "mlp_norm", "w_gate", "w_up", "w_down")


def _run_block(fn, x, *weights, cfg):
    """Call fn(x, w, cfg) with the weights as a dict: the check sees (and guards) each tensor."""
    return fn(x, dict(zip(WEIGHT_NAMES, weights)), cfg)


def decoder_block_reference(x, w, cfg):
    return decoder_block(x, w, cfg, attention="sdpa")


def _block_case(B, N, why):
    seed = int(torch.randint(0, 2**31 - 1, ()))
    w = block_weights(SMALL, DEVICE, seed=seed)
    for norm in ("attn_norm", "mlp_norm"):   # norms of random scale: swapping them shows
        w[norm] = 1.0 + 0.5 * torch.randn(SMALL.dim, device=DEVICE)
    x = block_input(SMALL, B, N, DEVICE, seed=seed + 1)
    return Case(f"B{B} N{N}, d={SMALL.dim}, {SMALL.n_heads} heads, f={SMALL.hidden} ({why})",
                (x, *(w[n] for n in WEIGHT_NAMES)), {"cfg": SMALL})


def _block_cases():
    return [_block_case(1, 1, "one token"),
            _block_case(2, _odd(21, 41), "two sequences, odd length"),
            _block_case(1, _odd(*pick((51, 71), (301, 501))), "longer than an attention block")]


# float32: the fused block rounds differently from the eager one at every step (RMSNorm folded
# into the matmul, the SiLU product and the residual adds in float32 before one rounding, the
# online softmax): a few units of 2**-24 per step on outputs of order one, summed over K = 688,
# about 1e-6 on the CPU. On a GPU tl.dot rounds float32 operands to TF32 (2**-11) in five
# matmuls, one after the other: a few 1e-3, so 3e-2 (as tests/test_lesson09.py).
BLOCK_TOL = {F32: pick(cpu=(1e-5, 1e-5), gpu=(3e-2, 3e-2))}

# ATen ops that would mean PyTorch did the block's work instead of a Triton kernel.
_NOT_IN_TRITON = {"mm": "a matrix multiply", "addmm": "a matrix multiply", "bmm": "a batched matrix multiply",
                  "baddbmm": "a batched matrix multiply", "matmul": "a matrix multiply",
                  "linear": "a linear layer",
                  "_softmax": "a softmax", "softmax": "a softmax", "silu": "SiLU", "rms_norm": "RMSNorm"}


def _torch_work(ops):
    """{op: what it is} for the ops of `ops` that do the block's arithmetic in PyTorch."""
    found = {}
    for op in ops:
        if "scaled_dot_product" in op or "attention" in op:
            found[op] = "attention"
        elif op in _NOT_IN_TRITON:
            found[op] = _NOT_IN_TRITON[op]
    return found


def _all_in_triton(fn):
    """The forward launches Triton kernels, and PyTorch runs none of the block's arithmetic."""
    from helpers import interpreter

    case = _block_case(1, 19, "")
    call = lambda: _run_block(fn, *case.args, **case.kwargs)  # noqa: E731
    if ON_GPU:   # the autotuners time their configs on the first call: not part of the forward
        call()
    before = interpreter.launch_count()
    try:
        traffic = eager_traffic(call)
    except Exception as e:  # noqa: BLE001  (the learner's code, measured: say what it raised)
        return f"measuring it, your function raised {type(e).__name__}: {e}"
    launched = interpreter.launch_count() - before
    work = _torch_work(op for op, _ in traffic.ops)
    if work:
        listed = ", ".join(f"{op} ({what})" for op, what in sorted(work.items()))
        return (f"PyTorch did part of the block's work: {listed}. Each of those "
                f"is an eager kernel with its own round trip through memory. Every step of the forward "
                f"should be one of the course's kernels: inv_rms, linear, rope_qk, causal_attention (or "
                f"lesson 06's flash_forward_causal), rms_norm_rows, swiglu_linear.")
    if launched < 5:
        return (f"your forward launched {launched} Triton kernel(s); the block's steps (the Q|K|V "
                f"projection, RoPE, attention, two projections with their residuals, the MLP) need more.")
    return None



EXERCISES = [
    Exercise("11", "rope_qk", "RoPE on Q and K, one launch", rope_qk_reference, _rope_cases, kernel=True),
    Exercise("11", "swiglu_linear", "SwiGLU as one persistent matmul, the product in its epilogue",
             swiglu_linear_reference, _swiglu_cases, tol=SWIGLU_TOL, kernel=True),
    Exercise("11", "decoder_block_fused", "the decoder block from the course's kernels",
             decoder_block_reference, _block_cases, run=_run_block, tol=BLOCK_TOL, kernel=True,
             structure=_all_in_triton, timeout_s=300.0),
]
