"""Lesson 11: the capstone's kernels match their references, and the fused block matches the eager one."""

import math

import pytest
import torch
from matmul_testing import MATMUL_TOL, aligned_view, assert_matches, check_with_square_blocks, double, randn

from helpers import DEVICE, ON_GPU, pick
from helpers.block import SMALL, block_input, block_weights, decoder_block
from helpers.check import TOLERANCES
from helpers.solutions import load_solution
from helpers.traffic import triton_traffic

lesson11 = load_solution("11")

DTYPES = [torch.float32, torch.float16]

# Element-wise kernels compute in float32 and round once: check's table (about two units in the last
# place of the output dtype, against a float64 reference). Matmuls: MATMUL_TOL (TF32 on a GPU).


# ---------------------------------------------------------------- swiglu_linear
# Tensor descriptors need 16-byte aligned rows: K and f are multiples of 8 (float16) here, and the
# strided cases are column slices of wider, aligned matrices.


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M, K, f, h_view, w_view", [
    (1, 48, 24, False, False),   # one token
    (70, 136, 40, True, False),  # two row tiles, two column tiles (2f = 80 interleaved columns), h strided
    (33, 64, 40, False, True),   # w_gate_up a column slice of a wider matrix: its own row stride
])
def test_swiglu_linear(dtype, M, K, f, h_view, w_view):
    h = aligned_view(M, K, dtype) if h_view else randn(M, K, dtype=dtype)
    w_gate, w_up = randn(f, K, dtype=dtype, scale=K**-0.5), randn(f, K, dtype=dtype, scale=K**-0.5)
    w_gate_up = lesson11.pack_gate_up(w_gate, w_up)
    if w_view:
        wide = torch.zeros(2 * f, K + 16, dtype=dtype, device=DEVICE)
        wide[:, 8:8 + K] = w_gate_up
        w_gate_up = wide[:, 8:8 + K]
    hd, gd, ud = double(h, w_gate, w_up)
    want = torch.nn.functional.silu(hd @ gd.T) * (hd @ ud.T)    # the unpacked weights: the packing is right
    got = lesson11.swiglu_linear(h, w_gate_up)
    assert got.shape == (M, f) and got.is_contiguous()
    assert_matches(got, want, MATMUL_TOL, dtype)
    assert_matches(lesson11.swiglu_linear(h, w_gate_up),
                   lesson11.swiglu_linear_reference(*double(h, w_gate_up)), MATMUL_TOL, dtype)


