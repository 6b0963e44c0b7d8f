"""Lesson 08 exercises: reading profiles. Pure Python over profile data, no kernels.

Each exercise is graded on what `make profile` recorded (every recorded GPU, every recorded
variant) and on fresh random variants drawn here, built to catch the usual slips: overlapping
kernels on two streams, an unsorted list, a timeline that does not start at zero, copies and memsets
beside the kernels, launches through the driver API, nested operators, a second CPU thread, ties,
metrics exactly at a threshold. On a GPU, exercises 1 to 3 also get a step of the small decoder
block profiled live.

The learner's function gets a deep copy of each input (it may sort or change it freely); `run`
returns (answer, input) so that `explain` can name the mistake from the input, without giving the
right values away.
"""

import copy
import math
import numbers
import random

from helpers.exercises import Case, Exercise
from helpers.profile import (
    GPU_WORK,
    LAUNCHES,
    gpu_events,
    profile_step,
    recorded_devices,
    recorded_profile,
    save_trace,
)
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


def _not_a_count(rows, name, count):
    """A message if some row's `count` is not an integer, Python's or NumPy's (a float or a bool compares
    equal to one, and the lesson's tables print it with :d), else None."""
    row = next((row for row in rows
                if not isinstance(row[count], numbers.Integral) or isinstance(row[count], bool)), None)
    if row is None:
        return None
    return (f"the row of {str(row[name])[:60]!r} has {count} = {row[count]!r}, a "
            f"{type(row[count]).__name__}: a count of events is an int (count with 0, then += 1).")


def _run(fn, data, *rest):
    """Call fn on a deep copy of the input; keep the input beside the answer for explain."""
    return fn(copy.deepcopy(data), *copy.deepcopy(rest)), (data, *rest)


def _recorded(name):
    """[(device, data)] of one recorded file, for every GPU that has it."""
    found = []
    for device in recorded_devices():
        data = recorded_profile(name, device)
        if data is not None:
            found.append((device, data))
    return found


def _recorded_traces():
    """[(device, variant, trace)]: the recorded step traces of every GPU."""
    found = []
    for variant in VARIANTS:
        for device in recorded_devices():
            trace = recorded_profile(f"block_{variant}.trace.json.gz", device)
            if trace is not None:
                found.append((device, variant, trace))
    return found


def _live_small_trace():
    """The trace of one step of the SMALL decoder block profiled now (GPU only), or None."""
    import tempfile

    import torch

    from helpers.block import SMALL, block_input, block_weights, decoder_block
    from helpers.device import ON_GPU

    if not ON_GPU:
        return None
    w = block_weights(SMALL, "cuda", torch.float16)
    x = block_input(SMALL, 2, 64, "cuda", torch.float16)
    prof = profile_step(lambda: decoder_block(x, w, SMALL, attention="naive"), memory=False)
    with tempfile.TemporaryDirectory() as folder:
        return save_trace(prof, f"{folder}/step.trace.json.gz")


def _block_cases():
    """The GPU work (kernels, copies, memsets) of every recorded step, and of one profiled now."""
    cases = []
    for device, variant, trace in _recorded_traces():
        work = gpu_events(trace)
        label = f"{device}: block_{variant}, recorded ({len(work)} GPU events, copies and memsets among them)"
        cases.append(Case(label, (work,)))
    live = _live_small_trace()
    if live:
        cases.append(Case("the SMALL block profiled now", (gpu_events(live),)))
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


_COPIES = {"gpu_memcpy": "Memcpy DtoD (Device -> Device)", "gpu_memset": "Memset (Device)"}


def _random_kernels(r, n, names, streams=(7,), start=0.0, quantum=None, shuffle=True):
    """n GPU events with random names and durations (multiples of `quantum` if given, so that sums
    tie exactly), with gaps between them, on the given streams, about one in eight a copy or a
    memset; the list shuffled."""
    kernels, t = [], start
    for _ in range(n):
        dur = r.randint(1, 40) * quantum if quantum else round(r.uniform(0.5, 300.0), 3)
        stream = r.choice(streams)
        cat = r.choice(list(_COPIES)) if r.random() < 0.125 else "kernel"
        name = _COPIES.get(cat) or r.choice(names)
        kernels.append({"name": name, "cat": cat, "start_us": round(t, 3), "dur_us": dur, "stream": stream})
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
    many = [{"name": "tiny_elementwise", "cat": "kernel", "start_us": 10.0 * i, "dur_us": 2.0, "stream": 7}
            for i in range(30)]
    one = [{"name": "big_gemm", "cat": "kernel", "start_us": 400.0, "dur_us": 50.0, "stream": 7}]
    mid = [{"name": "attention", "cat": "kernel", "start_us": 500.0 + 50 * i, "dur_us": 45.0, "stream": 7}
           for i in range(2)]
    mixed = many + one + mid
    r.shuffle(mixed)
    cases.append(Case("often and short vs once and long (calls, mean and total disagree)", (mixed,)))
    # equal totals: the tie-break is the name, by Python's < (capitals before lowercase, as in
    # "Memset (Device)"); first-seen order is neither that nor the case-blind order
    tied = []
    for name in ("zeta_kernel", "alpha_kernel", "Mid_kernel"):
        for i, dur in enumerate((1.5, 2.5) if name != "Mid_kernel" else (4.0,)):
            tied.append({"name": name, "cat": "kernel", "start_us": 20.0 * len(tied), "dur_us": dur,
                         "stream": 7})
    tied += _random_kernels(r, 20, ["other_a", "other_b"], start=100.0, quantum=0.5)
    cases.append(Case("ties: kernels of equal total time, one name capitalised (the tie-break is the name)",
                      (tied,)))
    # identical events on two streams (the same kernel launched on each, at the same time): both count
    twins = _random_kernels(r, 24, r.sample(_NAMES, 4), start=50.0, shuffle=False)
    for k in r.sample(twins, 3):
        twins.append({**k, "stream": 13})
    r.shuffle(twins)
    cases.append(Case("identical events on two streams (same name, start and duration): each is a call",
                      (twins,)))
    cases.append(Case("random: two streams, totals in multiples of 0.25 (more ties)",
                      (_random_kernels(r, 80, r.sample(_NAMES, 6), streams=(7, 13), quantum=0.25),)))
    return cases


def _renamed(name, names):
    """Whether `name` looks like one of `names` changed (shortened, cased, stripped), not another name."""
    name = str(name).strip().lower()
    return bool(name) and any(name in n.lower() or n.lower() in name for n in names)


