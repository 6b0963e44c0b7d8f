"""A FlashAttention-3-style forward for Hopper (sm_90), written in Gluon.

Lesson 10's `attention` is written in Triton's block language: the compiler decides which warps load,
which multiply, and how the shared-memory ring is pipelined. Gluon is Triton's lower layer, where the
kernel says all of that itself. This module spells out the FlashAttention-3 design on Hopper:

* one CTA per (block of 128 query rows, batch * head);
* warp specialisation: three partitions of one CTA running different code at the same time
    - a producer of 1 warp that only issues TMA copies: the CTA's Q tile once, then every K and V tile
      into a ring of NUM_STAGES shared-memory slots;
    - two consumer warpgroups of 4 warps, each owning 64 of the 128 query rows: S = Q K^T with an
      asynchronous wgmma, the online softmax in registers, then O += P V with P fed from registers;
* register reallocation: the producer gives its registers back (setmaxnreg down to 24 a thread) so the
  two consumers can hold S, P and the output accumulator (up to 240 a thread);
* mbarriers between the partitions (ready: "the TMA copy has landed", empty: "both consumers are done
  with this slot").

The function `gluon_attention(q, k, v, causal=False, sm_scale=None) -> (out, lse)` has the contract of
lesson 10's `attention`: q, k, v (B, H, N, D) float16, out (B, H, N, D), lse (B, H, N) float32, the
natural-log logsumexp of each row's scaled scores.

FA3's two scheduling steps are there behind flags (gluon_attention's overlap= and pingpong=, the
kernel's OVERLAP and PINGPONG; both off, the default, is the plain schedule, compiled as before):
* OVERLAP: each consumer issues this tile's S = Q K^T together with the previous tile's O += P V, and
  runs this tile's softmax while the tensor cores do the O += P V;
* PINGPONG: the two consumers take turns on the tensor cores, one's softmax while the other's matmuls
  run, handing the turn over through two more mbarriers.
And a third consumer (gluon_attention's consumers=3, the kernel's CONSUMERS), FA3's arrangement at
D = 64: blocks of 192 query rows, three consumer warpgroups at 160 to 168 registers a thread beside
the producer's 24, each reading K and V once for 192 rows; causal, a warpgroup reads only the key tiles its
own rows see and releases the block's last ones unread.
And persistent programs (gluon_attention's persistent=True, the kernel's PERSISTENT), with the plain
schedule: one program per SM, walking query blocks; its producer warp takes each next block from a
counter in global memory (longest causal blocks first, as few heads at a time as give every program
a block, so that their K and V stay in L2), tells the consumers its number through shared memory, and
loads its Q behind a barrier pair for Q. With q_buffers=2 (the kernel's Q_BUFFERS) Q has two buffers,
each with its own barrier pair, so that the next block's Q can land while this block runs.
Each schedule is checked and timed on Hopper GPUs (tests/gpu_gluon_check.py), compiled for sm_90
without one (tests/test_gluon_compile.py), and its barrier protocol run through every interleaving on
a model (tests/test_gluon_protocol.py).

Importing this module needs no GPU: the kernel is defined here, and compiled at its first launch.
Gluon kernels do not run under Triton's CPU interpreter.
"""

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma,
                                                              warpgroup_mma, warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

LOG2E = 1.4426950408889634   # log2(e): exp(x) == exp2(x * LOG2E)
LN2 = gl.constexpr(0.6931471805599453)   # ln(2): log(x) == log2(x) * LN2

# The TMA load was renamed between Triton releases: 3.6 has tma.async_copy_global_to_shared, later ones
# tma.async_load (the old name is kept there only to raise an error). The kernels call `tma_load`, the
# one this Triton has, picked here at import.
tma_load = tma.async_load if hasattr(tma, "async_load") else tma.async_copy_global_to_shared

PRODUCER_REGS = gl.constexpr(24)   # setmaxnreg for the producer's warpgroup: the least a thread may have
# Per number of consumer warpgroups (64 query rows each): (setmaxnreg for the consumers that are worker
# partitions, the launch's maxnreg). Two: 12 warps (4 + 4 + 1, rounded up to whole warpgroups) * 32 *
# 168 <= 65536 registers; inside the partitions the three warpgroups share 3 * 168 = 504 registers a
# thread: the producer 24, consumer 1 240, and the default partition (consumer 0) what is left,
# 504 - 24 - 240 = 240 (the PTX's setmaxnreg values say so). Three: 16 warps * 32 * 128 = 65536;
# 4 * 128 = 512 a thread shared as 24, 160, 160 and the rest, 168, for consumer 0.
REGISTERS = {2: (240, 168), 3: (160, 128)}


# Row max and row sum through gl.reduce with combine functions of our own: gl.max / gl.sum are built on
# triton.jit helpers, which become interpreter functions when Triton was imported with TRITON_INTERPRET=1
# (the course does that on a CPU), and compile_for_hopper must still work there.
@gluon.jit
def _max_combine(a, b):
    return gl.maximum(a, b)


@gluon.jit
def _add_combine(a, b):
    return a + b


@gluon.jit
def _key_tiles(start_m, n_ctx, CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr):
    """(n_plain, n_tiles): this query block (BLOCK_M rows from start_m) visits key tiles 0 .. n_tiles-1,
    of which the first n_plain need no mask. Producer and consumers call this same function, so they
    agree on the loop count.

    Full attention: every key tile, the last one masked if N is not a multiple of BLOCK_N.
    Causal: the keys before start_m are seen by all the block's rows (no mask); the tiles from there to
    the block's last key need the diagonal mask. Where BLOCK_N divides BLOCK_M the unmasked tiles end
    exactly at start_m; otherwise (192 rows, tiles of 128) the tile across start_m is masked too."""
    if CAUSAL:
        hi = gl.minimum(start_m + BLOCK_M, n_ctx)
        n_plain = start_m // BLOCK_N
    else:
        hi = n_ctx
        n_plain = n_ctx // BLOCK_N
    n_tiles = (hi + BLOCK_N - 1) // BLOCK_N
    return n_plain, n_tiles


# ---------------------------------------------------------------- the producer: 1 warp, TMA only
#
# Barrier protocol for ring slot s (tile j lives in slot j % NUM_STAGES; it is the u-th use of the slot,
# u = j // NUM_STAGES). An mbarrier completes a "phase" each time its expected arrivals (and, for TMA,
# its expected bytes) are in; a waiter names the parity of the phase it waits for, (u & 1) here.
#   k_ready[s], v_ready[s]  count 1: the producer's expect() is the one arrival, the TMA engine then
#                           delivers the bytes. Consumers wait for parity (u & 1) before reading.
#   k_empty[s], v_empty[s]  count 2: each consumer warpgroup arrives once when its wgmma reading K (for
#                           k_empty: S = Q K^T) or V (v_empty: O += P V) of that slot has finished. K
#                           and V come free apart: a slot's K as soon as its S is computed, its V only
#                           after the softmax and the PV, so the next K can land meanwhile. The producer
#                           waits for parity (u & 1) ^ 1 before overwriting: for u = 0 that is the phase
#                           "before" the first, which a fresh barrier reports as complete, so the first
#                           NUM_STAGES fills do not wait.
#                           (With three consumers, CONSUMERS = 3, the empty barriers count 3.)
#   q_ready                 count 1, used once (parity 0): every consumer's 64 rows of Q.
# PERSISTENT: the ring's tiles are counted on from one block to the next (tile j of a block goes through
# the ring as ring0 + j), and Q has Q_BUFFERS buffers (1, or 2 by choice), each with a barrier pair
# of its own. The program's k-th block uses buffer b = k % Q_BUFFERS, for the u-th time,
# u = k // Q_BUFFERS:
#   q_ready[b]              the producer's expect (or, after the last block, a plain arrival: no block)
#                           completes phase u; consumers wait for parity u & 1, then read the block's
#                           number from item_smem[b] (written before the arrival, so visible after it).
#   q_empty[b]              count CONSUMERS: each consumer arrives once its block's last S = Q K^T is
#                           done. The producer waits for parity (u & 1) ^ 1 before writing block k's
#                           number and loading its Q (the first wait on each buffer passes: the phase
#                           before a fresh barrier's first counts as complete). With two buffers the
#                           next block's Q is loaded as soon as the producer gets to it, not only once
#                           this block's last S is done.


