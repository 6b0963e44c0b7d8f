"""Lesson 08: the solutions pass, the stubs are not done, the messages teach, and the recorded
profiles of every GPU still show what the lesson's prose says they show."""

import importlib
import statistics

import pytest
from mutants.lesson08 import WRONG

from helpers import check
from helpers.check import CheckFailed, NotDone
from helpers.exercises.lesson08 import chip_key, diagnose_reference
from helpers.profile import (
    gpu_events,
    launch_waits,
    memory_peak,
    ncu_kernels,
    recorded_devices,
    recorded_profile,
)
from helpers.solutions import load_solution

lesson08 = load_solution("08")
NAMES = ["kernel_table", "gpu_idle_share", "gpu_time_by_op", "diagnose", "roofline_point"]
DEVICES = recorded_devices()


@pytest.mark.parametrize("name", NAMES)
def test_solutions_pass(name):
    check(name, getattr(lesson08, name))


def _stub(*args):
    raise NotImplementedError("write it")


@pytest.mark.parametrize("name", NAMES)
def test_stubs_are_not_done(name):
    with pytest.raises(NotDone):
        check(name, _stub)


def test_make_profile_entry_points_are_kept():
    for name in ("ncu_targets", "profile_loop", "proton_scopes"):
        assert callable(getattr(lesson08, name))


def _wrong(why):
    return next(w.fn for w in WRONG if w.why == why)


@pytest.mark.parametrize("exercise, why, message", [
    ("kernel_table", "share of the step's wall time (first start to last end)", "counts the GPU's idle gaps"),
    ("kernel_table", "sorted by calls", "sorted by calls?"),
    ("kernel_table", "one row per event, not grouped by name", "group the events by name"),
    ("gpu_idle_share", "sum of durations (counts overlaps twice)", "counts twice"),
    ("gpu_idle_share", "the span measured from 0, not from the first start", "from the first start"),
    ("gpu_idle_share", "only kernels count as GPU work (copies and memsets idle)", "copies and memsets"),
    ("gpu_time_by_op", "launches looked up in cuda_runtime only (not cuda_driver)", "cuda_driver"),
    ("gpu_time_by_op", "kernels only: copies and memsets left out", "gpu_memcpy"),
    ("gpu_time_by_op", "the operator running on the CPU when the kernel starts (no correlation)",
     "correlation"),
    ("gpu_time_by_op", "the outermost operator, not the innermost", "innermost"),
    ("gpu_time_by_op", "operators of any thread", "own thread"),
    ("gpu_time_by_op", "the launch calls' durations summed, not the GPU events'", "CPU time"),
    ("gpu_time_by_op", "equal times left in first-seen order", "tie-break"),
    ("diagnose", "threshold as > 60 instead of >= 60", "'at least 60%'"),
    ("diagnose", "limiter: the resource that allows the most blocks", "allows the fewest"),
    ("roofline_point", "ns taken as µs", "nanoseconds"),
    ("roofline_point", "the course's counted bytes instead of ncu's", "counted bytes"),
    # each part of the answer compared before a cause is named (issue 28)
    ("kernel_table", "equal totals ordered by name regardless of case", "capitals come before"),
    ("kernel_table", "identical events on two streams counted once", "two calls"),
    ("gpu_time_by_op", "a launch at its operator's end not inside it (< for <=)", "both ends included"),
    ("gpu_time_by_op", "equal times ordered by name regardless of case", "capitals come before"),
    ("gpu_idle_share", "assumes the kernels come sorted by start", "sort them by start first"),
    ("diagnose", "the L2 hit rate read as memory throughput", "L2 hit rate"),
    ("diagnose", "tensor-pipe % in place of SM %", "tensor pipe"),
    ("diagnose", "the first of DRAM and SM to reach 60 names the bound (not the larger)",
     "the larger of the two"),
    ("roofline_point", "bytes taken as gigabytes", "plain counts"),
    ("roofline_point", "TB/s given in GB/s", "the time is read right"),
    ("roofline_point", "the chip argument ignored (always the H100's roof)", "another chip"),
    ("roofline_point", "the FLOPs read from metrics['counted'], the argument ignored", "`flops` argument"),
    # a third adversarial pass
    ("kernel_table", "a table made outside the function, kept between calls", "outlive the call"),
    ("kernel_table", "totals and shares rounded for printing", "round only when printing"),
    ("kernel_table", "shares over the kernels' time alone (copies and memsets left out of the total)",
     "kernels' time alone"),
    ("gpu_idle_share", "the latest end taken as the previous kernel's end (reached = end)",
     "latest end seen"),
    ("gpu_time_by_op", "launch calls looked up by the kernel-launch names (copies' and memsets' missed)",
     "cudaMemsetAsync"),
    ("diagnose", "the threshold as a fraction (0.6), the metrics being percentages", "not 0.6"),
    ("roofline_point", "bytes written only", "written only"),
])
def test_messages_name_the_mistake(monkeypatch, exercise, why, message):
    monkeypatch.setattr(importlib.import_module("helpers.check"), "MORE_CASES_S", 0.0)
    with pytest.raises(CheckFailed, match=message.replace("?", r"\?")) as caught:
        check(exercise, _wrong(why))
    assert not isinstance(caught.value, NotDone)


