"""The mutation suite (tests/mutants/): every check rejects each wrong answer and accepts each right one."""

import importlib
import pkgutil

import mutants
import pytest

from helpers import ON_GPU, check, exercises
from helpers.check import CheckFailed, NotDone

MODULES = [importlib.import_module(f"mutants.{m.name}") for m in pkgutil.iter_modules(mutants.__path__)]
WRONG = [w for m in MODULES for w in m.WRONG]
RIGHT = [r for m in MODULES for r in m.RIGHT]


@pytest.fixture(autouse=True)
def _first_failure_is_enough(monkeypatch):
    monkeypatch.setattr(importlib.import_module("helpers.check"), "MORE_CASES_S", 0.0)


@pytest.mark.parametrize("wrong", WRONG, ids=lambda w: f"{w.exercise}: {w.why}")
def test_check_rejects(wrong):
    if wrong.gpu_only and not ON_GPU:
        pytest.skip("caught by a case that exists on a GPU only")
    if wrong.cpu_only and ON_GPU:
        pytest.skip("caught by a case that exists on the CPU only")
    with pytest.raises(CheckFailed) as caught:
        check(wrong.exercise, wrong.fn)
    assert not isinstance(caught.value, NotDone), f"a wrong answer was called 'not done': {caught.value}"
    # Triton refuses a loop-carried value whose dtype changes: such a mutant never runs on a GPU, and is
    # refused there for how it was written, not for the mistake it stands for
    assert "Loop-carried variable" not in str(caught.value), str(caught.value)
    if wrong.gpu_only:   # caught by the case past 2**31 elements, and told so (not by running out of memory)
        message = str(caught.value)
        assert "2**31" in message and "int32" in message and "the check itself failed" not in message, message


@pytest.mark.parametrize("right", RIGHT, ids=lambda r: f"{r.exercise}: {r.why}")
def test_check_accepts(right, capsys):
    check(right.exercise, right.fn)
    if ON_GPU and _gpu_gib() >= 70:  # an H100 or an H200: every case past 2**31 elements must have run
        assert "not run:" not in capsys.readouterr().out, "a case past 2**31 elements did not run"


def _gpu_gib():
    import torch

    return torch.cuda.get_device_properties(0).total_memory / 2**30


def test_every_exercise_has_its_mutants():
    short = []
    for name in exercises.all_exercises():
        wrong = sum(w.exercise == name for w in WRONG)
        right = sum(r.exercise == name for r in RIGHT)
        if wrong < 4 or right < 1:
            short.append(f"{name}: {wrong} wrong, {right} right")
    assert not short, "the mutation suite needs 4 wrong and 1 right answer per exercise: " + "; ".join(short)
