"""The rule every kernel exercise states: the result comes from the kernel, not from PyTorch beside it.

For every exercise with kernel=True, a wrong answer computes the exercise's own reference in PyTorch
and copies it out through a one-line Triton copy kernel: right values, a kernel launched, and check()
must still reject it, naming the PyTorch op and the line that ran it (decoder_block_fused: its own
structure check names them, with the course's kernel to use instead).
"""

import importlib

import pytest
import torch
import triton
import triton.language as tl

from helpers import check, exercises
from helpers.check import CheckFailed

check_module = importlib.import_module("helpers.check")

KERNEL_EXERCISES = [ex.name for ex in exercises.all_exercises().values() if ex.kernel]


@pytest.fixture(autouse=True)
def _first_failure_is_enough(monkeypatch):
    monkeypatch.setattr(check_module, "MORE_CASES_S", 0.0)


@triton.jit
def copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=offs < n), mask=offs < n)


def copied_by_a_kernel(t):
    """A contiguous copy of tensor `t`, made by a Triton kernel (a kernel that only copies)."""
    src = t.detach().contiguous()
    out = torch.empty(src.shape, dtype=src.dtype, device=src.device)
    if src.numel():
        copy_kernel[(triton.cdiv(src.numel(), 1024),)](src, out, src.numel(), BLOCK=1024)
    return out


def _map(tree, fn):
    if isinstance(tree, torch.Tensor):
        return fn(tree)
    if isinstance(tree, (tuple, list)):
        return type(tree)(_map(item, fn) for item in tree)
    if isinstance(tree, dict):
        return {key: _map(item, fn) for key, item in tree.items()}
    return tree


def _upcast(x):
    return x.to(torch.float64) if isinstance(x, torch.Tensor) and x.is_floating_point() else x


def _rounded(want, form):
    """`want` (float64) in the dtypes of `form` (the reference on the case's own dtypes)."""
    if isinstance(want, torch.Tensor):
        return want.to(form.dtype)
    if isinstance(want, (tuple, list)):
        return type(want)(_rounded(w, f) for w, f in zip(want, form))
    return want


def result_copied_out(reference):
    """fn(*args): the reference computed in PyTorch (in float64, rounded to the output's dtype), each
    output tensor then copied by a Triton kernel."""
    def fn(*args, **kwargs):
        want = reference(*_map(args, _upcast), **_map(kwargs, _upcast))
        return _map(_rounded(want, reference(*args, **kwargs)), copied_by_a_kernel)
    return fn


class _Differentiable(torch.autograd.Function):
    """Forward and backward by PyTorch, each result copied out by a Triton kernel."""

    @staticmethod
    def forward(ctx, reference, n_tensors, *args):
        dtypes = [a.dtype for a in args[:n_tensors]]
        tensors = [_upcast(a.detach()).requires_grad_() for a in args[:n_tensors]]   # in float64
        with torch.enable_grad():
            out = reference(*tensors, *args[n_tensors:])
        ctx.graph, ctx.dtypes = (tensors, out), dtypes
        return copied_by_a_kernel(out.to(dtypes[0]))

    @staticmethod
    def backward(ctx, dout):
        tensors, out = ctx.graph
        grads = torch.autograd.grad(out, tensors, dout.to(out.dtype))
        return (None, None, *(copied_by_a_kernel(g.to(d)) for g, d in zip(grads, ctx.dtypes)))


def differentiable_result_copied_out(reference):
    """For an exercise that runs a backward through autograd: the same cheat, in forward and backward."""
    def fn(*args, **kwargs):
        n = sum(isinstance(a, torch.Tensor) for a in args)
        return _Differentiable.apply(lambda *a: reference(*a, **kwargs), n, *args)
    return fn


AUTOGRAD = {"attention_backward"}   # run= calls backward() on the output


@pytest.mark.parametrize("name", KERNEL_EXERCISES)
def test_a_result_computed_by_pytorch_and_copied_out_is_rejected(name, monkeypatch):
    ex = exercises.get(name)
    if ex.torch_ops is not None:   # the rule itself, not a structure check that may see it first
        monkeypatch.setattr(ex, "structure", None)
    cases = ex.cases   # a GPU's cases past 2**31 elements are more than PyTorch computes whole: the rest
    monkeypatch.setattr(ex, "cases", lambda: [case for case in cases() if case.build is None])
    cheat = (differentiable_result_copied_out if name in AUTOGRAD else result_copied_out)(ex.reference)
    with pytest.raises(CheckFailed) as caught:
        check(name, cheat)
    message = str(caught.value)
    if ex.torch_ops is None:     # the exercise's structure check says it, in its own words
        assert "PyTorch computed or copied inside your forward" in message, message
        return
    assert "every case gives the right values" in message and "on the data" in message, message
    assert "of test_rules.py (in " in message and "asks your kernel to do that work" in message, message
