"""Lesson 07: the solutions pass their checks, typical mistakes fail them, and the counters count right."""

import importlib
import json
import pathlib
import re

import jax
import jax.numpy as jnp
import pytest
import torch
import torch.nn.functional as F

from helpers import check
from helpers.check import CheckFailed, NotDone
from helpers.exercises import lesson07 as spec
from helpers.solutions import load_solution

lesson07 = load_solution("07")
RECORDED = pathlib.Path(spec.__file__).parents[1] / "recorded" / "inductor_gpu" / "summary.json"


def test_solutions_pass():
    check("no_graph_breaks", lesson07.gelu_residual_fixed)
    check("inductor_kernels", lesson07.predicted_kernels)
    check("xla_fusions", lesson07.xla_fusion_count)


@pytest.mark.parametrize("name", ["no_graph_breaks", "inductor_kernels", "xla_fusions"])
def test_stubs_are_not_done(name):
    def stub(*args):
        raise NotImplementedError("write it")
    with pytest.raises(NotDone):
        check(name, stub)


def _with_breaks(x, residual, gate):  # the lesson's function: a data-dependent branch and .item()
    h = F.gelu(x)
    if h.abs().max() > 10:
        h = h.clamp(-10.0, 10.0)
    scale = torch.sigmoid(gate).mean().item()
    return residual + scale * h


def test_the_reference_is_one_graph():
    report = spec.graph_breaks(spec.gelu_residual_reference, *spec._residual_cases()[1].args)
    assert report.graph_count == 1 and report.graph_break_count == 0


def test_graph_breaks_fail_with_their_lines():
    with pytest.raises(CheckFailed, match=r"(?s)graph break.*\.item\(\)"):
        check("no_graph_breaks", _with_breaks)


def test_dropping_the_clamp_fails():
    with pytest.raises(CheckFailed, match="off by more than"):
        check("no_graph_breaks", lambda x, r, g: r + torch.sigmoid(g).mean() * F.gelu(x))


def test_a_wrong_prediction_says_which_way_not_the_counts():
    with pytest.raises(CheckFailed, match="fewer kernels than you predicted") as caught:
        check("inductor_kernels", lambda: {"generated": 3, "library": 1})  # one kernel per operation
    assert "library" not in str(caught.value)  # the library count was right: nothing said about it
    said = str(caught.value).split("':", 1)[1].replace("lesson 02", "")
    assert not re.search(r"\d", said), "the message gives a count away"


def test_a_prediction_must_hold_whole_numbers():
    with pytest.raises(CheckFailed, match="whole number"):
        check("inductor_kernels", lambda: {"generated": True, "library": True})  # True == 1 in Python


def test_counting_the_word_fusion_fails():
    def count_word(fn, *args):
        return jax.jit(fn).lower(*args).compile().as_text().count("fusion")
    with pytest.raises(CheckFailed, match="where ENTRY has"):
        check("xla_fusions", count_word)


@pytest.mark.parametrize("why, message", [
    ("counts the word 'fusion' in the whole module", "wherever it appears"),
    ("counts fusion instructions in every computation, not only ENTRY", "every computation"),
    ("counts ENTRY's lines that mention fusion", "lines that mention"),
])
def test_a_miscount_is_named_when_one_slip_gives_it(monkeypatch, why, message):
    """The count is recomputed the way each usual slip would: the one that gives the answer is named."""
    from mutants.lesson07 import WRONG

    monkeypatch.setattr(importlib.import_module("helpers.check"), "MORE_CASES_S", 0.0)
    (wrong,) = [w for w in WRONG if (w.exercise, w.why) == ("xla_fusions", why)]
    with pytest.raises(CheckFailed, match=message):
        check("xla_fusions", wrong.fn)


def test_cases_hold_a_tuple_shaped_root_fusion_and_fusions_outside_entry():
    hlo = {c.args[0].__name__: spec.optimized_hlo(*c.args) for c in spec._jax_cases()}
    root = [line for line in spec.entry_computation(hlo["top1_jax"]).splitlines() if "ROOT" in line]
    assert re.search(r"ROOT %\S+ = \(.*\) fusion\(", root[0])
    everywhere = len(re.findall(r" fusion\(", hlo["branch_jax"]))
    assert everywhere > spec.fusion_count(hlo["branch_jax"]) > 0


