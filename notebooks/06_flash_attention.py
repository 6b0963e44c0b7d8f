# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 06 · FlashAttention from scratch
#
# Attention compares every query with every key. Written the obvious way, it builds an $N \times N$
# matrix of scores for a sequence of $N$ tokens, writes it to HBM, and reads it back several times:
# at $N = 16{,}384$ with 16 heads that matrix alone is 8.6 GB in float16. FlashAttention computes
# exactly the same result without ever storing it. It is the fusion idea of lesson 02 and the online
# softmax of lesson 05, put together on the most important kernel of a transformer.
#
# In this lesson you write it yourself: forward, causal and backward, in Triton, and measure it
# against PyTorch's own FlashAttention.
#
# **You will learn:**
# - what naive attention moves and holds: bytes counted, and memory that grows as $N^2$;
# - the tiled algorithm: a block of queries stays on chip while blocks of keys and values stream
#   past, with the online softmax carried across them and the output rescaled as the max grows;
# - to write it in plain PyTorch first, then as a Triton kernel;
# - causal masking, and why skipping the tiles right of the diagonal makes it about twice as fast;
# - the backward pass by recomputation: the softmax's gradient derived, then $dV$, $dK$, $dQ$ from
#   the saved log-sum-exp, wrapped in a `torch.autograd.Function` so that `loss.backward()` works;
# - why the extra memory is $O(N)$, and how FlashAttention relates to grouped-query attention;
# - what the often-quoted "two to four times faster" means, tested against what this course measures.
#
# Exercises: tiled attention in PyTorch, the Triton forward kernel, its causal version, the backward
# in PyTorch, its two kernels (dK/dV, then dQ), and the autograd wrapper. This lesson is two sittings,
# longer than the others because the backward belongs with the forward it recomputes: the forward
# (exercises 1 to 3, up to "How fast is it?"), then the backward (exercises 4 to 7).

# %% [markdown]
# ## Setting up

# %%
from helpers import DEVICE, ON_GPU, check, describe, passed, pick
from helpers.bench import compare
from helpers.cards import flashcards, self_check
from helpers.solutions import load_solution
from helpers.traffic import eager_traffic, triton_traffic

import math

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

course = load_solution("06")  # solutions/06_flash_attention.py: the memory meter, plots, benchmarks
print(describe())

# %% [markdown]
# ## Attention, the naive way
#
# For one head, the queries $Q$, keys $K$ and values $V$ are $N \times D$ matrices ($D$ is the head
# dimension, 64 or 128 in most models). Attention is
#
# $$S = \frac{Q K^\top}{\sqrt{D}}, \qquad P = \mathrm{softmax}_{\text{rows}}(S), \qquad O = P V.$$
#
# Row $i$ of $P$ says how much query $i$ takes from each value. The tensors of this lesson are
# $(B, H, N, D)$: batch, heads, sequence, head dimension; every $(b, h)$ pair is an independent
# attention. Besides the output we return, for each row, the **log-sum-exp** of the scores,
# $\mathrm{lse}_i = \log \sum_j e^{S_{ij}}$: it is the softmax's normaliser, and the backward pass will
# need it. The comments count elements moved per $(b, h)$:

# %%
def naive_attention(q, k, v, causal=False, sm_scale=None):
    """softmax(q k^T * sm_scale) v for (B, H, N, D) tensors, storing the N x N scores: (out, lse)."""
    sm_scale = q.shape[-1] ** -0.5 if sm_scale is None else sm_scale
    s = q @ k.transpose(-2, -1)                      # read 2ND,          write N^2
    s = s * sm_scale                                 # read N^2,          write N^2
    if causal:                                       # query i may only see keys j <= i
        n = q.shape[-2]
        future = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
        s = s.masked_fill(future, float("-inf"))     # read N^2 (+ mask), write N^2
    lse = torch.logsumexp(s, dim=-1)                 # read N^2, write N (as one kernel: see below)
    p = torch.exp(s - lse[..., None])                # read N^2 + N, write N^2; read N^2, write N^2
    return p @ v, lse                                # read N^2 + ND,     write ND


# %% [markdown]
# It agrees with PyTorch's `scaled_dot_product_attention` (SDPA), the function models call:

# %%
q, k, v = (torch.randn(2, 3, 100, 64, device=DEVICE) for _ in range(3))
for causal in (False, True):
    ours, _ = naive_attention(q, k, v, causal)
    theirs = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    print(f"causal={causal}: max difference {(ours - theirs).abs().max().item():.1e}")

# %% [markdown]
# ### What it moves
#
# Adding up the comments (full attention): about $9N^2 + 4ND$ elements per head, of which only $4ND$
# (read $Q, K, V$, write $O$) is needed. The traffic meter of lesson 02 counts what the eager code
# really dispatches:

# %%
B, H, N, D = 1, 2, 256, 64
q, k, v = (torch.randn(B, H, N, D, device=DEVICE) for _ in range(3))
naive_moved = eager_traffic(naive_attention, q, k, v)
print(naive_moved)
for op, nbytes in naive_moved.ops:
    print(f"  {op:>14}: {nbytes:>10,} bytes")
real = [(op, nbytes) for op, nbytes in naive_moved.ops if op != "_unsafe_view"]
print(f"without the reshapes: {len(real)} kernels, {sum(nbytes for _, nbytes in real):,} bytes; "
      f"formula 9N^2 + 4ND + 2N elements: {4 * B * H * (9 * N * N + 4 * N * D + 2 * N):,} bytes")

# %% [markdown]
# (Some PyTorch versions list an `_unsafe_view` too: the reshape of a batched matrix product's
# result, which moves nothing; the last line leaves it out.) The rest agrees with the comments, and
# both are too kind to `torch.logsumexp`. The meter sees the ATen operations the Python code calls,
# not what runs inside them, and ATen writes `logsumexp` in C++ as a chain of its own operations: the
# row max, a guard for rows whose max is infinite, then subtract, exponential, sum, log and add. The
# same steps in Python, metered one by one:

# %%
def logsumexp_as_aten_runs_it(s):
    """torch.logsumexp(s, dim=-1), step by step as ATen computes it (logsumexp_out_impl, ReduceOps.cpp)."""
    m = s.amax(dim=-1, keepdim=True)                        # read N^2, write N
    m_rows = m.squeeze(-1)                                  # a view of m
    m_rows.masked_fill_(m_rows.abs() == float("inf"), 0.0)  # abs, eq, masked_fill_: a few N each
    e = (s - m).exp_()                                      # sub: read N^2, write N^2; exp_: the same
    return e.sum(dim=-1).log_().add_(m_rows)                # sum: read N^2, write N; log_, add_: N


s = q @ k.transpose(-2, -1) * D**-0.5
assert torch.allclose(logsumexp_as_aten_runs_it(s), torch.logsumexp(s, dim=-1))
as_one = eager_traffic(torch.logsumexp, s, dim=-1)
inside = eager_traffic(logsumexp_as_aten_runs_it, s)
print(f"torch.logsumexp as the meter sees it: {as_one}")
print(f"torch.logsumexp as ATen runs it:      {inside}")
naive_kernels = len(real) - 1 + inside.kernels
naive_bytes = naive_moved.bytes - as_one.bytes + inside.bytes
per_n2 = (naive_bytes / (B * H * q.element_size()) - 4 * N * D) / N**2
print(f"naive attention, corrected: {naive_kernels} kernels, {naive_bytes:,} bytes: "
      f"about {per_n2:.1f} N^2 + 4ND elements per head")
print(f"at N = 4096, D = 128 its N^2 terms are {per_n2 * 4096 / (4 * 128):.0f} times the 4ND it needs")

