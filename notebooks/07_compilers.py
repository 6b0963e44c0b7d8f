# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 07 · torch.compile versus XLA: letting a compiler fuse for you
#
# In lessons 02, 05 and 06 you fused operations by hand: you wrote one Triton kernel where eager
# PyTorch would launch several. There is a second route to the same place. Hand the whole function
# to a **graph compiler**, and let it decide what to fuse and write the kernels itself. PyTorch's
# `torch.compile` and JAX's `jax.jit` both do this, with different compilers behind them.
#
# **You will learn:**
# - what `torch.compile` does (Dynamo captures a graph, Inductor fuses it and writes the code), and
#   how to read Inductor's code (C++ on a CPU, Triton on a GPU) and count its kernels;
# - what breaks a graph (a branch on a tensor's value, `.item()`, `print`), how to find the breaks,
#   when a new shape means a new compile, and what the modes `default`, `reduce-overhead` and
#   `max-autotune` cost;
# - how `jax.jit` hands a function to XLA, and how to read the fusions in XLA's optimized HLO;
# - when a compiler wins, and where it still relies on a kernel or template written by hand
#   (FlashAttention).
#
# Exercises: predict, then count, the kernels Inductor makes; make a function compile without graph
# breaks; count the fusions XLA makes.
#
# Everything here compiles real code, which takes time: the very first `torch.compile` on a machine
# can take half a minute or more (Inductor builds a C++ header it then caches); later compiles take
# seconds.

# %%
from helpers import DEVICE, ON_GPU, check, describe, passed
from helpers.bench import ROOT, compare, recorded
from helpers.cards import flashcards, self_check
from helpers.solutions import load_solution
from helpers.traffic import eager_traffic

import math
import os
import re
import time

import torch
import torch.nn.functional as F
from torch._inductor.utils import run_and_get_code

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # else JAX takes 75% of a GPU at first use
import jax
import jax.numpy as jnp

print(describe())
print("jax", jax.__version__)

# %% [markdown]
# ## Two routes to fusion
#
# | | write the kernel | let a graph compiler fuse |
# |---|---|---|
# | tools | Triton (this course), CUDA C++ | `torch.compile` (Inductor), `jax.jit` (XLA) |
# | you write | one kernel per fused group, launcher, tuning | ordinary PyTorch or JAX code |
# | it sees | exactly what you wrote | the whole graph of standard operations |
# | fuses | whatever you can express, including new algorithms | what its rules recognise |
# | costs | your time, per kernel | compile time, per graph and per shape |
#
# One correction to a common summary: `torch.compile` does not use XLA. Its default backend is
# **TorchInductor**, which writes Triton kernels for a GPU and C++ for a CPU. XLA is the compiler
# behind JAX and TensorFlow (PyTorch reaches it only through the separate `torch_xla` package,
# for TPUs). They are two compilers built on the same idea.
#
# ## The reference: lesson 02's chain
#
# Here is the chain you fused by hand in lesson 02. In eager PyTorch each line is one kernel with a
# full round trip through memory:

# %%
def chain_eager(x, bias, residual, scale):
    y = x + bias         # read MN + N, write MN
    y = torch.relu(y)    # read MN,     write MN
    y = y * scale        # read MN,     write MN
    return y + residual  # read 2MN,    write MN


M, N = 64, 256
x, bias, residual = torch.randn(M, N), torch.randn(N), torch.randn(M, N)
print("eager:", eager_traffic(chain_eager, x, bias, residual, 0.5))

# %% [markdown]
# ## What `torch.compile` does
#
# `torch.compile(fn)` returns a function that compiles itself on its first call, in three stages:
#
# 1. **Dynamo** reads the Python bytecode of `fn` as it runs and records the PyTorch operations
#    into a graph (an FX graph), together with *guards*: the facts the graph assumes, such as the
#    input shapes and dtypes. Whatever it cannot record ends the graph (a *graph break*, below).
# 2. **AOTAutograd** turns the graph into ATen's basic operations and, for training, derives the
#    backward graph.
# 3. **Inductor** decides which operations share a kernel (the fusion decisions of lesson 02, made
#    by rules), then writes the code: Triton kernels on a GPU, C++ loops on a CPU, plus a Python
#    wrapper that allocates buffers and launches the kernels in order.
#
# `run_and_get_code(fn, *args)` calls `fn` (after clearing Dynamo's caches, so it really compiles)
# and returns the source of every module Inductor wrote. Compiling the chain:

# %%
compiled_chain = torch.compile(chain_eager)
start = time.perf_counter()
out, (code,) = run_and_get_code(compiled_chain, x, bias, residual, 0.5)
print(f"compiled in {time.perf_counter() - start:.1f} s; matches eager: "
      f"{torch.allclose(out, chain_eager(x, bias, residual, 0.5))}")
print(f"Inductor wrote {len(code.splitlines())} lines of Python")

