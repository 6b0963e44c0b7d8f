"""Profiles: where a step's time goes, and `make profile`, which records what lesson 08 shows.

What a lesson calls, on the CPU or a GPU:

1. `profile_step(fn)` runs `fn` once under `torch.profiler` (CPU activity, and CUDA on a GPU)
   after two warm-up calls, and returns the profiler.
2. `save_trace(prof, path)` writes its trace as gzipped JSON: open it in https://ui.perfetto.dev
   or chrome://tracing.
3. `kernel_events(trace)` lists the GPU kernels of a trace (name, start, duration, stream) and
   `cpu_ops(trace)` the top-level PyTorch operators on the CPU side.
4. `recorded_profile(name)` reads what `make profile` recorded on a GPU.

`make profile` (python -m helpers.profile; GPU only) writes helpers/recorded/profile/<gpu>/:
- `block_<variant>.json`: one forward step of the decoder block (helpers/block.py) under
  torch.profiler: every kernel (name, start, duration, stream), the step's wall time, its peak
  memory and the biggest allocations, torch's own kernel table as text; and the gzipped trace
  beside it, `block_<variant>.trace.json.gz`;
- `ncu.json` and `ncu_details.csv`: Nsight Compute metrics of a few of the course's kernels
  (`ncu_targets()` in solutions/08_profiling.py), with the command that produced them;
- `proton.json`: what Triton's own profiler (proton) reported, or why it could not run;
- `loop.json`: the timings of lesson 08's profile -> hypothesis -> change -> measure loop.
Every file names its GPU, date and versions.
"""

import datetime
import gzip
import json
import os
import pathlib
import subprocess
import sys

import torch

from helpers.bench import PREFERRED, slug  # the same GPUs first, the same names

ROOT = pathlib.Path(__file__).resolve().parent.parent
RECORDED = ROOT / "helpers" / "recorded" / "profile"   # one folder per GPU


def stamp():
    """Where and when a recording was made."""
    import triton

    return {"device": torch.cuda.get_device_name(), "date": datetime.date.today().isoformat(),
            "torch": torch.__version__, "triton": triton.__version__}


# ---------------------------------------------------------------- profiling a step


def profile_step(fn, warmup=2, memory=True):
    """Run fn() `warmup` times, then once under torch.profiler; return the profiler."""
    from torch.profiler import ProfilerActivity, profile, record_function

    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    for _ in range(warmup):
        fn()
    sync()
    with profile(activities=activities, record_shapes=True, profile_memory=memory) as prof:
        with record_function("step"):
            fn()
        sync()
    return prof


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def save_trace(prof, path):
    """The profiler's trace as gzipped JSON (Perfetto and chrome://tracing open .json.gz)."""
    path = pathlib.Path(path)
    raw = path.with_suffix("")                      # x.trace.json.gz -> x.trace.json
    prof.export_chrome_trace(str(raw))
    trace = json.loads(raw.read_text())
    raw.unlink()
    with gzip.open(path, "wt") as f:
        json.dump(trace, f, separators=(",", ":"))
    return trace


def load_trace(path):
    with gzip.open(path, "rt") as f:
        return json.load(f)


def kernel_events(trace):
    """The GPU kernels of a trace, in start order: {name, start_us, dur_us, stream}.

    Times are microseconds from the first kernel's start."""
    kernels = [e for e in trace["traceEvents"] if e.get("cat") == "kernel" and e.get("ph") == "X"]
    kernels.sort(key=lambda e: e["ts"])
    t0 = kernels[0]["ts"] if kernels else 0.0
    return [{"name": e["name"], "start_us": round(e["ts"] - t0, 3), "dur_us": round(e["dur"], 3),
             "stream": e.get("args", {}).get("stream", 0)} for e in kernels]


def cpu_ops(trace):
    """Top-level PyTorch operators on the CPU side (those not inside another operator), in order:
    {name, start_us, dur_us}, times from the first one's start."""
    ops = sorted((e for e in trace["traceEvents"] if e.get("cat") == "cpu_op" and e.get("ph") == "X"),
                 key=lambda e: (e["ts"], -e["dur"]))
    top, end = [], -1.0
    for e in ops:
        if e["ts"] >= end:                          # not nested in the previous top-level op
            top.append(e)
            end = e["ts"] + e["dur"]
    t0 = top[0]["ts"] if top else 0.0
    return [{"name": e["name"], "start_us": round(e["ts"] - t0, 3), "dur_us": round(e["dur"], 3)}
            for e in top]


