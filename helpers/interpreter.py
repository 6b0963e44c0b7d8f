"""Watching Triton's interpreter: bounds checks, launch counts and a record of every load and store.

Under the interpreter a Triton kernel is plain Python over NumPy arrays, and
each `tl.load` / `tl.store` ends in a method of its builder. We wrap those
methods (and the launch that runs the grid), which gives us:

* bounds checks: every tensor argument's pointer carries a tag naming the
  argument (in address bits no real address uses), and pointer arithmetic keeps
  it. A masked-in lane outside the tensor its own pointer came from raises
  `OutOfBounds`, naming the kernel, the argument and the offending offsets,
  before any memory is touched: even when the stray lane would land inside
  another argument's memory;
* a traffic record: bytes loaded and stored by each launch, masked lanes
  excluded, how many of those bytes a tensor descriptor moved (`desc.load`,
  `desc.store`), and, when asked, which elements each program touched;
* masked-off lanes of a `tl.load` without `other=` read NaN (floating point), not the interpreter's
  zeros: on a GPU they hold whatever the registers held, and a kernel that needs zeros there must say
  so with `other=0.0`;
* a launch count (on a GPU too), so `check` can tell whether a Triton kernel ran,
  and the progress of the running launch, so a time-out can tell a slow kernel
  from an endless one;
* a note of each launch's kernel and argument types, for helpers.gpu_compile, which
  compiles it as a GPU would.

`install()` is called once by `helpers`; nothing here changes what a correct
kernel computes.
"""

import contextlib
import dataclasses

import numpy as np


class OutOfBounds(IndexError):
    """A kernel loaded or stored outside the tensors it was given.

    Besides its message it keeps what advice needs: the argument (`arg`, `numel` elements), the
    lowest and highest bad element offsets, and the shape of the access (the block of lanes).
    """

    def __init__(self, facts, *, arg, numel, lowest, highest, block_shape, descriptor=False):
        self.facts, self.arg, self.numel = facts, arg, numel
        self.lowest, self.highest, self.block_shape = lowest, highest, tuple(block_shape)
        self.descriptor = descriptor   # the access went through a tensor descriptor
        super().__init__(f"{facts} {self.advice()}")

    def advice(self, strided_case=False):
        """What to look at: the mask, or the strides and offsets feeding the pointer (or the descriptor)."""
        lanes = int(np.prod(self.block_shape)) if self.block_shape else 1
        pointer = f"the strides or offsets feeding `{self.arg}`"
        if self.descriptor:
            return (f"This access went through a tensor descriptor, which drops only what falls outside the "
                    f"shape it was given, and takes no mask: the descriptor's shape or strides describe "
                    f"more than `{self.arg}` holds. Check them, and the offsets of the box.")
        if strided_case:
            return (f"This case passes strided (non-contiguous) views, where a wrong stride reaches past the "
                    f"end as well as a missing mask does: check the mask, and {pointer}.")
        if self.lowest < 0:
            return f"Offsets below 0 come from the address arithmetic, not a missing mask: check {pointer}."
        if len(self.block_shape) > 1:   # rows past the last reach a tile's rows times the row stride
            return (f"The farthest lane is {self.highest - self.numel + 1} elements past the end: a tile's "
                    f"rows past the last one reach up to its rows times the row stride. Mask every "
                    f"dimension of the tile (rows and columns), or check {pointer}.")
        if self.highest - self.numel >= lanes:
            return (f"The farthest lane is {self.highest - self.numel + 1} elements past the end, more than "
                    f"one block ({lanes} lanes): a missing mask cannot reach that far, so check {pointer}.")
        if self.numel % lanes:
            return (f"The lanes are within one block of the end and {self.numel} is not a multiple of the "
                    f"block ({lanes}): mask the lanes past the end (`mask=offs < n`).")
        return (f"{self.numel} is a multiple of the block ({lanes}), so no block should spill past the end: "
                f"check {pointer} and the size of the grid.")


