"""Lesson 09: the capstone's kernels match their references, and the fused block matches the eager one."""

import math

import pytest
import torch
from matmul_testing import MATMUL_TOL, assert_matches, randn

from helpers import DEVICE, ON_GPU, pick
from helpers.block import SMALL, block_input, block_weights, decoder_block
from helpers.check import TOLERANCES
from helpers.exercises.lesson09 import GROUPNORM_TOL
from helpers.solutions import load_solution
from helpers.traffic import triton_traffic

lesson09 = load_solution("09")

DTYPES = [torch.float32, torch.float16]

# Element-wise kernels compute in float32 and round once: check's table (about two units in the last
# place of the output dtype, against a float64 reference). Matmuls: MATMUL_TOL (TF32 on a GPU).


def double(*tensors):
    return [t.double() for t in tensors]


# ---------------------------------------------------------------- linear and swiglu_linear
# Tensor descriptors need 16-byte aligned rows: K, N and f are multiples of 8 (float16) here, and
# the strided cases are column slices of wider, aligned matrices.


def aligned_view(M, K, dtype, scale=1.0):
    """An (M, K) column slice of a wider matrix: row stride K + 16, contiguous rows, aligned."""
    return randn(M, K + 16, dtype=dtype, scale=scale)[:, 8:8 + K]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M, K, f, h_view", [
    (1, 48, 24, False),     # one token
    (70, 136, 40, True),    # two row tiles, two column tiles (2f = 80 interleaved columns), h strided
])
def test_swiglu_linear(dtype, M, K, f, h_view):
    h = aligned_view(M, K, dtype) if h_view else randn(M, K, dtype=dtype)
    w_gate, w_up = randn(f, K, dtype=dtype, scale=K**-0.5), randn(f, K, dtype=dtype, scale=K**-0.5)
    w_gate_up = lesson09.pack_gate_up(w_gate, w_up)
    hd, gd, ud = double(h, w_gate, w_up)
    want = torch.nn.functional.silu(hd @ gd.T) * (hd @ ud.T)    # the unpacked weights: the packing is right
    assert_matches(lesson09.swiglu_linear(h, w_gate_up), want, MATMUL_TOL, dtype)
    assert_matches(lesson09.swiglu_linear(h, w_gate_up),
                   lesson09.swiglu_linear_reference(*double(h, w_gate_up)), MATMUL_TOL, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M, K, N, views", [
    (1, 48, 24, False),
    (70, 136, 72, True),    # K over three BLOCK_K steps; h, w and the residual strided views
    (150, 64, 200, False),  # tiles of several programs on the CPU (two programs there)
])
@pytest.mark.parametrize("epilogue", ["none", "scale", "residual", "both"])
def test_linear(dtype, M, K, N, views, epilogue):
    h = aligned_view(M, K, dtype) if views else randn(M, K, dtype=dtype)
    w = aligned_view(N, K, dtype, scale=K**-0.5) if views else randn(N, K, dtype=dtype, scale=K**-0.5)
    scale = torch.rand(M, device=DEVICE) + 0.5 if epilogue in ("scale", "both") else None
    residual = None
    if epilogue in ("residual", "both"):
        residual = aligned_view(M, N, dtype) if views else randn(M, N, dtype=dtype)
    extras = {"scale": scale, "residual": residual}
    want = lesson09.linear_reference(*double(h, w), **{k: None if v is None else v.double()
                                                       for k, v in extras.items()})
    assert_matches(lesson09.linear(h, w, **extras), want, MATMUL_TOL, dtype)


def test_linear_says_what_a_tensor_descriptor_needs():
    h = randn(5, 45)                        # rows of 45 float32: 180 bytes, not a multiple of 16
    with pytest.raises(AssertionError, match="16 bytes"):
        lesson09.linear(h, randn(8, 45))
    with pytest.raises(AssertionError, match="contiguous rows"):
        lesson09.linear(randn(48, 5).t(), randn(8, 48))


# ---------------------------------------------------------------- rope_qk


