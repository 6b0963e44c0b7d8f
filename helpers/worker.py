"""On a GPU, `check()` runs your function in a worker process, so that a crashing kernel cannot take
your notebook's GPU session with it.

A kernel that reads or writes far outside its tensors, or traps, leaves the CUDA context of the
process that ran it unusable: every later CUDA call in that process fails, blaming whatever runs
next. So the cases of an exercise run in a child process that owns its own CUDA context. Your
function is sent to it by value (cloudpickle: a function defined in a notebook cell travels with the
kernels and globals it uses); the worker runs the exercise's cases exactly as `check()` does in
process and sends back the result. The notebook's own process never sees a crash.

On a GPU a check that fails retires its worker, whatever the failure (an exercise not done yet
aside): a wrong kernel may have written far outside its tensors without stopping (into another
tensor, or anything else the process keeps on the GPU), and what it damaged could break a later check
of right code. A new worker starts at once, while you read the message.

The first check of a session pays the worker's start (importing torch and Triton, a CUDA context: a
few seconds); later checks reuse it. Your `print`s inside the function still reach the notebook; the
compiler's own output on stderr does not. On the CPU (Triton's interpreter) nothing can break a CUDA
context, so checks run in process unless COURSE_ISOLATE=1 asks for the worker (the tests do).
"""

import importlib
import io
import linecache
import os
import pickle
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import types
from multiprocessing.connection import Connection

import cloudpickle

from helpers.device import ON_GPU

START_TIMEOUT_S = 120   # importing torch and Triton and making a CUDA context, on a slow machine
SLACK_S = 30            # beyond an exercise's own time limit, before the worker is stopped from outside


def isolating():
    """Whether check() uses the worker: on a GPU unless COURSE_ISOLATE=0; on the CPU only if =1."""
    choice = os.environ.get("COURSE_ISOLATE", "").strip()
    return os.name == "posix" and (choice == "1" or (ON_GPU and choice != "0"))


# ---------------------------------------------------------------- sending a learner's function


def _rebuild_kernel(fn, lines, options, names):
    """In the worker: @triton.jit again, with the cell's source where inspect.getsource looks for it and
    the globals its source names (Triton reads `tl` in `BLOCK: tl.constexpr` from them)."""
    import triton

    filename = fn.__code__.co_filename
    if lines and not linecache.getlines(filename):
        linecache.cache[filename] = (sum(map(len, lines)), None, lines, filename)  # None: never reloaded
    fn.__globals__.update(names)
    return triton.jit(fn, **options)


def _import_kernel(module, name):
    return getattr(importlib.import_module(module), name)


class _Pickler(cloudpickle.CloudPickler):
    """cloudpickle, plus Triton kernels: a @triton.jit object of an importable module is imported by
    name in the worker; one defined in a notebook cell is sent as its Python function (by value) and
    decorated again on arrival, without its compiled code."""

    def reducer_override(self, obj):
        fn = getattr(obj, "fn", None)
        if type(obj).__name__ not in ("JITFunction", "InterpretedFunction") or not callable(fn):
            return super().reducer_override(obj)
        module = sys.modules.get(fn.__module__)
        if fn.__module__ != "__main__" and getattr(module, "__file__", None) \
                and getattr(module, fn.__name__, None) is obj:
            return _import_kernel, (fn.__module__, fn.__name__)
        lines = linecache.getlines(fn.__code__.co_filename)
        named = set(re.findall(r"[A-Za-z_]\w*", "".join(lines))) - set(fn.__code__.co_names)
        names = {n: fn.__globals__[n] for n in named if n in fn.__globals__ and not n.startswith("__")
                 and fn.__globals__[n] is not obj and _sendable(fn.__globals__[n])}
        options = {k: getattr(obj, k) for k in ("debug", "noinline") if getattr(obj, k, None)}
        return _rebuild_kernel, (fn, lines, options, names)


def _sendable(value):
    """Whether a global a kernel's source names is worth sending: modules, kernels, plain constants."""
    return isinstance(value, (types.ModuleType, int, float, bool, str)) or hasattr(value, "fn") \
        or type(value).__module__.startswith("triton")


def _cells():
    """linecache's entries for the code of notebook cells (files that exist only there): a few kB."""
    return {name: entry for name, entry in list(linecache.cache.items())
            if len(entry) == 4 and entry[1] is None and not os.path.exists(name)}


def dumps(obj):
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buffer.getvalue()


# ---------------------------------------------------------------- the worker's side


