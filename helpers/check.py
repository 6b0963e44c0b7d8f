"""`check(name, fn)`: the one grading call of the course.

For each case of the exercise (fresh random inputs, awkward shapes, strided
views, random scalars) it

1. runs the PyTorch reference on the inputs upcast to float64 for the values,
   and on the case's own dtypes for what the output must be: its shape, dtype
   and device;
2. runs your function on copies of the inputs surrounded by NaN (a stray read
   shows up as a NaN), with every fresh allocation (`torch.empty`,
   `torch.empty_like`, ...) filled with a poison value and followed by a guard
   band, under a time limit;
3. checks what came back: a Triton kernel ran (where the exercise asks for
   one), nothing was written past an output or into an input, the shape, dtype
   and device, elements never written, NaNs, then the values within a tolerance
   set by the expected dtype, and that the output is not an input in disguise;
4. once every case passes, measures the structure the lesson teaches (two
   reads, tiles skipped, no N x N tensor), where the exercise says so, then runs
   a kernel exercise once more on a small case to see that PyTorch computed
   nothing beside the kernel (only allocations, views and what the exercise
   allows).

A failure names the case, says what went wrong, and lists the other failing
cases. The result (pass, fail or not done) is appended to a small results file
that `make grade` and `make progress` read.
"""

import contextlib
import html
import math
import os
import pathlib
import signal
import tempfile
import threading
import time
import traceback

import numpy as np
import torch
import triton

from helpers import exercises, gpu_compile, interpreter, records, worker
from helpers.device import DEVICE, ON_GPU
from helpers.interpreter import OutOfBounds
from helpers.traffic import EagerWork, source_line


class CheckFailed(AssertionError):
    """Your function ran but did not compute what the exercise asks."""

    def _render_traceback_(self):
        # Jupyter shows this instead of a traceback: the message is the whole story.
        return [f"{type(self).__name__}: {self}"]


class NotDone(CheckFailed):
    """The exercise is still the stub it shipped as.

    Inside Jupyter, check() shows it as a box in place of raising it, so that Run All goes on.
    """

    exercise = None  # set by check(): the Exercise, for the box

    def _lines(self):
        """(heading, why, what to do)."""
        ex, why = self.exercise, str(self)
        if ex is not None:
            head = f"Exercise {_number(ex)} of lesson {ex.lesson}, {ex.name}: not done yet."
        else:
            head, why = why, ""
        return head, why, "Write the exercise cell above, run it, then run this check again."

    def _repr_pretty_(self, p, cycle):
        head, why, todo = self._lines()
        p.text("\n  ".join(["· " + head, *why.splitlines(), todo]))

    def _repr_html_(self):
        head, why, todo = (html.escape(line).replace("\n", "<br>") for line in self._lines())
        reason = f"<div style='margin-top:0.3em'>{why}</div>" if why else ""
        box = "border-left:4px solid #e0a800;background:rgba(224,168,0,.08);padding:.5em .9em;margin:.3em 0"
        return (f"<div class='course-not-done' style='{box}'><b>· {head}</b>{reason}"
                f"<div style='margin-top:0.3em'><b>To do:</b> {todo}</div></div>")


class KernelTimeout(CheckFailed):
    """Your function did not finish within the exercise's time limit."""


# (atol, rtol) by expected output dtype, against a float64 reference.
# float16 has a 2**-11 unit of rounding and bfloat16 2**-8: the tolerances
# allow about two units in the last place, plus the reference's own rounding.
TOLERANCES = {
    torch.float64: (1e-9, 1e-9),
    torch.float32: (1e-5, 1e-5),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (8e-3, 8e-3),
}

# Poison written into every fresh allocation and its guard bands: a NaN with a payload of
# its own, so "never written" (these exact bits) is told apart from "computed a NaN".
_POISON_BITS = {
    torch.float64: (torch.int64, 0x7FF8_0000_DEAD_BEEF),
    torch.float32: (torch.int32, 0x7FC0_DEAD),
    torch.float16: (torch.int16, 0x7E5A),
    torch.bfloat16: (torch.int16, 0x7FDA),
}
_POISON_INT = -0x2152411  # for integer outputs (the nearest value that fits, for 8- and 16-bit ones)
MORE_CASES_S = 20.0      # after a failure, later cases still run for this long, to find other failures
GUARD_BYTES = 4096        # poisoned memory before and after every allocation, and NaN around every input


def _poison_int(dtype):
    info = torch.iinfo(dtype)
    return min(max(_POISON_INT, info.min), info.max)


def _poison(t):
    if t.dtype in _POISON_BITS:
        int_dtype, bits = _POISON_BITS[t.dtype]
        t.view(int_dtype).fill_(bits)
    elif t.dtype.is_floating_point:
        t.fill_(float("nan"))
    elif t.dtype != torch.bool and not t.dtype.is_complex:
        t.fill_(_poison_int(t.dtype))
    return t


def unwritten(t):
    """A bool mask of the elements of `t` that still hold the poison."""
    if t.dtype in _POISON_BITS:
        int_dtype, bits = _POISON_BITS[t.dtype]
        return t.view(int_dtype) == bits
    if t.dtype.is_floating_point or t.dtype == torch.bool or t.dtype.is_complex:
        return torch.zeros_like(t, dtype=torch.bool)
    return t == _poison_int(t.dtype)


def _guardable(t):
    real = type(t) is torch.Tensor and t.device.type in ("cpu", "cuda")  # not a compiler's fake tensor
    return real and t.numel() > 0 and (t.dtype in _POISON_BITS or not (t.dtype.is_floating_point or
                                                              t.dtype == torch.bool or t.dtype.is_complex))