def test_fusion_count_reads_only_opcodes():
    hlo = """HloModule m

%fused_computation (p: f32[4]) -> f32[4] {
  ROOT %e = f32[4]{0} exponential(%p)
}

ENTRY %main (x: f32[4]) -> (f32[4], f32[]) {
  %x = f32[4]{0} parameter(0), metadata={op_name="ynn_fusion"}
  %exp_fusion = f32[4]{0} fusion(%x), kind=kLoop, calls=%fused_computation
  %multi = (f32[4]{0}, f32[]) fusion(%exp_fusion), kind=kInput, calls=%fused_computation
  %gte = f32[] get-tuple-element(%multi), index=1
  ROOT %tuple = (f32[4]{0}, f32[]) tuple(%exp_fusion, %gte)
}
"""
    assert spec.fusion_count(hlo) == 2  # a tuple-shaped (multi-output) fusion counts too


@pytest.mark.parametrize("why, message", [
    ("counts the instructions whose name ends in 'fusion'", "a name is only a name"),
    ("counts only the fusions of kind kLoop", "of any kind"),
])
def test_a_miscount_by_name_or_kind_is_named(monkeypatch, why, message):
    from mutants.lesson07 import WRONG

    monkeypatch.setattr(importlib.import_module("helpers.check"), "MORE_CASES_S", 0.0)
    (wrong,) = [w for w in WRONG if (w.exercise, w.why) == ("xla_fusions", why)]
    with pytest.raises(CheckFailed, match=message):
        check("xla_fusions", wrong.fn)


def _logged(x, residual, gate):  # the print swapped for logging: a break inside the logging module
    import logging

    scale = torch.sigmoid(gate).mean()
    logging.getLogger("lesson07").debug("gate scale %s", scale)
    return residual + scale * F.gelu(x).clamp(-10.0, 10.0)


def test_a_break_inside_a_library_names_the_line_of_the_function():
    with pytest.raises(CheckFailed, match=r"at line \d+ `logging\.getLogger") as caught:
        check("no_graph_breaks", _logged)
    assert "inside it, __init__.py" in str(caught.value)


def test_a_call_dynamo_skips_is_named_not_raised():
    from mutants.lesson07 import WRONG

    (wrong,) = [w for w in WRONG if w.why == "the mean in a helper wrapped in torch.compiler.disable"]
    with pytest.raises(CheckFailed, match=r"cannot capture your function whole.*torch\.compiler\.disable"):
        check("no_graph_breaks", wrong.fn)


def test_one_fusion_for_the_chain():
    x = jnp.ones((8, 16))
    assert lesson07.xla_fusion_count(spec.chain_jax, x, jnp.ones(16), x, 0.5) == 1


def test_inductor_kernels_reads_generated_and_library_calls():
    code = """cpp_fused_relu_0 = async_compile.cpp_pybinding(['float*'], r'''kernel''')
triton_poi_fused_add_1 = async_compile.triton('triton_poi_fused_add_1', '''kernel''', device_str='cuda')

def call(self, args):
    extern_kernels.addmm(a, b, c, alpha=1, beta=1, out=buf0)
    buf1 = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default(q, k, v, scale=0.125)
    cpp_fused_relu_0(buf0)
"""
    generated, library = spec.inductor_kernels(code)
    assert generated == ["cpp_fused_relu_0", "triton_poi_fused_add_1"]
    assert library == ["extern_kernels.addmm",
                       "torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default"]


def test_prediction_matches_what_was_recorded_on_a_gpu():
    try:
        with open(RECORDED) as f:
            recorded = json.load(f)["kernels"]
    except FileNotFoundError:
        pytest.skip("no Inductor code recorded on a GPU yet")
    counts = {key: len(names) for key, names in recorded["block"].items()}
    assert counts == lesson07.predicted_kernels(), "the prediction holds on the CPU but not on the GPU"
    assert len(recorded["chain"]["generated"]) == 1 and not recorded["chain"]["library"]


def test_a_setting_that_captures_item_does_not_hide_the_break():
    """capture_scalar_outputs, set in a cell before the check, would let Dynamo capture `.item()`: the
    check asks Dynamo with its defaults, and the break the exercise asks you to remove is still named.
    (torch's config.patch, not monkeypatch: monkeypatch's undo would delete the setting.)"""
    from mutants.lesson07 import WRONG

    (wrong,) = [w for w in WRONG if (w.exercise, w.why) == ("no_graph_breaks", "keeps .item()")]
    with torch._dynamo.config.patch(capture_scalar_outputs=True):
        with pytest.raises(CheckFailed, match="graph break"):
            check("no_graph_breaks", wrong.fn)
        assert torch._dynamo.config.capture_scalar_outputs   # the learner's setting is left as it was