# ---------------------------------------------------------------- recorded profiles


def recorded_devices():
    """GPUs with recorded profiles, the preferred one first."""
    names = [json.loads(p.read_text())["device"] for p in sorted(RECORDED.glob("*/stamp.json"))]
    return sorted(names, key=lambda d: (PREFERRED.index(d) if d in PREFERRED else len(PREFERRED), d))


def recorded_profile(name, device=None):
    """helpers/recorded/profile/<gpu>/<name> of one GPU (default: the preferred one): parsed JSON
    for .json, the gzipped trace for .trace.json.gz, text otherwise; None if not recorded."""
    devices = recorded_devices()
    device = device or (devices[0] if devices else None)
    path = RECORDED / slug(device) / name if device else None
    if path is None or not path.exists():
        return None
    if name.endswith(".json.gz"):
        return load_trace(path)
    return json.loads(path.read_text()) if name.endswith(".json") else path.read_text()


# ---------------------------------------------------------------- make profile (GPU)


def record_block(folder, variant, cfg, batch, seq, attention, dtype=torch.float16):
    """One forward step of the decoder block under torch.profiler: block_<variant>.json and trace."""
    from helpers import bench
    from helpers.block import block_flops, block_input, block_weights, decoder_block

    w = block_weights(cfg, "cuda", dtype)
    x = block_input(cfg, batch, seq, "cuda", dtype)
    step = lambda: decoder_block(x, w, cfg, attention=attention)  # noqa: E731
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    prof = profile_step(step)
    trace = save_trace(prof, folder / f"block_{variant}.trace.json.gz")
    table = prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=15, max_name_column_width=50)
    memory_rows = sorted(((e.key, e.self_device_memory_usage) for e in prof.key_averages()
                          if e.self_device_memory_usage > 0), key=lambda r: -r[1])
    record = {
        **stamp(), "variant": variant, "attention": attention, "dtype": str(dtype).replace("torch.", ""),
        "config": {"batch": batch, "seq": seq, "dim": cfg.dim, "n_heads": cfg.n_heads, "hidden": cfg.hidden},
        "flops": block_flops(cfg, batch, seq),
        "step_ms": round(bench.measure(step), 4),        # do_bench median, outside the profiler
        "peak_mib": round((torch.cuda.max_memory_allocated() - base) / 2**20, 1),
        "allocations_mib": [(name, round(b / 2**20, 1)) for name, b in memory_rows[:8]],
        "kernels": kernel_events(trace),
        "cpu_ops": cpu_ops(trace),
        "torch_table": table,
    }
    (folder / f"block_{variant}.json").write_text(json.dumps(record, indent=1))
    print(f"block {variant}: {record['step_ms']} ms, {len(record['kernels'])} kernels, "
          f"peak {record['peak_mib']} MiB", flush=True)


NCU_SECTIONS = ("SpeedOfLight", "MemoryWorkloadAnalysis", "Occupancy", "LaunchStats", "WarpStateStats",
                "ComputeWorkloadAnalysis")
# The metrics lessons 08 and 10 read. The sections above do not collect these byte counts: asked for apart.
# lts__t_sectors_op_*: what L2 did for atomic adds, per 32-byte sector (lesson 10's attention backward).
NCU_EXTRA = ("dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_bytes.sum",
             "lts__t_sectors_op_atom.sum", "lts__t_sectors_op_red.sum")
NCU_METRICS = (
    "gpu__time_duration.sum", *NCU_EXTRA,
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",     # DRAM: % of its peak
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",           # compute (SM): % of its peak
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",  # tensor cores busy
    "lts__t_sector_hit_rate.pct", "l1tex__t_sector_hit_rate.pct",  # L2 and L1 hit rates
    "sm__warps_active.avg.pct_of_peak_sustained_active",          # achieved occupancy
    "sm__maximum_warps_per_active_cycle_pct",                     # theoretical occupancy
    "launch__registers_per_thread", "launch__shared_mem_per_block", "launch__block_size",
    "launch__grid_size", "launch__waves_per_multiprocessor", "launch__occupancy_limit_registers",
    "launch__occupancy_limit_shared_mem", "launch__occupancy_limit_warps", "launch__occupancy_limit_blocks",
    "derived__local_spilling_requests",                           # register spills to local memory
)
NCU_STALLS = ("smsp__average_warps_issue_stalled_", "_per_issue_active.ratio")   # one per stall reason


