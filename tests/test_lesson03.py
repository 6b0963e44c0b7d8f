"""Lesson 03: the solutions pass their checks, typical mistakes fail them, and the roofline helper works."""

import statistics

import matplotlib
import pytest
import torch
from mutants.lesson03 import WRONG, evicting, fixed_counts, one_shot, timer  # the mutation suite's answers

from helpers import DEVICE, check
from helpers.check import CheckFailed
from helpers.exercises.lesson03 import OPERATIONS, SimulatedGPU
from helpers.roofline import CHIPS, Point, chip_for, plot
from helpers.solutions import load_solution
from helpers.traffic import triton_traffic

matplotlib.use("Agg")
lesson03 = load_solution("03")


@pytest.mark.parametrize("name", ["matmul_cost", "roofline", "ridge_predictions", "time_ms"])
def test_solutions_pass(name):
    check(name, getattr(lesson03, name))


def test_matmul_cost_without_the_output_fails():
    def reads_only(M, N, K, dtype):
        itemsize = torch.empty((), dtype=dtype).element_size()
        return {"flops": 2 * M * N * K, "bytes": (M * K + K * N) * itemsize}
    with pytest.raises(CheckFailed, match="The bytes leave out one of the three matrices"):
        check("matmul_cost", reads_only)


def test_matmul_cost_counting_multiply_adds_as_one_fails():
    def one_flop(M, N, K, dtype):
        return {"flops": M * N * K, "bytes": lesson03.matmul_cost(M, N, K, dtype)["bytes"]}
    with pytest.raises(CheckFailed, match="The FLOPs are half the right count"):
        check("matmul_cost", one_flop)


def test_roofline_with_the_ridge_upside_down_fails():
    def upside_down(flops, nbytes, peak, bw):
        out = lesson03.roofline(flops, nbytes, peak, bw)
        out["bound"] = "compute" if out["bound"] == "memory" else "memory"
        return out
    with pytest.raises(CheckFailed, match="bound"):
        check("roofline", upside_down)


@pytest.mark.parametrize("why, message", [
    ("bytes counted as elements (no itemsize)", "equal the number of elements moved"),
    ("a multiply-add counted as one FLOP", "FLOPs are half the right count"),
    ("the output C left out of the bytes", "leave out one of the three matrices"),
    ("itemsize hard-coded to 2 (float16)", "count 2 per element"),
    ("bits, not bytes", "counted in bits"),
    ("bytes of B counted as M*N instead of K*N", r"The bytes \(\d+\) are not those of A"),
    ("the exact count: K multiplies and K - 1 additions per dot product", "count K - 1 additions"),
    ("C read as well as written", "plus C counted at another size"),
    ("C counted at float32's size (the accumulator's)", "plus C counted at another size"),
    ("the counts returned as 0-d tensors", "a plain Python number"),
    ("intensity by floor division (flops // nbytes)", "floor-divided by the bytes"),
    ("ridge compared the wrong way round", "The bound is on the wrong side"),
    ("memory-bound up to the ridge included (<= instead of <)", "wrong on the ridge itself"),
    ("intensity inverted (bytes / FLOPs)", "The intensity is bytes per FLOP"),
    ("the roof not capped at the peak", "The roof is above the peak"),
    ("the roof always the peak", "The roof is the peak, but"),
    ("the roof in GFLOP/s (TB/s taken as 1000 GB/s)", "a factor of 1e\\+03, a unit slip"),
    ("ridge taken as bandwidth / peak", "The bound is on the wrong side"),
])
def test_cost_and_roofline_messages_name_the_part_at_fault(why, message):
    """Each part of the answer is compared with the right one: a unit is blamed only for a unit slip."""
    (wrong,) = [w for w in WRONG if w.why == why]
    with pytest.raises(CheckFailed, match=message) as caught:
        check(wrong.exercise, wrong.fn)
    text = str(caught.value)
    assert ("unit" in text) == ("1000" in why), text
    assert "expected" not in text, text  # the right numbers are not given away


def test_a_roofline_answer_with_a_missing_key_is_told_the_keys():
    with pytest.raises(CheckFailed, match="exactly the keys 'intensity', 'bound', 'tflops'"):
        check("roofline", lambda flops, nbytes, peak, bw: {"intensity": flops / nbytes})


def test_ridge_predictions_all_memory_says_how_many_not_which():
    with pytest.raises(CheckFailed, match="3 of the 10 predictions are wrong") as caught:
        check("ridge_predictions", lambda: {name: "memory" for name in OPERATIONS})
    assert not any(name in str(caught.value) for name in OPERATIONS)  # naming one would give it away


