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
