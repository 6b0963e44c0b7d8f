# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 11 · Capstone: a decoder block from your own kernels
#
# Lesson 08 profiled one layer of a Llama-style model, written in eager PyTorch, and found where its
# time goes. This lesson rebuilds that layer from the kernels of this course: lesson 05's RMSNorm
# folded into the next matmul, lesson 09's matmul with its epilogues, lesson 10's causal attention on
# the projection's layout, and two new kernels. Then it measures the result against eager PyTorch,
# eager PyTorch with SDPA, and `torch.compile`, and reads the verdict, whichever way it falls.
#
# **You will learn:**
# - how a decoder block decomposes into fused kernels, and how many launches and bytes each fusion saves;
# - how much of a fused block's lead comes from a mainloop that keeps up with cuBLAS (lesson 09's);
# - RoPE on Q and K in one kernel, read through the projection's strides;
# - SwiGLU as one matmul with the SiLU product in its epilogue, and the residual add as an epilogue;
# - to read a benchmark of a whole block: time, peak memory, kernels launched;
# - what one launch from Python costs with Triton, and what CUDA graphs, PDL and fewer launches each remove;
# - the megakernel question: how much of a decoding step is not spent reading weights.
#
# Exercises: the RoPE kernel, the SwiGLU epilogue, and the block's forward from the course's kernels.

# %% [markdown]
# ## Setting up

# %%
from helpers import DEVICE, ON_GPU, check, describe, interpreter, pick
from helpers.bench import ROOT, recorded_devices, recorded_rows, timed, verdicts
from helpers.block import SMALL, BlockConfig, block_input, block_weights, decoder_block, rope_tables
from helpers.cards import flashcards, self_check
from helpers.exercises.lesson08 import busy_us   # lesson 08's union of kernel intervals
from helpers.profile import recorded_profile
from helpers.profile import recorded_devices as profiled_devices
from helpers.roofline import CHIPS, chip_for
from helpers.solutions import load_solution, show
from helpers.traffic import eager_traffic, triton_traffic

import json
import statistics

import torch
import triton
import triton.language as tl

print(describe())
course = load_solution("11")                  # the lesson's kernels, given where you do not write them
lesson05, lesson06, lesson09, lesson10 = course.lesson05, course.lesson06, course.lesson09, course.lesson10
print("GPUs with recorded figures:", ", ".join(recorded_devices()) or "none yet")


# %% [markdown]
# ## The block, step by step
#
# `helpers/block.py` holds the eager block that lesson 08 profiled. Here it is again:

# %%
show(decoder_block)

# %% [markdown]
# Each line is one or more kernels, and each kernel reads its inputs from memory and writes its
# output back. The course's version keeps the same arithmetic and regroups it into eight Triton
# kernels, each doing one matmul or one pass, with the small work folded into it:
#
# | step | kernel | folded in | from |
# |---|---|---|---|
# | 1 | 1/rms of each row of x | | lesson 05 |
# | 2 | Q\|K\|V projection | the norm: γ in the weights, 1/rms as an epilogue row scale | lesson 09 |
# | 3 | RoPE on Q and K | the copy to (B, H, N, D) | exercise 1 |
# | 4 | causal FlashAttention | scores, softmax, mask; V read in place, output as (T, d) | lesson 10 |
# | 5 | output projection + residual | the residual add, in the epilogue | lesson 09 |
# | 6 | RMSNorm | | lesson 05 |
# | 7 | SwiGLU: gate and up projections as one matmul | SiLU(gate) · up, in the epilogue | exercise 2 |
# | 8 | down projection + residual | the residual add, in the epilogue | lesson 09 |
#
# Steps 1 and 2 are lesson 09's RMSNorm + linear for inference (lesson 05's algebra on lesson 09's
# matmul): γ goes into the weights when they are packed, and the matmul's operands stay exactly as
# loaded. Why not fold step 6 into step 7 the same
# way? It would work, but then the SwiGLU kernel would carry the norm, the interleaved weights and
# the SiLU epilogue at once. One new idea per kernel keeps each one checkable; the norm costs one
# extra read and write of a (T, d) tensor.
#
# First, what each version launches, counted on this machine at the small size. The eager block's
# count is of ATen operations (each at least one kernel on a GPU); the course's block is counted by
# Triton launches:

# %%
w_small = block_weights(SMALL, DEVICE)
x_small = block_input(SMALL, batch=2, seq=40, device=DEVICE)
packed_small = course.pack_weights(w_small, SMALL)

eager_ops = eager_traffic(decoder_block, x_small, w_small, SMALL, attention="sdpa")
print(f"eager + SDPA:  {eager_ops.kernels} ATen operations")
if ON_GPU:
    before = interpreter.launch_count()
    course.decoder_block_fused(x_small, packed_small, SMALL)
    print(f"course kernels: {interpreter.launch_count() - before} Triton launches")
else:
    fused_launches = triton_traffic(course.decoder_block_fused, x_small, packed_small, SMALL).launches
    print(f"course kernels: {len(fused_launches)} Triton launches:")
    for launch in fused_launches:
        print(f"  {launch.kernel:24} grid {launch.grid}")

# %% [markdown]
# ### What each fusion saves
#
# A fusion saves the round trip of one intermediate tensor through memory: the write, and the read
# by the next kernel. For T tokens, width d and MLP width f, in 16-bit storage:
#
# - RMSNorm folded into the Q|K|V matmul: the normalised activations, written and read: 2·T·d elements;
# - the residual add in a projection's epilogue: the projection's output, written and read: 2·T·d;
# - SwiGLU's epilogue: eager writes the gate and up products (2·T·f), SiLU reads one and writes its
#   result, the product reads two and writes one: 6·T·f more than the fused kernel's single write.
#
# Each of these rides on a matmul. Against the matmul's FLOPs, the bytes are small. The cell below
# puts both at the datasheet's peak rates: the time the saved bytes take at full bandwidth, as a share
# of the time the matmul takes at full tensor-core speed.

# %%
def fusion_savings(T, cfg=BlockConfig(), chip=CHIPS["H100 SXM"]):
    d, f = cfg.dim, cfg.hidden
    rows = [("RMSNorm into Q|K|V", 2 * T * d, 2 * T * d * 3 * d),
            ("residual into output projection", 2 * T * d, 2 * T * d * d),
            ("SiLU * up into gate|up", 6 * T * f, 2 * T * d * 2 * f),
            ("residual into down projection", 2 * T * d, 2 * T * f * d)]
    print(f"T = {T}, d = {d}, f = {f}, on the {chip.name} datasheet "
          f"({chip.bandwidth_tbs} TB/s, {chip.tflops['fp16']} TFLOP/s fp16)")
    for what, elements, flops in rows:
        saved_s = 2 * elements / (chip.bandwidth_tbs * 1e12)
        matmul_s = flops / (chip.tflops["fp16"] * 1e12)
        print(f"  {what:34} saves {2 * elements / 2**20:7.1f} MiB: "
              f"{saved_s / matmul_s:6.1%} of its matmul's time")


