# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 04 · Triton basics: tiles, strides and a fast matmul
#
# Lessons 01 and 02 treated tensors as flat vectors. Real kernels work on matrices, which may be
# transposed or sliced views, and the most important of them, the matrix multiply, only runs fast
# if each program works on a 2-D *tile* and reuses what it loads. This lesson builds up to a tiled
# matmul that competes with cuBLAS, then fuses a bias and an activation into it.
#
# **You will learn:**
# - how a 2-D grid of programs covers a matrix, with 2-D offsets and masks;
# - what strides are, and how one kernel handles transposed, sliced and broadcast views;
# - what `tl.constexpr`, `num_warps` and `num_stages` control, and how `@triton.autotune` picks them;
# - a tiled matmul with `tl.dot` and a float32 accumulator, and why tiles raise the intensity;
# - grouped tile ordering, which makes programs that run together share what they load;
# - fusing an epilogue (bias + GELU) into the matmul;
# - reading the compiled code (Triton IR, PTX) on a GPU.
#
# Exercises: a 2-D add over strided views, grouped tile order, the tiled matmul, and the fused
# epilogue.

# %%
from helpers import DEVICE, ON_GPU, check, describe, passed, pick
from helpers.bench import ROOT, Bench, compare, recorded
from helpers.cards import flashcards, self_check
from helpers.roofline import CHIPS, chip_for, plot, timed_point
from helpers.solutions import load_solution
from helpers.traffic import eager_traffic, show_programs, triton_traffic

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
import triton
import triton.language as tl

print(describe())

# %% [markdown]
# ## From blocks to tiles
#
# In lesson 01 a program owned a block of `BLOCK` consecutive elements, `pid * BLOCK +
# tl.arange(0, BLOCK)`. For a matrix, launch a **2-D grid**: `tl.program_id(0)` picks a block of
# rows and `tl.program_id(1)` a block of columns. Each program then needs the offsets of a whole
# `BLOCK_M x BLOCK_N` tile, which broadcasting builds from two vectors: a column of row indices
# `offs_m[:, None]` and a row of column indices `offs_n[None, :]`. Here is the same arithmetic in
# PyTorch, for a 3 x 4 tile of a matrix with 10 columns:

# %%
offs_m = torch.arange(3)          # rows 0, 1, 2
offs_n = torch.arange(4)          # columns 0 .. 3
print(offs_m[:, None] * 10 + offs_n[None, :])  # flat offsets of a row-major tile: row * 10 + column

# %% [markdown]
# A worked example: scale a matrix by `alpha`, one tile per program. Both edges of the matrix can
# be ragged, so the mask is 2-D too: a lane is on if its row *and* its column are inside.