# %% [markdown]
# So naive attention runs more than a dozen kernels, and $S$ crosses memory many more times than the comments
# say: the count printed above. Most of those kernels do a few operations per element they move, and
# even the two matrix products do only about $D$ per element of $S$, so on a GPU naive attention runs
# at the speed of memory, far below that of the tensor cores.
#
# ### What it holds
#
# Memory is the other problem. The scores and the probabilities are each $B \cdot H \cdot N^2$
# numbers, alive at the same time. To watch memory without a GPU, `course.peak_memory` runs a
# function under a small meter, `PeakMemory` (in `solutions/`): it sees every tensor PyTorch allocates
# and adds up those alive at once (views and in-place results share memory and are not counted
# twice). On a GPU it reads PyTorch's own peak instead. Double $N$ and the naive version's memory
# goes up four times: the scores dominate everything else.

# %%
peak_memory = course.peak_memory
D = 64
sizes = pick(cpu=[256, 512, 1024, 2048], gpu=[1024, 2048, 4096, 8192, 16384])
heads = pick(cpu=1, gpu=16)
naive_peak = {}
for n in sizes:
    if ON_GPU and 3 * heads * n * n * 2 > torch.cuda.mem_get_info()[0] / 2:
        break  # the scores, the probabilities and one temporary would not fit comfortably
    q, k, v = (torch.randn(1, heads, n, D, device=DEVICE, dtype=pick(cpu=torch.float32, gpu=torch.float16))
               for _ in range(3))
    naive_peak[n] = peak_memory(naive_attention, q, k, v)
    scores = heads * n * n * q.element_size()
    print(f"N = {n:>6}: peak {naive_peak[n] / 2**20:9.1f} MiB = {naive_peak[n] / scores:.2f} x the "
          f"scores matrix ({scores / 2**20:.1f} MiB)")

# %% [markdown]
# ## Tiling: the algorithm
#
# FlashAttention never forms $S$. It splits the queries into blocks of $B_M$ rows and the keys and
# values into tiles of $B_N$ rows. One program owns one query block and keeps it on chip, in
# registers. The K/V tiles stream past it, one at a time: for each, the program computes a
# $B_M \times B_N$ tile of scores, uses it, and forgets it.
#
# The difficulty is the softmax: it needs the max and the sum of a whole row of scores, and the
# program sees one tile of the row at a time. Lesson 05's online softmax solves exactly that. Each
# query row keeps a running max $m$ and a running sum $l$ of exponentials taken against that max.
# FlashAttention adds a third running quantity, the unnormalised output
# $\mathrm{acc} = \sum_j e^{S_{ij} - m} V_j$. For each new tile $S^{(t)}$ with values $V^{(t)}$:
#
# $$m' = \max\big(m, \max_j S^{(t)}_{j}\big), \qquad \alpha = e^{m - m'}, \qquad
#   P^{(t)} = e^{S^{(t)} - m'},$$
# $$l' = \alpha\, l + \textstyle\sum_j P^{(t)}_{j}, \qquad
#   \mathrm{acc}' = \alpha\, \mathrm{acc} + P^{(t)} V^{(t)}.$$
#
# The factor $\alpha$ rescales everything summed so far when the max grows (and is 1 when it does
# not). After the last tile, $O = \mathrm{acc} / l$ is the exact softmax output, and
# $\mathrm{lse} = m + \log l$, one number per row, is saved for the backward pass. Per query block,
# the program holds $B_M \times D$ outputs and $B_M \times B_N$ scores at any time, whatever $N$ is.
# The arithmetic is the naive version's; what changes is where the intermediates live.

# %% [markdown]
# ## Exercise 1 · The algorithm in plain PyTorch
#
# Write `attention_tiled`: loop over query blocks of `block_m` rows and, inside, over K/V tiles of
# `block_n` rows, with the recurrence above. Return `(out, lse)` like `naive_attention`. With
# `causal=True`, mask scores where the key comes after the query (`-inf`, as in `naive_attention`);
# you may also stop the inner loop at the diagonal, since the tiles right of it are fully masked.
# Keep the running `m`, `l` and `acc` in float32, as the Triton kernel will, or in float64 when `q` is
# float64 (the check runs both): `torch.promote_types(q.dtype, torch.float32)` is that dtype. Use the
# `sm_scale`, `block_m` and `block_n` you are given: the check draws random scales and measures with
# tiles of its own. It also counts how often your function reads each element of `k`: once per query
# block, as one pass over the key tiles does. A first pass for the max and the sum, then a second for
# the output, reads K twice and fails.

# %% tags=["exercise"]
def attention_tiled(q, k, v, causal=False, sm_scale=None, block_m=32, block_n=16):
    """FlashAttention's algorithm in plain PyTorch: (out, lse), one block_m x block_n score tile at a time."""
    # YOUR CODE HERE:
    # for each query block qi = q[:, :, i:i + block_m]:
    #     m = -inf, l = 0 (shape (B, H, rows)), acc = 0 (shape of qi)
    #     for each K/V tile j: s = qi @ kj^T * sm_scale (masked if causal); m_new; alpha; p;
    #         l = alpha * l + p.sum(-1); acc = alpha[..., None] * acc + p @ vj; m = m_new
    #     out rows = acc / l[..., None]; lse rows = m + log(l)
    raise NotImplementedError("write attention_tiled")


# %%
check("attention_tiled", attention_tiled)

# %% [markdown]
# The check uses sequence lengths that are not multiples of the tiles, both masks, float32 and
# float64, strided inputs, random `sm_scale`s, and scores up to about 100, where $e^{S}$ overflows
# float32: only the running max keeps those finite. Once the values are right, it runs your function
# at $N = 256$ with `block_m=32, block_n=64` and watches every tensor PyTorch makes: none may be larger
# than `q`, as a whole row of $N$ scores per query block would be. Then once more with tiles of 8 x 8:
# apart from tensors the size of `q` and the lse, none may hold more than a tile's worth of values
# (`block_m` times the larger of `block_n` and $D$), as even one query's row of $N$ scores would.
#
# ### How much memory does it need?
#
# The tiled version allocates the output, the log-sum-exp, and one tile's worth of temporaries at a
# time. Measured with the same meter (larger tiles, to keep the Python loop short):

# %%
if passed("attention_tiled"):
    dtype = pick(cpu=torch.float32, gpu=torch.float16)
    for n in sizes:
        if n not in naive_peak:
            break
        q, k, v = (torch.randn(1, heads, n, D, device=DEVICE, dtype=dtype) for _ in range(3))
        tiled = peak_memory(attention_tiled, q, k, v, block_m=128, block_n=128)
        print(f"N = {n:>6}: naive {naive_peak[n] / 2**20:9.1f} MiB   tiled {tiled / 2**20:7.2f} MiB   "
              f"(the output alone: {q.nbytes / 2**20:.2f} MiB)")

