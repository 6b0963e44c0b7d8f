"""Lesson 01 exercises: a first kernel, and one with a scalar argument."""

import contextlib
import inspect
import math

import torch
import triton

from helpers import interpreter
from helpers.device import DEVICE, pick
from helpers.exercises import Case, Exercise, kernel_beside, rerun
from helpers.exercises.lesson02 import fused

ADD_ARGS = ["x_ptr", "y_ptr", "out_ptr", "n", "BLOCK"]
AXPY_ARGS = ["alpha", "x_ptr", "y_ptr", "out_ptr", "n", "BLOCK"]


def vectors(count):
    """Cases of `count` fresh random vectors each: awkward lengths, then a strided view.

    Every length is odd, so no power-of-two block divides it: the last program always has a ragged tail.
    """
    cases = [Case(f"n={n} ({why})", tuple(torch.randn(n, device=DEVICE) for _ in range(count)))
             for n, why in [(1, "a single element"),
                            (1001, "not a multiple of any block"),
                            (4097, "one element past a multiple of every block up to 4096"),
                            (pick(100_003, 10_000_019), "large and prime")]]
    cases.append(Case("n=1501, strided views (every other element of a longer vector)",
                      tuple(torch.randn(3002, device=DEVICE)[::2] for _ in range(count))))
    return cases


def add_reference(x, y):
    return x + y  # read 2n elements, write n


def axpy_reference(alpha, x, y):
    return alpha * x + y  # read 2n elements, write n


def _axpy_cases():
    """Each case gets a random alpha, the signs alternating: a hard-coded or dropped alpha fails. One case
    gives float16 vectors, whose result is float16 too: the learner writes this launcher, and an output
    allocated without the inputs' dtype (`torch.empty(n, device=...)`, or inputs made `.float()`) is
    float32 whatever comes in, which no float32 case can tell from a right one."""
    sign = 1.0 if torch.rand(()) < 0.5 else -1.0
    half = Case("n=1001 (float16 vectors: the output is float16 too)",
                tuple(torch.randn(1001, device=DEVICE, dtype=torch.float16) for _ in range(2)))
    cases = []
    for i, case in enumerate([*vectors(2), half]):
        alpha = round(sign * (-1) ** i * float(torch.empty(()).uniform_(0.25, 2.5)), 3)
        cases.append(Case(f"{case.label}, alpha={alpha}", (alpha, *case.args)))
    return cases


def _refuses_other_lengths(fn):
    """axpy refuses vectors of different lengths before its kernel runs (the exercise: check the shapes).
    In the interpreter, on a GPU too: only the interpreter stops a kernel reading past the end."""
    from helpers.check import _find_cause  # not at the top: helpers.check imports this package

    x, y = torch.randn(100, device=DEVICE), torch.randn(99, device=DEVICE)
    try:
        with interpreter.interpreted():
            fn(0.5, x, y)
    except Exception as e:
        if _find_cause(e, interpreter.OutOfBounds) is None:
            return None   # refused: what the exercise asks
        return ("given x of 100 values and y of 99, its kernel read past the end of y (the interpreter "
                "stopped it; a GPU would read whatever lies there). Check the shapes in the launcher "
                "first, with an assert and a message.")
    return ("given x of 100 values and y of 99 it returned a result. Check the shapes in the launcher "
            "first, with an assert and a message, and refuse vectors of different lengths.")


def _one_launch(fn):
    """axpy launches its kernel once, on enough programs and no more: a launch per piece pays the CPU's
    cost of a launch each time (the lesson measures it), however little the piece holds; a program
    that covers no element is launched for nothing, and a handful of huge programs leave most of the
    GPU's SMs idle (a program runs on one SM). n is a multiple of every block up to 2**17: the value
    cases' lengths are all odd, where a grid of n // BLOCK + 1 happens to be cdiv(n, BLOCK); here it is
    one program too many."""
    n = 2**17
    x, y = torch.randn(n, device=DEVICE), torch.randn(n, device=DEVICE)
    with interpreter.record(touches=True) as rec:
        fn(0.5, x, y)
    if len(rec.launches) != 1:
        return (f"for vectors of {n:,} values it made {len(rec.launches)} launches. Launch axpy_kernel once, "
                f"on cdiv(n, BLOCK) programs: every launch costs the CPU microseconds however few values it "
                f"covers (the lesson's section on launch overhead, below, measures it).")
    (launch,) = rec.launches
    programs = math.prod(launch.grid)
    busy = len({pid for pid, _name, _kind, offs in launch.touches if len(offs)})
    if busy < programs:
        extra = (f" ({n:,} is a multiple of your BLOCK: cdiv(n, BLOCK) is then exactly n // BLOCK, and "
                 f"n // BLOCK + 1 is one program too many.)" if programs - busy == 1 else "")
        return (f"for vectors of {n:,} values it launched {programs:,} programs, and {programs - busy:,} of "
                f"them touched no element: launch cdiv(n, BLOCK) programs, as many as it takes to cover "
                f"the vector with blocks of BLOCK values.{extra}")
    if programs < math.ceil(n / 16384):
        return (f"for vectors of {n:,} values it launched {programs} program(s). A program runs on one SM, "
                f"so a few huge blocks leave most of a GPU idle: use blocks of BLOCK = 1024 values, "
                f"cdiv(n, BLOCK) programs.")
    return None