# %% [markdown]
# Most of those lines are boilerplate. Two parts matter: the kernels, each defined as
# `name = async_compile.<kind>(...)` with its source in a string, and the function `call`, the
# wrapper that runs them. Kernels Inductor did not write itself appear in `call` as library calls:
# `extern_kernels.mm` (cuBLAS on a GPU, a BLAS library on a CPU) or `torch.ops.aten.<op>` for an
# operation it has no code generator for. Two small functions find them:

# %%
def kernels_in(code):
    """(kernels Inductor generated, library calls it makes) in one module of its output."""
    generated = re.findall(r"^(\w+) = async_compile\.\w+\(", code, re.M)
    wrapper = code[code.index("def call("):]
    library = re.findall(r"\b(extern_kernels\.\w+|torch\.ops\.\w+\.\w+(?:\.\w+)?)\(", wrapper)
    return generated, library


def kernel_source(code, name):
    """The source of kernel `name`: the first triple-quoted string after its definition."""
    start = code.index("'''", code.index(f"{name} = async_compile")) + 3
    return code[start:code.index("'''", start)].strip()


generated, library = kernels_in(code)
print("generated:", generated, "| library calls:", library)

# %% [markdown]
# Four eager kernels became one, and its name lists the operations fused into it. Here it is:
# C++ with OpenMP, since this runs on the CPU.

# %%
print(kernel_source(code, generated[0]))

# %% [markdown]
# Read it like your lesson 02 kernel. `#pragma omp parallel` and `#pragma omp for` split the rows
# among CPU threads (the CPU's version of a grid of programs). The inner loop steps through a row
# one SIMD register at a time (`at::vec::Vectorized<float>`, the CPU's version of a block: 16 floats
# with AVX-512, fewer on other CPUs); when the row length is not a multiple of that width, a second
# branch handles the tail with a partial load (the CPU's version of a mask; the softmax below has
# one). Each input is loaded once (`loadu`), every intermediate (`tmp2`, `tmp3`, ...) lives in
# registers, and the result is stored once. The wrapper shows the other half:

# %%
print(code[code.index("def call("):code.index("return (")].strip())

# %% [markdown]
# One output buffer allocated with `empty_strided_cpu`, one kernel call, no intermediate buffers.
#
# ### The same chain on a GPU: Triton
#
# On a GPU, Inductor writes a Triton kernel instead. With a GPU the next cell compiles the chain
# there; without one it shows the code recorded on a GPU by `record_artifacts` in
# `solutions/07_compilers.py` (saved in `helpers/recorded/inductor_gpu/`).

# %%
RECORDED = ROOT / "helpers" / "recorded" / "inductor_gpu"


def gpu_code(name, fn, make_args):
    """Inductor's output for fn(*make_args()) on this GPU, or the copy recorded on one (or None)."""
    if ON_GPU:
        return "\n\n".join(run_and_get_code(torch.compile(fn), *make_args())[1])
    path = RECORDED / f"{name}.txt"
    if not path.exists():
        print(f"No GPU here, and no Triton code recorded yet ({path.name} is not in {RECORDED.name}/).")
        return None
    print(f"Recorded on a GPU: {path.name}")
    return path.read_text()


gpu_chain = gpu_code("chain", chain_eager, lambda: (torch.randn(4096, 4096, device=DEVICE),
                                                  torch.randn(4096, device=DEVICE),
                                                  torch.randn(4096, 4096, device=DEVICE), 0.5))
if gpu_chain:
    generated, library = kernels_in(gpu_chain)
    print("generated:", generated, "| library calls:", library)
    print(kernel_source(gpu_chain, generated[0]))

# %% [markdown]
# Look for the kernel you wrote in lesson 02, in Inductor's naming: an offset from
# `tl.program_id(0)` times `XBLOCK`, `xindex` from `tl.arange`, `xmask` for the tail (here all
# `True`, and the loads and the store pass `None` as their mask: 4096 × 4096 elements divide into
# whole blocks, so there is no tail), one `tl.load` per input (the bias through a column index such
# as `xindex % 4096`, like your `offs % n_cols`), the arithmetic on registers, one `tl.store`. The
# decorator above the kernel gives Inductor's own autotuner the sizes it needs to pick a block size.
#
# ## A reduction: the naive softmax
#
# Lesson 05 started from the numerically stable softmax written one op at a time: five kernels that
# move about 8·MN elements, where one read and one write (2·MN) would do.

# %%
def softmax_naive(x):
    m = x.amax(dim=-1, keepdim=True)     # read MN, write M
    e = torch.exp(x - m)                 # sub: read MN + M, write MN; exp: read MN, write MN
    return e / e.sum(dim=-1, keepdim=True)  # sum: read MN, write M; div: read MN + M, write MN


xs = torch.randn(64, 1000)
print("eager:", eager_traffic(softmax_naive, xs))
out, (code,) = run_and_get_code(torch.compile(softmax_naive), xs)
print("compiled:", kernels_in(code))

# %% [markdown]
# One kernel again. Look at the structure of its C++ (printed below): for each row, a first loop
# finds the maximum, a second computes `exp(x - max)`, sums it and keeps it in a small per-thread
# buffer, a third divides and stores. The two reductions and the pointwise steps around them all
# work row by row (one row per thread): the same parallel structure, which is the condition lesson
# 02 gave for fusing them.

