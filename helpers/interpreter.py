"""Watching Triton's interpreter: bounds checks and a record of every load and store.

Under the interpreter a Triton kernel is plain Python over NumPy arrays, and
each `tl.load` / `tl.store` ends in two methods of its builder. We wrap those
two methods (and the launch that runs the grid), which gives us:

* bounds checks: a masked-in lane whose address lies outside every tensor the
  kernel was given raises `OutOfBounds`, naming the kernel, the argument and the
  offending offsets, instead of reading garbage or corrupting memory;
* a traffic record: bytes loaded and stored by each launch, masked lanes
  excluded, and, when asked, which elements each program touched.

`install()` is called once by `helpers`; nothing here changes what a correct
kernel computes.
"""

import contextlib
import dataclasses

import numpy as np


class OutOfBounds(IndexError):
    """A kernel loaded or stored outside the tensors it was given."""


@dataclasses.dataclass
class Span:
    """The bytes one tensor argument covers."""

    name: str
    lo: int
    hi: int
    itemsize: int
    numel: int


@dataclasses.dataclass
class Launch:
    """What one kernel launch moved."""

    kernel: str
    grid: tuple
    bytes_loaded: int = 0
    bytes_stored: int = 0
    # (program id, argument name, "load" or "store", element offsets), when recording touches
    touches: list = dataclasses.field(default_factory=list)

    @property
    def bytes(self):
        return self.bytes_loaded + self.bytes_stored


class _State:
    spans: list = []          # spans of the launch that is running
    kernel: str = "?"
    grid_idx = None           # the program that is running
    grid_dims = (1, 1, 1)
    launch: Launch | None = None
    recorders: list = []      # open `record()` contexts, innermost last


def _tensor_span(name, t):
    """The bytes a (possibly strided) tensor view covers, from its lowest to its highest element."""
    if t.numel() == 0:
        return Span(name, t.data_ptr(), t.data_ptr(), t.element_size(), 0)
    lo = hi = 0
    for size, stride in zip(t.shape, t.stride()):
        extent = (size - 1) * stride
        lo, hi = (lo + extent, hi) if extent < 0 else (lo, hi + extent)
    base, item = t.data_ptr(), t.element_size()
    return Span(name, base + lo * item, base + (hi + 1) * item, item, t.numel())


