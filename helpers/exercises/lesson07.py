"""Lesson 07 exercises: Inductor's kernel count, a function with no graph breaks, XLA's fusions.

The first and third exercises are graded against the compilers themselves: the
spec compiles the function on this machine and counts what Inductor or XLA
produced, with the counters below.
"""

import contextlib
import io
import numbers
import pathlib
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
    def randn(*shape):
        return torch.randn(*shape, device=DEVICE)

    def make(m, n, x=None, gate_rows=None):
        x = 6 * randn(m, n) if x is None else x                 # about 5% of gelu(x) above 10: clamped
        residual = (3 + 3 * float(torch.rand(()))) * randn(m, n)  # some outputs beyond +-10 too
        gate = randn(*((n,) if gate_rows is None else (gate_rows, n)))
        gate += 2 * float(torch.rand(())) - 1                     # shifted: the scale is not always 0.5
        return (x, residual, gate)

    cases = [Case(f"{m}x{n} ({why})", make(m, n))
             for (m, n), why in [((1, 1), "a single element"), ((7, 33), "odd sizes"),
                                 ((pick(64, 1024), pick(300, 4096)), "large")]]
    cases.append(Case("40x50, x a transposed view", make(40, 50, 6 * randn(50, 40).t())))
    cases.append(Case("30x20, gate of shape (3, 20): its mean is one number", make(30, 20, gate_rows=3)))
    return cases


_HINTS = [("generic_jump", "a Python `if` on a tensor's value"),
          ("item()", "`.item()` turns a tensor into a Python number"),
          ("builtin operator", "a Python call Dynamo cannot put in a graph (print?)")]


def _plain(reason):
    """Dynamo's reason for a break, with a plain-words hint in front when we know one."""
    first = reason.splitlines()[0][:100]
    hint = next((words for key, words in _HINTS if key in reason), None)
    return f"{hint} ({first})" if hint else first


def _at(stack):
    """Where Dynamo stopped, as a line of the learner's function (the stack's first frame), followed by
    the line deeper down when Dynamo stopped inside something it calls (a library: logging, say)."""
    if not stack:
        return "?"
    line = lambda frame: f"line {frame.lineno} `{(frame.line or '').strip()}`"  # noqa: E731
    outer, inner = stack[0], stack[-1]
    if (inner.filename, inner.lineno) == (outer.filename, outer.lineno):
        return line(outer)
    return f"{line(outer)} (inside it, {pathlib.Path(inner.filename).name} {line(inner)})"


_SCALAR_READS = ("item", "tolist", "_local_scalar_dense")   # a tensor's value read into Python


def _scalar_reads(graphs):
    """The nodes of Dynamo's graphs that read a tensor's value into Python (captured, not a break, only
    where capture_scalar_outputs is on)."""
    return [node for graph in graphs for node in graph.graph.nodes
            if getattr(node.target, "__name__", str(node.target)).split(".")[0] in _SCALAR_READS]


