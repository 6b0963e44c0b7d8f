"""The grading harness itself: check() must pass good kernels and fail bad ones, clearly."""

import importlib

import IPython.lib.pretty
import pytest
import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from helpers import DEVICE, INTERPRET, check, exercises, passed, records
from helpers.check import (
    CheckFailed,
    KernelTimeout,
    NotDone,
    _explain_exception,
    compare_tensors,
    poisoned_allocations,
    unwritten,
)
from helpers.notebooks import defined_names
from helpers.solutions import load_solution
from helpers.traffic import eager_traffic, triton_traffic

lesson01 = load_solution("01")
check_module = importlib.import_module("helpers.check")  # the module (helpers.check is the function)


def launcher(kernel):
    """A vector-add launcher around any kernel with add_kernel's signature."""
    def run(x, y):
        x, y = x.contiguous(), y.contiguous()
        out = torch.empty_like(x)
        kernel[(triton.cdiv(out.numel(), 256),)](x, y, out, out.numel(), BLOCK=256)
        return out
    return run


@triton.jit
def untouched_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pass


@triton.jit
def no_mask_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) + tl.load(y_ptr + offs))


@triton.jit
def short_mask_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n - 1  # forgets the last element
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def subtract_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) - tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def nan_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + tl.load(y_ptr + offs, mask=mask) + tl.log(x - x - 1.0), mask=mask)


@triton.jit
def endless_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    i = 0
    while i < 1:
        i = i * 1


def test_solutions_pass():
    check("vector_add", lesson01.add)
    check("axpy", lesson01.axpy)


def test_untouched_stub_is_not_done():
    with pytest.raises(NotDone, match="not done yet"):
        check("vector_add", launcher(untouched_kernel))


def test_raising_stub_is_not_done():
    def stub(x, y):
        raise NotImplementedError("write add")
    with pytest.raises(NotDone, match="write add"):
        check("vector_add", stub)


@pytest.fixture
def in_jupyter(monkeypatch):
    """check() as it runs inside a Jupyter kernel: what it displays is collected, not shown."""
    shown = []
    monkeypatch.setattr(check_module, "_in_jupyter", lambda: True)
    monkeypatch.setattr(check_module, "_display", shown.append)
    return shown


def test_in_jupyter_an_unfinished_exercise_shows_a_box_records_not_done_and_goes_on(
        in_jupyter, _private_results_file, capsys):
    def stub(a, x, y):
        raise NotImplementedError("write axpy")
    assert check("axpy", stub) is None  # no exception: Run All goes on
    assert records.latest(_private_results_file)["axpy"]["status"] == "not done"
    [box] = in_jupyter
    assert isinstance(box, NotDone)
    page = box._repr_html_()
    assert "Exercise 2 of lesson 01, axpy: not done yet." in page and "write axpy" in page
    assert "Write the exercise cell above, run it, then run this check again." in page
    text = IPython.lib.pretty.pretty(box)  # the text/plain form, for a front end without HTML
    assert text.startswith("· Exercise 2 of lesson 01, axpy: not done yet.\n  write axpy\n  Write the")
    assert not passed("axpy")
    assert capsys.readouterr().out == "· needs exercise 2 (axpy): finish it, then run this cell again.\n"


def test_in_jupyter_a_failing_answer_still_raises(in_jupyter):
    check("axpy", lesson01.axpy)
    assert passed("axpy")
    with pytest.raises(CheckFailed) as caught:
        check("axpy", lambda a, x, y: a * x - y)
    assert not isinstance(caught.value, NotDone) and not in_jupyter
    assert not passed("axpy"), "a check that fails forgets the earlier pass"


def test_passed_names_every_exercise_still_missing(capsys):
    check("vector_add", lesson01.add)
    with pytest.raises(NotDone):
        check("axpy", lambda a, x, y: None)
    assert passed("vector_add") and not passed("vector_add", "axpy")
    said = capsys.readouterr().out
    assert said.endswith("· needs exercise 2 (axpy): finish it, then run this cell again.\n")


@pytest.mark.skipif(not INTERPRET, reason="only the interpreter can see out-of-bounds accesses")
def test_out_of_bounds_is_caught_and_named():
    with pytest.raises(CheckFailed, match=r"no_mask_kernel loaded out of bounds.*x_ptr \+ \[1, 2"):
        check("vector_add", launcher(no_mask_kernel))


def test_unwritten_elements_are_reported():
    with pytest.raises(CheckFailed, match="elements were (never )?written"):
        check("vector_add", launcher(short_mask_kernel))


def test_wrong_values_show_the_worst_error():
    with pytest.raises(CheckFailed, match="worst at"):
        check("vector_add", launcher(subtract_kernel))


