"""Lesson 06: the FlashAttention solutions pass their checks, and typical mistakes fail them."""

import math

import pytest
import torch
import triton
import triton.language as tl

from helpers import DEVICE, INTERPRET, check, exercises, pick
from helpers.check import CheckFailed, NotDone
from helpers.exercises.lesson06 import attention_reference
from helpers.solutions import load_solution

lesson06 = load_solution("06")


def test_solutions_pass():
    check("attention_tiled", lesson06.attention_tiled)
    check("flash_forward", lesson06.flash_forward)
    check("flash_forward_causal", lesson06.flash_forward_causal)
    check("attention_backward_torch", lesson06.attention_backward_torch)
    check("flash_backward_dkdv", lesson06.flash_backward_dkdv)
    check("flash_backward_dq", lesson06.flash_backward_dq)
    check("attention_backward", lesson06.attention)


BACKWARD_STEPS = ("attention_backward_torch", "flash_backward_dkdv", "flash_backward_dq",
                  "attention_backward")


def test_stubs_are_not_done():
    def stub(*args, **kwargs):
        raise NotImplementedError("write it")
    for name in ("attention_tiled", "flash_forward", "flash_forward_causal", *BACKWARD_STEPS):
        with pytest.raises(NotDone):
            check(name, stub)


@triton.jit
def _untouched_kernel(x_ptr):
    pass


def test_untouched_backward_kernels_are_not_done():
    """The kernel stubs launch and write nothing: 'not done yet', not a failure on the values."""
    def untouched(q, k, v, out, lse, dout, causal=False, sm_scale=None):
        dk, dv = torch.empty_like(k), torch.empty_like(v)
        _untouched_kernel[(1,)](dk)
        return dk, dv
    with pytest.raises(NotDone):
        check("flash_backward_dkdv", untouched)
    with pytest.raises(NotDone):
        check("flash_backward_dq", lambda *args, **kwargs: untouched(*args, **kwargs)[0])


def test_backward_cases_cover_both_masks_and_scales():
    """Each backward step meets causal and full cases, each with and without a random sm_scale."""
    for name in BACKWARD_STEPS:
        seen = {(c.kwargs["causal"], "sm_scale" in c.kwargs) for c in exercises.get(name).cases()
                if c.build is None}   # a GPU's case past 2**31 is built when its turn comes
        assert {(True, False), (True, True), (False, True)} <= seen, (name, seen)


def test_saved_inputs_are_what_the_forward_saves():
    """The backward steps get out in the inputs' dtype and lse in float32 at least, as the forward returns."""
    for name in BACKWARD_STEPS[:3]:
        for case in exercises.get(name).cases():
            if case.build is not None:   # a GPU's case past 2**31: test_the_backward_case_past_int32_...
                continue
            q, k, v, out, lse, dout = case.args
            want_out, want_lse = attention_reference(q.double(), k.double(), v.double(), **case.kwargs)
            assert out.dtype == q.dtype and lse.dtype == torch.promote_types(q.dtype, torch.float32)
            assert torch.allclose(lse.double(), want_lse, atol=1e-5, rtol=1e-5), case.label


def test_backward_delta_is_the_row_dot_product():
    out = torch.randn(2, 3, 37, 32, device=DEVICE)
    dout = torch.randn(2, 37, 3, 32, device=DEVICE).transpose(1, 2)  # strided, as a gradient may come
    assert torch.allclose(lesson06.backward_delta(out, dout), (out * dout).sum(-1), atol=1e-5)


