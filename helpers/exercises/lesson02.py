"""Lesson 02 exercises: fuse an elementwise chain, and a bias + GELU."""

import torch
import torch.nn.functional as F

from helpers import interpreter
from helpers.device import DEVICE, ON_GPU, pick
from helpers.exercises import Case, Exercise
from helpers.traffic import eager_traffic

# Every size is odd, so no block of any power-of-two size divides a row or the whole matrix.
SHAPES = [((1, 1), "a single element"),
          ((3, 1001), "a few long rows"),
          ((257, 129), "odd sizes everywhere"),
          ((pick(97, 4099), pick(515, 4097)), "large")]
TRANSPOSED = (301, 203)
# Lesson 02 loads low precision and computes in float32. bfloat16 arithmetic is wrong in the
# interpreter, so on the CPU only float16 is tried.
LOW_PRECISION = pick([torch.float16], [torch.float16, torch.bfloat16])


def matrices_and_bias(with_residual, low_precision=()):
    """Fresh (x, bias[, residual]) cases: float32, a transposed (strided) x, then each low-precision dtype."""
    def make(m, n, dtype=torch.float32, x=None):
        x = torch.randn(m, n, device=DEVICE, dtype=dtype) if x is None else x
        bias = torch.randn(n, device=DEVICE, dtype=dtype)
        return (x, bias, torch.randn(m, n, device=DEVICE, dtype=dtype)) if with_residual else (x, bias)

    cases = [Case(f"{m}x{n} ({why})", make(m, n)) for (m, n), why in SHAPES]
    m, n = TRANSPOSED
    cases.append(Case(f"{m}x{n}, x a transposed view (not contiguous)",
                      make(m, n, x=torch.randn(n, m, device=DEVICE).t())))
    if with_residual:
        x, bias, _ = make(m, n)
        residual = torch.randn(n, m, device=DEVICE).t()
        cases.append(Case(f"{m}x{n}, the residual a transposed view (not contiguous)", (x, bias, residual)))
    for dtype in low_precision:
        for (m, n), why in SHAPES[2:]:
            cases.append(Case(f"{m}x{n} ({why}), {str(dtype).removeprefix('torch.')} inputs",
                              make(m, n, dtype)))
    return cases


def fused(fn, *args, elementwise=False):
    """None if `fn` did its whole job in one Triton launch that stores each output element once, else
    what ran besides it or what it stored more. `elementwise`: each input is loaded at most once per
    output element, too (a row broadcast to every row may be loaded again for each). On a GPU `fn`
    runs once first, unmeasured: an autotuner times its configurations on the first call at a new shape,
    and those runs are not the function's launches."""
    if ON_GPU:
        fn(*args)
    before = interpreter.launch_count()
    # these only clear an output (the interpreter's own copies of the arguments are not counted)
    allowed = {"zeros", "zeros_like", "zero_", "fill_"}
    ops = sorted({op for op, _ in eager_traffic(fn, *args).ops} - allowed)
    launched = interpreter.launch_count() - before
    if launched > 1:
        return (f"it launched {launched} Triton kernels for one call: fusion means one kernel that "
                f"loads each input once, does every step in registers, and stores once.")
    if ops:
        return (f"PyTorch ran {', '.join(ops)} beside your kernel: each of those is another trip "
                f"through memory. Do every step inside the kernel.")
    with interpreter.record() as rec:
        out = fn(*args)
    stored = sum(launch.bytes_stored for launch in rec.launches)
    if stored > out.nbytes:
        return (f"its kernel stored {stored:,} bytes for an output of {out.nbytes:,} "
                f"({stored / out.nbytes:.3g} times): an intermediate went through memory (stored, then "
                f"loaded back). Keep every step in registers and store the result once.")
    loaded = sum(launch.bytes_loaded for launch in rec.launches)
    once = sum(max(t.numel(), out.numel()) * t.element_size() for t in args if isinstance(t, torch.Tensor))
    if elementwise and loaded > once:
        return (f"its kernel loaded {loaded:,} bytes where reading each input once per output element takes "
                f"{once:,}: an input was loaded again, or loaded where nothing is stored (a load without "
                f"the store's mask reads its lanes past the last element too). Load each input once, with "
                f"the store's mask, and use it from registers.")
    return None