class _Guarded:
    """A fresh allocation placed inside a larger poisoned buffer: guard bands before and after it."""

    def __init__(self, buffer, guard, size, shape, dtype):
        self.buffer, self.guard, self.size, self.shape, self.dtype = buffer, guard, size, shape, dtype

    def problem(self):
        before = ~unwritten(self.buffer[:self.guard])
        after = ~unwritten(self.buffer[self.guard + self.size:])
        if not (before.any() or after.any()):
            return None
        what = f"a tensor of shape {tuple(self.shape)} ({self.dtype}) that your function allocated"
        if after.any():
            first = int(torch.nonzero(after)[0])
            where = "right after its end" if first == 0 else f"starting {first} element(s) past its end"
            return (f"your kernel wrote {int(after.sum())} element(s) past the end of {what}, {where}. "
                    f"A store is missing a mask, or its mask lets rows or columns past the end through "
                    f"(e.g. `offs_m < M`).")
        return (f"your kernel wrote {int(before.sum())} element(s) before the start of {what}: an offset "
                f"went negative.")


@contextlib.contextmanager
def poisoned_allocations():
    """Inside the block, fresh tensors from torch.empty* are poisoned and guarded: yields the guards."""
    originals = {name: getattr(torch, name) for name in ("empty", "empty_like", "empty_strided")}
    new_empty = torch.Tensor.new_empty
    guards = []

    def wrap(make):
        def poisoned(*args, **kwargs):
            t = make(*args, **kwargs)
            if not _guardable(t) or t.requires_grad or t.storage_offset() != 0:
                return _poison(t)
            item = t.element_size()
            size = t.untyped_storage().nbytes() // item
            guard = GUARD_BYTES // item
            buffer = _poison(originals["empty"](size + 2 * guard, dtype=t.dtype, device=t.device))
            guards.append(_Guarded(buffer, guard, size, t.shape, t.dtype))
            return buffer.as_strided(t.shape, t.stride(), guard)
        return poisoned

    for name, make in originals.items():
        setattr(torch, name, wrap(make))
    torch.Tensor.new_empty = wrap(lambda self, *a, **k: new_empty(self, *a, **k))
    try:
        yield guards
    finally:
        for name, make in originals.items():
            setattr(torch, name, make)
        torch.Tensor.new_empty = new_empty


def _with_halo(t):
    """A copy of floating tensor `t` with the same strides, inside a buffer of NaN.

    The gaps of a strided view and GUARD_BYTES on either side hold NaN, so a kernel that reads
    past the end, or ignores a stride, computes a NaN where it should not.
    """
    if not (isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel() > 0) or t.requires_grad:
        return t, None
    if any(s < 0 for s in t.stride()):
        return t, None
    halo = GUARD_BYTES // t.element_size()
    extent = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
    buffer = torch.full((extent + 2 * halo,), float("nan"), dtype=t.dtype, device=t.device)
    copy = buffer.as_strided(t.shape, t.stride(), halo)
    once = tuple(slice(0, 1) if s == 0 else slice(None) for s in t.stride())  # a broadcast dim: one copy
    copy[once].copy_(t[once])
    return copy, (buffer, halo, extent)


def _halo_problem(i, halo):
    buffer, size, extent = halo
    around = torch.cat([buffer[:size], buffer[size + extent:]])
    if torch.isnan(around).all():
        return None
    return (f"your function wrote into the memory around its input #{i} (outside the tensor): "
            f"a store through the wrong pointer, or an offset past the end.")


@contextlib.contextmanager
def time_limit(seconds, what, error=None):
    """Stop the block after `seconds` with KernelTimeout, or `error` if given (main thread, Unix; else
    no limit)."""
    usable = hasattr(signal, "SIGALRM") and threading.current_thread() is threading.main_thread()
    if not usable:
        yield
        return
    started, launches = time.monotonic(), interpreter.launch_count()

    fired = []

    def on_alarm(signum, frame):
        fired.append(True)
        launched = interpreter.launch_count() - launches   # within the limit, the running one included
        raise (error or KernelTimeout)(_timeout_message(what, seconds, time.monotonic() - started, launched))

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if fired:   # the alarm may have struck while a launch patched the language or undid it
            interpreter.restore_language()


def _timeout_message(what, seconds, elapsed, launched=1):
    running = interpreter.progress()
    if running is None:
        return (f"{what} was still running after {seconds:g} s, outside any kernel, so the check "
                f"stopped it. Look for a Python loop whose condition never changes.")
    kernel, started, total = running
    finished = launched - 1   # launches that ran to the end before this one
    if started > 1 or finished > 0:
        before = f" (after {finished:,} launch(es) that ran to the end)" if finished else ""
        return (f"{what} was still running after {seconds:g} s: {kernel} had started {started:,} of its "
                f"{total:,} programs{before}, so it is slow, not stuck. The interpreter runs one program "
                f"at a time: give each program a block of elements (BLOCK of them), not one, so that "
                f"far fewer programs are launched.")
    return (f"{what} was still running after {seconds:g} s, inside program 1 of {kernel}, so the check "
            f"stopped it. Look for a loop whose bound never moves (a `while` or a `range` over a "
            f"pointer instead of a count).")


def wait_for_gpu(seconds, what):
    """Wait for queued GPU work without blocking forever on a kernel that never ends."""
    if not ON_GPU:
        return
    done = torch.cuda.Event()
    done.record()
    deadline = time.monotonic() + seconds
    while not done.query():
        if time.monotonic() > deadline:
            then = ("the check stops the process it ran in, which frees the GPU" if worker.isolating()
                    else "restart the Python kernel to free the GPU")
            raise KernelTimeout(f"{what}: the GPU kernel had not finished after {seconds:g} s. "
                                f"It is probably looping forever: {then}. Then fix the loop bound.")
        time.sleep(0.001)