def test_tiled_without_rescaling_fails():
    def no_rescale(q, k, v, causal=False, sm_scale=None, block_n=16):
        """Running max, but the old sum and output are never rescaled when it grows."""
        sm_scale = q.shape[-1] ** -0.5 if sm_scale is None else sm_scale
        n = q.shape[2]
        m = torch.full(q.shape[:3], -math.inf, dtype=q.dtype, device=q.device)
        l = torch.zeros(q.shape[:3], dtype=q.dtype, device=q.device)
        acc = torch.zeros_like(q)
        rows = torch.arange(n, device=q.device)
        for j in range(0, n, block_n):
            s = q @ k[:, :, j:j + block_n].transpose(-2, -1) * sm_scale
            if causal:
                cols = torch.arange(j, min(n, j + block_n), device=q.device)
                s = s.masked_fill(cols[None, :] > rows[:, None], -math.inf)
            m = torch.maximum(m, s.amax(-1))
            p = torch.exp(s - m[..., None])
            l = l + p.sum(-1)
            acc = acc + p @ v[:, :, j:j + block_n]
        return acc / l[..., None], m + torch.log(l)
    with pytest.raises(CheckFailed, match="off by more than"):
        check("attention_tiled", no_rescale)


def test_lse_in_base_two_fails():
    def log2_lse(q, k, v, causal=False, **kwargs):
        out, lse = lesson06.attention_tiled(q, k, v, causal, **kwargs)
        return out, lse * 1.4426950408889634
    with pytest.raises(CheckFailed, match=r"output\[1\]"):
        check("attention_tiled", log2_lse)


@pytest.mark.parametrize("dtype, lse_dtype", [(torch.float16, torch.float32), (torch.bfloat16, torch.float32),
                                              (torch.float32, torch.float32), (torch.float64, torch.float64)])
def test_reference_keeps_lse_in_float32_at_least(dtype, lse_dtype):
    q = torch.empty(2, 3, 5, 16, dtype=dtype, device="meta")
    out, lse = attention_reference(q, q, q, causal=True)
    assert (out.dtype, lse.dtype) == (dtype, lse_dtype)


# A mutant of tests/mutants/lesson06.py, and what its message must name (with the counts before it).
ONE_TILE_PAST = "a loop one tile past the diagonal (that tile all masked)"
ONE_BLOCK_PAST = r"did [\d,]+ multiply-adds where its own blocks need exactly [\d,]+.*one block past the"


@pytest.mark.parametrize("exercise, why, message", [
    ("attention_tiled", "a whole row of scores per query block (no key tiles)", "larger than q"),
    ("flash_forward", "lse stored in the inputs' dtype", "dtype torch.float16, expected torch.float32"),
    ("flash_forward_causal", "no tile skipping: every tile loaded, then masked", "should not be loaded"),
    ("attention_backward_torch", "autograd through the naive reference", "autograd recorded a graph"),
    ("attention_backward", "Triton forward, autograd over the naive graph backward",
     r"PyTorch computed beside your kernel(.|\n)*\(in backward\)"),
    ("attention_tiled", "an exact softmax one query at a time (a whole row of scores each)", "one tile"),
    ("attention_backward_torch", "torch.func.vjp through the naive reference", "through torch.func"),
    ("flash_backward_dkdv", "dout passed to the kernel without .contiguous()", "strided views"),
    ("flash_backward_dq", "lse passed to the kernel without .contiguous()", "strided views"),
    ("flash_forward_causal", ONE_TILE_PAST, ONE_BLOCK_PAST),
    ("flash_backward_dkdv", ONE_TILE_PAST, ONE_BLOCK_PAST),
    ("flash_backward_dq", ONE_TILE_PAST, ONE_BLOCK_PAST),
    ("attention_tiled", "two passes over the key tiles: the lse first, then P V (K read twice)",
     "read K twice"),
    ("flash_forward", "a first pass over the K tiles for the row max (every score computed twice)",
     "computed more than once"),
    ("flash_forward_causal", "a first pass over the K tiles for the row max (each score computed twice)",
     "computed more than once"),
])
def test_mistake_is_named(exercise, why, message, monkeypatch):
    """What the lesson teaches beyond the values (tiles, lse dtype, skipping, own backward) is checked."""
    from mutants import lesson06 as mutants06

    (wrong,) = [w for w in mutants06.WRONG if (w.exercise, w.why) == (exercise, why)]
    # Autograd through the naive graph rounds differently from the reference: on the large-score case
    # its gradients can miss the float32 tolerance by a hair, a rejection for the wrong reason here.
    ex = exercises.get(exercise)
    cases = ex.cases
    monkeypatch.setattr(ex, "cases", lambda: [c for c in cases() if "scores up to" not in c.label])
    with pytest.raises(CheckFailed, match=message):
        check(exercise, wrong.fn)