def _rounded(got, want):
    """The number of decimals `got` is `want` rounded to (2 to 6), if it is that, else None: a value
    rounded for printing, returned as the answer. (Not 0 or 1: a wrong answer such as 0 or 0.5 would
    match by chance, and be told something close to the right value.)"""
    if not (_number(got) and _number(want)) or _close(got, want):
        return None
    return next((digits for digits in range(2, 7) if got == round(want, digits)), None)


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
    not_int = _not_a_count(answer, "name", "calls")
    if not_int:
        return not_int
    names = [row["name"] for row in answer]
    if len(names) != len(set(names)):
        repeated = next(n for n in names if names.count(n) > 1)
        return (f"{len(answer)} rows for {len(want)} distinct kernel names ({repeated[:60]!r} has several "
                f"rows): group the events by name, one row per name.")
    wanted = {row["name"] for row in want}
    if set(names) != wanted:
        strange, missing = sorted(set(names) - wanted, key=str), sorted(wanted - set(names))
        if strange:
            said = (f"the rows name {len(set(names))} kernels, the events {len(want)}, and {len(strange)} of "
                    f"your rows name a kernel no event carries ({str(strange[0])[:60]!r})")
            if not any(_renamed(name, wanted) for name in strange):   # names of another list of events
                return (f"{said}, nor resembles a name they carry. Does your table outlive the call (a dict "
                        f"made outside the function keeps the last call's rows)? Start from an empty one "
                        f"each time.")
            return f"{said}: keep each name exactly as the events spell it."
        return (f"the rows name {len(set(names))} kernels, the events {len(want)}: no row for "
                f"{missing[0][:60]!r}{f' and {len(missing) - 1} more' if len(missing) > 1 else ''}. Every "
                f"event's name gets a row, copies and memsets included.")
    by_name = {row["name"]: row for row in want}
    for i, row in enumerate(answer):
        ref = by_name[row["name"]]
        if row["calls"] != ref["calls"]:
            distinct = {(k["start_us"], k["dur_us"]) for k in kernels if k["name"] == row["name"]}
            if row["calls"] == len(distinct):
                return (f"row {i} ({row['name'][:60]!r}): 'calls' is {row['calls']!r}, one per distinct "
                        f"(start, duration). Identical events on two streams are two calls: count each.")
            if row["calls"] > ref["calls"]:
                return (f"row {i} ({row['name'][:60]!r}): 'calls' is {row['calls']!r}, more than the "
                        f"number of events that carry that name ({ref['calls']}). Count each event once, "
                        f"from an empty table on each call (one kept outside the function adds to the last "
                        f"call's counts).")
            return (f"row {i} ({row['name'][:60]!r}): 'calls' is {row['calls']!r}; count the events that "
                    f"carry that name.")
        if not (_number(row["total_us"]) and _close(row["total_us"], ref["total_us"])):
            digits = _rounded(row["total_us"], ref["total_us"])
            if digits is not None:
                return (f"row {i} ({row['name'][:60]!r}): 'total_us' is {row['total_us']!r}, the sum rounded "
                        f"to {digits} decimals. Return the values as they are; round only when printing.")
            return (f"row {i} ({row['name'][:60]!r}): 'total_us' is {row['total_us']!r}; it is the sum of "
                    f"the durations of that name's events.")
    span = max(k["start_us"] + k["dur_us"] for k in kernels) - min(k["start_us"] for k in kernels)
    everything = sum(k["dur_us"] for k in kernels)
    kernels_only = sum(k["dur_us"] for k in kernels if k.get("cat", "kernel") == "kernel")
    for i, row in enumerate(answer):
        ref = by_name[row["name"]]
        if not (_number(row["share"]) and _close(row["share"], ref["share"])):
            if _number(row["share"]) and _close(row["share"], row["total_us"] / span):
                return (f"row {i}: 'share' is the kernel's time over the step's wall time (first start to "
                        f"last end), which counts the GPU's idle gaps. Divide by the total time of all "
                        f"kernels, so the shares add up to 1.")
            over_kernels = row["total_us"] / kernels_only if 0 < kernels_only < everything else None
            if _number(row["share"]) and over_kernels is not None and _close(row["share"], over_kernels):
                return (f"row {i}: 'share' is the row's time over the kernels' time alone. Copies and "
                        f"memsets are GPU work too, with rows of their own: divide by the time of every "
                        f"event, so the shares add up to 1.")
            digits = _rounded(row["share"], ref["share"])
            if digits is not None:
                return (f"row {i} ({row['name'][:60]!r}): 'share' is {row['share']!r}, the share rounded to "
                        f"{digits} decimals. Return the values as they are; round only when printing.")
            return (f"row {i} ({row['name'][:60]!r}): 'share' is {row['share']!r}; it is the row's total "
                    f"over the total time of all kernels (the shares add up to 1, the column adds up to "
                    f"{sum(r['share'] for r in answer if _number(r['share'])):.6g}).")
    for i in range(1, len(answer)):
        a, b = answer[i - 1], answer[i]
        if b["total_us"] > a["total_us"] and not _close(a["total_us"], b["total_us"]):
            how = ""
            if round(a["total_us"]) == round(b["total_us"]):
                how = " (sorted by a rounded total?)"
            elif a["calls"] > b["calls"]:
                how = " (sorted by calls?)"
            elif a["total_us"] / a["calls"] > b["total_us"] / b["calls"]:
                how = " (sorted by mean time per call?)"
            return (f"rows {i - 1} and {i} are out of order: row {i} has more total time{how}. Sort by "
                    f"total_us, most first: row 0 is the kernel to look at first.")
        if a["total_us"] == b["total_us"] and a["name"] > b["name"]:
            return (f"rows {i - 1} and {i} have the same total_us: the tie-break is the name, in "
                    f"Python's order of strings (<), where capitals come before lowercase letters.")
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
    kernels.append({"name": "long_gemm", "cat": "kernel", "start_us": round(first + 0.3 * (end - first), 3),
                    "dur_us": round(0.8 * (end - first), 3), "stream": 21})
    kernels.append({"name": "short_tail", "cat": "kernel", "start_us": round(first + 0.35 * (end - first), 3),
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
    back_to_back = [{"name": "a", "cat": "kernel", "start_us": 50.0 + 3 * i, "dur_us": 3.0, "stream": 7}
                    for i in range(10)]
    back_to_back[5] = {**back_to_back[5], "name": _COPIES["gpu_memset"], "cat": "gpu_memset"}
    back_to_back[3], back_to_back[7] = back_to_back[7], back_to_back[3]
    cases.append(Case("no gaps at all: back to back, a memset among the kernels (the answer is 0)",
                      (back_to_back,)))
    # a memset opens the step (a buffer zeroed before the kernels that add into it) and a device copy
    # closes it
    edged = _random_kernels(r, 12, r.sample(_NAMES, 4), start=r.uniform(300, 900), shuffle=False)
    opens = min(k["start_us"] for k in edged) - round(r.uniform(10, 40), 3)
    closes = max(k["start_us"] + k["dur_us"] for k in edged) + round(r.uniform(10, 40), 3)
    edged += [{"name": _COPIES["gpu_memset"], "cat": "gpu_memset", "start_us": round(opens, 3), "dur_us": 2.0,
               "stream": 7},
              {"name": _COPIES["gpu_memcpy"], "cat": "gpu_memcpy", "start_us": round(closes, 3),
               "dur_us": round(r.uniform(5, 60), 3), "stream": 7}]
    r.shuffle(edged)
    cases.append(Case("a memset opens the step and a device copy closes it (the span runs from the first "
                      "event to the last, whatever their kind)", (edged,)))
    return cases


def busy_us(kernels):
    """Microseconds during which at least one kernel (or copy, or memset) runs: the union of
    [start, start + duration] (a later lesson reads it too)."""
    intervals = sorted((k["start_us"], k["start_us"] + k["dur_us"]) for k in kernels)
    covered, reached = 0.0, -math.inf
    for start, end in intervals:
        covered += max(0.0, end - max(start, reached))
        reached = max(reached, end)
    return covered


def _in_list_order(kernels):
    """Idle shares that two usual merges of intervals give when they skip the sort: each kernel taken
    in the list's order, the span from the first listed start or from the earliest one."""
    intervals = [(k["start_us"], k["start_us"] + k["dur_us"]) for k in kernels]
    last = max(end for _, end in intervals)
    shares = []
    for first in (intervals[0][0], min(start for start, _ in intervals)):
        busy, reached = 0.0, first                      # only what is past the latest end seen
        for start, end in intervals:
            busy += max(0.0, end - max(start, reached))
            reached = max(reached, end)
        run_busy, (run_start, run_end) = 0.0, intervals[0]   # runs closed at a gap after the run's end
        for start, end in intervals[1:]:
            if start > run_end:
                run_busy += run_end - run_start
                run_start, run_end = start, end
            else:
                run_end = max(run_end, end)
        run_busy += run_end - run_start
        shares += [(last - first - b) / (last - first) for b in (busy, run_busy) if last > first]
    return shares


def _merged_without_max(kernels):
    """Idle shares that three usual slips of the merge give, on intervals sorted by start, each taking
    the previous kernel's end for the latest end so far (a kernel inside a longer one then cuts it
    short): a run's end set to each overlapping kernel's end, the part of a kernel past the previous
    one's end counted busy, and a gap measured from the previous kernel's end."""
    intervals = sorted((k["start_us"], k["start_us"] + k["dur_us"]) for k in kernels)
    first, last = intervals[0][0], max(end for _, end in intervals)
    if last <= first:
        return []
    runs, (run_start, run_end) = 0.0, intervals[0]
    for start, end in intervals[1:]:
        if start > run_end:
            runs, run_start = runs + run_end - run_start, start
        run_end = end
    runs += run_end - run_start
    past, reached = 0.0, first
    for start, end in intervals:
        past += max(0.0, end - max(start, reached))
        reached = end
    idle = sum(max(0.0, b[0] - a[1]) for a, b in zip(intervals, intervals[1:]))
    return [(last - first - runs) / (last - first), (last - first - past) / (last - first),
            idle / (last - first)]


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
    kernels_only = [k for k in kernels if k.get("cat", "kernel") == "kernel"]
    has_copies = 0 < len(kernels_only) < len(kernels)
    mistakes = [
        (gpu_idle_share_reference(kernels_only) if has_copies else None,
         "it leaves out the copies and memsets (cat 'gpu_memcpy', 'gpu_memset'). They keep the GPU busy as "
         "kernels do: count every event of the list."),
        (1 - total / (last - first), "it adds up the kernels' durations, which counts twice the time when "
         "kernels overlap on different streams. Merge the intervals [start, start + dur] first, and count "
         "the time covered by at least one kernel."),
        (1 - busy / last, "it measures the timeline from 0, not from the first kernel's start (this case's "
         "first kernel starts later). The span runs from the first start to the last end."),
        (1 - busy / (last_started - first) if last_started > first else None,
         "it ends the timeline where the last kernel to start ends; a kernel that started earlier can end "
         "later (here one does). The span ends at the latest end of any kernel."),
    ]
    inner = ("it lets a kernel that lies inside another (a short one on a second stream, during a long one) "
             "end the busy time. Keep the latest end seen so far (a max), and measure a gap from there, not "
             "from the previous kernel's end.")
    mistakes += [(share, inner) for share in _merged_without_max(kernels)]
    kernels_span = ("it takes the span from the first kernel's start or to the last kernel's end, leaving "
                    "out the memset or the copy at an end of this step. Copies and memsets keep the GPU busy "
                    "as kernels do: the span runs from the first event's start to the last event's end, "
                    "whatever their kind.")
    if has_copies:   # the span taken from the kernels alone, at one end or both; the busy time from all
        k_first = min(k["start_us"] for k in kernels_only)
        k_last = max(k["start_us"] + k["dur_us"] for k in kernels_only)
        for a, b in ((k_first, last), (first, k_last), (k_first, k_last)):
            if (a, b) != (first, last) and b > a:
                clipped = [{**k, "start_us": max(a, k["start_us"]),
                            "dur_us": max(0.0, min(b, k["start_us"] + k["dur_us"]) - max(a, k["start_us"]))}
                           for k in kernels]
                mistakes += [(1 - covered / (b - a), kernels_span) for covered in (busy, busy_us(clipped))]
    for value, why in mistakes:
        if value is not None and _close(answer, value):
            return f"your idle share is {answer:.6g}: {why}"
    if not 0 <= answer <= 1:
        return f"your idle share is {answer:.6g}: a share of the timeline lies between 0 and 1."
    digits = _rounded(answer, want)
    if digits is not None:
        return (f"your idle share is {answer!r}, the share rounded to {digits} decimals. Return it as it is; "
                f"round only when printing.")
    if _close(answer, 1 - want):
        return (f"your idle share is {answer:.6g}: that is the share during which kernels run. The "
                f"exercise asks for the rest, the share during which none runs.")
    unsorted = any(a["start_us"] > b["start_us"] for a, b in zip(kernels, kernels[1:]))
    in_order = unsorted and any(_close(answer, share) for share in _in_list_order(kernels))
    hint = (" This case's list is not sorted by start time, and your answer is what merging the intervals "
            "in the list's order gives: sort them by start first." if in_order else "")
    which = "high" if answer > want else "low"
    return (f"your idle share is {answer:.6g}, too {which}. Idle time is the span from the first "
            f"event's start to the last end, minus the time covered by at least one event.{hint}")


# ---------------------------------------------------------------- gpu_time_by_op

NO_OP = "(no operator)"   # GPU events whose launch is not in the trace, or lies inside no operator


def _charge(events, launches=LAUNCHES, work=GPU_WORK, operators=("cpu_op",), via="launch", pick="innermost",
            same_thread=True, time_of="gpu", orphans=True, named="", linked=GPU_WORK):
    """GPU time per operator. The defaults are the spec; each other value is a slip `explain` names:
    which launch categories count, which GPU events, which events are operators, whether the operator
    is found around the launch or around the GPU event's own start, the innermost or the outermost
    one, on the launch's thread or any, whose duration is summed, whether unattributed events are
    kept under NO_OP, whether operators are also picked by a prefix of their name, and which GPU
    events' launches are looked up (the others charged to NO_OP)."""
    calls = {e["args"]["correlation"]: e for e in events
             if e.get("cat") in launches and "correlation" in e.get("args", {})}
    ops = [e for e in events
           if e.get("cat") in operators and e.get("ph") == "X" and e["name"].startswith(named)]
    rows = {}
    for g in events:
        if g.get("cat") not in work:
            continue
        launch = calls.get(g.get("args", {}).get("correlation")) if g.get("cat") in linked else None
        at = launch if via == "launch" else g
        around = [] if at is None else [
            o for o in ops if o["ts"] <= at["ts"] <= o["ts"] + o["dur"]
            and (not same_thread or via != "launch" or o["tid"] == at["tid"])]
        if around:
            name = (min if pick == "innermost" else max)(around, key=lambda o: o["dur"])["name"]
        elif orphans:
            name = NO_OP
        else:
            continue
        row = rows.setdefault(name, {"op": name, "gpu_us": 0.0, "events": 0})
        row["gpu_us"] += launch["dur"] if time_of == "launch" and launch is not None else g["dur"]
        row["events"] += 1
    return sorted(rows.values(), key=lambda row: (-row["gpu_us"], row["op"]))


def gpu_time_by_op_reference(events):
    return _charge(events)


class _Trace:
    """A hand-made trace: operators on CPU threads, launch calls inside them, and the GPU events they
    enqueue on one stream, which starts each event when the previous one ends (the GPU queues)."""

    def __init__(self):
        self.events, self.gpu_free, self.next_id = [], 0.0, 100

    def op(self, name, ts, dur, tid=1, cat="cpu_op"):
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur,
                            "args": {}})

    def launch(self, ts, dur, kind="kernel", name="kernel", api=None, tid=1, recorded=True):
        """A launch call at ts (CPU) and the GPU event it enqueues, `dur` long."""
        self.next_id += 1
        api = api or {"kernel": "cudaLaunchKernel", "gpu_memcpy": "cudaMemcpyAsync",
                      "gpu_memset": "cudaMemsetAsync"}[kind]
        if recorded:
            cat = "cuda_driver" if api.startswith("cuLaunch") else "cuda_runtime"
            self.events.append({"ph": "X", "cat": cat, "name": api, "pid": 1, "tid": tid, "ts": ts,
                                "dur": 4.5, "args": {"correlation": self.next_id}})
        start = max(self.gpu_free, ts + 6.0)
        self.gpu_free = start + dur
        self.events.append({"ph": "X", "cat": kind, "name": _COPIES.get(kind, name), "pid": 0, "tid": 7,
                            "ts": start, "dur": dur, "args": {"correlation": self.next_id, "stream": 7}})

    def done(self, r):
        """The events in a random order, a `step` span (record_function) around them all, and a
        synchronize call, which enqueues nothing."""
        cpu = [e for e in self.events if e["pid"] == 1]
        first, last = min(e["ts"] for e in cpu), max(e["ts"] + e["dur"] for e in cpu)
        self.op("step", first - 1.0, last - first + 2.0, cat="user_annotation")
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "pid": 1,
                            "tid": 1, "ts": last, "dur": 3.0, "args": {"correlation": 1}})
        r.shuffle(self.events)
        return self.events


