"""check() compiles the kernels a CPU run launched as a GPU would (helpers/gpu_compile.py): a kernel that
Triton's interpreter runs to the right values but Triton's compiler refuses fails its check on the CPU
too, and says what the compiler said. Kernels the compiler takes, with helpers, tl.sum and tensor methods,
pass (every solution and every right answer of tests/mutants/ passes through it on the CPU)."""

import pytest
import torch
import triton
import triton.language as tl
from mutants import edit

from helpers import ON_GPU, check, gpu_compile
from helpers.check import CheckFailed

pytestmark = [
    pytest.mark.skipif(ON_GPU, reason="on a GPU the kernels are compiled for real before they run"),
    pytest.mark.skipif(not gpu_compile.available(), reason="this Triton has no NVIDIA backend"),
]


def _refused(exercise, fn):
    with pytest.raises(CheckFailed) as caught:
        check(exercise, fn)
    message = str(caught.value)
    assert "every case gives the right values here, but a GPU could not compile your kernel" in message
    return message


def test_a_loop_carried_value_whose_dtype_changes_is_refused():
    """The running sum started in float16 and rescaled by float32 exponentials: NumPy makes it float32
    on the first trip and the values are right; Triton keeps a loop-carried value's type and refuses."""
    fn = edit("05", "softmax_tiled", ("    l = tl.zeros((BLOCK,), tl.float32)\n",
                                       "    l = tl.zeros((BLOCK,), tl.float16)\n"))
    message = _refused("softmax_tiled", fn)
    assert "`softmax_tiled_kernel`" in message and "Loop-carried variable l" in message, message


LAUNCH = "    BLOCK = 1024\n    axpy_kernel[(triton.cdiv(n, BLOCK),)](alpha, x, y, out, n, BLOCK=BLOCK)"


def _axpy_reading_a_global(global_block, block_value):
    """axpy whose kernel reads BLOCK from the module (set to `global_block`), not from its arguments."""
    return edit("01", "axpy",
                ("def axpy_kernel(alpha, x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):",
                 "def axpy_kernel(alpha, x_ptr, y_ptr, out_ptr, n, BLOCK_ARG: tl.constexpr):"),
                ("def axpy(alpha, x, y):", f"BLOCK = {global_block}\n\n\ndef axpy(alpha, x, y):"),
                (LAUNCH, f"    axpy_kernel[(triton.cdiv(n, {block_value}),)]"
                         f"(alpha, x, y, out, n, BLOCK_ARG=BLOCK)"))


def test_a_global_that_is_not_a_constexpr_is_refused():
    """BLOCK as a plain global of the module: the interpreter reads it as Python would; the compiler
    takes only globals that are tl.constexpr."""
    message = _refused("axpy", _axpy_reading_a_global("1024", "BLOCK"))
    assert "`axpy_kernel`" in message and "global variable BLOCK" in message, message


def test_the_same_kernel_with_a_constexpr_global_passes(capsys):
    """The right form of the last one: the global made a tl.constexpr."""
    check("axpy", _axpy_reading_a_global("tl.constexpr(1024)", "BLOCK.value"))
    assert "✓ axpy" in capsys.readouterr().out


def test_each_kernel_is_compiled_a_few_times_at_most():
    """Launches are noted by their arguments' types and constexprs, at most PER_KERNEL of each kernel,
    and only inside launches_noted()."""
    import torch
    import triton

    from helpers.solutions import load_solution

    lesson01 = load_solution("01")
    x = torch.randn(3000)
    noted = {}
    lesson01.axpy(2.0, x, x)   # outside the block: not noted
    with gpu_compile.launches_noted(noted):
        for n in (100, 3000):
            lesson01.axpy(2.0, x[:n], x[:n])           # same types and constexprs: one entry
        for block in (64, 128, 256, 512, 1024, 2048):   # six BLOCKs: PER_KERNEL entries
            lesson01.axpy_kernel[(triton.cdiv(3000, block),)](2.0, x, x, torch.empty_like(x), 3000,
                                                             BLOCK=block)
    assert len(noted) == gpu_compile.PER_KERNEL
    assert gpu_compile.problems(noted) == []


def test_a_compile_past_the_time_limit_blames_nothing(monkeypatch, capsys):
    """A compile stopped by check's limit (COMPILE_S) says nothing against the kernel: the check goes on
    as if the compiler had not been asked, here to pass a kernel it would have refused."""
    import importlib

    monkeypatch.setattr(importlib.import_module("helpers.check"), "COMPILE_S", 1e-4)
    check("softmax_tiled", edit("05", "softmax_tiled", ("    l = tl.zeros((BLOCK,), tl.float32)\n",
                                                         "    l = tl.zeros((BLOCK,), tl.float16)\n")))
    assert "✓ softmax_tiled" in capsys.readouterr().out


