# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 10 · Hopper attention: FlashAttention through tensor descriptors, its backward, long rows
#
# Lesson 09 took lesson 04's matmul to cuBLAS's speed on a Hopper GPU with tensor descriptors (TMA),
# persistent programs and a tuned pipeline. This lesson does the same for lesson 06's FlashAttention,
# and measures how far the same tools get against cuDNN's fused attention. Attention is harder: a tile
# needs two matrix multiplies with a softmax between them, and the exponentials run on units much
# slower than the tensor cores. Then the backward, in one kernel, and last a softmax alone, over rows
# too long for one program: how close a two-pass kernel can get to the least traffic a softmax needs.
#
# As in lesson 09, the speed, the compiled code and the profiles come from recordings made on an H100
# and an H200 (each labelled with its GPU, date and versions); without a GPU the interpreter still
# runs every kernel here, so you can write and check them.
#
# **You will learn:**
# - lesson 06's forward through descriptors built on the host, and through descriptors each program
#   builds over its own (batch, head) slice, which read the projection's layout in place;
# - what FlashAttention-3 and cuDNN do on Hopper that a plain Triton kernel does not, read from their
#   profiles: warpgroups taking turns, one program per SM;
# - the attention backward in one kernel, dQ added up by atomics, and what the atomics cost;
# - the long-row softmax: the two-read ceiling, the L2 cache's share, and one exponential per element.
#
# Exercise: the long-row softmax.

# %% [markdown]
# ## Setting up

# %%
from helpers import DEVICE, check, describe, interpreter, pick
from helpers.bench import impl_named, ratios, recorded_devices, timed
from helpers.block import SMALL
from helpers.cards import flashcards, self_check
from helpers.roofline import CHIPS
from helpers.solutions import load_solution, show

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

print(describe())
course = load_solution("10")                  # the lesson's kernels, given where you do not write them
lesson05, lesson06 = course.lesson05, course.lesson06
hopper = course.recorded()                    # {GPU: compiled code, compile survey, Nsight Compute profiles}
print("GPUs with recorded timings:", ", ".join(recorded_devices()) or "none yet")
print("GPUs with lesson 10's recordings:", ", ".join(hopper) or "none yet (`make bench` writes them)")
dtype = pick(cpu=torch.float32, gpu=torch.float16)

# %% [markdown]
# ## FlashAttention forward through tensor descriptors
#
# Lesson 06's forward kernel streams K/V tiles past a block of queries with the online softmax. The
# lesson's `course.attention` keeps that algorithm and the causal tile skipping, and changes three
# things:
#
# - **Tensor descriptors built on the host**, over Q, K, V and O viewed as `(B · H, N, D)`, moving
#   boxes of `(1, rows, D)`: a box never leaves its head, Q, K and V tiles arrive by TMA, the output
#   leaves by TMA, and rows past N read as zeros and are never stored, so no load or store needs a
#   mask. A pre-hook sets the boxes per configuration, as for lesson 09's matmul. (Descriptors built
#   by each program with `tl.make_tensor_descriptor`, as `causal_attention` at the end of this part
#   does, measured slower on short sequences: every program writes its four descriptors to memory
#   before its first copy.)
# - **A wider search, timed as graph replays**: 64 or 128 query rows per program, 64 or 128 keys per
#   tile, 4 or 8 warps, 2 to 4 stages, and warp specialisation (a producer warp for the K and V
#   copies) where it compiles for the head size and mask at hand.
# - **Cheaper arithmetic per score**: the scale folded into the exponential's argument
#   (`s * qk_scale - m`, one fused multiply-add per score), and no mask at all on the interior tiles.

# %%
show(course._attend)
show(course.attention_kernel)

# %% [markdown]
# Checked against PyTorch's attention, here, with a length that no tile divides:

# %%
q, k, v = (torch.randn(2, 3, 100, 64, device=DEVICE, dtype=dtype) for _ in range(3))
for causal in (False, True):
    out, lse = course.attention(q, k, v, causal=causal)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    print(f"causal={causal!s:5}: largest difference from SDPA {(out - want).abs().max().item():.1e}")