# %%
@triton.jit
def scale_2d_kernel(x_ptr, out_ptr, M, N, alpha, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """out = alpha * x for one BLOCK_M x BLOCK_N tile of a contiguous (M, N) matrix."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)   # this tile's rows
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)   # this tile's columns
    offs = offs_m[:, None] * N + offs_n[None, :]                   # row-major: row * N + column
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, alpha * x, mask=mask)


def scale_2d(x, alpha, BLOCK_M=32, BLOCK_N=32):
    """alpha * x for a contiguous (M, N) matrix, on a 2-D grid of tiles."""
    M, N = x.shape
    out = torch.empty((M, N), device=x.device, dtype=x.dtype)
    grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))  # tiles down, tiles across
    scale_2d_kernel[grid](x, out, M, N, alpha, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N)
    return out


x = torch.randn(20, 30, device=DEVICE)
print("matches:", torch.allclose(scale_2d(x, 2.0), 2.0 * x))

# %% [markdown]
# Which program wrote which element, with tiles of 8 x 8 (so the 20 x 30 matrix needs a 3 x 4 grid
# whose last row and column of tiles are partly masked). Each tile carries its program's ids,
# `(program_id(0), program_id(1))`:

# %%
show_programs(scale_2d, x, 2.0, BLOCK_M=8, BLOCK_N=8, arg="out_ptr", shape=(20, 30))
plt.show()

# %% [markdown]
# ## Strides
#
# The kernel above assumes row-major storage: element `(i, j)` at offset `i * N + j`. A PyTorch
# tensor is more general: a pointer, a shape, and one **stride** per dimension, the number of
# elements to skip to move one step along it. Element `(i, j)` lives at `i * stride(0) + j *
# stride(1)`. Views change the strides, not the data:

# %%
base = torch.arange(12.0).reshape(3, 4)
for name, view in [("base", base), ("base.t()", base.t()), ("base[:, ::2]", base[:, ::2]),
                   ("base[:1].expand(3, 4)", base[:1].expand(3, 4))]:
    print(f"{name:>22}: shape {tuple(view.shape)}, strides {view.stride()}, "
          f"contiguous {view.is_contiguous()}")

# %% [markdown]
# A transpose swaps the strides; a step slice doubles one; `expand` (broadcasting) uses a stride of
# 0, so every row reads the same memory. Give `scale_2d` a transposed view and it silently computes
# the wrong thing, because it reads memory as if the view were row-major:

# %%
xt = torch.randn(30, 20, device=DEVICE).t()   # a (20, 30) view whose columns are contiguous
print("matches on a transposed view:", torch.allclose(scale_2d(xt, 2.0), 2.0 * xt))

# %% [markdown]
# Lesson 02 fixed this by calling `.contiguous()` in the launcher, which costs a full copy. The
# better fix is to pass the strides and use them.
#
# ## Exercise 1 · A 2-D add over strided views
#
# Write `add_2d_kernel`: `out = x + y` for one tile, where `x`, `y` and `out` each come with their
# own strides. The launcher (written for you) passes `x.stride(0), x.stride(1)` and so on, and
# allocates a contiguous output. The check tries contiguous matrices, a transposed view, a view of
# every other column, and `y` broadcast from a single row with stride 0: that last one is a bias
# add, for free.

# %% tags=["exercise"]
@triton.jit
def add_2d_kernel(x_ptr, y_ptr, out_ptr, M, N,
                  stride_xm, stride_xn, stride_ym, stride_yn, stride_om, stride_on,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """out = x + y for one BLOCK_M x BLOCK_N tile; every tensor has its own strides."""
    # YOUR CODE HERE: the tile's row and column offsets and its 2-D mask, as in scale_2d_kernel;
    # then address each tensor with offs_m[:, None] * stride_?m + offs_n[None, :] * stride_?n.
    pass


def add_2d(x, y):
    """x + y for two (M, N) tensors of any strides; the result is contiguous."""
    assert x.shape == y.shape and x.dim() == 2, "add_2d takes two matrices of the same shape"
    M, N = x.shape
    out = torch.empty((M, N), device=x.device, dtype=x.dtype)
    BLOCK = pick(cpu=32, gpu=64)
    grid = (triton.cdiv(M, BLOCK), triton.cdiv(N, BLOCK))
    add_2d_kernel[grid](x, y, out, M, N, x.stride(0), x.stride(1), y.stride(0), y.stride(1),
                        out.stride(0), out.stride(1), BLOCK_M=BLOCK, BLOCK_N=BLOCK)
    return out


# %%
check("add_2d", add_2d)

# %% [markdown]
# Strided access is correct, but not free on a GPU: neighbouring lanes of a load should touch
# neighbouring addresses, so that a warp's loads combine into a few wide memory transactions
# (*coalescing*). Reading a transposed view along its rows strides through memory. Triton
# rearranges tiles through shared memory to keep loads coalesced where it can; the benchmark below
# adds a row-major matrix to a transposed one, against PyTorch doing the same.

# %%
def add_2d_benches():
    n = 8192
    xg, yg = torch.randn(n, n, device=DEVICE), torch.randn(n, n, device=DEVICE).t()
    return [Bench("add_2d_fp32", n * n, bytes=3 * 4 * n * n, flops=n * n, label=f"{n}x{n}, y transposed",
                  impls={"triton": lambda: add_2d(xg, yg), "torch": lambda: xg + yg})]


if not ON_GPU or passed("add_2d"):  # on a GPU, this times your kernel
    timings = compare("add_2d_fp32", add_2d_benches)

# %% [markdown]
# ## Compile-time constants, warps and stages
#
# A Triton kernel is compiled for the values of its `tl.constexpr` arguments: block shapes must be
# known at compile time (`tl.arange(0, BLOCK)` needs a constant, a power of two), and each distinct
# value compiles a new variant of the kernel. Triton also specialises ordinary integer arguments
# that equal 1 or are multiples of 16, which is how it learns that a stride of 1 allows wide,
# vectorised loads.
#
# Two launch options shape the compiled code without changing what it computes:
#
# - `num_warps`: how many warps (groups of 32 threads) share one program's tile. A 128 x 128 float32
#   accumulator spread over 8 warps is 64 values per thread; over 4 warps it is 128 values per
#   thread, which leaves fewer registers for everything else.
# - `num_stages`: how deep the software pipeline of a loop is. With 3 stages the loads of iterations
#   `k + 1` and `k + 2` are in flight while iteration `k` computes, hiding memory latency at the cost
#   of shared memory for the tiles in flight.
#
# Under the interpreter both are ignored. The best values depend on the tile, the data type and the
# GPU, so they are usually searched rather than derived.
#
# ## Autotuning
#
# `@triton.autotune(configs=[...], key=[...])` wraps a kernel with a list of `triton.Config`s (values
# for the constexprs, plus `num_warps` and `num_stages`). The first time the kernel runs with a new
# value of the `key` arguments, it times every config on the real inputs and keeps the fastest for
# that key. The matmul below is tuned over these configs on a GPU; on the CPU, where timing means
# nothing, a single config is enough:

# %%
def config(bm, bn, bk, group_m, warps, stages):
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group_m},
                         num_warps=warps, num_stages=stages)


MATMUL_CONFIGS = pick(
    cpu=[config(64, 64, 64, 4, warps=4, stages=1)],
    gpu=[config(bm, bn, 64, 8, warps, stages)
         for bm, bn, warps, stages in [(128, 256, 8, 3), (128, 256, 8, 4), (256, 128, 8, 3), (256, 128, 8, 4),
                                       (128, 128, 8, 4), (128, 128, 4, 4), (128, 128, 8, 5), (128, 64, 4, 4),
                                       (64, 128, 4, 4)]],
)
print(f"{len(MATMUL_CONFIGS)} config(s), e.g. {MATMUL_CONFIGS[0]}")

# %% [markdown]
# ## A tiled matmul
#
# Lesson 03's row-at-a-time matmul re-read B for every row of A. The cure is to give each program a
# `BLOCK_M x BLOCK_N` tile of C: it walks along K, loading a `BLOCK_M x BLOCK_K` tile of A and a
# `BLOCK_K x BLOCK_N` tile of B at each step, and accumulates their product. Every value of A it
# loads is used for `BLOCK_N` outputs, every value of B for `BLOCK_M`.
#
# First the algorithm in plain PyTorch, where it is easy to check, with the three loops made
# explicit (the two outer ones become the grid):

# %%
def tiled_matmul_torch(a, b, BLOCK_M=64, BLOCK_N=64, BLOCK_K=64):
    """a @ b computed tile by tile, as the Triton kernel will: a float32 accumulator per tile of C."""
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty(M, N, dtype=a.dtype, device=a.device)
    for m0 in range(0, M, BLOCK_M):                 # grid axis: tile rows
        for n0 in range(0, N, BLOCK_N):             # grid axis: tile columns
            acc = torch.zeros(min(BLOCK_M, M - m0), min(BLOCK_N, N - n0), device=a.device)
            for k0 in range(0, K, BLOCK_K):         # the program's own loop
                a_tile = a[m0:m0 + BLOCK_M, k0:k0 + BLOCK_K]
                b_tile = b[k0:k0 + BLOCK_K, n0:n0 + BLOCK_N]
                acc += a_tile.float() @ b_tile.float()
            c[m0:m0 + BLOCK_M, n0:n0 + BLOCK_N] = acc.to(a.dtype)
    return c


a = torch.randn(150, 200, device=DEVICE, dtype=torch.float16)
b = torch.randn(200, 130, device=DEVICE, dtype=torch.float16) / 200**0.5
ok = torch.allclose(tiled_matmul_torch(a, b).float(), a.float() @ b.float(), atol=1e-2, rtol=1e-2)
print("matches:", ok)

# %% [markdown]
# Count the traffic: a program loads a `BLOCK_M x K` strip of A and a `K x BLOCK_N` strip of B, so A
# is loaded once per tile column (`N / BLOCK_N` times) and B once per tile row (`M / BLOCK_M` times).
# For square matrices the intensity against the memory system is about
#
# $$\frac{2MNK}{s\,MNK\,(1/B_N + 1/B_M)} = \frac{2}{s\,(1/B_M + 1/B_N)}\ \text{FLOP/byte}$$
#
# for elements of `s` bytes: 64 FLOP/byte for 128 x 128 tiles in float16, against 1 for the
# row-at-a-time kernel. The L2 cache then catches many of the repeated loads, so HBM sees less.

# %%
def tiled_bytes(M, N, K, BLOCK_M, BLOCK_N, itemsize=2):
    tiles_m, tiles_n = -(-M // BLOCK_M), -(-N // BLOCK_N)
    return itemsize * (M * K * tiles_n + K * N * tiles_m + M * N)  # A per tile column, B per tile row, C


for bm, bn in [(16, 16), (64, 64), (128, 128), (128, 256)]:
    n = 4096
    print(f"tiles {bm:>3} x {bn:<3}: {2 * n**3 / tiled_bytes(n, n, n, bm, bn):5.1f} FLOP/byte loaded")

# %% [markdown]
# ### Grouped tile order
#
# A GPU runs a grid in waves: an H100 has 132 SMs, so roughly the first 132 programs (by program
# id) run together, then the next ones. Which tiles those are decides how much of what they load is
# shared, and can be served by the L2 cache. In **row-major order**, program `pid` takes tile row
# `pid // num_pid_n`, column `pid % num_pid_n`: a wave covers a few whole tile rows, which share
# their strips of A but need every strip of B. In **grouped order**, consecutive programs walk down
# a group of `group_m` tile rows first, then move one column right: a wave covers a squarer block
# of tiles, and needs fewer strips of A and B in all.
#
# ### Exercise 2 · Grouped order
#
# Write `grouped_order(pid, num_pid_m, num_pid_n, group_m)`, returning the `(pid_m, pid_n)` tile of
# program `pid`. Programs `0, 1, ..., group_m * num_pid_n - 1` form the first group: they cover tile
# rows `0 .. group_m - 1`, going down the rows of the group within each column, column after
# column. The next group starts at tile row `group_m`, and so on. The last group may have fewer than
# `group_m` rows. With `group_m = 1` it is plain row-major order. Only integer arithmetic (`//`, `%`,
# `min`) is needed, so the same lines will work inside the kernel. The check holds you to it: a row or
# column that comes back as a float (from `/`) fails, even when it rounds down to the right tile.

# %% tags=["exercise"]
def grouped_order(pid, num_pid_m, num_pid_n, group_m):
    """(pid_m, pid_n): the output tile that program `pid` computes, in groups of `group_m` tile rows."""
    # YOUR CODE HERE: find the group of pid (each group has group_m * num_pid_n programs), the
    # group's first tile row, how many rows it really has, then pid's row and column inside it.
    raise NotImplementedError("write grouped_order")


# %%
check("grouped_order", grouped_order)

# %% [markdown]
# The order, drawn for a 12 x 12 grid of tiles: each square is a tile of C, its number the program
# that computes it; the first 36 programs (one wave of a small GPU) are shaded.

# %%
def strips_per_wave(num_pid_m, num_pid_n, group_m, wave):
    """How many strips of A (tile rows) and of B (tile columns) the first `wave` programs load."""
    tiles = [grouped_order(pid, num_pid_m, num_pid_n, group_m) for pid in range(wave)]
    return len({m for m, _ in tiles}), len({n for _, n in tiles})


def show_order(num_pid_m, num_pid_n, group_m, ax, wave=36):
    order = torch.zeros(num_pid_m, num_pid_n, dtype=torch.int64)
    for pid in range(num_pid_m * num_pid_n):
        order[grouped_order(pid, num_pid_m, num_pid_n, group_m)] = pid
    ax.imshow(order < wave, cmap="Blues", vmin=0, vmax=1.6)
    for i in range(num_pid_m):
        for j in range(num_pid_n):
            ax.text(j, i, int(order[i, j]), ha="center", va="center", fontsize=6)
    a_strips, b_strips = strips_per_wave(num_pid_m, num_pid_n, group_m, wave)
    ax.set_title(f"group_m = {group_m}: the first {wave} programs load\n"
                 f"{a_strips} strips of A and {b_strips} strips of B", fontsize=9)
    ax.set_xticks([])
    ax.set_yticks([])


if passed("grouped_order"):
    fig, axes = plt.subplots(1, 2, figsize=(9, 4.6))
    show_order(12, 12, 1, axes[0])
    show_order(12, 12, 6, axes[1])
    plt.show()

# %% [markdown]
# For a real case, a 4096 x 4096 output in 128 x 128 tiles (a 32 x 32 grid) on an H100, where one
# program of this size fits on each of the 132 SMs:

# %%
if passed("grouped_order"):
    for group_m in (1, 8):
        a_strips, b_strips = strips_per_wave(32, 32, group_m, wave=132)
        print(f"group_m = {group_m}: the first wave loads {a_strips} strips of A and {b_strips} of B, "
              f"{a_strips + b_strips} in all")

# %% [markdown]
# Fewer distinct strips per wave means more of each wave's loads are served by L2 instead of HBM.
# It costs four lines of integer arithmetic; what it gains depends on the sizes and the cache, so
# measure it (a config with `GROUP_M = 1` is plain row-major order).
#
# ### Exercise 3 · The tiled matmul
#
# Each program computes one `BLOCK_M x BLOCK_N` tile of `C = A @ B`. Write it in two parts. The
# **mainloop**, `matmul_tile`, computes the program's tile in registers and returns it; the kernel,
# `matmul_kernel`, calls it and stores the tile. `matmul_tile` is a `@triton.jit` function with no
# grid of its own: a kernel calls it like a Python function, Triton inlines it, and it may return
# several values. In exercise 4 a second kernel calls the same mainloop.
#
# In `matmul_tile`:
#
# 1. Turn `tl.program_id(0)` into `(pid_m, pid_n)` with the grouped order (the grid is 1-D; the
#    number of tile rows is `tl.cdiv(M, BLOCK_M)`; `min` works inside a kernel).
# 2. Offsets `offs_m`, `offs_n` of the tile's rows and columns, and `offs_k = tl.arange(0, BLOCK_K)`;
#    pointers to the first tiles of A (`BLOCK_M x BLOCK_K`) and B (`BLOCK_K x BLOCK_N`), with the
#    strides.
# 3. A float32 accumulator, `tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)`. Float16 products summed
#    in float16 would lose digits over a long K; tensor cores accumulate in float32 at full speed.
# 4. Loop over `tl.cdiv(K, BLOCK_K)` steps: load both tiles with masks (rows past M, columns past N,
#    and `k` past K on the last step) and `other=0.0`, so the padding adds nothing; `acc =
#    tl.dot(a, b, acc)`; move both pointers `BLOCK_K` along K. Then `return acc, offs_m, offs_n`:
#    the tile, and the rows and columns of C it belongs to.
#
# In `matmul_kernel`:
#
# 5. Call `matmul_tile`, then store the tile, converted to C's type (`acc.to(c_ptr.dtype.element_ty)`),
#    with a mask.
#
# The launcher is written for you; the grid is a function of the chosen config, so that autotuning
# can change the tile size. The check's sizes are multiples of no block (except one case), and one
# case has a K of a few thousand, where a float16 accumulator drifts past the tolerance; on the CPU
# one case is float32, where C keeps a's dtype. Last, it gives your autotuner tiles of 32 × 64 × 16
# in groups of 2 tile rows for one more product: on the CPU every tile is 64 × 64 × 64 (and a GPU's
# autotuner may choose square ones), where `BLOCK_M`, `BLOCK_N` and `BLOCK_K` mixed up go unnoticed,
# and the other cases have fewer tile rows than a group, where a slip in the grouped order does. The
# values come out right in any tile order, so it also watches which tile each program stores, on 5 × 3
# tiles in groups of 3 rows: program `p` must store the tile `grouped_order` gives it.

# %% tags=["exercise"]
@triton.jit
def matmul_tile(a_ptr, b_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """The mainloop: this program's BLOCK_M x BLOCK_N tile of A @ B, summed in float32.

    Returns (acc, offs_m, offs_n): the tile, still in registers, and the rows and columns of C it is for.
    """
    # YOUR CODE HERE: steps 1 to 4 above.
    pass


@triton.autotune(configs=MATMUL_CONFIGS, key=["M", "N", "K"])
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """C = A @ B for one BLOCK_M x BLOCK_N tile of C; A (M, K), B (K, N), C (M, N)."""
    # YOUR CODE HERE: step 5.
    pass


def matmul(a, b):
    """a @ b for a (M, K) and b (K, N), any strides."""
    assert a.dim() == b.dim() == 2 and a.shape[1] == b.shape[0], "matmul takes (M, K) and (K, N)"
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)  # noqa: E731
    matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                        c.stride(0), c.stride(1))
    return c


# %%
check("matmul", matmul)

# %% [markdown]
# Your kernel's traffic, counted by the meter, against the tiling formula (on a GPU the first call
# autotunes, and the meter then replays the chosen config through the interpreter):

# %%
if passed("matmul"):
    M, N, K = 100, 70, 90
    a = torch.randn(M, K, device=DEVICE, dtype=torch.float16)
    b = torch.randn(K, N, device=DEVICE, dtype=torch.float16)
    matmul(a, b)
    chosen = matmul_kernel.best_config.kwargs if ON_GPU else MATMUL_CONFIGS[0].kwargs
    print("counted:", triton_traffic(matmul, a, b))
    print("formula:", tiled_bytes(M, N, K, chosen["BLOCK_M"], chosen["BLOCK_N"]), "bytes; the minimum:",
          2 * (M * K + K * N + M * N), "bytes")

# %% [markdown]
# On a GPU the next cell times your matmul against cuBLAS (`torch.matmul`) in float16; elsewhere it
# shows the course's solution as `make bench` recorded it. The course's goal for this kernel is to
# run at 0.85 of cuBLAS's speed or better at 4096³ and 8192³; the cell after the table prints where
# it stands. The matmuls are timed as replays of a CUDA graph (`Bench(..., graph=True)`): the GPU's
# time alone. A 1024³ matmul takes less time on the GPU than its launch from Python takes on the
# CPU (lesson 01), and timing it through Python measured the CPU as much as the kernel.

# %%
def matmul_benches():
    benches = []
    for n in (4096, 8192):
        ag = torch.randn(n, n, device=DEVICE, dtype=torch.float16)
        bg = torch.randn(n, n, device=DEVICE, dtype=torch.float16)
        benches.append(Bench("matmul_fp16", n, bytes=3 * 2 * n * n, flops=2 * n**3, label=f"{n}^3",
                             metric="TFLOP/s", impls={"triton": lambda ag=ag, bg=bg: matmul(ag, bg),
                                                      "cuBLAS": lambda ag=ag, bg=bg: ag @ bg},
                             graph=True))
    return benches


if not ON_GPU or passed("matmul"):  # on a GPU, this times your kernel
    timings = compare("matmul_fp16", matmul_benches)


# %%
def gpu_of(rows):
    """The GPU that timed these rows: named in a recorded row, or the one here."""
    return rows[0].get("device") or torch.cuda.get_device_name() if rows else "no GPU recorded"


def speed_against(rows, impl, baseline):
    """Per size, impl's speed as a fraction of the baseline's: its time over impl's (above 1: faster)."""
    for label in dict.fromkeys(r["label"] for r in rows):
        ms = {r["impl"]: r["ms"] for r in rows if r["label"] == label}
        print(f"{label:>10}: {impl} runs at {ms[baseline] / ms[impl]:.2f} of {baseline}'s speed")


if not ON_GPU or passed("matmul"):  # on a GPU, these are your kernel's timings
    print(f"on {gpu_of(timings)}:")
    speed_against(timings, "triton", "cuBLAS")

# %% [markdown]
# The same kernels on the roofline, all at 4096³: the tiled matmul (yours, measured now on a GPU;
# else the course's, as recorded) and cuBLAS, and without a GPU lesson 03's row-at-a-time kernel too,
# from the recording.

# %%
def square_fp16(n=4096):  # two distinct matrices: one tensor passed twice would be read from cache
    return [torch.randn(n, n, device="cuda", dtype=torch.float16) for _ in range(2)]


if not ON_GPU or passed("matmul"):  # on a GPU, this times your kernel
    n = 4096
    flops, least = 2 * n**3, 6 * n * n
    points = [timed_point("tiled matmul", flops, least, matmul, square_fp16, ("matmul_fp16", "triton", n)),
              timed_point("cuBLAS", flops, least, torch.matmul, square_fp16, ("matmul_fp16", "cuBLAS", n))]
    if not ON_GPU:  # lesson 03's kernel is only in the recording here
        points.append(timed_point("row-at-a-time (lesson 03)", flops, least, None, None,
                                  ("rowwise_matmul_fp16", "row-at-a-time (Triton)", n)))
    device_name = torch.cuda.get_device_name() if ON_GPU else (recorded() or {}).get("device", "")
    chip = chip_for(device_name) or CHIPS["H100 SXM"]
    ax = plot(points, chip=chip, precisions=("fp16",))

# %% [markdown]
# ## Exercise 4 · A fused epilogue: matmul + bias + GELU
#
# A linear layer followed by an activation is, in eager PyTorch, three kernels: the matmul writes C
# to memory, the bias add reads it and writes it again, the GELU reads it and writes it once more.
# In the matmul the tile of C is still in registers after the K loop: add the bias and apply the
# activation there, before the single store, and C goes through memory once. This is an
# **epilogue**. Here is what it saves, on a small example:

# %%
def linear_gelu_eager(a, b, bias):
    c = a @ b                                  # read MK + KN, write MN
    c = c + bias                               # read MN + N, write MN
    return F.gelu(c, approximate="tanh")       # read MN, write MN


M, N, K = 128, 512, 64
a, b, bias = torch.randn(M, K), torch.randn(K, N), torch.randn(N)
eager = eager_traffic(linear_gelu_eager, a, b, bias)
print("eager:", eager)
print("fused, at least:", 4 * (M * K + K * N + M * N + N), "bytes in 1 kernel")

# %% [markdown]
# Exercise 3 split the matmul into its mainloop and a store. When `matmul_tile` returns, `acc` is the
# program's whole tile of `A @ B`, in registers. Whatever the kernel does to it before the store
# reads no more of A, B or C: the epilogue only loads `BLOCK_N` bias values per program, and spends a
# few instructions per element of C, where the mainloop spent `2K` FLOPs. C still goes to memory
# once. That is why an epilogue is almost free.
#
# So that this exercise does not depend on your exercise 3, the next cell loads the course's own
# mainloop, `course.matmul_tile`. It takes the same arguments as yours and returns the same three
# values: `acc`, the float32 tile; `offs_m` and `offs_n`, its rows and columns of C (on the last
# tiles some lie past M or N).

# %%
course = load_solution("04")   # the course's solutions to this lesson: solutions/04_triton_basics.py
help(course.matmul_tile.fn)

# %% [markdown]
# Write `matmul_bias_gelu_kernel`: the mainloop is called for you; write the epilogue. Load the
# tile's `BLOCK_N` bias values (masked: the last tile column runs past N), add them to every row of
# the accumulator (`acc + bias[None, :]`), apply GELU in float32 with lesson 02's tanh approximation,
# `x * sigmoid(2u)` with `u = 0.7978845608028654 * (x + 0.044715 x³)`, convert to C's type and store
# once, with the 2-D mask. The check holds you to that: a float32 epilogue rounded once at the store
# (a step done in float16 shows), and one kernel (PyTorch finishing the job after it does not pass,
# even with the right values).

# %% tags=["exercise"]
@triton.autotune(configs=MATMUL_CONFIGS, key=["M", "N", "K"])
@triton.jit
def matmul_bias_gelu_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K,
                            stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                            GROUP_M: tl.constexpr):
    """C = gelu_tanh(A @ B + bias) for one tile: the epilogue runs in registers, before the one store."""
    acc, offs_m, offs_n = course.matmul_tile(a_ptr, b_ptr, M, N, K,   # the mainloop, given
                                             stride_am, stride_ak, stride_bk, stride_bn,
                                             BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M)
    # YOUR CODE HERE: the bias and GELU on acc, in float32; then one masked store of the tile.