def _run_without_breaks(fn, *args):
    """Run fn eagerly for its output (printing nothing), then ask Dynamo whether it captures fn as one
    graph that reads no tensor's value into Python, and check that graph's output too."""
    from helpers.check import CheckFailed

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        out = fn(*args)  # first, eagerly: an unfinished stub stops here with NotImplementedError
    if fn is gelu_residual_reference:
        return out  # one graph: tests/test_lesson07.py proves it once
    if printed.getvalue():
        raise CheckFailed(f"your function printed {printed.getvalue().strip()[:60]!r}: a print is a Python "
                          f"side effect Dynamo cannot put in a graph (setting Dynamo to move it after the "
                          f"graph hides the cause instead of removing it). Take it out.")
    # with Dynamo's defaults: a setting that captures .item() (capture_scalar_outputs) or outputs of
    # data-dependent shape hides a break's cause instead of removing it
    with torch._dynamo.config.patch(capture_scalar_outputs=False, capture_dynamic_output_shape_ops=False):
        report = graph_breaks(fn, *args)
    if report.graph_count == 0:
        raise CheckFailed("Dynamo captured no graph at all: none of your function's work went into a "
                          "graph (is it wrapped in torch.compiler.disable, or done outside PyTorch?).")
    if report.graph_break_count or report.break_reasons or report.graph_count != 1:
        lines = [f"Dynamo split your function into {report.graph_count} graph(s) with "
                 f"{report.graph_break_count} graph break(s):"]
        for reason in report.break_reasons:
            lines.append(f"  at {_at(reason.user_stack)}: {_plain(reason.reason)}")
        lines.append("Every break ends a graph (and its fusion); remove the cause, don't hide it.")
        raise CheckFailed("\n".join(lines))
    reads = _scalar_reads(report.graphs)
    if reads:
        raise CheckFailed(f"Dynamo captured one graph, but it still reads a tensor's value into Python "
                          f"({reads[0].target}): a setting such as capture_scalar_outputs, made for your "
                          f"function, hides the break instead of removing it, and the GPU still waits "
                          f"there. Keep the value a tensor.")
    torch._dynamo.reset()
    captured = torch.compile(fn, backend="eager", fullgraph=True)
    try:
        compiled = captured(*args)
    except torch._dynamo.exc.Unsupported as e:   # a call Dynamo skips without counting it as a break
        raise CheckFailed(f"Dynamo cannot capture your function whole: torch.compile(fn, fullgraph=True) "
                          f"stops at {_at(getattr(e, 'real_stack', None))}: {str(e).splitlines()[0][:100]}. "
                          f"Part of your function runs outside the graph (a helper wrapped in "
                          f"torch.compiler.disable?): remove the cause, don't hide it.") from None
    if not (isinstance(compiled, torch.Tensor) and compiled.shape == out.shape
            and torch.allclose(compiled, out, rtol=1e-5, atol=1e-5)):
        raise CheckFailed("your function gives one answer when it runs eagerly and another when Dynamo "
                          "captures it (torch.compile(fn, backend='eager')): a branch on "
                          "torch.compiler.is_compiling(), or a side effect the graph leaves out. Compiled "
                          "and eager must compute the same thing.")
    # the same graph on new values of the same shapes and layouts (so Dynamo does not recompile), against
    # the function run eagerly on them: a value read while tracing, kept as a constant, gives the old answer
    x, residual, gate = args
    again = captured(2 * x, -residual, gate + 1)
    with contextlib.redirect_stdout(io.StringIO()):
        eager = fn(2 * x, -residual, gate + 1)   # inputs of its own: an in-place add is the harness's to tell
    if not (isinstance(again, torch.Tensor) and isinstance(eager, torch.Tensor) and again.shape == eager.shape
            and torch.allclose(again, eager, rtol=1e-5, atol=1e-5)):
        raise CheckFailed("compiled once, your function gives another answer than it does eagerly when it "
                          "is called again with new values of the same shapes: a number worked out while "
                          "Dynamo traced (torch.compiler.assume_constant_result on a helper that calls "
                          ".item()?) became a constant of the graph. Compute it from the tensors, inside "
                          "the graph.")
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


_COUNTS = {}   # device type -> what Inductor made for block there: compiled once per process


def block_kernels_reference():
    if DEVICE.type not in _COUNTS:
        (code,) = compiled_code(block, *block_inputs())
        generated, library = inductor_kernels(code)
        _COUNTS[DEVICE.type] = {"generated": len(generated), "library": len(library)}
    return dict(_COUNTS[DEVICE.type])


_KEYS = ("generated", "library")
# What to reconsider when a count is off, by (key, direction): no count is given away.
_RECONSIDER = {
    ("generated", "high"): "Inductor generates fewer kernels than you predicted: which operations share "
                           "a parallel structure (lesson 02's condition for fusing them)?",
    ("generated", "low"): "Inductor generates more kernels than you predicted: which operations of block "
                          "does it write code for itself?",
    ("library", "high"): "Inductor makes fewer library calls than you predicted: it writes pointwise "
                         "operations and reductions itself.",
    ("library", "low"): "Inductor makes more library calls than you predicted: is there an operation in "
                        "block that it hands to a library rather than writing itself?",
}


