"""Lesson 08: kernel_table, gpu_idle_share, gpu_time_by_op, diagnose and roofline_point."""

import collections

from helpers.roofline import CHIPS
from mutants import Right, Wrong, edit

# ---------------------------------------------------------------- kernel_table

_SORT = 'key=lambda row: (-row["total_us"], row["name"]))'

WRONG = [
    Wrong("kernel_table", "sorted by calls", edit(
        "08", "kernel_table", (_SORT, 'key=lambda row: (-row["calls"], row["name"]))'))),
    Wrong("kernel_table", "sorted by mean time per call", edit(
        "08", "kernel_table", (_SORT, 'key=lambda row: (-row["total_us"] / row["calls"], row["name"]))'))),
    Wrong("kernel_table", "equal totals not ordered by name", edit(
        "08", "kernel_table", (_SORT, 'key=lambda row: -row["total_us"])'))),
    Wrong("kernel_table", "equal totals ordered by name regardless of case", edit(
        "08", "kernel_table", (_SORT, 'key=lambda row: (-row["total_us"], row["name"].lower()))'))),
    Wrong("kernel_table", "equal totals in reverse name order", edit(
        "08", "kernel_table", (_SORT, 'key=lambda row: (row["total_us"], row["name"]), reverse=True)'))),
    Wrong("kernel_table", "share of the step's wall time (first start to last end)", edit(
        "08", "kernel_table",
        ("all_kernels = sum(row[\"total_us\"] for row in rows.values())",
         "all_kernels = (max(k['start_us'] + k['dur_us'] for k in kernels)\n"
         "                   - min(k['start_us'] for k in kernels))"))),
    Wrong("kernel_table", "identical events on two streams counted once", edit(
        "08", "kernel_table", ("    for k in kernels:\n        row = rows",
                               "    for k in {(k['name'], k['start_us'], k['dur_us']): k for k in kernels}.values():\n"
                               "        row = rows"))),
    Wrong("kernel_table", "calls counted as 1 per name", edit(
        "08", "kernel_table", ('row["calls"] += 1', 'row["calls"] = 1'))),
    Wrong("kernel_table", "total_us holds the last duration, not the sum", edit(
        "08", "kernel_table", ('row["total_us"] += k["dur_us"]', 'row["total_us"] = k["dur_us"]'))),
]


def _not_aggregated(kernels):
    """One row per event, not per name."""
    everything = sum(k["dur_us"] for k in kernels)
    rows = [{"name": k["name"], "calls": 1, "total_us": k["dur_us"], "share": k["dur_us"] / everything}
            for k in kernels]
    return sorted(rows, key=lambda row: (-row["total_us"], row["name"]))


WRONG.append(Wrong("kernel_table", "one row per event, not grouped by name", _not_aggregated))


def _table_with_counter(kernels):
    """Counters and a two-key stable sort: name first, then total (descending)."""
    calls = collections.Counter(k["name"] for k in kernels)
    totals = collections.defaultdict(float)
    for k in kernels:
        totals[k["name"]] += k["dur_us"]
    names = sorted(totals)
    names.sort(key=totals.get, reverse=True)   # stable: equal totals stay in name order
    everything = sum(totals.values())
    return [{"name": n, "calls": calls[n], "total_us": totals[n], "share": totals[n] / everything} for n in names]


def _table_with_numpy(kernels):
    """np.unique's counts (NumPy integers) and np.bincount's totals, sorted as the lesson asks."""
    import numpy as np

    names, index, calls = np.unique([k["name"] for k in kernels], return_inverse=True, return_counts=True)
    totals = np.bincount(index, weights=[k["dur_us"] for k in kernels])
    rows = [{"name": str(n), "calls": c, "total_us": float(t), "share": float(t / totals.sum())}
            for n, c, t in zip(names, calls, totals)]
    return sorted(rows, key=lambda row: (-row["total_us"], row["name"]))


RIGHT = [Right("kernel_table", "Counter and two stable sorts", _table_with_counter),
         Right("kernel_table", "NumPy: np.unique's counts (np.int64) and np.bincount's totals", _table_with_numpy)]

# ---------------------------------------------------------------- gpu_idle_share

