"""Lesson 03 exercises: FLOPs and bytes of a matmul, the roofline, predictions, and honest timing.

Timing cannot be graded on a CPU with a real GPU clock, so `time_ms` is graded against
`SimulatedGPU`: a pretend device that behaves as a real one does where timing goes wrong
(launches return at once, the first launch compiles, a buffer used twice in a row is served
from cache, now and then a run is slowed by other work). A timer that forgets any of the four
precautions gets a figure far from the kernel's real time, and the check says which one.
"""

import math
import random
import statistics

import torch

from helpers.exercises import Case, Exercise
from helpers.roofline import CHIPS

# ---------------------------------------------------------------- matmul_cost


def matmul_cost_reference(M, N, K, dtype):
    itemsize = torch.empty((), dtype=dtype).element_size()
    return {"flops": 2 * M * N * K, "bytes": (M * K + K * N + M * N) * itemsize}


def _matmul_cost_cases():
    r = random.Random()
    cases = [Case("4096^3 float16 (square)", (4096, 4096, 4096, torch.float16)),
             Case("matrix-vector: M=1, float16", (1, 8192, 8192, torch.float16)),
             Case("K=1: an outer product, float32", (3000, 2000, 1, torch.float32))]
    for dtype in (torch.bfloat16, torch.float32, torch.float64):
        M, N, K = (r.randint(1, 9000) for _ in range(3))
        cases.append(Case(f"{M}x{N}x{K} {dtype} (random sizes)", (M, N, K, dtype)))
    return cases


# ---------------------------------------------------------------- roofline


def roofline_reference(flops, nbytes, peak_tflops, bandwidth_tbs):
    intensity = flops / nbytes
    return {"intensity": intensity,
            "bound": "memory" if intensity < peak_tflops / bandwidth_tbs else "compute",
            "tflops": min(peak_tflops, intensity * bandwidth_tbs)}


def _roofline_cases():
    h100, a100, h200 = CHIPS["H100 SXM"], CHIPS["A100 SXM"], CHIPS["H200"]
    r = random.Random()
    n = 2**24
    cases = [Case("vector add fp32 on an H100 (fp32 peak)",
                  (n, 12 * n, h100.tflops["fp32"], h100.bandwidth_tbs)),
             Case("fp16 matmul 4096^3 on an H100", (2 * 4096**3, 6 * 4096**2, h100.tflops["fp16"],
                                                     h100.bandwidth_tbs)),
             Case("fp16 matmul 512^3 on an A100", (2 * 512**3, 6 * 512**2, a100.tflops["fp16"],
                                                    a100.bandwidth_tbs)),
             Case("fp16 matmul 512^3 on an H200", (2 * 512**3, 6 * 512**2, h200.tflops["fp16"],
                                                    h200.bandwidth_tbs))]
    for _ in range(3):
        flops, nbytes = r.randint(10**6, 10**12), r.randint(10**6, 10**10)
        peak, bw = r.uniform(10, 2000), r.uniform(0.5, 8)
        cases.append(Case(f"random: {flops} FLOP, {nbytes} bytes, {peak:.0f} TFLOP/s, {bw:.2f} TB/s",
                          (flops, nbytes, peak, bw)))
    return cases


# ---------------------------------------------------------------- ridge_predictions

# What each key names; the costs below are what the answers rest on.
OPERATIONS = {
    "vector_add_fp32": "x + y, two float32 vectors of 2**24 elements",
    "softmax_fp32": "softmax over the rows of a 4096 x 4096 float32 matrix (count 5 FLOP per element)",
    "matmul_4096": "float16 matmul, 4096 x 4096 times 4096 x 4096",
    "matmul_512": "float16 matmul, 512 x 512 times 512 x 512",
    "gemv_8192": "float16 matrix-vector product: an 8192 x 8192 matrix times a vector",
    "matmul_16_tokens": "float16 (16 x 8192) @ (8192 x 8192): a layer applied to a batch of 16 tokens",
    "matmul_k64": "float16 (8192 x 64) @ (64 x 8192): a large output from a short inner dimension",
    "projection_16384_tokens": "float16 (16384 x 4096) @ (4096 x 4096): a layer applied to 16384 tokens",
    "attention_scores": "float16 Q @ K^T for one head, N = 4096 queries and keys of d = 128, "
                        "the 4096 x 4096 scores written to memory",
    "polynomial_degree_100": "a degree-100 polynomial (Horner: 200 FLOP) of each element of a float32 vector",
}


