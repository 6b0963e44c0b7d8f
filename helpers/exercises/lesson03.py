"""Lesson 03 exercises: FLOPs and bytes of a matmul, the roofline, predictions, and honest timing.

Timing cannot be graded on a CPU with a real GPU clock, so `time_ms` is graded against
`SimulatedGPU`: a pretend device that behaves as a real one does where timing goes wrong
(launches return at once, the first launch compiles, a buffer used twice in a row is served
from cache, now and then a run is slowed by other work), and which records what the timer did, so
the check can say which precaution a timer forgot.
"""

import dataclasses
import math
import numbers
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


@dataclasses.dataclass
class Given:
    """An answer with the arguments it was given: a message can then say which part is off, and why."""

    answer: object
    args: tuple


def _with_args(fn, *args):
    answer = fn(*args)
    return None if answer is None else Given(answer, args)


def _number(x):
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def _same(x, y):
    return _number(x) and math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-9)


def _not_numbers(got, keys):
    """A message if a value that should be a number is something else (a 0-d tensor, a string), else None:
    compared as it is, it would be reported as a wrong count."""
    for key in keys:
        if not _number(got[key]):
            return (f"the value of {key!r} is a {type(got[key]).__name__} ({_short(got[key])}): return a "
                    f"plain Python number (an int or a float; a tensor's .item() gives one).")
    return None


def _short(x):
    text = repr(x)
    return text if len(text) < 60 else text[:57] + "..."


def _missing_keys(got, keys):
    if not isinstance(got, dict) or set(got) != set(keys):
        names = ", ".join(repr(k) for k in keys)
        shown = sorted(got) if isinstance(got, dict) else type(got).__name__
        return f"return a dict with exactly the keys {names}; got {shown}."
    return None


def _explain_cost(out, expected):
    """Each part of the answer compared with the right one; a unit or a slip named only where it fits."""
    got, want = out.answer, expected.answer
    M, N, K, dtype = out.args
    problem = _missing_keys(got, ("flops", "bytes")) or _not_numbers(got, ("flops", "bytes"))
    if problem:
        return problem
    size = torch.empty((), dtype=dtype).element_size()
    kind = str(dtype).removeprefix("torch.")
    problems = []
    flops, nbytes = got["flops"], got["bytes"]
    if not _same(flops, want["flops"]):
        if K > 1 and _same(flops, M * N * (2 * K - 1)):   # the exact count: K multiplies, K - 1 additions
            problems.append("The FLOPs count K - 1 additions per dot product, the exact count. The lesson "
                            "counts every multiply-add as two FLOPs (a multiply and an add), K of them per "
                            "dot product, as FLOP/s figures for matmuls do.")
        elif _same(2 * flops, want["flops"]):
            problems.append("The FLOPs are half the right count: a multiply-add is two FLOPs, a multiply and "
                            "an add.")
        else:
            problems.append(f"The FLOPs ({flops!r}) are not those of M·N dot products of length K, at two "
                            f"FLOPs per multiply-add.")
    if not _same(nbytes, want["bytes"]):
        elements = M * K + K * N + M * N
        if _number(nbytes) and _same(nbytes, elements):
            problems.append(f"The bytes equal the number of elements moved: multiply by the size of one "
                            f"{kind} element.")
        elif _number(nbytes) and _same(nbytes, 8 * elements * size):
            problems.append("The bytes are counted in bits: there are 8 bits in a byte.")
        elif _number(nbytes) and nbytes % elements == 0 and nbytes // elements in (1, 2, 4, 8):   # a dtype's
            problems.append(f"The bytes count {nbytes // elements} per element, but a {kind} element takes a "
                            f"different number: get it from dtype.")
        elif _number(nbytes) and nbytes in ((M * K + K * N) * size, (M * K + M * N) * size,
                                            (K * N + M * N) * size):
            problems.append("The bytes leave out one of the three matrices: A and B are read once, and C is "
                            "written once.")
        elif _number(nbytes) and any(_same(nbytes, (M * K + K * N) * size + M * N * other)
                                     for other in (1, 2, 4, 8, 16) if other != size):
            # C read as well as written, or C at float32's size (the accumulator's): often the same number
            problems.append(f"The bytes are those of A and B read once, plus C counted at another size: C = "
                            f"A @ B writes C once (it does not read it), in {kind} like A and B (the float32 "
                            f"accumulator stays in registers; only the result is written).")
        else:
            problems.append(f"The bytes ({nbytes!r}) are not those of A (M·K), B (K·N) and C (M·N), each "
                            f"moved once, at {kind}'s element size.")
    return " ".join(problems) or None


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
    # Exactly on the ridge (every number here is exact in binary): the rule's boundary, where `<` and
    # `<=` part ways. A made-up chip, drawn afresh: 2**k TFLOP/s over 4 TB/s.
    peak, nbytes = float(2 ** r.randint(8, 11)), 2 ** r.randint(20, 30)
    cases.append(Case(f"on the ridge: {peak / 4:g} FLOP per byte on a chip of {peak:g} TFLOP/s and 4 TB/s",
                      (int(peak / 4) * nbytes, nbytes, peak, 4.0)))
    for _ in range(3):
        flops, nbytes = r.randint(10**6, 10**12), r.randint(10**6, 10**10)
        peak, bw = r.uniform(10, 2000), r.uniform(0.5, 8)
        cases.append(Case(f"random: {flops} FLOP, {nbytes} bytes, {peak:.0f} TFLOP/s, {bw:.2f} TB/s",
                          (flops, nbytes, peak, bw)))
    return cases


