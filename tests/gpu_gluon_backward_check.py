"""On a Hopper GPU: check and time the Gluon attention backward (solutions/gluon_attention_backward.py).
Not a pytest module: run it as a script,

    timeout 600 python tests/gpu_gluon_backward_check.py

1. Numbers: dq, dk, dv against autograd through attention computed in float32 from the same float16
   inputs (atol 2e-2, as for float16 attention elsewhere in the course), with out and lse from lesson
   10's forward, over shapes at the edges: one query tile, N not a multiple of 64 or 128, several
   heads and batches (a head reading its neighbour's rows would show), causal and full, D 64 and 128.
2. Speed: the backward alone, causal, as `make bench` times it (lesson 10's _backward_benchmarks, which
   holds the Gluon kernel beside lesson 10's and lesson 06's Triton backwards and cuDNN's), as CUDA-graph
   replays; and the Gluon kernel once more with its dQ reductions left out (dQ wrong), which says what
   adding dQ costs.
Results go to helpers/recorded/10_hopper_attention_gluon_backward/<gpu>.json, where lesson 10 reads them
(and to $OUT/gluon_attention_backward_gpu.json when OUT is set).
"""

import datetime
import sys
import traceback

import torch

import helpers  # noqa: F401  (before triton: it picks the GPU or the interpreter)
from helpers.bench import measure, write_gpu_record
from helpers.exercises.lesson10 import attention_gradients
from helpers.solutions import ROOT, load_module, load_solution

CASES = [(1, 1, 64, 64, True), (1, 2, 128, 64, True), (2, 3, 1000, 64, True), (2, 3, 1000, 64, False),
         (1, 4, 2048, 64, False), (1, 2, 128, 128, True), (2, 3, 1000, 128, True), (2, 3, 1000, 128, False),
         (2, 2, 200, 128, False), (1, 4, 2048, 128, True)]


def case_name(B, H, N, D, causal):
    return f"B{B} H{H} N{N} D{D} {'causal' if causal else 'full'}"


def say(*args):
    print(*args, flush=True)


def check(backward, lesson10):
    failed = []
    for B, H, N, D, causal in CASES:
        torch.manual_seed(0)
        q, k, v, dout = (torch.randn(B, H, N, D, device="cuda", dtype=torch.float16) for _ in range(4))
        out, lse = lesson10.attention(q, k, v, causal)
        case = case_name(B, H, N, D, causal)
        try:
            got = backward.gluon_attention_backward(q, k, v, out, lse, dout, causal)
            # autograd through PyTorch's attention in float32, from the same float16 inputs
            want = attention_gradients(*(t.float() for t in (q, k, v)), None, None, dout.float(), causal)
            errors = [(g.float() - w).abs().max().item() for g, w in zip(got, want)]
        except Exception:   # noqa: BLE001  (a compile or launch error is a failed case, reported)
            say(case, "ERROR", traceback.format_exc()[-2000:])
            failed.append(case)
            continue
        ok = all(e <= 2e-2 for e in errors)   # NaN fails too
        say(case, "ok" if ok else "WRONG", "max |error| dq dk dv:", ", ".join(f"{e:.1e}" for e in errors))
        if not ok:
            failed.append(case)
    return failed


def bench(lesson10):
    from torch.nn.attention import SDPBackend

    rows = []
    sdpa = {"cuDNN (SDPA)": lesson10.lesson06._sdpa(SDPBackend.CUDNN_ATTENTION)}
    for b in lesson10._backward_benchmarks(sdpa, adds_left_out=True):
        # make bench's impls (lesson 10's own list holds the Gluon backward), and the Gluon kernel with
        # its dQ reductions left out
        times = {name: measure(fn, graph=True) for name, fn in b.impls.items()}
        cudnn = next((ms for name, ms in times.items() if name.startswith("cuDNN")), None)
        ratio = (lambda ms: f" ({cudnn / ms:.2f} x cuDNN)") if cudnn else (lambda ms: "")
        say(b.group, b.label, "; ".join(f"{name}: {ms:.3f} ms{ratio(ms)}" for name, ms in times.items()))
        row = {"group": b.group, "label": b.label, "ms": times}
        rows.append(row)
    return rows


def main():
    backward = load_module(ROOT / "solutions" / "gluon_attention_backward.py")
    lesson10 = load_solution("10")

    device = torch.cuda.get_device_name()
    record = {"device": device, "date": datetime.date.today().isoformat(), "torch": torch.__version__,
              "triton": __import__("triton").__version__}
    say(device, "torch", record["torch"], "triton", record["triton"])
    failed = check(backward, lesson10)
    record.update(cases=[case_name(*case) for case in CASES], failed=failed,
                  timings=[] if failed else bench(lesson10))
    for path in write_gpu_record("10_hopper_attention_gluon_backward", record,
                                 "gluon_attention_backward_gpu.json"):
        say(f"wrote {path}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
