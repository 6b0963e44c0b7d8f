"""helpers/profile.py and helpers/block.py: the profiling helpers, the decoder block, and the
recordings `make profile` wrote (every GPU has the same files, each naming its device)."""

import csv
import io
import json

import pytest
import torch

from helpers import profile
from helpers.block import SMALL, block_flops, block_input, block_weights, decoder_block

RECORDED_FILES = ["stamp.json", "ncu.json", "ncu_details.csv", "proton.json", "loop.json"] + [
    f"block_{v}{ext}" for v in ("naive", "sdpa", "small", "tiny") for ext in (".json", ".trace.json.gz")]


def test_block_attention_variants_agree():
    w = block_weights(SMALL)
    x = block_input(SMALL, 2, 40)
    naive, sdpa = decoder_block(x, w, SMALL, "naive"), decoder_block(x, w, SMALL, "sdpa")
    assert naive.shape == x.shape
    torch.testing.assert_close(naive, sdpa, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="attention must be"):
        decoder_block(x, w, SMALL, "flash")


def test_block_is_causal():
    w = block_weights(SMALL)
    x = block_input(SMALL, 1, 24)
    y = decoder_block(x, w, SMALL)
    x2 = x.clone()
    x2[:, 12:] += 1.0                       # change only the future of token 11
    torch.testing.assert_close(decoder_block(x2, w, SMALL)[:, :12], y[:, :12])


def test_block_flops_counts_the_projections():
    cfg, T = SMALL, 16
    projections = 2 * T * cfg.dim * (4 * cfg.dim + 3 * cfg.hidden)
    attention = 4 * cfg.n_heads * T * T * cfg.head_dim // 2
    assert block_flops(cfg, 1, T) == projections + attention


def test_profile_step_on_the_cpu(tmp_path):
    w = block_weights(SMALL)
    x = block_input(SMALL, 1, 16)
    prof = profile.profile_step(lambda: decoder_block(x, w, SMALL), warmup=1)
    trace = profile.save_trace(prof, tmp_path / "step.trace.json.gz")
    assert trace == profile.load_trace(tmp_path / "step.trace.json.gz")
    ops = profile.cpu_ops(trace)
    names = [op["name"] for op in ops]
    assert "aten::mm" in names or "aten::matmul" in names
    assert ops[0]["start_us"] == 0.0
    assert all(a["start_us"] + a["dur_us"] <= b["start_us"] + 1e-3 for a, b in zip(ops, ops[1:]))
    assert profile.kernel_events(trace) == [] and profile.gpu_events(trace) == []   # no GPU on the CPU
    peak = profile.memory_peak(trace, device_type=0)     # the CPU's allocations
    assert peak["peak_bytes"] > 0 and peak["live"] and all(block["ops"] for block in peak["live"])


def test_kernel_events_sorted_and_relative():
    trace = {"traceEvents": [
        {"cat": "kernel", "ph": "X", "name": "b", "ts": 1010.0, "dur": 5.0, "args": {"stream": 7}},
        {"cat": "gpu_memcpy", "ph": "X", "name": "Memcpy DtoD", "ts": 995.0, "dur": 2.0,
         "args": {"stream": 7}},
        {"cat": "kernel", "ph": "X", "name": "a", "ts": 1000.0, "dur": 4.0, "args": {"stream": 7}},
        {"cat": "cpu_op", "ph": "X", "name": "aten::mm", "ts": 990.0, "dur": 3.0},
    ]}
    assert profile.kernel_events(trace) == [                 # the kernels alone, as lesson 11 reads them
        {"name": "a", "start_us": 0.0, "dur_us": 4.0, "stream": 7},
        {"name": "b", "start_us": 10.0, "dur_us": 5.0, "stream": 7}]
    assert profile.gpu_events(trace) == [                    # all the GPU's work: the copy too
        {"name": "Memcpy DtoD", "cat": "gpu_memcpy", "start_us": 0.0, "dur_us": 2.0, "stream": 7},
        {"name": "a", "cat": "kernel", "start_us": 5.0, "dur_us": 4.0, "stream": 7},
        {"name": "b", "cat": "kernel", "start_us": 15.0, "dur_us": 5.0, "stream": 7}]


def test_short_name_keeps_what_tells_kernels_apart():
    copy = ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda("
            "at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda(float)#1}, "
            "std::array<char*, 2ul>, 4>(int)")
    assert profile.short_name(copy) == "unrolled_elementwise_kernel [direct_copy]"
    assert profile.short_name("nvjet_sm90_hsh_256x128_64x4_1x2_h_bz_coopA_TNT") == \
        "nvjet_sm90_hsh_256x128_64x4_1x2_h_bz_coopA_TNT"
    assert len(profile.short_name("x" * 80, width=20)) == 20


