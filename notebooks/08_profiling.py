# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 08 · Profiling: where the time goes, and why
#
# So far you have timed kernels one at a time and counted their bytes by hand. A real model step
# runs dozens of kernels, launched one after another from Python, and you cannot fix all of them.
# A profiler tells you which ones matter, and then what holds each of them back. This lesson profiles
# a real step, a Llama-style decoder block, from the top (which kernels take the time) down to the
# hardware counters of a single kernel, and ends with one full round of the loop a kernel engineer
# runs every day: profile, form a hypothesis, change one thing, measure.
#
# **You will learn:**
# - to profile a step with `torch.profiler`: the kernel table, the trace you open in Perfetto, the
#   gaps where the GPU waits for Python, and who allocates the peak memory;
# - to read Nsight Compute's metrics for one kernel: DRAM throughput against its peak, SM and
#   tensor-core throughput, occupancy and what limits it, register spills, the L2 hit rate, and
#   why warps stall;
# - to put the bytes ncu *measured* on lesson 03's roofline, beside the bytes you *counted*, and to
#   explain every difference;
# - what Triton's own profiler (proton) reports, down to scopes inside a kernel;
# - the loop: profile → hypothesis → change → measure, once, end to end, on lesson 05's tiled
#   softmax.
#
# Exercises: a kernel table from a trace, the GPU's idle share, a kernel's bound and its occupancy
# limiter, and ncu's bytes on the roofline. They are plain Python over profile data, graded on the
# recordings and on fresh random profiles.
#
# Without a GPU, `torch.profiler` runs here on the CPU (the same calls), and the GPU's profiles come
# from `make profile`, recorded on the GPUs named below.

# %%
from helpers import DEVICE, ON_GPU, check, describe, pick
from helpers.bench import ROOT
from helpers.block import SMALL, BlockConfig, block_flops, block_input, block_weights, decoder_block
from helpers.cards import flashcards, self_check
from helpers.exercises.lesson08 import chip_key
from helpers.profile import (cpu_ops, kernel_events, profile_step, recorded_devices, recorded_profile,
                             save_trace)
from helpers.roofline import CHIPS, Point, plot
from helpers.solutions import load_solution

import csv
import inspect
import io
import re
import statistics

import matplotlib.pyplot as plt
import torch
import triton

print(describe())
GPUS = recorded_devices()
GPU = GPUS[0]                       # the GPU this lesson's prose reads; the tables print every one
BUILD = ROOT / "build"              # not tracked by git: traces you make go here
BUILD.mkdir(exist_ok=True)


def said(record):
    """Where a recording comes from: its GPU, date and versions."""
    return f"{record['device']} ({record['date']}, torch {record['torch']}, triton {record['triton']})"


print("recorded profiles:", "; ".join(said(recorded_profile("stamp.json", gpu)) for gpu in GPUS))

# %% [markdown]
# ## The step: a decoder block in eager PyTorch
#
# `helpers/block.py` holds one layer of a Llama-style transformer, written the way a model's code is
# usually first written: plain PyTorch calls, each launching one or more kernels. RMSNorm, the Q, K, V
# projections, rotary embeddings, causal attention, the output projection and a residual add, then a
# second RMSNorm and the SwiGLU MLP. Its attention comes in two forms: `"naive"` writes the N × N
# scores of every head to memory (lesson 06's starting point), `"sdpa"` calls PyTorch's fused
# attention.

# %%
print(inspect.getsource(decoder_block))

# %% [markdown]
# Its defaults are the sizes of one Llama-2-7B layer; `SMALL` shrinks every width so that a step runs
# in milliseconds on a CPU. `block_flops` counts the matmul FLOPs of one forward step:

# %%
FULL = BlockConfig()
for label, cfg, batch, seq in (("full size (Llama-2-7B layer), 1 x 4096 tokens", FULL, 1, 4096),
                               ("full size, 1 x 16 tokens", FULL, 1, 16),
                               ("SMALL, 2 x 64 tokens", SMALL, 2, 64)):
    print(f"{label:48} d={cfg.dim:5} heads={cfg.n_heads:3} f={cfg.hidden:6}  "
          f"{block_flops(cfg, batch, seq) / 1e9:10.3f} GFLOP")

# %% [markdown]
# Here is the SMALL block on this machine, both forms of attention, which must agree:

# %%
dtype = pick(cpu=torch.float32, gpu=torch.float16)
w = block_weights(SMALL, DEVICE, dtype)
x = block_input(SMALL, 2, 64, DEVICE, dtype)
y = decoder_block(x, w, SMALL, attention="naive")
same = torch.allclose(y, decoder_block(x, w, SMALL, attention="sdpa"), atol=pick(cpu=1e-4, gpu=2e-2))
print(tuple(y.shape), y.dtype, "| naive and sdpa agree:", same)

# %% [markdown]
# ## `torch.profiler`, live on this machine
#
# `profile_step` (in `helpers/profile.py`) is the whole recipe: warm up first (the first calls pay for
# allocation, library loading and, for Triton, compilation), then run one step inside
# `torch.profiler.profile`, asking for the CPU side, the CUDA side where there is a GPU, the input
# shapes and the memory. `record_function("step")` puts a named span around the step in the trace.

# %%
print(inspect.getsource(profile_step))

# %%
prof = profile_step(lambda: decoder_block(x, w, SMALL, attention="naive"))
sort_by = "self_cuda_time_total" if ON_GPU else "self_cpu_time_total"
print(prof.key_averages().table(sort_by=sort_by, row_limit=12, max_name_column_width=32))

