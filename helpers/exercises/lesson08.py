"""Lesson 08 exercises: reading profiles. Pure Python over profile data, no kernels.

Each exercise is graded on what `make profile` recorded (every recorded GPU, every recorded
variant) and on fresh random variants drawn here, built to catch the usual slips: overlapping
kernels on two streams, an unsorted list, a timeline that does not start at zero, ties, metrics
exactly at a threshold. On a GPU, exercises 1 and 2 also get a step of the small decoder block
profiled live.

The learner's function gets a deep copy of each input (it may sort or change it freely); `run`
returns (answer, input) so that `explain` can name the mistake from the input, without giving the
right values away.
"""

import copy
import math
import random

from helpers.exercises import Case, Exercise
from helpers.roofline import CHIPS

VARIANTS = ("naive", "sdpa", "small", "tiny")
REL = 1e-9   # float answers: the same arithmetic in another order differs by far less

DRAM_PCT = "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"
SM_PCT = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
TENSOR_PCT = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"
BOUND_AT = 60.0   # ncu's speed-of-light rule: below 60% of peak on both, latency limits the kernel
# launch__occupancy_limit_<key>: blocks per SM each resource allows; ties go to the first named here
LIMITS = {"registers": "registers", "shared memory": "shared_mem", "warps": "warps", "blocks": "blocks"}


def _close(a, b):
    return math.isclose(a, b, rel_tol=REL, abs_tol=1e-12)


def _number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _run(fn, data, *rest):
    """Call fn on a deep copy of the input; keep the input beside the answer for explain."""
    return fn(copy.deepcopy(data), *copy.deepcopy(rest)), (data, *rest)


def _recorded(name):
    """[(device, data)] of one recorded file, for every GPU that has it."""
    from helpers.profile import recorded_devices, recorded_profile

    found = []
    for device in recorded_devices():
        data = recorded_profile(name, device)
        if data is not None:
            found.append((device, data))
    return found


def _live_small_block():
    """The kernels of one step of the SMALL decoder block profiled now (GPU only), or None."""
    import tempfile

    import torch

    from helpers.block import SMALL, block_input, block_weights, decoder_block
    from helpers.device import ON_GPU
    from helpers.profile import kernel_events, profile_step, save_trace

    if not ON_GPU:
        return None
    w = block_weights(SMALL, "cuda", torch.float16)
    x = block_input(SMALL, 2, 64, "cuda", torch.float16)
    prof = profile_step(lambda: decoder_block(x, w, SMALL, attention="naive"), memory=False)
    with tempfile.TemporaryDirectory() as folder:
        return kernel_events(save_trace(prof, f"{folder}/step.trace.json.gz"))


def _block_cases():
    cases = []
    for variant in VARIANTS:
        for device, data in _recorded(f"block_{variant}.json"):
            cases.append(Case(f"{device}: block_{variant}, recorded ({len(data['kernels'])} kernels)",
                              (data["kernels"],)))
    live = _live_small_block()
    if live:
        cases.append(Case(f"the SMALL block profiled now ({len(live)} kernels)", (live,)))
    return cases


# ---------------------------------------------------------------- kernel_table


def kernel_table_reference(kernels):
    totals, calls = {}, {}
    for k in kernels:
        totals[k["name"]] = totals.get(k["name"], 0.0) + k["dur_us"]
        calls[k["name"]] = calls.get(k["name"], 0) + 1
    everything = sum(totals.values())
    order = sorted(totals, key=lambda name: (-totals[name], name))
    return [{"name": n, "calls": calls[n], "total_us": totals[n], "share": totals[n] / everything}
            for n in order]


_NAMES = ["gemm_128x128", "softmax_fwd", "masked_fill", "copy_f32_f16", "rms_norm", "rope", "silu_mul",
          "add_residual", "flash_fwd", "reduce_mean"]


def _random_kernels(r, n, names, streams=(7,), start=0.0, quantum=None, shuffle=True):
    """n kernels with random names and durations (multiples of `quantum` if given, so that sums
    tie exactly), with gaps between them, on the given streams; the list shuffled."""
    kernels, t = [], start
    for _ in range(n):
        dur = r.randint(1, 40) * quantum if quantum else round(r.uniform(0.5, 300.0), 3)
        stream = r.choice(streams)
        kernels.append({"name": r.choice(names), "start_us": round(t, 3), "dur_us": dur, "stream": stream})
        t += r.choice([0.0, r.uniform(0.0, 40.0)]) + (r.uniform(0, dur) if len(streams) > 1 else dur)
    if shuffle:
        r.shuffle(kernels)
    return kernels


