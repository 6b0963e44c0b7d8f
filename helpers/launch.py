"""A launcher prepared once: a Triton kernel's compiled form, launched straight from Python.

`kernel[grid](*args)` runs Python at every call before anything reaches the GPU: it binds the
arguments to the kernel's signature and examines each one (a pointer's alignment to 16 bytes, an
integer equal to 1 or divisible by 16) to find the compiled variant, builds its cache key, and,
through an autotuner, builds the autotuner's key and dictionaries of arguments first. Lesson 11
prints the record that takes one launch apart, and lesson 09 the matmul's launch bill.

`Launcher(kernel)` does that work once per key: the first call at a key goes through
`kernel[grid](...)` (which compiles, and autotunes), then keeps the compiled kernel and the constexpr
values it ran with; each later call at that key hands the arguments straight to the compiled
kernel's launch function (what `compiled[grid](*args)` calls, less its own lookups): each tensor as
its address, and no profiler's hooks unless one is listening. This is what Inductor's generated code
does with its Triton kernels. With Triton 3.6 it goes one step further down, to the C launcher that
launch function calls (_direct_launch).

The key is what decides the compiled variant and the autotuner's choice: each integer's value, and
each tensor's dtype, device and whether its start is 16-byte aligned (a tensor's shape and strides
reach a kernel only as the integers passed beside it). A new sequence length is a new key, compiled or
looked up the slow way once.

An autotuner keyed on a length times every configuration again at each new length: seconds, where a
launch is microseconds. `Launcher(kernel, buckets={"n_ctx": power_of_2_bucket})` chooses once per
bucket instead. A key's bucket is what decides the autotuner's choice (the integers its `key=` names,
the tensors' dtypes, the constexprs), with n_ctx replaced by power_of_2_bucket(n_ctx): the lengths
1024 to 2047 share one. A new key whose bucket was tuned before runs that bucket's configuration, as
the autotuner runs its choice, and the autotuner is not asked (Triton still compiles the kernel if
the new key needs another specialisation).

A wrapper that checks its arguments at every call (shapes, strides, alignment) can go one step
further: what it checks decides the Launcher's key and the grid too. `launcher.bind(grid, *args)`
launches, then returns a function that repeats that launch with other arguments of the same key;
the wrapper keeps it under a key of what it checked, and checks a key's first call only (lesson 09's
`matmul`).

A host tensor descriptor is passed as it is: Triton's launch function encodes it into a TMA descriptor
at every call (its base address is the tensor's), with the box the compiled kernel was built for. So
the box a configuration's pre-hook sets on the descriptors (lesson 10's attention) matters only for
finding the compiled variant, on a key's first call; `Launcher(kernel, boxes=that_hook)` says the
pre-hook does nothing else, and later calls skip it. Any other pre-hook is refused: it would be
skipped.

Under the interpreter (no GPU) every call goes through `kernel[grid](...)`: nothing is compiled.
"""

import inspect

import torch
import triton
from triton import knobs
from triton.runtime import _allocation, driver
from triton.tools.tensor_descriptor import TensorDescriptor

from helpers import interpreter
from helpers.device import ON_GPU


def _jit_function(kernel):
    """The @triton.jit function under any autotuner or heuristics wrapped around it."""
    from triton.runtime.jit import JITFunction

    while not isinstance(kernel, JITFunction):
        kernel = kernel.fn
    return kernel


def _key_and_addresses(args, constexprs):
    """(key, the arguments as the launch function takes them), in one pass over the positional arguments.

    The key is what decides the compiled variant and the autotuner's choice: a tensor's dtype, device
    and 16-byte alignment, an integer's value (a float is passed as fp32, never specialised on), and the
    constexprs; a host tensor descriptor's dtype, device and box as given (its box is the kernel's to
    set, its shape and strides reach the kernel as integers). Anything else stays itself, and
    _check_arguments refuses it on a key's first call. The launch takes each tensor as its address: the
    key has checked its device, so the launch function need not ask the driver about the pointer again;
    a descriptor as itself (the launch function encodes it)."""
    key, addresses = [], []
    for a in args:   # a plain loop: at every launch, this measured faster than comprehensions
        if type(a) is int or a is None:
            key.append(a)
            addresses.append(a)
        elif isinstance(a, torch.Tensor):
            address = a.data_ptr()
            key.append((a.dtype, a.device, address % 16 == 0))
            addresses.append(address)
        elif type(a) is TensorDescriptor:   # its base's start is 16-byte aligned: the descriptor checks
            key.append((a.base.dtype, a.base.device, *a.block_shape))
            addresses.append(a)
        else:
            key.append(float if isinstance(a, float) else a)
            addresses.append(a)
    key += constexprs.items()
    return tuple(key), addresses