# %% [markdown]
# How to read it. One row per operator (`aten::mm` is a matmul; on a GPU, kernels get rows too).
# **Self** time is spent in the operator itself, **total** time includes the operators it called
# (`aten::matmul` calls `aten::mm`, so its self time is small and its total large). **# of Calls**
# counts how often the operator ran. **CPU Mem** and **Self CPU Mem** are the bytes each operator allocated
# (`profile_memory=True`); on a GPU the table adds the same columns for CUDA time and CUDA memory.
# The row `step` is our own `record_function` span: its total is the whole step.
#
# Sort by self time to find the operator that is slow itself; sort by total time to find the part of
# the model that is slow. On a CPU the table times the CPU doing the work. On a GPU the CPU time is
# only the cost of *launching*, and the CUDA columns hold the work.
#
# ### The trace, in Perfetto
#
# The table averages; the trace keeps every event with its start and end. `save_trace` writes it as
# gzipped JSON:

# %%
trace_path = BUILD / "08_small_block.trace.json.gz"
trace = save_trace(prof, trace_path)
ops = cpu_ops(trace)
print(f"{trace_path.relative_to(ROOT)}: {len(trace['traceEvents'])} events, {len(ops)} top-level operators")
print("first operators:", ", ".join(op["name"] for op in ops[:8]), "...")

# %% [markdown]
# Open it: go to <https://ui.perfetto.dev>, click **Open trace file** and pick
# `build/08_small_block.trace.json.gz` (in Chrome, `chrome://tracing` and **Load** also work). The
# file stays on your machine: Perfetto reads it in the browser. You will see one row per CPU thread,
# with each operator as a bar and the operators it called nested below it. A GPU trace adds one row
# per CUDA stream with every kernel, and arrows from each `cudaLaunchKernel` on the CPU to the kernel
# it launched. Keys: `W`/`S` zoom, `A`/`D` pan, click a bar for its details (shapes, duration).
#
# The recordings include the GPU traces of the full-size block: open
# `helpers/recorded/profile/<gpu>/block_naive.trace.json.gz` the same way.
#
# ## The GPU profile of the full-size block
#
# On a GPU, the next cell first profiles the full-size naive block live, with the same calls. Then,
# on any machine, it prints the table `make profile` recorded. The rest of the lesson reads the
# recordings, so that every learner reads the same figures.

# %%
if ON_GPU:
    w_full = block_weights(FULL, DEVICE, torch.float16)
    x_full = block_input(FULL, 1, 4096, DEVICE, torch.float16)
    live = profile_step(lambda: decoder_block(x_full, w_full, FULL, attention="naive"))
    print(f"profiled now on {torch.cuda.get_device_name()}:")
    print(live.key_averages().table(sort_by="self_cuda_time_total", row_limit=15, max_name_column_width=50))
    del w_full, x_full, live
steps = {v: recorded_profile(f"block_{v}.json") for v in ("naive", "sdpa", "small", "tiny")}
naive = steps["naive"]
print(f"recorded on {said(naive)}: {naive['config']}, {naive['dtype']}, attention {naive['attention']}")
print(naive["torch_table"])

# %% [markdown]
# On a GPU the table gains **Self CUDA** (the time of the kernels an operator launched itself) and
# **CUDA total**, and kernels appear as rows of their own, under their compiled names
# (`nvjet_...` is a cuBLAS matmul, `cunn_SoftMaxForward...` PyTorch's softmax kernel). The `step`
# row's CUDA time is the span of the whole step on the GPU, gaps included, which is why its share
# can exceed 100%: skip it.
#
# The names are long C++ template names. This function keeps the part that tells kernels apart:

# %%
GENERIC = {"gpu", "Binary", "BUnary", "AUnary", "OnSelf", "elementwise", "vectorized_elementwise",
           "unrolled_elementwise"}


def short_name(name, width=52):
    """A kernel's name cut to its function and, for PyTorch's elementwise kernels, the operation."""
    name = name.removeprefix("void ").replace("(anonymous namespace)::", "")
    head = re.split(r"[<(]", name, maxsplit=1)[0].split("::")[-1]
    rest = name[name.index(head) + len(head):]
    pattern = r"(\w+?)_kernel(?:_cuda|_impl)?\b|Functor_(\w+?)\b|(\w+?)Functor\b|(\w+?)Ops<"
    ops = [g for m in re.finditer(pattern, rest) for g in m.groups() if g and g not in GENERIC]
    label = f"{head} [{ops[0]}]" if ops else head
    return label if len(label) <= width else label[:width - 3] + "..."


print(short_name(naive["kernels"][0]["name"]))

# %% [markdown]
# ## Exercise 1 · The kernel table
#
# `make profile` kept every kernel of the step as a dict: `name`, `start_us` (microseconds from the
# first kernel's start), `dur_us` and `stream`:

# %%
print(len(naive["kernels"]), "kernels; the first two:")
for k in naive["kernels"][:2]:
    print({**k, "name": short_name(k["name"])})

# %% [markdown]
# Write `kernel_table(kernels)`: one row per kernel **name**, as a dict with
# - `"name"`; `"calls"`, how many events carry that name; `"total_us"`, the sum of their durations;
# - `"share"`: that total over the total time of **all kernels** (the shares add up to 1). Not over
#   the step's wall time: that would count the gaps when no kernel runs, the subject of exercise 2.
#
# Order the rows by total time, most first, so that row 0 is the kernel to look at first; rows with
# equal totals in alphabetical order of their names (Python's `<` on strings). The check uses the
# recorded steps of every GPU and random profiles (ties, unsorted lists, two streams).

# %% tags=["exercise"]
def kernel_table(kernels):
    """[{"name", "calls", "total_us", "share"}], one row per kernel name, most total time first
    (equal totals: alphabetical by name); share = the row's total over all kernels' time."""
    # YOUR CODE HERE: group the events by name, count and sum them, divide, sort.
    raise NotImplementedError("write kernel_table")


# %%
check("kernel_table", kernel_table)

# %% [markdown]
# The top of the table for the naive block and for the block with fused attention:

# %%
def show_table(step, rows=8):
    print(f"block_{step['variant']}: {step['config']}, recorded on {said(step)}")
    for row in kernel_table(step["kernels"])[:rows]:
        print(f"  {row['share']:6.1%} {row['total_us']:10.1f} us {row['calls']:3d} calls  "
              f"{short_name(row['name'])}")


