"""Timing kernels honestly, and `make bench`: every solution beside its baselines.

On a GPU, `measure(fn)` is Triton's `do_bench` (CUDA events, warm-up, the L2
cache flushed before each run) reporting the median. Under the interpreter
timings mean nothing, so the lessons show what `make bench` recorded on a GPU:
`recorded()` reads that file. `compare(group, ...)` shows a group either way as a
plot (a panel per GPU: x what grows, y TFLOP/s or the fraction of the copy
ceiling) with its tables folded under it; `show()` does the same for rows a
lesson has picked itself.

Each solutions module may define `benchmarks()`, yielding `Bench` items;
`python -m helpers.bench` (what `make bench` runs) times them all in one run,
checks every implementation against the first one, times them in turn over
several rounds (keeping each one's median), and writes
the figures of the GPU it ran on to `helpers/recorded/bench/<gpu>.json` (one file
per GPU, every row naming its device, copy ceiling, date and versions; a partial
run replaces only its own groups in its own GPU's file) plus one plot per group
in `notebooks/figures/`.
A solutions module may also define `record_artifacts(folder)`: after the timings
it writes into `helpers/recorded/` what its notebook shows of a GPU (compiled
code, generated code) when run without one.
"""

import dataclasses
import datetime
import json
import os
import pathlib
import re
import statistics
import sys
from typing import Callable

import torch

from helpers import solutions
from helpers.compiled import compiler_quiet

ROOT = pathlib.Path(__file__).resolve().parent.parent
RECORDED = ROOT / "helpers" / "recorded" / "bench"   # one JSON file per GPU
FIGURES = ROOT / "notebooks" / "figures"
# Without a GPU the lessons show this GPU's figures first (the prose reads them), then the others recorded.
PREFERRED = ("NVIDIA H200", "NVIDIA H100 80GB HBM3")


@dataclasses.dataclass
class Bench:
    """One problem size of one operation, and the implementations to time on it."""

    group: str                      # one plot per group, e.g. "vector_add"
    size: int                       # the x axis of the plot
    bytes: int                      # the fewest bytes the operation must move
    flops: int                      # the floating-point operations it must do
    impls: dict                     # name -> zero-argument callable returning the output
    label: str = ""                 # how to name this size in a table ("4096x4096")
    metric: str = "GB/s"            # "GB/s" (memory-bound) or "TFLOP/s" (compute-bound)
    tol: float = 1e-2               # largest relative error accepted against the first impl
    graph: bool = False             # time CUDA-graph replays: the GPU's time without the kernels' own
                                    # launches from Python (one short graph.replay() call instead)
    back_to_back: bool = False      # time calls back to back from Python (launched_ms), no L2 flush in
                                    # between: for a step whose launches are the point (a decoding step)


def measure(fn: Callable, warmup_ms=25, rep_ms=100, graph=False, quantiles=None):
    """Median milliseconds of `fn()` on the GPU (do_bench: events, warm-up, L2 flushed).

    graph=True captures one call of `fn` in a CUDA graph and times the graph's replays instead: the
    same kernels, launched by one short graph.replay() call (behind do_bench's L2 flush, like any
    call) instead of by each launcher's Python. A short kernel then reads its own time, not the time
    the CPU took to launch it, which varies from process to process.
    quantiles: return those quantiles of the times instead of the median (as the autotuner asks)."""
    import triton.testing

    if graph:
        fn()                                    # compile and autotune before capturing
        torch.cuda.synchronize()
        captured = torch.cuda.CUDAGraph()
        with torch.cuda.graph(captured):
            fn()
        fn = captured.replay
    if quantiles is not None:
        return triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, quantiles=quantiles)
    return triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median")


