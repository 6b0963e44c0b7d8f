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
# Lesson 09 took lesson 04's matmul to about cuBLAS's speed at large sizes on a Hopper GPU with
# tensor descriptors (TMA), persistent programs and a tuned pipeline. This lesson does the same for
# lesson 06's FlashAttention, and measures how far the same tools get against cuDNN's fused
# attention. Attention is harder: a tile needs two matrix multiplies with a softmax between them, and
# the exponentials run on units much slower than the tensor cores. Then the backward, in one kernel,
# and last a softmax alone, over rows too long for one program: how close a two-pass kernel can get
# to the least traffic a softmax needs.
#
# As in lesson 09, the speed, the compiled code and the profiles come from recordings made on an H100
# and an H200 (each labelled with its GPU, date and versions); without a GPU the interpreter still
# runs every kernel here, so you can write and check them.
#
# **You will learn:**
# - lesson 06's forward through descriptors built on the host, and through descriptors each program
#   builds over its own (batch, head) slice, which read the projection's layout in place;
# - the block rule a causal loop needs, and how `tl.static_assert` enforces it;
# - what FlashAttention-3 and cuDNN do on Hopper that a plain Triton kernel does not, read from their
#   profiles: warpgroups taking turns, registers moved between them, one program per SM;
# - that arrangement written in Gluon: a producer warp and consumer warpgroups meeting at mbarriers
#   over a ring of shared-memory slots, FlashAttention-3's two scheduling steps, a third consumer,
#   what a program costs besides its key tiles, and persistent programs fed by a counter;
# - the attention backward in one kernel, dQ added up by atomics, what the atomics cost, and why they
#   make dQ differ in its last bits from run to run;
# - the long-row softmax: the two-read ceiling, an estimate of the L2 cache's share, and one
#   exponential per element.
#
# Exercises: causal attention on the projection's layout (descriptors per program, the block rule),
# the ring's barriers (the slot and parities a Gluon producer and its consumers wait on), the
# backward's step with dQ added by atomics, and the long-row softmax.

# %% [markdown]
# ## Setting up

# %%
from helpers import DEVICE, ON_GPU, check, describe, interpreter, pick
from helpers.bench import (impl_named, preferred_first, ratios, recorded_devices, recorded_rows, timed,
                           verdicts)
from helpers.cards import flashcards, self_check
from helpers.roofline import CHIPS, chip_for
from helpers.solutions import load_solution, show

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
import triton
import triton.language as tl

print(describe())
course = load_solution("10")                  # the lesson's kernels, given where you do not write them
lesson06 = course.lesson06
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
#   leaves by TMA, and rows past N read as zeros and are never stored, so no tile's load or store
#   needs a mask (only the per-row store of lse is masked). A pre-hook sets the boxes per
#   configuration: the autotuner calls it before it runs that configuration.
# - **A wider search, timed as graph replays**: 64 or 128 query rows per program, 64 or 128 keys per
#   tile, 4 or 8 warps, 2 to 4 stages, and the request for warp specialisation
#   (`warp_specialize=True` on the key loop: a producer warp for the K and V copies) where this
#   Triton compiles it; at D ≤ 64, one more tile, capped at 128 registers a thread so that two
#   programs share an SM (below, after the spill).
# - **Cheaper arithmetic per score**: the scale folded into the exponential's argument
#   (`s * qk_scale - m`, one fused multiply-add per score), and no mask at all on the interior tiles.
#
# Before timing, a pruning function tries to compile each warp-specialised configuration for the
# head size and mask at hand, and drops those that fail. What compiled, and whether the compiled
# code really splits its warps, as `make bench` recorded it:

# %%
def case(row):
    return f"D={row['head_dim']} {'causal' if row['causal'] else 'full'}"


for gpu, record in hopper.items():
    print(f"{gpu} (triton {record['triton']}): warp-specialised configurations of attention_kernel")
    for config in dict.fromkeys(row["config"] for row in record["warp_specialize"]):
        rows = [row for row in record["warp_specialize"] if row["config"] == config]
        built = [case(r) for r in rows if r["compiles"]]
        split = [case(r) for r in rows if r.get("specialised")]   # ttg.warp_specialize in the compiled code
        failed = {r["error"] for r in rows if not r["compiles"]}
        print(f"  {config:40} compiles for: {', '.join(built) or 'none'}"
              + (f"; fails: {'; '.join(failed)}" if failed else "")
              + (f"; its warps split for: {', '.join(split) or 'none'}" if built else ""))

# %% [markdown]
# A configuration that fails costs nothing at run time: it never reaches the timing. Compiling is
# not splitting: the survey also looked for `ttg.warp_specialize` in each compiled kernel, as lesson
# 09 does, and where the list says none, the request compiled into ordinary code whose warps all do
# everything. An autotuner's pick marked `warp_specialize=True` then runs that code. The kernel:

# %%
show(course._softmax_step)
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
# ### Registers, and a spill
#
# `make bench` compiled the forward for D = 128 with 128 query rows and 4 warps (one warpgroup), and
# kept the first line of lesson 08's compiled-code summary: registers per thread and how many were
# **spilled**, kept in local memory (cached in L1 and L2, backed by DRAM) for want of a register:
# loads and stores the kernel never asked for. Beside it, where recorded, the same tile with 8 warps,
# every configuration of the GPU search, and the autotuner's choices:

# %%
rows, warps = 128, 4
print(f"{rows} rows x D = 128 float32 accumulator over {32 * warps} threads: {rows * 128 // (32 * warps)} "
      f"registers each; a {rows} x 64 score tile: {rows * 64 // (32 * warps)} more; at most 255 a thread")
print("searched at 128 rows:", "; ".join(f"128x{c[1]}, {c[2]} warps, {c[3]} stages"
                                         + (", warp_specialize=True" if c[4:] else "")
                                         for c in course.ATTENTION_SEARCH if c[0] == 128))
for gpu, record in hopper.items():
    print(gpu)
    for name in ("attention_kernel", "attention_kernel, 8 warps"):
        excerpt = record["compiled"].get(name)
        print("  " + "\n    ".join(excerpt.splitlines()[:2]) if excerpt else f"  {name}: not recorded yet")
    forward_survey = [r for r in record.get("registers", []) if r["kernel"] == "attention_kernel"]
    for r in (r for r in forward_survey if not r["causal"] and r["head_dim"] == 128
              and "maxnreg" not in r["config"]):            # the register cap: further down
        print(f"  {r['config']:40} " + (f"{r['registers']:3} registers, {r['spills']} spilled"
                                        if "error" not in r else f"does not compile: {r['error'][:60]}"))
    for c in (c for c in record.get("autotuned", []) if c["kernel"] == "attention_kernel"):
        print(f"  the autotuner chose {c['config']} for (N, D, causal) = {', '.join(c['key'][:3])}")
    if "registers" not in record:
        print("  registers per configuration, autotuner choices: not recorded yet (make bench records them)")

# %% [markdown]
# That is a spill, and the arithmetic says why: one warpgroup holding 128 rows keeps the whole
# `128 × 128` float32 accumulator (128 registers per thread) and a `128 × 64` tile of scores (64
# more), plus the probabilities, the row statistics and addresses, past 255. With 8 warps, two
# warpgroups share the rows, 64 each, and each thread holds half as much: that is how
# FlashAttention-3 and Triton's own fused-attention tutorial arrange 128 query rows. The search
# offers both, and a spilling configuration is not always the slowest: the autotuner keeps the
# fastest for each shape (the profile further down shows the one its own run picked for one shape).
#
# ### Registers decide how many programs share an SM
#
# An SM runs as many programs at once as its registers, its shared memory and its 64 warp slots
# allow. On Hopper that is 65,536 registers (handed out 8 a thread at a time) and 228 KB of shared
# memory, less 1 KB the hardware keeps per program; `course.programs_per_sm` does the division. At
# D = 64 the 128 × 128 tile with 8 warps needs about 112 KB of shared memory (Q's 16 KB and three
# stages of K and V, 32 KB each; the compiled kernel's own figure is printed below): two programs
# would fit. Its registers decide otherwise: the
# compiler gives each of its 256 threads well over 128 (printed below), and a second program's do
# not fit beside the first's.
#
# `triton.Config(..., maxnreg=128)` caps the registers the compiler may give a thread (ptxas keeps to
# it, and spills where it cannot). At 128, two programs of 256 threads fill the register file
# exactly. With two programs on an SM, its warp schedulers have a second program's warps to issue
# whenever the first's wait, for the exponentials or for a `wgmma`: one program's softmax runs under
# the other's matrix multiplies. That is the overlap FlashAttention-3 arranges with barriers between
# two warpgroups, left here to the hardware. At D = 128 it does not work: a thread's share of the
# 128 × 128 accumulator and scores does not fit in 128 registers (the capped tile spills, below), and
# that tile's shared memory fits on an SM once anyway. So `course.TWO_PER_SM` joins the search only
# at D ≤ 64. Recorded by `make bench`: the two 128 × 128 tiles at D = 64 side by side, and their
# time on one shape (graph replays, B = 4, H = 16, N = 4,096):

# %%
print("the capped configuration:", course.lesson09.describe_config(course.TWO_PER_SM), "(D <= 64)")
for gpu, record in hopper.items():
    print(gpu)
    capped = [r for r in record.get("registers", [])
              if r["kernel"] == "attention_kernel" and not r["causal"] and "maxnreg" in r["config"]]
    for r in capped:
        print(f"  D={r['head_dim']:<3} {r['config']:42} {r['registers']} registers, {r['spills']} spilled")
    runs = record.get("two_per_sm", [])
    if not runs:
        print("  not recorded yet (make bench records it)")
    for r in runs:
        fit = course.programs_per_sm(r["registers"], r["warps"], r["shared"])
        mask = "causal" if r["causal"] else "full  "
        print(f"  D={r['head_dim']} {mask} {r['config']:40} {r['registers']:3} registers, "
              f"{r['shared'] / 1024:5.1f} KB shared: {fit} program(s) per SM, {r['ms']:.3f} ms")
    for causal in (False, True):
        pair = [r["ms"] for r in runs if r["causal"] == causal]
        if len(pair) == 2:
            speedup = pair[0] / pair[1]
            print(f"  {'causal' if causal else 'full'}: the capped tile runs {speedup:.2f}x as fast")

# %% [markdown]
# The arithmetic (`programs_per_sm`) is the hardware's published limits applied to the compiled
# kernel's registers and shared memory; Nsight Compute reports the same limit as its occupancy.
# Where a GPU's record holds the capped tile, its autotuner chose it at D = 64 for most lengths (the
# choices are printed above), so that GPU's D = 64 timings further down include what the cap bought.
#
# ## Exercise 1 · Attention on the projection's layout
#
# In a decoder block (lesson 11), Q, K and V come out of one matmul as column slices of a (T, 3d)
# matrix: (B, H, N, D) views whose rows are 3d values apart. Lesson 06's kernel and `course.attention`
# read contiguous tensors, so V would need a copy first (Q and K get theirs from the RoPE kernel), and
# the output another, back to the (T, d) rows the next matmul reads: two reads and two writes of a
# (T, d) tensor for data already where it needs to be. Descriptors that each program builds over its
# own slice remove both: given the slice's start, shape and row stride, they read V in place and store
# the output through the strides of a (B, N, H, D) tensor, which is the (T, d) matrix. (Each program
# writes its descriptors to memory before its first copy: a small cost on short sequences.)
#
# **The block rule.** The causal forward runs lesson 06's loop twice: over the keys before the query
# block, unmasked, then over the block's own keys, with the diagonal mask. The unmasked tiles must
# end exactly where the query block starts. The block starts at a multiple of `BLOCK_M`, so this
# holds for every block only when `BLOCK_N` divides `BLOCK_M`. With 64 query rows and tiles of 128
# keys, the block at row 64 would take keys 0 to 127 in one unmasked tile: its rows would see keys
# after themselves, and the masked loop would add keys 64 to 127 again. Nothing fails; the numbers are
# wrong. `tl.static_assert(condition, message)` checks `constexpr`s when the kernel compiles, so a
# configuration that breaks the rule (autotuner lists grow) stops with your message instead.
#
# Write `causal_attention_kernel`. The launcher `causal_attention` is written (it checks the layouts,
# allocates the (B, N, H, D) output, passes every tensor's strides, and launches one program per query
# block and (batch, head)), and so is the loop, `attention_tiles`, lesson 06's online softmax with its
# tiles fetched by descriptor:

# %%
show(course.attention_tiles)
attention_tiles = course.attention_tiles

# %% [markdown]
# - First, the block rule: `tl.static_assert(BLOCK_M % BLOCK_N == 0, "...")`.
# - The program's query block, numbered from the last (`start_m`, the longest rows first, as in lesson
#   06), and its batch `b` and head `h` from `program_id(1)`, as `tl.int64`.
# - Four descriptors, `tl.make_tensor_descriptor(base, shape=[n_ctx, HEAD_DIM], strides=[row stride,
#   1], block_shape=[rows, HEAD_DIM])`: the base is the tensor's pointer moved to (b, h) with its own
#   batch and head strides; Q and O move boxes of `BLOCK_M` rows, K and V of `BLOCK_N`. Rows of a box
#   past `n_ctx` read as zeros and are not stored.
# - The Q tile (`q_desc.load([start_m, 0])`), `m` at `-inf`, `l` and `acc` at 0, both loops, and
#   `acc / l` stored through O's descriptor in O's dtype (`o_desc.dtype`).
#
# The check compares with PyTorch's attention on slices of one projection and on three layouts at
# once, N = 1, lengths no block divides and one of whole blocks, float32 and float16, rows whose every
# exponential underflows unless the running max is subtracted, and scores that overflow. Then it
# checks that every tile moves through a descriptor, counts the bytes of K read against the causal
# count, checks that V's loads land in V's own memory and that your function copies none of q, k, v
# or the output beside the kernel (no `.contiguous()`), compiles your kernel with 16 query
# rows and tiles of 32 keys, and runs it with 64 query rows and tiles of 16 (on a GPU the autotuner
# may choose square blocks for every case, where `BLOCK_M` and `BLOCK_N` mixed up go unnoticed, and
# on the CPU `BLOCK_M` is twice `BLOCK_N`, where the diagonal's end can be miscounted unseen). On a
# GPU one more case has q's sequences 2³⁰ + 64 values apart, so that `b * sq_b` passes 2³¹ for the
# third: it needs `b` in int64.

# %% tags=["exercise"]
@triton.autotune(configs=course.CAUSAL_CONFIGS, key=["n_ctx", "HEAD_DIM"], prune_configs_by=lesson06.PRUNE)
@triton.jit
def causal_attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, n_ctx, n_heads, qk_scale,
                            sq_b, sq_h, sq_n, sk_b, sk_h, sk_n, sv_b, sv_h, sv_n, so_b, so_h, so_n,
                            HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """One program: BLOCK_M query rows of one (batch, head), as lesson 06's flash_fwd_causal_kernel."""
    # YOUR CODE HERE:
    # 1. tl.static_assert of the block rule;
    # 2. start_m (the last query block first), b and h (int64);
    # 3. q_desc, k_desc, v_desc, o_desc over the (b, h) slices (boxes of BLOCK_M or BLOCK_N rows);
    # 4. the Q tile; m_i = -inf, l_i = 0, acc = 0 (float32);
    # 5. attention_tiles over [0, start_m) unmasked, then over [start_m, start_m + BLOCK_M) masked;
    # 6. store acc / l_i through o_desc.
    pass


def causal_attention(q, k, v):
    """Causal attention of q, k, v, (B, H, N, D) of any strides whose rows are contiguous and 16-byte
    aligned: the output as (B, N, H, D), contiguous (the heads side by side)."""
    assert q.dim() == 4 and q.shape == k.shape == v.shape, "q, k, v must all be (B, H, N, D)"
    assert q.dtype == k.dtype == v.dtype, "q, k, v must share a dtype"
    B, H, N, D = q.shape
    assert D in (16, 32, 64, 128), "head dimension must be 16, 32, 64 or 128"
    for name, t in (("q", q), ("k", k), ("v", v)):
        assert t.stride(3) == 1, f"{name}: each row of D values must be contiguous (stride(3) == 1)"
        assert all((s * t.element_size()) % 16 == 0 for s in t.stride()[:3]) and t.data_ptr() % 16 == 0, \
            f"{name}: its strides {t.stride()[:3]} and start must be multiples of 16 bytes (descriptors)"
    out = torch.empty((B, N, H, D), device=q.device, dtype=q.dtype)
    o = out.transpose(1, 2)                                # the (B, H, N, D) view the kernel writes through
    grid = lambda meta: (triton.cdiv(N, meta["BLOCK_M"]), B * H)  # noqa: E731
    causal_attention_kernel[grid](q, k, v, o, N, H, D ** -0.5 * lesson06.LOG2E.value,
                                  *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *o.stride()[:3],
                                  HEAD_DIM=D)
    return out


# %%
check("causal_attention", causal_attention)

# %% [markdown]
# ## How fast, against cuDNN
#
# The benchmark: 16 heads, `B · N = 16,384` tokens, float16, head dimensions 128 and 64, full and
# causal, against cuDNN's fused attention and FlashAttention-2 (both through PyTorch's SDPA) and
# lesson 06's kernel, every one timed as CUDA-graph replays (the GPU's time: building descriptors
# and launching from Python stay out of it, as in the matmul tables). On a GPU now, or as recorded:

# %%
attention_groups = ["hopper_attention_fwd_d128", "hopper_attention_fwd_causal_d128",
                    "hopper_attention_fwd_d64", "hopper_attention_fwd_causal_d64"]
attention_rows = {group: timed(course, group) for group in attention_groups}

# %% [markdown]
# The tables in one view: the lesson's kernel's speed over each rival's along the sequence length
# (TFLOP/s over TFLOP/s, so above 1 means the lesson's kernel is faster), drawn for one GPU; then the
# first panel's numbers for every GPU, marked where they do not rise with N:

# %%
def over(rows, mine, theirs):
    """[(N, TFLOP/s of `mine` over those of `theirs`)] along a group's shapes (labelled "B.. N..")."""
    mine, theirs = impl_named(rows, mine), impl_named(rows, theirs)
    speed = {(r["label"], r["impl"]): r["tflops"] for r in rows}
    labels = list(dict.fromkeys(r["label"] for r in rows))
    return [(int(label.split()[1][1:]), speed[(label, mine)] / speed[(label, theirs)]) for label in labels]


gpus = {gpu for by_gpu in attention_rows.values() for gpu in by_gpu}
if gpus:
    gpu = preferred_first(gpus)[0]
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
    for ax, (theirs, name) in zip(axes, (("cudnn", "cuDNN"), ("flashattention-2", "FlashAttention-2"),
                                         ("lesson 06", "lesson 06's kernel"))):
        for group, by_gpu in attention_rows.items():
            if gpu in by_gpu:
                points = over(by_gpu[gpu], "lesson 10", theirs)
                ax.plot([n for n, _ in points], [x for _, x in points], "o-",
                        label=group.removeprefix("hopper_attention_"))
        ax.axhline(1.0, color="black", linewidth=1, linestyle="--")
        ax.set_xscale("log", base=2)
        ax.set_xticks([n for n, _ in points], [f"{n // 1024}k" for n, _ in points])
        ax.set_xlabel("sequence length N")
        ax.set_title(f"over {name}", fontsize=10)
    axes[0].set_ylabel(f"lesson 10's speed ÷ theirs\n(on {gpu})")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    plt.show()
for group, by_gpu in attention_rows.items():      # the first panel, every GPU
    for gpu, rows in by_gpu.items():
        trend = over(rows, "lesson 10", "cudnn")
        steady = all(b >= a for (_, a), (_, b) in zip(trend, trend[1:]))
        print(f"{gpu[:12]:12} {group.removeprefix('hopper_attention_'):15} over cuDNN: "
              + "  ".join(f"N{n} {x:.2f}" for n, x in trend) + ("" if steady else "   <- not rising with N"))

# %% [markdown]
# The first panel is the one that matters here: the lesson's kernel over cuDNN. The second compares
# with FlashAttention-2, written for the A100: on Hopper it still issues the A100's matrix
# instructions, so any kernel that reaches `wgmma` has an edge over it. The third panel is what tensor
# descriptors, the wider search and the graph-timed choice bought over lesson 06's kernel: some
# percent, not a factor. Lesson 06's pointer loads were never the main cost on Hopper (the compiler
# already pipelines them and feeds `wgmma` from shared memory); much of the time goes to the softmax
# between the two matrix multiplies, which faster tiles do not touch.
#
# Short sequences give each program few key tiles, so its prologue and epilogue weigh more, and one
# would expect the gap to cuDNN to close as N grows (the last lines above). It does not always:
# some lines dip (marked). A longer sequence changes more than the share of each program spent outside
# its loop: the grid, the tile the autotuner picks, how the last wave of programs fills the GPU. The
# prologue explains part of the gap at the shortest sequences; the gap that stays at every length is
# the arrangement of the work, which FlashAttention-3 changes.
#
# ### What FlashAttention-3 does that this kernel does not
#
# cuDNN's Hopper attention and FlashAttention-3 (the Hopper rewrite of FlashAttention, in CUDA with
# NVIDIA's CUTLASS library) use the same hardware as the lesson's kernel, and more of it at once. Four
# techniques from the FlashAttention-3 paper explain most of the gap that remains:
#
# - **Warp specialisation, with the registers moved to the consumers.** A producer warpgroup only
#   issues TMA copies; two consumer warpgroups compute. Copies need few registers, matrix multiplies
#   many, so Hopper's `setmaxnreg` instruction moves them at run time: the producer drops to about 24
#   to 40 registers per thread, the consumers rise to about 232 to 240.
# - **Two warpgroups taking turns ("ping-pong").** An attention tile needs two matrix multiplies
#   (scores, then probabilities times V) and a softmax between them. The exponentials run on the
#   SM's special-function units, whose throughput is a small fraction of the tensor cores'. With two
#   consumer warpgroups, the kernel arranges with barriers that one computes its softmax while the
#   other runs its matrix multiplies, then they swap: the tensor cores stay busy through the
#   exponentials.
# - **Softmax overlapped with the matmuls inside one warpgroup.** `wgmma` is asynchronous: a
#   warpgroup issues this tile's score matrix multiply together with the previous tile's `P V`, waits
#   for the scores only, and computes this tile's softmax while the `P V` runs, one tile of scores
#   alive at a time.
# - **FP8.** Hopper's tensor cores run 8-bit floating point at twice the 16-bit rate. FlashAttention-3
#   makes that usable for attention: it rearranges V in the kernel into the layout the FP8
#   instruction requires for its second operand, scales in blocks, and multiplies Q and K by a random
#   orthogonal matrix first, which spreads outlier values and keeps the 8-bit error small.
#
# Plain Triton cannot say which warpgroup waits at which barrier so that two alternate, or how many
# registers each holds (`warp_specialize=True` asks for a producer, no more). FP8 attention with its
# safeguards is a kernel of its own, beyond this course. CUTLASS and CuTe in C++, or Triton's
# lower-level Gluon dialect, expose warpgroups, barriers and register counts, and can express all four.
#
# The third technique's loop, though, plain Triton can write. `course._attend_shifted` issues tile j's
# scores and tile j − 1's `P V` one after the other, then runs tile j's softmax, which needs only the
# scores; a configuration with `shifted=True` runs it in place of the lesson's loop:

# %%
show(course._attend_shifted)

# %% [markdown]
# The `wgmma` instruction is asynchronous: a warpgroup issues it and goes on, and waits for it with
# `wgmma.wait_group N` (until at most N groups of its wgmmas are still running). Whether the softmax
# runs while the `P V` does is the compiler's choice, and the PTX says what it chose. `course.wgmma_order`
# compiles the lesson's kernel for Hopper (here, GPU or not) and lists, in order, the wgmmas, their
# waits and the exponentials (`ex2`, per thread); `|` marks a branch target, where a loop starts again.
# D = 128, 128 × 128 tiles, 8 warps, full attention: the first loop is the unmasked one, the second
# the last, partial key tile's.

# %%
try:
    for name, shifted in (("lesson's loop", False), ("shifted loop", True)):
        print(f"{name:14} {course.wgmma_order(shifted)}")
except Exception as error:  # noqa: BLE001  (a Triton without its NVIDIA backend or ptxas)
    print(f"This Triton cannot compile for sm_90 here ({type(error).__name__}).")

# %% [markdown]
# Every `wait 0` in the shifted loop comes straight after the wgmmas it waits for: the scores, then
# the `P V`, both finished before the first exponential. Nothing overlaps; the shift only adds a wait
# per tile, a first tile before the loop and a last `P V` after it. (In the lesson's loop the `P V`
# issued last is the one wgmma still running past other work: until the wait at the top of the
# next step.) Timed beside the lesson's loop, each at the same few configurations with the fastest
# kept, and cuDNN, on the GPUs recorded (`tests/gpu_shifted_forward.py`). It is a run of its own, on
# its own day and machine: compare its two columns with each other, not with `make bench`'s ratios
# above.

# %%
shifted_runs = course.shifted_recorded()
if not shifted_runs:
    print("Not recorded yet: tests/gpu_shifted_forward.py on a Hopper GPU records it.")
for gpu, run in shifted_runs.items():
    print(f"{gpu} ({run['date']}, torch {run['torch']}, triton {run['triton']}), cuDNN's time ÷ ours:")
    print(f"  {'':22}{'lesson loop':>13}{'shifted':>10}")
    for row in run["rows"]:
        best = {way: min(times.values()) for way, times in row["ms"].items()}
        shape = f"D{row['D']} {'causal' if row['causal'] else 'full'} N{row['N']}"
        print(f"  {shape:22}{row['cudnn_ms'] / best['plain']:13.2f}{row['cudnn_ms'] / best['shifted']:10.2f}")

# %% [markdown]
# In the record, at D = 128 the shifted loop is slower at every shape: the same work in the same
# order, waited on more often. At D = 64 the two are within a few hundredths of each other. To
# overlap the softmax with a matrix multiply, the kernel must say where each wait goes, which Gluon
# can: its `warpgroup_mma_wait` is written by the kernel, and the Gluon section below writes this same
# shift with the wait on the scores alone.
#
# ### What the profiler sees
#
# `make bench` also runs the lesson's kernels and their rivals under Nsight Compute (lesson 08's
# `ncu`, with `course.ncu_targets()` as its list) and records a few figures. The forward, causal,
# D = 128, N = 2,048 (the lesson's kernel trails cuDNN at every recorded shape): time, launch
# (programs, threads, registers per thread), the share of the SM's active cycles the tensor cores
# were busy, requests to spilled registers, and bytes through L2:

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
        print(f"  {'':34}" + "".join(f"{heading:>14}" for heading in columns))
        for k in ncu["kernels"]:
            if k["target"] in targets:
                cells = [fn(k) for fn in columns.values()]
                print(f"  {k['target']:34}" + "".join(f"{v:14,.0f}" if v == int(v) or abs(v) >= 100
                                                      else f"{v:14.2f}" for v in cells))


def found(gpu, name):
    """The recorded profile of one target on one GPU, or None."""
    kernels = hopper[gpu].get("ncu", {}).get("kernels", [])
    return next((k for k in kernels if k["target"] == name), None)


LAUNCH = {"time us": lambda k: k["gpu__time_duration.sum"] / 1e3,       # ncu's time unit: nanoseconds
          "programs": lambda k: k["launch__grid_size"],
          "threads": lambda k: k["launch__block_size"],
          "registers": lambda k: k["launch__registers_per_thread"],
          "tensor %": lambda k: k["sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"],
          "spills k": lambda k: k["derived__local_spilling_requests"] / 1e3}
profiled(["attention forward (10)", "cuDNN forward"],
         {**LAUNCH, "L2 GB": lambda k: k["lts__t_bytes.sum"] / 1e9})

# %% [markdown]
# Two different designs. The lesson's kernel launches one program per query block, with the
# configuration the profiling run's own autotuner picked for this shape (its rows per program are
# printed below; the bench run's pick, printed earlier, can differ: the choice is not stable from run
# to run), and that one does not spill. cuDNN launches one program per SM (the programs column is the
# SM count) of 384 threads: three warpgroups, the arrangement FlashAttention-3 describes, one
# warpgroup issuing the TMA copies and two computing in turns, each program walking many query blocks.
# The tensor-core column is the gap in one number: cuDNN keeps its tensor cores busy a larger share of
# the time, because while one of its warpgroups computes exponentials the other's matrix multiplies
# run.
#
# The registers column understates what cuDNN's consumers hold. `ncu` reports the registers per
# thread the kernel was *launched* with, the same for every warp; `setmaxnreg` moves them afterwards.
# The launch budget, against a split of the FlashAttention-3 kind (and the lesson's configuration):

# %%
for gpu in hopper:
    ours = found(gpu, "attention forward (10)")
    if ours:
        B, H, N = (int(word[1:]) for word in ours["counted"]["what"].split()[:3])   # "B8 H16 N2048 ..."
        print(f"{gpu}: the lesson's forward ran {B * H * N / ours['launch__grid_size']:.0f} query rows per "
              f"program, {ours['launch__block_size'] / 32:.0f} warps")
    k = found(gpu, "cuDNN forward")
    if k:
        threads, regs = k["launch__block_size"], k["launch__registers_per_thread"]
        split = 128 * 24 + 256 * 240              # a producer warpgroup at 24, two consumers at 240
        print(f"{gpu}: {threads:.0f} threads x {regs:.0f} registers = {threads * regs:,.0f} of the SM's "
              f"65,536; a producer at 24 and two consumer warpgroups at 240: {split:,}")

# %% [markdown]
# The two totals are the same register file, divided differently: at launch every thread gets the
# same share, and once running, the producer gives most of its share to the consumers. The profile
# alone cannot show the reallocation, but the budget fits it exactly.
#
# ## FlashAttention-3's arrangement, written in Gluon
#
# Triton's block language leaves the arrangement to the compiler: which warps load, which multiply,
# how deep the shared-memory ring is. Gluon (`triton.experimental.gluon`) is the layer beneath it, in
# the same Python syntax, where the kernel says all of that itself: each tensor's layout across the
# threads, the shared-memory buffers, the barriers, and which warps run which function. The course's
# `solutions/gluon_attention.py` is the lesson's forward rewritten that way, the first of the four
# techniques above:
#
# - one program per block of 128 query rows, split in three *partitions* running side by side
#   (`gl.warp_specialize`): a **producer** of one warp that only issues TMA copies (Q once, then
#   each K and V tile into a ring of slots in shared memory), and two **consumer** warpgroups of 64
#   rows each, which run `S = Q Kᵀ` on the tensor cores (`warpgroup_mma`), the online softmax in
#   registers, and `O += P V` with P straight from registers;
# - registers moved at run time: the producer's warp drops to 24 a thread, the consumers rise to 240;
# - **mbarriers** between them: per ring slot, for K and for V apart, `ready` (the tile has landed)
#   and `empty` (both consumers are done with it: with K once its scores are computed, with V after
#   `O += P V`, so the next K can land while the softmax runs).
#
# The ping-pong between the two consumers and the overlap inside one, FlashAttention-3's next two
# steps, come after the first timings. Gluon kernels do not run in Triton's interpreter, but they
# compile without a GPU: Triton's NVIDIA backend and its `ptxas` run on the host. Compiled here for
# Hopper (sm_90), D = 128, causal:

# %%
try:
    build = course.gluon_build(head_dim=128, causal=True)
except Exception as error:  # noqa: BLE001  (a Triton without its NVIDIA backend or ptxas)
    build = None
    print(f"This Triton cannot compile for sm_90 here ({type(error).__name__}): the figures below are "
          f"the recorded ones.")
if build:
    print(f"{build['warps']} warps: two consumer warpgroups and the producer's warp (rounded up to a "
          f"warpgroup)")
    print(f"registers at launch: {build['registers']} a thread, {build['spilled bytes']} bytes spilled; "
          f"shared memory {build['shared bytes']:,} bytes of the 232,448 a Hopper program may have")
    print(f"in the PTX: {build['wgmma']} wgmma instructions, {build['TMA copies']} TMA copies, "
          f"{build['mbarrier waits']} mbarrier waits")
    print("setmaxnreg:", ", ".join(f"{way} {n}" for way, n in build["setmaxnreg"]))

# %% [markdown]
# At launch every one of the 384 threads gets the registers printed above, within the SM's 65,536;
# once running, `setmaxnreg dec 24` is the producer handing most of its share back and
# `setmaxnreg inc 240` the consumers taking it, the split the profile of cuDNN above fits. (The other
# values are Triton's own moves around the partitions: outside them the first warpgroup holds 256
# and the other warps wait for their function at 120.) Checked and timed on a Hopper GPU
# (`tests/gpu_gluon_check.py`: out and lse against float32 attention over lengths no tile divides,
# several heads and batches, causal and full, two tile shapes and ring depths; every case run twice
# for the same bits), beside cuDNN and the lesson's kernel, as CUDA-graph replays:

# %%
gluon_runs = course.gluon_recorded()
if not gluon_runs:
    print("Not recorded yet: `python tests/gpu_gluon_check.py` on a Hopper GPU records it.")
# the plain schedule, then FlashAttention-3's steps (below), where a GPU's record has them
GLUON_COLUMNS = [("gluon", "Gluon"), ("gluon_overlap", "+overlap"), ("gluon_overlap_pingpong", "+both"),
                 ("gluon_three", "3 WG"), ("gluon_persistent", "persist"), ("gluon_persistent_2q", "pers 2Q"),
                 ("gluon_three_persistent", "3WG pers"), ("triton_lesson10", "lesson")]


def shape_name(t):
    return f"B{t['B']} H{t['H']} N{t['N']} D{t['D']} {'causal' if t['causal'] else 'full'}"


for gpu, record in gluon_runs.items():
    checks = record["checks"]
    print(f"{gpu} ({record['date']}, torch {record['torch']}, triton {record['triton']}): "
          f"{sum(c['ok'] for c in checks)} of {len(checks)} checks passed, largest |out - reference| "
          f"{max(c['out_max_abs_err'] for c in checks):.1e}")
    columns = [(key, name) for key, name in GLUON_COLUMNS if key in record["timings"][0]]
    print(f"  {'':26}{'cuDNN':>8}  | {'÷ cuDNN, each timed in its own run':^{9 * len(columns)}}")
    print(f"  {'shape':26}{'TFLOP/s':>8}  | " + "".join(f"{name:>9}" for _, name in columns))
    for t in record["timings"]:
        print(f"  {shape_name(t):26}{t['cudnn']['tflops']:8.0f}  | "
              + "".join(f"{t[key]['vs_cudnn']:9.2f}" for key, _ in columns))