def test_nan_is_reported_as_nan_not_as_unwritten():
    with pytest.raises(CheckFailed, match="NaN"):
        check("vector_add", launcher(nan_kernel))


def test_wrong_shape_and_none_are_reported():
    with pytest.raises(CheckFailed, match="shape"):
        check("vector_add", lambda x, y: torch.cat([lesson01.add(x, y)] * 2))
    with pytest.raises(NotDone, match="returned None"):
        check("vector_add", lambda x, y: None)


def test_modifying_an_input_is_reported():
    def sneaky(x, y):
        out = lesson01.add(x, y)
        x += 1
        return out
    with pytest.raises(CheckFailed, match="changed its input"):
        check("vector_add", sneaky)


@pytest.mark.skipif(not INTERPRET, reason="an endless GPU kernel would hold the GPU")
def test_endless_kernel_times_out(monkeypatch):
    monkeypatch.setattr(exercises.get("vector_add"), "timeout_s", 1.0)
    with pytest.raises(KernelTimeout, match="still running"):
        check("vector_add", launcher(endless_kernel))


def test_results_are_recorded(_private_results_file):
    check("axpy", lesson01.axpy)
    assert records.latest(_private_results_file)["axpy"]["status"] == "pass"
    with pytest.raises(CheckFailed):
        check("axpy", lambda a, x, y: a * x - y)
    assert records.latest(_private_results_file)["axpy"]["status"] == "fail"