# %% [markdown]
# The benchmark: 16 heads, `B · N = 16,384` tokens, float16, head dimensions 128 and 64, full and
# causal, against cuDNN's fused attention and FlashAttention-2 (both through PyTorch's SDPA) and
# lesson 06's kernel, every one timed as CUDA-graph replays (the GPU's time: building descriptors
# and launching from Python stay out of it, as in the matmul tables). On a GPU now, or as recorded:

# %%
attention_groups = ["hopper_attention_fwd_d128", "hopper_attention_fwd_causal_d128",
                    "hopper_attention_fwd_d64", "hopper_attention_fwd_causal_d64"]
attention_rows = {group: timed(course, group) for group in attention_groups}

# %% [markdown]
# The tables in one view: per shape, the lesson's kernel's speed over each other's (TFLOP/s over
# TFLOP/s, so above 1 means the lesson's kernel is faster; `ratios` is in `helpers.bench`):

# %%
for group, by_gpu in attention_rows.items():
    print(group)
    if not by_gpu:
        print("  nothing measured or recorded for this group yet")
    ratios(by_gpu, "lesson 10", ["cudnn", "flashattention-2", "lesson 06"])

# %% [markdown]
# The first column is the one that matters here: the lesson's kernel over cuDNN, shape by shape. The
# second compares with FlashAttention-2, which was written for the A100 and on Hopper still issues
# the A100's matrix instructions, so any kernel that reaches `wgmma` has an edge over it. The third
# is what tensor descriptors, the wider search and the graph-timed choice bought over lesson 06's
# kernel, and it is some percent, not a factor. Lesson 06's pointer loads were never the main cost
# on Hopper: the compiler already pipelines them (`cp.async`, `num_stages`) and feeds `wgmma` from
# shared memory. In attention much of the time goes to the softmax between the
# two matrix multiplies, and moving tiles faster does not touch it. Read the first column by
# sequence length too: short sequences give each program few key tiles, so its prologue and epilogue
# weigh more. That is where the lesson's kernel is furthest behind cuDNN, and what FlashAttention-3
# attacks.
#
# ### What FlashAttention-3 does that this kernel does not
#
# cuDNN's Hopper attention and FlashAttention-3 (the Hopper rewrite of FlashAttention, in CUDA with
# NVIDIA's CUTLASS library) use the same hardware as the lesson's kernel, and more of it at once.
# Three techniques from the FlashAttention-3 paper explain most of the gap that remains:
#
# - **Two warpgroups taking turns ("ping-pong").** An attention tile needs two matrix multiplies
#   (scores, then probabilities times V) and a softmax between them. The exponentials run on the
#   SM's special-function units, whose throughput is a small fraction of the tensor cores'. With two
#   consumer warpgroups, the kernel arranges with barriers that one computes its softmax while the
#   other runs its matrix multiplies, then they swap: the tensor cores stay busy through the
#   exponentials.
# - **Softmax overlapped with the matmuls inside one warpgroup.** Because `wgmma` is asynchronous, a
#   warpgroup can start the score matrix multiply of the next tile, then compute the softmax of the
#   current one while it runs. It costs registers: two tiles of scores are alive at once.
# - **FP8.** Hopper's tensor cores run 8-bit floating point at twice the 16-bit rate. FlashAttention-3
#   makes that usable for attention: it rearranges V in the kernel into the layout the FP8
#   instruction requires for its second operand, scales in blocks, and multiplies Q and K by a random
#   orthogonal matrix first, which spreads outlier values and keeps the 8-bit error small.
#
# The lesson's kernel does none of these. In Triton, which warps do what is mostly the compiler's
# decision: `warp_specialize=True` asks for a producer and consumers, but a kernel cannot spell out
# "these two warpgroups alternate, with these barriers between them", nor keep two score tiles in
# flight on purpose. Triton's `tl.dot` can run FP8 on Hopper, but an FP8 attention with its accuracy
# safeguards is a kernel of its own, beyond this course. Languages that expose warpgroups and
# barriers directly (CUTLASS and CuTe in C++, or Triton's lower-level Gluon dialect) can express all
# three.
#
# ### What the profiler sees
#
# `make bench` also runs the lesson's kernels and the ones they are measured against under Nsight
# Compute (lesson 08's `ncu`, with `course.ncu_targets()` as its list), and records a few of its
# figures. For the attention forward, causal, D = 128, N = 2,048, one of the shapes where the lesson's
# kernel trails cuDNN most: its time, how the kernel was launched (programs, threads per program,
# registers per thread), the share of cycles the tensor cores were busy, and the bytes that went
# through L2:

# %%
def profiled(targets, columns):
    """Per GPU, the recorded Nsight Compute figures of some of `course.ncu_targets()`: columns is
    {heading: fn(metrics of one kernel) -> number}."""
    if not hopper:
        print("No profiles recorded yet: `make bench` on a Hopper GPU with Nsight Compute records them.")
    for gpu, record in hopper.items():
        ncu = record.get("ncu", {})
        if "kernels" not in ncu:
            print(f"{gpu}: no profile ({ncu.get('error', 'not recorded')[:100]})")
            continue
        version = ncu["ncu"].split()[1]         # "Version 2025.3.1.0 (build ...)"
        print(f"{gpu} ({record['date']}, Nsight Compute {version}, triton {record['triton']})")
        print(f"  {'':34}" + "".join(f"{heading:>15}" for heading in columns))
        for k in ncu["kernels"]:
            if k["target"] in targets:
                cells = [fn(k) for fn in columns.values()]
                print(f"  {k['target']:34}" + "".join(f"{v:15,.0f}" if v == int(v) or abs(v) >= 100
                                                      else f"{v:15.2f}" for v in cells))


LAUNCH = {"time us": lambda k: k["gpu__time_duration.sum"] / 1e3,       # ncu's time unit: nanoseconds
          "programs": lambda k: k["launch__grid_size"],
          "threads": lambda k: k["launch__block_size"],
          "registers": lambda k: k["launch__registers_per_thread"],
          "tensor %": lambda k: k["sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"]}
profiled(["attention forward (10)", "cuDNN forward"],
         {**LAUNCH, "L2 GB": lambda k: k["lts__t_bytes.sum"] / 1e9})

# %% [markdown]
# Two different designs. cuDNN launches one program per SM (the programs column is the SM count)
# of 384 threads: three warpgroups, the arrangement FlashAttention-3 describes, one warpgroup issuing
# the TMA copies and two computing in turns, each program walking many query blocks. The lesson's
# kernel launches one program per query block. The tensor-core column is the gap in one number:
# cuDNN keeps its tensor cores busy a larger share of the time, because while one of its warpgroups
# computes exponentials the other's matrix multiplies run. The lesson's tensor cores wait through
# every tile's softmax.
#
# ## The backward pass: dQ added up by atomics
#
# Lesson 06's backward runs two kernels after the small `delta = rowsum(dO · O)` pass. The dK/dV
# kernel gives each program a block of keys and streams the query blocks past it: per step it
# recomputes the scores `S`, then `dV += Pᵀ dO`, `dP = dO Vᵀ` and `dK += dSᵀ Q`, four matrix
# multiplies. The dQ kernel gives each program a block of queries and streams the key blocks: `S`
# again, `dP` again and `dQ += dS K`, three more. Seven per tile, two of them computed twice.
#
# The dQ kernel exists because a key-block program cannot *own* any row of dQ: every key block
# contributes to every query row. It can still contribute: with `dS` in hand, its share `dS K` is one
# more matrix multiply, added into a float32 copy of dQ with atomic adds (`tl.atomic_add`: the add
# happens in the L2 cache, so two programs adding into one row never lose each other's value). That
# makes five matrix multiplies per tile and one kernel. FlashAttention-2's CUDA code does the same,
# and FlashAttention-3 hands the adds to TMA (`cp.reduce.async.bulk`).
#
# The price is traffic: every step adds a `BLOCK_M × D` float32 tile into memory that many other
# programs are adding into too, where the two-kernel version writes each dQ tile once. The kernel
# scales its share by the softmax scale before adding it, so dQ needs only a cast to float16 after.
# Interior steps take no mask; the diagonal steps of the causal case mask the scores, and the last
# query block masks the rows past N.