def test_launch_waits_follow_runtime_and_driver_launches():
    trace = {"traceEvents": [
        {"cat": "cuda_runtime", "ph": "X", "name": "cudaLaunchKernel", "ts": 100.0, "dur": 5.0,
         "args": {"correlation": 1}},
        {"cat": "cuda_driver", "ph": "X", "name": "cuLaunchKernelEx", "ts": 110.0, "dur": 5.0,
         "args": {"correlation": 2}},
        {"cat": "cuda_runtime", "ph": "X", "name": "cudaDeviceSynchronize", "ts": 120.0, "dur": 5.0,
         "args": {"correlation": 3}},
        {"cat": "kernel", "ph": "X", "name": "a", "ts": 108.0, "dur": 1.0, "args": {"correlation": 1}},
        {"cat": "gpu_memset", "ph": "X", "name": "Memset", "ts": 150.0, "dur": 1.0,
         "args": {"correlation": 2}},
    ]}
    assert profile.launch_waits(trace) == [8.0, 40.0]


def _memory(ts, addr, nbytes, tid=1):
    return {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "tid": tid, "ts": ts,
            "args": {"Addr": addr, "Bytes": nbytes, "Device Type": 1}}


def test_memory_peak_replays_allocations_and_frees():
    op = lambda name, ts, dur, dims=None: {"ph": "X", "cat": "cpu_op", "name": name, "tid": 1, "ts": ts,  # noqa: E731
                                          "dur": dur, "args": {"Input Dims": dims or [[4, 4]]}}
    trace = {"traceEvents": [
        op("aten::matmul", 0.0, 10.0, [[2, 3], [3, 4]]), op("aten::mm", 1.0, 5.0),
        op("aten::softmax", 20.0, 10.0), op("aten::add", 40.0, 5.0, [[[7, 7], [7, 7]]]),
        _memory(2.0, 0xA, 100), _memory(3.0, 0xB, 50),          # inside aten::mm
        _memory(15.0, 0xB, -50),                                # freed between operators
        _memory(22.0, 0xC, 300),                                # the peak: 400 bytes
        _memory(23.0, 0xA, -100), _memory(24.0, 0xF, -64),      # 0xF: allocated before the trace
        _memory(41.0, 0xD, 100),                                # 336 bytes: under the peak
        {**_memory(42.0, 0xE, 10_000), "args": {"Addr": 0xE, "Bytes": 10_000, "Device Type": 0}},  # the CPU's
    ]}
    peak = profile.memory_peak(trace)
    assert peak["peak_bytes"] == 400 and peak["during"] == ["aten::softmax"]
    assert peak["live"] == [{"bytes": 300, "ops": ["aten::softmax"], "input_shape": (4, 4)},
                            {"bytes": 100, "ops": ["aten::matmul", "aten::mm"], "input_shape": (2, 3)}]
    assert profile.memory_peak(trace, device_type=0)["peak_bytes"] == 10_000


def test_ncu_details_page_is_parsed():
    head = '"ID","Kernel Name","Section Name","Metric Name","Metric Unit","Metric Value","Rule Name"\n'
    rows = ['"0","k","Launch Statistics","Grid Size","","2,048",""',
            '"0","k","Occupancy","","","","SomeRule"',
            '"1","m","Compute Workload Analysis","Issue Slots Busy","%","33.91",""',
            '"0","k","Launch Statistics","Cluster Scheduling Policy","","PolicySpread",""']
    assert profile.ncu_details(head + "\n".join(rows)) == [
        {"Kernel Name": "k", "Grid Size": 2048.0, "Cluster Scheduling Policy": "PolicySpread"},
        {"Kernel Name": "m", "Issue Slots Busy": 33.91}]


def test_ncu_raw_page_is_parsed():
    names = ["ID", "Kernel Name", "gpu__time_duration.sum", "dram__bytes_read.sum",
             "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio", "something__else"]
    units = ["", "", "ns", "byte", "inst", ""]
    buf = io.StringIO()
    csv.writer(buf).writerows([["==PROF== noise"], names, units, ["0", "k", "1,500", "2048", "0.5", "x"]])
    rows, row_units = profile._ncu_raw_rows(buf.getvalue())
    assert rows == [{"Kernel Name": "k", "gpu__time_duration.sum": 1500.0, "dram__bytes_read.sum": 2048.0,
                     "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio": 0.5}]
    assert row_units["gpu__time_duration.sum"] == "ns"