def record_ncu(folder):
    """Lesson 08's kernels under Nsight Compute: folder/ncu.json and folder/ncu_details.csv."""
    record, details = ncu_profile("08", folder)
    if details:
        (folder / "ncu_details.csv").write_text(details)
    (folder / "ncu.json").write_text(json.dumps(record, indent=1))
    print(record.get("error") or f"ncu: {len(record['kernels'])} kernels profiled", flush=True)


def ncu_profile(lesson, folder):
    """Nsight Compute over `python -m helpers.profile --ncu-run LESSON` (the targets of that lesson's
    `ncu_targets()`), run in folder: (record, the details page as CSV text). The record holds the
    metrics of every profiled launch, named after the target that made it, and the command; or an
    "error" where ncu is missing or failed."""
    import shutil

    from helpers.solutions import load_solution

    if shutil.which("ncu") is None:
        return {**stamp(), "error": "ncu (Nsight Compute) is not on the PATH"}, ""
    targets = load_solution(lesson).ncu_targets()
    patterns = [t["kernel"] for t in targets.values() if "kernel" in t]
    only = f"-k regex:{'|'.join(patterns)} " if patterns else ""    # the targets' kernels, no others
    report = folder / "ncu_report"
    sections = " ".join(f"--section {s}" for s in NCU_SECTIONS)
    command = (f"ncu --profile-from-start off --clock-control none {only}{sections} "
               f"--metrics {','.join(NCU_EXTRA)} -o {report.name} -f "
               f"{sys.executable} -m helpers.profile --ncu-run {lesson}")
    print("$", command, flush=True)
    run = subprocess.run(command.split(), cwd=folder, capture_output=True, text=True, env=_env())
    rep = folder / (report.name + ".ncu-rep")
    if run.returncode != 0 or not rep.exists():
        log = run.stdout[-4000:] + run.stderr[-4000:]
        print("ncu failed:\n" + log, flush=True)
        return {**stamp(), "command": command, "error": log}, ""
    read = ["ncu", "--import", str(rep), "--csv", "--print-units", "base", "--page"]   # base: ns, bytes
    raw = subprocess.run(read + ["raw"], capture_output=True, text=True, check=True).stdout
    details = subprocess.run(read + ["details"], capture_output=True, text=True, check=True).stdout
    rep.unlink()
    kernels, units = _ncu_raw_rows(raw)
    _name_launches(kernels, targets)
    version = subprocess.run(["ncu", "--version"], capture_output=True, text=True).stdout.strip().splitlines()
    return {**stamp(), "ncu": version[-1] if version else "?", "command": command, "units": units,
            "kernels": kernels}, details


def _name_launches(kernels, targets):
    """Give each profiled launch (in launch order) the target that made it, and what the target counted.
    A target with a `kernel` pattern made the consecutive launches whose names match it; a target
    without one made exactly one launch."""
    import re

    names, i, taken = list(targets), 0, 0
    for k in kernels:
        while i < len(names):
            pattern = targets[names[i]].get("kernel")
            if (re.search(pattern, k["Kernel Name"]) if pattern else taken == 0):
                break
            i, taken = i + 1, 0
        k["target"] = names[i] if i < len(names) else None
        if k["target"]:
            taken += 1
            k["counted"] = {key: targets[k["target"]][key] for key in ("bytes", "flops", "what")}


def _ncu_raw_rows(csv_text):
    """ncu's raw page (a header row of metric names, a row of units, a row per kernel) -> a dict per
    kernel of the metrics lesson 08 reads (numbers as floats), and the metrics' units."""
    import csv
    import io

    rows = list(csv.reader(io.StringIO(csv_text)))
    start = next(i for i, r in enumerate(rows) if "Kernel Name" in r)
    names, units, data = rows[start], rows[start + 1], rows[start + 2:]
    keep = [i for i, n in enumerate(names) if n == "Kernel Name" or n in NCU_METRICS
            or (n.startswith(NCU_STALLS[0]) and n.endswith(NCU_STALLS[1]))]
    out = []
    for r in data:
        row = {}
        for i in keep:
            value = r[i].replace(",", "") if i < len(r) else ""
            try:
                value = float(value)
            except ValueError:
                value = r[i]
            row[names[i]] = value
        out.append(row)
    return out, {names[i]: units[i] for i in keep if units[i]}