def test_damaged_results_file_is_tolerated(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"exercise": "a", "status": "pass"}\nnot json\n{"exercise": "b"\n')
    assert list(records.latest(path)) == ["a"]


def test_unknown_exercise_lists_the_known_ones():
    with pytest.raises(KeyError, match="vector_add"):
        check("no_such_exercise", lesson01.add)


def test_poison_marks_fresh_allocations_only():
    with poisoned_allocations():
        fresh = torch.empty(5)
        zeros = torch.zeros(5)
    assert unwritten(fresh).all() and not unwritten(zeros).any()
    assert not unwritten(torch.tensor([float("nan")])).any()  # a computed NaN is not poison


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_tolerance_follows_the_dtype(dtype):
    ref = torch.randn(1000, dtype=torch.float64)
    assert compare_tensors(ref.to(dtype), ref, (1e-3, 1e-3) if dtype == torch.float16 else
                           (8e-3, 8e-3) if dtype == torch.bfloat16 else (1e-5, 1e-5), dtype=dtype) is None
    assert compare_tensors((ref + 0.1).to(dtype), ref, (1e-3, 1e-3), dtype=dtype) is not None
    assert "dtype" in compare_tensors(ref.to(dtype), ref, (1, 1), dtype=torch.float64)


def test_traffic_meter_counts_eager_ops_and_kernel_bytes():
    x, b = torch.randn(10, 100, device=DEVICE), torch.randn(100, device=DEVICE)
    eager = eager_traffic(lambda x, b: torch.relu(x + b) * 2.0, x, b)
    assert eager.kernels == 3
    assert eager.bytes == 4 * ((1000 + 100 + 1000) + 2000 + 2000)
    v = torch.randn(1000, device=DEVICE)
    fused = triton_traffic(lesson01.add, v, v)
    assert (fused.kernels, fused.bytes_loaded, fused.bytes_stored) == (1, 8000, 4000)


def test_defined_names_reads_top_level_definitions():
    src = "import x\n@dec\ndef f():\n    y = 1\nclass C: pass\nA, B = 1, 2\nZ = 3\n"
    assert defined_names(src) == ["f", "C", "Z"]


def test_largest_tensor_sees_every_op_including_backward():
    from helpers.traffic import largest_tensor

    x = torch.randn(30, 20, device=DEVICE, requires_grad=True)
    with largest_tensor() as seen:
        (x @ x.t()).sum().backward()
    assert seen.numel == 30 * 30 and seen.shape == (30, 30)


# ---------------------------------------------------------------- the hardened contract


def _add_with(kernel, block=256):
    """A vector-add launcher around `kernel`, with its own output."""
    def run(x, y):
        x, y = x.contiguous(), y.contiguous()
        out = torch.empty_like(x)
        kernel[(triton.cdiv(out.numel(), block),)](x, y, out, out.numel(), BLOCK=block)
        return out
    return run


def test_pure_pytorch_is_not_a_kernel():
    with pytest.raises(CheckFailed, match="no Triton kernel ran"):
        check("vector_add", lambda x, y: x + y)


def test_output_dtype_comes_from_the_reference():
    with pytest.raises(CheckFailed, match="dtype torch.bfloat16, expected torch.float32"):
        check("vector_add", lambda x, y: lesson01.add(x, y).to(torch.bfloat16))
    with pytest.raises(CheckFailed, match="dtype torch.int32, expected torch.float32"):
        check("vector_add", lambda x, y: lesson01.add(x, y).to(torch.int32))


def test_forgotten_return_after_a_launch_is_a_failure_not_a_stub():
    def no_return(x, y):
        lesson01.add(x, y)
    with pytest.raises(CheckFailed, match="returned None: `return` the output") as caught:
        check("vector_add", no_return)
    assert not isinstance(caught.value, NotDone)


def test_returning_an_input_is_aliasing():
    def in_place(x, y):
        lesson01.add(x, y)
        return y
    with pytest.raises(CheckFailed, match="shares memory with input #1"):
        check("vector_add", in_place)


def test_a_write_past_the_end_of_an_output_is_caught_without_the_interpreter():
    def overrun(x, y):
        out = lesson01.add(x, y)
        past = torch.empty_like(x)  # guarded: writing one element past it lands in its guard band
        past.copy_(out)
        past.as_strided((past.numel() + 1,), (1,))[-1] = 0.0
        return past
    with pytest.raises(CheckFailed, match=r"wrote 1 element\(s\) past the end of a tensor of shape"):
        check("vector_add", overrun)


def test_a_write_around_an_input_is_caught():
    def scribble(x, y):
        x.as_strided((x.numel() + 1,), (1,), x.storage_offset())[-1] = 1.0  # just past x's end
        return lesson01.add(x, y)
    with pytest.raises(CheckFailed, match="memory around its input #0"):
        check("vector_add", scribble)


def test_every_failing_case_is_listed():
    with pytest.raises(CheckFailed) as caught:
        check("vector_add", _add_with(subtract_kernel))
    assert "Also failing:" in str(caught.value) and "(5 of 5 cases)" in str(caught.value)


def test_an_exception_names_the_case_and_the_line():
    def launcher_with_assert(x, y):
        assert x.numel() % 2 == 0, "only even lengths"
        return lesson01.add(x, y)
    with pytest.raises(CheckFailed) as caught:
        check("vector_add", launcher_with_assert)
    text = str(caught.value)
    assert "case 'n=1 (a single element)'" in text and "AssertionError: only even lengths" in text
    assert "test_harness.py (in launcher_with_assert): `assert x.numel() % 2 == 0" in text


@pytest.mark.skipif(not INTERPRET, reason="only the interpreter can stop a stray load before it happens")
def test_stray_lanes_are_blamed_on_their_own_pointer():
    # x is 10 elements and y follows it in the same buffer: 1014 of the 1024 unmasked lanes of the
    # x load land inside y. Each lane is checked against the tensor its pointer came from: x.
    def run(x, y):
        both = torch.cat([x[:10], y]).contiguous()
        small_x, big_y = both[:10], both[10:]
        out = torch.empty_like(big_y)
        no_mask_kernel[(1,)](small_x, big_y, out, 10, BLOCK=1024)
        return out
    x, y = torch.randn(10), torch.randn(1024)
    with pytest.raises(Exception) as caught:
        run(x, y)
    assert "no_mask_kernel loaded out of bounds" in str(caught.value.__cause__) or \
        "no_mask_kernel loaded out of bounds" in str(caught.value)
    assert "x_ptr has 10 element(s)" in str(caught.value.__cause__ or caught.value)


@pytest.mark.skipif(not INTERPRET, reason="counts the interpreter's programs")
def test_a_slow_kernel_is_told_apart_from_an_endless_one(monkeypatch):
    monkeypatch.setattr(exercises.get("vector_add"), "timeout_s", 1.0)

    @triton.jit
    def one_per_program(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) % n   # one element per program, each element 50 times over
        tl.store(out_ptr + i, tl.load(x_ptr + i) + tl.load(y_ptr + i))

    def slow(x, y):
        x, y = x.contiguous(), y.contiguous()
        out = torch.empty_like(x)
        # tens of thousands of programs a launch, few launches: the limit strikes inside a launch, not
        # between two (where, with fifty short launches, CI once met it: "outside any kernel")
        for _ in range(3):
            one_per_program[(50 * x.numel(),)](x, y, out, x.numel(), BLOCK=1)
        return out
    with pytest.raises(KernelTimeout, match="slow, not stuck"):
        check("vector_add", slow)


def test_a_timeout_leaves_triton_language_unpatched():
    """An interpreted launch patches triton.language while it runs. A timeout can strike while it patches
    or undoes the patches: time_limit puts the language back, or every kernel compiled later in the
    process would fail (CI met that: the Gluon kernel's compile, after this file's slow kernel)."""
    from triton.runtime import interpreter as triton_interpreter

    from helpers import interpreter as course_interpreter
    from helpers.check import time_limit

    @triton.jit
    def noop(x_ptr):
        pass

    before = (tl.tensor.__dict__["__mul__"], tl.program_id, tl.core.dtype.to_ir, tl.static_range)
    with pytest.raises(KernelTimeout):
        with time_limit(0.2, "a launch stopped while it patches"):
            while True:   # patch, never undo: what a launch interrupted at the wrong moment leaves
                triton_interpreter._patch_lang(noop.fn)
    assert (tl.tensor.__dict__["__mul__"], tl.program_id, tl.core.dtype.to_ir, tl.static_range) == before
    assert set(vars(tl.tensor)) == set(course_interpreter._pristine[tl.tensor])   # nothing added stays


def test_a_limit_reached_at_the_start_of_a_later_launch_is_still_slow(monkeypatch):
    """The limit may fall on program 1 of a launch: launches that ran to the end before it say slow."""
    monkeypatch.setattr(check_module.interpreter, "progress", lambda: ("one_per_program", 1, 1001))
    assert "slow, not stuck" in check_module._timeout_message("your function", 1, 1.0, launched=3)
    assert "Look for a loop whose bound" in check_module._timeout_message("your function", 1, 1.0, launched=1)


def test_a_python_loop_that_never_ends_keeps_its_timeout_type(monkeypatch):
    monkeypatch.setattr(exercises.get("vector_add"), "timeout_s", 0.5)

    def spin(x, y):
        while True:
            pass
    with pytest.raises(KernelTimeout, match="outside any kernel"):
        check("vector_add", spin)


def test_a_kernel_that_loads_through_a_tensor_descriptor_runs():
    if not hasattr(tl, "make_tensor_descriptor"):
        pytest.skip("this Triton has no tensor descriptors")

    @triton.jit
    def desc_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        start = tl.program_id(0) * BLOCK
        x_desc = tl.make_tensor_descriptor(x_ptr, shape=[n], strides=[1], block_shape=[BLOCK])
        y_desc = tl.make_tensor_descriptor(y_ptr, shape=[n], strides=[1], block_shape=[BLOCK])
        o_desc = tl.make_tensor_descriptor(out_ptr, shape=[n], strides=[1], block_shape=[BLOCK])
        o_desc.store([start], x_desc.load([start]) + y_desc.load([start]))

    if not INTERPRET:
        triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device=DEVICE))
    x, y = torch.randn(1000, device=DEVICE), torch.randn(1000, device=DEVICE)
    out = torch.empty_like(x)
    desc_add_kernel[(triton.cdiv(1000, 128),)](x, y, out, 1000, BLOCK=128)
    torch.testing.assert_close(out, x + y)


