"""The Gluon FlashAttention-3-style forward (solutions/gluon_attention.py) compiled for Hopper, sm_90,
on the host: no GPU is needed, only Triton's NVIDIA backend and its ptxas. What it checks is the kernel's
structure, not its numbers (those need a GPU: tests/gpu_gluon_check.py), for each schedule (plain,
OVERLAP, PINGPONG, both, the plain one with three consumers, and persistent programs with two or three
consumers and with two consumers and two Q buffers) at D 64 and 128, causal and full, with the tiles the
host picks for it:

* the PTX has asynchronous wgmma, TMA copies, mbarrier waits and arrivals, and setmaxnreg with the
  partitions' register budgets (24 for the producer, 240 for a consumer of two, 160 of three); with
  OVERLAP a wait that leaves one wgmma group running (the next tile's S = Q K^T), with PINGPONG two
  more barriers;
* 12 warps a CTA (two consumer warpgroups, the producer's warp padded to a warpgroup), 16 with three;
* ptxas (run with this Triton's own flags) spills nothing to local memory (but for one kernel, below),
  and serialises no wgmma (its messages C7514 / C7517: an accumulator's registers touched while its
  wgmma ran, which would undo the overlap);
* the shared memory (Q, the K and V rings, the barriers) fits a Hopper CTA's 227 KB.
The barrier protocol itself (phases, hangs, ring depth) is run through every interleaving in
tests/test_gluon_protocol.py.
"""

import json
import os
import pathlib
import subprocess
import sys

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


_COMPILE = """
import json, pathlib, sys
sys.path.insert(0, sys.argv[1])
import helpers  # noqa: F401
from helpers.solutions import load_module
module = load_module(pathlib.Path(sys.argv[1]) / "solutions" / sys.argv[4])
compiled = module.compile_for_hopper(**json.loads(sys.argv[2]))
built = {"ptx": compiled.asm["ptx"], "report": module.ptxas_report(compiled),
         "shared": compiled.metadata.shared}
pathlib.Path(sys.argv[3]).write_text(json.dumps(built))
"""