if gluon_runs:
    gpu = preferred_first(gluon_runs)[0]
    timings = gluon_runs[gpu]["timings"]
    columns = [(key, name) for key, name in GLUON_COLUMNS if key in timings[0]]
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), sharey=True)
    for ax, D in zip(axes, (64, 128)):
        rows = [t for t in timings if t["D"] == D]
        width = 0.8 / len(columns)
        for i, (key, name) in enumerate(columns):
            ax.bar([r + (i - len(columns) / 2 + 0.5) * width for r in range(len(rows))],
                   [t[key]["vs_cudnn"] for t in rows], width, label=name)
        ax.axhline(1.0, color="black", linewidth=1, linestyle="--")
        ax.set_xticks(range(len(rows)), [f"N{t['N']}\n{'causal' if t['causal'] else 'full'}" for t in rows])
        ax.set_ylim(0.75, 1.15)
        ax.set_title(f"D = {D}, on {gpu}", fontsize=10)
    axes[0].set_ylabel("cuDNN's time ÷ this one's")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=len(columns), fontsize=8)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    plt.show()

# %% [markdown]
# Compare the columns: warp specialisation alone moves the Gluon kernel only a little. It is ahead of
# the lesson's kernel at most shapes and behind it at some, and it trails cuDNN at most shapes,
# reaching it only at a few of the longest. Each consumer still waits for its own softmax
# between its two matrix multiplies, and the tensor cores wait with it. FlashAttention-3 takes two
# more steps, and at D = 64 arranges its blocks differently; the kernel has all three behind arguments
# of `gluon_attention`:
#
# - `overlap=True`: the loop is shifted by one matrix multiply. Each consumer issues this tile's
#   `S = Q Kᵀ` together with the previous tile's `O += P V`, waits for the scores only, and runs this
#   tile's softmax while the tensor cores do the `P V`. Across the softmax it holds one tile of scores
#   (fp32), the previous tile's P (fp16) and the output: 160 of its 240 registers at D = 128 with 128
#   keys a tile. (Issuing the *next* tile's scores before this softmax would overlap the same work but
#   hold two tiles of fp32 scores, 224 registers, and ptxas spills.)
# - `pingpong=True`: the two consumers take turns on the tensor cores through two more barriers, one's
#   softmax running under the other's matrix multiplies.
# - `consumers=3`: a third consumer warpgroup, and blocks of 192 query rows. The 16 warps share the
#   register file as 24 registers a thread for the producer and 160 to 168 for each consumer: room for
#   the plain loop's scores, P and output, not for the shifted loop's. Nothing takes turns: with three
#   warpgroups each alternating matrix multiplies and exponentials, while one computes exponentials
#   the others can keep the tensor cores busy. And each K and V tile that lands serves 192 rows
#   instead of 128. Causal, a block's last key tile can hold only keys after the first warpgroups'
#   rows: each warpgroup reads the tiles up to its own last row and, after its epilogue, releases the
#   others unread (waiting for each to land first, so that its arrival counts toward that tile's
#   phase).
#
# Where a GPU's record holds them, the columns `+overlap`, `+both` and `3 WG` are those schedules,
# checked like the plain one. Read them shape by shape. The two steps pay at D = 128, where each tile's
# matrix multiplies are longest against its softmax; at D = 64, where they are half as long, they cost
# more than they save, or at best break even. The third warpgroup pays at both head sizes, for full
# attention and at the longest causal rows; causal at the shorter length it is not ahead of cuDNN at
# either: the next section measures why.
#
# One detail made the difference at D = 128. With one `empty` barrier a slot, released after the
# `P V`, the next K could start landing only once both consumers had finished a tile, and on a ring
# of two slots `+overlap` ran slower than the plain schedule (timed on the H200 while this kernel was
# written; not in the record). With K released as soon as its scores are computed, it lands during
# the softmax.
#
# ### What a program costs besides its tiles
#
# A program of the Gluon kernel does two kinds of work: a fixed part (it starts, sets up its barriers
# and registers, loads its Q block and fills the ring before the first tile is ready, then normalises
# and stores its output) and its key tiles, each the same work. Causal, at N = 4096, a block walks
# its keys only up to its own rows, 17 to 18 tiles on average against 32 for full attention, so the
# fixed part weighs about twice as much. `tests/gpu_gluon_check.py --program-cost` measures both
# parts: full attention, B = 1, with the number of 192-row blocks held at 8 per SM (1,056 on 132 SMs,
# so 8 waves of programs) and N growing from 384 to 6,144 (3 to 48 key tiles a block; fewer heads as N
# grows). The time of one wave against the tiles a block walks is then a straight line: its slope is
# a tile's cost, its intercept the fixed part. The same shapes through cuDNN, whose persistent
# programs each walk many blocks, give its line:

# %%
fits = course.program_cost_fits(gluon_runs)
if not fits:
    print("Not recorded yet: `python tests/gpu_gluon_check.py --program-cost` on a Hopper GPU records it.")
else:
    gpu = preferred_first(fits)[0]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
    for ax, D in zip(axes, (64, 128)):
        for impl, name in (("gluon_three", "Gluon, 3 WG"), ("cudnn", "cuDNN")):
            fit = fits[gpu][D][impl]
            line = ax.plot(fit["tiles"], fit["us_per_wave"], "o", label=name)[0]
            ends = [0, max(fit["tiles"])]
            ax.plot(ends, [fit["fixed_us"] + fit["tile_us"] * x for x in ends], "--", color=line.get_color(),
                    linewidth=1)
        ax.set_title(f"D = {D}, full attention, on {gpu}", fontsize=10)
        ax.set_xlabel("key tiles per 192-row block")
        ax.set_ylabel("µs per wave of programs")
        ax.legend(fontsize=8)
    fig.tight_layout()
    plt.show()
    mean = course.CAUSAL_MEAN_TILES
    for gpu, by_d in fits.items():
        print(f"{gpu}: µs per wave of 132 blocks, fitted; then cuDNN's time ÷ the Gluon kernel's, the "
              f"model's at 32 tiles (full, N4096)\nand at {mean:.1f} (causal N4096's mean), and recorded "
              f"at B4 N4096")
        print(f"  {'':5}{'fixed':>14}{'per tile':>14}  |{'model':>7}{'model':>7}{'model, cuDNN':>14}  |"
              f"{'recorded':>9}{'recorded':>9}")
        print(f"  {'':5}{'Gluon':>7}{'cuDNN':>7}{'Gluon':>7}{'cuDNN':>7}  |{'32':>7}{mean:>7.1f}"
              f"{'fixed, ' + format(mean, '.1f'):>14}  |{'full':>9}{'causal':>9}")
        for D, by_impl in by_d.items():
            ours, cudnn = by_impl["gluon_three"], by_impl["cudnn"]
            persistent = cudnn["fixed_us"] + ours["tile_us"] * mean   # Gluon's tiles, cuDNN's fixed part
            print(f"  D{D:<4}{ours['fixed_us']:7.1f}{cudnn['fixed_us']:7.1f}{ours['tile_us']:7.2f}"
                  f"{cudnn['tile_us']:7.2f}  |{cudnn['at_full'] / ours['at_full']:7.2f}"
                  f"{cudnn['at_causal'] / ours['at_causal']:7.2f}{cudnn['at_causal'] / persistent:14.2f}  |"
                  f"{by_impl['recorded_full']:9.2f}{by_impl['recorded_causal']:9.2f}")
        crossing = {}
        for D, by_impl in by_d.items():
            ours, cudnn = by_impl["gluon_three"], by_impl["cudnn"]
            lead = cudnn["tile_us"] - ours["tile_us"]    # what the Gluon kernel gains per tile
            crossing[D] = (ours["fixed_us"] - cudnn["fixed_us"]) / lead if lead > 0 else float("inf")
        print("  the fitted lines cross at "
              + ", ".join(f"{x:.1f} tiles (D{D})" for D, x in crossing.items()))

# %% [markdown]
# Read the two numbers of each line. Per tile (192 query rows against 128 keys, for both), the Gluon
# kernel is the faster at both head sizes. The fixed part goes the other way. Each Gluon program
# starts cold: it loads its Q block and waits for its first K tile, and the tensor cores have nothing
# of it to do meanwhile. cuDNN launches one program per SM (the profile above), which walks block
# after block, so one block's start can overlap with the previous block's work: its intercept is well
# under the Gluon kernel's. The two lines cross where the last line of each GPU says, and the longer a
# block's walk past that, the more the per-tile lead counts.
#
# Then the right-hand columns. The model is fitted on full attention, and at 32 tiles it agrees with
# the recorded full-attention ratio to within a few hundredths. At the causal blocks' mean length its
# ratio falls, since the fixed part weighs more there, but the recorded causal ratio falls further:
# the fixed part is one cause of the causal gap, not all of it. The model has no term for what is
# particular to causal: the diagonal tiles, which compute masks as well, and three warpgroups that
# walk different numbers of tiles (the first stops a tile before the third, and its share of the
# tensor cores goes unused meanwhile). The `model, cuDNN fixed` column is the Gluon kernel's tiles
# with cuDNN's fixed part: what persistent programs that hide a block's start as well as cuDNN's do
# would be worth, by this model. Take it as a direction, not a promise: the causal-only costs would
# remain. The next section builds such programs and measures what they get.
#
# ### Persistent programs: `persistent=True`
#
# `gluon_attention(..., persistent=True)` (the columns `persist` and `3WG pers` of the table above,
# each against cuDNN timed in its own run; `pers 2Q` comes further down) launches one program per SM,
# each walking query blocks with the plain schedule. Its producer warp takes each next block from a
# counter in global memory (one atomic add), tells the consumers the block's number through shared
# memory, and loads that block's Q once every consumer has finished its last S = Q K^T of the block
# before (a barrier pair for Q, `q_ready` and `q_empty`), while the consumers store the previous
# block's output. The ring's count of
# tiles runs on from one block to the next. The last program to take a number sets the counter back
# to zero, so the next launch (or a CUDA graph's replay) finds it there.
#
# Two choices decide whether it pays. Three earlier versions, timed while the lesson was written and
# not kept, show why:
#
# - **Who hands the blocks out.** With a fixed list per program (program p takes blocks p, p + 132,
#   ...), full attention was fine. Causal blocks differ in length, though, and fixed lists left some
#   SMs idle at the end, so that version fell behind the one-block-per-program kernel. The one-block
#   kernel gets that balance for free, since an SM takes the next block whenever it finishes one. The
#   counter keeps the same balance, as FlashAttention-3's causal scheduler does (it keeps fixed lists
#   for full attention).
# - **The order of the blocks.** The programs at work at once should share as few heads' K and V as
#   they can, so that those stay in L2.
#   - Numbered heads first, the 132 programs each read a different head's K and V, and the kernel fell
#     behind almost everywhere.
#   - Next came groups of eight heads. Inside a group the blocks run through its heads fastest, and
#     causal blocks go longest first. At N = 4096 that version was about as fast as the one below
#     (faster at D = 128, causal, with three consumers). At N = 16,384 it fell behind at D = 128:
#     eight heads' K and V no longer fit in L2 together, and Nsight Compute showed the L2 hit rate
#     collapse and K and V read from DRAM many times over.
#   - Here a group has just enough heads to give every program a block: the number of programs over a
#     head's blocks, rounded up. At N = 16,384 that is two heads.
#
# What persistence changes, shape by shape, is the persistent column over the one-block column it
# extends, each as a fraction of cuDNN's time in its own run (the last column comes further down):

