"""Lesson 08: the solutions pass, the stubs are not done, the messages teach, and the recorded
profiles of every GPU still show what the lesson's prose says they show."""

import importlib

import pytest
from mutants.lesson08 import WRONG

from helpers import check
from helpers.check import CheckFailed, NotDone
from helpers.exercises.lesson08 import chip_key, diagnose_reference
from helpers.profile import recorded_devices, recorded_profile
from helpers.solutions import load_solution

lesson08 = load_solution("08")
NAMES = ["kernel_table", "gpu_idle_share", "diagnose", "roofline_point"]
DEVICES = recorded_devices()


@pytest.mark.parametrize("name", NAMES)
def test_solutions_pass(name):
    check(name, getattr(lesson08, name))


def _stub(*args):
    raise NotImplementedError("write it")


@pytest.mark.parametrize("name", NAMES)
def test_stubs_are_not_done(name):
    with pytest.raises(NotDone):
        check(name, _stub)


def test_make_profile_entry_points_are_kept():
    for name in ("ncu_targets", "profile_loop", "proton_scopes"):
        assert callable(getattr(lesson08, name))


def _wrong(why):
    return next(w.fn for w in WRONG if w.why == why)


@pytest.mark.parametrize("exercise, why, message", [
    ("kernel_table", "share of the step's wall time (first start to last end)", "counts the GPU's idle gaps"),
    ("kernel_table", "sorted by calls", "sorted by calls?"),
    ("kernel_table", "one row per event, not grouped by name", "group the events by name"),
    ("gpu_idle_share", "sum of durations (counts overlaps twice)", "counts twice"),
    ("gpu_idle_share", "the span measured from 0, not from the first start", "from the first start"),
    ("diagnose", "threshold as > 60 instead of >= 60", "'at least 60%'"),
    ("diagnose", "limiter: the resource that allows the most blocks", "allows the fewest"),
    ("roofline_point", "ns taken as µs", "nanoseconds"),
    ("roofline_point", "the course's counted bytes instead of ncu's", "counted bytes"),
])
def test_messages_name_the_mistake(monkeypatch, exercise, why, message):
    monkeypatch.setattr(importlib.import_module("helpers.check"), "MORE_CASES_S", 0.0)
    with pytest.raises(CheckFailed, match=message.replace("?", r"\?")) as caught:
        check(exercise, _wrong(why))
    assert not isinstance(caught.value, NotDone)


def test_idle_share_message_gives_no_value_away(monkeypatch):
    monkeypatch.setattr(importlib.import_module("helpers.check"), "MORE_CASES_S", 0.0)
    with pytest.raises(CheckFailed) as caught:
        check("gpu_idle_share", lambda kernels: 0.5)
    assert "too" in str(caught.value) and "the GPU's is" not in str(caught.value)


# ---------------------------------------------------------------- what the prose says of the recordings


def test_some_gpu_is_recorded():
    assert DEVICES, "helpers/recorded/profile/ holds no GPU: run `make profile` on one"


@pytest.mark.parametrize("device", DEVICES)
def test_recorded_files_the_lesson_reads(device):
    for name in ("stamp.json", "ncu.json", "proton.json", "loop.json", "ncu_details.csv",
                 *(f"block_{v}.json" for v in ("naive", "sdpa", "small", "tiny")),
                 *(f"block_{v}.trace.json.gz" for v in ("small", "sdpa"))):
        assert recorded_profile(name, device) is not None, f"{device}: {name} is missing"
    assert chip_key(device), f"{device} has no entry in helpers.roofline.CHIPS"


@pytest.mark.parametrize("device", DEVICES)
def test_recorded_blocks_show_what_the_lesson_says(device):
    naive, sdpa, small = (recorded_profile(f"block_{v}.json", device) for v in ("naive", "sdpa", "small"))
    top = lesson08.kernel_table(naive["kernels"])[:3]
    assert any(word in row["name"].lower() for row in top for word in ("softmax", "masked_fill", "copy"))
    assert lesson08.gpu_idle_share(small["kernels"]) > 0.5          # the small step waits for Python
    assert lesson08.gpu_idle_share(small["kernels"]) > lesson08.gpu_idle_share(sdpa["kernels"])
    assert naive["peak_mib"] > 2 * sdpa["peak_mib"]
    assert dict(naive["allocations_mib"]).get("aten::_softmax")


def _ncu(device):
    return {k["target"]: k for k in recorded_profile("ncu.json", device)["kernels"] if k.get("target")}


@pytest.mark.parametrize("device", DEVICES)
def test_recorded_ncu_shows_what_the_lesson_says(device):
    k = _ncu(device)
    for target in k:
        if target.startswith("tiled softmax") and "reversed" not in target:
            rev = k[target.replace(" (05)", ", pass 2 reversed (05)")]
            one_read = k[target]["counted"]["bytes"] / 2
            assert 1.9 < k[target]["dram__bytes_read.sum"] / one_read < 2.05   # reads its input twice
            assert rev["dram__bytes_read.sum"] < k[target]["dram__bytes_read.sum"]
    short, long = (k[f"tiled softmax {s} (05)"] for s in ("2048x65536", "512x262144"))
    short_r, long_r = (k[f"tiled softmax {s}, pass 2 reversed (05)"] for s in ("2048x65536", "512x262144"))
    saved = [a["dram__bytes_read.sum"] - b["dram__bytes_read.sum"]
             for a, b in ((short, short_r), (long, long_r))]
    assert saved[0] > saved[1]                                           # more saved for shorter rows
    flash = k["FlashAttention forward (06)"]
    assert flash["dram__bytes_read.sum"] < 1.1 * 0.75 * flash["counted"]["bytes"]   # K, V read about once
    assert flash["lts__t_sector_hit_rate.pct"] > 70
    matmul = k["matmul 4096^3 (04)"]
    assert matmul["dram__bytes_read.sum"] > 1.2 * (2 / 3) * matmul["counted"]["bytes"]   # A, B re-read
    bounds = {target: diagnose_reference(metrics)[0] for target, metrics in k.items()}
    streaming = [t for t in k if t.startswith(("vector add", "row softmax", "tiled softmax"))]
    assert {bounds[t] for t in streaming} == {"memory"}
    assert bounds["matmul 4096^3 (04)"] == bounds["cuBLAS matmul 4096^3"] == "compute"
    assert bounds["matmul 512^3 (04)"] == bounds["cuBLAS matmul 512^3"] == "latency"
    assert bounds["FlashAttention forward (06)"] == "latency"


@pytest.mark.parametrize("device", DEVICES)
def test_recorded_loop_has_both_directions(device):
    loop = recorded_profile("loop.json", device)
    shapes = {(r["shape"], r["reverse"]) for r in loop["rows"]}
    assert shapes == {(s, rev) for s in ("2048x65536", "512x262144") for rev in (False, True)}
