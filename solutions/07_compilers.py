"""Lesson 07 solutions: a function Dynamo captures whole, Inductor's kernel count, XLA's fusions.

Also what the lesson needs from a GPU: `record_artifacts(folder)` saves the Triton
code Inductor generates there (the notebook shows it on machines without one),
and `benchmarks()` is what `make bench` times for this lesson.
"""

import datetime
import json
import math
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

import helpers  # noqa: F401  (first: picks the GPU or the interpreter)
import triton

from helpers.bench import Bench, measure
from helpers.exercises.lesson07 import block, block_inputs, compiled_code, inductor_kernels

# On a GPU, JAX would otherwise reserve 75% of the GPU's memory at its first call, leaving too
# little for PyTorch in the same process.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

# ---------------------------------------------------------------- exercise 1


def predicted_kernels():
    """Kernels Inductor makes for `block`: the matmul is a library call (cuBLAS, or a CPU BLAS);
    bias, ReLU, the row reduction and the scaling all follow the matmul row by row, so they fuse
    into one generated kernel that reads the matmul's output once."""
    return {"generated": 1, "library": 1}


# ---------------------------------------------------------------- exercise 2


def gelu_residual_fixed(x, residual, gate):
    """residual + mean(sigmoid(gate)) * clamp(gelu(x), -10, 10), captured by Dynamo as one graph."""
    h = F.gelu(x).clamp(-10.0, 10.0)    # the branch only clamped when needed: clamping always is the same
    scale = torch.sigmoid(gate).mean()  # a 0-d tensor: it stays in the graph (and on the device)
    return residual + scale * h         # no print: inspect values outside the compiled function


# ---------------------------------------------------------------- exercise 3


def xla_fusion_count(fn, *args):
    """Fusion instructions in the ENTRY computation of XLA's optimized HLO for jax.jit(fn)(*args)."""
    import jax

    hlo = jax.jit(fn).lower(*args).compile().as_text()
    entry = hlo[hlo.index("\nENTRY "):]
    entry = entry[:entry.index("\n}")]  # ENTRY ends at its first line that starts with "}"
    # each instruction is one line, `%name = shape opcode(operands), attributes`
    return len(re.findall(r"^\s*(?:ROOT )?%\S+ = .*? fusion\(", entry, re.M))


# ---------------------------------------------------------------- the functions the lesson compiles


def chain_eager(x, bias, residual, scale):
    """Lesson 02's chain: four kernels in eager PyTorch."""
    return torch.relu(x + bias) * scale + residual


def softmax_naive(x):
    """The numerically stable softmax one op at a time: five kernels in eager PyTorch."""
    m = x.amax(dim=-1, keepdim=True)
    e = torch.exp(x - m)
    return e / e.sum(dim=-1, keepdim=True)


def attention_naive(q, k, v):
    """softmax(q k^T / sqrt(D)) v with the N x N scores in memory."""
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return torch.softmax(s, dim=-1) @ v


def attention_softcap(q, k, v, cap=30.0):
    """Attention with the scores soft-capped at +-cap (cap * tanh(s / cap)), as some models do."""
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    s = cap * torch.tanh(s / cap)
    return torch.softmax(s, dim=-1) @ v


def _softcap_score_mod(score, b, h, q_idx, kv_idx):
    return 30.0 * torch.tanh(score / 30.0)


def softmax_naive_jax(x):
    import jax.numpy as jnp

    e = jnp.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def attention_naive_jax(q, k, v, cap=None):
    """The naive attention in JAX; scores and softmax in float32, like PyTorch's softmax of fp16."""
    import jax
    import jax.numpy as jnp

    s = jnp.einsum("bhnd,bhmd->bhnm", q, k, preferred_element_type=jnp.float32) / math.sqrt(q.shape[-1])
    if cap is not None:
        s = cap * jnp.tanh(s / cap)
    p = jax.nn.softmax(s, axis=-1).astype(q.dtype)
    return jnp.einsum("bhnm,bhmd->bhnd", p, v)


# ---------------------------------------------------------------- recorded on a GPU for the notebook