# %%
print(kernel_source(code, kernels_in(code)[0][0]))

# %% [markdown]
# On a GPU, Inductor writes one Triton kernel for this softmax too. The next cell shows it for rows
# of 32,768 floats, too long to hold in registers at once, so expect a loop over each row in
# chunks. It also reports whether Inductor used its **online softmax** reduction, lesson 05's
# running maximum and rescaled sum. On GPUs, Inductor rewrites the pattern max → subtract → exp →
# sum into that single-pass reduction (the setting is `torch._inductor.config.online_softmax`).
# Nobody had to tell the compiler about *your* function: its authors wrote that rule once.

# %%
gpu_softmax = gpu_code("softmax_32768", softmax_naive, lambda: (torch.randn(4096, 32768, device=DEVICE),))
if gpu_softmax:
    generated, library = kernels_in(gpu_softmax)
    print("generated:", generated, "| library calls:", library)
    print("uses the online softmax reduction:", "online_softmax" in gpu_softmax)
    print(kernel_source(gpu_softmax, generated[0]))

# %% [markdown]
# ## Exercise 1 · Predict, then count
#
# Here is a small block of a network: a matrix multiply, a bias and ReLU, then an RMS
# normalisation of each row. The check compiles exactly this function (it lives in the exercise's
# spec) on your device and counts what `kernels_in` counts.

# %%
import inspect

from helpers.exercises.lesson07 import block, block_inputs

print(inspect.getsource(block))

# %% [markdown]
# **Before you compile anything**, predict: how many kernels will Inductor *generate*, and how many
# *library calls* will it make? Think about which operations Inductor writes itself and which it
# hands to a library, and which of the rest share a parallel structure. Write your prediction, run
# the check (it says which way a count is off, never the count), and only then compile `block`
# yourself to see why (next cell).

# %% tags=["exercise"]
def predicted_kernels():
    """Your prediction for block(x, w, b, g): {"generated": ..., "library": ...}."""
    # YOUR CODE HERE: return a dict with two whole numbers, decided before you count.
    raise NotImplementedError("predict the kernels Inductor makes for block")


# %%
check("inductor_kernels", predicted_kernels)

# %% [markdown]
# Now count. The generated kernel's name lists the operations it absorbed; the library call is the
# matmul (here `addmm`, which also adds the bias; Inductor may instead add the bias in its own
# kernel, which changes no count).

# %%
out, (code,) = run_and_get_code(torch.compile(block), *block_inputs())
generated, library = kernels_in(code)
print("generated:", generated, "| library calls:", library)

# %% [markdown]
# ## Graph breaks
#
# Dynamo can only put PyTorch operations on tensors into a graph. When the Python code needs a
# *value* that exists only once the tensors are computed, Dynamo stops the graph there, lets Python
# run that bit, and starts a new graph after it. That is a **graph break**. The usual causes:
#
# - a Python `if` on a tensor's value (a *data-dependent branch*): which way it goes is unknown
#   while tracing;
# - `.item()` (or `float(t)`, `.tolist()`): it turns a tensor into a Python number; on a GPU it also
#   makes the host wait for the device;
# - `print` and other Python side effects.
#
# Each break costs twice: fusion stops at the break (the tensors crossing it are written to memory
# and read back), and each graph is compiled and launched separately. Here is a function with all
# three:

# %%
def gelu_residual(x, residual, gate):
    h = F.gelu(x)
    if h.abs().max() > 10:                     # a branch on a tensor's value
        h = h.clamp(-10.0, 10.0)
    scale = torch.sigmoid(gate).mean().item()  # a tensor turned into a Python float
    y = residual + scale * h
    print(f"gate scale {scale:.3f}")           # a Python side effect
    return y


args = 6 * torch.randn(32, 48), torch.randn(32, 48), torch.randn(48)
y = gelu_residual(*args)

# %% [markdown]
# `torch._dynamo.explain(fn)(*args)` runs Dynamo only (no Inductor, so it is quick) and reports the
# graphs and the reason for each break, with the line that caused it. (Outside this course, Dynamo
# also logs a warning about the `.item()` break as it happens; the course's `helpers` silence it,
# since this cell reports every break.)

# %%
report = torch._dynamo.explain(gelu_residual)(*args)
print("graphs:", report.graph_count)
for reason in report.break_reasons:
    frame = reason.user_stack[-1]
    line = (frame.line or "").split("#")[0].strip()
    print(f"  line {frame.lineno}: {line:42} {reason.reason.splitlines()[0][:70]}")

# %% [markdown]
# Other ways to find them: `torch.compile(fn, fullgraph=True)` turns the first break into an error
# (use it for code that must compile whole), and the environment variable
# `TORCH_LOGS=graph_breaks` logs each break as it happens.

# %%
try:
    torch.compile(gelu_residual, fullgraph=True)(*args)
except Exception as error:
    print(type(error).__name__, "-", str(error).splitlines()[0])