def matmul_bias_gelu(a, b, bias):
    """gelu_tanh(a @ b + bias) in one kernel; a (M, K), b (K, N), bias (N,)."""
    assert a.dim() == b.dim() == 2 and a.shape[1] == b.shape[0], "matmul_bias_gelu takes (M, K) and (K, N)"
    assert bias.shape == (b.shape[1],), "bias must have one value per column of the output"
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)  # noqa: E731
    matmul_bias_gelu_kernel[grid](a, b, bias, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                  c.stride(0), c.stride(1))
    return c


# %%
check("matmul_bias_gelu", matmul_bias_gelu)

# %% [markdown]
# On a GPU, the fused kernel against the eager chain (matmul, bias add, GELU), against `torch.addmm`
# (cuBLAS with the bias folded in) followed by GELU, and against `torch.compile`. The epilogue saves
# two passes over C (against addmm) to four (against the eager chain); how much that is worth
# depends on how the matmul's time compares with the time to move C, so the shapes include a short
# K, where C dominates.

# %%
def epilogue_benches():
    compiled = torch.compile(linear_gelu_eager)
    addmm_gelu = lambda a, b, c: F.gelu(torch.addmm(c, a, b), approximate="tanh")  # noqa: E731
    benches = []
    for M, N, K in [(4096, 4096, 4096), (8192, 8192, 1024)]:
        args = (torch.randn(M, K, device=DEVICE, dtype=torch.float16),
                torch.randn(K, N, device=DEVICE, dtype=torch.float16) / K**0.5,
                torch.randn(N, device=DEVICE, dtype=torch.float16))
        impls = {"triton fused": matmul_bias_gelu, "eager: matmul, + bias, GELU": linear_gelu_eager,
                 "eager: addmm, GELU": addmm_gelu, "torch.compile": compiled}
        benches.append(Bench("matmul_bias_gelu_fp16", M * N * K, bytes=2 * (M * K + K * N + M * N + N),
                             flops=2 * M * N * K, label=f"{M}x{N}x{K}", metric="TFLOP/s",
                             impls={name: lambda f=f, args=args: f(*args) for name, f in impls.items()}))
    return benches