def launched_ms(fn, run_ms=20.0, repeats=5):
    """Milliseconds per call of `fn` called back to back from Python, as a training loop or a model's
    forward calls it: events around as many calls as take about `run_ms` (3 to 100), the median of
    `repeats` such runs. No L2 flush in between (do_bench's flush is a GPU memset of 256 MB, behind
    which the CPU prepares the next call for free): a call whose host time exceeds its GPU time shows
    it here."""
    def run(calls):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / calls

    fn()
    torch.cuda.synchronize()
    calls = max(3, min(100, round(run_ms / max(run(3), 1e-3))))
    return statistics.median(run(calls) for _ in range(repeats))


def host_us(fn, calls=30):
    """Median host time of one call of `fn`, in µs: from the call to its return, the GPU idle and its
    queue empty at the call (each call is waited for, untimed, before the next). What a launcher costs
    the CPU: argument checks, allocations, descriptors, the autotuner's lookup, the launch itself. A
    function that waits for the GPU itself (.item(), a copy to the host) includes the GPU's time."""
    import time

    times = []
    for _ in range(calls):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    torch.cuda.synchronize()
    return 1e6 * statistics.median(times)


def gbps(nbytes, ms):
    return nbytes / ms / 1e6


def tflops(flops, ms):
    return flops / ms / 1e9


def copy_ceiling(gib=1):
    """GB/s of a large device-to-device copy, counting bytes read plus bytes written."""
    src = torch.randn(gib * 2**28, device="cuda")
    dst = torch.empty_like(src)
    ms = measure(lambda: dst.copy_(src))
    return gbps(2 * src.nbytes, ms)


def slug(device):
    """nvidia-h200 for "NVIDIA H200": how a GPU's recordings are named."""
    return re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-")


def gpu_record_path(folder, device):
    """helpers/recorded/<folder>/<gpu>.json: where a GPU script's record of one GPU goes, and a lesson
    reads it."""
    return RECORDED.parent / folder / f"{slug(device)}.json"


def write_gpu_record(folder, record, out_name):
    """A GPU script's record (a dict with "device") to gpu_record_path(folder, ...), and to $OUT/out_name
    where OUT is set (the device machine's folder of results to bring back). Returns the paths."""
    paths = [gpu_record_path(folder, record["device"])]
    if os.environ.get("OUT"):
        paths.append(pathlib.Path(os.environ["OUT"]) / out_name)
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record, indent=1) + "\n")
    return paths


def device_file(device):
    """The file holding one GPU's recorded figures: helpers/recorded/bench/nvidia-h200.json."""
    return RECORDED / (slug(device) + ".json")


def preferred_first(devices):
    """GPU names in the order the lessons show them: PREFERRED's first, then the others by name."""
    return sorted(devices, key=lambda d: (PREFERRED.index(d) if d in PREFERRED else len(PREFERRED), d))


def recorded_devices():
    """The GPUs with recorded figures, the preferred one first."""
    return preferred_first(json.loads(p.read_text())["device"] for p in sorted(RECORDED.glob("*.json")))


def recorded(device=None):
    """The figures `make bench` recorded on one GPU (default: the preferred one), or None."""
    devices = recorded_devices()
    if device is None and devices:
        device = devices[0]
    path = device_file(device) if device else None
    return json.loads(path.read_text()) if path and path.exists() else None


def recorded_rows(group, device=None):
    """The recorded rows of one group on one GPU, and a line saying where and when they were measured."""
    data = recorded(device)
    if not data:
        return [], "no GPU figures recorded yet (run `make bench` on a GPU)"
    rows = [r for r in data["results"] if r["group"] == group]
    if not rows:
        return [], f"nothing recorded for {group} on {data['device']}"
    first = rows[0]
    where = (f"recorded on {first['device']} ({first['date']}, torch {first['torch']}, "
             f"triton {first['triton']}; copy ceiling {first['copy_gbps']:.0f} GB/s)")
    return rows, where


# A GPU's clock moves with its temperature and power draw: timed once each, one after another, the
# implementations of a Bench would each meet a different clock, and at a few percent apart the
# order would decide. So they are timed in turn, ROUNDS times over, and each keeps its median.
ROUNDS = 3
# A step timed back to back from Python is bound by the CPU, whose pace moves more (other processes,
# the garbage collector): one slow round in three was common on the lent H100s, two not rare. Such a
# Bench is short: it takes BACK_TO_BACK_ROUNDS rounds.
BACK_TO_BACK_ROUNDS = 7