def _table_cases():
    r = random.Random()
    cases = _block_cases()
    cases.append(Case("random: 60 kernels of 8 names, unsorted",
                      (_random_kernels(r, 60, r.sample(_NAMES, 8)),)))
    # one name called often with short kernels, one called once with a long one: calls, mean and
    # total all order these differently
    many = [{"name": "tiny_elementwise", "start_us": 10.0 * i, "dur_us": 2.0, "stream": 7} for i in range(30)]
    one = [{"name": "big_gemm", "start_us": 400.0, "dur_us": 50.0, "stream": 7}]
    mid = [{"name": "attention", "start_us": 500.0 + 50 * i, "dur_us": 45.0, "stream": 7} for i in range(2)]
    mixed = many + one + mid
    r.shuffle(mixed)
    cases.append(Case("often and short vs once and long (calls, mean and total disagree)", (mixed,)))
    # equal totals: the tie-break is the name, alphabetical; names drawn so that first-seen order
    # is not alphabetical
    tied = []
    for name in ("zeta_kernel", "alpha_kernel", "mid_kernel"):
        for i, dur in enumerate((1.5, 2.5) if name != "mid_kernel" else (4.0,)):
            tied.append({"name": name, "start_us": 20.0 * len(tied), "dur_us": dur, "stream": 7})
    tied += _random_kernels(r, 20, ["other_a", "other_b"], start=100.0, quantum=0.5)
    cases.append(Case("ties: kernels of equal total time (the tie-break is the name)", (tied,)))
    cases.append(Case("random: two streams, totals in multiples of 0.25 (more ties)",
                      (_random_kernels(r, 80, r.sample(_NAMES, 6), streams=(7, 13), quantum=0.25),)))
    return cases


def _explain_table(out, expected):
    answer, (kernels,) = out
    want, _ = expected
    if answer is None:
        return "your function returned None: return the list of rows."
    if not isinstance(answer, list):
        return f"return a list of dicts, one per kernel name, not a {type(answer).__name__}."
    if not all(isinstance(row, dict) for row in answer):
        return "each row should be a dict with the keys 'name', 'calls', 'total_us' and 'share'."
    keys = {"name", "calls", "total_us", "share"}
    bad_keys = next((row for row in answer if set(row) != keys), None)
    if bad_keys is not None:
        return f"a row has the keys {sorted(bad_keys)}: each row needs exactly {sorted(keys)}."
    names = [row["name"] for row in answer]
    if len(names) != len(set(names)):
        repeated = next(n for n in names if names.count(n) > 1)
        return (f"{len(answer)} rows for {len(want)} distinct kernel names ({repeated[:60]!r} has several "
                f"rows): group the events by name, one row per name.")
    if set(names) != {row["name"] for row in want}:
        return f"the rows name {len(set(names))} kernels; the events have {len(want)} distinct names."
    by_name = {row["name"]: row for row in want}
    for i, row in enumerate(answer):
        ref = by_name[row["name"]]
        if row["calls"] != ref["calls"]:
            return (f"row {i} ({row['name'][:60]!r}): 'calls' is {row['calls']!r}; count the events that "
                    f"carry that name.")
        if not (_number(row["total_us"]) and _close(row["total_us"], ref["total_us"])):
            return (f"row {i} ({row['name'][:60]!r}): 'total_us' is {row['total_us']!r}; it is the sum of "
                    f"the durations of that name's events.")
    span = max(k["start_us"] + k["dur_us"] for k in kernels) - min(k["start_us"] for k in kernels)
    for i, row in enumerate(answer):
        ref = by_name[row["name"]]
        if not (_number(row["share"]) and _close(row["share"], ref["share"])):
            if _number(row["share"]) and _close(row["share"], row["total_us"] / span):
                return (f"row {i}: 'share' is the kernel's time over the step's wall time (first start to "
                        f"last end), which counts the GPU's idle gaps. Divide by the total time of all "
                        f"kernels, so the shares add up to 1.")
            return (f"row {i} ({row['name'][:60]!r}): 'share' is {row['share']!r}; it is the row's total "
                    f"over the total time of all kernels (the shares add up to 1, the column adds up to "
                    f"{sum(r['share'] for r in answer if _number(r['share'])):.6g}).")
    for i in range(1, len(answer)):
        a, b = answer[i - 1], answer[i]
        if b["total_us"] > a["total_us"] and not _close(a["total_us"], b["total_us"]):
            how = ""
            if a["calls"] > b["calls"]:
                how = " (sorted by calls?)"
            elif a["total_us"] / a["calls"] > b["total_us"] / b["calls"]:
                how = " (sorted by mean time per call?)"
            return (f"rows {i - 1} and {i} are out of order: row {i} has more total time{how}. Sort by "
                    f"total_us, most first: row 0 is the kernel to look at first.")
        if a["total_us"] == b["total_us"] and a["name"] > b["name"]:
            return (f"rows {i - 1} and {i} have the same total_us: the tie-break is the name, in "
                    f"alphabetical order (Python's < on strings).")
    return None


