"""Reading what Triton compiled: the few lines of each stage worth looking at.

A compiled kernel (what `kernel[grid](...)` returns on a GPU) carries its code at every stage in
`kernel.asm`: `ttir` (Triton's IR), `ttgir` (the same with GPU layouts), `llir`, `ptx` and the
binary. `compiled_excerpt` prints the kernel's registers, spills and shared memory, and for each
stage the first line holding each thing in `LOOK_FOR`, with how many lines hold it.

A thing to look for is a name, matched where a name starts: `red.global` is found in
`red.global.add.f32` and in `@%p1 red.global.add.f32`, but not inside `cp.async.ca.shared.global`
(where `red` is the end of `shared`); an IR op keeps its dialect prefix (`ttng.warp_group_dot` holds
`warp_group_dot`), and `ttg.warp_specialize` (the op) is not `tt.warp_specialize` (the attribute).

`compiler_quiet()` keeps what compilers print on their own out of the notebook: an MLIR pass that
fails prints the failing module, tens of kB, straight to file descriptor 2; inductor's max-autotune
prints its timing tables and logs the templates that do not fit.
"""

import contextlib
import functools
import io
import logging
import os
import re
import sys
import tempfile
import warnings

# What to look for in each stage: the loads and the matmul, then shared memory and asynchronous
# copies, then the instructions themselves (wgmma is Hopper's tensor-core matmul, mma.sync the
# older one; ld.global is a plain load from memory).
LOOK_FOR = {"ttir": ("tt.load", "tt.dot"),
            "ttgir": ("local_alloc", "async_copy", "warp_group_dot", "tt.dot"),
            "ptx": ("cp.async", "wgmma.mma_async", "mma.sync", "ld.global")}


@functools.lru_cache(maxsize=None)
def _pattern(needle):
    """`needle` where a name starts: not preceded by a letter, digit or underscore."""
    return re.compile(r"(?<!\w)" + re.escape(needle))


def holds(line, needle):
    """Whether `line` holds `needle` as a name (or the start of one), not inside another word."""
    return _pattern(needle).search(line) is not None


def compiled_excerpt(kernel, look_for=LOOK_FOR):
    """Registers, spills, shared memory, and the first line of each thing to look for, per stage."""
    regs, spills = getattr(kernel, "n_regs", "?"), getattr(kernel, "n_spills", "?")
    lines = [f"registers per thread: {regs}, spilled: {spills}, shared memory: {kernel.metadata.shared} B"]
    for stage, needles in look_for.items():
        code = kernel.asm[stage].splitlines()
        lines.append(f"--- {stage}: the first line of each, [how many lines hold it]")
        for needle in needles:
            found = [ln.strip() for ln in code if holds(ln, needle)]
            lines.append(f"{needle} [{len(found)}]: {found[0][:130] if found else '(none)'}")
    return "\n".join(lines)


@contextlib.contextmanager
def compiler_quiet():
    """Keep what compilers print on their own out of view for the block: file descriptor 2 (where MLIR
    and LLVM print, below Python: trying a configuration that this Triton cannot compile for this GPU
    prints the failing module), Python's sys.stderr (inductor's autotuning tables), logging and
    warnings. Errors are still raised. Yields a function that returns what was printed so far."""
    sys.stderr.flush()
    saved, python_side = os.dup(2), io.StringIO()
    logging_was = logging.root.manager.disable
    with tempfile.TemporaryFile() as kept, warnings.catch_warnings(), contextlib.redirect_stderr(python_side):
        warnings.simplefilter("ignore")
        logging.disable(logging.CRITICAL)
        os.dup2(kept.fileno(), 2)
        try:
            yield lambda: (kept.seek(0), kept.read().decode(errors="replace") + python_side.getvalue())[1]
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            logging.disable(logging_was)


# The last line of what Triton prints (to stdout, not a warning) when ptxas fails, before it raises
# PTXASError with the error, ptxas's own output and the command.
_PTXAS_DUMP_END = "please share the reproducer above with Triton project."


def shorten_ptxas_dumps():
    """When ptxas fails, Triton prints the kernel's whole PTX (thousands of lines) into the cell before
    it raises PTXASError. Here that happens mostly when a cell is interrupted while a kernel compiles:
    the signal stops ptxas too (error code -2), on a GPU and on the CPU alike (the checks compile for
    sm_90 there). In place of the print, one line saying what happened; the exception that follows
    carries ptxas's own words. Triton's NVIDIA backend calls `print` from its module, so giving the
    module a `print` of its own is enough."""
    try:
        from triton.backends.nvidia import compiler
    except Exception:  # noqa: BLE001  (no NVIDIA backend: nothing runs ptxas)
        return
    if getattr(compiler, "print", None) is _print_short:
        return
    compiler.print = _print_short


def _print_short(*args, **kwargs):
    text = " ".join(str(arg) for arg in args)
    if _PTXAS_DUMP_END not in text:
        return print(*args, **kwargs)
    code = re.search(r"error code (-?\d+)", text)
    said = "ptxas, which turns a kernel's PTX into the GPU's code, failed (the PTX is not printed here)."
    if code and int(code.group(1)) < 0:
        said += (f" It was stopped by signal {-int(code.group(1))}, as an interrupted cell stops it: run "
                 f"the cell again.")
    return print(said, **kwargs)