show_table(steps["naive"])
show_table(steps["sdpa"])

# %% [markdown]
# Read the naive table from the top. Much of the time is not matmul at all: the softmax kernel, the
# `masked_fill` of the causal mask, and copies (`direct_copy`, `float16_copy`: the `.float()` and
# `.to(q.dtype)` casts around the softmax). Every one of them reads or writes the 32 heads' N × N
# scores, lesson 06's problem, seen from the profiler. In the `sdpa` table those rows are gone: one
# fused attention kernel (cuDNN's FlashAttention, `cudnn_..._flash_fprop`) replaces them, and the
# matmuls of the projections and the MLP (`nvjet_...`) lead. The next thing to fix is then no longer
# attention.
#
# ## When the GPU waits for Python
#
# Kernels are launched from Python, one by one. Each launch costs the CPU some microseconds: the
# Python line, PyTorch's dispatcher, the allocator, the CUDA driver. When the kernels are big, the
# CPU runs ahead and the launches queue up; the GPU never waits. When they are small, each kernel
# ends before the CPU has launched the next, and the GPU sits idle in between: the step is
# **launch-bound**. The recordings hold two steps of the same full-size block: `sdpa`, 4096 tokens,
# and `small`, 16 tokens (a decode-like step). Both timelines, on one clock, CPU operators above and
# GPU kernels below:

# %%
def on_one_clock(variant):
    """CPU operators and GPU kernels of a recorded step, in microseconds from the first operator."""
    trace = recorded_profile(f"block_{variant}.trace.json.gz")
    events = trace["traceEvents"]
    t0 = min(e["ts"] for e in events if e.get("cat") == "cpu_op")
    shift = min(e["ts"] for e in events if e.get("cat") == "kernel") - t0
    kernels = [{**k, "start_us": k["start_us"] + shift} for k in kernel_events(trace)]
    return cpu_ops(trace), kernels


fig, axes = plt.subplots(2, 1, figsize=(11, 3.6))
for ax, variant in zip(axes, ("sdpa", "small")):
    ops, kernels = on_one_clock(variant)
    ax.broken_barh([(o["start_us"], o["dur_us"]) for o in ops], (1.1, 0.8), color="tab:blue")
    ax.broken_barh([(k["start_us"], k["dur_us"]) for k in kernels], (0.1, 0.8), color="tab:orange")
    ax.set_yticks([0.5, 1.5], ["GPU kernels", "CPU operators"])
    c = steps[variant]["config"]
    ax.set_title(f"block_{variant}: batch {c['batch']} x {c['seq']} tokens, d={c['dim']}", fontsize=9)
axes[-1].set_xlabel(f"microseconds (recorded on {said(steps['small'])})")
fig.tight_layout()
plt.show()

# %% [markdown]
# In the `sdpa` step the GPU row is nearly solid: the CPU launched faster than the GPU worked. In the
# `small` step the CPU row is solid and the GPU row is a comb of thin kernels with gaps between
# them: the GPU waits for Python.
#
# ## Exercise 2 · How long does the GPU wait?
#
# Write `gpu_idle_share(kernels)`: of the time from the **first kernel's start** to the **last
# kernel's end**, the share during which **no kernel runs**. Careful:
# - kernels on different streams can overlap, so adding up durations counts some time twice:
#   merge the intervals `[start_us, start_us + dur_us]` and measure what they cover;
# - the list may come in any order, and need not start at 0;
# - the kernel that ends last need not be the one that starts last.

# %% tags=["exercise"]
def gpu_idle_share(kernels):
    """The share of [first start, last end] during which no kernel runs (a float in [0, 1])."""
    # YOUR CODE HERE: sort the intervals, merge the overlapping ones, compare with the span.
    raise NotImplementedError("write gpu_idle_share")


# %%
check("gpu_idle_share", gpu_idle_share)

# %% [markdown]
# The four recorded steps: the idle share, the time the kernels took in all, and the time of the
# step measured by `do_bench` outside the profiler. The profiler adds work on the CPU side, so the
# gaps it sees can be longer than without it; the kernel total against the step's time needs no
# profiler at all:

# %%
print(f"recorded on {said(steps['small'])}")
print(f"{'step':8}{'batch x tokens, width':24}{'GFLOP':>9}{'kernels':>9}{'idle':>7}"
      f"{'kernel ms':>11}{'step ms':>9}")
for variant, step in steps.items():
    c = step["config"]
    busy_ms = sum(k["dur_us"] for k in step["kernels"]) / 1000
    shape = f"{c['batch']} x {c['seq']}, d={c['dim']}"
    print(f"{variant:8}{shape:24}"
          f"{step['flops'] / 1e9:9.3f}{len(step['kernels']):9d}"
          f"{gpu_idle_share(step['kernels']):7.1%}{busy_ms:11.3f}{step['step_ms']:9.3f}")

# %% [markdown]
# Compare `small` with `tiny` in the table above: `tiny` is the SMALL block, hundreds of times fewer
# FLOPs, yet its step takes about as long. Both are launch-bound: their time is the CPU's time to
# launch about sixty kernels, not the GPU's time to run them.
#
# The trace shows why directly. Each kernel is linked to the CPU call that launched it (the
# `correlation` id), so we can measure how long each kernel waited between its launch and its start.
# A short wait means the GPU was idle, ready for it; a long wait means it queued behind other work.
# Beside it: a typical CPU operator's duration against a typical kernel's.