def _graph_ms(fn):
    """measure(fn, graph=True), or None where `fn` cannot be captured in a CUDA graph (it waits for the
    GPU, or replays graphs of its own)."""
    try:
        return measure(fn, graph=True)
    except Exception:  # noqa: BLE001  (whatever the capture refused: this impl has no graphed time)
        torch.cuda.synchronize()
        return None


def time_bench(b, ceiling, launch_bill=False):
    """Check each implementation of one Bench against the first, then time them in turn, ROUNDS times
    over (BACK_TO_BACK_ROUNDS for a Bench timed back to back); return one row per implementation with
    the median of its rounds.

    `ms` is the Bench's own timing (graph replays where b.graph, else launched from Python).
    launch_bill=True (`make bench`) also times, in each round, every implementation called back to back
    from Python (launched_ms) and, where the Bench's own timing is not one, as graph replays; and its
    host time per call (host_us): the rows then also hold `launched_ms`, `graphed_ms` (None where it
    cannot be captured) and `host_us`, what a learner calling it from Python pays beside the GPU's time."""
    first = None
    for name, fn in b.impls.items():
        with compiler_quiet():  # the first call compiles (max-autotune prints tables and logs)
            out = fn()
        out = out[0] if isinstance(out, (tuple, list)) else out
        if first is None:
            first = out
        else:
            err = _rel_error(out, first)
            if not err <= b.tol:
                raise AssertionError(f"{b.group} {b.label or b.size}: {name} differs from "
                                     f"{next(iter(b.impls))} by {err:.2e} (relative)")
    rounds = {name: [] for name in b.impls}
    launched = {name: [] for name in b.impls}   # with launch_bill: back to back from Python
    graphed = {name: [] for name in b.impls}    # with launch_bill, where the Bench's own timing is not
    for _ in range(BACK_TO_BACK_ROUNDS if b.back_to_back else ROUNDS):
        for name, fn in b.impls.items():
            rounds[name].append(launched_ms(fn) if b.back_to_back else measure(fn, graph=b.graph))
            if launch_bill:
                launched[name].append(launched_ms(fn))
                if not b.graph:
                    graphed[name].append(_graph_ms(fn))
    rows = []
    for name, times in rounds.items():
        ms = statistics.median(times)
        row = {"group": b.group, "size": b.size, "label": b.label or str(b.size), "impl": name,
               "ms": ms, "rounds_ms": times, "gbps": gbps(b.bytes, ms), "tflops": tflops(b.flops, ms),
               "metric": b.metric, "fraction_of_copy": gbps(b.bytes, ms) / ceiling,
               "timing": ("CUDA graph replay" if b.graph else
                          "launched from Python, back to back" if b.back_to_back else "launched from Python")}
        if launch_bill:
            if b.graph:
                graph_ms = ms
            else:   # None where any round could not capture it
                graph_ms = None if None in graphed[name] else statistics.median(graphed[name])
            row.update(launched_ms=statistics.median(launched[name]), graphed_ms=graph_ms,
                       host_us=host_us(b.impls[name]))
        rows.append(row)
    return rows


# ---------------------------------------------------------------- showing a comparison