def _judge_prediction(out, expected):
    """What is wrong with a prediction, in words that do not give the counts away."""
    if not isinstance(out, dict):
        return f'return a dict {{"generated": ..., "library": ...}}, got a {type(out).__name__}'
    if set(out) != set(_KEYS):
        return f'the dict should have exactly the keys "generated" and "library", got {sorted(map(str, out))}'
    for key in _KEYS:
        value = out[key]
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            return f'out["{key}"] should be a whole number (an int), got {type(value).__name__} {value!r}'
    wrong = [_RECONSIDER[key, "high" if out[key] > expected[key] else "low"]
             for key in _KEYS if out[key] != expected[key]]
    if not wrong:
        return None
    return "\n".join(["your prediction does not match what Inductor made on this device."] + wrong)


def _compiles():
    """Everything Dynamo, AOTAutograd and Inductor have counted in this process: it moves whenever
    something is compiled, through torch.compile or by calling Inductor directly (make_fx, then
    torch._inductor.compile, never enters Dynamo)."""
    counters = torch._dynamo.utils.counters
    return sum(sum(counters[stage].values()) for stage in ("frames", "aot_autograd", "inductor"))


def _predicted_not_counted(fn):
    """A prediction is made before compiling: fn must not compile block to find it, nor ask this spec,
    whose counts are set aside meanwhile (asking for them then compiles block, and shows)."""
    before, kept = _compiles(), dict(_COUNTS)
    _COUNTS.clear()
    try:
        fn()
    finally:
        _COUNTS.update(kept)
    if _compiles() != before:
        return ("your function compiled something to find the counts. Predict them by reading "
                "block, return the numbers, and count afterwards (the cell after the check).")
    return None


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


def top1_jax(x):
    import jax.numpy as jnp

    return x.max(axis=-1), jnp.argmax(x, axis=-1)  # one fusion with two outputs: a tuple-shaped one


def sort_jax(x):
    import jax.numpy as jnp

    return jnp.sort(x, axis=-1) * 2.0   # the sort runs as an instruction of its own: a kernel, not a fusion


def branch_jax(x):
    import jax
    import jax.numpy as jnp

    # each branch is a computation of its own, called from ENTRY by a `conditional` instruction
    return jax.lax.cond(x.sum() > 0, lambda y: jnp.exp(y) + 1, lambda y: jnp.tanh(y) * 2, x)


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
            Case(f"two_outputs_jax on {m}x{n}", (two_outputs_jax, arr(m, n))),
            Case(f"top1_jax on {m}x{n} (a fusion with two outputs)", (top1_jax, arr(m, n))),
            Case(f"branch_jax on {m}x{n} (a jax.lax.cond)", (branch_jax, arr(m, n))),
            Case(f"sort_jax on {m}x{n} (a sort: a kernel that is not a fusion)", (sort_jax, arr(m, n)))]


def xla_fusions_reference(fn, *args):
    return fusion_count(optimized_hlo(fn, *args))


def _run_keeping_inputs(fn, *args):
    """fn(*args), with the arguments beside it: `explain` recounts the HLO the usual slips would."""
    return fn(*args), args


# Patterns a slip would use: an instruction of ENTRY without its ROOT line, or with a shape that has
# no spaces (a tuple-shaped fusion missed); the regex that defines fusion_count, over the whole module.
_FUSION_NO_ROOT = re.compile(r"^\s*%[\w.\-]+\s*=\s*(?:\([^)]*\)|\S+)\s+fusion\(", re.M)
_FUSION_NO_TUPLE = re.compile(r"^\s*(?:ROOT\s+)?%[\w.\-]+\s*=\s*\S+\s+fusion\(", re.M)
# ... an instruction whose name ends in "fusion" (most are, `%wrapped_copy` is not)
_FUSION_NAMED = re.compile(r"^\s*(?:ROOT\s+)?%[\w\-]*fusion(?:\.\d+)?\s*=", re.M)