class _ToParent(io.TextIOBase):
    """sys.stdout in the worker: what the learner's function prints goes back to the notebook."""

    def __init__(self, conn):
        self.conn = conn

    def writable(self):
        return True

    def write(self, text):
        if text:
            self.conn.send(("print", text))
        return len(text)


def main(fd):
    """The worker's loop: receive (exercise, function), run the exercise's cases, answer."""
    conn = Connection(fd)
    # The compiler writes diagnostics (and MLIR reproducers) to file descriptor 2: keep them here.
    noise = tempfile.TemporaryFile()
    os.dup2(noise.fileno(), 2)
    sys.stdout = _ToParent(conn)
    from helpers.check import CheckFailed, GPUCrashed, KernelTimeout, _run_cases

    try:
        conn.send(("ready",))
    except OSError:   # the notebook's process ended while this one started
        return
    while True:
        try:
            payload = conn.recv()
        except EOFError:
            return
        try:
            ex, fn, cells = pickle.loads(payload)
            linecache.cache.update(cells)
        except Exception:  # noqa: BLE001  (it refers to something this process cannot import)
            conn.send(("unsendable",))
            continue
        try:
            n = _run_cases(ex, fn, on_case=lambda label, hint="": conn.send(("case", label, hint)))
            conn.send(("done", n))
        except CheckFailed as e:
            conn.send(("raise", e))
            if isinstance(e, (GPUCrashed, KernelTimeout)) and ON_GPU:
                return  # the context is broken, or a kernel may still be running in it
        except BaseException:  # noqa: BLE001  (a harness bug: say it in the notebook, keep serving)
            conn.send(("bug", traceback.format_exc()))
        sys.stdout.flush()
        if ON_GPU:
            import torch
            torch.cuda.empty_cache()  # what this check's cases held goes back to the notebook's process


# ---------------------------------------------------------------- the notebook's side


class Worker:
    """A child Python that imports the course and waits for work on a socket (not multiprocessing's
    spawn, which would re-run the notebook's or script's main module in the child)."""

    def __init__(self):
        mine, theirs = socket.socketpair()
        self.process = subprocess.Popen(
            [sys.executable, "-c", f"from helpers.worker import main; main({theirs.fileno()})"],
            pass_fds=[theirs.fileno()], env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
            stdin=subprocess.DEVNULL)
        theirs.close()
        self.conn = Connection(mine.detach())
        self.ready = False

    def wait_until_ready(self):
        if not self.ready:
            if not self.conn.poll(START_TIMEOUT_S):
                self.stop()
                raise RuntimeError("the check's worker process did not start: set COURSE_ISOLATE=0 to check "
                                   "in the notebook's own process.")
            self.conn.recv()
            self.ready = True

    def alive(self):
        return self.process.poll() is None

    def ended(self):
        """How the process ended: 'exited with status 3', 'was killed by SIGSEGV'."""
        try:
            code = self.process.wait(5)
        except subprocess.TimeoutExpired:
            return "stopped answering"
        return f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with status {code}"

    def stop(self):
        self.process.kill()
        self.process.wait(5)
        self.conn.close()


_worker = None


def _get_worker():
    global _worker
    if _worker is None or not _worker.alive():
        _worker = Worker()
    _worker.wait_until_ready()
    return _worker


def _retire():
    global _worker
    if _worker is not None:
        _worker.stop()
        _worker = None


def _replace():
    """Retire the worker and start the next one now (it gets ready while the message is read)."""
    global _worker
    _retire()
    _worker = Worker()


