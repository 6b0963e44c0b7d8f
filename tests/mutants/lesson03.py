"""Lesson 03: matmul_cost, roofline, ridge_predictions and time_ms."""

import random
import statistics

import torch

from helpers.roofline import CHIPS
from mutants import Right, Wrong, edit

# ---------------------------------------------------------------- matmul_cost


def _itemsize(dtype):
    return torch.finfo(dtype).bits // 8


WRONG = [
    Wrong("matmul_cost", "bytes counted as elements (no itemsize)", edit(
        "03", "matmul_cost", ('"bytes": (M * K + K * N + M * N) * itemsize}', '"bytes": M * K + K * N + M * N}'))),
    Wrong("matmul_cost", "a multiply-add counted as one FLOP", edit(
        "03", "matmul_cost", ('"flops": 2 * M * N * K,', '"flops": M * N * K,'))),
    Wrong("matmul_cost", "the output C left out of the bytes", edit(
        "03", "matmul_cost", ("(M * K + K * N + M * N) * itemsize", "(M * K + K * N) * itemsize"))),
    Wrong("matmul_cost", "itemsize hard-coded to 2 (float16)", edit(
        "03", "matmul_cost", ("itemsize = torch.empty((), dtype=dtype).element_size()", "itemsize = 2"))),
    Wrong("matmul_cost", "bits, not bytes", edit(
        "03", "matmul_cost", ('"bytes": (M * K + K * N + M * N) * itemsize}', '"bytes": (M * K + K * N + M * N) * itemsize * 8}'))),
    Wrong("matmul_cost", "the exact count: K multiplies and K - 1 additions per dot product", edit(
        "03", "matmul_cost", ('"flops": 2 * M * N * K,', '"flops": M * N * (2 * K - 1),'))),
    Wrong("matmul_cost", "C read as well as written", edit(
        "03", "matmul_cost", ("(M * K + K * N + M * N) * itemsize", "(M * K + K * N + 2 * M * N) * itemsize"))),
    Wrong("matmul_cost", "C counted at float32's size (the accumulator's)", edit(
        "03", "matmul_cost", ("(M * K + K * N + M * N) * itemsize", "(M * K + K * N) * itemsize + M * N * 4"))),
    Wrong("matmul_cost", "the counts returned as 0-d tensors", lambda M, N, K, dtype: {
        "flops": torch.tensor(2 * M * N * K), "bytes": torch.tensor((M * K + K * N + M * N) * _itemsize(dtype))}),
    Wrong("matmul_cost", "bytes of B counted as M*N instead of K*N", edit(
        "03", "matmul_cost", ("(M * K + K * N + M * N) * itemsize", "(M * K + M * N + M * N) * itemsize"))),
]

# ---------------------------------------------------------------- roofline

WRONG += [
    Wrong("roofline", "ridge compared the wrong way round", edit(
        "03", "roofline", ('"bound": "memory" if intensity < ridge else "compute"',
                           '"bound": "compute" if intensity < ridge else "memory"'))),
    Wrong("roofline", "memory-bound up to the ridge included (<= instead of <)", edit(
        "03", "roofline", ('"bound": "memory" if intensity < ridge else "compute"',
                           '"bound": "memory" if intensity <= ridge else "compute"'))),
    Wrong("roofline", "intensity inverted (bytes / FLOPs)", edit(
        "03", "roofline", ("intensity = flops / nbytes", "intensity = nbytes / flops"))),
    Wrong("roofline", "the roof not capped at the peak", edit(
        "03", "roofline", ('"tflops": min(peak_tflops, intensity * bandwidth_tbs)}',
                           '"tflops": intensity * bandwidth_tbs}'))),
    Wrong("roofline", "the roof always the peak", edit(
        "03", "roofline", ('"tflops": min(peak_tflops, intensity * bandwidth_tbs)}', '"tflops": peak_tflops}'))),
    Wrong("roofline", "the roof in GFLOP/s (TB/s taken as 1000 GB/s)", edit(
        "03", "roofline", ('"tflops": min(peak_tflops, intensity * bandwidth_tbs)}',
                           '"tflops": min(peak_tflops, intensity * bandwidth_tbs) * 1000}'))),
    Wrong("roofline", "intensity by floor division (flops // nbytes)", edit(
        "03", "roofline", ("intensity = flops / nbytes", "intensity = flops // nbytes"))),
    Wrong("roofline", "ridge taken as bandwidth / peak", edit(
        "03", "roofline", ("ridge = peak_tflops / bandwidth_tbs", "ridge = bandwidth_tbs / peak_tflops"))),
]