# A tensor argument's pointer enters the kernel as its address with the argument's number
# (1, 2, ...) in the top byte, which no real address uses. `x_ptr + offs` keeps the tag, so
# each lane says which argument it came from; the tag is removed before memory is touched.
_TAG_SHIFT = np.uint64(56)
_ADDRESS = np.uint64((1 << 56) - 1)


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
    # the part of those bytes moved by tensor descriptors (desc.load / desc.store), not by pointers
    descriptor_bytes_loaded: int = 0
    descriptor_bytes_stored: int = 0
    # (program id, argument name, "load" or "store", element offsets), when recording touches
    touches: list = dataclasses.field(default_factory=list)
    # the indices in `touches` of those made by atomic operations (filed as stores: they write)
    atomic_touches: set = dataclasses.field(default_factory=set)
    # ... and of those among them scoped to one program (scope="cta"): atomic only among its threads
    program_scoped_touches: set = dataclasses.field(default_factory=set)
    # the program id of each descriptor store whose whole box lay outside its tensor: nothing stored
    # (the hardware drops it, as the interpreter does), and so no touch either
    stores_outside: list = dataclasses.field(default_factory=list)

    @property
    def bytes(self):
        return self.bytes_loaded + self.bytes_stored


class _State:
    spans: list = []          # spans of the launch that is running, in tag order (tag i+1 is spans[i])
    tags: dict = {}           # id(host tensor) -> tag, for the launch being set up
    kernel: str | None = None  # the kernel that is running, None between launches
    grid_idx = None           # the program that is running
    grid_dims = (1, 1, 1)
    programs_run = 0          # programs started in the running launch
    launch: Launch | None = None
    recorders: list = []      # open `record()` contexts, innermost last
    in_descriptor = False     # a tensor descriptor's load or store is running
    launches = 0              # every Triton launch in this process (interpreter or GPU)
    reorders = 0              # interpreted reshapes into 2 or more dimensions with can_reorder=True


def reorder_count():
    """How many reshapes with can_reorder=True (into 2 or more dimensions) interpreted kernels have made
    so far: the interpreter reverses their elements (_wrap_builder)."""
    return _State.reorders


def launch_count():
    """How many Triton kernels this process has launched so far (interpreted or compiled)."""
    return _State.launches


def count_launch():
    """Count one launch of a compiled kernel made without JITFunction.run (helpers.launch)."""
    _State.launches += 1


def recording():
    """Whether a record() is open: Triton kernels then run through the interpreter, even on a GPU."""
    return bool(_State.recorders)


def launching():
    """Whether an interpreted launch is running, its copies of the arguments to and from the host
    included: PyTorch ops made then are the interpreter's, not the caller's."""
    return _State.kernel is not None


def progress():
    """(kernel name, programs started, programs in the grid) of the running launch, or None."""
    if _State.kernel is None:
        return None
    total = int(np.prod(_State.grid_dims))
    return _State.kernel, _State.programs_run, total


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


def _out_of_bounds(addresses, span, verb, block_shape):
    """The error naming the argument the bad lanes came from and the offsets they used."""
    offsets = (addresses.astype(np.int64) - span.lo) // span.itemsize
    more = " ..." if len(addresses) > 6 else ""
    prog = tuple(int(i) for i in _State.grid_idx) if _State.grid_idx is not None else "?"
    facts = (f"{_State.kernel} {verb} out of bounds: program {prog} has {len(addresses)} masked-in "
             f"lane(s) outside the tensor it points into, e.g. {span.name} + {offsets[:6].tolist()}{more}, "
             f"but {span.name} has {span.numel} element(s) (valid offsets 0..{span.numel - 1}).")
    return OutOfBounds(facts, arg=span.name, numel=span.numel, lowest=int(offsets.min()),
                       highest=int(offsets.max()), block_shape=block_shape, descriptor=_State.in_descriptor)


def _nearest(address, spans):
    below = [s for s in spans if s.lo <= address]
    return max(below, key=lambda s: s.lo) if below else min(spans, key=lambda s: s.lo)