def test_without_a_gpu_make_profile_lists_the_recordings(capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert profile.main([]) == 0
    assert "No CUDA GPU here" in capsys.readouterr().out


DEVICES = profile.recorded_devices()


def test_recordings_exist():
    assert DEVICES, "no profile recorded: run `make profile` on a GPU"


@pytest.mark.parametrize("device", DEVICES)
def test_every_gpu_has_every_file(device):
    folder = profile.RECORDED / profile.slug(device)
    missing = [name for name in RECORDED_FILES if not (folder / name).exists()]
    assert not missing, f"{device}: missing {missing}"
    for name in RECORDED_FILES:
        if name.endswith(".json"):
            data = json.loads((folder / name).read_text())
            assert data["device"] == device and data["date"] and data["torch"] and data["triton"], name


@pytest.mark.parametrize("device", DEVICES)
def test_recorded_ncu_names_every_target(device):
    ncu = profile.recorded_profile("ncu.json", device)
    assert "error" not in ncu, ncu.get("error")
    assert ncu["command"].startswith("ncu ") and "--clock-control none" in ncu["command"]
    assert ncu["units"]["gpu__time_duration.sum"] == "ns"
    assert ncu["units"]["dram__bytes_read.sum"] == "byte"
    for k in ncu["kernels"]:
        assert k["target"] and k["counted"]["bytes"] > 0 and k["counted"]["flops"] > 0
        assert k["gpu__time_duration.sum"] > 0 and k["dram__bytes_read.sum"] >= 0


@pytest.mark.parametrize("device", DEVICES)
def test_recorded_ncu_details_match_the_launches(device):
    kernels = profile.ncu_kernels(device)                     # asserts that both files list the same launches
    assert len(kernels) == len(profile.recorded_profile("ncu.json", device)["kernels"])
    assert all(k["Issue Slots Busy"] >= 0 for k in kernels)
    assert all(k["Elapsed Cycles"] > k["SM Active Cycles"] > 0 for k in kernels)


@pytest.mark.parametrize("device", DEVICES)
def test_recorded_block_steps(device):
    for variant in ("naive", "sdpa", "small", "tiny"):
        step = profile.recorded_profile(f"block_{variant}.json", device)
        assert step["kernels"] and step["cpu_ops"] and step["step_ms"] > 0 and step["peak_mib"] > 0
        starts = [k["start_us"] for k in step["kernels"]]
        assert starts == sorted(starts) and starts[0] == 0.0


def test_profiled_launches_are_named_after_their_targets():
    counted = {"bytes": 1, "flops": 1, "what": ""}
    # lesson 10's way: a pattern per target, each taking the consecutive launches that match it
    targets = {"ours": {"kernel": "attention_kernel", **counted}, "theirs": {"kernel": "cudnn", **counted},
               "ours again": {"kernel": "softmax", **counted}, "theirs again": {"kernel": "cudnn", **counted}}
    names = ["attention_kernel", "cudnn_fprop", "softmax_kernel", "cudnn_bprop", "cudnn_dq"]
    kernels = [{"Kernel Name": n} for n in names]
    profile._name_launches(kernels, targets)
    assert [k["target"] for k in kernels] == ["ours", "theirs", "ours again", "theirs again", "theirs again"]
    assert kernels[0]["counted"] == counted
    # lesson 08's way: no patterns, one launch per target, in order; a launch past them is nobody's
    kernels = [{"Kernel Name": n} for n in ("a", "b", "c")]
    profile._name_launches(kernels, {"first": counted, "second": counted})
    assert [k["target"] for k in kernels] == ["first", "second", None]
    assert "counted" not in kernels[2]


def test_without_ncu_the_profile_says_so(monkeypatch, tmp_path):
    import shutil

    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(profile, "stamp", dict)           # no GPU here to name
    record, details = profile.ncu_profile("08", tmp_path)
    assert record["error"] == "ncu (Nsight Compute) is not on the PATH" and details == ""


def test_the_ncu_command_names_its_lesson_sections_and_metrics():
    """What lesson 08 prints as today's command is what ncu_profile runs: the lesson's targets, every
    section and metric the lessons read, only the named kernels where patterns are given."""
    command = profile.ncu_command("10", ["attention_kernel", "cudnn"], python="python")
    assert command.startswith("ncu --profile-from-start off --clock-control none ")
    assert command.endswith(" -o ncu_report -f python -m helpers.profile --ncu-run 10")
    assert "-k regex:attention_kernel|cudnn " in command
    assert all(f"--section {s}" in command for s in profile.NCU_SECTIONS)
    assert f"--metrics {','.join(profile.NCU_EXTRA)} " in command
    assert "-k " not in profile.ncu_command("08")