# %%
for gpu, record in gluon_runs.items():
    if "gluon_persistent" not in record["timings"][0]:
        continue
    print(f"{gpu}: the persistent kernel's speed over the one-block kernel's (above 1: persistence pays)")
    print(f"  {'shape':26}{'plain':>8}{'3 WG':>8}   | two Q buffers over one (same run)")
    for t in record["timings"]:
        pairs = (("gluon_persistent", "gluon"), ("gluon_three_persistent", "gluon_three"),
                 ("gluon_persistent_2q", "gluon_persistent"))
        gains = [t[persistent]["vs_cudnn"] / t[one]["vs_cudnn"] for persistent, one in pairs]
        print(f"  {shape_name(t):26}{gains[0]:8.2f}{gains[1]:8.2f}   |{gains[2]:8.2f}")

# %% [markdown]
# Both GPUs tell the same story:
#
# - **Plain schedule, causal.** Persistence pays at every causal shape, and at N = 4096 at least as
#   much as at 16,384. That is where the fixed part weighed most against the tiles, and where the
#   one-block kernel was furthest behind cuDNN. At D = 128 it brings the kernel about level with
#   cuDNN there; at D = 64 it does not take the kernel past cuDNN at that shape, and no schedule here
#   does: see below the list.
# - **Plain schedule, full attention.** It costs a little at every shape. Every block of full
#   attention walks the same number of tiles, so there is less fixed part to hide and no imbalance to
#   fix. Where the time goes is still open. A profile of one shape (D = 64, N = 4096, with groups of
#   eight) found the same DRAM bytes and L2 hit rate as the one-block kernel, and the tensor cores a
#   little less busy.
# - **Three consumers.** At D = 64 it is about even. At D = 128 it is behind, or at best even. Three
#   consumers already have the fewest registers a thread, and the loop over blocks keeps more values
#   alive. At D = 128 ptxas spills them, both with Triton 3.6 (the recorded one) and with 3.9
#   (`tests/test_gluon_compile.py` allows it for this case; the one-block kernel at D = 128, causal,
#   spills a little too).
#
# Then hold the three-consumer column against the model's promise. The `model, cuDNN fixed` column of
# the previous section put three consumers, with a block's start hidden as well as cuDNN hides it,
# clearly ahead of cuDNN at the causal mean length. The persistent version gains a hundredth or two
# over the one-block one at D = 64 and loses up to a few hundredths at D = 128, so it hides far less
# of the fixed part than cuDNN's programs do. (The previous section's fit, run once with the
# persistent kernel on an H100 while this was written and not kept in the record, agrees: its fixed
# part is a little under the one-block kernel's and still well above cuDNN's; at D = 128 its cost per
# tile rises too, as spilling would predict.) Two things in the kernel keep a block's start exposed.
# The first has been measured:
#
# - **Q has one buffer.** The next block's Q is loaded only once every consumer has finished this
#   block's last S = Q Kᵀ. Unless the last P V and the epilogue take longer than that load, the
#   consumers wait for it. `gluon_attention(..., persistent=True, q_buffers=2)` (the `pers 2Q` column)
#   gives the program a second Q buffer, each with its own barrier pair: block k's Q goes to buffer k
#   mod 2, so the producer loads the next block's Q as soon as it gets there, while this block still
#   runs. The last column of the table above is its speed over the one-buffer kernel, timed in the
#   same run. It gains a few hundredths at every full-attention shape, which brings the plain
#   persistent schedule level with the one-block kernel there. At D = 128, causal, it is about even,
#   and at D = 64, causal, it loses, most at N = 16,384. So waiting for Q was part of the fixed part,
#   but not what keeps D = 64 causal behind cuDNN. Why two buffers cost there is not measured. One
#   difference to start from: each consumer's code for a block is compiled twice, once per buffer,
#   because picking the buffer at run time broke the kernel. With Q indexed by a run-time buffer
#   number, Triton 3.6 compiled causal attention into a wgmma that read shared memory past the
#   allocation (full attention passed). compute-sanitizer on an H100 found it, and `compute-sanitizer
#   python tests/gpu_gluon_check.py --small` runs the small cases under it. With the buffer named by a
#   constant in each copy, every check passes, and the sanitizer finds nothing.
# - **The consumers change blocks together.** They wait for the same Q, so they normalise and store
#   their rows at about the same time, then each starts the next block with a tile of scores and a
#   softmax before its first P V. Over that stretch the tensor cores have little to do. A second Q
#   buffer does not change that. Hiding it needs the warpgroups a block apart, and shared memory to
#   hold two blocks' Q and rows in flight.
#
# That and the causal-only costs are where to look next at D = 64, causal; this lesson stops here.
#
# The lesson's answer to "persistent or not" is the measured one. It depends on the schedule, the head
# size and the mask, so a library that wants the best of each picks per shape, as cuDNN's heuristics
# do.
#
# ### The ring's barriers
#
# The producer and the consumers never call each other: they meet only at the barriers. An mbarrier
# in shared memory expects a number of arrivals (for `ready`, the producer's one, with the bytes the
# TMA copy will bring; for `empty`, one from each consumer). When they are in, it completes a
# *phase* and starts the next. A waiter does not name the phase by number but by its **parity**, the
# phase count's last bit: `mbarrier.wait(bar, parity)` returns once the barrier's count of completed
# phases has the other parity. A fresh barrier has completed none, so `wait(bar, 1)` returns at once
# (the phase "before the first" counts as done) and `wait(bar, 0)` waits for the first completion.
#
# One bit is enough because neither side can get two phases ahead: the producer cannot refill a slot
# before the consumers release it, and the consumers cannot read a slot before the producer fills
# it. Get a parity wrong and one of two things happens, neither with an error message: a wait returns
# early (a consumer reads a tile that has not landed, or the producer overwrites one still being
# read: wrong numbers), or a wait never returns (the kernel hangs, and with it the notebook).
#
# ## Exercise 2 · The ring's barriers
#
# K/V tile `j` (j = 0, 1, 2, ...) goes into a ring of `num_stages` slots, `j % num_stages` in the
# kernel. Write `ring_waits(j, num_stages)`, returning `(slot, ready_parity, empty_parity)`: the slot
# tile `j` uses, the parity the consumers wait for on that slot's `ready` barrier before reading tile
# `j`, and the parity the producer waits for on its `empty` barrier before loading tile `j` into it.
# Count how many tiles the slot has held before `j`.
#
# The check runs the protocol your waits make: the producer and both consumers over a few tiles, in
# every order their steps and the copies' landings can interleave, on a model of the barriers above;
# it reports the first read of a tile that has not landed, the first overwrite, or the hang, and who
# waits for what. It also holds you to the ring's purpose: any `num_stages` tiles in a row go to
# different slots, so the producer can run that many tiles ahead. And it asks for every tile a second
# time, from the last back to the first: the producer and each consumer work out a tile's waits in
# their own loops, at their own times, so the answer must come from `j` and `num_stages` alone, with
# nothing kept from one call to the next.

# %% tags=["exercise"]
def ring_waits(j, num_stages):
    """(slot, ready_parity, empty_parity) for K/V tile j in a ring of num_stages slots."""
    # YOUR CODE HERE: which slot, and how many tiles has that slot held before tile j?
    raise NotImplementedError("write ring_waits")


# %%
check("ring_waits", ring_waits)

# %% [markdown]
# In `solutions/gluon_attention.py` the producer's loop and the consumers' share one formula for the
# slot and the parity (`phase = (j // NUM_STAGES) & 1`), and the producer waits for `phase ^ 1`. The
# GPU check runs it with rings of 1 to 4 slots, where a wrong parity would show as a hang or as
# different bits on a second run.
#
# ## The backward pass: dQ added up by atomics
#
# Lesson 06's backward runs two kernels after the small `delta = rowsum(dO · O)` pass. The dK/dV
# kernel streams query blocks past a block of keys: `S`, then `dV += Pᵀ dO`, `dP = dO Vᵀ` and
# `dK += dSᵀ Q`, four matrix multiplies per step. The dQ kernel streams key blocks past a block of
# queries: `S` and `dP` again and `dQ += dS K`, three more. Seven per tile, two computed twice.
#
# The dQ kernel exists because a key-block program cannot *own* any row of dQ: every key block
# contributes to every query row. It can still contribute: with `dS` in hand, its share `dS K` is one
# more matrix multiply, added into a float32 copy of dQ with atomic adds (`tl.atomic_add`: the read,
# the add and the write happen as one step, in the L2 cache, so two programs adding into one row
# never lose each other's share). That makes five matrix multiplies per tile and one kernel.
# FlashAttention-2's CUDA code does the same, and FlashAttention-3 hands the adds to TMA
# (`cp.reduce.async.bulk`).
#
# **Where the adds meet.** Causal, a key-block program walks from its own diagonal down to the last
# query block, so the last rows receive an add from every key block; starting at different rows
# spreads the adds out in time, not in place. Full attention, every program walks the same rows from
# block 0 in the same order, in lockstep: the most contended case.
#
# **dQ is not deterministic.** The order in which a row's shares arrive changes from run to run, and
# float32 addition is not associative, so the same inputs can give a dQ that differs in its last
# bits. In training, two runs from the same seed then drift apart from the first step (rounding-level
# differences that training amplifies): a loss curve cannot be reproduced bit for bit, and a
# regression test must compare within a tolerance. Where bitwise reproducibility matters, use a
# backward in which one program writes each dQ row (lesson 06's two kernels), or a library's
# deterministic mode (FlashAttention-2 and 3 offer one, at some cost in speed).
#
# ## Exercise 3 · The backward's step, dQ by atomics
#
# `attention_backward_kernel` and the launcher `attention_backward` are written: a program per key
# block loads K and V, then calls `_attend_backward` over the query blocks that see its keys (the
# diagonal ones with `MASK = "causal"`, the interior ones with `"none"`, and with `"ends"` the last,
# partial query block, or every query block when its own key block runs past the end), and stores dK
# and dV. Write `_attend_backward`, the step, for each query block `start_m`:
#
# - the Q and dO tiles (`q_desc.load([head, start_m, 0])`, a `(1, BLOCK_M, D)` box: reshape it), and
#   the rows' `lse` (times `lesson06.LOG2E`: the kernel works in base 2) and `delta`; unless `MASK` is
#   `"none"`, mask the rows past `n_ctx` (lse `+inf`, which makes their P exactly 0; delta 0);
# - `sT = k qᵀ`, masked where the key comes after the query if `MASK == "causal"`, and at the keys
#   past `n_ctx` if `MASK == "ends"` (they read 0: a score of 0, and once every real score is far
#   below zero, `exp2(0 - lse2)` overflows to inf);
#   `pT = exp2(sT · qk_scale - lse2)`; then `dV += Pᵀ dO`, `dPᵀ = V dOᵀ`, `dSᵀ = Pᵀ (dPᵀ - delta)`
#   (in the inputs' dtype for the next products), `dK += dSᵀ Q`;
# - these keys' share of dQ, `dS K · sm_scale`, added with `tl.atomic_add` into the float32 dQ at
#   `dq_ptr + row · HEAD_DIM + column` (the kernel has moved `dq_ptr` to its head), masked at the rows
#   past `n_ctx` unless `MASK` is `"none"`. `sem="relaxed"` says no other memory needs ordering
#   around the add.
#
# The check compares dQ, dK and dV with autograd's through PyTorch's attention in float64, full and
# causal, with random scales and lengths that span several key blocks, so that every row of dQ gets
# shares from several programs. Then it watches two runs, full and causal, at a length no block
# divides (so every `MASK` runs): one launch must write all three gradients, and every write into dQ
# must be an atomic add across the whole launch (`scope="cta"` makes it atomic within one program
# only: the interpreter runs programs one at a time and would not show the race).

