"""Every graded exercise of the course, one module per lesson.

An `Exercise` is the spec a learner's code is held against: a PyTorch
reference, and a function that draws fresh random cases (shapes chosen to be
awkward on purpose). `helpers.check(name, fn)` looks the exercise up here.
"""

import contextlib
import dataclasses
import importlib
import os
import pkgutil
import time
from typing import Any, Callable, Optional, Union


@dataclasses.dataclass
class Case:
    """One set of inputs, with a label that says why it is there."""

    label: str
    args: tuple
    kwargs: dict = dataclasses.field(default_factory=dict)
    # Said after any failure on this case: what the case is there to catch (e.g. int32 offsets).
    hint: str = ""
    # A case too large to compute the reference on whole (more than 2**31 elements): the reference runs
    # on `reference_args` instead, and is compared with `part(output)`.
    reference_args: Optional[tuple] = None
    part: Optional[Callable[[Any], Any]] = None
    # False for such a case: no guard-band copy of each input, and its inputs are compared before and
    # after by a float64 sum each instead of a whole copy (the check's own memory stays near the case's).
    guard: bool = True
    # A case built only when its turn comes, under a lock shared by every process on the machine, and
    # freed right after (a case of several GB): build() -> Case, or None where the GPU has no room.
    build: Optional[Callable[[], Optional["Case"]]] = None


def later(label, build):
    """A case too large to keep beside the others, built by `build()` when its turn comes (Case.build)."""
    return Case(label, (), build=build)


# How long a large case waits for the GPU's memory before the check goes on without it: none in a
# notebook (what it holds stays held); .ci/gpu-grading.sh waits, while the test processes sharing a GPU
# finish what they hold.
LARGE_CASE_WAIT_S = float(os.environ.get("COURSE_LARGE_CASE_WAIT_S", "0"))


def room_for(nbytes):
    """Whether the GPU has `nbytes` free, with a margin: a case past 2**31 elements is built only then
    (on a smaller GPU, or one whose memory the notebook holds, the check goes on without it)."""
    import torch

    if not torch.cuda.is_available():
        return True  # a CPU test of such a case, built at a small size
    deadline = time.monotonic() + LARGE_CASE_WAIT_S
    while torch.cuda.mem_get_info()[0] <= 1.25 * nbytes:
        if time.monotonic() >= deadline:
            return False
        time.sleep(1.0)
    return True


@contextlib.contextmanager
def tuned_over(kernel, configs):
    """While the block runs, `kernel` (a @triton.autotune object) chooses among `configs` alone: its
    own list of configurations and the choices it has cached (a size it has seen keeps the choice it
    made) are set aside, and given back after."""
    saved, cache = kernel.configs, getattr(kernel, "cache", None)
    kernel.configs = configs
    if cache is not None:
        kernel.cache = {}
    try:
        yield
    finally:
        kernel.configs = saved
        if cache is not None:
            kernel.cache = cache


def kernel_beside(fn, name, arg_names):
    """The @triton.jit kernel `name` beside fn (in its globals, as a notebook cell's function finds it),
    if it takes the notebook's arguments `arg_names`; else None: a design of the learner's own, which a
    check cannot launch the notebook's way."""
    kernel = getattr(fn, "__globals__", {}).get(name)
    return kernel if list(getattr(kernel, "arg_names", ())) == arg_names else None


def rerun_with_config(fn, kernel_name, config, args, want, where, why, **compare):
    """None, or a message ending in `why`: fn(*args) rerun (rerun) with the autotuned kernel
    `kernel_name` beside it (in fn's globals, as a notebook cell's function finds it) given `config`
    alone for the call. Where fn has no such kernel (another design of the learner's own) there is
    nothing to rerun: None.

    On a GPU an autotuner may choose square blocks (BLOCK_M == BLOCK_N) for every case of a check,
    where a kernel that uses one where the other belongs still gets the values right: the checks run
    one more call this way, with blocks of unequal sizes."""
    kernel = getattr(fn, "__globals__", {}).get(kernel_name)
    if not hasattr(kernel, "configs"):
        return None
    return rerun(tuned_over(kernel, [config]), fn, args, want, where, why, **compare)


def rerun(setting, fn, args, want, where, why, names=("the output",), tol=1e-4, each_launch=None):
    """None, or a message ending in `why`: fn(*args) run in the interpreter inside `setting` (a context
    manager: the blocks the call is to use), against `want` (a tensor, or a tuple of them named by
    `names`). each_launch(launch, where), if given, may name a problem in a launch first. `where`
    describes the call ("run with ..., your kernel")."""
    from helpers import interpreter

    with setting, interpreter.record() as rec:
        try:
            got = fn(*args)
        except Exception as e:  # noqa: BLE001  (the learner's kernel: say what it raised)
            return f"{where} raised {type(e).__name__}: {str(e)[:200]}." + why
    for launch in rec.launches if each_launch else ():
        problem = each_launch(launch, where)
        if problem:
            return problem + why
    if isinstance(want, tuple):
        if not (isinstance(got, tuple) and len(got) == len(want)):
            return f"{where} returned {type(got).__name__}, not ({', '.join(names)})."
    else:
        got, want = (got,), (want,)
    for name, ours, ref in zip(names, got, want):
        wrong = wrong_values(ours, ref, where, name, tol)
        if wrong:
            return wrong + why
    return None


