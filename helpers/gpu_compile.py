"""What a GPU's compiler says of the kernels Triton's interpreter ran: checked on the host, no GPU needed.

The interpreter runs a kernel as Python over NumPy arrays, one statement at a time. A GPU compiles the
whole kernel first, and Triton's compiler refuses things that Python lets through, for example:

* a loop-carried value whose type changes (`acc = tl.zeros([BLOCK], tl.float16)`, then
  `acc += x` with `x` float32: Python just makes `acc` float32 on the first trip);
* a global that is not a `tl.constexpr` (`BLOCK = 64` at the top of a notebook), read by the kernel
  or by a `@triton.jit` function it calls;
* launch options the interpreter ignores (`num_warps=3`: a GPU takes only powers of 2).

So `check` notes each kernel its cases launched, with the types of that launch's arguments and the
values of its constexprs (`launches_noted`), and runs the first ones through Triton's own front end
for a Hopper GPU (sm_90), the step that turns a kernel's Python into Triton's IR (`problems`). That
step needs Triton's NVIDIA backend, not a GPU. On a GPU none of this is needed: kernels are compiled
there before they run.
"""

import contextlib
import functools
import inspect
import re
import types
import weakref

# At most this many launches of one kernel are compiled (each distinct in its arguments' types and
# constexprs): the first ones the cases make. A compile takes about 0.05 s.
PER_KERNEL = 4

_noting = []   # the open launches_noted() blocks, innermost last


class _NotStoodIn(BaseException):
    """The compiler reached an interpreter's function that _StandIns did not replace (one held by a class,
    say). Not an Exception, for the reason given under OutOfTime."""


class OutOfTime(BaseException):
    """Raised into a compile to stop it (check's time limit). Not an Exception: Triton's front end
    wraps every Exception raised while it compiles into a CompilationError, which would blame the
    kernel."""


@contextlib.contextmanager
def launches_noted(into):
    """Inside the block, note each interpreted launch in the dict `into`: {(kernel, its arguments'
    types and constexprs): (kernel, signature, constexprs, attrs, options)}. A launch that cannot be
    noted (no NVIDIA backend in this Triton, arguments its binder refuses) is left out."""
    _noting.append(into)
    try:
        yield into
    finally:
        # by identity, not remove()'s ==: two blocks' dicts of the same contents compare equal
        del _noting[next(i for i, open_ in enumerate(_noting) if open_ is into)]


def note(kernel, args, kwargs):
    """Called by helpers.interpreter at each launch of the InterpretedFunction `kernel`."""
    fn = kernel.fn
    wanted = [into for into in _noting if sum(key[0] is fn for key in into) < PER_KERNEL]
    if not wanted:
        return
    try:
        spec = _specialise(kernel, args, kwargs)
    except Exception:  # noqa: BLE001  (what the launch itself will say, if anything is wrong)
        refused = _options_refused(kwargs)   # ... unless it is an option the interpreter ignores
        if refused is None:
            return
        key, spec = (fn, "options", refused), (None, None, None, refused)
    else:
        key = (fn, tuple(spec[1].items()), tuple(sorted((str(k), repr(v)) for k, v in spec[2].items())))
    for into in wanted:
        into.setdefault(key, (kernel, *spec))


def problems(noted):
    """[(kernel name, what the compiler said)] for each noted kernel Triton's front end refuses (its
    first refused launch). Call it while no kernel runs."""
    from helpers import interpreter

    interpreter.restore_language()   # what interpreted launches may have left patched in triton.language
    found = []
    try:
        for kernel, signature, constexprs, attrs, options in noted.values():
            if any(name == kernel.__name__ for name, _ in found):
                continue   # one error per kernel
            if signature is None:   # its launch options refused (_options_refused): nothing to compile
                found.append((kernel.__name__, options))
                continue
            error = _front_end(kernel, signature, constexprs, attrs, options)
            if error is not None:
                found.append((kernel.__name__, _said(error)))   # not the error: its traceback holds the IR
    finally:
        interpreter.restore_language()   # and what a compile may have patched
    return found


