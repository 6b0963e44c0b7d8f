"""A FlashAttention-3-style attention backward for Hopper (sm_90), written in Gluon.

What it computes is lesson 10's `attention_backward`: given q, k, v (B, H, N, D) float16, the forward's
out and lse, and dout, it returns dq, dk, dv. How the work is laid out is FlashAttention-3's at D = 128:

* one CTA per block of 128 keys of one (batch, head);
* warp specialisation, as in the forward (solutions/gluon_attention.py):
    - a producer of 1 warp loads the block's K and V once, then streams Q and dO in tiles of 64
      query rows through a ring of NUM_STAGES shared-memory slots;
    - two consumer warpgroups own 64 keys each. Per query tile, each computes S^T = K Q^T and
      dP^T = V dO^T (64 x 64, asynchronous wgmmas), P^T from the saved lse, dS^T = P^T (dP^T - delta),
      then dV += P^T dO and dK += dS^T Q with P^T and dS^T fed from registers;
* dQ = dS K needs dS, the transpose of what a consumer holds: each consumer stores its dS^T in shared
  memory, where a wgmma reads it transposed, and computes half of dQ's columns over all 128 keys:
  consumer w the columns (D/2)w .. (D/2)(w + 1) - 1, from both consumers' dS^T (mbarriers ds_full and
  ds_free hand the dS^T buffers between them). At D = 64 each consumer adding its own 64 keys' share
  of all 64 columns instead needs no handshake, but adds twice the values and keeps twice the dQ
  buffers; it measured a little slower on an H200 at every length timed, and leaves no room for a
  fifth ring slot;
* dQ is added into a float32 buffer by the TMA engine, as FlashAttention-3 does: the consumer writes
  its dQ tile to shared memory (two buffers each) and issues one TMA reduction, which adds the tile
  into global memory while the consumer goes on. (Lesson 10's Triton kernel adds with atomics from
  registers; this kernel's first version did too, and was slower than this one at every shape.)
* a consumer waits for its wgmmas one at a time, in the order it issued them, so that each wait leaves
  the last one issued running: the exponentials run while dP^T is computed, dS^T while dV is, and
  dQ's trip through shared memory while dK is;
* values that do not change from tile to tile are computed in the loop, not hoisted out of it, where
  at D = 128 ptxas spilled them: the shared-memory views are indexed with an opaque zero (inline PTX),
  lse and delta are loaded one value a thread and spread by convert_layout, and the causal mask is
  written relative to the tile (see _tiles, and lesson 10).

Lesson 10 prints its record (tests/gpu_gluon_backward_check.py): the reference's gradients on every
shape checked, and the backward alone beside cuDNN's, lesson 10's and lesson 06's, and beside this
kernel with its dQ reductions left out (add_dq=False). At D = 128 it is about level with cuDNN from
N = 4096 on; at D = 64 it is below, and leaving the reductions out closes only part of that gap.

Importing this module needs no GPU; compile_for_hopper builds the kernel for sm_90 on the host.
Gluon kernels do not run under Triton's CPU interpreter.
"""

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton._C.libtriton import ir
from triton.experimental.gluon.language._core import builtin
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma,
                                                              warpgroup_mma, warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from helpers.solutions import ROOT, load_module, load_solution

forward = load_module(ROOT / "solutions" / "gluon_attention.py")   # its TMA load, registers, ptxas report
tma_load = forward.tma_load
ptxas_report = forward.ptxas_report
LOG2E = gl.constexpr(forward.LOG2E)
# A barrier across the calling partition's warps (a named barrier of its 128 threads): gl.thread_barrier
# in Triton 3.6, gl.barrier later
sync_warpgroup = gl.barrier if hasattr(gl, "barrier") else gl.thread_barrier
CONSUMER_REGS, MAXNREG = forward.REGISTERS[2]
DQ_BUFFERS = 2   # dQ tiles in shared memory per consumer: one added by the TMA while the next is written

# A TMA reduction: a tile in shared memory added, element by element, into global memory by the TMA
# engine (cp.reduce.async.bulk.tensor ... .add). Later Triton calls it tma.async_atomic_add; Triton 3.6's
# Gluon has the operation in its builder but no function for it, so it is defined here the same way.
if hasattr(tma, "async_atomic_add"):
    tma_add = tma.async_atomic_add
