"""Lesson 05 exercises: softmax one row per program, online softmax in PyTorch and in a tiled
kernel, and RMSNorm fused into the linear layer after it.

Convention for every softmax here: a row whose entries are all -inf (a fully masked row) has
output 0 everywhere. torch.softmax returns NaN for it (its max is -inf, and -inf - (-inf) is
NaN); zeros are what a masked-out query should contribute downstream, and they keep NaN out of
the loss.
"""

import math

import torch

from helpers.device import DEVICE, pick
from helpers.exercises import Case, Exercise

NEG_INF = float("-inf")


# ---------------------------------------------------------------- the reference


def softmax_reference(x, *_, **__):
    """Softmax over the last dimension; fully masked rows give zeros (extra arguments are ignored)."""
    out = torch.softmax(x, dim=-1)                      # read MN, write MN (one fused kernel)
    fully_masked = (x == NEG_INF).all(dim=-1, keepdim=True)
    return out.masked_fill(fully_masked, 0.0)           # torch gives NaN there; the course gives 0


# ---------------------------------------------------------------- inputs


def _rows(n_rows, n_cols, dtype=torch.float32, kind="randn"):
    """A fresh (n_rows, n_cols) matrix of one of the kinds the cases need."""
    if kind == "randn":
        x = torch.randn(n_rows, n_cols, device=DEVICE) * 3
    elif kind == "huge":            # uniform in [-1e4, 1e4]: exp(x) overflows without the max
        x = (torch.rand(n_rows, n_cols, device=DEVICE) * 2 - 1) * 1e4
    elif kind == "ascending":       # each row climbs from -1e4 to 1e4: the max grows at every chunk
        x = torch.linspace(-1e4, 1e4, n_cols, device=DEVICE).repeat(n_rows, 1)
        x = x + torch.rand(n_rows, 1, device=DEVICE)
    elif kind == "masked":          # -inf entries, a -inf prefix, and fully masked rows
        x = torch.randn(n_rows, n_cols, device=DEVICE) * 3
        x[torch.rand(n_rows, n_cols, device=DEVICE) < 0.3] = NEG_INF
        x[1::4, : n_cols // 2] = NEG_INF   # the first half of some rows is masked, like a causal prefix
        x[3::4] = NEG_INF                  # every fourth row is masked entirely
    else:
        raise ValueError(kind)
    return x.to(dtype)


def _strided_rows(n_rows, n_cols, dtype=torch.float32):
    """Two non-contiguous views: a slice of a wider matrix, and every other column."""
    wider = torch.randn(n_rows, n_cols + 13, device=DEVICE).to(dtype)[:, :n_cols]
    every_other = torch.randn(n_rows, 2 * n_cols, device=DEVICE).to(dtype)[:, ::2]
    return [(f"{n_rows}x{n_cols} slice of a {n_rows}x{n_cols + 13} matrix (rows {n_cols + 13} apart)",
             wider),
            (f"{n_rows}x{n_cols} every other column (column stride 2)", every_other)]


F16, F32, F64 = torch.float16, torch.float32, torch.float64


# ---------------------------------------------------------------- 1. softmax_rows


def _softmax_rows_cases():
    widest = pick(2048, 16384)
    specs = [((4, 1), F32, "randn", "a single column: every output is 1"),
             ((37, 100), F32, "randn", "width not a power of two: lanes past the end are masked"),
             ((16, 128), F16, "randn", "float16, a power of two: accumulate in float32"),
             ((pick(9, 300), pick(1000, 3000)), F16, "randn", "float16, ragged width"),
             ((8, 300), F32, "huge", "uniform in [-1e4, 1e4]: exp overflows unless the max is subtracted"),
             ((8, 300), F16, "huge", "float16, uniform in [-1e4, 1e4]"),
             ((12, 200), F32, "masked", "-inf entries, -inf prefixes, every 4th row fully masked (0s)"),
             ((4, widest), F32, "randn", f"{widest} columns, the widest row of the course's block")]
    cases = [Case(f"{m}x{n} {str(dt)[6:]} ({why})", (_rows(m, n, dt, kind),))
             for (m, n), dt, kind, why in specs]
    cases += [Case(label, (x,)) for label, x in _strided_rows(12, 150)]
    return cases


# ---------------------------------------------------------------- 2. online_softmax_torch


def _online_torch_cases():
    specs = [((5, 1), 4, F32, "randn", "one column, a chunk wider than the row"),
             ((7, 100), 16, F32, "randn", "the chunk does not divide the width"),
             ((6, 64), 1, F32, "randn", "chunks of one element: the recurrence element by element"),
             ((4, 512), 32, F32, "ascending", "rows ascending from -1e4 to 1e4: the max grows every chunk"),
             ((8, 300), 25, F32, "huge", "uniform in [-1e4, 1e4]"),
             ((12, 200), 32, F32, "masked", "-inf entries, -inf prefixes, fully masked rows (0s)"),
             ((10, 300), 50, F64, "randn", "float64")]
    cases = [Case(f"{m}x{n} {str(dt)[6:]}, chunk={c} ({why})", (_rows(m, n, dt, kind), c))
             for (m, n), c, dt, kind, why in specs]
    cases += [Case(label + ", chunk=40", (x, 40)) for label, x in _strided_rows(9, 250)]
    return cases


# ---------------------------------------------------------------- 3. softmax_tiled


def _tiled_cases():
    long_rows, long_cols, long_block = pick(3, 16), pick(4099, 262_147), pick(256, 4096)
    specs = [((3, 1), 16, F32, "randn", "a single column"),
             ((5, 1000), 128, F32, "randn", "a ragged last tile: 1000 = 7 x 128 + 104"),
             ((4, 100), 256, F32, "randn", "the row is shorter than one tile"),
             ((4, 512), 64, F32, "ascending", "rows ascending from -1e4 to 1e4: the max grows every tile"),
             ((6, 700), 128, F16, "randn", "float16: accumulate in float32"),
             ((6, 400), 128, F16, "huge", "float16, uniform in [-1e4, 1e4]"),
             ((12, 300), 64, F32, "masked", "-inf entries, -inf prefixes, fully masked rows (0s)"),
             ((long_rows, long_cols), long_block, F32, "randn", "a long row, many tiles")]
    cases = [Case(f"{m}x{n} {str(dt)[6:]}, block={b} ({why})", (_rows(m, n, dt, kind),), {"block": b})
             for (m, n), b, dt, kind, why in specs]
    cases += [Case(label + ", block=128", (x,), {"block": 128}) for label, x in _strided_rows(5, 600)]
    return cases


# ---------------------------------------------------------------- 4. rmsnorm_linear


def rmsnorm_linear_reference(x, gamma, w, eps=1e-6):
    """rms_norm(x) * gamma, then the linear layer x_normed @ w.T (w stored (N, K) like nn.Linear)."""
    inv_rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)
    x_normed = x * inv_rms * gamma   # F.rms_norm: read MK + K, write MK
    return x_normed @ w.t()          # matmul: read MK + NK, write MN