def test_a_function_that_sorts_is_not_asked_whether_it_assumes_sorted_input(monkeypatch):
    monkeypatch.setattr(importlib.import_module("helpers.check"), "MORE_CASES_S", 100.0)  # every case
    with pytest.raises(CheckFailed) as caught:
        check("gpu_idle_share", _wrong("sorts its input but is off by a little"))
    assert "sort them by start" not in str(caught.value) and "assume" not in str(caught.value)


def test_idle_share_message_gives_no_value_away(monkeypatch):
    monkeypatch.setattr(importlib.import_module("helpers.check"), "MORE_CASES_S", 0.0)
    with pytest.raises(CheckFailed) as caught:
        check("gpu_idle_share", lambda kernels: 0.5)
    assert "too" in str(caught.value) and "the GPU's is" not in str(caught.value)


# ---------------------------------------------------------------- what the prose says of the recordings


def test_some_gpu_is_recorded():
    assert DEVICES, "helpers/recorded/profile/ holds no GPU: run `make profile` on one"


@pytest.mark.parametrize("device", DEVICES)
def test_recorded_files_the_lesson_reads(device):
    for name in ("stamp.json", "ncu.json", "proton.json", "loop.json", "ncu_details.csv",
                 *(f"block_{v}.json" for v in ("naive", "sdpa", "small", "tiny")),
                 *(f"block_{v}.trace.json.gz" for v in ("small", "sdpa"))):
        assert recorded_profile(name, device) is not None, f"{device}: {name} is missing"
    assert chip_key(device), f"{device} has no entry in helpers.roofline.CHIPS"


def _trace(variant, device):
    return recorded_profile(f"block_{variant}.trace.json.gz", device)


@pytest.mark.parametrize("device", DEVICES)
def test_recorded_blocks_show_what_the_lesson_says(device):
    naive, sdpa = (recorded_profile(f"block_{v}.json", device) for v in ("naive", "sdpa"))
    work = {v: gpu_events(_trace(v, device)) for v in ("naive", "sdpa", "small")}
    top = lesson08.kernel_table(work["naive"])[:3]
    assert any(word in row["name"].lower() for row in top for word in ("softmax", "masked_fill", "copy"))
    assert any(e["cat"] == "gpu_memcpy" for e in work["naive"])
    idle = {v: lesson08.gpu_idle_share(w) for v, w in work.items()}
    assert idle["small"] > 0.5 and idle["small"] > idle["sdpa"]      # the small step waits for Python
    kernels_only = lesson08.gpu_idle_share([e for e in work["naive"] if e["cat"] == "kernel"])
    assert kernels_only > 1.6 * idle["naive"]                        # "nearly doubles its idle share"
    waits = {v: statistics.median(launch_waits(_trace(v, device))) for v in ("sdpa", "small")}
    assert waits["sdpa"] > 5 * waits["small"]                        # queued against ready
    assert naive["peak_mib"] > 2 * sdpa["peak_mib"]
    assert dict(naive["allocations_mib"]).get("aten::_softmax")