# ---------------------------------------------------------------- what the output must be


def _upcast(x):
    if isinstance(x, torch.Tensor) and x.is_floating_point():
        return x.detach().to(torch.float64)
    if isinstance(x, (tuple, list)):
        return type(x)(_upcast(v) for v in x)
    return x


def _clone(x):
    if isinstance(x, torch.Tensor):
        return x.detach().clone()
    if isinstance(x, (tuple, list)):
        return type(x)(_clone(v) for v in x)
    return x


def _on_meta(x):
    if isinstance(x, torch.Tensor):
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
    if isinstance(x, (tuple, list)):
        return type(x)(_on_meta(v) for v in x)
    return x


def _expected(ex, case):
    """(expected values, expected form): values in float64, form (shape, dtype) on the case's own dtypes.
    A case with `reference_args` (too large to compute on whole) gives those of its compared part."""
    args = case.args if case.reference_args is None else case.reference_args
    if not ex.reference_in_float64:
        expected = ex.run(ex.reference, *args, **case.kwargs)
        return expected, expected
    values = ex.run(ex.reference, *_upcast(args), **_upcast(case.kwargs))
    if next(_tensors(values), None) is None:
        return values, values
    try:
        form = ex.run(ex.reference, *_on_meta(args), **_on_meta(case.kwargs))
    except Exception:  # a reference that cannot run on shapes alone runs on the real inputs
        form = ex.run(ex.reference, *args, **case.kwargs)
    return values, form


# ---------------------------------------------------------------- comparing


def _fmt_index(flat, shape):
    idx = []
    for size in reversed(shape):
        idx.append(flat % size)
        flat //= size
    return tuple(reversed(idx)) if len(idx) != 1 else idx[0]


def _first(mask, shape, k=5):
    flat = torch.nonzero(mask.reshape(-1)).reshape(-1)[:k].tolist()
    return [_fmt_index(i, tuple(shape)) for i in flat]


def _flat(index, shape):
    flat = 0
    for i, size in zip(index, shape):
        flat = flat * size + i
    return flat


def compare_tensors(out, ref, tol, where="output", dtype=None, nan_hint=""):
    """None if `out` matches `ref` within (atol, rtol) and has `dtype` (default: ref's), else why not."""
    dtype = ref.dtype if dtype is None else dtype
    if not isinstance(out, torch.Tensor):
        return f"{where} should be a torch.Tensor, got {type(out).__name__}"
    if tuple(out.shape) != tuple(ref.shape):
        return f"{where} has shape {tuple(out.shape)}, expected {tuple(ref.shape)}"
    if out.device.type != DEVICE.type and ref.device.type == DEVICE.type:
        return f"{where} is on {out.device}, expected {DEVICE}"
    if out.dtype != dtype:
        return (f"{where} has dtype {out.dtype}, expected {dtype} (what the reference returns for "
                f"these inputs)")
    n = out.numel()
    never = unwritten(out)
    if never.any():
        count = int(never.sum())
        if count == n:
            return f"{where}: none of its {n} elements were written"
        return (f"{where}: {count} of {n} elements were never written (they still hold the check's "
                f"poison), first at {_first(never, out.shape)}")
    got = out.detach().to(torch.float64) if out.is_floating_point() else out.detach()
    want = ref.detach().to(got.dtype) if ref.dtype != got.dtype else ref.detach()
    if not got.is_floating_point():
        bad = got != want
        if bad.any():
            i = _first(bad, out.shape)
            return f"{where}: {int(bad.sum())} of {n} values differ, first at {i}"
        return None
    nan_got, nan_want = torch.isnan(got), torch.isnan(want)
    wrong_nan = nan_got & ~nan_want
    if wrong_nan.any():
        return (f"{where}: {int(wrong_nan.sum())} NaN(s) where the reference is a number, first at "
                f"{_first(wrong_nan, out.shape)}: an overflow, exp of a large number, 0/0, a masked "
                f"load without a safe `other=` value, or a read outside an input or between the elements of "
                f"a strided one (the check fills that memory with NaN).{' ' + nan_hint if nan_hint else ''}")
    if (nan_want & ~nan_got).any():
        return f"{where}: the reference has NaN at {_first(nan_want & ~nan_got, out.shape)}, you do not"
    atol, rtol = tol
    both_nan = nan_got & nan_want
    same_inf = torch.isinf(want) & (got == want)
    err = (got - want).abs().masked_fill(both_nan | same_inf, 0.0)
    allowed = atol + rtol * want.abs().masked_fill(both_nan | same_inf, 0.0)
    bad = err > allowed
    if not bad.any():
        return None
    # the worst element is the one furthest past its own tolerance (a relative tolerance allows large
    # values a larger error: the largest error may lie within its own)
    excess = (err / allowed).masked_fill(torch.isnan(err), math.inf).reshape(-1)
    worst = int(torch.argmax(excess).item())
    wi = _fmt_index(worst, tuple(out.shape))

    def got_at(flat):
        return _differing(got.reshape(-1)[flat].item(), want.reshape(-1)[flat].item())

    lines = [f"{where}: {int(bad.sum())} of {n} elements are off by more than atol={atol:g} + "
             f"rtol={rtol:g}*|expected| (the tolerance for {dtype}).",
             f"  worst at {wi}: got {got_at(worst)}, an error of {err.reshape(-1)[worst].item():.4g}, "
             f"{excess[worst].item():.3g} times the tolerance there"]
    for i in (_first(bad, out.shape, k=3) if int(bad.sum()) > 1 else []):
        lines.append(f"  at {i}: got {got_at(i if isinstance(i, int) else _flat(i, out.shape))}")
    return "\n".join(lines)


