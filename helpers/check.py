"""`check(name, fn)`: the one grading call of the course.

For each case of the exercise (fresh random inputs, awkward shapes, strided
views) it

1. runs the PyTorch reference on the inputs upcast to float64;
2. runs your function with every fresh allocation (`torch.empty`,
   `torch.empty_like`, ...) filled with a poison value, under a time limit;
3. compares: shape, dtype, elements never written, NaNs, then values within a
   tolerance set by the output dtype;
4. stops at the first failing case with a message that says what went wrong.

The result (pass, fail or not done) is appended to a small results file that
`make grade` and `make progress` read.
"""

import contextlib
import math
import signal
import threading
import time

import torch

from helpers import exercises, records
from helpers.device import DEVICE, ON_GPU
from helpers.interpreter import OutOfBounds


class CheckFailed(AssertionError):
    """Your function ran but did not compute what the exercise asks."""

    def _render_traceback_(self):
        # Jupyter shows this instead of a traceback: the message is the whole story.
        return [f"{type(self).__name__}: {self}"]


class NotDone(CheckFailed):
    """The exercise is still the stub it shipped as."""


class KernelTimeout(CheckFailed):
    """Your function did not finish within the exercise's time limit."""


# (atol, rtol) by output dtype, against a float64 reference.
# float16 has a 2**-11 unit of rounding and bfloat16 2**-8: the tolerances
# allow about two units in the last place, plus the reference's own rounding.
TOLERANCES = {
    torch.float64: (1e-9, 1e-9),
    torch.float32: (1e-5, 1e-5),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (8e-3, 8e-3),
}

# Poison written into every fresh allocation: a NaN with a payload of its own,
# so "never written" (these exact bits) is told apart from "computed a NaN".
_POISON_BITS = {
    torch.float64: (torch.int64, 0x7FF8_0000_DEAD_BEEF),
    torch.float32: (torch.int32, 0x7FC0_DEAD),
    torch.float16: (torch.int16, 0x7E5A),
    torch.bfloat16: (torch.int16, 0x7FDA),
}
_POISON_INT = -0x2152411  # for integer outputs


def _poison(t):
    if t.dtype in _POISON_BITS:
        int_dtype, bits = _POISON_BITS[t.dtype]
        t.view(int_dtype).fill_(bits)
    elif t.dtype.is_floating_point:
        t.fill_(float("nan"))
    elif t.dtype != torch.bool and not t.dtype.is_complex:
        t.fill_(_POISON_INT)
    return t


def unwritten(t):
    """A bool mask of the elements of `t` that still hold the poison."""
    if t.dtype in _POISON_BITS:
        int_dtype, bits = _POISON_BITS[t.dtype]
        return t.view(int_dtype) == bits
    if t.dtype.is_floating_point or t.dtype == torch.bool or t.dtype.is_complex:
        return torch.zeros_like(t, dtype=torch.bool)
    return t == _POISON_INT


@contextlib.contextmanager
def poisoned_allocations():
    """Inside the block, fresh tensors from torch.empty* are filled with poison, not garbage."""
    originals = {name: getattr(torch, name) for name in ("empty", "empty_like", "empty_strided")}
    new_empty = torch.Tensor.new_empty

    def wrap(make):
        def poisoned(*args, **kwargs):
            return _poison(make(*args, **kwargs))
        return poisoned

    for name, make in originals.items():
        setattr(torch, name, wrap(make))
    torch.Tensor.new_empty = wrap(new_empty)
    try:
        yield
    finally:
        for name, make in originals.items():
            setattr(torch, name, make)
        torch.Tensor.new_empty = new_empty