def cdiv(n, d):
    """ceil(n / d) for a grid worked out on the host at every launch. triton.cdiv gives the same, but it
    is a constexpr_function (callable inside kernels too): from Python, a call of it measured 1 to 2.5 µs
    on the hosts of an H100 and an H200 (Triton 3.6), this one about a tenth of that (lesson 11's
    record times both)."""
    return -(-n // d)


def next_power_of_2(n):
    """The smallest power of 2 >= n (n >= 1), for a block size chosen on the host at every launch: as
    triton.next_power_of_2, which is a constexpr_function too (1 to 4 µs a call from Python there)."""
    return 1 << (n - 1).bit_length() if n > 0 else 0


def power_of_2_bucket(n):
    """The power of 2 at or below n (n >= 1): the lengths that share an autotuner's choice in a Launcher's
    buckets (1024 to 2047 share 1024's)."""
    return 1 << (n.bit_length() - 1) if n > 0 else 0


def _three(grid):
    """A grid of one to three dimensions as the three numbers a launch takes."""
    return (*grid, 1, 1)[:3]


def _check_arguments(name, args, constexprs):
    for a in args:
        if not (a is None or isinstance(a, (torch.Tensor, TensorDescriptor, int, float))):
            raise TypeError(f"{name}: a prepared launch takes tensors, tensor descriptors, integers, floats "
                            f"and None, not {type(a).__name__}")
    if any(isinstance(v, torch.Tensor) for v in constexprs.values()):   # its pointer would be kept
        raise TypeError(f"{name}: a prepared launch takes its tensors by position, not by name")


def _direct_launch(compiled):
    """compiled.run(*grid, stream, function, metadata, None, None, None, *args) without its own Python,
    for a Triton whose launch function this knows (3.6, the one the course's GPUs run): a function of
    (grid x, y, z, stream, *args) that hands the arguments straight to the C launcher, with the scratch
    memory the kernel needs (if any) from the allocator, as compiled.run would. compiled.run defines
    a helper function and calls it for both kinds of scratch memory at every call; here that is worked
    out once. None for another Triton (its launch function takes its arguments in another order):
    compiled.run is called then."""
    run = compiled.run
    if not triton.__version__.startswith("3.6.") or run.profile_scratch_size:
        return None
    launch, function, metadata = run.launch, compiled.function, compiled.packed_metadata
    cooperative, pdl = run.launch_cooperative_grid, run.launch_pdl
    if not run.global_scratch_size:
        def direct(x, y, z, stream, *args):
            launch(x, y, z, stream, function, cooperative, pdl, None, None, metadata, None, None, None, *args)
        return direct
    per_program, alignment = run.global_scratch_size * run.num_ctas, run.global_scratch_align

    def direct_with_scratch(x, y, z, stream, *args):
        scratch = _allocation._allocator.get()(x * y * z * per_program, alignment, stream)
        launch(x, y, z, stream, function, cooperative, pdl, scratch, None, metadata, None, None, None, *args)
    return direct_with_scratch


class Launcher:
    """launcher = Launcher(kernel); launcher(grid, *args, **constexprs) launches kernel[grid](*args,
    **constexprs), from the second call at the same key on through its compiled form directly.
    Every runtime argument is given by position; constexprs (and options such as num_warps) by name.
    `grid` is a tuple or, as for kernel[grid], a function of a dict by name; here that dict holds the
    constexprs (the block sizes the autotuner chose): anything else a grid needs, close over it. It is
    worked out at every call (the same key can need another grid: a batch size no argument carries).
    `boxes`: the configurations' pre-hook, if it only sets host descriptors' boxes (later calls skip it).
    `buckets`: {name of an integer argument: a function of its value}, for an autotuned kernel: a new key
    in a bucket tuned before runs that bucket's configuration, without the autotuner."""

    def __init__(self, kernel, boxes=None, buckets=None):
        self.kernel = kernel
        self.boxes = boxes
        self.jit = _jit_function(kernel) if ON_GPU else None   # the interpreter has no compiled form
        # key -> what a prepared launch needs (see _prepare): the compiled kernel, its trailing values,
        #        the autotuner's list of configurations it was chosen from, the configuration, ...
        self.prepared = {}
        # bucket key -> (the autotuner's list of configurations, the one it chose from them for the first
        # key of that bucket)
        self.buckets = buckets or {}
        self.tuned = {}
        if ON_GPU:
            self.current_device, self.current_stream = (driver.active.get_current_device,
                                                        driver.active.get_current_stream)

    def __call__(self, grid, *args, **constexprs):
        if not ON_GPU:
            return self.kernel[grid](*args, **constexprs)
        if interpreter.recording():   # the interpreter runs it (a meter is reading it)
            return self._recorded_call(grid, args, constexprs)
        key, addresses = _key_and_addresses(args, constexprs)
        try:
            prepared = self.prepared.get(key)
        except TypeError:                           # an argument that cannot be part of a key
            _check_arguments(self.jit.__name__, args, constexprs)
            raise
        if prepared is None or prepared[2] is not getattr(self.kernel, "configs", None):
            # a new key, or the autotuner given another list of configurations since (a check does that)
            _check_arguments(self.jit.__name__, args, constexprs)
            self.prepared[key] = self._prepare(grid, args, constexprs, self._first_call(key, grid, args,
                                                                                        constexprs))
            return None
        compiled, trailing, _, direct, values, config = prepared
        if config is not None:      # as the autotuner keeps it: the configuration of the last launch
            self.kernel.best_config = config
        grid = _three(grid(trailing) if callable(grid) else grid)
        stream = self.current_stream(self.current_device())
        enter_hook, exit_hook = knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook
        # compiled[grid](*args) without its per-call lookups
        if enter_hook.calls or exit_hook.calls:   # a profiler is listening (proton, lesson 08)
            metadata = compiled.launch_metadata(grid, stream, *args, *values)
            compiled.run(*grid, stream, compiled.function, compiled.packed_metadata, metadata, enter_hook,
                         exit_hook, *addresses, *values)
        elif direct is not None:                  # nothing to call before and after the launch
            direct(*grid, stream, *addresses, *values)
        else:
            compiled.run(*grid, stream, compiled.function, compiled.packed_metadata, None, None, None,
                         *addresses, *values)
        interpreter.count_launch()   # the course's meters count every launch, this path's too
        return None

    def bind(self, grid, *args, **constexprs):
        """Launch as a call does, then return `again(*args)`: the same launch with other arguments of the
        same key, on the current stream, without building the key or working out the grid. The caller
        vouches for the key: tensors of the same dtypes and devices, 16-byte aligned as these are, and
        the same integers. For a wrapper that keys its calls on what its own checks read (lesson 09's
        `matmul`: dtypes, devices, shapes, strides, alignment): its checks, the key and the grid are
        then worked out once per key of its own. `again` goes through a call where that would not launch
        the compiled kernel directly (a recording, a profiler's hooks, configurations swapped in).
        None where every call goes through kernel[grid] (the interpreter)."""
        self(grid, *args, **constexprs)
        prepared = self.prepared.get(_key_and_addresses(args, constexprs)[0]) if ON_GPU else None
        if prepared is None or prepared[3] is None:   # (no direct launch function: another Triton)
            return None
        _, trailing, configs, direct, values, config = prepared
        grid_now = _three(grid(trailing) if callable(grid) else grid)

        def again(*call_args):
            hooks = knobs.runtime.launch_enter_hook.calls or knobs.runtime.launch_exit_hook.calls
            if interpreter.recording() or hooks or getattr(self.kernel, "configs", None) is not configs:
                return self(grid, *call_args, **constexprs)
            if config is not None:
                self.kernel.best_config = config
            direct(*grid_now, self.current_stream(self.current_device()),
                   *[a.data_ptr() if isinstance(a, torch.Tensor) else a for a in call_args], *values)
            interpreter.count_launch()
            return None
        return again

    def _first_call(self, key, grid, args, constexprs):
        """A key's first call, the slow way: through kernel[grid] (compiles, autotunes, launches), or,
        where the key's bucket was tuned before with the kernel's present configurations, as the
        autotuner runs its choice, without timing anything. Returns the configuration it ran (None
        without an autotuner)."""
        configs = getattr(self.kernel, "configs", None)
        bucket = self._bucket(key, len(args))
        configs_then, config = self.tuned.get(bucket, (None, None))
        if configs_then is not configs or configs is None:   # a new bucket, or other configurations since
            self.kernel[grid](*args, **constexprs)
            config = getattr(self.kernel, "best_config", None)
            self.tuned[bucket] = (configs, config)
            return config
        self._run_config(grid, args, constexprs, config)
        return config

    def _run_config(self, grid, args, constexprs, config):
        """The autotuner's last steps, with a configuration chosen before: its pre-hook, then the launch."""
        if config.pre_hook is not None:
            config.pre_hook({**dict(zip(self.jit.arg_names, args)), **constexprs, **config.all_kwargs()})
        self.kernel.best_config = config
        self.kernel.fn[grid](*args, **constexprs, **config.all_kwargs())

    def _recorded_call(self, grid, args, constexprs):
        """A call under a recording, which the interpreter runs: with the configuration a launch here would
        run, the one chosen for the key's bucket, where there is one (the autotuner may never have seen this
        key: it would time every configuration, in the interpreter). Otherwise through kernel[grid]; what
        the autotuner picks there, timed in the interpreter, is not kept as the bucket's choice."""
        configs = getattr(self.kernel, "configs", None)
        try:
            key, _ = _key_and_addresses(args, constexprs)
            configs_then, config = self.tuned.get(self._bucket(key, len(args)), (None, None))
        except TypeError:                           # an argument that cannot be part of a key
            configs_then = None
        if configs is None or configs_then is not configs:
            return self.kernel[grid](*args, **constexprs)
        return self._run_config(grid, args, constexprs, config)

    def _bucket(self, key, n_args):
        """What decides the autotuner's choice, with each bucketed argument replaced by its bucket: the
        key of the n_args positional arguments and the constexprs, less the integers the autotuner's key
        does not name (a stride, a count of heads)."""
        tuned_on = getattr(self.kernel, "keys", ())
        return tuple(self.buckets[name](v) if name in self.buckets else v
                     for name, v in zip(self.jit.arg_names, key[:n_args])
                     if type(v) is not int or name in tuned_on) + key[n_args:]

    def _prepare(self, grid, args, constexprs, config):
        """(the compiled kernel the first call ran, {name: value} of the parameters after `args`, the
        autotuner's configurations: a grader that swaps in others is launching another kernel, its
        direct launch function or None: _direct_launch, those values as a tuple, as a launch takes
        them, and `config`: the configuration that call ran, None without an autotuner)."""
        assert config is None or config.pre_hook in (None, self.boxes), \
            (f"{self.jit.__name__}: its configuration has a pre-hook, which a prepared launch would skip "
             f"(Launcher(kernel, boxes=hook) for one that only sets host descriptors' boxes)")
        options = config.all_kwargs() if config is not None else {}
        named = {p.name: p.default for p in self.jit.params if p.default is not inspect.Parameter.empty}
        named.update(zip(self.jit.arg_names, args))
        named.update(constexprs)
        named.update(config.kwargs if config is not None else {})
        trailing = {name: named[name] for name in self.jit.arg_names[len(args):]}
        if callable(grid):
            try:                                    # later calls give it the constexprs only
                grid(trailing)
            except KeyError as e:
                raise KeyError(f"{self.jit.__name__}: a prepared launch calls its grid with the constexprs "
                               f"only ({', '.join(trailing) or 'none'}), not {e}: close over that value "
                               f"instead (lambda meta: (cdiv(n, meta['BLOCK']),))") from None
            grid = grid(named)
        grid = _three(grid)
        compiled = self.jit.warmup(*args, grid=grid, **constexprs, **options)   # the one the first call ran
        compiled = compiled.result() if hasattr(compiled, "result") else compiled   # (asynchronous compiles)
        compiled._init_handles()                    # loads it, and sets compiled.run and .function
        return (compiled, trailing, getattr(self.kernel, "configs", None), _direct_launch(compiled),
                tuple(trailing.values()), config)
