"""Lesson 01: what the checks of vector_add and axpy hold a kernel to (the harness: test_harness.py)."""

import pytest
import torch

from helpers import exercises


@pytest.mark.parametrize("name", ["vector_add", "axpy"])
def test_every_length_is_awkward_against_every_block(name):
    # odd lengths: no power-of-two block divides them, so the last program always has a ragged tail
    for case in exercises.get(name).cases():
        assert case.args[-1].numel() % 2 == 1, case.label


@pytest.mark.parametrize("name", ["vector_add", "axpy"])
def test_a_kernel_is_required(name):
    assert exercises.get(name).kernel


def test_alpha_is_random_with_both_signs():
    # a hard-coded alpha fails, and so does one that is ignored or has lost its sign
    alphas = [[case.args[0] for case in exercises.get("axpy").cases()] for _ in range(3)]
    assert all(min(a) < 0 < max(a) for a in alphas)
    assert all(0.25 <= abs(a) <= 2.5 for run in alphas for a in run)
    assert len({a for run in alphas for a in run}) > 5


def test_axpy_has_a_float16_case_and_a_tolerance_for_float16_arithmetic():
    # the learner allocates axpy's output: one allocated as float32 whatever comes in fails this case
    ex = exercises.get("axpy")
    assert any(case.args[1].dtype == torch.float16 for case in ex.cases())
    # the interpreter multiplies a float16 block by alpha in float16: 2.5 * 4 rounded there, plus the sum
    assert ex.tol[torch.float16][0] >= 2.0**-8
