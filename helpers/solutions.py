"""Loading `solutions/NN_slug.py` (a name that starts with digits cannot be imported plainly), and
showing a solution's source in a lesson."""

import importlib.util
import inspect
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def solution_path(lesson):
    """solutions/NN_*.py for lesson "NN"."""
    found = sorted((ROOT / "solutions").glob(f"{lesson}_*.py"))
    if len(found) != 1:
        raise FileNotFoundError(f"expected one solutions/{lesson}_*.py, found {len(found)}")
    return found[0]


def load_solution(lesson):
    """The solutions module of lesson "NN", imported once."""
    return load_module(solution_path(lesson))


def load_module(path):
    """A module of solutions/ by its path (solutions/gluon_attention.py beside lesson 10's), imported once."""
    path = pathlib.Path(path)
    name = "solutions_" + path.stem
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def lessons():
    """["01", "02", ...]: the lessons that have a solutions module."""
    return sorted(p.name[:2] for p in (ROOT / "solutions").glob("[0-9][0-9]_*.py"))


def show(fn):
    """Print the source of a function or of a Triton kernel (autotuned or not)."""
    while hasattr(fn, "fn"):              # an autotuner wraps a JITFunction, which wraps the function
        fn = fn.fn
    print(inspect.getsource(fn))
