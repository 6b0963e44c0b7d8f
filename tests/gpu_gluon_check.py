"""On a Hopper GPU (H100 / H200): check and time the Gluon FlashAttention-3-style forward
(solutions/gluon_attention.py). Not a pytest module (no test_ prefix): run it as a script,

    timeout 1800 python tests/gpu_gluon_check.py              # checks, then timings
    timeout 900 python tests/gpu_gluon_check.py --check       # checks only, into the GPU's record
    python tests/gpu_gluon_check.py --check --schedules pingpong,overlap   # some schedules only
    timeout 300 python tests/gpu_gluon_check.py --program-cost   # only 3., added to the GPU's record
    timeout 900 python tests/gpu_gluon_check.py --merge --schedules persistent   # those schedules only,
                                                  # checked and timed beside cuDNN, into the GPU's record
    compute-sanitizer --error-exitcode 1 python tests/gpu_gluon_check.py --small --schedules persistent+2q
                    # the cases up to N = 333 only, recorded nowhere: under compute-sanitizer, which
                    # reports an access out of bounds even where the values come out right

1. Numbers: out against attention computed in float32 from the same fp16 inputs (atol 2e-2, as for
   fp16 attention elsewhere in the course), lse against torch.logsumexp of the float32 scores, over
   shapes that hit the edges: N = 1, a single key tile, N not a multiple of 128 or of BLOCK_N, several
   heads and batches (a head reading its neighbour's rows would show), causal and full, D = 64 and
   128, a non-default sm_scale. Each case also runs twice and must give the same bits (no atomics: a
   difference means a race in the shared-memory ring). All of that for each schedule: plain (the
   default), then PINGPONG, OVERLAP and both (gluon_attention's pingpong= and overlap=), three
   consumer warpgroups (consumers=3), persistent programs with two and three consumers
   (persistent=True), and with two consumers and two Q buffers (q_buffers=2), each also on other
   tiles and on a ring of one slot (where a wrong release of a slot would hang).
2. Speed: TFLOP/s (4*B*H*N*N*D flops, half for causal) timed as CUDA-graph replays with
   triton.testing, each schedule beside cuDNN's SDPA and the course's Triton `attention` (lesson 10),
   at B4 N4096 and B1 N16384, D 64 and 128 (H = 2048 / D), causal and full.
3. With --program-cost: what a program costs besides its key tiles (program_cost below), three
   consumers and cuDNN, full attention; recorded beside the rest.

A wrong barrier phase hangs the GPU rather than failing: every case prints before it starts (flushed),
so the last line printed names the case that hung. Run it under `timeout`. The schedules are checked
in SCHEDULES' order (plain first, the persistent ones last), each from its simplest case up (one query
block and one key tile first); after a hang, --schedules runs the others.
Results go to helpers/recorded/10_hopper_attention_gluon/<gpu>.json, where lesson 10 reads them (and to
$OUT/gluon_attention_gpu.json when OUT is set).
"""

import json
import math
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402, I001  (helpers between torch and triton, as in the solutions)
import torch.nn.functional as F  # noqa: E402

import helpers  # noqa: E402,F401  (before triton: picks the device)
from helpers.bench import gpu_record_path, write_gpu_record  # noqa: E402
from helpers.solutions import load_module  # noqa: E402

import triton  # noqa: E402
import triton.testing  # noqa: E402

RECORD_FOLDER = "10_hopper_attention_gluon"   # helpers/recorded/<this>/<gpu>.json, read by lesson 10


DEVICE = "cuda"


def say(*args):
    print(*args, flush=True)