# %%
def launch_waits(variant):
    """Microseconds from each kernel's launch call (CPU) to its start (GPU)."""
    events = recorded_profile(f"block_{variant}.trace.json.gz")["traceEvents"]
    launches = {e["args"]["correlation"]: e["ts"] for e in events
                if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    return [e["ts"] - launches[e["args"]["correlation"]] for e in events
            if e.get("cat") == "kernel" and e["args"].get("correlation") in launches]


print(f"recorded on {said(steps['small'])}")
for variant in ("sdpa", "small"):
    step = steps[variant]
    print(f"block_{variant:6} launch -> start: median {statistics.median(launch_waits(variant)):8.1f} us | "
          f"median CPU operator {statistics.median(o['dur_us'] for o in step['cpu_ops']):6.1f} us, "
          f"median kernel {statistics.median(k['dur_us'] for k in step['kernels']):6.1f} us")

# %% [markdown]
# In the `small` step a typical operator costs the CPU several times what its kernel costs the GPU,
# and kernels start soon after their launch: nothing is queued. The cures work on the CPU side:
# fewer, larger kernels (fusion: lessons 02, 05, 09), or launching the whole sequence at once as a
# CUDA graph (`torch.compile(mode="reduce-overhead")`, lesson 07), or larger batches. Making any one
# kernel faster would change almost nothing.
#
# ## Memory: the peak, and who allocates it
#
# With `profile_memory=True` the profiler records every allocation and free, and the table's memory
# columns say which operators allocated what. `make profile` also kept the step's peak
# (`torch.cuda.max_memory_allocated`, above what was allocated before the step) and the largest
# allocators:

# %%
for variant in ("naive", "sdpa"):
    step = steps[variant]
    print(f"block_{variant}: peak {step['peak_mib']:.0f} MiB above the inputs and weights "
          f"(recorded on {said(step)})")
    print("   " + ", ".join(f"{op} {mib:.0f} MiB" for op, mib in step["allocations_mib"][:5]))

# %% [markdown]
# The naive peak is several times the fused one, and `aten::_softmax` sits near the top of the
# naive list. Check its figure from the config: the block calls `torch.softmax(s.float())`, so the
# output is float32, one value per head and per pair of positions, for each sequence of the batch:

# %%
cfg = naive["config"]
softmax_bytes = cfg["batch"] * cfg["n_heads"] * cfg["seq"] * cfg["seq"] * 4   # B x H x N x N float32
print(f"B x H x N x N x 4 bytes = {softmax_bytes / 2**20:.0f} MiB; the profiler's aten::_softmax: "
      f"{dict(naive['allocations_mib'])['aten::_softmax']:.0f} MiB")

# %% [markdown]
# The other large entries are the same N × N scores in other forms: the float16 scores and the
# scaled scores (`aten::mul`), the mask and the `masked_fill` output, the `.float()` copy (which
# allocates through `aten::empty_strided`). With `sdpa`, none of them exists: the peak is set by the
# MLP's activations instead. The same columns appear live on this machine, in the table you made
# above (**Self CPU Mem**; on a GPU, **Self CUDA Mem**):

# %%
memory = "self_device_memory_usage" if ON_GPU else "self_cpu_memory_usage"
allocated = [(e.key, getattr(e, memory)) for e in prof.key_averages() if getattr(e, memory) > 0]
allocated.sort(key=lambda kv: -kv[1])
print(f"SMALL block, naive, on this {DEVICE.type}:",
      ", ".join(f"{op} {b / 1024:.0f} KiB" for op, b in allocated[:5]))

# %% [markdown]
# ## Nsight Compute: inside one kernel
#
# `torch.profiler` says *which* kernels take the time. Nsight Compute (`ncu`) says *why* one kernel
# takes the time it does. It replays the kernel many times, each time reading a different set of the
# GPU's hardware counters, restoring memory between replays, and by default flushing the caches
# before each one, so every replay starts from cold caches. The result is hundreds of metrics, grouped
# into *sections*. `make profile` ran it over a few of the course's kernels, one launch each; here is
# the exact command:

# %%
ncu = recorded_profile("ncu.json")
print(f"recorded on {said(ncu)}, {ncu['ncu']}")
print(ncu["command"])

# %% [markdown]
# What the flags do:
# - `--profile-from-start off`: profile only between `cudaProfilerStart()` and `cudaProfilerStop()`,
#   which `helpers/profile.py` calls after warming every kernel up (autotuning and compilation are
#   not profiled);
# - `--clock-control none`: leave the GPU's clocks as they are; by default ncu locks them to the base
#   clock, which makes times steadier but slower than what `do_bench` sees;
# - `--section ...`: the groups of metrics to collect (speed of light, memory, occupancy, launch
#   statistics, warp states, compute); `--metrics`: a few more by name (the DRAM bytes);
# - `-o ncu_report`: write a report file, which `ncu --import ncu_report.ncu-rep --page details`
#   prints as text (the recordings keep that text as `ncu_details.csv`) and `ncu-ui` opens in a GUI.
#
# Two tables of the metrics that decide a kernel's fate, for every recorded GPU. First the
# throughputs: time, DRAM bytes, each unit's throughput as a percentage of its peak, cache hit rates.

# %%
KEYS = {"time": "gpu__time_duration.sum", "read": "dram__bytes_read.sum", "write": "dram__bytes_write.sum",
        "dram%": "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
        "sm%": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
        "tensor%": "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
        "L2 hit%": "lts__t_sector_hit_rate.pct", "L1 hit%": "l1tex__t_sector_hit_rate.pct"}


def ncu_kernels(device):
    return [k for k in recorded_profile("ncu.json", device)["kernels"] if k.get("target")]


for device in GPUS:
    print(f"recorded on {said(recorded_profile('ncu.json', device))}")
    percents = list(KEYS)[3:]
    print(f"{'kernel':46}{'time us':>9}{'read MB':>9}{'write MB':>9}" + "".join(f"{h:>9}" for h in percents))
    for k in ncu_kernels(device):
        sizes = f"{k[KEYS['time']] / 1e3:9.1f}{k[KEYS['read']] / 1e6:9.1f}{k[KEYS['write']] / 1e6:9.1f}"
        print(f"{k['target']:46}{sizes}" + "".join(f"{k[KEYS[h]]:9.1f}" for h in percents))

# %% [markdown]
# Then the launch: registers per thread, shared memory per block, threads per block, the blocks per
# SM that each resource allows (registers, shared memory, warps, the hardware's block limit),
# theoretical and achieved occupancy (warps resident per SM as a share of the most it can hold),
# register spills, and the stall reason that costs the most.

# %%
LIMIT_KEYS = ("registers", "shared_mem", "warps", "blocks")


def top_stall(k):
    stalls = {m.split("stalled_")[1].split("_per_issue")[0]: v for m, v in k.items() if "_stalled_" in m}
    stalls.pop("selected", None)   # "selected" is the cycle a warp issues: not a stall
    reason = max(stalls, key=stalls.get)
    return f"{reason} {stalls[reason]:.1f}"


for device in GPUS:
    print(f"recorded on {said(recorded_profile('ncu.json', device))}")
    print(f"{'kernel':46}{'regs':>5}{'smem KB':>8}{'block':>6}{'grid':>7}{'waves':>7}  limits r/s/w/b"
          f"{'occ th/ach %':>15}{'spills':>7}  top stall (cycles per issue)")
    for k in ncu_kernels(device):
        limits = "/".join(f"{k[f'launch__occupancy_limit_{key}']:.0f}" for key in LIMIT_KEYS)
        launch = (f"{k['launch__registers_per_thread']:5.0f}{k['launch__shared_mem_per_block'] / 1024:8.1f}"
                  f"{k['launch__block_size']:6.0f}{k['launch__grid_size']:7.0f}"
                  f"{k['launch__waves_per_multiprocessor']:7.2f}")
        occupancy = (f"{k['sm__maximum_warps_per_active_cycle_pct']:8.1f}/"
                     f"{k['sm__warps_active.avg.pct_of_peak_sustained_active']:<6.1f}")
        print(f"{k['target']:46}{launch}  {limits:13}{occupancy}"
              f"{k['derived__local_spilling_requests']:7.0f}  {top_stall(k)}")

# %% [markdown]
# How to read them:
#
# - **Speed of light (SOL).** `dram%` is DRAM throughput as a percentage of its peak, `sm%` the
#   busiest of the SM's units as a percentage of theirs. ncu's own rule, which this lesson uses: the
#   larger of the two names the bound if it reaches **60% of peak** (memory-bound if DRAM% is the
#   larger, or equal; compute-bound if SM% is); if neither reaches 60%, neither unit is busy and the
#   kernel is **latency-bound**: it waits (on memory latency, on too few warps, on synchronisation)
#   without saturating anything. A memory-bound kernel near the top of its DRAM% is done, unless it
#   can move fewer bytes.
# - **Tensor%** is the share of cycles the tensor cores were busy: what a matmul should keep high.
#   It is one pipe among the SM's units; the SOL rule reads `sm%`.
# - **Occupancy.** Each SM holds a fixed number of warps, registers and bytes of shared memory. A
#   block that asks for many registers or much shared memory leaves room for fewer blocks per SM;
#   the smallest of the four limits is the **limiter**. Low occupancy is fine when each warp has
#   enough independent work (the matmuls live at one block per SM); it hurts when warps mostly wait
#   on memory and there are too few others to switch to.
# - **Waves**: blocks in the grid over the blocks the whole GPU holds at once. A fraction of a wave
#   leaves SMs idle at the end (or the whole time, below one wave).
# - **Spills**: registers the compiler could not fit, moved to local memory (slow, through the
#   caches). Zero here, as it should be.
# - **Stall reasons** count, per instruction issued, the cycles warps spent waiting for each reason.
#   `long_scoreboard` is a wait for a load from global memory (the memory-bound kernels), `barrier`
#   a wait at `__syncthreads` (`tl.dot` pipelines), `wait` a fixed-latency dependency, `gmma` on the
#   Hopper's asynchronous tensor-core instructions, `drain` for stores to finish at exit.
#
# ncu also prints its own advice, *rules*, in the details page. Those of two kernels:

# %%
details = list(csv.DictReader(io.StringIO(recorded_profile("ncu_details.csv"))))
seen = set()
for row in details:
    kernel, rule = row["Kernel Name"], row.get("Rule Name")
    if kernel in ("softmax_tiled_kernel", "flash_fwd_kernel") and rule and row.get("Rule Description") \
            and (kernel, rule) not in seen and row.get("Section Name") in ("SpeedOfLight", "Occupancy"):
        seen.add((kernel, rule))
        print(f"{kernel} [{row['Section Name']}] {row['Rule Description'][:330]}\n")

# %% [markdown]
# ## Exercise 3 · Bound and limiter
#
# Write `diagnose(metrics)` for one kernel's metrics (a dict as in `ncu.json`), returning
# `(bound, limiter)`:
# - `bound`: with `dram = metrics["gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"]` and
#   `sm = metrics["sm__throughput.avg.pct_of_peak_sustained_elapsed"]`: if the larger is **at least
#   60**, `"memory"` when `dram >= sm`, else `"compute"`; if both are below 60, `"latency"`;
# - `limiter`: which of `"registers"`, `"shared memory"`, `"warps"`, `"blocks"` allows the fewest
#   blocks per SM (`launch__occupancy_limit_registers`, `..._shared_mem`, `..._warps`,
#   `..._blocks`). On a tie, the first in that order.

# %% tags=["exercise"]
def diagnose(metrics):
    """(bound, limiter): bound in "memory", "compute", "latency" by the 60% speed-of-light rule;
    limiter in "registers", "shared memory", "warps", "blocks": the fewest blocks per SM."""
    # YOUR CODE HERE: read the two throughputs and the four occupancy limits.
    raise NotImplementedError("write diagnose")


# %%
check("diagnose", diagnose)

# %%
for device in GPUS:
    print(f"recorded on {said(recorded_profile('ncu.json', device))}")
    for k in ncu_kernels(device):
        bound, limiter = diagnose(k)
        print(f"  {k['target']:46} {bound:8} limited by {limiter}")

# %% [markdown]
# The kernels of lessons 01 and 05 are memory-bound, as lesson 03 predicted; the large matmuls are
# compute-bound; the 512³ matmuls are latency-bound, because a grid that fills only a fraction of one
# wave leaves most SMs idle. FlashAttention lands below the 60% line on both units: its tensor cores
# are busy only part of the time, and the stall table says why: it waits at barriers and on
# dependencies, with one block per SM (registers and shared memory both at their limit). That is the
# kind of kernel lesson 10's pipelining and warp specialisation are for.
#
# ## Back to lesson 03: measured bytes on the roofline
#
# In lesson 03 you placed kernels on the roofline with bytes you counted: each input read once, each
# output written once. ncu measured the bytes that really crossed the DRAM interface. The two side by
# side, as multiples of the counted bytes:

# %%
for device in GPUS:
    print(f"recorded on {said(recorded_profile('ncu.json', device))}")
    print(f"{'kernel':46}{'counted MB':>11}{'read MB':>9}{'write MB':>9}{'measured/counted':>18}{'L2 MB':>9}")
    for k in ncu_kernels(device):
        counted, read, write = k["counted"]["bytes"], k[KEYS["read"]], k[KEYS["write"]]
        print(f"{k['target']:46}{counted / 1e6:11.1f}{read / 1e6:9.1f}{write / 1e6:9.1f}"
              f"{(read + write) / counted:18.2f}{k['lts__t_bytes.sum'] / 1e6:9.1f}")

# %% [markdown]
# Every difference has a cause you can name:
#
# - **Close to 1** (vector add, row softmax): the kernel reads each input once and writes each output
#   once, as counted. The small shortfall is on the write side: the L2 cache is *write-back*, so
#   the last lines written sit in L2 when the kernel ends and reach DRAM after ncu stops counting for
#   this kernel.
# - **The tiled softmax** reads its input twice from DRAM: the second pass re-reads a row that does not
#   fit in the SM, and most of it has left L2 by then. The counted bytes are lesson 05's ideal, one
#   read and one write; this kernel's honest count is two reads and one write. The loop below works
#   on exactly this.
# - **The 4096³ matmuls read A and B more than once.** Each output tile needs a row panel of A and a
#   column panel of B; tiles that share a panel reuse it from L2 when they run close together (lesson
#   04's grouped order), and read it again from DRAM when they do not. cuBLAS re-reads less than the
#   course's kernel.
# - **The 512³ matmuls** read about their inputs and write almost nothing to DRAM: the whole output
#   fits in L2 and is still there, unwritten, when the kernel ends.
# - **FlashAttention** moves about what was counted (Q, K and V read once, the output written once),
#   although every query block streams through all of K and V: its L2 traffic (last column) is many
#   times its DRAM traffic, and its L2 hit rate is high. The blocks working on one head run at about
#   the same time and share K and V in L2, so DRAM sees each tile about once.
# - **Granularity.** DRAM moves 32-byte sectors (and the L2 fetches in 64- or 128-byte pieces), so a
#   kernel that touches scattered bytes pays for whole sectors. The course's kernels read contiguous
#   rows, so this costs them little; a strided or gather access would show it as a measured/counted
#   ratio well above 1.
#
# ## Exercise 4 · ncu's bytes on the roofline
#
# Write `roofline_point(metrics, flops, chip)`: where the measurement puts a kernel on the roofline of
# `CHIPS[chip]` (a key of `helpers.roofline.CHIPS`, e.g. `"H100 SXM"`). Return a dict:
# - `"intensity"`: `flops` over the bytes ncu measured, `dram__bytes_read.sum + dram__bytes_write.sum`;
# - `"tflops"` and `"tbs"`: achieved TFLOP/s and TB/s, over `gpu__time_duration.sum`, which is in
#   **nanoseconds** (`ncu.json`'s `units` says so);
# - `"roof_tflops"`: lesson 03's roof at that intensity, against the **fp16** tensor-core peak:
#   `min(chip.tflops["fp16"], intensity * chip.bandwidth_tbs)`;
# - `"fraction"`: `tflops / roof_tflops`.

# %%
for key, c in CHIPS.items():
    print(f"CHIPS[{key!r}]: bandwidth_tbs={c.bandwidth_tbs}, tflops['fp16']={c.tflops['fp16']}")
print("ncu units:", {key: ncu["units"][key] for key in ("gpu__time_duration.sum", "dram__bytes_read.sum")})

# %% tags=["exercise"]
def roofline_point(metrics, flops, chip):
    """{"intensity", "tflops", "tbs", "roof_tflops", "fraction"} from ncu's DRAM bytes and time."""
    # YOUR CODE HERE: measured bytes, seconds from ns, the roof of CHIPS[chip] at that intensity.
    raise NotImplementedError("write roofline_point")


# %%
check("roofline_point", roofline_point)

# %%
for device in GPUS:
    key = chip_key(device)
    copy_tbs = recorded_profile("loop.json", device)["copy_gbps"] / 1000   # a large copy, same run
    print(f"recorded on {said(recorded_profile('ncu.json', device))}, on the {key} datasheet roofline; "
          f"copy ceiling {copy_tbs:.2f} TB/s")
    print(f"{'kernel':46}{'FLOP/B':>9}{'TFLOP/s':>9}{'TB/s':>7}{'of copy':>9}{'roof':>8}{'of roof':>9}")
    for k in ncu_kernels(device):
        p = roofline_point(k, k["counted"]["flops"], key)
        print(f"{k['target']:46}{p['intensity']:9.2f}{p['tflops']:9.1f}{p['tbs']:7.2f}"
              f"{p['tbs'] / copy_tbs:9.1%}{p['roof_tflops']:8.1f}{p['fraction']:9.1%}")

# %% [markdown]
# The same points on the plot, each at the intensity ncu measured (`Point` takes the bytes and the
# time):

# %%
points = [Point(k["target"], k["counted"]["flops"], k[KEYS["read"]] + k[KEYS["write"]],
                ms=k[KEYS["time"]] / 1e6) for k in ncu_kernels(GPU)]
plot(points, chip=chip_key(GPU), title=f"ncu's measured bytes on the {chip_key(GPU)} roofline ({GPU})")
plt.show()

# %% [markdown]
# The `of copy` column sets the DRAM traffic ncu measured against what a large copy reaches on the
# same GPU (recorded by the same `make profile` run): the practical ceiling of a memory-bound kernel,
# below the datasheet's bandwidth. The memory-bound kernels run close to it, and may even pass it:
# ncu times one launch on the GPU alone, while the copy figure is `do_bench`'s median over whole
# launches, and the copy is itself one kernel's speed (PyTorch's copy), not a law of the hardware.
#
# The memory-bound kernels sit close under the slope; measured bytes move the tiled softmax to the
# left of where its counted bytes would put it (more bytes, lower intensity). FlashAttention sits
# where its counted bytes put it, thanks to L2, and well under the flat roof. The large matmuls sit
# near the flat roof (a matmul re-reading its panels moves left, but stays right of the ridge), the
# 512³ ones far below everything, latency-bound as exercise 3 found.
#
# ## Triton's own profiler: proton
#
# Triton ships a profiler, `triton.profiler` (proton). It records every Triton kernel's launches and
# GPU time with little overhead, and can also time *scopes inside a kernel*: you mark regions of the
# kernel's code, and an instrumentation pass inserts clock reads around them. `make profile` ran the
# same kernels under it, in a process of its own (only one profiler at a time can use CUPTI, the CUDA
# tracing interface, and torch.profiler had it in the recording process):
#
# ```python
# import triton.profiler as proton
# proton.start("proton", hook="triton")     # record every Triton (and other CUDA) kernel
# ...                                       # run the kernels
# proton.finalize()                         # writes proton.hatchet: a tree of frames with metrics
# ```

# %%
proton_record = recorded_profile("proton.json")
print(f"recorded on {said(proton_record)}")
if proton_record.get("ok"):
    root = proton_record["tree"][0]
    for frame in sorted(root["children"], key=lambda f: -f["metrics"]["time (ns)"]):
        m = frame["metrics"]
        total_ns = m["time (ns)"]
        print(f"  {frame['frame']['name'][:48]:50}{m['count']:4d} calls {total_ns / 1e6:9.3f} ms in all, "
              f"{total_ns / m['count'] / 1e3:9.1f} us each")
else:
    print("proton did not run:", proton_record.get("error", "")[:300])

# %% [markdown]
# Scopes inside a kernel: the `load` and `compute_store` regions of this small kernel are marked with
# `proton.language.enter_scope` and `exit_scope`, and run under the instrumentation backend:

# %%
lesson08 = load_solution("08")
print(inspect.getsource(lesson08._scoped_kernel.fn))
scopes = proton_record.get("scopes", {})
if scopes.get("ok"):
    for frame in scopes["tree"][0]["children"][0]["children"]:
        m = frame["metrics"]
        print(f"  scope {frame['frame']['name']:14} {m['cycles']:>14,} cycles in all, "
              f"normalized_cycles {m['normalized_cycles']:10.1f}")
else:
    print("the instrumentation backend did not run:", scopes.get("error", "")[:300])

# %% [markdown]
# Read the scope figures with care. `tl.load` *issues* the load and moves on; the warp waits only
# when it first uses the value, which here is inside `compute_store`. So the `load` scope is cheap and
# `compute_store` carries the memory latency: a scope measures the instructions between its marks, not
# the memory traffic they start. Place scopes around whole phases (a pass over a row, a K/V loop),
# not around single loads.
#
# Why none of this runs here: proton reads the GPU's own counters and timers (through CUPTI), and the
# instrumentation backend rewrites the compiled GPU code. Triton's interpreter runs a kernel's body as
# NumPy on the CPU: there is no GPU code to instrument and no GPU clock to read.
#
# ## The loop: profile → hypothesis → change → measure
#
# One round of the loop, on lesson 05's tiled softmax for rows too long to hold in one program.
# Every figure comes from the recordings of the GPU named in each cell's first line.
#
# **1 · Profile.** The tables above say the kernel is memory-bound (DRAM% high, SM% low), and that
# it reads its input twice from DRAM:

# %%
def tiled(shape, reverse=False, device=GPU):
    name = f"tiled softmax {shape}" + (", pass 2 reversed" if reverse else "") + " (05)"
    return next(k for k in ncu_kernels(device) if k["target"] == name)


SHAPES = ("2048x65536", "512x262144")
print(f"recorded on {said(ncu)}")
for shape in SHAPES:
    k = tiled(shape)
    one_read = k["counted"]["bytes"] / 2            # the input, float32
    print(f"{shape:>11}: DRAM read {k[KEYS['read']] / one_read:.3f} x the input, "
          f"written {k[KEYS['write']] / one_read:.3f} x | DRAM {k[KEYS['dram%']]:.0f}% "
          f"SM {k[KEYS['sm%']]:.0f}% | L2 hit {k[KEYS['L2 hit%']]:.1f}% | {k[KEYS['time']] / 1e3:.1f} us")

# %% [markdown]
# **2 · Hypothesis.** Pass 1 walks the row from its first tile to its last. Pass 2 starts again at the
# first tile, the one read longest ago and the likeliest to have left L2; by the time it reaches the
# tiles read recently, they too have been pushed out by the tiles read in between. If pass 2 walked
# *backwards*, its first tiles would be the ones pass 1 read last, the likeliest still in L2. The
# DRAM reads should drop, and the time with them, since the kernel is memory-bound.
#
# **3 · Change.** One `constexpr` flag in lesson 05's kernel, `REVERSE`, flips the order of pass 2's
# tiles. The whole change:

# %%
lesson05 = load_solution("05")
source = inspect.getsource(lesson05.softmax_tiled_kernel.fn).splitlines()
start = next(i for i, line in enumerate(source) if "Pass 2" in line)
print("\n".join(source[:2] + ["    ..."] + source[start:start + 5]))

# %% [markdown]
# **4 · Measure.** ncu's counters before and after, and `do_bench`'s times (as GB/s over the ideal
# two passes' bytes, and as a fraction of the copy ceiling). On a GPU the timings are also taken now.

# %%
print(f"ncu, recorded on {said(ncu)}")
for shape in SHAPES:
    fwd, rev = tiled(shape), tiled(shape, reverse=True)
    one_read = fwd["counted"]["bytes"] / 2
    for label, k in (("forwards", fwd), ("reversed", rev)):
        print(f"  {shape:>11} pass 2 {label}: DRAM read {k[KEYS['read']] / one_read:.3f} x the input, "
              f"L2 hit {k[KEYS['L2 hit%']]:.1f}%, {k[KEYS['time']] / 1e3:.1f} us")
loops = [recorded_profile("loop.json")]
if ON_GPU:
    loops.append({"device": torch.cuda.get_device_name(), "date": "now", "torch": torch.__version__,
                  "triton": triton.__version__, **lesson08.profile_loop()})
for loop in loops:
    print(f"do_bench, {'measured' if loop['date'] == 'now' else 'recorded'} on {said(loop)}, "
          f"copy {loop['copy_gbps']:.0f} GB/s")
    for row in loop["rows"]:
        direction = "reversed" if row["reverse"] else "forwards"
        print(f"  {row['shape']:>11} pass 2 {direction}: {row['ms']:.4f} ms {row['gbps']:7.1f} GB/s  "
              f"{row['fraction_of_copy']:.1%} of copy")

# %% [markdown]
# At both shapes the reversed pass reads less from DRAM, and it saves more of the second read for
# the shorter rows. The times move less cleanly: read ncu's times and `do_bench`'s lines above, GPU by
# GPU. ncu times one launch from cold caches, `do_bench` takes the median of many launches; a gain of
# a percent or two is within what separates two runs, so trust the bytes first. Why the shorter rows
# save more is L2 arithmetic. At any moment, every SM runs a
# few programs (the occupancy limit from exercise 3), each working on its own row. Their rows compete
# for one L2. What a program can hope to find of its row when pass 2 begins is at most its share of
# L2: the L2's size over the number of resident programs. The number of resident programs is the
# grid over the waves ncu reported:

# %%
chip = CHIPS[chip_key(GPU)]
l2_bytes = chip.l2_mb * 2**20                      # NVIDIA's MB: 1024 x 1024 bytes
print(f"{GPU}: L2 {chip.l2_mb:g} MB (helpers.roofline.CHIPS), {chip.sms} SMs")
for shape in SHAPES:
    fwd, rev = tiled(shape), tiled(shape, reverse=True)
    rows, cols = map(int, shape.split("x"))
    row_bytes = cols * 4
    resident = fwd["launch__grid_size"] / fwd["launch__waves_per_multiprocessor"]
    share = l2_bytes / resident
    saved_per_row = (fwd[KEYS["read"]] - rev[KEYS["read"]]) / rows
    print(f"{shape:>11}: {resident:.0f} resident programs x {row_bytes / 2**10:.0f} KiB rows = "
          f"{resident * row_bytes / 2**20:.0f} MiB of rows in flight | L2 share per program "
          f"{share / 2**10:.0f} KiB = {share / row_bytes:.0%} of a row at most")
    print(f"{'':13}measured: {saved_per_row / 2**10:.1f} KiB of each row no longer read from DRAM = "
          f"{saved_per_row / row_bytes:.1%} of the second read")

# %% [markdown]
# Read the lines above. The rows in flight do not fit in L2, so only a part of each row can survive
# until pass 2, and the L2 arithmetic bounds that part by the program's share of L2, the same for both
# shapes. If each program keeps about the same number of bytes of its row, whatever the row's length,
# the fraction of the second read it saves falls as the row grows: a row four times longer, about a
# quarter of the fraction. Compare the two "measured" lines: the bytes saved per row are of the same
# order at both shapes, and the fraction saved is smaller for the longer rows, as the arithmetic says.
# The measured saving is also well below the bound: L2 holds more than the tails of the rows (pass 2's
# own output is written through it, and other programs' tiles keep arriving), and its replacement
# policy is not a perfect "least recently used". The bound explains the direction and the trend, not
# the exact figure.
#
# **What is left.** The kernel still reads most of its input twice. With counted bytes of two passes,
# a kernel that really moves three can reach at most two thirds of the copy ceiling if every byte
# comes from DRAM; the reversal buys only what L2 can hold. To go further, the second read has to go:
# keep the row on chip between the passes (shared memory across a cluster of SMs on a Hopper), or
# avoid needing a second pass. Lesson 10 takes kernels further with the Hopper's own tools. And
# whatever you change, the loop is the same: profile, say what you expect and why, change one thing,
# measure, and explain the result with numbers, including when it falls short of the hypothesis.
#
# ## Takeaways
# - Profile the real step before optimising anything: `torch.profiler`'s kernel table, sorted by
#   self time, names the kernel to fix first; its trace, opened in Perfetto, shows the order, the
#   gaps and what launched what.
# - Small steps are launch-bound: the GPU idles between short kernels while Python launches the next.
#   Measure the idle share; cure it with fewer, fused kernels, CUDA graphs or larger batches, not by
#   speeding up one kernel.
# - `profile_memory=True` says who allocates the peak; the naive attention's N × N scores dominate it,
#   and its size follows from the config.
# - Nsight Compute explains one kernel: SOL percentages (the larger of DRAM% and SM% names the bound
#   from 60% of peak; below that, latency), occupancy and its limiter, spills, L2 hit rate, stall
#   reasons. Record the command with the numbers.
# - Measured DRAM bytes differ from counted ones for reasons you can name: a second read, panels
#   re-read, L2 serving reuse (FlashAttention's K and V), write-back leaving outputs in L2, sector
#   granularity. Put the measured bytes on the roofline.
# - proton times Triton kernels with little overhead, and scopes inside a kernel; a scope measures
#   instructions, and a load's cost lands where its value is first used.
# - The loop: profile → hypothesis → change → measure, with numbers at every step, and an honest
#   account of what the change did not buy.

# %%
self_check("08")

# %%
flashcards("08")