def table(rows, title):
    """The rows as plain text under `title`, each column as wide as its longest entry."""
    if rows and rows[0].get("timing") == "CUDA graph replay":
        title += "; timed as CUDA graph replays"
    header = ("size", "implementation", "ms", "GB/s", "TFLOP/s", "% copy")
    cells = [(r["label"], r["impl"], f"{r['ms']:.4f}", f"{r['gbps']:.0f}", f"{r['tflops']:.1f}",
              f"{100 * r['fraction_of_copy']:.0f}%") for r in rows]
    if rows and all("host_us" in r for r in rows):   # make bench's launch bill
        header += ("launched ms", "graphed ms", "host µs")
        figure = lambda v, spec: "-" if v is None else format(v, spec)  # noqa: E731
        cells = [c + (figure(r["launched_ms"], ".4f"), figure(r["graphed_ms"], ".4f"),
                      figure(r["host_us"], ".1f")) for c, r in zip(cells, rows)]
    widths = [max(len(values[i]) for values in [header, *cells]) for i in range(len(header))]

    def line(values):  # names left-aligned, figures right-aligned
        cells = [f"{v:<{w}}" if i < 2 else f"{v:>{w}}" for i, (v, w) in enumerate(zip(values, widths))]
        return "  ".join(cells)

    lines = [title, line(header)] + [line(values) for values in cells]
    return "\n".join(line.rstrip() for line in lines)


# What the x axis of a group measures, read from its row labels ("B4 N4096", "4096^3", ...).
_AXES = [
    (r"B\d+ N\d+", "sequence length N (batch B)"),
    (r"\d+\^3", "matrix size (M = N = K)"),
    (r"n=2\^\d+", "elements n"),
    (r"T\d+ .*", "tokens T"),
    (r".+ T\d+", "matmul of the block, tokens T"),
    (r"(M,K,N=)?M?\d+[ ,]K?\d+[ ,]N?\d+.*", "matrix shape M, K, N"),
    (r"\d+x\d+x\d+", "matrix shape M x N x K"),
    (r"\d+x\d+ (fp\d+|bf16)", "rows x row length"),
    (r"\d+x\d+.*", "shape"),
]


def x_axis(labels):
    """What the row labels of a group count, for the x axis of its plot."""
    for pattern, name in _AXES:
        if all(re.fullmatch(pattern, label) for label in labels):
            return name
    return "problem (as labelled in the table)"


def y_axis(rows):
    """(row key, axis label) of what a plot shows: TFLOP/s, or the fraction of the copy ceiling."""
    if rows[0]["metric"] == "TFLOP/s":
        return "tflops", "TFLOP/s"
    return "fraction_of_copy", "fraction of the copy ceiling"


