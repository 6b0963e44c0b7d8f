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
# So far you have timed kernels one at a time and counted their bytes by hand. A real model step runs
# dozens of kernels, launched one after another from Python, and you cannot fix all of them. A
# profiler tells you which ones matter, then what holds each back. This lesson profiles a Llama-style
# decoder block from the top (which kernels take the time), then looks inside the course's own kernels
# through their hardware counters, and practises the loop a kernel engineer runs every day: profile,
# hypothesis, change, measure.
#
# **You will learn:**
# - to profile a step with `torch.profiler`: the kernel table, the trace you open in Perfetto, the
#   GPU time each operator caused, the gaps where the GPU waits for Python, and what holds the
#   memory at its peak;
# - to read Nsight Compute's metrics for one kernel: DRAM throughput against its peak, SM and
#   tensor-core throughput, occupancy and what limits it, register spills, the L2 hit rate, and
#   why warps stall;
# - to put the bytes ncu *measured* on lesson 03's roofline, beside the bytes you *counted*, and to
#   explain every difference;
# - what Triton's own profiler (proton) reports, down to scopes inside a kernel;
# - the loop: profile → hypothesis → change → measure, on the recorded steps and on lesson 05's
#   tiled softmax.
#
# Exercises (plain Python over profile data, graded on the recordings and on random profiles): a
# kernel table, the GPU's idle share, the GPU time of each operator, a kernel's bound and occupancy
# limiter, ncu's bytes on the roofline. Without a GPU, `torch.profiler` runs here on the CPU, and the
# GPU's profiles come from `make profile`, recorded on the GPUs named below.

# %%
from helpers import DEVICE, ON_GPU, check, describe, passed, pick
from helpers.bench import ROOT
from helpers.block import SMALL, BlockConfig, block_input, block_weights, decoder_block
from helpers.cards import flashcards, self_check
from helpers.exercises.lesson08 import chip_key
from helpers.profile import (cpu_ops, gpu_events, launch_waits, memory_peak, ncu_command, ncu_kernels,
                             profile_step, recorded_devices, recorded_profile, save_trace, short_name)
from helpers.roofline import CHIPS, Point, plot
from helpers.solutions import load_solution

import csv
import inspect
import io
import statistics
import textwrap

import matplotlib.pyplot as plt
import torch
import triton

print(describe())
GPUS = recorded_devices()
GPU = GPUS[0]                       # the GPU the traces' cells show; the ncu tables print every one
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
# second RMSNorm, the SwiGLU MLP and a second residual add. Its attention comes in two forms:
# `"naive"` writes the N × N scores of every head to memory (lesson 06's starting point), `"sdpa"`
# calls PyTorch's fused attention.

# %%
print(inspect.getsource(decoder_block))

# %% [markdown]
# Its defaults are the sizes of one Llama-2-7B layer; `SMALL` shrinks every width so that a step runs
# in milliseconds on a CPU. Here is the SMALL block on this machine, both forms of attention, which
# must agree:

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
# (`aten::matmul` calls `aten::mm`, so its self time is small and its total large). **CPU Mem** is
# the bytes an operator allocated less those it freed over the step (`profile_memory=True`); **Self
# CPU Mem** counts what it did itself, and is negative where it freed more. On a GPU the table adds
# the same columns for CUDA. The row `step` is our own `record_function` span: the whole step.
#
# Sort by self time to find the operator that is slow itself; sort by total time to find the part of
# the model that is slow. On a CPU the table times the CPU doing the work. On a GPU the CPU time is
# only the cost of *launching*, and the CUDA columns hold the work. (The profiler has a start-up cost
# of its own, which would land in the first step it profiles: the first `profile_step` of a process
# runs a throwaway session around one tiny operation first.)
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
# Open it at <https://ui.perfetto.dev> (**Open trace file**; the file stays on your machine) or in
# Chrome's `chrome://tracing`. One row per CPU thread, each operator a bar with the operators it
# called nested below it; a GPU trace adds a row per CUDA stream, and arrows from each launch call
# (`cudaLaunchKernel`, or `cuLaunchKernelEx` for cuBLAS and cuDNN) to its kernel. Keys: `W`/`S` zoom,
# `A`/`D` pan; click a bar for its details. The recorded GPU traces of the full-size block open the
# same way: `helpers/recorded/profile/<gpu>/block_naive.trace.json.gz`. Two more tools for the same
# view: `with_stack=True` adds each operator's Python line, and Nsight Systems (`nsys profile python
# train.py`) draws a whole program's timeline, with the ranges you mark by `torch.cuda.nvtx.range`.
#
# ## The GPU profile of the full-size block
#
# On a GPU, the next cell first profiles the full-size naive block live. Then, on any machine, it
# prints the table `make profile` recorded; the rest of the lesson reads the recordings.

# %%
if ON_GPU:
    FULL = BlockConfig()                                                       # a Llama-2-7B layer
    w_full = block_weights(FULL, DEVICE, torch.float16)
    x_full = block_input(FULL, 1, 4096, DEVICE, torch.float16)
    live = profile_step(lambda: decoder_block(x_full, w_full, FULL, attention="naive"))
    print(f"profiled now on {torch.cuda.get_device_name()}:")
    print(live.key_averages().table(sort_by="self_cuda_time_total", row_limit=15, max_name_column_width=50))
    del w_full, x_full, live