def roofline_by_time(flops, nbytes, peak_tflops, bandwidth_tbs):
    """The roof as FLOPs over the longer of the two times: the same answer, reached another way."""
    compute_s, memory_s = flops / (peak_tflops * 1e12), nbytes / (bandwidth_tbs * 1e12)
    return {"intensity": flops / nbytes, "bound": "memory" if memory_s > compute_s else "compute",
            "tflops": flops / max(compute_s, memory_s) / 1e12}


# ---------------------------------------------------------------- ridge_predictions

_KEYS = ["vector_add_fp32", "softmax_fp32", "matmul_4096", "matmul_512", "gemv_8192", "matmul_16_tokens",
         "matmul_k64", "projection_16384_tokens", "attention_scores", "polynomial_degree_100"]


def _mm(M, N, K, with_output=True):
    return 2 * M * N * K, 2 * (M * K + K * N + (M * N if with_output else 0))


def _predict(with_output=True, matmul_ridge="fp16", elementwise_ridge="fp32"):
    """Predictions worked out from counted FLOPs and bytes, with the chosen slips."""
    chip = CHIPS["H100 SXM"]
    n = 2**24
    costs = {"vector_add_fp32": (n, 12 * n, elementwise_ridge),
             "softmax_fp32": (5 * 4096**2, 8 * 4096**2, elementwise_ridge),
             "polynomial_degree_100": (200 * n, 8 * n, elementwise_ridge)}
    for key, (M, N, K) in {"matmul_4096": (4096, 4096, 4096), "matmul_512": (512, 512, 512),
                           "gemv_8192": (8192, 1, 8192), "matmul_16_tokens": (16, 8192, 8192),
                           "matmul_k64": (8192, 8192, 64), "projection_16384_tokens": (16384, 4096, 4096),
                           "attention_scores": (4096, 4096, 128)}.items():
        costs[key] = (*_mm(M, N, K, with_output), matmul_ridge)
    return lambda: {key: "memory" if f / b < chip.ridge(p) else "compute" for key, (f, b, p) in costs.items()}


WRONG += [
    Wrong("ridge_predictions", "memory everywhere", lambda: {key: "memory" for key in _KEYS}),
    Wrong("ridge_predictions", "compute everywhere", lambda: {key: "compute" for key in _KEYS}),
    Wrong("ridge_predictions", "the outputs left out of the bytes", _predict(with_output=False)),
    Wrong("ridge_predictions", "the fp32 ridge used for the matmuls", _predict(matmul_ridge="fp32")),
    Wrong("ridge_predictions", "the fp16 ridge used for elementwise work", _predict(elementwise_ridge="fp16")),
    Wrong("ridge_predictions", "one key missing", lambda: {key: "memory" for key in _KEYS[1:]}),
    Wrong("ridge_predictions", "answers spelled 'memory-bound'", lambda: {key: "memory-bound" for key in _KEYS}),
]

# ---------------------------------------------------------------- time_ms


def timer(warmup=True, sync=True, rotate=True, per_run=True, combine=statistics.median, scale=1e3,
          warmup_sync=True):
    """A timer with one of the usual mistakes switched on."""
    def time_ms(launch, inputs, clock, synchronize, warmup_runs=5, reps=50):
        if warmup:
            for i in range(warmup_runs):
                launch(inputs[i % len(inputs)])
            if warmup_sync:
                synchronize()
        if not per_run:  # one reading before and after all runs
            start = clock()
            for i in range(reps):
                launch(inputs[i % len(inputs)])
            synchronize()
            return (clock() - start) / reps * scale
        times = []
        for i in range(warmup_runs, warmup_runs + reps):
            start = clock()
            launch(inputs[i % len(inputs)] if rotate else inputs[0])
            if sync:
                synchronize()
            times.append(clock() - start)
        return combine(times) * scale
    return time_ms


def random_pick(launch, inputs, clock, synchronize, warmup=5, reps=50):
    """Each timed run on an input picked at random: one run in len(inputs) repeats the input before it,
    which the cache serves; with 3 or 4 inputs the median stays within 10% of the kernel's time."""
    rng = random.Random(0)
    for i in range(warmup):
        launch(inputs[i % len(inputs)])
    synchronize()
    times = []
    for _ in range(reps):
        x = rng.choice(inputs)
        start = clock()
        launch(x)
        synchronize()
        times.append(clock() - start)
    return statistics.median(times) * 1e3


def warmup_within_reps(launch, inputs, clock, synchronize, warmup=5, reps=50):
    """`reps` taken as all the launches, the warm-up among them: reps - warmup timed runs."""
    times = []
    for i in range(reps):
        x = inputs[i % len(inputs)]
        if i < warmup:
            launch(x)
            if i == warmup - 1:
                synchronize()
            continue
        start = clock()
        launch(x)
        synchronize()
        times.append(clock() - start)
    return statistics.median(times) * 1e3