# %% [markdown]
# The tiled version holds the output, one number per row and a fixed tile's worth of temporaries:
# each doubling of $N$ adds about what the output grew by, so its memory is $O(N)$; the $N \times N$
# matrix is never stored. (Heads of dimension 64: on a GPU, 16 heads in float16 up to
# $N = 16{,}384$, where one copy of the scores is 8.6 GB, and sizes whose matrices would not fit are not
# run; on the CPU, one head in float32.) On a GPU that decides what runs at all. Your Triton kernels'
# memory is measured further down, for a forward and backward pass together.
#
# Some summaries say FlashAttention needs $O(\sqrt{N})$ memory. It does not: the output alone is
# $N \times D$. The paper analyses HBM *traffic*, which depends on the size of on-chip memory.
#
# ## The Triton kernel
#
# Now the same algorithm as a kernel. The grid has one program per (query block, batch·head) pair:
# `program_id(0)` picks the block of `BLOCK_M` queries and `program_id(1)` the $(b, h)$ slice. The
# launcher makes `q`, `k`, `v` contiguous, so the slice $bh$ starts `bh * N * D` elements in, and row
# `n` of it at `n * D`.
#
# A few choices make it fast:
#
# - **$K$ is loaded transposed.** `tl.dot(q, kT)` wants a $(D, B_N)$ tile; pointer arithmetic makes it
#   directly: rows of the tile step through `offs_d`, columns through `offs_n * D`. No transpose is
#   ever written.
# - **Base-2 exponentials.** The GPU's fast exponential is $2^x$; $e^x = 2^{x \log_2 e}$, so the
#   launcher folds $\log_2 e$ into the score scale (`qk_scale = sm_scale * log2(e)`), the kernel keeps
#   $m$ in base-2 units, and one multiply-add per score does scale and shift. The saved lse is turned
#   back into natural-log units at the end ($\ln 2 \cdot \log_2$).
# - **float32 accumulators.** $m$, $l$ and `acc` are float32; `p` is cast to the input dtype only to
#   feed the second matrix product, which accumulates in float32 on the tensor cores. (On a GPU,
#   float32 *inputs* go through the tensor cores as TF32, about three significant digits; the lesson
#   uses float16 there.)
# - **Masks only where needed.** Whole K/V tiles need no mask. Only the last tile, when $N$ is not a
#   multiple of `BLOCK_N`, must hide the keys past the end. So the loop lives in a helper,
#   `fwd_tile_loop`, that the kernel calls twice: over the whole tiles with `MASK="none"`, then over
#   the ragged last one with `MASK="keys"`. (`MASK` is a `tl.constexpr`: each value compiles its own
#   loop, and the branches not taken cost nothing.)
# - **int64 offsets.** `bh * N * D` passes $2^{31}$ for large problems; the program id is cast to
#   int64 before the multiplication.
#
# Block sizes and warps are left to the autotuner (lesson 04): a few configs on a GPU, one under the
# interpreter. Below 1024 keys it does not pay to time them, so the first config is used.

# %%
LOG2E = tl.constexpr(1.4426950408889634)  # log2(e); a global a kernel reads must be a tl.constexpr
LN2 = tl.constexpr(0.6931471805599453)    # ln(2)


