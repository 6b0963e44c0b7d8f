"""Lesson 10: the TMA-fed and persistent matmuls, the long-row softmax and the attention forward and
backward match their references; the interpreter's meter tells bytes moved by tensor descriptors from
bytes moved through pointers."""

import pytest
import torch
import triton
import triton.language as tl
from matmul_testing import MATMUL_TOL, assert_matches, randn

from helpers import DEVICE, ON_GPU
from helpers.exercises.lesson05 import SOFTMAX_TOL
from helpers.solutions import load_solution
from helpers.traffic import triton_traffic

lesson10 = load_solution("10")

DTYPES = [torch.float32, torch.float16]


def operands(M, K, N, dtype):
    """a (M, K) and b (K, N) scaled by 1 / sqrt(K): products of order one."""
    return randn(M, K, dtype=dtype), randn(K, N, dtype=dtype, scale=K**-0.5)


# ---------------------------------------------------------------- tma_matmul and persistent_matmul
# Tensor descriptors need 16-byte aligned rows: K and N are multiples of 8 here (float16 and float32).

SHAPES = [
    (1, 40, 24),       # one row; N narrower than a tile
    (37, 72, 40),      # odd M; K over three BLOCK_K steps, the last partial; N cut by C's edge
    (64, 64, 64),      # multiples of the CPU's tiles
    (150, 136, 200),   # several tiles each way
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M, K, N", SHAPES)
def test_tma_matmul(dtype, M, K, N):
    a, b = operands(M, K, N, dtype)
    assert_matches(lesson10.tma_matmul(a, b), a.double() @ b.double(), MATMUL_TOL, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M, K, N", SHAPES)
# programs: one per SM (2 on the CPU), a single one, an odd number, more programs than tiles
@pytest.mark.parametrize("programs", [None, 1, 3, 50])
def test_persistent_matmul(dtype, M, K, N, programs):
    a, b = operands(M, K, N, dtype)
    assert_matches(lesson10.persistent_matmul(a, b, programs), a.double() @ b.double(), MATMUL_TOL, dtype)


@pytest.mark.parametrize("launcher", [lesson10.tma_matmul, lesson10.persistent_matmul])
def test_the_matmuls_say_what_a_tensor_descriptor_needs(launcher):
    with pytest.raises(AssertionError, match="16 bytes"):    # rows of 45 float32: 180 bytes
        launcher(randn(5, 45), randn(45, 8))
    with pytest.raises(AssertionError, match="contiguous"):
        launcher(randn(48, 5).t(), randn(48, 8))
    with pytest.raises(AssertionError, match="share a dtype"):
        launcher(randn(5, 48), randn(48, 8, dtype=torch.float16))
    with pytest.raises(AssertionError, match="takes"):
        launcher(randn(5, 48), randn(40, 8))


def test_a_persistent_launch_has_the_programs_it_is_given_and_stores_each_tile_once():
    a, b = operands(150, 40, 136, torch.float32)    # 5 x 5 tiles of 32 on the CPU
    traffic = triton_traffic(lesson10.persistent_matmul, a, b, 3)
    (launch,) = traffic.launches
    assert launch.grid == (3,)
    assert launch.bytes_stored == 150 * 136 * 4


# ---------------------------------------------------------------- the descriptor meter


def test_the_meter_counts_every_byte_of_tma_matmul_as_moved_by_descriptor():
    M, K, N = 37, 72, 40
    a, b = operands(M, K, N, torch.float32)
    BM, BN, _ = lesson10.TMA_TILE
    (launch,) = triton_traffic(lesson10.tma_matmul, a, b).launches
    # each row of tiles reads all of B, each column of tiles all of A; zeros past the edges are not loaded
    rows, cols = triton.cdiv(M, BM), triton.cdiv(N, BN)
    assert launch.bytes_loaded == a.nbytes * cols + b.nbytes * rows
    assert launch.descriptor_bytes_loaded == launch.bytes_loaded
    assert launch.bytes_stored == launch.descriptor_bytes_stored == M * N * 4


def test_the_meter_counts_nothing_as_moved_by_descriptor_in_a_pointer_kernel():
    x = randn(3, 700)
    lesson10.softmax_long(x)    # on a GPU the autotuner times its configurations here, not below
    (launch,) = triton_traffic(lesson10.softmax_long, x).launches
    assert (launch.bytes_loaded, launch.bytes_stored) == (2 * x.nbytes, x.nbytes)
    assert launch.descriptor_bytes_loaded == launch.descriptor_bytes_stored == 0


@triton.jit
def _scale_rows_kernel(x_ptr, out_ptr, s_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """out = x * s[:, None]: x loaded by a descriptor built here, s through pointers, out stored by one."""
    off_m, off_n = tl.program_id(0) * BLOCK_M, tl.program_id(1) * BLOCK_N
    x_desc = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    out_desc = tl.make_tensor_descriptor(out_ptr, shape=[M, N], strides=[N, 1],
                                         block_shape=[BLOCK_M, BLOCK_N])
    rows = off_m + tl.arange(0, BLOCK_M)
    s = tl.load(s_ptr + rows, mask=rows < M, other=0.0)
    out_desc.store([off_m, off_n], x_desc.load([off_m, off_n]) * s[:, None])


def test_the_meter_tells_descriptor_bytes_from_pointer_bytes_in_one_launch():
    M, N = 37, 40
    x, s = randn(M, N), randn(M)
    out = torch.empty_like(x)
    grid = (triton.cdiv(M, 16), triton.cdiv(N, 16))
    traffic = triton_traffic(lambda: _scale_rows_kernel[grid](x, out, s, M, N, BLOCK_M=16, BLOCK_N=16))
    torch.testing.assert_close(out, x * s[:, None])
    (launch,) = traffic.launches
    assert launch.descriptor_bytes_loaded == x.nbytes                 # every tile of x once
    assert launch.bytes_loaded - launch.descriptor_bytes_loaded == s.nbytes * grid[1]   # s once per column
    assert launch.bytes_stored == launch.descriptor_bytes_stored == out.nbytes


# ---------------------------------------------------------------- softmax_long


def rows_of(M, n, dtype, kind):
    if kind == "strided":          # a column slice of a wider matrix: rows n + 13 values apart
        return randn(M, n + 13, dtype=dtype, scale=3.0)[:, :n]
    if kind == "-inf head":        # the first tiles of each row hold no finite value
        x = randn(M, n, scale=3.0)
        x[:, : n // 2] = float("-inf")
        return x.to(dtype)
    if kind == "huge":             # uniform in [-1e4, 1e4]: exp(x) overflows unless the max is subtracted
        return ((torch.rand(M, n, device=DEVICE) * 2 - 1) * 1e4).to(dtype)
    return randn(M, n, dtype=dtype, scale=3.0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M, n, kind", [
    (1, 1, "randn"),            # one value: the output is 1
    (4, 100, "randn"),          # shorter than the CPU's tile of 256
    (3, 1001, "randn"),         # four tiles, the last one partial
    (2, 777, "strided"),        # row stride 790, not n
    (3, 1500, "-inf head"),     # three whole tiles of -inf before the first finite value
    (2, 999, "huge"),
])
def test_softmax_long(dtype, M, n, kind):
    x = rows_of(M, n, dtype, kind)
    out = lesson10.softmax_long(x)
    assert out.is_contiguous()
    assert_matches(out, torch.softmax(x.double(), dim=-1), SOFTMAX_TOL, dtype)


def test_softmax_long_says_it_needs_contiguous_rows():
    with pytest.raises(AssertionError, match="contiguous rows"):
        lesson10.softmax_long(randn(4, 200)[:, ::2])
    with pytest.raises(AssertionError, match="2-D"):
        lesson10.softmax_long(randn(2, 3, 100))


@pytest.mark.skipif(ON_GPU, reason="the order of the loads is the interpreter's record")
def test_softmax_long_reads_the_row_twice_the_second_time_from_its_end():
    x = randn(2, 1001)
    from helpers import interpreter

    with interpreter.record(touches=True) as rec:
        lesson10.softmax_long(x)
    loads = [offs for pid, arg, kind, offs in rec.launches[0].touches if pid[0] == 0 and kind == "load"]
    block = len(loads[0])
    tiles = triton.cdiv(1001, block)
    assert len(loads) == 2 * tiles
    assert loads[tiles].max() == 1000 and loads[-1].min() == 0    # pass 2: from the last tile to the first


# ---------------------------------------------------------------- the exercises (helpers/exercises)


@pytest.mark.parametrize("name", ["tma_matmul", "persistent_matmul", "softmax_long"])
def test_the_solutions_pass_their_exercise_checks(name):
    from helpers import check

    check(name, getattr(lesson10, name))


def test_the_exercise_cases_keep_rows_aligned_and_start_rows_with_minus_inf():
    from helpers.exercises import lesson10 as spec

    for case in spec._tma_cases() + spec._persistent_cases():
        for t in case.args[:2]:
            assert t.stride(0) * t.element_size() % 16 == 0, case.label
    headed = [case.args[0] for case in spec._softmax_cases() if "-inf" in case.label]
    assert headed and all(torch.isinf(x[:, : x.shape[1] // 2]).all() for x in headed)
    assert all(torch.isfinite(torch.softmax(x.double(), -1)).all() for x in headed)


# ---------------------------------------------------------------- attention, forward and backward
# Lengths that no tile divides (the last query and key blocks partial) and one that the tiles do.

ATTENTION_CASES = [(False, 64, 32), (True, 64, 32), (False, 75, 16), (True, 75, 16)]   # causal, N, D


def attention_inputs(N, D, dtype=torch.float16):
    return [torch.randn(2, 2, N, D, device=DEVICE, dtype=dtype) for _ in range(4)]   # q, k, v, dout


def autograd_reference(q, k, v, dout, causal):
    """out and dq, dk, dv from PyTorch's attention in float64, through autograd."""
    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    out = torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=causal)
    out.backward(dout.double())
    return out.detach(), [t.grad for t in leaves]


@pytest.mark.parametrize("causal, N, D", ATTENTION_CASES)
def test_attention_forward_and_lse(causal, N, D):
    q, k, v, _ = attention_inputs(N, D)
    out, lse = lesson10.attention(q, k, v, causal=causal)
    want, _ = autograd_reference(q, k, v, q, causal)
    scores = (q.double() @ k.double().transpose(-1, -2)) * D**-0.5
    if causal:
        scores = scores.masked_fill(torch.ones(N, N, dtype=torch.bool, device=DEVICE).triu(1), -float("inf"))
    assert out.dtype == q.dtype and out.shape == q.shape and lse.dtype == torch.float32
    torch.testing.assert_close(out.double(), want, atol=2e-3, rtol=2e-3)
    torch.testing.assert_close(lse.double(), torch.logsumexp(scores, -1), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("causal, N, D", ATTENTION_CASES)
def test_attention_backward_matches_autograd(causal, N, D):
    q, k, v, dout = attention_inputs(N, D)
    out, lse = lesson10.attention(q, k, v, causal=causal)
    grads = lesson10.attention_backward(q, k, v, out, lse, dout, causal=causal)
    _, want = autograd_reference(q, k, v, dout, causal)
    for name, got, ref in zip("qkv", grads, want):
        assert got.dtype == q.dtype and got.shape == q.shape, name
        torch.testing.assert_close(got.double(), ref, atol=5e-3, rtol=5e-3, msg=lambda m: f"d{name}: {m}")


def test_trainable_attention_runs_the_backward_through_autograd():
    q, k, v, dout = attention_inputs(48, 16)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    lesson10.trainable_attention(*leaves, causal=True).backward(dout)
    _, want = autograd_reference(q, k, v, dout, True)
    for t, ref in zip(leaves, want):
        torch.testing.assert_close(t.grad.double(), ref, atol=5e-3, rtol=5e-3)


def test_attention_backward_adds_dq_with_atomics_in_one_kernel():
    """One launch computes all three gradients; dQ's shares arrive by atomic adds into float32."""
    from helpers import interpreter

    q, k, v, dout = attention_inputs(64, 16)
    out, lse = lesson10.attention(q, k, v, causal=False)
    with interpreter.record(touches=True) as rec:
        lesson10.attention_backward(q, k, v, out, lse, dout)
    launches = [launch for launch in rec.launches if launch.kernel == "attention_backward_kernel"]
    assert len(launches) == 1, [launch.kernel for launch in rec.launches]
    assert {kind for pid, name, kind, offs in launches[0].touches if name == "dq_ptr"} == {"store"}


# ---------------------------------------------------------------- what make bench recorded on GPUs

RECORDED = lesson10.recorded_hopper()
# The targets the notebook reads by name, in the order course.ncu_targets() lists them.
NCU_TARGETS = ["attention forward (10)", "cuDNN forward", "attention backward (10)", "cuDNN backward",
               "long softmax (10)", "torch.compile softmax, long rows", "row softmax (05)",
               "torch.compile softmax, rows", "RMSNorm (05)", "torch.compile RMSNorm"]


def test_recordings_exist():
    assert RECORDED, "nothing recorded: `make bench LESSON=10` on a Hopper GPU records it"


@pytest.mark.parametrize("gpu", sorted(RECORDED))
def test_each_gpu_recorded_the_profile_of_every_target(gpu):
    record = RECORDED[gpu]
    assert record["compiled"] and record["warp_specialize"] and record["autotune_stability"]
    ncu = record["ncu"]
    assert "error" not in ncu, ncu.get("error")
    assert ncu["units"]["gpu__time_duration.sum"] == "ns" and "-k regex:" in ncu["command"]
    assert list(dict.fromkeys(k["target"] for k in ncu["kernels"])) == NCU_TARGETS
    for k in ncu["kernels"]:
        assert k["gpu__time_duration.sum"] > 0 and k["counted"]["bytes"] > 0, k["target"]
        assert k["lts__t_sectors_op_red.sum"] >= 0 and k["lts__t_sectors_op_atom.sum"] >= 0