else:
    @builtin
    def tma_add(tensor_desc, coord, src, _semantic=None):
        coord = _semantic._convert_to_ir_values(coord, require_i64=False)
        _semantic.builder.create_async_tma_reduce(ir.DESCRIPTOR_REDUCE_KIND.ADD, tensor_desc.handle, coord,
                                                  src.handle)


@gluon.jit
def _query_tiles(start_n, n_ctx, CAUSAL: gl.constexpr):
    """(lo, n_masked, n_tiles): the key block of 128 keys from start_n meets n_tiles query tiles of 64
    rows from row lo, of which the first n_masked need a mask. Causal: the queries from start_n on, the
    first two tiles across the diagonal. Full: every query, all masked where the block runs past N
    (keys past N belong to the next head). Producer and consumers call this, so they agree."""
    if CAUSAL:
        lo = start_n
        n_tiles = (n_ctx - lo + 63) // 64
        n_masked = gl.minimum(n_tiles, 2)
    else:
        lo = start_n * 0
        n_tiles = (n_ctx + 63) // 64
        n_masked = gl.where(start_n + 128 > n_ctx, n_tiles, 0)
    return lo, n_masked, n_tiles


@gluon.jit
def _producer(q_desc, k_desc, v_desc, do_desc, q_smem, do_smem, k_smem, v_smem, kv_ready, ready, empty,
              row_base, start_n, n_ctx, HEAD_DIM: gl.constexpr, NUM_STAGES: gl.constexpr,
              CAUSAL: gl.constexpr):
    """K and V of the block once (kv_ready), then Q and dO of query tile t into slot t % NUM_STAGES
    (ready), once both consumers have released the slot's previous tile (empty, count 2)."""
    lo, n_masked, n_tiles = _query_tiles(start_n, n_ctx, CAUSAL)
    mbarrier.expect(kv_ready, 4 * 64 * HEAD_DIM * 2)
    for w in gl.static_range(2):
        tma_load(k_desc, [row_base + start_n + 64 * w, 0], kv_ready, k_smem.index(w))
        tma_load(v_desc, [row_base + start_n + 64 * w, 0], kv_ready, v_smem.index(w))
    for t in range(n_tiles):
        slot = t % NUM_STAGES
        mbarrier.wait(empty.index(slot), ((t // NUM_STAGES) & 1) ^ 1)
        mbarrier.expect(ready.index(slot), 2 * 64 * HEAD_DIM * 2)
        tma_load(q_desc, [row_base + lo + 64 * t, 0], ready.index(slot), q_smem.index(slot))
        tma_load(do_desc, [row_base + lo + 64 * t, 0], ready.index(slot), do_smem.index(slot))


@gluon.jit
def _opaque_zero(t):
    """0 (t AND 0), through inline PTX: LLVM cannot see that it is loop-invariant."""
    return gl.inline_asm_elementwise("and.b32 $0, $1, 0;", "=r,r", [t], dtype=gl.int32, is_pure=True, pack=1)


@gluon.jit
def _opaque_copy(x):
    """x, through inline PTX the compilers cannot see into."""
    return gl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=gl.int32, is_pure=True, pack=1)


@gluon.jit
def _tiles(WG: gl.constexpr, dk, dv, k_smem, v_smem, ds_smem, ds_full, ds_free, dq_smem, q_smem, do_smem,
           ready, empty, dq_desc, lse_ptr, delta_ptr, row_base, lo, t_lo, t_hi, offs_n, key0, n_ctx, qk_scale,
           sm_scale, HEAD_DIM: gl.constexpr, NUM_STAGES: gl.constexpr, MASK: gl.constexpr,
           CAUSAL: gl.constexpr, ADD_DQ: gl.constexpr):
    """Query tiles t_lo .. t_hi - 1 past this warpgroup's 64 keys (offs_n): dK and dV accumulate in
    registers, dQ is added into the float32 buffer dq_desc describes."""
    S_LAYOUT: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, 64, 16])
    ACC_LAYOUT: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                         instr_shape=[16, HEAD_DIM, 16])
    A_LAYOUT: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=ACC_LAYOUT, k_width=2)
    DQ_COLS: gl.constexpr = HEAD_DIM // 2   # this consumer's columns of dQ
    DQ_LAYOUT: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                        instr_shape=[16, DQ_COLS, 16])
    BUFFERS: gl.constexpr = dq_smem.shape[0] // 2   # dQ tiles per consumer
    ROW_LAYOUT: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    col0: gl.constexpr = DQ_COLS * WG
    for t in range(t_lo, t_hi):
        # z is 0, from inline PTX that LLVM cannot see into: the shared-memory views below depend on it,
        # so LLVM computes their wgmma descriptors in the loop (ptxas then folds z and places them)
        # instead of hoisting some 30 64-bit descriptors out of the loop, where ptxas spilled them
        z = _opaque_zero(t)
        k = k_smem.index(WG + z)
        v = v_smem.index(WG + z)
        slot = t % NUM_STAGES
        start_m = lo + 64 * t
        mbarrier.wait(ready.index(slot), (t // NUM_STAGES) & 1)
        q = q_smem.index(slot)
        do = do_smem.index(slot)
        # wgmma groups complete in the order they were issued: each wait below leaves the last one
        # issued running while this warpgroup computes with what the others gave
        s_token = warpgroup_mma(k, q.permute((1, 0)), gl.zeros([64, 64], gl.float32, S_LAYOUT), use_acc=False,
                                is_async=True)
        dp_token = warpgroup_mma(v, do.permute((1, 0)), gl.zeros([64, 64], gl.float32, S_LAYOUT),
                                 use_acc=False, is_async=True)
        # rows past N: lse = +inf gives P = 0, and delta = 0, so they add nothing
        # loaded one element a thread and spread to the columns each thread holds through shared memory
        # (convert_layout): per-column pointers and masks would be 48 registers hoisted out of the loop
        # (both loads issued before either conversion, so that their latencies overlap; delta is
        # converted after the exponentials, where it is needed)
        rows = start_m + gl.arange(0, 64, ROW_LAYOUT)
        lse_rows = gl.load(lse_ptr + row_base + rows, mask=rows < n_ctx, other=float("inf"))
        delta_rows = gl.load(delta_ptr + row_base + rows, mask=rows < n_ctx, other=0.0)
        lse2 = gl.convert_layout(lse_rows, gl.SliceLayout(0, S_LAYOUT)) * LOG2E
        sT = warpgroup_mma_wait(1, deps=[s_token])       # S^T is done; dP^T may still run
        pT = gl.exp2(sT * qk_scale - lse2[None, :])
        if MASK:
            # query index - key index = (start_m - key0) + (column - row); start_m - key0 through inline
            # PTX, so that LLVM does not fold it into 32 per-element bounds hoisted out of the loop
            diff = _opaque_copy(start_m - key0)
            cols = gl.arange(0, 64, gl.SliceLayout(0, S_LAYOUT))   # queries
            keep = (offs_n[:, None] < n_ctx) & (cols[None, :] >= 0)   # cols >= 0 (true): a 2-D mask
            if CAUSAL:
                keys = gl.arange(0, 64, gl.SliceLayout(1, S_LAYOUT))
                keep = keep & (cols[None, :] - keys[:, None] >= -diff)
            pT = gl.where(keep, pT, 0.0)
        dv = warpgroup_mma(gl.convert_layout(pT.to(gl.float16), A_LAYOUT), do, dv, is_async=True)
        delta = gl.convert_layout(delta_rows, gl.SliceLayout(0, S_LAYOUT))
        dpT = warpgroup_mma_wait(1, deps=[dp_token])     # dP^T is done; dV may still run
        ds16 = (pT * (dpT - delta[None, :])).to(gl.float16)
        # dQ[:, col0 : col0 + DQ_COLS] = dS K[:, those columns] over both warpgroups' keys: wait until the
        # other consumer is done reading the dS^T buffers (tile t - 1), write ours, wait for theirs
        mbarrier.wait(ds_free, (t & 1) ^ 1)
        ds_smem.index(WG + z).store(ds16)
        fence_async_shared()
        mbarrier.arrive(ds_full, count=1)
        mbarrier.wait(ds_full, t & 1)
        dq = warpgroup_mma(ds_smem.index(z).permute((1, 0)), k_smem.index(z).slice(col0, DQ_COLS, dim=1),
                           gl.zeros([64, DQ_COLS], gl.float32, DQ_LAYOUT), use_acc=False, is_async=True)
        dq = warpgroup_mma(ds_smem.index(1 + z).permute((1, 0)),
                           k_smem.index(1 + z).slice(col0, DQ_COLS, dim=1), dq, is_async=True)
        dk = warpgroup_mma(gl.convert_layout(ds16, A_LAYOUT), q, dk, is_async=True)
        dq = warpgroup_mma_wait(1, deps=[dq])            # dV and dQ are done; dK may still run
        mbarrier.arrive(ds_free, count=1)                # this consumer has read both dS^T buffers
        # While dK runs: dQ through shared memory, added into global memory by one TMA reduction (rows
        # past N, in the next head's rows, add zeros: their dS is 0). Buffer t % BUFFERS was last read
        # by the reduction of tile t - BUFFERS: the thread that issued it waits until it has read it,
        # the others wait for that thread.
        tma.store_wait(BUFFERS - 1)
        sync_warpgroup()
        buffer = dq_smem.index(WG * BUFFERS + t % BUFFERS)
        buffer.store(dq * sm_scale)
        fence_async_shared()
        sync_warpgroup()
        if ADD_DQ:
            tma_add(dq_desc, [row_base + start_m, col0], buffer)
        # nothing in flight past this point: a wgmma still writing registers at the loop's back edge
        # would make ptxas serialise every wgmma (see the forward's _attend_tiles_overlapped)
        dk, dv = warpgroup_mma_wait(0, deps=[dk, dv])
        mbarrier.arrive(empty.index(slot), count=1)      # Q and dO of this slot are read
    return dk, dv


@gluon.jit
def _consumer(WG: gl.constexpr, q_smem, do_smem, k_smem, v_smem, ds_smem, ds_full, ds_free, dq_smem, kv_ready,
              ready, empty, dq_desc, dk_ptr, dv_ptr, lse_ptr, delta_ptr, row_base, start_n, n_ctx, qk_scale,
              sm_scale, HEAD_DIM: gl.constexpr, NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr,
              ADD_DQ: gl.constexpr):
    """Keys start_n + 64*WG .. + 63: their dK and dV, and their part of dQ."""
    S_LAYOUT: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, 64, 16])
    ACC_LAYOUT: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                         instr_shape=[16, HEAD_DIM, 16])
    lo, n_masked, n_tiles = _query_tiles(start_n, n_ctx, CAUSAL)
    key0 = start_n + 64 * WG
    offs_n = key0 + gl.arange(0, 64, gl.SliceLayout(1, S_LAYOUT))
    dk = gl.zeros([64, HEAD_DIM], gl.float32, ACC_LAYOUT)
    dv = gl.zeros([64, HEAD_DIM], gl.float32, ACC_LAYOUT)
    mbarrier.wait(kv_ready, 0)
    dk, dv = _tiles(WG, dk, dv, k_smem, v_smem, ds_smem, ds_full, ds_free, dq_smem, q_smem, do_smem, ready,
                    empty, dq_desc, lse_ptr, delta_ptr, row_base, lo, 0, n_masked, offs_n, key0, n_ctx,
                    qk_scale, sm_scale, HEAD_DIM, NUM_STAGES, True, CAUSAL, ADD_DQ)
    dk, dv = _tiles(WG, dk, dv, k_smem, v_smem, ds_smem, ds_full, ds_free, dq_smem, q_smem, do_smem, ready,
                    empty, dq_desc, lse_ptr, delta_ptr, row_base, lo, n_masked, n_tiles, offs_n, key0, n_ctx,
                    qk_scale, sm_scale, HEAD_DIM, NUM_STAGES, False, CAUSAL, ADD_DQ)
    offs_k = key0 + gl.arange(0, 64, gl.SliceLayout(1, ACC_LAYOUT))
    offs_d = gl.arange(0, HEAD_DIM, gl.SliceLayout(0, ACC_LAYOUT))
    offsets = (row_base + offs_k).to(gl.int64)[:, None] * HEAD_DIM + offs_d[None, :]
    keep = (offs_k[:, None] < n_ctx) & (offs_d[None, :] < HEAD_DIM)
    gl.store(dk_ptr + offsets, (dk * sm_scale).to(gl.float16), mask=keep)
    gl.store(dv_ptr + offsets, dv.to(gl.float16), mask=keep)
    tma.store_wait(0)   # the last reductions have read their buffers before the CTA's shared memory goes


