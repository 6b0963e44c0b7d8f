"""A traffic meter that needs no GPU: count the kernels and bytes a function moves.

* `eager_traffic(fn, *args)` runs a PyTorch function and counts each ATen op it
  dispatches as one kernel, reading its tensor inputs and writing its outputs
  (views, which move no data, are not counted).
* `triton_traffic(fn, *args)` runs a function that launches Triton kernels
  through the interpreter and counts the bytes those kernels really load and
  store, lane by lane, masked-off lanes excluded.
* `largest_tensor()` watches a block and keeps the largest tensor any op made in it.
* `EagerWork()` watches a block and records, by the line of the learner's code that asked for it,
  every ATen op that touches tensor data (not a view, an allocation or metadata): what PyTorch
  computed beside a kernel.
* `show_programs(fn, *args, arg=...)` draws which elements of one argument each
  program of the (last) launch touched.

Both counters report the bytes a kernel asks memory for, not what HBM moves on
a GPU. Caches can make real traffic lower (a small vector read by every program
is fetched once). Memory also moves whole 32-byte sectors, so a strided or
scattered access (a column of a row-major matrix, a gather) can make it higher:
up to a full sector for each element used. For contiguous loads and stores the
count is an upper bound on HBM traffic; for strided or scattered ones it may be
too low.
"""

import collections
import contextlib
import dataclasses
import pathlib
import sys

import numpy as np
import torch
import triton
from torch.utils._python_dispatch import TorchDispatchMode

from helpers import interpreter

# ops that allocate or relabel memory without reading or writing tensor data
NO_DATA_OPS = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "detach", "alias",
         "lift_fresh", "_local_scalar_dense", "set_", "resize_", "_unsafe_view"}
# ops that copy a tensor as it is (or converted to another dtype): no arithmetic on its values
COPY_OPS = {"clone", "_to_copy", "copy_"}


@dataclasses.dataclass
class Traffic:
    kernels: int = 0
    bytes_loaded: int = 0
    bytes_stored: int = 0
    ops: list = dataclasses.field(default_factory=list)       # eager: (op name, bytes)
    launches: list = dataclasses.field(default_factory=list)  # triton: interpreter.Launch

    @property
    def bytes(self):
        return self.bytes_loaded + self.bytes_stored

    def __str__(self):
        return (f"{self.kernels} kernel(s), {_fmt(self.bytes)} moved "
                f"({_fmt(self.bytes_loaded)} read, {_fmt(self.bytes_stored)} written)")


def _fmt(n):
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000


def _distinct_bytes(t):
    """Bytes a tensor view really covers: a broadcast (stride 0) dimension is read once."""
    if t.numel() == 0:
        return 0
    distinct = 1
    for size, stride in zip(t.shape, t.stride()):
        if stride != 0:
            distinct *= size
    return distinct * t.element_size()


def _tensors(tree):
    if isinstance(tree, torch.Tensor):
        yield tree
    elif isinstance(tree, (list, tuple)):
        for item in tree:
            yield from _tensors(item)
    elif isinstance(tree, dict):
        for item in tree.values():
            yield from _tensors(item)


class Largest:
    """The largest tensor any ATen op produced inside a `largest_tensor()` block."""

    def __init__(self):
        self.numel, self.op, self.shape = 0, None, None

    def __str__(self):
        return f"{self.op} made a tensor of shape {self.shape}" if self.op else "no tensor was made"


class _Largest(TorchDispatchMode):
    def __init__(self, record):
        super().__init__()
        self.record = record

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket.__name__ == "set_":  # relabels existing memory (the interpreter's host copies)
            return out
        for t in _tensors(out):
            if t.numel() > self.record.numel:
                self.record.numel = t.numel()
                self.record.op, self.record.shape = func.overloadpacket.__name__, tuple(t.shape)
        return out


@contextlib.contextmanager
def largest_tensor():
    """Watch every ATen op in the block (autograd included) and keep the largest tensor it made.

    Whatever the device, this tells whether a function ever held an N x N matrix, or a whole row
    where it promised a chunk: the memory a lesson's structure is meant to save.
    """
    record = Largest()
    with _Largest(record):
        yield record


class _Counter(TorchDispatchMode):
    def __init__(self, traffic):
        super().__init__()
        self.traffic = traffic

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if func.is_view or name in NO_DATA_OPS or interpreter.launching():   # (the interpreter's copies)
            return out
        read = sum(_distinct_bytes(t) for t in _tensors((args, kwargs)))
        written = sum(_distinct_bytes(t) for t in _tensors(out))
        self.traffic.kernels += 1
        self.traffic.bytes_loaded += read
        self.traffic.bytes_stored += written
        self.traffic.ops.append((name, read + written))
        return out