def _hand_traces(r):
    """[(label, events)]: the edge cases, one trace each."""
    out = []
    t = _Trace()   # cuBLAS's way: a memset, then the matmul through the driver API
    t.op("aten::linear", 0.0, 60.0)
    t.op("aten::matmul", 5.0, 50.0)
    t.op("aten::mm", 10.0, 40.0)
    t.launch(15.0, 3.0, "gpu_memset")
    t.launch(30.0, 250.0, name="nvjet_sm90_gemm", api="cuLaunchKernelEx")
    t.op("aten::add", 70.0, 20.0)
    t.launch(75.0, 12.0, name="add_kernel")
    out.append(("a matmul's memset and kernel, launched through cudaMemsetAsync and cuLaunchKernelEx "
                "(cat cuda_driver), inside aten::linear > aten::matmul > aten::mm", t.done(r)))
    t = _Trace()   # masked_fill clones its input (a device copy), then runs its own kernel
    t.op("aten::masked_fill", 0.0, 100.0)
    t.op("aten::clone", 5.0, 40.0)
    t.op("aten::copy_", 10.0, 30.0)
    t.launch(20.0, 500.0, "gpu_memcpy")
    t.launch(60.0, 700.0, name="masked_fill_kernel")      # in masked_fill itself, after clone returned
    t.op("aten::to", 120.0, 40.0)
    t.op("aten::_to_copy", 120.0, 30.0)                   # starts with its parent: the shorter is inside
    t.launch(120.0, 80.0, name="copy_kernel")
    t.op("aten::layer_norm", 200.0, 60.0)
    t.op("aten::native_layer_norm", 230.0, 30.0)          # ends with its parent: the shorter is inside
    t.launch(240.0, 50.0, name="layer_norm_kernel")
    out.append(("nested operators: a copy inside aten::clone > aten::copy_, a kernel launched by "
                "aten::masked_fill itself, a child that starts at its parent's start, and one that ends "
                "at its parent's end", t.done(r)))
    t = _Trace()   # the GPU far behind: each kernel starts while the CPU is in a later operator
    for i, (name, dur) in enumerate((("aten::mm", 400.0), ("aten::mul", 150.0), ("aten::softmax", 300.0),
                                     ("aten::add", 90.0), ("aten::silu", 60.0))):
        t.op(name, 30.0 * i, 25.0)
        t.launch(30.0 * i + 10.0, dur, name=f"{name[6:]}_kernel")
    out.append(("a queue: each kernel starts on the GPU long after its launch, when the CPU is already "
                "in a later operator", t.done(r)))
    t = _Trace()   # equal totals: the tie-break is the name by Python's < ("aten::Int" before "aten::add"),
    # and first-seen order is neither that nor the case-blind order
    tied = (("aten::sub", (1.5, 2.5)), ("aten::add", (4.0,)), ("aten::Int", (3.0, 1.0)),
            ("aten::cat", (2.0,)))
    for i, (name, durs) in enumerate(tied):
        t.op(name, 40.0 * i, 30.0)
        for j, dur in enumerate(durs):
            t.launch(40.0 * i + 5.0 + 10.0 * j, dur, name=f"{name[6:]}_kernel")
    out.append(("ties: operators with equal GPU time, one name capitalised (the tie-break is the name)",
                t.done(r)))
    t = _Trace()   # a second CPU thread whose operator, shorter, spans the main thread's launch time
    t.op("aten::mm", 100.0, 100.0)
    t.launch(150.0, 40.0, name="gemm_kernel")
    t.op("aten::fill_", 140.0, 20.0, tid=2)
    t.launch(145.0, 2.0, name="fill_kernel", tid=2)
    t.op("aten::copy_", 210.0, 30.0)
    t.launch(220.0, 9.0, "gpu_memcpy")
    t.op("aten::zero_", 250.0, 12.5)
    t.launch(262.5, 3.0, name="zero_kernel")              # exactly at the operator's end: still inside
    out.append(("two CPU threads: an operator of thread 2 spans a launch of thread 1; a launch exactly at "
                "its operator's end", t.done(r)))
    t = _Trace()   # launches that no operator made, and a GPU event whose launch was not recorded
    t.op("aten::mm", 0.0, 30.0)
    t.launch(10.0, 50.0, name="gemm_kernel")
    t.launch(40.0, 80.0, name="triton_matmul_kernel", api="cuLaunchKernelEx")   # a Triton launch from Python
    t.launch(45.0, 5.0, name="lost_kernel", recorded=False)
    t.op("aten::add", 60.0, 10.0)
    t.launch(62.0, 3.0, name="add_kernel")
    # a custom operator (torch.library, a CUDA C++ kernel) around its launch: a cpu_op, not named aten::
    t.op("course::rms_norm", 80.0, 20.0)
    t.op("aten::empty", 83.0, 2.0)
    t.launch(90.0, 20.0, name="rms_norm_kernel")
    out.append(("a Triton kernel launched from Python (no operator around its launch), a kernel whose "
                "launch is not in the trace, and a kernel launched inside a custom operator "
                "('course::rms_norm', registered with torch.library)", t.done(r)))
    return out