def wrong_values(got, want, where, name="the output", tol=1e-4):
    """None, or a message: `got` is not a tensor of `want`'s shape, or how many of its values differ
    from `want` (beyond tol, relative and absolute) and which is the first. For the interpreter's
    extra runs, whose float32 products are exact."""
    import torch

    if not isinstance(got, torch.Tensor) or got.shape != want.shape:
        return (f"{where} returned {type(got).__name__} {tuple(getattr(got, 'shape', ()))} as {name}, "
                f"not {tuple(want.shape)}.")
    wrong = ~torch.isclose(got.to(want.dtype), want, rtol=tol, atol=tol)
    if not wrong.any():
        return None
    first = tuple(int(i) for i in wrong.nonzero()[0])
    return (f"{where} got {int(wrong.sum()):,} of {name}'s {want.numel():,} values wrong, the first at "
            f"{list(first)} ({got[first].item():.4g}, not {want[first].item():.4g}).")


# Said after such a run finds a mix-up of the blocks.
UNEQUAL_BLOCKS_WHY = (" The autotuner may choose square blocks (BLOCK_M == BLOCK_N) for every other case, "
                      "and there a kernel that uses one where the other belongs gets the values right. "
                      "Check each use of the block sizes: ")


@dataclasses.dataclass
class Exercise:
    """The spec of one exercise. `check` reads every field; a new kind of check is a new field."""

    lesson: str                      # "01"
    name: str                        # "vector_add": the name given to check()
    title: str                       # a few words for the grade table
    reference: Callable              # the spec, in PyTorch
    cases: Callable[[], list]        # -> [Case]: fresh random inputs at every call
    # How to call the learner's function (or the reference) on a case's inputs.
    run: Callable[..., Any] = lambda fn, *args, **kwargs: fn(*args, **kwargs)
    # (atol, rtol) per expected output dtype where the default table is wrong for this
    # exercise; say why next to it.
    tol: dict = dataclasses.field(default_factory=dict)
    reference_in_float64: bool = True  # upcast floating inputs for the reference's values
    timeout_s: float = 120.0
    # The exercise asks for a Triton kernel: a case passes only if one was launched.
    kernel: bool = False
    # What the lesson teaches about structure, measured once all cases pass:
    # structure(fn) -> None, or a message saying what is missing (two reads, tile skipping, ...).
    structure: Optional[Callable[[Callable], Optional[str]]] = None
    # Compare an output with the expected one in the exercise's own words (instead of the
    # element-wise comparison): explain(out, expected) -> None, or a message that gives no answer away.
    explain: Optional[Callable[[Any, Any], Optional[str]]] = None
    # Added to a message about NaNs: the exercise's own rule (e.g. fully masked rows give 0).
    nan_hint: str = ""
    # What the lesson calls the outputs, where the function returns several: ("out", "lse") makes a
    # message say "lse (output[1])", not "output[1]".
    outputs: tuple = ()
    # The output may be (a view of) one of the inputs (an in-place exercise).
    may_alias_input: bool = False
    # The lesson asks for contiguous outputs: True, or why, in the lesson's words (what reads them next).
    contiguous_output: Union[bool, str] = False
    # What the Python function around a kernel (kernel=True) may ask PyTorch to do besides allocating,
    # taking views and reading metadata: once every case passes, check() runs it once more on the
    # smallest case and names any other op PyTorch ran on tensor data (the result computed beside a
    # kernel that only copies it). `copies_inputs`: it may copy its inputs as they are (.contiguous(),
    # .float()), as the lesson's own wrapper does; `torch_ops`: the ATen ops the lesson itself runs in
    # its wrapper (say why next to it); None: check() does not look (the exercise's structure check
    # does, in its own words).
    copies_inputs: bool = False
    torch_ops: Optional[frozenset] = frozenset()


_registry = {}


def all_exercises():
    """{name: Exercise} for every lesson, imported on first use."""
    if not _registry:
        for info in pkgutil.iter_modules(__path__):
            module = importlib.import_module(f"{__name__}.{info.name}")
            for ex in getattr(module, "EXERCISES", []):
                if ex.name in _registry:
                    raise ValueError(f"two exercises are named {ex.name!r}")
                _registry[ex.name] = ex
    return _registry


def get(name):
    try:
        return all_exercises()[name]
    except KeyError:
        known = ", ".join(sorted(all_exercises()))
        raise KeyError(f"no exercise is named {name!r}; the course has: {known}") from None


def by_lesson():
    """{lesson: [Exercise, ...]} in lesson and definition order."""
    out = {}
    for ex in all_exercises().values():
        out.setdefault(ex.lesson, []).append(ex)
    return dict(sorted(out.items()))