def eager_traffic(fn, *args, **kwargs):
    """Kernels and bytes of an eager PyTorch function: one kernel per ATen op it runs."""
    traffic = Traffic()
    with torch.no_grad(), _Counter(traffic):
        fn(*args, **kwargs)
    return traffic


class ReadsOf(TorchDispatchMode):
    """Inside `with ReadsOf(t) as seen:`, seen.elements counts the elements of t that ATen ops read
    (views and allocations aside): each op given a view of t's storage counts that view's distinct
    elements (a broadcast dimension once)."""

    def __init__(self, t):
        super().__init__()
        self.storage, self.elements = t.untyped_storage().data_ptr(), 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not func.is_view and func.overloadpacket.__name__ not in NO_DATA_OPS:
            self.elements += sum(_distinct_bytes(t) // t.element_size() for t in _tensors((args, kwargs))
                                 if t.untyped_storage().data_ptr() == self.storage)
        return func(*args, **(kwargs or {}))


def triton_traffic(fn, *args, **kwargs):
    """Kernels and bytes of a function that launches Triton kernels, counted by the interpreter."""
    traffic = Traffic()
    with interpreter.record() as rec:
        fn(*args, **kwargs)
    traffic.launches = rec.launches
    traffic.kernels = len(rec.launches)
    traffic.bytes_loaded = sum(launch.bytes_loaded for launch in rec.launches)
    traffic.bytes_stored = sum(launch.bytes_stored for launch in rec.launches)
    return traffic


def _accesses(fn, *args, arg="out_ptr", **kwargs):
    """{program id: [element offsets of `arg`, one array per load or store]} for the last Triton launch
    that fn makes."""
    with interpreter.record(touches=True) as rec:
        fn(*args, **kwargs)
    if not rec.launches:
        raise ValueError("the function launched no Triton kernel")
    touched = {}
    for pid, name, _kind, offs in rec.launches[-1].touches:
        if name == arg:
            touched.setdefault(pid, []).append(np.asarray(offs))
    if not touched:
        names = sorted({t[1] for t in rec.launches[-1].touches})
        raise ValueError(f"no program touched {arg!r}; the kernel's arguments that were touched: {names}")
    return touched


def programs_touching(fn, *args, arg="out_ptr", **kwargs):
    """{program id: element offsets of `arg`} for the last Triton launch that fn makes."""
    return {pid: torch.from_numpy(np.concatenate(accesses)).unique()
            for pid, accesses in _accesses(fn, *args, arg=arg, **kwargs).items()}


