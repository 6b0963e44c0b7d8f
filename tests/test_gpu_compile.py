"""check() compiles the kernels a CPU run launched as a GPU would (helpers/gpu_compile.py): a kernel that
Triton's interpreter runs to the right values but Triton's compiler refuses fails its check on the CPU
too, and says what the compiler said. Kernels the compiler takes, with helpers, tl.sum and tensor methods,
pass (every solution and every right answer of tests/mutants/ passes through it on the CPU)."""

import pytest
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