def plot(group, by_gpu, roof=None):
    """A matplotlib Figure of one group: a panel per GPU, side by side, a line per implementation.
    roof: {GPU: {label: value}}, a bound to draw as a dashed line (in the unit plotted)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4.6 * len(by_gpu) + 0.6, 4.2))
    axes = fig.subplots(1, len(by_gpu), sharey=True, squeeze=False)[0]
    for ax, (gpu, rows) in zip(axes, by_gpu.items()):
        key, y_label = y_axis(rows)
        labels = list(dict.fromkeys(r["label"] for r in rows))
        for k, impl in enumerate(dict.fromkeys(r["impl"] for r in rows)):
            value = {r["label"]: r[key] for r in rows if r["impl"] == impl}
            if len(labels) == 1:  # one size: a bar per implementation
                ax.bar(k, value[labels[0]], color=f"C{k}", label=impl)
                continue
            xs = [i for i, label in enumerate(labels) if label in value]
            ax.plot(xs, [value[labels[i]] for i in xs], marker="o", label=impl)
        if key == "fraction_of_copy":
            ax.axhline(1.0, color="gray", linestyle="--", linewidth=1, label="copy ceiling")
        bound = (roof or {}).get(gpu, {})
        if bound:
            xs = [i for i, label in enumerate(labels) if label in bound]
            ax.plot(xs, [bound[labels[i]] for i in xs], color="gray", linestyle="--", label="roof")
        if len(labels) == 1:
            ax.set_xticks([])
        else:
            ax.set_xticks(range(len(labels)), labels, rotation=20 if len(labels) > 3 else 0, fontsize=8)
        ax.set_xlabel(x_axis(labels) + (f": {labels[0]}" if len(labels) == 1 else ""))
        when = f"recorded {rows[0]['date']}" if "date" in rows[0] else "measured now"
        ceiling = f", copy ceiling {rows[0]['copy_gbps']:.0f} GB/s" if "copy_gbps" in rows[0] else ""
        ax.set_title(f"{gpu}\n({when}{ceiling})", fontsize=9)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(y_label)
    highest = max([r[key] for rows in by_gpu.values() for r in rows]
                  + [v for bound in (roof or {}).values() for v in bound.values()])
    axes[0].set_ylim(0, 1.1 * max(highest, 1.0 if key == "fraction_of_copy" else 0.0))
    handles, names = axes[0].get_legend_handles_labels()
    timing = " (timed as CUDA graph replays)" if rows[0].get("timing") == "CUDA graph replay" else ""
    fig.suptitle(f"{group}{timing}", fontsize=10)
    fig.legend(handles, names, loc="lower center", ncol=min(len(names), 3), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.045 * ((len(names) + 2) // 3) + 0.01, 1, 1))
    return fig


class Comparison:
    """A group's figures as a notebook shows them: the plot, and under it the tables, folded."""

    def __init__(self, group, by_gpu, titles, roof=None):
        self.group, self.by_gpu, self.titles, self.roof = group, by_gpu, titles, roof

    def tables(self):
        return "\n\n".join(table(rows, self.titles[gpu]) for gpu, rows in self.by_gpu.items())

    def png(self):
        import io

        buffer = io.BytesIO()
        plot(self.group, self.by_gpu, self.roof).savefig(buffer, format="png", dpi=90)
        return buffer.getvalue()

    def _repr_mimebundle_(self, include=None, exclude=None):
        import base64
        import html

        image = base64.b64encode(self.png()).decode()
        gpus = " and ".join(self.by_gpu)
        alt = html.escape(f"{self.group} on {gpus}")
        folded = (f'<img src="data:image/png;base64,{image}" alt="{alt}">'
                  f"<details><summary>{html.escape(self.group)}: the figures as a table</summary>"
                  f"<pre>{html.escape(self.tables())}</pre></details>")
        return {"text/html": folded, "text/plain": self.tables()}

    def __repr__(self):
        return self.tables()


def show(group, by_gpu, titles, roof=None):
    """Show one group: in a notebook a plot (a panel per GPU) with the tables folded under it; elsewhere
    the tables as text. by_gpu: {GPU: rows}; titles: {GPU: the line that says where the rows come from};
    roof: {GPU: {label: bound}}, drawn as a dashed line (lesson 03's roofline)."""
    comparison = Comparison(group, by_gpu, titles, roof)
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        get_ipython = None
    if get_ipython is None or get_ipython() is None:
        print(comparison.tables())
    else:
        display(comparison)


_ceiling = None


def compare(group, make_benches):
    """On a GPU, time the implementations now; elsewhere, show what `make bench` recorded for `group`.

    `make_benches()` returns Bench items; it is only called on a GPU.
    """
    global _ceiling
    from helpers.device import ON_GPU

    if ON_GPU:
        _ceiling = _ceiling or copy_ceiling()
        rows = [row for b in make_benches() for row in time_bench(b, _ceiling)]
        gpu = torch.cuda.get_device_name()
        if rows:
            title = f"{group}: measured now on {gpu} (copy ceiling {_ceiling:.0f} GB/s)"
            show(group, {gpu: [{**row, "copy_gbps": _ceiling} for row in rows]}, {gpu: title})
        return rows
    by_gpu, titles = {}, {}
    for device in recorded_devices():  # every GPU recorded, the preferred one first
        rows, where = recorded_rows(group, device)
        if rows:
            by_gpu[device], titles[device] = rows, f"{group}: no GPU here, so these are the figures {where}"
    if not by_gpu:
        print(f"{group}: no GPU here, and no figures recorded for it yet (run `make bench` on a GPU).")
        return []
    show(group, by_gpu, titles)
    return next(iter(by_gpu.values()))  # the preferred GPU's rows, for the cells that read them


def group_benches(module, group):
    """The Bench items of one group of a solutions module's `benchmarks()` (GPU only; in group order)."""
    found = False
    for bench in module.benchmarks():
        if bench.group == group:
            found = True
            yield bench
        elif found:
            return