def _fusion_slips(fn, args):
    """[(count, what it counts)] for the usual slips, on this case's function and inputs."""
    import jax

    hlo = optimized_hlo(fn, *args)
    entry = entry_computation(hlo)
    before = jax.jit(fn).lower(*args).as_text(dialect="hlo")
    start = hlo.index("\nENTRY ")
    return [
        (len(_FUSION_NO_ROOT.findall(entry)), "it misses the ROOT line: the instruction that gives ENTRY's "
         "result starts with `ROOT %name = ...` and may be a fusion too."),
        (len(_FUSION_NO_TUPLE.findall(entry)), "it misses the fusions whose shape is a tuple, such as "
         "`(f32[8]{0}, s32[8]{0}) fusion(...)`: a tuple shape holds spaces."),
        (len(_FUSION.findall(hlo)), "it counts fusion instructions in every computation of the module; only "
         "ENTRY's count (a fusion's body or a branch is a computation ENTRY calls)."),
        (hlo.count("fusion"), "it counts the word 'fusion' wherever it appears; only the opcode counts."),
        (sum("fusion" in line for line in entry.splitlines()), "it counts ENTRY's lines that mention "
         "'fusion' (in a name, an operand or an attribute); only the opcode counts."),
        (fusion_count(before) if "\nENTRY " in before else None, "it reads the HLO before optimisation: "
         "fusions are made by the compiler, so compile first (`.compile()`), then read `.as_text()`."),
        (len(_FUSION_NAMED.findall(entry)), "it reads the instructions' names, not their opcodes: XLA names "
         "most fusions `..._fusion`, but a name is only a name (a fusion may be called `%wrapped_copy`). The "
         "opcode is the word just before the operands' `(`."),
        (entry.count("kind=kLoop"), "it counts only the fusions of kind kLoop: a fusion of any kind (kLoop, "
         "kInput, kOutput, kCustom) has the opcode `fusion`."),
        (len(_FUSION.findall(hlo[start:hlo.index("}", start)])), "it ends ENTRY at its first '}', and the "
         "layout of a shape, such as `f32[8,4]{1,0}`, holds one: ENTRY ends at the line that is only `}`."),
    ]


def _judge_fusion_count(out, expected):
    out, (fn, *args) = out
    expected, _ = expected
    if isinstance(out, bool) or not isinstance(out, numbers.Integral):
        return f"return the count as a whole number (an int), got {type(out).__name__} {_short(out)}"
    if out != expected:
        whys = list(dict.fromkeys(why for count, why in _fusion_slips(fn, args) if count == out))
        if len(whys) == 1:
            return f"you counted {out} fusions where ENTRY has {expected}: {whys[0]}"
        if len(whys) == 2:   # this case cannot tell the two apart: name both (more: the questions below)
            return f"you counted {out} fusions where ENTRY has {expected}. Either " + " Or ".join(whys)
    if out > expected:
        return (f"you counted {out} fusions where ENTRY has {expected}. Count only the instructions of "
                f"ENTRY (not the computations above it: a fusion's body, a branch) whose opcode is "
                f"`fusion`: not every line where the word appears in a name, an operand or an attribute, "
                f"nor the other kernels ENTRY runs (a sort, a dot, a copy: each a kernel, none a fusion).")
    if out < expected:
        return (f"you counted {out} fusions where ENTRY has {expected}. Are you reading the optimized HLO "
                f"(after `.compile()`)? Does your pattern match the ROOT line, and a fusion whose shape is "
                f"a tuple, such as `(f32[8]{{0}}, s32[8]{{0}}) fusion(...)`? Does your ENTRY end at the line "
                f"that is only `}}` (a layout such as `{{1,0}}` holds one before it)?")
    return None


def _short(x):
    text = repr(x)
    return text if len(text) < 60 else text[:57] + "..."


EXERCISES = [
    Exercise("07", "inductor_kernels", "predict Inductor's kernels", block_kernels_reference,
             lambda: [Case("block(x, w, b, g) compiled by Inductor on this device", ())],
             explain=_judge_prediction, structure=_predicted_not_counted),
    Exercise("07", "no_graph_breaks", "one graph, no breaks", gelu_residual_reference, _residual_cases,
             run=_run_without_breaks),
    Exercise("07", "xla_fusions", "count XLA's fusions", xla_fusions_reference, _jax_cases,
             run=_run_keeping_inputs, explain=_judge_fusion_count),
]