def _nothing_beside(fn):
    """Nothing but the kernel touches memory: no copy made by PyTorch (y cloned into the output, then
    added into), each input loaded once, the output stored once (lesson 02's fusion check)."""
    x, y = torch.randn(5000, device=DEVICE), torch.randn(5000, device=DEVICE)
    return fused(fn, 0.5, x, y, elementwise=True)


def _any_block(fn, name, arg_names, alpha=()):
    """The kernel `name` beside fn (in its globals, as a notebook cell's function finds it) launched once
    more in the interpreter with BLOCK = 512, then 8192, on cdiv(n, BLOCK) programs and an output filled
    with NaN, n = 4097. Every case runs with the one BLOCK the launcher passes (1024 in the lesson's), so a
    kernel with that number written in place of BLOCK passes them all. Run with a smaller BLOCK, a kernel
    that steps from program to program by a larger number written in leaves gaps; run as one program of
    8192 lanes, one whose block holds fewer lanes leaves the end unwritten (hence the two runs). Where fn
    has no such kernel, or one of another signature (a design of the learner's own), there is nothing to
    run."""
    kernel = kernel_beside(fn, name, arg_names)
    if kernel is None or hasattr(kernel, "configs"):   # an autotuner picks BLOCK itself: none can be passed
        return None
    n = 4097
    x, y = torch.randn(n, device=DEVICE), torch.randn(n, device=DEVICE)
    want = (alpha[0] * x + y) if alpha else x + y
    why = (f" Every case ran with the one BLOCK its launcher passes, so a kernel with that number written "
           f"where BLOCK belongs passes them all, and breaks as soon as a launcher picks another block. Use "
           f"the BLOCK argument wherever {name} needs the block's size.")
    for block in (512, 8192):
        def launch(x, y, block=block):
            out = torch.full((n,), float("nan"), device=DEVICE)
            kernel[(triton.cdiv(n, block),)](*alpha, x, y, out, n, BLOCK=block)
            return out

        where = (f"launched once more with BLOCK = {block} (a grid of cdiv(n, {block}) programs, into an "
                 f"output filled with NaN) on vectors of {n:,} values, in the interpreter, your {name}")
        problem = rerun(contextlib.nullcontext(), launch, (x, y), want, where, why)
        if problem:
            return problem
    return None


def _alpha_by_value(fn):
    """axpy_kernel takes alpha as a plain argument, not a tl.constexpr. A constexpr is compiled into the
    kernel: every new alpha then compiles a kernel of its own (on a GPU, a large fraction of a second each,
    where a launch takes microseconds), though every value comes out right. Where fn has no axpy_kernel
    of the notebook's signature there is nothing to look at."""
    kernel = kernel_beside(fn, "axpy_kernel", AXPY_ARGS)
    if kernel is None:
        return None
    python = kernel
    while hasattr(python, "fn"):   # an autotuner holds a jitted function, which holds the Python one
        python = python.fn
    annotation = inspect.signature(python).parameters["alpha"].annotation   # a class, or its name as text
    if "constexpr" not in str(getattr(annotation, "__name__", annotation)):
        return None
    return ("axpy_kernel declares alpha a tl.constexpr. A constexpr is a compile-time constant: each new "
            "value of alpha compiles a kernel of its own, which on a GPU takes far longer than the launch "
            "itself (the check draws a new alpha for every case). Pass alpha as a plain argument: it "
            "arrives as a scalar, read when the kernel runs.")


EXERCISES = [
    Exercise("01", "vector_add", "vector add", add_reference, lambda: vectors(2), kernel=True,
             copies_inputs=True,  # the lesson's launcher makes x and y contiguous
             structure=lambda fn: _any_block(fn, "add_kernel", ADD_ARGS)),
    Exercise("01", "axpy", "alpha * x + y", axpy_reference, _axpy_cases, kernel=True,
             copies_inputs=True,  # the exercise says: make x and y contiguous
             # Triton's interpreter hands the kernel alpha as a Python float, and a float16 block times a
             # Python float stays float16 (a GPU multiplies in float32): alpha * x is rounded to float16
             # before y is added. Half a unit in the last place of a product up to 2.5 * 4 is 2**-8, plus
             # the sum's own rounding.
             tol={torch.float16: (8e-3, 1e-3)},
             structure=lambda fn: (_refuses_other_lengths(fn) or _one_launch(fn) or _nothing_beside(fn)
                                   or _alpha_by_value(fn)
                                   or _any_block(fn, "axpy_kernel", AXPY_ARGS, (-0.75,)))),
]