@gluon.jit
def gluon_attention_backward_kernel(q_desc, k_desc, v_desc, do_desc, dq_desc, dk_ptr, dv_ptr, lse_ptr,
                                    delta_ptr, n_ctx, qk_scale, sm_scale, HEAD_DIM: gl.constexpr,
                                    NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                                    CONSUMER_REGS: gl.constexpr, DQ_BUFFERS: gl.constexpr,
                                    ADD_DQ: gl.constexpr = True):
    """Grid (cdiv(N, 128), B*H). q/k/v/do_desc: host TMA descriptors over the (B*H*N, D) float16 views,
    boxes of 64 rows; dq_desc over the float32 dQ buffer (zeroed), boxes of 64 rows and 64 columns.
    dk_ptr, dv_ptr (B*H*N, D) float16; lse_ptr, delta_ptr (B*H*N,) float32."""
    start_n = gl.program_id(0) * 128
    row_base = gl.program_id(1) * n_ctx
    q_smem = gl.allocate_shared_memory(gl.float16, [NUM_STAGES, 64, HEAD_DIM], q_desc.layout)
    do_smem = gl.allocate_shared_memory(gl.float16, [NUM_STAGES, 64, HEAD_DIM], do_desc.layout)
    k_smem = gl.allocate_shared_memory(gl.float16, [2, 64, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(gl.float16, [2, 64, HEAD_DIM], v_desc.layout)
    ds_smem = gl.allocate_shared_memory(gl.float16, [2, 64, 64], q_desc.layout)   # the same 128-byte swizzle
    dq_smem = gl.allocate_shared_memory(gl.float32, [2 * DQ_BUFFERS, 64, HEAD_DIM // 2], dq_desc.layout)
    kv_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ds_full = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ds_free = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(kv_ready, count=1)
    mbarrier.init(ds_full, count=2)
    mbarrier.init(ds_free, count=2)
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)
    fence_async_shared()
    gl.warp_specialize([
        (_consumer, (0, q_smem, do_smem, k_smem, v_smem, ds_smem, ds_full, ds_free, dq_smem, kv_ready, ready,
                     empty, dq_desc, dk_ptr, dv_ptr, lse_ptr, delta_ptr, row_base, start_n, n_ctx, qk_scale,
                     sm_scale, HEAD_DIM, NUM_STAGES, CAUSAL, ADD_DQ)),
        (_consumer, (1, q_smem, do_smem, k_smem, v_smem, ds_smem, ds_full, ds_free, dq_smem, kv_ready, ready,
                     empty, dq_desc, dk_ptr, dv_ptr, lse_ptr, delta_ptr, row_base, start_n, n_ctx, qk_scale,
                     sm_scale, HEAD_DIM, NUM_STAGES, CAUSAL, ADD_DQ)),
        (_producer, (q_desc, k_desc, v_desc, do_desc, q_smem, do_smem, k_smem, v_smem, kv_ready, ready, empty,
                     row_base, start_n, n_ctx, HEAD_DIM, NUM_STAGES, CAUSAL)),
    ], [4, 1], [CONSUMER_REGS, forward.PRODUCER_REGS])
    mbarrier.invalidate(kv_ready)
    mbarrier.invalidate(ds_full)
    mbarrier.invalidate(ds_free)
    for i in gl.static_range(NUM_STAGES):
        mbarrier.invalidate(ready.index(i))
        mbarrier.invalidate(empty.index(i))


# ---------------------------------------------------------------- host side


def stages(head_dim):
    """Ring slots (Q and dO, 64 rows each) beside K, V and the dS^T and dQ buffers: 2 at D = 128 (about
    213 KB of shared memory compiled; a third slot would not fit in a Hopper CTA's 227 KB), 5 at D = 64
    (about 164 KB; on an H200 a little faster than 4, and a sixth was not measured)."""
    return {64: 5, 128: 2}[head_dim]


def descriptors(*tensors):
    """Host TMA descriptors over the (B*H*N, D) views of float16 tensors, boxes of 64 rows."""
    D = tensors[0].shape[-1]
    layout = gl.NVMMASharedLayout.get_default_for([64, D], gl.float16)
    return [TensorDescriptor.from_tensor(t.view(-1, D), [64, D], layout) for t in tensors]


def dq_descriptor(dq):
    """The host TMA descriptor over float32 dQ's (B*H*N, D) view: boxes of 64 rows and D / 2 columns (a
    consumer's share)."""
    cols = dq.shape[-1] // 2
    layout = gl.NVMMASharedLayout.get_default_for([64, cols], gl.float32)
    return TensorDescriptor.from_tensor(dq.view(-1, dq.shape[-1]), [64, cols], layout)


def gluon_attention_backward(q, k, v, out, lse, dout, causal=False, sm_scale=None, num_stages=None,
                             add_dq=True):
    """(dq, dk, dv) of attention(q, k, v, causal) given dout, out and lse (natural log) from the forward:
    lesson 10's attention_backward, with this kernel. delta = rowsum(dO * O) by lesson 06's kernel.
    add_dq=False is for measuring only: the kernel does all its work but the TMA reductions, and dq
    comes back zero (lesson 10 times it to show what adding dQ costs)."""
    assert q.dim() == 4 and q.shape == k.shape == v.shape == out.shape == dout.shape, "all (B, H, N, D)"
    assert q.dtype == k.dtype == v.dtype == dout.dtype == torch.float16, "float16 inputs"
    B, H, N, D = q.shape
    assert D in (64, 128), "head dimension must be 64 or 128"
    sm_scale = D ** -0.5 if sm_scale is None else sm_scale
    q, k, v, dout = q.contiguous(), k.contiguous(), v.contiguous(), dout.contiguous()
    delta = load_solution("06").backward_delta(out, dout)
    dq = torch.zeros(q.shape, device=q.device, dtype=torch.float32)
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    gluon_attention_backward_kernel[(triton.cdiv(N, 128), B * H)](
        *descriptors(q, k, v, dout), dq_descriptor(dq), dk, dv, lse, delta, N, sm_scale * LOG2E.value,
        sm_scale, HEAD_DIM=D, NUM_STAGES=num_stages or stages(D), CAUSAL=causal, CONSUMER_REGS=CONSUMER_REGS,
        DQ_BUFFERS=DQ_BUFFERS, ADD_DQ=add_dq, num_warps=4, maxnreg=MAXNREG)
    return dq.to(q.dtype), dk, dv


def compile_for_hopper(head_dim, causal, num_stages=None):
    """The kernel compiled for sm_90 without a GPU, as forward.compile_for_hopper does for the forward
    (.ptxas_log kept for ptxas_report)."""
    from triton.runtime.jit import mangle_type

    desc = mangle_type(descriptors(torch.empty((256, head_dim), dtype=torch.float16))[0])
    dq_desc = mangle_type(dq_descriptor(torch.empty((256, head_dim), dtype=torch.float32)))
    signature = {"q_desc": desc, "k_desc": desc, "v_desc": desc, "do_desc": desc, "dq_desc": dq_desc,
                 "dk_ptr": "*fp16", "dv_ptr": "*fp16", "lse_ptr": "*fp32", "delta_ptr": "*fp32",
                 "n_ctx": "i32",
                 "qk_scale": "fp32", "sm_scale": "fp32", "HEAD_DIM": "constexpr", "NUM_STAGES": "constexpr",
                 "CAUSAL": "constexpr", "CONSUMER_REGS": "constexpr", "DQ_BUFFERS": "constexpr",
                 "ADD_DQ": "constexpr"}
    constexprs = {"HEAD_DIM": head_dim, "NUM_STAGES": num_stages or stages(head_dim), "CAUSAL": causal,
                  "CONSUMER_REGS": CONSUMER_REGS, "DQ_BUFFERS": DQ_BUFFERS, "ADD_DQ": True}
    return forward.compile_gluon_for_hopper(gluon_attention_backward_kernel, signature, constexprs, MAXNREG)