def compile_apart(tmp_path, head_dim, causal, module="gluon_attention.py", **tiles):
    """solutions/<module>'s compile_for_hopper in a process of its own: {"ptx", "report" (ptxas_report's),
    "shared"}.

    In this one, an interpreted launch of an earlier test may have left triton.language patched
    (Triton's interpreter patches it for each launch and undoes that in a `finally`): every compile
    then fails, with AttributeError: 'value' object has no attribute 'dtype'. CI met that, on Triton
    3.6 and 3.9, on a worker that had run other files first."""
    out = tmp_path / "compiled.json"
    done = subprocess.run([sys.executable, "-c", _COMPILE, str(ROOT),
                           json.dumps({"head_dim": head_dim, "causal": causal, **tiles}), str(out), module],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(out.read_text())


# (overlap, pingpong, consumers, persistent, q_buffers)
SCHEDULES = {"plain": (False, False, 2, False, 1), "overlap": (True, False, 2, False, 1),
             "pingpong": (False, True, 2, False, 1), "overlap+pingpong": (True, True, 2, False, 1),
             "three": (False, False, 3, False, 1), "persistent": (False, False, 2, True, 1),
             "three+persistent": (False, False, 3, True, 1), "persistent+2q": (False, False, 2, True, 2)}


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("schedule", list(SCHEDULES))
def test_compiles_for_hopper(gluon_attention, tmp_path, schedule, head_dim, causal):
    overlap, pingpong, consumers, persistent, q_buffers = SCHEDULES[schedule]
    built = compile_apart(tmp_path, head_dim, causal, overlap=overlap, pingpong=pingpong, consumers=consumers,
                          persistent=persistent, q_buffers=q_buffers)
    ptx = built["ptx"]
    block_n, stages = gluon_attention.tile_config(head_dim, overlap, pingpong)

    # S = Q K^T takes D/16 wgmmas of k = 16, O += P V takes BLOCK_N/16. Plain: per consumer one of
    # each in the unmasked loop and in the masked one. OVERLAP: the first tile's S, then a loop for
    # the unmasked tiles and one for the masked, each issuing an S and a PV, then the last PV.
    qk, pv = head_dim // 16, block_n // 16
    per_consumer = 3 * (qk + pv) if overlap else 2 * (qk + pv)
    # With two Q buffers a consumer's block code is there twice, once per buffer (the kernel says why)
    assert ptx.count("wgmma.mma_async") == q_buffers * consumers * per_consumer
    assert "wgmma.wait_group" in ptx
    # OVERLAP waits for S(j) with the PV of tile j-1 still running: wait_group 1; the plain schedule never
    assert ("wgmma.wait_group.sync.aligned 1;" in ptx) == overlap
    # P is fed from registers: no S/P round trip through shared memory in the consumer loops. The only
    # shared stores are the setup's (2 with two consumers, 4 with three) and, at D = 128, the epilogue's
    # move of the output into rows of 16-byte vectors: per consumer, 64 rows x D values of 2 bytes over
    # 128 threads, 16 bytes each.
    staged = head_dim == 128 and stages * block_n <= 256
    # persistent: the block's number the producer writes, and the counter's value passed on from the
    # thread that took it (3 stores with Triton 3.6, 2 with 3.9)
    setup = 2 * (consumers - 1) + 3 * persistent
    staging = q_buffers * consumers * 64 * head_dim * 2 // (128 * 16) if staged else 0   # per block code
    assert ptx.count("st.shared") <= setup + staging
    assert "stmatrix" not in ptx

    # TMA: Q's boxes (one per consumer), then K and V, each into an mbarrier with a byte count
    assert "cp.async.bulk.tensor.2d" in ptx
    assert "mbarrier.arrive.expect_tx" in ptx
    assert "mbarrier.try_wait.parity" in ptx
    # barriers: q_ready, then k_ready, v_ready, k_empty, v_empty per slot; PINGPONG's turn[0], turn[1];
    # persistent, a q_ready and a q_empty (the buffer free for a later block) per Q buffer
    assert ptx.count("mbarrier.init") == q_buffers * (1 + persistent) + 4 * stages + 2 * pingpong
    # arrivals, per consumer: each place that computes an S releases its K (k_empty), each that
    # finishes a PV its V (v_empty): 2 + 2 in the plain loops, 3 + 3 with OVERLAP. PINGPONG hands the
    # turn over once per turn: 3 places in the plain schedule, 4 with OVERLAP.
    releases = 6 if overlap else 4
    hand_overs = 4 if overlap else 3
    # Persistent: each consumer's arrival on q_empty once its block's last S is done, and the producer's
    # arrival on q_ready that tells the consumers to stop.
    # (With two Q buffers, all of a consumer's arrivals are there once per buffer.)
    per_copy = consumers * (releases + pingpong * hand_overs + persistent)
    more = (ptx.count("mbarrier.arrive.shared") - q_buffers * per_copy - persistent) // q_buffers
    # The plain schedule, causal, releases the tiles past its own rows unread (K and V) after its
    # epilogue: 2 more in each consumer but the last, whose rows end where the block's do (the compiler
    # finds that it has no such tiles, and may drop the loop).
    assert more in ((2 * (consumers - 1), 2 * consumers) if causal and not overlap and not pingpong else (0,))

    # register reallocation between the partitions
    regs = {int(line.split()[-1].rstrip(";")) for line in ptx.splitlines() if "setmaxnreg" in line}
    consumer_regs, _ = gluon_attention.REGISTERS[consumers]
    assert int(gluon_attention.PRODUCER_REGS) in regs and consumer_regs in regs
    assert f".reqntid {128 * (consumers + 1)}" in ptx   # 4 warps a consumer, the producer's 1 padded to 4

    # persistent: one atomic a block, the producer taking the next block from the counter
    assert ptx.count("atom.global") == persistent

    report = built["report"]
    spilled = report["spill_stores"] + report["spill_loads"]
    if consumers == 3 and persistent and head_dim == 64:
        assert spilled <= 80, report["text"]    # Triton 3.9, full attention: 16 + 64 bytes (3.6: none)
    elif not (consumers == 3 and head_dim == 128 and (causal or persistent)):
        assert spilled == 0, report["text"]
    # (Three consumers have 160 to 168 registers a thread. At D = 128, causal, ptxas spills once each
    # warpgroup reads only its own rows' tiles (176 bytes of stores with Triton 3.9); timed on an
    # H100 that kernel was still faster than the one without at N = 2048 and 4096, so it stays. Three
    # persistent consumers spill at D = 128 too: the loop over blocks keeps more values alive, and that
    # schedule is slower there than the one-block kernel, as lesson 10's table shows.)
    assert report["serialized"] == [], report["text"]
    assert "ld.local" not in ptx and "st.local" not in ptx

    smem = built["shared"]
    buffers = q_buffers * consumers * 64 * head_dim * 2 + 2 * stages * block_n * head_dim * 2
    assert buffers <= smem <= HOPPER_SMEM_PER_CTA, (smem, buffers)


def test_host_tiles(gluon_attention):
    """The host's tiles fit a Hopper CTA's shared memory (the compiled kernels above say how much)."""
    for head_dim in (64, 128):
        for overlap, pingpong, consumers, _, q_buffers in SCHEDULES.values():
            block_n, stages = gluon_attention.tile_config(head_dim, overlap, pingpong)
            assert 128 % block_n == 0 and stages >= 1
            assert (q_buffers * consumers * 64 * head_dim * 2 + 2 * stages * block_n * head_dim * 2
                    <= HOPPER_SMEM_PER_CTA)


def test_one_slot_ring_compiles(gluon_attention, tmp_path):
    """Every schedule runs on a ring of one slot (tests/test_gluon_protocol.py: K and V released apart);
    the kernel takes it, and the host refuses none."""
    built = compile_apart(tmp_path, 128, True, num_stages=1, overlap=True, pingpong=True)
    assert built["report"]["spill_stores"] == 0
    import torch
    q = torch.zeros(1, 1, 128, 64, dtype=torch.float16)
    with pytest.raises(AssertionError, match="at least one slot"):
        gluon_attention.gluon_attention(q, q, q, num_stages=-1, overlap=True, pingpong=True)


def test_consumers_the_host_refuses(gluon_attention):
    """Two or three consumer warpgroups, and the ping-pong's turns only with two."""
    import torch
    q = torch.zeros(1, 1, 128, 64, dtype=torch.float16)
    for wrong in ({"consumers": 4}, {"consumers": 3, "pingpong": True}):
        with pytest.raises(AssertionError, match="consumers: 2 or 3"):
            gluon_attention.gluon_attention(q, q, q, **wrong)


def test_persistent_takes_the_plain_schedule_only(gluon_attention):
    """Persistent programs walk blocks with the plain schedule; the host refuses the others' flags."""
    import torch
    q = torch.zeros(1, 1, 128, 64, dtype=torch.float16)
    for wrong in ({"overlap": True}, {"pingpong": True}):
        with pytest.raises(AssertionError, match="persistent: the plain schedule only"):
            gluon_attention.gluon_attention(q, q, q, persistent=True, **wrong)


def test_two_q_buffers_the_host_refuses(gluon_attention):
    """A second Q buffer is for persistent programs, and not beside three consumers' ring at D = 128."""
    import torch
    q = torch.zeros(1, 1, 128, 64, dtype=torch.float16)
    with pytest.raises(AssertionError, match="q_buffers: 1, or 2 with persistent=True"):
        gluon_attention.gluon_attention(q, q, q, q_buffers=2)
    with pytest.raises(AssertionError, match="q_buffers: 1, or 2 with persistent=True"):
        gluon_attention.gluon_attention(q, q, q, persistent=True, q_buffers=3)
    q128 = torch.zeros(1, 1, 128, 128, dtype=torch.float16)
    with pytest.raises(AssertionError, match="shared memory holds one Q buffer"):
        gluon_attention.gluon_attention(q128, q128, q128, persistent=True, consumers=3, q_buffers=2)


@pytest.mark.parametrize("head_dim", [64, 128])
def test_the_backward_compiles_for_hopper(tmp_path, head_dim):
    """solutions/gluon_attention_backward.py (work in progress, issue 29), causal: two consumer warpgroups
    and a producer warp at the forward's register budgets, and per consumer and per loop (masked and
    unmasked) the wgmmas of S^T and dP^T (D/16 each), dV and dK (64/16 each) and dQ (its half of the
    columns, over both warpgroups' keys: twice 64/16), none of them serialised; dQ added by TMA
    reductions, not atomics."""
    built = compile_apart(tmp_path, head_dim, True, module="gluon_attention_backward.py")
    ptx, report = built["ptx"], built["report"]
    per_loop = 2 * (head_dim // 16) + 2 * 4 + 2 * 4
    assert ptx.count("wgmma.mma_async") == 2 * 2 * per_loop
    assert report["serialized"] == []
    regs = {int(line.split()[-1].rstrip(";")) for line in ptx.splitlines() if "setmaxnreg" in line}
    assert {24, 240} <= regs
    assert "cp.async.bulk.tensor.2d" in ptx and "cp.reduce.async.bulk.tensor" in ptx
    assert "red.global" not in ptx and "atom.global" not in ptx
    # kv_ready, ds_full, ds_free, then ready and empty per ring slot (5 at D = 64, 2 at D = 128)
    assert ptx.count("mbarrier.init") == 3 + 2 * (5 if head_dim == 64 else 2)
    # At D = 128 ptxas spills a few hundred bytes a thread, almost all outside the unmasked loop (Triton
    # 3.6: 332, 3.9: 380). Before the kernel kept its loop-invariant wgmma descriptors and lse/delta
    # pointers in the loop it was about 950 (3.9): the bound says when a Triton upgrade undoes that.
    assert report["spill_stores"] == 0 if head_dim == 64 else report["spill_stores"] <= 600
    assert built["shared"] <= HOPPER_SMEM_PER_CTA


_AFTER_A_LAUNCH = """
import sys
sys.path.insert(0, sys.argv[1])
import torch
import helpers
from helpers.solutions import load_solution
course = load_solution("10")
q = torch.randn(1, 1, 40, 64, device=helpers.DEVICE, dtype=torch.float16)
course.attention(q, q, q, True)   # on the CPU, an interpreted launch first
print(course.gluon_build(head_dim=64, causal=False)["registers"])
"""


def test_a_gluon_kernel_compiles_after_an_interpreted_launch(tmp_path):
    """Lesson 10 runs Triton kernels through the interpreter before it compiles the Gluon forward. Triton
    imports Gluon's language during a first launch, while the interpreter has triton.language patched;
    Gluon kept the patched functions and every Gluon compile after it failed ("Did you forget to add
    @triton.gluon.jit ?"), unless Triton's cache held the kernel. helpers imports it first now. A fresh
    process and an empty cache, as a learner's first Run All."""
    env = {**os.environ, "TRITON_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", _AFTER_A_LAUNCH, str(ROOT)], capture_output=True, text=True,
                          env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    assert int(done.stdout.split()[-1]) > 0
