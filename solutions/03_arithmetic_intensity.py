"""Lesson 03 solutions: counting FLOPs and bytes, the roofline, predictions, and an honest timer.

Also the lesson's worked kernel, a matmul with no tile reuse (one row of A at a time), which
`make bench` times beside cuBLAS and a few eager operations for the roofline plot.
"""

import statistics

import torch

import helpers  # noqa: F401  (first: picks the GPU or the interpreter)
import triton
import triton.language as tl

from helpers.bench import Bench


def matmul_cost(M, N, K, dtype):
    """{"flops", "bytes"} of C = A @ B, A (M, K), B (K, N), each operand read once, C written once."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    return {"flops": 2 * M * N * K,                        # one multiply and one add per (m, n, k)
            "bytes": (M * K + K * N + M * N) * itemsize}


def roofline(flops, nbytes, peak_tflops, bandwidth_tbs):
    """{"intensity", "bound", "tflops"}: FLOP/byte, which side of the ridge, the roof's TFLOP/s."""
    intensity = flops / nbytes
    ridge = peak_tflops / bandwidth_tbs
    return {"intensity": intensity,
            "bound": "memory" if intensity < ridge else "compute",
            "tflops": min(peak_tflops, intensity * bandwidth_tbs)}  # FLOP/B x TB/s = TFLOP/s


def ridge_predictions():
    """"memory" or "compute" for each operation of OPERATIONS, on an H100 SXM."""
    return {
        "vector_add_fp32": "memory",          # 1 FLOP per 12 bytes
        "softmax_fp32": "memory",             # about 5 FLOP per 8 bytes
        "matmul_4096": "compute",             # n/3 = 1365 FLOP/B, ridge 295
        "matmul_512": "memory",               # n/3 = 171 FLOP/B: under the ridge
        "gemv_8192": "memory",                # each matrix element used once: about 1 FLOP/B
        "matmul_16_tokens": "memory",         # the weight is read for 16 rows only: about 16 FLOP/B
        "matmul_k64": "memory",               # the output dominates the traffic: about 63 FLOP/B
        "projection_16384_tokens": "compute",  # about 1820 FLOP/B
        "attention_scores": "memory",         # writing the N x N scores: about 120 FLOP/B
        "polynomial_degree_100": "compute",   # 200 FLOP per 8 bytes = 25, fp32 ridge 20
    }


def time_ms(launch, inputs, clock, synchronize, warmup=5, reps=50):
    """The median time of one `launch(x)` in milliseconds, measured honestly."""
    for i in range(warmup):                   # compile, load, allocate: none of it is timed
        launch(inputs[i % len(inputs)])
    synchronize()                             # start from an idle device
    times = []
    for i in range(warmup, warmup + reps):
        x = inputs[i % len(inputs)]           # rotate: never the buffer the last call left in cache
        start = clock()
        launch(x)
        synchronize()                         # the launch returned at once; wait for the work
        times.append(clock() - start)
    return statistics.median(times) * 1e3     # the median shrugs off a run disturbed by others


# ---------------------------------------------------------------- the lesson's worked kernel


@triton.jit
def rowwise_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                          stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                          BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """C[m, n0:n0+BLOCK_N] = A[m, :] @ B[:, n0:n0+BLOCK_N]: one row of A against a strip of B."""
    m = tl.program_id(0)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        a = tl.load(a_ptr + m * stride_am + offs_k * stride_ak, mask=offs_k < K, other=0.0)
        b = tl.load(b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn,
                    mask=(offs_k[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc += tl.sum(a.to(tl.float32)[:, None] * b.to(tl.float32), axis=0)
    tl.store(c_ptr + m * stride_cm + offs_n * stride_cn, acc.to(c_ptr.dtype.element_ty), mask=offs_n < N)


def rowwise_matmul(a, b, BLOCK_N=64, BLOCK_K=64):
    """a @ b, one program per (row of a, strip of BLOCK_N columns of b)."""
    assert a.dim() == b.dim() == 2 and a.shape[1] == b.shape[0], "rowwise_matmul takes (M, K) and (K, N)"
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    grid = (M, triton.cdiv(N, BLOCK_N))
    rowwise_matmul_kernel[grid](a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride(),
                                BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K)
    return c


def benchmarks():
    """What `make bench` times for this lesson (GPU only): points for the roofline."""
    for n in (256, 512, 1024, 2048, 4096, 8192):
        a, b = torch.randn(n, n, device="cuda", dtype=torch.float16), torch.randn(n, n, device="cuda",
                                                                                  dtype=torch.float16)
        yield Bench("matmul_by_size_fp16", n, bytes=3 * n * n * 2, flops=2 * n**3, label=f"{n}^3",
                    metric="TFLOP/s", impls={"cuBLAS (torch.matmul)": lambda a=a, b=b: a @ b})
    for n in (1024, 2048, 4096):
        a, b = torch.randn(n, n, device="cuda", dtype=torch.float16), torch.randn(n, n, device="cuda",
                                                                                  dtype=torch.float16)
        yield Bench("rowwise_matmul_fp16", n, bytes=3 * n * n * 2, flops=2 * n**3, label=f"{n}^3",
                    metric="TFLOP/s", impls={"row-at-a-time (Triton)": lambda a=a, b=b: rowwise_matmul(a, b),
                                             "cuBLAS (torch.matmul)": lambda a=a, b=b: a @ b})
    for n in (2**24, 2**26):  # 64 and 256 MB per tensor: far beyond the 50 MB L2
        x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        rows = x.view(-1, 4096)
        yield Bench("eager_ops_fp32", n, bytes=12 * n, flops=n, label=f"n=2^{n.bit_length() - 1}",
                    impls={"x + y": lambda x=x, y=y: x + y})
        yield Bench("eager_ops_fp32", n, bytes=8 * n, flops=5 * n, label=f"n=2^{n.bit_length() - 1}",
                    impls={"softmax, rows of 4096": lambda rows=rows: torch.softmax(rows, dim=-1)})
    for n in (4096, 8192, 16384):
        a, v = torch.randn(n, n, device="cuda", dtype=torch.float16), torch.randn(n, device="cuda",
                                                                                  dtype=torch.float16)
        yield Bench("gemv_fp16", n, bytes=2 * (n * n + 2 * n), flops=2 * n * n, label=f"{n}x{n}",
                    impls={"torch.mv": lambda a=a, v=v: torch.mv(a, v)})
