"""Profiles: where a step's time goes, and `make profile`, which records what lesson 08 shows.

What a lesson calls, on the CPU or a GPU:

1. `profile_step(fn)` runs `fn` once under `torch.profiler` (CPU activity, and CUDA on a GPU)
   after two warm-up calls, and returns the profiler.
2. `save_trace(prof, path)` writes its trace as gzipped JSON: open it in https://ui.perfetto.dev
   or chrome://tracing.
3. Reading a trace (a dict with "traceEvents"):
   - `gpu_events(trace)`: what the GPU ran (kernels, device copies, memsets), with start, duration
     and stream; `kernel_events(trace)` the kernels alone; `short_name(name)` a kernel's name cut
     to what tells kernels apart;
   - `cpu_ops(trace)`: the top-level PyTorch operators on the CPU side;
   - `launch_waits(trace)`: how long each GPU event waited between its launch call and its start;
   - `memory_peak(trace)`: the moment the most memory was allocated, and which operators allocated
     the blocks live at that moment (a profile made with `profile_memory=True`).
4. `recorded_profile(name)` reads what `make profile` recorded on a GPU; `ncu_details(text)` turns
   the details page it kept (`ncu_details.csv`) into one dict of metrics per profiled launch, and
   `ncu_kernels(device)` merges those with `ncu.json`'s, one dict per profiled target.

How a trace links the two sides: every launch call on the CPU (`cudaLaunchKernel`, `cudaMemsetAsync`,
... in category `cuda_runtime`; `cuLaunchKernelEx`, which cuBLAS and cuDNN call, in `cuda_driver`)
carries a `correlation` id in its args, and the GPU event it enqueued carries the same id. The
launch call itself runs inside the PyTorch operator (`cpu_op`) that made it, on the same thread.

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
import re
import subprocess
import sys

import torch

from helpers.bench import preferred_first, slug  # the same GPUs first, the same names
from helpers.compiled import compiler_quiet

ROOT = pathlib.Path(__file__).resolve().parent.parent
RECORDED = ROOT / "helpers" / "recorded" / "profile"   # one folder per GPU


def stamp():
    """Where and when a recording was made."""
    import triton

    return {"device": torch.cuda.get_device_name(), "date": datetime.date.today().isoformat(),
            "torch": torch.__version__, "triton": triton.__version__}


# ---------------------------------------------------------------- profiling a step


_profiler_started = False   # whether this process has run a profiler session (profile_step)


def profile_step(fn, warmup=2, memory=True):
    """Run fn() `warmup` times, then once under torch.profiler; return the profiler. The first call in
    a process runs a session around one tiny operation first, and throws it away: the profiler's own
    start-up would otherwise land in the step it profiles (on a 2-core CPU, a small step's operators
    read about ten times slower in a process's first session than in its second)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    global _profiler_started
    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    if not _profiler_started:
        with compiler_quiet(), profile(activities=activities):
            torch.ones(1) + 1
        _profiler_started = True
    for _ in range(warmup):
        fn()
    sync()
    # acc_events: one step is one cycle (without it torch warns that a cycle's end clears the events);
    # compiler_quiet: the profiler's own log lines, printed below Python on some builds, stay out of view
    with compiler_quiet(), profile(activities=activities, record_shapes=True, profile_memory=memory,
                                   acc_events=True) as prof:
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


GPU_WORK = ("kernel", "gpu_memcpy", "gpu_memset")   # trace categories of what a GPU stream runs
LAUNCHES = ("cuda_runtime", "cuda_driver")            # ... and of the CPU calls that enqueue it


def gpu_events(trace, cats=GPU_WORK):
    """What the GPU ran in a trace, in start order: {name, cat, start_us, dur_us, stream}, times in
    microseconds from the first one's start. By default kernels, device copies and memsets: all of
    them keep a stream busy, so all of them are GPU work."""
    events = [e for e in trace["traceEvents"] if e.get("cat") in cats and e.get("ph") == "X"]
    events.sort(key=lambda e: e["ts"])
    t0 = events[0]["ts"] if events else 0.0
    return [{"name": e["name"], "cat": e["cat"], "start_us": round(e["ts"] - t0, 3),
             "dur_us": round(e["dur"], 3), "stream": e.get("args", {}).get("stream", 0)} for e in events]


def kernel_events(trace):
    """The kernels of a trace alone (no copies or memsets), in start order: {name, start_us, dur_us,
    stream}, times in microseconds from the first kernel's start."""
    return [{key: e[key] for key in ("name", "start_us", "dur_us", "stream")}
            for e in gpu_events(trace, cats=("kernel",))]


# Words in PyTorch's kernel names that say nothing about the operation.
_GENERIC = {"gpu", "Binary", "BUnary", "AUnary", "OnSelf", "elementwise", "vectorized_elementwise",
            "unrolled_elementwise"}


def short_name(name, width=52):
    """A kernel's name cut to its function and, for PyTorch's elementwise kernels, the operation:
    'void at::native::unrolled_elementwise_kernel<...direct_copy_kernel_cuda...>' ->
    'unrolled_elementwise_kernel [direct_copy]'."""
    name = name.removeprefix("void ").replace("(anonymous namespace)::", "")
    head = re.split(r"[<(]", name, maxsplit=1)[0].split("::")[-1]
    rest = name[name.index(head) + len(head):]
    pattern = r"(\w+?)_kernel(?:_cuda|_impl)?\b|Functor_(\w+?)\b|(\w+?)Functor\b|(\w+?)Ops<"
    ops = [g for m in re.finditer(pattern, rest) for g in m.groups() if g and g not in _GENERIC]
    label = f"{head} [{ops[0]}]" if ops else head
    return label if len(label) <= width else label[:width - 3] + "..."


def launch_waits(trace):
    """Microseconds from each GPU event's launch call (CPU side, runtime or driver API) to its start
    on the GPU, in the trace's order."""
    events = trace["traceEvents"]
    launched = {e["args"]["correlation"]: e["ts"] for e in events
                if e.get("cat") in LAUNCHES and "correlation" in e.get("args", {})}
    return [e["ts"] - launched[e["args"]["correlation"]] for e in events
            if e.get("cat") in GPU_WORK and e.get("args", {}).get("correlation") in launched]


def memory_peak(trace, device_type=1):
    """The peak of a step's memory, from a trace made with profile_memory=True, and who holds it.

    The trace has a `[memory]` event for every allocation (args "Bytes" > 0) and free ("Bytes" < 0)
    of a block at address "Addr", on "Device Type" 1 (CUDA) or 0 (CPU). Replay them in time order,
    keeping the blocks alive by address, and stop where the bytes allocated since the trace began are
    highest. Each block alive then is charged to the operators that were running (on the same thread)
    when it was allocated, outermost first. Blocks allocated before the trace began are not in it.

    Returns {"peak_bytes", "during": [operators running at the peak, outermost first],
    "live": [{"bytes", "ops": [outermost, ..., innermost], "input_shape": the outermost operator's first
    input (the trace does not record a block's own shape)}, largest first]}."""
    events = trace["traceEvents"]
    memory = sorted((e for e in events if e.get("name") == "[memory]"
                     and e.get("args", {}).get("Device Type") == device_type), key=lambda e: e["ts"])
    live, peak_live, allocated, peak, peak_event = {}, {}, 0, 0, None
    for e in memory:
        addr, nbytes = e["args"]["Addr"], e["args"]["Bytes"]
        allocated += nbytes
        if nbytes > 0:
            live[addr] = e
        else:
            live.pop(addr, None)                    # a block allocated before the trace: not in `live`
        if allocated > peak:
            peak, peak_event, peak_live = allocated, e, dict(live)
    ops = [e for e in events if e.get("cat") == "cpu_op" and e.get("ph") == "X"]

    def running(at):                                # the operators around an instant, outermost first
        around = [o for o in ops if o["tid"] == at["tid"] and o["ts"] <= at["ts"] <= o["ts"] + o["dur"]]
        return sorted(around, key=lambda o: -o["dur"])

    blocks = []
    for e in peak_live.values():
        stack = running(e)
        dims = (stack[0].get("args", {}).get("Input Dims") or [None])[0] if stack else None
        while dims and isinstance(dims[0], list):   # a list of tensors (aten::cat): its first one
            dims = dims[0]
        blocks.append({"bytes": e["args"]["Bytes"], "ops": [o["name"] for o in stack],
                       "input_shape": tuple(dims) if dims else None})
    blocks.sort(key=lambda b: -b["bytes"])
    during = [o["name"] for o in running(peak_event)] if peak_event else []
    return {"peak_bytes": peak, "during": during, "live": blocks}


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
    return preferred_first(json.loads(p.read_text())["device"] for p in sorted(RECORDED.glob("*/stamp.json")))


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


def ncu_details(csv_text):
    """ncu's details page (`ncu --page details --csv`, kept as ncu_details.csv) -> one dict per
    profiled launch, in launch order: {"Kernel Name", and every metric by its name on the page
    ("Issue Slots Busy", "SM Active Cycles", ...), numbers as floats}. A name two sections share
    ("Memory Throughput": a % in one, bytes/s in the other) keeps the later section's value."""
    import csv
    import io

    launches = {}
    for row in csv.DictReader(io.StringIO(csv_text)):
        if not row.get("Metric Name"):
            continue                                # a rule's advice, not a metric
        launch = launches.setdefault(int(row["ID"]), {"Kernel Name": row["Kernel Name"]})
        value = row["Metric Value"].replace(",", "")
        try:
            launch[row["Metric Name"]] = float(value)
        except ValueError:
            launch[row["Metric Name"]] = value
    return [launches[i] for i in sorted(launches)]


def ncu_kernels(device=None):
    """The recorded Nsight Compute launches of lesson 08's targets, one dict each, in launch order:
    ncu.json's metrics (and its `target`, `counted`) merged with the details page's."""
    launches = recorded_profile("ncu.json", device)["kernels"]
    pages = ncu_details(recorded_profile("ncu_details.csv", device))
    assert [k["Kernel Name"] for k in launches] == [p["Kernel Name"] for p in pages], \
        "ncu.json and ncu_details.csv list different launches"
    return [{**page, **k} for k, page in zip(launches, pages) if k.get("target")]


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


def ncu_command(lesson, kernels=(), python=sys.executable, report="ncu_report"):
    """The Nsight Compute command line `make profile` runs for a lesson: its targets' launches
    (`python -m helpers.profile --ncu-run LESSON`), only the kernels whose names match `kernels` where
    any are given, the sections and metrics the lessons read, into report.ncu-rep."""
    only = f"-k regex:{'|'.join(kernels)} " if kernels else ""
    sections = " ".join(f"--section {s}" for s in NCU_SECTIONS)
    return (f"ncu --profile-from-start off --clock-control none {only}{sections} "
            f"--metrics {','.join(NCU_EXTRA)} -o {report} -f {python} -m helpers.profile --ncu-run {lesson}")


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
    report = folder / "ncu_report"
    command = ncu_command(lesson, [t["kernel"] for t in targets.values() if "kernel" in t])
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