def _active(ptrs, mask):
    addresses = np.asarray(ptrs.data, dtype=np.uint64)
    if mask is not None:
        m = np.broadcast_to(np.asarray(getattr(mask, "data", mask), dtype=bool), addresses.shape)
        addresses = addresses[m]
    return addresses.reshape(-1)


def _untagged(ptrs):
    """The same pointers with the argument tags removed: real addresses."""
    return type(ptrs)(np.asarray(ptrs.data, dtype=np.uint64) & _ADDRESS, ptrs.dtype)


def _check_and_count(ptrs, mask, verb, arg_store, atomic=False, program_scoped=False):
    """Check each masked-in lane against the tensor its pointer came from; count the bytes.
    atomic: an atomic operation; program_scoped: one with scope="cta"."""
    tagged = _active(ptrs, mask)
    tags = (tagged >> _TAG_SHIFT).astype(np.int64)
    addresses = (tagged & _ADDRESS).astype(np.int64)
    itemsize = max(1, ptrs.get_element_ty().primitive_bitwidth // 8)
    spans = _State.spans
    owner = np.full(addresses.shape, -1)  # index into spans of the tensor each lane is inside
    if spans and addresses.size:
        for tag in np.unique(tags):
            lanes = tags == tag
            if 0 < tag <= len(spans):  # derived from argument `tag`: it must stay inside that tensor
                span = spans[tag - 1]
                ok = (addresses[lanes] >= span.lo) & (addresses[lanes] + itemsize <= span.hi)
                if not ok.all():
                    raise _out_of_bounds(addresses[lanes][~ok], span, verb, np.shape(ptrs.data))
                owner[lanes] = tag - 1
            else:  # a pointer the tags do not know (built from an integer): any tensor will do
                for i, span in enumerate(spans):
                    inside = lanes & (addresses >= span.lo) & (addresses + itemsize <= span.hi)
                    owner[inside] = i
                stray = lanes & (owner < 0)
                if stray.any():
                    raise _out_of_bounds(addresses[stray], _nearest(int(addresses[stray][0]), spans), verb,
                                         np.shape(ptrs.data))
    launch = _State.launch
    if launch is not None:
        nbytes = int(addresses.size) * itemsize
        if arg_store:
            launch.bytes_stored += nbytes
            launch.descriptor_bytes_stored += nbytes if _State.in_descriptor else 0
        else:
            launch.bytes_loaded += nbytes
            launch.descriptor_bytes_loaded += nbytes if _State.in_descriptor else 0
        if any(r.touches for r in _State.recorders) and addresses.size:
            pid = tuple(int(i) for i in _State.grid_idx)
            for i in np.unique(owner[owner >= 0]):
                s = spans[i]
                offs = (addresses[owner == i] - s.lo) // s.itemsize
                if atomic:
                    launch.atomic_touches.add(len(launch.touches))
                if program_scoped:
                    launch.program_scoped_touches.add(len(launch.touches))
                launch.touches.append((pid, s.name, "store" if arg_store else "load", offs))


def _program_scoped(args, kwargs):
    """Whether an atomic operation's scope (its builder call's last argument) is one program's, "cta"."""
    scope = kwargs.get("scope", args[-1] if args else None)
    return getattr(scope, "name", str(scope)).upper().endswith("CTA")


def _undefined_lanes(loaded, mask):
    """What a GPU gives the masked-off lanes of a tl.load without `other=`: whatever its registers held.
    Triton's interpreter gives zeros, with which a kernel that needs zeros there (a sum, a dot) would
    wrongly pass: floating-point lanes read NaN here instead, which shows wherever they are used. (A
    tensor descriptor's load does give zeros past the tensor's edge, on a GPU too: it keeps them.)"""
    if np.issubdtype(loaded.data.dtype, np.floating):
        loaded.data[~np.broadcast_to(mask.data, loaded.data.shape)] = np.nan


def _wrap_builder(builder_cls):
    load, store = builder_cls.create_masked_load, builder_cls.create_masked_store
    cas, rmw = builder_cls.create_atomic_cas, builder_cls.create_atomic_rmw

    # Every load and store, plain, atomic or through a tensor descriptor, ends in one of these.
    def create_masked_load(self, ptrs, mask, other, *args, **kwargs):
        _check_and_count(ptrs, mask, "loaded", arg_store=False)
        loaded = load(self, _untagged(ptrs), mask, other, *args, **kwargs)
        if other is None and not _State.in_descriptor:
            _undefined_lanes(loaded, mask)
        return loaded

    def create_masked_store(self, ptrs, value, mask, *args, **kwargs):
        _check_and_count(ptrs, mask, "stored", arg_store=True)
        return store(self, _untagged(ptrs), value, mask, *args, **kwargs)

    # (ptr, cmp, val, sem, scope) and (op, ptr, val, mask, sem, scope): the scope comes last
    def create_atomic_cas(self, ptr, *args, **kwargs):
        _check_and_count(ptr, None, "updated (atomic_cas)", arg_store=True, atomic=True,
                         program_scoped=_program_scoped(args, kwargs))
        return cas(self, _untagged(ptr), *args, **kwargs)

    def create_atomic_rmw(self, op, ptr, val, mask, *args, **kwargs):
        _check_and_count(ptr, mask, "updated (atomic)", arg_store=True, atomic=True,
                         program_scoped=_program_scoped(args, kwargs))
        return rmw(self, op, _untagged(ptr), val, mask, *args, **kwargs)

    def set_grid_idx(self, *idx):
        _State.grid_idx = idx
        _State.programs_run += 1
        return set_idx(self, *idx)

    # A descriptor's load and store compute the tile's pointers and mask, then call the two above:
    # mark the bytes they move as moved by a descriptor.
    def through_descriptor(method):
        def wrapped(self, *args, **kwargs):
            previous, _State.in_descriptor = _State.in_descriptor, True
            try:
                return method(self, *args, **kwargs)
            finally:
                _State.in_descriptor = previous
        return wrapped

    def noting_boxes_outside(method):
        def wrapped(self, desc, value, indices):
            launch = _State.launch
            if launch is not None and not np.asarray(desc.materialize_pointers(indices)[1].data).any():
                launch.stores_outside.append(tuple(int(i) for i in _State.grid_idx))
            return method(self, desc, value, indices)
        return wrapped

    # tl.reshape(x, shape, can_reorder=True) (and tl.view) lets a GPU put the elements in any order, and
    # compiled code does reorder them; the interpreter keeps NumPy's. Into 2 or more dimensions, where
    # the order is what a kernel goes on to use, it reverses them: a kernel that relies on the order
    # fails here as on a GPU. (Into 1 dimension, as tl.sum(x, axis=None) does, the order stays.)
    reshape = builder_cls.create_reshape

    def create_reshape(self, arg, shape, allow_reorder):
        handle = reshape(self, arg, shape, allow_reorder)
        if allow_reorder and len(shape) > 1:
            handle.data = np.ascontiguousarray(handle.data.reshape(-1)[::-1]).reshape(handle.data.shape)
            _State.reorders += 1
        return handle

    set_idx = builder_cls.set_grid_idx
    builder_cls.create_reshape = create_reshape
    builder_cls.create_descriptor_load = through_descriptor(builder_cls.create_descriptor_load)
    builder_cls.create_descriptor_store = noting_boxes_outside(through_descriptor(
        builder_cls.create_descriptor_store))
    builder_cls.create_masked_load = create_masked_load
    builder_cls.create_masked_store = create_masked_store
    builder_cls.create_atomic_cas = create_atomic_cas
    builder_cls.create_atomic_rmw = create_atomic_rmw
    builder_cls.set_grid_idx = set_grid_idx


def _tensor_args(named):
    """(name, host tensor) for every tensor argument, a tensor descriptor's base included."""
    for name, a in named:
        a = _unwrap(a)
        if hasattr(a, "data_ptr"):
            yield name, a
        elif hasattr(a, "base") and hasattr(a, "block_shape"):  # a host-side TensorDescriptor
            yield f"{name}.base", _unwrap(a.base)


def _wrap_launch(interpreter):
    executor_cls = interpreter.GridExecutor
    init_args, call = executor_cls._init_args_hst, executor_cls.__call__
    implicit_cvt = interpreter._implicit_cvt

    def _init_args_hst(self, args_dev, kwargs):
        args_hst, kwargs_hst = init_args(self, args_dev, kwargs)
        named = list(zip(self.arg_names, args_hst)) + list(kwargs_hst.items())
        tensors = list(_tensor_args(named))
        _State.spans = [_tensor_span(name, t) for name, t in tensors]
        _State.tags = {id(t): i + 1 for i, (_, t) in enumerate(tensors)}
        return args_hst, kwargs_hst

    def _implicit_cvt(arg):
        converted = implicit_cvt(arg)
        tag = _State.tags.get(id(_unwrap(arg))) if hasattr(arg, "data_ptr") else None
        if tag is not None:
            handle = converted.handle
            handle.data = handle.data | (np.uint64(tag) << _TAG_SHIFT)
        return converted

    def __call__(self, *args, **kwargs):
        previous = (_State.spans, _State.tags, _State.kernel, _State.launch, _State.programs_run)
        _State.kernel = getattr(self.fn, "__name__", "kernel")
        _State.launch = Launch(_State.kernel, ()) if _State.recorders else None
        _State.programs_run = 0
        _State.launches += 1
        try:
            call(self, *args, **kwargs)
            if _State.launch is not None:
                _State.launch.grid = tuple(d for d in _State.grid_dims if d > 1) or (1,)
                for r in _State.recorders:
                    r.launches.append(_State.launch)
        finally:
            _State.spans, _State.tags, _State.kernel, _State.launch, _State.programs_run = previous

    executor_cls._init_args_hst = _init_args_hst
    executor_cls.__call__ = __call__
    interpreter._implicit_cvt = _implicit_cvt


def _count_compiled_launches():
    """Count launches of compiled kernels too (on a GPU, `kernel[grid](...)` ends in JITFunction.run)."""
    from triton.runtime import jit

    run = jit.JITFunction.run

    def counted_run(self, *args, grid, warmup, **kwargs):
        if not warmup:
            count_launch()
        return run(self, *args, grid=grid, warmup=warmup, **kwargs)

    jit.JITFunction.run = counted_run


def _note_launches(interpreter):
    """Let helpers.gpu_compile note each interpreted launch (the kernel, its arguments' types and
    constexprs), so that check() can compile it for a GPU as well."""
    from helpers import gpu_compile

    run = interpreter.InterpretedFunction.run

    def noted_run(self, *args, grid, warmup, **kwargs):
        gpu_compile.note(self, args, kwargs)
        return run(self, *args, grid=grid, warmup=warmup, **kwargs)

    interpreter.InterpretedFunction.run = noted_run


def _unwrap(a):
    """The torch tensor behind Triton's TensorWrapper (made by `triton.reinterpret`)."""
    return a.base if type(a).__name__ == "TensorWrapper" else a


_installed = False


def install():
    """Wrap the interpreter's loads, stores and launches, and count compiled launches (once per process)."""
    global _installed
    if _installed:
        return
    # Left to the first interpreted launch, this import (Triton's code generator, which imports Gluon's
    # language) would run while the interpreter has triton.language patched: Gluon would keep the
    # patched functions, and every Gluon kernel compiled later in the process would fail ("Did you
    # forget to add @triton.gluon.jit ?"). Imported first, it keeps the real ones.
    import triton.compiler.code_generator  # noqa: F401
    from triton.runtime import interpreter

    _wrap_builder(interpreter.InterpreterBuilder)
    set_dim = interpreter.InterpreterBuilder.set_grid_dim

    def set_grid_dim(self, *dims):
        _State.grid_dims = dims
        return set_dim(self, *dims)

    interpreter.InterpreterBuilder.set_grid_dim = set_grid_dim
    _wrap_launch(interpreter)
    _note_launches(interpreter)
    _count_compiled_launches()
    _fix_index_for_new_numpy(interpreter)
    _snapshot_language()
    _installed = True


_pristine = {}   # each object the interpreter patches -> its attributes before any kernel ran


def _patched_objects():
    import triton.language as tl

    objects = [tl, tl.core, tl.tensor, tl.math, tl.dtype, tl.core.tensor_descriptor_base]
    return objects + ([tl.condition] if hasattr(tl, "condition") else [])


def _snapshot_language():
    for obj in _patched_objects():
        _pristine[obj] = dict(vars(obj))


def restore_language():
    """Put back what the interpreter patched in triton.language, where a launch left it patched.

    Each interpreted launch replaces the language's operations with its own for the launch's length,
    and undoes that in a `finally`. A timeout stops a kernel with an exception raised wherever the
    interpreter happens to be, and that can be while it patches or undoes the patches: then some stay,
    and every kernel compiled later in the process fails (an AttributeError about `ir.value` and
    `dtype`). Call it only while no kernel runs."""
    for obj, attributes in _pristine.items():
        if isinstance(obj, type):   # a class: a name it did not have was added by a patch (a module's
            for name in [n for n in vars(obj) if n not in attributes]:   # may be a later import)
                delattr(obj, name)
        for name, value in attributes.items():
            if name not in vars(obj) or vars(obj)[name] is not value:
                setattr(obj, name, value)


def _fix_index_for_new_numpy(interpreter):
    """Triton 3.6's interpreter turns a 1-element array into an int in a way numpy >= 2.4 refuses
    (`range(n)` over a runtime `n` fails); Triton 3.9 fixed it. Apply the same fix to older ones."""
    patch_tensor = interpreter._patch_lang_tensor

    def _patch_lang_tensor(tensor, scope):
        patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(np.asarray(self.handle.data).reshape(-1)[0]))

    interpreter._patch_lang_tensor = _patch_lang_tensor