_OP_NAMES = ["aten::linear", "aten::matmul", "aten::mm", "aten::mul", "aten::add", "aten::to",
             "aten::_to_copy", "aten::copy_", "aten::softmax", "aten::_softmax", "aten::silu", "aten::cat",
             "aten::masked_fill"]


def _random_trace(r, n_top, threads=(1,), quantum=None):
    """Random nested operators on each thread (up to three deep), launches inside operators and
    between them, GPU events queued behind their launches; durations in multiples of `quantum` if
    given (ties)."""
    t = _Trace()

    def launch(at, kinds, tid):
        kind = r.choice(kinds)
        api = r.choice([None, "cuLaunchKernelEx"]) if kind == "kernel" else None   # runtime or driver API
        dur = r.randint(1, 30) * quantum if quantum else round(r.uniform(0.5, 400.0), 3)
        t.launch(at, dur, kind, name=f"k{r.randint(0, 9)}", api=api, tid=tid)

    def operator(start, depth, tid):
        at = start + round(r.uniform(1.0, 4.0), 3)
        for _ in range(r.randint(0, 2) if depth < 2 else 0):
            if r.random() < 0.4:                        # the operator's own launch, before a child
                launch(at, ["kernel", "kernel", "gpu_memcpy", "gpu_memset"], tid)
                at += 5.0
            at = operator(at, depth + 1, tid) + round(r.uniform(1.0, 3.0), 3)
        if depth == 2 or r.random() < 0.6:
            launch(at, ["kernel", "kernel", "kernel", "gpu_memset"], tid)
            at += 5.0
        end = at + round(r.uniform(1.0, 4.0), 3)
        t.op(r.choice(_OP_NAMES), start, round(end - start, 3), tid=tid)
        return end

    for tid in threads:
        at = r.uniform(0.0, 50.0)
        for _ in range(n_top):
            at = operator(at, 0, tid) + r.uniform(2.0, 20.0)
            if r.random() < 0.1:                        # a launch between operators (Triton, from Python)
                dur = round(r.uniform(5.0, 90.0), 3)
                t.launch(at, dur, name="triton_kernel", api="cuLaunchKernelEx", tid=tid)
                at += 8.0
    return t.done(r)