def _describe(addresses, span, verb):
    """A message naming the argument the bad lanes came from and the offsets they used."""
    offsets = ((addresses.astype(np.int64) - span.lo) // span.itemsize)[:6].tolist()
    more = " ..." if len(addresses) > 6 else ""
    prog = tuple(int(i) for i in _State.grid_idx) if _State.grid_idx is not None else "?"
    return (f"{_State.kernel} {verb} out of bounds: program {prog} has {len(addresses)} masked-in "
            f"lane(s) past the tensor it points into, e.g. {span.name} + {offsets}{more}, "
            f"but {span.name} has {span.numel} element(s) (valid offsets 0..{span.numel - 1}). "
            f"Mask the lanes past the end (`mask=offs < n`) or fix the offset arithmetic.")


def _nearest(address, spans):
    below = [s for s in spans if s.lo <= address]
    return max(below, key=lambda s: s.lo) if below else min(spans, key=lambda s: s.lo)


def _active(ptrs, mask):
    addresses = np.asarray(ptrs.data)
    if mask is not None:
        m = np.broadcast_to(np.asarray(mask.data, dtype=bool), addresses.shape)
        addresses = addresses[m]
    return addresses.reshape(-1)


def _check_and_count(ptrs, mask, verb, arg_store):
    addresses = _active(ptrs, mask)
    itemsize = max(1, ptrs.get_element_ty().primitive_bitwidth // 8)
    spans = _State.spans
    if spans and addresses.size:
        # One load or store goes through one pointer argument, so every lane must
        # land in the same tensor: the one most lanes land in.
        inside = [(addresses >= s.lo) & (addresses + itemsize <= s.hi) for s in spans]
        best = max(range(len(spans)), key=lambda i: int(inside[i].sum()))
        ok = inside[best]
        if not ok.all():
            span = spans[best] if ok.any() else _nearest(int(addresses[0]), spans)
            raise OutOfBounds(_describe(addresses[~ok], span, verb))
    launch = _State.launch
    if launch is not None:
        nbytes = int(addresses.size) * itemsize
        if arg_store:
            launch.bytes_stored += nbytes
        else:
            launch.bytes_loaded += nbytes
        if any(r.touches for r in _State.recorders) and addresses.size:
            for s in spans:
                inside = addresses[(addresses >= s.lo) & (addresses < s.hi)]
                if inside.size:
                    offs = ((inside - s.lo) // s.itemsize).astype(np.int64)
                    pid = tuple(int(i) for i in _State.grid_idx)
                    launch.touches.append((pid, s.name, "store" if arg_store else "load", offs))


def _wrap_builder(builder_cls):
    load, store = builder_cls.create_masked_load, builder_cls.create_masked_store

    def create_masked_load(self, ptrs, mask, *rest):
        _check_and_count(ptrs, mask, "loaded", arg_store=False)
        return load(self, ptrs, mask, *rest)

    def create_masked_store(self, ptrs, value, mask, *rest):
        _check_and_count(ptrs, mask, "stored", arg_store=True)
        return store(self, ptrs, value, mask, *rest)

    def set_grid_idx(self, *idx):
        _State.grid_idx = idx
        return set_idx(self, *idx)

    set_idx = builder_cls.set_grid_idx
    builder_cls.create_masked_load = create_masked_load
    builder_cls.create_masked_store = create_masked_store
    builder_cls.set_grid_idx = set_grid_idx


def _wrap_launch(executor_cls):
    init_args, call = executor_cls._init_args_hst, executor_cls.__call__

    def _init_args_hst(self, args_dev, kwargs):
        args_hst, kwargs_hst = init_args(self, args_dev, kwargs)
        named = list(zip(self.arg_names, args_hst)) + list(kwargs_hst.items())
        _State.spans = [_tensor_span(name, _unwrap(a)) for name, a in named if hasattr(a, "data_ptr")]
        return args_hst, kwargs_hst

    def __call__(self, *args, **kwargs):
        previous = (_State.spans, _State.kernel, _State.launch)
        _State.kernel = getattr(self.fn, "__name__", "kernel")
        _State.launch = Launch(_State.kernel, ()) if _State.recorders else None
        try:
            call(self, *args, **kwargs)
            if _State.launch is not None:
                _State.launch.grid = tuple(d for d in _State.grid_dims if d > 1) or (1,)
                for r in _State.recorders:
                    r.launches.append(_State.launch)
        finally:
            _State.spans, _State.kernel, _State.launch = previous

    executor_cls._init_args_hst = _init_args_hst
    executor_cls.__call__ = __call__


def _unwrap(a):
    """The torch tensor behind Triton's TensorWrapper (made by `triton.reinterpret`)."""
    return a.base if type(a).__name__ == "TensorWrapper" else a


_installed = False


def install():
    """Wrap the interpreter's loads, stores and launches (once per process)."""
    global _installed
    if _installed:
        return
    from triton.runtime import interpreter

    _wrap_builder(interpreter.InterpreterBuilder)
    set_dim = interpreter.InterpreterBuilder.set_grid_dim

    def set_grid_dim(self, *dims):
        _State.grid_dims = dims
        return set_dim(self, *dims)

    interpreter.InterpreterBuilder.set_grid_dim = set_grid_dim
    _wrap_launch(interpreter.GridExecutor)
    _fix_index_for_new_numpy(interpreter)
    _installed = True


def _fix_index_for_new_numpy(interpreter):
    """Triton 3.6's interpreter turns a 1-element array into an int in a way numpy >= 2.4 refuses
    (`range(n)` over a runtime `n` fails); Triton 3.9 fixed it. Apply the same fix to older ones."""
    patch_tensor = interpreter._patch_lang_tensor

    def _patch_lang_tensor(tensor, scope):
        patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(np.asarray(self.handle.data).reshape(-1)[0]))

    interpreter._patch_lang_tensor = _patch_lang_tensor


class Recorder:
    """The launches made inside a `record()` block."""

    def __init__(self, touches):
        self.touches = touches
        self.launches: list[Launch] = []


@contextlib.contextmanager
def record(touches=False):
    """Record every interpreted launch in the block (bytes moved; element touches if asked).

    On a GPU, Triton kernels launched inside the block run through the
    interpreter on copies of their arguments, so the count is the same on both
    devices; keep the inputs small there too.
    """
    install()
    rec = Recorder(touches)
    _State.recorders.append(rec)
    undo = _route_jit_through_interpreter()
    try:
        yield rec
    finally:
        undo()
        _State.recorders.remove(rec)


def interpreted():
    """Run the Triton kernels launched in the block through the interpreter, even on a GPU.

    Only the interpreter can stop an out-of-bounds access before it happens.
    """
    return record()


def _route_jit_through_interpreter():
    """On a GPU, run compiled kernels (and the @triton.jit functions they call) through the interpreter."""
    from triton.runtime import interpreter, jit

    original_run, original_call = jit.JITFunction.run, jit.JITFunction.__call__
    if getattr(original_run, "_course_routed", False):
        return lambda: None

    def run(self, *args, grid, warmup, **kwargs):
        if warmup:
            return None
        return interpreter.InterpretedFunction(self.fn).run(*args, grid=grid, warmup=False, **kwargs)

    def call(self, *args, **kwargs):  # a @triton.jit helper called from inside a kernel
        # Like InterpretedFunction.__call__, but undoing its patches of triton.language afterwards:
        # left in place, they would break every kernel compiled later in the process.
        fn = interpreter.InterpretedFunction(self.fn)
        scope = interpreter._patch_lang(self.fn)
        try:
            return fn.rewrite()(*args, **kwargs)
        finally:
            scope.restore()

    run._course_routed = True
    jit.JITFunction.run, jit.JITFunction.__call__ = run, call

    def undo():
        jit.JITFunction.run, jit.JITFunction.__call__ = original_run, original_call

    return undo
