# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 01 · What a kernel is
#
# A *kernel* is a function that runs on the GPU. PyTorch calls thousands of them for you: every
# `x + y` on a CUDA tensor launches one, written by NVIDIA or the PyTorch team. In this course
# you write your own, in [Triton](https://triton-lang.org).
#
# **You will learn:**
# - what the host (CPU) and the device (GPU) each do, and what a *launch* is;
# - how a Triton kernel splits work into a *grid of programs*, each owning a block of elements;
# - why the last block needs a *mask*, and what happens without one;
# - why programs run in any order, and where their data lives (registers, shared memory, L2, HBM);
# - how the same vector add looks in CUDA C++;
# - why thousands of tiny kernels are slow (launch overhead);
# - when writing a custom kernel is worth it.
#
# Exercises: a vector add, and `alpha * x + y`. Each is graded by a `check(...)` call right after it.

# %% [markdown]
# ## Setting up
#
# `helpers` must be imported before `triton`: it decides, once, whether kernels run on a CUDA GPU or
# through Triton's interpreter on the CPU. Everything in this lesson works on both.

# %%
from helpers import DEVICE, ON_GPU, check, describe, passed
from helpers.bench import Bench, compare
from helpers.cards import flashcards, self_check
from helpers.interpreter import interpreted
from helpers.traffic import show_programs, triton_traffic

import torch
import triton
import triton.language as tl

print(describe())

# %% [markdown]
# ## Host and device
#
# Your Python program runs on the **host**, the CPU. The GPU, the **device**, has its own memory
# (HBM: tens of gigabytes, read at several terabytes per second) and a hundred-odd *streaming
# multiprocessors* (SMs) that do the arithmetic. A kernel touches only device memory, so tensors
# live there first (`device="cuda"`).
#
# Running a kernel is a **launch**: the host sends the device the kernel's code, its arguments and
# how many copies of it to run, then goes on with the next line of Python *without waiting*. The
# device works through launches in order. The host only waits when it needs a result, for example
# to print it, or when you call `torch.cuda.synchronize()`.
#
# Under the interpreter the "device" is the CPU and each launch is plain Python, run at once; the
# code you write is the same.

# %%
x = torch.arange(8, dtype=torch.float32, device=DEVICE)
y = x * 2  # one launch: PyTorch's multiply kernel, run on the device
print(y)   # printing needs the values, so the host waits for the device here

# %% [markdown]
# ## A first Triton kernel: copy
#
# A Triton kernel is a Python function decorated with `@triton.jit`. It is not called like a
# function: it is **launched on a grid**, a tuple saying how many *programs* (instances of the
# kernel) to run. Every program runs the same code; `tl.program_id(0)` tells each one which it is.
#
# We give each program a block of `BLOCK` consecutive elements. Program `pid` owns elements
# `pid * BLOCK` to `pid * BLOCK + BLOCK - 1`, so `tl.arange(0, BLOCK)` (a vector of `BLOCK`
# consecutive integers) gives its offsets. Pointers plus offsets address the elements;
# `tl.load` and `tl.store` move a whole block between device memory and the program's registers.
#
# The length `n` is rarely a multiple of `BLOCK`, so the last program's block runs past the end.
# The **mask** `offs < n` switches those lanes off: a masked-off lane loads nothing and stores nothing.
#
# A masked-off lane of `tl.load` still holds *some* value in the block, and it is undefined. When the
# code goes on to use those lanes (a sum over the block, a maximum), say what they should hold with
# `other=`: `tl.load(x_ptr + offs, mask=mask, other=0.0)` fills them with zeros. A copy never uses
# them, so it needs no `other`. (Triton's interpreter gives zeros there; the course has it give NaN
# instead, as good as undefined, so that a missing `other=` shows on the CPU too.)

# %%
@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """out[i] = x[i] for the BLOCK elements this program owns."""
    pid = tl.program_id(0)                     # which program am I?
    offs = pid * BLOCK + tl.arange(0, BLOCK)   # the element indices I own
    mask = offs < n                            # lanes past the end do nothing
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x, mask=mask)