if not ON_GPU or passed("matmul_bias_gelu"):  # on a GPU, this times your kernel
    timings = compare("matmul_bias_gelu_fp16", epilogue_benches)

# %% [markdown]
# The same rows as ratios: how fast the fused kernel runs against each alternative (its time over
# the fused kernel's: above 1, the fusion wins). The last column is what the epilogue saves against
# addmm + GELU: one round trip of C (a write and a read of MN elements), timed at the copy ceiling of
# the same run, as a share of addmm + GELU's time.

# %%
BASELINES = {"eager chain": "eager: matmul, + bias, GELU", "addmm + GELU": "eager: addmm, GELU",
             "torch.compile": "torch.compile"}


def epilogue_verdict(rows):
    """Per shape: each baseline's time over the fused kernel's, and C's round trip against addmm + GELU."""
    print(f"the fused kernel's speed against each alternative (above 1: fused is faster), on {gpu_of(rows)}:")
    print(f"{'M x N x K':>18}" + "".join(f"{short:>15}" for short in BASELINES) + f"{'C round trip':>14}")
    labels = list(dict.fromkeys(r["label"] for r in rows))
    wins = dict.fromkeys(BASELINES, 0)
    for label in labels:
        at = {r["impl"]: r for r in rows if r["label"] == label}
        fused = at["triton fused"]
        speeds = {short: at[impl]["ms"] / fused["ms"] for short, impl in BASELINES.items()}
        for short, speed in speeds.items():
            wins[short] += speed > 1
        M, N, _ = map(int, label.split("x"))
        ceiling = fused.get("copy_gbps") or fused["gbps"] / fused["fraction_of_copy"]  # that run's copy, GB/s
        round_trip_ms = 2 * 2 * M * N / ceiling / 1e6                # write and read MN float16 values
        share = round_trip_ms / at[BASELINES["addmm + GELU"]]["ms"]
        print(f"{label:>18}" + "".join(f"{v:>15.2f}" for v in speeds.values()) + f"{share:>14.0%}")
    for short, n in wins.items():
        print(f"faster than {short} at {n} of {len(labels)} shapes")