fusion_savings(2048)
fusion_savings(16)

# %% [markdown]
# Each share is the most that fusion can win next to its matmul, at peak rates, and it does not
# depend on T (bytes and FLOPs both grow with it). It is also a budget: a fused kernel whose mainloop
# is slower than the best unfused matmul by more than that share loses more time than its epilogue
# saves. The share is largest where the matmul is narrow against the tensors it saves (the output
# projection is d wide and saves one T × d tensor; the gate|up matmul saves three T × f ones, gate,
# up and SiLU(gate), each written and read: the 6·T·f above). Against `torch.compile`, which fuses
# SiLU and the product by itself, the SwiGLU epilogue saves 4·T·f: the gate and up products, written
# and read. At T = 16 (decoding) the printed shares are the same, but there the matmuls are bound by
# reading the weights, not by FLOPs, and what a fusion saves is mostly a launch. Keep both in mind
# for the measurements below.

# %% [markdown]
# ## RoPE: rotating Q and K
#
# Rotary position embeddings turn each position into a rotation. For a head of dimension D, split
# each query (and key) vector into a first half $x_1$ and a second half $x_2$, and rotate each pair
# $(x_1[j], x_2[j])$ by the angle $\theta_{n,j}$ of position n:
#
# $$\text{out}_1 = x_1 \cos\theta - x_2 \sin\theta, \qquad \text{out}_2 = x_1 \sin\theta + x_2 \cos\theta.$$
#
# The scores $q \cdot k$ then depend on the two positions only through their difference. V is not
# rotated. `rope_tables` gives cos and sin, (N, D/2), in float32:

# %%
cos, sin = rope_tables(SMALL, 6, DEVICE)
print(cos.shape, cos.dtype, "\n", cos[:, :4])

# %% [markdown]
# The eager block rotates Q and K separately, each through `x.float()`, two slices, four products, a
# subtraction, an addition, a `cat` and a cast: about ten passes over each tensor. One kernel does
# both tensors in one pass, loads cos and sin once for both, and computes in float32 in registers.
#
# The Q|K|V matmul writes a (T, 3d) matrix; Q and K are **views** of it, seen as (B, H, N, D) through
# strides. The rotation writes new tensors anyway, so it reads through the views' strides and writes
# contiguous (B, H, N, D) outputs, the layout lesson 06's FlashAttention reads: for Q and K, the copy
# that `.contiguous()` would otherwise cost is done by the same pass. (V is not rotated, and lesson
# 10's causal attention reads it in place.)

# %%
B, N, H, D = 2, 5, SMALL.n_heads, SMALL.head_dim
qkv = torch.randn(B * N, 3 * SMALL.dim, device=DEVICE)
q_view = qkv[:, :SMALL.dim].view(B, N, H, D).transpose(1, 2)
print("q view:", tuple(q_view.shape), "strides", q_view.stride(), "contiguous:", q_view.is_contiguous())

# %% [markdown]
# ## Exercise 1 · RoPE on Q and K, one launch
#
# Write `rope_qk_kernel`. The launcher is written: program `(i, bh)` takes positions
# `i * BLOCK_POS ...` of batch `bh // n_heads`, head `bh % n_heads`, for both Q and K. `half` is D/2,
# and `BLOCK_HALF` the power of two at or above it. Details:
#
# - load the (BLOCK_POS, BLOCK_HALF) tile of cos and sin once, and use it for Q and for K;
# - read Q through its four strides (`sq_b, sq_h, sq_n, sq_d`), K through its own: they may differ;
# - write the outputs contiguous, (B, H, N, D); the kernel is not given D, only `half` (D = 2 · half):
#   head `bh` starts at `bh * seq * 2 * half`, a position's row is `2 * half` values long, and its
#   second half starts `half` values in;
# - compute in float32, store in the output's dtype (`qo_ptr.dtype.element_ty`): in float16 the
#   check holds the outputs to half a unit in the last place, one rounding, at the store;
# - mask both the positions past `seq` and the lanes past `half`: D/2 need not be a power of two;
# - offsets pass 2³¹ at real sizes: `offs_pos * sq_n` as soon as N · 3d does (a row of the
#   projection is 3d values long: at d = 4096, from N = 174,763 on), and `b * sq_b` at large batches.
#   Make `offs_pos`, `b` and `h` `tl.int64`, so that every product with a stride is computed in 64 bits.
#
# A `@triton.jit` helper that rotates one tile, called once for Q and once for K, keeps it short. The
# check gives every operand whose strides the kernel takes as a strided view somewhere: Q and K as the
# projection's views, a Q and a K whose head dimension is not contiguous, cos and sin as column slices
# of wider tables, each with its own row stride; on a GPU, Q's positions and K's sequences 2³⁰ + 64
# values apart, so that offsets pass 2³¹, and Q and K of more than 2³¹ values each, outputs as large,
# where the outputs' head offsets pass it too. Then it watches one run: one launch, each value of cos
# and sin loaded once per (batch, head), and contiguous outputs.

# %% tags=["exercise"]
@triton.jit
def rope_qk_kernel(q_ptr, k_ptr, cos_ptr, sin_ptr, qo_ptr, ko_ptr, n_heads, seq, half,
                   sq_b, sq_h, sq_n, sq_d, sk_b, sk_h, sk_n, sk_d, s_cos, s_sin,
                   BLOCK_POS: tl.constexpr, BLOCK_HALF: tl.constexpr):
    """BLOCK_POS positions of one (batch, head), of Q and of K: cos and sin are loaded once for both."""
    # YOUR CODE HERE:
    # 1. offs_pos from tl.program_id(0), as tl.int64; bh = tl.program_id(1), b and h from it (tl.int64);
    #    offs_half = tl.arange(0, BLOCK_HALF); mask over positions and lanes;
    # 2. load the cos and sin tiles (rows s_cos and s_sin apart), masked;
    # 3. for Q, then K: load the first and second halves through the strides, in float32,
    #    store x1 * cos - x2 * sin and x1 * sin + x2 * cos into the contiguous output.
    pass