WRONG += [
    Wrong("gpu_idle_share", "sum of durations (counts overlaps twice)", edit(
        "08", "gpu_idle_share", ("busy += max(0.0, end - max(start, reached))", "busy += end - start"))),
    Wrong("gpu_idle_share", "the span measured from 0, not from the first start", edit(
        "08", "gpu_idle_share", ("return (last - first - busy) / (last - first)", "return (last - busy) / last"))),
    Wrong("gpu_idle_share", "the span ends where the last kernel to start ends", edit(
        "08", "gpu_idle_share", ("last = max(end for _, end in intervals)", "last = intervals[-1][1]"))),
    Wrong("gpu_idle_share", "assumes the kernels come sorted by start", edit(
        "08", "gpu_idle_share", ('intervals = sorted((k["start_us"], k["start_us"] + k["dur_us"]) for k in kernels)',
                                 'intervals = [(k["start_us"], k["start_us"] + k["dur_us"]) for k in kernels]'))),
    Wrong("gpu_idle_share", "the busy share, not the idle share", edit(
        "08", "gpu_idle_share", ("return (last - first - busy) / (last - first)", "return busy / (last - first)"))),
]


def _idle_kernels_only(kernels):
    """Copies and memsets taken for idle time."""
    return _idle_by_sweep([k for k in kernels if k["cat"] == "kernel"])


WRONG.append(Wrong("gpu_idle_share", "only kernels count as GPU work (copies and memsets idle)", _idle_kernels_only))


def _idle_by_sweep(kernels):
    """A sweep over start (+1) and end (-1) events: idle wherever the count of running kernels is 0."""
    events = sorted([(k["start_us"], 1) for k in kernels] + [(k["start_us"] + k["dur_us"], -1) for k in kernels],
                    key=lambda e: (e[0], -e[1]))   # at one instant, starts before ends: touching is not a gap
    running, idle, previous = 0, 0.0, events[0][0]
    for t, step in events:
        if running == 0:
            idle += t - previous
        running += step
        previous = t
    return idle / (events[-1][0] - events[0][0])


RIGHT.append(Right("gpu_idle_share", "a sweep over start and end events", _idle_by_sweep))


def _idle_sorted_then_off(kernels):
    """Sorts its input, then leaves out the last event's time: wrong, but not for want of a sort."""
    return _idle_by_sweep(kernels) * 0.99 + 0.001


WRONG.append(Wrong("gpu_idle_share", "sorts its input but is off by a little", _idle_sorted_then_off))

# ---------------------------------------------------------------- gpu_time_by_op

_AROUND = """around = [op for op in operators if launch is not None and op["tid"] == launch["tid"]
                  and op["ts"] <= launch["ts"] <= op["ts"] + op["dur"]]"""

WRONG += [
    Wrong("gpu_time_by_op", "launches looked up in cuda_runtime only (not cuda_driver)", edit(
        "08", "gpu_time_by_op", ('if e.get("cat") in ("cuda_runtime", "cuda_driver")', 'if e.get("cat") in ("cuda_runtime",)'))),
    Wrong("gpu_time_by_op", "kernels only: copies and memsets left out", edit(
        "08", "gpu_time_by_op", ('("kernel", "gpu_memcpy", "gpu_memset")', '("kernel",)'))),
    Wrong("gpu_time_by_op", "the operator running on the CPU when the kernel starts (no correlation)", edit(
        "08", "gpu_time_by_op", (_AROUND, 'around = [op for op in operators if op["ts"] <= gpu["ts"] <= op["ts"] + op["dur"]]'))),
    Wrong("gpu_time_by_op", "the outermost operator, not the innermost", edit(
        "08", "gpu_time_by_op", ('name = min(around, key=lambda op: op["dur"])', 'name = max(around, key=lambda op: op["dur"])'))),
    Wrong("gpu_time_by_op", "the innermost operator taken as the one that ends first", edit(
        "08", "gpu_time_by_op", ('name = min(around, key=lambda op: op["dur"])',
                                 'name = min(around, key=lambda op: op["ts"] + op["dur"])'))),
    Wrong("gpu_time_by_op", "operators of any thread", edit(
        "08", "gpu_time_by_op", (' and op["tid"] == launch["tid"]', ""))),
    Wrong("gpu_time_by_op", "the launch calls' durations summed, not the GPU events'", edit(
        "08", "gpu_time_by_op", ('row["gpu_us"] += gpu["dur"]', 'row["gpu_us"] += launch["dur"] if launch else gpu["dur"]'))),
    Wrong("gpu_time_by_op", "equal times left in first-seen order", edit(
        "08", "gpu_time_by_op", ('key=lambda row: (-row["gpu_us"], row["op"]))', 'key=lambda row: -row["gpu_us"])'))),
    Wrong("gpu_time_by_op", "a launch at its operator's end not inside it (< for <=)", edit(
        "08", "gpu_time_by_op", ('op["ts"] <= launch["ts"] <= op["ts"] + op["dur"]',
                                 'op["ts"] <= launch["ts"] < op["ts"] + op["dur"]'))),
    Wrong("gpu_time_by_op", "equal times ordered by name regardless of case", edit(
        "08", "gpu_time_by_op", ('key=lambda row: (-row["gpu_us"], row["op"]))',
                                 'key=lambda row: (-row["gpu_us"], row["op"].lower()))'))),
    Wrong("gpu_time_by_op", "unattributed GPU events dropped", edit(
        "08", "gpu_time_by_op", ('        name = min(around', '        if not around:\n            continue\n        name = min(around'))),
    Wrong("gpu_time_by_op", "record_function spans taken for operators", edit(
        "08", "gpu_time_by_op", ('if e.get("cat") == "cpu_op"]', 'if e.get("cat") in ("cpu_op", "user_annotation")]'))),
]