def _by_op_cases():
    r = random.Random()
    cases = [Case(f"{device}: block_{variant}, recorded ({len(trace['traceEvents'])} trace events)",
                  (trace["traceEvents"],)) for device, variant, trace in _recorded_traces()]
    live = _live_small_trace()
    if live:
        cases.append(Case("the SMALL block profiled now", (live["traceEvents"],)))
    for label, events in _hand_traces(r):
        cases.append(Case(label, (events,)))
        if label.startswith("nested operators"):   # the parent and the child that starts with it, both ways
            cases.append(Case(label + ", the events in the reverse order", (events[::-1],)))
    cases.append(Case("random: nested operators on one thread, driver and runtime launches",
                      (_random_trace(r, 25),)))
    cases.append(Case("random: two CPU threads launching", (_random_trace(r, 15, threads=(1, 2)),)))
    cases.append(Case("random: durations in multiples of 0.5 (ties)", (_random_trace(r, 30, quantum=0.5),)))
    return cases


def _same_rows(answer, rows):
    """The same operators with the same times and counts (order aside)."""
    want = {row["op"]: row for row in rows}
    return len(answer) == len(want) and all(
        row["op"] in want and row["events"] == want[row["op"]]["events"]
        and _number(row["gpu_us"]) and _close(row["gpu_us"], want[row["op"]]["gpu_us"]) for row in answer)