def projection_views(B, H, N, D, dtype, n=2):
    """q, k (and v, n=3) as decoder_block makes them: (B, H, N, D) views of one (B, N, 3 H D)
    projection output."""
    qkv = randn(B, N, 3 * H * D, dtype=dtype)
    return [qkv[..., i * H * D:(i + 1) * H * D].view(B, N, H, D).transpose(1, 2) for i in range(n)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B, H, N, D, layout", [
    (1, 1, 1, 4, "views"),          # one position
    (2, 3, 19, 12, "views"),        # D / 2 = 6: not a power of two; N over two position blocks
    (2, 4, 37, 64, "k contiguous"),  # q and k with different strides
])
def test_rope_qk(dtype, B, H, N, D, layout):
    q, k = projection_views(B, H, N, D, dtype)
    if layout == "k contiguous":
        k = k.contiguous()
    angles = randn(N, D // 2, scale=3.0)
    cos, sin = angles.cos(), angles.sin()
    q_rot, k_rot = lesson09.rope_qk(q, k, cos, sin)
    want_q, want_k = lesson09.rope_qk_reference(*double(q, k, cos, sin))
    assert q_rot.is_contiguous() and k_rot.is_contiguous()
    assert_matches(q_rot, want_q, TOLERANCES, dtype)
    assert_matches(k_rot, want_k, TOLERANCES, dtype)


# ---------------------------------------------------------------- causal_attention

# float32 on a GPU: tl.dot rounds float32 operands to TF32 (2**-11). float16: P is rounded to float16
# before P V, as in lesson 06, a unit of 2**-11 on outputs of order one.
ATTENTION_TOL = {torch.float32: MATMUL_TOL[torch.float32], torch.float16: (2e-3, 2e-3)}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B, H, N, D, layout", [
    (1, 1, 1, 16, "views"),           # one token
    (2, 3, 37, 32, "views"),          # N over several query and key blocks, not a multiple of any
    (1, 2, 70, 64, "q, k contiguous"),  # rope_qk's outputs beside V's view, as in the block
])
def test_causal_attention(dtype, B, H, N, D, layout):
    q, k, v = projection_views(B, H, N, D, dtype, n=3)
    if layout == "q, k contiguous":
        q, k = q.contiguous(), k.contiguous()
    out = lesson09.causal_attention(q, k, v)
    assert out.shape == (B, N, H, D) and out.is_contiguous()   # the heads side by side: (T, d) rows
    assert_matches(out, lesson09.causal_attention_reference(*double(q, k, v)), ATTENTION_TOL, dtype)


def test_causal_attention_says_what_a_descriptor_cannot_read():
    q, k, v = projection_views(1, 2, 8, 16, torch.float32, n=3)
    with pytest.raises(AssertionError, match="head dimension"):
        lesson09.causal_attention(*(t[..., :12] for t in (q, k, v)))
    with pytest.raises(AssertionError, match="contiguous"):                  # columns 8 values apart
        lesson09.causal_attention(q, k, randn(1, 2, 16, 8).transpose(2, 3))
    odd_rows = randn(1, 8, 2 * 16 + 1)[..., :32].view(1, 8, 2, 16).transpose(1, 2)   # rows 33 values apart
    with pytest.raises(AssertionError, match="16 bytes"):
        lesson09.causal_attention(q, k, odd_rows)


# ---------------------------------------------------------------- groupnorm_mish


def nchw(N, C, H, W, dtype, layout, mean=0.0, scale=1.0):
    if layout == "channels_last":   # strides (HWC, 1, WC, C)
        return (randn(N, H, W, C, scale=scale) + mean).to(dtype).permute(0, 3, 1, 2)
    if layout == "every other column":   # W's stride 2: H and W cannot be merged into one stride
        return (randn(N, C, H, 2 * W, scale=scale) + mean).to(dtype)[..., ::2]
    return (randn(N, C, H, W, scale=scale) + mean).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, groups, layout, mean, affine_scale", [
    ((2, 15, 7, 9), 5, "contiguous", 0.0, 1.0),        # 3 channels per group, 189 values: one tile
    ((1, 6, 1, 1), 2, "contiguous", 0.0, 1.0),         # H = W = 1: 3 values per group
    ((2, 9, 17, 19), 3, "channels_last", 0.0, 1.0),    # 969 values per group: several tiles, strided
    ((2, 10, 11, 13), 2, "contiguous", 300.0, 1.0),    # a large mean: the variance must not cancel
    ((1, 14, 5, 7), 7, "contiguous", 0.0, 30.0),       # outputs past +-20: Mish's two tails
    ((2, 8, 6, 5), 4, "every other column", 0.0, 1.0),  # strides that do not merge H and W
])
def test_groupnorm_mish(dtype, shape, groups, layout, mean, affine_scale):
    x = nchw(*shape, dtype, layout, mean=mean, scale=2.0)
    C = shape[1]
    weight, bias = randn(C, dtype=dtype, scale=affine_scale), randn(C, dtype=dtype, scale=affine_scale)
    want = lesson09.groupnorm_mish_reference(*double(x), groups, *double(weight, bias), 1e-5)
    tol = {**TOLERANCES, **GROUPNORM_TOL}   # float32: the exercise's tolerance, and its reasons
    assert_matches(lesson09.groupnorm_mish(x, groups, weight, bias, 1e-5), want, tol, dtype)


@pytest.mark.parametrize("shape, groups, layout, splits", [
    ((2, 6, 9, 11), 3, "contiguous", 1),        # one slice: the same as one kernel per group
    ((1, 8, 13, 17), 2, "channels_last", 4),    # 4 slices of a group of 884 values: the last one short
    ((2, 4, 5, 7), 2, "contiguous", 8),         # more slices than the group has BLOCKs: empty slices
    ((1, 12, 33, 31), 2, "contiguous", None),   # the default: 2 groups of 6138 values, split on the CPU too
])
def test_groupnorm_mish_split(shape, groups, layout, splits):
    N, C, H, W = shape
    x = randn(N, H, W, C).permute(0, 3, 1, 2) if layout == "channels_last" else randn(N, C, H, W)
    x = x + 50.0                                # a large mean: the shift must be the same in every slice
    weight, bias = randn(C), randn(C)
    want = lesson09.groupnorm_mish_reference(*double(x), groups, *double(weight, bias), 1e-5)
    got = lesson09.groupnorm_mish_split(x, groups, weight, bias, 1e-5, splits=splits)
    assert_matches(got, want, GROUPNORM_TOL, torch.float32)