def _by_op_with_a_stack(events):
    """Each thread's operators and launch calls in time order, with a stack of the operators still
    open: the top of the stack made the call."""
    per_thread = collections.defaultdict(list)
    for e in events:
        if e.get("cat") == "cpu_op":
            per_thread[e["tid"]].append((e["ts"], 0, -e["dur"], e))   # at one instant: longer operators first
        elif e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {}):
            per_thread[e["tid"]].append((e["ts"], 1, 0.0, e))
    made_by = {}
    for items in per_thread.values():
        stack = []
        for ts, kind, _, e in sorted(items, key=lambda item: item[:3]):
            while stack and stack[-1]["ts"] + stack[-1]["dur"] < ts:
                stack.pop()
            if kind == 0:
                stack.append(e)
            else:
                made_by[e["args"]["correlation"]] = stack[-1]["name"] if stack else "(no operator)"
    totals = collections.defaultdict(lambda: [0.0, 0])
    for e in events:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            total = totals[made_by.get(e["args"]["correlation"], "(no operator)")]
            total[0] += e["dur"]
            total[1] += 1
    order = sorted(totals, key=lambda op: (-totals[op][0], op))
    return [{"op": op, "gpu_us": totals[op][0], "events": totals[op][1]} for op in order]


RIGHT.append(Right("gpu_time_by_op", "a stack of open operators per thread", _by_op_with_a_stack))

# ---------------------------------------------------------------- diagnose

WRONG += [
    Wrong("diagnose", "percentages truncated to whole numbers (int())", edit(
        "08", "diagnose", ('dram = metrics["gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"]\n'
                           '    sm = metrics["sm__throughput.avg.pct_of_peak_sustained_elapsed"]',
                           'dram = int(metrics["gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"])\n'
                           '    sm = int(metrics["sm__throughput.avg.pct_of_peak_sustained_elapsed"])'))),
    Wrong("diagnose", "threshold as > 60 instead of >= 60", edit(
        "08", "diagnose", ("if max(dram, sm) < 60:", "if max(dram, sm) <= 60:"))),
    Wrong("diagnose", "tensor-pipe % in place of SM %", edit(
        "08", "diagnose", ('sm = metrics["sm__throughput.avg.pct_of_peak_sustained_elapsed"]',
                           'sm = metrics["sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"]'))),
    Wrong("diagnose", "the L2 hit rate read as memory throughput", edit(
        "08", "diagnose", ('dram = metrics["gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"]',
                           'dram = metrics["lts__t_sector_hit_rate.pct"]'))),
    Wrong("diagnose", "limiter: the resource that allows the most blocks", edit(
        "08", "diagnose", ("limiter = min(limits, key=lambda item: item[1])[0]",
                           "limiter = max(limits, key=lambda item: item[1])[0]"))),
    Wrong("diagnose", "ties go to the last of equal limits", edit(
        "08", "diagnose", ("limiter = min(limits, key=lambda item: item[1])[0]",
                           "limiter = min(reversed(limits), key=lambda item: item[1])[0]"))),
    Wrong("diagnose", "a tie of DRAM and SM called compute", edit(
        "08", "diagnose", ("elif dram >= sm:", "elif dram > sm:"))),
    Wrong("diagnose", "the first of DRAM and SM to reach 60 names the bound (not the larger)", edit(
        "08", "diagnose", ("elif dram >= sm:", "elif dram >= 60:"))),
    Wrong("diagnose", "threshold at 80% (ncu's 'greater than 80%' note)", edit(
        "08", "diagnose", ("if max(dram, sm) < 60:", "if max(dram, sm) < 80:"))),
]


