"""Recorded GPU figures: one file per GPU, rows that name their device, partial runs that never mix GPUs."""

import json

import pytest

from helpers import bench


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "RECORDED", tmp_path)
    monkeypatch.setattr(bench, "plot_all", lambda data: None)
    return tmp_path


def _save_on(monkeypatch, device, groups, ceiling=1000.0):
    monkeypatch.setattr(bench.torch.cuda, "get_device_name", lambda *a: device)
    rows = [{"group": g, "size": 1, "label": "1", "impl": "triton", "ms": 1.0, "gbps": 1.0, "tflops": 1.0,
             "metric": "GB/s", "fraction_of_copy": 0.5} for g in groups]
    return bench.save(ceiling, rows)


def test_each_gpu_has_its_own_file_and_every_row_names_it(folder, monkeypatch):
    _save_on(monkeypatch, "NVIDIA H200", ["a", "b"], 4200.0)
    _save_on(monkeypatch, "NVIDIA H100 80GB HBM3", ["a"], 3000.0)
    assert sorted(p.name for p in folder.glob("*.json")) == ["nvidia-h100-80gb-hbm3.json", "nvidia-h200.json"]
    assert bench.recorded_devices() == ["NVIDIA H200", "NVIDIA H100 80GB HBM3"]  # the preferred GPU first
    for device, copy in (("NVIDIA H200", 4200.0), ("NVIDIA H100 80GB HBM3", 3000.0)):
        for row in bench.recorded(device)["results"]:
            assert row["device"] == device and row["copy_gbps"] == copy
            assert {"date", "torch", "triton"} <= set(row)


def test_a_partial_run_replaces_only_its_groups_on_its_own_gpu(folder, monkeypatch):
    _save_on(monkeypatch, "NVIDIA H200", ["a", "b"], 4200.0)
    h200_before = json.loads(bench.device_file("NVIDIA H200").read_text())
    _save_on(monkeypatch, "NVIDIA H100 80GB HBM3", ["b"], 3000.0)  # `make bench LESSON=..` on an H100
    assert json.loads(bench.device_file("NVIDIA H200").read_text()) == h200_before
    _save_on(monkeypatch, "NVIDIA H200", ["b"], 4300.0)  # the H200 again, one group re-timed
    rows = {r["group"]: r for r in bench.recorded("NVIDIA H200")["results"]}
    assert rows["a"]["copy_gbps"] == 4200.0 and rows["b"]["copy_gbps"] == 4300.0


def test_without_a_gpu_compare_shows_every_recorded_gpu(folder, monkeypatch, capsys):
    _save_on(monkeypatch, "NVIDIA H200", ["a"], 4200.0)
    _save_on(monkeypatch, "NVIDIA H100 80GB HBM3", ["a"], 3000.0)
    monkeypatch.setattr("helpers.device.ON_GPU", False)
    rows = bench.compare("a", lambda: [])
    out = capsys.readouterr().out
    assert "recorded on NVIDIA H100 80GB HBM3" in out and "recorded on NVIDIA H200" in out
    assert rows[0]["device"] == "NVIDIA H200"


def _fake_timer(monkeypatch, times):
    """Replace measure(): each call returns the next of `times[name of the function timed]`; return the
    list of names in the order they were timed."""
    order = []

    def measure(fn, graph=False):
        name = fn.__name__
        order.append(name)
        return times[name].pop(0)
    monkeypatch.setattr(bench, "measure", measure)
    return order


def _impls(value):
    def fast():
        return value

    def slow():
        return value
    return {"fast": fast, "slow": slow}


def test_implementations_are_timed_in_turn_and_keep_their_median(monkeypatch):
    order = _fake_timer(monkeypatch, {"fast": [1.0, 9.0, 2.0], "slow": [3.0, 4.0, 50.0]})
    b = bench.Bench("g", 1, bytes=1000, flops=1, impls=_impls(bench.torch.ones(4)))
    rows = bench.time_bench(b, ceiling=1.0)
    assert order == ["fast", "slow"] * bench.ROUNDS            # in turn, not one implementation at a time
    assert {r["impl"]: r["ms"] for r in rows} == {"fast": 2.0, "slow": 4.0}   # medians: one outlier each
    assert rows[0]["rounds_ms"] == [1.0, 9.0, 2.0]


def test_an_implementation_that_disagrees_is_refused_before_any_timing(monkeypatch):
    order = _fake_timer(monkeypatch, {"fast": [1.0] * 3, "slow": [1.0] * 3})
    impls = _impls(bench.torch.ones(4))
    impls["slow"] = lambda: bench.torch.zeros(4)
    with pytest.raises(AssertionError, match="differs from fast"):
        bench.time_bench(bench.Bench("g", 1, bytes=1, flops=1, impls=impls), ceiling=1.0)
    assert order == []
