"""Lesson 09: the TMA-fed, persistent and fast matmuls, and `linear` with its epilogues, match their
references; the interpreter's meter tells bytes moved by tensor descriptors from bytes moved through
pointers."""

import pytest
import torch
import triton
import triton.language as tl
from matmul_testing import (
    MATMUL_TOL,
    aligned_view,
    assert_matches,
    check_with_square_blocks,
    double,
    launched_as_in_the_notebook,
    randn,
)

from helpers import DEVICE, ON_GPU
from helpers.exercises.lesson04 import grouped_order_reference  # lesson 04's grouped order, in Python
from helpers.exercises.lesson09 import GROUP_M
from helpers.solutions import load_solution
from helpers.traffic import triton_traffic

lesson09 = load_solution("09")

DTYPES = [torch.float32, torch.float16]


def operands(M, K, N, dtype):
    """a (M, K) and b (K, N) scaled by 1 / sqrt(K): products of order one."""
    return randn(M, K, dtype=dtype), randn(K, N, dtype=dtype, scale=K**-0.5)


# ---------------------------------------------------------------- tma_matmul and persistent_matmul
# Tensor descriptors need 16-byte aligned rows: K and N are multiples of 8 here (float16 and float32).

SHAPES = [
    (1, 40, 24),       # one row; N narrower than a tile
    (37, 72, 40),      # odd M; K over three BLOCK_K steps, the last partial; N cut by C's edge
    (64, 64, 64),      # multiples of the CPU's tiles
    (150, 136, 200),   # several tiles each way
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M, K, N", SHAPES)
def test_tma_matmul(dtype, M, K, N):
    a, b = operands(M, K, N, dtype)
    assert_matches(lesson09.tma_matmul(a, b), a.double() @ b.double(), MATMUL_TOL, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M, K, N", SHAPES)
# programs: one per SM (2 on the CPU), a single one, an odd number, more programs than tiles
@pytest.mark.parametrize("programs", [None, 1, 3, 50])
def test_persistent_matmul(dtype, M, K, N, programs):
    a, b = operands(M, K, N, dtype)
    assert_matches(lesson09.persistent_matmul(a, b, programs), a.double() @ b.double(), MATMUL_TOL, dtype)


@pytest.mark.parametrize("launcher", [lesson09.tma_matmul, lesson09.persistent_matmul])
def test_the_matmuls_say_what_a_tensor_descriptor_needs(launcher):
    with pytest.raises(AssertionError, match="16 bytes"):    # rows of 45 float32: 180 bytes
        launcher(randn(5, 45), randn(45, 8))
    with pytest.raises(AssertionError, match="contiguous"):
        launcher(randn(48, 5).t(), randn(48, 8))
    with pytest.raises(AssertionError, match="share a dtype"):
        launcher(randn(5, 48), randn(48, 8, dtype=torch.float16))
    with pytest.raises(AssertionError, match="takes"):
        launcher(randn(5, 48), randn(40, 8))


def test_the_fast_matmul_says_what_its_descriptors_need():
    """matmul's descriptors are built in the kernel, from its checked operands, output included."""
    with pytest.raises(AssertionError, match="a: its row stride"):     # rows of 45 float32: 180 bytes
        lesson09.matmul(randn(5, 45), randn(45, 8))
    with pytest.raises(AssertionError, match="c's rows"):     # c's rows of 6 float32: 24 bytes
        lesson09.matmul(randn(5, 48), randn(6, 48), b_is_nk=True)
    with pytest.raises(AssertionError, match="inner dimensions"):
        lesson09.matmul(randn(5, 48), randn(40, 8))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("b_is_nk", [False, True])
@pytest.mark.parametrize("scaled", [False, True])
def test_the_fast_matmul_and_its_calls_at_a_key_checked_before(dtype, b_is_nk, scaled):
    """matmul checks a key's first call (dtypes, devices, shapes, strides, alignment) and launches later
    calls at that key as it did (on a GPU, Launcher.bind): fresh operands at the key get their own
    product; a view of the same shape at another row stride is another key; one misaligned is refused."""
    M, K, N = 37, 72, 40
    for call in range(2):
        a = randn(M, K, dtype=dtype)
        b = randn(N, K, dtype=dtype, scale=K**-0.5) if b_is_nk else randn(K, N, dtype=dtype, scale=K**-0.5)
        scale = randn(M).abs() if scaled else None
        expected = a.double() @ (b.double().T if b_is_nk else b.double())
        expected = expected * scale.double()[:, None] if scaled else expected
        assert_matches(lesson09.matmul(a, b, scale, b_is_nk=b_is_nk), expected, MATMUL_TOL, dtype)
    wide = aligned_view(M, K, dtype)    # row stride K + 16: another key
    assert_matches(lesson09.matmul(wide, b, scale, b_is_nk=b_is_nk),
                   lesson09.matmul(wide.contiguous(), b, scale, b_is_nk=b_is_nk).double(), MATMUL_TOL, dtype)
    shifted = randn(M * K + 1, dtype=dtype)[1:].view(M, K)   # a's shape and strides, its start shifted
    with pytest.raises(AssertionError, match="a: its row stride"):
        lesson09.matmul(shifted, b, scale, b_is_nk=b_is_nk)


@pytest.mark.skipif(not ON_GPU, reason="the descriptors' scratch memory is allocated on a GPU")
def test_the_descriptor_scratch_is_two_buffers_per_stream_taken_in_turn_handed_over_as_addresses():
    """Two, for programmatic dependent launch: a launch may write its descriptors while the one before
    it still reads its own."""
    stream = torch.cuda.current_stream().cuda_stream
    first = lesson09._descriptor_scratch(1024, 128, stream)
    second = lesson09._descriptor_scratch(512, 128, stream)
    assert isinstance(first, int) and isinstance(second, int) and first != second
    assert lesson09._descriptor_scratch(512, 128, stream) == first       # then the first again
    buffers, _ = lesson09._scratch[stream]
    assert {first, second} == {b.data_ptr() for b in buffers} and first % 128 == second % 128 == 0
    size = buffers[0].numel()
    larger = lesson09._descriptor_scratch(size + 1, 128, stream)   # outgrown: new buffers
    buffers, _ = lesson09._scratch[stream]
    assert buffers[0].numel() > size and larger in {b.data_ptr() for b in buffers}


@pytest.mark.skipif(not ON_GPU, reason="programmatic dependent launch needs a GPU")
def test_back_to_back_matmuls_with_pdl_each_read_the_last_ones_result():
    """With PDL a launch starts before the one it follows has finished: a chain y = y @ w of launches
    back to back (no wait between them, each output an input of the next, outputs freed and reused)
    must equal the same chain waited out launch by launch, bit for bit."""
    assert lesson09.PDL
    w = torch.randn(512, 512, device=DEVICE, dtype=torch.float16) / 512**0.5
    start = torch.randn(512, 512, device=DEVICE, dtype=torch.float16)
    results = []
    for wait in (False, True):
        y = start
        for _ in range(30):
            y = lesson09.matmul(y, w)
            if wait:
                torch.cuda.synchronize()
        results.append(y)
    torch.cuda.synchronize()
    assert torch.isfinite(results[1]).all() and torch.equal(results[0], results[1])


def test_tma_matmul_runs_one_program_per_tile_in_grouped_order():
    from helpers import interpreter

    BM, BN, _ = lesson09.TMA_TILE
    M, K, N = 9 * BM + 3, 40, 3 * BN + 8         # 10 x 4 tiles: a full group of 8 rows and a partial one
    a, b = operands(M, K, N, torch.float32)
    with interpreter.record(touches=True) as rec:
        lesson09.tma_matmul(a, b)
    (launch,) = rec.launches
    tiles_m, tiles_n = triton.cdiv(M, BM), triton.cdiv(N, BN)
    assert launch.grid == (tiles_m * tiles_n,)
    for pid, _name, kind, offs in launch.touches:
        if kind == "store":
            first = int(offs.min())
            want = grouped_order_reference(pid[0], tiles_m, tiles_n, GROUP_M)
            assert (first // N // BM, first % N // BN) == want


def test_a_persistent_launch_has_the_programs_it_is_given_and_stores_each_tile_once():
    a, b = operands(150, 40, 136, torch.float32)    # 5 x 5 tiles of 32 on the CPU
    traffic = triton_traffic(lesson09.persistent_matmul, a, b, 3)
    (launch,) = traffic.launches
    assert launch.grid == (3,)
    assert launch.bytes_stored == 150 * 136 * 4


# ---------------------------------------------------------------- the descriptor meter


def test_the_meter_counts_every_byte_of_tma_matmul_as_moved_by_descriptor():
    M, K, N = 37, 72, 40
    a, b = operands(M, K, N, torch.float32)
    BM, BN, _ = lesson09.TMA_TILE
    (launch,) = triton_traffic(lesson09.tma_matmul, a, b).launches
    # each row of tiles reads all of B, each column of tiles all of A; zeros past the edges are not loaded
    rows, cols = triton.cdiv(M, BM), triton.cdiv(N, BN)
    assert launch.bytes_loaded == a.nbytes * cols + b.nbytes * rows
    assert launch.descriptor_bytes_loaded == launch.bytes_loaded
    assert launch.bytes_stored == launch.descriptor_bytes_stored == M * N * 4


def test_the_meter_counts_nothing_as_moved_by_descriptor_in_a_pointer_kernel():
    a, b = operands(37, 72, 40, torch.float32)
    lesson04 = load_solution("04")
    lesson04.matmul(a, b)    # on a GPU the autotuner times its configurations here, not below
    (launch,) = triton_traffic(lesson04.matmul, a, b).launches
    assert launch.bytes_loaded >= a.nbytes + b.nbytes and launch.bytes_stored == 37 * 40 * 4
    assert launch.descriptor_bytes_loaded == launch.descriptor_bytes_stored == 0


@triton.jit
def _scale_rows_kernel(x_ptr, out_ptr, s_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """out = x * s[:, None]: x loaded by a descriptor built here, s through pointers, out stored by one."""
    off_m, off_n = tl.program_id(0) * BLOCK_M, tl.program_id(1) * BLOCK_N
    x_desc = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    out_desc = tl.make_tensor_descriptor(out_ptr, shape=[M, N], strides=[N, 1],
                                         block_shape=[BLOCK_M, BLOCK_N])
    rows = off_m + tl.arange(0, BLOCK_M)
    s = tl.load(s_ptr + rows, mask=rows < M, other=0.0)
    out_desc.store([off_m, off_n], x_desc.load([off_m, off_n]) * s[:, None])


def test_the_meter_tells_descriptor_bytes_from_pointer_bytes_in_one_launch():
    M, N = 37, 40
    x, s = randn(M, N), randn(M)
    out = torch.empty_like(x)
    grid = (triton.cdiv(M, 16), triton.cdiv(N, 16))
    traffic = triton_traffic(lambda: _scale_rows_kernel[grid](x, out, s, M, N, BLOCK_M=16, BLOCK_N=16))
    torch.testing.assert_close(out, x * s[:, None])
    (launch,) = traffic.launches
    assert launch.descriptor_bytes_loaded == x.nbytes                 # every tile of x once
    assert launch.bytes_loaded - launch.descriptor_bytes_loaded == s.nbytes * grid[1]   # s once per column
    assert launch.bytes_stored == launch.descriptor_bytes_stored == out.nbytes



# ---------------------------------------------------------------- linear: the epilogues
# Tensor descriptors need 16-byte aligned rows: K and N are multiples of 8 (float16) here, and the
# strided cases are column slices of wider, aligned matrices.


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



@pytest.mark.parametrize("name", ["tma_matmul", "persistent_matmul", "linear"])
def test_the_solutions_pass_their_exercise_checks(name):
    from helpers import check

    check(name, getattr(lesson09, name))


@pytest.mark.parametrize("name, kernel, swapped", [
    ("tma_matmul", "tma_matmul_kernel", ("pid_n * BLOCK_N\n    acc = tl.zeros((BLOCK_M, BLOCK_N)",
                                         "pid_n * BLOCK_M\n    acc = tl.zeros((BLOCK_M, BLOCK_N)")),
    ("persistent_matmul", "persistent_matmul_kernel", ("tl.cdiv(N, BLOCK_N)\n    for tile in range(",
                                                       "tl.cdiv(N, BLOCK_M)\n    for tile in range("))])
def test_where_the_lessons_tile_is_square_a_block_mix_up_is_still_caught(name, kernel, swapped, monkeypatch):
    """A GPU's TMA_TILE is 128 x 128: BLOCK_M used for BLOCK_N gives every case right there. With the
    CPU's tile made square the same way, the check's extra product with unequal blocks still rejects
    such a kernel, and accepts the right one (the tile is the lesson's again after either)."""
    from mutants import edit

    from helpers import check
    from helpers.check import CheckFailed

    bm, _, bk = lesson09.TMA_TILE
    monkeypatch.setattr(lesson09, "TMA_TILE", (bm, bm, bk))
    monkeypatch.setenv("COURSE_ISOLATE", "0")   # in this process, where the tile is set
    check(name, launched_as_in_the_notebook(getattr(lesson09, kernel), name == "persistent_matmul"))
    with pytest.raises(CheckFailed, match="BLOCK_M and BLOCK_N are equal there"):
        check(name, launched_as_in_the_notebook(edit("09", kernel, swapped), name == "persistent_matmul"))
    assert lesson09.TMA_TILE == (bm, bm, bk)


@pytest.mark.parametrize("mix_up", [
    None,
    ("1 / rms\n            rows = off_m + tl.arange(0, BLOCK_M)",
     "1 / rms\n            rows = off_m + tl.arange(0, BLOCK_N)"),
    ("n_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)",
     "n_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_M)"),
    ("block_shape=[BLOCK_M, BLOCK_N])\n    if HAS_RESIDUAL:",
     "block_shape=[BLOCK_N, BLOCK_M])\n    if HAS_RESIDUAL:")])
def test_where_linears_autotuner_has_only_square_tiles_a_block_mix_up_is_still_caught(mix_up, monkeypatch):
    """On a GPU linear's autotuner may choose a square tile for every case: the check's extra product
    with 32 x 64 x 16 tiles still rejects a kernel that mixes up BLOCK_M and BLOCK_N."""
    from mutants import edit

    linear = edit("09", "linear", *([mix_up] if mix_up else []))
    check_with_square_blocks("linear", linear, "linear_kernel", mix_up is not None, monkeypatch)


def test_the_exercise_cases_keep_rows_aligned():
    from helpers.exercises import lesson09 as spec

    for case in spec._tma_cases() + spec._persistent_cases() + spec._linear_cases():
        for t in (case.args[i] for i in (0, 1, 3) if i < len(case.args)):
            if isinstance(t, torch.Tensor) and t.dim() == 2:
                assert t.stride(0) * t.element_size() % 16 == 0, case.label
                assert t.data_ptr() % 16 == 0, case.label


def test_the_linear_cases_reach_the_edges():
    from helpers.exercises import lesson09 as spec

    cases = spec._linear_cases()
    epilogues = {(case.args[2] is not None, case.args[3] is not None) for case in cases}
    assert {(True, False), (False, True), (True, True)} <= epilogues
    assert any(case.args[3] is not None and case.args[3].stride(0) != case.args[3].shape[1]
               and case.args[0].stride(0) != case.args[0].shape[1] for case in cases)   # views
    assert any(case.args[2] is not None and (case.args[2] < 0).any() for case in cases)  # both signs
    assert {case.args[0].dtype for case in cases} == {torch.float32, torch.float16}
    big = [case for case in cases if "large magnitude" in case.label]
    (h, w, s, r), = (case.args for case in big)
    product = s.double()[:, None] * (h.double() @ w.double().T)
    assert product.abs().max() > 65504 and (product + r.double()).abs().max() < 65504


# ---------------------------------------------------------------- helpers.compiled


class _Compiled:
    """What compiled_excerpt reads of a compiled kernel."""

    n_regs, n_spills = 40, 0

    class metadata:
        shared = 1024

    asm = {"ttgir": "%1 = ttng.warp_group_dot %a, %b\nscf.for %i = ... {tt.warp_specialize}",
           "ptx": "@%p17 cp.async.ca.shared.global [%r1], [%rd2], 16;\n"
                  "@%p3 red.global.add.f32 [%rd4], %f1;\nld.global.nc.v4.u32 {%r1}, [%rd5];"}


def test_compiled_excerpt_matches_whole_names_not_substrings():
    from helpers.compiled import compiled_excerpt

    text = compiled_excerpt(_Compiled(), {"ttgir": ("warp_group_dot", "ttg.warp_specialize"),
                                          "ptx": ("red.global", "ld.global", "cp.async")})
    lines = dict(line.split(" [", 1) for line in text.splitlines()[1:] if not line.startswith("---"))
    assert lines["red.global"].startswith("1]: @%p3 red.global.add.f32")   # not cp.async.ca.shared.global
    assert lines["ld.global"].startswith("1]: ld.global.nc")                # a name's qualifiers may follow
    assert lines["cp.async"].startswith("1]: @%p17 cp.async.ca")
    assert lines["warp_group_dot"].startswith("1]: %1 = ttng.warp_group_dot")   # after a dialect prefix
    assert lines["ttg.warp_specialize"].startswith("0]")     # the attribute tt.warp_specialize is not the op


class _Kernel:
    """An autotuner's stand-in: .fn.warmup(...) returns a compiled kernel whose ttgir is `ttgir`."""

    def __init__(self, ttgir):
        compiled = type("Compiled", (), {"asm": {"ttgir": ttgir}})()
        self.fn = type("Fn", (), {"__name__": "fake_kernel", "warmup": lambda *a, **k: compiled})()


@pytest.mark.parametrize("ttgir, specialised", [
    ("ttg.warp_specialize(%a) default {\n} partition0(%b) num_warps(1) {\n}", True),
    ("scf.for %i = %c0 to %n step %c1 {\n} {tt.warp_specialize}", False),   # asked for, not granted
])
def test_try_compile_tells_a_granted_warp_specialisation_from_a_request(ttgir, specialised):
    config = triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "FLATTEN": False, "WARP_SPECIALIZE": True},
                           num_warps=8, num_stages=3)
    row = lesson09.try_compile(_Kernel(ttgir), {}, config, epilogue="none")
    assert row["compiles"] and row["specialised"] is specialised
    assert "warp_specialize=True" in row["config"]


# ---------------------------------------------------------------- what make bench recorded on GPUs

RECORDED = lesson09.recorded()


def test_recordings_exist():
    assert RECORDED, "nothing recorded: `make bench LESSON=09` on a Hopper GPU records it"


@pytest.mark.parametrize("gpu", sorted(RECORDED))
def test_each_gpu_recorded_the_compiled_code_the_survey_and_the_autotuner(gpu):
    record = RECORDED[gpu]
    assert set(record["compiled"]) == {"matmul_kernel"}
    assert {r["kernel"] for r in record["warp_specialize"]} <= {"matmul_kernel", "linear_kernel"}
    assert {r["timing"] for r in record["autotune_stability"]} == set(lesson09.STABILITY_TIMINGS)
    if "launch_against_flush" in record:     # recorded since the lesson weighs host time against the flush
        flush = record["launch_against_flush"]
        assert flush["flush_us"] > 0 and set(flush["timed_us"]) == {"launched from Python", "graph replays"}