def _said(error):
    """A CompilationError in a few lines: where in the kernel (its `def` is line 1), and why."""
    from triton.compiler.errors import CompilationError

    kernel_error = error
    while not error.error_message and isinstance(error.__cause__, CompilationError):
        error = error.__cause__   # raised in a helper: the kernel's own error only marks the call
    reason = error.error_message or ""
    wrapped = re.fullmatch(r"""\w+\((['"])(.*)\1\)""", reason, re.DOTALL)   # AssertionError("...") -> ...
    reason = wrapped.group(2) if wrapped else reason
    line = getattr(error.node, "lineno", None)
    lines = (error.src or "").split("\n")
    if error.src is None or line is None or not 1 <= line <= len(lines):   # Triton may pair a callee's
        return str(error)                                                     # source with the call's node
    helper = re.match(r"\s*def\s+(\w+)", error.src)
    where = f"`{helper.group(1)}`, which it calls" if helper else "a helper it calls"
    where = "the kernel" if error is kernel_error else where
    column = getattr(error.node, "col_offset", 0)
    return (f"at line {line} of {where} (its `def` is line 1):\n  {lines[line - 1]}\n  {' ' * column}^\n"
            f"{reason}")


def available():
    """Whether this Triton can compile for an NVIDIA GPU here (its NVIDIA backend is installed)."""
    try:
        _target()
    except Exception:  # noqa: BLE001  (an ImportError, or a backend that fails to load)
        return False
    return True


# ---------------------------------------------------------------- how


@functools.cache
def _target():
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend

    target = GPUTarget("cuda", 90, 32)
    return target, make_backend(target)


def compile_for_hopper(kernel, signature, constexprs, **options):
    """`kernel` (a @triton.jit function, or the interpreter's stand-in for one) compiled whole for a Hopper
    GPU (sm_90) by Triton's NVIDIA backend and ptxas, here, with or without a GPU: the CompiledKernel,
    whose .asm holds its PTX and SASS-ready cubin. signature: {parameter: Triton type, "constexpr" for
    the constexprs}; options: num_warps, num_stages, ... Call it while no kernel runs."""
    import triton
    from triton.compiler import ASTSource

    from helpers import interpreter

    target, _ = _target()
    stand_ins = _StandIns()
    interpreter.restore_language()   # what interpreted launches may have left patched (see problems)
    try:
        with stand_ins.in_tensor_methods():
            source = ASTSource(stand_ins.of(kernel), signature, constexprs)
            return triton.compile(source, target=target, options=options)
    finally:
        interpreter.restore_language()


def _options_refused(kwargs):
    """What Triton's NVIDIA backend says of a launch's options, or None if it takes them. The interpreter
    ignores num_warps, num_stages and the like; a GPU's compiler checks them first (num_warps=3: "num_warps
    must be a power of 2")."""
    _, backend = _target()
    try:
        backend.parse_options(dict(kwargs))   # picks the options out of kwargs, and checks them
    except (AssertionError, ValueError) as error:
        names = sorted(name for name in kwargs if name in _option_names(backend))
        asked = ", ".join(f"{name}={kwargs[name]!r}" for name in names)
        return f"the launch's options ({asked}): {error}"
    return None


@functools.cache
def _option_names(backend):
    import dataclasses

    return frozenset(field.name for field in dataclasses.fields(backend.parse_options({})))


_binders = weakref.WeakKeyDictionary()   # InterpretedFunction -> (JITFunction of its fn, its binder)


def _specialise(kernel, args, kwargs):
    """(signature, constexprs, attrs, options) as JITFunction.run would make them for a Hopper GPU."""
    from triton.runtime.jit import JITFunction, create_function_from_signature

    _, backend = _target()
    if kernel not in _binders:
        jit_fn = JITFunction(kernel.fn, **_jit_options(kernel))
        _binders[kernel] = jit_fn, create_function_from_signature(jit_fn.signature, jit_fn.params, backend)
    jit_fn, binder = _binders[kernel]
    bound, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = jit_fn._pack_args(backend, kwargs, bound, specialization, options)
    return signature, constexprs, attrs, options