if not ON_GPU or passed("matmul_bias_gelu"):  # on a GPU, these are your kernel's timings
    epilogue_verdict(timings)

# %% [markdown]
# Read it row by row. Against the eager chain the fusion saves two round trips of C and two launches.
# Against addmm + GELU it saves only one round trip (addmm already folds the bias into cuBLAS's
# matmul), and in the recordings that is a close call: the two stay close, and which one wins changes
# with the shape (the counts above) and with the GPU (compare the two tables). Two things decide it:
#
# - **The main loop.** The fused kernel is the course's matmul with a few lines added (exercise 4
#   calls its mainloop, `course.matmul_tile`), and cuBLAS's matmul is faster than the course's (the
#   ratios printed after exercise 3). The epilogue's saving comes on top of the main loop; where the
#   main loop is slower by more than the saving, the fusion loses.
# - **K.** The round trip is MN elements whatever K is, while the matmul's work grows with K. The last
#   column shows it: a large share at K = 1024, a small one for the 8192³ cube. So a short K is where
#   the fusion has the most to win back from a slower main loop; for the cube the saving is small,
#   and how close the main loop comes to cuBLAS's decides.
#
# So an epilogue pays when the matmul under it is as fast as the one it replaces and C's round trip
# is a large share of the time: short K, large M and N. A fused kernel that starts from a slower
# matmul has to win back that gap first.

