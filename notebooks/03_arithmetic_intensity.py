# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 03 · Arithmetic intensity and the roofline
#
# Lesson 02 showed that fusion wins by moving fewer bytes. This lesson turns that into a number you
# can compute before writing any code: how many floating-point operations a kernel does for each
# byte it moves. That one ratio, set against two figures of the chip, says whether a kernel is
# limited by memory or by arithmetic, and how fast it can possibly run.
#
# **You will learn:**
# - to count a kernel's FLOPs and bytes, and divide them: its *arithmetic intensity*;
# - what the *ridge point* of a chip is, with the figures of the H100, H200 and A100;
# - to predict which side of the ridge an operation falls on, before running it;
# - to place kernels on a *roofline* plot, from counted bytes and GPU timings;
# - to time GPU code honestly, and to spot the ways a timing lies.
#
# Exercises: the cost of a matmul, the roofline formula, ten predictions, and an honest timer.

# %%
from helpers import DEVICE, ON_GPU, check, describe, passed
from helpers.bench import Bench, compare, measure, recorded, recorded_devices, recorded_rows, show
from helpers.cards import flashcards, self_check
from helpers.exercises.lesson03 import OPERATIONS, SimulatedGPU
from helpers.roofline import CHIPS, chip_for, chip_table, plot, timed_point
from helpers.solutions import load_solution
from helpers.traffic import eager_traffic, triton_traffic

import time

import torch
import triton
import triton.language as tl

print(describe())

# %% [markdown]
# ## Two budgets
#
# A kernel spends two budgets at once. It moves bytes between device memory (HBM) and the chip, at
# most at the memory's *bandwidth* (bytes per second); and it does floating-point operations, at
# most at the chip's *peak* (FLOP per second). Both happen in parallel, so the kernel takes at least
#
# $$t \;\ge\; \max\left(\frac{\text{bytes}}{\text{bandwidth}},\; \frac{\text{FLOPs}}{\text{peak}}\right).$$
#
# Which term wins depends on one ratio of the kernel, its **arithmetic intensity**
#
# $$I = \frac{\text{FLOPs}}{\text{bytes moved}} \quad (\text{FLOP per byte}),$$
#
# and one ratio of the chip, its **ridge point** `peak / bandwidth`. Below the ridge a kernel is
# *memory-bound*: the arithmetic units wait for data, and the best it can reach is `I × bandwidth`
# FLOP/s. Above it, a kernel is *compute-bound*: memory keeps up, and the arithmetic is the limit.
#
# "Bytes moved" here means traffic to device memory. The fewest bytes an operation *must* move (each
# input read once, each output written once) gives its intensity as an algorithm; a kernel that
# reads something twice has a lower intensity than its algorithm.

# %% [markdown]
# ## What real chips can do
#
# The datasheet figures of three data-centre GPUs (dense arithmetic, no sparsity). `fp16` is the
# rate of the tensor cores on float16 inputs (bfloat16 is the same); `fp32` is the rate of the
# ordinary float32 units, which is what elementwise code uses.

# %%
print(chip_table())

# %% [markdown]
# Read the ridge column as "FLOPs a kernel must do per byte to keep the chip busy". An H100 needs
# about 295 tensor-core FLOPs per byte; a float32 vector add does one addition per 12 bytes. The H200
# has the same arithmetic as the H100 and 43% more bandwidth, so its ridge is lower: more kernels are
# compute-bound on it, and memory-bound ones simply run faster.
#
# Datasheet peaks are not reached in practice. The cell below prints what `make bench` measured on
# each GPU it ran on: a large device-to-device copy (bytes read plus bytes written) and the best
# float16 matmul cuBLAS reached, each against the datasheet figure above. Those measured ceilings
# are the real roofs; the roofline plot further down draws them.