def _differing(got, want):
    """'G, expected W', with as many significant digits as it takes (6 at least) for G and W to differ."""
    for digits in range(6, 18):
        g, w = f"{got:.{digits}g}", f"{want:.{digits}g}"
        if g != w:
            break
    return f"{g}, expected {w}"


def compare(out, ref, tol_for, where="output", form=None, nan_hint="", names=()):
    """Compare outputs of any structure (tensors, tuples/lists of them, numbers, dicts).

    `form` has the structure of `ref` and holds what each output must be (its dtype);
    by default `ref` itself. `names`: what the lesson calls the values of a tuple `ref`, for messages.
    """
    form = ref if form is None else form
    if isinstance(ref, torch.Tensor):
        return compare_tensors(out, ref, tol_for(form.dtype), where, form.dtype, nan_hint)
    if isinstance(ref, (tuple, list)):
        if not isinstance(out, (tuple, list)) or len(out) != len(ref):
            return f"{where} should be a sequence of {len(ref)} values, got {_short(out)}"
        for i, (o, r, f) in enumerate(zip(out, ref, form)):
            named = f"{names[i]} ({where}[{i}])" if i < len(names) else f"{where}[{i}]"
            problem = compare(o, r, tol_for, named, f, nan_hint)
            if problem:
                return problem
        return None
    if isinstance(ref, dict):
        if not isinstance(out, dict) or set(out) != set(ref):
            return f"{where} should be a dict with keys {sorted(ref)}, got {_short(out)}"
        for key in ref:
            problem = compare(out[key], ref[key], tol_for, f"{where}[{key!r}]", form[key], nan_hint)
            if problem:
                return problem
        return None
    if isinstance(ref, float) and isinstance(out, (int, float)):
        close = math.isclose(out, ref, rel_tol=1e-6, abs_tol=1e-9)
        return None if close else f"{where} is {out}, expected {ref}"
    return None if out == ref else f"{where} is {_short(out)}, expected {_short(ref)}"


def _short(x):
    text = repr(x)
    return text if len(text) < 80 else text[:77] + "..."


def _tensors(tree):
    if isinstance(tree, torch.Tensor):
        yield tree
    elif isinstance(tree, (tuple, list)):
        for item in tree:
            yield from _tensors(item)
    elif isinstance(tree, dict):
        for item in tree.values():
            yield from _tensors(item)


def _aliased(out, inputs):
    """A message if an output shares memory with an input (returns an input, or a view of one)."""
    def storage(t):
        return t.untyped_storage().data_ptr() if t.device.type != "meta" and t.numel() else None

    owners = {storage(t): i for i, t in enumerate(inputs) if isinstance(t, torch.Tensor) and storage(t)}
    for t in _tensors(out):
        i = owners.get(storage(t))
        if i is not None:
            return (f"your output shares memory with input #{i} (it is that input, or a view of it): "
                    f"allocate a new output and write the result there.")
    return None


def _not_contiguous(out, why=True):
    """A message if an output tensor is not contiguous (where the lesson asks for contiguous outputs);
    `why`: what reads the output next, in the lesson's words (True: a plain row-major array)."""
    why = why if isinstance(why, str) else "the next kernel reads it as a plain row-major array"
    for i, t in enumerate(_tensors(out)):
        if t.dim() and not t.is_contiguous():
            which = "your output" if isinstance(out, torch.Tensor) else f"output [{i}]"
            return (f"{which} has the right values but strides {tuple(t.stride())} for shape "
                    f"{tuple(t.shape)}: it is not contiguous, and the lesson asks for a contiguous "
                    f"output ({why}). Allocate it with torch.empty(shape) and write it in that layout.")
    return None


def _fingerprint(x, chunk=2**24):
    """A floating tensor's float64 sum (NaN counted as 0.5), to tell whether it changed without keeping
    a copy of it (a case too large to copy); anything else as it is. Summed `chunk` values at a time:
    the memory it takes stays small beside such a tensor."""
    if isinstance(x, torch.Tensor) and x.is_floating_point():
        parts = x.detach().reshape(-1).split(chunk)
        return sum(torch.sum(part.nan_to_num(0.5), dtype=torch.float64) for part in parts)
    return x


def _changed_inputs(before, after, fingerprints=False):
    for i, (b, a) in enumerate(zip(before, after)):
        a = _fingerprint(a) if fingerprints else a
        if isinstance(b, torch.Tensor) and not torch.equal(b.nan_to_num(), a.detach().nan_to_num()):
            return f"your function changed its input #{i} (arguments are inputs: write only to the output)"
    return None


def _find_cause(exc, kind):
    while exc is not None:
        if isinstance(exc, kind):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def _package_folders(*modules):
    """Each module's folder as Python names its files, and with links resolved."""
    folders = [pathlib.Path(m.__file__).parent for m in modules]
    return tuple(dict.fromkeys(str(f) for folder in folders for f in (folder, folder.resolve())))


# Frames that are not the learner's: this harness, and the libraries (Triton may sit outside
# site-packages: CI puts its oldest supported version in a folder of its own).
_HARNESS = _package_folders(triton, torch, np) + (str(pathlib.Path(__file__).resolve().parent),
                                                   "site-packages", "<frozen")