def _explain_roofline(out, expected):
    """Intensity, then bound, then roof, each compared with the right one before a cause is guessed."""
    got, want = out.answer, expected.answer
    flops, nbytes, peak, bandwidth = out.args
    problem = (_missing_keys(got, ("intensity", "bound", "tflops"))
               or _not_numbers(got, ("intensity", "tflops")))
    if problem:
        return problem
    problems = []
    intensity, bound, roof = got["intensity"], got["bound"], got["tflops"]
    if not _same(intensity, want["intensity"]):
        if _same(intensity, nbytes / flops):
            why = "The intensity is bytes per FLOP: it is FLOPs per byte."
        elif intensity == flops // nbytes:
            why = (f"The intensity ({intensity!r}) is the FLOPs floor-divided by the bytes: `//` drops the "
                   f"fraction, and an intensity below 1 FLOP per byte becomes 0. Divide with `/`.")
        else:
            why = f"The intensity ({intensity!r}) is not the FLOPs divided by the bytes."
        return why + " The bound and the roof follow from it."
    if bound not in ("memory", "compute"):
        problems.append(f"The bound is {bound!r}: answer the string 'memory' or 'compute'.")
    elif bound != want["bound"]:
        if want["intensity"] == peak / bandwidth:
            problems.append("The bound is wrong on the ridge itself (intensity equal to peak / bandwidth): "
                            "the rule says 'memory' only below the ridge.")
        else:
            problems.append("The bound is on the wrong side: compare the intensity with the ridge, "
                            "peak_tflops / bandwidth_tbs FLOP per byte; 'memory' below it.")
    if not _same(roof, want["tflops"]):
        memory_roof = want["intensity"] * bandwidth
        if _number(roof) and _same(roof, memory_roof) and memory_roof > peak:
            problems.append("The roof is above the peak: no kernel beats the peak, so the roof is the "
                            "smaller of the two.")
        elif _number(roof) and _same(roof, peak) and memory_roof < peak:
            problems.append("The roof is the peak, but at this intensity memory holds it lower: the roof is "
                            "the smaller of the two.")
        elif _number(roof) and roof and any(_same(roof / want["tflops"], 10.0**k)
                                            for k in (-12, -9, -6, -3, 3, 6, 9, 12)):
            problems.append(f"The roof is off by a factor of {roof / want['tflops']:.0e}, a unit slip: FLOP "
                            f"per byte times TB/s is already TFLOP/s.")
        else:
            problems.append(f"The roof ({roof!r} TFLOP/s) is not the smaller of the peak and intensity × "
                            f"bandwidth.")
    return " ".join(problems) or None


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


