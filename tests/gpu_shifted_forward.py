"""On a Hopper GPU: lesson 10's attention forward with its unmasked loop shifted by one matrix multiply
(solutions/10_hopper_attention.py, _attend_shifted: FlashAttention-3's order, written in plain Triton),
checked and timed beside the lesson's loop and cuDNN. Not a pytest module: run it as a script,

    timeout 600 python tests/gpu_shifted_forward.py

For each shape of make bench's forward groups (16 heads; D 128 and 64, full and causal) and each
configuration below, both loops run through attention() with the autotuner given that configuration
alone, are compared with cuDNN's output, and are timed as CUDA-graph replays; the record keeps every
time and the PTX order of each loop's wgmmas, waits and exponentials (wgmma_order).
Results go to helpers/recorded/10_hopper_attention_shifted/<gpu>.json, where lesson 10 reads them (and to
$OUT/attention_shifted_gpu.json when OUT is set).
"""

import datetime
import json
import sys

import torch

import helpers  # noqa: F401  (before triton: it picks the GPU or the interpreter)
from helpers.bench import measure, write_gpu_record
from helpers.exercises import tuned_over
from helpers.solutions import load_solution

SHAPES = [(8, 2048), (4, 4096), (1, 16384)]
CONFIGS = {128: [(128, 128, 8, 2), (128, 128, 8, 3), (128, 64, 8, 3), (128, 64, 4, 2)],
           64: [(128, 64, 8, 3), (128, 64, 8, 4), (128, 128, 8, 2), (64, 64, 4, 3)]}


def say(*args):
    print(*args, flush=True)


def time_shape(lesson10, cudnn, B, N, D, causal, wrong):
    """cuDNN's time and both loops' at every configuration of CONFIGS[D] that fits (a wrong output is
    added to `wrong`)."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, 16, N, D, device="cuda", dtype=torch.float16) for _ in range(3))
    want = cudnn(q, k, v, causal)
    row = {"D": D, "causal": causal, "B": B, "N": N, "ms": {"plain": {}, "shifted": {}},
           "cudnn_ms": measure(lambda: cudnn(q, k, v, causal), graph=True)}
    for shifted in (False, True):
        for c in CONFIGS[D]:
            config = lesson10._attention_config(*c, shifted=shifted)
            name = lesson10.lesson09.describe_config(config)
            with tuned_over(lesson10.attention_kernel, [config]):
                try:
                    error = (lesson10.attention(q, k, v, causal)[0].float() - want.float()).abs().max().item()
                except Exception as e:  # noqa: BLE001  (out of shared memory: not timed)
                    say(D, causal, N, shifted, name, "not run:", str(e).splitlines()[0][:120])
                    continue
                if not error <= 2e-2:   # NaN too
                    wrong.append((D, causal, N, shifted, name, error))
                ms = measure(lambda: lesson10.attention(q, k, v, causal), graph=True)
            row["ms"]["shifted" if shifted else "plain"][name] = ms
    best = {way: min(times.values()) for way, times in row["ms"].items()}
    say(f"D{D} {'causal' if causal else 'full'} B{B} N{N}: cuDNN {row['cudnn_ms']:.3f} ms; "
        + "; ".join(f"{way} {ms:.3f} ms ({row['cudnn_ms'] / ms:.2f} x cuDNN)" for way, ms in best.items()))
    return row


def main():
    from torch.nn.attention import SDPBackend

    lesson10 = load_solution("10")
    cudnn = lesson10.lesson06._sdpa(SDPBackend.CUDNN_ATTENTION)
    device = torch.cuda.get_device_name()
    record = {"device": device, "date": datetime.date.today().isoformat(), "torch": torch.__version__,
              "triton": __import__("triton").__version__,
              "order": {name: lesson10.wgmma_order(shifted) for name, shifted in (("plain", False),
                                                                                   ("shifted", True))},
              "rows": []}
    say(device, "torch", record["torch"], "triton", record["triton"])
    wrong = []
    for D in (128, 64):
        for causal in (False, True):
            for B, N in SHAPES:
                record["rows"].append(time_shape(lesson10, cudnn, B, N, D, causal, wrong))
    record["wrong"] = wrong
    say("orders:", json.dumps(record["order"], indent=1))
    for path in write_gpu_record("10_hopper_attention_shifted", record, "attention_shifted_gpu.json"):
        say(f"wrote {path}")
    sys.exit(1 if wrong else 0)


if __name__ == "__main__":
    main()