def _where(exc):
    """'  at line N of <file> (in fn): `source`' for the innermost frame of the learner's code, if any.

    The frames of every exception in the chain are joined, outermost first: the interpreter wraps
    what a kernel raises, and the kernel's own line is in the traceback of the wrapped exception.
    """
    frames = []
    while exc is not None:
        frames += traceback.extract_tb(exc.__traceback__)
        exc = exc.__cause__ or exc.__context__
    mine = [f for f in frames if not any(part in f.filename for part in _HARNESS)]
    if not mine:
        return ""
    f = mine[-1]
    place = "a notebook cell" if "ipykernel" in f.filename else pathlib.Path(f.filename).name
    return f"\n  at line {f.lineno} of {place} (in {f.name}): `{(f.line or '').strip()}`"


class GPUCrashed(CheckFailed):
    """A kernel touched memory far outside its tensors and broke the GPU context."""


def _gpu_crash(e):
    return ON_GPU and worker.crash_kind(str(e)) is not None


def _strided(case):
    """Whether a case passes a non-contiguous tensor."""
    args = (case.args, case.kwargs) if case is not None else ()
    return any(t.dim() and not t.is_contiguous() for t in _tensors(args))


def _compile_error(e):
    """On a GPU, Triton's compiler reports an error in a kernel with the kernel's source and the AST node
    at fault (a CompilationError, wrapping the same error for each @triton.jit call it was inside). Say
    what went wrong, innermost, and where, outermost: the line of the learner's kernel."""
    chain, exc = [], e
    while exc is not None:
        if hasattr(exc, "src") and hasattr(exc, "node") and hasattr(exc, "error_message"):
            chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    if not chain or not chain[0].src or not hasattr(chain[0].node, "lineno"):
        return None
    reason = next((c.error_message for c in reversed(chain) if c.error_message), None)
    cause = chain[-1].__cause__
    reason = reason or (f"{type(cause).__name__}: {cause}" if cause is not None else "(no message)")
    lines = chain[0].src.splitlines()
    kernel = lines[0].split("(")[0].removeprefix("def ").strip()  # Triton's src starts at the `def`
    line = lines[chain[0].node.lineno - 1].strip() if chain[0].node.lineno <= len(lines) else ""
    return (f"Triton could not compile {kernel}: {reason.strip()[:400]}\n"
            f"  at line {chain[0].node.lineno} of {kernel} (counting its `def` as line 1): `{line}`")


def _explain_exception(e, case=None):
    """What an exception raised by the learner's code (or inside their kernel) says, shortly, and where."""
    out_of_bounds = _find_cause(e, OutOfBounds)  # the interpreter wraps what a kernel raises
    if out_of_bounds is not None:
        return f"{out_of_bounds.facts} {out_of_bounds.advice(strided_case=_strided(case))}{_where(e)}"
    known = _find_cause(e, CheckFailed)
    if known is not None:
        return str(known)
    if _gpu_crash(e):
        return worker.crash_text(str(e))
    compiled = _compile_error(e)
    if compiled is not None:
        return compiled
    inner = e
    while type(inner).__name__ == "InterpreterError" and (inner.__cause__ or inner.__context__):
        inner = inner.__cause__ or inner.__context__  # the error inside the kernel, not its wrapper
    text = str(inner).strip() or "(no message)"
    if isinstance(inner, AttributeError) and "'InterpreterBuilder'" in text:   # e.g. create_descriptor_reduce
        return (f"Triton's interpreter cannot run an operation your kernel uses ({text}): it is not your "
                f"code's mistake, but the checks here run kernels in the interpreter. Write that step with "
                f"operations it runs (a tensor descriptor's atomic_add, for instance, as tl.atomic_add "
                f"through pointers).{_where(e)}")
    if isinstance(inner, RuntimeError) and "active drivers" in text:   # no GPU for the autotuner to time on
        return (f"Triton's autotuner chooses among its configurations by timing each on a GPU, and there "
                f"is none here ({text}). In the interpreter give it one configuration (the lessons' "
                f"`pick(cpu=[one config], gpu=[...])`), or launch with fixed block sizes.")
    where = _where(e)
    if isinstance(inner, AttributeError) and text.startswith("'int' object has no attribute"):
        # compiled, `for i in range(n)` gives i as a tensor; interpreted, as a Python int
        return (f"it raised AttributeError: {text}. In the interpreter a loop variable of `for ... in "
                f"range(...)`, or a constexpr, is a Python int, where a compiled kernel has a Triton "
                f"scalar: write tl.cast(i, tl.int64) (or start from a tensor: tl.program_id, tl.arange) "
                f"instead of i.to(tl.int64), and it runs in both.{where}")
    if isinstance(inner, AssertionError) and text.startswith("expected value shape"):   # a descriptor store
        return (f"it raised AssertionError: {text}. A tensor descriptor loads and stores tiles of exactly "
                f"its block_shape: the tile given to store has another shape. Make the two agree (the "
                f"descriptor's block_shape, or the tile you compute).{where}")
    if "libdevice" in where:   # Triton's interpreter has no libdevice: its calls return None
        return (f"Triton's interpreter cannot run libdevice's functions (it raised {type(inner).__name__}: "
                f"{text[:200]}): on a GPU the line is right, but the checks here run kernels in the "
                f"interpreter. Write that step with triton.language's own operations (tl.exp, tl.sqrt, "
                f"...).{where}")
    if len(text) > 400:
        text = text[:400] + " ..."
    return f"it raised {type(inner).__name__}: {text}{where}"


# ---------------------------------------------------------------- check


_passed = set()  # exercises whose check passed in this Python session (for passed())