# %%
show(course._attend_backward)
show(course.attention_backward_kernel)

# %% [markdown]
# Checked against PyTorch's autograd through its own attention, here, with a length no tile divides:

# %%
q, k, v, dout = (torch.randn(2, 3, 100, 64, device=DEVICE, dtype=dtype) for _ in range(4))
for causal in (False, True):
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    F.scaled_dot_product_attention(*leaves, is_causal=causal).backward(dout)
    out, lse = course.attention(q, k, v, causal=causal)
    grads = course.attention_backward(q, k, v, out, lse, dout, causal=causal)
    worst = max((g - t.grad).abs().max().item() for g, t in zip(grads, leaves))
    print(f"causal={causal!s:5}: largest difference of dq, dk, dv from autograd's {worst:.1e}")

# %% [markdown]
# `course.trainable_attention` wraps the forward and this backward in a `torch.autograd.Function`,
# as lesson 06's `attention` did. The benchmark times forward and backward together, causal, against
# cuDNN, FlashAttention-2 and lesson 06's two-kernel backward (behind lesson 06's forward), each
# forward and backward captured together in one CUDA graph and timed as its replays:

# %%
training_groups = ["hopper_attention_fwd_bwd_causal_d128", "hopper_attention_fwd_bwd_causal_d64"]
training_rows = {group: timed(course, group) for group in training_groups}
for group, by_gpu in training_rows.items():
    print(group)
    if not by_gpu:
        print("  nothing measured or recorded for this group yet")
    ratios(by_gpu, "lesson 10", ["cudnn", "flashattention-2", "lesson 06"])

# %% [markdown]
# Two fewer matrix multiplies per tile, and yet read the last column: against lesson 06's two
# kernels the atomic version is about even, ahead at some shapes and behind at others, nowhere near
# the two sevenths the count promises. The arithmetic of one step says why. Per step, with the tiles
# the autotuner usually picks (64 query rows, 128 keys, D = 128):

# %%
BLOCK_M, BLOCK_N, D = 64, 128, 128
flops_per_step = 5 * 2 * BLOCK_M * BLOCK_N * D
loads = 2 * BLOCK_M * D * 2                      # the Q and dO tiles, float16
atomics = BLOCK_M * D * 4                        # the float32 share of dQ, read and written in L2
print(f"per step: {flops_per_step / 1e6:.1f} MFLOP, {loads // 1024} KiB of Q and dO loaded, "
      f"{atomics // 1024} KiB added into dQ by atomics")
for gpu, rows in training_rows["hopper_attention_fwd_bwd_causal_d128"].items():
    mine = impl_named(rows, "lesson 10")
    fastest = max((r for r in rows if r["impl"] == mine), key=lambda r: r["tflops"], default=None)
    if fastest:
        rate = fastest["tflops"] * 1e12 / flops_per_step * atomics
        print(f"{gpu}: at {fastest['tflops']:.0f} TFLOP/s ({fastest['label']}), the atomic adds alone "
              f"stream about {rate / 1e12:.1f} TB/s into L2")

# %% [markdown]
# Every step's atomic adds are as many bytes as its loads, and each one is a read, an add and a write
# inside L2, where many programs' adds to the same rows queue up. The two-kernel version spends two
# extra matrix multiplies and writes each dQ tile once. On Hopper, whose tensor cores are fast
# compared with its L2, the trade comes out about even against lesson 06.
#
# Against cuDNN the question is different, and the profiler answers it. The backward alone, causal,
# B = 4, N = 4,096, D = 128, beside cuDNN's backward kernel on the same tensors; the last two columns
# are the 32-byte sectors that L2 updated by atomic adds, and the requests that went to spilled
# registers:

# %%
def l2_adds(k):
    return k["lts__t_sectors_op_red.sum"] + k["lts__t_sectors_op_atom.sum"]   # 32-byte sectors