def _explain_predictions(out, expected):
    """How many predictions are wrong, never which: with two labels, naming one would give it away."""
    if not isinstance(out, dict):
        return f"return a dict with one answer per key of OPERATIONS, not a {type(out).__name__}."
    unknown = [key for key in out if key not in expected]
    if unknown:
        names = ", ".join(map(repr, unknown))
        return (f"{names} {'is not a key' if len(unknown) == 1 else 'are not keys'} of OPERATIONS: use its "
                f"ten keys, spelled as `print(list(OPERATIONS))` shows them.")
    missing = [key for key in expected if key not in out]
    if missing:
        return (f"no prediction for {', '.join(map(repr, missing))}: the dict needs all ten keys of "
                f"OPERATIONS.")
    for key, value in out.items():
        if value not in ("memory", "compute"):
            return f"the answer for {key!r} is {value!r}: each answer is the string 'memory' or 'compute'."
    wrong = sum(out[key] != expected[key] for key in expected)
    if not wrong:
        return None
    return (f"{wrong} of the {len(expected)} predictions {'is' if wrong == 1 else 'are'} wrong (the check "
            f"does not say which). For each operation, count its FLOPs and the fewest bytes it must move "
            f"(every input read once, every output written once, at its element size), divide, and "
            f"compare that intensity with the ridge of the units it runs on: about 295 FLOP/byte for "
            f"float16 matmuls, 20 for float32 elementwise work. matmul_cost and roofline do the arithmetic.")


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

    It also notes what a grader needs to name a timer's mistake: whether the clock had been read
    before the kernel compiled, how many readings were taken while work was still queued, and what
    each launch after the first reading cost the device (`runs_ms`, `run_hit_cache`).
    """

    def __init__(self, kernel_ms=1.0, seed=None, launch_us=2.0, sync_us=3.0, compile_ms=400.0,
                 cache_speedup=3.0, slow_fraction=0.1, first_run_free=False):
        self.kernel_ms, self.launch_us, self.sync_us = kernel_ms, launch_us, sync_us
        self.compile_ms, self.cache_speedup, self.slow_fraction = compile_ms, cache_speedup, slow_fraction
        self.first_run_free = first_run_free   # the first launch compiles nothing and takes no device time
        self.rng = random.Random(seed)
        self.now = 0.0             # host clock, seconds
        self.busy_until = 0.0      # when the device finishes what is queued
        self.compiled = False
        self.in_cache = None       # the buffer the last launch touched
        self.launches = 0
        self.syncs = 0
        self.clock_reads = 0
        self.busy_reads = 0                 # clock readings taken while work was still queued
        self.compiled_after_clock = False   # the compiling launch came after a clock reading
        self.runs_ms = []                   # device time of each launch after the first clock reading
        self.run_hit_cache = []             # ... and whether its input was still in the cache

    def clock(self):
        self.clock_reads += 1
        if self.now < self.busy_until:
            self.busy_reads += 1
        return self.now

    def synchronize(self):
        self.syncs += 1
        self.now = max(self.now, self.busy_until) + self.sync_us * 1e-6

    def launch(self, x):
        first = not self.compiled
        if first:
            self.now += 0.0 if self.first_run_free else self.compile_ms * 1e-3
            self.compiled = True
            self.compiled_after_clock = self.clock_reads > 0
        self.now += self.launch_us * 1e-6
        ms = self.kernel_ms * math.exp(self.rng.uniform(-0.1, 0.1))
        hit = x is self.in_cache
        if hit:
            ms /= self.cache_speedup
        if self.rng.random() < self.slow_fraction:
            ms *= 4
        if first and self.first_run_free:   # (after the same draws: every later run is unchanged)
            ms = 0.0
        self.busy_until = max(self.now, self.busy_until) + ms * 1e-3
        self.in_cache = x
        self.launches += 1
        if self.clock_reads:
            self.runs_ms.append(ms)
            self.run_hit_cache.append(hit)

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


def _near(value, target, within):
    return target > 0 and abs(value / target - 1) <= within


def _rank_of_run(got, runs):
    """Where got stands among the runs sorted by time (0 the fastest, 1 the slowest), if it is exactly
    one of them; None if it is no single run's time (a median of an even count is the mean of two)."""
    ranked = sorted(runs)
    for i, ms in enumerate(ranked):
        if math.isclose(got, ms, rel_tol=1e-9):
            return i / (len(ranked) - 1)
    return None