def chain_reference(x, bias, residual, scale):
    y = x + bias         # read MN + N, write MN
    y = torch.relu(y)    # read MN, write MN
    y = y * scale        # read MN, write MN
    return y + residual  # read 2MN, write MN


def _chain_cases():
    """Each case gets a random scale; the signs alternate, so relu((x + b) * s) differs somewhere."""
    sign = 1.0 if torch.rand(()) < 0.5 else -1.0
    cases = []
    for i, case in enumerate(matrices_and_bias(with_residual=True)):
        scale = round(sign * (-1) ** i * float(torch.empty(()).uniform_(0.25, 2.0)), 3)
        cases.append(Case(f"{case.label}, scale={scale}", (*case.args, scale)))
    return cases


def _chain_fused(fn):
    x, residual = torch.randn(33, 65, device=DEVICE), torch.randn(33, 65, device=DEVICE)
    return fused(fn, x, torch.randn(65, device=DEVICE), residual, -0.75, elementwise=True)


def bias_gelu_reference(x, bias):
    return F.gelu(x + bias, approximate="tanh")  # two kernels: read MN + N, write MN; read MN, write MN


def _bias_gelu_cases():
    """The usual cases, and x spread evenly over [-top, top] in every draw (shuffled): GELU's tails, where
    tanh(u) written through exp(2u) gives inf / inf (from |x| of about 10 on, in float32)."""
    cases = matrices_and_bias(with_residual=False, low_precision=LOW_PRECISION)
    for dtype, top in [(torch.float32, 100.0)] + [(dtype, 6e4) for dtype in LOW_PRECISION]:
        m, n = 7, 33
        x = torch.linspace(-top, top, m * n, device=DEVICE)[torch.randperm(m * n, device=DEVICE)]
        x, bias = x.reshape(m, n).to(dtype), torch.randn(n, device=DEVICE).to(dtype)
        kind = str(dtype).removeprefix("torch.")
        cases.append(Case(f"{m}x{n} {kind}, x spread from {-top:g} to {top:g} (GELU's tails: exp(2u) "
                          f"overflows float32 for |x| above about 10)", (x, bias)))
    return cases


def _bias_gelu_fused(fn):
    """fused() in float32 and in float16: a conversion to float32 and back done by PyTorch around a
    float32 kernel is two more trips through memory, and shows only where the inputs are not float32."""
    for dtype in (torch.float32, torch.float16):
        x, bias = torch.randn(33, 65, device=DEVICE).to(dtype), torch.randn(65, device=DEVICE).to(dtype)
        problem = fused(fn, x, bias, elementwise=True)
        if problem:
            return f"for float16 inputs, {problem}" if dtype == torch.float16 else problem
    return None


EXERCISES = [
    Exercise("02", "fused_chain", "relu(x + bias) * scale + residual", chain_reference, _chain_cases,
             kernel=True, structure=_chain_fused,
             copies_inputs=True),  # the exercise's launcher makes x and residual contiguous
    Exercise("02", "bias_gelu", "GELU(x + bias), fused", bias_gelu_reference,
             _bias_gelu_cases, kernel=True, structure=_bias_gelu_fused,
             copies_inputs=True,  # the exercise's launcher makes x contiguous
             # Computed in float32 and rounded once at the store, a low-precision result is within
             # half a unit in the last place of the exact one: 2**-11 of it in float16, 2**-8 in
             # bfloat16 (atol covers float16's tiny subnormals). An add or multiply done in low
             # precision first rounds once more, and lands outside.
             tol={torch.float16: (1e-5, 6e-4), torch.bfloat16: (1e-5, 5e-3)}),
]