BACKWARDS = ["attention backward (10)", "cuDNN backward"]
profiled(BACKWARDS, {**LAUNCH, "L2 adds M": lambda k: l2_adds(k) / 1e6,
                     "spills k": lambda k: k["derived__local_spilling_requests"] / 1e3})
for gpu, record in hopper.items():
    found = {k["target"]: k for k in record.get("ncu", {}).get("kernels", [])}
    if set(BACKWARDS) <= found.keys():
        ours, cudnn = (found[name] for name in BACKWARDS)
        print(f"{gpu}: L2 atomic sectors, the lesson's kernel over cuDNN's: "
              f"{l2_adds(ours) / l2_adds(cudnn):.3f}")
        for name, k in zip(BACKWARDS, (ours, cudnn)):
            held = k["launch__block_size"] * k["launch__registers_per_thread"]
            print(f"  {name}: {held:,.0f} registers per program, of the SM's 65,536")

# %% [markdown]
# cuDNN adds dQ into L2 with atomics too, and as many of them: the atomic traffic is not what
# separates the two kernels. Nor are the registers: each kernel's program takes nearly all of its
# SM's register file, and both spill some. What separates them is how the work is arranged. cuDNN's
# backward runs one program per SM for the whole kernel, with three warpgroups, as its forward does,
# so that copies, matrix multiplies and the elementwise work between them overlap across
# warpgroups; its tensor cores are busy a clearly larger share of the time. In the lesson's kernel a
# program's warps do everything in turn: five matrix multiplies per step, the exponentials and the
# atomic adds between them, and the tensor cores wait while the rest runs.
# FlashAttention-3 goes further and hands the adds to a warp of their own, which issues them through
# TMA (`cp.reduce.async.bulk`) while the others compute. Triton has the TMA half
# (`desc.atomic_add(offsets, tile)` on a tensor descriptor), but not the half that decides which warps
# do what and when, and the interpreter does not run descriptor atomics, so the lesson keeps
# `tl.atomic_add`.
#

# %% [markdown]
# ## Attention on the projection's layout
#
# In a decoder block (lesson 11), Q, K and V come out of one matmul as column slices of a (T, 3d)
# matrix: (B, H, N, D) views whose rows are 3d values apart. Lesson 06's kernel and `course.attention`
# read contiguous tensors, so V would need a copy first (Q and K get theirs for free, from the RoPE
# kernel that rotates them), and the output another, back to the (T, d) rows the next matmul reads.
# Two copies of a (T, d) tensor, each a read and a write, for data that is already where it needs to
# be, only laid out differently.
#
# Descriptors that each program builds over its own slice remove both. `course.causal_attention` is
# lesson 06's causal forward with its loads and its store moved to descriptors, one per (batch, head)
# slice: a descriptor is given the slice's row stride, so V is read in place, 3d values per row apart,
# and the output is stored through the strides of a (B, N, H, D) tensor, which is the (T, d) matrix. The
# loop over key tiles is lesson 06's online softmax unchanged:

# %%
show(course.attention_tiles)
show(course.causal_attention_kernel)

# %% [markdown]
# On the shapes of lesson 11's small block, against PyTorch's attention of the same views:

# %%
B, N, H, D = 2, 5, SMALL.n_heads, SMALL.head_dim
qkv = torch.randn(B * N, 3 * SMALL.dim, device=DEVICE)
q, k, v = (qkv[:, i * SMALL.dim:(i + 1) * SMALL.dim].view(B, N, H, D).transpose(1, 2) for i in range(3))
out = course.causal_attention(q, k, v)
want = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
print("v's strides:", v.stride(), " output:", tuple(out.shape), "contiguous:", out.is_contiguous())
print("largest difference from SDPA:", (out - want.transpose(1, 2)).abs().max().item())