def timed(module, group):
    """{GPU: rows} for one group of a solutions module: measured now on a GPU, else every recorded GPU's."""
    from helpers.device import ON_GPU

    rows = compare(group, lambda: list(group_benches(module, group)))
    if ON_GPU:
        return {torch.cuda.get_device_name(): rows} if rows else {}
    return {gpu: recorded_rows(group, gpu)[0] for gpu in recorded_devices() if recorded_rows(group, gpu)[0]}


# ---------------------------------------------------------------- reading a group's rows in a lesson


def impl_named(rows, words):
    """The first implementation of `rows` whose name contains `words` (case ignored), or None."""
    return next((r["impl"] for r in rows if words.lower() in r["impl"].lower()), None)


def verdicts(by_gpu, ours, others):
    """For each GPU ({GPU: rows}, as `timed` returns) and each other implementation: at how many shapes
    `ours` is faster, and each shape's ratio (their time over ours, so above 1 is a win)."""
    for gpu, rows in by_gpu.items():
        ms = {(r["label"], r["impl"]): r["ms"] for r in rows}
        labels = list(dict.fromkeys(r["label"] for r in rows))
        for other in others:
            shared = [label for label in labels if (label, ours) in ms and (label, other) in ms]
            faster = sum(ms[(label, ours)] < ms[(label, other)] for label in shared)
            ratios = ", ".join(f"{label} {ms[(label, other)] / ms[(label, ours)]:.2f}" for label in shared)
            print(f"{gpu}: {ours!r} vs {other!r}: faster at {faster} of {len(shared)} shapes "
                  f"(their time / ours: {ratios})")


def ratios(by_gpu, ours, others):
    """Per GPU and shape: the TFLOP/s of the implementation named `ours` over each other's (found by
    words of their names, as impl_named), so above 1 means ours is faster."""
    if not by_gpu:
        print("  nothing measured or recorded for this group yet")
    for gpu, rows in by_gpu.items():
        mine = impl_named(rows, ours)
        theirs = [name for name in (impl_named(rows, other) for other in others) if name]
        if mine is None:
            print(f"{gpu}: no row names {ours!r}")
            continue
        print(f"{gpu}: {mine} / " + ", / ".join(theirs))
        labels = list(dict.fromkeys(r["label"] for r in rows))
        width = max(len(label) for label in labels)  # the columns stay aligned however long the labels
        for label in labels:
            speed = {r["impl"]: r["tflops"] for r in rows if r["label"] == label}
            cells = [f"{speed[mine] / speed[name]:5.2f}" if name in speed and mine in speed else "    -"
                     for name in theirs]
            print(f"  {label:>{width}}: " + "  ".join(cells))


# ---------------------------------------------------------------- make bench


def show_recorded():
    """Print every recorded group, GPU by GPU (what `make bench` shows without a GPU)."""
    for device in recorded_devices():
        for group in dict.fromkeys(r["group"] for r in recorded(device)["results"]):
            rows, where = recorded_rows(group, device)
            print(table(rows, f"{group}: {where}"))
            print()


def solution_modules(lessons=None):
    """Every solutions module (or those of the given lessons, e.g. ["01", "02"])."""
    for name in solutions.lessons():
        if not lessons or name in lessons:
            yield solutions.load_solution(name)


def _rel_error(out, ref):
    out, ref = out.double(), ref.double()
    return ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def run(module, ceiling, groups=None, saved=None):
    """Time every Bench of one solutions module (or only those of `groups`); return the rows.
    saved(rows): called with the rows so far each time a group is complete, so that a run stopped
    part-way keeps the groups it finished."""
    results = []
    for b in module.benchmarks():
        if groups and b.group not in groups:
            continue
        if saved and results and results[-1]["group"] != b.group:
            saved(results)
        rows = time_bench(b, ceiling, launch_bill=True)
        results += rows
        for row in rows:
            value = row["gbps"] if b.metric == "GB/s" else row["tflops"]
            graphed = "-" if row["graphed_ms"] is None else f"{row['graphed_ms']:.4f}"
            print(f"{b.group:>24} {row['label']:>18} {row['impl']:>26}: {row['ms']:9.4f} ms "
                  f"{value:8.1f} {b.metric} (launched {row['launched_ms']:.4f} ms, graphed {graphed} ms, "
                  f"host {row['host_us']:.1f} µs)", flush=True)
        del b
        torch.cuda.empty_cache()
    return results