# %% [markdown]
# ## Exercise 2 · One graph, no breaks
#
# Write `gelu_residual_fixed`: the same result as `gelu_residual` for every input, with no graph
# break. Remove each cause rather than hiding it:
# - the branch: does clamping change anything when no value exceeds 10? (In general,
#   `torch.where(cond, a, b)` turns a branch into tensor operations.)
# - `.item()`: a 0-d tensor multiplies a tensor just as well as a Python float does.
# - `print`: inspect values outside the compiled function.
#
# The check runs your function on several shapes and compares with the reference, then asks
# `torch._dynamo.explain` whether it is one graph with no breaks, under Dynamo's default settings.
# Removing a cause is what counts: a setting that captures `.item()` anyway, a print moved after the
# graph, code that runs only when not compiling (compiled and eager outputs are compared), or a value
# worked out once while tracing and kept as a constant (`torch.compiler.assume_constant_result`: the
# compiled function is called again on new values) is refused.

# %% tags=["exercise"]
def gelu_residual_fixed(x, residual, gate):
    """residual + mean(sigmoid(gate)) * clamp(gelu(x), -10, 10), as a single graph."""
    # YOUR CODE HERE: the computation of gelu_residual without the branch, .item() and print.
    raise NotImplementedError("write gelu_residual_fixed")


# %%
check("no_graph_breaks", gelu_residual_fixed)

# %% [markdown]
# Two escape hatches, for when the value really is needed: `torch._dynamo.config.capture_scalar_outputs
# = True` lets `.item()` stay in the graph as a symbolic number, and `torch.cond` expresses a branch
# whose two sides are both compiled. Neither is needed here.
#
# ## New shapes, recompilation and `dynamic=True`
#
# A compiled graph is specialised to what Dynamo saw, guarded by checks on every call. When a guard
# fails (a new shape, say) Dynamo compiles again. To watch this without paying for Inductor, we give
# `torch.compile` a *backend* of our own: a function that receives each graph Dynamo captures, records
# it, and returns it unchanged to be run as is.

# %%
graphs = []


def recording_backend(graph_module, example_inputs):
    """A torch.compile backend that records each graph Dynamo captures and runs it as it is."""
    graphs.append(graph_module)
    return graph_module.forward


def graphs_per_call(dynamic):
    """How many graphs exist after each call of the compiled chain on a new width."""
    torch._dynamo.reset()
    graphs.clear()
    fn = torch.compile(chain_eager, backend=recording_backend, dynamic=dynamic)
    counts = []
    for n in (64, 100, 128, 300):
        fn(torch.randn(8, n), torch.randn(n), torch.randn(8, n), 0.5)
        counts.append(len(graphs))
    return counts


def input_shapes(graph_module):
    """The shapes the graph was compiled for (a symbol such as s0 stands for any size)."""
    values = [node.meta["example_value"] for node in graph_module.graph.nodes if node.op == "placeholder"]
    return [tuple(v.shape) for v in values if isinstance(v, torch.Tensor)]


for dynamic in (None, False, True):
    counts = graphs_per_call(dynamic)
    print(f"dynamic={str(dynamic):5}: graphs after each call {counts}; "
          f"the last one is for {input_shapes(graphs[-1])}")

# %% [markdown]
# - `dynamic=False`: one graph per shape. Fine for a model that always sees the same shapes; costly
#   when every batch has a different sequence length.
# - the default (`None`): the first graph is specialised; when a size changes, Dynamo recompiles once
#   with that dimension *symbolic* (`s0` and friends), and that graph serves every later width.
# - `dynamic=True`: symbolic from the start. One compile, but the code cannot use the exact sizes
#   (no unrolled loops or size-specific block choices), so it can be a little slower.
#
# After 8 recompilations of one function (`torch._dynamo.config.recompile_limit`) Dynamo gives up
# and runs it eagerly, silently but for a warning.
#
# ## Modes: what you pay at compile time
#
# `torch.compile(fn, mode=...)` chooses how hard Inductor works:
#
# - `default`: fusion and generated kernels, with a few block sizes tried per kernel. Seconds per
#   graph.
# - `reduce-overhead`: adds CUDA graphs. The whole sequence of launches is recorded once and replayed
#   with a single call. Costs extra memory for static buffers and a recording per shape, and an
#   output is overwritten by the next call (clone it to keep it).
# - `max-autotune`: benchmarks many Triton matmul templates and kernel configurations, keeps the
#   fastest, and uses CUDA graphs too (`max-autotune-no-cudagraphs` tunes without them). Its compile
#   takes far longer than `default`'s: the recorded times are printed below.
#
# `reduce-overhead` pays off when launches, not bytes, dominate (small batches, many small kernels:
# lesson 01's launch overhead). `max-autotune` pays off for matmul-heavy graphs you will run for a
# long time. Both target GPUs; on a CPU they compile much like `default`. The compile times and the
# speed of each mode for `block` at full size, recorded on a GPU:

# %%
summary_path = RECORDED / "summary.json"
if summary_path.exists():
    import json

    summary = json.loads(summary_path.read_text())
    modes = summary["modes"]
    print(f"{modes['function']}, recorded on {summary['device']} ({summary['date']}, "
          f"torch {summary['torch']}), each mode in a fresh process with empty caches:")
    for mode in ("default", "reduce-overhead", "max-autotune"):
        row = modes[mode]
        extra = row["ms_per_call"] - modes["default"]["ms_per_call"]
        print(f"  {mode:16} first call (the compile) {row['first_call_s']:6.1f} s, then "
              f"{row['ms_per_call']:.3f} ms per call (eager: {row['eager_ms_per_call']:.3f} ms)"
              + (f", {extra:+.3f} ms against default" if mode != "default" else ""))
    input_bytes = 2 * (8192 * 4096 + 4096 * 4096 + 2 * 4096)  # x, w, b, g in float16 (the line above)
    bench = recorded(summary["device"])
    if bench:  # the copy ceiling counts bytes read plus bytes written, as a copy of the inputs moves
        copy_ms = 2 * input_bytes / (bench["copy_gbps"] * 1e6)
        print(f"copying the inputs ({input_bytes / 2**20:.0f} MiB) into static buffers, at the copy "
              f"ceiling recorded on {bench['device']} ({bench['copy_gbps']:.0f} GB/s): "
              f"about {copy_ms:.3f} ms per call")
else:
    print("No compile times recorded on a GPU yet (helpers/recorded/inductor_gpu/summary.json).")

# %% [markdown]
# Compare each mode's time per call with `default`'s. `block` is one large matrix product and one
# fused kernel: two launches against a fraction of a millisecond of GPU work, so there is next to no
# launch overhead for CUDA graphs to remove. What they add is a cost. A CUDA graph replays its kernels
# on fixed addresses, so on every call `torch.compile` copies each input that is not static
# (parameters and buffers are; these plain tensors are not) into the graph's own buffers. The last
# line estimates that copy: set it beside the extra time of `reduce-overhead`. Where the estimate is
# the smaller, the copy is only part of the cost, and the recording holds nothing that breaks down
# the rest (a profile on a GPU would). `max-autotune` uses CUDA graphs too, so it pays the same copy;
# the recording does not say which matrix product its tuning picked, so it cannot tell whether the
# tuning itself gained or lost anything here. To separate the two, time `max-autotune-no-cudagraphs`.
#
# ## XLA through JAX
#
# JAX takes a stricter road to the same graph. `jax.jit(fn)` calls `fn` once with abstract values
# (*tracers*) standing in for the arrays, records every operation, and hands the whole graph to XLA.
# JAX arrays are immutable and the Python code runs only during that trace (a `print` there prints a
# tracer, once). Anything that needs a concrete value, such as a Python `if` on an array, is an error
# rather than a graph break: you write `jnp.where` or `jax.lax.cond` from the start. There is
# always exactly one graph.
#
# We run JAX on the CPU here, on any machine, so that what you read matches the text. The chain
# in JAX, and what tracing records (a *jaxpr*):

# %%
cpu = jax.devices("cpu")[0]


def chain_jax(x, bias, residual, scale):
    return jnp.maximum(x + bias, 0.0) * scale + residual


xj, bj, rj = (jax.device_put(t.numpy(), cpu) for t in (x, bias, residual))
print(jax.make_jaxpr(chain_jax)(xj, bj, rj, 0.5).pretty_print(use_color=False))

# %% [markdown]
# Called directly, without `jit`, JAX runs **eagerly**: each operation of that list is dispatched
# on its own, as its own small compiled XLA program, and each writes its result to memory, just
# like eager PyTorch. With `jax.jit`, XLA sees the whole list at once. `.lower(...)` gives the graph
# as XLA receives it (StableHLO); `.compile()` runs XLA's optimisations, and `.as_text()` prints the
# optimized **HLO**.

# %%
lowered = jax.jit(chain_jax).lower(xj, bj, rj, 0.5)
hlo = lowered.compile().as_text()
print(f"optimized HLO: {len(hlo.splitlines())} lines")


def hlo_entry(hlo):
    """The ENTRY computation of an HLO module: what runs, in order, when the program is called."""
    start = hlo.index("\nENTRY ")
    return hlo[start + 1:hlo.index("\n}", start) + 2]


print(hlo_entry(hlo))

# %% [markdown]
# An HLO module is a list of computations. The **ENTRY** computation is what runs: one instruction
# per line, `%name = shape opcode(operands), attributes`. Here it holds the four parameters and a
# single instruction with opcode `fusion`: XLA fused the whole chain into one loop
# (`kind=kLoop`: an elementwise loop). Its body is the computation named in `calls=`, printed
# above ENTRY in the full text: the broadcast of the bias, the add, the max, the multiply and the
# residual add, with no intermediate array. **Each fusion instruction in ENTRY becomes one kernel**
# (one loop nest on a CPU, one GPU kernel on a GPU). Fusions are not the only kernels, though: a
# matrix product often stays a `dot` or becomes a `custom-call` to a library (cuBLAS on a GPU), and a
# `copy` (a transpose or change of layout) runs as its own kernel when it is not fused. Parameters,
# `tuple`, `get-tuple-element` and `bitcast` move no data. So the fusions count the loops XLA wrote;
# to count every kernel, read every instruction of ENTRY.
#
# The eager and jitted versions side by side, measured now on this machine's CPU (real compiled
# code, not Triton's interpreter), with PyTorch for comparison:

# %%
def ms_per_call(fn, *args, repeat=20):
    """Median wall-clock milliseconds of fn(*args) on the CPU, after one warm-up call."""
    def run():
        out = fn(*args)
        return out.block_until_ready() if hasattr(out, "block_until_ready") else out
    run()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return 1000 * sorted(times)[len(times) // 2]


big = [torch.randn(2048, 2048), torch.randn(2048), torch.randn(2048, 2048)]
big_jax = [jax.device_put(t.numpy(), cpu) for t in big]
print(f"torch eager       {ms_per_call(chain_eager, *big, 0.5):7.2f} ms")
print(f"torch.compile     {ms_per_call(compiled_chain, *big, 0.5):7.2f} ms")
print(f"jax, eager        {ms_per_call(chain_jax, *big_jax, 0.5):7.2f} ms")
print(f"jax.jit           {ms_per_call(jax.jit(chain_jax), *big_jax, 0.5):7.2f} ms")

# %% [markdown]
# On a CPU too, the fused versions move a third of the bytes; how much time that saves depends on
# the CPU's caches and cores, so your ratios may differ from a neighbour's.
#
# ## Exercise 3 · Count XLA's fusions
#
# Write `xla_fusion_count(fn, *args)`: compile `jax.jit(fn)` for `args`, take the optimized HLO's
# ENTRY computation, and return how many of its instructions have the opcode `fusion`. Only the
# opcode counts: the word "fusion" also appears in names (`%ynn_fusion`) and attributes, and a
# line's name and attributes must not be mistaken for its opcode. The other computations of the
# module (each fusion's body, each branch of a `jax.lax.cond`) are called from ENTRY: their
# instructions are not ENTRY's. The check compares your count with its own on several functions (a
# chain, a softmax, a matmul, a normalisation, two outputs, a row's maximum and its position, a
# `jax.lax.cond`, a sort, which runs as a kernel of its own and is not a fusion) and fresh random
# shapes.

# %% tags=["exercise"]
def xla_fusion_count(fn, *args):
    """Number of fusion instructions in the ENTRY computation of XLA's optimized HLO for jit(fn)(*args)."""
    # YOUR CODE HERE: get the optimized HLO text (as above), keep its ENTRY computation (hlo_entry),
    # and count the instruction lines whose opcode is `fusion`.
    raise NotImplementedError("write xla_fusion_count")


# %%
check("xla_fusions", xla_fusion_count)

# %% [markdown]
# Now apply it to the naive softmax. Inductor put the whole softmax into one kernel on the CPU;
# count what XLA does with the same function:

# %%
def softmax_jax(x):
    e = jnp.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


xsj = jax.device_put(xs.numpy(), cpu)
if passed("xla_fusions"):
    print("XLA fusions for the naive softmax:", xla_fusion_count(softmax_jax, xsj))
print(hlo_entry(jax.jit(softmax_jax).lower(xsj).compile().as_text()))

# %% [markdown]
# **Explain one fusion XLA did not make.** Read the ENTRY computation above (the exact grouping
# depends on your JAX version; this text was written with jax 0.10.2 on a CPU, which made four
# fusions): which array travels through memory between two fusions, and why didn't XLA put its
# producer and its consumers in one fusion? Answer for yourself, then unfold.
#
# <details><summary>One answer</summary>
#
# With jax 0.10.2 on a CPU: the first fusion computes each row's maximum, subtracts it and takes the
# exponential, and writes the whole `exp(x - max)` array to memory. The second fusion, the sum,
# reads that array back; the third takes the reciprocal of each row's sum (the division became a
# multiplication); the fourth reads the `exp` array a second time and multiplies. The fusion XLA did
# not make is the exponential with the sum. The exponential has two consumers, the sum and the
# final multiply. Putting it inside the sum's fusion would mean either computing `exp` a second
# time in the multiply's fusion (XLA avoids duplicating expensive operations such as `exp`) or one
# fusion with two outputs, which this backend did not choose. So the `exp` array makes a round
# trip through memory, exactly the traffic fusion is meant to remove. Inductor avoided it because
# its kernel gives each thread whole rows and keeps one row of `exp` in a small buffer between two
# loops; lesson 05's kernel keeps the row in registers.
#
# </details>
#
# ## When the compiler wins, and when a hand kernel still does
#
# A compiler wins on **chains of standard operations**: elementwise chains, broadcasts, reductions
# followed by elementwise work on the same rows. It fuses them across a whole model, for every
# shape, with no kernel to write or tune, and it keeps doing so when you change the model.
#
# Attention is the test case. Compile the naive version, with its N × N score matrix:

# %%
def attention_naive(q, k, v):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # N x N scores per (batch, head)
    return torch.softmax(s, dim=-1) @ v


q, k, v = (torch.randn(2, 4, 128, 64) for _ in range(3))
out, (code,) = run_and_get_code(torch.compile(attention_naive), q, k, v)
print(kernels_in(code))

# %% [markdown]
# No generated kernel at all: Inductor **recognised** the pattern `softmax(q kᵀ · scale) v` and
# replaced the whole function with a call to PyTorch's fused attention kernel
# (`scaled_dot_product_attention`; on a GPU, a FlashAttention-style kernel). Inductor keeps a list
# of such attention patterns (about thirty in torch 2.13, in
# `torch/_inductor/fx_passes/fuse_attention.py`), written by hand by its developers, and the kernel
# it calls was written by hand too. The compiler did not discover tiling or the online softmax
# across K/V tiles; people did, and taught the compiler to spot the places to use their kernel.
#
# Change the function slightly, in a way nobody wrote a pattern for, and that help disappears. Some
# models *soft-cap* their attention scores, `cap · tanh(s / cap)`:

# %%
def attention_softcap(q, k, v, cap=30.0):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    s = cap * torch.tanh(s / cap)
    return torch.softmax(s, dim=-1) @ v


out, (code,) = run_and_get_code(torch.compile(attention_softcap), q, k, v)
print(kernels_in(code))
n = q.shape[-2]
buffers = re.findall(r"(buf\d+) = empty_strided_\w+\((\([^)]*\))", code)
print("buffers of N x N scores:", [(name, shape) for name, shape in buffers if shape.count(str(n)) >= 2])

# %% [markdown]
# Now Inductor does what it can: a batched matmul from a library, one generated kernel that fuses
# the scaling, the tanh and the whole softmax (good), and a second matmul. But the N × N scores are
# written to memory after the first matmul and the probabilities are written again for the second:
# the memory traffic FlashAttention exists to avoid, growing as N². Fusing the two matmuls and the
# softmax into one tiled kernel needs the online softmax *across tiles of K and V*, a change of
# algorithm (lesson 06), not a fusion rule: the compiler will not find it by itself. PyTorch's
# answer for variants like this one is **FlexAttention** (`torch.nn.attention.flex_attention`): a
# FlashAttention kernel template written by people, into which `torch.compile` inlines your score
# function. Again, the algorithm came from a person; the compiler fills in the details.
#
# The hand-written answer is small too. Lesson 06's tile loop computes a tile of scores
# `s = tl.dot(q, kT)` and goes on to the online softmax; the soft-cap is one transformation of that
# tile, in registers, before the running maximum sees it. The course's kernel takes it as an option,
# `flash_forward(q, k, v, softcap=30.0)`, and the lines it adds to `fwd_tile_loop` are these:

# %%
lesson06 = load_solution("06")
loop_source = inspect.getsource(lesson06.fwd_tile_loop.fn).splitlines()
start = next(i for i, line in enumerate(loop_source) if "if SOFTCAP > 0" in line)
print("\n".join(loop_source[start:start + 3]))

# %% [markdown]
# (Triton 3.6 has no `tanh` in `tl`, so the kernel writes it as $2\sigma(2t) - 1$.) The scores are
# capped before the maximum is taken, so the online softmax sees exactly the capped scores, and
# nothing else changes. The same function, checked against the naive version:

# %%
q, k, v = (3 * torch.randn(2, 4, 96, 64, device=DEVICE) for _ in range(3))
out, _ = lesson06.flash_forward(q, k, v, softcap=30.0)
worst = (out - attention_softcap(q, k, v)).abs().max().item()
print(f"largest difference from attention_softcap: {worst:.1e}")

# %% [markdown]
# ### Measured on a GPU
#
# `make bench` times these side by side: the naive softmax eager, compiled, with `jax.jit`, against
# `torch.softmax` and lesson 05's Triton kernel; naive attention eager, compiled, with `jax.jit`,
# against SDPA and lesson 06's FlashAttention; and the soft-capped variant compiled naively, through
# FlexAttention, and with lesson 06's kernel and its soft-cap option. With a GPU the cells below
# measure now; without one they show the recorded figures.
#
# The `jax.jit` rows are not timed on equal terms. JAX runs on CUDA streams of its own, which the
# timer's events do not see, so each timed call waits on the host for JAX's result (a round trip
# through the CPU) and hands it to PyTorch through DLPack (no copy, but a conversion per call). And
# the JAX attention (`attention_naive_jax` in `solutions/07_compilers.py`) computes its scores in
# float32, so its N × N matrix is twice the bytes of PyTorch's float16 one. Read those rows as what
# this setup measured, not as XLA against Inductor.

# %%
def lesson_benches(group):
    """This lesson's `make bench` items of one group (only built on a GPU)."""
    return [b for b in load_solution("07").benchmarks() if b.group == group]


softmax_rows = compare("compile_softmax", lambda: lesson_benches("compile_softmax"))

# %%
attention_rows = compare("compile_attention", lambda: lesson_benches("compile_attention"))

# %%
softcap_rows = compare("compile_softcap_attention", lambda: lesson_benches("compile_softcap_attention"))

# %% [markdown]
# For the soft-capped version, two questions: how the compiled naive code, with its N × N traffic,
# fares against the tiled kernels as N grows, and whether the hand kernel beats the template. Each
# time below is divided by FlexAttention's at the same size (above 1: slower than FlexAttention):

# %%
FLEX, HAND = "flex_attention (compiled template)", "triton FlashAttention + soft-cap (lesson 06)"
for device in dict.fromkeys(r.get("device") or torch.cuda.get_device_name() for r in softcap_rows):
    rows = [r for r in softcap_rows if (r.get("device") or torch.cuda.get_device_name()) == device]
    print(device)
    hand_ahead, sizes = 0, 0
    for label in dict.fromkeys(r["label"] for r in rows):
        times = {r["impl"]: r["ms"] for r in rows if r["label"] == label}
        if FLEX in times and HAND in times:
            ratios = ", ".join(f"{impl} {ms / times[FLEX]:.2f}" for impl, ms in times.items()
                               if impl in (HAND, "torch.compile(naive)"))
            print(f"  {label}: {ratios}")
            hand_ahead, sizes = hand_ahead + (times[HAND] < times[FLEX]), sizes + 1
    print(f"  lesson 06's kernel is ahead of FlexAttention at {hand_ahead} of {sizes} sizes")

# %% [markdown]
# What to look for in these figures: the compiled naive softmax far above the eager one and close to
# the hand kernels (a compiler's home ground); compiled naive attention beside SDPA, since it *is*
# SDPA after the pattern rewrite; and the soft-capped version. There no pattern applies, and the
# compiled naive code's N × N traffic grows as N² while the tiled kernels' stays linear: read in the
# lines above how its ratio moves from the shortest sequence to the longest. Then compare the two
# tiled kernels: FlexAttention's template is generated for any score function, lesson 06's kernel is
# the course's own with three lines added, and the last line above says how often the hand kernel
# is ahead. The two differ in what they were made for: FlexAttention's template serves any score
# function and block mask, with block sizes picked by default rules unless you pass
# `kernel_options`; lesson 06's kernel is autotuned over its own configurations for each sequence
# length. Where the hand kernel leads, that specialisation is what it buys, on top of the algorithm
# that both share and the naive code lacks.
#
# ## Worked exercise: explain the gap
#
# A question of the kind you will meet reading profiles (lesson 06's self-check has its partner, a
# paper's attention speed-up). Answer it, then unfold.
#
# A training step has small operations between its matmuls (a bias add, an activation, a
# normalisation), and the GPU reports about 30% of its peak FLOP/s. What would you change, and what
# would you expect?
#
# <details><summary>Worked answer</summary>
#
# The small ops are memory-bound: each reads and writes a tensor as large as the matmul's output,
# doing a few FLOPs per element, while the tensor cores wait. First try the cheap route:
# `torch.compile` the step. Inductor fuses the bias, activation and normalisation into one or two
# kernels per gap (exercise 1 showed one kernel after a matmul), cutting their traffic by about the
# number of ops fused. Check with `torch._dynamo.explain` that no graph break splits the step. If
# profiling shows many tiny kernels (small batches), launch overhead is part of the gap:
# `mode="reduce-overhead"` replays the step as a CUDA graph. If the normalisation still sits alone
# between two matmuls, the next step is a hand-written epilogue or prologue fusion into the matmul
# (lessons 04 and 05). Expect the gaps to shrink by the bytes saved; the whole step speeds up only
# by the share of time those gaps took (Amdahl), and the matmuls themselves won't get faster: expect
# a clear rise, nowhere near peak. Measure before and after, and try each `mode` on the real step
# rather than assuming: the modes table above shows CUDA graphs losing on a block whose launches were
# already cheap.
#
# </details>
#
# ## Takeaways
# - Two routes to fusion: write the kernel (Triton) or let a graph compiler fuse (`torch.compile`
#   with Inductor, `jax.jit` with XLA). Use the compiler first; write kernels where it falls short.
# - `torch.compile` = Dynamo (capture a graph, with guards) + AOTAutograd + Inductor (fuse, then write
#   Triton on a GPU, C++ on a CPU). `run_and_get_code` shows the code; count kernels from it.
# - A graph break ends a graph and its fusion. Find breaks with `torch._dynamo.explain` or
#   `fullgraph=True`; remove branches on tensor values, `.item()` and `print` from compiled code.
# - New shapes recompile; the default makes a changed dimension symbolic on the second shape;
#   `dynamic=False/True` chooses up front. `reduce-overhead` and `max-autotune` cost compile time
#   and memory, and their CUDA graphs copy non-static inputs on every call: they pay off only where
#   launches dominate, or tuning finds a faster matmul. Measure them.
# - `jax.jit` traces a whole pure function; in XLA's optimized HLO each `fusion` instruction in ENTRY
#   is one kernel, and so is each `dot`, `custom-call` (a library call) or unfused `copy`.
# - Compilers know the tricks people taught them (fusion rules, the online softmax of a row, the
#   attention pattern → FlashAttention). A new algorithm, such as tiling attention for a variant
#   nobody wrote a pattern for, still takes a hand-written kernel or a hand-written template.

# %%
self_check("07")

# %%
flashcards("07")