# ---------------------------------------------------------------- gpu_idle_share


def gpu_idle_share_reference(kernels):
    intervals = sorted((k["start_us"], k["start_us"] + k["dur_us"]) for k in kernels)
    first, last = intervals[0][0], max(end for _, end in intervals)
    busy, run_start, run_end = 0.0, intervals[0][0], intervals[0][1]
    for start, end in intervals[1:]:
        if start > run_end:              # a gap: close the busy run
            busy += run_end - run_start
            run_start, run_end = start, end
        else:                            # overlaps the run (another stream): extend it
            run_end = max(run_end, end)
    busy += run_end - run_start
    return (last - first - busy) / (last - first)


def _overlapping(r, n, start):
    """Kernels on two streams that overlap, one long kernel holding several short ones, unsorted,
    and the last kernel to start ending before an earlier one does."""
    kernels = _random_kernels(r, n, r.sample(_NAMES, 5), streams=(7, 13), start=start, shuffle=False)
    first = min(k["start_us"] for k in kernels)
    end = max(k["start_us"] + k["dur_us"] for k in kernels)
    kernels.append({"name": "long_gemm", "start_us": round(first + 0.3 * (end - first), 3),
                    "dur_us": round(0.8 * (end - first), 3), "stream": 21})
    kernels.append({"name": "short_tail", "start_us": round(first + 0.35 * (end - first), 3),
                    "dur_us": 1.0, "stream": 7})
    r.shuffle(kernels)
    return kernels


def _idle_cases():
    r = random.Random()
    cases = _block_cases()
    serial = _random_kernels(r, 40, r.sample(_NAMES, 6), start=r.uniform(500, 5000))
    cases.append(Case("random: one stream, gaps, unsorted, the first kernel not at 0", (serial,)))
    cases.append(Case("random: two streams that overlap, unsorted, first kernel not at 0",
                      (_overlapping(r, 30, r.uniform(100, 900)),)))
    cases.append(Case("random: a long kernel that ends after the last one to start",
                      (_overlapping(r, 12, 0.0),)))
    back_to_back = [{"name": "a", "start_us": 50.0 + 3 * i, "dur_us": 3.0, "stream": 7} for i in range(10)]
    back_to_back[3], back_to_back[7] = back_to_back[7], back_to_back[3]
    cases.append(Case("no gaps at all: back to back (the answer is 0)", (back_to_back,)))
    return cases


def busy_us(kernels):
    """Microseconds during which at least one kernel runs: the union of [start, start + duration]
    (lesson 09 reads it too)."""
    intervals = sorted((k["start_us"], k["start_us"] + k["dur_us"]) for k in kernels)
    covered, reached = 0.0, -math.inf
    for start, end in intervals:
        covered += max(0.0, end - max(start, reached))
        reached = max(reached, end)
    return covered


