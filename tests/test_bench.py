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


def test_a_step_timed_back_to_back_takes_more_rounds(monkeypatch):
    """Its pace is the CPU's, which moves more: the median of BACK_TO_BACK_ROUNDS rounds."""
    times = {"fast": [9.0, 9.0, 1.0, 2.0, 3.0, 2.0, 1.0], "slow": [5.0] * 7}
    order = []

    def launched_ms(fn):
        order.append(fn.__name__)
        return times[fn.__name__].pop(0)
    monkeypatch.setattr(bench, "launched_ms", launched_ms)
    b = bench.Bench("g", 1, bytes=1000, flops=1, impls=_impls(bench.torch.ones(4)), back_to_back=True)
    rows = bench.time_bench(b, ceiling=1.0)
    assert order == ["fast", "slow"] * bench.BACK_TO_BACK_ROUNDS
    assert rows[0]["ms"] == 2.0 and rows[0]["timing"] == "launched from Python, back to back"


def test_make_bench_records_the_launch_bill_of_every_implementation(monkeypatch):
    """With launch_bill (make bench), each round times an implementation its Bench's way, back to back
    from Python, and as graph replays, in turn; the rows keep the Bench's own timing as `ms` and add
    launched_ms, graphed_ms and host_us; an implementation that cannot be captured in a CUDA graph gets
    graphed_ms None, and the table says so."""
    times = {("fast", False): [1.0, 9.0, 2.0], ("fast", True): [0.5, 0.6, 0.4],
             ("slow", False): [3.0, 4.0, 5.0], ("slow", True): [RuntimeError("capture")] * 3,
             ("fast", "loop"): [2.5, 2.4, 2.6], ("slow", "loop"): [40.0, 41.0, 39.0]}
    order = []

    def measure(fn, graph=False):
        order.append((fn.__name__, graph))
        value = times[fn.__name__, graph].pop(0)
        if isinstance(value, Exception):
            raise value
        return value

    def launched_ms(fn):
        order.append((fn.__name__, "loop"))
        return times[fn.__name__, "loop"].pop(0)
    monkeypatch.setattr(bench, "measure", measure)
    monkeypatch.setattr(bench, "launched_ms", launched_ms)
    monkeypatch.setattr(bench.torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(bench, "host_us", lambda fn: {"fast": 7.0, "slow": 30.0}[fn.__name__])
    b = bench.Bench("g", 1, bytes=1000, flops=1, impls=_impls(bench.torch.ones(4)))
    rows = bench.time_bench(b, ceiling=1.0, launch_bill=True)
    assert order == [(name, way) for name in ("fast", "slow") for way in (False, "loop", True)] * bench.ROUNDS
    fast, slow = rows
    assert (fast["ms"], fast["launched_ms"], fast["graphed_ms"], fast["host_us"]) == (2.0, 2.5, 0.5, 7.0)
    assert (slow["ms"], slow["launched_ms"], slow["graphed_ms"], slow["host_us"]) == (4.0, 40.0, None, 30.0)
    text = bench.table(rows, "title")
    assert "launched ms" in text and "host µs" in text
    assert text.splitlines()[-1].split()[-2:] == ["-", "30.0"]


def test_a_graphed_bench_records_its_launched_time_beside(monkeypatch):
    times = {("fast", True): [1.0, 1.0, 1.0], ("fast", "loop"): [5.0, 6.0, 7.0]}
    monkeypatch.setattr(bench, "measure", lambda fn, graph=False: times[fn.__name__, graph].pop(0))
    monkeypatch.setattr(bench, "launched_ms", lambda fn: times[fn.__name__, "loop"].pop(0))
    monkeypatch.setattr(bench, "host_us", lambda fn: 3.0)
    b = bench.Bench("g", 1, bytes=1, flops=1, impls={"fast": _impls(bench.torch.ones(4))["fast"]}, graph=True)
    (row,) = bench.time_bench(b, ceiling=1.0, launch_bill=True)
    assert (row["ms"], row["graphed_ms"], row["launched_ms"]) == (1.0, 1.0, 6.0)


def test_an_implementation_that_disagrees_is_refused_before_any_timing(monkeypatch):
    order = _fake_timer(monkeypatch, {"fast": [1.0] * 3, "slow": [1.0] * 3})
    impls = _impls(bench.torch.ones(4))
    impls["slow"] = lambda: bench.torch.zeros(4)
    with pytest.raises(AssertionError, match="differs from fast"):
        bench.time_bench(bench.Bench("g", 1, bytes=1, flops=1, impls=impls), ceiling=1.0)
    assert order == []


# ---------------------------------------------------------------- how a comparison is shown


def _rows(labels, impls, metric="TFLOP/s"):
    return [{"group": "g", "size": i, "label": label, "impl": impl, "ms": 1.0 + i, "gbps": 100.0,
             "tflops": 10.0 * (i + 1), "metric": metric, "fraction_of_copy": 0.1 * (i + 1),
             "date": "2026-11-25", "copy_gbps": 3000.0} for i, label in enumerate(labels) for impl in impls]


def test_table_columns_stay_aligned_however_long_the_labels():
    rows = _rows(["B1 N1024", "M,K,N=8192,4096,4096 bf16"], ["ours", "a much longer implementation name"])
    lines = bench.table(rows, "title").splitlines()
    assert lines[0] == "title"
    header, first, last = lines[1], lines[2], lines[-1]
    assert len({len(line) for line in lines[1:]}) == 1           # every row as wide as the header
    assert header.index("ms") + 2 == first.index("1.0000") + 6    # figures right-aligned under their header
    assert header.index("ms") + 2 == last.index("2.0000") + 6


def test_in_a_notebook_compare_shows_a_plot_with_the_tables_folded(folder, monkeypatch):
    _save_on(monkeypatch, "NVIDIA H200", ["a"], 4200.0)
    _save_on(monkeypatch, "NVIDIA H100 80GB HBM3", ["a"], 3000.0)
    monkeypatch.setattr("helpers.device.ON_GPU", False)
    shown = []
    monkeypatch.setattr("IPython.get_ipython", lambda: object())   # as inside a notebook's kernel
    monkeypatch.setattr("IPython.display.display", shown.append)
    bench.compare("a", lambda: [])
    (comparison,) = shown
    bundle = comparison._repr_mimebundle_()
    html, text = bundle["text/html"], bundle["text/plain"]
    assert html.startswith('<img src="data:image/png;base64,iVBOR')   # a PNG, drawn from the record
    assert "<details>" in html and "recorded on NVIDIA H200" in html and "recorded on NVIDIA H100" in html
    assert "recorded on NVIDIA H200" in text and "recorded on NVIDIA H100 80GB HBM3" in text


def test_the_plot_names_the_gpus_and_what_its_axes_measure():
    attention = {"NVIDIA H200": _rows(["B4 N4096", "B1 N16384"], ["ours", "cuDNN"]),
                 "NVIDIA H100 80GB HBM3": _rows(["B4 N4096", "B1 N16384"], ["ours", "cuDNN"])}
    fig = bench.plot("attention", attention)
    left, right = fig.axes
    assert left.get_title().startswith("NVIDIA H200")
    assert right.get_title().startswith("NVIDIA H100 80GB HBM3")
    assert left.get_ylabel() == "TFLOP/s" and left.get_xlabel() == "sequence length N (batch B)"
    assert [t.get_text() for t in left.get_xticklabels()] == ["B4 N4096", "B1 N16384"]
    copy = bench.plot("softmax", {"NVIDIA H200": _rows(["32768x1024 fp32"], ["ours", "torch"], "GB/s")})
    assert copy.axes[0].get_ylabel() == "fraction of the copy ceiling"
    assert bench.x_axis(["1024^3", "4096^3"]) == "matrix size (M = N = K)"
    roofed = bench.plot("matmul", {"NVIDIA H200": _rows(["1024^3", "2048^3"], ["cuBLAS"])},
                        roof={"NVIDIA H200": {"1024^3": 500, "2048^3": 900}})
    assert "roof" in [line.get_label() for line in roofed.axes[0].get_lines()]


def test_on_a_gpu_compare_times_now_and_shows_those_rows(monkeypatch):
    monkeypatch.setattr("helpers.device.ON_GPU", True)
    monkeypatch.setattr(bench, "_ceiling", None)
    monkeypatch.setattr(bench, "copy_ceiling", lambda: 3000.0)
    monkeypatch.setattr(bench.torch.cuda, "get_device_name", lambda *a: "NVIDIA H100 80GB HBM3")
    measured = _rows(["1024^3"], ["ours", "cuBLAS"])
    monkeypatch.setattr(bench, "time_bench", lambda b, ceiling: [r for r in measured if r["impl"] == b])
    shown = []
    monkeypatch.setattr(bench, "show", lambda group, by_gpu, titles: shown.append((group, by_gpu, titles)))
    rows = bench.compare("g", lambda: ["ours", "cuBLAS"])
    assert rows == measured
    ((group, by_gpu, titles),) = shown
    assert group == "g" and list(by_gpu) == ["NVIDIA H100 80GB HBM3"]
    assert titles["NVIDIA H100 80GB HBM3"] == \
        "g: measured now on NVIDIA H100 80GB HBM3 (copy ceiling 3000 GB/s)"