# %% [markdown]
# The **launcher** is ordinary Python with three jobs: check the inputs, allocate the output, and
# launch on a grid. `triton.cdiv(n, BLOCK)` is `ceil(n / BLOCK)`: enough programs to cover every
# element. `BLOCK` is a `tl.constexpr`: a compile-time constant (a power of two), so each value gets
# its own compiled kernel.

# %%
def copy(x, BLOCK=256):
    """A copy of the vector x, made by copy_kernel."""
    assert x.dim() == 1 and x.is_contiguous(), "copy takes a contiguous vector"
    out = torch.empty_like(x)
    n = x.numel()
    grid = (triton.cdiv(n, BLOCK),)
    copy_kernel[grid](x, out, n, BLOCK=BLOCK)
    return out


x = torch.randn(1000, device=DEVICE)
print(torch.equal(copy(x), x))

# %% [markdown]
# A picture makes the grid concrete. Below, the 1,000 elements are laid out in rows of 50 and
# coloured by the program that wrote them: four programs of 256, the last one covering only 232
# elements because of the mask. (The picture is drawn by running the kernel through the interpreter
# and recording every store, so it is what the kernel really did.)

# %%
show_programs(copy, torch.randn(1000, device=DEVICE), arg="out_ptr", shape=(20, 50));

# %% [markdown]
# ### What the mask is for
#
# Drop the mask and the last program reads and writes 24 elements past the end of the tensors. On a
# GPU that is undefined behaviour: it may crash, or silently overwrite a neighbouring tensor. Under
# the interpreter the course's harness checks every address and stops the kernel with an error
# instead. Here is that error:

# %%
@triton.jit
def copy_kernel_no_mask(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs))


with interpreted():  # run Triton kernels through the interpreter, even on a GPU
    x = torch.randn(1000)
    try:
        copy_kernel_no_mask[(triton.cdiv(1000, 256),)](x, torch.empty_like(x), 1000, BLOCK=256)
    except Exception as error:
        print(error.__cause__)  # the interpreter wraps the harness's OutOfBounds error

# %% [markdown]
# (`interpreted()` runs the unmasked kernel on the CPU even when you have a GPU: only the
# interpreter can catch out-of-bounds accesses, and on a real GPU they could corrupt memory.)
#
# ## Exercise 1 · Vector add
#
# Write `add_kernel`: each program adds one block of `x` and `y` into `out`, with a mask for the
# ragged tail. The launcher is written for you. The reference is `x + y`, which reads `2n`
# elements and writes `n`.
#
# `check` runs your `add` on fresh random vectors of awkward lengths (1, 1001, 4097, a large prime,
# a strided view: all odd, so no block size divides them) and compares with `x + y`. It fills the
# output with a poison value first, so an element your kernel forgets to write is reported, not
# hidden. It also launches your `add_kernel` with other values of `BLOCK`: the launcher passes 1024,
# and a kernel with 1024 written in where `BLOCK` belongs fails there. Without a GPU it also hands
# your kernel to Triton's compiler, as a GPU would (built for an H100, on the CPU; nothing runs):
# the interpreter runs a kernel as Python, a line at a time, and lets through what the compiler
# refuses, such as a plain global `BLOCK = 1024` read inside the kernel (a kernel reads only globals
# made `tl.constexpr`) or a running sum that starts as float16 and becomes float32 in a loop.
# `check` then says what the compiler said.

# %% tags=["exercise"]
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """out[i] = x[i] + y[i] for the BLOCK elements this program owns."""
    # YOUR CODE HERE: compute this program's offsets and mask as in copy_kernel,
    # load a block of x and of y, and store their sum into out.
    pass


def add(x, y):
    """x + y for two vectors of the same length."""
    assert x.shape == y.shape and x.dim() == 1, "add takes two vectors of the same length"
    x, y = x.contiguous(), y.contiguous()  # the kernel walks memory one element after another
    out = torch.empty_like(x)
    n = out.numel()
    grid = (triton.cdiv(n, 1024),)
    add_kernel[grid](x, y, out, n, BLOCK=1024)
    return out