@gluon.jit
def _block_of(item, group_heads, n_heads, n_ctx, CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr):
    """PERSISTENT: work item -> (start_m, row_base) of its query block. The heads go in groups of
    group_heads, just enough to give every program a block (_group_heads); inside a group the
    items run through its heads fastest, causal with the blocks of the most key tiles first. The
    programs at work at once then share as few heads' K and V as they can, which stay in L2."""
    n_blocks = (n_ctx + BLOCK_M - 1) // BLOCK_M
    group = item // (group_heads * n_blocks)
    heads = gl.minimum(group_heads, n_heads - group * group_heads)   # the last group may be smaller
    rest = item - group * group_heads * n_blocks
    block = rest // heads
    if CAUSAL:
        block = n_blocks - 1 - block
    return block * BLOCK_M, (group * group_heads + rest % heads) * n_ctx


@gluon.jit
def _group_heads(n_ctx, BLOCK_M: gl.constexpr):
    """PERSISTENT: the fewest heads whose query blocks give every program one: cdiv(programs, blocks)."""
    return gl.cdiv(gl.num_programs(0), gl.cdiv(n_ctx, BLOCK_M))


@gluon.jit
def _producer(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_ready, q_empty, k_ready, v_ready, k_empty,
              v_empty, item_smem, counter_ptr, row_base, start_m, n_heads, n_ctx, HEAD_DIM: gl.constexpr,
              BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr, CONSUMERS: gl.constexpr,
              PERSISTENT: gl.constexpr):
    """Load partition: one query block (start_m, row_base), or, PERSISTENT, block after block: the
    program's own first, then each taken from the counter, told to the consumers through item_smem; the
    ring's count of tiles runs on from one block to the next."""
    if PERSISTENT:
        n_items = n_heads * gl.cdiv(n_ctx, 64 * CONSUMERS)
        group_heads = _group_heads(n_ctx, 64 * CONSUMERS)
        Q_BUFFERS: gl.constexpr = q_smem.shape[0] // CONSUMERS
        ring0 = 0   # tiles through the ring before this block
        count = 0   # blocks before this one: Q's phases
        item = gl.program_id(0)
        while item < n_items:
            start_m, row_base = _block_of(item, group_heads, n_heads, n_ctx, CAUSAL, 64 * CONSUMERS)
            # Block count's Q goes to buffer b = count % Q_BUFFERS, free (with its item_smem) once every
            # consumer has read Q for the last S of the block Q_BUFFERS before (the first wait on each
            # buffer passes: a fresh barrier's phase "before the first")
            b = count % Q_BUFFERS
            mbarrier.wait(q_empty.index(b), ((count // Q_BUFFERS) & 1) ^ 1)
            _tell(item_smem.index(b), item)   # seen by the consumers once q_ready[b]'s phase completes
            count += 1
            ring0 += _produce_block(q_desc, k_desc, v_desc, q_smem, b * CONSUMERS, k_smem, v_smem,
                                    q_ready.index(b), k_ready, v_ready, k_empty, v_empty, row_base, start_m,
                                    n_ctx, ring0, HEAD_DIM, BLOCK_N, NUM_STAGES, CAUSAL, CONSUMERS)
            # The next block: one counter for all programs. Every program takes exactly one number past
            # the last block, so the numbers taken are 0 .. n_items - 1 in all, and the program that takes
            # the last sets the counter back to 0 for the next launch.
            taken = gl.atomic_add(counter_ptr, 1, sem="relaxed")
            if taken == n_items - 1:
                gl.store(counter_ptr, 0)
            item = gl.num_programs(0) + taken
        b = count % Q_BUFFERS
        mbarrier.wait(q_empty.index(b), ((count // Q_BUFFERS) & 1) ^ 1)
        _tell(item_smem.index(b), item)                 # a block past the last: the consumers stop
        mbarrier.arrive(q_ready.index(b), count=1)      # a phase with no bytes
    else:
        _produce_block(q_desc, k_desc, v_desc, q_smem, 0, k_smem, v_smem, q_ready.index(0), k_ready, v_ready,
                       k_empty, v_empty, row_base, start_m, n_ctx, 0, HEAD_DIM, BLOCK_N, NUM_STAGES, CAUSAL,
                       CONSUMERS)


@gluon.jit
def _tell(item_smem, item):
    """PERSISTENT: the producer (one warp) writes the next block's number for the consumers."""
    item_smem.store(gl.zeros([1], gl.int32, gl.BlockedLayout([1], [32], [1], [0])) + item)


@gluon.jit
def _told(item_smem):
    """PERSISTENT: a consumer warpgroup (four warps) reads the block's number the producer wrote."""
    return gl.reduce(item_smem.load(gl.BlockedLayout([1], [32], [4], [0])), 0, _max_combine)


@gluon.jit
def _produce_block(q_desc, k_desc, v_desc, q_smem, q_first, k_smem, v_smem, q_ready, k_ready, v_ready,
                   k_empty, v_empty, row_base, start_m, n_ctx, ring0, HEAD_DIM: gl.constexpr,
                   BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                   CONSUMERS: gl.constexpr):
    """One query block's loads: its Q into q_smem[q_first ...] behind q_ready, its key tile j through the
    ring as tile ring0 + j. Q, K, V are seen as one (B*H*N, D) matrix: this head's rows start at
    row_base. Returns the block's key tiles."""
    # Q: a box of 64 rows per consumer. Rows past N belong to the next head (or read as zeros past the
    # tensor's end); their results are never stored.
    mbarrier.expect(q_ready, CONSUMERS * 64 * HEAD_DIM * 2)
    for i in gl.static_range(CONSUMERS):
        tma_load(q_desc, [row_base + start_m + 64 * i, 0], q_ready, q_smem.index(q_first + i))

    n_plain, n_tiles = _key_tiles(start_m, n_ctx, CAUSAL, 64 * CONSUMERS, BLOCK_N)
    tile_bytes: gl.constexpr = BLOCK_N * HEAD_DIM * 2
    for j in range(n_tiles):
        slot = (ring0 + j) % NUM_STAGES
        phase = ((ring0 + j) // NUM_STAGES) & 1
        # Each of K and V: wait until both consumers released the slot's previous tile (free the first
        # time round), then load. They land on barriers of their own, so a consumer can start
        # S = Q K^T before V has landed. Keys past N come from the next head (or zeros): the consumers
        # mask their scores to -inf.
        mbarrier.wait(k_empty.index(slot), phase ^ 1)
        mbarrier.expect(k_ready.index(slot), tile_bytes)
        tma_load(k_desc, [row_base + j * BLOCK_N, 0], k_ready.index(slot), k_smem.index(slot))
        mbarrier.wait(v_empty.index(slot), phase ^ 1)
        mbarrier.expect(v_ready.index(slot), tile_bytes)
        tma_load(v_desc, [row_base + j * BLOCK_N, 0], v_ready.index(slot), v_smem.index(slot))
    return n_tiles


# ---------------------------------------------------------------- the consumers: 2 warpgroups
#
# Each consumer is one warpgroup (4 warps, 128 threads) holding 64 query rows. Its layouts:
#   S_LAYOUT  the wgmma accumulator of S (64 x BLOCK_N, fp32): each row lives in the 4 threads of one
#             quad of one warp, so row max and row sum need only shuffles inside a warp;
#   O_LAYOUT  the accumulator of O (64 x HEAD_DIM), the same row ownership;
#   P_LAYOUT  P as the A operand of a register-sourced wgmma. For 16-bit types it holds each thread's
#             values where the S accumulator had them, so converting P costs (almost) nothing: this is
#             what lets FA3 skip the trip of P through shared memory.
#
# A key tile's work is split in helpers: _wait_ready (a tile's K or V has landed), _issue_qk (start
# S = Q K^T, do not wait for it), _softmax (the online-softmax step on one tile of scores) and, for the
# plain loop, _softmax_pv (wait for S, release K, softmax, O += P V, release V). OVERLAP and PINGPONG
# change only where the calls and the waits go.
#
# OVERLAP (FA3's intra-warpgroup overlap). The plain loop leaves the tensor cores idle during each
# softmax: S = Q K^T is waited for at once, the softmax runs, then O += P V. With OVERLAP the loop is
# shifted by one matmul, as FlashAttention-3 does: tile j's S = Q K^T and the previous tile's
# O += P V are issued together, and tile j's softmax runs on the CUDA cores while the tensor cores do
# the O += P V.
#     first tile  issue S(0) and wait for it (nothing is running yet that it could overlap); release
#                 K(0); softmax
#     tile j      issue S(j) and O += P(j-1) V(j-1); wait until at most 1 wgmma group is pending
#                 (S(j) done, the PV may run); release K(j); softmax(j); wait for all; release
#                 V(j-1); rescale O
#     at the end  O += P V of the last tile; wait; release its V
# (_attend_tiles_overlapped.) wgmma groups complete in the order they were issued, which is what makes
# warpgroup_mma_wait(1) mean "S(j) is done". O is rescaled to tile j's row max only after the PV that
# wrote it under tile j-1's max has completed. Held in registers across the softmax: one tile of
# scores (64 x BLOCK_N fp32, BLOCK_N / 2 registers a thread), P of the tile before (BLOCK_N / 4, fp16)
# and the accumulator (HEAD_DIM / 2): at D = 128 and BLOCK_N = 128, 160 of a consumer's 240.
# (Issuing S(j+1) before softmax(j) instead would overlap the same work but hold two tiles of fp32
# scores: 224 registers there, and ptxas spills.)
#
# PINGPONG (FA3's inter-warpgroup overlap). Two warpgroups issuing wgmmas at the same time share the
# tensor cores; the idea is rather to take turns: warpgroup 0 runs its matmuls while warpgroup 1 runs
# its softmax, then they swap. A "turn" is what a consumer issues between two of its softmaxes. In the
# plain loop: O += P V of tile j, then S = Q K^T of tile j+1 (turn 0 holds the first S = Q K^T, and
# turn j+1 begins before O += P V of tile j). With OVERLAP: turn j issues S(j) and O += P(j-1) V(j-1),
# turn 0 only S(0), and a last turn the last O += P V. Either way each consumer takes n_tiles + 1
# turns, and both take the same number: n_tiles is the CTA's, not the warpgroup's.
#
# Turn protocol (PINGPONG): two more mbarriers, turn[0] and turn[1], count 1 each.
#   take turn k   wait on turn[WG]: "the other warpgroup has handed the tensor cores over";
#   hand over     once the turn's wgmmas are issued (not finished), arrive on turn[1 - WG].
# Turns alternate: WG0's turn 0, WG1's 0, WG0's 1, WG1's 1, ... WG1's turn k waits for WG0's (k+1)-th
# hand-over, phase k of turn[1]: parity k & 1. WG0's turn k waits for WG1's k-th hand-over, phase k-1
# of turn[0]: parity (k - 1) & 1 = (k & 1) ^ 1; for k = 0 that is parity 1, the phase "before the first",
# which a fresh barrier reports as complete: WG0 starts without waiting. In one formula: (k + 1 - WG) & 1.
# One bit of parity is enough because a barrier cannot run two phases ahead of its waiter: a warpgroup
# hands over once per turn and takes its next turn only after the other has handed over in between.
# WG1's last hand-over completes a phase of turn[0] that nobody waits for; that is harmless.
# An mbarrier.arrive is lowered to a bar.sync of the warpgroup's 128 threads followed by one thread's
# arrive, so a hand-over comes after all four warps have issued their wgmmas.
#
# Ring depth. No schedule needs more than one slot to finish: a consumer never waits for a tile while
# the other consumer needs something from it to release that tile's slot. K and V come free apart,
# K as soon as its S = Q K^T is computed. (With one barrier for both, released after the PV, the turn
# holding O += P V of tile j would wait for K of tile j+1 while the other consumer, whose PV of tile j
# is in its next turn, still held the slot that K goes into: PINGPONG would need two slots, and with
# OVERLAP three, or hang.) tests/test_gluon_protocol.py runs every schedule on rings of 1 to 4 slots
# through every interleaving. More slots only let the producer run further ahead.


@gluon.jit
def _take_turn(turn_bars, WG: gl.constexpr, k):
    """PINGPONG: wait for warpgroup WG's k-th turn on the tensor cores (the protocol above)."""
    mbarrier.wait(turn_bars.index(WG), (k + 1 - WG) & 1)


@gluon.jit
def _hand_over(turn_bars, WG: gl.constexpr):
    """PINGPONG: this turn's wgmmas are issued; the other warpgroup's turn."""
    mbarrier.arrive(turn_bars.index(1 - WG), count=1)


@gluon.jit
def _wait_ready(ready, j, NUM_STAGES: gl.constexpr):
    """Wait until key tile j's K (or V, given v_ready) has landed in its ring slot."""
    mbarrier.wait(ready.index(j % NUM_STAGES), (j // NUM_STAGES) & 1)


@gluon.jit
def _issue_qk(q, k_smem, j, BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr, S_LAYOUT: gl.constexpr):
    """Start S = Q K^T for key tile j (its K landed); returns the wgmma's token (not waited for).
    K's slot is (BLOCK_N, D) in shared memory; permute views it as (D, BLOCK_N)."""
    s = gl.zeros([64, BLOCK_N], gl.float32, S_LAYOUT)
    return warpgroup_mma(q, k_smem.index(j % NUM_STAGES).permute((1, 0)), s, use_acc=False, is_async=True)


@gluon.jit
def _softmax(s, l_i, m_i, j, offs_m, n_ctx, qk_scale, BLOCK_N: gl.constexpr, S_LAYOUT: gl.constexpr, MASK,
             CAUSAL: gl.constexpr):
    """Key tile j's online-softmax step on its scores s: (p, alpha, l_i, m_i), p = exp2 of the scaled
    scores less the new row max, alpha the factor that brings what was summed under the old max to the
    new one. MASK: hide keys >= N, and when CAUSAL also keys past each row's own position (a constant
    where the caller's loop knows, a run-time bool where it does not)."""
    if MASK:
        offs_n = j * BLOCK_N + gl.arange(0, BLOCK_N, gl.SliceLayout(0, S_LAYOUT))
        keep = (offs_m[:, None] >= 0) & (offs_n[None, :] < n_ctx)
        if CAUSAL:
            keep = keep & (offs_m[:, None] >= offs_n[None, :])
        s = gl.where(keep, s, -float("inf"))
    # In base 2: scores scaled by sm_scale * log2(e) (qk_scale > 0, so the max of the scaled row is the
    # scaled max). Every row has a visible key in its first tile, so m_new is finite from the first
    # tile on and no -inf - -inf appears.
    m_new = gl.maximum(m_i, gl.reduce(s, 1, _max_combine) * qk_scale)
    p = gl.exp2(s * qk_scale - m_new[:, None])
    alpha = gl.exp2(m_i - m_new)
    l_i = l_i * alpha + gl.reduce(p, 1, _add_combine)
    return p, alpha, l_i, m_new


@gluon.jit
def _softmax_pv(s_token, acc, l_i, m_i, j, r, v_smem, v_ready, k_empty, v_empty, turn_bars, offs_m, n_ctx,
                qk_scale, WG: gl.constexpr, BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr,
                S_LAYOUT: gl.constexpr, O_LAYOUT: gl.constexpr, MASK: gl.constexpr, CAUSAL: gl.constexpr,
                PINGPONG: gl.constexpr):
    """The plain schedule, key tile j (tile r through the ring), its S = Q K^T issued: wait for S,
    release K's slot, online softmax, O += P V, release V's slot."""
    P_LAYOUT: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=O_LAYOUT, k_width=2)
    if PINGPONG:
        _hand_over(turn_bars, WG)   # this turn's S = Q K^T is issued: the other warpgroup's matmuls
    s = warpgroup_mma_wait(0, deps=[s_token])
    mbarrier.arrive(k_empty.index(r % NUM_STAGES), count=1)   # S is computed: K's slot is free
    p, alpha, l_i, m_i = _softmax(s, l_i, m_i, j, offs_m, n_ctx, qk_scale, BLOCK_N, S_LAYOUT, MASK, CAUSAL)
    acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, O_LAYOUT))[:, None]   # same rows, same threads

    # O += P V, P from registers, V's slot (BLOCK_N, D) straight from shared memory
    p16 = gl.convert_layout(p.to(gl.float16), P_LAYOUT)
    _wait_ready(v_ready, r, NUM_STAGES)
    if PINGPONG:
        _take_turn(turn_bars, WG, j + 1)   # V is here (waited outside the turn); now the tensor cores
    acc = warpgroup_mma(p16, v_smem.index(r % NUM_STAGES), acc, is_async=True)
    acc = warpgroup_mma_wait(0, deps=[acc])
    # The PV reading V has completed (wait(0) above): hand V's slot back. The arrive is issued once
    # for the warpgroup; v_empty counts 2, one per consumer.
    mbarrier.arrive(v_empty.index(r % NUM_STAGES), count=1)
    return acc, l_i, m_i


@gluon.jit
def _attend_tiles(acc, l_i, m_i, q, k_smem, v_smem, k_ready, v_ready, k_empty, v_empty, turn_bars, offs_m,
                  lo, hi, ring0, n_ctx, qk_scale, WG: gl.constexpr, BLOCK_N: gl.constexpr,
                  NUM_STAGES: gl.constexpr, S_LAYOUT: gl.constexpr, O_LAYOUT: gl.constexpr,
                  MASK: gl.constexpr, CAUSAL: gl.constexpr, PINGPONG: gl.constexpr):
    """Online softmax over key tiles lo .. hi-1 (tile indices; tile j is ring0 + j through the ring),
    each tile's S = Q K^T waited for at once."""
    for j in range(lo, hi):
        _wait_ready(k_ready, ring0 + j, NUM_STAGES)
        s_token = _issue_qk(q, k_smem, ring0 + j, BLOCK_N, NUM_STAGES, S_LAYOUT)
        acc, l_i, m_i = _softmax_pv(s_token, acc, l_i, m_i, j, ring0 + j, v_smem, v_ready, k_empty, v_empty,
                                    turn_bars, offs_m, n_ctx, qk_scale, WG, BLOCK_N, NUM_STAGES, S_LAYOUT,
                                    O_LAYOUT, MASK, CAUSAL, PINGPONG)
    return acc, l_i, m_i


@gluon.jit
def _overlapped_step(acc, p16, l_i, m_i, j, q, k_smem, v_smem, k_ready, v_ready, k_empty, v_empty, turn_bars,
                     offs_m, n_ctx, qk_scale, WG: gl.constexpr, BLOCK_N: gl.constexpr,
                     NUM_STAGES: gl.constexpr, S_LAYOUT: gl.constexpr, O_LAYOUT: gl.constexpr,
                     MASK: gl.constexpr, CAUSAL: gl.constexpr, PINGPONG: gl.constexpr):
    """OVERLAP, key tile j: S(j) = Q K(j)^T and O += P(j-1) V(j-1) issued together, tile j's softmax
    while the second runs. In: P(j-1) as the wgmma's A operand; out: P(j)."""
    P_LAYOUT: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=O_LAYOUT, k_width=2)
    _wait_ready(k_ready, j, NUM_STAGES)        # both operands first, outside the turn
    _wait_ready(v_ready, j - 1, NUM_STAGES)
    if PINGPONG:
        _take_turn(turn_bars, WG, j)
    s_token = _issue_qk(q, k_smem, j, BLOCK_N, NUM_STAGES, S_LAYOUT)
    acc = warpgroup_mma(p16, v_smem.index((j - 1) % NUM_STAGES), acc, is_async=True)
    if PINGPONG:
        _hand_over(turn_bars, WG)
    # wgmma groups complete in the order they were issued: with at most 1 pending, S(j) is done and
    # O += P V may still run, writing acc, which nothing touches until the wait(0) below
    s = warpgroup_mma_wait(1, deps=[s_token])
    mbarrier.arrive(k_empty.index(j % NUM_STAGES), count=1)        # S(j) is computed: K's slot is free
    p, alpha, l_i, m_i = _softmax(s, l_i, m_i, j, offs_m, n_ctx, qk_scale, BLOCK_N, S_LAYOUT, MASK, CAUSAL)
    p16 = gl.convert_layout(p.to(gl.float16), P_LAYOUT)
    acc = warpgroup_mma_wait(0, deps=[acc])
    mbarrier.arrive(v_empty.index((j - 1) % NUM_STAGES), count=1)  # the PV has read V(j-1)
    acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, O_LAYOUT))[:, None]   # now under tile j's max
    return acc, p16, l_i, m_i


@gluon.jit
def _attend_tiles_overlapped(acc, l_i, m_i, q, k_smem, v_smem, k_ready, v_ready, k_empty, v_empty, turn_bars,
                             offs_m, n_plain, n_tiles, n_ctx, qk_scale, WG: gl.constexpr,
                             BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr, S_LAYOUT: gl.constexpr,
                             O_LAYOUT: gl.constexpr, CAUSAL: gl.constexpr, PINGPONG: gl.constexpr):
    """Key tiles 0 .. n_tiles-1 with OVERLAP (FlashAttention-3's order): the loop is shifted by one matmul,
    so that each turn on the tensor cores issues S(j) = Q K(j)^T and O += P(j-1) V(j-1) together and
    the softmax of tile j runs while the second of them does.

        tile 0      S(0), waited for at once; release K(0); its softmax gives P(0)
        tile j      issue S(j) and O += P(j-1) V(j-1); wait for S(j) only; release K(j);
                    softmax(j) -> P(j); wait for O; release V(j-1); rescale O to tile j's row max
        at the end  O += P V of the last tile; release its V

    With PINGPONG each of those three is a turn on the tensor cores (turn j issues tile j's matmuls,
    turn n_tiles the last O += P V), its operands waited for before the turn is taken.

    What stays in registers between tiles is one tile of scores (fp32) and one of P (fp16, already
    in the wgmma's operand layout), beside the accumulator. At the loop's back edge no wgmma is in
    flight (the wait(0) before the rescale): where control flow meets, the compiler may copy registers,
    and a copy of registers a wgmma is still writing would make ptxas serialise every wgmma (its
    messages C7514 / C7517). The unmasked tiles and the masked ones get a loop each, MASK a constant
    in both; only the first tile's is decided at run time, with nothing in flight."""
    P_LAYOUT: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=O_LAYOUT, k_width=2)
    if n_tiles > 0:
        _wait_ready(k_ready, 0, NUM_STAGES)
        if PINGPONG:
            _take_turn(turn_bars, WG, 0)        # turn 0: the first S = Q K^T
        s_token = _issue_qk(q, k_smem, 0, BLOCK_N, NUM_STAGES, S_LAYOUT)
        if PINGPONG:
            _hand_over(turn_bars, WG)
        s = warpgroup_mma_wait(0, deps=[s_token])
        mbarrier.arrive(k_empty.index(0), count=1)
        # acc is still zero: nothing to rescale
        p, alpha, l_i, m_i = _softmax(s, l_i, m_i, 0, offs_m, n_ctx, qk_scale, BLOCK_N, S_LAYOUT,
                                      n_plain == 0, CAUSAL)
        p16 = gl.convert_layout(p.to(gl.float16), P_LAYOUT)
        for j in range(1, n_plain):
            acc, p16, l_i, m_i = _overlapped_step(acc, p16, l_i, m_i, j, q, k_smem, v_smem, k_ready, v_ready,
                                                  k_empty, v_empty, turn_bars, offs_m, n_ctx, qk_scale, WG,
                                                  BLOCK_N, NUM_STAGES, S_LAYOUT, O_LAYOUT, False, CAUSAL,
                                                  PINGPONG)
        for j in range(gl.maximum(1, n_plain), n_tiles):
            acc, p16, l_i, m_i = _overlapped_step(acc, p16, l_i, m_i, j, q, k_smem, v_smem, k_ready, v_ready,
                                                  k_empty, v_empty, turn_bars, offs_m, n_ctx, qk_scale, WG,
                                                  BLOCK_N, NUM_STAGES, S_LAYOUT, O_LAYOUT, True, CAUSAL,
                                                  PINGPONG)
        # the last tile's O += P V, in a turn of its own
        _wait_ready(v_ready, n_tiles - 1, NUM_STAGES)
        if PINGPONG:
            _take_turn(turn_bars, WG, n_tiles)
        acc = warpgroup_mma(p16, v_smem.index((n_tiles - 1) % NUM_STAGES), acc, is_async=True)
        if PINGPONG:
            _hand_over(turn_bars, WG)
        acc = warpgroup_mma_wait(0, deps=[acc])
        mbarrier.arrive(v_empty.index((n_tiles - 1) % NUM_STAGES), count=1)
    return acc, l_i, m_i


@gluon.jit
def _consumer(WG: gl.constexpr, q_smem, k_smem, v_smem, q_ready, q_empty, k_ready, v_ready, k_empty, v_empty,
              turn_bars, item_smem, o_ptr, lse_ptr, row_base, start_m, n_heads, n_ctx, qk_scale,
              HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr,
              CAUSAL: gl.constexpr, OVERLAP: gl.constexpr, PINGPONG: gl.constexpr, CONSUMERS: gl.constexpr,
              PERSISTENT: gl.constexpr):
    """Softmax/MMA partition WG (0 .. CONSUMERS-1): query rows start_m + 64*WG .. + 63 of one query block,
    or, PERSISTENT, of each block the producer tells it of, until one past the last."""
    if PERSISTENT:
        n_items = n_heads * gl.cdiv(n_ctx, 64 * CONSUMERS)
        group_heads = _group_heads(n_ctx, 64 * CONSUMERS)
        Q_BUFFERS: gl.constexpr = q_smem.shape[0] // CONSUMERS
        ring0 = 0   # tiles through the ring before this block
        count = 0   # blocks before this one: Q's phases
        mbarrier.wait(q_ready.index(0), 0)
        item = _told(item_smem.index(0))
        while item < n_items:
            start_m, row_base = _block_of(item, group_heads, n_heads, n_ctx, CAUSAL, 64 * CONSUMERS)
            # This block's Q buffer, b = count % Q_BUFFERS, named by a constant in each copy of the block's
            # code (one copy per buffer). With Q indexed by the run-time b, causal attention read shared
            # memory out of bounds on an H100 (Triton 3.6; compute-sanitizer: a wgmma's 2 KB read of Q at
            # an address past the allocation; full attention passed); with a constant, every check passes.
            # With one buffer the condition is a constant True (`or` stops at a constant): no branch, and
            # the same code as before Q had a second buffer (a run-time `if` cost warpgroup barriers).
            for b in gl.static_range(Q_BUFFERS):
                if Q_BUFFERS == 1 or count % Q_BUFFERS == b:
                    ring0 += _consume_block(WG, q_smem.index(b * CONSUMERS + WG), k_smem, v_smem,
                                            q_empty.index(b), k_ready, v_ready, k_empty, v_empty, turn_bars,
                                            o_ptr, lse_ptr, row_base, start_m, n_ctx, qk_scale, ring0,
                                            HEAD_DIM, BLOCK_N, NUM_STAGES, CAUSAL, OVERLAP, PINGPONG,
                                            CONSUMERS, PERSISTENT)
            count += 1
            mbarrier.wait(q_ready.index(count % Q_BUFFERS), (count // Q_BUFFERS) & 1)
            item = _told(item_smem.index(count % Q_BUFFERS))
    else:
        mbarrier.wait(q_ready.index(0), 0)
        _consume_block(WG, q_smem.index(WG), k_smem, v_smem, q_empty, k_ready, v_ready, k_empty, v_empty,
                       turn_bars, o_ptr, lse_ptr, row_base, start_m, n_ctx, qk_scale, 0, HEAD_DIM, BLOCK_N,
                       NUM_STAGES, CAUSAL, OVERLAP, PINGPONG, CONSUMERS, PERSISTENT)


@gluon.jit
def _consume_block(WG: gl.constexpr, q, k_smem, v_smem, q_empty, k_ready, v_ready, k_empty,
                   v_empty, turn_bars, o_ptr, lse_ptr, row_base, start_m, n_ctx, qk_scale, ring0,
                   HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr,
                   CAUSAL: gl.constexpr, OVERLAP: gl.constexpr, PINGPONG: gl.constexpr,
                   CONSUMERS: gl.constexpr, PERSISTENT: gl.constexpr):
    """One query block's rows start_m + 64*WG .. + 63, their Q (q) landed, q_empty the barrier that frees
    its buffer (PERSISTENT): its key tile j is tile ring0 + j through the ring. Returns the block's key
    tiles."""
    S_LAYOUT: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    O_LAYOUT: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HEAD_DIM, 16])
    ROW_S: gl.constexpr = gl.SliceLayout(1, S_LAYOUT)
    row0 = start_m + WG * 64
    offs_m = row0 + gl.arange(0, 64, ROW_S)
    m_i = gl.full([64], -float("inf"), gl.float32, ROW_S)
    l_i = gl.zeros([64], gl.float32, ROW_S)
    acc = gl.zeros([64, HEAD_DIM], gl.float32, O_LAYOUT)

    n_plain, n_tiles = _key_tiles(start_m, n_ctx, CAUSAL, 64 * CONSUMERS, BLOCK_N)
    # Causal, these rows see no key past row0 + 63, and in a block of three warpgroups the block's last
    # tile can hold only later keys. The plain schedule reads up to its own last tile (n_mine) and
    # releases the rest unread, after its epilogue; with OVERLAP or PINGPONG every warpgroup runs every
    # tile (the turns count on it).
    n_mine = n_tiles
    if CAUSAL and not OVERLAP and not PINGPONG:
        n_mine = (gl.minimum(row0 + 64, n_ctx) + BLOCK_N - 1) // BLOCK_N
    if OVERLAP:   # it takes and hands over its own turns
        acc, l_i, m_i = _attend_tiles_overlapped(
            acc, l_i, m_i, q, k_smem, v_smem, k_ready, v_ready, k_empty, v_empty, turn_bars, offs_m, n_plain,
            n_tiles, n_ctx, qk_scale, WG, BLOCK_N, NUM_STAGES, S_LAYOUT, O_LAYOUT, CAUSAL, PINGPONG)
    else:
        if PINGPONG:
            _take_turn(turn_bars, WG, 0)   # turn 0: the first S = Q K^T
        acc, l_i, m_i = _attend_tiles(acc, l_i, m_i, q, k_smem, v_smem, k_ready, v_ready, k_empty, v_empty,
                                      turn_bars, offs_m, 0, n_plain, ring0, n_ctx, qk_scale, WG, BLOCK_N,
                                      NUM_STAGES, S_LAYOUT, O_LAYOUT, False, CAUSAL, PINGPONG)
        acc, l_i, m_i = _attend_tiles(acc, l_i, m_i, q, k_smem, v_smem, k_ready, v_ready, k_empty, v_empty,
                                      turn_bars, offs_m, n_plain, n_mine, ring0, n_ctx, qk_scale, WG, BLOCK_N,
                                      NUM_STAGES, S_LAYOUT, O_LAYOUT, True, CAUSAL, PINGPONG)
        if PINGPONG:
            _hand_over(turn_bars, WG)   # the last turn held only the last O += P V
    if PERSISTENT:   # its last S = Q K^T is done: the producer may load the next block's Q
        mbarrier.arrive(q_empty, count=1)

    # Epilogue: O = acc / l, stored with a mask on the rows past N (a TMA store over the (B*H*N, D)
    # view would write them into the next head). lse in natural log. In the accumulator's layout a
    # thread holds 2 neighbouring values of every 8 columns, so a warp's store writes 16 bytes in each
    # of 8 rows. At D = 128 the output is first moved (through 16 KB of shared memory, where the ring
    # leaves room) into rows of 16-byte vectors, a warp writing two whole rows at a time. Timed on the
    # H200 while this kernel was written, that was faster at D = 128 and slower at D = 64, which stays
    # as it is.
    l_o = gl.convert_layout(l_i, gl.SliceLayout(1, O_LAYOUT))
    out = (acc / l_o[:, None]).to(gl.float16)
    if HEAD_DIM == 128 and NUM_STAGES * BLOCK_N <= 256:   # 3 slots of 128 keys fill shared memory
        STORE_LAYOUT: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [4, 1], [1, 0])
    else:
        STORE_LAYOUT: gl.constexpr = O_LAYOUT
    out = gl.convert_layout(out, STORE_LAYOUT)
    offs_mo = row0 + gl.arange(0, 64, gl.SliceLayout(1, STORE_LAYOUT))
    offs_d = gl.arange(0, HEAD_DIM, gl.SliceLayout(0, STORE_LAYOUT))
    rows = (row_base + offs_mo).to(gl.int64)
    o_mask = (offs_mo[:, None] < n_ctx) & (offs_d[None, :] < HEAD_DIM)
    gl.store(o_ptr + rows[:, None] * HEAD_DIM + offs_d[None, :], out, mask=o_mask)
    lse = (m_i + gl.log2(l_i)) * LN2
    gl.store(lse_ptr + (row_base + offs_m).to(gl.int64), lse, mask=offs_m < n_ctx)

    # The tiles past n_mine: each waited for until it has landed, so that the arrival counts toward
    # that tile's phase of the slot's barrier, not the one before it.
    for j in range(ring0 + n_mine, ring0 + n_tiles):
        _wait_ready(k_ready, j, NUM_STAGES)
        mbarrier.arrive(k_empty.index(j % NUM_STAGES), count=1)
        _wait_ready(v_ready, j, NUM_STAGES)
        mbarrier.arrive(v_empty.index(j % NUM_STAGES), count=1)
    return n_tiles


# ---------------------------------------------------------------- the kernel: allocate, fork


@gluon.jit
def gluon_attention_kernel(q_desc, k_desc, v_desc, o_ptr, lse_ptr, counter_ptr, n_heads, n_ctx, qk_scale,
                           HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr,
                           CAUSAL: gl.constexpr, OVERLAP: gl.constexpr, PINGPONG: gl.constexpr,
                           CONSUMERS: gl.constexpr, CONSUMER_REGS: gl.constexpr, PERSISTENT: gl.constexpr,
                           Q_BUFFERS: gl.constexpr):
    """Grid (cdiv(N, 64 * CONSUMERS), B*H), a program a block; or, PERSISTENT, (programs,), each walking
    blocks taken from the counter at counter_ptr (zero before the launch, and again after it).
    q/k/v_desc: host TMA descriptors over the (B*H*N, D) view, boxes of 64 rows (Q) and BLOCK_N rows
    (K, V). o_ptr (B*H*N, D) fp16 and lse_ptr (B*H*N,) fp32 contiguous. OVERLAP, PINGPONG: FA3's two
    scheduling steps (see the consumers' comment); both off is the plain schedule. CONSUMERS: 2 or 3
    consumer warpgroups of 64 query rows (CONSUMER_REGS: the setmaxnreg of those that are worker
    partitions, REGISTERS). Q_BUFFERS: Q's buffers, 1, or 2 where PERSISTENT."""
    gl.static_assert(CONSUMERS == 2 or CONSUMERS == 3, "two or three consumer warpgroups")
    gl.static_assert(not PINGPONG or CONSUMERS == 2, "the ping-pong's turns are for two consumers")
    gl.static_assert(not PERSISTENT or not (OVERLAP or PINGPONG), "persistent: the plain schedule only")
    gl.static_assert(Q_BUFFERS == 1 or (Q_BUFFERS == 2 and PERSISTENT), "two Q buffers: persistent only")
    BLOCK_M: gl.constexpr = 64 * CONSUMERS
    pid = gl.program_id(0)
    if PERSISTENT:   # each partition walks the program's blocks itself (_block_of)
        start_m = 0
    elif CAUSAL:     # the query blocks with the most key tiles start first
        start_m = (gl.num_programs(0) - 1 - pid) * BLOCK_M
    else:
        start_m = pid * BLOCK_M
    row_base = gl.program_id(1) * n_ctx

    # Shared memory: Q (Q_BUFFERS x CONSUMERS x 64 x D), the K and V rings (NUM_STAGES x BLOCK_N x D
    # each), the barriers. The descriptors' NVMMA layouts (128-byte swizzle) are what both TMA and wgmma
    # read.
    q_smem = gl.allocate_shared_memory(gl.float16, [Q_BUFFERS * CONSUMERS, 64, HEAD_DIM], q_desc.layout)
    k_smem = gl.allocate_shared_memory(gl.float16, [NUM_STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(gl.float16, [NUM_STAGES, BLOCK_N, HEAD_DIM], v_desc.layout)
    q_ready = gl.allocate_shared_memory(gl.int64, [Q_BUFFERS, 1], mbarrier.MBarrierLayout())
    if PERSISTENT:   # a Q buffer free again: one arrival from each consumer; each buffer's block's number
        q_empty = gl.allocate_shared_memory(gl.int64, [Q_BUFFERS, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(Q_BUFFERS):
            mbarrier.init(q_empty.index(i), count=CONSUMERS)
        item_smem = gl.allocate_shared_memory(gl.int32, [Q_BUFFERS, 1], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    else:
        q_empty: gl.constexpr = None
        item_smem: gl.constexpr = None
    k_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(Q_BUFFERS):
        mbarrier.init(q_ready.index(i), count=1)
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=CONSUMERS)   # one arrival from each consumer warpgroup
        mbarrier.init(v_empty.index(i), count=CONSUMERS)
    if PINGPONG:   # the consumers' turns on the tensor cores: one arrival (the other's hand-over) each
        turn_bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        mbarrier.init(turn_bars.index(0), count=1)
        mbarrier.init(turn_bars.index(1), count=1)
    else:
        turn_bars: gl.constexpr = None   # no turns: nothing to pass
    fence_async_shared()   # the initialised barriers must be visible to the TMA engine (async proxy)

    # Fork: the default partition (this kernel's num_warps = 4 warps) is consumer 0; the workers are
    # the other consumers (4 warps each) and the producer (1 warp). All join again when the functions
    # return.
    # (Gluon takes the partitions as a list written out in the call: neither a partition kept in a
    # variable nor a list put together from parts compiles. So two calls, for two and three.)
    if CONSUMERS == 2:
        gl.warp_specialize([
            (_consumer, (0, q_smem, k_smem, v_smem, q_ready, q_empty, k_ready, v_ready, k_empty, v_empty,
                         turn_bars, item_smem, o_ptr, lse_ptr, row_base, start_m, n_heads, n_ctx, qk_scale,
                         HEAD_DIM, BLOCK_N, NUM_STAGES, CAUSAL, OVERLAP, PINGPONG, CONSUMERS, PERSISTENT)),
            (_consumer, (1, q_smem, k_smem, v_smem, q_ready, q_empty, k_ready, v_ready, k_empty, v_empty,
                         turn_bars, item_smem, o_ptr, lse_ptr, row_base, start_m, n_heads, n_ctx, qk_scale,
                         HEAD_DIM, BLOCK_N, NUM_STAGES, CAUSAL, OVERLAP, PINGPONG, CONSUMERS, PERSISTENT)),
            (_producer, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_ready, q_empty, k_ready,
                         v_ready, k_empty, v_empty, item_smem, counter_ptr, row_base, start_m, n_heads, n_ctx,
                         HEAD_DIM, BLOCK_N, NUM_STAGES, CAUSAL, CONSUMERS, PERSISTENT)),
        ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])
    else:
        gl.warp_specialize([
            (_consumer, (0, q_smem, k_smem, v_smem, q_ready, q_empty, k_ready, v_ready, k_empty, v_empty,
                         turn_bars, item_smem, o_ptr, lse_ptr, row_base, start_m, n_heads, n_ctx, qk_scale,
                         HEAD_DIM, BLOCK_N, NUM_STAGES, CAUSAL, OVERLAP, PINGPONG, CONSUMERS, PERSISTENT)),
            (_consumer, (1, q_smem, k_smem, v_smem, q_ready, q_empty, k_ready, v_ready, k_empty, v_empty,
                         turn_bars, item_smem, o_ptr, lse_ptr, row_base, start_m, n_heads, n_ctx, qk_scale,
                         HEAD_DIM, BLOCK_N, NUM_STAGES, CAUSAL, OVERLAP, PINGPONG, CONSUMERS, PERSISTENT)),
            (_consumer, (2, q_smem, k_smem, v_smem, q_ready, q_empty, k_ready, v_ready, k_empty, v_empty,
                         turn_bars, item_smem, o_ptr, lse_ptr, row_base, start_m, n_heads, n_ctx, qk_scale,
                         HEAD_DIM, BLOCK_N, NUM_STAGES, CAUSAL, OVERLAP, PINGPONG, CONSUMERS, PERSISTENT)),
            (_producer, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_ready, q_empty, k_ready,
                         v_ready, k_empty, v_empty, item_smem, counter_ptr, row_base, start_m, n_heads, n_ctx,
                         HEAD_DIM, BLOCK_N, NUM_STAGES, CAUSAL, CONSUMERS, PERSISTENT)),
        ], [4, 4, 1], [CONSUMER_REGS, CONSUMER_REGS, PRODUCER_REGS])

    for i in gl.static_range(Q_BUFFERS):
        mbarrier.invalidate(q_ready.index(i))
        if PERSISTENT:
            mbarrier.invalidate(q_empty.index(i))
    for i in gl.static_range(NUM_STAGES):
        mbarrier.invalidate(k_ready.index(i))
        mbarrier.invalidate(v_ready.index(i))
        mbarrier.invalidate(k_empty.index(i))
        mbarrier.invalidate(v_empty.index(i))
    if PINGPONG:
        mbarrier.invalidate(turn_bars.index(0))
        mbarrier.invalidate(turn_bars.index(1))


# ---------------------------------------------------------------- host side


def tile_config(head_dim, overlap=False, pingpong=False):
    """(BLOCK_N, NUM_STAGES) for a head size, within the 227 KB (232448 bytes) of shared memory a Hopper
    CTA may have. Bytes: Q 2*64*D*2 (3*64*D*2 with three consumers), each ring slot 2*BLOCK_N*D*2 (K
    and V), plus the barriers.
      D=64:  Q 16 KB + 4 slots * 32 KB = 144 KB (three consumers: 152 KB)
      D=128: Q 32 KB + 2 slots * 64 KB = 160 KB (three consumers: 176 KB). 3 slots (224 KB, 229664 bytes
             compiled) also fit with two consumers, with room for nothing else (gluon_attention's
             num_stages tries it); with three they do not."""
    return {64: (128, 4), 128: (128, 2)}[head_dim]


def tensor_descriptors(q, k, v, block_n):
    """Host TMA descriptors over the (B*H*N, D) views: Q in boxes of 64 rows, K and V of block_n."""
    D = q.shape[-1]
    q_layout = gl.NVMMASharedLayout.get_default_for([64, D], gl.float16)
    kv_layout = gl.NVMMASharedLayout.get_default_for([block_n, D], gl.float16)
    return (TensorDescriptor.from_tensor(q.view(-1, D), [64, D], q_layout),
            TensorDescriptor.from_tensor(k.view(-1, D), [block_n, D], kv_layout),
            TensorDescriptor.from_tensor(v.view(-1, D), [block_n, D], kv_layout))


_COUNTERS = {}   # (device, stream) -> the persistent programs' block counter (int32, 0 between launches)


def _counter(device):
    """The block counter of persistent launches on the current stream (launches on one stream run one
    after another): zeroed once, and set back to 0 by the last program of each launch, so that a CUDA
    graph may replay it."""
    key = (device, torch.cuda.current_stream(device).cuda_stream)
    if key not in _COUNTERS:
        _COUNTERS[key] = torch.zeros(1, dtype=torch.int32, device=device)
    return _COUNTERS[key]


def gluon_attention(q, k, v, causal=False, sm_scale=None, block_n=None, num_stages=None, overlap=False,
                    pingpong=False, consumers=2, persistent=False, q_buffers=1):
    """softmax(q k^T * sm_scale) v for q, k, v (B, H, N, D) float16: (out, lse), lse natural-log.
    block_n, num_stages: the key tile and ring depth, tile_config(D, overlap, pingpong) unless given
    (block_n 64 or 128). overlap, pingpong: FA3's intra- and inter-warpgroup overlap (the kernel's
    OVERLAP and PINGPONG); both off is the plain schedule. consumers: 2 or 3 warpgroups of 64 query rows
    (three: no pingpong). persistent: one program per SM, each walking query blocks (the plain schedule
    only). q_buffers: 2 gives persistent programs a second Q buffer (not beside three consumers at
    D = 128: it does not fit in shared memory beside their ring)."""
    assert q.dim() == 4 and q.shape == k.shape == v.shape, "q, k, v must all be (B, H, N, D)"
    assert q.dtype == k.dtype == v.dtype == torch.float16, "q, k, v must be float16"
    B, H, N, D = q.shape
    assert D in (64, 128), "head dimension must be 64 or 128"
    sm_scale = D ** -0.5 if sm_scale is None else sm_scale
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    out = torch.empty_like(q)
    lse = torch.empty((B, H, N), device=q.device, dtype=torch.float32)
    default_n, default_stages = tile_config(D, overlap, pingpong)
    block_n = block_n or default_n
    stages = num_stages or default_stages
    assert block_n in (64, 128), "block_n: 64 or 128 keys a tile"
    assert stages >= 1, "num_stages: at least one slot in the ring"
    assert consumers in REGISTERS and not (pingpong and consumers != 2), \
        "consumers: 2 or 3 warpgroups (the ping-pong takes 2)"
    assert not (persistent and (overlap or pingpong)), "persistent: the plain schedule only"
    assert q_buffers == 1 or (q_buffers == 2 and persistent), "q_buffers: 1, or 2 with persistent=True"
    assert not (q_buffers == 2 and consumers == 3 and D == 128), \
        "q_buffers=2 with three consumers at D = 128: shared memory holds one Q buffer beside their ring"
    consumer_regs, maxnreg = REGISTERS[consumers]
    q_desc, k_desc, v_desc = tensor_descriptors(q, k, v, block_n)
    blocks = triton.cdiv(N, 64 * consumers)
    if persistent:   # one program per SM (fewer if there are fewer blocks), each walking blocks
        grid = (min(torch.cuda.get_device_properties(q.device).multi_processor_count, blocks * B * H),)
    else:
        grid = (blocks, B * H)
    gluon_attention_kernel[grid](q_desc, k_desc, v_desc, out, lse, _counter(q.device), B * H, N,
                                 sm_scale * LOG2E,
                                 HEAD_DIM=D, BLOCK_N=block_n, NUM_STAGES=stages, CAUSAL=causal,
                                 OVERLAP=overlap, PINGPONG=pingpong, CONSUMERS=consumers,
                                 CONSUMER_REGS=consumer_regs, PERSISTENT=persistent, Q_BUFFERS=q_buffers,
                                 num_warps=4, maxnreg=maxnreg)
    return out, lse


def compile_for_hopper(head_dim, causal, block_n=None, num_stages=None, overlap=False, pingpong=False,
                       consumers=2, persistent=False, q_buffers=1):
    """Compile the kernel for sm_90 without a GPU (ptxas runs on the host): the CompiledKernel, whose
    .asm holds "ttgir", "ptx", "cubin", and whose .metadata has n_regs, n_spills and shared (bytes).
    The descriptors' types come from ones built over a small CPU tensor of the same dtype and boxes.
    .ptxas_log keeps what ptxas printed (for ptxas_report), or None where Triton's cache had the kernel."""
    from triton.runtime.jit import mangle_type

    default_n, default_stages = tile_config(head_dim, overlap, pingpong)
    block_n = block_n or default_n
    stages = num_stages or default_stages
    x = torch.empty((256, head_dim), dtype=torch.float16)
    q_desc, k_desc, _ = tensor_descriptors(x, x, x, block_n)
    signature = {"q_desc": mangle_type(q_desc), "k_desc": mangle_type(k_desc), "v_desc": mangle_type(k_desc),
                 "o_ptr": "*fp16", "lse_ptr": "*fp32", "counter_ptr": "*i32", "n_heads": "i32",
                 "n_ctx": "i32", "qk_scale": "fp32",
                 "HEAD_DIM": "constexpr", "BLOCK_N": "constexpr", "NUM_STAGES": "constexpr",
                 "CAUSAL": "constexpr", "OVERLAP": "constexpr", "PINGPONG": "constexpr",
                 "CONSUMERS": "constexpr", "CONSUMER_REGS": "constexpr", "PERSISTENT": "constexpr",
                 "Q_BUFFERS": "constexpr"}
    consumer_regs, maxnreg = REGISTERS[consumers]
    constexprs = {"HEAD_DIM": head_dim, "BLOCK_N": block_n, "NUM_STAGES": stages, "CAUSAL": causal,
                  "OVERLAP": overlap, "PINGPONG": pingpong, "CONSUMERS": consumers,
                  "CONSUMER_REGS": consumer_regs, "PERSISTENT": persistent, "Q_BUFFERS": q_buffers}
    return compile_gluon_for_hopper(gluon_attention_kernel, signature, constexprs, maxnreg)


def compile_gluon_for_hopper(kernel, signature, constexprs, maxnreg):
    """A Gluon kernel of 4 warps (its default partition) compiled for sm_90 on the host, with ptxas's log
    kept as .ptxas_log (Triton prints it; kept, so ptxas need not run twice), or None where Triton's
    cache had the kernel."""
    import contextlib
    import io

    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    src = GluonASTSource(kernel, signature=signature, constexprs=constexprs)
    log, dump = io.StringIO(), knobs.nvidia.dump_ptxas_log
    try:
        knobs.nvidia.dump_ptxas_log = True
        with contextlib.redirect_stdout(log):
            compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                                      options={"num_warps": 4, "maxnreg": maxnreg})
    finally:
        knobs.nvidia.dump_ptxas_log = dump
    compiled.ptxas_log = log.getvalue() if "Used" in log.getvalue() else None
    return compiled


def ptxas_report(compiled):
    """ptxas's own account of a compiled kernel's PTX for sm_90a: {"registers", "spill_stores",
    "spill_loads", "smem_static", "serialized", "text"}. (A CompiledKernel's n_regs / n_spills are only
    filled in when it is loaded onto a GPU; metadata.shared is known at compile time.)

    The log is the one compile_for_hopper kept; where there is none (the kernel came from Triton's
    cache), ptxas runs again through this Triton's own step from PTX to cubin, so with Triton's flags
    either way (3.9 adds --regAllocOptLevel=2, which changes what spills). (Run again, ptxas does not
    always give the same bytes: it built two different cubins from one spilling kernel's PTX; the
    report is of its log, not of a cubin.) "registers" is the launch's count (maxnreg); past setmaxnreg each
    partition has its own budget, which ptxas does not print. "serialized": ptxas's messages C7514 /
    C7517, where it made wgmmas wait for each other (an accumulator's registers touched while its wgmma
    ran): correct, but nothing overlaps."""
    import contextlib
    import io
    import re

    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import CUDABackend

    text = getattr(compiled, "ptxas_log", None)
    if text is None:
        backend = CUDABackend(GPUTarget("cuda", 90, 32))
        options = backend.parse_options({"num_warps": 4, "maxnreg": compiled.metadata.maxnreg})
        log, dump = io.StringIO(), knobs.nvidia.dump_ptxas_log
        try:
            knobs.nvidia.dump_ptxas_log = True
            with contextlib.redirect_stdout(log):
                backend.make_cubin(compiled.asm["ptx"], {}, options, 90)
        finally:
            knobs.nvidia.dump_ptxas_log = dump
        text = log.getvalue()

    def number(pattern):
        found = re.search(pattern, text)
        return int(found.group(1)) if found else None

    return {"registers": number(r"Used (\d+) registers"), "spill_stores": number(r"(\d+) bytes spill stores"),
            "spill_loads": number(r"(\d+) bytes spill loads"), "smem_static": number(r"(\d+) bytes smem"),
            "serialized": [line.strip() for line in text.splitlines() if "C7514" in line or "C7517" in line],
            "text": text}