# %%
for device in recorded_devices():
    data, chip = recorded(device), chip_for(device)
    cublas = [r for r in data["results"] if r["impl"].startswith("cuBLAS") and "fp16" in r["group"]]
    print(f"{device}:")
    print(f"  copy:  {data['copy_gbps'] / 1000:.2f} TB/s" +
          (f", {100 * data['copy_gbps'] / 1000 / chip.bandwidth_tbs:.0f}% of the datasheet's "
           f"{chip.bandwidth_tbs} TB/s" if chip else "") + f" (recorded {data['date']})")
    if cublas:
        best = max(cublas, key=lambda r: r["tflops"])
        print(f"  cuBLAS fp16 matmul, best size ({best['label']}): {best['tflops']:.0f} TFLOP/s" +
              (f", {100 * best['tflops'] / chip.tflops['fp16']:.0f}% of the datasheet's "
               f"{chip.tflops['fp16']:.0f} TFLOP/s" if chip else "") + f" (recorded {best['date']})")
if not recorded_devices():
    print("no GPU figures recorded yet (run `make bench` on a GPU)")

# %% [markdown]
# ## Counting FLOPs and bytes
#
# A vector add of `n` float32 elements does `n` additions and must move `3n` elements of 4 bytes:

# %%
def vector_add_reference(x, y):
    return x + y  # read 2n elements, write n: 12n bytes for n FLOPs


n = 10_000
x, y = torch.randn(n), torch.randn(n)
meter = eager_traffic(vector_add_reference, x, y)
print(meter, f"-> intensity {n / meter.bytes:.3f} FLOP/byte")

# %% [markdown]
# An intensity of 1/12 is more than 3,000 times below the H100's fp16 ridge and 240 times below its
# fp32 ridge: a vector add is as memory-bound as a kernel gets, and its speed is best reported in
# GB/s.
#
# A matrix multiply `C = A @ B`, with `A` of shape (M, K) and `B` of shape (K, N), is the opposite
# case. Each of the M·N outputs is a dot product of length K: K multiplications and K additions. It
# must read A and B and write C once. For square matrices of size n in float16 that is `2n³` FLOPs
# for `6n²` bytes, an intensity of `n / 3`: it grows with the size, which is why large matmuls are
# what keeps tensor cores busy.

# %% [markdown]
# ### Exercise 1 · The cost of a matmul
#
# Write `matmul_cost(M, N, K, dtype)`, returning a dict with the FLOPs (count a multiply and an add
# as two) and the fewest bytes the operation must move (A and B read once, C written once, in
# `dtype`). `torch.empty((), dtype=dtype).element_size()` gives the bytes of one element.

# %% tags=["exercise"]
def matmul_cost(M, N, K, dtype):
    """{"flops": ..., "bytes": ...} of C = A @ B with A (M, K), B (K, N), all of `dtype`."""
    # YOUR CODE HERE: count the multiply-adds of M*N dot products of length K (2 FLOPs each), and
    # the bytes of A and B read once and C written once.
    raise NotImplementedError("write matmul_cost")


# %%
check("matmul_cost", matmul_cost)

# %% [markdown]
# ## The roofline
#
# Put the two budgets on one plot: intensity on the x axis, achievable FLOP/s on the y axis, both
# logarithmic. The best any kernel of intensity `I` can do is
#
# $$\text{attainable} = \min(\text{peak},\; I \times \text{bandwidth}),$$
#
# a sloped line (memory-bound) that meets a flat one (compute-bound) at the ridge. A kernel's
# measured FLOP/s is a point below that roof; how far below says how much room is left.
#
# ### Exercise 2 · The roofline formula
#
# Write `roofline(flops, nbytes, peak_tflops, bandwidth_tbs)`. It returns the intensity, which side
# of the ridge the operation is on (`"memory"` if the intensity is below the ridge, else
# `"compute"`), and the attainable TFLOP/s. Units line up neatly: FLOP/byte times TB/s is TFLOP/s.

# %% tags=["exercise"]
def roofline(flops, nbytes, peak_tflops, bandwidth_tbs):
    """{"intensity": FLOP/byte, "bound": "memory" or "compute", "tflops": the roof at that intensity}."""
    # YOUR CODE HERE: intensity = flops / nbytes; the ridge is peak_tflops / bandwidth_tbs.
    raise NotImplementedError("write roofline")


# %%
check("roofline", roofline)