def one_shot(launch, inputs, clock, synchronize, warmup=5, reps=50):
    """The timer everyone writes first: one run, no warm-up."""
    start = clock()
    launch(inputs[0])
    synchronize()
    return (clock() - start) * 1e3


def discard_warmup_times(launch, inputs, clock, synchronize, warmup=5, reps=50):
    """Times every launch, the compiling one too, and drops the first `warmup` times from the median."""
    times = []
    for i in range(warmup + reps):
        start = clock()
        launch(inputs[i % len(inputs)])
        synchronize()
        times.append(clock() - start)
    return statistics.median(times[warmup:]) * 1e3


def boundary_timer(launch, inputs, clock, synchronize, warmup=3, reps=31):
    """One clock reading per run boundary, the middle element of the sorted times."""
    for x in inputs[:warmup]:
        launch(x)
    synchronize()
    marks = [clock()]
    for i in range(reps):
        launch(inputs[(warmup + i) % len(inputs)])
        synchronize()
        marks.append(clock())
    times = sorted(b - a for a, b in zip(marks, marks[1:]))
    return times[len(times) // 2] * 1000


def fixed_counts(launch, inputs, clock, synchronize, warmup=5, reps=50):
    """The defaults written into the loops: 5 warm-up launches and 50 timed runs, whatever is asked."""
    return timer()(launch, inputs, clock, synchronize)


def evicting(launch, inputs, clock, synchronize, warmup=5, reps=50):
    """Before each timed run, an untimed launch on another input leaves that one in the cache instead (the
    lesson's other way: flush the cache before each run)."""
    for i in range(warmup):
        launch(inputs[i % len(inputs)])
    synchronize()
    times = []
    for i in range(reps):
        launch(inputs[(i + 1) % len(inputs)])
        synchronize()
        start = clock()
        launch(inputs[i % len(inputs)])
        synchronize()
        times.append(clock() - start)
    return statistics.median(times) * 1e3


WRONG += [
    Wrong("time_ms", "warmup and reps written in as 5 and 50 (the arguments ignored)", fixed_counts),
    Wrong("time_ms", "no warm-up (the median hides the compile)", timer(warmup=False)),
    Wrong("time_ms", "no synchronize", timer(sync=False)),
    Wrong("time_ms", "the sum of the runs", timer(combine=sum)),
    Wrong("time_ms", "the mean of the runs", timer(combine=statistics.mean)),
    Wrong("time_ms", "the fastest run (within 10% of the kernel's time)", timer(combine=min)),
    Wrong("time_ms", "no synchronize after the warm-up (the median hides the backlog)", timer(warmup_sync=False)),
    Wrong("time_ms", "seconds", timer(scale=1)),
    Wrong("time_ms", "microseconds", timer(scale=1e6)),
    Wrong("time_ms", "one buffer reused (the cache serves it)", timer(rotate=False)),
    Wrong("time_ms", "an input picked at random for each run (some repeat: the median hides them)", random_pick),
    Wrong("time_ms", "the clock read once around all runs", timer(per_run=False)),
    Wrong("time_ms", "one run, no warm-up", one_shot),
    Wrong("time_ms", "the warm-up counted in `reps` (reps - warmup timed runs)", warmup_within_reps),
    Wrong("time_ms", "the middle of the unsorted times: one run", timer(combine=lambda t: t[len(t) // 2])),
    Wrong("time_ms", "the 25th percentile (within 10% of the kernel's time)",
          timer(combine=lambda t: sorted(t)[len(t) // 4])),
    Wrong("time_ms", "the figure returned as text", lambda *args: f"{timer()(*args):.3f}"),
    Wrong("time_ms", "reps written in as 3", lambda launch, inputs, clock, synchronize, warmup=5, reps=50: timer()(
        launch, inputs, clock, synchronize, warmup, 3)),
]

RIGHT = [
    Right("matmul_cost", "itemsize from finfo bits", lambda M, N, K, dtype: {
        "flops": M * N * K * 2, "bytes": _itemsize(dtype) * (M * K + N * K + M * N)}),
    Right("roofline", "the roof from the longer of the two times", roofline_by_time),
    Right("ridge_predictions", "worked out from counted FLOPs and bytes", _predict()),
    Right("time_ms", "one reading per run boundary, middle of the sorted times", boundary_timer),
    Right("time_ms", "every launch timed, the first `warmup` times thrown away", discard_warmup_times),
    Right("time_ms", "an untimed launch on another input before each timed run (a cache flush)", evicting),
]
