# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 09 · Hopper matmul: TMA, persistent kernels, pipelining and warp specialisation
#
# Lesson 04's matmul is the clear version: every thread computes the addresses it loads, `tl.load`
# fetches, `tl.dot` multiplies. It runs on any GPU with tensor cores, and on an H100 or H200 it leaves
# speed behind on large products, because the Hopper generation added hardware that works *beside*
# the threads: a copy
# engine that moves whole tiles, a matrix instruction that runs asynchronously, and enough shared
# memory to keep several tiles in flight. This lesson takes the matmul close to cuBLAS's speed with
# that hardware, one step at a time, and says after each step what it bought, measured. Lesson 10 takes
# lesson 06's FlashAttention the same way, and lesson 11 builds a decoder block on this lesson's
# matmul.
#
# Most of what this lesson is about happens only on a Hopper GPU. Without one, the interpreter still
# runs every kernel here (tensor descriptors included) so you can write and check them; the speed,
# the compiled code and what the compiler refuses come from recordings made on an H100 and an H200,
# each labelled with its GPU, date and versions.
#
# **You will learn:**
# - what TMA, `wgmma`, software pipelining, persistent programs and warp specialisation are, and
#   which Triton feature reaches each: tensor descriptors, `tl.dot`, `num_stages`, a tile loop,
#   `tl.range(..., warp_specialize=True)`, and how to tell from the compiled code whether it did;
# - the rules a tensor descriptor imposes (16-byte alignment), what it does at the edges (zeros in,
#   stores dropped), and how to build one on the host or inside the kernel;
# - persistent programs and a tile scheduler, and why they pay;
# - what the autotuner's timing of a candidate is made of (an L2 flush, then a launch from Python),
#   why its choice for a short kernel can change between runs, and how to make it steadier;
# - epilogues on a fast mainloop: a row scale and a residual add, and lesson 05's RMSNorm + linear on
#   top of them, against cuBLAS and `torch.compile`.
#
# Exercises: a matmul fed by tensor descriptors (in lesson 04's tile order), the persistent matmul,
# and the flattened persistent loop with its epilogues.

# %% [markdown]
# ## Setting up

# %%
from helpers import DEVICE, ON_GPU, check, describe, pick
from helpers.bench import impl_named, ratios, recorded_devices, recorded_rows, timed, verdicts
from helpers.cards import flashcards, self_check
from helpers.roofline import CHIPS
from helpers.solutions import load_solution, show
from helpers.traffic import show_programs, triton_traffic

import inspect

import matplotlib.pyplot as plt
import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

print(describe())
course = load_solution("09")                  # the lesson's kernels, given where you do not write them
lesson04, lesson05 = load_solution("04"), course.lesson05
hopper = course.recorded()                    # {GPU: compiled code, compile survey, autotuner runs}
print("GPUs with recorded timings:", ", ".join(recorded_devices()) or "none yet")
print("GPUs with lesson 09's recordings:", ", ".join(hopper) or "none yet (`make bench` writes them)")

# %% [markdown]
# ## What Hopper adds, and how Triton reaches it
#
# Five things, each with the Triton feature that reaches it:
#
# - **TMA, the tensor memory accelerator.** A copy engine in each SM. Given a tensor's description and
#   a tile's coordinates, it moves the whole tile between global and shared memory by itself, writes
#   zeros where the tile hangs over the tensor's edge, and signals a barrier when the tile has
#   arrived. *Triton:* tensor descriptors, `desc.load([row, col])` and `desc.store([row, col], tile)`.
# - **wgmma, the warpgroup matrix multiply.** Four warps together (a *warpgroup*, 128 threads) start
#   one tensor-core operation on tiles that sit in shared memory, carry on with other work, and wait
#   for the result only when they need it. *Triton:* `tl.dot`, when the tile and `num_warps` allow it
#   (warps in multiples of four, tiles of 64 rows or more).
# - **Software pipelining.** While the tensor cores work on step k of the K loop, the copies for steps
#   k + 1, k + 2, ... are already on their way. *Triton:* `num_stages`, how many steps' worth of A
#   and B tiles live in shared memory at once.
# - **Persistent programs.** Not hardware, a way of using the rest: one program per SM, each walking
#   many output tiles, so that one tile's epilogue runs while the next tile's copies arrive.
#   *Triton:* a grid of as many programs as SMs, a loop over tiles, and a tile scheduler.
# - **Warp specialisation.** Some warps only issue copies (the producer), the others only compute
#   (the consumers); they hand tiles over through shared memory and barriers. *Triton:*
#   `tl.range(..., warp_specialize=True)`, a request: Triton documents it for Blackwell, and on
#   Hopper the compiled code says whether it was granted (below).
#
# Put together, a tile's journey changes. In lesson 04 every thread computes the addresses and the
# masks of its share of each tile and issues its own small copies into shared memory (`cp.async`,
# 16 bytes each, when the compiler pipelines the loop). With TMA, one thread issues one instruction
# per tile, the copy engine writes the tile into shared memory, and `wgmma` reads it from there: the
# threads spend their instructions and registers on the arithmetic instead. Because both the copy and
# the matrix multiply are asynchronous, what is left to decide is how far ahead the copies run, which
# is what `num_stages` and warp specialisation are about.
#
# ### The compiled code, as recorded
#
# You can see each piece in what Triton compiled. `make bench` compiled the lesson's fast matmul on a
# Hopper GPU and kept, for two stages of the compiled code, the first line that holds each instruction
# worth looking for and how many lines hold it (`helpers/compiled.py`):

# %%
if not hopper:
    print("No compiled code recorded yet: `make bench` on a Hopper GPU records it (helpers/recorded/).")
for gpu, record in hopper.items():
    print(f"=== recorded on {gpu} ({record['date']}, torch {record['torch']}, triton {record['triton']})")
    for kernel, excerpt in record["compiled"].items():
        print(excerpt, "\n")

# %% [markdown]
# What to look for:
#
# - **ttgir** (Triton's IR with GPU layouts): `async_tma_copy_global_to_local` is a tile copied by
#   TMA into shared memory; `warp_group_dot` is a `tl.dot` that became a warpgroup multiply;
#   `ttg.warp_specialize` appears only in a kernel whose loop was split into producer and consumer
#   partitions (the excerpt is of a configuration that did not ask for it).
# - **ptx** (NVIDIA's virtual assembly): `cp.async.bulk.tensor` is the TMA copy itself;
#   `wgmma.mma_async` the asynchronous warpgroup multiply; `mbarrier.try_wait` a wait on the barrier a
#   copy signals when its tile has arrived; `ld.global` a plain load into registers (the row scale
#   of an epilogue, say), which the tile loop no longer needs.
# - the first line: registers per thread (a thread may have at most 255), how many spilled to
#   memory, and the shared memory the kernel claims.
#
# Lesson 04's recorded excerpt had `cp.async` (Ampere's per-thread asynchronous copy, 16 bytes at a
# time) where this one has `cp.async.bulk.tensor`: the same pipeline, fed there by every thread's
# small copies and here by one instruction per tile.
#
# ### Shared memory sets how deep the pipeline can be
#
# Each stage holds one tile of A and one of B; a TMA store needs the output tile in shared memory
# too. The tile shape and `num_stages` must fit the SM's shared memory together. An estimate for
# float16 (the compiler may reuse some of it, so treat the limit as approximate):

# %%
chip = CHIPS["H100 SXM"]
limit = chip.shared_kb_per_program * 1024
print(f"shared memory on the {chip.name} (helpers.roofline.CHIPS): {chip.shared_kb} KB per SM, of which "
      f"one program may claim at most {chip.shared_kb_per_program} KB")
print(f"{'tile BM x BN x BK':>18} {'one stage':>10} {'C tile':>8}"
      + "".join(f"{s} stages".rjust(12) for s in range(2, 6)))
for bm, bn, bk in ((128, 256, 64), (256, 128, 64), (128, 128, 64), (128, 64, 64), (64, 64, 64)):
    stage, c_tile = 2 * (bm * bk + bk * bn), 2 * bm * bn
    totals = [s * stage + c_tile for s in range(2, 6)]
    print(f"{f'{bm} x {bn} x {bk}':>18} {stage // 1024:7} KB {c_tile // 1024:5} KB"
          + "".join(f"{t // 1024:9} KB{' ' if t <= limit else '*'}" for t in totals))