def ncu_run(lesson):
    """Inside ncu: warm every target of the lesson up (autotuning, compiling), then launch each once
    while the profiler is on, in order."""
    import helpers  # noqa: F401  (the GPU, before triton)
    from helpers.solutions import load_solution

    targets = load_solution(lesson).ncu_targets()
    for t in targets.values():
        for _ in range(3):
            t["run"]()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for t in targets.values():
        t["run"]()
        torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


def record_proton(folder):
    """Triton's profiler, in a process of its own (CUPTI takes one subscriber per process, and
    torch.profiler has one here): proton.json."""
    command = [sys.executable, "-m", "helpers.profile", "--proton-run", str(folder)]
    run = subprocess.run(command, capture_output=True, text=True, env=_env())
    if run.returncode != 0:
        record = {**stamp(), "ok": False, "error": (run.stdout + run.stderr)[-3000:]}
        (folder / "proton.json").write_text(json.dumps(record, indent=1))
    print("proton:", json.loads((folder / "proton.json").read_text()).get("error", "ok")[:300], flush=True)


def proton_run(folder):
    """Per-kernel times of the ncu targets (the cupti backend), and whether scopes inside a
    Triton kernel (the instrumentation backend) run here."""
    import helpers  # noqa: F401  (the GPU, before triton)
    from helpers.solutions import load_solution

    folder = pathlib.Path(folder)
    result = {**stamp()}
    try:
        import triton.profiler as proton

        targets = load_solution("08").ncu_targets()
        for t in targets.values():
            t["run"]()
        torch.cuda.synchronize()
        name = str(folder / "proton")
        proton.start(name, hook="triton")
        for t in targets.values():
            for _ in range(10):
                t["run"]()
        torch.cuda.synchronize()
        proton.finalize()
        path = pathlib.Path(name + ".hatchet")
        result["tree"] = json.loads(path.read_text())
        path.unlink()
        result["ok"] = True
    except Exception as e:  # recorded as it is: the lesson says what did not run, and why
        result["ok"] = False
        result["error"] = f"{type(e).__name__}: {e}"
    result["scopes"] = load_solution("08").proton_scopes(folder)
    (folder / "proton.json").write_text(json.dumps(result, indent=1, default=str))


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def main(argv=None):
    import argparse

    parser = argparse.ArgumentParser(description="Record the profiles lesson 08 shows (GPU only).")
    parser.add_argument("--only", help="comma-separated parts: block, ncu, proton, loop")
    parser.add_argument("--ncu-run", metavar="LESSON", help=argparse.SUPPRESS)
    parser.add_argument("--proton-run", metavar="FOLDER", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.ncu_run:
        ncu_run(args.ncu_run)
        return 0
    if args.proton_run:
        proton_run(args.proton_run)
        return 0
    if not torch.cuda.is_available():
        found = ", ".join(recorded_devices()) or "none yet"
        print(f"No CUDA GPU here, so nothing is profiled. Recorded profiles (lesson 08 shows them): {found}")
        return 0
    import helpers  # noqa: F401  (the GPU, before triton)
    from helpers.block import SMALL, BlockConfig
    from helpers.solutions import load_solution

    parts = args.only.split(",") if args.only else ["block", "ncu", "proton", "loop"]
    folder = RECORDED / slug(torch.cuda.get_device_name())
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "stamp.json").write_text(json.dumps(stamp(), indent=1))
    if "block" in parts:
        full = BlockConfig()
        record_block(folder, "naive", full, 1, 4096, "naive")
        record_block(folder, "sdpa", full, 1, 4096, "sdpa")
        record_block(folder, "small", full, 1, 16, "sdpa")
        record_block(folder, "tiny", SMALL, 1, 16, "sdpa")
    if "ncu" in parts:
        record_ncu(folder)
    if "proton" in parts:
        record_proton(folder)
    if "loop" in parts:
        (folder / "loop.json").write_text(json.dumps({**stamp(), **load_solution("08").profile_loop()},
                                                     indent=1))
    print(f"wrote {folder.relative_to(ROOT)}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