def rope_qk(q, k, cos, sin):
    """RoPE (half-split pairs) on q and k, (B, H, N, D) of any strides: (q_rot, k_rot), both contiguous."""
    assert q.dim() == 4 and q.shape == k.shape and q.dtype == k.dtype, "q and k: (B, H, N, D), one dtype"
    B, H, N, D = q.shape
    assert D % 2 == 0 and cos.shape == sin.shape == (N, D // 2), "cos and sin: (N, D / 2), D even"
    assert cos.stride(1) == sin.stride(1) == 1, "cos and sin: rows of contiguous values"
    q_rot = torch.empty((B, H, N, D), device=q.device, dtype=q.dtype)
    k_rot = torch.empty((B, H, N, D), device=q.device, dtype=q.dtype)
    BLOCK_POS = pick(cpu=16, gpu=64)
    grid = (triton.cdiv(N, BLOCK_POS), B * H)
    rope_qk_kernel[grid](q, k, cos, sin, q_rot, k_rot, H, N, D // 2, *q.stride(), *k.stride(),
                         cos.stride(0), sin.stride(0), BLOCK_POS=BLOCK_POS,
                         BLOCK_HALF=triton.next_power_of_2(D // 2), num_warps=4)
    return q_rot, k_rot


# %%
check("rope_qk", rope_qk)

# %% [markdown]
# ## SwiGLU in one matmul
#
# The MLP computes $\mathrm{SiLU}(h W_\text{gate}^\top) \odot (h W_\text{up}^\top)$, then the down
# projection. Both products read the same h, so they can be **one** matmul against the two weight
# matrices stacked: one pass over h, one launch. The epilogue then needs, in each output tile, the
# gate column and the up column that belong together. The course's layout interleaves the rows of
# the two matrices once, when the weights are packed, so that every tile holds matching pairs side by
# side whatever its width: row 2j of `w_gate_up` is row j of `w_gate`, row 2j + 1 is row j of `w_up`.

# %%
show(course.pack_gate_up)
w_gate_demo, w_up_demo = torch.full((3, 2), 1.0), torch.full((3, 2), 2.0)
w_gate_demo[:, 1] = w_up_demo[:, 1] = torch.arange(3.0)     # column 1: the row's number
print(course.pack_gate_up(w_gate_demo, w_up_demo))

# %% [markdown]
# A BLOCK_M × BLOCK_N tile of `h @ w_gate_up.T` then holds BLOCK_N / 2 (gate, up) pairs: its columns
# are gate, up, gate, up, ... in that order. The tile that starts at column `off_n` of the product
# makes BLOCK_N / 2 columns of the result, which is (M, N / 2) = (M, f).
#
# ## Exercise 2 · The SwiGLU epilogue
#
# The mainloop is lesson 09's, unchanged: `tile_origin` walks the tiles in grouped order, and
# `linear_tile` returns one tile of `h @ w_gate_up.T` as a (BLOCK_M, BLOCK_N) float32 accumulator (the
# next cell shows both). The stub gives the descriptors of h and `w_gate_up`, each with its own row
# stride, and the persistent walk. You write what is new, what happens to the accumulator:
#
# - a descriptor of the output, (M, N / 2) and contiguous, and the tile each program stores into it;
# - the pairing. A register tile has no strided slice (`acc[:, 0::2]` is not Triton). What Triton's
#   language can do to a tile: change its shape (`tl.reshape`, in row-major order like
#   `torch.reshape`), reorder its axes (`tl.permute`), take a last axis of size 2 apart (`tl.split`),
#   reduce along an axis. Work out which of these hand you the gate columns and the up columns, each
#   (BLOCK_M, BLOCK_N / 2) and in order (a cell below lets you try shapes in PyTorch first);
# - SiLU(gate) · up in float32, stored in the output's dtype: in float16 the check holds the output
#   to half a unit in its last place, so a product or an accumulator rounded to float16 first shows.
#   The check's gates reach beyond ±89, where the exponential of the gate, or of its negative,
#   overflows float32 to inf: your formula must still give SiLU's limits there (the gate itself, and
#   zero), not NaN.
#
# Then the check watches one run: a single launch stores, and what it stores is the (M, f) output,
# once, through `out_desc`; nothing of the (M, 2f) product goes to memory. Last, it gives your
# autotuner one configuration of 32 × 64 × 16 tiles for one more small product (on a GPU the autotuner
# may choose square tiles for every case, where `BLOCK_M` and `BLOCK_N` mixed up go unnoticed).

# %%
tile_origin, linear_tile = lesson09.tile_origin, lesson09.linear_tile   # for your kernel below
show(tile_origin)
show(linear_tile)

# %% [markdown]
# A stand-in for one tile: two rows of an accumulator whose every value is its column number, so that
# the gates are the even numbers and their ups the odd ones. Which reshape (and what after it) gives
# `[[0, 2, 4, 6], [0, 2, 4, 6]]`, and the ups beside them?

# %%
cols = torch.arange(8).repeat(2, 1)     # (BLOCK_M, BLOCK_N) = (2, 8): columns gate, up, gate, up, ...
print(cols)
print(cols.reshape(2, 2, 4))            # one try: is this the pairing?

# %% tags=["exercise"]
@triton.autotune(configs=course.LINEAR_CONFIGS, key=["M", "N", "K"])
@triton.jit
def swiglu_linear_kernel(h_ptr, w_ptr, out_ptr, M, N, K, stride_h, stride_w, BLOCK_M: tl.constexpr,
                         BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """Tiles of h @ w_gate_up.T (N = 2f interleaved columns), each stored as BLOCK_N / 2 columns of
    SiLU(gate) * up; out (M, N / 2) contiguous."""
    h_desc = tl.make_tensor_descriptor(h_ptr, shape=[M, K], strides=[stride_h, 1],
                                       block_shape=[BLOCK_M, BLOCK_K])
    w_desc = tl.make_tensor_descriptor(w_ptr, shape=[N, K], strides=[stride_w, 1],
                                       block_shape=[BLOCK_N, BLOCK_K])
    # YOUR CODE HERE (1): out_desc, a tensor descriptor of the output: its shape, strides and tile.
    n_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for tile in tl.range(tl.program_id(0), n_tiles, tl.num_programs(0), flatten=True):
        off_m, off_n = tile_origin(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        # acc: (BLOCK_M, BLOCK_N) float32, its columns gate, up, gate, up, ...
        acc = linear_tile(h_desc, w_desc, off_m, off_n, K, BLOCK_M, BLOCK_N, BLOCK_K)  # noqa: F841
        # YOUR CODE HERE (2): the epilogue. Pair each gate column of acc with its up column, compute
        # SiLU(gate) * up in float32 (finite at both tails), and store the tile where it belongs in out.


def swiglu_linear(h, w_gate_up):
    """SiLU(h @ w_gate.T) * (h @ w_up.T) in one kernel; h (M, d), w_gate_up (2f, d) from pack_gate_up."""
    assert h.dim() == w_gate_up.dim() == 2 and h.shape[1] == w_gate_up.shape[1], "h (M, d), w_gate_up (2f, d)"
    assert w_gate_up.shape[0] % 2 == 0, "w_gate_up has two rows per output column: gate, up"
    assert w_gate_up.dtype == h.dtype, "h and w_gate_up must share a dtype"
    M, K = h.shape
    N = w_gate_up.shape[0]
    out = torch.empty((M, N // 2), device=h.device, dtype=h.dtype)
    lesson09._check_tma(h=h, w_gate_up=w_gate_up, out=out)
    swiglu_linear_kernel[lesson09._persistent_grid(M, N)](h, w_gate_up, out, M, N, K, h.stride(0),
                                                          w_gate_up.stride(0))
    return out


# %%
check("swiglu_linear", swiglu_linear)

# %% [markdown]
# Here is how the course's kernel compares, on a GPU now or as recorded, with the same mainloop
# unfused (`linear` on the stacked weights, then SiLU and the product as PyTorch kernels), with two
# cuBLAS matmuls plus SiLU and a product, and with `torch.compile` of that eager code:

# %%
swiglu = timed(course, "swiglu_fp16")
verdicts(swiglu, "course: one matmul, SiLU*mul epilogue",
         ["course matmul, then SiLU, mul", "eager: two matmuls, SiLU, mul", "torch.compile"])

# %% [markdown]
# Read the verdicts against the savings printed at the top. Against the same mainloop unfused, the
# only difference is the epilogue: the gate and up products never reach memory, and two element-wise
# kernels are gone. Against eager, the mainloop's speed counts too: the epilogue wins back at most
# the share printed at the top, so on a mainloop as far from cuBLAS as lesson 04's is on these
# matmuls (lesson 09's `block_matmuls_fp16` record) the fused kernel would still lose.
# `torch.compile` in its default mode, the one timed here, calls cuBLAS for both matmuls without
# timing anything else: Inductor benchmarks its Triton matmul templates against cuBLAS only in
# `mode="max-autotune"` (its `max_autotune` and `max_autotune_gemm` settings). It fuses SiLU and the
# product into one kernel of its own: that saves the element-wise passes, but still writes and reads
# both products, the 4·T·f of the top.

# %% [markdown]
# ## Exercise 3 · The block from the course's kernels
#
# Write the block's forward, `decoder_block_fused(x, w, cfg)`, from the kernels above. It must compute
# `decoder_block(x, w, cfg, attention="sdpa")`, as the eight Triton launches of the table at the top.
# Given:
#
# - `course.pack_weights(w, cfg)`: stacks wq, wk, wv into `wqkv` (3d, d) with the attention norm's γ
#   folded into its columns, and interleaves the gate and up weights into `w_gate_up`; the other
#   matrices as they are, all in `nn.Linear`'s (out, in) layout;
# - `lesson05.inv_rms(x, eps)` (1/rms of each row, float32) and `lesson05.rms_norm_rows(x, gamma, eps)`;
# - `lesson09.linear(h, w, scale=None, residual=None)`: `scale[:, None] * (h @ w.T) + residual`;
# - `course.rope_qk(q, k, cos, sin)` (or your own), with `rope_tables(cfg, N, device)` for cos, sin;
# - `lesson10.causal_attention(q, k, v)`: reads the views as they are and returns (B, N, H, D)
#   contiguous, a `view` away from (T, d);
# - `course.swiglu_linear(h, w_gate_up)` (or your own).
#
# Work on x as a (T, d) matrix, T = B·N. Q, K and V are column slices of the projection's output,
# viewed as (B, N, H, D) and transposed to (B, H, N, D): views, no copy. For the peak memory, `del`
# each intermediate as soon as the next step has read it.
#
# The check's cases include MLP gates of about ±150 (SiLU's exponential overflows at both tails) and a
# batch whose every attention score is near -150 (each exponential underflows unless the row's
# maximum is subtracted): a SiLU or an attention of your own meets its edges here too. One case's
# `cfg.eps` is not the default, with tokens so small that eps sets the norms' scale: both norms take
# `cfg.eps`. Another is a block of other sizes (6 heads of 32, d = 192) with another RoPE base: every
# size and the base come from `cfg`.
#
# Once the values are right, the check holds the forward to the plan: exactly eight Triton launches,
# and nothing from PyTorch but views (`view`, `transpose`, slicing, a `reshape` that needs no copy) and
# allocations (`torch.empty`). An eager norm, an eager RoPE, a `.contiguous()`, a `reshape` that has to
# copy, or a ninth launch each fail it, named with the line that asked for it. (`rope_tables` and
# `pack_weights` are allowed: a model computes them once, not at every step.)

# %% tags=["exercise"]
def decoder_block_fused(x, w, cfg):
    """helpers.block.decoder_block(x, w, cfg, attention="sdpa"), from the course's kernels."""
    if "wqkv" not in w:
        w = course.pack_weights(w, cfg)
    # YOUR CODE HERE: the eight kernels of the table at the top of the lesson, in order.
    raise NotImplementedError("write decoder_block_fused")


# %%
check("decoder_block_fused", decoder_block_fused)

# %% [markdown]
# ## Measuring the block
#
# The block at Llama-2-7B width (d = 4096, 32 heads, f = 11008), float16, in three prefill shapes:
# the course's kernels, eager PyTorch with SDPA (the fused attention models call), and `torch.compile`
# of that eager code, in its default mode and, at the first shape, in `max-autotune` mode (which times
# Triton matmul templates against cuBLAS for every matmul while it compiles; its CUDA graphs are left
# off, so that it is timed like the others). On a GPU now, or as recorded:

# %%
block = timed(course, "block_forward_fp16")
verdicts(block, "course kernels (lesson 11)",
         ["eager + SDPA", "torch.compile(eager + SDPA)", "torch.compile max-autotune"])

# %% [markdown]
# Read ratios close to 1 with care. Two `make bench` runs on GPUs of the same model (another H100,
# or the same one later) differ by a few percent for the same code, so a ratio within a few percent
# of 1 is a tie, not a verdict. What separates the implementations for certain is the ratio to
# eager, and the breakdowns below.

# %% [markdown]
# Peak memory above what was allocated before the forward, and the kernels one forward launched, as
# `make bench` recorded them with `torch.profiler`:

# %%
def block_records():
    """{GPU: recording} of helpers/recorded/11_block/*.json: peak memory and kernels per forward."""
    found = {}
    for path in sorted((ROOT / "helpers" / "recorded" / "11_block").glob("*.json")):
        record = json.loads(path.read_text())
        found[record["device"]] = record
    return found


BLOCK_IMPLS = {"course kernels (lesson 11)": "course", "eager + SDPA": "eager",
               "torch.compile(eager + SDPA)": "compile"}
for gpu, record in block_records().items():
    print(f"{gpu} ({record['date']}, torch {record['torch']}, triton {record['triton']})")
    row_of = {(row["label"], row["impl"]): row for row in record["rows"]}
    print(f"  {'':9}{'peak MiB':^27}{'kernels':^27}  course's peak")
    print(f"  {'shape':9}" + "".join(f"{name:>9}" for name in BLOCK_IMPLS.values()) * 2 + "  ÷ compile's")
    for label in dict.fromkeys(row["label"] for row in record["rows"]):
        rows = [row_of.get((label, impl)) for impl in BLOCK_IMPLS]
        if None in rows:
            continue
        share = rows[0]["peak_mib"] / rows[2]["peak_mib"]   # the course's peak over torch.compile's
        print(f"  {label:9}" + "".join(f"{row['peak_mib']:9.1f}" for row in rows)
              + "".join(f"{row['kernels']:9}" for row in rows) + f"{share:14.2f}")
if not block_records():
    print("no peak-memory and launch figures recorded yet (`make bench` on a GPU writes them)")

# %% [markdown]
# Where does each forward spend its time? The same recording keeps, per implementation, its longest
# kernels (lesson 08's `kernel_table` of the trace's `kernel_events`): here at the first prefill
# shape, the course's block beside `torch.compile`'s, on the last GPU recorded.

# %%
for gpu, record in list(block_records().items())[-1:]:
    first = record["rows"][0]["label"]
    for impl in ("course kernels (lesson 11)", "torch.compile(eager + SDPA)"):
        row = next((r for r in record["rows"] if r["label"] == first and r["impl"] == impl), None)
        if row is None or "longest_kernels" not in row:
            continue
        print(f"{gpu}, {first}, {impl}: {row['kernels']} kernels; the longest, in µs (launches):")
        for name, us, n in row["longest_kernels"]:
            print(f"  {us:8.1f} ({n}) {name}")

# %% [markdown]
# How close is the course's mainloop to cuBLAS on the block's own matmuls? Lesson 09 timed each of
# the four projections at two token counts (its `block_matmuls_fp16` group, as CUDA-graph replays).
# The ratio is cuBLAS's time over lesson 09's: 1 is a tie, below 1 the course is slower:

# %%
def matmul_times(gpu, words, tokens=None):
    """{projection at T tokens: µs} in lesson 09's block_matmuls_fp16 record, of the implementation whose
    name holds `words` (the fastest, where several do: lesson 04's is timed with two layouts of W)."""
    rows, _ = recorded_rows("block_matmuls_fp16", gpu)
    times = {}
    for r in rows:
        if words.lower() in r["impl"].lower() and (tokens is None or r["label"].endswith(f"T{tokens}")):
            times[r["label"]] = min(times.get(r["label"], float("inf")), 1000 * r["ms"])
    return times


for gpu in recorded_devices():
    ours, cublas = matmul_times(gpu, "lesson 09"), matmul_times(gpu, "cuBLAS")
    ratios = {label: cublas[label] / ours[label] for label in ours if label in cublas}
    if not ratios:
        print(f"{gpu}: block_matmuls_fp16 not recorded (lesson 09's `make bench` records it)")
        continue
    print(f"{gpu}: cuBLAS time / lesson 09's: " + ", ".join(f"{k} {v:.2f}" for k, v in ratios.items()))
    print(f"    from {min(ratios.values()):.2f} to {max(ratios.values()):.2f}")

# %% [markdown]
# How much of the block's lead comes from a mainloop that close? What if the block ran on lesson
# 04's instead? The record answers without a run: lesson 04's time for the same four projections at
# T = 2048 (with W in its faster layout, where lesson 09 timed two), plus the course's other kernels
# at B1 N2048 (their times in the profile above), against the forwards recorded at B1 N2048. The
# matmuls are graph replays and the rest profiler durations, so this is an estimate, good to a few
# percent:

# %%
for gpu, record in block_records().items():
    lesson04 = sum(matmul_times(gpu, "lesson 04", tokens=2048).values())
    ours = next((r for r in record["rows"] if r["label"] == "B1 N2048"
                 and r["impl"] == "course kernels (lesson 11)"), None)
    forwards = {r["impl"]: 1000 * r["ms"] for r in recorded_rows("block_forward_fp16", gpu)[0]
                if r["label"] == "B1 N2048"}
    if not lesson04 or ours is None or not forwards:
        print(f"{gpu}: not recorded yet (`make bench` on a GPU records lessons 09 and 11)")
        continue
    others = sum(us for name, us, _ in ours["longest_kernels"]
                 if name not in ("linear_kernel", "swiglu_linear_kernel"))
    estimate = lesson04 + others
    print(f"{gpu}: lesson 04's four matmuls {lesson04:.0f} µs + the course's other kernels {others:.0f} µs "
          f"= {estimate:.0f} µs")
    for impl in ("eager + SDPA", "torch.compile(eager + SDPA)"):
        if impl in forwards:
            verdict = "beats" if estimate < forwards[impl] else "loses to"
            print(f"    {verdict} {impl}: {forwards[impl]:.0f} µs ({forwards[impl] / estimate:.2f} x)")
    compiled_us, course_us = (forwards.get(impl) for impl in ("torch.compile(eager + SDPA)",
                                                             "course kernels (lesson 11)"))
    if compiled_us and course_us:
        print(f"    the block itself, on lesson 09's mainloop: {course_us:.0f} µs, torch.compile's time / "
              f"its time {compiled_us / course_us:.2f} x")

# %% [markdown]
# Hold the two ratios against torch.compile together: the block on lesson 09's mainloop, and the
# estimate on lesson 04's. The same fusions, the same other kernels; the difference is the mainloop
# alone. Where the estimate's margin is within its own few percent, the fusions on lesson 04's loop
# would leave the block level with torch.compile, and the lead is the mainloop's. Against eager the
# fusions carry more, since eager also pays every element-wise kernel's round trip and launch.
#
# How to read these tables together:
#
# - **Time.** At these shapes the block's time is its five matmuls (the Q|K|V, output, gate|up and
#   down projections, and the attention), as the breakdowns show. `torch.compile` keeps cuBLAS (the
#   `nvjet` kernels) for the projections and SDPA's fused attention, and fuses what lies between
#   them (the norms, RoPE, SiLU · up, the residual adds) into Triton kernels of its own. The
#   course's block runs its projections on a mainloop within the margin printed above of cuBLAS
#   (lesson 09's `block_matmuls_fp16`), and folds more into them: the norm's γ and 1/rms into the Q|K|V
#   matmul, the SwiGLU product and both residual adds into epilogues, so those tensors never make a
#   round trip. `max-autotune` times Triton matmul templates against cuBLAS for each matmul and keeps
#   the fastest, at minutes of compilation per shape. Where its verdict is a tie with the default
#   mode, or worse, it found nothing faster than cuBLAS for these matmuls, and its block runs about
#   what the default mode's runs.
# - **Memory.** Eager holds every intermediate of a line until the next line has read it. Inductor
#   plans the buffers of the whole graph and reuses them as soon as they are dead. The course's
#   forward never writes the attention norm's output or the gate and up products (the MLP norm's
#   output is written once, by step 6, and read by step 7), and drops each intermediate (`del`) as
#   soon as the next kernel has read it, so PyTorch's caching allocator can hand the same memory to
#   the next output.
# - **Launches.** The course's block launches its eight Triton kernels and nothing else: no copy,
#   since the attention reads and writes the projections' layout. Eager launches several kernels per
#   line of the block. At prefill sizes each kernel runs long enough that launching costs little: the count
#   matters for small steps.
#
# ## The megakernel question
#
# At prefill sizes launches are cheap. At a decoding step they are not. Lesson 08 profiled a small
# step of the same eager block (batch 1, 16 tokens) and found it launch-bound. Its recording holds
# every kernel; how much of the step is the GPU actually working?

# %%
for gpu in profiled_devices():
    small = recorded_profile("block_small.json", gpu)
    if small is None:
        continue
    kernels = small["kernels"]
    step_us = 1000 * small["step_ms"]
    busy = busy_us(kernels)
    median_run = statistics.median(k["dur_us"] for k in kernels)
    print(f"{gpu}: batch {small['config']['batch']}, {small['config']['seq']} tokens: "
          f"{len(kernels)} kernels, step {step_us:.0f} us, GPU busy {busy:.0f} us ({busy / step_us:.0%}), "
          f"idle {1 - busy / step_us:.0%}; per kernel: {median_run:.1f} us median run, "
          f"{step_us / len(kernels):.1f} us of step")

# %% [markdown]
# The idle share is time the GPU waits for Python to launch the next kernel. The course's block
# launches eight kernels where eager launches many more (the kernel counts above). How much launch
# time did that remove? `make bench` times the block at two decoding-sized shapes both ways: launched
# from Python, one call after another as a decoding loop makes them, and replayed as a **CUDA
# graph**, which records the whole sequence of launches once and replays it with one call: the
# kernels stay as they are, only the CPU's launches go. The difference, divided by the kernels one
# forward launched (recorded with the peak memory above), is what each launch added to the step (on
# a GPU now, or as recorded):

# %%
decode = timed(course, "block_decode_fp16")
graphed = timed(course, "block_decode_graphed_fp16")
records = block_records()


def plain_launch_us(gpu):
    """Lesson 01's record on this GPU: (one launch of a tiny Triton kernel from Python in µs, the date it
    was recorded), or None."""
    rows, _ = recorded_rows("launch_overhead", gpu)
    many = next((r for r in rows if r["impl"].endswith(" launches")), None)
    return (1000 * many["ms"] / int(many["impl"].split()[0]), many["date"]) if many else None


for gpu, rows in graphed.items():
    from_python = {(r["label"], r["impl"]): 1000 * r["ms"] for r in decode.get(gpu, [])}
    kernels = {(r["label"], r["impl"]): r["kernels"] for r in records.get(gpu, {}).get("rows", [])}
    print(f"{gpu}:\n  {'shape':>7} {'implementation':>28} {'µs from Python':>14} {'as a graph':>10} "
          f"{'removed':>8} {'kernels':>8} {'µs added per kernel':>20}")
    for label in dict.fromkeys(r["label"] for r in rows):
        removed, added = {}, {}
        for r in rows:
            key = (label, r["impl"])
            if r["label"] != label or key not in from_python:
                continue
            t, g, n = from_python[key], 1000 * r["ms"], kernels.get(key)
            removed[r["impl"]] = 1 - g / t
            added[r["impl"]] = (t - g) / n if n else None
            per_kernel = f"{added[r['impl']]:20.1f}" if n else f"{'-':>20}"
            print(f"  {label:>7} {r['impl']:>28} {t:14.0f} {g:10.0f} {1 - g / t:8.0%} {n or '-':>8} "
                  f"{per_kernel}")
        if removed:
            print(f"  {label}: the graph removes the largest share from {max(removed, key=removed.get)}")
        ours, eager = added.get("course kernels (lesson 11)"), added.get("eager + SDPA")
        if ours and eager:
            print(f"  {label}: one of the course's launches adds {ours / eager:.1f}x what one of eager's "
                  f"adds")
    if plain_launch_us(gpu):
        us, date = plain_launch_us(gpu)
        print(f"  lesson 01's record on this GPU ({date}): one launch of a tiny Triton kernel from Python, "
              f"{us:.1f} µs")

# %% [markdown]
# Read the last column against eager's, and against lesson 01's plain launch. The ratio under each
# shape compares one of the course's launches with one of eager's. Above 1, fusing eager's kernels
# into eight cut the launch bill by less than the count suggests. Below 1, the course's few
# launches hid behind its kernels: launches cost a step only where the CPU issues them more slowly
# than the GPU runs them, and how far that holds changes with the shape and with the host.
#
# The record from Python has one row more in its table, `course kernels, captured once
# (CapturedStep)`: `course.CapturedStep` wraps the course's forward in one CUDA graph per input shape,
# captured at its first call; every later call copies x into the graph's input, replays the graph and
# copies its output out, three launches from Python where the forward makes eight. That is how a
# decoding loop, whose shapes repeat step after step, gets close to the graphed time from Python.
#
# Why can a Triton launch from Python cost more than an eager one?
# `kernel[grid](...)` runs Python at every launch before anything reaches the GPU:
#
# - **argument binding**: the arguments are matched to the kernel's signature, and each is examined
#   to pick the compiled variant (a pointer's alignment to 16 bytes, an integer equal to 1 or
#   divisible by 16), which is the key of Triton's cache of compiled kernels;
# - **the autotuner's key lookup**: an autotuned kernel first builds its key from the `key=`
#   arguments (M, N, K, and the dtypes), looks up the best config, and calls the grid function with it;
# - **descriptor scratch**: a kernel that builds tensor descriptors in its programs
#   (`tl.make_tensor_descriptor`, as the course's matmuls do) needs global memory to write them into,
#   and Triton calls the allocator given to `triton.set_allocator` for it at every launch. The
#   course's allocator (lesson 09's solutions) checks for a graph capture, then hands back the address
#   of one of two buffers per stream, made on the stream's first launch and taken in turn, since a PDL
#   launch may start while the one before still reads its descriptors. The record times it against a
#   one-line allocator that hands back a buffer made beforehand ("scratch allocated once");
# - the launcher's own Python: the course's checks of shapes, strides and alignment, the output's
#   allocation, the grid. Even `triton.cdiv` counts there: it is a `constexpr_function` (callable
#   inside kernels too), and a call from Python goes through Triton's wrapper for that. The course's
#   launchers work out their grids with `helpers.launch.cdiv`, plain Python (both are timed below).
#
# Eager PyTorch launches from C++ after one dispatch, and Inductor's generated code calls its Triton
# kernels through launchers it prepared ahead of time, which skip most of the binding. So do the
# course's eight: each launches through `helpers.launch.Launcher`, which binds the arguments and
# looks up the configuration once per key (the dtypes, devices, alignments and integers that decide
# them), then hands each later call's arguments straight to the compiled kernel, every tensor as its
# address, and skips the profiler's hooks when none is listening. `make bench` records the pieces
# of one launch, one at a time, then each of the eight launcher calls of a forward (the CPU's time
# per call, with the GPU idle), at the first decoding shape:

# %%
for gpu, record in records.items():
    if "launch_parts_us" not in record:
        print(f"{gpu}: the pieces of a launch are not recorded yet (make bench on a GPU records them)")
        continue
    print(f"{gpu}, {record['launch_label']}: the CPU's time per call, µs")
    for what, us in {**record["launch_parts_us"], **record["launch_steps_us"]}.items():
        print(f"  {us:8.1f}  {what}" if isinstance(us, float) else f"  {what}: {us}")

# %% [markdown]
# What removes the launch cost, and how much of it:
#
# - **CUDA graphs** remove all of it: the graphed column. What is left is the kernels and the gaps
#   between them: each kernel waits for the last program of the one before it, then ramps up from
#   an empty GPU.
# - **PDL** (programmatic dependent launch, Hopper) shortens those gaps inside a graph. A kernel
#   launched with `launch_pdl=True` may start as soon as every program of the kernel before it has
#   called `tl.extra.cuda.gdc_launch_dependents()` (or finished): its programs run what does not
#   depend on that kernel (index arithmetic, loading weights), then wait at `tl.extra.cuda.gdc_wait()`
#   until it has completed and its writes are visible. It does the same for launches back to back
#   from Python (lesson 09's `matmul` launches this way), but it does not remove the CPU's cost.
# - **Fewer launches** remove it only partly, as the per-kernel column shows: what each launch costs
#   matters as much as how many there are. A leaner launch path (a launcher prepared once, as
#   Inductor's and the course's are) cuts the cost of each, not all of it: what is left is Python all
#   the same (the launcher's checks, the output's allocation, the key, Triton's C launch).
#
# That is also why the share each graph removes differs by implementation, shape and GPU (the cell
# names the largest in each case): eager launches the most kernels, but not always the most
# expensive launches. The verdicts, first as graphs (the GPU's time), then from Python against eager:

# %%
print("As CUDA graphs (the GPU's time):")
verdicts(graphed, "course kernels (lesson 11)", ["eager + SDPA", "torch.compile(eager + SDPA)"])
print("Launched from Python:")
verdicts(decode, "course kernels (lesson 11)", ["eager + SDPA"])
compiled_name = "torch.compile(eager + SDPA)"
for gpu, rows in decode.items():
    python_us = {r["label"]: 1000 * r["ms"] for r in rows if r["impl"] == compiled_name}
    graph_us = {r["label"]: 1000 * r["ms"] for r in graphed.get(gpu, []) if r["impl"] == compiled_name}
    print(f"{gpu}, {compiled_name}: " + ", ".join(
        f"{label} {python_us[label]:.0f} µs from Python, {graph_us.get(label, float('nan')):.0f} µs "
        f"as a graph" for label in python_us))
    host = {r["label"]: r["host_us"] for r in recorded_rows("block_decode_fp16", gpu)[0]
            if r["impl"] == compiled_name and r.get("host_us") and r["label"] in python_us}
    missing = "not recorded yet (make bench on a GPU records host_us)"
    print("    the CPU's time in one call: "
          + (", ".join(f"{k} {v:.0f} µs" for k, v in host.items()) if host else missing))

# %% [markdown]
# Compare the lines of `torch.compile`: from Python it pays its own host time (its guards and its
# generated code's launches), which the graph does not have. The CPU's time printed under them is of
# one call on its own, with the GPU idle; called back to back, part of it hides behind the kernels,
# and what it costs the step is the difference between its time from Python and its time as a graph.
# Once the launches are gone, what remains is the kernels, and at 16 tokens every projection is bound
# by reading its weights (hundreds of MB per step), not by FLOPs: what counts is how many SMs read
# weights at once, and how many bytes each keeps in flight. That is why `linear`'s search (lesson 09)
# holds tiles of 16 rows with 256-wide K steps: at 16 tokens a tile of 64 rows is three quarters
# zeros, and 16-row tiles as narrow as 32 columns make more tiles, so more SMs share the reading.
# cuBLAS has kernels written for few rows too, and Inductor calls them. How far is each graphed step
# from the floor: reading the weights and activations once, at the datasheet's bandwidth?

# %%
for gpu, rows in graphed.items():
    chip = chip_for(gpu)
    if chip is None:
        continue
    for r in rows:
        floor_us = r["gbps"] * r["ms"] * 1e6 / (chip.bandwidth_tbs * 1e12) * 1e6
        print(f"{gpu} {r['label']:>7} {r['impl']:>28}: the floor at {chip.bandwidth_tbs} TB/s is "
              f"{floor_us:.0f} µs, {floor_us / (1000 * r['ms']):.0%} of the graphed step")
print(f"for comparison, {course.NO_BUBBLES['source']} (their measurement, not the course's):")
for what, share in list(course.NO_BUBBLES.items())[1:]:
    print(f"  {what}: {share:.0%} of the GPU's bandwidth")

# %% [markdown]
# A **megakernel** is the step beyond graphs: one persistent kernel that runs the whole block (or
# the whole model step), with no launches between stages at all, and a stage that can start on the
# tiles that are ready while another finishes. The price is that the kernel must schedule the work
# and the synchronisation between stages itself. What it can recover is what a graphed step spends
# not reading weights: the complement of the shares printed above. That is not little: even the best
# graphed step above spends a large part of its time in gaps, ramp-ups, tails, and matmuls that do
# not keep every SM reading. Hazy Research's "No Bubbles" megakernel for Llama-1B decoding, printed
# beside the course's shares, shows what removing them is worth on an H100 (another model and
# another measurement, so read it as the size of the prize, not as a prediction). The course does
# not build one. The steps before it: the weights split over K as well (split-K), so that every SM
# reads them even where a matrix makes fewer tiles than there are SMs, and PDL between the kernels
# that remain.

# %% [markdown]
# ## The fusion targets, checked
#
# The source material of this course lists the fusions with the most value in a transformer decoder.
# Which of them has the course measured, and what did each gain over the unfused eager code? The
# cell prints the recorded ratio (eager's time over the course kernel's, per shape) where a
# benchmark exists, and "not measured" where none does. Each row reads the design the block uses:
# for RMSNorm, lesson 09's 1/rms pass with the row scale in the matmul's epilogue (not lesson 05's
# first design, which normalises inside the mainloop); for attention, lesson 06's FlashAttention, the
# kernel timed against the scores materialised (the block runs lesson 10's `causal_attention`, the
# same algorithm through tensor descriptors):

# %%
# (the source's fusion, the group that measures it, the course's kernel, its unfused baseline)
FUSION_TARGETS = [
    ("QK attention + softmax + masked fill", "attention_fwd_causal", "triton (ours)",
     "naive (materialized S)"),
    ("RMSNorm + Q/K/V projection", "hopper_rmsnorm_linear_bf16", "lesson 09: rmsnorm_linear",
     "F.rms_norm + cuBLAS"),
    ("SiLU/GeLU + gate multiply (SwiGLU)", "swiglu_fp16", "course: one matmul, SiLU*mul epilogue",
     "eager: two matmuls, SiLU, mul"),
    ("Dequantize + matmul", None, None, None),
    ("Matmul + residual add + RMSNorm", None, None, None),
]

for target, group, ours, baseline in FUSION_TARGETS:
    print(target)
    if group is None:
        print("    not measured: the course has no kernel for it yet")
        continue
    for gpu in recorded_devices():
        rows, _ = recorded_rows(group, gpu)
        ms = {(r["label"], r["impl"]): r["ms"] for r in rows}
        labels = [label for label in dict.fromkeys(r["label"] for r in rows)
                  if (label, ours) in ms and (label, baseline) in ms]
        gains = ", ".join(f"{label} {ms[(label, baseline)] / ms[(label, ours)]:.2f}" for label in labels)
        print(f"    {gpu}: {gains or 'not measured'}   ({baseline!r} time / {ours!r} time)")

# %% [markdown]
# A ratio above one is a gain. The fusions are not of one size. The attention's saves the N × N scores
# of every head, bytes that grow with N², against the few T × d or T × f tensors the other fusions
# save; its ratio can grow with N, which the attention rows let you check. The matmul-attached fusions
# can gain at most their share at that matmul's width (the shares at the top of the lesson are for the
# block's shapes; a narrower benchmark shape, such as the RMSNorm rows' N = 1024, allows more), and
# only on a mainloop that keeps up: a ratio below one there says the mainloop lost more than the
# epilogue saved. Dequantisation (reading int8 or int4 weights and expanding them in registers)
# matters for decoding, where the matmuls are bound by reading the weights. Matmul + residual +
# RMSNorm does not need whole rows in one program: the norm needs only Σy² of each row, and each
# program can add its tile's share of it in the epilogue, where y is already in registers
# (`tl.atomic_add` into a (T,) float32 buffer, or one partial sum per tile, added up by the next
# kernel). The next matmul then applies 1/rms as its row scale, with γ folded into its weights: steps
# 1 and 2 of the block, with the 1/rms pass gone. In the block that would remove step 6 (the output
# projection's epilogue adds up Σy², and the gate|up matmul scales its rows before SiLU). Both are
# left for later.
#
# ## What is left
#
# - **The backward.** Training needs the block's backward: lesson 06's attention backward exists,
#   but each fused epilogue needs its own (SwiGLU's gradient needs the gate and up products the
#   forward never stored: recompute them, or store them and give back the memory saved), and the
#   matmuls' backward are two more matmuls each, with the weights transposed. The course has not
#   built it.
# - **Decoding.** A matmul for few rows split over K (lesson 09's 16-row tiles are a start, but a
#   narrow matrix still makes fewer tiles than there are SMs), and the KV cache that a real decoding
#   step reads instead of recomputing K and V.
# - **Attention.** The course's FlashAttention forward trails the fused attention that PyTorch's
#   SDPA calls: compare the attention rows of the two breakdowns above.
#
# ## Takeaways
# - A block decomposes into a few matmuls with the small work folded into them: RMSNorm's γ into the
#   weights and its 1/rms into an epilogue, the SiLU product and the residual adds into epilogues, the
#   scores into FlashAttention.
# - Each fusion saves a round trip of one intermediate tensor and a launch. Next to a compute-bound
#   matmul that is at most the share printed at the top: a fused epilogue wins only on a mainloop
#   about as fast as the unfused one.
# - On Hopper, persistent programs and tiles moved by tensor descriptors (TMA) bring a Triton
#   mainloop close to cuBLAS at the block's shapes (the margin printed in "Measuring the block",
#   lesson 09's verdict); lesson 04's loop is the clear version, not the fast one.
# - `torch.compile` finds the element-wise and reduction fusions by itself and, in its default mode,
#   calls cuBLAS for the matmuls; compare against it, not only against eager.
# - Small steps are launch-bound, and a Triton launch from Python can cost as much as an eager
#   kernel's or more (argument binding, the autotuner's lookup, descriptor scratch): fewer launches
#   help only partly, a launcher prepared once cuts each launch's Python but not all of it. CUDA
#   graphs remove the CPU's launches, PDL shortens the gaps between kernels, and what is left at
#   decoding sizes, the share of the step above the weight-reading floor, is what a megakernel wins.
# - Read a benchmark as verdicts computed from its rows, per GPU, and explain each one by its
#   mechanism: launches, bytes, and the speed of the mainloop.

# %%
self_check("11")

# %%
flashcards("11")
