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


# From a third adversarial pass: counts asked of the spec or of Inductor without Dynamo, a helper hidden
# from Dynamo, and fusions counted by name, by kind, or in an ENTRY cut short.


def _asked_the_spec():
    """The counts of the spec's own reference: it compiled block, so this is a count, not a prediction."""
    from helpers.exercises.lesson07 import block_kernels_reference

    return block_kernels_reference()


def _counted_without_dynamo():
    """block traced by make_fx and handed to Inductor directly: no Dynamo frame, a compile all the same."""
    from torch._inductor.utils import run_and_get_code
    from torch.fx.experimental.proxy_tensor import make_fx

    args = block_inputs()
    graph = make_fx(block)(*args)
    _, (code,) = run_and_get_code(lambda: torch._inductor.compile(graph, list(args))(*args))
    generated, library = inductor_kernels(code)
    return {"generated": len(generated), "library": len(library)}


def _mean_hidden(x, residual, gate):
    scale = torch.compiler.disable(lambda g: torch.sigmoid(g).mean())(gate)   # skipped: not in the graph
    return residual + scale * F.gelu(x).clamp(-10.0, 10.0)


def _clamp_above_only(x, residual, gate):
    return residual + torch.sigmoid(gate).mean() * F.gelu(x).clamp(max=10.0)   # gelu(x) >= -0.17 anyway


def _fusions_by_name(fn, *args):
    return len(re.findall(r"^\s*(?:ROOT )?%\w*fusion(?:\.\d+)? = ", _entry(_hlo(fn, *args)), re.M))


def _fusions_by_kind_attribute(fn, *args):
    return _entry(_hlo(fn, *args)).count(", kind=k")   # every fusion instruction, and only they, has a kind


WRONG += [
    Wrong("inductor_kernels", "the spec's reference asked for the counts", _asked_the_spec),
    Wrong("inductor_kernels", "counted through make_fx and torch._inductor.compile (no Dynamo frame)",
          _counted_without_dynamo),
    Wrong("no_graph_breaks", "the mean in a helper wrapped in torch.compiler.disable", _mean_hidden),
    Wrong("xla_fusions", "counts the instructions whose name ends in 'fusion'", _fusions_by_name),
    Wrong("xla_fusions", "counts only the fusions of kind kLoop",
          lambda fn, *args: _entry(_hlo(fn, *args)).count("kind=kLoop")),
    Wrong("xla_fusions", "ENTRY cut at its first '}' (a layout's brace)",
          edit("07", "xla_fusion_count", ('entry = entry[:entry.index("\\n}")]', 'entry = entry[:entry.index("}")]'))),
]

RIGHT += [
    Right("no_graph_breaks", "clamp(max=10) only: gelu never goes below -10", _clamp_above_only),
    Right("xla_fusions", "the kind= attributes of ENTRY counted", _fusions_by_kind_attribute),
]