def _rmsnorm_linear_cases():
    cpu_dtype_big = pick(F16, torch.bfloat16)  # bfloat16 arithmetic is wrong in the interpreter
    # On a GPU, tl.dot rounds float32 operands to tf32 (10-bit mantissa) unless told otherwise, which
    # the float32 tolerance rightly rejects: there the float32 cases run in float16.
    f32 = pick(F32, F16)

    def make(m, k, n, dtype, scale=1.0, x=None, w=None):
        x = (torch.randn(m, k, device=DEVICE) * scale).to(dtype) if x is None else x
        gamma = (1 + 0.2 * torch.randn(k, device=DEVICE)).to(dtype)
        w = (torch.randn(n, k, device=DEVICE) / math.sqrt(k)).to(dtype) if w is None else w
        return x, gamma, w

    specs = [((33, 64, 48), F16, 1.0, 1e-6, "M not a multiple of BLOCK_M"),
             ((50, 100, 40), f32, 1.0, 1e-6, "K not a multiple of BLOCK_K: mask the reduction's tail"),
             ((64, 128, 64), F16, 1.0, 1e-6, "sizes that are multiples of the blocks"),
             ((20, 96, 24), F16, 300.0, 1e-6, "|x| ~ 300: x*x overflows float16, square in float32"),
             ((24, 64, 32), F16, 1e-3, 1e-5, "|x| ~ 1e-3 with eps = 1e-5: eps dominates the mean square"),
             ((pick(64, 1000), pick(96, 2048), pick(80, 1536)), cpu_dtype_big, 1.0, 1e-6, "larger")]
    cases = [Case(f"M,K,N={m},{k},{n} {str(dt)[6:]} ({why})", make(m, k, n, dt, scale), {"eps": eps})
             for (m, k, n), dt, scale, eps, why in specs]
    x = torch.randn(40, 99, device=DEVICE).to(f32)[:, :80]
    w = (torch.randn(80, 56, device=DEVICE) / math.sqrt(80)).to(f32).t()
    cases.append(Case(f"M,K,N=40,80,56 {str(f32)[6:]}, x a slice of a wider matrix, w a transposed view",
                      make(40, 80, 56, f32, x=x, w=w), {"eps": 1e-6}))
    return cases


# The kernel rounds x * gamma to the input dtype before the matmul (tensor cores take 16-bit
# operands), just as F.rms_norm + matmul rounds its normalized output. Each output then sums K
# products that each carry up to one unit of rounding (u = 2**-11 for float16, 2**-8 for
# bfloat16): with outputs of unit size the error is a few u in absolute terms, even where the
# output is near zero, so atol is about 8u. The relative part keeps two units for the final store.
RMSNORM_LINEAR_TOL = {torch.float16: (4e-3, 2e-3), torch.bfloat16: (3e-2, 1.6e-2)}


EXERCISES = [
    Exercise("05", "softmax_rows", "row softmax, one row per program", softmax_reference,
             _softmax_rows_cases),
    Exercise("05", "online_softmax_torch", "online softmax in PyTorch, over chunks", softmax_reference,
             _online_torch_cases),
    Exercise("05", "softmax_tiled", "tiled online softmax for long rows", softmax_reference, _tiled_cases),
    Exercise("05", "rmsnorm_linear", "RMSNorm fused into the linear layer", rmsnorm_linear_reference,
             _rmsnorm_linear_cases, tol=RMSNORM_LINEAR_TOL),
]