def _explain_idle(out, expected):
    answer, (kernels,) = out
    want, _ = expected
    if answer is None:
        return "your function returned None: return the idle share, a float between 0 and 1."
    if not _number(answer):
        return f"return one number (a share between 0 and 1), not a {type(answer).__name__}."
    if _close(answer, want):
        return None
    first = min(k["start_us"] for k in kernels)
    last = max(k["start_us"] + k["dur_us"] for k in kernels)
    latest = max(kernels, key=lambda k: k["start_us"])
    last_started = latest["start_us"] + latest["dur_us"]
    busy, total = busy_us(kernels), sum(k["dur_us"] for k in kernels)
    mistakes = [
        (1 - total / (last - first), "it adds up the kernels' durations, which counts twice the time when "
         "kernels overlap on different streams. Merge the intervals [start, start + dur] first, and count "
         "the time covered by at least one kernel."),
        (1 - busy / last, "it measures the timeline from 0, not from the first kernel's start (this case's "
         "first kernel starts later). The span runs from the first start to the last end."),
        (1 - busy / (last_started - first) if last_started > first else None,
         "it ends the timeline where the last kernel to start ends; a kernel that started earlier can end "
         "later (here one does). The span ends at the latest end of any kernel."),
    ]
    for value, why in mistakes:
        if value is not None and _close(answer, value):
            return f"your idle share is {answer:.6g}: {why}"
    if not 0 <= answer <= 1:
        return f"your idle share is {answer:.6g}: a share of the timeline lies between 0 and 1."
    if _close(answer, 1 - want):
        return (f"your idle share is {answer:.6g}: that is the share during which kernels run. The "
                f"exercise asks for the rest, the share during which none runs.")
    unsorted = any(a["start_us"] > b["start_us"] for a, b in zip(kernels, kernels[1:]))
    hint = (" This case's list is not sorted by start time: does your function assume it is?"
            if unsorted else "")
    which = "high" if answer > want else "low"
    return (f"your idle share is {answer:.6g}, too {which}. Idle time is the span from the first "
            f"kernel's start to the last end, minus the time covered by at least one kernel.{hint}")


# ---------------------------------------------------------------- diagnose


def diagnose_reference(metrics):
    dram, sm = metrics[DRAM_PCT], metrics[SM_PCT]
    if max(dram, sm) >= BOUND_AT:
        bound = "memory" if dram >= sm else "compute"
    else:
        bound = "latency"
    limits = {what: metrics[f"launch__occupancy_limit_{key}"] for what, key in LIMITS.items()}
    limiter = min(limits, key=limits.get)   # min keeps the first of equal values: the tie order
    return bound, limiter


def _random_metrics(r, dram=None, sm=None, limits=None, tensor=None):
    """A kernel's metrics as ncu records them, with chosen or random values."""
    m = {DRAM_PCT: round(r.uniform(0, 100), 2) if dram is None else dram,
         SM_PCT: round(r.uniform(0, 100), 2) if sm is None else sm,
         TENSOR_PCT: round(r.uniform(0, 100), 2) if tensor is None else tensor,
         "lts__t_sector_hit_rate.pct": round(r.uniform(0, 100), 2),
         "sm__warps_active.avg.pct_of_peak_sustained_active": round(r.uniform(5, 100), 2),
         "launch__registers_per_thread": float(r.choice([26, 40, 64, 128, 168, 255])),
         "launch__shared_mem_per_block": float(r.choice([0, 1024, 49152, 132096, 214212]))}
    limits = limits or [r.randint(1, 32) for _ in LIMITS]
    for key, value in zip(LIMITS.values(), limits):
        m[f"launch__occupancy_limit_{key}"] = float(value)
    return m


def _diagnose_cases():
    r = random.Random()
    cases = []
    for device, data in _recorded("ncu.json"):
        for k in data.get("kernels", []):
            cases.append(Case(f"{device}: {k.get('target') or k.get('Kernel Name')}, recorded", (k,)))
    lo = round(r.uniform(5, 55), 2)
    cases += [
        Case("DRAM exactly at 60% of peak, SM below: the rule says >= 60", (_random_metrics(
            r, dram=60.0, sm=lo, limits=[4, 9, 8, 32]),)),
        Case("SM exactly at 60%, DRAM below", (_random_metrics(r, dram=lo, sm=60.0, limits=[7, 3, 8, 32]),)),
        Case("DRAM% equal to SM%, above 60%: a tie names memory", (_random_metrics(
            r, dram=(both := round(r.uniform(60, 95), 2)), sm=both, limits=[5, 9, 8, 32]),)),
        Case("both just under 60%: latency",
             (_random_metrics(r, dram=59.99, sm=59.98, limits=[8, 8, 4, 32]),)),
        Case("tensor pipes busy, SM% low: SM% decides, not the tensor pipe", (_random_metrics(
            r, dram=round(r.uniform(5, 40), 2), sm=round(r.uniform(5, 40), 2),
            tensor=round(r.uniform(70, 99), 2), limits=[2, 2, 8, 32]),)),
        Case("SM% high, tensor pipe idle: compute-bound all the same", (_random_metrics(
            r, dram=round(r.uniform(5, 50), 2), sm=round(r.uniform(61, 95), 2), tensor=0.0,
            limits=[3, 16, 8, 32]),)),
        Case("tie: registers, shared memory and warps allow the same blocks", (_random_metrics(
            r, limits=[6, 6, 6, 32]),)),
        Case("tie: shared memory and warps",
             (_random_metrics(r, dram=80.0, sm=20.0, limits=[12, 5, 5, 32]),)),
        Case("tie: warps and blocks", (_random_metrics(r, dram=30.0, sm=75.0, limits=[32, 32, 16, 16]),)),
        Case("only blocks limit", (_random_metrics(r, limits=[40, 64, 48, 32]),)),
    ]
    for _ in range(6):
        cases.append(Case("random metrics", (_random_metrics(r),)))
    return cases