def _front_end(kernel, signature, constexprs, attrs, options):
    """The CompilationError Triton's front end raises for this launch of `kernel`, or None.

    Only a CompilationError is the kernel's: anything else (this module failing to stand in for the
    interpreter's functions, say) says nothing about it, and is let pass."""
    from triton._C.libtriton import ir
    from triton.compiler import ASTSource
    from triton.compiler.errors import CompilationError
    from triton.runtime.interpreter import InterpretedFunction

    target, backend = _target()
    stand_ins = _StandIns()
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    constexprs = {path: stand_ins.of(value) for path, value in constexprs.items()}   # OP=my_helper

    def not_stood_in(self, *args, **kwargs):   # called as Python, it would patch triton.language
        raise _NotStoodIn(self.__name__)         # for good and fail on the compiler's values

    call, InterpretedFunction.__call__ = InterpretedFunction.__call__, not_stood_in
    try:
        with stand_ins.in_tensor_methods():
            source = ASTSource(stand_ins.of(kernel), signature, constexprs, attrs)
            source.make_ir(target, options, backend.get_codegen_implementation(options),
                           backend.get_module_map(), context)
    except _NotStoodIn:
        return None
    except CompilationError as error:
        return None if "InterpretedFunction" in str(error) else error
    except Exception:  # noqa: BLE001  (see above)
        return None
    finally:
        InterpretedFunction.__call__ = call
    return None


class _StandIns:
    """A JITFunction for each of the interpreter's functions a kernel reaches: under TRITON_INTERPRET,
    `@triton.jit` makes InterpretedFunctions (the kernel, its helpers, and tl.sum, tl.max, tl.cdiv and
    the other functions triton.language writes in Triton), which the compiler does not take. The
    kernel's globals are read through a copy in which each of those is replaced, each module through a
    stand-in module that does the same, and so are its constexpr arguments (OP=my_helper). Nothing of
    the learner's is changed. Two things of Triton's are, for the compile's length only: tl.tensor's
    forwarding methods (x.sum(), in_tensor_methods()), and InterpretedFunction.__call__ (_front_end),
    which raises _NotStoodIn, so that a function these stand-ins miss (one held by a class) lets the
    kernel pass instead of being blamed."""

    def __init__(self):
        self._made = {}             # an interpreter's function (its fn) or a module -> its stand-in
        self._modules_made = set()

    def of(self, value):
        from triton.runtime.interpreter import InterpretedFunction

        if isinstance(value, InterpretedFunction):
            return self._made.get(value.fn) or self._make(value)
        if isinstance(value, types.ModuleType) and value not in self._modules_made:
            if value not in self._made:
                self._made[value] = self._module(value)
            return self._made[value]
        return value

    def _module(self, module):
        """A module read through the stand-ins. A plain module (the compiler takes modules of that type
        only) with a module-level __getattr__ (PEP 562) and nothing else: every name falls to it."""
        made = types.ModuleType(module.__name__)
        made.__getattr__ = lambda name: self.of(getattr(module, name))
        self._modules_made.add(made)
        return made

    def _make(self, interpreted):
        from triton.runtime.jit import JITFunction

        stand_ins = self

        class StandIn(JITFunction):
            _view = None

            @property
            def __globals__(self):
                if self._view is None:
                    self._view = {k: stand_ins.of(v) for k, v in self.fn.__globals__.items()}
                return self._view

            @__globals__.setter
            def __globals__(self, value):   # JITFunction.__init__ sets it: the view above stands
                pass

            def get_capture_scope(self):
                cells = zip(self.fn.__code__.co_freevars, self.fn.__closure__ or ())
                return self.__globals__ | {name: stand_ins.of(cell.cell_contents) for name, cell in cells}

        made = self._made[interpreted.fn] = StandIn(interpreted.fn, **_jit_options(interpreted))
        return made

    @contextlib.contextmanager
    def in_tensor_methods(self):
        """tl.tensor's methods that forward to an interpreted function (x.sum(), x.max()), swapped for
        the stand-in (as Triton itself sets them when not interpreting) for the block's length."""
        import triton.language as tl
        from triton.runtime.interpreter import InterpretedFunction

        swapped = {}
        for name, method in list(vars(tl.tensor).items()):
            cells = [c.cell_contents for c in getattr(method, "__closure__", None) or ()]
            interpreted = [c for c in cells if isinstance(c, InterpretedFunction)]
            if interpreted:
                swapped[name] = method
                setattr(tl.tensor, name, self.of(interpreted[0]))
        try:
            yield
        finally:
            for name, method in swapped.items():
                setattr(tl.tensor, name, method)


def _jit_options(interpreted):
    """The options the kernel was given to @triton.jit (do_not_specialize, ...) that JITFunction takes."""
    from triton.runtime.jit import JITFunction

    accepted = inspect.signature(JITFunction.__init__).parameters
    return {k: v for k, v in interpreted.kwargs.items() if k in accepted}
