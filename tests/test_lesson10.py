"""Lesson 10: the long-row softmax, the attention forward (host descriptors, and causal on the
projection's layout) and the one-kernel backward match their references; the exercise specs hold what
their checks rely on."""

import pytest
import torch
import triton
from matmul_testing import MATMUL_TOL, assert_matches, check_with_square_blocks, double, randn

from helpers import DEVICE, ON_GPU
from helpers.exercises.lesson05 import SOFTMAX_TOL
from helpers.solutions import load_solution

lesson10 = load_solution("10")

DTYPES = [torch.float32, torch.float16]


# ---------------------------------------------------------------- softmax_long


def rows_of(M, n, dtype, kind):
    if kind == "strided":          # a column slice of a wider matrix: rows n + 13 values apart
        return randn(M, n + 13, dtype=dtype, scale=3.0)[:, :n]
    if kind == "-inf head":        # the first tiles of each row hold no finite value
        x = randn(M, n, scale=3.0)
        x[:, : n // 2] = float("-inf")
        return x.to(dtype)
    if kind == "huge":             # uniform in [-1e4, 1e4]: exp(x) overflows unless the max is subtracted
        return ((torch.rand(M, n, device=DEVICE) * 2 - 1) * 1e4).to(dtype)
    return randn(M, n, dtype=dtype, scale=3.0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M, n, kind", [
    (1, 1, "randn"),            # one value: the output is 1
    (4, 100, "randn"),          # shorter than the CPU's tile of 256
    (3, 1001, "randn"),         # four tiles, the last one partial
    (2, 777, "strided"),        # row stride 790, not n
    (3, 1500, "-inf head"),     # three whole tiles of -inf before the first finite value
    (2, 999, "huge"),
])
def test_softmax_long(dtype, M, n, kind):
    x = rows_of(M, n, dtype, kind)
    out = lesson10.softmax_long(x)
    assert out.is_contiguous()
    assert_matches(out, torch.softmax(x.double(), dim=-1), SOFTMAX_TOL, dtype)


def test_softmax_long_says_it_needs_contiguous_rows():
    with pytest.raises(AssertionError, match="contiguous rows"):
        lesson10.softmax_long(randn(4, 200)[:, ::2])
    with pytest.raises(AssertionError, match="2-D"):
        lesson10.softmax_long(randn(2, 3, 100))


@pytest.mark.skipif(ON_GPU, reason="the order of the loads is the interpreter's record")
def test_softmax_long_reads_the_row_twice_the_second_time_from_its_end():
    x = randn(2, 1001)
    from helpers import interpreter

    with interpreter.record(touches=True) as rec:
        lesson10.softmax_long(x)
    loads = [offs for pid, arg, kind, offs in rec.launches[0].touches if pid[0] == 0 and kind == "load"]
    block = len(loads[0])
    tiles = triton.cdiv(1001, block)
    assert len(loads) == 2 * tiles
    assert loads[tiles].max() == 1000 and loads[-1].min() == 0    # pass 2: from the last tile to the first


# ---------------------------------------------------------------- the exercises (helpers/exercises)


@pytest.mark.parametrize("name, fn", [("causal_attention", "causal_attention"),
                                      ("atomic_backward", "attention_backward"),
                                      ("softmax_long", "softmax_long")])
def test_the_solutions_pass_their_exercise_checks(name, fn):
    from helpers import check

    check(name, getattr(lesson10, fn))


DIAGONAL_END = ("offs_m, start_m, start_m + BLOCK_M,\n"
                "                                    qk_scale, BLOCK_N, True)")


@pytest.mark.parametrize("mix_up", [
    None,
    (DIAGONAL_END, DIAGONAL_END.replace("+ BLOCK_M", "+ BLOCK_N")),
    ("k_desc = head_descriptor(k_ptr, b, h, sk_b, sk_h, sk_n, n_ctx, HEAD_DIM, BLOCK_N)",
     "k_desc = head_descriptor(k_ptr, b, h, sk_b, sk_h, sk_n, n_ctx, HEAD_DIM, BLOCK_M)")])