# ## The long-row softmax
#
# Lesson 05's tiled softmax handles rows too long for one program's registers: pass 1 walks the row
# and keeps a running max and sum, pass 2 walks it again and writes `exp(x - max) / sum`. Lesson 08
# profiled it and found that pass 2 re-reads most of the row from memory, and that walking pass 2
# *backwards* saves some of that. This lesson's kernel takes both lessons' findings and asks how close
# a two-pass softmax can get to the least traffic any softmax needs.
#
# **The two-read ceiling.** A softmax must read its input once and write its output once: two bytes
# moved per byte of input. Those are the bytes the `% copy` column counts (a copy moves exactly that).
# A kernel that reads the row twice from memory moves three, so at the copy's speed it reaches at
# most two thirds of the copy ceiling. It can do better only if part of the second read comes from
# L2 instead of memory.
#
# **How much can L2 hold?** Every program in flight works on its own row, and their rows share one
# L2. When a program starts pass 2, at most its share of L2 (the L2's size over the programs in
# flight) can still hold its row. Walking pass 2 backwards starts with the tiles pass 1 read last,
# the likeliest to be in that share. The programs in flight: each SM holds at most 64 warps, so
# `64 / num_warps` programs per SM at most (fewer if registers run out):

# %%
for chip_name in ("H100 SXM", "H200"):
    chip = CHIPS[chip_name]
    l2 = chip.l2_mb * 2**20
    print(f"{chip.name}: L2 {chip.l2_mb:g} MB, {chip.sms} SMs, at most {chip.warps_per_sm} warps per SM")
    for warps in (8, 16):
        in_flight = chip.sms * (chip.warps_per_sm // warps)
        share = l2 / in_flight
        print(f"  {warps:2} warps per program: {in_flight:4} programs in flight, "
              f"{share / 1024:4.0f} KiB of L2 each")
        for cols, nbytes in ((65536, 4), (262144, 4), (262144, 2)):
            kept = min(1.0, share / (cols * nbytes))       # the part of a row that can still be in L2
            print(f"      rows of {cols:6} values of {nbytes} B: {kept:4.0%} of a row, "
                  f"so at most {2 / (3 - kept):.0%} of the copy ceiling")

# %% [markdown]
# Read the percentages as ceilings, not predictions: the share is an upper bound on what survives (L2
# also holds the outputs being written and other programs' tiles keep arriving), and lesson 08
# measured the reversed pass saving less than its share. The lesson of the arithmetic: with rows this
# long, the second read mostly comes from memory, and a two-pass kernel's ceiling sits a little above
# two thirds of the copy. Fewer warps per program means more programs in flight, and less L2 each.
#
# **One exponential per element in pass 1.** Lesson 05's pass 1 keeps a running max and sum *per
# lane*, and updates both for every element: `l * exp(m - m_new) + exp(x - m_new)`, two exponentials
# per element. The lesson's kernel finds the tile's max first (a reduction across the tile, cheap),
# then updates the row's single running max once per tile:
#
# $$m' = \max\big(m, \max_j x_j\big), \qquad l' = l\, e^{m - m'} + \sum_j e^{x_j - m'}$$
#
# One exponential per element, plus one per tile for the rescale. In a memory-bound kernel that
# sounds free, but the special-function units are not fast, and with float16 input a tile of values
# arrives in half the time: halving the exponentials keeps the arithmetic out of the way.
#
# ## Exercise · The long-row softmax
#
# Write `softmax_long_kernel`; the launcher is written (one program per row, tiles of `BLOCK`
# values). The row's values are contiguous; rows are `stride_xm` apart in x and `stride_om` apart in
# the output.
#
# - Pass 1, forwards over the tiles: load a tile in float32 (lanes past the end of the row as `-inf`),
#   its max, the new running max, then the running sum rescaled once and the tile's exponentials
#   added, one `tl.exp` per element. Keep `m` and `l` as 1-element tensors (`tl.full((1,), ...)`) or
#   scalars.
# - The `-inf` trap from lesson 05: a row whose first tile is all `-inf` (a masked prefix) has a
#   running max of `-inf`, and `exp(-inf - (-inf))` is NaN. Subtract a safe value instead (0 where
#   the max is still `-inf`): the sum then stays 0 until a finite value arrives.
# - Pass 2, **backwards**: tile `n_tiles - 1` first, tile 0 last; load, write
#   `exp(x - m) / l` in the output's dtype (`out_ptr.dtype.element_ty`), masked at the row's end.
#
# Beside the values, the check counts how many times x is read (exactly twice) and watches where each
# program's second pass begins (at the end of its row).

# %% tags=["exercise"]
@triton.jit
def softmax_long_kernel(x_ptr, out_ptr, n_cols, stride_xm, stride_om, BLOCK: tl.constexpr):
    """Softmax of row program_id(0), read in tiles of BLOCK: pass 1 forwards, pass 2 backwards."""
    # YOUR CODE HERE:
    # 1. row = program_id(0) as tl.int64; x_row and out_row: the row's start in x and in the output;
    # 2. pass 1: m = -inf, l = 0; for each tile from the first: load (-inf past the row's end, float32),
    #    m_new = max(m, the tile's max), a safe shift (0 while m_new is -inf),
    #    l = l * exp(m - shift) + sum(exp(x - shift)); m = m_new;
    # 3. pass 2: for i in range(n_tiles): the tile n_tiles - 1 - i; store exp(x - m) / l, masked.
    pass


def softmax_long(x):
    """Softmax over the rows of x (M, n), rows of any length; each row's values contiguous."""
    assert x.dim() == 2 and x.stride(1) == 1, "softmax_long takes a 2-D tensor with contiguous rows"
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    BLOCK, warps = pick(cpu=(256, 4), gpu=(4096, 8))
    softmax_long_kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), out.stride(0), BLOCK=BLOCK,
                                       num_warps=warps)
    return out