# %% [markdown]
# With both functions you can size up an operation in two lines, for example a float16 matmul of
# 2048³ on each chip:

# %%
if passed("matmul_cost", "roofline"):
    cost = matmul_cost(2048, 2048, 2048, torch.float16)
    for chip in CHIPS.values():
        verdict = roofline(cost["flops"], cost["bytes"], chip.tflops["fp16"], chip.bandwidth_tbs)
        print(f"{chip.name:<15} intensity {verdict['intensity']:6.0f}  {verdict['bound']:>7}-bound, "
              f"at most {verdict['tflops']:5.0f} TFLOP/s")

# %% [markdown]
# ### Exercise 3 · Which side of the ridge?
#
# Predict, for each operation below, whether it is memory- or compute-bound on an H100 SXM. Work out
# its FLOPs and the fewest bytes it must move, and compare the intensity with the ridge of the units
# it runs on: the fp16 tensor-core ridge (about 295) for float16 matmuls, the fp32 ridge (about 20)
# for float32 elementwise work. Some answers are surprising; that is the point. The check says how
# many of your ten are wrong, not which.

# %%
for key, description in OPERATIONS.items():
    print(f"{key:>24}: {description}")

# %% tags=["exercise"]
def ridge_predictions():
    """{"vector_add_fp32": "memory" or "compute", ...}: one answer for each key of OPERATIONS."""
    # YOUR CODE HERE: return a dict with all ten keys. matmul_cost and roofline help with the matmuls.
    raise NotImplementedError("make your ten predictions")


# %%
check("ridge_predictions", ridge_predictions)

# %% [markdown]
# What the answers say:
#
# - A **512³ matmul** is memory-bound on an H100 by the roofline: its intensity, 512 / 3 = 171, is
#   under the ridge of 295. That is the roofline's answer, and the check's. The real kernel is held
#   back by something else first, as the next section shows.
# - Applying a layer to **16 tokens** reads the whole 8192 × 8192 weight for 16 rows of output:
#   about 16 FLOP per byte. This is why generating text one token at a time (LLM decoding) is
#   limited by memory bandwidth, and why batching requests helps.
# - A short inner dimension (**K = 64**) makes the output, not the inputs, the bulk of the traffic.
# - **Attention scores** written to memory are memory-bound even though they come from a matmul:
#   the N × N output dwarfs the inputs. FlashAttention (lesson 06) never writes them.
# - A float32 polynomial of degree 100 does enough work per element to cross the fp32 ridge:
#   elementwise code can be compute-bound, if it computes a lot.
#
# ## A third regime: too small to fill the GPU
#
# The roofline assumes the whole chip is at work. A small kernel cannot keep it so. A matmul is
# split into output tiles, one per program (lesson 04); a 512 × 512 output makes few of them:

# %%
sms = CHIPS["H100 SXM"].sms
for tile in (64, 128):
    print(f"512 x 512 output in tiles of {tile} x {tile}: {(512 // tile) ** 2} programs, for {sms} SMs")

# %% [markdown]
# With large tiles most SMs get nothing to do; with small ones, at most one program each, where an
# SM needs several at once to hide the wait for memory. And each program walks K = 512 in a handful
# of steps, so the kernel ends about as soon as its loads start to flow: the fixed cost of starting
# it is a large share of so short a run. Neither bandwidth nor arithmetic is the limit then.
#
# The recording shows it. For each size, cuBLAS's time and rate, and the roof at that size: the
# smaller of the datasheet peak and the intensity times the measured copy bandwidth.

# %%
by_gpu, titles, roofs = {}, {}, {}
for device in recorded_devices():
    by_size, where = recorded_rows("matmul_by_size_fp16", device)
    chip_rec = chip_for(device)
    if not by_size or not chip_rec:
        continue
    by_gpu[device], titles[device], roofs[device] = by_size, f"cuBLAS float16 matmul, {where}", {}
    for r in by_size:
        memory_roof = (r["size"] / 3) * r["copy_gbps"] / 1000  # intensity n/3 times TB/s: TFLOP/s
        roofs[device][r["label"]] = min(chip_rec.tflops["fp16"], memory_roof)