def _mm(M, N, K):
    return 2 * M * N * K, 2 * (M * K + K * N + M * N), "fp16"


_COSTS = {  # (FLOPs, bytes, precision whose peak applies)
    "vector_add_fp32": (2**24, 12 * 2**24, "fp32"),
    "softmax_fp32": (5 * 4096**2, 8 * 4096**2, "fp32"),
    "matmul_4096": _mm(4096, 4096, 4096),
    "matmul_512": _mm(512, 512, 512),
    "gemv_8192": _mm(8192, 1, 8192),
    "matmul_16_tokens": _mm(16, 8192, 8192),
    "matmul_k64": _mm(8192, 8192, 64),
    "projection_16384_tokens": _mm(16384, 4096, 4096),
    "attention_scores": _mm(4096, 4096, 128),
    "polynomial_degree_100": (200 * 2**24, 8 * 2**24, "fp32"),
}


def ridge_predictions_reference():
    chip = CHIPS["H100 SXM"]
    return {name: "memory" if flops / nbytes < chip.ridge(precision) else "compute"
            for name, (flops, nbytes, precision) in _COSTS.items()}


# ---------------------------------------------------------------- time_ms


class Buffer:
    """A stand-in for one input tensor of the simulated GPU."""

    def __init__(self, i):
        self.i = i

    def __repr__(self):
        return f"<buffer {self.i}>"


class SimulatedGPU:
    """A pretend GPU with a host clock, for practising timing anywhere.

    `launch(x)` costs the host `launch_us` and returns at once; the work queues on the device and
    takes about `kernel_ms` there (each run differs by up to 10%), a third of that when x is the
    buffer the previous launch used (it is still in the L2 cache). About one run in ten is slowed
    4x by other work on the device. The first launch compiles the kernel (`compile_ms` of host
    time). `clock()` reads the host clock in seconds; `synchronize()` waits until the device is idle.
    """

    def __init__(self, kernel_ms=1.0, seed=None, launch_us=2.0, sync_us=3.0, compile_ms=400.0,
                 cache_speedup=3.0, slow_fraction=0.1):
        self.kernel_ms, self.launch_us, self.sync_us = kernel_ms, launch_us, sync_us
        self.compile_ms, self.cache_speedup, self.slow_fraction = compile_ms, cache_speedup, slow_fraction
        self.rng = random.Random(seed)
        self.now = 0.0             # host clock, seconds
        self.busy_until = 0.0      # when the device finishes what is queued
        self.compiled = False
        self.in_cache = None       # the buffer the last launch touched
        self.launches = 0
        self.syncs = 0
        self.clock_reads = 0
        self.cache_hits = 0
        self.buffers_used = set()

    def clock(self):
        self.clock_reads += 1
        return self.now

    def synchronize(self):
        self.syncs += 1
        self.now = max(self.now, self.busy_until) + self.sync_us * 1e-6

    def launch(self, x):
        if not self.compiled:
            self.now += self.compile_ms * 1e-3
            self.compiled = True
        self.now += self.launch_us * 1e-6
        ms = self.kernel_ms * math.exp(self.rng.uniform(-0.1, 0.1))
        if x is self.in_cache:
            ms /= self.cache_speedup
            self.cache_hits += 1
        if self.rng.random() < self.slow_fraction:
            ms *= 4
        self.busy_until = max(self.now, self.busy_until) + ms * 1e-3
        self.in_cache = x
        self.launches += 1
        self.buffers_used.add(id(x))

    def buffers(self, count):
        return [Buffer(i) for i in range(count)]