def _diagnose_by_table(metrics):
    """The same rule written as a table lookup."""
    dram = metrics["gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"]
    sm = metrics["sm__throughput.avg.pct_of_peak_sustained_elapsed"]
    bound = ("memory" if dram >= sm else "compute") if max(dram, sm) >= 60.0 else "latency"
    order = ["registers", "shared_mem", "warps", "blocks"]
    values = [metrics[f"launch__occupancy_limit_{key}"] for key in order]
    first = values.index(min(values))
    return bound, ["registers", "shared memory", "warps", "blocks"][first]


RIGHT.append(Right("diagnose", "the rule as a table lookup", _diagnose_by_table))

# ---------------------------------------------------------------- roofline_point

WRONG += [
    Wrong("roofline_point", "the course's counted bytes instead of ncu's", edit(
        "08", "roofline_point", ('nbytes = metrics["dram__bytes_read.sum"] + metrics["dram__bytes_write.sum"]',
                                 'nbytes = metrics["counted"]["bytes"]'))),
    Wrong("roofline_point", "bytes read only", edit(
        "08", "roofline_point", ('nbytes = metrics["dram__bytes_read.sum"] + metrics["dram__bytes_write.sum"]',
                                 'nbytes = metrics["dram__bytes_read.sum"]'))),
    Wrong("roofline_point", "L2 bytes instead of DRAM bytes", edit(
        "08", "roofline_point", ('nbytes = metrics["dram__bytes_read.sum"] + metrics["dram__bytes_write.sum"]',
                                 'nbytes = metrics["lts__t_bytes.sum"]'))),
    Wrong("roofline_point", "ns taken as µs", edit(
        "08", "roofline_point", ('seconds = metrics["gpu__time_duration.sum"] * 1e-9',
                                 'seconds = metrics["gpu__time_duration.sum"] * 1e-6'))),
    Wrong("roofline_point", "ns taken as ms", edit(
        "08", "roofline_point", ('seconds = metrics["gpu__time_duration.sum"] * 1e-9',
                                 'seconds = metrics["gpu__time_duration.sum"] * 1e-3'))),
    Wrong("roofline_point", "the roof not capped at the peak", edit(
        "08", "roofline_point", ('roof = min(spec.tflops["fp16"], intensity * spec.bandwidth_tbs)',
                                 "roof = intensity * spec.bandwidth_tbs"))),
    Wrong("roofline_point", "bytes taken as gigabytes", edit(
        "08", "roofline_point", ('nbytes = metrics["dram__bytes_read.sum"] + metrics["dram__bytes_write.sum"]',
                                 'nbytes = (metrics["dram__bytes_read.sum"] + metrics["dram__bytes_write.sum"]) / 1e9'))),
    Wrong("roofline_point", "TB/s given in GB/s", edit(
        "08", "roofline_point", ('"tbs": nbytes / seconds / 1e12', '"tbs": nbytes / seconds / 1e9'))),
    Wrong("roofline_point", "the chip argument ignored (always the H100's roof)", edit(
        "08", "roofline_point", ("spec = CHIPS[chip]", "spec = CHIPS['H100 SXM']"))),
    Wrong("roofline_point", "the FLOPs read from metrics['counted'], the argument ignored", edit(
        "08", "roofline_point", ("intensity = flops / nbytes\n    tflops = flops / seconds / 1e12",
                                 "flops = metrics['counted']['flops']\n    intensity = flops / nbytes\n"
                                 "    tflops = flops / seconds / 1e12"))),
    Wrong("roofline_point", "the fp32 peak instead of fp16", edit(
        "08", "roofline_point", ('roof = min(spec.tflops["fp16"], intensity * spec.bandwidth_tbs)',
                                 'roof = min(spec.tflops["fp32"], intensity * spec.bandwidth_tbs)'))),
]