# %%
check("softmax_long", softmax_long)

# %% [markdown]
# Say it, then measure it: the course's kernel, on a row of 4 tiles and a bit, reads the row twice
# and writes it once, and its second pass walks the tiles from the last to the first (tile numbers of
# each load of x, in order, for the first row):

# %%
n_cols, block = 4 * 256 + 100, 256
x_small = torch.randn(3, n_cols)                     # CPU tensors: the interpreter runs them on either device
out_small = torch.empty_like(x_small)
with interpreter.record(touches=True) as rec:
    course.softmax_long_kernel[(3,)](x_small, out_small, n_cols, x_small.stride(0), out_small.stride(0),
                                     BLOCK=block)
launch = rec.launches[-1]
order = [int(offs.min()) // block for pid, name, kind, offs in launch.touches
         if pid[0] == 0 and name == "x_ptr" and kind == "load"]
print("tiles of row 0 loaded, in order:", order)
print(f"read {launch.bytes_loaded / x_small.nbytes:.2f} x the input, "
      f"wrote {launch.bytes_stored / x_small.nbytes:.2f} x")
print("largest difference from torch.softmax:", (out_small - torch.softmax(x_small, 1)).abs().max().item())

# %% [markdown]
# How close it gets, on a GPU now or as recorded, float32 then float16, against lesson 05's tiled
# kernel (pass 2 forwards, two exponentials per element), `torch.compile` of the naive softmax, and
# `torch.softmax`. The `% copy` column is the one to read:

# %%
softmax_rows = {name: timed(course, f"hopper_softmax_long_{name}") for name in ("fp32", "fp16")}

# %%
for name, by_gpu in softmax_rows.items():
    for gpu, rows in by_gpu.items():
        print(f"{name}, {gpu}: % of the copy ceiling (reading twice, without L2's help: {2 / 3:.0%})")
        for label in dict.fromkeys(r["label"] for r in rows):
            cells = [f"{r['impl']} {r['fraction_of_copy']:.0%}" for r in rows if r["label"] == label]
            print(f"  {label:>18}: " + " | ".join(cells))
if not any(softmax_rows.values()):
    print("nothing measured or recorded for these groups yet")

# %% [markdown]
# Compare the lesson's kernel with two thirds of the copy ceiling. At it, the kernel moves its bytes
# (two reads and one write of the matrix) as fast as a copy moves its two; above it, L2 served part of
# the second read; well below it, something other than memory holds it back (too few programs in
# flight to keep the memory busy, or the arithmetic). The compiler's version and `torch.softmax`
# read each row at least twice too; where one of them beats the lesson's kernel, ask lesson 08's
# question: which bytes did it avoid, and how?
#
# Nsight Compute counts those bytes. Rows of 262,144 float32 values, the lesson's kernel beside
# `torch.compile`'s; `read / input` is the bytes read from DRAM over the input's size (1 would be a
# single read), `write / input` the same for the writes, `DRAM %` how busy the memory was against
# its peak:

