"""Lesson 06 exercises: FlashAttention, tiled in PyTorch, then forward, causal and backward in Triton.

Inputs are (B, H, N, D). On the CPU the kernels run in float32 through the
interpreter on tiny sizes; on a GPU in float16 at sizes that span several
blocks. Every set of cases has a sequence length that is not a multiple of any
block, a strided (B, N, H, D) layout seen through a transpose, and scores large
enough that exp() overflows unless the running maximum is subtracted.
"""

import torch

from helpers.device import DEVICE, ON_GPU, pick
from helpers.exercises import Case, Exercise


def attention_reference(q, k, v, causal=False, sm_scale=None):
    """softmax(q k^T * sm_scale) v with the N x N scores materialized; returns (out, lse)."""
    sm_scale = q.shape[-1] ** -0.5 if sm_scale is None else sm_scale
    s = (q @ k.transpose(-2, -1)) * sm_scale
    if causal:
        n = q.shape[-2]
        future = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
        s = s.masked_fill(future, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    return torch.exp(s - lse[..., None]) @ v, lse


def qkv(B, H, N, D, dtype, scale=1.0, strided=False, count=3):
    """`count` fresh (B, H, N, D) tensors; q and k multiplied by `scale` (scores grow as scale**2)."""
    def one(i):
        if strided:  # stored (B, N, H, D), as a projection produces it, seen as (B, H, N, D)
            t = torch.randn(B, N, H, D, device=DEVICE, dtype=dtype).transpose(1, 2)
        else:
            t = torch.randn(B, H, N, D, device=DEVICE, dtype=dtype)
        return t * scale if i < 2 else t
    return tuple(one(i) for i in range(count))


# (B, H, N, D, why): N is never a multiple of the kernels' blocks except where the label says so.
KERNEL_SHAPES = pick(
    cpu=[(1, 1, 64, 16, "whole blocks only"),
         (2, 2, 100, 64, "N not a multiple of the blocks"),
         (1, 2, 17, 32, "fewer keys than one block"),
         (1, 1, 40, 128, "head dimension 128")],
    gpu=[(1, 1, 1, 64, "a single query and key"),
         (2, 3, 1000, 64, "N not a multiple of the blocks"),
         (4, 2, 129, 16, "head dimension 16, one key past a block"),
         (1, 4, 257, 128, "head dimension 128"),
         (2, 8, 1024, 128, "whole blocks only")])
BIG = pick(cpu=(1, 2, 90, 64), gpu=(1, 4, 700, 128))
STRIDED = pick(cpu=(2, 2, 50, 32), gpu=(2, 2, 333, 64))
KERNEL_DTYPE = pick(cpu=torch.float32, gpu=torch.float16)
BIG_SCALE = 5.0  # scores = 25 * N(0, 1): the largest pass 88, where exp() overflows float32


def _kernel_cases(causal_kwarg=None):
    """Cases for the Triton exercises; `causal_kwarg` adds causal=... alternately when given."""
    specs = [(B, H, N, D, 1.0, False, why) for B, H, N, D, why in KERNEL_SHAPES]
    specs.append((*BIG, BIG_SCALE, False, "scores up to ~100: exp overflows without the running max"))
    specs.append((*STRIDED, 1.0, True, "strided views of a (B, N, H, D) tensor"))
    cases = []
    for i, (B, H, N, D, scale, strided, why) in enumerate(specs):
        args = qkv(B, H, N, D, KERNEL_DTYPE, scale, strided, count=3 if causal_kwarg is None else 4)
        label = f"B{B} H{H} N{N} D{D} {str(KERNEL_DTYPE)[6:]} ({why})"
        if causal_kwarg is None:
            cases.append(Case(label, args))
        else:
            causal = i % 2 == 1
            cases.append(Case(f"{label}, {'causal' if causal else 'full'}", args, {"causal": causal}))
    return cases


def _tiled_cases():
    """The plain-PyTorch exercise: float32 and float64, both masks, on either device (it is small)."""
    specs = [(1, 1, 64, 32, torch.float32, False, 1.0, False, "whole tiles"),
             (2, 3, 100, 64, torch.float32, False, 1.0, False, "N not a multiple of the tiles"),
             (1, 2, 77, 16, torch.float32, True, 1.0, False, "causal"),
             (2, 1, 130, 32, torch.float64, True, 1.0, False, "causal, float64"),
             (1, 2, 90, 64, torch.float32, False, BIG_SCALE, False, "scores up to ~100"),
             (1, 2, 90, 64, torch.float64, True, BIG_SCALE, False, "scores up to ~100, causal"),
             (2, 2, 50, 32, torch.float32, True, 1.0, True, "strided views, causal")]
    return [Case(f"B{B} H{H} N{N} D{D} {str(dt)[6:]} ({why})", qkv(B, H, N, D, dt, scale, strided),
                 {"causal": causal})
            for B, H, N, D, dt, causal, scale, strided, why in specs]


def _forward_backward(fn, q, k, v, dout, causal=False):
    """Run fn(q, k, v, causal=...) forward, then backward with the fixed dout: (out, dq, dk, dv)."""
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    out = fn(q, k, v, causal=causal)
    if out is None:
        return None
    out.backward(dout)
    from helpers.check import CheckFailed  # here, not at the top: helpers.check imports this module

    for name, t in zip("qkv", (q, k, v)):
        if t.grad is None:
            raise CheckFailed(f"no gradient reached {name}: does backward return (dq, dk, dv, None, None)?")
    return out.detach(), q.grad, k.grad, v.grad


def _attention_out(q, k, v, causal=False):
    return attention_reference(q, k, v, causal)[0]


# float32 on the CPU: a score of size ~100 carries a rounding error of ~100 * 2**-24 * sqrt(D), and exp()
# hands it on as a relative error of the weights; with BIG_SCALE that reaches ~3e-5, over the default 1e-5.
FP32 = {torch.float32: (1e-4, 1e-4)}
# float16 gradients on a GPU: P and dS are rounded to float16 (a unit of 2**-11) before the matrix
# products, as in FlashAttention-2, and dQ, dK sum N such products whose size grows with the scores.
# Measured on an H200: on the large-score case PyTorch's flash backend is off by up to 1.4e-2 (on
# elements near 0.04), exactly as much as the course's kernels; elsewhere both stay under 1e-3.
# 3e-2 leaves room for other random draws; a wrong formula is off by the size of the gradient itself.
GRADS = {torch.float32: (1e-4, 1e-4), torch.float16: (3e-2, 1e-2)}

EXERCISES = [
    Exercise("06", "attention_tiled", "tiled attention, online softmax (PyTorch)", attention_reference,
             _tiled_cases, tol=FP32),
    Exercise("06", "flash_forward", "FlashAttention forward (Triton)",
             lambda q, k, v: attention_reference(q, k, v, causal=False), _kernel_cases, tol=FP32),
    Exercise("06", "flash_forward_causal", "causal forward, tiles skipped",
             lambda q, k, v: attention_reference(q, k, v, causal=True), _kernel_cases, tol=FP32),
    Exercise("06", "attention_backward", "backward kernels + autograd", _attention_out,
             lambda: _kernel_cases(causal_kwarg=True), run=_forward_backward, tol=GRADS,
             timeout_s=300.0 if ON_GPU else 120.0),
]