def configs(cpu, gpu):
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) tuples as triton.Configs, for this device."""
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
            for bm, bn, w, s in pick(cpu=cpu, gpu=gpu)]


FWD_CONFIGS = configs(cpu=[(64, 32, 4, 1)],
                      gpu=[(64, 64, 4, 3), (128, 64, 8, 3), (128, 64, 8, 4), (128, 128, 8, 2),
                           (128, 128, 8, 3)])


def small_problems_one_config(configs, named_args, **kwargs):
    """Autotuning pays off on long sequences only: below 1024 keys, take the first config."""
    return configs[:1] if named_args["n_ctx"] < 1024 else configs


PRUNE = {"early_config_prune": small_problems_one_config}

# %% [markdown]
# ## Exercise 2 · The forward kernel
#
# Write `fwd_tile_loop` and `flash_fwd_kernel`; the launcher is written for you.
#
# - `fwd_tile_loop(acc, l_i, m_i, q, k_ptr, v_ptr, offs_m, lo, hi, n_ctx, qk_scale, ...)` streams the
#   K/V tiles starting at `lo, lo + BLOCK_N, ... < hi` past the query block `q` and returns the
#   updated `(acc, l_i, m_i)`. For each tile: load `kT` $(D, B_N)$ and `v` $(B_N, D)$ (masked loads
#   with `other=0.0` unless `MASK == "none"`), `s = tl.dot(q, kT)`, hide the keys `>= n_ctx` with
#   `-inf` when `MASK == "keys"`, then the recurrence in base 2 (`tl.exp2`, `tl.max(s, 1)`,
#   `tl.sum(p, 1)`, `tl.dot(p.to(v.dtype), v, acc)`). Leave `MASK == "causal"` for exercise 3.
# - `flash_fwd_kernel` finds its query block and $(b, h)$ slice, moves the four pointers to the slice,
#   loads `q` (rows past `n_ctx` masked), starts `m_i` at `-inf`, `l_i` and `acc` at 0, calls the loop
#   twice (whole tiles up to `(n_ctx // BLOCK_N) * BLOCK_N`, then the ragged rest), and stores
#   `acc / l_i[:, None]` and `lse = (m_i + log2(l_i)) * LN2`.
#
# The check covers head dimensions 16 to 128, a single token, sequence lengths that are not
# multiples of any block, strided inputs, random `sm_scale`s, scores large enough to overflow
# without the running max, and a float16 case whose unnormalised output passes float16's largest
# value, 65,504, before the division by $l$ (an `acc` kept in float16 between tiles overflows there).
# On the CPU the kernel runs in float32 (and in float16 in two cases); on a GPU in float16. Whatever
# the inputs, the lse comes back in float32, as the launcher allocates it: it is a sum of $N$
# exponentials, and the backward pass exponentiates it again. It also counts your kernel's matrix
# products at $N = 512$: the score products `tl.dot(q, kT)` must do no more work than the products
# with V, so a first pass over the K tiles for the row max (every score computed twice) fails. Last,
# the check gives your autotuner blocks of 128 query rows and 16 keys for one more run: on a GPU short
# sequences run with the first configuration, 64 × 64, where `BLOCK_M` and `BLOCK_N` mixed up go
# unnoticed; and every other case runs with 64 query rows, where a 64 typed in place of `BLOCK_M`
# goes unnoticed too.

# %% tags=["exercise"]
@triton.jit
def fwd_tile_loop(acc, l_i, m_i, q, k_ptr, v_ptr, offs_m, lo, hi, n_ctx, qk_scale,
                  HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, MASK: tl.constexpr):
    """Stream the K/V tiles lo..hi past one Q block, updating (acc, l_i, m_i) by online softmax.

    MASK: "none" (every key valid), "keys" (hide keys >= n_ctx), "causal" (hide keys after the query).
    Scores are kept in base-2 units: s2 = (q . k) * sm_scale * log2(e).
    """
    # YOUR CODE HERE: offs_d = tl.arange(0, HEAD_DIM); for start_n in range(lo, hi, BLOCK_N):
    #   offs_n; kT_ptrs = k_ptr + offs_n[None, :] * HEAD_DIM + offs_d[:, None]; v_ptrs likewise
    #   (rows offs_n, columns offs_d); the loads; s = tl.dot(q, kT); the mask; m_new = max(m_i,
    #   rowmax(s) * qk_scale); alpha = exp2(m_i - m_new); p = exp2(s * qk_scale - m_new[:, None]);
    #   l_i, acc updated; m_i = m_new.
    return acc, l_i, m_i


@triton.autotune(configs=FWD_CONFIGS, key=["n_ctx", "HEAD_DIM"], prune_configs_by=PRUNE)
@triton.jit
def flash_fwd_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, n_ctx, qk_scale,
                     HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """One program: BLOCK_M query rows of one (batch, head); out and lse for those rows."""
    # YOUR CODE HERE: start_m = program_id(0) * BLOCK_M; bh = program_id(1) as int64; move q_ptr,
    # k_ptr, v_ptr, o_ptr by bh * n_ctx * HEAD_DIM and lse_ptr by bh * n_ctx; load q; initialise
    # m_i, l_i, acc; two calls of fwd_tile_loop ("none", then "keys"); store out and lse (masked).
    pass


def flash_forward(q, k, v, sm_scale=None):
    """Non-causal attention of (B, H, N, D) tensors with the Triton kernel: (out, lse)."""
    assert q.dim() == 4 and q.shape == k.shape == v.shape, "q, k, v must all be (B, H, N, D)"
    B, H, N, D = q.shape
    assert D in (16, 32, 64, 128), "head dimension must be 16, 32, 64 or 128"
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    sm_scale = D ** -0.5 if sm_scale is None else sm_scale
    out = torch.empty_like(q)
    lse = torch.empty(B, H, N, device=q.device, dtype=torch.float32)
    grid = lambda meta: (triton.cdiv(N, meta["BLOCK_M"]), B * H)  # noqa: E731
    flash_fwd_kernel[grid](q, k, v, out, lse, N, sm_scale * LOG2E.value, HEAD_DIM=D)
    return out, lse


# %%
check("flash_forward", flash_forward)

# %% [markdown]
# ### What the kernel moves
#
# The meter runs your kernel through the interpreter and counts its loads and stores. Each program
# reads its query block once and every K/V tile once, and writes its output rows and their lse:
# $Q$ and $O$ cross memory once, $K$ and $V$ once per query block, so
# $\big(2 + 2 \lceil N / B_M \rceil\big) N D + N$ elements per head, against the naive count printed
# earlier.

# %%
if passed("flash_forward"):
    B, H, N, D = 1, 2, 256, 64
    q, k, v = (torch.randn(B, H, N, D, device=DEVICE) for _ in range(3))
    flash_forward(q, k, v)
    block_m = flash_fwd_kernel.best_config.kwargs["BLOCK_M"]
    formula = 4 * B * H * ((2 + 2 * math.ceil(N / block_m)) * N * D + N)
    print(f"naive: {naive_kernels} kernels, {naive_bytes:,} bytes (logsumexp counted as ATen runs it)")
    print(f"flash, by the formula with BLOCK_M = {block_m}: {formula:,} bytes")
    if not ON_GPU:  # the meter replays these kernels in the interpreter on the CPU (COURSE_DEVICE=cpu)
        flash_moved = triton_traffic(flash_forward, q, k, v)
        print(f"flash, measured: {flash_moved}")
        print(f"{naive_bytes / flash_moved.bytes:.1f}x fewer bytes, {naive_kernels} kernels -> 1")
    n_long, d_long, bm_long = 4096, 128, 128
    naive_long = per_n2 * n_long**2 + 4 * n_long * d_long
    flash_long = (2 + 2 * math.ceil(n_long / bm_long)) * n_long * d_long + n_long
    print(f"by the counts at N = {n_long}, D = {d_long}, BLOCK_M = {bm_long}: "
          f"{naive_long / flash_long:.1f}x fewer elements than naive")

# %% [markdown]
# The re-reads of $K$ and $V$ grow with $N / B_M$, so the count still grows as $N^2$, but with
# $2D/B_M$ in place of the naive coefficient (the last line above, at a size a model uses), in one
# kernel instead of more than a dozen. On a GPU it is better still: the programs of one head run at
# about the same time and share $K$ and $V$ through the L2 cache, so HBM sees little more than one
# read of each. What remains is arithmetic, $4N^2D$ FLOPs per head on the tensor cores: a
# memory-bound chain has become a compute-bound kernel.
#
# ## Causal attention
#
# In a decoder, query $i$ may only attend to keys $j \le i$. In tiles, that makes three kinds:
#
# - tiles entirely **left of the diagonal** (every key before every query of the block): computed in
#   full, no mask;
# - tiles **on the diagonal**: computed, with the scores of future keys set to $-\infty$;
# - tiles entirely **right of the diagonal**: every score masked. They contribute nothing, so they
#   are **skipped**: no load, no arithmetic.
#
# Drawn for a short sequence:

# %%
kinds = course.plot_tile_kinds(1024, 128, 64)

# %% [markdown]
# Skipping the grey half halves the work: at long $N$ causal attention runs about twice as fast as
# full attention (its FLOP count is conventionally halved, $2N^2D$ per head). At short $N$ the
# diagonal tiles, which are computed in full and then partly thrown away, are a larger share.
#
# With `BLOCK_M` a multiple of `BLOCK_N` (all our configs), the query block starting at `start_m`
# sees keys `0 .. start_m - 1` in whole tiles without a mask, and the tiles from `start_m` to
# `start_m + BLOCK_M - 1` (cut at `n_ctx`) with the causal mask. Keys past the end can only turn up in
# those diagonal tiles, and they come after every valid query, so the causal mask hides them too (their
# loads still need the `n_ctx` mask).
#
# One more detail: the query blocks near the end have the most tiles to visit. Launching them first
# (numbering the blocks backwards) keeps the GPU from finishing with a few long programs running
# alone.
#
# ## Exercise 3 · Causal, with tile skipping
#
# First add the `MASK == "causal"` case to `fwd_tile_loop` in exercise 2's cell: set `s` to `-inf`
# where `offs_m[:, None] < offs_n[None, :]`, and mask the loads of `kT` and `v` at `n_ctx` as for
# `"keys"`. Re-run that cell. Then write `flash_fwd_causal_kernel` below: the same as
# `flash_fwd_kernel`, except that `start_m = (tl.num_programs(0) - 1 - tl.program_id(0)) * BLOCK_M`
# and the two calls are `fwd_tile_loop(..., 0, start_m, ..., "none")` and
# `fwd_tile_loop(..., start_m, min(start_m + BLOCK_M, n_ctx), ..., "causal")`.
#
# Besides the values, the check counts what your kernel loads at $N = 512$ (the traffic meter, through
# the interpreter): a kernel that loads every K/V tile and masks those right of the diagonal gives the
# right answer, and fails.

# %% tags=["exercise"]
@triton.autotune(configs=FWD_CONFIGS, key=["n_ctx", "HEAD_DIM"], prune_configs_by=PRUNE)
@triton.jit
def flash_fwd_causal_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, n_ctx, qk_scale,
                            HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Causal: tiles left of the diagonal in full, diagonal tiles masked, tiles right of it skipped."""
    # YOUR CODE HERE: as flash_fwd_kernel, with the block numbered backwards and the two loops above.
    pass


def flash_forward_causal(q, k, v, sm_scale=None):
    """Causal attention (query i sees keys 0..i) with the Triton kernel: (out, lse)."""
    assert q.dim() == 4 and q.shape == k.shape == v.shape, "q, k, v must all be (B, H, N, D)"
    B, H, N, D = q.shape
    assert D in (16, 32, 64, 128), "head dimension must be 16, 32, 64 or 128"
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    sm_scale = D ** -0.5 if sm_scale is None else sm_scale
    out = torch.empty_like(q)
    lse = torch.empty(B, H, N, device=q.device, dtype=torch.float32)
    grid = lambda meta: (triton.cdiv(N, meta["BLOCK_M"]), B * H)  # noqa: E731
    flash_fwd_causal_kernel[grid](q, k, v, out, lse, N, sm_scale * LOG2E.value, HEAD_DIM=D)
    return out, lse


# %%
check("flash_forward_causal", flash_forward_causal)

# %% [markdown]
# The skipped tiles show in the traffic. At this small $N$ the causal kernel loads about two thirds of
# what the full one loads (the diagonal tiles are a large share); the fraction falls towards one half
# as $N$ grows.