steps = {v: recorded_profile(f"block_{v}.json") for v in ("naive", "sdpa", "small", "tiny")}
traces = {v: recorded_profile(f"block_{v}.trace.json.gz") for v in steps}
naive = steps["naive"]
print(f"recorded on {said(naive)}: {naive['config']}, {naive['dtype']}, attention {naive['attention']}")
print(naive["torch_table"])

# %% [markdown]
# On a GPU the table gains **Self CUDA** (the GPU time of what an operator launched itself) and
# **CUDA total**, and kernels get rows of their own under their compiled names (`nvjet_...` is a
# cuBLAS matmul), as does `Memcpy DtoD`, a device-to-device copy. The `step` row's CUDA time spans
# the whole step, gaps included, hence a share above 100%: skip it. Below, `short_name` (in
# `helpers/profile.py`) cuts a long C++ template name to the part that tells kernels apart.
#
# ## Exercise 1 · The kernel table
#
# `gpu_events(trace)` lists what the GPU ran during a step, in start order: kernels, device copies
# (`cat` `"gpu_memcpy"`) and memsets (`"gpu_memset"`), each a dict with `name`, `cat`, `start_us`
# (microseconds from the first one's start), `dur_us` and `stream`:

# %%
work = {variant: gpu_events(trace) for variant, trace in traces.items()}
print(len(work["naive"]), "GPU events in the naive step; the first two:")
for k in work["naive"][:2]:
    print({**k, "name": short_name(k["name"])})

# %% [markdown]
# Write `kernel_table(kernels)`: one row per **name** (a copy's or memset's name counts like a
# kernel's), as a dict with
# - `"name"`; `"calls"`, how many events carry that name; `"total_us"`, the sum of their durations;
# - `"share"`: that total over the total time of **all events** (the shares add up to 1), not over
#   the step's wall time, which counts the gaps when the GPU runs nothing (exercise 2).
#
# Order the rows by total time, most first; equal totals in alphabetical order of their names
# (Python's `<` on strings). The check uses every GPU's recorded steps and random profiles.

# %% tags=["exercise"]
def kernel_table(kernels):
    """[{"name", "calls", "total_us", "share"}], one row per name, most total time first (equal
    totals: alphabetical by name); share = the row's total over all the events' time."""
    # YOUR CODE HERE: group the events by name, count and sum them, divide, sort.
    raise NotImplementedError("write kernel_table")


# %%
check("kernel_table", kernel_table)

# %% [markdown]
# The top of the table for the naive block and for the block with fused attention:

# %%
def show_table(variant, rows=8):
    step = steps[variant]
    print(f"block_{variant}: {step['config']}, recorded on {said(step)}")
    for row in kernel_table(work[variant])[:rows]:
        print(f"  {row['share']:6.1%} {row['total_us']:10.1f} us {row['calls']:3d} calls  "
              f"{short_name(row['name'])}")


if passed("kernel_table"):
    show_table("naive")
    show_table("sdpa")

# %% [markdown]
# Read the naive table from the top. Much of the time is not matmul at all: the softmax, the scaling
# of the scores (`[Mul]`), the `masked_fill` of the causal mask and the copy before it (it returns a
# clone of its input), and the casts (`direct_copy`, `float16_copy`), the big ones being the
# `.float()` and `.to(q.dtype)` around the softmax (N × N values per head; the norms' and RoPE's casts
# move N × d). All but those small casts read or write the heads' N × N scores: lesson 06's problem,
# seen from the profiler. In the `sdpa` table the N × N kernels are gone (the casts left are the
# norms' and RoPE's), replaced by one fused kernel (cuDNN's FlashAttention), and the matmuls
# (`nvjet_...`) lead.
#
# ## When the GPU waits for Python
#
# Each launch costs the CPU some microseconds: the Python line, PyTorch's dispatcher, the allocator,
# the CUDA driver. When kernels are big, the CPU runs ahead and launches queue up. When they are
# small, each ends before the CPU has launched the next, and the GPU idles in between: the step is
# **launch-bound**. Two recorded steps of the full-size block, `sdpa` with 4096 tokens and `small`
# with 16 (a decode-like step), on one clock, CPU operators above and GPU work below:

# %%
def on_one_clock(variant):
    """CPU operators and GPU events of a recorded step, in microseconds from the first operator."""
    events = traces[variant]["traceEvents"]
    t0 = min(e["ts"] for e in events if e.get("cat") == "cpu_op")
    shift = min(e["ts"] for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")) - t0
    return cpu_ops(traces[variant]), [{**k, "start_us": k["start_us"] + shift} for k in work[variant]]


fig, axes = plt.subplots(2, 1, figsize=(11, 3.6))
for ax, variant in zip(axes, ("sdpa", "small")):
    ops, kernels = on_one_clock(variant)
    ax.broken_barh([(o["start_us"], o["dur_us"]) for o in ops], (1.1, 0.8), color="tab:blue")
    ax.broken_barh([(k["start_us"], k["dur_us"]) for k in kernels], (0.1, 0.8), color="tab:orange")
    ax.set_yticks([0.5, 1.5], ["GPU work", "CPU operators"])
    c = steps[variant]["config"]
    ax.set_title(f"block_{variant}: batch {c['batch']} x {c['seq']} tokens, d={c['dim']}", fontsize=9)
axes[-1].set_xlabel(f"microseconds (recorded on {said(steps['small'])})")
fig.tight_layout()
plt.show()

# %% [markdown]
# In the `sdpa` step the GPU row is mostly solid: the CPU launched faster than the GPU worked, but
# for a few gaps (exercise 2 measures their share). In the `small` step the GPU row is a comb of thin
# kernels with gaps: the GPU waits for Python.
#
# ## Exercise 2 · How long does the GPU wait?
#
# Write `gpu_idle_share(kernels)`, for a list like `work["naive"]`: of the time from the **first
# event's start** to the **last event's end**, the share during which the GPU runs **nothing**: no
# kernel, no copy, no memset (all three keep it busy). Careful:
# - events on different streams can overlap: merge the intervals `[start_us, start_us + dur_us]`
#   and measure what they cover, or overlapping time counts twice;
# - the list may come in any order, need not start at 0, and the event that ends last need not be
#   the one that starts last.

# %% tags=["exercise"]
def gpu_idle_share(kernels):
    """The share of [first start, last end] during which no kernel, copy or memset runs (in [0, 1])."""
    # YOUR CODE HERE: sort the intervals, merge the overlapping ones, compare with the span.
    raise NotImplementedError("write gpu_idle_share")


# %%
check("gpu_idle_share", gpu_idle_share)

# %% [markdown]
# The four recorded steps: the idle share, the same with copies and memsets counted as idle (a
# common slip), the GPU's working time, and the step's time by `do_bench` outside the profiler (the
# profiler adds CPU work, so the gaps it sees can be longer than without it):

# %%
if passed("gpu_idle_share"):
    print(f"recorded on {said(steps['small'])}")
    print(f"{'step':8}{'batch x tokens, width':24}{'GFLOP':>9}{'events':>8}{'idle':>7}{'kernels only':>14}"
          f"{'GPU ms':>8}{'step ms':>9}")
    for variant, step in steps.items():
        c = step["config"]
        shape = f"{c['batch']} x {c['seq']}, d={c['dim']}"
        kernels_only = [k for k in work[variant] if k["cat"] == "kernel"]
        print(f"{variant:8}{shape:24}{step['flops'] / 1e9:9.3f}{len(work[variant]):8d}"
              f"{gpu_idle_share(work[variant]):7.1%}{gpu_idle_share(kernels_only):14.1%}"
              f"{sum(k['dur_us'] for k in work[variant]) / 1000:8.3f}{step['step_ms']:9.3f}")

# %% [markdown]
# Counted as idle, the naive step's long device copy nearly doubles its idle share. `tiny`, the
# SMALL block, has far fewer FLOPs than `small` (the GFLOP column) and takes about as long: both are
# launch-bound. Their GPU work (`GPU ms`) is a small part of the step (`step ms`); the rest is the
# GPU waiting while the CPU launches the next kernel.
#
# Each GPU event is linked to the CPU call that launched it by a `correlation` id, so `launch_waits`
# (in `helpers/profile.py`) measures how long each waited from launch to start: short if the GPU was
# idle, long if it queued behind other work. Beside it, a typical operator's and GPU event's time:

# %%
print(f"recorded on {said(steps['small'])}")
for variant in ("sdpa", "small"):
    wait = statistics.median(launch_waits(traces[variant]))
    op = statistics.median(o["dur_us"] for o in steps[variant]["cpu_ops"])
    gpu = statistics.median(k["dur_us"] for k in work[variant])
    print(f"block_{variant:6} launch -> start: median {wait:6.1f} us | median CPU operator {op:5.1f} us, "
          f"median GPU event {gpu:5.1f} us")

# %% [markdown]
# In the `small` step an operator costs the CPU many times what its kernel costs the GPU (compare the
# two medians), and kernels start soon after their launch: nothing is queued. The cures work on the
# CPU side: fewer, larger kernels (fusion: lessons 02, 05 and the capstone, 11), a CUDA graph
# launching the whole sequence at once (`torch.compile(mode="reduce-overhead")`, lesson 07; lesson 09
# measures what a launch costs from Python), or larger batches. A faster kernel would change almost
# nothing.
#
# ## Exercise 3 · Which operator caused it?
#
# The **Self CUDA** column charges each GPU event to the operator that launched it. You can build it
# from the trace: a launch call carries a `correlation` id in its `args`, the GPU event it enqueued
# carries the same id, and the call runs inside the operator that made it, on the same thread
# (`tid`). One event of each kind in the naive step's trace (`ts` and `dur` in microseconds):

# %%
events = traces["naive"]["traceEvents"]
for cat in ("cpu_op", "cuda_runtime", "cuda_driver", "kernel", "gpu_memcpy", "gpu_memset"):
    e = next(e for e in events if e.get("cat") == cat)
    name = short_name(e["name"], 30) if cat == "kernel" else e["name"][:30]
    args = {key: e["args"][key] for key in ("correlation", "stream") if key in e["args"]}
    print(f"{cat:13}{name:32} ts {e['ts']:.3f} dur {e['dur']:8.3f} tid {e['tid']:<4} {args}")

# %% [markdown]
# Write `gpu_time_by_op(events)`, for a trace's `traceEvents` list:
# - the **GPU work** is every event whose `cat` is `"kernel"`, `"gpu_memcpy"` or `"gpu_memset"`;
# - its **launch** is the event of `cat` `"cuda_runtime"` or `"cuda_driver"` (cuBLAS and cuDNN launch
#   through the driver's `cuLaunchKernelEx`) with the same `args["correlation"]` (PyTorch also copies
#   an operator's `External id` onto GPU events; every CUDA trace has the launch, and the check
#   asks for it);
# - the **operator** that made it is the innermost `"cpu_op"` around the launch: on the launch's
#   thread (same `tid`), with `ts <= launch's ts <= ts + dur`, the shortest of them (operators nest:
#   `aten::matmul` calls `aten::mm`). With no launch of that id in the trace, or no operator around
#   it, charge the event to `"(no operator)"`;
# - return one row per operator name, `{"op", "gpu_us", "events"}`: the sum of its GPU events' `dur`
#   and how many there are; most `gpu_us` first, equal `gpu_us` in alphabetical order of `op`
#   (Python's `<` on strings).
#
# The check uses every GPU's recorded traces and hand-made ones: driver-API launches, nested
# operators, two CPU threads, a GPU far behind the CPU, a Triton kernel launched from Python, a
# custom operator (not named `aten::`), ties.

# %% tags=["exercise"]
def gpu_time_by_op(events):
    """[{"op", "gpu_us", "events"}]: the GPU time of the kernels, copies and memsets each operator
    launched itself, most first (equal times: alphabetical by op)."""
    # YOUR CODE HERE: launch calls by correlation id, the innermost operator around each launch,
    # the GPU events' durations added up per operator name, then sort.
    raise NotImplementedError("write gpu_time_by_op")


# %%
check("gpu_time_by_op", gpu_time_by_op)

# %% [markdown]
# Your rows rebuild the Self CUDA column (compare `aten::_softmax` and `aten::mm` with the recorded
# table above): the GPU time of each part of *your code*, which is what you change. A round of the
# loop with it. **Profile**: the naive step by operator. **Hypothesis**: the operators that read or
# write the N × N scores (`aten::bmm`, `aten::masked_fill_`, `aten::_softmax`, part of `aten::copy_`
# and `aten::mul`) lose their time to one fused attention kernel, which adds its own; the
# projections (`aten::mm`) do not move. **Change**: `attention="sdpa"`. **Measure**:

# %%
if passed("gpu_time_by_op"):
    before, after = ({row["op"]: row["gpu_us"] for row in gpu_time_by_op(traces[v]["traceEvents"])}
                     for v in ("naive", "sdpa"))
    print(f"recorded on {said(steps['sdpa'])}: GPU time per operator, us")
    naive_ms, sdpa_ms = (1000 * steps[v]["step_ms"] for v in ("naive", "sdpa"))
    print(f"{'operator':32}{'naive':>10}{'sdpa':>10}")
    busiest = sorted(before.keys() | after.keys(), key=lambda op: -max(before.get(op, 0), after.get(op, 0)))
    for op in busiest[:9]:
        print(f"{op:32}{before.get(op, 0.0):10.1f}{after.get(op, 0.0):10.1f}")
    print(f"{'all GPU work':32}{sum(before.values()):10.1f}{sum(after.values()):10.1f}")
    print(f"{'the step, do_bench':32}{naive_ms:10.1f}{sdpa_ms:10.1f}")

# %% [markdown]
# The rows moved where the hypothesis said, and `aten::mm` did not: the change touched what it was
# meant to and nothing else, worth checking every time. The step, timed apart by `do_bench`, lost
# about what the GPU work lost, since this step keeps the GPU busy (exercise 2); in a launch-bound
# step, the GPU time would have fallen and the step's time would not.
#
# ## Memory: what each operator allocated, and what is live at the peak
#
# With `profile_memory=True` the profiler records every allocation and free; the table's **Self
# CUDA Mem** adds up, per operator over the whole step, what it allocated less what it freed itself,
# whenever that was. `make profile` kept the largest entries, and the step's peak:

# %%
for variant in ("naive", "sdpa"):
    step, peak = steps[variant], memory_peak(traces[variant])
    listed = step["allocations_mib"]
    print(f"block_{variant}, recorded on {said(step)}:")
    print(f"  the {len(listed)} largest Self CUDA Mem entries sum to {sum(m for _, m in listed):,.0f} MiB: "
          + ", ".join(f"{op} {mib:.0f}" for op, mib in listed[:4]) + ", ...")
    print(f"  the trace's peak: {peak['peak_bytes'] / 2**20:,.0f} MiB above the step's start; "
          f"max_memory_allocated, warm-up calls included: {step['peak_mib']:,.0f} MiB")

# %% [markdown]
# The columns add up to more than the peak: a block freed early counts as much as one held to the
# end. They say who allocated, not who holds the peak. (`max_memory_allocated` was reset before the
# warm-up calls, so it also counts what only the first call allocates; the trace holds one step.)
#
# To see who holds the peak, replay the allocations and frees in time order: the trace keeps each as
# a `[memory]` event with its address and bytes (negative for a free). `memory_peak` (in
# `helpers/profile.py`) stops where the most is allocated and names, for each block alive then, the
# operators running when it was allocated, outermost first. The trace does not record a block's own
# shape; the shape printed is that of the outermost operator's first input, which is the block's
# own only when the operator keeps its input's shape (a cast, a softmax):

# %%
peak = memory_peak(traces["naive"])
print(f"block_naive, recorded on {said(naive)}: peak {peak['peak_bytes'] / 2**20:,.0f} MiB, "
      f"reached in {' > '.join(peak['during'])}")
for block in peak["live"][:6]:
    shape = f"input {block['input_shape']}"
    print(f"  {block['bytes'] / 2**20:7,.0f} MiB  {shape:26} {' > '.join(block['ops'])}")

# %% [markdown]
# Three blocks of N × N scores hold nearly all of it: the masked scores (`masked_fill`'s clone), their
# float32 copy (`.float()`, through `aten::empty_strided`), and the softmax's output, allocated as
# the peak is reached. The raw and scaled scores are gone: each was freed once the next result
# replaced it. The softmax's block from the config (float32, one value per head and pair of
# positions, per sequence):

# %%
cfg = naive["config"]
softmax_bytes = cfg["batch"] * cfg["n_heads"] * cfg["seq"] * cfg["seq"] * 4   # B x H x N x N float32
print(f"B x H x N x N x 4 bytes = {softmax_bytes / 2**20:.0f} MiB; the profiler's aten::_softmax: "
      f"{dict(naive['allocations_mib'])['aten::_softmax']:.0f} MiB")

# %% [markdown]
# The same replay on the trace you made at the start (the SMALL block, two sequences of 64 tokens, on
# this machine). At this length the scores are small, and other tensors hold the peak. Where a block's
# size and the input shape printed beside it disagree, trust the size: a block of 2 × 64 × 688 values
# under `aten::matmul` is an MLP product h @ W.T, allocated by a matmul whose first input is h,
# (2, 64, 256).

# %%
mine = memory_peak(trace, device_type=1 if ON_GPU else 0)    # "Device Type" 1: CUDA, 0: the CPU
print(f"SMALL block, naive, on this {DEVICE.type}: peak {mine['peak_bytes'] / 2**10:,.0f} KiB")
for block in mine["live"][:4]:
    shape = f"input {block['input_shape']}"
    print(f"  {block['bytes'] / 2**10:7,.0f} KiB  {shape:26} {' > '.join(block['ops'])}")

# %% [markdown]
# On a GPU, PyTorch records this live, with each allocation's Python stack:
# `torch.cuda.memory._record_memory_history()` before the step, `torch.cuda.memory._dump_snapshot(
# "snapshot.pickle")` after; drop the file on <https://pytorch.org/memory_viz> and click the peak.
# `prof.export_memory_timeline("memory.html", device="cuda:0")` draws the curve from a profile
# (deprecated in recent PyTorch, in favour of the snapshot).
#
# ## Nsight Compute: inside one kernel
#
# `torch.profiler` says *which* kernels take the time; Nsight Compute (`ncu`) says *why* one kernel
# takes the time it does. It replays the kernel many times, reading a different set of hardware
# counters each time, restoring memory and (by default) flushing the caches between replays. The
# result is hundreds of metrics, grouped into *sections*. `make profile` ran it over a few of the
# course's kernels, one launch each, with the command the record keeps; today's `make profile` runs
# the second one printed (it names the lesson whose kernels to run, and asks for the L2's atomic
# counts too, which lesson 10 reads):

# %%
ncu = recorded_profile("ncu.json")
print(f"recorded on {said(ncu)}, {ncu['ncu']}")
print(ncu["command"])
print("today:")
print(ncu_command("08", python="python"))

# %% [markdown]
# What the flags do:
# - `--profile-from-start off`: profile only between `cudaProfilerStart()` and `cudaProfilerStop()`,
#   which `helpers/profile.py` calls after warming every kernel up (no autotuning, no compiling);
# - `--clock-control none`: keep the GPU's clocks; by default ncu locks them to the base clock,
#   steadier but slower than what `do_bench` sees;
# - `--section ...`: the groups of metrics to collect (speed of light, memory, occupancy, launch
#   statistics, warp states, compute); `--metrics`: a few more by name (the DRAM bytes and the L2's);
# - `-o ncu_report`: write a report file, which `ncu --import ncu_report.ncu-rep --csv --print-units
#   base --page details` prints as CSV, in base units (the recordings keep it as `ncu_details.csv`),
#   and `ncu-ui` opens in a GUI.
#   `--set full` would collect every section, among them a roofline chart and the sampling behind
#   the GUI's Source page, which puts the stalls on the instructions that caused them.
#
# Two tables of the metrics that decide a kernel's fate, for every recorded GPU. `ncu_kernels` (in
# `helpers/profile.py`) gives each profiled launch's metrics from `ncu.json` and the details page.
# First the throughputs: time, DRAM bytes, `SM act%` (the share of the kernel's cycles in which an SM
# had any work at all: SM Active Cycles over Elapsed Cycles), each unit's throughput as a percentage
# of its peak, cache hit rates.

# %%
KEYS = {"time": "gpu__time_duration.sum", "read": "dram__bytes_read.sum", "write": "dram__bytes_write.sum",
        "dram%": "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
        "sm%": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
        "tensor%": "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
        "L2 hit%": "lts__t_sector_hit_rate.pct", "L1 hit%": "l1tex__t_sector_hit_rate.pct"}


def sm_active(k):
    return 100 * k["SM Active Cycles"] / k["Elapsed Cycles"]


for device in GPUS:
    print(f"recorded on {said(recorded_profile('ncu.json', device))}")
    percents = list(KEYS)[3:]
    print(f"{'kernel':46}{'time us':>8}{'read MB':>8}{'write MB':>9}{'SM act%':>8}"
          + "".join(f"{h:>8}" for h in percents))
    for k in ncu_kernels(device):
        sizes = f"{k[KEYS['time']] / 1e3:8.1f}{k[KEYS['read']] / 1e6:8.1f}{k[KEYS['write']] / 1e6:9.1f}"
        print(f"{k['target']:46}{sizes}{sm_active(k):8.1f}" + "".join(f"{k[KEYS[h]]:8.1f}" for h in percents))

# %% [markdown]
# Then the launch: registers per thread, shared memory and threads per block, blocks per SM each
# resource allows, theoretical and achieved occupancy, spills, the costliest stall reason.

# %%
LIMIT_KEYS = ("registers", "shared_mem", "warps", "blocks")


def stalls(k):
    """Cycles per issued instruction that a warp spent stalled, by reason, largest first."""
    found = {m.split("stalled_")[1].split("_per_issue")[0]: v for m, v in k.items() if "_stalled_" in m}
    found.pop("selected", None)   # "selected" is the cycle a warp issues: not a stall
    return sorted(found.items(), key=lambda kv: -kv[1])


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
        reason, cycles = stalls(k)[0]
        print(f"{k['target']:46}{launch}  {limits:13}{occupancy}"
              f"{k['derived__local_spilling_requests']:7.0f}  {reason} {cycles:.1f}")

# %% [markdown]
# How to read them:
#
# - **Speed of light (SOL).** `dram%` is DRAM throughput as a percentage of its peak, `sm%` the
#   busiest SM unit's. ncu's threshold, applied here to those two: the larger names the bound if it
#   reaches **60% of peak** (memory if DRAM% is the larger or equal, else compute); below 60% on
#   both, the kernel is **latency-bound**: it waits (on memory, on too few warps, on synchronisation)
#   without saturating anything. (ncu's own rule reads its "Memory Throughput", the busiest of the
#   memory units, L1 and L2 included, where this table reads DRAM's.) A memory-bound kernel near the
#   top of its DRAM% is done, unless it can move fewer bytes.
# - **Tensor%** is the share of the SM's *active* cycles in which the tensor cores were busy, not a
#   share of the kernel's time: an SM with no work has no active cycles, so a kernel that leaves most
#   SMs idle can still show a high tensor% (times `SM act%`, about a share of the elapsed time).
#   It is one pipe among the SM's units; the SOL rule reads `sm%`.
# - **Occupancy.** A block that asks for many registers or much shared memory leaves room for fewer
#   blocks per SM; the smallest of the four limits is the **limiter**. Low occupancy is fine when each
#   warp has enough independent work (the matmuls live at one block per SM); it hurts when warps
#   mostly wait and there are too few others to switch to.
# - **Waves**: blocks in the grid over the blocks the whole GPU holds at once. A fraction of a wave
#   leaves SMs idle at the end (or the whole time, below one wave).
# - **Spills**: registers the compiler could not fit, moved to local memory. Zero here.
# - **Stall reasons**: per instruction issued, the cycles a warp spent waiting, by reason:
#   `long_scoreboard` for a load from global memory, `barrier` at `__syncthreads` (`tl.dot`
#   pipelines), `wait` a fixed-latency dependency, `gmma` the Hopper's asynchronous tensor-core
#   instructions, `drain` stores finishing at exit.
#
# ncu also gives advice, *rules*, in the details page. Those of two kernels:

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
# ## Exercise 4 · Bound and limiter
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
if passed("diagnose"):
    for device in GPUS:
        print(f"recorded on {said(recorded_profile('ncu.json', device))}")
        for k in ncu_kernels(device):
            bound, limiter = diagnose(k)
            print(f"  {k['target']:46} {bound:8} limited by {limiter}")

# %% [markdown]
# The kernels of lessons 01 and 05 are memory-bound, as lesson 03 predicted; the large matmuls are
# compute-bound. The three latency-bound ones are so for different reasons. Their launch, `SM act%`,
# and from the details page how often the schedulers issued (issue slots busy) and the cycles a warp
# takes per instruction it issues, with the largest stalls among them:

# %%
if passed("diagnose"):
    for device in GPUS:
        print(f"recorded on {said(recorded_profile('ncu.json', device))}")
        for k in ncu_kernels(device):
            if diagnose(k)[0] == "latency":
                waits = ", ".join(f"{reason} {cycles:.1f}" for reason, cycles in stalls(k)[:3])
                print(f"  {k['target']:28} grid {k['launch__grid_size']:5.0f} on {k['# SMs']:.0f} SMs "
                      f"({k['launch__waves_per_multiprocessor']:.2f} waves), "
                      f"{k[KEYS['time']] / 1e3:6.1f} us | "
                      f"SM act {sm_active(k):4.1f}% | issue slots busy {k['Issue Slots Busy']:4.1f}% | "
                      f"{k['Warp Cycles Per Issued Instruction']:4.1f} cycles per instruction ({waits}, ...)")

# %% [markdown]
# - **The course's 512³ matmul** launches a handful of programs (its grid above): nearly every SM
#   gets none, and its tensor% (first table) is a share of the few active SMs' cycles, not the GPU's.
# - **cuBLAS's 512³ matmul** launches most of a wave, so most SMs get a program; yet `SM act%` is
#   well under the share of SMs that got one. In a kernel of a few microseconds, starting the
#   programs, filling the pipeline and draining it are a large part of the run: ramp-up and tail.
# - **FlashAttention** keeps every SM active, yet stays below 60% on both units. No stall reason is
#   large on its own (the largest are printed above, in cycles per instruction); together they make
#   a warp issue only once every several cycles (its cycles per instruction), and with two warps per
#   scheduler (the occupancy rule above) nothing fills the cycles between: issue slots busy says how
#   few of their cycles the schedulers issue in. More independent work per scheduler
#   (one tile's softmax overlapping the next tile's matmul) is what lesson 10's FlashAttention-3
#   techniques provide.
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
# - **Close to 1** (vector add, row softmax): each input read once, each output written once. The
#   small shortfall is on the write side: the L2 cache is *write-back*, so the last lines written sit
#   in L2 when the kernel ends and reach DRAM after ncu stops counting.
# - **The tiled softmax** reads its input twice from DRAM: the second pass re-reads a row that does
#   not fit in the SM, most of which has left L2 by then. Its honest count is two reads and one write,
#   not lesson 05's ideal of one each. The loop below works on exactly this.
# - **The 4096³ matmuls read A and B more than once.** Tiles that share a panel of A or B reuse it
#   from L2 when they run close together (lesson 04's grouped order), and read it again from DRAM
#   when they do not. cuBLAS re-reads less than the course's kernel.
# - **The 512³ matmuls** write almost nothing to DRAM: the whole output fits in L2 and is still
#   there, unwritten, when the kernel ends.
# - **FlashAttention** moves about what was counted, although every query block streams all of K
#   and V: the blocks of one head run at about the same time and share K and V in L2 (the L2 column
#   is many times the DRAM traffic, the hit rate high), so DRAM sees each tile about once.
# - **Granularity.** DRAM moves 32-byte sectors, so scattered accesses pay for whole sectors. The
#   course's kernels read contiguous rows; a strided or gather access would show a ratio above 1.
#
# ## Exercise 5 · ncu's bytes on the roofline
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
if passed("roofline_point"):
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
# `of copy` sets the measured DRAM traffic against a large copy on the same GPU (same `make profile`
# run): the practical ceiling of a memory-bound kernel, below the datasheet's. The memory-bound
# kernels run close to it, and may pass it: ncu times one launch on the GPU alone, the copy figure is
# `do_bench`'s median over whole launches, and the copy is one kernel's speed, not a hardware law.
#
# The memory-bound kernels sit close under the slope, the tiled softmax left of where its counted
# bytes would put it (more bytes, lower intensity). FlashAttention sits where its counted bytes put
# it, thanks to L2, well under the flat roof. The large matmuls sit near the flat roof (re-read
# panels move them left, but not past the ridge); the 512³ ones far below, latency-bound.
#
# ## Triton's own profiler: proton
#
# Triton's profiler, `triton.profiler` (proton): `proton.start("proton", hook="triton")`, run the
# kernels, `proton.finalize()`, and it writes a tree of frames with every kernel's launches and GPU
# time, at little overhead; it can also time *scopes inside a kernel*. `make profile` ran the same
# kernels under it, ten launches each, in a process of its own (only one profiler at a time can use
# CUPTI, the CUDA tracing interface). Proton merges the launches of one kernel name into one frame,
# whoever made them; under each frame, the targets whose kernel has that name (from the ncu record):

# %%
proton_record = recorded_profile("proton.json")
print(f"recorded on {said(proton_record)}")
if proton_record.get("ok"):
    made_by = {}
    for k in ncu_kernels(GPU):
        made_by.setdefault(k["Kernel Name"], []).append(k["target"])
    for frame in sorted(proton_record["tree"][0]["children"], key=lambda f: -f["metrics"]["time (ns)"]):
        name, m = frame["frame"]["name"], frame["metrics"]
        print(f"  {name[:48]:50}{m['count']:4d} launches {m['time (ns)'] / 1e6:8.3f} ms in all")
        print(textwrap.fill("from: " + "; ".join(made_by.get(name, ["?"])), 100, initial_indent=" " * 6,
                            subsequent_indent=" " * 12))
else:
    print("proton did not run:", proton_record.get("error", "")[:300])

# %% [markdown]
# So read the totals, not a time per launch: `matmul_kernel` holds the 4096³ and the 512³ launches,
# and an average would be a time that no launch took. To keep targets apart, run each inside
# `with proton.scope("name"):`; its kernels then sit under that scope in the tree.
#
# Scopes inside a kernel: this small kernel's `load` and `compute_store` regions are marked with
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
# Read them with care. `tl.load` *issues* the load and moves on; the warp waits only when it first
# uses the value, here inside `compute_store`, which therefore carries the memory latency: a scope
# measures the instructions between its marks, not the traffic they start. Place scopes around whole
# phases (a pass over a row, a K/V loop), not single loads. None of this runs under the interpreter:
# proton reads the GPU's counters and clocks and rewrites its compiled code, and there is neither.
#
# ## The loop, inside one kernel: profile → hypothesis → change → measure
#
# A round of the loop on lesson 05's tiled softmax, for rows too long to hold in one program.
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
# first tile, the one read longest ago and the likeliest to have left L2, and by the time it reaches
# the recent tiles, they too have been pushed out. If pass 2 walked *backwards*, it would start with
# the tiles pass 1 read last, the likeliest still in L2: DRAM reads should drop, and the time with
# them, since the kernel is memory-bound.
#
# **3 · Change.** One `constexpr` flag of lesson 05's kernel reverses the order in which pass 2 visits
# the row's tiles; nothing else changes. (Lesson 10 has you write a long-row softmax with this
# order, so its code is not shown here.)
#
# **4 · Measure.** ncu's counters before and after, and `do_bench`'s times (as GB/s over the ideal
# bytes, one read and one write of the matrix, and as a fraction of the copy ceiling). On a GPU the
# timings are also taken now.

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
# At both shapes the reversed pass reads less from DRAM, and saves more of the second read for the
# shorter rows. The times move less cleanly: ncu times one launch from cold caches, `do_bench` takes
# the median of many, and a gain of a percent or two is within what separates two runs, so trust the
# bytes first. Why shorter rows save more is L2 arithmetic: every SM runs a few programs at once (the
# occupancy limit), each on its own row, all sharing one L2. A program can find at most its share of
# L2 of its row when pass 2 begins: the L2's size over the resident programs (the grid over the
# waves ncu reported):

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
# The rows in flight do not fit in L2, and the share bounds what survives of each row, the same at
# both shapes. If each program keeps about the same bytes of its row, the fraction of the second read
# saved falls as the row grows: four times longer, about a quarter. The "measured" lines agree in
# direction: bytes saved per row of a similar size (compare the two shapes' lines), and a much smaller
# fraction for the longer rows. The saving is well below the bound (L2 also holds pass 2's output and
# other programs' tiles, and does not evict in a perfect "least recently used" order): the bound
# explains the direction and the trend, not the figure.
#
# **What is left.** The kernel still reads most of its input twice: counted as one read and one write,
# a kernel that moves three can reach at most two thirds of the copy ceiling from DRAM, and the
# reversal buys only what L2 holds. To go further, the second read has to go: keep the row on chip
# between the passes (shared memory across a cluster of SMs on a Hopper), or need no second pass.
# Lesson 10 comes back to this kernel. Whatever you change, the loop is the same: profile, say what
# you expect and why, change one thing, measure, and explain the result with numbers, shortfalls
# included.
#
# ## Takeaways
# - Profile the real step before optimising anything: the kernel table, sorted by self time, names
#   the kernel to fix first; the trace, in Perfetto, shows the order, the gaps and what launched what.
# - A GPU event links to its launch call by a correlation id (runtime or driver API), and the call to
#   the operator around it: that charges GPU time to your code (Self CUDA), and shows whether a change
#   moved the operators you meant and no others.
# - Small steps are launch-bound: measure the idle share, counting copies and memsets as work; cure
#   it with fewer, fused kernels, CUDA graphs or larger batches, not by speeding up one kernel.
# - `profile_memory=True`'s columns say what each operator allocated over the step, not what is live
#   at the peak. Replay the allocations (the trace's `[memory]` events, or a memory snapshot at
#   pytorch.org/memory_viz) to see who holds the peak: in the naive step, the N × N scores, thrice.
# - Nsight Compute explains one kernel: SOL percentages (the larger of DRAM% and SM% names the bound
#   from 60% of peak; below that, latency), occupancy and its limiter, spills, L2 hit rate, stall
#   reasons, issue slots. Tensor% is a share of the SM's active cycles, not of the kernel's time.
# - Measured DRAM bytes differ from counted ones for reasons you can name: a second read, panels
#   re-read, L2 serving reuse (FlashAttention's K and V), write-back leaving outputs in L2, sector
#   granularity. Put the measured bytes on the roofline.
# - proton times Triton kernels with little overhead, merged by kernel name, and scopes inside a
#   kernel; a scope measures instructions, and a load's cost lands where its value is first used.
# - The loop: profile → hypothesis → change → measure, with numbers at every step, and an honest
#   account of what the change did not buy.

# %%
self_check("08")

# %%
flashcards("08")