def _explain_diagnose(out, expected):
    answer, (metrics,) = out
    (want_bound, want_limiter), _ = expected
    if answer is None:
        return "your function returned None: return (bound, limiter)."
    if not (isinstance(answer, (tuple, list)) and len(answer) == 2):
        return "return a pair: (bound, limiter)."
    bound, limiter = answer
    if bound not in ("memory", "compute", "latency"):
        return f"bound is {bound!r}: it is one of 'memory', 'compute', 'latency'."
    if limiter not in LIMITS:
        return f"limiter is {limiter!r}: it is one of {', '.join(map(repr, LIMITS))}."
    dram, sm = metrics[DRAM_PCT], metrics[SM_PCT]
    if bound != want_bound:
        said = f"DRAM at {dram:g}% and SM at {sm:g}% of peak (tensor pipe {metrics[TENSOR_PCT]:g}%)"
        if max(dram, sm) == BOUND_AT:
            return f"bound is {bound!r} with {said}: the rule is 'at least 60%' (>=), and here one is at 60."
        return (f"bound is {bound!r} with {said}. Take the larger of DRAM% and SM% (gpu__dram_throughput "
                f"and sm__throughput); if it is at least 60% of peak it names the bound, else the kernel is "
                f"latency-bound.")
    if limiter != want_limiter:
        limits = ", ".join(f"{what} {metrics[f'launch__occupancy_limit_{key}']:g}"
                           for what, key in LIMITS.items())
        return (f"limiter is {limiter!r}, but the blocks per SM each resource allows are: {limits}. The one "
                f"that allows the fewest caps occupancy; on a tie, the first in the order registers, shared "
                f"memory, warps, blocks.")
    return None


# ---------------------------------------------------------------- roofline_point


def roofline_point_reference(metrics, flops, chip):
    spec = CHIPS[chip]
    nbytes = metrics["dram__bytes_read.sum"] + metrics["dram__bytes_write.sum"]
    seconds = metrics["gpu__time_duration.sum"] * 1e-9
    intensity = flops / nbytes
    tflops = flops / seconds / 1e12
    roof = min(spec.tflops["fp16"], intensity * spec.bandwidth_tbs)
    return {"intensity": intensity, "tflops": tflops, "tbs": nbytes / seconds / 1e12,
            "roof_tflops": roof, "fraction": tflops / roof}


def chip_key(device):
    """The CHIPS key of a device name as torch reports it, or None."""
    from helpers.roofline import chip_for

    chip = chip_for(device)
    return next((key for key, value in CHIPS.items() if value is chip), None)


def _random_ncu_kernel(r, intensity_range, chip):
    """Metrics of a made-up kernel at a random intensity, timed to reach 5% to 95% of its roof."""
    read = float(r.randint(10**6, 4 * 10**9))
    write = float(r.randint(0, 2 * 10**9))
    flops = int((read + write) * 10 ** r.uniform(*intensity_range))
    roof = CHIPS[chip].attainable(flops / (read + write))
    ns = round(flops / (roof * r.uniform(0.05, 0.95) * 1e12) * 1e9, 1)
    metrics = {"dram__bytes_read.sum": read, "dram__bytes_write.sum": write,
               "lts__t_bytes.sum": round((read + write) * r.uniform(1.5, 6)),
               "gpu__time_duration.sum": ns,
               DRAM_PCT: round(r.uniform(1, 95), 2), SM_PCT: round(r.uniform(1, 95), 2),
               "counted": {"bytes": int((read + write) * r.uniform(0.4, 0.9)), "flops": flops,
                           "what": "random"}}
    return metrics, flops