@pytest.mark.skipif(INTERPRET, reason="on the CPU the interpreter stops the store before it happens")
def test_a_kernel_writing_past_the_end_is_caught_on_a_gpu():
    with pytest.raises(CheckFailed, match="past the end of a tensor of shape"):
        check("vector_add", launcher(no_mask_kernel))


def test_a_crashed_gpu_context_says_restart(monkeypatch):
    """Checked in the notebook's own process (COURSE_ISOLATE=0), a crash needs a restart."""
    check_module = importlib.import_module("helpers.check")
    monkeypatch.setattr(check_module, "ON_GPU", True)  # the message is about a GPU's error
    monkeypatch.setenv("COURSE_ISOLATE", "0")

    def crash(x, y):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    with pytest.raises(CheckFailed, match="restart the notebook's kernel") as caught:
        check("vector_add", crash)
    assert "Also failing" not in str(caught.value)  # nothing more runs on a broken context


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64])
def test_small_integer_allocations_are_poisoned_too(dtype):
    """Byte buffers (a tensor descriptor's scratch memory, say) get a poison that fits their type."""
    with poisoned_allocations():
        t = torch.empty(64, dtype=dtype, device=DEVICE)
    assert unwritten(t).all()
    t[:3] = 1
    assert unwritten(t).sum() == 61


# ---------------------------------------------------------------- messages point at the learner's line
# Kernels a learner plausibly writes wrong. Each message must name this file, the kernel and its line.


@triton.jit
def sum_on_a_1d_block_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    # a 1-D block has only axis 0
    total = tl.sum(x, axis=1)
    tl.store(out_ptr + offs, x + total, mask=mask)


@triton.jit
def dot_of_vectors_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x, y = tl.load(x_ptr + offs, mask=mask), tl.load(y_ptr + offs, mask=mask)
    # tl.dot multiplies 2-D tiles
    tl.store(out_ptr + offs, tl.dot(x, y), mask=mask)