def test_swiglu_linear_tails_stay_finite():
    """Gates of +-200: exp overflows float32 at both ends, and SiLU(g) * up must be g * up and 0."""
    f = 8                                            # rows of 8 float32 values: 16-byte aligned
    h = torch.ones(1, 64, device=DEVICE)
    w_gate, w_up = torch.zeros(f, 64, device=DEVICE), torch.zeros(f, 64, device=DEVICE)
    w_gate[0::2], w_gate[1::2] = 200.0 / 64, -200.0 / 64
    w_up[:, 0] = 1.0
    got = lesson11.swiglu_linear(h, lesson11.pack_gate_up(w_gate, w_up))
    assert torch.isfinite(got).all(), got
    want = torch.tensor([[200.0, 0.0] * (f // 2)], device=DEVICE)
    torch.testing.assert_close(got, want, atol=pick(1e-3, 0.5), rtol=pick(1e-5, 1e-2))   # TF32 on a GPU


# ---------------------------------------------------------------- rope_qk


def projection_views(B, H, N, D, dtype, n=2):
    """q, k (and v, n=3) as decoder_block makes them: (B, H, N, D) views of one (B, N, 3 H D)
    projection output."""
    qkv = randn(B, N, 3 * H * D, dtype=dtype)
    return [qkv[..., i * H * D:(i + 1) * H * D].view(B, N, H, D).transpose(1, 2) for i in range(n)]


def column_slice(t, pad):
    """t's values in a column slice of a wider table: row stride t.shape[1] + pad."""
    wide = torch.full((t.shape[0], t.shape[1] + pad), float("nan"), dtype=t.dtype, device=t.device)
    wide[:, 1:1 + t.shape[1]] = t
    return wide[:, 1:1 + t.shape[1]]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B, H, N, D, layout", [
    (1, 1, 1, 4, "views"),          # one position
    (2, 3, 19, 12, "views"),        # D / 2 = 6: not a power of two; N over two position blocks
    (2, 4, 37, 64, "k contiguous"),  # q and k with different strides
    (2, 2, 21, 16, "q dim-strided"),  # q's head dimension of stride N, not 1
])
def test_rope_qk(dtype, B, H, N, D, layout):
    q, k = projection_views(B, H, N, D, dtype)
    if layout == "k contiguous":
        k = k.contiguous()
    elif layout == "q dim-strided":
        q = randn(B, H, D, N, dtype=dtype).transpose(2, 3)
    angles = randn(N, D // 2, scale=3.0)
    cos, sin = column_slice(angles.cos(), 3), column_slice(angles.sin(), 7)   # row strides of their own
    q_rot, k_rot = lesson11.rope_qk(q, k, cos, sin)
    want_q, want_k = lesson11.rope_qk_reference(*double(q, k, cos, sin))
    assert q_rot.is_contiguous() and k_rot.is_contiguous()
    assert_matches(q_rot, want_q, TOLERANCES, dtype)
    assert_matches(k_rot, want_k, TOLERANCES, dtype)


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
    traffic = triton_traffic(lambda: got.setdefault("out", lesson11.decoder_block_fused(x, w, SMALL)))
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
    fused = lesson11.decoder_block_fused(x16, lesson11.pack_weights(w16, SMALL), SMALL)
    assert fused.dtype == torch.float16 and fused.shape == x.shape
    fused_err = (fused.double() - truth).abs().max().item()
    assert math.isfinite(fused_err) and fused_err <= 2 * eager_err, (fused_err, eager_err)


def test_a_captured_step_gives_the_block_s_values_and_a_fresh_output():
    """CapturedStep: one graph per input shape on a GPU, fn itself elsewhere; each call's output is its
    own (the next replay does not overwrite it) and follows that call's input."""
    w16 = lesson11.pack_weights({n: t.half() for n, t in block_weights(SMALL, device=DEVICE).items()}, SMALL)
    step = lesson11.CapturedStep(lambda x: lesson11.decoder_block_fused(x, w16, SMALL))
    inputs = [block_input(SMALL, batch=2, seq=16, device=DEVICE).half() for _ in range(3)]
    outs = [step(x) for x in inputs]
    for x, out in zip(inputs, outs):
        torch.testing.assert_close(out, lesson11.decoder_block_fused(x, w16, SMALL), atol=0, rtol=0)
    assert len(step.graphs) == (1 if ON_GPU else 0)
    assert outs[0].data_ptr() != outs[1].data_ptr()


def test_pack_weights_is_the_same_block():
    w = block_weights(SMALL)
    packed = lesson11.pack_weights(w, SMALL)
    d, f = SMALL.dim, SMALL.hidden
    assert packed["wqkv"].shape == (3 * d, d)
    assert torch.equal(packed["wqkv"][d:2 * d], w["wk"] * w["attn_norm"])   # gamma folded in
    assert packed["w_gate_up"].shape == (2 * f, d)
    assert torch.equal(packed["w_gate_up"][0::2], w["w_gate"])
    assert torch.equal(packed["w_gate_up"][1::2], w["w_up"])


# ---------------------------------------------------------------- the exercises (helpers/exercises)


@pytest.mark.parametrize("name", ["rope_qk", "swiglu_linear", "decoder_block_fused"])
def test_the_solutions_pass_their_exercise_checks(name):
    from helpers import check

    check(name, getattr(lesson11, name))


def test_the_exercise_references_agree_with_the_lessons_own():
    from helpers.exercises import lesson11 as spec

    q, k = projection_views(2, 3, 7, 12, torch.float32)
    angles = randn(7, 6)
    args = (q, k, angles.cos(), angles.sin())
    for got, want in zip(spec.rope_qk_reference(*args), lesson11.rope_qk_reference(*args)):
        torch.testing.assert_close(got, want)


def test_the_block_structure_check_names_what_pytorch_did():
    from helpers.exercises import lesson11 as spec

    def sdpa_block(x, w, cfg):
        return decoder_block(x, w, cfg, attention="sdpa")

    message = spec._all_in_triton(sdpa_block)
    assert message and "attention" in message and "mm" in message, message
    assert spec._all_in_triton(lesson11.decoder_block_fused) is None


def test_the_block_structure_check_names_copies_norms_and_extra_launches():
    from mutants import lesson11 as mutants

    from helpers.exercises import lesson11 as spec

    message = spec._all_in_triton(mutants.eager_mlp_norm)
    assert "pow" in message and "rsqrt" in message and "inv_rms" in message, message
    message = spec._all_in_triton(mutants.v_made_contiguous)
    assert "clone" in message and "a copy" in message and "v.contiguous()" in message, message
    message = spec._all_in_triton(mutants.v_copied_by_a_kernel)
    assert "9 Triton launches" in message, message


def test_the_swiglu_tails_case_overflows_exp_at_both_ends_in_every_draw():
    from helpers.exercises import lesson11 as spec

    for _ in range(3):
        (case,) = [c for c in spec._swiglu_cases() if "tails" in c.label]
        h, w = case.args
        gates = h.double() @ w[0::2].double().T
        assert gates.max() > spec.EXP_OVERFLOW and gates.min() < -spec.EXP_OVERFLOW


def test_every_rope_operand_with_strides_is_a_view_somewhere():
    """The kernel takes strides for q, k (four each) and the rows of cos and sin: each is given as a
    non-contiguous view in some case, cos and sin with row strides that differ from each other."""
    from helpers.exercises import lesson11 as spec

    cases = [c for c in spec._rope_cases() if c.build is None]   # a GPU's case past 2**31 comes later
    q_dims = {c.args[0].stride(3) for c in cases}
    k_dims = {c.args[1].stride(3) for c in cases}
    assert any(not c.args[0].is_contiguous() for c in cases) and q_dims != {1}
    assert any(not c.args[1].is_contiguous() for c in cases) and k_dims != {1}
    half = [c.args[2].shape[1] for c in cases]
    assert any(len({c.args[2].stride(0), c.args[3].stride(0), n}) == 3 for c, n in zip(cases, half))


def _elements(t):
    """The storage offsets of every element of t."""
    index = [torch.arange(n).view(*([1] * i), n, *([1] * (t.dim() - i - 1))) * s
             for i, (n, s) in enumerate(zip(t.shape, t.stride()))]
    return set((sum(index) + t.storage_offset()).flatten().tolist())


def test_the_rope_int64_case_passes_2_31_in_both_tensors(monkeypatch):
    """The GPU's case, built here with a stand-in spread: q's positions and k's sequences lie SPREAD apart
    in one buffer without overlapping, each stride below 2**31 at full size, and the solution passes."""
    from helpers import exercises
    from helpers.exercises import lesson10 as spec10
    from helpers.exercises import lesson11 as spec

    assert spec.SPREAD < 2**31 <= 2 * spec.SPREAD and spec10.SPREAD == spec.SPREAD
    monkeypatch.setattr(spec, "SPREAD", 4096 + 64)
    case = spec._rope_int64_case()
    q, k = case.args[:2]
    assert q.untyped_storage().data_ptr() == k.untyped_storage().data_ptr()
    assert q.stride(2) == k.stride(0) == spec.SPREAD and not _elements(q) & _elements(k)
    assert "int32" in case.hint and "offs_pos, b and h" in case.hint
    ex = exercises.get("rope_qk")
    monkeypatch.setattr(ex, "cases", lambda: [case])
    monkeypatch.setattr(ex, "structure", None)
    from helpers import check

    check("rope_qk", lesson11.rope_qk)


def test_the_rope_case_past_2_31_elements_per_tensor_compares_the_last_heads(monkeypatch):
    """The GPU's dense case, built here small: q and k contiguous, outputs as large, compared on the last
    heads against the reference run on those alone; the solution passes."""
    from helpers import check, exercises
    from helpers.exercises import lesson11 as spec

    case = spec._rope_past_int32_case(H=7, N=19, D=16)
    q, k = case.args[:2]
    assert q.is_contiguous() and k.is_contiguous() and not case.guard and "int32" in case.hint
    assert case.reference_args[0].shape == (1, 3, 19, 16)
    ex = exercises.get("rope_qk")
    monkeypatch.setattr(ex, "cases", lambda: [case])
    monkeypatch.setattr(ex, "structure", None)
    check("rope_qk", lesson11.rope_qk)


def test_the_block_gates_case_reaches_both_of_silus_tails_in_every_draw():
    from helpers.block import rms_norm
    from helpers.exercises import lesson11 as spec

    for _ in range(2):
        (case,) = [c for c in spec._block_cases() if "gates" in c.label]
        x, *weights = case.args
        w = dict(zip(spec.WEIGHT_NAMES, weights))
        # the MLP's input without the attention: gates of the same size (the attention adds O(1))
        gates = rms_norm(x, w["mlp_norm"], SMALL.eps) @ w["w_gate"].T
        assert (gates > spec.EXP_OVERFLOW).sum() > 1000 and (gates < -spec.EXP_OVERFLOW).sum() > 1000


def test_the_block_scores_case_puts_every_score_far_below_zero_in_every_draw():
    """Every scaled score a query gives a key it sees lies below -104, where exp underflows in float32."""
    from helpers.block import rms_norm, rope, rope_tables
    from helpers.exercises import lesson11 as spec

    H, D = SMALL.n_heads, SMALL.head_dim
    for _ in range(2):
        (case,) = [c for c in spec._block_cases() if "-150" in c.label and "score" in c.label]
        x, *weights = (t.double() for t in case.args)
        w = dict(zip(spec.WEIGHT_NAMES, weights))
        B, N, d = x.shape
        h = rms_norm(x, w["attn_norm"], SMALL.eps)
        q, k = ((h @ w[name].T).view(B, N, H, D).transpose(1, 2) for name in ("wq", "wk"))
        cos, sin = (t.double() for t in rope_tables(SMALL, N, x.device))
        scores = rope(q, cos, sin) @ rope(k, cos, sin).transpose(-1, -2) / D**0.5
        seen = torch.ones(N, N, dtype=torch.bool, device=x.device).tril()
        assert scores[..., seen].max() < -104


SWIGLU_TILES = ("    n_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)\n"
                "    for tile in tl.range(tl.program_id(0), n_tiles, tl.num_programs(0), flatten=True):")


@pytest.mark.parametrize("mix_up", [None, (SWIGLU_TILES, SWIGLU_TILES.replace("cdiv(N, BLOCK_N)",
                                                                               "cdiv(N, BLOCK_M)"))])
def test_where_the_autotuner_has_only_square_tiles_a_block_mix_up_is_still_caught(mix_up, monkeypatch):
    """On a GPU swiglu_linear's autotuner may choose square tiles for every case: the check's extra
    product with 32 x 64 x 16 tiles still rejects a kernel that mixes up BLOCK_M and BLOCK_N."""
    from mutants import edit

    swiglu_linear = edit("11", "swiglu_linear", *([mix_up] if mix_up else []))
    check_with_square_blocks("swiglu_linear", swiglu_linear, "swiglu_linear_kernel", mix_up is not None,
                             monkeypatch)


def test_an_eager_concatenation_is_named_for_what_it_most_likely_is():
    """A cat beside a negation is RoPE's rotate_half; a cat alone is weights packed by hand."""
    from helpers.exercises.lesson11 import _kinds

    (rope,) = _kinds(["neg", "cat", "mul", "add"])
    assert rope[0] == "RoPE" and "rope_qk" in rope[1]
    (packing,) = _kinds(["cat", "mul"])
    assert packing[0] == "a concatenation" and "pack_weights" in packing[1]
