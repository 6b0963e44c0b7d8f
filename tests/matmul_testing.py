"""What the kernel tests of lessons 05 and 09 to 11 share: inputs on the device (aligned column-slice
views included), float64 copies, the comparison with a float64 reference within a tolerance per
dtype, and lesson 09's exercise launchers as its notebook writes them."""

import torch
import triton

from helpers import DEVICE, pick
from helpers.check import TOLERANCES

# The interpreter's tl.dot multiplies float32 exactly: check's float32 table on the CPU. On a GPU
# tl.dot takes float32 operands as TF32 (a 10-bit mantissa, 2**-11 relative per operand), so float32
# matmul outputs of order one are good to about 1e-3, and 1e-2 leaves room for the sums. float16
# inputs: exact products, float32 sums, one rounding at the store (2**-12 relative).
MATMUL_TOL = {torch.float32: pick(cpu=TOLERANCES[torch.float32], gpu=(1e-2, 1e-2)),
              torch.float16: TOLERANCES[torch.float16]}


def randn(*shape, dtype=torch.float32, scale=1.0):
    return (torch.randn(*shape, device=DEVICE) * scale).to(dtype)


def double(*tensors):
    """float64 copies, for references."""
    return [t.double() for t in tensors]


def aligned_view(M, K, dtype, scale=1.0):
    """An (M, K) column slice of a wider matrix: row stride K + 16, contiguous rows, 16-byte aligned
    (tensor descriptors need that), the stride not the width."""
    return randn(M, K + 16, dtype=dtype, scale=scale)[:, 8:8 + K]


def assert_matches(got, want, tol, dtype):
    """got (in `dtype`) against a float64 reference, within `tol[dtype]`."""
    assert got.dtype == dtype and got.shape == want.shape, (got.dtype, got.shape, want.shape)
    atol, rtol = tol[dtype]
    torch.testing.assert_close(got.double(), want, atol=atol, rtol=rtol)


def launched_as_in_the_notebook(kernel, persistent=False):
    """Lesson 09's tma_matmul (or persistent_matmul) as its notebook cell writes it, around `kernel`:
    it reads the lesson's tile, course.TMA_TILE, at every call, as a learner's launcher does. A check
    that sets that tile for one call reaches this launcher; an edited copy of the solutions' own
    launcher reads the copy's TMA_TILE instead."""
    from helpers.solutions import load_solution

    course = load_solution("09")

    def tma_matmul(a, b):
        (M, K), N = a.shape, b.shape[1]
        c = torch.empty((M, N), device=a.device, dtype=a.dtype)
        BM, BN, BK = course.TMA_TILE
        kernel[(triton.cdiv(M, BM) * triton.cdiv(N, BN),)](
            course.descriptor(a, [BM, BK]), course.descriptor(b, [BK, BN]), course.descriptor(c, [BM, BN]),
            M, N, K, BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK, GROUP_M=8)
        return c

    def persistent_matmul(a, b, programs=None):
        (M, K), N = a.shape, b.shape[1]
        c = torch.empty((M, N), device=a.device, dtype=a.dtype)
        BM, BN, BK = course.TMA_TILE
        programs = course.SMS if programs is None else programs
        kernel[(programs,)](course.descriptor(a, [BM, BK]), course.descriptor(b, [BK, BN]),
                            course.descriptor(c, [BM, BN]), M, N, K, BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK,
                            GROUP_M=8, num_stages=2 if a.element_size() == 4 else 3)
        return c
    return persistent_matmul if persistent else tma_matmul


def check_with_square_blocks(exercise, fn, kernel_name, wrong, monkeypatch):
    """check(exercise, fn), in this process, with the autotuned `kernel_name` beside fn given only a
    square configuration (its first, with BLOCK_N = BLOCK_M), as a GPU's autotuner may choose for every
    case: it must pass, or, if `wrong`, fail on the check's extra run with unequal blocks. The
    autotuner's configurations are the square one again afterwards (the check gave them back)."""
    import pytest

    from helpers import check
    from helpers.check import CheckFailed

    kernel = fn.__globals__[kernel_name]
    first = kernel.configs[0]
    square = triton.Config({**first.kwargs, "BLOCK_N": first.kwargs["BLOCK_M"]}, num_warps=4, num_stages=1)
    monkeypatch.setattr(kernel, "configs", [square])
    monkeypatch.setenv("COURSE_ISOLATE", "0")
    if wrong:
        with pytest.raises(CheckFailed, match="may choose square blocks"):
            check(exercise, fn)
    else:
        check(exercise, fn)
    assert kernel.configs == [square]