def save(ceiling, results, plots=True):
    """Write this GPU's rows into its own file, replacing the groups measured now; then the plots.

    Rows of other groups stay (a partial run, `make bench LESSON=06`), each still naming the
    device, date, versions and copy ceiling it was measured with; other GPUs' files are not touched.
    """
    import triton

    device = torch.cuda.get_device_name()
    stamp = {"device": device, "date": datetime.date.today().isoformat(), "torch": torch.__version__,
             "triton": triton.__version__, "copy_gbps": ceiling}
    results = [{**row, **stamp} for row in results]
    old = recorded(device) or {}
    groups = {r["group"] for r in results}
    kept = [r for r in old.get("results", []) if r["group"] not in groups]
    data = {**stamp, "results": kept + results}
    path = device_file(device)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")
    if plots:
        plot_all(data)
    return path


def plot_all(data):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    FIGURES.mkdir(parents=True, exist_ok=True)
    groups = sorted({r["group"] for r in data["results"]})
    for group in groups:
        rows = [r for r in data["results"] if r["group"] == group]
        metric = rows[0]["metric"]
        key = "gbps" if metric == "GB/s" else "tflops"
        fig, ax = plt.subplots(figsize=(6, 3.6))
        for impl in dict.fromkeys(r["impl"] for r in rows):
            pts = sorted((r["size"], r[key]) for r in rows if r["impl"] == impl)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=impl)
        if metric == "GB/s":
            ax.axhline(data["copy_gbps"], color="gray", linestyle="--", label="copy ceiling")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("problem size")
        ax.set_ylabel(metric)
        ax.set_title(f"{group} on {data['device']}", fontsize=10)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(FIGURES / f"bench_{group}.png", dpi=110)
        plt.close(fig)


def main(argv=None):
    import argparse

    parser = argparse.ArgumentParser(description="Time every solution kernel beside its baselines.")
    parser.add_argument("--lesson", help="only these lessons, e.g. 05 or 01,02")
    parser.add_argument("--groups", help="only these groups, e.g. softmax_fp32,rmsnorm (the other groups "
                                         "recorded stay as they are)")
    parser.add_argument("--no-artifacts", action="store_true",
                        help="time only: skip the lessons' record_artifacts (compiled code, profiles)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("No CUDA GPU here, so nothing is timed: these are the figures `make bench` recorded on "
              "a GPU (the notebooks show them too).\n")
        show_recorded()
        return 0
    import helpers  # picks the GPU before the solutions define their kernels

    lessons = [name.strip().zfill(2) for name in args.lesson.split(",")] if args.lesson else None
    groups = {name.strip() for name in args.groups.split(",")} if args.groups else None
    print(helpers.describe())
    ceiling = copy_ceiling()
    print(f"copy ceiling: {ceiling:.0f} GB/s", flush=True)
    results = []
    for module in solution_modules(lessons):
        if hasattr(module, "benchmarks"):
            done = list(results)     # saved after each group (plots at the end), so a run stopped part-way
            results += run(module, ceiling, groups,          # keeps what it measured
                           saved=lambda rows: save(ceiling, done + rows, plots=False))
        path = save(ceiling, results)
        # what the notebook shows of a GPU besides timings (compiled code, profiles)
        if hasattr(module, "record_artifacts") and not args.no_artifacts:
            module.record_artifacts(RECORDED.parent)
    print(f"wrote {path.relative_to(ROOT)} and plots in {FIGURES.relative_to(ROOT)}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
