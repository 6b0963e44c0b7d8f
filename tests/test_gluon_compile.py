"""The Gluon FlashAttention-3-style forward (solutions/gluon_attention.py) compiled for Hopper, sm_90,
on the host: no GPU is needed, only Triton's NVIDIA backend and its ptxas. What it checks is the kernel's
structure, not its numbers (those need a GPU: tests/gpu_gluon_check.py):

* the PTX has asynchronous wgmma, TMA copies, mbarrier waits and arrivals, and setmaxnreg with the
  partitions' register budgets (24 for the producer, 240 for a consumer);
* 12 warps a CTA (two consumer warpgroups, the producer's warp padded to a warpgroup);
* ptxas spills nothing to local memory;
* the shared memory (Q, the K and V rings, the barriers) fits a Hopper CTA's 227 KB.
"""

import os
import pathlib

import pytest

import helpers  # noqa: F401  (first, as everywhere in the course)
from helpers.solutions import load_module

ROOT = pathlib.Path(__file__).resolve().parent.parent
HOPPER_SMEM_PER_CTA = 227 * 1024


def _skip_reason():
    try:
        import triton.backends
        from triton.backends.nvidia.compiler import get_ptxas
        from triton.experimental import gluon  # noqa: F401
    except ImportError as error:
        return f"no Gluon or NVIDIA backend in this Triton: {error}"
    if "nvidia" not in triton.backends.backends:
        return "Triton's NVIDIA backend is not installed"
    try:
        path = get_ptxas(90).path
    except Exception as error:  # noqa: BLE001  (knobs raise RuntimeError when the binary is missing)
        return f"no ptxas: {error}"
    if not path or not os.path.exists(path):
        return "no ptxas"
    return None


pytestmark = pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))


@pytest.fixture(scope="module")
def gluon_attention():
    return load_module(ROOT / "solutions" / "gluon_attention.py")


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_compiles_for_hopper(gluon_attention, head_dim, causal):
    compiled = gluon_attention.compile_for_hopper(head_dim, causal)
    ptx = compiled.asm["ptx"]
    block_n, stages = gluon_attention.tile_config(head_dim)

    # per consumer and per loop (the unmasked and the masked key tiles): S = Q K^T takes D/16 wgmmas
    # of k = 16, O += P V takes BLOCK_N/16; 2 consumers x 2 loops
    assert ptx.count("wgmma.mma_async") == 4 * (head_dim // 16 + block_n // 16)
    assert "wgmma.wait_group" in ptx
    # P is fed from registers: no S/P round trip through shared memory in the consumer loops
    assert ptx.count("st.shared") <= 2 and "stmatrix" not in ptx

    # TMA: Q's two boxes, then K and V, each into an mbarrier with a byte count
    assert "cp.async.bulk.tensor.2d" in ptx
    assert "mbarrier.arrive.expect_tx" in ptx
    assert "mbarrier.try_wait.parity" in ptx
    assert "mbarrier.arrive.shared" in ptx          # the consumers' "slot is free"

    # register reallocation between the partitions
    regs = {int(line.split()[-1].rstrip(";")) for line in ptx.splitlines() if "setmaxnreg" in line}
    assert int(gluon_attention.PRODUCER_REGS) in regs and int(gluon_attention.CONSUMER_REGS) in regs
    assert ".reqntid 384" in ptx                    # 12 warps: 4 + 4 + (1 padded to 4)

    report = gluon_attention.ptxas_report(compiled)
    assert report["spill_stores"] == 0 and report["spill_loads"] == 0, report["text"]
    assert "ld.local" not in ptx and "st.local" not in ptx

    smem = compiled.metadata.shared
    buffers = 2 * 64 * head_dim * 2 + 2 * stages * block_n * head_dim * 2
    assert buffers <= smem <= HOPPER_SMEM_PER_CTA, (smem, buffers)