def _forward_with(kernel_body):
    """A forward launcher around a kernel that calls the solution's tile loop as `kernel_body` says."""
    def forward(q, k, v, sm_scale=None):
        q, k, v, sm_scale = lesson06._prepare(q, k, v, sm_scale)
        B, H, N, D = q.shape
        out = torch.empty_like(q)
        lse = torch.empty(B, H, N, dtype=torch.float32)
        kernel_body[(triton.cdiv(N, 64), B * H)](q, k, v, out, lse, N, sm_scale * lesson06.LOG2E.value,
                                                 HEAD_DIM=D, BLOCK_M=64, BLOCK_N=32)
        return out, lse
    return forward


@triton.jit
def _all_tiles_unmasked(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, n_ctx, qk_scale,
                        HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1).to(tl.int64)
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + bh * n_ctx * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :],
                mask=offs_m[:, None] < n_ctx, other=0.0)
    acc, l_i, m_i = lesson06.fwd_tile_loop(
        tl.zeros([BLOCK_M, HEAD_DIM], tl.float32), tl.zeros([BLOCK_M], tl.float32),
        tl.full([BLOCK_M], float("-inf"), tl.float32), q, k_ptr + bh * n_ctx * HEAD_DIM,
        v_ptr + bh * n_ctx * HEAD_DIM, offs_m, 0, n_ctx, n_ctx, qk_scale, HEAD_DIM, BLOCK_N, "none")
    tl.store(o_ptr + bh * n_ctx * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :],
             acc / l_i[:, None], mask=offs_m[:, None] < n_ctx)
    tl.store(lse_ptr + bh * n_ctx + offs_m, (m_i + tl.log2(l_i)) * 0.6931471805599453, mask=offs_m < n_ctx)


@pytest.mark.skipif(not INTERPRET, reason="only the interpreter can see out-of-bounds accesses")
def test_forgotten_last_tile_mask_is_caught():
    # the loop runs past n_ctx without masking the last tile: the interpreter's bounds check stops it
    with pytest.raises(CheckFailed, match="out of bounds"):
        check("flash_forward", _forward_with(_all_tiles_unmasked))


def test_causal_without_mask_fails():
    # the non-causal kernel is a causal kernel that forgot its mask
    with pytest.raises(CheckFailed, match="off by more than"):
        check("flash_forward_causal", lesson06.flash_forward)


def _attention_with_backward(backward):
    class Broken(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, causal, sm_scale):
            forward = lesson06.flash_forward_causal if causal else lesson06.flash_forward
            out, lse = forward(q, k, v, sm_scale)
            ctx.save_for_backward(q, k, v, out, lse)
            ctx.causal, ctx.sm_scale = causal, sm_scale
            return out

        @staticmethod
        def backward(ctx, dout):
            return (*backward(*ctx.saved_tensors, dout, ctx.causal, ctx.sm_scale), None, None)

    def attention(q, k, v, causal=False, sm_scale=None):
        return Broken.apply(q, k, v, causal, q.shape[-1] ** -0.5 if sm_scale is None else sm_scale)
    return attention


def _backward_without_delta(q, k, v, out, lse, dout, causal, sm_scale):
    """dS = P * dP: the softmax's correction term delta left out (zero)."""
    return lesson06.flash_backward(q, k, v, torch.zeros_like(out), lse, dout, causal, sm_scale)