print("(* does not fit)")

# %% [markdown]
# The largest tiles do the most arithmetic per byte copied (lesson 03's intensity grows with the
# tile), but leave room for only a few stages. That trade is one reason the fast matmul below lets the
# autotuner choose among several tile shapes and depths.
#
# ### Warp specialisation: asked for, and granted?
#
# `tl.range(lo, hi, step, warp_specialize=True)` asks the compiler to split the loop's work between a
# producer warp, which only issues the TMA copies, and consumer warpgroups, which only wait for tiles
# and run `wgmma`. Asking is not getting: the docstring of `tl.range` (Triton 3.6 and 3.9 alike) says
# warp specialisation is only supported on Blackwell GPUs, and only on simple matmul loops, while
# Triton's compiler for `sm_90` (the H100 and H200) runs a warp-specialisation pass of its own. So
# two questions for each configuration that asks: does it compile, and did the compiler split the
# loop? The second is answered by the ttgir: a split loop becomes a `ttg.warp_specialize` op with
# its partitions, where a request that was not granted leaves only an attribute on the loop
# (`tt.warp_specialize`). `make bench` compiled each warp-specialised configuration of the lesson's
# two kernels (`matmul_kernel` with and without its row scale, `linear_kernel` with the scale, with and
# without the residual) and recorded both answers:

# %%
granted = {True: "specialised: its ttgir holds ttg.warp_specialize",
           False: "not specialised: no ttg.warp_specialize in its ttgir",
           None: "whether it was specialised: not recorded yet (`make bench LESSON=09` records it)"}
if not hopper:
    print("Nothing recorded yet: `make bench` on a Hopper GPU tries each warp-specialised configuration.")
for gpu, record in hopper.items():
    print(f"{gpu}, triton {record['triton']}:")
    for r in record["warp_specialize"]:
        verdict = f"compiles; {granted[r.get('specialised')]}" if r["compiles"] else f"fails: {r['error']}"
        epilogue = f", epilogue: {r['epilogue']}" if "epilogue" in r else ""
        print(f"  {r['kernel']}, {r['config']}{epilogue}: {verdict}")

# %% [markdown]
# Read the list for the Triton it names: what compiles, and what is granted, changes with releases.
# A configuration that compiles but was not split is the ordinary pipelined loop under another name.
# The autotuner may still choose it, for its tile shape and stages: in the records below,
# `warp_specialize=True` says what a configuration asked for, and this list whether it got it.
#
# ## Tensor descriptors, run here
#
# A tensor descriptor is a small record: where a 2-D tensor starts, its shape, its strides, and the
# shape of the tiles you will move (`block_shape`). Built once, it turns a tile's coordinates into a
# copy. There are two ways to make one:
#
# - **on the host**: `TensorDescriptor.from_tensor(t, block_shape)`
#   (`triton.tools.tensor_descriptor`), passed to the kernel like any argument;
# - **in the kernel**: `tl.make_tensor_descriptor(ptr, shape, strides, block_shape)`. On a GPU the
#   program writes the descriptor into a little global memory that Triton asks for through
#   `triton.set_allocator`; the lesson's solutions module installs one when it loads.
#
# The interpreter runs both: descriptors work on the CPU too (with Triton 3.6 and 3.9, the versions
# the course supports). A host-side descriptor first: one program loads the 8 × 8 tile of `x` that
# starts at row 8, column 8, adds one and stores it into `y` at the same place. `x` has only 12
# rows, so half of the tile hangs over the edge:

# %%
@triton.jit
def add_one_to_tile(src_desc, dst_desc, row, col):
    """dst[tile at (row, col)] = src[tile at (row, col)] + 1, both tiles moved by descriptors."""
    tile = src_desc.load([row, col])           # rows past the end of src arrive as zeros
    dst_desc.store([row, col], tile + 1)       # rows past the end of dst are not written


x = torch.arange(12 * 16, device=DEVICE, dtype=torch.float32).reshape(12, 16)
y = torch.full((12, 16), -1.0, device=DEVICE)
add_one_to_tile[(1,)](TensorDescriptor.from_tensor(x, block_shape=[8, 8]),
                      TensorDescriptor.from_tensor(y, block_shape=[8, 8]), 8, 8)
for row in y.int().tolist():                       # one printed line per row of y
    print(" ".join(f"{v:4}" for v in row))

# %% [markdown]
# Only rows 8 to 11 of the tile exist, and only they were written; the four rows past the edge were
# dropped, with no mask in the kernel. Now a descriptor built inside the kernel, and the same tile
# read back whole, into a buffer of exactly one tile:

# %%
@triton.jit
def copy_tile_out(x_ptr, out_ptr, M, N, stride_m, row, col, BM: tl.constexpr, BN: tl.constexpr):
    """out (BM, BN) = the tile of x (M, N) at (row, col), through descriptors the program builds."""
    x_desc = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[stride_m, 1], block_shape=[BM, BN])
    out_desc = tl.make_tensor_descriptor(out_ptr, shape=[BM, BN], strides=[BN, 1], block_shape=[BM, BN])
    out_desc.store([0, 0], x_desc.load([row, col]))


tile = torch.empty(8, 8, device=DEVICE)
copy_tile_out[(1,)](x, tile, 12, 16, x.stride(0), 8, 8, BM=8, BN=8)
print(tile.int())

# %% [markdown]
# The last four rows are zeros: the copy engine's padding, which is what lets the K loop of a matmul
# run past the end of K without a mask (zeros add nothing to a dot product).
#
# The price of all this is alignment. The innermost dimension must be contiguous (stride 1), and the
# tensor's start and every other stride must be multiples of 16 bytes. A float32 matrix with rows of
# 15 values has rows 60 bytes apart, and is refused:

# %%
odd = torch.randn(12, 15, device=DEVICE)
try:
    TensorDescriptor.from_tensor(odd, block_shape=[8, 8])
except (AssertionError, ValueError) as e:
    print(f"refused: {type(e).__name__}: {e}")
wide = torch.zeros(12, 16, device=DEVICE)[:, :15]     # the same shape, rows 16 values (64 bytes) apart
wide.copy_(odd)
print("a (12, 15) view of a (12, 16) buffer, strides", wide.stride(), ":",
      type(TensorDescriptor.from_tensor(wide, block_shape=[8, 8])).__name__, "accepted")

# %% [markdown]
# The fix is to allocate rows a little wider than needed and work on a view: the descriptor takes
# the view's shape (15 columns, so column 15 reads as zero and is never written) and its stride (16).
# The interpreter checks the same rules, and one more: the column at which a tile starts must also
# fall on a 16-byte boundary, which tiles at multiples of the block shape always do. The course's
# launchers go through `course.descriptor`, which says what is wrong in the course's words:

# %%
show(course.descriptor)

# %% [markdown]
# ## Exercise 1 · A matmul fed by tensor descriptors
#
# Write `tma_matmul_kernel`: lesson 04's one-program-per-tile matmul, in lesson 04's tile order, with
# every tile moved by a descriptor, so that the load path is the one thing that changes. The order is
# given: `tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)` is lesson 04's grouped order as a
# function, `GROUP_M` rows of tiles at a time, walked column by column, so that the tiles the SMs
# compute at about the same time share rows of A and columns of B, which then come from L2:

# %%
show(course.tile_coords)
tile_coords = course.tile_coords          # for your kernels below

# %% [markdown]
# The launcher is written: it builds host-side descriptors for A (tiles of `BLOCK_M × BLOCK_K`), B
# (`BLOCK_K × BLOCK_N`) and C (`BLOCK_M × BLOCK_N`), and launches a 1-D grid, one program per tile
# of C. In the kernel:
#
# - program `program_id(0)` computes tile number `program_id(0)`: `tile_coords` gives its row and
#   column in tiles (`num_pid_m`, `num_pid_n`: tiles down and across, `tl.cdiv`), and the tile
#   starts at row `pid_m * BLOCK_M`, column `pid_n * BLOCK_N`;
# - the K loop steps `k` by `BLOCK_K`, loads A's tile at `[off_m, k]` and B's at `[k, off_n]`, and
#   accumulates `tl.dot` in float32;
# - one `c_desc.store` at the end, converted to C's dtype (`c_desc.dtype`).
#
# No offsets, no pointers, no masks: the ragged edges of M, N and K are the descriptors' business.
# Beside the values, the check counts the bytes your kernel moved through pointers: every tile of A,
# B and C must go through a descriptor. It records which tile each program stores, since the values
# come out right in any order: program `p` stores tile `tile_coords(p, ...)`. Then it runs one more
# small product with `course.TMA_TILE` set to another tile for the call: on a GPU the lesson's tile
# is 128 × 128, where `BLOCK_M` used for `BLOCK_N` still gives the right values, so there it sets
# 32 × 64 × 16; on a CPU every case runs at 32 × 64 × 16, where a kernel with those numbers written
# in passes, so there it sets 64 × 32 × 32.

