"""Lesson 08 · Profiling: what `make profile` measures on a GPU.

- `ncu_targets()`: the course's kernels that Nsight Compute profiles, each with the bytes and FLOPs
  the course counts for it (lesson 03's way), so the lesson can set ncu's measured bytes beside them;
- `profile_loop()`: the timings of the lesson's profile -> hypothesis -> change -> measure loop
  (lesson 05's tiled softmax, second pass forwards, then backwards);
- `proton_scopes(folder)`: Triton's profiler inside a kernel (the instrumentation backend), tried on
  a small kernel: what it reports, or why it does not run.

And the lesson's exercises, pure Python over profile data: `kernel_table`, `gpu_idle_share`,
`gpu_time_by_op`, `diagnose`, `roofline_point`.
"""

import json
import pathlib

import torch
import triton
import triton.language as tl
import triton.profiler.language as pl

from helpers.roofline import CHIPS
from helpers.solutions import load_solution

LONG_ROWS = ((2048, 65536), (512, 262144))   # lesson 05's long-row shapes, float32


def _tiled_softmax(x, reverse):
    """Lesson 05's autotuned tiled softmax, with its second pass forwards or backwards."""
    l05 = load_solution("05")
    out = torch.empty_like(x)
    l05.softmax_tiled_tuned_kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), x.stride(1),
                                                   out.stride(0), REVERSE=reverse)
    return out


def ncu_targets():
    """name -> {run, bytes, flops, what}: the kernels `make profile` runs under Nsight Compute, in
    order, one launch each. `bytes` is the fewest bytes the operation must move (each input read
    once, each output written once), `flops` the operations it must do, as lesson 03 counts them."""
    l01, l04, l05, l06 = (load_solution(n) for n in ("01", "04", "05", "06"))
    cuda = dict(device="cuda")
    fp16 = dict(device="cuda", dtype=torch.float16)
    targets = {}

    n = 2**28
    x, y = torch.randn(n, **cuda), torch.randn(n, **cuda)
    targets["vector add (01)"] = {"run": lambda: l01.add(x, y), "bytes": 3 * 4 * n, "flops": n,
                                  "what": "2^28 float32"}
    m, c = 32768, 4096
    xs = torch.randn(m, c, **cuda)
    targets["row softmax (05)"] = {"run": lambda: l05.softmax_rows(xs), "bytes": 2 * 4 * m * c,
                                   "flops": 5 * m * c, "what": f"{m}x{c} float32"}
    for m, c in LONG_ROWS:
        xl = torch.randn(m, c, **cuda)
        for reverse in (False, True):
            name = f"tiled softmax {m}x{c}" + (", pass 2 reversed" if reverse else "") + " (05)"
            targets[name] = {"run": lambda xl=xl, r=reverse: _tiled_softmax(xl, r), "bytes": 2 * 4 * m * c,
                             "flops": 5 * m * c, "what": f"{m}x{c} float32"}
    for size in (4096, 512):
        a, b = torch.randn(size, size, **fp16), torch.randn(size, size, **fp16)
        counted = {"bytes": 3 * 2 * size * size, "flops": 2 * size**3, "what": f"{size}^3 float16"}
        targets[f"matmul {size}^3 (04)"] = {"run": lambda a=a, b=b: l04.matmul(a, b), **counted}
        targets[f"cuBLAS matmul {size}^3"] = {"run": lambda a=a, b=b: a @ b, **counted}
    B, H, N, D = 4, 16, 4096, 128
    q, k, v = (torch.randn(B, H, N, D, **fp16) for _ in range(3))
    targets["FlashAttention forward (06)"] = {
        "run": lambda: l06.flash_forward(q, k, v), "bytes": 4 * q.nbytes, "flops": 4 * B * H * N * N * D,
        "what": f"B{B} H{H} N{N} D{D} float16"}
    return targets


def profile_loop():
    """The loop's measurements: do_bench medians of the tiled softmax with its second pass forwards
    and backwards, at lesson 05's long-row shapes, as GB/s and fraction of the copy ceiling."""
    from helpers import bench

    ceiling = bench.copy_ceiling()
    rows = []
    for m, c in LONG_ROWS:
        x = torch.randn(m, c, device="cuda")
        expected = torch.softmax(x, dim=-1)
        for reverse in (False, True):
            out = _tiled_softmax(x, reverse)
            torch.testing.assert_close(out, expected)
            ms = bench.measure(lambda x=x, r=reverse: _tiled_softmax(x, r))
            rows.append({"shape": f"{m}x{c}", "reverse": reverse, "ms": round(ms, 4),
                         "gbps": round(bench.gbps(2 * x.nbytes, ms), 1),
                         "fraction_of_copy": round(bench.gbps(2 * x.nbytes, ms) / ceiling, 4)})
        del x, expected
    return {"copy_gbps": round(ceiling, 1), "rows": rows}


