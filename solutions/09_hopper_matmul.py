"""Lesson 09 solutions: the Hopper matmul. Lesson 04's matmul taken towards cuBLAS with what an H100
adds and Triton reaches: tensor descriptors (TMA), persistent programs, software pipelining across
tiles, warp specialisation where it compiles, and an autotuner that times its candidates honestly.

Exercise 1: tma_matmul_kernel         one program per tile (lesson 04's grouped order), every tile moved
                                      by a tensor descriptor
Exercise 2: persistent_matmul_kernel  one program per SM, walking the tiles a tile scheduler hands out
Exercise 3: linear_kernel             the persistent, flattened tile loop over linear_tile, with a row
                                      scale and a residual add in its epilogue

and, built from them:

    matmul          a @ b (or a @ b.T), persistent, TMA-fed, autotuned on CUDA-graph timings so that the
                    choice does not flip between runs; an optional per-row scale in the epilogue;
                    descriptors built by each program, launched through a launcher prepared once,
                    with programmatic dependent launch (on a GPU)
    rmsnorm_linear  lesson 05's RMSNorm + linear for inference: gamma folded into W once, 1/rms once
                    per row, then `matmul` with the row scale in its epilogue
    linear          the matmul lesson 11's decoder block runs on: scale[:, None] * (h @ w.T) + residual,
                    descriptors built by each program, the flattened tile loop, both epilogues optional,
                    launched as matmul is
"""

import torch

import helpers  # noqa: F401  (first: picks the GPU or the interpreter)
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
from triton.tools.tensor_descriptor import TensorDescriptor

from helpers.bench import host_us, measure
from helpers.compiled import compiler_quiet
from helpers.device import DEVICE, ON_GPU, pick
from helpers.launch import Launcher, cdiv, power_of_2_bucket
from helpers.solutions import load_solution

lesson05 = load_solution("05")   # inv_rms: 1 / rms of each row

# Programs of a persistent kernel: one per SM on a GPU; on the CPU two, so that each walks several tiles.
SMS = torch.cuda.get_device_properties(DEVICE).multi_processor_count if ON_GPU else 2


def descriptor(t, block_shape):
    """A tensor descriptor of t, built on the host: t's rows must be contiguous and 16-byte aligned."""
    assert t.stride(-1) == 1, "a tensor descriptor needs the last dimension contiguous (stride 1)"
    assert t.data_ptr() % 16 == 0 and all(s * t.element_size() % 16 == 0 for s in t.stride()[:-1]), \
        (f"a tensor descriptor needs its start and its strides {tuple(t.stride()[:-1])} (in values of "
         f"{t.element_size()} bytes) to be multiples of 16 bytes; copy the tensor into an aligned one")
    return TensorDescriptor.from_tensor(t, block_shape)


def _persistent_grid(M, N):
    """As many programs as SMS, or as tiles if there are fewer (worked out at every launch: cdiv)."""
    return lambda meta: (min(SMS, cdiv(M, meta["BLOCK_M"]) * cdiv(N, meta["BLOCK_N"])),)


def _check_tma(**tensors):
    """Tensor descriptors need rows of contiguous values, and 16-byte aligned row strides and bases.
    Returns the tensors' row strides, read here once (this runs at every launch)."""
    row_strides = []
    for name, t in tensors.items():
        strides = t.stride()
        assert len(strides) == 2 and strides[1] == 1, \
            f"{name}: a 2-D tensor with contiguous rows, stride(1) == 1"
        assert strides[0] * t.itemsize % 16 == 0 and t.data_ptr() % 16 == 0, \
            (f"{name}: its row stride ({strides[0]} values of {t.itemsize} bytes) and its start "
             f"must be multiples of 16 bytes for a tensor descriptor; copy it into a wider, aligned buffer")
        row_strides.append(strides[0])
    return row_strides


_scratch = {}   # stream -> (its two buffers for descriptors, which one its next launch takes)


def _descriptor_scratch(size, alignment, stream):
    """Global memory in which programs build their tensor descriptors (128 bytes each).

    Two buffers per stream, taken in turn by its launches, so that no launch pays for an allocation.
    Two, because `matmul` below launches with programmatic dependent launch: a launch may start while
    the one before it finishes, and it writes its descriptors before it waits, so it must not write
    where that launch's programs still read theirs. A third cannot start before the first has finished:
    a launch lets the next one start only once each of its programs has waited for the one before.
    Each buffer is handed over as its address, which the launch takes as it is (given a tensor, it
    asks the driver about the pointer). Inside a CUDA-graph capture each launch gets memory of its own
    from the graph's pool."""
    if torch.cuda.is_current_stream_capturing():
        return torch.empty(size, device=DEVICE, dtype=torch.int8)
    buffers, turn = _scratch.get(stream, ((), 0))
    if not buffers or buffers[0].numel() < size:
        buffers = tuple(torch.empty(max(size, 1 << 16), device=DEVICE, dtype=torch.int8) for _ in range(2))
    _scratch[stream] = buffers, 1 - turn
    return buffers[turn].data_ptr()


# Kernels that build descriptors themselves (tl.make_tensor_descriptor: matmul and linear below, the
# notebook's examples, an exercise written that way) need it on a GPU. The exercises' launchers build
# host descriptors instead.
triton.set_allocator(_descriptor_scratch)


# ---------------------------------------------------------------- exercise 1: a TMA-fed tile loop