@pytest.mark.parametrize("answers, message", [
    ({**{name: "memory" for name in OPERATIONS}, "matmul_4k": "compute"}, "'matmul_4k' is not a key"),
    ({name: "memory" for name in list(OPERATIONS)[:-1]}, "no prediction for 'polynomial_degree_100'"),
    ({name: "Memory" for name in OPERATIONS}, "the string 'memory' or 'compute'"),
    ({name: True for name in OPERATIONS}, "the string 'memory' or 'compute'"),
    (["memory"] * 10, "return a dict"),
])
def test_ridge_predictions_badly_formed(answers, message):
    with pytest.raises(CheckFailed, match=message):
        check("ridge_predictions", lambda: answers)


@pytest.mark.parametrize("mistake, message", [
    (timer(warmup=False), "first launch compiles"),  # the median alone would hide it
    (one_shot, "first launch compiles"),
    (timer(sync=False), r"after each timed launch, before reading the clock"),
    (timer(rotate=False), "still in the cache"),
    (timer(combine=statistics.mean), "the mean of its runs"),
    (timer(combine=sum), "the total of its 50 runs"),
    (timer(scale=1), "a time in seconds"),
    (timer(scale=1e6), "a time in microseconds"),
    (timer(per_run=False), "timed together"),
    (timer(combine=min), "the time of its fastest run"),
    (timer(warmup_sync=False), "after the warm-up and after each timed launch"),
    (fixed_counts, "not a number written into the timer"),
], ids=["no warm-up", "one shot", "no sync", "one buffer", "mean", "sum", "seconds", "microseconds",
        "one reading around all runs", "fastest run", "no sync after the warm-up", "reps ignored"])
def test_each_timing_mistake_gets_its_own_message(mistake, message):
    with pytest.raises(CheckFailed, match=message) as caught:
        check("time_ms", mistake)
    told_to_warm_up = "warm-up launches" in str(caught.value)
    assert told_to_warm_up == (message == "first launch compiles"), str(caught.value)


def test_cached_launches_outside_the_figure_are_not_blamed():
    # an untimed launch on another input before each timed run: with two inputs, those launches are the
    # cached ones, and the timed runs never are
    check("time_ms", evicting)
    with pytest.raises(CheckFailed, match="still in the cache"):
        check("time_ms", timer(rotate=False))


def test_simulated_gpu_is_asynchronous_and_caches():
    gpu = SimulatedGPU(kernel_ms=1.0, seed=0, slow_fraction=0.0)
    buffers = gpu.buffers(2)
    gpu.launch(buffers[0])
    gpu.synchronize()
    start = gpu.clock()
    gpu.launch(buffers[1])
    assert gpu.clock() - start < 1e-4            # the launch returns at once
    gpu.synchronize()
    cold = gpu.clock() - start
    start = gpu.clock()
    gpu.launch(buffers[1])
    gpu.synchronize()
    hot = gpu.clock() - start
    assert 0.85e-3 < cold < 1.2e-3 and hot < cold / 2
    assert not gpu.compiled_after_clock and gpu.busy_reads == 1  # the reading right after a launch
    assert len(gpu.runs_ms) == 2 and gpu.run_hit_cache == [False, True]


def test_simulated_gpu_notes_a_compile_inside_the_timing():
    gpu = SimulatedGPU(kernel_ms=1.0, seed=0)
    start = gpu.clock()
    gpu.launch(gpu.buffers(1)[0])
    gpu.synchronize()
    assert gpu.clock() - start > 0.4 and gpu.compiled_after_clock


def test_rowwise_matmul_is_right_and_moves_what_the_formula_says():
    M, N, K = 9, 40, 24  # N and K not multiples of the blocks
    a = torch.randn(M, K, device=DEVICE, dtype=torch.float16)
    b = torch.randn(K, N, device=DEVICE, dtype=torch.float16)
    out = lesson03.rowwise_matmul(a, b, BLOCK_N=32, BLOCK_K=16)
    torch.testing.assert_close(out.float(), a.float() @ b.float(), atol=2e-2, rtol=1e-2)
    meter = triton_traffic(lesson03.rowwise_matmul, a, b, BLOCK_N=32, BLOCK_K=16)
    strips = -(-N // 32)
    assert meter.bytes == 2 * (M * K * strips + M * K * N + M * N)


def test_roofline_helper():
    h100 = CHIPS["H100 SXM"]
    assert round(h100.ridge("fp16")) == 295 and round(h100.ridge("fp32")) == 20
    assert h100.attainable(1.0) == pytest.approx(3.35)
    assert chip_for("NVIDIA H100 80GB HBM3") is h100 and chip_for("NVIDIA H200") is CHIPS["H200"]
    assert chip_for("NVIDIA GeForce RTX 4090") is None
    ax = plot([Point("timed", 2 * 4096**3, 6 * 4096**2, ms=0.3), Point("untimed", 1e6, 1.2e7)])
    assert len(ax.get_legend().get_texts()) >= 4