# ---------------------------------------------------------------- helpers reached other ways

FACTOR = 1.0   # a plain global: a kernel may not read it


@triton.jit
def scale(x, a):
    return a * x


@triton.jit
def scale_by_a_global(x, a):
    return a * x * FACTOR


@triton.jit(noinline=True)
def scale_not_inlined(x, a):
    return a * x


@triton.jit
def axpy_through(alpha, x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr, OP: tl.constexpr):
    """alpha * x + y, with alpha * x computed by OP, a @triton.jit function passed as a constexpr."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, OP(x, alpha) + y, mask=mask)


def _axpy_through(op):
    def axpy(alpha, x, y):
        assert x.shape == y.shape and x.dim() == 1, "axpy takes two vectors of the same length"
        out = torch.empty_like(x)
        axpy_through[(triton.cdiv(x.numel(), 1024),)](alpha, x.contiguous(), y.contiguous(), out, x.numel(),
                                                       BLOCK=1024, OP=op)
        return out
    return axpy


def test_a_helper_passed_as_a_constexpr_is_compiled(capsys):
    check("axpy", _axpy_through(scale))
    assert "✓ axpy" in capsys.readouterr().out


def test_a_refusal_inside_a_helper_names_the_helper_and_the_reason():
    message = _refused("axpy", _axpy_through(scale_by_a_global))
    assert "`scale_by_a_global`, which it calls" in message and "global variable FACTOR" in message, message


def test_a_noinline_helper_is_compiled_not_crashed_on():
    """Triton refuses a block passed to a noinline function here (its error pairs the helper's source with
    the caller's line): the check says so in the compiler's words, not with a traceback of its own."""
    message = _refused("axpy", _axpy_through(scale_not_inlined))
    assert "`axpy_through`" in message, message


def test_nothing_is_left_patched():
    """A refused compile and an accepted one leave triton.language and tl.tensor as they were."""
    before = {obj: dict(vars(obj)) for obj in (tl, tl.core, tl.tensor, tl.standard)}
    for op in (scale_by_a_global, scale):
        try:
            check("axpy", _axpy_through(op))
        except CheckFailed:
            pass
    for obj, attributes in before.items():
        changed = [name for name, value in vars(obj).items() if attributes.get(name, value) is not value]
        assert not changed, f"{obj}: {changed}"


def test_blocks_nest():
    outer, inner = {}, {}
    with gpu_compile.launches_noted(outer):
        with gpu_compile.launches_noted(inner):
            pass
        assert gpu_compile._noting == [outer]
    assert gpu_compile._noting == []


def test_launch_options_a_gpu_refuses_are_refused():
    """num_warps=3: the interpreter ignores num_warps; a GPU's compiler takes only powers of 2."""
    fn = edit("01", "axpy", (LAUNCH, LAUNCH[:-1] + ", num_warps=3)"))
    message = _refused("axpy", fn)
    assert "`axpy_kernel`" in message and "num_warps=3" in message and "power of 2" in message, message


def test_launch_options_a_gpu_takes_pass(capsys):
    """The same launch with num_warps=2."""
    check("axpy", edit("01", "axpy", (LAUNCH, LAUNCH[:-1] + ", num_warps=2)")))
    assert "✓ axpy" in capsys.readouterr().out


def test_an_interrupted_ptxas_prints_one_line_not_the_ptx(tmp_path, monkeypatch, capsys):
    """An interrupted cell stops ptxas too, and Triton then prints the kernel's whole PTX before it raises
    (helpers.compiled.shorten_ptxas_dumps): here a ptxas that stops itself with SIGINT, as Ctrl-C would."""
    from triton.backends.nvidia.compiler import get_ptxas
    from triton.runtime.errors import PTXASError

    real = get_ptxas(90).path
    fake = tmp_path / "ptxas"
    fake.write_text(f'#!/bin/sh\nif [ "$1" = "--version" ]; then exec {real} "$@"; fi\nkill -INT $$\n')
    fake.chmod(0o755)
    for name in ("TRITON_PTXAS_PATH", "TRITON_PTXAS_BLACKWELL_PATH"):
        monkeypatch.setenv(name, str(fake))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))   # compiled now, not found in a cache
    with pytest.raises(PTXASError, match="error code -2"):
        gpu_compile.compile_for_hopper(_double, {"x_ptr": "*fp32", "BLOCK": "constexpr"}, {"BLOCK": 128})
    printed = capsys.readouterr().out
    assert printed.count("\n") == 1 and "stopped by signal 2" in printed, printed   # not the PTX's lines


@triton.jit
def _double(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, 2 * tl.load(x_ptr + offs))