def check(name, fn):
    """Grade `fn` against exercise `name`; print one line on success, raise on failure.

    An unfinished exercise raises NotDone, except inside Jupyter, where it shows a "not done"
    box and returns, so that the rest of the notebook still runs. Either way it is recorded.
    """
    ex = exercises.get(name)
    _passed.discard(ex.name)
    status, message = "fail", ""
    try:
        n_cases = worker.run_cases(ex, fn) if worker.isolating() else _run_cases(ex, fn)
        status, message = "pass", f"{n_cases} cases"
    except NotDone as e:
        status, message = "not done", str(e)
        if not _in_jupyter():
            raise NotDone(f"{name}: not done yet. {e}") from None
        box = NotDone(str(e))
        box.exercise = ex
        _display(box)
        return
    except CheckFailed as e:
        message = str(e)
        raise type(e)(f"✗ {name}: {e}") from None
    finally:
        records.append(ex.lesson, ex.name, status, " ".join(message.splitlines()[:2]))
    _passed.add(ex.name)
    matched = "the one case matches" if n_cases == 1 else f"all {n_cases} cases match"
    print(f"✓ {name}: {matched} the reference ({DEVICE.type}).")


def passed(*names):
    """True if every named exercise passed its check in this session; else say which to finish.

    A cell that uses your answer to an exercise starts with `if passed("name"):`, so that it
    runs once that exercise passes, and until then says what it needs instead of failing.
    """
    missing = [exercises.get(name) for name in names if exercises.get(name).name not in _passed]
    for ex in missing:
        print(f"· needs exercise {_number(ex)} ({ex.name}): finish it, "
              f"then run this cell again.")
    return not missing


def _number(ex):
    """The exercise's number within its lesson (1 for the first), as the notebook orders them."""
    return [e.name for e in exercises.by_lesson()[ex.lesson]].index(ex.name) + 1


def _in_jupyter():
    """Whether this code runs inside a Jupyter kernel (a notebook), not plain Python or pytest."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return getattr(shell, "kernel", None) is not None


def _display(obj):
    from IPython.display import display
    display(obj)


def _run_cases(ex, fn, on_case=None):
    """Run every case of `ex` on `fn`; return how many there were, or raise what check() reports.
    `on_case(label, hint)` is told each case as it starts (the worker process sends it to the notebook)."""
    if fn is None:
        raise NotDone("Pass your function to check(), not the result of calling it.")
    if not callable(fn):
        raise CheckFailed(f"check() takes your function itself; got a {type(fn).__name__}.")
    tol_for = lambda dtype: ex.tol.get(dtype, TOLERANCES.get(dtype, (0.0, 0.0)))  # noqa: E731
    cases = ex.cases()
    failures, wrote_something, skipped = [], False, 0
    launched = {}   # the kernels the cases launched, noted for compiling as a GPU would (interpreter only)
    started = time.monotonic()
    for case in cases:
        if failures and wrote_something and time.monotonic() - started > MORE_CASES_S:
            skipped += 1  # one failure is known: the rest only while they are quick
            continue
        with _built(case) as case:
            if case is None:
                continue  # a large case this GPU has no room for now
            if on_case is not None:
                on_case(case.label, case.hint)
            try:
                with gpu_compile.launches_noted(launched):
                    problem, wrote = _run_case(ex, fn, case, tol_for)
            except GPUCrashed as crash:  # nothing more can run in this CUDA context
                earlier = "".join(f"\n(Earlier, case '{lbl}' failed too: {why})" for lbl, why in failures[:1])
                raise GPUCrashed(f"failed on case '{case.label}':\n{crash}{earlier}") from None
        wrote_something = wrote_something or wrote
        if problem:
            failures.append((case.label, problem))
    if failures and wrote_something:
        label, problem = failures[0]
        lines = [f"failed on case '{label}':", problem]
        if len(failures) > 1:
            others = ", ".join(f"'{lbl}'" for lbl, _ in failures[1:4])
            more = f" and {len(failures) - 4} more" if len(failures) > 4 else ""
            lines.append(f"Also failing: {others}{more} ({len(failures)} of {len(cases)} cases).")
        if skipped:
            lines.append(f"({skipped} later case(s) not run.)")
        raise CheckFailed("\n".join(lines))
    if failures:
        raise NotDone("The output still holds the check's poison in every case: the kernel body looks "
                      "untouched.\nIf you have written it, it stored values computed from the output's own "
                      "contents (torch.empty leaves them unset), so the poison came through.")
    if launched and not ON_GPU and gpu_compile.available():
        if on_case is not None:
            on_case("your kernel, compiled as a GPU would")
        problem = _not_compiled(launched)
        if problem:
            raise CheckFailed(f"every case gives the right values here, but {problem}")
    # PyTorch's work beside the kernel first: where it computed the result, the line that did is the
    # clearest thing to say (a structure rule would only see a kernel doing too little)
    if ex.kernel and ex.torch_ops is not None:
        if on_case is not None:
            on_case("what PyTorch computes beside your kernel, on a small input")
        problem = _computed_beside(ex, fn, cases)
        if problem:
            raise CheckFailed(f"every case gives the right values, but {problem}")
    if ex.structure is not None:
        if on_case is not None:
            on_case("its structure, measured on a small input")
        try:
            with interpreter.quiet():
                problem = ex.structure(fn)
        except Exception as e:  # noqa: BLE001  (the learner's code, run once more to measure it)
            problem = f"measuring its structure on a small input, {_explain_exception(e)}"
        if problem:
            raise CheckFailed(f"every case gives the right values, but {problem}")
    if ex.kernel:
        if on_case is not None:
            on_case("what your kernels stored, on a small input")
        problem = _stored_too_little(ex, fn, cases)
        if problem:
            raise CheckFailed(f"every case gives the right values, but {problem}")
    return len(cases)


# Seconds the compiles of one check may take (a few hundredths each, usually). One that takes longer
# (a long tl.static_range unrolled, say) says nothing against the kernel: a GPU would wait for it.
COMPILE_S = 30


def _not_compiled(launched):
    """What to tell of the kernels Triton's compiler refuses for a GPU (gpu_compile.problems), or None."""
    try:
        with time_limit(COMPILE_S, "Triton's compiler", error=gpu_compile.OutOfTime):
            refused = gpu_compile.problems(launched)
    except gpu_compile.OutOfTime:
        return None
    if not refused:
        return None
    name, said = refused[0]
    return (f"a GPU could not compile your kernel `{name}`. Triton's interpreter runs a kernel as Python, "
            f"one statement at a time; on a GPU, Triton compiles the whole kernel first, and its compiler "
            f"(run here for an H100, sm_90) refuses this:\n{said}")