def _first_run_counts(fn, kernel_ms, n_buffers, seed, given, got):
    """Whether the first launch (the compiling one) reaches the timer's figure: the same timer again, on
    the same simulated GPU except that its first launch compiles nothing and takes no time. A timer that
    times that launch among its runs (a median moves by a rank) gives another figure; one that reads
    the clock early but leaves that run out of its figure gives the same one."""
    again = SimulatedGPU(kernel_ms, seed, first_run_free=True)
    try:
        figure = float(fn(again.launch, again.buffers(n_buffers), again.clock, again.synchronize, *given))
    except Exception:
        return True
    return not math.isclose(figure, got, rel_tol=1e-9)   # (the clock's offsets differ: so do its roundings)


def _cache_reaches_figure(fn, kernel_ms, n_buffers, seed, given, got):
    """Whether the launches the cache served reach the timer's figure: the same timer again, on the same
    simulated GPU except that a launch on the input the launch before used runs 3x slower instead of 3x
    faster. Where such launches are among the timed runs, they move from the fast end of the sorted times
    to the slow end, and the median moves with them (a median hides a few of them, but not this); where
    they are launches left out of the figure (an untimed launch on another input before each timed run,
    which leaves that input in the cache instead), the figure stays the same."""
    again = SimulatedGPU(kernel_ms, seed, cache_speedup=1 / 3)
    try:
        figure = float(fn(again.launch, again.buffers(n_buffers), again.clock, again.synchronize, *given))
    except Exception:
        return True
    return not math.isclose(figure, got, rel_tol=1e-9)   # (the clock's offsets differ: so do its roundings)