# %%
if passed("flash_forward", "flash_forward_causal"):
    if not ON_GPU:
        causal_moved = triton_traffic(flash_forward_causal, q, k, v)
        share = causal_moved.bytes_loaded / flash_moved.bytes_loaded
        print(f"full:   {flash_moved}")
        print(f"causal: {causal_moved}  ({share:.2f} of the loads)")
    else:
        flash_forward_causal(q, k, v)
        meta = flash_fwd_causal_kernel.best_config.kwargs
        kinds = course.tile_kinds(N, meta["BLOCK_M"], meta["BLOCK_N"])
        print(f"causal: {int((kinds > 0).sum())} of {kinds.numel()} K/V tiles loaded "
              f"(the meter counts on a CPU)")


# %% [markdown]
# ## How fast is it?
#
# The benchmark runs float16, 16 heads of dimension 128, $B \cdot N = 16{,}384$ tokens, from
# $N = 1024$ to $16{,}384$, against PyTorch's SDPA with each of its backends: `flash` (Tri Dao's
# FlashAttention-2, in CUDA), `cuDNN` (NVIDIA's fused attention, which on Hopper uses the newest
# instructions), `mem-efficient` (another tiled kernel), and the naive version where it fits.
# TFLOP/s count $4BHN^2D$ FLOPs, halved when causal. On a GPU the cell measures your kernels now;
# without one, it shows the figures `make bench` recorded with the course's solutions. Under the two
# tables, a summary of each: every implementation's TFLOP/s over the sizes (lowest to highest), and its
# time divided by your kernel's at the same size (above 1: slower than yours).

# %%
if not ON_GPU or passed("flash_forward", "flash_forward_causal"):  # on a GPU, this times your kernel
    full_rows = compare("attention_fwd", lambda: course.forward_benches(flash_forward, causal=False))
    causal_rows = compare("attention_fwd_causal",
                          lambda: course.forward_benches(flash_forward_causal, causal=True))
    course.summarise("forward, full", full_rows)
    course.summarise("forward, causal", causal_rows)

# %% [markdown]
# What to look for (the recorded rows call the course's solution "triton (ours)": what exercises 2
# and 3 ask you to write):
#
# - your kernel against SDPA's flash backend, the goal of this lesson. On the H200 recorded, SDPA
#   flash's time / yours is above 1 at every size. Not because the course's kernel is cleverer:
#   FlashAttention-2 was written for the A100 and issues the A100's matrix instructions on Hopper too
#   (FlashAttention-3 is the Hopper rewrite), while Triton compiles `tl.dot` to Hopper's own
#   warpgroup instructions (`wgmma`);
# - cuDNN, faster still (ratio below 1): besides `wgmma` it uses Hopper's Tensor Memory Accelerator
#   (TMA), a unit that copies whole tiles between global and shared memory while the threads compute,
#   and warp specialisation, some warps loading tiles while others compute. This lesson's kernel
#   leaves the overlap to the compiler's software pipelining (`num_stages`);
# - causal against full: about the same TFLOP/s at long $N$ means about half the time, because half
#   the tiles are skipped; at $N = 1024$ the diagonal tiles make causal relatively slower;
# - naive: far below every fused kernel, lower still when causal (it computes every masked score, then
#   throws it away), and absent where its $N \times N$ matrices would not fit.
#
# One trick is left out: rescaling `acc` only when the max grows by more than a threshold. It saves
# multiplications at the price of a branch per tile; it did not pay when tried for this lesson, and
# the benchmark does not time it. Which blocks the autotuner chose for the last size timed on a GPU:
# `flash_fwd_kernel.best_config`.
#
# ## The backward pass, by recomputation
#
# Training needs $dQ$, $dK$, $dV$ from $dO$, the gradient of the loss with respect to the output.
# The naive way keeps $P$ from the forward pass (another $N^2$ per head) and lets autograd run back
# through it. FlashAttention never stores $P$, so its backward is written by hand. Four steps: the
# formulas, the same in plain PyTorch, two Triton kernels, and the wiring into autograd.
#
# ### The gradients, step by step
#
# One head. $dX$ is the gradient of the loss with respect to $X$, and has the shape of $X$. The
# forward pass is $S = \text{scale} \cdot Q K^\top$, then $P_i = \mathrm{softmax}(S_i)$ for each row
# $i$, then $O = P V$.
#
# 1. $O_i = \sum_j P_{ij} V_j$, so $V_j$ receives $P_{ij}\, dO_i$ from every row $i$: $dV = P^\top dO$.
# 2. The same sum, read as a function of $P$: $dP_{ij} = dO_i \cdot V_j$, that is $dP = dO\, V^\top$.
# 3. One softmax row, $P_{ik} = e^{S_{ik}} / \sum_l e^{S_{il}}$, by the quotient rule:
#    $\partial P_{ik} / \partial S_{ij} = P_{ik}\,(\mathbb{1}[k = j] - P_{ij})$.
# 4. The chain rule along the row: $dS_{ij} = \sum_k dP_{ik}\, P_{ik}\,(\mathbb{1}[k = j] - P_{ij})
#    = P_{ij}\, dP_{ij} - P_{ij} \sum_k P_{ik}\, dP_{ik}$.
# 5. Name the sum $\delta_i = \sum_k P_{ik}\, dP_{ik}$, one number per row:
#    $dS_{ij} = P_{ij}\,(dP_{ij} - \delta_i)$.
# 6. With step 2, $\delta_i = \sum_k P_{ik}\,(dO_i \cdot V_k) = dO_i \cdot \sum_k P_{ik} V_k
#    = dO_i \cdot O_i$.
# 7. $S$ is a scaled matrix product: $dQ = \text{scale} \cdot dS\, K$ and
#    $dK = \text{scale} \cdot dS^\top Q$.
#
# Causal attention changes nothing: a masked score has $P_{ij} = 0$, so its $dS_{ij}$ is 0 as well.
#
# Autograd agrees. On a small example in float64: the Jacobian of one softmax row (step 3), $dS$
# (step 5) and $\delta$ (step 6), each against what autograd computes.

# %%
torch.manual_seed(0)
scores = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)  # 4 rows of 6 scores
values = torch.randn(6, 3, dtype=torch.float64)
d_out = torch.randn(4, 3, dtype=torch.float64)                       # the gradient reaching O
probs = torch.softmax(scores, dim=-1)
outputs = probs @ values
(d_scores,) = torch.autograd.grad(outputs, scores, d_out)            # autograd's dS
probs, outputs = probs.detach(), outputs.detach()

row = probs[0]
jacobian = torch.autograd.functional.jacobian(lambda x: torch.softmax(x, dim=-1), scores[0].detach())
step3 = torch.diag(row) - row[:, None] * row[None, :]                # P_k (1[k = j] - P_j)
d_probs = d_out @ values.T                                           # step 2
delta = (probs * d_probs).sum(dim=-1, keepdim=True)                  # step 5
print(f"step 3, softmax Jacobian:      max difference {(jacobian - step3).abs().max().item():.1e}")
print(f"step 5, dS = P o (dP - delta): max difference "
      f"{(probs * (d_probs - delta) - d_scores).abs().max().item():.1e}")
print(f"step 6, delta = dO . O:        max difference "
      f"{(delta - (d_out * outputs).sum(dim=-1, keepdim=True)).abs().max().item():.1e}")