def show_programs(fn, *args, arg="out_ptr", shape=None, ax=None, **kwargs):
    """Colour each element of `arg` by the program that touched it (white: no program did), and write
    the program's id on each block it loaded or stored (each tile, for a program that walks several).

    `shape` lays the elements out in 2-D (rows, columns); by default one row.
    """
    import matplotlib.pyplot as plt

    touched = _accesses(fn, *args, arg=arg, **kwargs)
    size = max(int(offs.max()) for accesses in touched.values() for offs in accesses if offs.size) + 1
    rows, cols = shape if shape else (1, size)
    grid = np.full(rows * cols, np.nan)
    used = [d for pid in touched for d, p in enumerate(pid) if p]   # grid dimensions a program id uses
    dims = max(used, default=0) + 1
    labels = {}   # (column, row) of a label: the program's id, in the grid's dimensions
    for k, (pid, accesses) in enumerate(sorted(touched.items())):
        for offs in accesses:
            offs = offs[offs < rows * cols]
            if not offs.size:
                continue
            grid[offs] = k
            r, c = offs // cols, offs % cols   # the element nearest the block's centre: on the block
            at = offs[np.argmin((r - r.mean()) ** 2 + (c - c.mean()) ** 2)]
            labels[(at % cols, at // cols)] = pid[0] if dims == 1 else pid[:dims]
    if ax is None:
        _, ax = plt.subplots(figsize=(min(12, 0.25 * cols + 2), min(6, 0.25 * rows + 1.2)))
    cmap = plt.get_cmap("tab20", max(len(touched), 1))
    ax.imshow(grid.reshape(rows, cols), cmap=cmap, aspect="equal", interpolation="nearest")
    for (x, y), label in labels.items():
        ax.text(x, y, str(label), ha="center", va="center", fontsize=8)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(f"elements of {arg}, coloured by the program that touched them ({len(touched)} programs)",
                 fontsize=9)
    return ax


# ---------------------------------------------------------------- what PyTorch computed, by line


def _folders(*modules):
    """Each module's folder as Python names its files, and with links resolved (a .venv that is a link)."""
    paths = [pathlib.Path(m.__file__).parent for m in modules]
    return tuple(dict.fromkeys(str(f) for path in paths for f in (path, path.resolve())))


_TORCH, _TRITON = _folders(torch), _folders(triton)
_LIBRARIES = _TORCH + _TRITON + _folders(np) + ("site-packages", "<frozen")
HARNESS = _folders(sys.modules[__name__])   # helpers/: the course's harness and meters


def _storage(t):
    return t.untyped_storage().data_ptr() if t.device.type != "meta" and t.numel() else None


@dataclasses.dataclass
class EagerOp:
    """One ATen op that touched tensor data: its name, and whether it only copied a tensor the learner's
    code was given (an input, as it is or converted: `.contiguous()`, `.float()`), not one it made."""

    name: str
    copies_input: bool = False


class EagerWork(TorchDispatchMode):
    """Inside the block, every ATen op that is not a view, an allocation or metadata, by the line of
    the learner's code that asked for it: `found` is {(file, line, function): [EagerOp, ...]}.

        with EagerWork() as work:
            fn(*args)
        work.found   # {} when PyTorch only allocated and took views

    Not counted: ops run under a Triton launch (the interpreter copies tensors to and from the host),
    ops outside the block's own call (the frames already there when it was entered), and ops inside
    a function whose code is in `once` (work a model does once, not at every step). Ops inside the
    course's code (`course`: folders, the harness by default) are put on the learner's line that
    called it.
    """

    def __init__(self, course=HARNESS, once=(), inputs=None):
        super().__init__()
        self.found = collections.defaultdict(list)
        self._course = tuple(course)
        self._once = {f.__code__ if hasattr(f, "__code__") else f for f in once}
        self._outside, self._made = set(), set()
        # the storages of the call's inputs, if given: a copy is then "of an input" only from one of them,
        # or from a tensor the course's code made for the call (a clone that autograd will fill); a
        # tensor made outside PyTorch's ops (torch.from_numpy, say) is not an input
        self._inputs = None if inputs is None else {_storage(t) for t in inputs}

    def __enter__(self):
        frame, self._outside = sys._getframe(1), set()
        while frame is not None:
            self._outside.add(frame)
            frame = frame.f_back
        return super().__enter__()

    def __exit__(self, *exc):
        self._outside = set()
        return super().__exit__(*exc)

    def _learners_line(self):
        """(file, line, function) of the learner's code that made the current op; None if not theirs."""
        frame = sys._getframe(1).f_back   # the frame below __torch_dispatch__ (None on autograd's own thread)
        while frame is not None and frame.f_code.co_filename.startswith(_TORCH):
            frame = frame.f_back
        while frame is not None and frame not in self._outside:
            name = frame.f_code.co_filename
            if name.startswith(_TRITON) or frame.f_code in self._once:
                return None              # Triton's runtime (a launch), or work done once per model
            if not any(part in name for part in _LIBRARIES + self._course):
                return name, frame.f_lineno, frame.f_code.co_name
            frame = frame.f_back
        return None                      # the caller's own work (the check, a meter), not the learner's

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if func.is_view:
            return out
        where = self._learners_line()
        made = {_storage(t) for t in _tensors(out)}
        if where is None:
            if self._inputs is not None:
                self._inputs |= made
            return out
        if name not in NO_DATA_OPS:
            source = args[1] if name == "copy_" and len(args) > 1 else (args[0] if args else None)
            given = (isinstance(source, torch.Tensor) and _storage(source) not in self._made
                     and (self._inputs is None or _storage(source) in self._inputs))
            self.found[where].append(EagerOp(name, name in COPY_OPS and given))
        self._made |= made     # what the learner's code made: a copy of it is not a copy of an input
        return out


def source_line(where):
    """'line N of a notebook cell (in fn): `source`' for a (file, line, function) of the learner's code."""
    import linecache

    filename, lineno, function = where
    place = "a notebook cell" if "ipykernel" in filename else pathlib.Path(filename).name
    source = linecache.getline(filename, lineno).strip()
    return f"line {lineno} of {place} (in {function})" + (f": `{source}`" if source else "")
