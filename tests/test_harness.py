"""The grading harness itself: check() must pass good kernels and fail bad ones, clearly."""

import pytest
import torch
import triton
import triton.language as tl

from helpers import DEVICE, INTERPRET, check, exercises, records
from helpers.check import (
    CheckFailed,
    KernelTimeout,
    NotDone,
    compare_tensors,
    poisoned_allocations,
    unwritten,
)
from helpers.notebooks import defined_names
from helpers.solutions import load_solution
from helpers.traffic import eager_traffic, triton_traffic

lesson01 = load_solution("01")


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


@pytest.mark.skipif(not INTERPRET, reason="only the interpreter can see out-of-bounds accesses")
def test_out_of_bounds_is_caught_and_named():
    with pytest.raises(CheckFailed, match=r"no_mask_kernel loaded out of bounds.*x_ptr \+ \[1, 2"):
        check("vector_add", launcher(no_mask_kernel))


def test_unwritten_elements_are_reported():
    with pytest.raises(CheckFailed, match="elements were (never )?written"):
        check("vector_add", launcher(short_mask_kernel))


def test_wrong_values_show_the_worst_error():
    with pytest.raises(CheckFailed, match="largest error"):
        check("vector_add", launcher(subtract_kernel))


def test_nan_is_reported_as_nan_not_as_unwritten():
    with pytest.raises(CheckFailed, match="NaN"):
        check("vector_add", launcher(nan_kernel))


def test_wrong_shape_and_none_are_reported():
    with pytest.raises(CheckFailed, match="shape"):
        check("vector_add", lambda x, y: (x + y)[:-1] if x.numel() > 1 else torch.zeros(2, device=DEVICE))
    with pytest.raises(NotDone, match="returned None"):
        check("vector_add", lambda x, y: None)


def test_modifying_an_input_is_reported():
    def sneaky(x, y):
        x += y
        return x.clone()
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