if by_gpu:
    show("matmul_by_size_fp16", by_gpu, titles, roof=roofs)   # cuBLAS by size, its roof dashed
for device, by_size in by_gpu.items():
    print(f"{device}:")
    for r in by_size:
        roof = roofs[device][r["label"]]
        side = "compute" if roof == chip_for(device).tflops["fp16"] else "memory"
        print(f"  {r['label']:>7}: {1000 * r['ms']:7.1f} µs, {r['tflops']:6.1f} TFLOP/s, "
              f"roof {roof:4.0f} TFLOP/s ({side}): {100 * r['tflops'] / roof:4.1f}% of its roof")

# %% [markdown]
# The 512³ matmul is on the memory side of the ridge, yet it reaches a small fraction of its memory
# roof: something other than bytes holds it back. This is the third regime, *too small to fill the
# GPU*: latency and occupancy, not bandwidth or arithmetic. The fraction of the roof climbs with
# the size until the tiles far outnumber the SMs and each program's loop is long. A point far under
# the roof does not always mean wasted bytes: count the programs too.
#
# ## Counted bytes: a matmul with no reuse
#
# Intensity as an algorithm assumes each input is read once. A kernel may read far more. Here is a
# matmul written the simplest way: each program takes one row of A and a strip of `BLOCK_N` columns
# of B, and walks along K.

# %% [markdown]
# The kernel addresses matrices, not vectors. A matrix is stored one row after another, so row `m`
# of A starts `m * stride_am` elements after `a_ptr`. The **stride** counts the elements from one
# row to the next (K, for a contiguous A); `stride_ak` counts those from one column to the next
# (1). So `a_ptr + m * stride_am + offs_k * stride_ak` addresses `BLOCK_K` elements of row `m`:
# the row's start, plus the column offsets, as in lesson 01.
#
# B's load does the same in two dimensions. `offs_k[:, None]` is a column of row indices and
# `offs_n[None, :]` a row of column indices; added, they broadcast into a `BLOCK_K` × `BLOCK_N` grid
# of addresses, one per element. The launcher passes the strides PyTorch reports (`*a.stride()`),
# so the kernel assumes no layout. Lesson 04 teaches strides in full.

