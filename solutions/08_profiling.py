"""Lesson 08 · Profiling: what `make profile` measures on a GPU.

- `ncu_targets()`: the course's kernels that Nsight Compute profiles, each with the bytes and FLOPs
  the course counts for it (lesson 03's way), so the lesson can set ncu's measured bytes beside them;
- `profile_loop()`: the timings of the lesson's profile -> hypothesis -> change -> measure loop
  (lesson 05's tiled softmax, second pass forwards, then backwards);
- `proton_scopes(folder)`: Triton's profiler inside a kernel (the instrumentation backend), tried on
  a small kernel: what it reports, or why it does not run.
"""

import json
import pathlib

import torch
import triton
import triton.language as tl
import triton.profiler.language as pl

from helpers.solutions import load_solution

LONG_ROWS = ((2048, 65536), (512, 262144))   # lesson 05's long-row shapes, float32


def _tiled_softmax(x, reverse):
    """Lesson 05's autotuned tiled softmax, with its second pass forwards or backwards."""
    l05 = load_solution("05")
    out = torch.empty_like(x)
    l05.softmax_tiled_tuned_kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), x.stride(1),
                                                   out.stride(0), REVERSE=reverse)
    return out


def ncu_targets():
    """name -> {run, bytes, flops, what}: the kernels `make profile` runs under Nsight Compute, in
    order, one launch each. `bytes` is the fewest bytes the operation must move (each input read
    once, each output written once), `flops` the operations it must do, as lesson 03 counts them."""
    l01, l04, l05, l06 = (load_solution(n) for n in ("01", "04", "05", "06"))
    cuda = dict(device="cuda")
    fp16 = dict(device="cuda", dtype=torch.float16)
    targets = {}

    n = 2**28
    x, y = torch.randn(n, **cuda), torch.randn(n, **cuda)
    targets["vector add (01)"] = {"run": lambda: l01.add(x, y), "bytes": 3 * 4 * n, "flops": n,
                                  "what": "2^28 float32"}
    m, c = 32768, 4096
    xs = torch.randn(m, c, **cuda)
    targets["row softmax (05)"] = {"run": lambda: l05.softmax_rows(xs), "bytes": 2 * 4 * m * c,
                                   "flops": 5 * m * c, "what": f"{m}x{c} float32"}
    for m, c in LONG_ROWS:
        xl = torch.randn(m, c, **cuda)
        for reverse in (False, True):
            name = f"tiled softmax {m}x{c}" + (", pass 2 reversed" if reverse else "") + " (05)"
            targets[name] = {"run": lambda xl=xl, r=reverse: _tiled_softmax(xl, r), "bytes": 2 * 4 * m * c,
                             "flops": 5 * m * c, "what": f"{m}x{c} float32"}
    for size in (4096, 512):
        a, b = torch.randn(size, size, **fp16), torch.randn(size, size, **fp16)
        counted = {"bytes": 3 * 2 * size * size, "flops": 2 * size**3, "what": f"{size}^3 float16"}
        targets[f"matmul {size}^3 (04)"] = {"run": lambda a=a, b=b: l04.matmul(a, b), **counted}
        targets[f"cuBLAS matmul {size}^3"] = {"run": lambda a=a, b=b: a @ b, **counted}
    B, H, N, D = 4, 16, 4096, 128
    q, k, v = (torch.randn(B, H, N, D, **fp16) for _ in range(3))
    targets["FlashAttention forward (06)"] = {
        "run": lambda: l06.flash_forward(q, k, v), "bytes": 4 * q.nbytes, "flops": 4 * B * H * N * N * D,
        "what": f"B{B} H{H} N{N} D{D} float16"}
    return targets


def profile_loop():
    """The loop's measurements: do_bench medians of the tiled softmax with its second pass forwards
    and backwards, at lesson 05's long-row shapes, as GB/s and fraction of the copy ceiling."""
    from helpers import bench

    ceiling = bench.copy_ceiling()
    rows = []
    for m, c in LONG_ROWS:
        x = torch.randn(m, c, device="cuda")
        expected = torch.softmax(x, dim=-1)
        for reverse in (False, True):
            out = _tiled_softmax(x, reverse)
            torch.testing.assert_close(out, expected)
            ms = bench.measure(lambda x=x, r=reverse: _tiled_softmax(x, r))
            rows.append({"shape": f"{m}x{c}", "reverse": reverse, "ms": round(ms, 4),
                         "gbps": round(bench.gbps(2 * x.nbytes, ms), 1),
                         "fraction_of_copy": round(bench.gbps(2 * x.nbytes, ms) / ceiling, 4)})
        del x, expected
    return {"copy_gbps": round(ceiling, 1), "rows": rows}


@triton.jit
def _scoped_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    pl.enter_scope("load")
    x = tl.load(x_ptr + offs, mask=offs < n)
    pl.exit_scope("load")
    pl.enter_scope("compute_store")
    tl.store(out_ptr + offs, tl.exp(x) * 2, mask=offs < n)
    pl.exit_scope("compute_store")


def proton_scopes(folder):
    """Try proton's instrumentation backend (scopes inside a Triton kernel): {ok, tree | error}."""
    try:
        import triton.profiler as proton

        if hasattr(pl, "enable_semantic"):   # newer Triton instruments only Gluon kernels by default
            pl.enable_semantic("triton")
        x = torch.randn(2**24, device="cuda")
        out = torch.empty_like(x)
        name = str(pathlib.Path(folder) / "proton_scopes")
        proton.start(name, backend="instrumentation")
        _scoped_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        torch.cuda.synchronize()
        proton.finalize()
        path = pathlib.Path(name + ".hatchet")
        tree = json.loads(path.read_text())
        path.unlink()
        return {"ok": True, "tree": tree}
    except Exception as e:  # recorded as it is: the lesson says what did not run, and why
        return {"ok": False, "error": f"{type(e).__name__}: {str(e)[:2000]}"}