# %%
check("vector_add", add)

# %% [markdown]
# ## How the programs of a grid run
#
# The GPU hands the programs of a launch to its SMs. Each SM runs several programs at once, as many
# as its resources allow (registers and shared memory above all: next section), and takes a new one
# whenever one finishes, until the grid is done.
#
# So the programs of one launch run in **any order**, possibly at the same time, and they **cannot
# wait for each other**. A program that waited for another could wait forever: there may be more
# programs than fit on the GPU at once, and the one it waits for may not have started.
#
# The only point where the whole grid is in step is the **end of the launch**: the next kernel
# starts once every program of this one has finished. That is why each program here writes its own
# block and reads nothing another program writes. A result that needs every program's work, such as
# the sum of a whole vector, takes a second launch, or atomic additions (lesson 06) that combine the
# programs' parts without waiting.

# %% [markdown]
# ## Where the data lives
#
# A GPU has several levels of memory. The nearer a level sits to the arithmetic, the faster and the
# smaller it is:
#
# - **registers**: private to each thread. The block that `tl.load` returns lives here, and so do
#   the values computed from it.
# - **shared memory**: on each SM, shared by the threads of one program. Triton stages tiles through
#   it for you (lesson 04's matmul).
# - **L2 cache**: one for the whole chip, shared by every SM. It keeps recently used data from HBM.
# - **HBM**: the device memory, where tensors live. A kernel's loads are served from here, unless L2
#   still holds the data.
#
# The next cell prints the sizes from NVIDIA's published figures for the two GPUs this course was
# measured on, and below them the copy ceiling that `make bench` measured on each.

# %%
from helpers.bench import copy_ceiling, recorded, recorded_devices
from helpers.roofline import chip_for, memory_table

print(memory_table(("H100 SXM", "H200")))
print("\nHBM copy ceiling, measured (bytes read + bytes written by a large copy):")
for device in recorded_devices():
    measured, chip = recorded(device)["copy_gbps"], chip_for(device)
    versus = f", {100 * measured / (1000 * chip.bandwidth_tbs):.0f}% of the datasheet" if chip else ""
    print(f"  {device}: {measured:.0f} GB/s{versus} (recorded by make bench)")
if ON_GPU:
    print(f"  {torch.cuda.get_device_name()}: {copy_ceiling():.0f} GB/s (measured now)")

# %% [markdown]
# Read the sizes first. All the registers and shared memory of the chip add up to tens of
# megabytes, and L2 to 50 or 60 MB; HBM holds over a thousand times as much. Any tensor of real size
# lives in HBM, and a kernel that reads it once must stream it from there.
#
# Then the bandwidth. The datasheets give none for registers, shared memory or L2; they are on the
# chip and far faster than HBM. HBM's is printed, and a real copy reaches only part of it, as the
# percentages show. The course measures memory-bound kernels against that measured copy, not the
# datasheet.
#
# Much of what follows is keeping data in the fast levels: fusion keeps intermediates in registers
# (lesson 02), a matmul reuses tiles from shared memory (lesson 04), FlashAttention never sends its
# big intermediate to HBM (lesson 06).

# %% [markdown]
# ## The same kernel in CUDA C++
#
# CUDA, NVIDIA's C++ dialect, works one level lower. A CUDA kernel is written for **one thread**,
# and you launch a grid of *thread blocks*; each thread computes its global index from
# `blockIdx.x`, `blockDim.x` and `threadIdx.x` and handles one element. The `if (i < n)` is the
# mask.

# %%
CUDA_ADD = r"""
__global__ void add_kernel(const float* x, const float* y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;  // one element per thread
    if (i < n) {                                    // the mask
        out[i] = x[i] + y[i];
    }
}

torch::Tensor add_cuda(torch::Tensor x, torch::Tensor y) {
    auto out = torch::empty_like(x);
    int n = x.numel();
    int threads = 256;                               // threads per block
    int blocks = (n + threads - 1) / threads;        // cdiv(n, threads)
    add_kernel<<<blocks, threads>>>(x.data_ptr<float>(), y.data_ptr<float>(),
                                    out.data_ptr<float>(), n);
    return out;
}
"""