# Allocations that fill their memory with a constant (an accumulator an atomic adds into): allowed
# like torch.empty in every kernel exercise.
FILLS = {"zero_", "fill_", "zeros", "ones", "full", "zeros_like", "ones_like", "full_like", "new_zeros",
         "new_ones", "new_full"}
# ATen's names, as a learner knows the op
_OP_NAMES = {"_to_copy": ".to() (a converting copy)", "copy_": "copy_ (a copy)", "clone": "clone (a copy)",
             "_softmax": "softmax", "_log_softmax": "log_softmax", "mm": "mm (a matmul)",
             "bmm": "bmm (a batched matmul)", "addmm": "addmm (a matmul)"}
_COPY_NAMES = {"clone": ".contiguous() or .clone()", "_to_copy": ".to() or .float()", "copy_": "copy_"}


def _small_case(cases, strided, at_least=0):
    """The smallest case (the cheapest to run once more); if `strided`, the smallest that passes a
    non-contiguous tensor (where a copy of an input shows), if there is one; with `at_least`, the
    smallest of at least that many input elements, or else the largest."""
    cases = [case for case in cases if case.build is None]   # not a large case built in its turn
    views = [case for case in cases if _strided(case)] if strided else []
    size = lambda c: sum(t.numel() for t in _tensors((c.args, c.kwargs)))  # noqa: E731
    large = [case for case in views or cases if size(case) >= at_least]
    return min(large, key=size) if large else max(views or cases, key=size, default=None)


def _computed_beside(ex, fn, cases):
    """None if `fn`, run once more on a small case, asked PyTorch only for allocations, views, metadata
    and what the exercise allows; else which line of the learner's code ran which op on the data."""
    case = _small_case(cases, strided=not ex.copies_inputs)
    if case is None:
        return None
    watch = EagerWork(inputs=list(_tensors((case.args, case.kwargs))))
    what = "your function"
    try:
        with time_limit(ex.timeout_s, what), interpreter.quiet(), watch:
            ex.run(fn, *case.args, **case.kwargs)
            wait_for_gpu(ex.timeout_s, what)
    except Exception as e:  # noqa: BLE001  (the learner's code, run once more: say what it raised)
        return f"run once more on case '{case.label}', {_explain_exception(e, case)}"
    allowed = FILLS | ex.torch_ops
    lines, computed = [], False
    for where, ops in watch.found.items():
        ops = [op for op in ops if op.name not in allowed and not (op.copies_input and ex.copies_inputs)]
        work = list(dict.fromkeys(_OP_NAMES.get(op.name, op.name) for op in ops if not op.copies_input))
        copies = list(dict.fromkeys(_COPY_NAMES[op.name] for op in ops if op.copies_input))
        if work:
            lines.append(f"  at {source_line(where)}\n    ran PyTorch's {', '.join(work)} on the data")
        elif copies:
            lines.append(f"  at {source_line(where)}\n    PyTorch copied an input ({', '.join(copies)})")
        computed = computed or bool(work)
    if not lines:
        return None
    more = [f"  ... and {len(lines) - 3} more line(s)"] if len(lines) > 3 else []
    may = "allocate outputs (torch.empty), take views"
    if ex.copies_inputs:
        may += ", make its inputs contiguous"
    if ex.torch_ops:
        may += f", run the PyTorch ops the lesson allows here ({', '.join(sorted(ex.torch_ops))})"
    if computed:
        head, why = "PyTorch computed beside your kernel:", "This exercise asks your kernel to do that work"
    else:
        head = "PyTorch copied an input beside your kernel:"
        why = ("This exercise's kernel reads its inputs as they are, through their strides (a copy is one "
               "more pass over memory)")
    return "\n".join([head, *lines[:3], *more, f"{why}: the Python function around it should only {may} "
                                                  f"and launch."])