@triton.jit
def _scoped_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    pl.enter_scope("load")
    x = tl.load(x_ptr + offs, mask=offs < n)
    pl.exit_scope("load")
    pl.enter_scope("compute_store")
    tl.store(out_ptr + offs, tl.exp(x) * 2, mask=offs < n)
    pl.exit_scope("compute_store")


def proton_scopes(folder):
    """Try proton's instrumentation backend (scopes inside a Triton kernel): {ok, tree | error}."""
    try:
        import triton.profiler as proton

        if hasattr(pl, "enable_semantic"):   # newer Triton instruments only Gluon kernels by default
            pl.enable_semantic("triton")
        x = torch.randn(2**24, device="cuda")
        out = torch.empty_like(x)
        name = str(pathlib.Path(folder) / "proton_scopes")
        proton.start(name, backend="instrumentation")
        _scoped_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        torch.cuda.synchronize()
        proton.finalize()
        path = pathlib.Path(name + ".hatchet")
        tree = json.loads(path.read_text())
        path.unlink()
        return {"ok": True, "tree": tree}
    except Exception as e:  # recorded as it is: the lesson says what did not run, and why
        return {"ok": False, "error": f"{type(e).__name__}: {str(e)[:2000]}"}


# ---------------------------------------------------------------- exercises


def kernel_table(kernels):
    """Group the GPU's events (kernels, copies, memsets) by name: [{name, calls, total_us, share}],
    most total time first (equal totals: by name), share = the name's time over the time of all the
    events."""
    rows = {}
    for k in kernels:
        row = rows.setdefault(k["name"], {"name": k["name"], "calls": 0, "total_us": 0.0})
        row["calls"] += 1
        row["total_us"] += k["dur_us"]
    all_kernels = sum(row["total_us"] for row in rows.values())
    for row in rows.values():
        row["share"] = row["total_us"] / all_kernels
    return sorted(rows.values(), key=lambda row: (-row["total_us"], row["name"]))


def gpu_idle_share(kernels):
    """The share of the span from the first event's start to the last event's end during which no
    kernel, copy or memset runs. Events may overlap (several streams) and come in any order."""
    intervals = sorted((k["start_us"], k["start_us"] + k["dur_us"]) for k in kernels)
    first = intervals[0][0]
    last = max(end for _, end in intervals)
    busy, reached = 0.0, first           # reached: the latest end seen so far
    for start, end in intervals:
        busy += max(0.0, end - max(start, reached))   # only the part not covered already
        reached = max(reached, end)
    return (last - first - busy) / (last - first)


def gpu_time_by_op(events):
    """GPU time per PyTorch operator, from a trace's events: each kernel, copy and memset is charged,
    through its correlation id, to the innermost operator around the call that launched it."""
    launch_calls = {e["args"]["correlation"]: e for e in events
                    if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    operators = [e for e in events if e.get("cat") == "cpu_op"]
    rows = {}
    for gpu in events:
        if gpu.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        launch = launch_calls.get(gpu["args"].get("correlation"))
        around = [op for op in operators if launch is not None and op["tid"] == launch["tid"]
                  and op["ts"] <= launch["ts"] <= op["ts"] + op["dur"]]
        name = min(around, key=lambda op: op["dur"])["name"] if around else "(no operator)"   # the innermost
        row = rows.setdefault(name, {"op": name, "gpu_us": 0.0, "events": 0})
        row["gpu_us"] += gpu["dur"]
        row["events"] += 1
    return sorted(rows.values(), key=lambda row: (-row["gpu_us"], row["op"]))


def diagnose(metrics):
    """(bound, limiter) from a kernel's ncu metrics: the speed-of-light rule and the occupancy limit."""
    dram = metrics["gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"]
    sm = metrics["sm__throughput.avg.pct_of_peak_sustained_elapsed"]
    if max(dram, sm) < 60:
        bound = "latency"
    elif dram >= sm:
        bound = "memory"
    else:
        bound = "compute"
    limits = [("registers", metrics["launch__occupancy_limit_registers"]),
              ("shared memory", metrics["launch__occupancy_limit_shared_mem"]),
              ("warps", metrics["launch__occupancy_limit_warps"]),
              ("blocks", metrics["launch__occupancy_limit_blocks"])]
    limiter = min(limits, key=lambda item: item[1])[0]   # min keeps the first of equal values
    return bound, limiter


def roofline_point(metrics, flops, chip):
    """Where ncu's measurement puts a kernel on the roofline of CHIPS[chip]."""
    spec = CHIPS[chip]
    nbytes = metrics["dram__bytes_read.sum"] + metrics["dram__bytes_write.sum"]   # DRAM traffic, bytes
    seconds = metrics["gpu__time_duration.sum"] * 1e-9                            # ncu's ns
    intensity = flops / nbytes
    tflops = flops / seconds / 1e12
    roof = min(spec.tflops["fp16"], intensity * spec.bandwidth_tbs)
    return {"intensity": intensity, "tflops": tflops, "tbs": nbytes / seconds / 1e12,
            "roof_tflops": roof, "fraction": tflops / roof}