# %% [markdown]
# Two facts make these formulas tileable:
#
# 1. **$P$ can be recomputed** from $Q$, $K$ and the saved log-sum-exp: $P_{ij} = e^{S_{ij} -
#    \mathrm{lse}_i}$, one tile at a time, exactly normalised, with no running max needed. This is why
#    the forward pass saves the lse: $N$ numbers per head instead of $N^2$. Recomputing costs FLOPs,
#    which the tensor cores have to spare; storing costs memory and bandwidth, which they don't.
# 2. **$\delta$ needs no $P$** (step 6): it is a row-wise dot product of two $N \times D$ tensors,
#    which a tiny kernel computes before the others.
#
# ## Exercise 4 · The gradients in plain PyTorch
#
# Write `attention_backward_torch`: from what the forward pass saved (`out`, `lse`) and the output's
# gradient `dout`, return `(dq, dk, dv)`. Recompute $S$ (masked as in `naive_attention` when
# `causal`) and $P = e^{S - \mathrm{lse}}$, then follow steps 1, 2, 5, 6 and 7. Tensors of
# $N \times N$ are fine here: this is the algorithm, to get right before the kernels tile it.
#
# The check compares your gradients with autograd's through the naive version, in float64, on
# float32 and float64 inputs with both masks, random `sm_scale`s and scores up to about 100. Then it
# watches autograd while your function runs: it must record nothing, since the gradients are yours.

# %% tags=["exercise"]
def attention_backward_torch(q, k, v, out, lse, dout, causal=False, sm_scale=None):
    """(dq, dk, dv) in plain PyTorch from the saved out and lse: P recomputed, the gradients by hand."""
    # YOUR CODE HERE: s (masked if causal) and p from the lse; then dv, dp, delta (one per row,
    # keepdim=True), ds, dq, dk as in the steps above. x.transpose(-2, -1) is a transpose.
    raise NotImplementedError("write attention_backward_torch")


# %%
check("attention_backward_torch", attention_backward_torch)

# %% [markdown]
# ## Two kernels
#
# In the formulas the sums run in two directions: $dV$ and $dK$ sum over queries (for each key), $dQ$
# over keys (for each query). This lesson gives each its own kernel:
#
# - **dK/dV kernel**: one program per block of `BLOCK_N` keys, holding $K_j$, $V_j$ and the two
#   accumulators; query blocks stream past. Per tile: $S^\top = K Q^\top$, $P^\top$ from the lse,
#   $dV \mathrel{+}= P^\top dO$, $dP^\top = V dO^\top$, $dS^\top = P^\top \circ (dP^\top - \delta)$,
#   $dK \mathrel{+}= dS^\top Q$. Causal: query blocks before the key block are skipped, the diagonal
#   ones masked.
# - **dQ kernel**: one program per block of `BLOCK_M` queries; K/V tiles stream past. Per tile: $S$,
#   $P$, $dP = dO V^\top$, $dS$, $dQ \mathrel{+}= dS K$.
#
# Both recompute $S$ and $P$, and $dP$: 7 tile products where a single kernel would need 5. The
# single-kernel alternative (FlashAttention-2's CUDA code, and so SDPA's flash backend) runs only the
# dK/dV kernel and adds each tile's $dQ$ contribution into a float32 buffer with atomic additions from
# many programs. Two kernels need no atomics and stay simple, at the price of about 40% more backward
# arithmetic.
#
# First the preprocessing kernel, $\delta = \mathrm{rowsum}(dO \circ O)$ over all $B \cdot H \cdot N$
# rows, with its launcher, and the block sizes the autotuner may pick for the two kernels:

# %%
@triton.jit
def bwd_preprocess_kernel(o_ptr, do_ptr, delta_ptr, n_rows, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr):
    """delta[i] = sum_d dO[i, d] * O[i, d], over all B*H*N rows."""
    offs_m = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offs_d = tl.arange(0, HEAD_DIM)
    mask = offs_m[:, None] < n_rows
    ptrs = offs_m.to(tl.int64)[:, None] * HEAD_DIM + offs_d[None, :]
    o = tl.load(o_ptr + ptrs, mask=mask, other=0.0).to(tl.float32)
    do = tl.load(do_ptr + ptrs, mask=mask, other=0.0).to(tl.float32)
    tl.store(delta_ptr + offs_m, tl.sum(o * do, 1), mask=offs_m < n_rows)


def backward_delta(out, dout):
    """delta = rowsum(dO * O), (B, H, N) in float32, by the preprocessing kernel."""
    out, dout = out.contiguous(), dout.contiguous()
    B, H, N, D = out.shape
    delta = torch.empty(B, H, N, device=out.device, dtype=torch.float32)
    rows, block = B * H * N, 64
    bwd_preprocess_kernel[(triton.cdiv(rows, block),)](out, dout, delta, rows, HEAD_DIM=D, BLOCK=block)
    return delta


DKDV_CONFIGS = configs(cpu=[(32, 64, 4, 1)],
                       gpu=[(32, 64, 4, 3), (64, 128, 8, 2), (64, 128, 8, 3), (32, 128, 8, 3),
                            (64, 64, 4, 3)])
DQ_CONFIGS = configs(cpu=[(64, 32, 4, 1)],
                     gpu=[(64, 32, 4, 3), (128, 64, 8, 3), (128, 64, 8, 2), (128, 32, 8, 3),
                          (64, 64, 4, 3)])

# %% [markdown]
# ## Exercise 5 · The dK/dV kernel
#
# Write `bwd_dkdv_loop` and `bwd_dkdv_kernel`; the launcher `flash_backward_dkdv` is written for you
# and returns `(dk, dv)`.
#
# - The kernel starts like the forward: find its key block and $(b, h)$ slice, move every pointer
#   (`q, k, v, do, dk, dv` by `bh * n_ctx * HEAD_DIM`; `lse`, `delta` by `bh * n_ctx`), load $K_j$
#   and $V_j$ (rows past `n_ctx` masked), and start `dk`, `dv` at 0 in float32.
# - The loop streams query blocks: it loads `qT` $(D, B_M)$, `do` $(B_M, D)$ and the lse and $\delta$
#   of those rows, then takes the per-tile steps above. Work in base 2 as in the forward:
#   `lse2 = lse * LOG2E`, `pT = tl.exp2(sT * qk_scale - lse2[None, :])`.
# - Rows past `n_ctx`: load their lse with `other=float("inf")`, which makes their $P$ zero.
# - Causal: query blocks before `start_n` never see these keys. Start at `start_n`, masked up to
#   `start_n + BLOCK_N` (`CAUSAL_MASK`: `-inf` where the key comes after the query, before
#   `tl.exp2`), then unmasked to `n_ctx`. This needs `BLOCK_N % BLOCK_M == 0`, as the configs have.
# - `tl.trans(x)` is a free transpose of a tile; `tl.dot(a, b, acc)` accumulates into `acc`.
# - Multiply $dK$ by `sm_scale` once, before storing.
#
# The check gives your launcher what the forward pass saved and a random $dO$, and compares $dK$ and
# $dV$ with autograd's through the naive version in float64: float32 on the CPU (and four float16
# cases), float16 on a GPU, both masks, random `sm_scale`s, sequence lengths that no block divides
# and one that every block does.
# Three float16 cases have running sums that pass 65,504 before they come back, in $dV$, $dK$ and
# $dQ$: an accumulator kept in float16 between tiles overflows there. Every case runs with `BLOCK_N`
# twice `BLOCK_M` (32 × 64, on a GPU too at these lengths), so the check then gives your autotuner
# 32 × 128 for one more run, causal and full: use the block sizes the kernel is given, never a number.

# %% tags=["exercise"]
@triton.jit
def bwd_dkdv_loop(dk, dv, k, v, q_ptr, do_ptr, lse_ptr, delta_ptr, offs_n, lo, hi, n_ctx, qk_scale,
                  HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, CAUSAL_MASK: tl.constexpr):
    """Stream Q blocks lo..hi past one K/V block, accumulating dK (unscaled) and dV."""
    # YOUR CODE HERE: for start_m in range(lo, hi, BLOCK_M): load qT (HEAD_DIM, BLOCK_M), do
    # (BLOCK_M, HEAD_DIM), lse2 and delta for those rows; sT = tl.dot(k, qT); the causal mask;
    # pT; dv += pT @ do; dpT = v @ do^T; dsT; dk += dsT @ qT^T.
    return dk, dv