def _grade_timer(fn, kernel_ms, n_buffers, seed, reps=None):
    """Run a timer on a simulated GPU; return a verdict string, or raise CheckFailed naming its mistake.

    The simulator records what the timer did (when it read the clock, what each timed launch cost),
    so a wrong figure is traced to its cause: compilation timed, no synchronize, runs timed together,
    a mean or a total instead of the median, the wrong unit, or the cache serving a reused input.
    """
    from helpers.check import CheckFailed  # not at the top: helpers.check imports this package

    gpu = SimulatedGPU(kernel_ms, seed)
    given = () if reps is None else (3, reps)   # warmup, reps: the timer takes both, by position
    got = fn(gpu.launch, gpu.buffers(n_buffers), gpu.clock, gpu.synchronize, *given)
    if got is None and gpu.launches == 0:
        return None  # the stub: not done yet
    if got is None:
        raise CheckFailed("your time_ms launched the kernel but returned None: return the median time of "
                          "one run, in milliseconds.")
    try:
        if isinstance(got, (str, bytes, bool)):   # float() would take "0.5" and True
            raise TypeError
        got = float(got)
    except (TypeError, ValueError):
        raise CheckFailed(f"time_ms should return one number of milliseconds, not a "
                          f"{type(got).__name__}.") from None
    what = f"On a simulated kernel that takes {kernel_ms:.3f} ms, your time_ms returned {got:.4g}"
    if gpu.launches == 0:
        raise CheckFailed(f"{what} without launching anything: call launch(x) for the runs you time.")
    if gpu.clock_reads == 0:
        raise CheckFailed(f"{what} without reading the clock: read clock() before and after each run.")
    if gpu.compiled_after_clock and _first_run_counts(fn, kernel_ms, n_buffers, seed, given, got):
        # even within 10%: a median can hide the compile, not excuse it
        raise CheckFailed(f"{what}. The first launch compiles the kernel ({gpu.compile_ms:g} ms here), and "
                          f"your timer had already read the clock by then, so a timed run included the "
                          f"compilation (a median can hide one such run; a mean or a single run cannot). "
                          f"Make a few warm-up launches, then synchronize, before the first reading of the "
                          f"clock.")
    runs = [ms + (gpu.launch_us + gpu.sync_us) * 1e-3 for ms in gpu.runs_ms]  # what timing each alone reads
    # even within 10%: a median can hide a few cached runs, not excuse them (a timer that rotates has none,
    # or one where its warm-up ends on the input its first run takes); a random pick repeats one in n
    hits = sum(gpu.run_hit_cache)
    cached_runs = hits > max(1, len(runs) // 10)
    if cached_runs and not _cache_reaches_figure(fn, kernel_ms, n_buffers, seed, given, got):
        # the launches the cache served reach no timed figure: they are launches between the timed runs
        # (one on another input before each, to leave that input in the cache), not runs
        runs = [ms for ms, hit in zip(runs, gpu.run_hit_cache) if not hit]
        hits, cached_runs = 0, False
    if gpu.clock_reads <= len(runs):
        raise CheckFailed(f"{what} from {gpu.clock_reads} reading(s) of the clock for {len(runs)} timed "
                          f"runs: the runs were timed together, which gives their total or their mean, and "
                          f"one run slowed by other work moves both. Read the clock before and after each "
                          f"run and return the median of those times.")
    if reps is not None and len(runs) < reps - 1:   # (a timer of run boundaries may time one fewer)
        if len(runs) in (reps - given[0], reps - given[0] - 1):
            raise CheckFailed(f"{what}, called with warmup={given[0]}, reps={reps}, from {len(runs)} timed "
                              f"runs: the warm-up came out of `reps`. `reps` counts the timed runs alone: "
                              f"`warmup` launches first, then `reps` timed ones.")
        raise CheckFailed(f"{what}, called with reps={reps}, from {len(runs)} timed run(s): time `reps` runs "
                          f"(and warm up with `warmup`), not a number written into the timer.")
    # (a timer that times its warm-up too reads the clock 2 * (warmup + reps) times: more means more runs)
    if reps is not None and gpu.clock_reads > 2 * (given[0] + reps) + 2:
        raise CheckFailed(f"{what}, called with warmup={given[0]}, reps={reps}, after reading the clock "
                          f"{gpu.clock_reads} times: about {gpu.clock_reads // 2} timed runs. Time `reps` "
                          f"runs (and warm up with `warmup`), not a number written into the timer.")
    if len(runs) < 3:
        raise CheckFailed(f"{what} from {len(runs)} timed run(s). Runs differ by up to 10% and about one "
                          f"in ten is slowed by other work, so one run is one noisy sample: time `reps` runs "
                          f"one by one and return the median.")
    median, mean, total = statistics.median(runs), statistics.mean(runs), sum(runs)
    outliers = ("About one run in ten is slowed 4x by other work on the device, and a mean takes in every "
                "such outlier; the median of the per-run times ignores them.")
    # even within 10% of the kernel's time: the median was asked for, and a clock read while work is
    # queued is wrong whatever the figure (after the warm-up, the first run would carry its backlog)
    if _near(got, mean, 0.02) and mean > 1.04 * median:
        raise CheckFailed(f"{what}: the mean of its runs. {outliers}")
    if _near(got, min(runs), 0.02) and min(runs) < 0.96 * median:
        raise CheckFailed(f"{what}: the time of its fastest run, which may be one the cache served or one "
                          f"luckier than the rest. Return the median of the per-run times: the typical run.")
    # (where each launch after the first reading was timed alone, between two readings of its own: no
    # launch outside the figure, such as one that flushes the cache, is among the runs)
    rank = _rank_of_run(got, runs) if gpu.clock_reads == 2 * len(runs) else None
    lo, hi = 0.45, 0.55
    if reps is not None and len(runs) > reps:
        # a timer that timed its warm-up too and left those runs out: the median of the `reps` it kept
        # is one of the middle `extra + 1` runs of all it timed
        extra, last = len(runs) - reps, len(runs) - 1
        lo, hi = min(lo, (reps - 1) / 2 / last), max(hi, ((reps - 1) / 2 + extra) / last)
    if rank is not None and not lo <= rank <= hi:   # even within 10%: one run, not a middle one
        raise CheckFailed(f"{what}: the time of one of its {len(runs)} runs, and not the middle one: "
                          f"{rank:.0%} of the way from the fastest to the slowest. Sort the per-run times "
                          f"and return the median (statistics.median does both).")
    if gpu.busy_reads:
        raise CheckFailed(f"{what}. It read the clock {gpu.busy_reads} time(s) while work was still queued: "
                          f"launch(x) returns as soon as the work is queued, so such a reading misses the "
                          f"work, or times it with the run after it. Call synchronize() after the warm-up "
                          f"and after each timed launch, before reading the clock.")
    if cached_runs:
        less = ", less than the kernel takes" if got < 0.9 * kernel_ms else ""
        hidden = "" if less else " (the median hid them here; with more of them it would not)"
        some = " A random pick repeats the input before one time in len(inputs)." if 2 * hits < len(runs) \
            else ""
        raise CheckFailed(f"{what}{less}: {hits} of its {len(runs)} timed launches used the input the launch "
                          f"before had just used, still in the cache ({gpu.cache_speedup:g}x faster than "
                          f"memory){hidden}.{some} Rotate through `inputs` in turn: run i uses "
                          f"inputs[i % len(inputs)].")
    if _near(got, kernel_ms, 0.1):
        return "within 10% of the kernel's time"
    for unit, factor in (("seconds", 1e-3), ("microseconds", 1e3)):
        if any(_near(got, stat * factor, 0.1) for stat in (median, mean, total, kernel_ms)):
            raise CheckFailed(f"{what}: that is a time in {unit} (clock() reads seconds). Return "
                              f"milliseconds.")
    if _near(got, total, 0.1):
        raise CheckFailed(f"{what}: the total of its {len(runs)} runs, not the time of one. Return the "
                          f"median of the per-run times.")
    if _near(got, mean, 0.05):
        raise CheckFailed(f"{what}: about the mean of its runs. {outliers}")
    raise CheckFailed(f"{what}, {got / kernel_ms:.3g}x the kernel's time. Time each run on its own (read the "
                      f"clock, launch, synchronize, read the clock), each on the next input in turn, and "
                      f"return the median of those times in milliseconds.")


def _timer_cases():
    r = random.Random()
    cases = []
    for (lo, hi), n_buffers in (((0.3, 0.6), 4), ((1.0, 3.0), 3), ((0.5, 1.5), 2)):
        kernel_ms = r.uniform(lo, hi)
        cases.append(Case(f"a {kernel_ms:.2f} ms kernel, {n_buffers} input buffers",
                          (kernel_ms, n_buffers, r.randrange(2**32))))
    kernel_ms, reps = r.uniform(0.5, 1.5), r.choice((21, 31, 41))
    cases.append(Case(f"a {kernel_ms:.2f} ms kernel, 3 input buffers, called with warmup=3, reps={reps}",
                      (kernel_ms, 3, r.randrange(2**32), reps)))
    return cases


EXERCISES = [
    Exercise("03", "matmul_cost", "FLOPs and bytes of a matmul", matmul_cost_reference, _matmul_cost_cases,
             run=_with_args, explain=_explain_cost),
    Exercise("03", "roofline", "intensity, bound and roof", roofline_reference, _roofline_cases,
             run=_with_args, explain=_explain_roofline),
    Exercise("03", "ridge_predictions", "which side of the ridge?", ridge_predictions_reference,
             lambda: [Case("the ten operations of OPERATIONS, on an H100 SXM", ())],
             explain=_explain_predictions),
    Exercise("03", "time_ms", "an honest timer", _honest_timer, _timer_cases,
             run=lambda fn, *args: _grade_timer(fn, *args)),
]