@contextlib.contextmanager
def time_limit(seconds, what):
    """Stop the block after `seconds` with KernelTimeout (main thread, Unix; else no limit)."""
    usable = hasattr(signal, "SIGALRM") and threading.current_thread() is threading.main_thread()
    if not usable:
        yield
        return

    def on_alarm(signum, frame):
        raise KernelTimeout(f"{what} was still running after {seconds:g} s, so the check stopped it. "
                            f"Look for a loop whose bound never moves (a `while` or a `range` "
                            f"over a pointer instead of a count).")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def wait_for_gpu(seconds, what):
    """Wait for queued GPU work without blocking forever on a kernel that never ends."""
    if not ON_GPU:
        return
    done = torch.cuda.Event()
    done.record()
    deadline = time.monotonic() + seconds
    while not done.query():
        if time.monotonic() > deadline:
            raise KernelTimeout(f"{what}: the GPU kernel had not finished after {seconds:g} s. "
                                f"It is probably looping forever; restart the Python kernel "
                                f"to free the GPU, then fix the loop bound.")
        time.sleep(0.001)


# ---------------------------------------------------------------- comparing


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


def _fmt_index(flat, shape):
    idx = []
    for size in reversed(shape):
        idx.append(flat % size)
        flat //= size
    return tuple(reversed(idx)) if len(idx) != 1 else idx[0]


def _first(mask, shape, k=5):
    flat = torch.nonzero(mask.reshape(-1)).reshape(-1)[:k].tolist()
    return [_fmt_index(i, tuple(shape)) for i in flat]


def compare_tensors(out, ref, tol, where="output"):
    """None if `out` matches `ref` within (atol, rtol), else a short explanation."""
    if not isinstance(out, torch.Tensor):
        return f"{where} should be a torch.Tensor, got {type(out).__name__}"
    if tuple(out.shape) != tuple(ref.shape):
        return f"{where} has shape {tuple(out.shape)}, expected {tuple(ref.shape)}"
    if out.device.type != DEVICE.type and ref.device.type == DEVICE.type:
        return f"{where} is on {out.device}, expected {DEVICE}"
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
    nan_got, nan_want = torch.isnan(got) if got.is_floating_point() else None, None
    if got.is_floating_point():
        nan_want = torch.isnan(want)
        wrong_nan = nan_got & ~nan_want
        if wrong_nan.any():
            return (f"{where}: {int(wrong_nan.sum())} NaN(s) where the reference is a number, first at "
                    f"{_first(wrong_nan, out.shape)}: an overflow, exp of a large number, 0/0, "
                    f"or a masked load without `other=`?")
        if (nan_want & ~nan_got).any():
            return f"{where}: the reference has NaN at {_first(nan_want & ~nan_got, out.shape)}, you do not"
    if out.dtype != ref.dtype and not (out.is_floating_point() and ref.dtype == torch.float64):
        return f"{where} has dtype {out.dtype}, expected {ref.dtype}"
    if not got.is_floating_point():
        bad = got != want
        if bad.any():
            i = _first(bad, out.shape)
            return f"{where}: {int(bad.sum())} of {n} values differ, first at {i}"
        return None
    atol, rtol = tol
    both_nan = nan_got & nan_want
    same_inf = torch.isinf(want) & (got == want)
    err = (got - want).abs().masked_fill(both_nan | same_inf, 0.0)
    bad = err > atol + rtol * want.abs().masked_fill(both_nan | same_inf, 0.0)
    if not bad.any():
        return None
    worst = int(torch.argmax(err.masked_fill(torch.isnan(err), math.inf)).item())
    wi = _fmt_index(worst, tuple(out.shape))
    lines = [f"{where}: {int(bad.sum())} of {n} elements are off by more than atol={atol:g} + "
             f"rtol={rtol:g}*|expected| (the tolerance for {out.dtype}).",
             f"  largest error {err.reshape(-1)[worst].item():.4g} at {wi}: got "
             f"{got.reshape(-1)[worst].item():.6g}, expected {want.reshape(-1)[worst].item():.6g}"]
    for i in (_first(bad, out.shape, k=3) if int(bad.sum()) > 1 else []):
        flat = i if isinstance(i, int) else _flat(i, out.shape)
        lines.append(f"  at {i}: got {got.reshape(-1)[flat].item():.6g}, "
                     f"expected {want.reshape(-1)[flat].item():.6g}")
    return "\n".join(lines)


def _flat(index, shape):
    flat = 0
    for i, size in zip(index, shape):
        flat = flat * size + i
    return flat