def _self_cuda_us(table, op):
    """The Self CUDA column of torch's recorded table for one operator, in microseconds."""
    row = next(line for line in table.splitlines() if line.strip().startswith(op + " "))
    value = row.split()[6]                              # Name, 5 CPU columns, then Self CUDA
    return float(value[:-2]) * (1000 if value.endswith("ms") else 1)


@pytest.mark.parametrize("device", DEVICES)
def test_gpu_time_by_op_rebuilds_self_cuda_and_the_round_of_the_loop(device):
    naive, sdpa = (recorded_profile(f"block_{v}.json", device) for v in ("naive", "sdpa"))
    before, after = ({row["op"]: row["gpu_us"]
                      for row in lesson08.gpu_time_by_op(_trace(v, device)["traceEvents"])}
                     for v in ("naive", "sdpa"))
    for op in ("aten::mm", "aten::_softmax", "aten::copy_"):
        assert before[op] == pytest.approx(_self_cuda_us(naive["torch_table"], op), rel=2e-3)
    for op in ("aten::_softmax", "aten::masked_fill_", "aten::bmm"):
        assert before[op] > 0 and op not in after                    # gone with the N x N scores
    assert before["aten::copy_"] > 3 * after["aten::copy_"] and before["aten::mul"] > after["aten::mul"]
    assert after["aten::mm"] == pytest.approx(before["aten::mm"], rel=0.02)   # the control did not move
    gpu_saved = sum(before.values()) - sum(after.values())
    step_saved = 1000 * (naive["step_ms"] - sdpa["step_ms"])
    assert step_saved == pytest.approx(gpu_saved, rel=0.15)          # "lost about what the GPU work lost"


@pytest.mark.parametrize("device", DEVICES)
def test_recorded_memory_peak_is_what_the_lesson_says(device):
    naive = recorded_profile("block_naive.json", device)
    peak = memory_peak(_trace("naive", device))
    listed_mib = sum(mib for _, mib in naive["allocations_mib"])
    assert listed_mib > 1.5 * peak["peak_bytes"] / 2**20             # the columns add up to more
    assert peak["peak_bytes"] / 2**20 <= naive["peak_mib"]           # max_memory_allocated adds the warm-up
    assert peak["during"][-1] == "aten::_softmax"
    c = naive["config"]
    scores = (c["batch"], c["n_heads"], c["seq"], c["seq"])
    three = peak["live"][:3]
    assert all(b["input_shape"] == scores for b in three)
    assert {b["ops"][0] for b in three} == {"aten::to", "aten::softmax", "aten::masked_fill"}
    assert sum(b["bytes"] for b in three) > 0.95 * peak["peak_bytes"]


def _ncu(device):
    return {k["target"]: k for k in recorded_profile("ncu.json", device)["kernels"] if k.get("target")}