def _stored_too_little(ex, fn, cases):
    """None if `fn`'s kernels, run once more on a small case in the interpreter (which counts every
    store; on a GPU, record() interprets them too), stored at least half as many bytes as `fn` returned;
    else why not. A result computed where neither meter looks (NumPy, plain Python) and handed back
    beside a kernel that does little else passes every comparison. The case: the smallest with at least
    4,096 input elements (in the smallest of all, a stray scratch store can outweigh the result), or the
    largest there is. On a GPU, a kernel the interpreter cannot run (libdevice, inline PTX) is not
    measured: it already passed every case compiled."""
    case = _small_case(cases, strided=False, at_least=4096)
    if case is None:
        return None
    what = "your function"
    try:
        with time_limit(ex.timeout_s, what), interpreter.quiet(), interpreter.record() as rec:
            out = ex.run(fn, *case.args, **case.kwargs)
    except Exception as e:  # noqa: BLE001  (the learner's code, run once more: say what it raised)
        return None if ON_GPU else f"run once more on case '{case.label}', {_explain_exception(e, case)}"
    held = {}   # storage -> the bytes of it the outputs span (outputs may share one, or view an input)
    for t in _tensors(out):
        storage = t.untyped_storage()
        spans = min(t.numel() * t.element_size(), storage.nbytes())
        held[storage.data_ptr()] = max(held.get(storage.data_ptr(), 0), spans)
    returned, stored = sum(held.values()), sum(launch.bytes_stored for launch in rec.launches)
    if stored >= returned / 2:
        return None
    return (f"run once more on case '{case.label}', your kernels stored {stored:,} bytes in all, and your "
            f"function returned {returned:,}: most of the result was not written by a kernel. This "
            f"exercise asks your kernel to compute it and store it; values computed in NumPy or plain "
            f"Python and handed back pass the comparison, but no kernel did the work.")


@contextlib.contextmanager
def _built(case):
    """The case itself, or for a case built when its turn comes (Case.build), the case built while this
    process holds the machine's large-case lock (two checks never hold such cases at once, whichever
    processes run them), freed with the GPU memory PyTorch kept for it once the block ends."""
    if case.build is None:
        yield case
        return
    import fcntl  # POSIX: here only, where a GPU runs the check

    with open(_LARGE_CASE_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        built = None
        try:
            torch.cuda.empty_cache()   # what the earlier cases left cached: the GPU's room is measured next
            built = case.build()
            if built is None:
                print(f"· case '{case.label}' not run: the GPU has too little free memory for it now.")
            yield built
        finally:
            if built is not None:  # the loop still holds the case: let go of its tensors
                built.args, built.kwargs, built.reference_args, built.part = (), {}, None, None
            with contextlib.suppress(RuntimeError):  # a context a crash broke has nothing to free
                torch.cuda.empty_cache()
            fcntl.flock(lock, fcntl.LOCK_UN)


# One lock per GPU: the first of CUDA_VISIBLE_DEVICES is the one a process uses (the test suite spreads
# its workers over a host's GPUs that way).
_GPU = "".join(c for c in os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] if c.isalnum())
_LARGE_CASE_LOCK = pathlib.Path(tempfile.gettempdir()) / f"course-large-case-gpu{_GPU}.lock"


def _run_case(ex, fn, case, tol_for):
    """(problem or None, whether anything was written) for one case."""
    expected, form = _expected(ex, case)
    before = _clone(case.args) if case.guard else tuple(_fingerprint(a) for a in case.args)
    guarded = [_with_halo(a) if case.guard else (a, None) for a in case.args]
    args = tuple(a for a, _ in guarded)
    what = "your function"
    launches, reorders = interpreter.launch_count(), interpreter.reorder_count()
    try:
        with time_limit(ex.timeout_s, what), poisoned_allocations() as allocations, interpreter.quiet():
            out = ex.run(fn, *args, **case.kwargs)
            wait_for_gpu(ex.timeout_s, what)
    except NotImplementedError as e:
        raise NotDone(str(e) or "The function still raises NotImplementedError.") from None
    except KernelTimeout as e:
        raise KernelTimeout(f"on case '{case.label}': {e}") from None
    except NotDone:
        raise
    except Exception as e:  # noqa: BLE001  (whatever the learner's code raised, said in one place)
        timeout = _find_cause(e, KernelTimeout)  # raised inside a kernel, wrapped by the interpreter
        if timeout is not None:
            raise KernelTimeout(f"on case '{case.label}': {timeout}") from None
        if _gpu_crash(e):  # nothing more can run on this GPU context
            raise GPUCrashed("\n".join(filter(None, (_explain_exception(e), case.hint)))) from None
        return "\n".join(filter(None, (_explain_exception(e, case), case.hint))), True
    launched = interpreter.launch_count() - launches
    if out is None:
        if launched == 0:
            raise NotDone("Your function returned None: it should return its result (is it still the stub?).")
        return "your function launched a kernel but returned None: `return` the output.", True
    if ex.kernel and launched == 0:
        return ("no Triton kernel ran: this exercise asks for a kernel (`my_kernel[grid](...)`), "
                "not PyTorch operations."), True
    stray = [g.problem() for g in allocations]
    stray += [_halo_problem(i, halo) for i, (_, halo) in enumerate(guarded) if halo]
    stray = next((p for p in stray if p), None)
    aliased = None if ex.may_alias_input else _aliased(out, args)
    compared = out if case.part is None else case.part(out)
    if ex.explain is not None:
        problem = ex.explain(compared, expected)
    else:
        problem = compare(compared, expected, tol_for, form=form, nan_hint=ex.nan_hint, names=ex.outputs)
    if not problem and ex.contiguous_output:
        problem = _not_contiguous(out, ex.contiguous_output)
    nothing_written = bool(problem) and "none of its" in problem and not (stray or aliased)
    problem = stray or aliased or problem or _changed_inputs(before, args, fingerprints=not case.guard)
    if problem and interpreter.reorder_count() > reorders:
        problem = f"{problem}\n{REORDER_HINT}"
    if problem and case.hint:
        problem = f"{problem}\n{case.hint}"
    return problem, not nothing_written


REORDER_HINT = ("Your kernel reshaped a tile with can_reorder=True (tl.view does the same): that lets the "
                "compiler put its elements in any order, and on a GPU it does. The interpreter reverses them "
                "to show it. Where the order matters, use tl.reshape(x, shape), which keeps it.")
