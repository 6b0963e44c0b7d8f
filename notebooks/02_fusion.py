# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 02 · Fusion
#
# Most operations in a neural network do very little arithmetic per byte they touch. For those,
# the time goes into moving data between the GPU's memory (HBM) and its cores, and the biggest
# lever you have is to move less: do several operations in one kernel that reads its inputs once
# and writes its output once. That is **fusion**.
#
# **You will learn:**
# - why each unfused operation costs a full round trip through HBM;
# - to count the bytes an eager chain moves and the bytes a fused kernel moves, from the code;
# - to fuse an elementwise chain, and a bias + GELU, in Triton;
# - when fusion pays, and when the pieces don't line up.
#
# Exercises: a fused `relu(x + bias) * scale + residual`, and a fused `GELU(x + bias)`.

# %%
from helpers import DEVICE, ON_GPU, check, describe, passed
from helpers.bench import Bench, compare, recorded, recorded_devices
from helpers.cards import flashcards, self_check
from helpers.traffic import eager_traffic, triton_traffic

import torch
import triton
import triton.language as tl

print(describe())

# %% [markdown]
# ## The cost of an unfused chain
#
# Here is a piece of a typical block: add a bias, apply an activation, scale, add a residual. In
# eager PyTorch each line is its own kernel, and each kernel reads its inputs from HBM and writes its
# result back, only for the next kernel to read it again.

# %%
def chain_eager(x, bias, residual, scale):
    y = x + bias         # read MN + N, write MN
    y = torch.relu(y)    # read MN,     write MN
    y = y * scale        # read MN,     write MN
    return y + residual  # read 2MN,    write MN


# %% [markdown]
# Adding up the comments: about 9·MN elements move, for four operations per element (an add, a
# maximum, a multiply, an add). A single kernel doing the same work needs to read `x` and `residual`
# once, read the small `bias`, and write the result: 3·MN elements. The arithmetic is identical; the
# traffic is a third.
#
# Don't take the comments on trust: the course's traffic meter counts. For eager PyTorch it records
# every operation PyTorch dispatches with the bytes of its inputs and outputs.

# %%
M, N = 64, 256
x, bias, residual = torch.randn(M, N), torch.randn(N), torch.randn(M, N)

eager = eager_traffic(chain_eager, x, bias, residual, 0.5)
print(eager)
for op, nbytes in eager.ops:
    print(f"  {op:>6}: {nbytes:>7,} bytes")

# %% [markdown]
# ## A worked example: fusing scale and shift
#
# Before the exercise, the smallest fusion there is: `x * a + b` is two kernels in eager PyTorch
# (one multiply, one add). In Triton both happen on values already in registers, between one load
# and one store.

