"""Shared test set-up: results of check() go to a temporary file, never to the learner's."""

import contextlib
import os

import pytest

# .ci/gpu-grading.sh on a host of several GPUs (COURSE_GPUS=n): each pytest-xdist worker takes one of
# them, round robin, before anything starts CUDA. Compiling the kernels is most of the run's time, and
# a host of n GPUs has n times the cores; the large cases (past 2**31 elements) then also get a GPU's
# memory to themselves more often.
if os.environ.get("COURSE_GPUS") and os.environ.get("PYTEST_XDIST_WORKER"):
    _worker = int(os.environ["PYTEST_XDIST_WORKER"].removeprefix("gw"))
    _gpus = os.environ.get("CUDA_VISIBLE_DEVICES", ",".join(map(str, range(int(os.environ["COURSE_GPUS"])))))
    _gpus = _gpus.split(",")   # those the run was given, if it was given some
    os.environ["CUDA_VISIBLE_DEVICES"] = _gpus[_worker % len(_gpus)]

import helpers  # noqa: E402  first of the course: picks the device before any kernel is defined

# ... and none takes more than half of its GPU's memory (the cases past 2**31 elements need 35 GiB at
# most): a wrong answer's huge allocation (PyTorch attention over such a case) fails its own check,
# not the neighbour's test that allocates next.
if os.environ.get("COURSE_GPUS") and helpers.ON_GPU:
    import torch

    torch.cuda.set_per_process_memory_fraction(0.5)


def pytest_report_header(config):
    return f"course device: {helpers.describe()}"


@pytest.fixture(autouse=True, scope="session")
def _private_results_file(tmp_path_factory):
    """check() results and the review schedule go to temporary files, never the learner's."""
    folder = tmp_path_factory.mktemp("course")
    path = folder / "results.jsonl"
    old = {name: os.environ.get(name) for name in ("COURSE_RESULTS", "COURSE_STATE")}
    os.environ["COURSE_RESULTS"] = str(path)
    os.environ["COURSE_STATE"] = str(folder / "review.json")
    yield path
    for name, value in old.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(autouse=True)
def _give_back_gpu_memory():
    """On a GPU, each test hands back the memory PyTorch cached for it: the workers sharing a GPU leave
    room for the cases past 2**31 elements (which wait for it: COURSE_LARGE_CASE_WAIT_S)."""
    yield
    if helpers.ON_GPU:
        import torch

        with contextlib.suppress(RuntimeError):   # a context a crashing kernel broke
            torch.cuda.empty_cache()
