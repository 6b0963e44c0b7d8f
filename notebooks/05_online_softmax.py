# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 05 · Online softmax, fused softmax, and the normalisation fusions
#
# Softmax turns a row of scores into probabilities. It sits inside every attention layer and at the
# end of every classifier, and it does almost no arithmetic per byte: its speed is the speed at which
# it moves its rows through memory. This lesson makes it move each row as few times as possible.
#
# **You will learn:**
# - why softmax subtracts the row's max, and how many passes over the row that costs;
# - to count the kernels and bytes of an eager softmax, and of a fused one;
# - the *one row per program* pattern: a reduction and the elementwise work around it in one kernel;
# - the *online* softmax: a running max and a running sum, rescaled when the max grows, derived and
#   checked in PyTorch before any kernel;
# - a tiled kernel for rows far longer than a block (hundreds of thousands of columns);
# - the numerical traps: huge inputs, `-inf` entries, fully masked rows, float16 sums;
# - to fuse RMSNorm into the linear layer after it, and when that fusion pays;
# - what the autotuner does, and what it remembers;
# - GroupNorm + Mish for diffusion U-Nets in one kernel, and when a split reduction pays.
#
# Exercises: a row softmax kernel, the online softmax in PyTorch, a tiled online softmax kernel, a
# fused RMSNorm + linear kernel, and GroupNorm + Mish in one kernel.
#
# This lesson is longer than one sitting: it keeps the course's normalisations together (softmax,
# RMSNorm, GroupNorm), which share one pattern, a reduction and the elementwise work around it. Take
# it in two: up to the tiled kernel (exercise 3), then the fusions.

# %% [markdown]
# ## Setting up

# %%
from helpers import DEVICE, ON_GPU, check, describe, passed, pick
from helpers.bench import Bench, compare, recorded_devices, recorded_rows, timed, verdicts
from helpers.cards import flashcards, self_check
from helpers.solutions import load_solution, show
from helpers.traffic import eager_traffic, show_programs, triton_traffic

import math

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

print(describe())
course = load_solution("05")     # the lesson's kernels from solutions/: shown and timed below

# %% [markdown]
# ## Why softmax subtracts the max
#
# For a row $x$ of $N$ values, $\mathrm{softmax}(x)_i = e^{x_i} / \sum_j e^{x_j}$. Written like that it
# breaks on ordinary inputs: $e^{x}$ overflows float32 for $x > 88.7$ and float16 for $x > 11.1$, and
# then the ratio is `inf / inf`, which is NaN.
#
# Softmax does not change when the same constant is subtracted from every entry (the factor $e^{-c}$
# cancels). Choosing $c = \max_j x_j$ makes every exponent $\le 0$: each term lies in $(0, 1]$, the
# largest is exactly 1, and the sum lies between 1 and $N$. Nothing can overflow.

# %%
x = torch.tensor([1000.0, 1001.0, 999.0])
print("exp(x) / sum     :", torch.exp(x) / torch.exp(x).sum())
z = x - x.max()
print("exp(x - max) / sum:", torch.exp(z) / torch.exp(z).sum())

# %% [markdown]
# The price is a dependency: the exponentials need the max, and the output needs the sum of the
# exponentials. Done naively, that is three passes over the row: find the max, sum the exponentials,
# write the outputs. How many of those passes go to memory is what the rest of the lesson is about.
#
# ## The eager softmax, counted
#
# Here is the stable softmax one PyTorch operation at a time. Each line is a kernel that reads its
# inputs from memory and writes its result back:

# %%
def softmax_naive(x):
    m = x.amax(dim=1, keepdim=True)   # read MN, write M
    z = x - m                         # read MN + M, write MN
    e = torch.exp(z)                  # read MN, write MN
    s = e.sum(dim=1, keepdim=True)    # read MN, write M
    return e / s                      # read MN + M, write MN


# %% [markdown]
# The comments add up to 5·MN elements read and 3·MN written. The least any softmax can move is one
# read and one write of the matrix, 2·MN: the eager version moves four times that, in five launches.
# The traffic meter counts the same thing from the operations PyTorch really dispatches:

# %%
M, N = 64, 256
x = torch.randn(M, N)
naive = eager_traffic(softmax_naive, x)
print("naive        :", naive)
for op, nbytes in naive.ops:
    print(f"   {op:>5}: {nbytes:>7,} bytes")
print("torch.softmax:", eager_traffic(torch.softmax, x, 1))
print(f"least possible: {2 * x.nbytes:,} bytes (read the matrix once, write it once)")

# %% [markdown]
# `torch.softmax` is already one kernel, and by this count it moves the least possible bytes (how often
# it re-reads a row *inside* that kernel, a count of inputs and outputs cannot see). The rest of the lesson
# builds kernels like it, then goes where it cannot: rows longer than a block, and a normalisation
# fused into the matrix multiply that follows it.
#
# ## One row per program
#
# A row reduction followed by elementwise work on the same row (softmax, RMSNorm, LayerNorm) fuses
# naturally when **one program owns a whole row**: it loads the row into registers once, reduces it
# there as often as it likes, and writes the result once. The row must fit: the block is the row
# length rounded up to a power of two (`triton.next_power_of_2`), the lanes past the end are masked,
# and the number of warps grows with the block so that each thread holds a modest number of values.
# (The rule below, about 16 values per thread and at most 16 warps, was chosen by timing rows of 1,024
# to 16,384 values on an H200; `make bench` does not record that sweep, so try others on your GPU.)

# %%
MAX_ROW_BLOCK = 16384  # the widest row one program holds in registers here


