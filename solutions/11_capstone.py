"""Lesson 11 solutions: the decoder block of helpers/block.py, built from the course's kernels.

New kernels, each a launcher (check shapes, allocate, launch) beside a PyTorch reference:

    swiglu_linear    SiLU(h @ w_gate.T) * (h @ w_up.T): one matmul on lesson 09's mainloop, the
                     product in the epilogue
    rope_qk          RoPE on Q and K in one launch, read from any strides, written contiguous

and `decoder_block_fused`, the block from these and the kernels of lessons 05 (RMSNorm, and 1/rms per
row for the norm folded into the next matmul), 09 (`linear`: the matmuls, with the row scale and the
residual adds in their epilogues) and 10 (`causal_attention`, on the projection's layout).
Weights are in nn.Linear's (out, in) layout throughout; `pack_weights` concatenates them once.
"""

import functools

import torch
import torch.nn.functional as F

import helpers  # noqa: F401  (first: picks the GPU or the interpreter)
import triton
import triton.language as tl

from helpers.block import BlockConfig, rope, rope_tables
from helpers.device import pick
from helpers.launch import Launcher, cdiv, next_power_of_2
from helpers.solutions import load_solution

lesson05 = load_solution("05")   # inv_rms and rms_norm_rows
lesson06 = load_solution("06")   # flash_forward_causal
lesson09 = load_solution("09")   # linear, and its mainloop and tile order for swiglu_linear
lesson10 = load_solution("10")   # causal_attention
linear, causal_attention = lesson09.linear, lesson10.causal_attention
tile_origin, linear_tile, LINEAR_CONFIGS = lesson09.tile_origin, lesson09.linear_tile, lesson09.LINEAR_CONFIGS


# ---------------------------------------------------------------- SwiGLU: gate and up in one matmul

# Layout: the rows of w_gate and w_up interleaved, one by one: row 2j of w_gate_up is w_gate's row j,
# row 2j + 1 is w_up's. Then any tile of the product h @ w_gate_up.T holds matching gate and up
# columns side by side, whatever BLOCK_N the autotuner picks, and the mainloop computes it unchanged:
# one A tile, one B tile, one accumulator per K step. The epilogue splits the tile's columns into
# (even, odd) = (gate, up). Measured on an H100 against two alternatives (same mainloop):
#   * two accumulators of BLOCK_N / 2 columns, from two descriptors (gate rows, up rows): slower
#     at every shape, and a mainloop of its own;
#   * interleaving in blocks of BLOCK_N / 2 rows: as fast at best, but the packed weights are then
#     tied to one tile width, which the autotuner could no longer choose.


def pack_gate_up(w_gate, w_up):
    """(2f, d): w_gate's and w_up's rows interleaved, row 2j gate, row 2j + 1 up. Done once."""
    assert w_gate.shape == w_up.shape and w_gate.dim() == 2, "w_gate and w_up: both (f, d)"
    return torch.stack((w_gate, w_up), dim=1).reshape(2 * w_gate.shape[0], w_gate.shape[1])


def swiglu_linear_reference(h, w_gate_up):
    """SiLU(h @ w_gate.T) * (h @ w_up.T), with w_gate and w_up read back from the interleaved rows."""
    return F.silu(h @ w_gate_up[0::2].T) * (h @ w_gate_up[1::2].T)