# ---------------------------------------------------------------- the decoder block


# float32: the fused block and the eager one round differently at every step (RMSNorm folded into
# the matmul, the SiLU product and residual adds in float32 before one rounding, online softmax),
# each step a few units of 2**-24 of outputs of order one, summed over K = 688: about 1e-6 on the
# CPU, well inside 1e-5 + 1e-5 |y| (outputs reach about 5). On a GPU tl.dot rounds float32 operands
# to TF32 (2**-11) in five matmuls, one after the other: a few 1e-3, so 3e-2.
BLOCK_F32_TOL = pick(cpu=(1e-5, 1e-5), gpu=(3e-2, 3e-2))


def test_decoder_block_fused_float32_and_its_launches():
    w, x = block_weights(SMALL, device=DEVICE), block_input(SMALL, batch=2, seq=40, device=DEVICE)
    want = decoder_block(x, w, SMALL, attention="sdpa")
    got = {}
    traffic = triton_traffic(lambda: got.setdefault("out", lesson09.decoder_block_fused(x, w, SMALL)))
    atol, rtol = BLOCK_F32_TOL
    torch.testing.assert_close(got["out"], want, atol=atol, rtol=rtol)
    if not ON_GPU:   # the interpreter records every launch: the block is 8 Triton kernels
        names = [launch.kernel for launch in traffic.launches]
        assert names == ["inv_rms_kernel", "linear_kernel", "rope_qk_kernel", "causal_attention_kernel",
                         "linear_kernel", "rms_norm_kernel", "swiglu_linear_kernel", "linear_kernel"], names


def test_decoder_block_fused_float16_is_as_close_as_eager():
    """float16: every step rounds to 2**-11, so there is no tight absolute bound to state in advance.
    Measured instead against the block in float64: the fused block must be as close as PyTorch's
    own eager float16 block, within a factor of 2 (it rounds less often, but the attention's P is
    rounded to float16 before P V, which SDPA on the CPU does in float32)."""
    w, x = block_weights(SMALL, device=DEVICE), block_input(SMALL, batch=2, seq=40, device=DEVICE)
    truth = decoder_block(x.double(), {n: t.double() for n, t in w.items()}, SMALL, attention="sdpa")
    w16, x16 = {n: t.half() for n, t in w.items()}, x.half()
    eager_err = (decoder_block(x16, w16, SMALL, attention="sdpa").double() - truth).abs().max().item()
    fused = lesson09.decoder_block_fused(x16, lesson09.pack_weights(w16, SMALL), SMALL)
    assert fused.dtype == torch.float16 and fused.shape == x.shape
    fused_err = (fused.double() - truth).abs().max().item()
    assert math.isfinite(fused_err) and fused_err <= 2 * eager_err, (fused_err, eager_err)


def test_pack_weights_is_the_same_block():
    w = block_weights(SMALL)
    packed = lesson09.pack_weights(w, SMALL)
    d, f = SMALL.dim, SMALL.hidden
    assert packed["wqkv"].shape == (3 * d, d)
    assert torch.equal(packed["wqkv"][d:2 * d], w["wk"] * w["attn_norm"])   # gamma folded in
    assert packed["w_gate_up"].shape == (2 * f, d)
    assert torch.equal(packed["w_gate_up"][0::2], w["w_gate"])
    assert torch.equal(packed["w_gate_up"][1::2], w["w_up"])


# ---------------------------------------------------------------- the exercises (helpers/exercises)


@pytest.mark.parametrize("name", ["rope_qk", "swiglu_linear", "groupnorm_mish", "decoder_block_fused"])
def test_the_solutions_pass_their_exercise_checks(name):
    from helpers import check

    check(name, getattr(lesson09, name))


def test_the_exercise_references_agree_with_the_lessons_own():
    from helpers.exercises import lesson09 as spec

    q, k = projection_views(2, 3, 7, 12, torch.float32)
    angles = randn(7, 6)
    args = (q, k, angles.cos(), angles.sin())
    for got, want in zip(spec.rope_qk_reference(*args), lesson09.rope_qk_reference(*args)):
        torch.testing.assert_close(got, want)
    x, weight, bias = randn(2, 6, 5, 3), randn(6), randn(6)
    torch.testing.assert_close(spec.groupnorm_mish_reference(x, 3, weight, bias, 1e-5),
                               lesson09.groupnorm_mish_reference(x, 3, weight, bias, 1e-5))


def test_the_block_structure_check_names_what_pytorch_did():
    from helpers.exercises import lesson09 as spec

    def sdpa_block(x, w, cfg):
        return decoder_block(x, w, cfg, attention="sdpa")

    message = spec._all_in_triton(sdpa_block)
    assert message and "attention" in message and "mm" in message, message
    assert spec._all_in_triton(lesson09.decoder_block_fused) is None