def reference(q, k, v, causal, sm_scale):
    """(out, lse) in float32 from the fp16 inputs: scores, mask, softmax, P V."""
    s = torch.matmul(q.float(), k.float().transpose(-1, -2)) * sm_scale
    if causal:
        n = q.shape[2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    return torch.matmul(torch.softmax(s, dim=-1), v.float()), lse


CASES = [  # (B, H, N, D, causal, sm_scale or None): simplest first, so a hang is easy to place
    (1, 1, 128, 64, False, None),
    (1, 1, 128, 128, False, None),
    (1, 1, 128, 64, True, None),
    (1, 1, 1, 64, False, None),
    (1, 1, 1, 128, True, None),
    (1, 1, 77, 64, True, None),
    (2, 3, 200, 64, False, None),
    (2, 3, 200, 128, True, None),
    (1, 2, 129, 128, False, None),
    (1, 2, 255, 64, True, None),
    (2, 2, 333, 128, False, 0.3),
    (3, 2, 513, 64, True, None),
    (1, 4, 1000, 64, False, None),
    (1, 4, 1000, 128, True, None),
    (2, 8, 1024, 128, False, None),
    (2, 8, 1024, 64, True, None),
    (1, 2, 4096, 128, True, None),
    (1, 2, 4100, 64, False, None),
    (4, 16, 2048, 64, True, None),    # many CTAs at once: races in the ring show as wrong or changing bits
]

# Other (BLOCK_N, NUM_STAGES) than tile_config's: BLOCK_N 64 gives S and O different wgmma shapes (the
# row statistics change layout between them), and a deeper or shallower ring changes the phase pattern.
VARIANTS = {64: [(64, 4), (128, 2)], 128: [(64, 4), (128, 3)]}
VARIANT_CASES = [(1, 1, 1, 64, True, None), (2, 3, 333, 64, False, None), (2, 3, 333, 128, True, None),
                 (1, 4, 1000, 128, False, None), (2, 4, 2048, 64, True, None)]

# The schedules (gluon_attention's keyword arguments), in the order they are checked: the verified plain
# one first, then PINGPONG (the plain loop plus the turns), OVERLAP (the rotated loop), both.
SCHEDULES = {"plain": {}, "pingpong": {"pingpong": True}, "overlap": {"overlap": True},
             "overlap+pingpong": {"overlap": True, "pingpong": True}, "three": {"consumers": 3},
             "persistent": {"persistent": True}, "three+persistent": {"consumers": 3, "persistent": True},
             "persistent+2q": {"persistent": True, "q_buffers": 2}}
# Their other tiles: a ring of one slot (every schedule finishes on it: tests/test_gluon_protocol.py),
# and the other BLOCK_N or a deeper ring.
SCHEDULE_VARIANTS = {"plain": VARIANTS,
                     "pingpong": {64: [(64, 1), (128, 2)], 128: [(64, 4), (128, 1)]},
                     "overlap": {64: [(64, 1), (128, 2)], 128: [(64, 2), (128, 1)]},
                     "overlap+pingpong": {64: [(64, 1), (128, 2)], 128: [(64, 2), (128, 3)]},
                     "three": {64: [(64, 1), (128, 2)], 128: [(64, 2), (128, 1)]},
                     "persistent": {64: [(64, 1), (128, 2)], 128: [(64, 4), (128, 1)]},
                     "three+persistent": {64: [(64, 1), (128, 2)], 128: [(64, 2), (128, 1)]},
                     "persistent+2q": {64: [(64, 1), (128, 2)], 128: [(64, 4), (128, 1)]}}
# Single-tile cases first: one query block and one key tile, for BLOCK_N 128 and for 64 (N = 64).
SINGLE_TILE = [(1, 1, 128, 64, False, None), (1, 1, 64, 128, True, None)]


def all_cases(schedules=SCHEDULES):
    """(schedule, B, H, N, D, causal, sm_scale, block_n, num_stages), schedule by schedule: CASES with the
    host's tiles, simplest first (the plain schedule's list as it was; the others' with the single-tile
    cases first), then the other tiles."""
    cases = []
    for schedule in schedules:
        first = [] if schedule == "plain" else [case for case in SINGLE_TILE if case not in CASES]
        cases += [(schedule,) + case + (None, None) for case in first + CASES]
        for case in VARIANT_CASES:
            cases += [(schedule,) + case + variant for variant in SCHEDULE_VARIANTS[schedule][case[3]]]
        if schedule != "plain":   # a single tile on a ring of one slot too
            cases.insert(len(cases) - len(VARIANT_CASES) * 2,
                         (schedule, 1, 1, 64, 64, False, None) + SCHEDULE_VARIANTS[schedule][64][0])
    return cases


SMALL_N = 333   # --small: the cases up to this length (every single-tile case, and the ring's variants)


def check(ga, schedules=SCHEDULES, small=False):
    results = []
    failures = 0
    cases = [case for case in all_cases(schedules) if not small or case[3] <= SMALL_N]
    for schedule, B, H, N, D, causal, sm_scale, block_n, num_stages in cases:
        name = f"B{B} H{H} N{N} D{D} {'causal' if causal else 'full'}"
        name += f" scale {sm_scale}" if sm_scale else ""
        name += f" BLOCK_N {block_n} stages {num_stages}" if block_n else ""
        name += f" [{schedule}]" if schedule != "plain" else ""
        say(f"check {name} ...")
        torch.manual_seed(N * 7 + D + causal)
        q, k, v = (torch.randn(B, H, N, D, device=DEVICE, dtype=torch.float16) for _ in range(3))
        tiles = {"block_n": block_n, "num_stages": num_stages, **SCHEDULES[schedule]}
        out, lse = ga.gluon_attention(q, k, v, causal=causal, sm_scale=sm_scale, **tiles)
        torch.cuda.synchronize()
        out2, lse2 = ga.gluon_attention(q, k, v, causal=causal, sm_scale=sm_scale, **tiles)
        torch.cuda.synchronize()
        ref, ref_lse = reference(q, k, v, causal, D ** -0.5 if sm_scale is None else sm_scale)
        out_err = (out.float() - ref).abs().max().item()
        lse_err = (lse - ref_lse).abs().max().item()
        same_bits = torch.equal(out, out2) and torch.equal(lse, lse2)
        finite = bool(torch.isfinite(out).all() and torch.isfinite(lse).all())
        ok = out_err <= 2e-2 and lse_err <= 5e-3 and same_bits and finite
        failures += not ok
        say(f"    {'ok ' if ok else 'BAD'} max|out - ref| {out_err:.2e}  max|lse - ref| {lse_err:.2e}  "
            f"same bits twice {same_bits}  finite {finite}")
        results.append({"case": name, "schedule": schedule, "B": B, "H": H, "N": N, "D": D, "causal": causal,
                        "sm_scale": sm_scale, "block_n": block_n, "num_stages": num_stages,
                        "out_max_abs_err": out_err, "lse_max_abs_err": lse_err, "deterministic": same_bits,
                        "finite": finite, "ok": ok})
    return results, failures, len(cases)


def graph_ms(fn):
    """Median ms of fn as CUDA-graph replays (and as plain launches, for the launch overhead)."""
    fn()
    torch.cuda.synchronize()
    plain = triton.testing.do_bench(fn, warmup=25, rep=100)
    graph = triton.testing.do_bench_cudagraph(fn, rep=100)
    return graph, plain


def bench(ga, schedules=SCHEDULES, others=True):
    """Rows per shape: each schedule beside cuDNN, and (others) the course's Triton kernel and the plain
    schedule's other tiles."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from helpers.solutions import load_solution
    course_attention = load_solution("10").attention

    rows = []
    for B, N in ((4, 4096), (1, 16384)):
        for D in (64, 128):
            H = 2048 // D
            for causal in (False, True):
                torch.manual_seed(0)
                q, k, v = (torch.randn(B, H, N, D, device=DEVICE, dtype=torch.float16) for _ in range(3))
                flops = 4 * B * H * N * N * D * (0.5 if causal else 1.0)

                def cudnn():
                    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

                impls = {"gluon": lambda: ga.gluon_attention(q, k, v, causal=causal),
                         "cudnn": cudnn,
                         "triton_lesson10": lambda: course_attention(q, k, v, causal=causal)}
                if not others:
                    impls = {"cudnn": cudnn}
                for schedule in schedules:   # the other schedules with the host's tiles: gluon_pingpong, ...
                    if schedule != "plain":
                        flags = SCHEDULES[schedule]
                        impls["gluon_" + schedule.replace("+", "_")] = (
                            lambda flags=flags: ga.gluon_attention(q, k, v, causal=causal, **flags))
                if N == 4096 and others:   # the other tile shapes, once per head size and mask
                    for bn, stages in VARIANTS[D]:
                        impls[f"gluon_n{bn}_s{stages}"] = (lambda bn=bn, stages=stages: ga.gluon_attention(
                            q, k, v, causal=causal, block_n=bn, num_stages=stages))
                    for schedule in schedules if D == 128 else ():   # a third slot, where it fits
                        if schedule not in ("plain", "three", "persistent+2q"):   # (more Q leaves no room)
                            flags = SCHEDULES[schedule]
                            impls[f"gluon_{schedule.replace('+', '_')}_n128_s3"] = (
                                lambda flags=flags: ga.gluon_attention(q, k, v, causal=causal, block_n=128,
                                                                       num_stages=3, **flags))
                row = {"B": B, "H": H, "N": N, "D": D, "causal": causal}
                for impl, fn in impls.items():
                    say(f"time {impl} B{B} H{H} N{N} D{D} {'causal' if causal else 'full'} ...")
                    try:
                        graph, plain = graph_ms(fn)
                    except Exception as error:  # noqa: BLE001  (e.g. cuDNN attention missing in this torch)
                        say(f"    {impl} failed: {type(error).__name__}: {error}")
                        row[impl] = {"error": f"{type(error).__name__}: {error}"}
                        continue
                    row[impl] = {"graph_ms": graph, "launch_ms": plain, "tflops": flops / graph / 1e9}
                    say(f"    {impl:16s} {graph:8.3f} ms graph  {plain:8.3f} ms launched  "
                        f"{flops / graph / 1e9:7.1f} TFLOP/s")
                if "tflops" in row.get("cudnn", {}):
                    for impl in [name for name in row if name.startswith(("gluon", "triton"))]:
                        if "tflops" in row.get(impl, {}):
                            row[impl]["vs_cudnn"] = row[impl]["tflops"] / row["cudnn"]["tflops"]
                    say("    / cuDNN:  " + "   ".join(
                        f"{impl} {row[impl].get('vs_cudnn', math.nan):.2f}" for impl in row
                        if impl.startswith(("gluon", "triton")) and "_n" not in impl))
                rows.append(row)
    return rows


# Full attention at a fixed number of three-consumer programs, 8 per SM, for N = 192 m with 8 SMs / m
# heads (every m divides 8 x 132): the time per wave of programs against the key tiles each walks.
PROGRAM_COST_M = (2, 4, 8, 16, 32)


def program_cost(ga):
    """Rows {D, N, H, programs, tiles, gluon_three, cudnn} (graph ms), B = 1: a program's time against
    its key tiles, with the programs per SM fixed. Its intercept is what a program costs besides its
    tiles (start, prologue, epilogue, the wave's end), which persistent programs can overlap."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    programs = 8 * torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for D in (64, 128):
        for m in PROGRAM_COST_M:
            N, H = 192 * m, programs // m
            assert H * m == programs
            torch.manual_seed(0)
            q, k, v = (torch.randn(1, H, N, D, device=DEVICE, dtype=torch.float16) for _ in range(3))

            def cudnn():
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    return F.scaled_dot_product_attention(q, k, v)

            row = {"D": D, "N": N, "H": H, "programs": programs, "tiles": math.ceil(N / 128)}
            for impl, fn in {"gluon_three": lambda: ga.gluon_attention(q, k, v, consumers=3),
                             "cudnn": cudnn}.items():
                row[impl] = graph_ms(fn)[0]
            say(f"program cost D{D} N{N} H{H}: {row['tiles']} tiles, three {row['gluon_three']:.4f} ms, "
                f"cuDNN {row['cudnn']:.4f} ms")
            rows.append(row)
    return rows


def main():
    assert torch.cuda.is_available(), "needs a CUDA GPU (Hopper)"
    cap = torch.cuda.get_device_capability()
    say(f"{torch.cuda.get_device_name()} sm_{cap[0]}{cap[1]}  torch {torch.__version__}  "
        f"triton {triton.__version__}")
    assert cap == (9, 0), "the Gluon kernel uses wgmma and setmaxnreg: Hopper (sm_90) only"
    ga = load_module(ROOT / "solutions" / "gluon_attention.py")
    from helpers import profile

    record = profile.stamp()

    schedules = list(SCHEDULES)
    if "--schedules" in sys.argv:
        schedules = sys.argv[sys.argv.index("--schedules") + 1].split(",")
        assert all(s in SCHEDULES for s in schedules), f"--schedules takes some of {', '.join(SCHEDULES)}"
    path = gpu_record_path(RECORD_FOLDER, record["device"])
    if "--program-cost" in sys.argv:   # added to this GPU's record, the rest of it kept
        kept = json.loads(path.read_text()) if path.exists() else {}
        record = {**kept, "program_cost": program_cost(ga), "program_cost_stamp": record}
        write(record)
        return
    merge, check_only, small = "--merge" in sys.argv, "--check" in sys.argv, "--small" in sys.argv
    if merge:   # the --schedules checked and timed beside cuDNN, into this GPU's record
        schedules = [s for s in schedules if s != "plain"]
    started = time.time()
    checks, failures, n_cases = check(ga, schedules, small)
    say(f"{n_cases - failures}/{n_cases} checks passed ({time.time() - started:.0f} s)")
    for schedule in schedules:
        mine = [c for c in checks if c["schedule"] == schedule]
        say(f"    {schedule:17s} {sum(c['ok'] for c in mine)}/{len(mine)}")
    if small:   # recorded nowhere
        sys.exit(1 if failures else 0)
    if merge or check_only:   # into this GPU's record, the rest of it kept
        kept = json.loads(path.read_text())
        kept["checks"] = [c for c in kept["checks"] if c["schedule"] not in schedules] + checks
        if merge:
            for row, new in zip(kept["timings"], bench(ga, schedules, others=False)):
                assert all(row[key] == new[key] for key in ("B", "H", "N", "D", "causal")), (row, new)
                row.update({key: value for key, value in new.items() if key.startswith("gluon_")})
        stamps = "merged" if merge else "checked"   # the last stamp for these schedules
        kept[stamps] = [s for s in kept.get(stamps, []) if s["schedules"] != schedules]
        kept[stamps].append({**record, "schedules": schedules})
        write(kept)
    else:
        if failures:
            say("timing anyway (numbers above are wrong: the timings are of a broken kernel)")
        record["checks"] = checks
        record["timings"] = bench(ga, ["plain"] + [s for s in schedules if s != "plain"])
        if path.exists():   # --program-cost's measurement, with its own stamp, is kept
            old = json.loads(path.read_text())
            record.update({key: value for key, value in old.items() if key.startswith("program_cost")})
        write(record)
    sys.exit(1 if failures else 0)


def write(record):
    """To helpers/recorded/10_hopper_attention_gluon/<gpu>.json, where lesson 10 reads this GPU's record."""
    for path in write_gpu_record(RECORD_FOLDER, record, "gluon_attention_gpu.json"):
        say(f"wrote {path}")


if __name__ == "__main__":
    main()