@triton.autotune(configs=DKDV_CONFIGS, key=["n_ctx", "HEAD_DIM", "CAUSAL"], prune_configs_by=PRUNE)
@triton.jit
def bwd_dkdv_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr,
                    n_ctx, qk_scale, sm_scale, HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """One program: dK and dV for BLOCK_N keys of one (batch, head), streaming the Q blocks that see them."""
    # YOUR CODE HERE: pointers; load k, v (rows past n_ctx masked); dk, dv = 0; the loop(s);
    # store dk * sm_scale and dv.
    pass


def flash_backward_dkdv(q, k, v, out, lse, dout, causal=False, sm_scale=None, delta=None):
    """dk, dv by your dK/dV kernel; delta = rowsum(dO * O) is computed here unless given."""
    q, k, v, lse, dout = (t.contiguous() for t in (q, k, v, lse, dout))
    B, H, N, D = q.shape
    sm_scale = D ** -0.5 if sm_scale is None else sm_scale
    if delta is None:
        delta = backward_delta(out, dout)
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    grid = lambda meta: (triton.cdiv(N, meta["BLOCK_N"]), B * H)  # noqa: E731
    bwd_dkdv_kernel[grid](q, k, v, dout, lse, delta, dk, dv, N, sm_scale * LOG2E.value, sm_scale,
                          HEAD_DIM=D, CAUSAL=causal)
    return dk, dv


# %%
check("flash_backward_dkdv", flash_backward_dkdv)

# %% [markdown]
# ## Exercise 6 · The dQ kernel
#
# Write `bwd_dq_loop` and `bwd_dq_kernel`; the launcher `flash_backward_dq` is written for you.
#
# - The kernel holds one query block: `q`, `do`, and the block's `lse2` and $\delta$ (loaded once,
#   outside the loop), and `dq` at 0 in float32.
# - The loop streams K/V tiles as `fwd_tile_loop` does, with the same three masks. Rows past
#   `n_ctx` are never stored, so they need no care; keys past `n_ctx` are hidden with `"keys"`.
# - Full attention: whole tiles with `"none"`, then the ragged last one with `"keys"`, as in the
#   forward. Causal: keys `0 .. start_m - 1` with `"none"`, then the diagonal with `"causal"`, numbering
#   the query blocks backwards like the forward.
# - Multiply $dQ$ by `sm_scale` once, before storing.
#
# The same cases as for the dK/dV kernel, compared on $dQ$, and one more run with blocks of 128 × 32
# (every case has `BLOCK_M` twice `BLOCK_N`, 64 × 32).

# %% tags=["exercise"]
@triton.jit
def bwd_dq_loop(dq, q, do, lse2, delta, k_ptr, v_ptr, offs_m, lo, hi, n_ctx, qk_scale,
                HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, MASK: tl.constexpr):
    """Stream K/V tiles lo..hi past one Q block, accumulating dQ (unscaled)."""
    # YOUR CODE HERE: for each tile: kT, vT (HEAD_DIM, BLOCK_N); s = q @ kT; the mask ("none",
    # "keys" or "causal"); p; dp = do @ vT; ds; dq += ds @ kT^T.
    return dq


@triton.autotune(configs=DQ_CONFIGS, key=["n_ctx", "HEAD_DIM", "CAUSAL"], prune_configs_by=PRUNE)
@triton.jit
def bwd_dq_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr, n_ctx, qk_scale, sm_scale,
                  HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """One program: dQ for BLOCK_M queries of one (batch, head), streaming the K/V tiles they see."""
    # YOUR CODE HERE: pointers; load q, do, lse2 and delta for the block; dq = 0; the loop(s);
    # store dq * sm_scale.
    pass


def flash_backward_dq(q, k, v, out, lse, dout, causal=False, sm_scale=None, delta=None):
    """dq by your dQ kernel; delta = rowsum(dO * O) is computed here unless given."""
    q, k, v, lse, dout = (t.contiguous() for t in (q, k, v, lse, dout))
    B, H, N, D = q.shape
    sm_scale = D ** -0.5 if sm_scale is None else sm_scale
    if delta is None:
        delta = backward_delta(out, dout)
    dq = torch.empty_like(q)
    grid = lambda meta: (triton.cdiv(N, meta["BLOCK_M"]), B * H)  # noqa: E731
    bwd_dq_kernel[grid](q, k, v, dout, lse, delta, dq, N, sm_scale * LOG2E.value, sm_scale,
                        HEAD_DIM=D, CAUSAL=causal)
    return dq


# %%
check("flash_backward_dq", flash_backward_dq)

# %% [markdown]
# ## Exercise 7 · `torch.autograd.Function`
#
# The last step wires the kernels into autograd, so that `loss.backward()` runs them.
# `flash_backward` computes $\delta$ once and runs your two kernels; `attention` is the function a
# model calls. Write `FlashAttention`:
#
# - `forward(ctx, q, k, v, causal, sm_scale)` runs the forward kernel of exercise 2 or 3, saves
#   `q, k, v, out, lse` with `ctx.save_for_backward`, and keeps `causal` and `sm_scale` on `ctx`;
# - `backward(ctx, dout)` reads the saved tensors, calls `flash_backward`, and returns one gradient
#   per input of `forward`: `dq, dk, dv, None, None`.
#
# The check runs forward and backward with a fixed random $dO$ and compares the output and the three
# gradients with PyTorch's autograd through the naive reference in float64, on the kernel cases
# again. Then it makes sure the backward is yours: Triton kernels must run in it, and no tensor of
# $N \times N$ may appear, forward or backward. Last, it calls `attention` twice (causal, then full)
# before one backward through both, as a model with two attention layers does: each backward must
# read what its own forward kept on `ctx`, not a global that the next call overwrote.

# %% tags=["exercise"]
def flash_backward(q, k, v, out, lse, dout, causal=False, sm_scale=None):
    """dq, dk, dv: delta once, then your dK/dV and dQ kernels (each recomputes P from the lse)."""
    dout = dout.contiguous()
    delta = backward_delta(out, dout)  # shared by both kernels
    dk, dv = flash_backward_dkdv(q, k, v, out, lse, dout, causal, sm_scale, delta)
    dq = flash_backward_dq(q, k, v, out, lse, dout, causal, sm_scale, delta)
    return dq, dk, dv


class FlashAttention(torch.autograd.Function):
    """Forward by the Triton kernels; backward recomputes P from q, k and the saved lse."""

    @staticmethod
    def forward(ctx, q, k, v, causal, sm_scale):
        # YOUR CODE HERE: out, lse from flash_forward or flash_forward_causal; save what backward needs.
        raise NotImplementedError("write FlashAttention.forward")

    @staticmethod
    def backward(ctx, dout):
        # YOUR CODE HERE: the saved tensors, then flash_backward; one gradient per input of forward.
        raise NotImplementedError("write FlashAttention.backward")


def attention(q, k, v, causal=False, sm_scale=None):
    """Attention of (B, H, N, D) tensors, differentiable: loss.backward() runs the Triton backward."""
    sm_scale = q.shape[-1] ** -0.5 if sm_scale is None else sm_scale
    return FlashAttention.apply(q, k, v, causal, sm_scale)


# %%
check("attention_backward", attention)

# %% [markdown]
# `attention` is now a drop-in attention layer. A few steps of gradient descent on a toy problem,
# side by side with SDPA, land on the same numbers:

# %%
def sdpa_attention(q, k, v, causal=False):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


if passed("attention_backward"):
    torch.manual_seed(0)
    dtype = pick(cpu=torch.float32, gpu=torch.float16)
    x = torch.randn(2, 4, 48, 32, device=DEVICE, dtype=dtype)
    target = torch.randn_like(x)
    for name, attend in (("yours", attention), ("SDPA", sdpa_attention)):
        w = torch.eye(32, device=DEVICE, dtype=dtype).requires_grad_()
        for _ in range(3):
            h = x @ w
            loss = (attend(h, h, h, causal=True) - target).pow(2).mean()
            loss.backward()
            with torch.no_grad():
                w -= 0.5 * w.grad
                w.grad = None
        print(f"{name:>5}: loss {loss.item():.6f}")

# %% [markdown]
# ### Memory for training
#
# For the backward pass, the naive version keeps $P$ (and PyTorch's autograd keeps $S$ as well), so
# a training step holds $O(N^2)$ per head until the backward has run, for every attention layer of
# the model. FlashAttention keeps $Q, K, V, O$ and the lse: $O(N)$. On a GPU the next cell measures
# the peak of a forward and backward; on the CPU it counts (at sizes the interpreter can run).

# %%
def forward_backward(fn, q, k, v, dout):
    """The gradients of sum(fn(q, k, v) * dout) with respect to q, k and v (causal attention)."""
    return torch.autograd.grad(fn(q, k, v, causal=True), (q, k, v), dout)


naive_out = lambda q, k, v, causal: naive_attention(q, k, v, causal)[0]  # noqa: E731


if passed("attention_backward"):
    for n in pick(cpu=[128, 256], gpu=[1024, 4096, 16384]):
        q, k, v, dout = (torch.randn(1, heads, n, D, device=DEVICE, dtype=dtype) for _ in range(4))
        q, k, v = (t.requires_grad_() for t in (q, k, v))
        yours = peak_memory(forward_backward, attention, q, k, v, dout)
        line = f"N = {n:>6}: forward + backward, yours {yours / 2**20:8.1f} MiB"
        if not ON_GPU or 4 * heads * n * n * 2 < torch.cuda.mem_get_info()[0] / 2:
            line += f", naive {peak_memory(forward_backward, naive_out, q, k, v, dout) / 2**20:8.1f} MiB"
        print(line)

# %% [markdown]
# The benchmark of a whole training step of attention (forward and backward, causal). TFLOP/s count
# the forward's FLOPs times 3.5 (the usual convention: the backward does 2.5 times the forward's
# matrix work), so they compare directly with SDPA's even though the two-kernel backward does more.

# %%
if not ON_GPU or passed("attention_backward"):  # on a GPU, this times your kernel
    training_rows = compare("attention_fwd_bwd_causal", lambda: course.training_benches(attention))
    course.summarise("forward + backward, causal", training_rows)

# %% [markdown]
# Read your kernels' ratio to SDPA flash and to cuDNN. On the H200 recorded, forward and backward
# together, the two-kernel backward's extra arithmetic included, still beat SDPA flash at every size
# (Hopper's matrix instructions again, as in the forward) and trailed cuDNN.

# %% [markdown]
# ## FlashAttention and grouped-query attention
#
# The two are often mentioned together and solve different problems:
#
# - **FlashAttention** changes *how attention is computed*: tiles on chip instead of an $N \times N$
#   matrix in HBM. Same inputs, same outputs, same parameters.
# - **Grouped-query attention** (GQA) changes *the model*: several query heads share one key/value
#   head. It shrinks what a model must keep per generated token, the **KV cache**, by the group size.
#
# They are orthogonal and combine: a FlashAttention kernel handles GQA by letting the program of query
# head $h$ read the K/V head $\lfloor h \cdot H_{kv} / H \rfloor$. In the forward that is one line of
# pointer arithmetic (try it: pass `H` and `H_kv` to the kernel and offset `k_ptr`, `v_ptr` by the K/V
# head). The backward needs more: every query head of a group contributes to the gradients of the same
# K/V head, so $dK$ and $dV$ must be summed over the group, either by computing them per query head
# and adding the group's results, or by one program looping over the group's query heads.
# What GQA saves, for a model of 32 layers, 32 query heads of dimension 128, float16:

# %%
def kv_cache_gib(tokens, kv_heads, layers=32, head_dim=128, bytes_per=2):
    return 2 * layers * kv_heads * head_dim * bytes_per * tokens / 2**30  # K and V, every layer


for kv_heads, name in ((32, "multi-head (32 K/V heads)"), (8, "GQA, groups of 4 (8 K/V heads)"),
                       (1, "multi-query (1 K/V head)")):
    print(f"{name:>32}: {kv_cache_gib(1, kv_heads) * 2**20:6.0f} KiB per token, "
          f"{kv_cache_gib(131072, kv_heads):5.1f} GiB for a 128k-token context")

# %% [markdown]
# FlashAttention does not shrink the KV cache, and GQA does not remove the $N \times N$ scores; a
# long-context model wants both.
#
# ## The claims, tested
#
# Summaries of FlashAttention often say it is "two to four times faster in the forward pass" and "needs
# $O(\sqrt{N})$ memory". The second is wrong, as measured above: the extra memory is $O(N)$. The
# first depends on the baseline. The summaries under each benchmark above (measured now on a GPU, or
# recorded by `make bench`) give each implementation's time divided by the course's kernel's:
#
# - against the naive version, the forward speed-up is the naive row's ratio: far more than two to
#   four times, larger still when causal, where the naive version computes every masked score. Any
#   tiled kernel gets most of it: SDPA flash's speed-up over naive is the naive ratio divided by flash's;
# - against the best fused kernels (SDPA flash, cuDNN) the ratio is close to 1, on either side, and
#   SDPA's mem-efficient kernel, also tiled, sits in between: the big gain is not materialising $S$,
#   which every tiled kernel gets; the rest is how well a kernel uses the chip.
#
# The paper's "two to four times" was measured on an A100 against the attention implementations of
# 2022 (PyTorch and Megatron, with dropout and masking kernels of their own): quote a speed-up only
# with its baseline, its dtype and its sequence lengths. The longer contexts are real: the naive
# version runs out of memory where a tiled kernel needs only its output and lse.
#
# ## Takeaways
# - Naive attention materialises $S$ and $P$: $S$ crosses memory many times (`torch.logsumexp` alone
#   runs several kernels), $O(N^2)$ memory, more than a dozen memory-bound kernels.
# - FlashAttention keeps a query block on chip and streams K/V tiles past it, carrying the online
#   softmax ($m$, $l$) and the rescaled accumulator; the output is normalised once at the end. Same
#   arithmetic, exact result, one compute-bound kernel, $O(N)$ extra memory.
# - Causal attention skips the tiles right of the diagonal and masks only the diagonal ones: half the
#   work.
# - The backward recomputes $P$ from the saved log-sum-exp instead of storing it, and uses
#   $\delta = \mathrm{rowsum}(dO \circ O)$; dK/dV and dQ sum in different directions, hence two
#   kernels (or one with atomic adds).
# - Kernel details that matter: $K$ loaded transposed by pointer arithmetic, base-2 exponentials with
#   $\log_2 e$ folded into the scale, float32 accumulators, masks only on the tiles that need them,
#   int64 offsets, autotuned blocks.
# - FlashAttention and GQA are orthogonal: one tiles the computation, the other shrinks the KV cache.
#   GQA is one line in the forward; the backward sums $dK$, $dV$ over each group.
# - A speed-up means nothing without its baseline: measure it.

# %%
self_check("06")

# %%
flashcards("06")