# %% [markdown]
# Side by side:
#
# | | CUDA C++ | Triton |
# |---|---|---|
# | you write code for | one thread (one element) | one program (a block of elements) |
# | index | `blockIdx.x * blockDim.x + threadIdx.x` | `program_id(0) * BLOCK + tl.arange(0, BLOCK)` |
# | ragged tail | `if (i < n)` | `mask=offs < n` |
# | launch | `kernel<<<blocks, threads>>>(...)` | `kernel[grid](...)` |
# | threads, warps, shared memory, vector loads | yours to manage | the compiler's job |
#
# Triton's block is spread over the threads of a thread block by the compiler (`num_warps`
# warps of 32 threads); it also picks vector widths and staging through shared memory. That is
# why a Triton kernel is shorter than the CUDA code for the same work. Whether it is as fast is a
# question for measurement: the lessons that follow time each kernel beside PyTorch's and the
# libraries', on a GPU or from the figures recorded on one.
#
# With a GPU and NVIDIA's compiler `nvcc` present, the next cell compiles the CUDA version (about a
# minute, once) and checks it against PyTorch. Elsewhere it says why it did not.

# %%
import shutil

if ON_GPU and shutil.which("nvcc") and shutil.which("ninja"):
    from torch.utils.cpp_extension import load_inline

    cuda_module = load_inline("cuda_add", cuda_sources=CUDA_ADD, functions=["add_cuda"],
                              cpp_sources="torch::Tensor add_cuda(torch::Tensor x, torch::Tensor y);")
    a, b = torch.randn(10_001, device=DEVICE), torch.randn(10_001, device=DEVICE)
    print("CUDA add matches PyTorch:", torch.equal(cuda_module.add_cuda(a, b), a + b))
else:
    print("Not compiled here: that needs a CUDA GPU plus the nvcc and ninja tools. "
          "The Triton version above is the one this course builds on.")

# %% [markdown]
# ## Exercise 2 · `alpha * x + y`
#
# This time write both the kernel and the launcher. `alpha` is a Python float: pass it to the kernel
# like any other argument and it arrives as a scalar (`check` draws a new one, positive or negative,
# for every case). Leave it a plain argument, not a `tl.constexpr`: a constexpr is compiled into the
# kernel, so each new alpha would compile a new one. The reference reads `2n` elements and writes
# `n`, exactly like the add. One case gives float16 vectors, whose result is float16 too: allocate
# the output in the inputs' dtype. The check also counts your launches and their programs (one
# launch, on enough programs to cover the vector and none that covers nothing, at a length that is a
# multiple of BLOCK) and what moves through memory (nothing copied by PyTorch beside the kernel),
# and gives your launcher two vectors of different lengths, which it must refuse before the kernel
# runs.