def record_artifacts(folder):
    """On a GPU (called by `make bench` with helpers/recorded/): write the Triton code Inductor
    generates for the lesson's functions into folder/inductor_gpu/ (one NAME.txt per function), with
    summary.json: kernel counts, and the compile time of each mode for `block` at full size."""
    assert torch.cuda.is_available(), "record_artifacts needs a CUDA GPU"
    folder = pathlib.Path(folder) / "inductor_gpu"
    folder.mkdir(parents=True, exist_ok=True)
    cuda = torch.device("cuda")
    fp16 = dict(device=cuda, dtype=torch.float16)
    m, n = 4096, 4096
    qkv = lambda: tuple(torch.randn(4, 16, 1024, 64, **fp16) for _ in range(3))
    examples = {
        "chain": (chain_eager, (torch.randn(m, n, device=cuda), torch.randn(n, device=cuda),
                                torch.randn(m, n, device=cuda), 0.5)),
        "softmax_1024": (softmax_naive, (torch.randn(8192, 1024, device=cuda),)),
        "softmax_32768": (softmax_naive, (torch.randn(4096, 32768, device=cuda),)),
        "block": (block, block_inputs(cuda)),
        "attention": (attention_naive, qkv()),
        "attention_softcap": (attention_softcap, qkv()),
    }
    kernels = {}
    for name, (fn, args) in examples.items():
        codes = compiled_code(fn, *args)
        (folder / f"{name}.txt").write_text("\n\n".join(codes))  # .txt: generated code is not linted
        generated, library = [], []
        for code in codes:
            g, lib = inductor_kernels(code)
            generated += g
            library += lib
        kernels[name] = {"generated": generated, "library": library}

    modes = {mode: _mode_in_fresh_process(mode) for mode in ("default", "reduce-overhead", "max-autotune")}
    summary = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
               "triton": triton.__version__, "date": datetime.date.today().isoformat(),
               "kernels": kernels,
               "modes": {"function": "block(x, w, b, g), x 8192x4096, w 4096x4096, fp16", **modes}}
    (folder / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def time_mode(mode):
    """{first_call_s, ms_per_call, eager_ms_per_call} of torch.compile(block, mode=mode) at full size.

    The first call includes the whole compile; it is cold only in a process whose caches are
    empty, which is how record_artifacts runs it."""
    fp16 = dict(device="cuda", dtype=torch.float16)
    x, w, b, g = (torch.randn(8192, 4096, **fp16), torch.randn(4096, 4096, **fp16),
                  torch.randn(4096, **fp16), torch.randn(4096, **fp16))
    compiled = torch.compile(block, mode=mode)
    start = time.perf_counter()
    compiled(x, w, b, g)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    for _ in range(3):  # reduce-overhead records its CUDA graph on a later call
        compiled(x, w, b, g)
    return {"first_call_s": round(seconds, 1), "ms_per_call": round(measure(lambda: compiled(x, w, b, g)), 4),
            "eager_ms_per_call": round(measure(lambda: block(x, w, b, g)), 4)}


def _mode_in_fresh_process(mode):
    """time_mode(mode) in a new Python process with empty Inductor and Triton caches."""
    root = pathlib.Path(__file__).resolve().parent.parent
    script = ("import json, helpers; from helpers.solutions import load_solution; "
              f"print(json.dumps(load_solution('07').time_mode({mode!r})))")
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache, TRITON_CACHE_DIR=os.path.join(cache, "triton"),
                   PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
        done = subprocess.run([sys.executable, "-c", script], cwd=root, env=env,
                              capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"timing mode {mode!r} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- make bench


def _jax_gpu():
    """JAX's first GPU, or None when JAX sees none."""
    import jax

    try:
        return jax.devices("gpu")[0]
    except RuntimeError:
        return None


def _on_jax(device, *tensors):
    import jax

    return tuple(jax.device_put(t.cpu().numpy(), device) for t in tensors)


def _jax_impl(fn, device, *tensors, **kwargs):
    """A zero-argument callable running jax.jit(fn) on the GPU and returning a torch tensor.

    It waits for JAX's result: JAX runs on streams of its own, which CUDA events recorded on
    PyTorch's stream do not see, so the time includes one host round trip."""
    import functools

    import jax

    jitted = jax.jit(functools.partial(fn, **kwargs))
    args = _on_jax(device, *tensors)
    return lambda: torch.from_dlpack(jitted(*args).block_until_ready())


def _course_softmax():
    """Lesson 05's Triton softmax, when that lesson's solutions are present."""
    from helpers.solutions import lessons, load_solution

    return load_solution("05").softmax if "05" in lessons() else None


def _course_attention():
    """Lesson 06's solutions module (its Triton FlashAttention), when it is present."""
    from helpers.solutions import lessons, load_solution

    return load_solution("06") if "06" in lessons() else None


def benchmarks():
    """What `make bench` times for this lesson (GPU only): hand kernels, eager, compiled, jax.jit."""
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    gpu = _jax_gpu()
    ours = _course_softmax()
    compiled_softmax = torch.compile(softmax_naive, dynamic=False)
    for m, n in ((32768, 1024), (8192, 16384)):
        x = torch.randn(m, n, device="cuda")
        impls = {"triton (lesson 05)": lambda x=x: ours(x)} if ours else {}
        impls.update({"torch.compile(naive)": lambda x=x: compiled_softmax(x),
                      "torch eager naive (5 kernels)": lambda x=x: softmax_naive(x),
                      "torch.softmax": lambda x=x: torch.softmax(x, dim=-1)})
        if gpu is not None:
            impls["jax.jit(naive)"] = _jax_impl(softmax_naive_jax, gpu, x)
        yield Bench("compile_softmax", n, bytes=2 * x.nbytes, flops=5 * m * n, label=f"{m}x{n} fp32",
                    impls=impls)
        del x, impls

    lesson06 = _course_attention()
    compiled_attention = torch.compile(attention_naive, dynamic=False)
    compiled_softcap = torch.compile(attention_softcap, dynamic=False)
    from torch.nn.attention.flex_attention import flex_attention

    compiled_flex = torch.compile(flex_attention, dynamic=False)
    H, D = 16, 128
    qkv_of = lambda B, N: tuple(torch.randn(B, H, N, D, device="cuda", dtype=torch.float16)  # noqa: E731
                                for _ in range(3))
    for B, N in ((16, 1024), (4, 4096)):
        qkv = qkv_of(B, N)
        impls = {}
        if lesson06:
            impls["triton FlashAttention (lesson 06)"] = lambda qkv=qkv: lesson06.attention(*qkv)
        impls.update({"torch.compile(naive)": lambda qkv=qkv: compiled_attention(*qkv),
                      "torch eager naive": lambda qkv=qkv: attention_naive(*qkv),
                      "SDPA (default backend)": lambda qkv=qkv: F.scaled_dot_product_attention(*qkv)})
        if gpu is not None:
            impls["jax.jit(naive)"] = _jax_impl(attention_naive_jax, gpu, *qkv)
        yield Bench("compile_attention", N, bytes=4 * qkv[0].nbytes, flops=4 * B * H * N * N * D,
                    label=f"B{B} N{N}", metric="TFLOP/s", impls=impls)
        del qkv, impls
        torch.cuda.empty_cache()

    for B, N in ((16, 1024), (4, 4096), (1, 16384)):
        qkv = qkv_of(B, N)
        impls = {"flex_attention (compiled template)":
                 lambda qkv=qkv: compiled_flex(*qkv, score_mod=_softcap_score_mod)}
        if lesson06:
            impls["triton FlashAttention + soft-cap (lesson 06)"] = \
                lambda qkv=qkv: lesson06.flash_forward(*qkv, softcap=30.0)[0]
        impls["torch.compile(naive)"] = lambda qkv=qkv: compiled_softcap(*qkv)
        if N <= 4096:   # eager and JAX keep several N x N tensors alive: tens of GB at N = 16384
            impls["torch eager naive"] = lambda qkv=qkv: attention_softcap(*qkv)
            if gpu is not None:
                impls["jax.jit(naive)"] = _jax_impl(attention_naive_jax, gpu, *qkv, cap=30.0)
        yield Bench("compile_softcap_attention", N, bytes=4 * qkv[0].nbytes, flops=4 * B * H * N * N * D,
                    label=f"B{B} N{N}", metric="TFLOP/s", impls=impls)
        del qkv, impls
        torch.cuda.empty_cache()
