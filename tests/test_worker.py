"""The check's worker process (helpers/worker.py): on a GPU, a learner's crashing kernel is reported on
its own case and the next check runs normally in the same session.

On the CPU the worker is asked for with COURSE_ISOLATE=1 and a crash is a process that dies; on a GPU
the kernels below really break a CUDA context (an address far from any tensor, a failed device-side
assertion, a trap, a kernel that never ends), each followed by a correct kernel checked in the same
process (.ci/gpu-grading.sh runs them on an H100 and an H200).
"""

import linecache
import os

import pytest
import torch
import triton
import triton.language as tl

from helpers import INTERPRET, check, worker
from helpers.check import CheckFailed, GPUCrashed, KernelTimeout, NotDone

# A notebook cell as IPython compiles it: a file name that exists only in linecache.
CELL = '''
@triton.jit
def cell_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def cell_vector_add(x, y):
    print("printed inside the learner's function")
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    cell_add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
    return out
'''

# The same cell as shipped: the kernel's body not written yet.
STUB = CELL.replace(CELL[CELL.index("    offs"):CELL.index("\n\n\ndef")], "    pass  # YOUR CODE HERE")


def notebook_cell(source, name, **names):
    """Run `source` as a notebook cell would be (its file only in linecache), with `names` defined by
    earlier cells; return what it defines as `name`."""
    filename = f"/tmp/ipykernel_0/{abs(hash(source))}.py"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"__name__": "__main__", "torch": torch, "triton": triton, "tl": tl, "os": os, **names}
    exec(compile(source, filename, "exec"), namespace)
    return namespace[name]


@pytest.fixture
def isolated(monkeypatch):
    monkeypatch.setenv("COURSE_ISOLATE", "1")
    yield
    worker._retire()


def test_a_function_from_a_notebook_cell_is_checked_in_the_worker(isolated, capsys):
    vector_add = notebook_cell(CELL, "cell_vector_add")
    check("vector_add", vector_add)
    first = worker._worker.process.pid
    check("vector_add", vector_add)
    assert worker._worker.process.pid == first          # the second check reuses the worker
    out = capsys.readouterr().out
    assert "printed inside the learner's function" in out  # the learner's prints reach the notebook
    assert out.count("✓ vector_add") == 2


def test_a_dying_process_is_reported_on_its_case_and_the_next_check_runs(isolated):
    def dies(x, y):
        os._exit(3)

    crashed = "(?s)failed on case .*exited with status 3.*next check runs normally"
    with pytest.raises(GPUCrashed, match=crashed):
        check("vector_add", dies)
    check("vector_add", notebook_cell(CELL, "cell_vector_add"))


def test_a_function_the_worker_cannot_receive_is_checked_in_process(isolated):
    import threading

    lock = threading.Lock()          # cannot be pickled: the check runs here instead
    add = notebook_cell(CELL, "cell_vector_add")

    def vector_add(x, y):
        with lock:
            return add(x, y)
    check("vector_add", vector_add)


def test_an_untouched_stub_from_a_notebook_cell_is_not_done(isolated):
    with pytest.raises(NotDone):
        check("vector_add", notebook_cell(STUB, "cell_vector_add"))


def test_wrong_answers_are_reported_as_in_process(isolated):
    with pytest.raises(CheckFailed, match="failed on case"):
        check("vector_add", notebook_cell(CELL.replace(" + tl.load(y", " - tl.load(y"), "cell_vector_add"))


def test_a_message_from_the_worker_quotes_the_cells_line(isolated):
    kernel = notebook_cell(CELL, "cell_add_kernel")   # the kernel in one cell, the function in another
    wrapper = notebook_cell('''
def cell_vector_add(x, y):
    x = x * 1.0  # PyTorch beside the kernel
    out = torch.empty_like(x)
    cell_add_kernel[(triton.cdiv(x.numel(), 256),)](x, y.contiguous(), out, x.numel(), BLOCK=256)
    return out
''', "cell_vector_add", cell_add_kernel=kernel)
    with pytest.raises(CheckFailed, match=r"`x = x \* 1.0  # PyTorch beside the kernel`"):
        check("vector_add", wrapper)


# ---------------------------------------------------------------- real crashes, on a GPU

gpu_only = pytest.mark.skipif(INTERPRET, reason="a CUDA context can only break on a GPU")