# (a slip, as _charge's arguments; what to say when the answer is exactly that)
_SLIPS = [
    (dict(launches=("cuda_runtime",)),
     "the kernels launched through the driver API are not found: cuBLAS and cuDNN launch with "
     "cuLaunchKernelEx, which the trace files under 'cuda_driver', not 'cuda_runtime'. Look for the launch "
     "call in both categories."),
    (dict(work=("kernel",)),
     "the device copies (cat 'gpu_memcpy') and memsets ('gpu_memset') are missing. They are GPU work too, "
     "launched like kernels (cudaMemcpyAsync, cudaMemsetAsync): charge them the same way."),
    (dict(via="start"),
     "each GPU event is charged to the operator the CPU was running when the event started on the GPU. The "
     "GPU runs behind the CPU (launches queue up), so by then the CPU is often in a later operator. Follow "
     "args['correlation'] to the launch call and look for the operator around the launch."),
    (dict(pick="outermost"),
     "each GPU event is charged to the outermost operator around its launch (aten::linear rather than "
     "aten::mm). Charge the innermost: the shortest operator whose span contains the launch, the one that "
     "made the call (the profiler's Self CUDA column does the same)."),
    (dict(same_thread=False),
     "an operator of another CPU thread (another 'tid') whose span contains the launch time got the charge. "
     "Only the operators of the launch's own thread can have made the call."),
    (dict(time_of="launch"),
     "'gpu_us' adds up the launch calls' durations: that is CPU time, spent in cudaLaunchKernel. Add up the "
     "durations of the GPU events themselves."),
    (dict(orphans=False),
     f"GPU events whose launch is not in the trace, or lies inside no operator, are left out: charge them "
     f"to {NO_OP!r}."),
    (dict(named="aten::"),
     "only the operators named 'aten::...' were taken for operators. A custom operator (registered with "
     "torch.library, like 'course::rms_norm') is a 'cpu_op' too: find the operators by their cat, not by "
     "their name."),
    (dict(linked=("kernel",)),
     f"the copies and memsets are charged to {NO_OP!r}, as if they had no launch: their launch calls "
     f"(cudaMemcpyAsync, cudaMemsetAsync) carry a correlation id too. Look up every GPU event's launch by "
     f"its id, whatever the call's name."),
    (dict(operators=("cpu_op", "user_annotation")),
     "a record_function span (cat 'user_annotation', like 'step') was taken for an operator: only 'cpu_op' "
     "events are operators."),
]


def _explain_by_op(out, expected):
    answer, (events,) = out
    want, _ = expected
    if answer is None:
        return "your function returned None: return the list of rows."
    if not isinstance(answer, list) or not all(isinstance(row, dict) for row in answer):
        return "return a list of dicts, one per operator."
    keys = {"op", "gpu_us", "events"}
    bad_keys = next((row for row in answer if set(row) != keys), None)
    if bad_keys is not None:
        return f"a row has the keys {sorted(bad_keys)}: each row needs exactly {sorted(keys)}."
    not_int = _not_a_count(answer, "op", "events")
    if not_int:
        return not_int
    names = [row["op"] for row in answer]
    if len(names) != len(set(names)):
        repeated = next(n for n in names if names.count(n) > 1)
        return f"{repeated!r} has several rows: add up its GPU events into one row per operator name."
    if not _same_rows(answer, want):
        for slip, why in _SLIPS:
            if _same_rows(answer, _charge(events, **slip)):
                return f"your rows are what you get when {why}"
        by_op = {row["op"]: row for row in want}
        extra, missing = sorted(set(names) - set(by_op)), sorted(set(by_op) - set(names))
        if extra or missing:
            said = [f"{extra[0]!r} has a row but made none of this case's GPU events"] if extra else []
            said += [f"{missing[0]!r} made some but has no row"] if missing else []
            unlinked = ("" if any("External id" in e.get("args", {}) for e in events) else
                        " (If you link through 'External id': this trace's events carry none, as a trace may "
                        "not; the correlation id is always there.)")
            return (f"{'; '.join(said)}. Charge each GPU event to the innermost 'cpu_op' around its launch "
                    f"call (ts <= the launch's ts <= ts + dur, both ends included), on the launch's "
                    f"thread.{unlinked}")
        for i, row in enumerate(answer):
            ref = by_op[row["op"]]
            if row["events"] != ref["events"]:
                return (f"row {i} ({row['op']!r}): 'events' is {row['events']!r}; count the GPU events "
                        f"charged to that operator.")
            if not (_number(row["gpu_us"]) and _close(row["gpu_us"], ref["gpu_us"])):
                digits = _rounded(row["gpu_us"], ref["gpu_us"])
                if digits is not None:
                    return (f"row {i} ({row['op']!r}): 'gpu_us' is {row['gpu_us']!r}, the sum rounded to "
                            f"{digits} decimals. Return the values as they are; round only when printing.")
                return (f"row {i} ({row['op']!r}): 'gpu_us' is {row['gpu_us']!r}; it is the sum of the 'dur' "
                        f"of the GPU events charged to that operator.")
    for i in range(1, len(answer)):
        a, b = answer[i - 1], answer[i]
        if b["gpu_us"] > a["gpu_us"] and not _close(a["gpu_us"], b["gpu_us"]):
            return (f"rows {i - 1} and {i} are out of order: row {i} has more GPU time. Sort by gpu_us, most "
                    f"first.")
        if a["gpu_us"] == b["gpu_us"] and a["op"] > b["op"]:
            return (f"rows {i - 1} and {i} have the same gpu_us: the tie-break is the operator's name, in "
                    f"Python's order of strings (<), where capitals come before lowercase letters.")
    return None


# ---------------------------------------------------------------- diagnose


def _bound(dram, sm, at=BOUND_AT, strict=False, first_over=None):
    """The speed-of-light rule on (dram, sm); the other arguments are slips `explain` names: the rule
    with > for >=, or with the first of the two that reaches 60 named without comparing them."""
    if (max(dram, sm) > at) if strict else (max(dram, sm) >= at):
        if first_over == "dram":
            return "memory" if dram >= at else "compute"
        if first_over == "sm":
            return "compute" if sm >= at else "memory"
        return "memory" if dram >= sm else "compute"
    return "latency"