# %% tags=["exercise"]
@triton.jit
def axpy_kernel(alpha, x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """out[i] = alpha * x[i] + y[i]; alpha is a scalar."""
    # YOUR CODE HERE: offsets, mask, two loads, one store.
    pass


def axpy(alpha, x, y):
    """alpha * x + y for a float alpha and two vectors of the same length."""
    # YOUR CODE HERE: check the shapes, make x and y contiguous, allocate the output,
    # launch axpy_kernel on enough programs of BLOCK = 1024, return the output.
    raise NotImplementedError("write axpy's launcher")


# %%
check("axpy", axpy)

# %% [markdown]
# ## Counting what a kernel moves
#
# A vector add does one addition per element and moves 12 bytes per element (two float32 reads,
# one write): it is limited by memory bandwidth, not arithmetic, so its speed is best measured in
# GB/s. The course's traffic meter runs a kernel through the interpreter and counts every byte it
# loads and stores (masked-off lanes excluded); it works with no GPU. Here it meters `copy`, from the
# start of the lesson: one float32 read and one write per element.

# %%
n = 1000
meter = triton_traffic(copy, torch.randn(n, device=DEVICE))
print(meter, f"= {meter.bytes // n} bytes per element for a float32 copy")

# %% [markdown]
# ## Launch overhead
#
# Every launch costs a fixed amount of time, however little work the kernel does. For a large
# vector that is nothing; for a tiny one it is everything. Below, your `add` of two vectors of 4M
# elements is done by one launch, and by one launch per 1024 elements (4096 launches). On a GPU the
# cell measures both now; elsewhere it shows the figures `make bench` recorded on each GPU. The lines
# under the tables, for the GPU they name (the first shown), divide the time of the 4096 launches by
# 4096, the cost of one launch, and set the single launch beside it.

# %%
def add_in_pieces(x, y, piece=1024):
    """The same x + y as add(x, y), made by one launch per `piece` elements."""
    out = torch.empty_like(x)
    n = x.numel()
    for start in range(0, n, piece):
        add_kernel[(1,)](x[start:], y[start:], out[start:], min(piece, n - start), BLOCK=piece)
    return out


def launch_benches():
    n = 2**22
    x, y = torch.randn(n, device=DEVICE), torch.randn(n, device=DEVICE)
    return [Bench("launch_overhead", n, bytes=3 * 4 * n, flops=n, label="n=2^22",
                  impls={"1 launch": lambda: add(x, y), "4096 launches": lambda: add_in_pieces(x, y)})]


if not ON_GPU or passed("vector_add"):  # on a GPU, this times your kernel
    rows = compare("launch_overhead", launch_benches)
    ms = {row["impl"]: row["ms"] for row in rows}
    if ms:
        per_launch = ms["4096 launches"] / 4096
        print(f"\n{rows[0].get('device') or torch.cuda.get_device_name()}:")   # recorded rows name theirs
        print(f"  4096 launches: {ms['4096 launches']:.1f} ms, that is {1000 * per_launch:.1f} µs per launch")
        print(f"  1 launch doing all the work: {1000 * ms['1 launch']:.1f} µs, "
              f"{ms['1 launch'] / per_launch:.1f}x the time of one small launch")

# %% [markdown]
# Read the last two lines together: the single launch does the work of all 4096 pieces in about the
# time that one small launch costs. So the time of a small launch is not the GPU working on its
# 12 KB; it is the host getting the launch out, while the GPU waits. Each piece runs Python code
# before anything reaches the GPU: the loop slices the tensors (`x[start:]`), then Triton's launcher
# binds the arguments to the kernel's parameters, inspects each one (its type; for an integer,
# whether it is 1 or a multiple of 16, since the compiled code may be specialised on that), looks the
# compiled kernel up in a cache, and only then asks the CUDA driver to launch it.
#
# This is why a model made of many small operations can leave a GPU mostly idle. The next lesson
# fuses operations: fewer launches, and, above all, fewer trips to memory.
#
# ## When is a custom kernel worth writing?
#
# PyTorch's own kernels (and cuBLAS, cuDNN behind them) are excellent at what they cover. Write your
# own when:
# 1. **a pattern the libraries miss**: an unusual op, layout or data type;
# 2. **fusion**: several ops that each read and write memory can run as one kernel that reads
#    once and writes once (lesson 02), or an algorithm restructured to avoid materialising a big
#    intermediate (FlashAttention, lesson 06).
#
# A lone `x + y` is not worth it: PyTorch's add already runs at the memory's speed.
#
# ## Takeaways
# - A kernel runs on the device; the host launches it asynchronously on a grid of programs.
# - In Triton each program handles a block: `offs = pid * BLOCK + tl.arange(0, BLOCK)`.
# - The mask `offs < n` keeps the last block in bounds; without it a GPU reads and writes garbage.
# - Programs run in any order and cannot wait for each other; only the end of a launch syncs the grid.
# - Tensors live in HBM; registers, shared memory and L2 are far smaller and faster, on the chip.
# - Every launch costs the host a fixed time (printed above, per launch): many tiny kernels leave the GPU
#   waiting.
# - Custom kernels pay off for uncovered patterns and, above all, fusion.

# %%
self_check("01")

# %%
flashcards("01")