def quiet():
    """NumPy's floating-point warnings (overflow, invalid value) off inside the block.

    Under the interpreter a kernel's inf or NaN is NumPy arithmetic, which warns; `check` runs the
    learner's code inside this and reports NaNs in its own words. Elsewhere the warnings stay on.
    """
    return np.errstate(all="ignore")


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


@contextlib.contextmanager
def _counting(names, size):
    """Inside the block, every call of the interpreter builder's methods `names`: yields a list that
    collects size(*arguments) of each call."""
    from triton.runtime.interpreter import InterpreterBuilder

    originals = {name: getattr(InterpreterBuilder, name) for name in names}
    sizes = []

    def counting(original):
        def create(self, *args, **kwargs):
            sizes.append(size(*args))
            return original(self, *args, **kwargs)
        return create

    for name, original in originals.items():
        setattr(InterpreterBuilder, name, counting(original))
    try:
        yield sizes
    finally:
        for name, original in originals.items():
            setattr(InterpreterBuilder, name, original)


def exponentials():
    """Inside the block, the exponentials interpreted kernels compute (tl.exp and tl.exp2): yields a list
    that collects the number of values of each call. Use it inside record(), which interprets the
    kernels on a GPU too."""
    return _counting(("create_exp", "create_exp2"), lambda arg: int(np.asarray(arg.data).size))


@dataclasses.dataclass
class Dot:
    """One tl.dot call: the program that made it, its shape (M, K, N), for (M, K) @ (K, N) (a batch
    dimension folded into M), and its operands' dtypes as NumPy names ("float16", "float32", ...)."""

    program: tuple
    shape: tuple
    dtypes: tuple = ()

    @property
    def multiply_adds(self):
        return int(np.prod(self.shape))


def dots():
    """Inside the block, the tl.dot calls interpreted kernels make: yields a list that collects a Dot
    for each call. Use it inside record(), as exponentials()."""
    def dot(a, b, *_):
        a, b = np.asarray(a.data), np.asarray(b.data)
        program = tuple(int(i) for i in _State.grid_idx or ())
        return Dot(program, (a.size // a.shape[-1], a.shape[-1], b.shape[-1]), (a.dtype.name, b.dtype.name))
    return _counting(("create_dot",), dot)


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
