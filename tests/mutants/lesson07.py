"""Lesson 07: inductor_kernels, no_graph_breaks and xla_fusions."""

import re

import numpy as np
import torch
import torch.nn.functional as F

from helpers.exercises.lesson07 import block, block_inputs, compiled_code, inductor_kernels
from mutants import Right, Wrong, edit


def _counted_not_predicted():
    """The right counts, found by compiling block inside the prediction."""
    generated, library = inductor_kernels(compiled_code(block, *block_inputs())[0])
    return {"generated": len(generated), "library": len(library)}


# ---------------------------------------------------------------- no_graph_breaks


def _item(x, residual, gate):
    h = F.gelu(x).clamp(-10.0, 10.0)
    return residual + torch.sigmoid(gate).mean().item() * h


def _branch_kept(x, residual, gate):
    h = F.gelu(x)
    if h.abs().max() > 10:
        h = h.clamp(-10.0, 10.0)
    return residual + torch.sigmoid(gate).mean() * h


def _print_kept(x, residual, gate):
    scale = torch.sigmoid(gate).mean()
    print("gate scale", scale)
    return residual + scale * F.gelu(x).clamp(-10.0, 10.0)


def _python_float(x, residual, gate):
    scale = float(torch.sigmoid(gate).mean())
    return residual + scale * F.gelu(x).clamp(-10.0, 10.0)


@torch._dynamo.config.patch(capture_scalar_outputs=True)   # looked up to make the .item() break go away
def _item_captured(x, residual, gate):
    scale = torch.sigmoid(gate).mean().item()
    return residual + scale * F.gelu(x).clamp(-10.0, 10.0)


@torch._dynamo.config.patch(reorderable_logging_functions={print})   # the print moved after the graph
def _print_reordered(x, residual, gate):
    scale = torch.sigmoid(gate).mean()
    print("gate scale", scale)
    return residual + scale * F.gelu(x).clamp(-10.0, 10.0)


def _clamp_only_eagerly(x, residual, gate):
    h = F.gelu(x)
    if not torch.compiler.is_compiling():   # the values are right where someone looks at them
        h = h.clamp(-10.0, 10.0)
    return residual + torch.sigmoid(gate).mean() * h


def _hidden(x, residual, gate):
    fixed = torch.compiler.disable(lambda: residual + torch.sigmoid(gate).mean() * F.gelu(x).clamp(-10, 10))
    return fixed()


@torch.compiler.assume_constant_result   # Dynamo calls it once while tracing and keeps the number
def _scale_of(gate):
    return torch.sigmoid(gate).mean().item()


def _scale_assumed_constant(x, residual, gate):
    return residual + _scale_of(gate) * F.gelu(x).clamp(-10.0, 10.0)


def _cond(x, residual, gate):
    h = F.gelu(x)
    h = torch.cond(h.abs().max() > 10, lambda h: h.clamp(-10.0, 10.0), lambda h: h.clone(), (h,))
    return residual + torch.sigmoid(gate).mean() * h


def _clamp_input(x, residual, gate):
    # gelu(t) < t for t > 0 and gelu(10) is 10 in float32, so clamping the input clamps gelu's output
    return residual + torch.sigmoid(gate).mean() * F.gelu(x.clamp(-10.0, 10.0))


def _where(x, residual, gate):
    h = F.gelu(x)
    h = torch.where(h.abs().max() > 10, h.clamp(-10.0, 10.0), h)  # the branch as tensor operations
    return torch.addcmul(residual, torch.sigmoid(gate).sum() / gate.numel(), h)


def _min_max(x, residual, gate):
    h = F.gelu(x)
    h = torch.minimum(torch.maximum(h, h.new_tensor(-10.0)), h.new_tensor(10.0))
    return residual + h * torch.sigmoid(gate).mean(dim=tuple(range(gate.dim())))


# ---------------------------------------------------------------- xla_fusions


def _hlo(fn, *args):
    import jax

    return jax.jit(fn).lower(*args).compile().as_text()


def _entry(hlo):
    start = hlo.index("\nENTRY ")
    return hlo[start + 1:hlo.index("\n}", start)]


def _count_opcodes(fn, *args):
    """Each ENTRY line split into name, shape and opcode by hand: a tuple shape ends at its ')'."""
    count = 0
    for line in _entry(_hlo(fn, *args)).splitlines()[1:]:
        rest = line.split(" = ", 1)[1]
        if rest.startswith("("):
            rest = rest[rest.index(")") + 1:]
        else:
            rest = rest.split(" ", 1)[1]
        count += rest.lstrip().startswith("fusion(")
    return count