@triton.autotune(configs=LINEAR_CONFIGS, key=["M", "N", "K"])
@triton.jit
def swiglu_linear_kernel(h_ptr, w_ptr, out_ptr, M, N, K, stride_h, stride_w, BLOCK_M: tl.constexpr,
                         BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """Tiles of h @ w_gate_up.T (N = 2f interleaved columns), each stored as BLOCK_N / 2 columns of
    SiLU(gate) * up; out (M, N / 2) contiguous."""
    h_desc = tl.make_tensor_descriptor(h_ptr, shape=[M, K], strides=[stride_h, 1],
                                       block_shape=[BLOCK_M, BLOCK_K])
    w_desc = tl.make_tensor_descriptor(w_ptr, shape=[N, K], strides=[stride_w, 1],
                                       block_shape=[BLOCK_N, BLOCK_K])
    out_desc = tl.make_tensor_descriptor(out_ptr, shape=[M, N // 2], strides=[N // 2, 1],
                                         block_shape=[BLOCK_M, BLOCK_N // 2])
    n_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for tile in tl.range(tl.program_id(0), n_tiles, tl.num_programs(0), flatten=True):
        off_m, off_n = tile_origin(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = linear_tile(h_desc, w_desc, off_m, off_n, K, BLOCK_M, BLOCK_N, BLOCK_K)
        gate, up = tl.split(tl.reshape(acc, (BLOCK_M, BLOCK_N // 2, 2)))   # even columns, odd columns
        y = gate * tl.sigmoid(gate) * up                                    # float32, in registers
        out_desc.store([off_m, off_n // 2], y.to(out_desc.dtype))


_swiglu_launcher = Launcher(swiglu_linear_kernel, buckets=lesson09.ROW_BUCKETS)   # as lesson 09's linear


def swiglu_linear(h, w_gate_up):
    """SiLU(h @ w_gate.T) * (h @ w_up.T) in one kernel; h (M, d), w_gate_up (2f, d) from pack_gate_up."""
    assert h.dim() == w_gate_up.dim() == 2 and h.shape[1] == w_gate_up.shape[1], "h (M, d), w_gate_up (2f, d)"
    assert w_gate_up.shape[0] % 2 == 0, "w_gate_up has two rows per output column: gate, up"
    assert w_gate_up.dtype == h.dtype, "h and w_gate_up must share a dtype"
    M, K = h.shape
    N = w_gate_up.shape[0]
    out = h.new_empty((M, N // 2))
    lesson09._check_tma(h=h, w_gate_up=w_gate_up, out=out)
    _swiglu_launcher(lesson09._persistent_grid(M, N), h, w_gate_up, out, M, N, K, h.stride(0),
                     w_gate_up.stride(0))
    return out


# ---------------------------------------------------------------- RoPE on Q and K, one launch


def rope_qk_reference(q, k, cos, sin):
    return rope(q, cos, sin), rope(k, cos, sin)


@triton.jit
def rotate_tile(src_ptr, dst_ptr, s_pos, s_dim, offs_pos, offs_half, half, cos, sin, mask):
    """Rotate the (first half, second half) pairs of BLOCK_POS rows of one head; write them contiguous."""
    first = src_ptr + offs_pos[:, None] * s_pos + offs_half[None, :] * s_dim
    x1 = tl.load(first, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(first + half * s_dim, mask=mask, other=0.0).to(tl.float32)
    out = dst_ptr + offs_pos[:, None] * (2 * half) + offs_half[None, :]    # rows of 2 * half = D values
    tl.store(out, (x1 * cos - x2 * sin).to(dst_ptr.dtype.element_ty), mask=mask)
    tl.store(out + half, (x1 * sin + x2 * cos).to(dst_ptr.dtype.element_ty), mask=mask)


@triton.jit
def rope_qk_kernel(q_ptr, k_ptr, cos_ptr, sin_ptr, qo_ptr, ko_ptr, n_heads, seq, half,
                   sq_b, sq_h, sq_n, sq_d, sk_b, sk_h, sk_n, sk_d, s_cos, s_sin,
                   BLOCK_POS: tl.constexpr, BLOCK_HALF: tl.constexpr):
    """BLOCK_POS positions of one (batch, head), of Q and of K: cos and sin are loaded once for both."""
    # int64 offsets: offs_pos * sq_n passes 2^31 once N * 3d does (the projection's rows are 3d long),
    # and b * sq_b at large batches
    offs_pos = (tl.program_id(0) * BLOCK_POS + tl.arange(0, BLOCK_POS)).to(tl.int64)
    bh = tl.program_id(1)
    b, h = (bh // n_heads).to(tl.int64), (bh % n_heads).to(tl.int64)
    offs_half = tl.arange(0, BLOCK_HALF)
    mask = (offs_pos[:, None] < seq) & (offs_half[None, :] < half)
    cos = tl.load(cos_ptr + offs_pos[:, None] * s_cos + offs_half[None, :], mask=mask, other=0.0)
    sin = tl.load(sin_ptr + offs_pos[:, None] * s_sin + offs_half[None, :], mask=mask, other=0.0)
    out_head = bh.to(tl.int64) * seq * 2 * half                          # outputs: (B, H, N, D) contiguous
    rotate_tile(q_ptr + b * sq_b + h * sq_h, qo_ptr + out_head, sq_n, sq_d, offs_pos, offs_half, half,
                cos, sin, mask)
    rotate_tile(k_ptr + b * sk_b + h * sk_h, ko_ptr + out_head, sk_n, sk_d, offs_pos, offs_half, half,
                cos, sin, mask)


_rope_launcher = Launcher(rope_qk_kernel)   # launches prepared once per key (helpers.launch)


def rope_qk(q, k, cos, sin):
    """RoPE (half-split pairs) on q and k, (B, H, N, D) of any strides: (q_rot, k_rot), both contiguous.

    cos, sin: (N, D / 2) float32, as helpers.block.rope_tables gives them. The arithmetic is float32.
    Lesson 06's FlashAttention reads contiguous (B, H, N, D) tensors: writing that layout, the rotation
    also does the copy that the projection's views would otherwise need.
    """
    assert q.dim() == 4 and q.shape == k.shape and q.dtype == k.dtype, "q and k: (B, H, N, D), one dtype"
    B, H, N, D = q.shape
    assert D % 2 == 0 and cos.shape == sin.shape == (N, D // 2), "cos and sin: (N, D / 2), D even"
    assert cos.stride(1) == sin.stride(1) == 1, "cos and sin: rows of contiguous values"
    q_rot, k_rot = q.new_empty((B, H, N, D)), q.new_empty((B, H, N, D))   # contiguous, q's dtype
    BLOCK_POS = pick(cpu=16, gpu=64)
    grid = (cdiv(N, BLOCK_POS), B * H)   # helpers.launch: triton.cdiv at a tenth of its host time
    _rope_launcher(grid, q, k, cos, sin, q_rot, k_rot, H, N, D // 2, *q.stride(), *k.stride(),
                   cos.stride(0), sin.stride(0), BLOCK_POS=BLOCK_POS,
                   BLOCK_HALF=next_power_of_2(D // 2), num_warps=4)
    return q_rot, k_rot


# ---------------------------------------------------------------- the decoder block


def pack_weights(w, cfg: BlockConfig):
    """The block's weights as decoder_block_fused reads them, packed once (this copies the matrices):

    wqkv:      wq, wk, wv stacked, (3d, d), with the attention norm's gamma folded into its columns:
               rms_norm(x) * gamma @ W.T = (1 / rms(x))[:, None] * (x @ (W * gamma).T), so one matmul
               with a row scale in its epilogue makes the normalised Q, K and V
    w_gate_up: w_gate's and w_up's rows interleaved, (2f, d): pack_gate_up
    the others as they are, every matrix contiguous and (out, in).
    """
    assert w["wq"].shape == (cfg.dim, cfg.dim) and w["w_gate"].shape == (cfg.hidden, cfg.dim), \
        "weights of another BlockConfig"
    wqkv = torch.cat((w["wq"], w["wk"], w["wv"]), dim=0)
    return {"wqkv": (wqkv * w["attn_norm"].to(wqkv.dtype)[None, :]).contiguous(),
            "wo": w["wo"].contiguous(), "mlp_norm": w["mlp_norm"].contiguous(),
            "w_gate_up": pack_gate_up(w["w_gate"], w["w_up"]), "w_down": w["w_down"].contiguous()}


@functools.lru_cache(maxsize=16)
def _rope_tables(cfg, seq, device):
    """rope_tables, computed once per (config, length, device): the forward launches no kernel for them."""
    return rope_tables(cfg, seq, device)


def decoder_block_fused(x, w, cfg: BlockConfig):
    """helpers.block.decoder_block(x, w, cfg, attention="sdpa"), from the course's kernels.

    x: (batch, seq, dim). w: pack_weights(...)'s dict (given block_weights' dict instead, it is packed
    on every call). Launches 8 Triton kernels, in order, and no copy:
      1. lesson 05's inv_rms: 1 / rms of each row of x                     -> (T,) float32
      2. linear with that row scale: the Q|K|V matmul, gamma folded in     -> (T, 3d)
      3. rope_qk: Q and K rotated, from views of (2)                        -> 2 x (B, H, N, D)
      4. causal_attention: V read in place from (2), the heads side by side -> (T, d)
      5. linear with a residual: x + attention @ wo.T                       -> (T, d)
      6. lesson 05's rms_norm_rows                                          -> (T, d)
      7. swiglu_linear                                                      -> (T, f)
      8. linear with a residual: (5) + mlp @ w_down.T                       -> (T, d)
    Each intermediate is dropped (del) as soon as the next step has read it: the caching allocator
    then reuses its memory, which keeps the forward's peak memory low.
    """
    if "wqkv" not in w:
        w = pack_weights(w, cfg)
    B, N, d = x.shape
    H, D = cfg.n_heads, cfg.head_dim
    x2 = x.reshape(B * N, d)
    qkv = linear(x2, w["wqkv"], scale=lesson05.inv_rms(x2, cfg.eps))              # 1, 2
    q, k, v = (qkv[:, i * d:(i + 1) * d].view(B, N, H, D).transpose(1, 2) for i in range(3))
    cos, sin = _rope_tables(cfg, N, x.device)
    q, k = rope_qk(q, k, cos, sin)                                                 # 3
    a = causal_attention(q, k, v).view(B * N, d)                                   # 4
    del qkv, q, k, v
    x2 = linear(a, w["wo"], residual=x2)                                           # 5
    del a
    h = lesson05.rms_norm_rows(x2, w["mlp_norm"], cfg.eps)                         # 6
    mlp = swiglu_linear(h, w["w_gate_up"])                                         # 7
    del h
    return linear(mlp, w["w_down"], residual=x2).view(B, N, d)                     # 8


class CapturedStep:
    """step = CapturedStep(fn); step(x): fn(x) replayed from a CUDA graph, one per input shape.

    The first call at a shape runs fn once (it compiles and autotunes), then captures a second call
    on a copy of x; every call after copies x into that copy, replays the graph and returns a copy of
    its output. From Python that is three launches (copy in, the graph, copy out) where fn makes eight
    Triton launches of tens of µs of host time each. What the graph holds fixed: the addresses of the
    weights fn reads (they must not be replaced) and everything fn computes from x's shape alone.
    Without a GPU, fn(x) itself."""

    def __init__(self, fn):
        self.fn = fn
        self.graphs = {}     # (shape, dtype, strides) -> (graph, its input, its output)

    def __call__(self, x):
        if x.device.type != "cuda":
            return self.fn(x)
        key = (tuple(x.shape), x.dtype, x.stride())
        if key not in self.graphs:
            static_x = x.clone()
            self.fn(static_x)                 # compiles, autotunes, fills the caches: not in the graph
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                static_out = self.fn(static_x)
            self.graphs[key] = (graph, static_x, static_out)
        graph, static_x, static_out = self.graphs[key]
        static_x.copy_(x)
        graph.replay()
        return static_out.clone()             # the next replay overwrites static_out


# ---------------------------------------------------------------- a figure from elsewhere

# Cited, not measured by the course: Hazy Research, "Look Ma, No Bubbles! Designing a Low-Latency
# Megakernel for Llama-1B" (hazyresearch.stanford.edu/blog/2025-05-27-no-bubbles, 2025-05-27). One
# sequence of Llama-3.2-1B decoded in bfloat16 on an H100, as a share of its memory bandwidth.
NO_BUBBLES = {"source": "Hazy Research, \"Look Ma, No Bubbles!\" (2025-05-27), Llama-1B decoding on an H100",
              "megakernel": 0.78, "vLLM and SGLang, at most": 0.50}


# ---------------------------------------------------------------- make bench (GPU)

BLOCK_SHAPES = ((1, 2048), (4, 2048), (1, 8192))   # (batch, sequence) of a prefill, at 7B width
DECODE_SHAPES = ((1, 16), (8, 16))                 # a few tokens: the step lesson 08 found launch-bound


def _block_impls(cfg, x, w, packed, compiled, autotuned=None):
    """The block's forward several ways, each a zero-argument callable."""
    from helpers.block import decoder_block

    impls = {"course kernels (lesson 11)": lambda: decoder_block_fused(x, packed, cfg),
             "eager + SDPA": lambda: decoder_block(x, w, cfg, attention="sdpa"),
             "torch.compile(eager + SDPA)": lambda: compiled(x, w, cfg, attention="sdpa")}
    if autotuned is not None:
        impls["torch.compile max-autotune"] = lambda: autotuned(x, w, cfg, attention="sdpa")
    return impls


def _block_benches(cfg, w, packed):
    """The block's forward: prefill shapes, then decoding shapes launched from Python (called back to
    back, as a decoding loop calls it) and replayed as CUDA graphs (the same kernels, without the CPU's
    launches)."""
    from helpers.bench import Bench
    from helpers.block import block_flops, block_input, decoder_block

    compiled = torch.compile(decoder_block, dynamic=False)
    # max-autotune times Triton templates against cuBLAS for every matmul shape while compiling
    # (minutes per shape): timed at the first prefill shape only. Its CUDA graphs are left off so
    # that it is timed like the others.
    autotuned = torch.compile(decoder_block, dynamic=False, mode="max-autotune-no-cudagraphs")
    weights_bytes = sum(t.nbytes for t in w.values())
    for B, N in BLOCK_SHAPES:
        x = block_input(cfg, B, N, "cuda", torch.float16)
        yield Bench("block_forward_fp16", B * N, bytes=2 * x.nbytes + weights_bytes,
                    flops=block_flops(cfg, B, N), label=f"B{B} N{N}", metric="TFLOP/s",
                    impls=_block_impls(cfg, x, w, packed, compiled,
                                       autotuned if (B, N) == BLOCK_SHAPES[0] else None))
        del x
    # From Python, the course's kernels also as one CUDA graph per shape (CapturedStep): the launch
    # bill a learner can remove without changing a kernel.
    captured = CapturedStep(lambda x: decoder_block_fused(x, packed, cfg))
    for group, graph in (("block_decode_fp16", False), ("block_decode_graphed_fp16", True)):
        for B, N in DECODE_SHAPES:
            x = block_input(cfg, B, N, "cuda", torch.float16)
            impls = _block_impls(cfg, x, w, packed, compiled)
            if not graph:
                impls["course kernels, captured once (CapturedStep)"] = lambda x=x: captured(x)
            yield Bench(group, B * N, bytes=2 * x.nbytes + weights_bytes, flops=block_flops(cfg, B, N),
                        label=f"B{B} N{N}", metric="GB/s", graph=graph, back_to_back=not graph, impls=impls)
            del x


def benchmarks():
    """What `make bench` times for this lesson (GPU only): the block, and the SwiGLU MLP."""
    from helpers.bench import Bench
    from helpers.block import block_weights

    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    cfg = BlockConfig()
    w = block_weights(cfg, "cuda", torch.float16)
    packed = pack_weights(w, cfg)
    yield from _block_benches(cfg, w, packed)

    d, f = cfg.dim, cfg.hidden
    swiglu_eager = lambda h, wg, wu: F.silu(h @ wg.T) * (h @ wu.T)  # noqa: E731
    swiglu_compiled = torch.compile(swiglu_eager, dynamic=False)
    wg, wu, wgu = w["w_gate"], w["w_up"], packed["w_gate_up"]
    w_cat = torch.cat((wg, wu), dim=0)

    def unfused(h):   # the same mainloop, then SiLU and the product as PyTorch kernels
        gate_up = linear(h, w_cat)
        return F.silu(gate_up[:, :f]) * gate_up[:, f:]

    for T in (2048, 4096, 16384):
        h = torch.randn(T, d, device="cuda", dtype=torch.float16)
        yield Bench("swiglu_fp16", T, bytes=2 * (T * d + 2 * f * d + T * f), flops=4 * T * d * f,
                    label=f"T{T} d{d} f{f}", metric="TFLOP/s", graph=True,
                    impls={"course: one matmul, SiLU*mul epilogue": lambda h=h: swiglu_linear(h, wgu),
                           "course matmul, then SiLU, mul": lambda h=h: unfused(h),
                           "eager: two matmuls, SiLU, mul": lambda h=h: swiglu_eager(h, wg, wu),
                           "torch.compile": lambda h=h: swiglu_compiled(h, wg, wu)})
        del h



def _host_us(fn):
    """helpers.bench.host_us, to a tenth of a µs: the CPU's time in one call, the GPU idle before it (the
    time to enqueue its launches, which is what a launch-bound step is made of)."""
    from helpers.bench import host_us

    return round(host_us(fn), 1)


@triton.jit
def _empty_kernel(x_ptr):
    """Does nothing: what a launch from Python costs by itself."""
    pass


def _launch_parts(h, w_gate_up):
    """Host microseconds of one launch of swiglu_linear_kernel, piece by piece: a kernel that does
    nothing; a grid's ceiling division through triton.cdiv and through plain Python; the kernel with
    its best config given (no autotuner) and descriptor scratch taken from a buffer allocated once; the
    same with the course's allocator (lesson 09's: two buffers per stream, taken in turn, each handed
    over as its address);
    through the autotuner; and through a launcher prepared once (helpers.launch), as swiglu_linear
    launches it (launch_steps_us times swiglu_linear whole: its checks, its output, that launch)."""
    from triton.runtime import _allocation

    M, K = h.shape
    N = w_gate_up.shape[0]
    out = swiglu_linear(h, w_gate_up)                      # autotunes for this shape, once
    grid = lesson09._persistent_grid(M, N)
    args = (h, w_gate_up, out, M, N, K, h.stride(0), w_gate_up.stride(0))
    parts = {"a Triton kernel that does nothing (one argument)": _host_us(lambda: _empty_kernel[(1,)](h)),
             "triton.cdiv(M, 128), from Python": _host_us(lambda: triton.cdiv(M, 128)),
             "helpers.launch.cdiv(M, 128)": _host_us(lambda: cdiv(M, 128))}
    try:
        best = swiglu_linear_kernel.best_config
        one_config = lambda: swiglu_linear_kernel.fn[grid](*args, **best.all_kwargs())  # noqa: E731
        scratch = torch.empty(1 << 20, device=h.device, dtype=torch.int8)
        allocator = _allocation._allocator.get()
        triton.set_allocator(lambda size, alignment, stream: scratch)
        try:
            parts["swiglu_linear_kernel, one config, scratch allocated once"] = _host_us(one_config)
        finally:
            triton.set_allocator(allocator)
        parts["swiglu_linear_kernel, one config"] = _host_us(one_config)
    except Exception as e:  # noqa: BLE001  (Triton's internals move between versions: record why)
        parts["not recorded: " + type(e).__name__] = str(e)[:200]
    parts["swiglu_linear_kernel, through the autotuner"] = _host_us(lambda: swiglu_linear_kernel[grid](*args))
    try:
        prepared = Launcher(swiglu_linear_kernel)
        prepared(grid, *args)                              # the first call at this key: the slow way
        parts["swiglu_linear_kernel, a launcher prepared once (helpers.launch)"] = _host_us(
            lambda: prepared(grid, *args))
    except Exception as e:  # noqa: BLE001  (record why, as above)
        parts["not recorded (prepared launcher): " + type(e).__name__] = str(e)[:200]
    return parts


def _launch_steps(x, w, cfg):
    """Host microseconds of each of decoder_block_fused's eight launcher calls, on one input."""
    B, N, d = x.shape
    H, D = cfg.n_heads, cfg.head_dim
    x2 = x.reshape(B * N, d)
    s = lesson05.inv_rms(x2, cfg.eps)
    qkv = linear(x2, w["wqkv"], scale=s)
    q, k, v = (qkv[:, i * d:(i + 1) * d].view(B, N, H, D).transpose(1, 2) for i in range(3))
    cos, sin = _rope_tables(cfg, N, x.device)
    q_rot, k_rot = rope_qk(q, k, cos, sin)
    a = causal_attention(q_rot, k_rot, v).view(B * N, d)
    x3 = linear(a, w["wo"], residual=x2)
    h = lesson05.rms_norm_rows(x3, w["mlp_norm"], cfg.eps)
    mlp = swiglu_linear(h, w["w_gate_up"])
    steps = {"1 inv_rms (lesson 05)": lambda: lesson05.inv_rms(x2, cfg.eps),
             "2 linear, row scale (lesson 09)": lambda: linear(x2, w["wqkv"], scale=s),
             "3 rope_qk": lambda: rope_qk(q, k, cos, sin),
             "4 causal_attention (lesson 10)": lambda: causal_attention(q_rot, k_rot, v),
             "5 linear, residual (lesson 09)": lambda: linear(a, w["wo"], residual=x2),
             "6 rms_norm_rows (lesson 05)": lambda: lesson05.rms_norm_rows(x3, w["mlp_norm"], cfg.eps),
             "7 swiglu_linear": lambda: swiglu_linear(h, w["w_gate_up"]),
             "8 linear, residual (lesson 09)": lambda: linear(mlp, w["w_down"], residual=x3)}
    return {name: _host_us(fn) for name, fn in steps.items()}, _launch_parts(h, w["w_gate_up"])


def _median_us(records):
    """{name: the median of its µs over the records}; an entry that is not a time (why it is missing)
    kept from the first record."""
    import statistics

    return {name: statistics.median(r[name] for r in records) if isinstance(us, float) else us
            for name, us in records[0].items()}


def record_artifacts(folder):
    """On a GPU (called by `make bench`): per forward of the block, for each implementation and shape,
    the peak memory, the kernels launched and the longest of them; at the first decoding shape, the
    CPU's time in each of the course's eight launches (`launch_steps_us`) and in one launch taken
    apart (`launch_parts_us`). Into folder/11_block/<gpu>.json. (The CPU's time in one whole forward
    is the bench rows' `host_us`, measured beside their timings.)"""
    import json
    import pathlib
    import tempfile

    from helpers import profile
    from helpers.block import block_input, block_weights, decoder_block

    kernel_table = load_solution("08").kernel_table   # lesson 08: a trace's kernels grouped by name
    cfg = BlockConfig()
    w = block_weights(cfg, "cuda", torch.float16)
    packed = pack_weights(w, cfg)
    # The CPU's times, each the median of three rounds over all of them: a host's pace drifts within a
    # process, and rounds spread the drift over every figure
    B, N = DECODE_SHAPES[0]
    launch_label = f"B{B} N{N}"
    x = block_input(cfg, B, N, "cuda", torch.float16)
    rounds = [_launch_steps(x, packed, cfg) for _ in range(3)]
    steps = _median_us([steps for steps, _ in rounds])
    parts = _median_us([parts for _, parts in rounds])
    compiled = torch.compile(decoder_block, dynamic=False)
    rows = []
    for B, N in BLOCK_SHAPES + DECODE_SHAPES:
        x = block_input(cfg, B, N, "cuda", torch.float16)
        for name, fn in _block_impls(cfg, x, w, packed, compiled).items():
            fn()
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            fn()
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated() - base
            with tempfile.TemporaryDirectory() as tmp:
                trace = profile.save_trace(profile.profile_step(fn, warmup=1, memory=False),
                                           pathlib.Path(tmp) / "step.trace.json.gz")
            kernels = [{**k, "name": k["name"][:80]} for k in profile.kernel_events(trace)]
            longest = [[row["name"], round(row["total_us"], 1), row["calls"]]
                       for row in kernel_table(kernels)[:8]]
            rows.append({"label": f"B{B} N{N}", "impl": name, "peak_mib": round(peak / 2**20, 1),
                         "kernels": len(kernels), "longest_kernels": longest})
        del x
    out = folder / "11_block" / (profile.slug(torch.cuda.get_device_name()) + ".json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({**profile.stamp(), "rows": rows, "launch_label": launch_label,
                               "launch_steps_us": steps, "launch_parts_us": parts}, indent=1))