def _roofline_by_times(metrics, flops, chip):
    """The roof as FLOPs over the longer of the memory time and the compute time."""
    spec = CHIPS[chip]
    nbytes = metrics["dram__bytes_write.sum"] + metrics["dram__bytes_read.sum"]
    ms = metrics["gpu__time_duration.sum"] / 1e6
    best_s = max(nbytes / (spec.bandwidth_tbs * 1e12), flops / (spec.tflops["fp16"] * 1e12))
    tflops = flops / ms / 1e9
    return {"intensity": flops / nbytes, "tflops": tflops, "tbs": nbytes / ms / 1e9,
            "roof_tflops": flops / best_s / 1e12, "fraction": tflops * best_s * 1e12 / flops}


RIGHT.append(Right("roofline_point", "the roof from the longer of two times", _roofline_by_times))


# From an adversarial pass: ties, types and caps the cases used to let through.
WRONG += [
    Wrong("kernel_table", "calls counted as a float (3.0): the lesson's table prints it with :d", edit(
        "08", "kernel_table", ('{"name": k["name"], "calls": 0, "total_us": 0.0}',
                               '{"name": k["name"], "calls": 0.0, "total_us": 0.0}'))),
    Wrong("gpu_time_by_op", "events counted as a float", edit(
        "08", "gpu_time_by_op", ('{"op": name, "gpu_us": 0.0, "events": 0}',
                                 '{"op": name, "gpu_us": 0.0, "events": 0.0}'))),
    Wrong("gpu_time_by_op", "the innermost operator as the one that started last, ties left to list order", edit(
        "08", "gpu_time_by_op", ('name = min(around, key=lambda op: op["dur"])',
                                 'name = max(around, key=lambda op: op["ts"])'))),
    Wrong("diagnose", "ties broken by the metrics' own key order, not the rule's", edit(
        "08", "diagnose", ("    limiter = min(limits, key=lambda item: item[1])[0]",
                           "    limits = sorted(limits, key=lambda item: {'registers': 'registers', "
                           "'shared memory': 'shared_mem'}.get(item[0], item[0]))\n"
                           "    limiter = min(limits, key=lambda item: item[1])[0]"))),
    Wrong("roofline_point", "the fraction capped at 1", edit(
        "08", "roofline_point", ('"fraction": tflops / roof}', '"fraction": min(1.0, tflops / roof)}'))),
]

# From a second adversarial pass: the ends of the span, operators found by name, another precision's peak.
WRONG += [
    Wrong("gpu_idle_share", "the span from the first kernel's start (a memset before it left out)", edit(
        "08", "gpu_idle_share", ("first = intervals[0][0]",
                                 'first = min(k["start_us"] for k in kernels if k["cat"] == "kernel")'))),
    Wrong("gpu_idle_share", "the span to the last kernel's end (a copy after it left out)", edit(
        "08", "gpu_idle_share", ("last = max(end for _, end in intervals)",
                                 'last = max(k["start_us"] + k["dur_us"] for k in kernels if k["cat"] == "kernel")'))),
    Wrong("gpu_time_by_op", "operators found by their 'aten::' name, not by cat (custom operators missed)", edit(
        "08", "gpu_time_by_op", ('operators = [e for e in events if e.get("cat") == "cpu_op"]',
                                 'operators = [e for e in events if e.get("name", "").startswith("aten::")]'))),
    Wrong("roofline_point", "the tf32 peak instead of fp16", edit(
        "08", "roofline_point", ('roof = min(spec.tflops["fp16"], intensity * spec.bandwidth_tbs)',
                                 'roof = min(spec.tflops["tf32"], intensity * spec.bandwidth_tbs)'))),
]

# From a third adversarial pass: a table that outlives the call, values rounded for printing, shares over
# the kernels alone, a merge that forgets the latest end, copies' launches not looked up, fractions for
# percentages, the bytes written only.

_kept = {}   # a table made outside the function: each call adds to the last one's rows


def _table_kept_between_calls(kernels):
    for k in kernels:
        row = _kept.setdefault(k["name"], {"name": k["name"], "calls": 0, "total_us": 0.0})
        row["calls"] += 1
        row["total_us"] += k["dur_us"]
    everything = sum(row["total_us"] for row in _kept.values())
    rows = [{**row, "share": row["total_us"] / everything} for row in _kept.values()]
    return sorted(rows, key=lambda row: (-row["total_us"], row["name"]))