def compare(out, ref, tol_for, where="output"):
    """Compare outputs of any structure: tensors, tuples/lists of them, numbers, dicts."""
    if isinstance(ref, torch.Tensor):
        dtype = out.dtype if isinstance(out, torch.Tensor) else ref.dtype
        return compare_tensors(out, ref, tol_for(dtype), where)
    if isinstance(ref, (tuple, list)):
        if not isinstance(out, (tuple, list)) or len(out) != len(ref):
            return f"{where} should be a sequence of {len(ref)} values, got {_short(out)}"
        for i, (o, r) in enumerate(zip(out, ref)):
            problem = compare(o, r, tol_for, f"{where}[{i}]")
            if problem:
                return problem
        return None
    if isinstance(ref, dict):
        if not isinstance(out, dict) or set(out) != set(ref):
            return f"{where} should be a dict with keys {sorted(ref)}, got {_short(out)}"
        for key in ref:
            problem = compare(out[key], ref[key], tol_for, f"{where}[{key!r}]")
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


def _changed_inputs(before, after, names="input"):
    for i, (b, a) in enumerate(zip(before, after)):
        if isinstance(b, torch.Tensor) and not torch.equal(b.nan_to_num(), a.detach().nan_to_num()):
            return f"your function changed its {names} #{i} (arguments are inputs: write only to the output)"
    return None


def _find_cause(exc, kind):
    while exc is not None:
        if isinstance(exc, kind):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


# ---------------------------------------------------------------- check


def check(name, fn):
    """Grade `fn` against exercise `name`; print one line on success, raise on failure."""
    ex = exercises.get(name)
    status, message = "fail", ""
    try:
        n_cases = _run_cases(ex, fn)
        status = "pass"
        message = f"{n_cases} cases"
    except NotDone as e:
        status, message = "not done", str(e)
        raise NotDone(f"{name}: not done yet. {e}") from None
    except CheckFailed as e:
        message = str(e)
        raise CheckFailed(message) from None
    except Exception as e:
        known = _find_cause(e, (OutOfBounds, CheckFailed))  # the interpreter wraps what a kernel raises
        if known is not None:
            message = str(known)
            kind = type(known) if isinstance(known, CheckFailed) else CheckFailed
            raise kind(f"{name}: {known}") from None
        message = f"{type(e).__name__}: {e}"
        raise
    finally:
        records.append(ex.lesson, ex.name, status, " ".join(message.splitlines()[:2]))
    print(f"✓ {name}: all {n_cases} cases match the reference ({DEVICE.type}).")


def _run_cases(ex, fn):
    if fn is None:
        raise NotDone("Pass your function to check(), not the result of calling it.")
    cases = ex.cases()
    first_failure, wrote_something = None, False
    tol_for = lambda dtype: ex.tol.get(dtype, TOLERANCES.get(dtype, (0.0, 0.0)))  # noqa: E731
    for i, case in enumerate(cases):
        ref_args = _upcast(case.args) if ex.reference_in_float64 else case.args
        ref_kwargs = _upcast(case.kwargs) if ex.reference_in_float64 else case.kwargs
        expected = ex.run(ex.reference, *ref_args, **ref_kwargs)
        before = _clone(case.args)
        what = f"{ex.name} on case '{case.label}'"
        try:
            with time_limit(ex.timeout_s, what), poisoned_allocations():
                out = ex.run(fn, *case.args, **case.kwargs)
                wait_for_gpu(ex.timeout_s, what)
        except NotImplementedError as e:
            raise NotDone(str(e) or "The function still raises NotImplementedError.") from None
        if out is None:
            if i == 0:
                raise NotDone("Your function returned None: it should return its result "
                              "(is it still the stub?).")
            raise CheckFailed(f"{what}: your function returned None; return the output.")
        problem = compare(out, expected, tol_for) or _changed_inputs(before, case.args)
        if problem and first_failure is None:
            first_failure = f"✗ {ex.name} failed on case '{case.label}':\n{problem}"
        wrote_something = wrote_something or not (problem and "none of its" in problem)
        if first_failure and wrote_something:
            raise CheckFailed(first_failure)
    if not wrote_something:
        raise NotDone("Nothing was written to the output in any case: the kernel body looks untouched.")
    return len(cases)
