"""Lesson 07 exercises: Inductor's kernel count, a function with no graph breaks, XLA's fusions.

The first and third exercises are graded against the compilers themselves: the
spec compiles the function on this machine and counts what Inductor or XLA
produced, with the counters below.
"""

import functools
import re

import numpy as np
import torch
import torch.nn.functional as F

from helpers.device import DEVICE, pick
from helpers.exercises import Case, Exercise

# ---------------------------------------------------------------- reading generated code

# A kernel Inductor generated: `name = async_compile.triton('name', '''...''')` on a GPU,
# `name = async_compile.cpp_pybinding([...], r'''...''')` on a CPU.
_GENERATED = re.compile(r"^(\w+) = async_compile\.\w+\(", re.M)
# A kernel Inductor did not generate but called: cuBLAS / CPU BLAS (`extern_kernels.mm`),
# or an ATen op it has no lowering for (`torch.ops.aten.cumsum.default`).
_LIBRARY = re.compile(r"\b(extern_kernels\.\w+|torch\.ops\.\w+\.\w+(?:\.\w+)?)\(")


def inductor_kernels(code):
    """(generated kernel names, library calls) in one module of Inductor's output code."""
    generated = _GENERATED.findall(code)
    start = code.find("def call(")
    library = _LIBRARY.findall(code[start:]) if start >= 0 else []
    return generated, library


def compiled_code(fn, *args):
    """The output code of every graph Inductor compiles for fn(*args) (a list of module sources)."""
    from torch._inductor.utils import run_and_get_code

    _, codes = run_and_get_code(torch.compile(fn), *args)
    return codes


def graph_breaks(fn, *args):
    """torch._dynamo.explain's report for fn(*args): graph_count, graph_break_count, break_reasons."""
    return torch._dynamo.explain(fn)(*args)


# An instruction of an HLO computation: `%name = shape opcode(operands), attributes`;
# a tuple shape is in parentheses and may hold spaces.
_FUSION = re.compile(r"^\s*(?:ROOT\s+)?%[\w.\-]+\s*=\s*(?:\([^)]*\)|\S+)\s+fusion\(", re.M)


def entry_computation(hlo):
    """The ENTRY computation of an HLO module's text: what runs, in order, when it is called."""
    start = hlo.index("\nENTRY ")
    end = hlo.index("\n}", start)
    return hlo[start + 1:end + 2]


def optimized_hlo(fn, *args):
    """XLA's optimized HLO for jax.jit(fn) on the arguments' device, as text."""
    import jax

    return jax.jit(fn).lower(*args).compile().as_text()


def fusion_count(hlo):
    """Fusion instructions in the ENTRY computation of optimized HLO: XLA's fused kernels."""
    return len(_FUSION.findall(entry_computation(hlo)))


# ---------------------------------------------------------------- exercise 2: no graph breaks


def gelu_residual_reference(x, residual, gate):
    h = F.gelu(x).clamp(-10.0, 10.0)               # clamping when max <= 10 changes nothing
    return residual + torch.sigmoid(gate).mean() * h  # the scale stays a 0-d tensor: no .item()


def _residual_cases():
    def make(m, n, x=None):
        x = 6 * torch.randn(m, n, device=DEVICE) if x is None else x  # some entries above 10: clamped
        return (x, torch.randn(m, n, device=DEVICE), torch.randn(n, device=DEVICE))

    cases = [Case(f"{m}x{n} ({why})", make(m, n))
             for (m, n), why in [((1, 1), "a single element"), ((7, 33), "odd sizes"),
                                 ((pick(64, 1024), pick(300, 4096)), "large")]]
    cases.append(Case("40x50, x a transposed view", make(40, 50, 6 * torch.randn(50, 40, device=DEVICE).t())))
    return cases


_HINTS = [("generic_jump", "a Python `if` on a tensor's value"),
          ("item()", "`.item()` turns a tensor into a Python number"),
          ("builtin operator", "a Python call Dynamo cannot put in a graph (print?)")]


def _plain(reason):
    """Dynamo's reason for a break, with a plain-words hint in front when we know one."""
    first = reason.splitlines()[0][:100]
    hint = next((words for key, words in _HINTS if key in reason), None)
    return f"{hint} ({first})" if hint else first


