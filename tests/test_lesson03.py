"""Lesson 03: the solutions pass their checks, typical mistakes fail them, and the roofline helper works."""

import statistics

import matplotlib
import pytest
import torch

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
    with pytest.raises(CheckFailed, match="bytes"):
        check("matmul_cost", reads_only)


def test_matmul_cost_counting_multiply_adds_as_one_fails():
    def one_flop(M, N, K, dtype):
        return {"flops": M * N * K, "bytes": lesson03.matmul_cost(M, N, K, dtype)["bytes"]}
    with pytest.raises(CheckFailed, match="flops"):
        check("matmul_cost", one_flop)


def test_roofline_with_the_ridge_upside_down_fails():
    def upside_down(flops, nbytes, peak, bw):
        out = lesson03.roofline(flops, nbytes, peak, bw)
        out["bound"] = "compute" if out["bound"] == "memory" else "memory"
        return out
    with pytest.raises(CheckFailed, match="bound"):
        check("roofline", upside_down)


def test_ridge_predictions_all_memory_fails():
    with pytest.raises(CheckFailed, match="expected 'compute'"):
        check("ridge_predictions", lambda: {name: "memory" for name in OPERATIONS})


def timer(sync=True, rotate=True, aggregate=statistics.median, per_run=True):
    """A timer with one of the usual mistakes switched on."""
    def time_ms(launch, inputs, clock, synchronize, warmup=5, reps=50):
        for i in range(warmup):
            launch(inputs[i % len(inputs)])
        synchronize()
        if not per_run:  # one total over all runs
            start = clock()
            for i in range(reps):
                launch(inputs[i % len(inputs)])
            synchronize()
            return (clock() - start) / reps * 1e3
        times = []
        for i in range(reps):
            start = clock()
            launch(inputs[i % len(inputs)] if rotate else inputs[0])
            if sync:
                synchronize()
            times.append(clock() - start)
        return aggregate(times) * 1e3
    return time_ms


@pytest.mark.parametrize("mistake, message", [
    (timer(sync=False), "synchronize"),
    (timer(rotate=False), "cache"),
    (timer(aggregate=statistics.mean), "median"),
    (timer(per_run=False), "reading"),
])
def test_timing_mistakes_fail(mistake, message):
    with pytest.raises(CheckFailed, match=message):
        check("time_ms", mistake)


def test_one_shot_timer_fails():
    def one_shot(launch, inputs, clock, synchronize, warmup=5, reps=50):
        start = clock()
        launch(inputs[0])
        synchronize()
        return (clock() - start) * 1e3
    with pytest.raises(CheckFailed, match="compiles|reading"):
        check("time_ms", one_shot)


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
