"""Lesson 04 solutions: a 2-D kernel over strided tensors, grouped tile order, a tiled matmul, and a
matmul whose epilogue adds a bias and applies GELU before the single store.

Both matmul kernels call one mainloop, `matmul_tile`; they differ only in what they do with its tile
before the store.

On a GPU, `make bench` times these kernels against cuBLAS (`benchmarks()`) and records the excerpt of
the compiled code that the notebook shows on a CPU (`record_artifacts`).
"""

import torch
import torch.nn.functional as F

import helpers  # noqa: F401  (first: picks the GPU or the interpreter)
import triton
import triton.language as tl

from helpers.bench import Bench
from helpers.compiled import compiled_excerpt
from helpers.device import pick

# ---------------------------------------------------------------- a 2-D kernel over strided tensors


@triton.jit
def add_2d_kernel(x_ptr, y_ptr, out_ptr, M, N,
                  stride_xm, stride_xn, stride_ym, stride_yn, stride_om, stride_on,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """out = x + y for one BLOCK_M x BLOCK_N tile; every tensor has its own strides."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    x = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_n[None, :] * stride_xn, mask=mask)
    y = tl.load(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn, mask=mask)
    tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :] * stride_on, x + y, mask=mask)


def add_2d(x, y):
    """x + y for two (M, N) tensors of any strides; the result is contiguous."""
    assert x.shape == y.shape and x.dim() == 2, "add_2d takes two matrices of the same shape"
    M, N = x.shape
    out = torch.empty((M, N), device=x.device, dtype=x.dtype)
    BLOCK = pick(cpu=32, gpu=64)
    grid = (triton.cdiv(M, BLOCK), triton.cdiv(N, BLOCK))
    add_2d_kernel[grid](x, y, out, M, N, x.stride(0), x.stride(1), y.stride(0), y.stride(1),
                        out.stride(0), out.stride(1), BLOCK_M=BLOCK, BLOCK_N=BLOCK)
    return out


# ---------------------------------------------------------------- grouped tile order


def grouped_order(pid, num_pid_m, num_pid_n, group_m):
    """(pid_m, pid_n): the output tile that program `pid` computes, in groups of `group_m` tile rows."""
    per_group = group_m * num_pid_n               # programs in one group of group_m tile rows
    first_m = (pid // per_group) * group_m        # the group's first tile row
    rows = min(num_pid_m - first_m, group_m)      # the last group may have fewer rows
    pid_m = first_m + (pid % per_group) % rows    # walk down the group's rows first...
    pid_n = (pid % per_group) // rows             # ...then move one tile column to the right
    return pid_m, pid_n


# ---------------------------------------------------------------- the tiled matmul

def _config(bm, bn, bk, group_m, warps, stages):
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group_m},
                         num_warps=warps, num_stages=stages)


# On the CPU one small config (the interpreter cannot time anything); on a GPU, a search over
# tiles of 64 to 256, 4 or 8 warps, 3 to 5 stages of software pipelining.
MATMUL_CONFIGS = pick(
    cpu=[_config(64, 64, 64, 4, warps=4, stages=1)],
    gpu=[_config(bm, bn, 64, 8, warps, stages)
         for bm, bn, warps, stages in [(128, 256, 8, 3), (128, 256, 8, 4), (256, 128, 8, 3), (256, 128, 8, 4),
                                       (128, 128, 8, 4), (128, 128, 4, 4), (128, 128, 8, 5), (128, 64, 4, 4),
                                       (64, 128, 4, 4)]],
)


@triton.jit
def matmul_tile(a_ptr, b_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """The mainloop: this program's BLOCK_M x BLOCK_N tile of A @ B, summed in float32.

    Returns (acc, offs_m, offs_n): the tile, still in registers, and the rows and columns of C it is for.
    """
    pid = tl.program_id(0)                        # 1. which tile: grouped order, as in grouped_order
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * num_pid_n
    first_m = (pid // per_group) * GROUP_M
    rows = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % rows
    pid_n = (pid % per_group) // rows
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # 2. offsets, and pointers to the first tiles
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak   # (BLOCK_M, BLOCK_K)
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn   # (BLOCK_K, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)  # 3. a float32 accumulator
    for k in range(0, tl.cdiv(K, BLOCK_K)):       # 4. walk along K
        k_left = K - k * BLOCK_K                  # the last step may have fewer than BLOCK_K
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)                   # tensor cores; products summed in float32
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    return acc, offs_m, offs_n


@triton.autotune(configs=MATMUL_CONFIGS, key=["M", "N", "K"])
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """C = A @ B for one BLOCK_M x BLOCK_N tile of C; A (M, K), B (K, N), C (M, N)."""
    acc, offs_m, offs_n = matmul_tile(a_ptr, b_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                                      BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M)
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn   # 5. store, masked
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)


def matmul(a, b):
    """a @ b for a (M, K) and b (K, N), any strides."""
    assert a.dim() == b.dim() == 2 and a.shape[1] == b.shape[0], "matmul takes (M, K) and (K, N)"
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)
    matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                        c.stride(0), c.stride(1))
    return c


# ---------------------------------------------------------------- epilogue fusion


@triton.autotune(configs=MATMUL_CONFIGS, key=["M", "N", "K"])
@triton.jit
def matmul_bias_gelu_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K,
                            stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                            GROUP_M: tl.constexpr):
    """C = gelu_tanh(A @ B + bias) for one tile: the epilogue runs in registers, before the one store."""
    acc, offs_m, offs_n = matmul_tile(a_ptr, b_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                                      BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M)   # the mainloop, as in matmul
    bias = tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)
    x = acc + bias[None, :]                                  # one bias value per column
    u = 0.7978845608028654 * (x + 0.044715 * x * x * x)     # sqrt(2/pi) * (x + 0.044715 x^3)
    y = x * tl.sigmoid(2.0 * u)                              # GELU, tanh approximation, in float32
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(c_ptrs, y.to(c_ptr.dtype.element_ty), mask=mask)


def matmul_bias_gelu(a, b, bias):
    """gelu_tanh(a @ b + bias) in one kernel; a (M, K), b (K, N), bias (N,)."""
    assert a.dim() == b.dim() == 2 and a.shape[1] == b.shape[0], "matmul_bias_gelu takes (M, K) and (K, N)"
    assert bias.shape == (b.shape[1],), "bias must have one value per column of the output"
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)
    matmul_bias_gelu_kernel[grid](a, b, bias, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                  c.stride(0), c.stride(1))
    return c


def linear_gelu_eager(a, b, bias):
    return F.gelu(a @ b + bias, approximate="tanh")  # three kernels: matmul, add, GELU


# ---------------------------------------------------------------- make bench


def benchmarks():
    """What `make bench` times for this lesson (GPU only)."""
    for n in (2048, 4096, 8192):
        x = torch.randn(n, n, device="cuda")
        y_t = torch.randn(n, n, device="cuda").t()   # a transposed view: not contiguous
        yield Bench("add_2d_fp32", n * n, bytes=3 * 4 * n * n, flops=n * n, label=f"{n}x{n}, y transposed",
                    impls={"triton": lambda x=x, y=y_t: add_2d(x, y), "torch": lambda x=x, y=y_t: x + y})
    for n in (1024, 2048, 4096, 8192):
        a = torch.randn(n, n, device="cuda", dtype=torch.float16)
        b = torch.randn(n, n, device="cuda", dtype=torch.float16)
        yield Bench("matmul_fp16", n, bytes=3 * 2 * n * n, flops=2 * n**3, label=f"{n}^3", metric="TFLOP/s",
                    impls={"triton": lambda a=a, b=b: matmul(a, b), "cuBLAS": lambda a=a, b=b: a @ b},
                    graph=True)   # at 1024^3 the kernel takes ~10 µs, less than a launch from Python
    compiled = torch.compile(linear_gelu_eager)
    shapes = [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 8192, 1024), (16384, 4096, 1024)]
    for M, N, K in shapes:
        a = torch.randn(M, K, device="cuda", dtype=torch.float16)
        b = torch.randn(K, N, device="cuda", dtype=torch.float16) / K**0.5
        bias = torch.randn(N, device="cuda", dtype=torch.float16)
        yield Bench("matmul_bias_gelu_fp16", M * N * K, bytes=2 * (M * K + K * N + M * N + N),
                    flops=2 * M * N * K, label=f"{M}x{N}x{K}", metric="TFLOP/s",
                    impls={"triton fused": lambda a=a, b=b, c=bias: matmul_bias_gelu(a, b, c),
                           "eager: matmul, + bias, GELU": lambda a=a, b=b, c=bias: linear_gelu_eager(a, b, c),
                           "eager: addmm, GELU": lambda a=a, b=b, c=bias: F.gelu(torch.addmm(c, a, b),
                                                                                 approximate="tanh"),
                           "torch.compile": lambda a=a, b=b, c=bias: compiled(a, b, c)})


# ---------------------------------------------------------------- on a GPU: check, time, read the code


def record_artifacts(folder):
    """On a GPU (called by `make bench`): write the compiled-code excerpt the notebook shows elsewhere."""
    import pathlib

    from helpers import describe

    n = 1024
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    c = torch.empty(n, n, device="cuda", dtype=torch.float16)
    compiled = matmul_kernel.fn[(1,)](a, b, c, n, n, n, n, 1, n, 1, n, 1, BLOCK_M=128, BLOCK_N=128,
                                      BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=4)
    excerpt = (f"# {describe()}\n# matmul_kernel compiled with BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, "
               f"num_warps=8, num_stages=4, float16 inputs\n" + compiled_excerpt(compiled))
    (pathlib.Path(folder) / "04_matmul_compiled.txt").write_text(excerpt + "\n")