@triton.jit
def outer_sum_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x, y = tl.load(x_ptr + offs, mask=mask), tl.load(y_ptr + offs, mask=mask)
    # an outer sum (BLOCK x BLOCK) stored through BLOCK pointers
    tl.store(out_ptr + offs, x[:, None] + y[None, :], mask=mask)


@triton.jit
def strided_kernel(x_ptr, y_ptr, out_ptr, n, stride_x, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs * stride_x, mask=mask)
    tl.store(out_ptr + offs, x + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def shifted_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    # one element before the start
    x = tl.load(x_ptr + offs - 1, mask=mask)
    tl.store(out_ptr + offs, x + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def unmasked_atomic_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(y_ptr + offs, mask=mask), mask=mask)
    tl.atomic_add(out_ptr + offs, tl.load(x_ptr + offs, mask=mask))


@triton.jit
def overflowing_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    # overflows to inf, and inf / inf is NaN
    big = tl.exp(x * 1000.0)
    tl.store(out_ptr + offs, x + tl.load(y_ptr + offs, mask=mask) + big / big - 1.0, mask=mask)


def _message(fn, exercise="vector_add"):
    with pytest.raises(CheckFailed) as caught:
        check(exercise, fn)
    return str(caught.value)


def _with_stride(stride_of):
    """A vector-add launcher passing `stride_of(x)` as the kernel's stride for x (after .contiguous())."""
    def run(x, y):
        stride = stride_of(x)
        x, y = x.contiguous(), y.contiguous()
        out = torch.empty_like(x)
        strided_kernel[(triton.cdiv(out.numel(), 256),)](x, y, out, out.numel(), stride, BLOCK=256)
        return out
    return run


@pytest.mark.parametrize("kernel, error, line", [
    (sum_on_a_1d_block_kernel, "ValueError: axis 1 out of bounds", "total = tl.sum(x, axis=1)"),
    (dot_of_vectors_kernel, "AssertionError", "tl.store(out_ptr + offs, tl.dot(x, y), mask=mask)"),
    (outer_sum_kernel, "ValueError", "tl.store(out_ptr + offs, x[:, None] + y[None, :], mask=mask)"),
], ids=["axis", "dot", "broadcast"])
def test_an_error_inside_a_kernel_names_the_kernel_line(kernel, error, line):
    text = _message(_add_with(kernel))
    if INTERPRET:   # the interpreter raises the error itself, inside the kernel's frame
        assert error in text
        assert f"of test_harness.py (in {kernel.__name__}): `{line}`" in text, text
    else:           # on a GPU, Triton's compiler reports it, with the kernel's line
        assert f"Triton could not compile {kernel.__name__}" in text, text
        assert f"(counting its `def` as line 1): `{line}`" in text, text


@pytest.mark.skipif(not INTERPRET, reason="only the interpreter can see out-of-bounds accesses")
def test_a_missing_mask_is_named_at_its_line_and_advised_to_mask():
    text = _message(launcher(no_mask_kernel))
    assert "within one block of the end and 1 is not a multiple of the block (256): mask the lanes" in text
    assert "(in no_mask_kernel): `tl.store(out_ptr + offs, tl.load(x_ptr + offs) + tl.load(y_ptr + offs))`" \
        in text


@pytest.mark.skipif(not INTERPRET, reason="only the interpreter can see out-of-bounds accesses")
def test_a_wrong_stride_on_a_strided_case_is_advised_to_check_the_strides():
    # The mask is right; the stride of the original view (2) is used on the contiguous copy.
    text = _message(_with_stride(lambda x: x.stride(0)))
    assert "case 'n=1501, strided views" in text and "mask the lanes" not in text
    assert "strided (non-contiguous) views" in text
    assert "check the mask, and the strides or offsets feeding `x_ptr`" in text
    assert "(in strided_kernel): `x = tl.load(x_ptr + offs * stride_x, mask=mask)`" in text


@pytest.mark.skipif(not INTERPRET, reason="only the interpreter can see out-of-bounds accesses")
def test_lanes_far_past_the_end_are_advised_to_check_the_strides():
    text = _message(_with_stride(lambda x: 3))  # a stride of 3 on a contiguous vector
    assert "case 'n=1001" in text and "more than one block (256 lanes)" in text
    assert "check the strides or offsets feeding `x_ptr`" in text and "mask the lanes" not in text


@pytest.mark.skipif(not INTERPRET, reason="only the interpreter can see out-of-bounds accesses")
def test_an_offset_below_zero_is_advised_to_check_the_offsets():
    text = _message(_add_with(shifted_kernel))
    assert "x_ptr + [-1]" in text and "Offsets below 0" in text and "mask the lanes" not in text
    assert "(in shifted_kernel): `x = tl.load(x_ptr + offs - 1, mask=mask)`" in text


@pytest.mark.skipif(not INTERPRET, reason="only the interpreter can see out-of-bounds accesses")
def test_an_unmasked_atomic_is_named_at_its_line():
    text = _message(_add_with(unmasked_atomic_kernel))
    assert "unmasked_atomic_kernel updated (atomic) out of bounds" in text
    assert "`tl.atomic_add(out_ptr + offs, tl.load(x_ptr + offs, mask=mask))`" in text


def test_out_of_bounds_advice_when_the_size_is_a_multiple_of_the_block():
    from helpers.interpreter import OutOfBounds
    spill = OutOfBounds("k loaded out of bounds.", arg="x_ptr", numel=1024, lowest=1024, highest=1100,
                        block_shape=(256,))
    assert "multiple of the block (256)" in spill.advice() and "size of the grid" in spill.advice()
    tile = OutOfBounds("k loaded out of bounds.", arg="a_ptr", numel=1000, lowest=1000, highest=1010,
                       block_shape=(16, 16))
    assert "Mask every dimension of the tile" in tile.advice()
    # a 2-D tile's rows past the last reach a tile's rows times the row stride: far past one tile's lanes,
    # and still a missing mask
    far = OutOfBounds("k loaded out of bounds.", arg="x_ptr", numel=1000, lowest=1000, highest=2567,
                      block_shape=(32, 32))
    assert "Mask every dimension" in far.advice() and "cannot reach that far" not in far.advice()


def test_interpreter_warnings_never_appear_during_a_check(recwarn):
    import numpy as np
    text = _message(_add_with(overflowing_kernel))
    assert "NaN" in text
    numpy_warnings = [str(w.message) for w in recwarn if issubclass(w.category, RuntimeWarning)]
    assert not numpy_warnings
    with pytest.warns(RuntimeWarning, match="overflow"):  # outside a check numpy still warns
        np.exp(np.float32(1000.0))


def test_a_compile_error_on_a_gpu_names_the_kernel_line():
    # What Triton's compiler raises for lesson 01's wrong tl.sum on a GPU: the kernel's call of tl.sum,
    # wrapping the error raised inside tl.sum (the library's own source).
    import ast

    from triton.compiler.errors import CompilationError

    kernel_src = "def add_kernel(x_ptr, out_ptr):\n    x = tl.load(x_ptr)\n    total = tl.sum(x, axis=1)\n"
    library_src = "def sum(input, axis=None):\n    return reduce(input, axis, _sum_combine)\n"

    def compile_fails(x, y):
        try:
            raise CompilationError(library_src, ast.parse(library_src).body[0].body[0],
                                   "ValueError('axis 1 out of bounds for shape [256]')")
        except CompilationError as inner:
            raise CompilationError(kernel_src, ast.parse(kernel_src).body[0].body[1], None) from inner
    text = _message(compile_fails)
    assert "Triton could not compile add_kernel: ValueError('axis 1 out of bounds for shape [256]')" in text
    assert "at line 3 of add_kernel (counting its `def` as line 1): `total = tl.sum(x, axis=1)`" in text


@pytest.fixture
def doubling_exercise(monkeypatch):
    """A small exercise of its own (out = 2 x, contiguous), with a case compared only on its end."""
    def cases():
        x = torch.randn(30, device=DEVICE)
        return [exercises.Case("30 values", (x,)),
                exercises.Case("compared on its last ten", (x,), reference_args=(x[-10:],),
                               part=lambda out: out[-10:])]
    ex = exercises.Exercise("00", "doubling", "doubling", lambda x: 2 * x, cases, contiguous_output=True)
    monkeypatch.setitem(exercises.all_exercises(), "doubling", ex)
    return ex


def test_a_case_compared_on_a_part(doubling_exercise):
    def wrong_at_the_start(x):  # the second case compares only the last ten: the first case sees it
        out = lesson01.add(x, x)
        out[0] += 1
        return out
    with pytest.raises(CheckFailed, match=r"case '30 values'") as caught:
        check("doubling", wrong_at_the_start)
    assert "Also failing" not in str(caught.value)

    def wrong_at_the_end(x):
        out = lesson01.add(x, x)
        out[-1] += 1
        return out
    with pytest.raises(CheckFailed, match=r"(?s)Also failing: 'compared on its last ten'"):
        check("doubling", wrong_at_the_end)
    check("doubling", lambda x: lesson01.add(x, x))


def test_a_case_hint_follows_its_failure(doubling_exercise):
    doubling_exercise.cases = lambda: [exercises.Case(
        "12 values", (torch.randn(12, device=DEVICE),), hint="(a hint for this case)")]
    with pytest.raises(CheckFailed, match=r"(?s)case '12 values'.*\(a hint for this case\)"):
        check("doubling", lambda x: lesson01.add(x, x) + 1)


def test_an_output_asked_contiguous_must_be(doubling_exercise):
    def strided(x):
        out = torch.empty(2 * x.numel(), device=x.device)[::2]  # every other element of a larger one
        out.copy_(lesson01.add(x, x))
        return out
    with pytest.raises(CheckFailed, match=r"not contiguous, and the lesson asks for a contiguous output"):
        check("doubling", strided)


def test_an_unguarded_case_still_sees_a_changed_input(doubling_exercise):
    doubling_exercise.cases = lambda: [exercises.Case(
        "no copies of the input", (torch.randn(40, device=DEVICE),), guard=False)]
    check("doubling", lambda x: lesson01.add(x, x))

    def doubles_in_place(x):
        out = lesson01.add(x, x)
        x.mul_(2)
        return out
    with pytest.raises(CheckFailed, match="changed its input #0"):
        check("doubling", doubles_in_place)


# ---------------------------------------------------------------- the result comes from the kernel


@triton.jit
def copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=offs < n), mask=offs < n)