def diagnose_reference(metrics):
    bound = _bound(metrics[DRAM_PCT], metrics[SM_PCT])
    limits = {what: metrics[f"launch__occupancy_limit_{key}"] for what, key in LIMITS.items()}
    limiter = min(limits, key=limits.get)   # min keeps the first of equal values: the tie order
    return bound, limiter


L2_HIT = "lts__t_sector_hit_rate.pct"


def _random_metrics(r, dram=None, sm=None, limits=None, tensor=None, l2_hit=None):
    """A kernel's metrics as ncu records them, with chosen or random values."""
    m = {DRAM_PCT: round(r.uniform(0, 100), 2) if dram is None else dram,
         SM_PCT: round(r.uniform(0, 100), 2) if sm is None else sm,
         TENSOR_PCT: round(r.uniform(0, 100), 2) if tensor is None else tensor,
         L2_HIT: round(r.uniform(0, 100), 2) if l2_hit is None else l2_hit,
         "sm__warps_active.avg.pct_of_peak_sustained_active": round(r.uniform(5, 100), 2),
         "launch__registers_per_thread": float(r.choice([26, 40, 64, 128, 168, 255])),
         "launch__shared_mem_per_block": float(r.choice([0, 1024, 49152, 132096, 214212]))}
    limits = limits or [r.randint(1, 32) for _ in LIMITS]
    # in the order ncu.json keeps them (alphabetical), not the tie order: a tie must be broken by the
    # rule's order, whatever order the keys come in
    for key, value in sorted(zip(LIMITS.values(), limits)):
        m[f"launch__occupancy_limit_{key}"] = float(value)
    return m