# %% [markdown]
# ## Reading the compiled code
#
# Triton compiles a kernel in stages, and keeps each one in the compiled kernel's `asm` dict:
# `ttir` (Triton's own IR, close to your code: `tt.load`, `tt.dot`), `ttgir` (the same with a layout
# for every tensor: which thread holds which values, and on Hopper the warp-group matrix
# instructions), `llir` (LLVM IR), `ptx` (NVIDIA's virtual assembly) and the binary. Reading them
# answers questions no timing can: are the loads vectorised, did `tl.dot` become tensor-core
# instructions, how many registers does a thread use, did anything spill to memory?
#
# `compiled_excerpt` (in `helpers/compiled.py`) picks, for each stage, the first line that holds each
# thing worth looking for (`LOOK_FOR`, shown below), and counts the lines that hold it.

# %%
from helpers.compiled import LOOK_FOR, compiled_excerpt

LOOK_FOR


# %% [markdown]
# On a GPU, the next cell compiles your matmul with one fixed config and prints that; elsewhere it
# shows the excerpt `make bench` recorded from the course's solution on a GPU.

# %%
RECORDED_EXCERPT = ROOT / "helpers" / "recorded" / "04_matmul_compiled.txt"
if ON_GPU and passed("matmul"):  # your kernel, compiled now; else the recorded excerpt
    n = 1024
    ag, bg = square_fp16(n)
    cg = torch.empty(n, n, device=DEVICE, dtype=torch.float16)
    compiled = matmul_kernel.fn[(1,)](ag, bg, cg, n, n, n, n, 1, n, 1, n, 1, BLOCK_M=128, BLOCK_N=128,
                                      BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=4)
    print(compiled_excerpt(compiled))