def copy_out(t):
    """A contiguous copy of `t` made by a Triton kernel that only copies."""
    out = torch.empty(t.shape, dtype=t.dtype, device=t.device)
    copy_kernel[(triton.cdiv(t.numel(), 256),)](t, out, t.numel(), BLOCK=256)
    return out


@pytest.fixture
def doubling_kernel(monkeypatch):
    """out = 2 x by a kernel (x contiguous, and every other element of a longer vector)."""
    def cases():
        return [exercises.Case("31 values", (torch.randn(31, device=DEVICE),)),
                exercises.Case("every other value", (torch.randn(62, device=DEVICE)[::2],))]
    ex = exercises.Exercise("00", "doubling_kernel", "doubling", lambda x: 2 * x, cases, kernel=True)
    monkeypatch.setitem(exercises.all_exercises(), "doubling_kernel", ex)
    return ex


def test_a_result_computed_by_pytorch_beside_a_copy_kernel_is_named_at_its_line(doubling_kernel):
    def doubled(x):
        y = torch.mul(x, 2.0)
        return copy_out(y)
    with pytest.raises(CheckFailed) as caught:
        check("doubling_kernel", doubled)
    text = str(caught.value)
    assert "every case gives the right values, but PyTorch computed beside your kernel" in text, text
    assert "(in doubled): `y = torch.mul(x, 2.0)`\n    ran PyTorch's mul on the data" in text, text
    assert "This exercise asks your kernel to do that work" in text and "copy_out" not in text, text
    # allocations, fills, views and metadata are allowed (and the interpreter's own host copies)
    def right(x):
        out = torch.zeros(x.shape, device=x.device)
        n = x.numel()
        double_kernel[(triton.cdiv(n, 256),)](x.view(-1), out[:], n, x.stride(0), BLOCK=256)
        return out
    check("doubling_kernel", right)