def test_where_the_autotuner_has_only_square_blocks_a_block_mix_up_is_still_caught(mix_up, monkeypatch):
    """On a GPU causal_attention's autotuner may choose square blocks for every case: the check's extra
    run with 64 query rows and key tiles of 16 still rejects a kernel that mixes up BLOCK_M and BLOCK_N."""
    from mutants import edit

    causal_attention = edit("10", "causal_attention", *([mix_up] if mix_up else []))
    check_with_square_blocks("causal_attention", causal_attention, "causal_attention_kernel",
                             mix_up is not None, monkeypatch)


def test_the_causal_cases_reach_underflow_and_overflow():
    """The "negative" rows: every score so low that exp underflows to 0 unless the max is subtracted
    (a running max started at 0 then divides 0 by 0); the "positive" ones overflow exp."""
    from helpers.exercises import lesson10 as spec

    for case in [c for c in spec._causal_cases() if c.build is None]:   # not a GPU's case past 2**31
        q, k, _ = (t.double() for t in case.args)
        scores = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
        causal = torch.ones(scores.shape[-2:], dtype=torch.bool, device=scores.device).tril()
        if "near -" in case.label:
            assert (torch.exp(scores.float()) == 0)[..., causal].all(), case.label
        if "near +" in case.label:
            assert torch.isinf(torch.exp(scores.float()))[..., causal].any(), case.label


def test_the_backward_cases_span_several_key_blocks():
    from helpers.exercises import lesson10 as spec

    block_n = max(c.kwargs["BLOCK_N"] for c in lesson10.BACKWARD_CONFIGS)
    assert sum(case.args[0].shape[-2] > 2 * block_n for case in spec._backward_cases()) >= 3