elif RECORDED_EXCERPT.exists():
    excerpt = RECORDED_EXCERPT.read_text()
    print(excerpt)
    missing = [n for needles in LOOK_FOR.values() for n in needles if n not in excerpt]
    if "the first line of each" not in excerpt and missing:  # recorded by an older `make bench`
        print(f"Note: this excerpt kept only the first few matching lines of each stage, so it holds no "
              f"line with {', '.join(missing)}.\nThat says nothing about whether the compiler emitted "
              f"them: the next `make bench` records the first line of each.")
else:
    print("No GPU here, and no excerpt recorded yet (`make bench` on a GPU records one).")

# %% [markdown]
# What to look for, stage by stage:
#
# - **ttir**: inside the K loop, a `tt.load` for the tile of A, one for B, and the `tt.dot`.
# - **ttgir**: tiles staged in shared memory (`local_alloc`) and filled by asynchronous copies
#   (`async_copy`) up to `num_stages - 1` iterations ahead; on Hopper (H100, H200) the dot becomes a
#   warp-group dot (`warp_group_dot`) when the tile and the warps allow it, elsewhere it stays a
#   `tt.dot` with a tensor-core layout.
# - **ptx**: `cp.async` copies into shared memory; the tensor-core instructions, `wgmma.mma_async`
#   (Hopper's warp-group matrix multiply-accumulate) or `mma.sync` (Ampere's, also run by Hopper);
#   `ld.global` for loads that go straight to registers.
#
# A line that reads `(none)` is an instruction the compiler did not emit. Zero spills means the
# accumulator fits in registers.
#
# ## Takeaways
#
# - A 2-D grid of programs covers a matrix tile by tile; `offs_m[:, None]` and `offs_n[None, :]`
#   broadcast into tile offsets, and the mask is 2-D.
# - Pass strides and address with them: one kernel then handles transposed, sliced and broadcast
#   (stride 0) views, with no copy.
# - `tl.constexpr` values are compiled in; `num_warps` and `num_stages` shape the compiled code; let
#   `@triton.autotune` pick them on the GPU.
# - A tiled matmul loads each value of A and B once per tile column or row, not once per output:
#   the tile size sets the intensity. `tl.dot` runs on tensor cores; accumulate in float32.
# - Grouped tile order makes each wave of programs share its strips of A and B in L2.
# - A mainloop written once, as a `@triton.jit` helper that returns the tile, serves every kernel
#   that needs it; each adds its own epilogue before its store.
# - An epilogue fused into the matmul (bias, activation, residual) saves whole passes over C; it
#   pays only when the matmul under it is as fast as the one it replaces, and most when K is short.

# %%
self_check("04")

# %%
flashcards("04")
