"""The course's mutation suite: wrong answers every check must reject, other right ones it must accept.

One module per lesson (`lessonNN.py`) defines two lists:

* `WRONG`: `Wrong(exercise, why, fn)`: a plausible mistake, most often a one-line edit of the
  solution made with `edit(...)` (a missing mask, an ignored stride, a hard-coded scalar, a
  low-precision accumulator), or a pure-PyTorch answer where a kernel is asked for;
* `RIGHT`: `Right(exercise, why, fn)`: a different correct answer (other block sizes, another
  loop order), which the check must not reject.

A `Wrong(..., gpu_only=True)` is caught only by a case that exists on a GPU (int32 offsets, which
wrap past 2**31 elements): it is skipped on the CPU. A `Wrong(..., cpu_only=True)` is caught only by a
case that exists on the CPU, and is skipped on a GPU.

tests/test_mutants.py runs them all and requires at least four wrong and one right answer for
every exercise of the course.
"""

import atexit
import dataclasses
import hashlib
import importlib.util
import pathlib
import shutil
import sys
import tempfile
from typing import Callable

ROOT = pathlib.Path(__file__).resolve().parents[2]
_FOLDER = pathlib.Path(tempfile.mkdtemp(prefix="course-mutants-"))
atexit.register(shutil.rmtree, _FOLDER, ignore_errors=True)
# On a GPU check() runs the cases in a worker process (started with this process's sys.path), which
# imports a kernel's module by name: the mutants' modules must be importable there too (else the check
# runs here, where a crash breaks this process's CUDA context for good).
sys.path.append(str(_FOLDER))
_modules = {}


@dataclasses.dataclass
class Wrong:
    exercise: str
    why: str
    fn: Callable
    # Rejected only where the case that catches it exists: a GPU (a case past 2**31 elements), or the
    # CPU (a float32 product, which a GPU's tl.dot takes as TF32).
    gpu_only: bool = False
    cpu_only: bool = False


@dataclasses.dataclass
class Right:
    exercise: str
    why: str
    fn: Callable


def edit(lesson, name, *changes):
    """`name` from a copy of solutions/<lesson>_*.py with each (old, new) text replaced once.

    Every `old` must occur exactly once in the solution, so an edit cannot silently stop
    applying when the solution changes. The copy is a real file, because @triton.jit reads
    a kernel's source.
    """
    (source_path,) = ROOT.glob(f"solutions/{lesson}_*.py")
    source = source_path.read_text()
    for old, new in changes:
        count = source.count(old)
        assert count == 1, f"{source_path.name}: {old!r} occurs {count} times, expected once"
        source = source.replace(old, new)
    key = hashlib.sha1(source.encode()).hexdigest()[:12]
    if key not in _modules:
        path = _FOLDER / f"mutant_{lesson}_{key}.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        spec.loader.exec_module(module)
        _modules[key] = module
    return getattr(_modules[key], name)