@pytest.mark.parametrize("device", DEVICES)
def test_recorded_ncu_shows_what_the_lesson_says(device):
    k = _ncu(device)
    for target in k:
        if target.startswith("tiled softmax") and "reversed" not in target:
            rev = k[target.replace(" (05)", ", pass 2 reversed (05)")]
            one_read = k[target]["counted"]["bytes"] / 2
            assert 1.9 < k[target]["dram__bytes_read.sum"] / one_read < 2.05   # reads its input twice
            assert rev["dram__bytes_read.sum"] < k[target]["dram__bytes_read.sum"]
    short, long = (k[f"tiled softmax {s} (05)"] for s in ("2048x65536", "512x262144"))
    short_r, long_r = (k[f"tiled softmax {s}, pass 2 reversed (05)"] for s in ("2048x65536", "512x262144"))
    saved = [a["dram__bytes_read.sum"] - b["dram__bytes_read.sum"]
             for a, b in ((short, short_r), (long, long_r))]
    assert saved[0] > saved[1]                                           # more saved for shorter rows
    flash = k["FlashAttention forward (06)"]
    assert flash["dram__bytes_read.sum"] < 1.1 * 0.75 * flash["counted"]["bytes"]   # K, V read about once
    assert flash["lts__t_sector_hit_rate.pct"] > 70
    matmul = k["matmul 4096^3 (04)"]
    assert matmul["dram__bytes_read.sum"] > 1.2 * (2 / 3) * matmul["counted"]["bytes"]   # A, B re-read
    bounds = {target: diagnose_reference(metrics)[0] for target, metrics in k.items()}
    streaming = [t for t in k if t.startswith(("vector add", "row softmax", "tiled softmax"))]
    assert {bounds[t] for t in streaming} == {"memory"}
    assert bounds["matmul 4096^3 (04)"] == bounds["cuBLAS matmul 4096^3"] == "compute"
    assert bounds["matmul 512^3 (04)"] == bounds["cuBLAS matmul 512^3"] == "latency"
    assert bounds["FlashAttention forward (06)"] == "latency"


@pytest.mark.parametrize("device", DEVICES)
def test_recorded_latency_bound_kernels_are_what_the_lesson_says(device):
    k = {launch["target"]: launch for launch in ncu_kernels(device)}
    sm_active = {t: launch["SM Active Cycles"] / launch["Elapsed Cycles"] for t, launch in k.items()}
    ours, theirs, flash = k["matmul 512^3 (04)"], k["cuBLAS matmul 512^3"], k["FlashAttention forward (06)"]
    tensor = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"
    # a handful of programs, most SMs idle, yet a high tensor% (a share of the active cycles)
    assert ours["launch__grid_size"] < 0.1 * ours["# SMs"] and sm_active["matmul 512^3 (04)"] < 0.1
    assert ours[tensor] > 40
    # most of a wave, but the SMs active for well under the share that got a program: ramp-up and tail
    assert 0.5 < theirs["launch__waves_per_multiprocessor"] < 1
    assert sm_active["cuBLAS matmul 512^3"] < 0.75 * theirs["launch__grid_size"] / theirs["# SMs"]
    # FlashAttention: SMs active, small stalls, a warp issues every five or six cycles, a third of the slots
    assert sm_active["FlashAttention forward (06)"] > 0.9
    stalls = [v for m, v in flash.items() if "_stalled_" in m and "_selected_" not in m]
    assert max(stalls) < 1.5
    assert 5 <= flash["Warp Cycles Per Issued Instruction"] < 6.5
    assert 25 < flash["Issue Slots Busy"] < 45
    assert flash["Theoretical Active Warps per SM"] == 8      # two per scheduler, as the rule says


@pytest.mark.parametrize("device", DEVICES)
def test_recorded_proton_merges_launches_by_name(device):
    proton = recorded_profile("proton.json", device)
    if not proton.get("ok"):
        pytest.skip("proton did not run on this recording")
    frames = {f["frame"]["name"]: f["metrics"] for f in proton["tree"][0]["children"]}
    targets = [k["target"] for k in ncu_kernels(device) if k["Kernel Name"] == "matmul_kernel"]
    assert len(targets) == 2 and frames["matmul_kernel"]["count"] == 10 * len(targets)


@pytest.mark.parametrize("device", DEVICES)
def test_recorded_loop_has_both_directions(device):
    loop = recorded_profile("loop.json", device)
    shapes = {(r["shape"], r["reverse"]) for r in loop["rows"]}
    assert shapes == {(s, rev) for s in ("2048x65536", "512x262144") for rev in (False, True)}
