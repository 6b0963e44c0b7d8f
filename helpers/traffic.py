"""A traffic meter that needs no GPU: count the kernels and bytes a function moves.

* `eager_traffic(fn, *args)` runs a PyTorch function and counts each ATen op it
  dispatches as one kernel, reading its tensor inputs and writing its outputs
  (views, which move no data, are not counted).
* `triton_traffic(fn, *args)` runs a function that launches Triton kernels
  through the interpreter and counts the bytes those kernels really load and
  store, lane by lane, masked-off lanes excluded.
* `largest_tensor()` watches a block and keeps the largest tensor any op made in it.
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

import contextlib
import dataclasses

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from helpers import interpreter

# ops that allocate or relabel memory without reading or writing tensor data
NO_DATA_OPS = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "detach", "alias",
         "lift_fresh", "_local_scalar_dense", "set_", "resize_", "_unsafe_view"}


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
        if func.is_view or name in NO_DATA_OPS:
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


def programs_touching(fn, *args, arg="out_ptr", **kwargs):
    """{program id: element offsets of `arg`} for the last Triton launch that fn makes."""
    with interpreter.record(touches=True) as rec:
        fn(*args, **kwargs)
    if not rec.launches:
        raise ValueError("the function launched no Triton kernel")
    touched = {}
    for pid, name, _kind, offs in rec.launches[-1].touches:
        if name == arg:
            touched.setdefault(pid, []).append(offs)
    if not touched:
        names = sorted({t[1] for t in rec.launches[-1].touches})
        raise ValueError(f"no program touched {arg!r}; the kernel's arguments that were touched: {names}")
    return {pid: torch.from_numpy(np.concatenate(o)).unique() for pid, o in touched.items()}


def show_programs(fn, *args, arg="out_ptr", shape=None, ax=None, **kwargs):
    """Colour each element of `arg` by the program that touched it (white: no program did).

    `shape` lays the elements out in 2-D (rows, columns); by default one row.
    """
    import matplotlib.pyplot as plt

    touched = programs_touching(fn, *args, arg=arg, **kwargs)
    size = int(max(int(o.max()) for o in touched.values())) + 1
    rows, cols = shape if shape else (1, size)
    grid = np.full(rows * cols, np.nan)
    for k, (pid, offs) in enumerate(sorted(touched.items())):
        grid[offs.numpy()[offs.numpy() < rows * cols]] = k
    if ax is None:
        _, ax = plt.subplots(figsize=(min(12, 0.25 * cols + 2), min(6, 0.25 * rows + 1.2)))
    cmap = plt.get_cmap("tab20", max(len(touched), 1))
    ax.imshow(grid.reshape(rows, cols), cmap=cmap, aspect="equal", interpolation="nearest")
    for k, (pid, offs) in enumerate(sorted(touched.items())):
        middle = int(offs[len(offs) // 2])
        if middle < rows * cols:
            label = pid[0] if all(p == 0 for p in pid[1:]) else pid
            ax.text(middle % cols, middle // cols, str(label), ha="center", va="center", fontsize=8)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(f"elements of {arg}, coloured by the program that touched them ({len(touched)} programs)",
                 fontsize=9)
    return ax