def _table_by_groupby(kernels):
    """itertools.groupby over the events sorted by name, math.fsum for the sums."""
    import itertools
    import math

    rows = []
    for name, group in itertools.groupby(sorted(kernels, key=lambda k: k["name"]), key=lambda k: k["name"]):
        durations = [k["dur_us"] for k in group]
        rows.append({"name": name, "calls": len(durations), "total_us": math.fsum(durations)})
    everything = math.fsum(row["total_us"] for row in rows)
    rows = [{**row, "share": row["total_us"] / everything} for row in rows]
    return sorted(rows, key=lambda row: (-row["total_us"], row["name"]))


def _by_op_latest_start(events):
    """The innermost operator as the one that started last around the launch (the shorter on equal starts)."""
    calls = {e["args"]["correlation"]: e for e in events
             if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    ops = [e for e in events if e.get("cat") == "cpu_op"]
    rows = collections.defaultdict(lambda: {"gpu_us": 0.0, "events": 0})
    for e in events:
        if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        launch = calls.get(e["args"].get("correlation"))
        around = [o for o in ops if launch and o["tid"] == launch["tid"]
                  and o["ts"] <= launch["ts"] <= o["ts"] + o["dur"]]
        op = max(around, key=lambda o: (o["ts"], -o["dur"]))["name"] if around else "(no operator)"
        rows[op]["gpu_us"] += e["dur"]
        rows[op]["events"] += 1
    return [{"op": op, **row} for op, row in sorted(rows.items(), key=lambda item: (-item[1]["gpu_us"], item[0]))]


def _roofline_by_ridge(metrics, flops, chip):
    """The roof chosen by comparing the intensity with the chip's ridge point."""
    spec = CHIPS[chip]
    nbytes = metrics["dram__bytes_read.sum"] + metrics["dram__bytes_write.sum"]
    seconds = metrics["gpu__time_duration.sum"] / 1e9
    intensity = flops / nbytes
    roof = spec.tflops["fp16"] if intensity >= spec.ridge() else intensity * spec.bandwidth_tbs
    tflops = flops / seconds / 1e12
    return {"intensity": intensity, "tflops": tflops, "tbs": nbytes / seconds / 1e12, "roof_tflops": roof,
            "fraction": tflops / roof}


_ROWS = 'return sorted(rows.values(), key=lambda row: (-row["total_us"], row["name"]))'

WRONG += [
    Wrong("kernel_table", "a table made outside the function, kept between calls", _table_kept_between_calls),
    Wrong("kernel_table", "totals and shares rounded for printing", edit(
        "08", "kernel_table", (_ROWS, 'rows = {n: {**r, "total_us": round(r["total_us"], 2), "share": round(r["share"], 3)}\n'
                                      '            for n, r in rows.items()}\n    ' + _ROWS))),
    Wrong("kernel_table", "shares over the kernels' time alone (copies and memsets left out of the total)", edit(
        "08", "kernel_table", ('all_kernels = sum(row["total_us"] for row in rows.values())',
                               'all_kernels = sum(k["dur_us"] for k in kernels if k["cat"] == "kernel")'))),
    Wrong("gpu_idle_share", "the latest end taken as the previous kernel's end (reached = end)", edit(
        "08", "gpu_idle_share", ("reached = max(reached, end)", "reached = end"))),
    Wrong("gpu_time_by_op", "launch calls looked up by the kernel-launch names (copies' and memsets' missed)", edit(
        "08", "gpu_time_by_op", ('if e.get("cat") in ("cuda_runtime", "cuda_driver")',
                                 'if e.get("name") in ("cudaLaunchKernel", "cuLaunchKernelEx")'))),
    Wrong("diagnose", "the threshold as a fraction (0.6), the metrics being percentages", edit(
        "08", "diagnose", ("if max(dram, sm) < 60:", "if max(dram, sm) < 0.6:"))),
    Wrong("roofline_point", "bytes written only", edit(
        "08", "roofline_point", ('nbytes = metrics["dram__bytes_read.sum"] + metrics["dram__bytes_write.sum"]',
                                 'nbytes = metrics["dram__bytes_write.sum"]'))),
]

RIGHT += [
    Right("kernel_table", "itertools.groupby and math.fsum", _table_by_groupby),
    Right("gpu_time_by_op", "the innermost as the latest to start (the shorter on equal starts)", _by_op_latest_start),
    Right("roofline_point", "the roof chosen by the ridge point", _roofline_by_ridge),
]