@triton.jit
def double_kernel(x_ptr, out_ptr, n, stride, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, 2 * tl.load(x_ptr + offs * stride, mask=offs < n), mask=offs < n)


def test_copies_of_inputs_and_the_lessons_own_ops_pass_where_the_exercise_allows_them(doubling_kernel):
    def contiguous_first(x):
        return lesson01.add(x.contiguous(), x.contiguous())
    with pytest.raises(CheckFailed) as caught:
        check("doubling_kernel", contiguous_first)
    assert "PyTorch copied an input beside your kernel" in str(caught.value)
    assert "reads its inputs as they are, through their strides" in str(caught.value)
    doubling_kernel.copies_inputs = True
    check("doubling_kernel", contiguous_first)

    def upcast_after(x):    # the sum in float64, rounded back by PyTorch
        return lesson01.add(x.double(), x.double()).to(x.dtype)
    with pytest.raises(CheckFailed, match=r"ran PyTorch's \.to\(\) \(a converting copy\) on the data"):
        check("doubling_kernel", upcast_after)
    doubling_kernel.torch_ops = frozenset({"_to_copy"})
    check("doubling_kernel", upcast_after)
    doubling_kernel.torch_ops = None     # not looked at (an exercise whose structure check does it)
    check("doubling_kernel", lambda x: copy_out(2 * x))


def test_eager_work_puts_a_helpers_op_on_the_learners_line_and_skips_the_callers():
    from helpers.traffic import EagerWork

    x = torch.randn(8)
    before = x + 1      # outside the block: not counted

    def learner(x):
        return exercises.get("vector_add").reference(x, x)   # the course's code: counted on this line

    with EagerWork() as work:
        learner(x)
        before * 2      # the block's own code (the caller's frame): not counted
    ((_, _, function), ops), = work.found.items()
    assert function == "learner" and [op.name for op in ops] == ["add"], work.found