@triton.jit
def tile_coords(tile, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """(pid_m, pid_n) of output tile number `tile` in lesson 04's grouped order: GROUP_M rows of tiles
    at a time, column by column, so that tiles computed together share rows of A and columns of B."""
    per_group = GROUP_M * num_pid_n
    first_m = (tile // per_group) * GROUP_M
    rows = min(num_pid_m - first_m, GROUP_M)
    return first_m + (tile % per_group) % rows, (tile % per_group) // rows


@triton.jit
def tma_matmul_kernel(a_desc, b_desc, c_desc, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """C = A @ B for output tile number program_id(0), placed by tile_coords; every tile by descriptor."""
    pid_m, pid_n = tile_coords(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    off_m, off_n = pid_m * BLOCK_M, pid_n * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = a_desc.load([off_m, k])            # (BLOCK_M, BLOCK_K): zeros past A's edges
        b = b_desc.load([k, off_n])            # (BLOCK_K, BLOCK_N)
        acc = tl.dot(a, b, acc)
    c_desc.store([off_m, off_n], acc.to(c_desc.dtype))   # rows and columns past C's edges are dropped


TMA_TILE = pick(cpu=(32, 64, 16), gpu=(128, 128, 64))   # BLOCK_M, BLOCK_N, BLOCK_K: three sizes on the CPU


def tma_matmul(a, b):
    """a @ b, a (M, K) and b (K, N) with contiguous, 16-byte aligned rows; one program per output tile."""
    assert a.dim() == b.dim() == 2 and a.shape[1] == b.shape[0], "tma_matmul takes (M, K) and (K, N)"
    assert a.dtype == b.dtype, "a and b must share a dtype"
    (M, K), N = a.shape, b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    BM, BN, BK = TMA_TILE
    grid = (triton.cdiv(M, BM) * triton.cdiv(N, BN),)
    tma_matmul_kernel[grid](descriptor(a, [BM, BK]), descriptor(b, [BK, BN]), descriptor(c, [BM, BN]),
                            M, N, K, BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK, GROUP_M=8)
    return c


# ---------------------------------------------------------------- exercise 2: persistent programs


@triton.jit
def persistent_matmul_kernel(a_desc, b_desc, c_desc, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                             BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """C = A @ B with a fixed number of programs: program p computes tiles p, p + P, p + 2P, ..."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    for tile in range(tl.program_id(0), num_pid_m * num_pid_n, tl.num_programs(0)):
        pid_m, pid_n = tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, K, BLOCK_K):
            acc = tl.dot(a_desc.load([pid_m * BLOCK_M, k]), b_desc.load([k, pid_n * BLOCK_N]), acc)
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_desc.dtype))


def persistent_matmul(a, b, programs=None):
    """a @ b with `programs` programs (default: one per SM), each walking several output tiles."""
    assert a.dim() == b.dim() == 2 and a.shape[1] == b.shape[0], "persistent_matmul takes (M, K) and (K, N)"
    assert a.dtype == b.dtype, "a and b must share a dtype"
    (M, K), N = a.shape, b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    BM, BN, BK = TMA_TILE
    programs = SMS if programs is None else programs
    assert programs >= 1, f"programs must be at least 1, not {programs}"
    # float32 tiles take twice the shared memory: two K steps in flight instead of Triton's default three
    persistent_matmul_kernel[(programs,)](descriptor(a, [BM, BK]), descriptor(b, [BK, BN]),
                                          descriptor(c, [BM, BN]), M, N, K,
                                          BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK, GROUP_M=8,
                                          num_stages=2 if a.element_size() == 4 else 3)
    return c


# ---------------------------------------------------------------- the fast matmul
#
# The persistent kernel above, plus what the autotuner may switch on:
#   FLATTEN          tl.range(..., flatten=True): the tile loop and the K loop become one loop, so the
#                    pipeline runs on across tiles (the next tile's loads in flight during the epilogue)
#   WARP_SPECIALIZE  asks the compiler to let some warps only issue TMA loads and the others only run
#                    the matmul (Triton's tl.range option). Its docstring says it is supported on
#                    Blackwell only; whether sm_90's compiled code is specialised, record_artifacts checks
#   num_stages       how many K steps of A and B tiles are in flight in shared memory
# B_NK: b is given as (N, K), nn.Linear's layout, and the kernel multiplies by its transpose.
# HAS_SCALE: each row of the product is multiplied by s[row] (RMSNorm's 1 / rms) before the store.
# PDL: programmatic dependent launch (Hopper's griddepcontrol). Launched with launch_pdl=True, a launch
#      may start while the kernel before it on the stream finishes: its programs build their
#      descriptors, then wait (gdc_wait) until that kernel has finished and its writes are visible,
#      before they read or write anything else; then they let the next launch start (gdc_launch_dependents).
#      Back to back, each launch's start and descriptors overlap the previous kernel's last tiles.
#      Off under the interpreter, which has no griddepcontrol.

PDL = ON_GPU


def _matmul_config(bm, bn, warps, stages, flatten=True, ws=False, bk=64):
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "FLATTEN": flatten,
                          "WARP_SPECIALIZE": ws}, num_warps=warps, num_stages=stages)


MATMUL_CONFIGS = pick(
    cpu=[_matmul_config(32, 32, 4, 1)],
    gpu=[_matmul_config(128, 256, 8, 3), _matmul_config(128, 256, 8, 3, flatten=False, ws=True),
         _matmul_config(256, 128, 8, 3), _matmul_config(128, 128, 8, 4), _matmul_config(128, 128, 4, 4),
         _matmul_config(128, 64, 4, 4), _matmul_config(64, 128, 4, 4), _matmul_config(64, 128, 4, 4, bk=128),
         _matmul_config(64, 64, 4, 4)])


def _tiles_for_the_shape(configs, named_args, **kwargs):
    """Prune the search before timing: keep the tile sizes that give at least half the SMs a tile (the
    large ones only where there are enough of them), so that fewer configurations are timed. Where none
    does, the one with the most tiles, the smallest of those (a large tile of float32 values, untimed,
    could need more shared memory than an SM has)."""
    M, N = named_args["M"], named_args["N"]
    tiles = lambda c: triton.cdiv(M, c.kwargs["BLOCK_M"]) * triton.cdiv(N, c.kwargs["BLOCK_N"])  # noqa: E731
    kept = [c for c in configs if tiles(c) >= SMS // 2]
    size = lambda c: c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"] * c.kwargs["BLOCK_K"]  # noqa: E731
    smallest_first = sorted(configs, key=size)
    return kept or [max(smallest_first, key=tiles)]


def _graph_timed(kernel_call, quantiles):
    """How the autotuner times each candidate: as `make bench` times kernels, CUDA-graph replays with the
    L2 cache flushed before each. do_bench still calls graph.replay() from Python, but that is one short
    host call where a candidate's own launch (argument binding, launch) is a long one; host
    time that outlasts do_bench's flush shows in the timing. Launched from Python, the choice at 1024^3
    changed from process to process (record_artifacts records it; lesson 09 prints it)."""
    return measure(kernel_call, graph=True, quantiles=quantiles)


@triton.autotune(configs=MATMUL_CONFIGS, key=["M", "N", "K", "B_NK", "HAS_SCALE"],
                 prune_configs_by={"early_config_prune": _tiles_for_the_shape}, do_bench=_graph_timed)
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, s_ptr, M, N, K, stride_a, stride_b, B_NK: tl.constexpr,
                  HAS_SCALE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, FLATTEN: tl.constexpr,
                  WARP_SPECIALIZE: tl.constexpr, PDL: tl.constexpr):
    """c (M, N, contiguous) = a (M, K) @ b, b (K, N), or (N, K) when B_NK; stride_a and stride_b are
    their row strides. Each program builds its descriptors once, in tiles of this configuration."""
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_a, 1],
                                       block_shape=[BLOCK_M, BLOCK_K])
    if B_NK:
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[stride_b, 1],
                                           block_shape=[BLOCK_N, BLOCK_K])
    else:
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[stride_b, 1],
                                           block_shape=[BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    if PDL:
        gdc_wait()                 # the kernel before this one has finished: its writes are visible
        gdc_launch_dependents()    # the next launch may start its own preamble
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    for tile in tl.range(tl.program_id(0), num_pid_m * num_pid_n, tl.num_programs(0), flatten=FLATTEN,
                         warp_specialize=WARP_SPECIALIZE):
        pid_m, pid_n = tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        off_m, off_n = pid_m * BLOCK_M, pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, K, BLOCK_K):
            a = a_desc.load([off_m, k])
            if B_NK:
                acc = tl.dot(a, b_desc.load([off_n, k]).T, acc)
            else:
                acc = tl.dot(a, b_desc.load([k, off_n]), acc)
        if HAS_SCALE:
            rows = off_m + tl.arange(0, BLOCK_M)
            acc = acc * tl.load(s_ptr + rows, mask=rows < M, other=0.0)[:, None]
        c_desc.store([off_m, off_n], acc.to(c_desc.dtype))


# launches prepared once per key, the configuration chosen once per bucket of sizes (helpers.launch)
SIZE_BUCKETS = {"M": power_of_2_bucket, "N": power_of_2_bucket, "K": power_of_2_bucket}
_matmul_launcher = Launcher(matmul_kernel, buckets=SIZE_BUCKETS)

# Each call's checks, the launcher's key and the grid follow from what the checks read: the operands'
# dtypes, devices, shapes, strides and 16-byte alignment. So `matmul` keys its calls on those, works
# the rest out once per key, and keeps the launch (Launcher.bind) with the integers it takes.
_matmul_calls = {}


def matmul(a, b, scale=None, b_is_nk=False):
    """a @ b (b (K, N)), or a @ b.T when b_is_nk (b (N, K), as nn.Linear stores weights); with scale
    (M,) float32, row i of the product is multiplied by scale[i]. Rows contiguous and 16-byte aligned."""
    key = (a.dtype, b.dtype, a.device, b.device, a.shape, b.shape, a.stride(), b.stride(), b_is_nk,
           (a.data_ptr() | b.data_ptr()) % 16, scale is not None
           and (scale.dtype, scale.device, scale.shape, scale.stride(), scale.data_ptr() % 16))
    known = _matmul_calls.get(key)
    if known is not None:       # checked before: allocate and launch
        launch, (M, N, *rest) = known
        c = a.new_empty((M, N))
        launch(a, b, c, scale, M, N, *rest)
        return c
    assert a.dtype == b.dtype, "a and b must share a dtype"
    stride_a, stride_b = _check_tma(a=a, b=b)   # 2-D too
    M, K = a.shape
    N = b.shape[0] if b_is_nk else b.shape[1]
    assert (b.shape[1] if b_is_nk else b.shape[0]) == K, \
        f"inner dimensions differ: a {tuple(a.shape)}, b {tuple(b.shape)}"
    if scale is not None:
        assert scale.shape == (M,) and scale.dtype == torch.float32 and scale.stride(0) == 1, \
            "scale: (M,) float32, contiguous: one factor per row"
    assert N * a.itemsize % 16 == 0, f"c's rows: N = {N} values must fill a multiple of 16 bytes (TMA)"
    c = a.new_empty((M, N))     # a's dtype and device
    integers = (M, N, K, stride_a, stride_b)
    launch = _matmul_launcher.bind(_persistent_grid(M, N), a, b, c, scale, *integers,
                                   B_NK=b_is_nk, HAS_SCALE=scale is not None, PDL=PDL, launch_pdl=PDL)
    if launch is not None:      # (None under the interpreter: every call goes through kernel[grid])
        _matmul_calls[key] = launch, integers
    return c


# ---------------------------------------------------------------- RMSNorm + linear, for inference
#
# rms_norm(x) * gamma @ W.T == diag(1 / rms(x)) @ x @ (W * gamma).T: fold gamma into W once, when the
# weights are loaded; then one small pass writes 1 / rms per row (M floats), and the matmul feeds x to
# the tensor cores untouched and scales each row of its result in the epilogue.


def fold_gamma(w, gamma):
    """W * gamma (each input column of W scaled), computed in float32, in W's dtype: done once."""
    return (w.float() * gamma.float()).to(w.dtype)


def rmsnorm_linear(x, w_folded, eps=1e-6):
    """rms_norm(x) * gamma @ w.T with w_folded = fold_gamma(w, gamma): x (M, K), w_folded (N, K)."""
    return matmul(x, w_folded, scale=lesson05.inv_rms(x, eps), b_is_nk=True)


def rmsnorm_linear_reference(x, gamma, w, eps=1e-6):
    return torch.nn.functional.rms_norm(x, (x.shape[1],), gamma, eps) @ w.T


# ---------------------------------------------------------------- linear: the block's matmul, with epilogues

# Lesson 04's mainloop computes an address and a mask for every element of every tile, and runs one
# program per output tile. At the block's shapes it falls well short of cuBLAS (make bench, group
# block_matmuls_fp16). Two changes close the gap, both plain Triton:
#
# * Tensor descriptors. tl.make_tensor_descriptor describes a 2-D tensor once: its base, shape,
#   strides and the tile shape to move. desc.load([row, col]) then fetches a whole tile, and on a
#   Hopper GPU one TMA instruction does it (the chip's tensor memory accelerator): no address
#   arithmetic in the program, no masks. Rows and columns past the tensor's edge read as zeros, and
#   a store drops them. The price: the innermost dimension must be contiguous, and the other strides
#   and the base multiples of 16 bytes.
# * Persistent programs. One program per SM, each walking the tiles tile, tile + P, tile + 2P, ...
#   (P programs). tl.range(..., flatten=True) lets the compiler pipeline across tiles: the next tile's
#   first loads are in flight while this tile's epilogue runs.
#
# linear_tile is the mainloop; each kernel below is the persistent walk plus its own epilogue.


def _linear_config(bm, bn, bk, warps, stages, **loop):
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, **loop},
                         num_warps=warps, num_stages=stages)


# On a GPU: 128 x 256 tiles and 3 stages were the fastest at most of the block's prefill shapes on an
# H100. The others are for few rows (decoding), where a matmul only reads weights: the more tiles, the
# more SMs read them at once. Measured on an H100 with the block's four weights at 16 rows (one
# sequence's 16 new tokens): tiles of 16 rows (the tensor cores' older, smaller instruction; a
# warpgroup's needs 64) and 32 or 64 columns, each K step 256 wide, read the two narrow matrices
# (N = d) about 1.4x faster than the 64 x 64 tiles the search chose before, and up to 1.15x faster
# than 64 x 64 tiles with 128-wide K steps; at 128 rows those 64 x 64 tiles were the fastest for the
# narrow matrices. Each tile: (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages).
LINEAR_TILES = pick(cpu=[(64, 128, 32, 4, 1)],
                    gpu=[(128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (128, 128, 64, 8, 4),
                         (128, 128, 64, 4, 4), (64, 128, 64, 4, 4), (64, 64, 64, 4, 4), (64, 64, 128, 4, 4),
                         (16, 64, 256, 4, 3), (16, 32, 256, 4, 4)])
LINEAR_CONFIGS = [_linear_config(*tile) for tile in LINEAR_TILES]
# linear_kernel's epilogue may read a residual tile, and that tile needs shared memory too. With
# flatten=True (the next tile's loads in flight during the epilogue) a 128 x 256 tile and its
# residual did not fit the shared memory one program may claim on an H100
# (helpers.roofline.CHIPS[...].shared_kb_per_program), and the autotuner fell back to 128 x 128
# tiles, about 10% slower. Two more configurations for it, without flatten: 256 x 128, and 128 x 256
# with WARP_SPECIALIZE=True (Triton's tl.range option; whether sm_90's compiled code is actually
# warp-specialised is what record_artifacts checks), which on an H100 recovered that loss.
EPILOGUE_CONFIGS = ([_linear_config(*tile, FLATTEN=True, WARP_SPECIALIZE=False) for tile in LINEAR_TILES]
                    + pick(cpu=[], gpu=[
                        _linear_config(256, 128, 64, 8, 3, FLATTEN=False, WARP_SPECIALIZE=False),
                        _linear_config(128, 256, 64, 8, 3, FLATTEN=False, WARP_SPECIALIZE=True)]))


@triton.jit
def tile_origin(tile, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """The first row and column of output tile number `tile`, in lesson 04's grouped order."""
    pid_m, pid_n = tile_coords(tile, tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    return pid_m * BLOCK_M, pid_n * BLOCK_N


@triton.jit
def linear_tile(a_desc, w_desc, off_m, off_n, K,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """The mainloop: A[off_m:, :] @ W[off_n:, :].T for one BLOCK_M x BLOCK_N tile, summed in float32.
    W is (N, K), as nn.Linear stores it: its rows are the columns of the product."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = a_desc.load([off_m, k * BLOCK_K])          # (BLOCK_M, BLOCK_K); zeros past the edges
        w = w_desc.load([off_n, k * BLOCK_K])          # (BLOCK_N, BLOCK_K)
        acc = tl.dot(a, w.T, acc)
    return acc


@triton.autotune(configs=EPILOGUE_CONFIGS, key=["M", "N", "K", "HAS_SCALE", "HAS_RESIDUAL"])
@triton.jit
def linear_kernel(h_ptr, w_ptr, s_ptr, r_ptr, out_ptr, M, N, K, stride_h, stride_w, stride_r,
                  HAS_SCALE: tl.constexpr, HAS_RESIDUAL: tl.constexpr, BLOCK_M: tl.constexpr,
                  BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                  FLATTEN: tl.constexpr, WARP_SPECIALIZE: tl.constexpr):
    """out = s[:, None] * (h @ w.T) + r, the scale and the residual optional; h (M, K), w (N, K), r and
    out (M, N), out contiguous; the stride_ arguments are the others' row strides. Each program walks
    tiles p, p + P, ... (the flattened loop: the next tile's loads overlap this tile's epilogue)."""
    h_desc = tl.make_tensor_descriptor(h_ptr, shape=[M, K], strides=[stride_h, 1],
                                       block_shape=[BLOCK_M, BLOCK_K])
    w_desc = tl.make_tensor_descriptor(w_ptr, shape=[N, K], strides=[stride_w, 1],
                                       block_shape=[BLOCK_N, BLOCK_K])
    out_desc = tl.make_tensor_descriptor(out_ptr, shape=[M, N], strides=[N, 1],
                                         block_shape=[BLOCK_M, BLOCK_N])
    if HAS_RESIDUAL:
        r_desc = tl.make_tensor_descriptor(r_ptr, shape=[M, N], strides=[stride_r, 1],
                                           block_shape=[BLOCK_M, BLOCK_N])
    n_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for tile in tl.range(tl.program_id(0), n_tiles, tl.num_programs(0), flatten=FLATTEN,
                         warp_specialize=WARP_SPECIALIZE):
        off_m, off_n = tile_origin(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = linear_tile(h_desc, w_desc, off_m, off_n, K, BLOCK_M, BLOCK_N, BLOCK_K)
        if HAS_SCALE:                                   # one float32 per row: RMSNorm's 1 / rms
            rows = off_m + tl.arange(0, BLOCK_M)
            acc = acc * tl.load(s_ptr + rows, mask=rows < M, other=0.0)[:, None]
        if HAS_RESIDUAL:                                # read once, added in float32
            acc = acc + r_desc.load([off_m, off_n]).to(tl.float32)
        out_desc.store([off_m, off_n], acc.to(out_desc.dtype))


def linear_reference(h, w, scale=None, residual=None):
    out = h @ w.T
    if scale is not None:
        out = scale[:, None] * out
    return out if residual is None else out + residual


# the rows (tokens) vary from call to call, the weights' sizes do not: one choice per bucket of rows
ROW_BUCKETS = {"M": power_of_2_bucket}
_linear_launcher = Launcher(linear_kernel, buckets=ROW_BUCKETS)


def linear(h, w, scale=None, residual=None):
    """scale[:, None] * (h @ w.T) + residual in one kernel, scale and residual optional.

    h (M, K); w (N, K) as nn.Linear stores it; scale (M,) float32; residual (M, N) in h's dtype.
    Every matrix needs contiguous, 16-byte aligned rows (tensor descriptors read them)."""
    assert h.dim() == w.dim() == 2 and h.shape[1] == w.shape[1], "h (M, K) and w (N, K)"
    assert w.dtype == h.dtype, "h and w must share a dtype"
    M, K = h.shape
    N = w.shape[0]
    if scale is not None:
        assert scale.shape == (M,) and scale.dtype == torch.float32 and scale.stride(0) == 1, \
            "scale: (M,) float32, contiguous: one factor per row"
    out = h.new_empty((M, N))   # h's dtype and device
    _check_tma(h=h, w=w, out=out, **({} if residual is None else {"residual": residual}))
    if residual is not None:
        assert residual.shape == (M, N) and residual.dtype == h.dtype, "residual: (M, N), in h's dtype"
    _linear_launcher(_persistent_grid(M, N), h, w, scale, residual, out, M, N, K, h.stride(0), w.stride(0),
                     0 if residual is None else residual.stride(0),
                     HAS_SCALE=scale is not None, HAS_RESIDUAL=residual is not None)
    return out




# ---------------------------------------------------------------- the notebook's measuring cells


def _square_problem(n, config):
    """(one launch of matmul_kernel at n^3, float16, with `config`, as the autotuner runs a candidate),
    for a (n, n) @ (n, n) product on fresh random inputs."""
    a = torch.randn(n, n, device=DEVICE, dtype=torch.float16)
    b = torch.randn(n, n, device=DEVICE, dtype=torch.float16)
    c = torch.empty_like(a)
    args = dict(a_ptr=a, b_ptr=b, c_ptr=c, s_ptr=None, M=n, N=n, K=n, stride_a=n, stride_b=n, B_NK=False,
                HAS_SCALE=False, PDL=PDL)
    grid = (min(SMS, triton.cdiv(n, config.kwargs["BLOCK_M"]) * triton.cdiv(n, config.kwargs["BLOCK_N"])),)
    return lambda: matmul_kernel.fn[grid](**args, **config.all_kwargs())


def time_matmul_config(config, n):
    """TFLOP/s of the fast matmul at n^3 (float16) with one configuration, or the compiler's refusal."""
    try:
        ms = measure(_square_problem(n, config), graph=True)
    except Exception as e:  # noqa: BLE001  (a configuration this Triton does not compile for this GPU)
        return f"does not compile: {str(e).splitlines()[0][:80]}"
    return f"{2 * n**3 / ms / 1e9:6.0f} TFLOP/s"


def ladder(by_gpu, steps):
    """Per GPU and shape: each step's TFLOP/s, what it bought over the step before (in brackets), and
    the last but one step's share of the last. `steps`: words naming each step's implementation."""
    from helpers.bench import impl_named

    if not by_gpu:
        print("nothing measured or recorded for this group yet")
    for gpu, rows in by_gpu.items():
        names = [name for name in (impl_named(rows, step) for step in steps) if name]
        print(f"{gpu}: {' -> '.join(names)}")
        for label in dict.fromkeys(r["label"] for r in rows):
            speed = {r["impl"]: r["tflops"] for r in rows if r["label"] == label}
            line, before = [], None
            for name in (name for name in names if name in speed):
                bought = f" (x{speed[name] / speed[before]:.2f})" if before else ""
                line.append(f"{speed[name]:5.0f}{bought}")
                before = name
            tail = ""
            if len(names) > 1 and names[-2] in speed and names[-1] in speed:
                tail = f" | {names[-2]} at {speed[names[-2]] / speed[names[-1]]:.0%} of {names[-1]}"
            print(f"  {label:>10}: " + " -> ".join(line) + f" TFLOP/s{tail}")


def tiles_in_order(fn, a, b, *args, arg="c_desc.base"):
    """{program: [(tile row, tile column), ...]} in the order each program of fn(a, b, *args) stored its
    tiles of C (tiles of TMA_TILE), from the interpreter's record of every store."""
    from helpers import interpreter

    BM, BN, _ = TMA_TILE
    with interpreter.record(touches=True) as rec:
        fn(a, b, *args)
    order = {}
    for pid, name, kind, offs in rec.launches[-1].touches:
        if name == arg and kind == "store":
            first = int(offs.min())
            order.setdefault(pid[0], []).append((first // b.shape[1] // BM, first % b.shape[1] // BN))
    return order


def print_autotune_runs(rows):
    """One GPU's autotune_stability record, a line per shape and way of timing the candidates: the
    configuration each fresh process chose (a letter each, the letters' configurations beneath) and
    the range of speeds they reached, cuBLAS's beside them."""
    letters = {}
    for r in rows:
        letters.setdefault(r["config"], chr(ord("a") + len(letters)))
    timings = list(dict.fromkeys(r["timing"] for r in rows))
    width = max(len(timing) for timing in timings)
    print(f"  {'shape':>7}  {'candidates timed':{width}}  {'chosen':8}  {'TFLOP/s':>9}  {'cuBLAS':>9}")
    for shape in dict.fromkeys(r["shape"] for r in rows):
        for timing in timings:
            runs = sorted((r for r in rows if r["shape"] == shape and r["timing"] == timing),
                          key=lambda r: r["process"])
            if not runs:
                continue
            tflops, cublas = [r["tflops"] for r in runs], [r["cublas_tflops"] for r in runs]
            chosen = " ".join(letters[r["config"]] for r in runs)
            print(f"  {shape:>7}  {timing:{width}}  {chosen:8}  {min(tflops):4.0f}-{max(tflops):<4.0f}"
                  f"  {min(cublas):4.0f}-{max(cublas):<4.0f}")
    for config, letter in letters.items():
        print(f"  {letter}: {config}")


def print_launch_against_flush(record):
    """One GPU's launch_against_flush record (see _launch_against_flush), or that it is missing."""
    if not record:
        print("  the fast matmul's own figures: not recorded yet (`make bench LESSON=09` on a GPU)")
        return
    host = ", ".join(f"{what} {us:.1f} µs" for what, us in record["host_us"].items())
    print(f"  the fast matmul at {record['shape']} ({record['config']}): do_bench's flush measured "
          f"{record['flush_us']:.1f} µs on the GPU; host time per call: {host}")
    timed_us = record["timed_us"]
    both = ", ".join(f"{how} {us:.1f} µs" for how, us in timed_us.items())
    leak = timed_us["launched from Python"] - timed_us["graph replays"]
    print(f"  one candidate timed by do_bench: {both}: launched minus graphed, {leak:+.1f} µs")


# ---------------------------------------------------------------- make bench (GPU)


def benchmarks():
    """What `make bench` times for this lesson (GPU only): the matmul ladder, the decoder block's four
    matmuls, and RMSNorm + linear, each beside lesson 04's or 05's kernel and the vendor's."""
    import torch.nn.functional as F

    from helpers.bench import Bench
    from helpers.block import BlockConfig

    lesson04 = load_solution("04")
    prepared = Launcher(lesson04.matmul_kernel)

    def prepared_matmul(a, b):
        """lesson 04's matmul, its kernel launched through a launcher prepared once (helpers.launch): the
        same kernel and configuration, without the binding and the autotuner's lookup at every call."""
        (M, K), N = a.shape, b.shape[1]
        c = torch.empty((M, N), device=a.device, dtype=a.dtype)
        grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)  # noqa: E731
        prepared(grid, a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                 c.stride(1))
        return c

    for n in (1024, 2048, 4096, 8192):
        a = torch.randn(n, n, device="cuda", dtype=torch.float16)
        b = torch.randn(n, n, device="cuda", dtype=torch.float16)
        yield Bench("hopper_matmul_fp16", n, bytes=3 * 2 * n * n, flops=2 * n**3, label=f"{n}^3",
                    metric="TFLOP/s", graph=True,
                    impls={"lesson 09: matmul, launched prepared": lambda a=a, b=b: matmul(a, b),
                           "exercise 1: tma_matmul (grouped order)": lambda a=a, b=b: tma_matmul(a, b),
                           "exercise 2: persistent_matmul": lambda a=a, b=b: persistent_matmul(a, b),
                           "lesson 04: matmul": lambda a=a, b=b: lesson04.matmul(a, b),
                           "lesson 04: matmul, a launcher prepared once":
                               lambda a=a, b=b: prepared_matmul(a, b),
                           "cuBLAS": lambda a=a, b=b: a @ b})
        del a, b

    cfg = BlockConfig()
    d, f = cfg.dim, cfg.hidden
    for T in (2048, 8192):   # the block's four matmuls: lesson 04's mainloop, this lesson's, cuBLAS
        for name, (N, K) in {"Q|K|V": (3 * d, d), "output": (d, d), "gate|up": (2 * f, d),
                             "down": (d, f)}.items():
            a = torch.randn(T, K, device="cuda", dtype=torch.float16)
            wt = torch.randn(N, K, device="cuda", dtype=torch.float16) / K**0.5
            w_kn = wt.T.contiguous()   # (K, N) row-major: the layout lesson 04's loads were written for;
                                       # copied once, here, outside the timing
            yield Bench("block_matmuls_fp16", T * N * K, bytes=2 * (T * K + N * K + T * N),
                        flops=2 * T * N * K, label=f"{name} T{T}", metric="TFLOP/s", graph=True,
                        impls={"persistent, TMA (lesson 09)": lambda a=a, wt=wt: linear(a, wt),
                               "lesson 04's mainloop": lambda a=a, wt=wt: lesson04.matmul(a, wt.T),
                               "lesson 04's mainloop, W row-major (K, N)":
                                   lambda a=a, w_kn=w_kn: lesson04.matmul(a, w_kn),
                               "cuBLAS": lambda a=a, wt=wt: a @ wt.T})
            del a, wt, w_kn

    pair = lambda x, g, w: F.linear(F.rms_norm(x, (x.shape[1],), g, 1e-6), w)  # noqa: E731
    compiled_pair = torch.compile(pair, dynamic=False)
    for M, K, N in ((8192, 4096, 4096), (8192, 4096, 1024)):
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        g = (1 + 0.1 * torch.randn(K, device="cuda")).to(torch.bfloat16)
        w = (torch.randn(N, K, device="cuda") / K**0.5).to(torch.bfloat16)
        wf = fold_gamma(w, g)                               # once, when the weights are loaded
        # Timed as graph replays: each call of rmsnorm_linear makes two launches from Python, and
        # whatever of that host work outlasts do_bench's L2 flush (it varies from process to process)
        # would be timed as the GPU's.
        yield Bench("hopper_rmsnorm_linear_bf16", N, bytes=2 * (M * K + N * K + M * N), flops=2 * M * N * K,
                    label=f"M{M} K{K} N{N}", metric="TFLOP/s", graph=True,
                    impls={"lesson 09: rmsnorm_linear": lambda x=x, wf=wf: rmsnorm_linear(x, wf),
                           "lesson 05: same algebra, lesson 04-style matmul":
                               lambda x=x, wf=wf: lesson05.rmsnorm_linear_epilogue(x, wf),
                           "F.rms_norm + cuBLAS": lambda x=x, g=g, w=w: pair(x, g, w),
                           "torch.compile(both)": lambda x=x, g=g, w=w: compiled_pair(x, g, w)})
        del x, w, wf


# ---------------------------------------------------------------- recorded for the notebook (GPU)

# What to look for in Hopper code: TMA copies, wgmma, and the barriers that pace the pipeline.
# ttg.warp_specialize is the op of a loop the compiler split into partitions; the request alone is an
# attribute, tt.warp_specialize, which compiled_excerpt does not count as the op.
LOOK_FOR_HOPPER = {"ttgir": ("async_tma_copy_global_to_local", "warp_group_dot", "ttg.warp_specialize"),
                   "ptx": ("cp.async.bulk.tensor", "wgmma.mma_async", "mbarrier.try_wait", "ld.global")}
RECORDED = "09_hopper_matmul"      # helpers/recorded/09_hopper_matmul/<gpu>.json


def describe_config(config):
    """A configuration in a few words; warp_specialize=True says it was asked for (try_compile: granted?)."""
    kw = config.kwargs
    extra = ", warp_specialize=True" if kw.get("WARP_SPECIALIZE") else ""
    extra += ", flattened" if kw.get("FLATTEN") else ""
    extra += f", maxnreg={config.maxnreg}" if config.maxnreg else ""
    depth = f" (K steps of {kw['BLOCK_K']})" if kw.get("BLOCK_K", 64) != 64 else ""
    return (f"{kw['BLOCK_M']}x{kw['BLOCK_N']}{depth}, {config.num_warps} warps, {config.num_stages} "
            f"stages{extra}")


def _ws_ops(compiled):
    """How many lines of a compiled kernel's ttgir hold the op of a warp-specialised loop."""
    from helpers.compiled import holds

    return sum(holds(line, "ttg.warp_specialize") for line in compiled.asm["ttgir"].splitlines())


def try_compile(kernel, args, config, **what):
    """Compile `kernel` (an autotuner's JITFunction) for one configuration: whether it compiles, the
    first line of the compiler's error if not, and whether its ttgir holds `ttg.warp_specialize` (the
    loop split into producer and consumer partitions: asking for it does not mean it happened)."""
    if config.pre_hook:
        config.pre_hook({**args, **config.all_kwargs()})    # the descriptors' boxes for this configuration
    try:
        with compiler_quiet():   # a failing pass prints its whole module to stderr
            compiled = kernel.fn.warmup(**args, **config.all_kwargs(), grid=(1,))
        ok, error, specialised = True, "", _ws_ops(compiled) > 0
    except RuntimeError as e:
        ok, error, specialised = False, str(e).splitlines()[0][:200], None
    return {"kernel": kernel.fn.__name__, **what, "config": describe_config(config), "compiles": ok,
            "error": error, "specialised": specialised}


def _warp_specialize_survey():
    """Which warp-specialised configurations of `matmul_kernel` and `linear_kernel` this Triton compiles
    on this GPU, and whether what it compiled is warp-specialised."""
    rows = []
    a = torch.empty(1024, 1024, device="cuda", dtype=torch.float16)
    row_scale = torch.empty(1024, device="cuda", dtype=torch.float32)
    for config in (c for c in MATMUL_CONFIGS if c.kwargs["WARP_SPECIALIZE"]):
        for scale in (False, True):
            args = dict(a_ptr=a, b_ptr=a, c_ptr=a, s_ptr=row_scale, M=1024, N=1024, K=1024, stride_a=1024,
                        stride_b=1024, B_NK=False, HAS_SCALE=scale, PDL=PDL)
            rows.append(try_compile(matmul_kernel, args, config, head_dim=None, causal=None,
                                    epilogue="row scale" if scale else "none"))
    for config in (c for c in EPILOGUE_CONFIGS if c.kwargs["WARP_SPECIALIZE"]):
        for residual in (False, True):
            args = dict(h_ptr=a, w_ptr=a, s_ptr=row_scale, r_ptr=a, out_ptr=a, M=1024, N=1024, K=1024,
                        stride_h=1024, stride_w=1024, stride_r=1024, HAS_SCALE=True, HAS_RESIDUAL=residual)
            rows.append(try_compile(linear_kernel, args, config, head_dim=None, causal=None,
                                    epilogue="row scale and residual" if residual else "row scale"))
    return rows


def _launch_against_flush(n=1024):
    """What the default autotuner's timing of a candidate is made of, at n^3 float16: do_bench's L2 flush
    (zeroing a 256 MiB buffer) on the GPU, the host time of one candidate's launch from Python and of one
    graph replay, and the candidate timed both ways. Host time beyond the flush shows in the events."""
    import statistics

    from triton.runtime import driver

    cache = driver.active.get_empty_cache_for_benchmark()   # what do_bench zeroes before every call
    flush_us = []
    for _ in range(20):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        driver.active.clear_cache(cache)
        end.record()
        torch.cuda.synchronize()
        flush_us.append(1000 * start.elapsed_time(end))
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    matmul(a, b)                                   # the autotuner's choice at this shape
    config = matmul_kernel.best_config
    candidate = _square_problem(n, config)         # what the autotuner times for one configuration
    candidate()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        candidate()
    return {"shape": f"{n}^3", "config": describe_config(config),
            "flush_us": statistics.median(flush_us),
            "host_us": {"matmul(a, b)": host_us(lambda: matmul(a, b)),
                        "one candidate": host_us(candidate),
                        "graph.replay()": host_us(graph.replay)},
            "timed_us": {"launched from Python": 1000 * measure(candidate),
                         "graph replays": 1000 * measure(candidate, graph=True)}}


@triton.jit
def _copy_through_host_descriptors(a_desc, b_desc, c_desc, out_ptr, COUNT: tl.constexpr):
    """One tile copied through each of the first COUNT descriptors, built on the host, and summed."""
    total = tl.sum(a_desc.load([0, 0]).to(tl.float32))
    if COUNT > 1:
        total += tl.sum(b_desc.load([0, 0]).to(tl.float32)) + tl.sum(c_desc.load([0, 0]).to(tl.float32))
    tl.store(out_ptr + tl.program_id(0), total)


@triton.jit
def _copy_through_built_descriptors(a_ptr, b_ptr, c_ptr, out_ptr, n, COUNT: tl.constexpr):
    """The same copies through descriptors each program builds first, as matmul_kernel's programs do."""
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[n, n], strides=[n, 1], block_shape=[128, 64])
    total = tl.sum(a_desc.load([0, 0]).to(tl.float32))
    if COUNT > 1:
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[n, n], strides=[n, 1], block_shape=[128, 64])
        c_desc = tl.make_tensor_descriptor(c_ptr, shape=[n, n], strides=[n, 1], block_shape=[128, 64])
        total += tl.sum(b_desc.load([0, 0]).to(tl.float32)) + tl.sum(c_desc.load([0, 0]).to(tl.float32))
    tl.store(out_ptr + tl.program_id(0), total)


def _descriptor_build(n=1024):
    """What building tensor descriptors in the kernel costs the GPU at the start of a launch: SMS programs
    each copy one tile through one descriptor, or through three, built on the host or by the program
    itself; µs per launch, graph replays with L2 flushed (as the bench rows)."""
    a, b, c = (torch.randn(n, n, device="cuda", dtype=torch.float16) for _ in range(3))
    out = torch.empty(SMS, device="cuda", dtype=torch.float32)
    host = [descriptor(t, [128, 64]) for t in (a, b, c)]
    record = {"programs": SMS}
    for count in (1, 3):
        record[f"{count} host descriptor(s)"] = 1000 * measure(
            lambda count=count: _copy_through_host_descriptors[(SMS,)](*host, out, COUNT=count), graph=True)
        record[f"{count} built in the kernel"] = 1000 * measure(
            lambda count=count: _copy_through_built_descriptors[(SMS,)](a, b, c, out, n, COUNT=count),
            graph=True)
    return record


def print_descriptor_build(record):
    """One GPU's descriptor_build record (see _descriptor_build), or that it is missing."""
    if not record:
        print("  building descriptors in the kernel: not recorded yet (`make bench LESSON=09` on a GPU)")
        return
    for count in (1, 3):
        host, built = record[f"{count} host descriptor(s)"], record[f"{count} built in the kernel"]
        print(f"  {record['programs']} programs, each copying one tile through {count} descriptor(s): "
              f"{host:5.1f} µs built on the host, {built:5.1f} µs built by each program: "
              f"{built - host:+.1f} µs")


# How the autotuner may time its candidates: the lesson's way last.
STABILITY_TIMINGS = {
    "launched from Python": None,   # the autotuner's default: do_bench on launches from Python
    "graph replays back to back":   # Triton's do_bench_cudagraph: no L2 flush, no gap between replays
        lambda kernel_call, quantiles: triton.testing.do_bench_cudagraph(kernel_call, rep=100,
                                                                         quantiles=quantiles),
    "graph replays, L2 flushed": _graph_timed,
}


def _stability_probe(timing):
    """In a fresh process: autotune `matmul` at 1024^3, 2048^3 and 4096^3, candidates timed one way (a key
    of STABILITY_TIMINGS); print JSON."""
    import json

    global matmul_kernel, _matmul_launcher
    matmul_kernel = triton.autotune(configs=MATMUL_CONFIGS, key=["M", "N", "K", "B_NK", "HAS_SCALE"],
                                    prune_configs_by={"early_config_prune": _tiles_for_the_shape},
                                    do_bench=STABILITY_TIMINGS[timing])(matmul_kernel.fn)
    _matmul_launcher = Launcher(matmul_kernel, buckets=SIZE_BUCKETS)   # matmul launches this one
    _matmul_calls.clear()
    rows = []
    for n in (1024, 2048, 4096):
        a = torch.randn(n, n, device="cuda", dtype=torch.float16)
        b = torch.randn(n, n, device="cuda", dtype=torch.float16)
        ms, cublas_ms = measure(lambda: matmul(a, b), graph=True), measure(lambda: a @ b, graph=True)
        rows.append({"shape": f"{n}^3", "timing": timing,
                     "config": describe_config(matmul_kernel.best_config), "tflops": 2 * n**3 / ms / 1e9,
                     "cublas_tflops": 2 * n**3 / cublas_ms / 1e9})
    print(json.dumps(rows))


def _first_calls_probe():
    """In a fresh process (record_artifacts empties Triton's disk cache for it): how long `matmul`'s
    calls at new sizes take, (M, N, K) in turn: 2048^3, a new bucket, where the autotuner compiles and
    times its candidates; 3072 x 2048 x 2048, a new key in 2048's bucket (its choice, nothing timed);
    that key again, prepared; then, through a launcher without buckets, 2560 x 2048 x 2048, a new key
    the autotuner times again. Prints JSON rows."""
    import json
    import time

    global _matmul_launcher
    rows = []
    for M, what in ((2048, "a new bucket"), (3072, "a new size in a tuned bucket"),
                    (3072, "the same size again"), (2560, "a new size, no buckets")):
        if what == "a new size, no buckets":
            _matmul_launcher = Launcher(matmul_kernel)
            _matmul_calls.clear()
        a = torch.randn(M, 2048, device="cuda", dtype=torch.float16)
        b = torch.randn(2048, 2048, device="cuda", dtype=torch.float16)
        tuned_before = len(matmul_kernel.cache)
        torch.cuda.synchronize()
        start = time.perf_counter()
        c = matmul(a, b)
        torch.cuda.synchronize()
        ms = 1000 * (time.perf_counter() - start)
        torch.testing.assert_close(c, a @ b, rtol=1e-2, atol=1e-1)
        timed = len(matmul_kernel.configs_timings) if len(matmul_kernel.cache) > tuned_before else 0
        rows.append({"shape": f"{M} x 2048 x 2048", "call": what, "ms": ms, "candidates_timed": timed,
                     "config": describe_config(matmul_kernel.best_config)})
    print(json.dumps(rows))


def print_first_calls(rows):
    """One GPU's first_calls record (see _first_calls_probe), or that it is missing."""
    if not rows:
        print("  not recorded yet (`make bench LESSON=09` on a GPU)")
        return
    for r in rows:
        timed = f"{r['candidates_timed']} candidates timed" if r["candidates_timed"] else "nothing timed"
        print(f"  {r['shape']:18} {r['call']:30} {r['ms']:9.2f} ms  ({timed}; {r['config']})")


def record_artifacts(folder):
    """On a GPU (called by `make bench`): the fast matmul's compiled-code excerpt, which warp-specialised
    configurations compile and whether their ttgir is specialised, the autotuner's choice in three
    fresh processes per way of timing, host time per launch against do_bench's flush, what building
    descriptors in the kernel costs the GPU, and the first calls at new sizes (_first_calls_probe), into
    folder/09_hopper_matmul/<gpu>.json."""
    import json
    import os
    import subprocess
    import sys
    import tempfile

    from helpers import profile
    from helpers.bench import ROOT
    from helpers.compiled import compiled_excerpt

    n = 4096
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    c = torch.empty_like(a)
    config = _matmul_config(128, 256, 8, 3)
    args = dict(a_ptr=a, b_ptr=a, c_ptr=c, s_ptr=None, M=n, N=n, K=n, stride_a=n, stride_b=n, B_NK=False,
                HAS_SCALE=False, PDL=PDL)
    compiled = {"matmul_kernel": (f"# matmul_kernel, {describe_config(config)}, float16\n" +
                                  compiled_excerpt(matmul_kernel.fn[(SMS,)](**args, **config.all_kwargs()),
                                                   LOOK_FOR_HOPPER))}
    stability = []
    for timing in STABILITY_TIMINGS:
        for process in (1, 2, 3):
            code = ("from helpers.solutions import load_solution; "
                    f"load_solution('09')._stability_probe({timing!r})")
            out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                                 check=True).stdout
            stability += [{**row, "process": process} for row in json.loads(out.strip().splitlines()[-1])]
    code = "from helpers.solutions import load_solution; load_solution('09')._first_calls_probe()"
    with tempfile.TemporaryDirectory() as empty:    # Triton's disk cache empty: every compile is real
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                             check=True, env={**os.environ, "TRITON_CACHE_DIR": empty}).stdout
    first_calls = json.loads(out.strip().splitlines()[-1])
    record = {**profile.stamp(), "compiled": compiled, "warp_specialize": _warp_specialize_survey(),
              "autotune_stability": stability, "launch_against_flush": _launch_against_flush(),
              "descriptor_build": _descriptor_build(), "first_calls": first_calls}
    out = folder / RECORDED / (profile.slug(torch.cuda.get_device_name()) + ".json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1))


def recorded(name=RECORDED):
    """{GPU name: what record_artifacts recorded on it} in helpers/recorded/<name>/: {} where nothing is
    recorded yet."""
    import json

    from helpers.bench import ROOT

    found = {}
    for path in sorted((ROOT / "helpers" / "recorded" / name).glob("*.json")):
        data = json.loads(path.read_text())
        found[data["device"]] = data
    return found