def _roofline_cases():
    r = random.Random()
    cases = []
    for device, data in _recorded("ncu.json"):
        key = chip_key(device)
        for k in data.get("kernels", []):
            if key and k.get("counted"):
                cases.append(Case(f"{device}: {k['target']}, recorded, on the {key} roofline",
                                  (k, k["counted"]["flops"], key)))
    for key in CHIPS:
        for lo, hi, where in ((-1.5, 1.0, "below the ridge"), (2.8, 4.0, "above the ridge")):
            metrics, flops = _random_ncu_kernel(r, (lo, hi), key)
            cases.append(Case(f"random kernel {where}, on the {key} roofline", (metrics, flops, key)))
    return cases


def _explain_roofline(out, expected):
    answer, (metrics, flops, chip) = out
    want, _ = expected
    if answer is None:
        return "your function returned None: return the dict."
    if not isinstance(answer, dict) or set(answer) != set(want):
        return f"return a dict with exactly the keys {sorted(want)}."
    bad = [key for key in ("intensity", "tflops", "tbs", "roof_tflops", "fraction")
           if not (_number(answer[key]) and _close(answer[key], want[key]))]
    if not bad:
        return None
    key = bad[0]
    got = answer[key]
    if not _number(got) or want[key] == 0:
        return f"{key} is {got!r}: a positive number."
    ratio = got / want[key]
    read, write = metrics["dram__bytes_read.sum"], metrics["dram__bytes_write.sum"]
    if key in ("intensity", "tbs"):
        for nbytes, why in ((read, "the bytes read only: DRAM traffic is read + write"),
                            (metrics.get("counted", {}).get("bytes"), "the course's counted bytes: this "
                             "point is placed by what ncu measured (dram__bytes_read + dram__bytes_write)"),
                            (metrics.get("lts__t_bytes.sum"), "L2 traffic (lts__t_bytes): the roofline's "
                             "bytes are DRAM bytes")):
            if not nbytes:
                continue
            used = (read + write) / nbytes if key == "intensity" else nbytes / (read + write)
            if _close(ratio, used):
                return f"{key} is off: it uses {why}."
    for factor, unit in ((1e3, "microseconds"), (1e6, "milliseconds"), (1e9, "seconds")):
        for f in (factor, 1 / factor):
            if _close(ratio, f):
                return (f"{key} is {ratio:.3g}x the right value: gpu__time_duration.sum is in nanoseconds "
                        f"(ncu.json's 'units'), not {unit}.")
    if key == "roof_tflops":
        spec = CHIPS[chip]
        fp32 = min(spec.tflops["fp32"], want["intensity"] * spec.bandwidth_tbs)
        if _close(got, want["intensity"] * spec.bandwidth_tbs):
            return "roof_tflops is off: the roof is the lower of the bandwidth slope and the peak (min)."
        if _close(got, fp32):
            return ("roof_tflops is off: it uses the fp32 peak. These kernels are placed against the fp16 "
                    "tensor-core peak, CHIPS[chip].tflops['fp16'].")
        if _close(got, spec.tflops["fp16"]):
            return "roof_tflops is off: below the ridge, the roof is intensity x bandwidth, not the peak."
    if key == "fraction":
        return "fraction is off: it is the achieved TFLOP/s over the roof at this intensity."
    return f"{key} is {got:.6g}, off by a factor {ratio:.4g}. Check the units of each metric."


EXERCISES = [
    Exercise("08", "kernel_table", "a kernel table from a trace", kernel_table_reference, _table_cases,
             run=_run, explain=_explain_table),
    Exercise("08", "gpu_idle_share", "how long the GPU waits", gpu_idle_share_reference, _idle_cases,
             run=_run, explain=_explain_idle),
    Exercise("08", "diagnose", "bound and occupancy limiter", diagnose_reference, _diagnose_cases,
             run=_run, explain=_explain_diagnose),
    Exercise("08", "roofline_point", "ncu's bytes on the roofline", roofline_point_reference,
             _roofline_cases, run=_run, explain=_explain_roofline),
]