# %%
@triton.jit
def scale_shift_kernel(x_ptr, out_ptr, n, a, b, BLOCK: tl.constexpr):
    """out = x * a + b: one read and one write per element."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * a + b, mask=mask)  # both ops in registers


def scale_shift(x, a, b):
    x = x.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    scale_shift_kernel[(triton.cdiv(n, 1024),)](x, out, n, a, b, BLOCK=1024)
    return out


v = torch.randn(10_000, device=DEVICE)
print("matches:", torch.allclose(scale_shift(v, 3.0, 1.0), v * 3.0 + 1.0))
print("eager:", eager_traffic(lambda t: t * 3.0 + 1.0, v))
print("fused:", triton_traffic(scale_shift, v, 3.0, 1.0))

# %% [markdown]
# Half the bytes, half the launches. The fused counts come from the interpreter, which records every
# load and store the kernel really makes (masked-off lanes excluded).
#
# ## Exercise 1 · Fuse the chain
#
# Write `fused_chain_kernel`: `out = relu(x + bias) * scale + residual` for an `(M, N)` matrix, in one
# pass. The launcher makes `x` and `residual` contiguous, so you can treat them as flat vectors of
# `M * N` elements, as in lesson 01. The one new thing is the bias: element `(i, j)` of the matrix
# sits at flat offset `i * N + j` and needs `bias[j]`, that is `bias[offset % N]`.
#
# `check` draws a new `scale`, positive or negative, for every case, and once the values match it
# makes sure the whole chain ran in your one kernel, with nothing left to PyTorch, and counts what
# the kernel loads and stores: each input read at most once per output element, each output element
# written once.

# %% tags=["exercise"]
@triton.jit
def fused_chain_kernel(x_ptr, bias_ptr, res_ptr, out_ptr, n_elements, n_cols, scale, BLOCK: tl.constexpr):
    """out = relu(x + bias) * scale + residual over a contiguous (M, N) matrix, flattened."""
    # YOUR CODE HERE: offsets and mask over n_elements; load x, the matching bias values
    # (offs % n_cols) and the residual; compute in registers (tl.maximum(y, 0.0) is relu); store once.
    pass


def fused_chain(x, bias, residual, scale):
    """relu(x + bias) * scale + residual in one kernel; x, residual (M, N), bias (N,)."""
    assert x.shape == residual.shape and bias.shape == (x.shape[-1],), "x, residual (M, N) and bias (N,)"
    x, residual = x.contiguous(), residual.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    fused_chain_kernel[(triton.cdiv(n, 1024),)](x, bias, residual, out, n, x.shape[-1], scale, BLOCK=1024)
    return out


# %%
check("fused_chain", fused_chain)

# %% [markdown]
# Now measure your kernel the same way as the eager chain:

# %%
if passed("fused_chain"):
    fused = triton_traffic(fused_chain, x, bias, residual, 0.5)
    print("eager:", eager)
    print("fused:", fused)
    print(f"fused: {eager.bytes / fused.bytes:.1f}x fewer bytes counted, {eager.kernels}x fewer launches")

# %% [markdown]
# The meter counts every lane's load, so the bias, read once per element that uses it, adds another
# MN elements to the fused count (4·MN in all). On a GPU those repeated reads of a small vector are
# served by the cache, and what reaches HBM is close to 3·MN: against the eager chain's 9·MN, a
# third.
#
# On a GPU, fewer bytes means less time, almost one for one, because this chain is limited by memory
# bandwidth. The cell below measures both versions, and `torch.compile` (which fuses automatically,
# lesson 07), against a large device-to-device copy: the *copy ceiling*, the `% copy` column. Without
# a GPU it shows the figures `make bench` recorded on one.

# %%
def chain_benches():
    m, n = 8192, 8192
    xg, rg = torch.randn(m, n, device=DEVICE), torch.randn(m, n, device=DEVICE)
    bg = torch.randn(n, device=DEVICE)
    compiled = torch.compile(chain_eager)
    return [Bench("fused_chain", m * n, bytes=3 * 4 * m * n, flops=4 * m * n, label=f"{m}x{n}",
                  impls={"your fused kernel": lambda: fused_chain(xg, bg, rg, 0.5),
                         "torch eager (4 kernels)": lambda: chain_eager(xg, bg, rg, 0.5),
                         "torch.compile": lambda: compiled(xg, bg, rg, 0.5)})]


if not ON_GPU or passed("fused_chain"):  # on a GPU, this times your kernel
    chain_rows = compare("fused_chain", chain_benches)
    for row in chain_rows:
        if row["impl"].startswith("torch eager"):
            fused_row = next(r for r in chain_rows if r["size"] == row["size"])  # the fused kernel, first
            ratio = row["gbps"] / fused_row["gbps"]
            gpu = row.get("device") or torch.cuda.get_device_name()   # recorded rows name their GPU
            print(f"{gpu}, {row['label']}: eager reaches {ratio:.2f}x the rate of {fused_row['impl']}")

# %% [markdown]
# GB/s is computed from the bytes the *fused* kernel must move (3·MN elements) for every row, so it
# reads as "how fast is this way of getting the answer". The last lines divide the eager chain's rate
# by the fused kernel's, for the GPU they name (the first shown): about the third
# that the byte count predicts, since the eager chain moves three times the bytes (and launches four
# kernels).
#
# The copy ceiling is what `dst.copy_(src)` reaches: half its bytes are reads, half are writes. It is
# a ceiling for that mix, not for every kernel. HBM turns around between reading and writing, and
# a stream with a larger share of reads has fewer turnarounds, so a kernel that reads more than it
# writes (the chain reads two bytes for each one it writes) can edge slightly past it. `make bench`
# recorded such cases; the cell below prints every recorded row past its copy ceiling:

# %%
above = [r for device in recorded_devices() for r in recorded(device)["results"]
         if r["metric"] == "GB/s" and r["fraction_of_copy"] > 1]
for r in above:
    print(f"{r['device']}: {r['group']} {r['label']} {r['impl']}: {r['gbps']:,.0f} GB/s, "
          f"{100 * r['fraction_of_copy']:.1f}% of the copy ceiling ({r['copy_gbps']:,.0f} GB/s)")
if not above:
    print("no recorded row goes past its copy ceiling")

# %% [markdown]
# Most of them read two bytes for every byte they write. A row that reads no more than it writes (a
# softmax, say) can still land a fraction of a percent past its ceiling: the ceiling is itself a
# measurement, taken afresh by each `make bench` run, and it moves by about that much from one run to
# the next. Past the ceiling by a few percent at most: the copy ceiling is still the right yardstick
# for a memory-bound kernel, read as "about as fast as memory goes", not as a wall no kernel can cross.
#
# ## Exercise 2 · A fused bias + GELU
#
# A linear layer is often followed by a bias and an activation. Done as two eager kernels, that is an
# extra trip through memory for a tensor as large as the layer's output; done in one kernel, the
# activation is computed on values already in registers. Here it is a standalone elementwise kernel,
# like the chain above. (In lesson 04 you will go further and apply it inside the matrix multiply,
# before the result is ever stored: an *epilogue*.)
#
# Write `gelu_tanh`, a `@triton.jit` helper that a kernel can call, and `bias_gelu_kernel`.
# GELU's tanh approximation is `0.5 * x * (1 + tanh(u))` with `u = sqrt(2/pi) * (x + 0.044715 x³)`.
# Triton has `tl.sigmoid`, and `0.5 * (1 + tanh(u))` equals `sigmoid(2u)`. Compute in float32:
# convert after loading (`.to(tl.float32)`) and back before storing
# (`.to(out_ptr.dtype.element_ty)`), so the kernel also works for float16 and bfloat16 inputs.
#
# `check` tries float16 inputs too (and bfloat16 on a GPU) and expects an output of the same dtype,
# as close to the exact answer as one rounding allows: the float32 result, converted once at the
# store. An add or multiply done in float16 before the conversion rounds once too often, and fails.
# It also watches a float16 call, as the chain's check watches a float32 one: one launch, and no
# conversion by PyTorch around it (each `.float()` or `.to(dtype)` is another trip through memory).

# %% tags=["exercise"]
@triton.jit
def gelu_tanh(x):
    """GELU, tanh approximation, of a block of float32 values."""
    # YOUR CODE HERE: return x * sigmoid(2u), u = 0.7978845608028654 * (x + 0.044715 * x**3)
    return x


@triton.jit
def bias_gelu_kernel(x_ptr, bias_ptr, out_ptr, n_elements, n_cols, BLOCK: tl.constexpr):
    """out = gelu_tanh(x + bias) over a contiguous (M, N) matrix, flattened."""
    # YOUR CODE HERE: like fused_chain_kernel, then gelu_tanh(x + bias), in float32.
    pass


def bias_gelu(x, bias):
    """gelu_tanh(x + bias) in one kernel; x (M, N), bias (N,)."""
    assert bias.shape == (x.shape[-1],), "bias must have one value per column of x"
    x = x.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    bias_gelu_kernel[(triton.cdiv(n, 1024),)](x, bias, out, n, x.shape[-1], BLOCK=1024)
    return out


# %%
check("bias_gelu", bias_gelu)

# %% [markdown]
# ## When does fusion pay?
#
# Fusion pays when an intermediate would otherwise travel through HBM and the operations around it
# fit one kernel's *parallel structure*: the same iteration space, split the same way across
# programs. A decision tree:
#
# 1. **Is the chain memory-bound?** Elementwise ops, broadcasts, normalisations and reductions almost
#    always are. A large matrix multiply is not: fusing into it saves a little, and only in its
#    epilogue (lesson 04 puts exercise 2's bias + GELU there) or prologue.
# 2. **Does each output element depend only on inputs the same program can load?**
#    - Elementwise and broadcast chains: yes, fuse freely.
#    - A reduction along the rows followed by elementwise work on those rows (softmax, layer norm):
#      yes, if one program owns whole rows (lesson 05).
#    - A reduction along one axis feeding work split along another (a column sum feeding a row
#      operation): the parallel structures don't line up. Fusing needs a grid-wide sync, so keep
#      two kernels, or restructure the algorithm (that is what FlashAttention does, lesson 06).
# 3. **Is the intermediate needed elsewhere?** If the backward pass needs it, fusing saves the
#    forward's write only if you recompute it in the backward (FlashAttention's choice, again).
# 4. **Does the fused kernel still fit on chip?** Fusing too much raises register pressure until
#    values spill to memory, or lowers occupancy. Fuse chains, not whole networks, by hand.
#
# A compiler (torch.compile, XLA) applies rules like these automatically to chains of standard ops;
# lesson 07 shows where it succeeds and where a hand-written kernel still wins.
#
# ## Takeaways
# - Every unfused op reads its inputs from HBM and writes its output back; a chain of k elementwise
#   ops moves roughly k times the data of the fused kernel.
# - The fused kernel does the same arithmetic on values held in registers: fewer bytes, fewer
#   launches, higher arithmetic intensity (FLOPs per byte, next lesson).
# - Count the bytes from the code (or with the meter) before measuring; on a GPU the time follows.
# - Fuse when the parallel structures line up; otherwise keep separate kernels or change the
#   algorithm.

# %%
self_check("02")

# %%
flashcards("02")