def _honest_timer(launch, inputs, clock, synchronize, warmup=5, reps=50):
    for i in range(warmup):
        launch(inputs[i % len(inputs)])
    synchronize()
    times = []
    for i in range(warmup, warmup + reps):  # carry on rotating where the warm-up stopped
        start = clock()
        launch(inputs[i % len(inputs)])
        synchronize()
        times.append(clock() - start)
    return statistics.median(times) * 1e3


def _grade_timer(fn, kernel_ms, n_buffers, seed):
    """Run a timer on a simulated GPU; return a verdict string, or raise CheckFailed saying what is off."""
    from helpers.check import CheckFailed  # not at the top: helpers.check imports this package

    gpu = SimulatedGPU(kernel_ms, seed)
    got = fn(gpu.launch, gpu.buffers(n_buffers), gpu.clock, gpu.synchronize)
    if got is None:
        return None
    what = f"On a simulated kernel that takes {kernel_ms:.3f} ms, your time_ms returned {float(got):.4g}"
    ratio = float(got) / kernel_ms
    if 0.9 <= ratio <= 1.1:
        return "within 10% of the kernel's time"
    if gpu.launches == 0:
        raise CheckFailed(f"{what} without launching anything: call launch(x) for the runs you time.")
    if gpu.syncs == 0:
        raise CheckFailed(f"{what}. It never called synchronize(): a launch returns before the device has "
                          f"done the work, so the clock only saw the launch. Synchronize after each launch, "
                          f"before reading the clock.")
    if gpu.clock_reads < 10:
        raise CheckFailed(f"{what} from {gpu.clock_reads} reading(s) of the clock. Runs differ by up to 10% "
                          f"and some are slowed by other work, so one measurement is one noisy sample: time "
                          f"`reps` runs one by one (a clock reading before and after each) and return "
                          f"the median.")
    if 0.9e-3 <= ratio <= 1.1e-3:
        raise CheckFailed(f"{what}: that is the time in seconds. Return milliseconds.")
    if ratio < 0.9 and gpu.cache_hits > gpu.launches // 2:
        raise CheckFailed(f"{what}. Most launches used the input the launch before them had just used, "
                          f"which was still in the cache ({gpu.cache_speedup:g}x faster than memory). Rotate "
                          f"through `inputs`: run i uses inputs[i % len(inputs)].")
    if ratio > 10:
        raise CheckFailed(f"{what}, far more than the kernel's time: the first launch compiles the kernel "
                          f"({gpu.compile_ms:g} ms here). Make a few warm-up launches, then synchronize, "
                          f"before timing.")
    if ratio < 0.9:
        raise CheckFailed(f"{what}, less than the kernel takes. Was the clock read before the device "
                          f"finished (synchronize after the launch, then read the clock), or did a timed "
                          f"run reuse the buffer the previous one left in cache?")
    raise CheckFailed(f"{what}, {ratio:.2f}x the kernel's time. About one run in ten is slowed by other "
                      f"work on the device: time each run on its own and return the median, which "
                      f"ignores such outliers (a mean or one total over all runs does not).")


def _timer_cases():
    r = random.Random()
    cases = []
    for (lo, hi), n_buffers in (((0.3, 0.6), 4), ((1.0, 3.0), 3), ((0.5, 1.5), 2)):
        kernel_ms = r.uniform(lo, hi)
        cases.append(Case(f"a {kernel_ms:.2f} ms kernel, {n_buffers} input buffers",
                          (kernel_ms, n_buffers, r.randrange(2**32))))
    return cases


EXERCISES = [
    Exercise("03", "matmul_cost", "FLOPs and bytes of a matmul", matmul_cost_reference, _matmul_cost_cases),
    Exercise("03", "roofline", "intensity, bound and roof", roofline_reference, _roofline_cases),
    Exercise("03", "ridge_predictions", "which side of the ridge?", ridge_predictions_reference,
             lambda: [Case("the ten operations of OPERATIONS, on an H100 SXM", ())]),
    Exercise("03", "time_ms", "an honest timer", _honest_timer, _timer_cases,
             run=lambda fn, *args: _grade_timer(fn, *args)),
]