def test_an_operation_the_interpreter_lacks_is_not_blamed_on_the_learner():
    missing = AttributeError("'InterpreterBuilder' object has no attribute 'create_descriptor_reduce'")
    text = _explain_exception(missing)
    assert text.startswith("Triton's interpreter cannot run an operation your kernel uses")
    assert "create_descriptor_reduce" in text and "tl.atomic_add" in text
    assert _explain_exception(AttributeError("x has no attribute y")).startswith("it raised AttributeError")


def test_an_autotuner_with_no_gpu_to_time_on_is_explained():
    text = _explain_exception(RuntimeError("0 active drivers ([]). There should only be one."))
    assert text.startswith("Triton's autotuner chooses among its configurations by timing each on a GPU")
    assert "pick(cpu=[one config]" in text


@triton.jit
def _one_plus_tanh_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y + 0.0 * (1.0 + libdevice.tanh(x)), mask=mask)


@pytest.mark.skipif(not INTERPRET, reason="a GPU runs libdevice's functions")
def test_libdevice_in_the_interpreter_is_not_blamed_on_the_learner():
    """Triton's interpreter returns None for libdevice's functions: the learner's arithmetic on it raises
    a TypeError that says nothing of why."""
    def add(x, y):
        out = torch.empty_like(x)
        _one_plus_tanh_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
        return out

    with pytest.raises(CheckFailed) as failed:
        check("vector_add", add)
    assert "Triton's interpreter cannot run libdevice's functions" in str(failed.value)
    assert "libdevice.tanh(x)" in str(failed.value)   # the line


@triton.jit
def reshaping_kernel(x_ptr, out_ptr, REORDER: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, 32))
    y = tl.reshape(x, (4, 8), can_reorder=REORDER)
    tl.store(out_ptr + tl.arange(0, 4)[:, None] * 8 + tl.arange(0, 8)[None, :], y)


@pytest.mark.skipif(not INTERPRET, reason="the interpreter's stand-in for a GPU's reordering")
def test_a_reshape_that_may_reorder_comes_out_reversed_in_the_interpreter():
    from helpers import interpreter

    x = torch.arange(32, device=DEVICE, dtype=torch.float32)
    for reorder, want in ((False, x), (True, x.flip(0))):
        out = torch.empty(4, 8, device=DEVICE)
        before = interpreter.reorder_count()
        reshaping_kernel[(1,)](x, out, REORDER=reorder)
        assert torch.equal(out.reshape(-1), want)
        assert interpreter.reorder_count() - before == int(reorder)


def test_interpreter_only_errors_are_explained():
    from helpers.interpreter import OutOfBounds

    loop = check_module._explain_exception(AttributeError("'int' object has no attribute 'to'"))
    assert "range(...)" in loop and "tl.cast(i, tl.int64)" in loop
    wrong_tile = AssertionError("expected value shape ['64', '32'], got ['64', '64']")
    shape = check_module._explain_exception(wrong_tile)
    assert "block_shape" in shape
    through = OutOfBounds("k stored out of bounds.", arg="out_ptr", numel=100, lowest=100, highest=163,
                          block_shape=(8, 8), descriptor=True)
    assert "tensor descriptor" in through.advice() and "Mask every dimension" not in through.advice()


@triton.jit
def _two_tiles_each_kernel(out_ptr, BLOCK: tl.constexpr):
    """Program p writes blocks p and p + 2 of four (a persistent walk in miniature)."""
    for block in range(tl.program_id(0), 4, 2):
        offs = block * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, tl.full([BLOCK], 1.0, tl.float32) * block)


def test_show_programs_colours_each_program_and_writes_its_id_on_each_block():
    import matplotlib

    matplotlib.use("Agg")
    from helpers.traffic import programs_touching, show_programs

    def two_tiles_each(out):
        _two_tiles_each_kernel[(2,)](out, BLOCK=8)
        return out

    out = torch.empty(32, device=DEVICE)
    touched = programs_touching(two_tiles_each, out, arg="out_ptr")
    assert {pid[0]: sorted(offs.tolist()) for pid, offs in touched.items()} == {
        0: list(range(0, 8)) + list(range(16, 24)), 1: list(range(8, 16)) + list(range(24, 32))}
    ax = show_programs(two_tiles_each, out, arg="out_ptr", shape=(4, 8))
    labels = sorted((int(t.get_position()[1]), t.get_text()) for t in ax.texts)
    assert labels == [(0, "0"), (1, "1"), (2, "0"), (3, "1")], "one label per block, on that block's row"