def row_warps(block):
    """Warps for a program that holds `block` values of one row: 16 values per thread, up to 16 warps."""
    return min(16, max(2, block // 512))


# %% [markdown]
# ### A worked example: RMSNorm
#
# RMSNorm, the normalisation of most recent transformers, scales each row by the inverse of its
# root mean square, then by a learned vector $\gamma$: $y = x / \sqrt{\mathrm{mean}(x^2) + \epsilon}
# \cdot \gamma$. One reduction (the sum of squares), then elementwise work. The kernel computes in
# float32 whatever the storage type, and masked lanes load 0 so they add nothing to the sum. The row
# index is made an int64 before it meets a stride: on a large matrix `row * stride_xm` passes what an
# int32 holds (the traps table after exercise 3 shows when).

# %%
@triton.jit
def rms_norm_kernel(x_ptr, g_ptr, out_ptr, n_cols, eps, stride_xm, stride_xn, stride_om,
                    BLOCK_N: tl.constexpr):
    """out[row] = x[row] / sqrt(mean(x[row]^2) + eps) * g, the whole row in registers."""
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride_xm can pass the int32 limit, 2^31 - 1
    offs = tl.arange(0, BLOCK_N)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * stride_xm + offs * stride_xn, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(g_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    inv_rms = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)  # masked lanes add 0 to the sum
    tl.store(out_ptr + row * stride_om + offs, (x * inv_rms * g).to(out_ptr.dtype.element_ty), mask=mask)


# %% [markdown]
# The launcher checks the shapes, allocates the output and launches one program per row. Passing both
# strides of `x` lets it take views (a slice of a wider matrix, a transposed tensor) without a copy.

# %%
def rms_norm_rows(x, gamma, eps=1e-6):
    """RMSNorm over the last dimension of a 2-D tensor, one row per program."""
    assert x.dim() == 2 and gamma.shape == (x.shape[1],), "x (M, K) and gamma (K,)"
    n_rows, n_cols = x.shape
    out = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    BLOCK_N = triton.next_power_of_2(n_cols)
    assert BLOCK_N <= MAX_ROW_BLOCK, f"rows of at most {MAX_ROW_BLOCK} values fit one program"
    rms_norm_kernel[(n_rows,)](x, gamma, out, n_cols, eps, x.stride(0), x.stride(1), out.stride(0),
                               BLOCK_N=BLOCK_N, num_warps=row_warps(BLOCK_N))
    return out


xr = torch.randn(37, 300, device=DEVICE, dtype=torch.float16)
gr = torch.randn(300, device=DEVICE, dtype=torch.float16)
want = F.rms_norm(xr.float(), (300,), gr.float(), 1e-6)
print("matches F.rms_norm to float16 rounding:",
      torch.allclose(rms_norm_rows(xr, gr).float(), want, atol=2e-3, rtol=2e-3))

# %% [markdown]
# Each program owns one row: below, a 6 x 40 output coloured by the program that wrote each element.

# %%
picture = show_programs(rms_norm_rows, torch.randn(6, 40, device=DEVICE), torch.ones(40, device=DEVICE),
                        arg="out_ptr", shape=(6, 40))

# %% [markdown]
# The meter confirms one launch, one read and one write of `x`. It also counts $\gamma$ once per
# program (every program loads it); on a GPU those repeated reads of a small vector come from the
# cache, so HBM sees little more than 2·MK elements.

# %%
print("one row per program:", triton_traffic(rms_norm_rows, xr, gr))
print(f"x read once + out written once = {2 * xr.nbytes:,} bytes; gamma per row = {37 * gr.nbytes:,} bytes")

# %% [markdown]
# On a GPU, one read and one write should run close to the device-to-device copy, the fastest any
# kernel moves bytes. The cell below times `rms_norm_rows` against `F.rms_norm`, `torch.compile` of
# the op-by-op version, and that eager version; without a GPU it shows the
# figures `make bench` recorded on one. GB/s counts one read and one write of `x`.

# %%
def rms_norm_naive(x, gamma, eps=1e-6):
    xf = x.float()                                   # read MK, write MK (float32)
    ms = xf.pow(2).mean(dim=-1, keepdim=True)        # read MK, write MK; read MK, write M
    return (xf * torch.rsqrt(ms + eps) * gamma).to(x.dtype)  # several more full passes


def rms_benches():
    compiled = torch.compile(rms_norm_naive, dynamic=False)
    for m, k in ((32768, 4096), (16384, 8192)):
        x = torch.randn(m, k, device=DEVICE, dtype=torch.bfloat16)
        g = (1 + 0.1 * torch.randn(k, device=DEVICE)).to(torch.bfloat16)
        yield Bench("rmsnorm", k, bytes=2 * x.nbytes + g.nbytes, flops=4 * m * k, label=f"{m}x{k} bf16",
                    impls={"triton, one row per program": lambda x=x, g=g: rms_norm_rows(x, g),
                           "F.rms_norm": lambda x=x, g=g: F.rms_norm(x, (x.shape[1],), g, 1e-6),
                           "torch.compile(naive)": lambda x=x, g=g: compiled(x, g),
                           "torch eager naive": lambda x=x, g=g: rms_norm_naive(x, g)})


rms_rows = compare("rmsnorm", rms_benches)

# %% [markdown]
# ## Exercise 1 · Softmax, one row per program
#
# Write `softmax_rows_kernel`, following `rms_norm_kernel`: one program per row, the row in registers,
# one load and one store. Softmax needs two reductions of the same registers (the max, then the sum),
# which cost no extra memory traffic. Get these details right; the check tests each one:
#
# - **masked lanes** load `-inf` (`other=-float("inf")`): they leave the max alone and add
#   $e^{-\infty} = 0$ to the sum;
# - **float32 arithmetic**: convert after loading, convert back to the output's dtype when storing;
# - **fully masked rows**: a row that is `-inf` everywhere (a query allowed to attend to nothing) has
#   max `-inf`, and `-inf - (-inf)` is NaN. `torch.softmax` returns NaN there; this course returns
#   zeros, which is what such a row should contribute, and keeps NaN out of the loss. Use 0 in place
#   of a `-inf` max (then every $e^{x - 0}$ is 0), and 1 in place of a zero sum (then $0 / 1 = 0$).
#   For any other row the sum is at least 1: the max contributes $e^0$.
# - **strides**: element `(row, j)` of `x` is at `x_ptr + row * stride_xm + j * stride_xn`, with
#   `row` an int64 as in `rms_norm_kernel`; the output is contiguous.
#
# The check uses ragged widths, values up to ±1e4, rows wholly below -1e5, float16 rows, `-inf`
# entries and fully masked rows (in ragged rows and in rows a power of two wide, where no lane past
# the end is there to stand in for a missing guard), three non-contiguous views (a slice of a wider
# matrix, every other column, a transposed matrix), and near-constant rows
# whose outputs are all about 1/N. It compares probabilities relative to their size, to within one
# float16 rounding: exponentials or sums kept in float16 show.

# %% tags=["exercise"]
@triton.jit
def softmax_rows_kernel(x_ptr, out_ptr, n_cols, stride_xm, stride_xn, stride_om, BLOCK_N: tl.constexpr):
    """Softmax of row program_id(0) of x, its n_cols <= BLOCK_N values held in registers."""
    # YOUR CODE HERE:
    # 1. row = tl.program_id(0).to(tl.int64); load the row (masked lanes: other=-float("inf")) and
    #    convert it to float32;
    # 2. m = its max (tl.max(x, axis=0)), with 0 where m is -inf (tl.where);
    # 3. e = tl.exp(x - m) and l = its sum, with 1 where l is 0;
    # 4. store e / l, converted with .to(out_ptr.dtype.element_ty), masked.
    pass


def softmax_rows(x):
    """Softmax over the rows of a 2-D tensor whose rows fit one block; fully masked rows give 0."""
    assert x.dim() == 2, "softmax_rows takes a 2-D tensor"
    n_rows, n_cols = x.shape
    out = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    BLOCK_N = triton.next_power_of_2(n_cols)
    assert BLOCK_N <= MAX_ROW_BLOCK, f"rows of at most {MAX_ROW_BLOCK} values: use softmax_tiled"
    softmax_rows_kernel[(n_rows,)](x, out, n_cols, x.stride(0), x.stride(1), out.stride(0),
                                   BLOCK_N=BLOCK_N, num_warps=row_warps(BLOCK_N))
    return out


# %%
check("softmax_rows", softmax_rows)

# %% [markdown]
# Your kernel against the eager version, counted by the meter:

# %%
if passed("softmax_rows"):
    fused = triton_traffic(softmax_rows, x.to(DEVICE))
    print("eager naive  :", naive)
    print("your kernel  :", fused)
    print(f"{naive.bytes / fused.bytes:.1f}x fewer bytes, {naive.kernels}x fewer launches")

# %% [markdown]
# On a GPU the next two cells time your kernel against `torch.softmax`, `torch.compile` of the naive
# version and the eager version, for float32 then float16 rows of 1,024 to 16,384 columns (without a
# GPU: the recorded figures). GB/s counts one read and one write of the matrix.

# %%
def softmax_benches(dtype, name):
    torch.compiler.reset()  # a clean slate: torch.compile recompiles a function for at most 8 shapes
    compiled = torch.compile(softmax_naive, dynamic=False)
    for m, n in ((32768, 1024), (32768, 4096), (8192, 16384)):
        x = torch.randn(m, n, device=DEVICE, dtype=dtype)
        yield Bench(f"softmax_{name}", n, bytes=2 * x.nbytes, flops=5 * m * n, label=f"{m}x{n} {name}",
                    impls={"triton, one row per program": lambda x=x: softmax_rows(x),
                           "torch.softmax": lambda x=x: torch.softmax(x, dim=1),
                           "torch.compile(naive)": lambda x=x: compiled(x),
                           "torch eager naive (5 kernels)": lambda x=x: softmax_naive(x)})


if not ON_GPU or passed("softmax_rows"):  # on a GPU, this times your kernel
    fp32_rows = compare("softmax_fp32", lambda: softmax_benches(torch.float32, "fp32"))

# %%
if not ON_GPU or passed("softmax_rows"):  # on a GPU, this times your kernel
    fp16_rows = compare("softmax_fp16", lambda: softmax_benches(torch.float16, "fp16"))

# %% [markdown]
# `torch.compile` is the strongest baseline in most rows of these tables, and the closest. Its time
# over yours, shape by shape (above 1, your kernel is faster; below 1, Inductor's is):

# %%
def compile_over_ours(rows):
    """{shape: torch.compile's time / the lesson's kernel's time} from one table's rows."""
    ms = {(r["label"], r["impl"]): r["ms"] for r in rows}
    return {label: ms[label, "torch.compile(naive)"] / ms[label, impl]
            for label, impl in ms if impl.startswith("triton")}


if not ON_GPU or passed("softmax_rows"):  # on a GPU, these are your kernel's timings
    for group, table in (("rmsnorm", rms_rows), ("softmax_fp32", fp32_rows), ("softmax_fp16", fp16_rows)):
        if table:
            where = table[0].get("device", "measured now")
            shapes = ", ".join(f"{label} {r:.3f}" for label, r in compile_over_ours(table).items())
            print(f"{group} ({where}): {shapes}")

# %% [markdown]
# Close to 1 wherever both kernels are close to the copy ceiling (the tables' last column): one read
# and one write is all either can do, and there is little left to win. `torch.compile` does not run
# PyTorch's ops one by one here: Inductor generates a Triton kernel much like yours. In the code that
# torch 2.11's Inductor generated on a Hopper GPU for rows of 1,024 and of 32,768 floats (recorded
# in `helpers/recorded/inductor_gpu/`; lesson 07 prints the second), rows of 1,024 are held in
# registers, as in your kernel; longer rows are walked twice in chunks, the first pass loading with
# `eviction_policy="evict_last"` (keep these lines in L2) and the second with `"evict_first"`, so
# that the second read comes from L2, not from memory. Reading twice from a row that is still in L2
# costs almost nothing, and the chunked loop needs fewer registers than a whole row. Where a ratio
# is below 1, Inductor's kernel was the faster on that GPU; where one is far above 1, Inductor's
# kernel stayed well under the copy ceiling at that shape.

# %% [markdown]
# ## Rows longer than a block
#
# One program holds at most about 16K float32 values in registers here (16 warps x 32 threads x 32
# values; an SM has 64K registers in all). A row of 262,144 columns, a long attention row or a
# vocabulary-sized output, does not fit. The program has to
# walk the row in tiles, and every pass over the row becomes a pass over memory:
#
# | schedule | reads of the row | writes | bytes, in units of MN elements |
# |---|---|---|---|
# | max, then sum of exp, then write | 3 | 1 | 4 |
# | **online**: max and sum together, then write | 2 | 1 | 3 |
# | whole row in registers (when it fits) | 1 | 1 | 2 |
#
# The *online softmax* computes the max and the sum of exponentials in a single pass, before it knows
# the max. Here is how.
#
# ## The online recurrence
#
# After seeing $x_1, \dots, x_j$, keep two numbers: the running max $m_j = \max_{i \le j} x_i$ and the
# running sum $l_j = \sum_{i \le j} e^{x_i - m_j}$, measured against that max. When $x_{j+1}$ arrives,
# the max becomes $m_{j+1} = \max(m_j, x_{j+1})$, and
#
# $$l_{j+1} = \sum_{i \le j+1} e^{x_i - m_{j+1}}
#           = e^{m_j - m_{j+1}} \sum_{i \le j} e^{x_i - m_j} + e^{x_{j+1} - m_{j+1}}
#           = l_j \, e^{m_j - m_{j+1}} + e^{x_{j+1} - m_{j+1}}.$$
#
# When the max does not change, the factor $e^{m_j - m_{j+1}}$ is 1. When it grows, the old terms were
# measured against a max that was too small, and the factor shrinks them to the new one. Every exponent
# stays $\le 0$, so nothing overflows. At the end, $m_N$ is the max, $l_N$ is the softmax denominator,
# and a second pass writes $e^{x_i - m_N} / l_N$.
#
# First, one row, element by element, printed as it goes:

# %%
row = torch.tensor([0.5, 2.0, -1.0, 3.5, 3.0], dtype=torch.float64)
m, l = -math.inf, 0.0
for value in row.tolist():
    m_new = max(m, value)
    l = l * math.exp(m - m_new) + math.exp(value - m_new)
    m = m_new
    print(f"saw {value:5.1f}: m = {m:4.1f}, l = {l:.6f}")
print("check: max =", row.max().item(), " sum of exp(x - max) =", torch.exp(row - row.max()).sum().item())

# %% [markdown]
# The same recurrence works for a **chunk** of values at once: the chunk's max updates $m$, and the
# chunk's exponentials, taken against the new max, are summed into the rescaled $l$. Checked on a long
# random row in chunks of 100:

# %%
row = torch.randn(10_000, dtype=torch.float64) * 5
m, l = torch.tensor(-math.inf, dtype=torch.float64), torch.tensor(0.0, dtype=torch.float64)
for chunk in row.split(100):
    m_new = torch.maximum(m, chunk.max())
    l = l * torch.exp(m - m_new) + torch.exp(chunk - m_new).sum()
    m = m_new
print("online   :", m.item(), l.item())
print("two-pass :", row.max().item(), torch.exp(row - row.max()).sum().item())

# %% [markdown]
# ### Merging two partial results
#
# Two states built from different parts of a row, $(m_a, l_a)$ and $(m_b, l_b)$, merge the same way:
# $m = \max(m_a, m_b)$ and $l = l_a e^{m_a - m} + l_b e^{m_b - m}$. The merge is associative and
# commutative, so the row can be split any way at all: among the lanes of a program (exercise 3), among
# programs, or among the key blocks of an attention row (FlashAttention, lesson 06).

# %%
def merge(a, b):
    (m_a, l_a), (m_b, l_b) = a, b
    m = max(m_a, m_b)
    return m, l_a * math.exp(m_a - m) + l_b * math.exp(m_b - m)


def state(part):
    m = part.max().item()
    return m, torch.exp(part - m).sum().item()


print("merged halves:", merge(state(row[:3000]), state(row[3000:])))
print("whole row    :", state(row))

# %% [markdown]
# ### The `-inf` trap
#
# Masked entries are `-inf`. If every value seen so far is `-inf` (a masked prefix, as in a causal
# mask, or a fully masked row), then $m_j = m_{j+1} = -\infty$ and the factor is
# $e^{-\infty - (-\infty)} = e^{\mathrm{NaN}}$: one NaN poisons the whole row.

# %%
m, m_new = torch.tensor(-math.inf), torch.tensor(-math.inf)
print("exp(m - m_new) =", torch.exp(m - m_new))
safe = torch.where(m_new == -math.inf, 0.0, m_new)
print("exp(m - safe)  =", torch.exp(m - safe), " (and l = 0 * that + exp(-inf - safe) stays 0)")

# %% [markdown]
# The fix: subtract a *safe* max, 0 wherever the max is still `-inf`. Then the old sum (0) is scaled by
# $e^{-\infty} = 0$ and the new `-inf` values add $e^{-\infty} = 0$: $l$ stays 0 until the first finite
# value, and a fully masked row ends with $l = 0$, which the output pass treats as in exercise 1.
#
# ## Exercise 2 · Online softmax in PyTorch
#
# Write the algorithm in plain PyTorch before the kernel, so that a bug in the algorithm can't hide
# behind a bug in the indexing. `x` is `(M, N)`; treat all rows at once with vector operations (as the
# programs of a kernel would) and the columns `chunk` at a time.
#
# - Pass 1: `m` of `-inf` and `l` of 0 for every row; for each chunk, the new max, its safe version,
#   then the rescaled sum, as above.
# - Pass 2: `exp(x - safe max) / l` for each chunk of columns, written into the output, with 1 in place
#   of a zero `l` (fully masked rows give 0).
#
# Keep the dtype of `x` (the check uses float32 and float64). Once the values are right, the check
# watches every PyTorch operation your function runs: none may work on more than one chunk of
# columns, the chunks span all rows (no loop over rows), each element of `x` is read in two passes,
# and each element of the output written once.

# %% tags=["exercise"]
def online_softmax_torch(x, chunk):
    """Softmax over the rows of x, reading the columns `chunk` at a time with a running max and sum."""
    # YOUR CODE HERE: pass 1 over the chunks builds m and l (use x[:, start:start + chunk],
    # torch.maximum, amax(dim=1), torch.where for the safe max); pass 2 writes the output.
    raise NotImplementedError("write online_softmax_torch")


# %%
check("online_softmax_torch", online_softmax_torch)

# %% [markdown]
# ## Exercise 3 · A tiled online softmax kernel
#
# Now the kernel for long rows: one program per row, a loop over the row in tiles of `BLOCK` columns,
# two passes.
#
# - **Pass 1, per lane.** Keep `m` and `l` as vectors of `BLOCK` values, one running state per lane
#   (lane `i` sees columns `i`, `i + BLOCK`, `i + 2·BLOCK`, ...). Each tile updates them elementwise
#   with the recurrence for a single value, safe max included: no reduction inside the loop. Start
#   from `tl.full((BLOCK,), -float("inf"), tl.float32)` and `tl.zeros((BLOCK,), tl.float32)`.
# - **Merge the lanes** once, after the loop, with the merge rule: the row's max is `tl.max(m)`, and
#   its sum is `tl.sum(l * exp(m - row max))` (with the safe max, and 1 in place of a zero sum).
# - **Pass 2** reads the row again, tile by tile, and stores `exp(x - max) / sum`.
#
# A Python `for start in range(0, n_cols, BLOCK)` loop works inside a kernel; the mask `cols < n_cols`
# handles the last, ragged tile, and masked lanes load `-inf`.
#
# The check uses small tiles so that even short rows span many of them: rows whose max grows at every
# tile, `-inf` prefixes, fully masked rows (ragged, and a whole number of tiles wide), float16, ragged
# last tiles, strided views, and near-constant rows long enough that a float16 running sum drifts.
# Then it counts what your kernel loads and stores, as the next cell does.

# %% tags=["exercise"]
@triton.jit
def softmax_tiled_kernel(x_ptr, out_ptr, n_cols, stride_xm, stride_xn, stride_om, BLOCK: tl.constexpr):
    """Softmax of row program_id(0), any length: pass 1 finds its max and sum tile by tile, pass 2 writes."""
    # YOUR CODE HERE:
    # the row: tl.program_id(0).to(tl.int64), as in exercise 1
    # pass 1: for each tile, load x (other=-float("inf")) as float32, then per lane
    #         m_new = max(m, x); safe = where(m_new == -inf, 0, m_new);
    #         l = l * exp(m - safe) + exp(x - safe); m = m_new
    # merge:  the row's max (safe) and sum (1 if it is 0) from the lanes' m and l
    # pass 2: for each tile, store exp(x - max) / sum
    pass


def softmax_tiled(x, block=1024):
    """Softmax over the rows of a 2-D tensor of any width, read in tiles of `block` columns."""
    assert x.dim() == 2, "softmax_tiled takes a 2-D tensor"
    n_rows, n_cols = x.shape
    out = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    softmax_tiled_kernel[(n_rows,)](x, out, n_cols, x.stride(0), x.stride(1), out.stride(0),
                                    BLOCK=block, num_warps=row_warps(block))
    return out


# %%
check("softmax_tiled", softmax_tiled)

# %% [markdown]
# What does your kernel move? Two reads of the row and one write, exactly, whatever the tile size:

# %%
if passed("softmax_tiled"):
    xt = torch.randn(4, 1000, device=DEVICE)
    tiled = triton_traffic(softmax_tiled, xt, block=256)
    print(tiled)
    print(f"in units of the matrix: read {tiled.bytes_loaded / xt.nbytes:.0f}x, "
          f"written {tiled.bytes_stored / xt.nbytes:.0f}x")

# %% [markdown]
# Counting honestly, the tiled kernel moves 3·MN elements where the one-read ideal is 2·MN. The
# benchmarks below quote GB/s over the ideal 2·MN bytes for every implementation, so the rate at which
# the tiled kernel really moves bytes is 1.5 times the figure shown. If both reads came from HBM it
# could reach at most 2/3 of the copy figure; whatever it gets above that, the L2 cache served part of
# the second read.
#
# ## The numerical traps, in one place
#
# | trap | what goes wrong | the fix |
# |---|---|---|
# | inputs of large magnitude (±1e4) | `exp` overflows: `inf / inf` = NaN | subtract the max |
# | the max grows along the row | the old sum was taken against a smaller max | rescale by $e^{m - m'}$ |
# | `-inf` entries | none: $e^{-\infty} = 0$ | load masked lanes as `-inf` |
# | all `-inf` so far, or a fully masked row | $-\infty - (-\infty)$ = NaN | a safe max (0), a safe sum (1) |
# | float16 inputs | sums lose their low digits | accumulate in float32 |
# | more than 2^31 elements | `row * stride_xm` wraps in int32: a negative offset | the row index in int64 |
#
# The float16 one is easy to underestimate. float16 has 11 significant bits, so above 2048 its
# spacing is 2, and adding a 1 changes nothing:

# %%
acc16 = torch.tensor(2048.0, dtype=torch.float16)
print("2048 + 1 in float16:", (acc16 + 1).item(), "   in float32:", (acc16.float() + 1).item())
print("exp(12) in float16:", torch.exp(torch.tensor(12.0, dtype=torch.float16)).item())

# %% [markdown]
# A float16 running sum of a few thousand probabilities drifts for the same reason. The kernels in this
# lesson load float16, compute and accumulate in float32, and round once, when they store.
#
# The last trap is in the addresses, not the values. `tl.program_id(0)` is an int32, and so is
# a stride that fits in one, so their product is computed in int32 and wraps past 2^31 − 1. A logits
# matrix of 32k tokens by a 128k vocabulary has 2^32 elements, and fits on one GPU; from row 16,384 on,
# the row's offset wraps negative, and the kernel reads and writes the wrong memory:

# %%
n_vocab, row = 131072, torch.tensor(16384, dtype=torch.int32)   # 32k x 128k logits: row 16,384 of 32,768
print("row * stride in int32:", (row * n_vocab).item())
print("row * stride in int64:", (row.to(torch.int64) * n_vocab).item())

# %% [markdown]
# The kernels of this lesson turn the row index into an int64 first (`tl.program_id(0).to(tl.int64)`);
# the product is then an int64. A 16k x 128k matrix (2^31 elements) still just fits in int32 offsets;
# any larger, and the int32 version fails silently or with an illegal address.
#
# ## Autotuning the tile size
#
# The tile size matters for speed, not for the result: larger tiles keep more loads in flight and run
# fewer loop iterations, but take more registers, so fewer programs fit on each SM at once. The best
# choice depends on the row length, the dtype and the GPU. Rather than guess, `triton.autotune` wraps
# the kernel with a list of candidate `triton.Config`s (meta-parameters plus `num_warps`) and a `key`:

# %%
tiled_configs = pick(cpu=[triton.Config({"BLOCK": 256}, num_warps=4)],
                     gpu=[triton.Config({"BLOCK": b}, num_warps=w)
                          for b, w in [(1024, 4), (2048, 4), (2048, 8), (4096, 8), (4096, 16), (8192, 16)]])
softmax_tiled_tuned_kernel = triton.autotune(configs=tiled_configs, key=["n_cols"])(softmax_tiled_kernel)


def softmax_tiled_tuned(x):
    """softmax_tiled with the tile size and warps chosen by the autotuner."""
    n_rows, n_cols = x.shape
    out = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    softmax_tiled_tuned_kernel[(n_rows,)](x, out, n_cols, x.stride(0), x.stride(1), out.stride(0))
    return out


# %% [markdown]
# The first call with a new key runs *every* config on the real arguments, times each with `do_bench`,
# and keeps the fastest. The choice lands in `kernel.cache`, a dictionary in memory whose key is the
# values of the `key` arguments **plus the dtype of every tensor argument**; later calls with the same
# key launch the remembered config at once.

# %%
if passed("softmax_tiled"):
    for n_cols in pick(cpu=(1000, 3000), gpu=(65536, 262144)):
        for dtype in (torch.float32, torch.float16):
            softmax_tiled_tuned(torch.randn(pick(4, 256), n_cols, device=DEVICE, dtype=dtype))
    for key, config in softmax_tiled_tuned_kernel.cache.items():
        print(key, "->", config)
    if not ON_GPU:
        print("One config only (the CPU list): nothing to time, so the autotuner remembers nothing.",
              "On a GPU this prints one line per (n_cols, dtypes) key.")

# %% [markdown]
# What is remembered, and where:
# - **the choice** of config per key: in memory, for the life of the process (pass
#   `cache_results=True` to `triton.autotune` to also keep the timings in Triton's on-disk cache);
# - **the compiled binaries**, one per config and per specialization of the arguments: on disk, in
#   Triton's cache (`~/.triton/cache`), so a new process re-times but does not recompile.
#
# Two consequences. The first call for each key is slow (a compile and a timing run per config), so
# key on what really changes the best choice: a key that changes with every batch size re-tunes
# forever. And tuning runs the kernel many times on your arguments: a kernel that accumulates into its
# output needs `reset_to_zero` (or `restore_value`) so that the runs don't pile up.
#
# With the tuned launcher, long rows on a GPU, against `torch.softmax` and `torch.compile` (without a
# GPU: the recorded figures; GB/s over one read and one write, as above):

# %%
def long_benches(dtype, name):
    torch.compiler.reset()
    compiled = torch.compile(softmax_naive, dynamic=False)
    for m, n in ((2048, 65536), (512, 262144)):
        x = torch.randn(m, n, device=DEVICE, dtype=dtype)
        yield Bench(f"softmax_long_{name}", n, bytes=2 * x.nbytes, flops=5 * m * n, label=f"{m}x{n} {name}",
                    impls={"triton tiled online": lambda x=x: softmax_tiled_tuned(x),
                           "torch.softmax": lambda x=x: torch.softmax(x, dim=1),
                           "torch.compile(naive)": lambda x=x: compiled(x)})


if not ON_GPU or passed("softmax_tiled"):  # on a GPU, this times your kernel
    rows = compare("softmax_long_fp32", lambda: long_benches(torch.float32, "fp32"))

# %%
if not ON_GPU or passed("softmax_tiled"):  # on a GPU, this times your kernel
    rows = compare("softmax_long_fp16", lambda: long_benches(torch.float16, "fp16"))

# %% [markdown]
# ## Fusing RMSNorm into the linear layer
#
# In a transformer block, RMSNorm comes right before a linear layer (the Q, K, V projections, the
# MLP's first matrix). Unfused, `F.rms_norm` writes the normalized activations to memory and the matrix
# multiply reads them straight back:
#
# ```
# x_normed = F.rms_norm(x, (K,), gamma)   # read MK + K, write MK
# out = x_normed @ w.T                    # read MK + NK, write MN
# ```
#
# Fused, the normalized activations never reach HBM: 2·MK elements less traffic, and one launch less.
#
# A kernel can do this in one pass over `x`, thanks to one line of algebra. Scaling the rows of a
# matrix commutes with multiplying it: $(\mathrm{diag}(s)\,X)\,W^\top = \mathrm{diag}(s)\,(X W^\top)$.
# So the kernel does not need the rms before its loop over K. Each program computes one
# `(BLOCK_M, BLOCK_N)` tile of the output; in the loop it loads a tile of `x`, feeds `x * gamma` to
# `tl.dot`, and from the same registers adds up the squares of `x`. After the loop the sums of squares
# are complete, and the epilogue scales each row of the accumulator by $1/\mathrm{rms}$. (A first
# version that loops over K twice, once for the rms and once for the product, is also correct, but
# reads `x` twice.)
#
# ## Exercise 4 · Fused RMSNorm + linear
#
# Write `rmsnorm_linear_kernel`. The launcher is written: a 1-D grid of output tiles, where program
# `pid` takes tile row `pid // n_tiles_n` and tile column `pid % n_tiles_n` (neighbouring programs share
# rows of `x`, which the cache then serves). `w` is stored `(N, K)`, as `nn.Linear` stores it, so the
# `(BLOCK_K, BLOCK_N)` tile of `w.T` that `tl.dot` needs is at
# `w_ptr + offs_n[None, :] * stride_wn + k[:, None] * stride_wk`. Details:
#
# - square and sum in **float32**: `x * x` overflows float16 for $|x| > 255$;
# - `tl.dot` takes 16-bit operands: convert `x * gamma` back to `x`'s dtype (`x.dtype`) before it;
# - masked loads use `other=0.0`, which adds nothing to the sums; divide the sum of squares by `K`,
#   not by a padded length, and add `eps` before `tl.rsqrt`.

# %% tags=["exercise"]
@triton.jit
def rmsnorm_linear_kernel(x_ptr, g_ptr, w_ptr, out_ptr, M, N, K, eps,
                          stride_xm, stride_xk, stride_wn, stride_wk, stride_om, stride_on,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """One (BLOCK_M, BLOCK_N) tile of rms_norm(x) * g @ w.T; the normalized x never leaves registers."""
    # YOUR CODE HERE:
    # 1. pid_m, pid_n from tl.program_id(0) and tl.cdiv(N, BLOCK_N); offs_m, offs_n (.to(tl.int64)), offs_k;
    # 2. acc = zeros (BLOCK_M, BLOCK_N) float32, sum_sq = zeros (BLOCK_M,) float32;
    # 3. for k0 in range(0, K, BLOCK_K): load the x tile, the gamma slice and the w.T tile (masked);
    #    sum_sq += sum of x*x along axis 1 (in float32); acc = tl.dot((x * gamma).to(x.dtype), w, acc);
    # 4. scale acc's rows by tl.rsqrt(sum_sq / K + eps) and store the tile (masked), in out's dtype.
    pass


def rmsnorm_linear(x, gamma, w, eps=1e-6):
    """rms_norm(x) * gamma @ w.T in one kernel; x (M, K), gamma (K,), w (N, K) as nn.Linear stores it."""
    assert x.dim() == 2 and w.dim() == 2 and x.shape[1] == w.shape[1] == gamma.shape[0], \
        "x (M, K), gamma (K,), w (N, K)"
    M, K = x.shape
    N = w.shape[0]
    out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    BLOCK_M, BLOCK_N, BLOCK_K = pick(cpu=(32, 32, 32), gpu=(64, 64, 64))
    grid = (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N),)
    rmsnorm_linear_kernel[grid](x, gamma, w, out, M, N, K, eps, x.stride(0), x.stride(1), w.stride(0),
                                w.stride(1), out.stride(0), out.stride(1),
                                BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, num_warps=4)
    return out


# %%
check("rmsnorm_linear", rmsnorm_linear)

# %% [markdown]
# ## When does this fusion pay?
#
# The fusion saves the round trip of the normalized activations: 2·MK elements. The matrix multiply
# itself does 2·MNK FLOPs. Put both on one device, with a peak rate $P$ (FLOP/s) and a bandwidth $B$
# (bytes/s), in 16-bit storage:
#
# $$\frac{\text{time saved}}{\text{time of the matmul}} = \frac{4MK / B}{2MNK / P} = \frac{2P}{N B}.$$
#
# $M$ and $K$ cancel: only the output width $N$ and the device's ratio $P/B$ matter. For $P$ and $B$,
# take what `make bench` measured: cuBLAS's bf16 matmul on activations normalized in advance (the
# best of the shapes below), and the copy ceiling of the same run.

# %%
def fusion_saving(N, tflops, tbps):
    """Fraction of the matmul's time that the unfused pair spends on the normalized activations."""
    return 2 * tflops * 1e12 / (N * tbps * 1e12)


here = torch.cuda.get_device_name() if ON_GPU else None
alone, where = recorded_rows("rmsnorm_linear", here if here in recorded_devices() else None)
alone = [r for r in alone if r["impl"].startswith("matmul alone")]
if alone:
    P, B = max(r["tflops"] for r in alone), alone[0]["copy_gbps"] / 1000
    print(f"P = {P:.0f} TFLOP/s, B = {B:.2f} TB/s, {where}")
    for n in (512, 1024, 4096, 14336):
        print(f"N = {n:>5}: the unfused round trip costs {fusion_saving(n, P, B):6.1%} of the matmul's time")
else:
    print(where)

# %% [markdown]
# So:
# - **Wide outputs** (N = 4,096 and up, as in a square projection or an MLP's up-projection): the
#   matmul dominates and the best a fusion can win is the small share printed above, and only if the
#   fused kernel is as fast a matmul as cuBLAS. A Triton matmul that also scales `x` in registers
#   before each `tl.dot` can easily lose more than that. Here the fusion does not pay by itself.
# - **Narrow outputs** (N of 512 to 1,024, such as the K and V projections of grouped-query attention):
#   the normalized activations cost as much as a large fraction of the matmul; the fusion can pay.
# - **Small M** (decoding, a few tokens): the matmul is bound by reading `w`, and `x` is tiny; the
#   fusion saves one launch (lesson 01 measured what one costs), which matters at batch 1 and little
#   otherwise.
# - **Training**: the backward pass needs the normalized activations (or recomputes them), so the
#   write the fusion avoids often comes back.
#
# The measurement, on a GPU now or as recorded (TFLOP/s counts 2·MNK; "matmul alone" multiplies
# activations normalized in advance, the time no fused kernel can beat without a faster matmul):

# %%
def rms_norm_then_linear(x, gamma, w, eps=1e-6):
    return torch.matmul(F.rms_norm(x, (x.shape[1],), gamma, eps), w.t())


def fused_benches():
    compiled = torch.compile(rms_norm_then_linear, dynamic=False)
    for m, k, n in ((8192, 4096, 4096), (8192, 4096, 1024)):
        x = torch.randn(m, k, device=DEVICE, dtype=torch.bfloat16)
        g = (1 + 0.1 * torch.randn(k, device=DEVICE)).to(torch.bfloat16)
        w = (torch.randn(n, k, device=DEVICE) / math.sqrt(k)).to(torch.bfloat16)
        xn = F.rms_norm(x, (k,), g, 1e-6)
        yield Bench("rmsnorm_linear", n, bytes=(m * k + n * k + m * n) * 2, flops=2 * m * n * k,
                    label=f"M,K,N={m},{k},{n} bf16", metric="TFLOP/s",
                    impls={"triton fused": lambda x=x, g=g, w=w: rmsnorm_linear(x, g, w),
                           "F.rms_norm + matmul": lambda x=x, g=g, w=w: rms_norm_then_linear(x, g, w),
                           "torch.compile(both)": lambda x=x, g=g, w=w: compiled(x, g, w),
                           "matmul alone (x normed in advance)": lambda xn=xn, w=w: xn @ w.t()})


if not ON_GPU or passed("rmsnorm_linear"):  # on a GPU, this times your kernel
    rows = compare("rmsnorm_linear", fused_benches)

# %% [markdown]
# Live on a GPU, "triton fused" is your kernel with the fixed 64 x 64 x 64 tiles of the launcher
# above; the recorded figures come from `solutions/`, where the launcher autotunes the tiles for large
# problems, and add a second Triton version described below.
#
# The same rows set against the matmul alone: for each version, its time and what it costs on top
# of that matmul (the live run first on a GPU, then every GPU recorded; only the recording has the
# second Triton version).

# %%
ALONE = "matmul alone (x normed in advance)"


def against_matmul_alone(rows, title):
    """Per shape: each version's time, and how much longer it takes than the matmul alone."""
    print(title)
    for label in dict.fromkeys(r["label"] for r in rows):
        at = {r["impl"]: r for r in rows if r["label"] == label}
        alone = at.pop(ALONE)
        print(f"  {label}: the matmul alone takes {alone['ms']:.3f} ms")
        for impl, r in at.items():
            print(f"  {impl:>38}: {r['ms']:.3f} ms, {r['ms'] - alone['ms']:+.3f} ms on top of it")


if ON_GPU and passed("rmsnorm_linear"):  # your kernel's timings
    against_matmul_alone(rows, f"measured now on {torch.cuda.get_device_name()}:")
for device in recorded_devices():
    recorded, where = recorded_rows("rmsnorm_linear", device)
    if recorded:
        against_matmul_alone(recorded, where + ":")

# %% [markdown]
# ### What the measurements show, and why the fused kernel loses here
#
# Read what each line costs on top of the matmul. The `F.rms_norm + matmul` and
# `torch.compile(both)` lines are what an unfused pair pays for the round trip of the normalized
# activations (and a launch): that is all any fusion could win against them. The fused kernel of
# exercise 4 pays far more than that on top of the matmul, because it is a slower matmul:
#
# - **Its prologue.** The "1/rms pass + matmul epilogue" version differs from the fused kernel mainly
#   in that `x` goes to `tl.dot` exactly as loaded ($\gamma$ is folded into the weights once, when the
#   weights are loaded, and 1/rms comes from a separate pass over `x` that writes M floats). Without
#   the multiply and the squares done in registers on every tile (and with the separate pass over `x`
#   included), it comes much closer to the matmul alone. On Hopper GPUs a fast matmul has the tensor
#   cores read their operands straight from shared memory, loaded several steps ahead; an operand
#   that must first be rewritten in registers is the likely cause of the loss.
# - **The matmul itself.** At N = 4,096 even that version costs more on top of the matmul alone
#   than `F.rms_norm + matmul` does: a Triton matmul written this simply is slower than the
#   library's, by more than the whole round trip the fusion saves. At N = 1,024, where the round trip
#   is a larger share of the matmul, it costs less on top than `F.rms_norm + matmul` and comes level
#   with `torch.compile(both)`.
#
# So, on the GPUs recorded, `F.rms_norm` + cuBLAS (or `torch.compile` of the pair, as fast or
# faster) is the right choice for a wide output, and the fused kernel of exercise 4 loses at both
# widths. The fusion pays where the saved round trip is large
# next to the matmul (narrow N, many rows) *and* the fused kernel keeps its matmul as fast as the
# library's: keep the operands untouched in the main loop and do the normalisation in the epilogue,
# on top of a matmul tuned for the GPU. `rmsnorm_linear_epilogue` in `solutions/` is that design.
#

# %% [markdown]
# ## GroupNorm + Mish, for diffusion U-Nets
#
# RMSNorm normalises a row. The U-Nets of diffusion models normalise *groups*: inside each residual
# block, GroupNorm comes before each convolution, followed by an activation (SiLU in most, Mish in
# some). GroupNorm splits the C channels of each sample into G groups and normalises each group over
# its channels and all of H × W, then scales and shifts per channel. Mish is
# $y \tanh(\mathrm{softplus}(y))$.
#
# The kernel is this lesson's RMSNorm with a different row: one program per (sample, group), whose
# "row" is C/G channels × H × W values. Too many values to hold at once, so two passes over the group,
# as in the tiled softmax:
#
# 1. sums of $x - s$ and $(x - s)^2$, a tile at a time, for the mean and variance. The shift $s$
#    (the group's first value) matters: $\overline{x^2} - \bar{x}^2$ subtracts two nearly equal
#    numbers when the mean is large against the spread, and float32 loses the variance;
# 2. normalise, apply the channel's weight and bias, then Mish, and store once.
#
# **Read the group as a matrix.** A group is C/G channels by H × W positions. The launcher merges H
# and W into one dimension with `x.flatten(2)`: a view for contiguous tensors and for channels-last
# ones (U-Nets often run channels-last), a copy only for strides that cannot merge. The kernel then
# reads tiles of `CH_BLOCK` channels × `HW_BLOCK` positions at `c * sx_c + p * sx_p`, with `c` a
# column of channel indices and `p` a row of positions. The obvious alternative, one flat index `i`
# over the group split into channel, row and column with `//` and `%`, costs four integer divisions
# by runtime values per element in each pass: each is a sequence of a dozen or more instructions,
# more than all the arithmetic GroupNorm and Mish need, and enough to make the kernel wait on its
# own instructions instead of on memory. Tiles need no division, and they make the weight and bias
# one small vector per tile instead of two loads per element.
#
# Mish needs care at both ends. With $e = e^y$, $\tanh(\log(1 + e)) = \frac{e(e + 2)}{e(e + 2) + 2}$:
# one exponential. For large y, $e(e+2)$ overflows to inf and inf/inf is NaN; capping y at 20 before
# the exponential gives exactly 1 in float32 there. For very negative y, $e$ underflows to 0 and the
# output is $-0$, as it should be.

# %% [markdown]
# ## Exercise 5 · GroupNorm + Mish in one kernel
#
# Write `groupnorm_mish_kernel`; the launcher is written (one program per (sample, group); x as
# (N, C, H × W) with strides `sx_n, sx_c, sx_p`; the output is contiguous (N, C, H, W)). Details:
#
# - program `pid` is sample `pid // n_groups`, group `pid % n_groups` (as `tl.int64`); the group's
#   first channel is `g * group_channels`, and its `size` is `group_channels * hw` values;
# - loop over the group in tiles: channels `c = c0 + tl.arange(0, CH_BLOCK)[:, None]` for `c0` in
#   `range(0, group_channels, CH_BLOCK)`, positions `p = p0 + tl.arange(0, HW_BLOCK)[None, :]` for
#   `p0` in `range(0, hw, HW_BLOCK)`, masked where `c >= group_channels` or `p >= hw`;
# - pass 1: the shift is the group's first value; accumulate per lane, in float32, the sums of
#   `x - shift` and of its square (masked lanes must add 0); then
#   `var = max(sum_sq / size - mean_shifted², 0)` and `mean = shift + mean_shifted`;
# - pass 2: `y = (x - mean) * rsqrt(var + eps) * weight[c] + bias[c]`, then Mish with one `tl.exp`,
#   capped as above; store in the output's dtype at `out_group + c * hw + p`.
#
# Beside the values, the check counts one launch, the bytes your kernel loads (`x` twice: two
# passes) and the exponentials (one per value). Only loads of `x` count: loading a channel's weight and
# bias once per value is slower on a GPU, but it is not another pass over `x`.

# %% tags=["exercise"]
@triton.jit
def groupnorm_mish_kernel(x_ptr, w_ptr, b_ptr, out_ptr, n_groups, group_channels, hw, eps,
                          sx_n, sx_c, sx_p, CH_BLOCK: tl.constexpr, HW_BLOCK: tl.constexpr):
    """GroupNorm then Mish over one (sample, group): its group_channels x hw values, in tiles."""
    # YOUR CODE HERE:
    # 1. n, g from tl.program_id(0); x_group = x_ptr + n * sx_n + first_c * sx_c;
    #    out_group = out_ptr + (n * n_groups + g) * group_channels * hw;
    # 2. pass 1 over the tiles: shifted sums in float32 (tl.sum over both axes at the end);
    # 3. mean and inv_std;
    # 4. pass 2 over the tiles: normalise, weight and bias of channel first_c + c, Mish, masked store.
    pass


def groupnorm_mish(x, num_groups, weight, bias, eps=1e-5):
    """Mish(GroupNorm(x)) in one kernel; x (N, C, H, W) of any strides, weight and bias (C,)."""
    assert x.dim() == 4, "x: (N, C, H, W)"
    N, C, H, W = x.shape
    assert C % num_groups == 0, "the channels must split evenly into num_groups groups"
    assert weight.shape == bias.shape == (C,), "weight and bias: one value per channel"
    assert weight.stride(0) == bias.stride(0) == 1, "weight and bias: contiguous"
    x3 = x.flatten(2)                      # (N, C, H * W): a view unless H and W cannot merge
    BLOCK, warps = pick(cpu=(256, 4), gpu=(4096, 16))
    HW_BLOCK = min(triton.next_power_of_2(H * W), BLOCK)
    CH_BLOCK = min(triton.next_power_of_2(C // num_groups), BLOCK // HW_BLOCK)
    out = torch.empty((N, C, H, W), device=x.device, dtype=x.dtype)
    groupnorm_mish_kernel[(N * num_groups,)](x3, weight, bias, out, num_groups, C // num_groups, H * W, eps,
                                             *x3.stride(), CH_BLOCK=CH_BLOCK, HW_BLOCK=HW_BLOCK,
                                             num_warps=warps)
    return out


# %%
check("groupnorm_mish", groupnorm_mish)

# %% [markdown]
# Against eager PyTorch (`F.group_norm` then `F.mish`: two kernels, the normalised tensor written and
# read back) and `torch.compile` of the same two calls, at the shapes of a Stable-Diffusion-sized
# U-Net, on a GPU now or as recorded:

# %%
groupnorm = timed(course, "groupnorm_mish_fp16")
verdicts(groupnorm, "course: one kernel", ["eager: group_norm, mish", "torch.compile"])
verdicts(groupnorm, "course: split where it pays", ["course: one kernel", "torch.compile"])
for label in dict.fromkeys(r["label"] for rows in groupnorm.values() for r in rows):
    n, c, h, w = (int(v) for v in label.split()[0].split("x"))
    groups = int(label.split()[1].removeprefix("G"))
    print(f"{label:>18}: {n * groups:4} programs, {c // groups * h * w:>9,} values each")

# %% [markdown]
# Against eager the fusion saves a whole round trip of the activations, and the verdict lines show
# what that is worth. Against `torch.compile` it is a contest of reductions: Inductor generates its
# own kernels for the pair and chooses how to split each reduction itself. The program counts
# printed above explain where the one-program-per-group design is weakest. With one sample of
# 128 × 256 × 256 and 32 groups there are only 32 programs for a GPU of more than a hundred SMs:
# most SMs idle, and each program streams its group alone, twice.
#
# That is where a **split reduction** pays. `groupnorm_mish_split` cuts each group's H × W positions
# into `splits` slices (every channel of the group in each): by default about four programs per SM,
# and no split at all (one kernel per group) where N × G programs already fill the GPU or each group
# is only a few tiles long. A first kernel, one program per (group, slice), writes the slice's two
# shifted sums; a second, on the same grid, adds up its group's few partial sums, derives the mean and
# variance, and normalises its slice. One more launch and a few bytes per program, for all the SMs
# at work. Every slice of a group must use the same shift, the group's first value, or the partial
# sums cannot be added:

# %%
show(course.group_partial_sums_kernel)
show(course.groupnorm_mish_apply_kernel)
x_demo = torch.randn(1, 8, 13, 17, device=DEVICE) + 50.0
w_demo, b_demo = torch.randn(8, device=DEVICE), torch.randn(8, device=DEVICE)
print("split into 4 slices, largest difference from one kernel per group:",
      (course.groupnorm_mish_split(x_demo, 2, w_demo, b_demo, splits=4)
       - course.groupnorm_mish(x_demo, 2, w_demo, b_demo)).abs().max().item())

# %% [markdown]
# The verdict lines for "course: split where it pays" compare it with one kernel per group (the same
# kernel, where it does not split) and say whether it keeps up with `torch.compile` at every
# shape. Those timings launch each kernel from Python, as a U-Net run
# eagerly would; kernels of tens of microseconds then carry their launch cost, and `torch.compile`'s
# compiled function carries its guards. Replayed as CUDA graphs, only the GPU's time remains:

# %%
groupnorm_graphed = timed(course, "groupnorm_mish_graphed_fp16")
verdicts(groupnorm_graphed, "course: split where it pays", ["course: one kernel", "torch.compile"])

# %% [markdown]
# Where the graphed verdict differs from the first, the difference was launch cost, not the kernels.
# The `% copy` column counts one read and one write of x, the least any implementation must move;
# these kernels read x twice (the second read comes from L2 when the groups in flight fit there),
# and every value pays an exponential and a division in Mish. Which of the two holds a given shape
# back is a question for lesson 08's profiler.


# %% [markdown]
# ## Takeaways
# - The stable softmax needs the row's max before its exponentials, and their sum before its outputs:
#   three passes over the row, unless the row stays on chip.
# - One program per row fuses a row reduction with the elementwise work around it: one read, one
#   write, the least any kernel can move, as long as the row fits in registers.
# - The online softmax keeps a running max $m$ and sum $l$, rescaling $l$ by $e^{m_{old} - m_{new}}$
#   when the max grows: max and sum in one pass. For rows too long for a block it cuts the reads from
#   three to two; for rows that fit it saves nothing, because one read was enough already.
# - Partial $(m, l)$ states merge associatively: across lanes, programs, or attention's key blocks.
# - Guard `-inf`: a safe max of 0 and a safe sum of 1 turn fully masked rows into zeros instead of NaN;
#   compute in float32 whatever the storage type.
# - RMSNorm fuses into the next matmul by scaling the accumulator in the epilogue. The most it saves
#   is about $2P/(NB)$ of the matmul's time, so only narrow outputs stand to gain, and only if the
#   fused kernel's matmul stays as fast as the library's: in the course's recordings exercise 4's
#   kernel did not, and lost.
# - The autotuner times every config on the first call per key and remembers the winner in memory;
#   choose its key with care.

# %%
self_check("05")

# %%
flashcards("05")