# %%
@triton.jit
def rowwise_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                          stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                          BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """C[m, n0:n0+BLOCK_N] = A[m, :] @ B[:, n0:n0+BLOCK_N]: one row of A against a strip of B."""
    m = tl.program_id(0)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        a = tl.load(a_ptr + m * stride_am + offs_k * stride_ak, mask=offs_k < K, other=0.0)
        b = tl.load(b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn,
                    mask=(offs_k[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc += tl.sum(a.to(tl.float32)[:, None] * b.to(tl.float32), axis=0)
    tl.store(c_ptr + m * stride_cm + offs_n * stride_cn, acc.to(c_ptr.dtype.element_ty), mask=offs_n < N)


def rowwise_matmul(a, b, BLOCK_N=64, BLOCK_K=64):
    """a @ b, one program per (row of a, strip of BLOCK_N columns of b)."""
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    grid = (M, triton.cdiv(N, BLOCK_N))
    rowwise_matmul_kernel[grid](a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride(),
                                BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K)
    return c


# %% [markdown]
# It computes the right thing; now count what it moves, with the traffic meter, against what the
# matmul must move:

# %%
M, N, K = 16, 64, 64
a = torch.randn(M, K, device=DEVICE, dtype=torch.float16)
b = torch.randn(K, N, device=DEVICE, dtype=torch.float16)
ok = torch.allclose(rowwise_matmul(a, b).float(), a.float() @ b.float(), atol=1e-2, rtol=1e-2)
print("matches torch:", ok)

counted = triton_traffic(rowwise_matmul, a, b)
least = eager_traffic(torch.matmul, a, b)
print("rowwise kernel:", counted)
print("the matmul must move:", least.bytes, "bytes")
print(f"intensity: {2 * M * N * K / counted.bytes:.2f} FLOP/byte counted, "
      f"{2 * M * N * K / least.bytes:.1f} as an algorithm")

# %% [markdown]
# Every program reads a whole K × `BLOCK_N` strip of B, and there is one program per row of A, so B
# is read M times: about `M·K·N` elements, for `2·M·N·K` FLOPs. In float16 that is one FLOP per
# byte, whatever the size, far below any ridge. The formula, checked against the meter:

# %%
def rowwise_bytes(M, N, K, BLOCK_N=64, itemsize=2):
    strips = -(-N // BLOCK_N)  # ceil(N / BLOCK_N) programs per row of A
    return itemsize * (M * K * strips + M * K * N + M * N)  # A per strip, B per row, C once


print(rowwise_bytes(M, N, K), "bytes by the formula;", counted.bytes, "counted")

# %% [markdown]
# The meter counts the bytes the kernel asks for, which is not exactly what HBM moves. On a GPU the
# repeated reads of B are partly served by the L2 cache, so HBM sees less than the count. The other
# way round, memory moves whole 32-byte sectors: a strided or scattered load (a column of a row-major
# matrix, a gather) fetches a full sector for every element it uses, and HBM sees more than the
# count. This kernel's loads are contiguous rows, so for it the count is an upper bound.
#
# Either way the kernel wastes the tensor cores: it uses no `tl.dot`, and it reloads B for every row.
# Here is what that costs, beside cuBLAS on the same sizes (measured now on a GPU, else recorded):

# %%
def rowwise_benches():
    benches = []
    for n_r in (1024, 2048, 4096):
        a_r, b_r = (torch.randn(n_r, n_r, device=DEVICE, dtype=torch.float16) for _ in range(2))
        impls = {"row-at-a-time (Triton)": lambda a_r=a_r, b_r=b_r: rowwise_matmul(a_r, b_r),
                 "cuBLAS (torch.matmul)": lambda a_r=a_r, b_r=b_r: a_r @ b_r}
        benches.append(Bench("rowwise_matmul_fp16", n_r, bytes=6 * n_r**2, flops=2 * n_r**3,
                             label=f"{n_r}^3", metric="TFLOP/s", impls=impls))
    return benches


compare("rowwise_matmul_fp16", rowwise_benches);

# %% [markdown]
# Lesson 04 fixes both with *tiles*: a program computes a block of C, so each value of A and B it
# loads is used `BLOCK_N` or `BLOCK_M` times.
#
# ## Your kernels on the roofline
#
# Now place kernels from lessons 01 to 03 on the roofline, beside eager PyTorch and cuBLAS. Each
# point sits at the intensity of its *operation* (FLOPs over the fewest bytes the operation must
# move) and at the TFLOP/s the implementation reached: measured now on a GPU, or else as `make bench`
# recorded it. An implementation that moves more than the minimum shows up *below* the roof, by about
# the factor of extra bytes; the meters tell us that factor here, on small inputs. The kernels of
# lessons 01 and 02 are the course's solutions, which compute what your exercises did.

# %%
lesson01, lesson02 = load_solution("01"), load_solution("02")

v = torch.randn(4096, device=DEVICE)
xm, bias = torch.randn(64, 256, device=DEVICE), torch.randn(256, device=DEVICE)
per_element = {  # bytes per element, counted by the meters
    "vector add (lesson 01)": triton_traffic(lesson01.add, v, v).bytes / v.numel(),
    "eager chain (lesson 02)": eager_traffic(lesson02.chain_eager, xm, bias, xm, 0.5).bytes / xm.numel(),
    "fused chain (lesson 02)": triton_traffic(lesson02.fused_chain, xm, bias, xm, 0.5).bytes / xm.numel(),
}
for name, nbytes in per_element.items():  # the minimum: read two float32 inputs, write one output
    print(f"{name:>24}: {nbytes:5.1f} bytes per element counted, {nbytes / 12:.1f}x the minimum of 12")

# %% [markdown]
# The eager chain moves three times the minimum, as lesson 02 counted. The fused kernel's count
# includes the bias, read once per element: on a GPU those repeated reads of a small vector (32 KB at
# the size timed below) are served by the cache, so HBM sees about the minimum. The row-at-a-time
# matmul, by the formula above, asks for about `n / 3` times its minimum: some 1,400 times for
# n = 4096 (the cache absorbs part of it, but far from all).
#
# Each point gets a name, its FLOPs and minimum bytes at the size that is timed, the function, a way
# to make its inputs on a GPU, and where to find its time in the recording (group, implementation,
# size). On a CPU nothing is run.

# %%
def gpu_randn(*shape, dtype=torch.float32):
    return torch.randn(*shape, device="cuda", dtype=dtype)


def chain_inputs():
    return gpu_randn(rows, cols), gpu_randn(cols), gpu_randn(rows, cols), 0.5  # x, bias, residual, scale


def square_fp16(n=None):  # two distinct matrices: one tensor passed twice would be read from cache
    return [gpu_randn(n or n_mm, n or n_mm, dtype=torch.float16) for _ in range(2)]


n_add, rows, cols, n_mm = 2**24, 8192, 8192, 4096
points = [
    timed_point("vector add (lesson 01)", n_add, 12 * n_add, lesson01.add,
                lambda: [gpu_randn(n_add) for _ in range(2)], ("vector_add", "triton", n_add)),
    timed_point("eager chain (lesson 02)", 4 * rows * cols, 12 * rows * cols, lesson02.chain_eager,
                chain_inputs, ("fused_chain", "torch eager (4 kernels)", rows * cols)),
    timed_point("fused chain (lesson 02)", 4 * rows * cols, 12 * rows * cols, lesson02.fused_chain,
                chain_inputs, ("fused_chain", "triton fused", rows * cols)),
    timed_point("softmax over rows of 4096 (eager)", 5 * 2**26, 8 * 2**26, torch.softmax,
                lambda: (gpu_randn(2**14, 4096), -1), ("eager_ops_fp32", "softmax, rows of 4096", 2**26)),
    timed_point(f"row-at-a-time matmul {n_mm}³ (this lesson)", 2 * n_mm**3, 6 * n_mm**2, rowwise_matmul,
                square_fp16, ("rowwise_matmul_fp16", "row-at-a-time (Triton)", n_mm)),
]
for n_cu in (512, 2048, 8192):  # float16: 2n³ FLOPs, each of the three matrices moved once
    points.append(timed_point(f"cuBLAS matmul {n_cu}³", 2 * n_cu**3, 6 * n_cu**2, torch.matmul,
                              lambda n_cu=n_cu: square_fp16(n_cu),
                              ("matmul_by_size_fp16", "cuBLAS (torch.matmul)", n_cu)))

for p in points:
    timing = f"{p.tflops:8.3f} TFLOP/s {p.bytes / p.ms / 1e6:6.0f} GB/s" if p.ms else "  (no timing recorded)"
    print(f"{p.name:>42}: {p.intensity:8.2f} FLOP/B {timing}")

# %% [markdown]
# The plot uses the chip the timings come from (an H100 if there are none):

# %%
device_name = torch.cuda.get_device_name() if ON_GPU else (recorded() or {}).get("device", "")
chip = chip_for(device_name) or CHIPS["H100 SXM"]
ax = plot(points, chip=chip, title=f"Kernels of lessons 01-03 on the roofline of the {chip.name}")

# %% [markdown]
# How to read it:
#
# - The elementwise points sit far left, where only bandwidth matters. The vector add and the fused
#   chain are close to the roof: they move about the minimum and run near the memory's speed. The
#   eager chain does the same work at the same intensity but sits about three times lower: it moves
#   three times the bytes. Fusion closes that gap. No point rises above the datasheet roof; the
#   dashed measured roof is the copy's, a stream of half reads and half writes, and a kernel that
#   reads two bytes for each one it writes can sit a hair above it (lesson 02 printed such cases).
# - cuBLAS climbs with the size: a 512³ matmul sits far under its memory roof (too small to fill the
#   chip, the third regime), while large ones sit near the flat roof.
# - The row-at-a-time matmul has the intensity of a large matmul as an operation, but it re-reads
#   B for every row and uses no tensor cores, so it lands far below the roof. No tuning fixes that;
#   tiles do (next lesson).
#
# A hollow point has no timing (no GPU here, and nothing recorded for it yet): it is drawn on the
# roof, the best it could do.
#
# ## Benchmarking honestly
#
# A GPU timing is easy to get wrong, and a wrong timing is usually *too good*. The rules:
#
# 1. **Synchronize.** A launch returns before the GPU has done anything. Read the clock only after
#    `torch.cuda.synchronize()`, or time with CUDA events recorded on the device itself.
# 2. **Warm up.** The first call compiles the kernel (Triton), autotunes it, loads modules and
#    allocates memory; a GPU idling at low clocks also needs a moment to speed up. Run a few times
#    before timing.
# 3. **Repeat and take the median.** Runs vary, and now and then one is disturbed by other work;
#    the median ignores such outliers, a mean does not.
# 4. **Keep the cache out of it.** An input smaller than the L2 cache (50 MB on an H100), timed
#    over and over, is read from the cache, not from HBM. Use inputs larger than L2 and rotate
#    among several, or flush the cache before each run.
# 5. **Never time zeros.** An output buffer that is never written holds zeros or stale values and
#    a check on zeros cannot see it; and some units run measurably faster on zeros than on real
#    data. Time on random inputs you have checked the output of.
# 6. **Report a rate against a ceiling**: GB/s against the copy bandwidth for memory-bound kernels,
#    TFLOP/s against cuBLAS for compute-bound ones, not bare milliseconds.
#
# `triton.testing.do_bench` (which `helpers.bench.measure` calls) does most of 1 to 4 for you: it
# times with CUDA events, warms up for 25 ms, runs for about 100 ms more, and clears the L2 cache
# before every timed run by writing a 256 MB buffer. What it returns is your choice, and its default
# is the *mean* (`return_mode="mean"`): pass `return_mode="median"` for rule 3, as `measure` does.
#
# ### A timing that lies
#
# Here is the timing everyone writes first:

# %%
def naive_time_ms(launch, inputs, clock, synchronize):
    start = clock()
    launch(inputs[0])
    return (clock() - start) * 1e3


# %% [markdown]
# To see what it gets wrong without a GPU, run it on `SimulatedGPU`, a pretend device with a clock
# that behaves like a real one where timing is concerned: a launch returns at once and the work
# queues; the first launch compiles; an input used by the previous launch is served from cache, 3x
# faster; runs vary, and about one in ten is slowed by other work. Its kernel takes 0.5 ms:

# %%
gpu = SimulatedGPU(kernel_ms=0.5, seed=1)
print(f"naive timing: {naive_time_ms(gpu.launch, gpu.buffers(4), gpu.clock, gpu.synchronize):.2f} ms "
      f"for a 0.5 ms kernel (this simulated GPU takes {gpu.compile_ms:.0f} ms to compile it)")

# %% [markdown]
# It timed the compilation, and not even the kernel, since nothing waited for it. Fix the
# warm-up alone and it reports the launch (a few microseconds); add a `synchronize` and it times one
# run, which may be a slow one, or a cached one if the warm-up used the same input.
#
# ### Exercise 4 · An honest timer
#
# Write `time_ms(launch, inputs, clock, synchronize, warmup=5, reps=50)`, the timer that follows
# rules 1 to 4: `launch(x)` starts the work on input `x` and returns at once, `inputs` is a list of
# input buffers, `clock()` reads the host clock in seconds, `synchronize()` waits until the device
# has finished. Return the median time of one run, in milliseconds. The check runs your timer on
# simulated GPUs, once with its own `warmup` and `reps`, and tells you which rule it broke. It counts
# the timed runs that reuse the input of the run before, even where the median hides them: rotate
# through `inputs` in turn (a random pick repeats the previous input one time in `len(inputs)`).

# %% tags=["exercise"]
def time_ms(launch, inputs, clock, synchronize, warmup=5, reps=50):
    """The median time of one launch(x), in milliseconds, rotating x through inputs."""
    # YOUR CODE HERE: a few warm-up launches, then synchronize. Then `reps` runs, each on the next
    # input in turn: read the clock, launch, synchronize, read the clock. Return the median in ms.
    raise NotImplementedError("write the honest timer")


# %%
check("time_ms", time_ms)

# %% [markdown]
# On a GPU, the next cell times a real kernel three ways: the naive timer, your timer (with
# `time.perf_counter` as the clock and four 256 MB inputs, together far larger than L2), and
# `do_bench`. The last two should agree within about 10%: your timer also counts the launch and the
# synchronisation on every run, which CUDA events leave out. Without a GPU it runs your timer on a
# simulated one.

# %%
if passed("time_ms"):
    if ON_GPU:
        inputs = [torch.randn(2**26, device=DEVICE) for _ in range(4)]
        double = lambda x: x * 2  # noqa: E731  (reads 256 MB, writes 256 MB)
        clock, sync = time.perf_counter, torch.cuda.synchronize
        print(f"naive:      {naive_time_ms(double, inputs, clock, sync):8.3f} ms")
        print(f"time_ms:    {time_ms(double, inputs, clock, sync):8.3f} ms")
        print(f"do_bench:   {measure(lambda: double(inputs[0])):8.3f} ms")
    else:
        gpu = SimulatedGPU(kernel_ms=0.5, seed=2)
        measured = time_ms(gpu.launch, gpu.buffers(4), gpu.clock, gpu.synchronize)
        print(f"time_ms on a simulated 0.5 ms kernel: {measured:.3f} ms")

# %% [markdown]
# Rule 5 on a real GPU: the next cell times one float16 matmul of 8192³ on zeros and on random
# numbers. Same instructions, same bytes; any difference comes from the data (flipping fewer bits
# draws less power, which can let the clocks stay higher, so zeros can run faster). `make bench` has
# not recorded that comparison, so without a GPU the cell only says so; what it recorded for cuBLAS
# on random data, by size, is the plot of the third regime above.

# %%
def zeros_benches():
    n = 8192
    zeros = torch.zeros(n, n, device=DEVICE, dtype=torch.float16)
    rand = torch.randn(n, n, device=DEVICE, dtype=torch.float16)
    return [Bench("matmul_on_zeros", n, bytes=6 * n * n, flops=2 * n**3, label=f"{n}^3", metric="TFLOP/s",
                  impls={"random inputs": lambda: rand @ rand}),
            Bench("matmul_on_zeros", n, bytes=6 * n * n, flops=2 * n**3, label=f"{n}^3", metric="TFLOP/s",
                  impls={"zero inputs": lambda: zeros @ zeros})]


if ON_GPU:
    compare("matmul_on_zeros", zeros_benches)
else:
    print("No GPU here, and `make bench` has not recorded this comparison: cuBLAS on random inputs, "
          "by size, is plotted in the section on the third regime above.")

# %% [markdown]
# ## Takeaways
#
# - Arithmetic intensity = FLOPs / bytes moved. The ridge point = peak FLOP/s / bandwidth: about
#   295 FLOP/byte for an H100's tensor cores, 20 for its float32 units.
# - Below the ridge a kernel is memory-bound and its ceiling is `intensity × bandwidth`; measure it
#   in GB/s. Above, it is compute-bound; measure it in TFLOP/s.
# - Elementwise ops, reductions, matrix-vector products and skinny matmuls are memory-bound
#   (elementwise code crosses the ridge only if it computes a lot per element); large matmuls, and
#   attention done right, are compute-bound.
# - A third regime: a kernel too small to fill the GPU (a 512³ matmul) runs far under its roof,
#   held back by latency and occupancy. Count its programs against the SMs.
# - Count the bytes your kernel really moves, not just what the algorithm needs: re-reads lower
#   the intensity. Fusion and tiling raise it.
# - Time with synchronization or events, after a warm-up, over many runs, with a median, on inputs
#   larger than the cache, never on zeros; or use `do_bench`, which does most of this.

# %%
self_check("03")

# %%
flashcards("03")