def run_cases(ex, fn):
    """check()'s `_run_cases(ex, fn)`, run in the worker: the number of cases, or the same exception."""
    from helpers.check import CheckFailed, GPUCrashed, KernelTimeout, NotDone, _run_cases

    try:
        # the exercise too (its cases, reference and limits as they are here), and the source of the
        # notebook's cells, so that a message can quote the learner's line there too
        payload = dumps((ex, fn, _cells()))
    except Exception:  # noqa: BLE001  (something the function refers to cannot be copied: check here)
        return _run_cases(ex, fn)
    worker = _get_worker()
    worker.conn.send(payload)
    case, hint, deadline = None, "", time.monotonic() + START_TIMEOUT_S + ex.timeout_s
    while True:
        if not worker.conn.poll(max(0.0, deadline - time.monotonic())):
            _replace()
            where = f" on case '{case}'" if case else ""
            raise KernelTimeout(f"your function was still running{where} after {ex.timeout_s:g} s, and the "
                                f"check stopped the process it ran in (which also stops a GPU kernel "
                                f"that loops forever). Look for a loop whose bound never moves.")
        try:
            message = worker.conn.recv()
        except (EOFError, OSError):
            how = worker.ended()
            _replace()
            where = f"case '{case}'" if case else "the exercise's first case"
            hint = f"\n{hint}" if hint else ""
            raise GPUCrashed(f"failed on {where}: the process running your function {how}.{hint}\n"
                             f"{_CRASH_ADVICE}") from None
        kind = message[0]
        if kind == "unsendable":
            return _run_cases(ex, fn)
        if kind == "case":
            case, hint, deadline = message[1], message[2], time.monotonic() + ex.timeout_s + SLACK_S
        elif kind == "print":
            sys.stdout.write(message[1])
        elif kind == "done":
            return message[1]
        elif kind == "raise":
            error = message[1]
            # on a GPU the next check runs in a process this kernel never touched (a stub did nothing)
            if ON_GPU and not isinstance(error, NotDone):
                _replace()
                if isinstance(error, GPUCrashed):
                    raise GPUCrashed(f"{error}\n{_CRASH_ADVICE}") from None
            raise error
        elif kind == "bug":
            raise CheckFailed(f"the check itself failed (a bug in the course, not in your code):\n"
                              f"{message[1]}")


_CRASH_ADVICE = ("It ran in the check's own process, which has been replaced: your notebook's GPU session is "
                 "unharmed, and the next check runs normally.")

# What CUDA says when a kernel breaks its context, and what that usually means in a Triton kernel.
CRASHES = {
    "illegal memory access": "your kernel read or wrote memory far outside its tensors (CUDA: illegal memory "
                             "access; the guard bands around each tensor catch only near misses). Look at "
                             "the offsets of each tl.load and tl.store: a stride of the wrong tensor or "
                             "dimension, an offset that grows with the wrong program id, or a mask that "
                             "does not cover the last block.",
    "illegal address": "illegal memory access",
    "misaligned address": "your kernel accessed memory at an address not aligned for the width it used "
                          "(CUDA: misaligned address): usually an offset into a tensor that is not a "
                          "multiple of the elements moved together, or a tensor descriptor over a view "
                          "whose start or strides are not 16-byte aligned.",
    "illegal instruction": "the GPU stopped your kernel on an instruction it could not execute (CUDA: "
                           "illegal instruction). In a Triton kernel this usually follows a tensor "
                           "descriptor used past what it describes (a block shape or offset that does not "
                           "match the descriptor, a tile loop that runs past the tensor), or a trap.",
    "device-side assert": "a tl.device_assert in your kernel failed (CUDA: device-side assert triggered): "
                          "the assertion's condition was false for some program.",
    "unspecified launch failure": "your kernel failed while running (CUDA: unspecified launch failure), "
                                  "most often for the reasons of an illegal memory access: look at the "
                                  "offsets and masks of each tl.load and tl.store.",
}


def crash_kind(text):
    """The CRASHES key that a CUDA error message names, or None."""
    return next((kind for kind in CRASHES if kind in text), None)


def crash_text(text):
    """What a CUDA error that broke the context means, and what to do now."""
    kind = crash_kind(text)
    meaning = CRASHES[CRASHES[kind]] if CRASHES[kind] in CRASHES else CRASHES[kind]
    if isolating():
        return meaning   # run_cases adds that the worker was replaced
    return (f"{meaning} The GPU context of this Python process is now unusable: restart the notebook's "
            f"kernel before anything else. With COURSE_DEVICE=cpu the interpreter names the exact load or "
            f"store.")


BROKEN_CONTEXT = ("\nThis CUDA error broke the GPU context of the notebook's Python process: every later GPU "
                  "call here will fail too. Restart the kernel (Kernel > Restart Kernel), run the lesson's "
                  "first cell, then the cells you need. To find the mistake safely, run the exercise's "
                  "check(): it runs your kernel in a process of its own and names the case that crashes.")


def _with_note(shell, etype, value, tb, tb_offset=None):
    """IPython's traceback of a RuntimeError as usual, then what to do when it is a CUDA context crash.
    (IPython ignores what a custom handler returns: the handler shows the traceback itself.)"""
    shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
    if crash_kind(str(value)):
        print(BROKEN_CONTEXT)


def note_broken_context():
    """In a notebook on a GPU, a cell that breaks the CUDA context (a timing or meter cell running a
    crashing kernel outside check()) ends with what to do next."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if ON_GPU and shell is not None and hasattr(shell, "set_custom_exc"):
        shell.set_custom_exc((RuntimeError,), _with_note)