CRASHES = {
    "far_read": '''
@triton.jit
def crash_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    far = offs.to(tl.int64) + (1 << 40)           # a terabyte past x: no guard band reaches there
    tl.store(out_ptr + offs, tl.load(x_ptr + far), mask=offs < n)
''',
    "device_assert": '''
@triton.jit(debug=True)
def crash_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.device_assert(offs < 0, "never true")
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)
''',
    "trap": '''
@triton.jit
def crash_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    x = tl.inline_asm_elementwise("trap; mov.b32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=False,
                                  pack=1)
    tl.store(out_ptr + offs, x, mask=offs < n)
''',
}
LAUNCH = '''
def crashing(x, y):
    out = torch.empty_like(x)
    crash_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
    return out
'''


@gpu_only
@pytest.mark.parametrize("kind", CRASHES)
def test_a_crashing_kernel_is_reported_on_its_case_and_the_session_goes_on(kind):
    crashing = notebook_cell(CRASHES[kind] + LAUNCH, "crashing")
    with pytest.raises(GPUCrashed, match="(?s)failed on case '.*'.*(CUDA|process).*next check runs normally"):
        check("vector_add", crashing)
    check("vector_add", notebook_cell(CELL, "cell_vector_add"))   # a new worker, the same session
    x = torch.randn(1000, device="cuda")
    torch.testing.assert_close(x + 1, x + 1.0)                     # and this process's context is fine


ENDLESS = '''
@triton.jit
def crash_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    i = tl.load(y_ptr) * 0.0                      # never changes: the loop never ends
    while i < 1.0:
        i = i * tl.load(y_ptr, volatile=True)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)
'''


@gpu_only
def test_a_kernel_that_never_ends_is_stopped_and_the_session_goes_on(monkeypatch):
    from helpers import exercises

    monkeypatch.setattr(exercises.get("vector_add"), "timeout_s", 5.0)   # travels with the exercise
    with pytest.raises(KernelTimeout, match="still running|had not finished"):
        check("vector_add", notebook_cell(ENDLESS + LAUNCH, "crashing"))
    check("vector_add", notebook_cell(CELL, "cell_vector_add"))


def test_a_cell_that_breaks_the_context_shows_its_error_then_what_to_do(tmp_path):
    """On a GPU, helpers registers worker._with_note for RuntimeError: the cell's error is shown as
    usual (Run All stops there), followed by what to do; other errors are left alone."""
    import nbformat
    from nbclient import NotebookClient

    register = ("from IPython import get_ipython\nfrom helpers import worker\n"
                "get_ipython().set_custom_exc((RuntimeError,), worker._with_note)")
    crash = "raise RuntimeError('CUDA error: an illegal memory access was encountered')"
    sources = (register, "[1, 2][5]", "raise RuntimeError('no')", crash)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(src) for src in sources])
    NotebookClient(nb, kernel_name="python3", allow_errors=True, timeout=120).execute()
    outputs = [cell.outputs for cell in nb.cells[1:]]
    assert [o.ename for o in outputs[0]] == ["IndexError"]
    assert [o.get("ename") for o in outputs[1]] == ["RuntimeError"]          # no note
    assert outputs[2][0].ename == "RuntimeError" and "Restart the kernel" in outputs[2][1].text


def test_on_a_gpu_a_failed_check_retires_its_worker_and_starts_the_next(isolated, monkeypatch):
    """A wrong kernel may have written far outside its tensors without stopping; the next check must
    not run in what it damaged."""
    monkeypatch.setattr(worker, "ON_GPU", True)       # the notebook's side decides
    right = notebook_cell(CELL, "cell_vector_add")
    check("vector_add", right)
    first = worker._worker.process.pid
    with pytest.raises(CheckFailed, match="failed on case"):
        check("vector_add", notebook_cell(CELL.replace(" + tl.load(y", " - tl.load(y"), "cell_vector_add"))
    assert worker._worker is not None and worker._worker.process.pid != first   # started already
    check("vector_add", right)


def test_on_a_gpu_an_exercise_not_done_keeps_its_worker(isolated, monkeypatch):
    monkeypatch.setattr(worker, "ON_GPU", True)
    check("vector_add", notebook_cell(CELL, "cell_vector_add"))
    first = worker._worker.process.pid
    with pytest.raises(NotDone):
        check("vector_add", notebook_cell(STUB, "cell_vector_add"))
    assert worker._worker.process.pid == first