# %%
def input_bytes(k):
    return k["counted"]["bytes"] / 2        # the record counts one read and one write of the input


MEMORY = {"time us": LAUNCH["time us"],
          "read / input": lambda k: k["dram__bytes_read.sum"] / input_bytes(k),
          "write / input": lambda k: k["dram__bytes_write.sum"] / input_bytes(k),
          "DRAM %": lambda k: k["gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"]}
profiled(["long softmax (10)", "torch.compile softmax, long rows"], MEMORY)

# %% [markdown]
# Both read the input from memory nearly twice: L2 kept only a few percent of each row until pass 2,
# as the share arithmetic predicted, and memory was about as busy as it gets (a copy does not reach
# 100% either). That is the two-read ceiling, measured: with rows this long, a two-pass softmax can
# only pass it by dropping the second read.
#
# The ceiling itself moves only if the second read goes. Two ways: keep the row on chip between the
# passes (a Hopper *thread block cluster* lets several SMs, up to 8 in general and 16 on request,
# read each other's shared memory: enough for rows of hundreds of thousands of values, split across
# the cluster), or give up on a separate normalising pass (when the softmax feeds a matrix multiply,
# as in attention, the normalisation can be applied afterwards to the smaller result:
# FlashAttention's trick).
#
# ### The rows that fit: lesson 05 against the compiler
#
# Lesson 05's row softmax and RMSNorm, one row per program, ended within about a percent of
# `torch.compile`'s kernels, ahead at some shapes and behind at others (lesson 05 prints the ratios).
# The profile of two of those shapes, a softmax over rows of 4,096 float32 values and an RMSNorm over
# rows of 8,192 bfloat16 values, each kernel beside Inductor's:

# %%
profiled(["row softmax (05)", "torch.compile softmax, rows", "RMSNorm (05)", "torch.compile RMSNorm"],
         {**MEMORY, "threads": LAUNCH["threads"], "registers": LAUNCH["registers"]})

# %% [markdown]
# Every kernel here reads its input once and writes its output once (the writes read a little under 1:
# the last lines written still sit in L2 when ncu stops counting, as lesson 08 found): none moves a
# byte more than it must. With the bytes
# equal, the time is the DRAM column alone, and where the two kernels differ, the faster one kept
# memory busier. There is no byte left to save, and what remains (how evenly the programs' loads keep
# every memory channel busy, which shifts from GPU to GPU, as the two GPUs' tables show) is not a
# choice the kernel's algorithm makes. That is why "ahead of the compiler at every shape" is not a
# goal a better algorithm can reach for these two: both kernels already do all the algorithm needs
# and nothing more.
#

# %% [markdown]
# ## Takeaways
#
# - Lesson 06's forward moves to tensor descriptors with no change to its algorithm: boxes that stay
#   inside one head, no masks on interior tiles, zeros past the sequence's end. Descriptors built on
#   the host cost each program nothing; descriptors each program builds over its own slice read any
#   layout with contiguous rows, the projection's included.
# - Against cuDNN, what remains is scheduling that plain Triton does not express (two warpgroups
#   taking turns, softmax hidden under the matmuls, one program per SM) and FP8. Moving tiles faster
#   does not touch the softmax between the two matrix multiplies.
# - The attention backward can drop two of its seven matrix multiplies per tile by adding dQ's
#   shares with float32 atomics. cuDNN makes as many atomic adds: what it has beyond the lesson's
#   kernel is warpgroups that overlap their work.
# - A two-pass softmax moves three bytes for every two it needs: at most two thirds of the copy
#   ceiling, plus what L2 still holds of each row when pass 2 begins. Walking pass 2 backwards
#   collects what L2 kept; one exponential per element in pass 1 keeps the arithmetic out of the way.

# %%
self_check("10")

# %%
flashcards("10")