WRONG = [
    Wrong("inductor_kernels", "one kernel per operation", lambda: {"generated": 6, "library": 0}),
    Wrong("inductor_kernels", "the matmul generated too, the rest fused", lambda: {"generated": 2, "library": 0}),
    Wrong("inductor_kernels", "the row reduction in a kernel of its own",
          lambda: {"generated": 2, "library": 1}),
    Wrong("inductor_kernels", "everything in one generated kernel", lambda: {"generated": 1, "library": 0}),
    Wrong("inductor_kernels", "True for 'there is one'", lambda: {"generated": True, "library": True}),
    Wrong("inductor_kernels", "counts as floats", lambda: {"generated": 1.0, "library": 1.0}),
    Wrong("inductor_kernels", "a tuple, not a dict", lambda: (1, 1)),
    Wrong("inductor_kernels", "counted by compiling, not predicted", _counted_not_predicted),
    Wrong("no_graph_breaks", "keeps .item()", _item),
    Wrong("no_graph_breaks", "keeps the Python if on a tensor", _branch_kept),
    Wrong("no_graph_breaks", "keeps the print", _print_kept),
    Wrong("no_graph_breaks", "float() of the scale", _python_float),
    Wrong("no_graph_breaks", ".item() kept, captured by config.patch(capture_scalar_outputs=True)", _item_captured),
    Wrong("no_graph_breaks", "the print kept, moved after the graph by reorderable_logging_functions",
          _print_reordered),
    Wrong("no_graph_breaks", "the clamp only where torch.compiler.is_compiling() is False", _clamp_only_eagerly),
    Wrong("no_graph_breaks", "hides the work from Dynamo (torch.compiler.disable)", _hidden),
    Wrong("no_graph_breaks", ".item() in a helper marked assume_constant_result: a constant of the graph",
          _scale_assumed_constant),
    Wrong("no_graph_breaks", "no clamp", edit("07", "gelu_residual_fixed",
                                              ("F.gelu(x).clamp(-10.0, 10.0)", "F.gelu(x)"))),
    Wrong("no_graph_breaks", "clamps the output", edit(
        "07", "gelu_residual_fixed", ("F.gelu(x).clamp(-10.0, 10.0)", "F.gelu(x)"),
        ("return residual + scale * h ", "return (residual + scale * h).clamp(-10.0, 10.0) "))),
    Wrong("no_graph_breaks", "clamps after scaling", edit(
        "07", "gelu_residual_fixed", ("F.gelu(x).clamp(-10.0, 10.0)", "F.gelu(x)"),
        ("return residual + scale * h ", "return residual + (scale * h).clamp(-10.0, 10.0) "))),
    Wrong("no_graph_breaks", "sigmoid(gate) without the mean", edit(
        "07", "gelu_residual_fixed", ("torch.sigmoid(gate).mean()", "torch.sigmoid(gate)"))),
    Wrong("no_graph_breaks", "mean over the gate's first axis only", edit(
        "07", "gelu_residual_fixed", ("torch.sigmoid(gate).mean()", "torch.sigmoid(gate).mean(dim=0)"))),
    Wrong("no_graph_breaks", "tanh approximation of gelu", edit(
        "07", "gelu_residual_fixed", ("F.gelu(x).clamp", "F.gelu(x, approximate='tanh').clamp"))),
    Wrong("no_graph_breaks", "adds into residual in place", edit(
        "07", "gelu_residual_fixed", ("return residual + scale * h ", "return residual.add_(scale * h) "))),
    Wrong("xla_fusions", "counts the word 'fusion' in the whole module",
          lambda fn, *args: _hlo(fn, *args).count("fusion")),
    Wrong("xla_fusions", "counts fusion instructions in every computation, not only ENTRY",
          lambda fn, *args: len(re.findall(r"^\s*(?:ROOT )?%\S+ = .*? fusion\(", _hlo(fn, *args), re.M))),
    Wrong("xla_fusions", "counts the computations defined above ENTRY",
          lambda fn, *args: len(re.findall(r"^%\S+ \(", _hlo(fn, *args), re.M))),
    Wrong("xla_fusions", "misses the ROOT line", edit("07", "xla_fusion_count", (r"^\s*(?:ROOT )?%\S+", r"^\s*%\S+"))),
    Wrong("xla_fusions", "a shape without spaces: misses tuple-shaped fusions",
          edit("07", "xla_fusion_count", (r"%\S+ = .*? fusion\(", r"%\S+ = \S+ fusion\("))),
    Wrong("xla_fusions", "counts ENTRY's lines that mention fusion",
          lambda fn, *args: sum("fusion" in line for line in _entry(_hlo(fn, *args)).splitlines())),
    Wrong("xla_fusions", "reads the HLO before optimisation (no .compile())",
          edit("07", "xla_fusion_count", ("jax.jit(fn).lower(*args).compile().as_text()",
                                          "jax.jit(fn).lower(*args).as_text(dialect='hlo')"))),
    Wrong("xla_fusions", "counts every kernel ENTRY runs (fusion, dot, sort, copy, custom-call), not only fusions",
          lambda fn, *args: len(re.findall(r"^\s*(?:ROOT )?%\S+ = .*? (?:fusion|dot|sort|copy|custom-call|transpose)\(",
                                           _entry(_hlo(fn, *args)), re.M))),
    Wrong("xla_fusions", "returns the matching lines, not their number",
          edit("07", "xla_fusion_count", ("return len(re.findall(", "return (re.findall("))),
]

RIGHT = [
    Right("inductor_kernels", "dict() with the keys in another order, numpy ints",
          lambda: dict(library=np.int64(1), generated=1)),
    Right("no_graph_breaks", "torch.where for the branch, sum / numel for the mean", _where),
    Right("no_graph_breaks", "minimum/maximum for the clamp, mean over every axis", _min_max),
    Right("no_graph_breaks", "torch.cond for the branch", _cond),
    Right("no_graph_breaks", "gelu of the input clamped to [-10, 10]", _clamp_input),
    Right("xla_fusions", "opcodes parsed line by line, no regex", _count_opcodes),
]