# %% tags=["exercise"]
@triton.jit
def _attend_backward(dk, dv, k, v, q_desc, do_desc, dq_ptr, lse_ptr, delta_ptr, head, offs_n, lo, hi, n_ctx,
                     qk_scale, sm_scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, MASK: tl.constexpr):
    """Query blocks lo, lo + BLOCK_M, ... < hi past one key block: dK, dV accumulate here, dQ in memory.
    MASK: "none" (every query row and key exists, every row sees every key), "ends" (rows or keys may lie
    past n_ctx) or "causal"."""
    # YOUR CODE HERE: for start_m in range(lo, hi, BLOCK_M): the q and do tiles; lse2 and delta of the
    # rows (masked unless MASK == "none"); sT, its mask (causal, or the keys past n_ctx), pT; dv; dpT;
    # dsT; dk; then this key block's share of dQ, added into dq_ptr with tl.atomic_add (masked unless
    # MASK == "none").
    return dk, dv


@triton.autotune(configs=course.BACKWARD_CONFIGS, key=["n_ctx", "HEAD_DIM", "CAUSAL"],
                 reset_to_zero=["dq_ptr"], prune_configs_by=lesson06.PRUNE)
@triton.jit
def attention_backward_kernel(q_desc, k_desc, v_desc, do_desc, dk_desc, dv_desc, dq_ptr, lse_ptr, delta_ptr,
                              n_ctx, qk_scale, sm_scale, HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr,
                              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """One program: dK and dV for BLOCK_N keys of one (batch, head), and those keys' share of dQ."""
    tl.static_assert(not CAUSAL or BLOCK_N % BLOCK_M == 0, "causal: BLOCK_N must be a multiple of BLOCK_M")
    start_n = tl.program_id(0) * BLOCK_N
    head = tl.program_id(1)
    dq_ptr += head.to(tl.int64) * n_ctx * HEAD_DIM
    lse_ptr += head.to(tl.int64) * n_ctx
    delta_ptr += head.to(tl.int64) * n_ctx
    offs_n = start_n + tl.arange(0, BLOCK_N)
    k = k_desc.load([head, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)   # keys past the end read 0: a score
    v = v_desc.load([head, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)   # of 0, masked in "ends" (exp2(-lse2))
    dk = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    n_full = (n_ctx // BLOCK_M) * BLOCK_M    # query blocks below this have every row,
    n_plain = tl.where(start_n + BLOCK_N <= n_ctx, n_full, 0)   # and every key, unless the keys run out
    lo = 0
    if CAUSAL:   # queries before start_n see none of these keys; those on the diagonal see some
        lo = start_n + BLOCK_N
        dk, dv = _attend_backward(dk, dv, k, v, q_desc, do_desc, dq_ptr, lse_ptr, delta_ptr, head, offs_n,
                                  start_n, tl.minimum(lo, n_ctx), n_ctx, qk_scale, sm_scale, HEAD_DIM,
                                  BLOCK_M, "causal")
    dk, dv = _attend_backward(dk, dv, k, v, q_desc, do_desc, dq_ptr, lse_ptr, delta_ptr, head, offs_n, lo,
                              n_plain, n_ctx, qk_scale, sm_scale, HEAD_DIM, BLOCK_M, "none")
    dk, dv = _attend_backward(dk, dv, k, v, q_desc, do_desc, dq_ptr, lse_ptr, delta_ptr, head, offs_n,
                              tl.maximum(lo, n_plain), n_ctx, n_ctx, qk_scale, sm_scale, HEAD_DIM, BLOCK_M,
                              "ends")
    dk_desc.store([head, start_n, 0], (dk * sm_scale).to(dk_desc.dtype).reshape(1, BLOCK_N, HEAD_DIM))
    dv_desc.store([head, start_n, 0], dv.to(dv_desc.dtype).reshape(1, BLOCK_N, HEAD_DIM))


def attention_backward(q, k, v, out, lse, dout, causal=False, sm_scale=None):
    """dq, dk, dv of attention(q, k, v, causal) given dout: delta = rowsum(dO * O), then one kernel."""
    B, H, N, D = q.shape
    sm_scale = D ** -0.5 if sm_scale is None else sm_scale
    q, k, v, dout = q.contiguous(), k.contiguous(), v.contiguous(), dout.contiguous()
    delta = lesson06.backward_delta(out, dout)
    dq = torch.zeros(q.shape, device=q.device, dtype=torch.float32)
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    descs = [course.descriptor(t.view(B * H, N, D), [1, 16, D]) for t in (q, k, v, dout, dk, dv)]
    grid = lambda meta: (triton.cdiv(N, meta["BLOCK_N"]), B * H)  # noqa: E731
    attention_backward_kernel[grid](*descs, dq, lse, delta, N, sm_scale * lesson06.LOG2E.value, sm_scale,
                                    HEAD_DIM=D, CAUSAL=causal)
    return dq.to(q.dtype), dk, dv


# %%
check("atomic_backward", attention_backward)

# %% [markdown]
# The interpreter runs one program after another, so here dQ comes out the same every time. On a GPU
# the shares of a row arrive in whatever order the programs reach it. The same eight float32 shares of
# one row, added in two orders:

# %%
shares = torch.randn(8, 64) / 100                  # eight key blocks' shares of one row of dQ
in_order, reversed_order = torch.zeros(64), torch.zeros(64)
for share in shares:
    in_order += share
for share in shares.flip(0):
    reversed_order += share
gap = (in_order - reversed_order).abs()
print(f"{(gap > 0).sum().item()} of 64 sums differ, by at most {gap.max().item():.1e}")
if ON_GPU:
    q, k, v, dout = (torch.randn(1, 4, 2048, 64, device=DEVICE, dtype=torch.float16) for _ in range(4))
    out, lse = course.attention(q, k, v)
    runs = [course.attention_backward(q, k, v, out, lse, dout)[0] for _ in range(2)]
    print("two runs of the backward on this GPU, dQ bit for bit equal:", torch.equal(*runs))

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
    ratios(by_gpu, "lesson 10", ["cudnn", "flashattention-2", "lesson 06"])

# %% [markdown]
# Those rows hold a forward too, and lesson 10's forward is the faster one: the backwards hide in
# them. `make bench` also times the backward alone, from a saved forward (lessons 10 and 06 the same
# `out` and `lse`, each SDPA backend its own). Where that is not recorded yet, the cell subtracts the
# forward group's time from the forward + backward group's, shape by shape, and says DERIVED: two
# separate timings, an estimate.

# %%
def time_of(rows, label, words):
    """The ms of the implementation named by `words` at the shape `label`, or None."""
    name = impl_named(rows, words)
    return next((r["ms"] for r in rows if r["label"] == label and r["impl"] == name), None)


backward_rows = {D: timed(course, f"hopper_attention_bwd_causal_d{D}") for D in (128, 64)}
for D, measured in backward_rows.items():
    for gpu, rows in measured.items():
        others = [name for name in (impl_named(rows, "lesson 06"), impl_named(rows, "cudnn")) if name]
        verdicts({gpu: rows}, impl_named(rows, "lesson 10"), others)
    both_by_gpu = training_rows[f"hopper_attention_fwd_bwd_causal_d{D}"]
    forward_by_gpu = attention_rows[f"hopper_attention_fwd_causal_d{D}"]
    for gpu in [gpu for gpu in both_by_gpu if gpu not in measured]:
        both, forward = both_by_gpu[gpu], forward_by_gpu.get(gpu, [])
        print(f"{gpu}, D = {D}: the backward alone DERIVED (forward + backward minus forward), in us")
        for label in dict.fromkeys(r["label"] for r in both):
            us = {}
            for words in ("lesson 10", "lesson 06", "cudnn"):
                b, f = time_of(both, label, words), time_of(forward, label, words)
                us[words] = 1e3 * (b - f) if b is not None and f is not None else float("nan")
            print(f"  {label:>11}: lesson 10 {us['lesson 10']:6.0f} | lesson 06 {us['lesson 06']:6.0f} | "
                  f"cuDNN {us['cudnn']:6.0f} | lesson 06's time over lesson 10's "
                  f"{us['lesson 06'] / us['lesson 10']:.2f}")

# %% [markdown]
# Below 1 in the last column (or "faster at 0 of" in a verdict line), lesson 06's two kernels win.
# Two fewer matrix multiplies per tile, and yet the one-kernel backward is not clearly ahead: behind
# at D = 128 at every shape recorded, at D = 64 ahead only on long sequences (the verdict lines say
# which), nowhere near the two sevenths the count promises. One step's arithmetic at D = 128, 64
# query rows past a program's 128 keys (the ratio of bytes added to bytes loaded is the same for any
# number of rows; the autotuner's picks, as `make bench` recorded them, come first):

# %%
for gpu, record in hopper.items():
    for c in (c for c in record.get("autotuned", []) if c["kernel"] == "attention_backward_kernel"):
        print(f"{gpu}: the autotuner chose {c['config']} for (N, D) = {', '.join(c['key'][:2])}")
BLOCK_M, BLOCK_N, D = 64, 128, 128
flops_per_step = 5 * 2 * BLOCK_M * BLOCK_N * D
loads = 2 * BLOCK_M * D * 2                      # the Q and dO tiles, float16
atomics = BLOCK_M * D * 4                        # the float32 share of dQ, read and written in L2
print(f"per step: {flops_per_step / 1e6:.1f} MFLOP, {loads // 1024} KiB of Q and dO loaded, "
      f"{atomics // 1024} KiB added into dQ by atomics")
# the backward alone where recorded (its FLOPs count the same five products); else forward + backward
rates = backward_rows[128] or training_rows["hopper_attention_fwd_bwd_causal_d128"]
for gpu, rows in rates.items():
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
# compared with its L2, the trade hardly pays: only a little, at D = 64, on long sequences.
#
# Against cuDNN the question is different, and the profiler answers it. The backward alone, causal,
# B = 4, N = 4,096, D = 128, beside cuDNN's backward kernel on the same tensors; `L2 adds M` is the
# 32-byte sectors that L2 updated by atomic adds, in millions:

# %%
def l2_adds(k):
    return k["lts__t_sectors_op_red.sum"] + k["lts__t_sectors_op_atom.sum"]   # 32-byte sectors


BACKWARDS = ["attention backward (10)", "cuDNN backward"]
profiled(BACKWARDS, {**LAUNCH, "L2 adds M": lambda k: l2_adds(k) / 1e6})
for gpu in hopper:
    ours, cudnn = (found(gpu, name) for name in BACKWARDS)
    if ours and cudnn:
        spills = [k["derived__local_spilling_requests"] for k in (cudnn, ours)]
        print(f"{gpu}: cuDNN's over the lesson's: L2 atomic sectors {l2_adds(cudnn) / l2_adds(ours):.3f}, "
              f"spill requests {spills[0] / spills[1]:.1f}")
        for name, k in zip(BACKWARDS, (ours, cudnn)):
            held = k["launch__block_size"] * k["launch__registers_per_thread"]
            print(f"  {name}: {held:,.0f} registers per program, of the SM's 65,536")

# %% [markdown]
# cuDNN adds dQ into L2 with atomics too, and as many of them: the atomic traffic is not what
# separates the two kernels. Nor are the registers: cuDNN's backward takes nearly all of its SM's
# register file, as the lesson's does, and spills more than the lesson's kernel (the ratio above).
# What separates them is how the work is arranged. cuDNN's backward runs one program per SM for the
# whole kernel, with three warpgroups, as its forward does, so that copies, matrix multiplies and the
# elementwise work between them overlap across warpgroups; its tensor cores are busy a clearly larger
# share of the time. In the lesson's kernel a program's warps do everything in turn: five matrix
# multiplies per step, the exponentials and the atomic adds between them, and the tensor cores wait
# while the rest runs. FlashAttention-3 goes further and hands the adds to a warp of their own, which
# issues them through TMA (`cp.reduce.async.bulk`) while the others compute. Triton has the TMA half
# (`desc.atomic_add(offsets, tile)` on a tensor descriptor), but not the half that decides which warps
# do what and when, and the interpreter does not run descriptor atomics, so the lesson keeps
# `tl.atomic_add`.
#
# ### The backward in Gluon: dQ added by the TMA
#
# Gluon has that half. `solutions/gluon_attention_backward.py` is the backward arranged as
# FlashAttention-3 arranges it at D = 128, on the forward's skeleton: one program per block of 128
# keys; a producer warp that loads the block's K and V once and streams Q and dO in tiles of 64 rows
# through a ring; two consumer warpgroups of 64 keys each, which compute `Sᵀ = K Qᵀ` and
# `dPᵀ = V dOᵀ`, then `dV += Pᵀ dO` and `dK += dSᵀ Q` with Pᵀ and dSᵀ fed from registers. For
# `dQ = dS K` a consumer needs dS, the transpose of what it holds: it writes dSᵀ to shared memory,
# where a `warpgroup_mma` reads it transposed (at D = 128 each consumer computes half of dQ's columns
# over both consumers' keys, and two mbarriers hand the dSᵀ buffers between them). Then the consumer
# writes its dQ tile to shared memory and issues one TMA reduction, `cp.reduce.async.bulk.tensor`,
# which adds the tile into the float32 dQ in global memory while the consumer goes on to the next
# tile; two buffers each, so that a tile is written while the one before is still being added.
#
# Within a tile, a consumer waits for its matrix multiplies one at a time. wgmma groups complete in
# the order they were issued, so `warpgroup_mma_wait(1, ...)` means "all but the last one issued":
# the consumer issues Sᵀ and dPᵀ, waits for Sᵀ and computes the exponentials while dPᵀ runs; issues
# dV, waits for dPᵀ and computes dSᵀ while dV runs; issues dQ and then dK, waits for dQ and sends it
# to shared memory and the TMA while dK runs. Only at the end of the tile does it wait for everything
# (a wgmma still in flight at the loop's back edge makes ptxas serialise them all, as in the forward).
#
# The first version added dQ with `gl.atomic_add` from registers, as the lesson's kernel does, and was
# slower than the lesson's kernel at every shape. The record below is the present version
# (`tests/gpu_gluon_backward_check.py`: dQ, dK and dV against autograd through float32 attention over
# lengths no tile divides, several heads and batches, causal and full, D = 64 and 128; then the
# backward alone, causal, beside the lesson's, lesson 06's and cuDNN's, as CUDA-graph replays). Its
# last column is the same kernel once more with its TMA reductions left out, `add_dq=False`, dQ
# wrong: a measurement of what the adds cost, not a backward. A GPU whose record has no such column
# was recorded with the kernel's earlier version, which waited for all its matrix multiplies at once:

# %%
def cudnn_ms(timing):
    return next(ms for name, ms in timing["ms"].items() if name.startswith("cuDNN"))


BACKWARD_COLUMNS = [("lesson 10: attention_backward", "lesson 10"),
                    ("lesson 06: flash_backward (two kernels)", "lesson 06"), ("Gluon backward", "Gluon"),
                    ("Gluon, dQ adds left out", "no adds")]
backward_runs = course.gluon_backward_recorded()
if not backward_runs:
    print("Not recorded yet: `python tests/gpu_gluon_backward_check.py` on a Hopper GPU records it.")
for gpu, record in backward_runs.items():
    print(f"{gpu} ({record['date']}, torch {record['torch']}, triton {record['triton']}): "
          f"{len(record['cases']) - len(record['failed'])} of {len(record['cases'])} checks passed")
    print(f"  {'backward alone, causal':24}{'cuDNN ms':>9}  | {'÷ cuDNN':^{10 * len(BACKWARD_COLUMNS)}}")
    print(f"  {'':24}{'':9}  | " + "".join(f"{name:>10}" for _, name in BACKWARD_COLUMNS))
    for t in record["timings"]:
        cudnn = cudnn_ms(t)
        shape = f"D{t['group'].rsplit('_d', 1)[1]} {t['label']}"
        print(f"  {shape:24}{cudnn:9.3f}  | "
              + "".join(f"{cudnn / t['ms'][key]:10.2f}" if key in t["ms"] else f"{'-':>10}"
                        for key, _ in BACKWARD_COLUMNS))
    gains = [(t["ms"]["Gluon backward"] - t["ms"]["Gluon, dQ adds left out"]) / t["ms"]["Gluon backward"]
             for t in record["timings"] if "Gluon, dQ adds left out" in t["ms"]]
    if gains:
        below = sum(t["ms"]["Gluon, dQ adds left out"] > cudnn_ms(t) for t in record["timings"])
        print(f"  the adds took {100 * min(gains):.0f}-{100 * max(gains):.0f}% of the Gluon kernel's time; "
              f"without them it is still slower than cuDNN at {below} of {len(gains)} shapes")

# %% [markdown]
# Read the Gluon column against the lesson's and cuDNN's. From N = 4,096 on it is the fastest of
# the course's backwards at both head sizes, and at D = 128 it is about level with cuDNN there; at
# N = 1,024 it is level with or ahead of the others at D = 128, and at D = 64 behind lesson 06's and a
# little behind the lesson's. Then
# read the last column against the Gluon one, and the line under the table: handing the adds to the
# TMA made them cheap (the line says how cheap), and what is left of the gap at D = 64 is
# mostly in each tile's own work.
#
# The step that brought D = 128 level was not in the arithmetic at all. ptxas reported registers
# spilled to local memory there (`tests/test_gluon_compile.py` compiles the kernel and reads its
# report), and dK and dV, 128 of a thread's 240 registers, looked like the culprits. They were not.
# Reading where the spilled values came from (the SASS around each local store) showed values that do
# not change from tile to tile: the 64-bit descriptors of every shared-memory operand the tile's
# wgmmas read (K, V, the dSᵀ buffers, slices of K for dQ), and the pointers and masks of the lse and
# delta loads, one per column a thread holds. LLVM computes such values once, before the loop, which
# is usually right; here it made some 45 64-bit values live across the whole loop, on top of the
# accumulators, and ptxas spilled them and reloaded them on every tile. Three changes keep them in the
# loop:
#
# * the shared-memory views are indexed with `z`, a zero made by one inline PTX instruction
#   (`and.b32 z, t, 0`), which LLVM cannot see through, so it cannot hoist the descriptors; ptxas,
#   which can, folds `z` away and places them without spilling;
# * lse and delta are loaded one value a thread and spread to the columns each thread holds with
#   `gl.convert_layout` (through shared memory), instead of a pointer and a mask per column;
# * the causal mask compares column minus row against `start_m - key0` (passed through inline PTX
#   too), not each query's index against each key's.
#
# Almost no spill is left in the unmasked loop, where the time goes; what remains is in the masked
# tiles at the diagonal and around the loop. The trick depends on two compilers' heuristics, so the
# test holds the spill count under a bound: a Triton upgrade that undoes it fails there, not silently
# in `make bench`. At D = 64 nothing spilled before or after, and the kernel is about where it was.
# There the consumers now meet as at D = 128: each computes half of dQ's columns over both halves of
# the keys, so each adds a 64 x 32 tile per query tile. Each adding its own 64 keys' share of every
# column instead (no handshake, but twice the values added and twice the dQ buffers) measured a
# little slower on an H200 at every length timed; with half the dQ buffers, a fifth ring slot fits
# in shared memory. The rest of the gap is not yet explained. FlashAttention-3's causal backward at
# D = 128 on Hopper splits the work as this kernel does (tiles of 64 query rows against 128 keys, two
# warpgroups that divide the keys for Sᵀ, dP, dK and dV and dQ's columns between them, P and dS fed to
# dV and dK from registers).
#
# ### From Python: the launch bill
#
# Every table above is graph replays, the GPU's time. A training step calls these functions from
# Python, one call after another, and then the host's work per call counts too. The course's
# `attention` and `attention_backward` launch their kernels through `helpers.launch.Launcher`, as
# lesson 09's matmul does: the autotuner and Triton's binding run once per key, not at every call, and
# the autotuner times its candidates once per bucket of lengths (lesson 09's buckets: a new length
# in a bucket tuned before costs at most a compile).
# Their autotuners set the descriptors' boxes in a pre-hook, which a prepared launch skips. It can:
# Triton's launch encodes each host descriptor with the box the compiled kernel was built for, so the
# pre-hook matters only for finding that kernel, on the key's first call (`Launcher(kernel,
# boxes=hook)` says the hook does nothing else). What is left at every call: for the forward, four
# host descriptors built in Python and encoded by the launch, and the outputs allocated; for the
# backward, `delta`'s kernel, dQ zeroed, six descriptors, dQ copied to float16. Around both,
# autograd. `make bench` records each call launched back to back from Python, and the host's time in
# one call with the GPU idle (lesson 09's launch bill). Per recorded GPU, the lesson's calls and
# cuDNN's at the shortest and the longest sequence, in µs; `*` marks a call whose host time exceeds
# its GPU time:

# %%
BILL_GROUPS = [f"hopper_attention_{what}_d{D}" for D in (64, 128)
               for what in ("fwd_causal", "bwd_causal", "fwd_bwd_causal")]
for gpu in recorded_devices():
    lines = []
    for group in BILL_GROUPS:
        rows = [r for r in recorded_rows(group, gpu)[0] if "launched_ms" in r]
        if not rows:
            continue
        labels = list(dict.fromkeys(r["label"] for r in rows))
        for label in (labels[0], labels[-1]):
            by_impl = {r["impl"]: r for r in rows if r["label"] == label}
            ours, cudnn = (by_impl[impl_named(rows, words)] for words in ("lesson 10", "cudnn"))
            cells = []
            for r in (ours, cudnn):
                waits = "*" if r["host_us"] > 1000 * r["ms"] else " "
                cells.append(f"{1000 * r['ms']:7.0f} {1000 * r['launched_ms']:8.0f} "
                             f"{r['host_us']:6.0f}{waits}")
            lines.append(f"  {group.removeprefix('hopper_attention_'):19} {label:>10} {cells[0]}  |"
                         f"{cells[1]}  | {cudnn['ms'] / ours['ms']:6.2f} "
                         f"{cudnn['launched_ms'] / ours['launched_ms']:8.2f}")
    if not lines:
        print(f"{gpu}: no launched times recorded (`make bench LESSON=10` records them)")
        continue
    print(f"{gpu}:   {'lesson 10':^25}  |{'cuDNN':^25}  | cuDNN ÷ lesson 10")
    print(f"  {'':30}" + f"{'graphed':>8} {'launched':>8} {'host':>6}   |" * 2
          + f" {'graphed':>6} {'launched':>8}")
    print("\n".join(lines))

# %% [markdown]
# Read the two right-hand columns against each other. Where a call keeps the GPU busy long enough, the
# host prepares the next call while the GPU runs this one: launched and graphed agree, and so do the
# two ratios. `*` marks a call whose host time, measured alone with the GPU idle, exceeds its GPU
# time. Back to back the host can be quicker than that, and where it is not, the GPU waits for it.
# That happens most to the lesson's forward and backward together at the shortest sequence at D = 64,
# where the GPU's share is smallest (and, less, to the D = 128 forward at that length): launched, the
# step takes well over its graphed time while cuDNN's stays close to its own, and it loses more to
# cuDNN than its kernels do. The launches are prepared already; what is left is Python that cuDNN's
# step does not run: autograd calls the backward of a `torch.autograd.Function` in Python, on
# autograd's own thread, and each call builds its descriptors and allocations anew. The cure left is
# the one lesson 11 applies to the decoding step: capture the whole step in a CUDA graph (the graphed
# column), where the same shapes come back step after step.
#
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
# L2. When a program starts pass 2, about its share of L2 (the L2's size over the programs resident
# at once) can still hold its row. How many are resident is what `ncu` measures, as lesson 08 read it:
# the grid over the waves. The lesson's kernel on rows of 262,144 float32 values, as profiled, and
# the estimate that follows (`course.softmax_long` autotunes the tile and the warps, so its programs
# need not have your launcher's 8 warps):

# %%
for gpu in hopper:
    k, chip = found(gpu, "long softmax (10)"), chip_for(gpu)
    if k is None or chip is None:
        print(f"{gpu}: not profiled")
        continue
    rows = int(k["counted"]["what"].split("x")[0])               # "512x262144 float32"
    row_bytes = k["counted"]["bytes"] / 2 / rows                  # the record counts a read and a write
    resident = k["launch__grid_size"] / k["launch__waves_per_multiprocessor"]
    share = chip.l2_mb * 2**20 / resident
    kept = min(1.0, share / row_bytes)
    print(f"{gpu}: {k['launch__block_size']:.0f} threads x {k['launch__registers_per_thread']:.0f} registers "
          f"a program; registers let {k['launch__occupancy_limit_registers']:.0f} fit per SM, warps "
          f"{k['launch__occupancy_limit_warps']:.0f}; {k['launch__grid_size']:.0f} programs in "
          f"{k['launch__waves_per_multiprocessor']:.2f} waves = {resident:.0f} resident")
    print(f"  L2 {chip.l2_mb:g} MB / {resident:.0f} = {share / 2**10:.0f} KiB each, {kept:.0%} of a "
          f"{row_bytes / 2**20:.0f} MiB row: estimate {2 / (3 - kept):.0%} of the copy ceiling at best")

# %% [markdown]
# Registers, not warps, set the residency here, so each program's share of L2 is larger than the warp
# limit alone would suggest. Read the percentage as an estimate, and an optimistic one: L2 also holds
# the outputs being written while other programs' tiles keep arriving, and lesson 08 measured the
# reversed pass saving less than its share. With rows this long the second read mostly comes from
# memory, and a two-pass kernel's ceiling sits a little above two thirds of the copy.
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
# arrives in half the time: halving the exponentials keeps the arithmetic out of the way. The rows
# that fit, at the end of this lesson, show a compiler's kernel that pays for the second one.
#
# ## Exercise 4 · The long-row softmax
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
# The check's rows include rows wholly below -1e5 (a running max started at a stand-in for `-inf` such
# as -1e4 fails there) and rows of whole tiles. Beside the values, it counts how many times x is read
# (exactly twice), counts the interpreter's exponentials against the tiles loaded, and watches the
# order in which each program's passes visit the tiles of its row: the first forwards, the second
# backwards. On a GPU one case is a matrix of more than 2³¹ values, and so is its softmax: its last
# rows start past 2³¹, where an int32 row offset wraps, the output's as well as the input's.

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
worst = (out_small - torch.softmax(x_small, 1)).abs().max().item()
print(f"largest difference from torch.softmax: {worst:.1e}")

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
# Compare the lesson's kernel with two thirds of the copy ceiling and with the estimate above: at two
# thirds it moves its three bytes as fast as a copy moves two; above, L2 served part of the second
# read; well below, something other than memory holds it back (too few programs in flight, or the
# arithmetic). Where another implementation beats it, ask lesson 08's question: which bytes did it
# avoid, and how?
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
# less than even the estimate's share, and memory was busy (compare the DRAM column with a copy's,
# which does not reach 100% either; on the H200 Inductor's kernel kept it less busy than the
# lesson's). That is the two-read ceiling, measured: with rows this long, a two-pass softmax can
# only pass it by dropping the second read.
#
# The ceiling itself moves only if the second read goes: keep the row on chip between the passes (a
# Hopper *thread block cluster* lets up to 8 SMs, 16 on request, read each other's shared memory,
# enough for rows of hundreds of thousands of values), or drop the separate normalising pass (when
# the softmax feeds a matrix multiply, normalise the smaller result afterwards: FlashAttention's
# trick).
#
# ### The rows that fit: lesson 05 against the compiler
#
# Lesson 05's row softmax and RMSNorm, one row per program, against `torch.compile`'s kernels of the
# same functions. The compiler's time over the course's, shape by shape, as recorded (above 1: the
# course's kernel is faster):

# %%
for group, words in (("softmax_fp32", "one row per program"), ("rmsnorm", "one row per program")):
    by_gpu = {gpu: recorded_rows(group, gpu)[0] for gpu in recorded_devices() if recorded_rows(group, gpu)[0]}
    for gpu, rows in by_gpu.items():
        verdicts({gpu: rows}, impl_named(rows, words), [impl_named(rows, "torch.compile")])
if not recorded_devices():
    print("nothing recorded yet (make bench on a GPU records it)")

# %% [markdown]
# On the H100 the two are level at every shape, within a percent or so. On the H200 they are not, and
# the gap goes both ways: the course's softmax is clearly ahead at two shapes, the RMSNorm ahead at
# one and behind at the other. The profile of two of those shapes, a softmax over rows of 4,096
# float32 values and an RMSNorm over rows of 8,192 bfloat16 values, each kernel beside Inductor's;
# `SM %` is how busy the busiest unit of the SMs was (issuing instructions, most often):

# %%
ROWS = ["row softmax (05)", "torch.compile softmax, rows", "RMSNorm (05)", "torch.compile RMSNorm"]
profiled(ROWS, {**MEMORY, "SM %": lambda k: k["sm__throughput.avg.pct_of_peak_sustained_elapsed"]})
STALL = ("smsp__average_warps_issue_stalled_", "_per_issue_active.ratio")
for gpu in hopper:
    print(f"{gpu}: the two largest stall reasons (cycles per issued instruction)")
    for name in ROWS:
        k = found(gpu, name)
        stalls = {key[len(STALL[0]):-len(STALL[1])]: value for key, value in (k or {}).items()
                  if key.startswith(STALL[0]) and key != STALL[0] + "selected" + STALL[1]}   # not a stall
        top = sorted(stalls.items(), key=lambda item: -item[1])[:2]
        print(f"  {name:34}" + ", ".join(f"{reason} {value:.1f}" for reason, value in top))

# %% [markdown]
# Every kernel here reads its input once and writes its output once (the writes read a little under 1:
# the last lines written still sit in L2 when ncu stops counting, as lesson 08 found): none moves a
# byte more than it must. Where they differ is how they spend their instructions. On the H200,
# Inductor's softmax keeps the SMs busier and the memory less busy than the course's kernel, and its
# largest stall is `not_selected`: a warp was ready, but the scheduler issued another warp's
# instruction, where a kernel waiting on memory stalls on `long_scoreboard`. It is issue-bound: its
# loop has more instructions per element than the issue slots retire while the memory streams.
# Which instructions? Inductor's softmax is an online softmax with a running max and sum per lane,
# the update of lesson 05's pass 1, which this helper (this machine's PyTorch) does for every element:

# %%
import inspect  # noqa: E402

from torch._inductor.runtime import triton_helpers  # noqa: E402  (Inductor's device helpers)

source = inspect.getsource(triton_helpers.online_softmax_combine.fn).split('"""')
print("\n".join(line for line in (source[0] + source[-1]).splitlines()
                if line.strip() and not line.strip().startswith("#")))
h100, h200 = CHIPS["H100 SXM"], CHIPS["H200"]
print(f"\nHBM bandwidth, H200 over H100 (datasheets): {h200.bandwidth_tbs / h100.bandwidth_tbs:.2f}; "
      f"SMs: {h200.sms} and {h100.sms}")

# %% [markdown]
# Two exponentials per element, where the course's kernel, holding the whole row, takes the max first
# and spends one. On the H100 the extra instructions fit under the time the memory takes; the H200
# has the same SMs and more bandwidth, so each byte leaves less time for arithmetic, and the second
# exponential shows. That is the gap, and it is the algorithm's choice, the point of exercise 4. The
# RMSNorm is different: neither kernel is issue-bound (`SM %`), both wait on memory, and the gap
# between them is in how busy each keeps DRAM, which shifts from GPU to GPU and shape to shape.

# %% [markdown]
# ## Takeaways
#
# - Lesson 06's forward moves to tensor descriptors with its algorithm unchanged: boxes inside one
#   head, no masks on interior tiles, zeros past the end. Descriptors each program builds over its own
#   slice read any layout with contiguous rows, the projection's included.
# - Read the spill count: one warpgroup holding 128 rows of D = 128 spills, two share them without. A
#   causal loop over key tiles needs `BLOCK_N` to divide `BLOCK_M`; `tl.static_assert` makes a
#   configuration that breaks the rule fail to compile.
# - Registers also decide how many programs share an SM. Capped at 128 a thread (`maxnreg=128`), two
#   8-warp programs of the D = 64 tile fit on one, and one's softmax runs under the other's matrix
#   multiplies with no barrier written. It pays only where the cap costs no spills: not at D = 128.
# - Against cuDNN, what remains is what plain Triton does not express: warpgroups taking turns,
#   registers moved from producer to consumers (`setmaxnreg`, hidden from ncu's launch figure). cuDNN
#   also runs one program per SM, and FP8 is beyond this course. FlashAttention-3's shifted loop,
#   written in plain Triton, gains nothing: the compiler waits for every wgmma before the softmax
#   starts (read the PTX's `wgmma.wait_group`).
# - Gluon says the arrangement itself: partitions (`gl.warp_specialize`), their register budgets,
#   shared-memory rings and mbarriers. Its kernels compile without a GPU but run only on one, and a
#   barrier waited on with the wrong parity gives no error: it hangs, or returns early and the numbers
#   are wrong some of the time. A tile's slot is `j % stages`; its use `j // stages` decides the parity.
# - FlashAttention-3's overlap inside a warpgroup shifts the loop by one matrix multiply: a tile's
#   scores and the previous tile's `P V` go to the tensor cores together, and the softmax runs under
#   the `P V`, holding one tile of scores. A slot's K released as soon as its scores exist lets the
#   next K land during the softmax, and then no schedule can hang even on a ring of one slot: more
#   slots only let the producer run further ahead.
# - A third consumer warpgroup (192 query rows a block, 160 to 168 registers a consumer) needs no
#   turns to keep the tensor cores fed, and loads each K and V tile once for more rows.
# - A program costs a fixed part besides its key tiles, and causal blocks walk fewer tiles, so there
#   it weighs more. Persistent programs fed by a counter (the plain schedule) gain at causal shapes
#   when the programs at work at once share few heads' K and V. On full attention they cost a little,
#   and with three consumers at D = 128 ptxas spills (the loop over blocks keeps more values alive).
# - Adding dQ's shares with float32 atomics drops two of seven matrix multiplies per tile, yet on
#   Hopper the one-kernel backward is behind two kernels at D = 128 and ahead only a little, at
#   D = 64 on long sequences; and dQ is not bit-for-bit reproducible.
#   cuDNN makes as many atomic adds and spills more: its lead is warpgroups that overlap their work.
# - A two-pass softmax moves three bytes for every two it needs: about two thirds of the copy ceiling,
#   plus what L2 still holds of each row (estimated from the resident programs, optimistically).
#   Walking pass 2 backwards collects it; one exponential per element keeps the arithmetic out of the
#   way, and two make a compiler's softmax issue-bound on the H200.

# %%
self_check("10")

# %%
flashcards("10")