def test_the_exercise_cases_start_rows_with_minus_inf():
    from helpers.exercises import lesson10 as spec

    headed = [case.args[0] for case in spec._softmax_cases() if "-inf" in case.label]
    assert headed and all(torch.isinf(x[:, : x.shape[1] // 2]).all() for x in headed)
    assert all(torch.isfinite(torch.softmax(x.double(), -1)).all() for x in headed)


# ---------------------------------------------------------------- attention, forward and backward
# Lengths that no tile divides (the last query and key blocks partial) and one that the tiles do.

ATTENTION_CASES = [(False, 64, 32), (True, 64, 32), (False, 75, 16), (True, 75, 16)]   # causal, N, D


def attention_inputs(N, D, dtype=torch.float16):
    return [torch.randn(2, 2, N, D, device=DEVICE, dtype=dtype) for _ in range(4)]   # q, k, v, dout


def autograd_reference(q, k, v, dout, causal):
    """out and dq, dk, dv from PyTorch's attention in float64, through autograd."""
    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    out = torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=causal)
    out.backward(dout.double())
    return out.detach(), [t.grad for t in leaves]


@pytest.mark.parametrize("causal, N, D", ATTENTION_CASES)
def test_attention_forward_and_lse(causal, N, D):
    q, k, v, _ = attention_inputs(N, D)
    out, lse = lesson10.attention(q, k, v, causal=causal)
    want, _ = autograd_reference(q, k, v, q, causal)
    scores = (q.double() @ k.double().transpose(-1, -2)) * D**-0.5
    if causal:
        scores = scores.masked_fill(torch.ones(N, N, dtype=torch.bool, device=DEVICE).triu(1), -float("inf"))
    assert out.dtype == q.dtype and out.shape == q.shape and lse.dtype == torch.float32
    torch.testing.assert_close(out.double(), want, atol=2e-3, rtol=2e-3)
    torch.testing.assert_close(lse.double(), torch.logsumexp(scores, -1), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("causal, N", [(False, 100), (False, 128), (True, 100), (True, 16)])
def test_the_shifted_loop_gives_the_lesson_loops_output(causal, N):
    """_attend_shifted (FlashAttention-3's order in plain Triton) against the lesson's loop, at the same
    blocks: a length no block divides, one every block divides, and (causal) a block with no key tile
    before it."""
    from helpers.exercises import tuned_over

    q, k, v, _ = attention_inputs(N, 64)
    bm, bn, warps, stages = (32, 16, 4, 1) if not ON_GPU else (128, 64, 8, 3)
    outputs = []
    for shifted in (False, True):
        with tuned_over(lesson10.attention_kernel, [lesson10._attention_config(bm, bn, warps, stages,
                                                                               shifted=shifted)]):
            outputs.append(lesson10.attention(q, k, v, causal=causal))
    for plain, shifted in zip(*outputs):
        torch.testing.assert_close(shifted, plain, atol=2e-3, rtol=2e-3)


def test_the_compiler_waits_for_every_wgmma_of_the_shifted_loop_before_its_softmax():
    """Lesson 10 says so from this PTX: in the shifted loop (the second branch target on), each issue of
    wgmmas is waited for at once, so no exponential runs beside a wgmma. A Triton that overlaps them
    fails here, and the lesson's text must change with it."""
    from helpers import gpu_compile

    if not gpu_compile.available():
        pytest.skip("this Triton cannot compile for sm_90 here")
    steps = lesson10.wgmma_order(shifted=True).split("  ")
    loop = steps[steps.index("|") + 1:]
    loop = loop[:loop.index("|")]
    assert [s.split()[-1] for s in loop] == ["wgmma", "0", "wgmma", "0", "ex2"], steps


@pytest.mark.parametrize("causal, N, D", ATTENTION_CASES)
def test_attention_backward_matches_autograd(causal, N, D):
    q, k, v, dout = attention_inputs(N, D)
    out, lse = lesson10.attention(q, k, v, causal=causal)
    grads = lesson10.attention_backward(q, k, v, out, lse, dout, causal=causal)
    _, want = autograd_reference(q, k, v, dout, causal)
    for name, got, ref in zip("qkv", grads, want):
        assert got.dtype == q.dtype and got.shape == q.shape, name
        torch.testing.assert_close(got.double(), ref, atol=5e-3, rtol=5e-3, msg=lambda m: f"d{name}: {m}")


def test_trainable_attention_runs_the_backward_through_autograd():
    q, k, v, dout = attention_inputs(48, 16)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    lesson10.trainable_attention(*leaves, causal=True).backward(dout)
    _, want = autograd_reference(q, k, v, dout, True)
    for t, ref in zip(leaves, want):
        torch.testing.assert_close(t.grad.double(), ref, atol=5e-3, rtol=5e-3)


def test_attention_backward_adds_dq_with_atomics_in_one_kernel():
    """One launch computes all three gradients; dQ's shares arrive by atomic adds into float32 (the
    interpreter's record marks which touches were atomic)."""
    from helpers import interpreter

    q, k, v, dout = attention_inputs(64, 16)
    out, lse = lesson10.attention(q, k, v, causal=False)
    lesson10.attention_backward(q, k, v, out, lse, dout)   # on a GPU, the autotuner times its configurations
    with interpreter.record(touches=True) as rec:
        lesson10.attention_backward(q, k, v, out, lse, dout)
    launches = [launch for launch in rec.launches if launch.kernel == "attention_backward_kernel"]
    assert len(launches) == 1, [launch.kernel for launch in rec.launches]
    dq = [i for i, (pid, name, kind, offs) in enumerate(launches[0].touches) if name == "dq_ptr"]
    assert dq and all(i in launches[0].atomic_touches for i in dq)


def test_the_causal_kernel_refuses_key_tiles_longer_than_its_query_blocks():
    from helpers.exercises import lesson10 as spec

    assert spec._block_rule(lesson10.causal_attention) is None     # it raised at the static_assert
    kernel, saved = lesson10.causal_attention_kernel, lesson10.causal_attention_kernel.configs
    kernel.configs = [triton.Config({"BLOCK_M": 16, "BLOCK_N": 32}, num_warps=4, num_stages=1)]
    try:
        with pytest.raises(Exception) as caught:
            lesson10.causal_attention(*projection_views(1, 1, 40, 16, torch.float32, n=3))
    finally:
        kernel.configs = saved
    assert spec._asserted(caught.value) and "key tiles must end" in str(caught.value)



def projection_views(B, H, N, D, dtype, n=2):
    """q, k (and v, n=3) as decoder_block makes them: (B, H, N, D) views of one (B, N, 3 H D)
    projection output."""
    qkv = randn(B, N, 3 * H * D, dtype=dtype)
    return [qkv[..., i * H * D:(i + 1) * H * D].view(B, N, H, D).transpose(1, 2) for i in range(n)]


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
    out = lesson10.causal_attention(q, k, v)
    assert out.shape == (B, N, H, D) and out.is_contiguous()   # the heads side by side: (T, d) rows
    assert_matches(out, lesson10.causal_attention_reference(*double(q, k, v)), ATTENTION_TOL, dtype)


def test_causal_attention_says_what_a_descriptor_cannot_read():
    q, k, v = projection_views(1, 2, 8, 16, torch.float32, n=3)
    with pytest.raises(AssertionError, match="head dimension"):
        lesson10.causal_attention(*(t[..., :12] for t in (q, k, v)))
    with pytest.raises(AssertionError, match="contiguous"):                  # columns 8 values apart
        lesson10.causal_attention(q, k, randn(1, 2, 16, 8).transpose(2, 3))
    odd_rows = randn(1, 8, 2 * 16 + 1)[..., :32].view(1, 8, 2, 16).transpose(1, 2)   # rows 33 values apart
    with pytest.raises(AssertionError, match="16 bytes"):
        lesson10.causal_attention(q, k, odd_rows)


# ---------------------------------------------------------------- what make bench recorded on GPUs

RECORDED = lesson10.recorded()
# The targets the notebook reads by name, in the order course.ncu_targets() lists them.
NCU_TARGETS = ["attention forward (10)", "cuDNN forward", "attention backward (10)", "cuDNN backward",
               "long softmax (10)", "torch.compile softmax, long rows", "row softmax (05)",
               "torch.compile softmax, rows", "RMSNorm (05)", "torch.compile RMSNorm"]


def test_recordings_exist():
    assert RECORDED, "nothing recorded: `make bench LESSON=10` on a Hopper GPU records it"


@pytest.mark.parametrize("gpu", sorted(RECORDED))
def test_each_gpu_recorded_the_profile_of_every_target(gpu):
    record = RECORDED[gpu]
    assert {"attention_kernel", "attention_backward_kernel"} <= set(record["compiled"])
    assert all(r["kernel"] == "attention_kernel" for r in record["warp_specialize"])
    ncu = record["ncu"]
    assert "error" not in ncu, ncu.get("error")
    assert ncu["units"]["gpu__time_duration.sum"] == "ns" and "-k regex:" in ncu["command"]
    assert list(dict.fromkeys(k["target"] for k in ncu["kernels"])) == NCU_TARGETS
    for k in ncu["kernels"]:
        assert k["gpu__time_duration.sum"] > 0 and k["counted"]["bytes"] > 0, k["target"]
        assert k["lts__t_sectors_op_red.sum"] >= 0 and k["lts__t_sectors_op_atom.sum"] >= 0
    # recorded since the register survey was added; the notebook says "not recorded yet" without them
    for row in record.get("registers", []):
        assert row["kernel"] in ("attention_kernel", "attention_backward_kernel") and row["config"]
        assert "error" in row or (row["registers"] > 0 and row["spills"] >= 0), row
    for row in record.get("autotuned", []):
        assert row["kernel"] in ("attention_kernel", "attention_backward_kernel") and row["key"], row
    # recorded since the register cap joined the search: the capped tile and the uncapped, full and causal
    runs = record.get("two_per_sm", [])
    assert not runs or [("maxnreg" in r["config"], r["causal"]) for r in runs] == [
        (False, False), (True, False), (False, True), (True, True)]
    for r in runs:
        assert r["ms"] > 0 and r["registers"] > 0 and r["shared"] > 0 and r["head_dim"] == 64, r


def test_the_register_cap_joins_the_search_only_at_small_heads():
    """TWO_PER_SM (maxnreg=128) is timed at D <= 64, where it costs no spills, and pruned at D = 128."""
    plain = lesson10._attention_config(128, 128, 8, 3)
    configs = [plain, lesson10.TWO_PER_SM]
    for head_dim, kept in ((128, [plain]), (64, configs), (32, configs)):
        got = lesson10._attention_search(configs, {"n_ctx": 4096}, HEAD_DIM=head_dim, CAUSAL=True)
        assert got == kept, head_dim
    assert lesson10.TWO_PER_SM.all_kwargs()["maxnreg"] == 128 and lesson10.TWO_PER_SM.num_warps == 8
    assert lesson10.lesson09.describe_config(lesson10.TWO_PER_SM) == "128x128, 8 warps, 3 stages, maxnreg=128"


@pytest.mark.parametrize("registers, warps, shared, programs", [
    (170, 8, 115712, 1),     # the D = 64 tile uncapped: 256 x 176 registers leave no room for a second
    (122, 8, 115712, 2),     # capped: 2 x 256 x 128 = 65,536 registers, 2 x 114 KB of shared memory
    (128, 8, 115712, 2),
    (194, 8, 230400, 1),     # D = 128: one program, by registers and by shared memory
    (64, 8, 115712, 2),      # shared memory decides: a third program's 114 KB does not fit in 228 KB
    (32, 4, 1024, 16),       # 64 warps an SM decide
])
def test_programs_per_sm(registers, warps, shared, programs):
    assert lesson10.programs_per_sm(registers, warps, shared) == programs


@pytest.mark.parametrize("gpu", sorted(RECORDED))
def test_programs_per_sm_agrees_with_nsight_computes_limits(gpu):
    """The lesson says Nsight Compute reports the limit programs_per_sm computes: for every kernel
    profiled, the least of ncu's limits by registers, shared memory and warps. ncu's shared memory per
    program already holds the 1 KB the hardware keeps, which programs_per_sm adds itself."""
    for k in RECORDED[gpu]["ncu"]["kernels"]:
        warps = int(k["launch__block_size"]) // 32
        ours = lesson10.programs_per_sm(int(k["launch__registers_per_thread"]), warps,
                                        int(k["launch__shared_mem_per_block"]) - 1024)
        theirs = min(k[f"launch__occupancy_limit_{limit}"] for limit in ("registers", "shared_mem", "warps"))
        assert ours == theirs, k["target"]


def test_the_causal_int64_case_passes_2_31_with_32_bit_strides(monkeypatch):
    """The GPU's case, built here with a stand-in spread: the third sequence starts 2 * SPREAD values in
    (past 2**31 at full size, each stride below it), and the solution passes it."""
    from helpers import check, exercises
    from helpers.exercises import lesson10 as spec

    assert spec.SPREAD < 2**31 <= 2 * spec.SPREAD and spec.SPREAD * 2 % 16 == 0
    ex = exercises.get("causal_attention")   # imports every lesson's specs first: lesson 11 keeps SPREAD
    monkeypatch.setattr(spec, "SPREAD", 16384 + 64)   # as it was when it was imported
    case = spec._causal_int64_case()
    assert all(t.stride(0) == spec.SPREAD for t in case.args) and "int32" in case.hint
    monkeypatch.setattr(ex, "cases", lambda: [case])
    monkeypatch.setattr(ex, "structure", None)
    check("causal_attention", lesson10.causal_attention)


def test_softmax_longs_case_past_2_31_is_dense(monkeypatch):
    """The GPU's last case, built here at a stand-in span: x contiguous, its last rows starting past the
    span, so that the output, of x's shape, passes it too; compared on those rows; the solution passes."""
    from helpers import check, exercises
    from helpers.exercises import lesson05
    from helpers.exercises import lesson10 as spec

    monkeypatch.setattr(spec, "ON_GPU", True)
    monkeypatch.setattr(lesson05, "INT32_SPAN", 2**14)
    ex = exercises.get("softmax_long")
    case = ex.cases()[-1].build()
    (x,) = case.args
    assert x.is_contiguous() and x.stride(0) * (x.shape[0] - 3) >= 2**14
    assert "2**31" in case.label and "int32" in case.hint
    assert case.part(x).shape == case.reference_args[0].shape
    monkeypatch.setattr(ex, "cases", lambda: [case])
    monkeypatch.setattr(ex, "structure", None)
    check("softmax_long", lesson10.softmax_long)


# ---------------------------------------------------------------- the Gluon forward's records


def test_gluon_records_cover_every_schedule():
    """What lesson 10 prints of the Gluon forward comes from tests/gpu_gluon_check.py's records: each
    recorded GPU ran every schedule that script checks, every check passed, and every timed shape has
    each schedule beside cuDNN (a record of an older kernel, or of a run that failed, would not)."""
    import importlib.util
    import pathlib

    script = pathlib.Path(__file__).resolve().parent / "gpu_gluon_check.py"
    spec = importlib.util.spec_from_file_location("gpu_gluon_check", script)
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    records = lesson10.gluon_recorded()
    assert records, "no GPU has recorded the Gluon forward"
    for gpu, record in records.items():
        checks = record["checks"]
        assert {c["schedule"] for c in checks} == set(gpu_check.SCHEDULES), gpu
        assert all(c["ok"] and c["deterministic"] and c["finite"] for c in checks), gpu
        timed = {"gluon" if s == "plain" else "gluon_" + s.replace("+", "_") for s in gpu_check.SCHEDULES}
        for row in record["timings"]:
            assert "tflops" in row["cudnn"], (gpu, row)
            assert all("vs_cudnn" in row[name] for name in timed), (gpu, sorted(row))


def test_persistent_columns_say_what_lesson_10_reads_in_them():
    """Lesson 10's reading of the persistent schedules, on every recorded GPU (each column over the
    one-block kernel it extends, both against cuDNN in their own runs): with the plain schedule,
    persistence pays at every causal shape, most at D64 N4096, and costs a little at every full one;
    with three consumers it is about even at D = 64 and at best even at D = 128; and at D64 causal
    N4096 no Gluon schedule reaches cuDNN."""
    for gpu, record in lesson10.gluon_recorded().items():
        gains = {}
        for t in record["timings"]:
            shape = (t["D"], t["N"], t["causal"])
            gains[shape] = [t[persistent]["vs_cudnn"] / t[one]["vs_cudnn"] for persistent, one in
                            (("gluon_persistent", "gluon"), ("gluon_three_persistent", "gluon_three"))]
            if shape == (64, 4096, True):
                assert all(v["vs_cudnn"] < 1 for k, v in t.items() if k.startswith("gluon")), (gpu, t)
        causal = {shape: plain for shape, (plain, _) in gains.items() if shape[2]}
        assert min(causal.values()) > 1 and max(causal, key=causal.get) == (64, 4096, True), (gpu, gains)
        assert all(0.9 < plain < 1 for shape, (plain, _) in gains.items() if not shape[2]), (gpu, gains)
        assert all(0.97 < three < 1.04 for shape, (_, three) in gains.items() if shape[0] == 64), (gpu, gains)
        assert all(three <= 1.01 for shape, (_, three) in gains.items() if shape[0] == 128), (gpu, gains)


def test_second_q_buffer_reads_as_lesson_10_says():
    """Lesson 10's reading of `pers 2Q` (two Q buffers over one, timed in the same run), on every recorded
    GPU: a gain at every full-attention shape that brings the plain persistent schedule level with the
    one-block kernel; about even at D128 causal; a loss at D64 causal, most at N16384."""
    for gpu, record in lesson10.gluon_recorded().items():
        over_one, over_block = {}, {}
        for t in record["timings"]:
            shape = (t["D"], t["N"], t["causal"])
            over_one[shape] = t["gluon_persistent_2q"]["vs_cudnn"] / t["gluon_persistent"]["vs_cudnn"]
            over_block[shape] = t["gluon_persistent_2q"]["vs_cudnn"] / t["gluon"]["vs_cudnn"]
        full = [shape for shape in over_one if not shape[2]]
        assert all(1.01 <= over_one[shape] <= 1.06 for shape in full), (gpu, over_one)
        assert all(0.98 <= over_block[shape] <= 1.03 for shape in full), (gpu, over_block)
        assert all(0.97 <= over_one[(128, n, True)] <= 1.02 for n in (4096, 16384)), (gpu, over_one)
        assert over_one[(64, 16384, True)] < over_one[(64, 4096, True)] < 1, (gpu, over_one)


def test_every_gluon_record_has_the_program_cost_lesson_10_fits():
    """Each recorded GPU ran --program-cost: at both head sizes, 8 blocks a SM (as the lesson's waves
    assume), N growing, both kernels timed; and the fit's lines are the lesson's reading of them (the
    Gluon kernel faster per tile, with the larger fixed part)."""
    from helpers.roofline import chip_for

    records = lesson10.gluon_recorded()
    fits = lesson10.program_cost_fits(records)
    assert set(fits) == set(records)
    for gpu, record in records.items():
        rows = record["program_cost"]
        assert {r["D"] for r in rows} == {64, 128}, gpu
        assert {r["programs"] for r in rows} == {8 * chip_for(gpu).sms}, gpu
        for D, by_impl in fits[gpu].items():
            assert by_impl["gluon_three"]["tiles"] == sorted(set(by_impl["gluon_three"]["tiles"]))
            ours, cudnn = by_impl["gluon_three"], by_impl["cudnn"]
            assert ours["tile_us"] < cudnn["tile_us"] and ours["fixed_us"] > cudnn["fixed_us"] > 0, (gpu, D)
            assert 0.5 < by_impl["recorded_causal"] < by_impl["recorded_full"] < 1.5, (gpu, D)


def test_program_cost_fits_recover_a_line():
    """Times made from a known line come back as that line, per wave of one block per SM."""
    sms = 132
    rows = [{"D": 64, "N": 192 * m, "H": 8 * sms // m, "programs": 8 * sms, "tiles": -(-192 * m // 128),
             "gluon_three": 8 * (5.0 + 1.5 * -(-192 * m // 128)) / 1000,
             "cudnn": 8 * (2.0 + 2.0 * -(-192 * m // 128)) / 1000} for m in (2, 4, 8)]
    timings = [{"N": 4096, "D": 64, "causal": c, "cudnn": {"graph_ms": 1.0}, "gluon_three": {"graph_ms": 0.5}}
               for c in (False, True)]
    fit = lesson10.program_cost_fits({"NVIDIA H200": {"program_cost": rows, "timings": timings}})
    ours = fit["NVIDIA H200"][64]["gluon_three"]
    assert ours["fixed_us"] == pytest.approx(5.0) and ours["tile_us"] == pytest.approx(1.5)
    assert ours["at_full"] == pytest.approx(5.0 + 1.5 * 32)
    assert fit["NVIDIA H200"][64]["recorded_causal"] == 2.0


def test_causal_mean_tiles_is_the_last_warpgroups_walk():
    assert lesson10.causal_mean_tiles(192) == 2        # rows 0..191: keys 0..191, two tiles of 128
    assert lesson10.causal_mean_tiles(384) == 2.5      # and rows 192..383: three tiles
    assert lesson10.causal_mean_tiles(100) == 1        # one partial block, one partial tile