def _diagnose_cases():
    r = random.Random()
    cases = []
    for device, data in _recorded("ncu.json"):
        for k in data.get("kernels", []):
            cases.append(Case(f"{device}: {k.get('target') or k.get('Kernel Name')}, recorded", (k,)))
    lo = round(r.uniform(5, 55), 2)
    hi, higher = sorted(round(r.uniform(61, 98), 2) for _ in range(2))
    higher += 1.0 if higher == hi else 0.0
    # At the threshold, the L2 hit rate and the tensor pipe are drawn where reading them by mistake
    # gives the right answer: a wrong answer there is the comparison's, and the message can say so.
    cases += [
        Case("DRAM exactly at 60% of peak, SM below: the rule says >= 60", (_random_metrics(
            r, dram=60.0, sm=lo, limits=[4, 9, 8, 32], tensor=round(r.uniform(0, 60), 2),
            l2_hit=round(r.uniform(60, 100), 2)),)),
        Case("SM exactly at 60%, DRAM below", (_random_metrics(
            r, dram=lo, sm=60.0, limits=[7, 3, 8, 32], tensor=round(r.uniform(60, 100), 2),
            l2_hit=round(r.uniform(0, lo), 2)),)),
        Case("both above 60%, SM the larger: compute", (_random_metrics(
            r, dram=hi, sm=higher, tensor=round(r.uniform(higher, 100), 2),
            l2_hit=round(r.uniform(0, hi), 2)),)),
        Case("both above 60%, DRAM the larger: memory", (_random_metrics(
            r, dram=higher, sm=hi, tensor=round(r.uniform(0, hi), 2),
            l2_hit=round(r.uniform(higher, 100), 2)),)),
        Case("both above 60%, SM a hundredth above DRAM: compute (whole percents would tie)",
             (_random_metrics(r, dram=(close := round(r.uniform(61, 95), 1)), sm=round(close + 0.01, 2)),)),
        Case("DRAM% equal to SM%, above 60%: a tie names memory", (_random_metrics(
            r, dram=(both := round(r.uniform(60, 95), 2)), sm=both, limits=[5, 9, 8, 32], tensor=both,
            l2_hit=both),)),
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
        said = f"DRAM at {dram:g}% and SM at {sm:g}% of peak"
        # each part of the rule in turn: the metrics read, the comparison with 60, the comparison of the two
        slips = [
            (_bound(dram, sm, strict=True), "the rule is 'at least 60%' (>=), and here one is at 60."),
            ("compute" if dram == sm >= BOUND_AT else None,
             "DRAM% and SM% are equal here, and a tie names memory: 'memory' when dram >= sm."),
            (_bound(metrics.get(L2_HIT, -1.0), sm),
             f"it reads as DRAM% the L2 hit rate ({L2_HIT}, here {metrics.get(L2_HIT, -1.0):g}%), which says "
             f"how often L2 serves a request, not how busy DRAM is: DRAM% is gpu__dram_throughput."),
            (_bound(dram, metrics.get(TENSOR_PCT, -1.0)),
             f"it reads as SM% the tensor pipe's activity (here {metrics.get(TENSOR_PCT, -1.0):g}%), one "
             f"unit of the SM: SM% is sm__throughput, the busiest unit's share of its peak."),
            (_bound(dram, sm, first_over="dram") if min(dram, sm) >= BOUND_AT and dram != sm else None,
             "both are at least 60% here: the larger of the two names the bound, whichever is tested first."),
            (_bound(dram, sm, first_over="sm") if min(dram, sm) >= BOUND_AT and dram != sm else None,
             "both are at least 60% here: the larger of the two names the bound, whichever is tested first."),
            (_bound(dram, sm, at=80.0), "the threshold is 60% of peak (ncu's rule as the lesson states it)."),
            (_bound(dram, sm, at=0.6), "both are below 60 here, so the kernel is latency-bound. The metrics "
             "are percentages (0 to 100), not fractions: the threshold is 60, not 0.6."),
            (_bound(dram, sm) if min(dram, sm) >= BOUND_AT else "latency",
             "it asks both to reach 60%: the larger of the two reaching 60% is enough."),
            (_bound(dram, sm) if (dram + sm) / 2 >= BOUND_AT else "latency",
             "it compares their mean with 60%: it is the larger of the two that counts."),
            (_bound(round(dram), round(sm)),
             "it rounds the percentages before comparing them with 60: compare them as they are."),
        ]
        whys = list(dict.fromkeys(why for value, why in slips if value == bound))
        if len(whys) == 1:
            return f"bound is {bound!r} with {said}: {whys[0]}"
        if whys:   # this case cannot tell these slips apart: name each
            return f"bound is {bound!r} with {said}. Either " + " Or ".join(whys)
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


def _random_ncu_kernel(r, intensity_range, chip, share=(0.05, 0.95)):
    """Metrics of a made-up kernel at a random intensity, timed to reach a share of its roof (5% to 95%
    unless given)."""
    read = float(r.randint(10**6, 4 * 10**9))
    write = float(r.randint(0, 2 * 10**9))
    flops = int((read + write) * 10 ** r.uniform(*intensity_range))
    roof = CHIPS[chip].attainable(flops / (read + write))
    ns = round(flops / (roof * r.uniform(*share) * 1e12) * 1e9, 1)
    metrics = {"dram__bytes_read.sum": read, "dram__bytes_write.sum": write,
               "lts__t_bytes.sum": round((read + write) * r.uniform(1.5, 6)),
               "gpu__time_duration.sum": ns,
               DRAM_PCT: round(r.uniform(1, 95), 2), SM_PCT: round(r.uniform(1, 95), 2),
               # the course's own counts differ from ncu's bytes and from the FLOPs passed in: an answer
               # that reads them instead of its inputs shows
               "counted": {"bytes": int((read + write) * r.uniform(0.4, 0.9)),
                           "flops": int(flops * r.uniform(0.5, 0.9)), "what": "random"}}
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
    # above its DRAM roof: a kernel whose data L2 kept moves fewer DRAM bytes than it uses, and its
    # fraction passes 1 (lesson 08 shows such kernels); the fraction says so, uncapped
    metrics, flops = _random_ncu_kernel(r, (-1.5, 0.0), "H100 SXM", share=(1.1, 1.4))
    cases.append(Case("random kernel above its DRAM roof (L2 hits), on the H100 SXM roofline",
                      (metrics, flops, "H100 SXM")))
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
    counted_flops = metrics.get("counted", {}).get("flops")
    if key in ("intensity", "tflops") and counted_flops and counted_flops != flops and _close(
            ratio, counted_flops / flops):
        return (f"{key} is off: it uses metrics['counted']['flops'] rather than the `flops` argument. Work "
                f"from what you are given: the FLOPs passed in, ncu's bytes and time.")
    if key in ("intensity", "tbs"):
        for nbytes, why in ((read, "the bytes read only: DRAM traffic is read + write"),
                            (write, "the bytes written only: DRAM traffic is read + write"),
                            (metrics.get("counted", {}).get("bytes"), "the course's counted bytes: this "
                             "point is placed by what ncu measured (dram__bytes_read + dram__bytes_write)"),
                            (metrics.get("lts__t_bytes.sum"), "L2 traffic (lts__t_bytes): the roofline's "
                             "bytes are DRAM bytes")):
            if not nbytes:
                continue
            used = (read + write) / nbytes if key == "intensity" else nbytes / (read + write)
            if _close(ratio, used):
                return f"{key} is off: it uses {why}."
    prefix = next((f for f in (1e3, 1e6, 1e9, 1e12) if _close(ratio, f) or _close(ratio, 1 / f)), None)
    if prefix and key == "intensity":   # the time plays no part in it: the bytes' (or FLOPs') unit does
        return (f"intensity is {ratio:.3g}x the right value: the FLOPs and dram__bytes_*.sum are plain "
                f"counts (ncu.json's 'units' say 'byte'), and intensity is FLOPs per byte, with no prefix.")
    if prefix and key in ("tflops", "tbs"):
        other = "tbs" if key == "tflops" else "tflops"
        if _number(answer[other]) and _close(answer[other] / want[other], ratio):
            if ratio < 1:   # the time taken too long: read in a larger unit
                unit = {1e3: "microseconds", 1e6: "milliseconds", 1e9: "seconds"}.get(prefix, "a larger unit")
            else:
                unit = {1e3: "picoseconds"}.get(prefix, "a smaller unit")
            return (f"tflops and tbs are both {ratio:.3g}x the right value, the intensity is right: the "
                    f"time is off. gpu__time_duration.sum is in nanoseconds (ncu.json's 'units'), not "
                    f"{unit}.")
        rate = "10**12 FLOPs per second" if key == "tflops" else "10**12 bytes per second"
        return (f"{key} is {ratio:.3g}x the right value, while {other} is right, so the time is read right: "
                f"{key} is asked in {'TFLOP/s' if key == 'tflops' else 'TB/s'}, {rate}.")
    if key == "roof_tflops":
        spec = CHIPS[chip]
        if _close(got, want["intensity"] * spec.bandwidth_tbs):
            return "roof_tflops is off: the roof is the lower of the bandwidth slope and the peak (min)."
        other_peak = next((p for p, peak in spec.tflops.items() if peak != spec.tflops["fp16"]
                           and _close(got, min(peak, want["intensity"] * spec.bandwidth_tbs))), None)
        if other_peak:   # fp32, or tf32: the roof of another precision
            return (f"roof_tflops is off: it uses the {other_peak} peak. These kernels are placed against "
                    f"the fp16 tensor-core peak, CHIPS[chip].tflops['fp16'].")
        if _close(got, spec.tflops["fp16"]):
            return "roof_tflops is off: below the ridge, the roof is intensity x bandwidth, not the peak."
        for other, c in CHIPS.items():
            if other != chip and _close(got, min(c.tflops["fp16"], want["intensity"] * c.bandwidth_tbs)):
                return (f"roof_tflops is off: it is the roof of another chip ({other!r}). This case places "
                        f"the kernel on the roofline of the chip named by the `chip` argument.")
    if key == "fraction":
        return "fraction is off: it is the achieved TFLOP/s over the roof at this intensity."
    return f"{key} is {got:.6g}, off by a factor {ratio:.4g}. Check the units of each metric."


EXERCISES = [
    Exercise("08", "kernel_table", "a kernel table from a trace", kernel_table_reference, _table_cases,
             run=_run, explain=_explain_table),
    Exercise("08", "gpu_idle_share", "how long the GPU waits", gpu_idle_share_reference, _idle_cases,
             run=_run, explain=_explain_idle),
    Exercise("08", "gpu_time_by_op", "GPU time per operator, through correlation ids",
             gpu_time_by_op_reference, _by_op_cases, run=_run, explain=_explain_by_op),
    Exercise("08", "diagnose", "bound and occupancy limiter", diagnose_reference, _diagnose_cases,
             run=_run, explain=_explain_diagnose),
    Exercise("08", "roofline_point", "ncu's bytes on the roofline", roofline_point_reference,
             _roofline_cases, run=_run, explain=_explain_roofline),
]