def _run_without_breaks(fn, *args):
    """Run fn eagerly for its output, then ask Dynamo whether it captures fn as one graph."""
    from helpers.check import CheckFailed

    out = fn(*args)  # first, eagerly: an unfinished stub stops here with NotImplementedError
    report = graph_breaks(fn, *args)
    if report.graph_break_count or report.break_reasons or report.graph_count != 1:
        lines = [f"Dynamo split your function into {report.graph_count} graph(s) with "
                 f"{report.graph_break_count} graph break(s):"]
        for reason in report.break_reasons:
            frame = reason.user_stack[-1] if reason.user_stack else None
            where = f"line {frame.lineno} `{(frame.line or '').strip()}`" if frame else "?"
            lines.append(f"  at {where}: {_plain(reason.reason)}")
        lines.append("Every break ends a graph (and its fusion); remove the cause, don't hide it.")
        raise CheckFailed("\n".join(lines))
    return out


# ---------------------------------------------------------------- exercise 1: Inductor's kernels


def block(x, w, b, g):
    h = torch.relu(x @ w + b)                                   # a matmul, then bias and ReLU
    r = torch.rsqrt((h * h).mean(dim=-1, keepdim=True) + 1e-6)  # one number per row
    return h * r * g                                            # RMS-normalized rows, scaled by g


def block_inputs(device=DEVICE):
    """Inputs for `block`: sizes that are multiples of 16, so no padding kernels appear on a GPU."""
    m, k, n = 256, 64, 128
    return (torch.randn(m, k, device=device), torch.randn(k, n, device=device),
            torch.randn(n, device=device), torch.randn(n, device=device))


@functools.cache
def _block_counts(device_type):
    (code,) = compiled_code(block, *block_inputs(torch.device(device_type)))
    generated, library = inductor_kernels(code)
    return {"generated": len(generated), "library": len(library)}


def block_kernels_reference():
    return _block_counts(DEVICE.type)


# ---------------------------------------------------------------- exercise 3: XLA's fusions


def chain_jax(x, bias, residual, scale):
    import jax.numpy as jnp

    return jnp.maximum(x + bias, 0.0) * scale + residual


def softmax_jax(x):
    import jax.numpy as jnp

    e = jnp.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def mlp_jax(x, w, b):
    import jax.numpy as jnp

    return jnp.maximum(x @ w + b, 0.0)


def rms_norm_jax(x, g):
    import jax.numpy as jnp

    return x * g / jnp.sqrt((x * x).mean(axis=-1, keepdims=True) + 1e-6)


def two_outputs_jax(x):
    import jax.numpy as jnp

    return jnp.tanh(x).sum(axis=0), jnp.exp(x).T


def _jax_cases():
    import jax

    cpu = jax.devices("cpu")[0]  # the lesson reads the CPU's HLO, on any machine
    rng = np.random.default_rng()

    def arr(*shape):
        return jax.device_put(rng.standard_normal(shape, dtype=np.float32), cpu)

    m, n = int(rng.integers(5, 200)), int(rng.integers(5, 300))
    return [Case(f"chain_jax on {m}x{n}", (chain_jax, arr(m, n), arr(n), arr(m, n), 0.5)),
            Case(f"softmax_jax on {m}x{n}", (softmax_jax, arr(m, n))),
            Case(f"mlp_jax on {m}x{n} @ {n}x33", (mlp_jax, arr(m, n), arr(n, 33), arr(33))),
            Case(f"rms_norm_jax on {m}x{n}", (rms_norm_jax, arr(m, n), arr(n))),
            Case(f"two_outputs_jax on {m}x{n}", (two_outputs_jax, arr(m, n)))]


def xla_fusions_reference(fn, *args):
    return fusion_count(optimized_hlo(fn, *args))


EXERCISES = [
    Exercise("07", "inductor_kernels", "predict Inductor's kernels", block_kernels_reference,
             lambda: [Case("block(x, w, b, g) compiled by Inductor on this device", ())]),
    Exercise("07", "no_graph_breaks", "one graph, no breaks", gelu_residual_reference, _residual_cases,
             run=_run_without_breaks),
    Exercise("07", "xla_fusions", "count XLA's fusions", xla_fusions_reference, _jax_cases),
]