def _backward_without_scale(q, k, v, out, lse, dout, causal, sm_scale):
    """dQ and dK not multiplied by sm_scale (P still recomputed with the right scale)."""
    dq, dk, dv = lesson06.flash_backward(q, k, v, out, lse, dout, causal, sm_scale)
    return dq / sm_scale, dk / sm_scale, dv


@pytest.mark.parametrize("backward", [_backward_without_delta, _backward_without_scale],
                         ids=["no delta", "no scale"])
def test_wrong_backward_fails(backward):
    with pytest.raises(CheckFailed, match="off by more than"):
        check("attention_backward", _attention_with_backward(backward))


def test_backward_returning_too_few_gradients_fails():
    def no_grads(q, k, v, out, lse, dout, causal, sm_scale):
        return None, None, None
    with pytest.raises(CheckFailed, match="no gradient reached q"):
        check("attention_backward", _attention_with_backward(no_grads))


def test_the_case_past_int32_compares_the_last_head(monkeypatch):
    """The GPU-only case past 2**31 elements, built at a stand-in size: the reference runs on the last
    head, a mistake there is caught with the int32 hint, and the right kernel passes."""
    from helpers.exercises.lesson06 import past_int32_case

    ex = exercises.get("flash_forward")
    dtype = pick(torch.float32, torch.float16)   # the exercise's float32 tolerance is the CPU's (no TF32)
    monkeypatch.setattr(ex, "cases", lambda: [past_int32_case(H=3, N=37, D=16, dtype=dtype)])
    check("flash_forward", lesson06.flash_forward)

    def off_in_the_last_head(q, k, v, sm_scale=None):
        out, lse = lesson06.flash_forward(q, k, v, sm_scale)
        out[:, -1, -1] += 1.0
        return out, lse
    with pytest.raises(CheckFailed, match=r"(?s)last head.*int32 wraps"):
        check("flash_forward", off_in_the_last_head)


@pytest.mark.parametrize("name, gradients", [("flash_backward_dkdv", 2), ("flash_backward_dq", 1)])
def test_the_backward_case_past_int32_compares_the_last_head(monkeypatch, name, gradients):
    """The backward kernels' GPU-only case past 2**31 elements, at a stand-in size: out and lse saved
    head by head, the reference on the last head, a mistake there caught with the int32 hint."""
    from helpers.exercises.lesson06 import backward_past_int32_case

    ex = exercises.get(name)
    dtype = pick(torch.float32, torch.float16)
    case = lambda: backward_past_int32_case(gradients, H=5, N=37, D=16, dtype=dtype)  # noqa: E731
    monkeypatch.setattr(ex, "cases", lambda: [case()])
    solution = getattr(lesson06, name)
    check(name, solution)

    def off_in_the_last_head(*args, **kwargs):
        grads = solution(*args, **kwargs)
        first = grads if isinstance(grads, torch.Tensor) else grads[0]
        first[:, -1, -1] += 1.0
        return grads
    with pytest.raises(CheckFailed, match=r"(?s)last head.*int32 wraps"):
        check(name, off_in_the_last_head)


FWD_START = "    start_m = tl.program_id(0) * BLOCK_M\n    bh = tl.program_id(1).to(tl.int64)"


@pytest.mark.parametrize("mix_up", [None, (FWD_START, FWD_START.replace("* BLOCK_M", "* BLOCK_N"))])
def test_where_the_autotuner_has_only_square_blocks_a_block_mix_up_is_still_caught(mix_up, monkeypatch):
    """On a GPU flash_forward's first configuration, the one short sequences run with, is 64 x 64: the
    check's extra run with 128 query rows and key tiles of 16 still rejects a kernel that mixes up
    BLOCK_M and BLOCK_N."""
    from matmul_testing import check_with_square_blocks
    from mutants import edit

    flash_forward = edit("06", "flash_forward", *([mix_up] if mix_up else []))
    check_with_square_blocks("flash_forward", flash_forward, "flash_fwd_kernel", mix_up is not None,
                             monkeypatch)