# %% tags=["exercise"]
@triton.jit
def tma_matmul_kernel(a_desc, b_desc, c_desc, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """C = A @ B for output tile number program_id(0), placed by tile_coords; every tile by descriptor."""
    # YOUR CODE HERE:
    # 1. pid_m, pid_n from tile_coords(program_id(0), tiles down, tiles across, GROUP_M); off_m and
    #    off_n: the first row and column of this program's tile of C;
    # 2. acc: a (BLOCK_M, BLOCK_N) float32 accumulator; for k from 0 to K in steps of BLOCK_K, load the
    #    tile of A at [off_m, k] and the tile of B at [k, off_n], and add their product into acc;
    # 3. store acc, converted to c_desc.dtype, at [off_m, off_n].
    pass


def tma_matmul(a, b):
    """a @ b, a (M, K) and b (K, N) with contiguous, 16-byte aligned rows; one program per output tile."""
    assert a.dim() == b.dim() == 2 and a.shape[1] == b.shape[0], "tma_matmul takes (M, K) and (K, N)"
    assert a.dtype == b.dtype, "a and b must share a dtype"
    (M, K), N = a.shape, b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    BM, BN, BK = course.TMA_TILE
    grid = (triton.cdiv(M, BM) * triton.cdiv(N, BN),)
    tma_matmul_kernel[grid](course.descriptor(a, [BM, BK]), course.descriptor(b, [BK, BN]),
                            course.descriptor(c, [BM, BN]), M, N, K, BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK,
                            GROUP_M=8)
    return c


# %%
check("tma_matmul", tma_matmul)

# %% [markdown]
# Set your kernel beside lesson 04's mainloop, which computes every address and every mask itself:

# %%
show(lesson04.matmul_tile)

# %% [markdown]
# Both do the same arithmetic, in the same tile order, and read the same bytes. What the descriptor
# removes is the work of finding them: on a GPU, lesson 04's loop spends registers and instructions
# on `BLOCK_M × BLOCK_K + BLOCK_K × BLOCK_N` addresses and masks per step, spread over the threads;
# the TMA version spends one instruction per tile, issued by one thread. What that buys, measured, is
# in the matmul table further down (`exercise 1: tma_matmul (grouped order)` against
# `lesson 04: matmul`).
#
# ## Persistent programs and the tile scheduler
#
# On large products, one program per tile launches many more programs than the GPU has SMs (the table
# below counts them). They run in *waves*: the
# SMs take the first programs, and each program that finishes makes room for the next. Every program
# starts cold (its first copies have nothing to overlap with) and ends with an epilogue during which
# it gives its tensor cores nothing to do, unless another program on the same SM does. And the last
# wave is usually partial:

# %%
sms = CHIPS["H100 SXM"].sms
print(f"{sms} SMs (helpers.roofline.CHIPS, H100 SXM)")
for n in (1024, 2048, 4096, 8192):
    for bm, bn in ((128, 128), (128, 256)):
        tiles = triton.cdiv(n, bm) * triton.cdiv(n, bn)
        print(f"{n:5}^2 output in {bm} x {bn} tiles: {tiles:5} tiles = {tiles / sms:5.2f} waves; "
              f"the last wave keeps {(tiles % sms or sms) / sms:4.0%} of the SMs busy")

# %% [markdown]
# A **persistent** kernel launches exactly as many programs as there are SMs (`P` of them), and
# program `p` computes tiles `p, p + P, p + 2P, ...` in a loop. Three things follow:
#
# - each program sets up once (its shared-memory buffers, its barriers) and stays, instead of one
#   start-up per tile;
# - with the tile loop and the K loop in one program, the compiler can pipeline *across* tiles: the
#   next tile's first copies are in flight while this tile's epilogue runs. That is what the fast
#   matmul's `FLATTEN` switch asks for, below;
# - the order in which tiles are visited is now the kernel's own choice, made by a **tile
#   scheduler**: a function from "the i-th tile this kernel computes" to its coordinates.
#
# The partial last wave does not go away: some programs still compute one tile more than others.
# Persistence, with the overlap across tiles, removes the start-ups and hides the epilogues; it does
# not change the arithmetic of dividing tiles among SMs (splitting the last tiles' K loops among
# programs, as Stream-K does, would).
#
# The scheduler here is exercise 1's `tile_coords`, lesson 04's grouped order, now applied to the
# i-th tile a program takes instead of to its program id. Here is what exercise 2 builds, run through
# the interpreter on a small problem: 3 programs, an output of 5 × 5 tiles whose last row and column
# are ragged. Each colour is one program, and its id is written on each of its tiles. The list below
# the picture gives each program's tiles in the order it computed them.

# %%
BM, BN, BK = course.TMA_TILE
M_demo, N_demo = 5 * BM - BM // 2, 5 * BN - BN // 2
a_demo = torch.randn(M_demo, 2 * BK)              # CPU tensors: the interpreter runs them on either device
b_demo = torch.randn(2 * BK, N_demo)
show_programs(course.persistent_matmul, a_demo, b_demo, 3, arg="c_desc.base", shape=(M_demo, N_demo))
plt.show()
# the interpreter's record of every store, read back as (tile row, tile column) per program
for program, tiles in course.tiles_in_order(course.persistent_matmul, a_demo, b_demo, 3).items():
    print(f"program {program}: {tiles}")

# %% [markdown]
# With `GROUP_M = 8` and only 5 rows of tiles, the whole output is one group, walked column by
# column: tiles 0 to 4 are column 0 top to bottom, tiles 5 to 9 column 1, and so on. Program 0 takes
# tiles 0, 3, 6, ...; program 1 tiles 1, 4, 7, ...: the list shows it.
#
# ## Exercise 2 · The persistent matmul
#
# Write `persistent_matmul_kernel`; the launcher is written (it launches exactly `programs`
# programs, one per SM by default, and the same descriptors as exercise 1). The tile scheduler is
# given: `tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)` returns `(pid_m, pid_n)`, the tile's row
# and column in units of tiles. In the kernel:
#
# - `num_pid_m`, `num_pid_n`: the number of tile rows and columns (`tl.cdiv`);
# - loop `tile` from `tl.program_id(0)` to `num_pid_m * num_pid_n` in steps of `tl.num_programs(0)`;
# - for each tile: its coordinates from `tile_coords`, exercise 1's K loop into a fresh accumulator,
#   and one store.
#
# The check launches your kernel with fewer programs than tiles (and more, on small problems), so a
# program that computes only its first tile leaves tiles unwritten; it also counts the programs your
# launch ran, checks that each element of C was stored exactly once, and that no program took more
# than its share of the tiles (`cdiv(tiles, programs)`).

# %% tags=["exercise"]
@triton.jit
def persistent_matmul_kernel(a_desc, b_desc, c_desc, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                             BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """C = A @ B with a fixed number of programs: program p computes tiles p, p + P, p + 2P, ..."""
    # YOUR CODE HERE:
    # 1. num_pid_m, num_pid_n: tiles down and across;
    # 2. for tile in range(program_id, number of tiles, number of programs):
    #        pid_m, pid_n = tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
    #        a fresh float32 accumulator, the K loop of exercise 1, one store through c_desc.
    pass


def persistent_matmul(a, b, programs=None):
    """a @ b with `programs` programs (default: one per SM), each walking several output tiles."""
    assert a.dim() == b.dim() == 2 and a.shape[1] == b.shape[0], "persistent_matmul takes (M, K) and (K, N)"
    assert a.dtype == b.dtype, "a and b must share a dtype"
    (M, K), N = a.shape, b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    BM, BN, BK = course.TMA_TILE
    programs = programs or course.SMS
    # float32 tiles take twice the shared memory: two K steps in flight instead of Triton's default three
    persistent_matmul_kernel[(programs,)](course.descriptor(a, [BM, BK]), course.descriptor(b, [BK, BN]),
                                          course.descriptor(c, [BM, BN]), M, N, K,
                                          BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK, GROUP_M=8,
                                          num_stages=2 if a.element_size() == 4 else 3)
    return c


# %%
check("persistent_matmul", persistent_matmul)

# %% [markdown]
# Your kernel is persistent, but not yet pipelined across tiles: each tile's K loop still starts
# cold, because the two loops are separate. The fast matmul below adds that, and more. First, a
# detour that every measurement in this lesson depends on.
#
# ## When the autotuner's choice flips
#
# The fast matmul has a search space: tile shapes, warps, stages, `FLATTEN` and warp
# specialisation, chosen by `@triton.autotune` (per bucket of sizes: the launch bill, below). By
# default the autotuner times each
# candidate with `triton.testing.do_bench`, and what that timing is made of decides whether it can
# be trusted for a short kernel. Before every timed call, `do_bench` zeroes a 256 MiB buffer (its L2
# flush, so that no candidate finds its inputs in the cache); then it records a start event, calls
# the candidate from Python, and records an end event. All of it is queued on one stream. While the
# GPU zeroes, the CPU runs the candidate's launch path (argument binding, the launch): if the kernel
# is queued before the flush ends, it starts right behind the start event and the events time the
# kernel alone; host time that outlasts the flush leaves the GPU idle after the start event, and is
# counted as the kernel's. So the question is host time per
# candidate against flush time. The record's figures, GPU by GPU:

# %%
from helpers.roofline import chip_for

for gpu in recorded_devices():
    chip = chip_for(gpu)
    overhead = {r["impl"]: r["ms"] for r in recorded_rows("launch_overhead", gpu)[0]}
    print(f"{gpu}:")
    if chip:
        print(f"  the flush: 256 MiB written at the datasheet's {chip.bandwidth_tbs} TB/s takes at least "
              f"{2**28 / chip.bandwidth_tbs / 1e6:.0f} µs")
    if "4096 launches" in overhead:
        print(f"  host time of one plain Triton launch from Python (lesson 01's 4096 launches): "
              f"{1000 * overhead['4096 launches'] / 4096:.1f} µs")
    launched, graphed = ({r["label"]: 1000 * r["ms"] for r in recorded_rows(group, gpu)[0]
                          if r["impl"] == "course: one kernel"}
                         for group in ("groupnorm_mish_fp16", "groupnorm_mish_graphed_fp16"))
    for label in (label for label in launched if label in graphed):
        print(f"  lesson 05's GroupNorm + Mish, {label}: {launched[label]:5.1f} µs launched from Python, "
              f"{graphed[label]:5.1f} µs as graph replays: {launched[label] - graphed[label]:+5.1f} µs")
    course.print_launch_against_flush(hopper.get(gpu, {}).get("launch_against_flush"))
if not recorded_devices():
    print("no GPU figures recorded yet")

# %% [markdown]
# Read each GPU's lines together. By the averages, a plain launch from Python takes less host time
# than the flush, so the flush should hide it; yet lesson 05's GroupNorm kernel, timed both ways by
# `make bench`, reads longer launched than graphed at its smallest shape, and about the same at the
# larger ones. The flush hides most of a launch, then, not always all of it. The last two lines of
# each GPU are the matmul's own: one candidate's host time beside the flush the GPU measured, and the
# same candidate timed both ways. In this record the flush outlasts the candidate's host time, and
# the two timings agree closely: at 1024³ the flush hid the launch. It need not on a slower host, or
# for a shorter kernel. Where host time leaks, candidates that differ by less than it are ranked
# partly by the CPU's pace, with its noise, and the winner can change from one process to the next:
# the same code, a different kernel, a different speed. The lesson's solution does two things:
#
# 1. **Time each candidate as CUDA-graph replays.** The candidate's launch is captured once in a
#    CUDA graph, and `do_bench` times `graph.replay()`: still a call from Python behind the same
#    flush, but one short host call in place of the candidate's whole launch path, so far less host
#    time is left to outlast the flush. It is how `make bench` times the lesson's kernels
#    (`helpers.bench.measure(..., graph=True)`, given to the autotuner as its `do_bench`). Triton's
#    own `do_bench_cudagraph` replays the graph back to back instead, without a flush or a pause:
#    a different measurement from the one the lesson's figures come from.
# 2. **Prune the search per shape** before timing anything: a tile shape that leaves most SMs without
#    a tile is not worth timing, so fewer, closer candidates are compared.

# %%
kernel = course.matmul_kernel
while hasattr(kernel, "fn"):
    kernel = kernel.fn
source = inspect.getsource(kernel)
print(source[:source.index("def ")])                  # the decorators: how the autotuner searches
show(course._tiles_for_the_shape)
if hasattr(course, "_graph_timed"):
    show(course._graph_timed)

# %% [markdown]
# How many output tiles each tile shape makes, against the SMs (the pruning above compares the two):

# %%
shapes = sorted({(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"]) for c in course.MATMUL_CONFIGS}) if ON_GPU \
    else [(64, 64), (64, 128), (128, 64), (128, 128), (128, 256), (256, 128)]   # the GPU's search
print(f"tile shapes {'searched here' if ON_GPU else 'in the GPU search'}; {sms} SMs")
print(f"{'matrix':>8}" + "".join(f"{f'{bm}x{bn}':>9}" for bm, bn in shapes))
for n in (1024, 2048, 4096, 8192):
    print(f"{f'{n}^2':>8}" + "".join(f"{triton.cdiv(n, bm) * triton.cdiv(n, bn):9}" for bm, bn in shapes))

# %% [markdown]
# Did it work? `make bench` ran the autotuner in three fresh processes for each of three ways of
# timing the candidates: launched from Python (the default), graph replays back to back
# (`do_bench_cudagraph`), and graph replays with the L2 flushed before each (the lesson's). It
# recorded each process's choice and the speed of what it chose (that final speed timed the same
# way every time, the lesson's way):

# %%
if not hopper:
    print("Nothing recorded yet: `make bench` on a GPU runs the autotuner in three fresh processes.")
for gpu, record in hopper.items():
    print(f"{gpu} ({record['date']}, triton {record['triton']}):")
    course.print_autotune_runs(record["autotune_stability"])

# %% [markdown]
# Read each shape's three lines together: the configuration each of three processes chose with each
# kind of timing (one letter, one configuration, listed beneath), and the range of speeds that
# followed. A choice that changes between processes with the same code is noise, not tuning; it
# costs little only where the choices are about equally fast. Count the changes in the record:
# flushing the L2 before each replay made the choice hardly steadier than launching from Python (a
# change or two on each GPU either way: where two configurations are within the clock's spread of
# each other, any timing can change its pick), and only replays back to back, without the flush,
# chose the same every time; but they time something else, a kernel whose inputs the last replay
# left in the L2. The third line of each shape
# ("L2 flushed") is how the lesson's autotuner times, and how `make bench` times the lesson's
# matmuls: the autotuner ranks candidates by the measurement the lesson reports.
#
# Where all three processes chose the same configuration, the speeds still differ from process to
# process: the GPU's clock follows its temperature and power draw, a spread as large as the gaps the
# lesson is chasing. So `make bench` times the implementations of each row in turn, three rounds
# over, and keeps each one's median, so that a drifting clock favours none of them.
#
# ## The fast matmul
#
# `course.matmul` is your persistent kernel with four additions: three the autotuner may turn, and
# a pair of switches the caller sets:
#
# - **`FLATTEN`**: `tl.range(..., flatten=True)` on the tile loop merges it with the K loop into one
#   loop, so the software pipeline runs on from one tile into the next: the next tile's copies are
#   in flight while this tile's epilogue converts and stores.
# - **`WARP_SPECIALIZE`**: asks for the same overlap by other means, a producer warp issuing every
#   copy while the consumers compute. It competes with `FLATTEN` (the two are not combined), and on
#   Hopper it is what the list near the top says: granted, or a request only.
# - **the tile shape and `num_stages`**: larger tiles do more arithmetic per byte, deeper pipelines
#   hide more latency, and shared memory bounds both (the table earlier). One small tile also comes
#   with K steps of 128 instead of 64: half as many steps, each twice as long, which can pay where
#   each tile has few steps to take (a small product).
# - **`B_NK` and `HAS_SCALE`**: the layout of `nn.Linear`'s weights (B given as N × K, multiplied by
#   the loaded tile's transpose), and an epilogue that scales each row of the result; RMSNorm uses
#   it below.
#
# One more switch is not the autotuner's: **`PDL`**, programmatic dependent launch, on for every
# launch on a GPU (`launch_pdl=True`). Such a launch may start while the kernel before it on the
# stream is still finishing. Its programs build their descriptors, then wait at `gdc_wait()` until
# that kernel has finished and its writes are visible, and only then read A and B or write C. Then
# `gdc_launch_dependents()` lets the next launch start in turn. What it buys is in the launch bill,
# below.
#
# Its descriptors are built in the kernel: `matmul_kernel` takes pointers and row strides, and each
# program builds its three descriptors (`tl.make_tensor_descriptor`) in the tiles of the configuration
# it runs, so one call suits every candidate. `matmul` launches it through a launcher prepared once
# (`helpers.launch.Launcher`). Why both: the launch bill, after the ladder.

# %%
show(course.matmul_kernel)
print("configurations searched on this device:")
for config in course.MATMUL_CONFIGS:
    print(" ", config)

# %% [markdown]
# Checked here against PyTorch, in both layouts and with the row scale:

# %%
dtype = pick(cpu=torch.float32, gpu=torch.float16)
a = torch.randn(100, 96, device=DEVICE, dtype=dtype)
b = torch.randn(96, 72, device=DEVICE, dtype=dtype)
w = torch.randn(72, 96, device=DEVICE, dtype=dtype)          # (N, K), as nn.Linear keeps it
s = torch.rand(100, device=DEVICE) + 0.5
for what, ours, want in (("a @ b", course.matmul(a, b), a @ b),
                         ("a @ w.T", course.matmul(a, w, b_is_nk=True), a @ w.T),
                         ("s * (a @ w.T)", course.matmul(a, w, scale=s, b_is_nk=True),
                          s[:, None] * (a @ w.T))):
    err = (ours.float() - want.float()).abs().max().item() / want.float().abs().max().item()
    print(f"{what:>14}: largest difference {err:.1e} of the largest value")

# %% [markdown]
# ### What each switch buys
#
# On a GPU the next cell times every configuration of the search on its own at one large shape, as
# graph replays: the effect of each switch, side by side. Without a GPU there is nothing to show:
# these timings are not recorded, the ladder after them is.

# %%
if ON_GPU:
    n = 4096
    print(f"fast matmul at {n}^3, float16, each configuration alone, on {torch.cuda.get_device_name()}:")
    for config in course.MATMUL_CONFIGS:
        kw = config.kwargs
        tile = (f"{kw['BLOCK_M']:3} x {kw['BLOCK_N']:3} x {kw['BLOCK_K']:3}, {config.num_warps} warps, "
                f"{config.num_stages} stages")
        print(f"  {tile}, FLATTEN={kw['FLATTEN']!s:5} WARP_SPECIALIZE={kw['WARP_SPECIALIZE']!s:5}: "
              f"{course.time_matmul_config(config, n)}")
else:
    print("no GPU here: each configuration alone is timed on a GPU only; the ladder below is recorded")

# %% [markdown]
# The whole ladder, on a GPU now or as recorded: lesson 04's matmul, your two kernels, the fast
# matmul (autotuned), and cuBLAS, at four square sizes, every one timed as graph replays:

# %%
matmul_rows = timed(course, "hopper_matmul_fp16")
course.ladder(matmul_rows, ["lesson 04", "exercise 1", "exercise 2", "lesson 09", "cublas"])
for gpu, rows in matmul_rows.items():
    exercise1 = impl_named(rows, "exercise 1")
    if exercise1 and "grouped" not in exercise1:
        print(f"{gpu}: exercise 1 was recorded before it took lesson 04's grouped order (its tiles then went "
              f"row by row): its arrow holds both changes until `make bench LESSON=09` re-records it")

# %% [markdown]
# Each arrow is one step, and the factor in brackets what that step bought over the one before; the
# last column says where the fast matmul stands against cuBLAS. Do not expect every factor to be
# above one. Read each against what the step changed:
#
# - **exercise 1** moves the tiles by TMA instead of per-thread loads, in lesson 04's tile order;
#   but it runs one fixed configuration (`course.TMA_TILE`, Triton's default warps and stages), where
#   lesson 04's matmul is autotuned per shape. The first arrow compares an untuned kernel with a tuned
#   one (and, where the cell above says so, a row-by-row tile order with the grouped one);
# - **exercise 2** makes the programs persistent, and by itself that can cost: with one program per
#   tile, an SM that has room for two programs runs them side by side, and one's loads overlap the
#   other's epilogue for free. One program per SM gives that up, and without `FLATTEN` (or warp
#   specialisation) nothing inside the program takes its place: each tile's K loop starts cold;
# - **the fast matmul** puts it together: persistent programs that pipeline across tiles, and the
#   tile shape, warps and stages chosen from the search. That arrow is where the gain should show,
#   and the last column says how much of cuBLAS's speed it reaches. At the smaller sizes it can trail
#   lesson 04's matmul all the same: each of its programs builds its descriptors at the start of every
#   launch (timed on its own below), a cost a short kernel cannot hide.
#
# The lesson: the Hopper features are means, not gains. Each helps only with the others around it
# (TMA with a deep pipeline, persistence with overlap across tiles), and a change is worth keeping
# when the measurement says so.

# %% [markdown]
# ### From Python: the launch bill
#
# Graph replays give the GPU's time. A model calls a matmul from Python, one call after another, and
# then the CPU's time per call counts too: the GPU cannot start a kernel the CPU has not launched yet.
# `make bench` records that as well (`launched`: calls back to back; `host`: the CPU's time in one
# call, the GPU idle). The rows that matter for it, per recorded GPU, with each one's speed from
# Python against cuBLAS's from Python; `*` marks a call whose host time exceeds its kernel's time:

# %%
LAUNCH_ROWS = ["exercise 2: persistent_matmul", "lesson 04: matmul",
               "lesson 04: matmul, a launcher prepared once",
               "lesson 09: matmul, launched prepared", "cuBLAS"]
for gpu in recorded_devices():
    rows = [r for r in recorded_rows("hopper_matmul_fp16", gpu)[0] if "launched_ms" in r]
    if not rows:
        continue
    print(f"{gpu}: µs per call")
    print(f"  {'size':>7} {'implementation':44} {'graphed':>8} {'launched':>9} {'host':>7} "
          f"{'launched, cuBLAS ÷ this':>24}")
    for label in dict.fromkeys(r["label"] for r in rows):
        by_impl = {r["impl"]: r for r in rows if r["label"] == label}
        cublas = by_impl["cuBLAS"]["launched_ms"]
        for impl in (name for name in LAUNCH_ROWS if name in by_impl):
            r = by_impl[impl]
            waits = "*" if r["host_us"] > 1000 * r["ms"] else " "
            print(f"  {label:>7} {impl:44} {1000 * r['ms']:8.1f} {1000 * r['launched_ms']:9.1f} "
                  f"{r['host_us']:6.1f}{waits} {cublas / r['launched_ms']:24.2f}")
    if any(r["impl"] == "lesson 09: matmul" for r in rows):
        print("  lesson 09's matmul is missing here: recorded before it built its descriptors in the kernel "
              "and launched prepared\n  (its old row, with host descriptors, is in the ladder; "
              "`make bench LESSON=09` re-records it)")

# %% [markdown]
# The same rows drawn for one GPU: each implementation's speed as a share of cuBLAS's, timed the two
# ways. On the left the GPU's time alone (graph replays: lesson 04's two rows run the same kernel and
# draw one line); on the right calls back to back from Python, the host's time included:

# %%
launch_gpus = [gpu for gpu in recorded_devices()
               if any("launched_ms" in r for r in recorded_rows("hopper_matmul_fp16", gpu)[0])]
if launch_gpus:
    gpu = launch_gpus[0]
    rows = [r for r in recorded_rows("hopper_matmul_fp16", gpu)[0] if "launched_ms" in r]
    cublas = {r["size"]: r for r in rows if r["impl"] == "cuBLAS"}
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.4), sharey=True)
    for ax, (key, title) in zip(axes, (("graphed_ms", "as graph replays"),
                                       ("launched_ms", "launched from Python, back to back"))):
        for impl in LAUNCH_ROWS[:-1]:
            points = sorted((r["size"], cublas[r["size"]][key] / r[key]) for r in rows
                            if r["impl"] == impl and r.get(key) and r["size"] in cublas)
            ax.plot([n for n, _ in points], [x for _, x in points], "o-", label=impl)
        ax.axhline(1.0, color="black", linewidth=1, linestyle="--")   # cuBLAS
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(cublas), [f"{n}³" for n in sorted(cublas)])
        ax.set_xlabel("matrix size")
        ax.set_title(title, fontsize=10)
    axes[0].set_ylabel(f"cuBLAS's time ÷ this one's\n(on {gpu})")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    plt.show()

# %% [markdown]
# At the sizes marked `*` the launched column is the CPU's pace, not the kernel's. What each row does
# on the host at every call:
#
# - **exercise 2** has no autotuner, but builds three host tensor descriptors at every call: each is
#   validated in Python, then encoded into a TMA descriptor by the launch;
# - **lesson 04's matmul** has no descriptors, but goes through the autotuner and Triton's binding at
#   every call: the autotuner's key from M, N, K and the dtypes, its best configuration, then every
#   argument matched to the kernel's signature and examined to find the compiled variant (a
#   pointer's alignment to 16 bytes, an integer equal to 1 or divisible by 16);
# - **a launcher prepared once** (`helpers.launch.Launcher`) does that binding and lookup once per
#   key: the arguments' dtypes, devices, alignments and integer values, the things that decide the
#   compiled variant and the autotuner's choice. Every later call at that key hands its arguments
#   straight to the compiled kernel's launcher (with Triton 3.6, its C launcher: below), each tensor
#   as its address. Lesson 04's kernel is launched that way in the third row;
# - **lesson 09's matmul** is launched that way too, and goes one step further. What its checks read
#   (the operands' dtypes, devices, shapes, strides, and whether each starts on a 16-byte boundary)
#   also decides everything in the launcher's key, and the grid. So `matmul` keys its calls on
#   exactly that: the first call at such a key checks, lets the launcher work out its key and the
#   grid, and keeps the launch (`Launcher.bind`); each later call builds its own small key, allocates
#   C and launches. Host descriptors would still cost every call (each built and validated in Python,
#   then encoded by the launch; a prepared launch can take them, as lesson 10's attention shows), so
#   its programs build their descriptors themselves. That costs the GPU a little at the start of
#   every launch (each program writes three descriptors and waits for them to be visible before its
#   first copy), and saves the host far more: compare its host column with exercise 2's and with
#   lesson 04's prepared call (one call's host time is a single reading, and a busy host can make it
#   an outlier). With PDL, calls back to back hide most of that start: each launch builds its
#   descriptors while the kernel before it finishes;
# - **cuBLAS** does its equivalent in C++, behind one dispatch.
#
# `matmul`, checks at a key's first call only:

# %%
show(course.matmul)

# %% [markdown]
# What is left in its later calls is Python all the same: the key, C's allocation, and the hand-over
# to Triton's C launcher, which packs the arguments for the driver. (With Triton 3.6, the recorded
# one, the prepared launch calls that C launcher itself, with the descriptors' scratch memory from
# the allocator. Triton's own launch function does the same through Python that defines a helper
# function and calls it for two kinds of scratch memory at every call, which a prepared launch has
# worked out once.) Small things count at this scale: the scratch memory is handed over as an
# address, which the C launcher takes as it is (given a tensor, it would call its `data_ptr()` and
# ask the driver about the pointer), and a grid worked out at every call (the course's other
# prepared launches) divides with `helpers.launch.cdiv`, not `triton.cdiv`, whose every call from
# Python goes through the wrapper that lets kernels call it too (lesson 11 times both). Once the
# kernel outlasts all that (the larger sizes), launched and graphed meet and only the kernel matters.
# Below that, what else removes the bill:
#
# - **CUDA graphs**, where the same shapes come back step after step: no Python at all per launch
#   (lesson 11's `CapturedStep`);
# - fewer launches: fusing what comes before and after into the matmul's epilogue (next).
#
# Lesson 11 takes one launch apart and times each piece on its own.
#
# A new size has a bill of its own, paid once, and far larger. Its first call is a new key: Triton
# compiles the kernel if the size needs another specialisation (an integer divisible by 16 or not),
# and an autotuner keyed on the sizes compiles and times every candidate it keeps. Where the sizes
# change from call to call (the tokens of a batch, the length of a prompt), every new one pays that
# again. `matmul` therefore chooses once per **bucket** of sizes: its launcher is
# `Launcher(matmul_kernel, buckets=SIZE_BUCKETS)`, which takes each of M, N and K down to the power
# of 2 at or below it (`helpers.launch.power_of_2_bucket`: 2048 to 4095 share 2048's bucket). A new
# key in a bucket tuned before runs that bucket's configuration, as the autotuner runs its choice,
# and the autotuner is not asked. `make bench` timed three first calls and one repeat in a fresh
# process with Triton's disk cache empty, each synchronised before and after, with the configuration
# each ran:

# %%
for gpu in recorded_devices():
    print(f"{gpu}:")
    course.print_first_calls(hopper.get(gpu, {}).get("first_calls"))

# %% [markdown]
# - The first call at 2048³ is a new bucket: every candidate compiled, then timed.
# - 3072 rows fall in 2048's bucket. The call runs 2048's choice, and 3072, like 2048, is divisible
#   by 16: the kernel compiled for 2048³ serves it as it is. Its first call is little more than a
#   launch and the launcher's preparation, and the next one a prepared launch.
# - Without buckets, 2560 rows are a new key for the autotuner: it times every candidate again, and
#   may choose another (compare the configurations). That is a bucket's price: a size gets the choice
#   made for the first size of its bucket, which may not be its own best.
#
# Lessons 10 and 11 bucket the same way: attention by sequence length, the decoder's linear layers by
# their rows (the tokens; the weights' sizes do not change).
#
# One more cost sits on the GPU's side, in the graphed column. The fast matmul's programs build their
# three descriptors before their first copy; how long does that take? `make bench` times it on its
# own: one program per SM copies one tile through one descriptor, or through three, built on the host
# or by each program. Beside it, the 2048³ row, where the kernel takes longer than a call's host time
# on most hosts, both ways:

# %%
for gpu in recorded_devices():
    print(f"{gpu}:")
    course.print_descriptor_build(hopper.get(gpu, {}).get("descriptor_build"))
    rows = {r["impl"]: r for r in recorded_rows("hopper_matmul_fp16", gpu)[0] if r["label"] == "2048^3"}
    ours, cublas = rows.get("lesson 09: matmul, launched prepared"), rows.get("cuBLAS")
    for timing, key in (("as graph replays", "ms"), ("launched back to back", "launched_ms")):
        if ours and cublas and key in ours:
            print(f"  2048^3 {timing}: the fast matmul {1000 * ours[key]:.1f} µs, cuBLAS "
                  f"{1000 * cublas[key]:.1f} µs: {1000 * (ours[key] - cublas[key]):+.1f} µs")
    if ours and cublas and "launched_ms" in ours:
        narrowed = ours["launched_ms"] - cublas["launched_ms"] < ours["ms"] - cublas["ms"]
        print("  launched back to back, the gap " + ("narrowed: each launch built its descriptors while the "
                                                    "kernel before it finished (PDL)" if narrowed else
                                                    "widened: this host, not the kernels, set the pace"))

# %% [markdown]
# Building three descriptors in the kernel costs each launch a few µs that host descriptors would not,
# about as much as separates the fast matmul from cuBLAS at 2048³ as graph replays (compare the
# lines above). Built on the host instead, they cost the CPU at every call, even through a prepared
# launch: each is built and checked in Python, then encoded by the launch. That matters more at the
# sizes marked `*`.
#
# Launched back to back on a host that keeps up, most of that gap closes (the last line says
# whether it did). Both kernels find their inputs in L2 there, which shortens both alike; what closes
# the gap is PDL (the rows recorded before `matmul` launched with it had a launched gap as wide as
# the graphed one): each launch builds its descriptors while the kernel before it finishes its last
# tiles, and waits only after. A graph replay behind do_bench's L2 flush cannot hide them: the
# flush, not another matmul, runs just before it. Where the host is slower than the kernel (the `*`
# rows, and the 2048³ row too on a slow host), PDL cannot help: there is no kernel still running to
# overlap with, only a GPU waiting for the CPU, and the launched gap is the two host paths' costs,
# Python's against cuBLAS's C++.

# %% [markdown]
# ## Epilogues on the fast mainloop
#
# Most of what a fused kernel adds to a matmul happens once per output tile, after the K loop: in the
# *epilogue*, on the float32 accumulator, before the one store. Lesson 11's decoder block needs two:
# a scale per row (RMSNorm's 1/rms, below) and a residual add. `linear(h, w, scale, residual)`
# computes `scale[:, None] * (h @ w.T) + residual`, both optional, with `w` in `nn.Linear`'s (out,
# in) layout, in one persistent kernel whose tile loop the autotuner may flatten. Its mainloop is
# given: `linear_tile` is the K loop
# of exercise 2 over descriptors of h and W, and since W's rows are the columns of the product, it
# multiplies by the loaded tile's transpose. `tile_origin` is `tile_coords` in elements instead of
# tiles:

# %%
show(course.tile_origin)
show(course.linear_tile)
tile_origin, linear_tile = course.tile_origin, course.linear_tile     # for your kernel below

# %% [markdown]
# ## Exercise 3 · The flattened persistent loop and its epilogues
#
# Write `linear_kernel`. The launcher is written: it checks the operands, allocates the output in
# h's dtype, and launches min(SMS, tiles) programs; the autotuner picks the tile shape, warps and
# stages, and the two loop switches, from `course.EPILOGUE_CONFIGS`. The kernel builds its own
# descriptors from pointers and row strides (lesson 11 hands it views), then walks its tiles:
#
# - descriptors (`tl.make_tensor_descriptor`) of h (M, K), w (N, K) and out (M, N, rows N apart),
#   and, when `HAS_RESIDUAL`, of the residual (M, N); each with its own row stride, in tiles of
#   `BLOCK_M × BLOCK_K`, `BLOCK_N × BLOCK_K` and `BLOCK_M × BLOCK_N`;
# - the persistent walk as one `tl.range(first, n_tiles, step, flatten=FLATTEN,
#   warp_specialize=WARP_SPECIALIZE)`: with `flatten=True` the compiler merges it with the K loop of
#   `linear_tile` into one pipelined loop, so the next tile's loads are in flight while this tile's
#   epilogue runs;
# - per tile: `tile_origin`, `linear_tile`, then the epilogue on the float32 accumulator, in the
#   formula's order: with `HAS_SCALE`, each row times its scale (the last tiles have rows past M:
#   mask that load); then, with `HAS_RESIDUAL`, the residual's tile added, in float32; then one
#   store, converted to out's dtype.
#
# `HAS_SCALE` and `HAS_RESIDUAL` are compile-time constants, so a call without them compiles to the
# bare matmul. The check's cases hold random scales of both signs, views, odd M, more tiles than
# programs, and a float16 case whose scaled product passes float16's largest value before the
# residual brings it back. It also reads the interpreter's record of your launch: the programs it
# ran, how many tiles each stored (none more than its share), how often each output element was
# stored and each residual element read; and the output must be contiguous. Last, it gives your
# autotuner one configuration of 32 × 64 × 16 tiles for one more small product: on a GPU the autotuner
# may choose square tiles for every case, where `BLOCK_M` and `BLOCK_N` mixed up go unnoticed.

# %% tags=["exercise"]
@triton.autotune(configs=course.EPILOGUE_CONFIGS, key=["M", "N", "K", "HAS_SCALE", "HAS_RESIDUAL"])
@triton.jit
def linear_kernel(h_ptr, w_ptr, s_ptr, r_ptr, out_ptr, M, N, K, stride_h, stride_w, stride_r,
                  HAS_SCALE: tl.constexpr, HAS_RESIDUAL: tl.constexpr, BLOCK_M: tl.constexpr,
                  BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                  FLATTEN: tl.constexpr, WARP_SPECIALIZE: tl.constexpr):
    """out = s[:, None] * (h @ w.T) + r, scale and residual optional: program p walks tiles p, p + P, ..."""
    # YOUR CODE HERE:
    # 1. descriptors of h, w, out and (if HAS_RESIDUAL) r, each with its own row stride;
    # 2. for tile in tl.range(this program's first tile, the number of tiles, the number of programs,
    #                         flatten=FLATTEN, warp_specialize=WARP_SPECIALIZE):
    #        off_m, off_n from tile_origin; acc from linear_tile;
    #        if HAS_SCALE: each row of acc times its scale (masked past M);
    #        if HAS_RESIDUAL: acc plus the residual's tile, in float32;
    #        one store of acc, converted to out's dtype.
    pass


def linear(h, w, scale=None, residual=None):
    """scale[:, None] * (h @ w.T) + residual in one kernel; h (M, K), w (N, K), scale (M,) float32,
    residual (M, N) in h's dtype; every matrix with contiguous, 16-byte aligned rows."""
    assert h.dim() == w.dim() == 2 and h.shape[1] == w.shape[1], "h (M, K) and w (N, K)"
    assert w.dtype == h.dtype, "h and w must share a dtype"
    (M, K), N = h.shape, w.shape[0]
    if scale is not None:
        assert scale.shape == (M,) and scale.dtype == torch.float32 and scale.stride(0) == 1, \
            "scale: (M,) float32, contiguous: one factor per row"
    out = torch.empty((M, N), device=h.device, dtype=h.dtype)
    course._check_tma(h=h, w=w, out=out, **({} if residual is None else {"residual": residual}))
    if residual is not None:
        assert residual.shape == (M, N) and residual.dtype == h.dtype, "residual: (M, N), in h's dtype"
    stride_r = 0 if residual is None else residual.stride(0)
    linear_kernel[course._persistent_grid(M, N)](h, w, scale, residual, out, M, N, K, h.stride(0),
                                                 w.stride(0), stride_r, HAS_SCALE=scale is not None,
                                                 HAS_RESIDUAL=residual is not None)
    return out


# %%
check("linear", linear)

# %% [markdown]
# The residual's tile costs shared memory too: with the flattened loop, a 128 × 256 tile did not fit
# beside it in what one program may claim on an H100 (the table near the top), so
# `EPILOGUE_CONFIGS` adds two configurations without `FLATTEN` for the autotuner to weigh. On a GPU
# its tiles of 16 rows are for decoding (lesson 11's step, 16 new tokens): with so few rows a matmul
# only reads weights, and narrow tiles, each reading a 256-wide slice of K per step, put more SMs to
# that work. The configurations on this device (the interpreter's one, on a CPU):

# %%
for config in course.EPILOGUE_CONFIGS:
    print(config)

# %% [markdown]
# On the decoder block's own four matmuls (lesson 11's, at Llama-2-7B width), on a GPU now or as
# recorded, against lesson 04's mainloop and cuBLAS. `verdicts` (from `helpers.bench`) says at how
# many shapes one implementation beats another, and each ratio (their time over ours, so above 1 is a
# win). Lesson 04's kernel runs twice: on `w.T`, the view of W the block has (K is its contiguous
# dimension, a layout lesson 04's loads were not written for), and on a row-major (K, N) copy of W,
# made once, outside the timing:

# %%
matmuls = timed(course, "block_matmuls_fp16")
lesson04_row_major = "lesson 04's mainloop, W row-major (K, N)"
recorded_with = [name for name in ("lesson 04's mainloop", lesson04_row_major, "cuBLAS")
                 if any(r["impl"] == name for rows in matmuls.values() for r in rows)]
verdicts(matmuls, "persistent, TMA (lesson 09)", recorded_with)
if matmuls and lesson04_row_major not in recorded_with:
    print(f"{lesson04_row_major!r}: not recorded yet (`make bench LESSON=09` on a GPU records it)")

# %% [markdown]
# Read the lesson 04 verdicts together: what remains against lesson 04 on row-major W is what
# descriptors, persistence and the tuned search bought, and the difference between its two rows is
# the layout's share. The cuBLAS verdict is where the kernel stands
# against the vendor's hand-tuned kernels.

# %% [markdown]
# ## RMSNorm + linear, done right
#
# Lesson 05 fused RMSNorm into the following linear layer two ways: one kernel that normalised each
# tile of x inside the matmul's K loop, and the same algebra with the matmul kept pure, whose speed
# there was that of lesson 04's matmul. Here is the second on the fast mainloop. For inference, with
# $s_i = 1 / \mathrm{rms}(x_i)$:
#
# $$\mathrm{rms\_norm}(x)\,\gamma\,W^\top = \operatorname{diag}(s)\; x\; (W \operatorname{diag}\gamma)^\top$$
#
# - **γ is folded into W once**, when the weights are loaded: `fold_gamma(w, gamma)`, computed in
#   float32 and stored in W's dtype. Nothing of the norm is left in the mainloop.
# - **1/rms is computed once per row**, by lesson 05's `inv_rms`: one pass over x that writes M
#   float32 values.
# - **The row scale rides in the fast matmul's epilogue** (`HAS_SCALE`): x goes to the tensor cores
#   exactly as TMA copied it, and the accumulator's rows are scaled before the one store.
#
# The first version's trouble was the mainloop: a tile of A that must be changed between the load and
# the multiply has to be brought into registers, scaled, and fed to the tensor cores from there
# (`wgmma` takes its first operand from registers too), a detour from the TMA → shared memory →
# `wgmma` path.

# %%
show(course.fold_gamma)
show(course.rmsnorm_linear)
x = torch.randn(40, 96, device=DEVICE, dtype=dtype)
gamma = (1 + 0.1 * torch.randn(96, device=DEVICE)).to(dtype)
w = (torch.randn(72, 96, device=DEVICE) / 96**0.5).to(dtype)
w_folded = course.fold_gamma(w, gamma)                 # once, when the weights are loaded
ours, want = course.rmsnorm_linear(x, w_folded), course.rmsnorm_linear_reference(x, gamma, w)
print(f"largest difference from F.rms_norm then the matmul: {(ours - want).abs().max().item():.1e}")

# %% [markdown]
# What it moves, counted by the interpreter (two launches: the 1/rms pass, then the matmul):

# %%
if not ON_GPU:   # the meter replays the kernels in the interpreter: on the CPU only, here
    moved = triton_traffic(course.rmsnorm_linear, x, w_folded)
    for launch in moved.launches:
        print(f"  {launch.kernel:16} read {launch.bytes_loaded:8,} B, wrote {launch.bytes_stored:6,} B")
    print(f"x itself is {x.nbytes:,} B: the 1/rms pass reads exactly that, and the matmul reads x and W "
          f"again, tile by tile, as any tiled matmul does")
else:
    print("the traffic meter runs the kernels through the interpreter: run the notebook on the CPU to see it")

# %% [markdown]
# So this design reads x twice: once in the 1/rms pass, once in the matmul. Against eager PyTorch
# (`F.rms_norm` reads x and writes the normalised copy, the matmul reads that copy) it saves one
# write of an x-sized tensor. How much is one pass over x worth, next to the matmul?
# At the datasheet's rates, for the benchmark's shapes, in bfloat16:

# %%
for chip_name in ("H100 SXM", "H200"):
    chip = CHIPS[chip_name]
    for M, K, N in ((8192, 4096, 4096), (8192, 4096, 1024)):
        pass_s = 2 * M * K / (chip.bandwidth_tbs * 1e12)              # one read (or write) of x
        matmul_s = 2 * M * N * K / (chip.tflops["bf16"] * 1e12)
        print(f"{chip.name}, M={M} K={K} N={N}: one pass over x takes {pass_s / matmul_s:5.1%} of the "
              f"matmul's time at peak; eager adds two (the norm's read and write), the course's kernels one")

# %% [markdown]
# The share grows as N shrinks (the matmul does less work per row of x): at wide N the passes over x
# are small next to the matmul and the implementations differ mostly by their matmuls; at narrow N
# the saved pass matters more. On a GPU now, or as recorded (every implementation timed as CUDA-graph
# replays: the GPU's time, without the host's work of building descriptors and launching):

# %%
rmsnorm_rows = timed(course, "hopper_rmsnorm_linear_bf16")
ratios(rmsnorm_rows, "lesson 09", ["f.rms_norm", "torch.compile", "lesson 05"])

# %% [markdown]
# Above 1, the lesson's two kernels beat that implementation at that shape; below 1, they lose. To
# see which to expect, put two numbers side by side: the share of the matmul's time that one pass
# over x is worth (printed above: what the course's version saves against eager), and how far the
# fast matmul trails cuBLAS (the last column of the matmul ladder; here the matmul also reads W
# transposed and scales rows in its epilogue). The fusion can win only where the first is larger.
# At wide N the saved pass is worth a few percent, and a mainloop a few percent behind cuBLAS erases
# it; at narrow N it is worth more, and the fusion has its best chance, if the mainloop keeps up at
# that shape (W read transposed, a row scale in the epilogue): the table decides. Read it GPU by GPU:
# the same kernels on two GPUs need not give the same verdict.
#
# `torch.compile` (its default mode, as timed here) generates the norm, which reads x and writes the
# normalised copy, and keeps cuBLAS for the matmul: the same passes over x as eager, each as fast as
# Inductor makes it. Lesson 05's version runs the same two kernels' algebra on a lesson 04-style
# mainloop with one fixed tile shape; the last column compares the two mainloops, not the fusions.
#
# Where it cannot win: its whole advantage over a norm kernel followed by cuBLAS is one pass over x
# (the normalised copy is never written), and it still reads x twice. Against that one
# pass stands the mainloop's gap to cuBLAS at the shape.
#
# The second read is not forced, though. Before its epilogue runs, each output tile's K loop has
# streamed every column of the tile's rows of x: their sums of squares can be gathered from those
# same A tiles on the way, and 1/rms applied in the epilogue as the row scale, with x read once. The
# operand is not changed (the tensor cores still read it from shared memory as TMA wrote it), which
# is what sets this apart from lesson 05's first version. In Triton it means reading each A tile a
# second time, from shared memory into registers (`a.to(tl.float32)`, squared and summed along K),
# inside the mainloop: registers and instruction slots that the pipeline and `wgmma` were using, and
# the same sums repeated by each of a row's output tiles. Whether that costs less than a pass over x
# is a measurement this lesson has not made.

# %% [markdown]
# ## Takeaways
#
# - Hopper adds hardware that works beside the threads: TMA copies whole tiles, `wgmma` multiplies
#   asynchronously from shared memory, and enough shared memory to pipeline several steps ahead.
#   Triton reaches them with tensor descriptors, `tl.dot` and `num_stages`; `warp_specialize=True`
#   is a request (documented for Blackwell), granted only where the ttgir holds `ttg.warp_specialize`.
# - A tensor descriptor needs a contiguous last dimension and 16-byte aligned start and strides;
#   in return no load needs an address or a mask: past the edges tiles read zeros, and stores are
#   dropped. The interpreter runs descriptors too.
# - Persistent programs (one per SM) set up once, let the pipeline run across tiles, and make the
#   tile order the kernel's choice; they do not fix a partial last wave.
# - The default autotuner times each candidate behind a 256 MiB L2 flush: host time per candidate
#   that outlasts the flush is counted as the kernel's, and a short kernel's choice can then change
#   between runs. Time candidates as CUDA-graph replays (one short host call each), prune the
#   search per shape, and choose once per bucket of sizes, not at every new size.
# - Measure each step against the one before: alone, a step can lose (TMA without tuning, persistence
#   without overlap across tiles); together they bring the matmul to cuBLAS's speed on large
#   products. On small ones, descriptors built in the kernel cost GPU time at every launch (the graph
#   replays show it), and launched back to back PDL hides most of it.
# - Epilogues ride on the mainloop: on the float32 accumulator, after the K loop, before the tile's
#   one store (scale, then residual), they cost a little work and save a round trip of the output;
#   the flattened loop overlaps them with the next tile's loads. RMSNorm + linear for inference: γ
#   folded into W once, 1/rms once per row, the row scale in the epilogue of a fast matmul; x is read
#   twice, and Σx² gathered in the K loop could make it once (unmeasured here).

# %%
self_check("09")

# %%
flashcards("09")
