"""Lesson 04 exercises: a 2-D kernel over strided tensors, grouped tile order, a tiled matmul, and a
matmul with a fused bias + GELU epilogue.

Sizes are drawn afresh at every check and are a multiple of no block a kernel would use: odd on the
CPU; on a GPU, 256 j - 1 with j odd, so that every power-of-two block up to 256 leaves exactly one
row or column past the end (a missing mask writes into the check's guard band, not further), and
the last group of tile rows is a short one. The matmuls run once more with their autotuner given
tiles of 32 x 64 x 16: the CPU's tiles are 64 x 64 x 64, where BLOCK_M, BLOCK_N and BLOCK_K mixed
up give the right values. For the same reason add_2d's kernel runs once more with tiles of 16 x 64,
then 64 x 16: its launcher passes BLOCK_M = BLOCK_N.
"""

import operator
import random

import torch
import torch.nn.functional as F
import triton

from helpers import interpreter
from helpers.device import DEVICE, ON_GPU, pick
from helpers.exercises import (
    UNEQUAL_BLOCKS_WHY,
    Case,
    Exercise,
    kernel_beside,
    rerun,
    rerun_with_config,
    tuned_over,
)
from helpers.exercises.lesson02 import fused


def _odd(r, lo, hi):
    return r.randrange(lo | 1, hi + 1, 2)


def _awkward(r, cpu, gpu):
    """A random size that is a multiple of no block: odd in `cpu` (lo, hi), or 256 j - 1, j odd in `gpu`."""
    return 256 * _odd(r, *gpu) - 1 if ON_GPU else _odd(r, *cpu)


# ---------------------------------------------------------------- add_2d


def add_2d_reference(x, y):
    return x + y  # read 2MN elements (or fewer, for a broadcast view), write MN


def _add_2d_cases():
    """Views at interpreter sizes on any device: a kernel that misreads a stride reads past a view's
    memory, and on a GPU a read far past it can fault and stop the process. The broadcast row is
    short enough that reading it as a full matrix stays inside the check's NaN halo."""
    r = random.Random()

    def randn(*shape, dtype=torch.float32):
        return torch.randn(*shape, device=DEVICE, dtype=dtype)

    big_m, big_n = _awkward(r, (101, 199), (11, 13)), _awkward(r, (41, 99), (7, 9))  # big_m > big_n
    m, n = _odd(r, 101, 199), _odd(r, 41, 99)
    rows, cols = r.choice([3, 5]), _odd(r, 101, 255)  # (rows - 1) * cols < 1024: inside the halo
    small_m, small_n = _odd(r, 17, 63), _odd(r, 3, 15)
    cases = [
        Case("1x1 (a single element)", (randn(1, 1), randn(1, 1))),
        Case(f"{big_m}x{big_n}, both contiguous (not multiples of any block)",
             (randn(big_m, big_n), randn(big_m, big_n))),
        Case(f"{m}x{n}, y a transposed view (stride_ym = 1)", (randn(m, n), randn(n, m).t())),
        Case(f"{m}x{n}, x every other column of a wider matrix (stride_xn = 2)",
             (randn(m, 2 * n)[:, ::2], randn(m, n))),
        Case(f"{rows}x{cols}, y one row broadcast down (stride_ym = 0): a bias add",
             (randn(rows, cols), randn(1, cols).expand(rows, cols))),
        Case(f"{small_m}x{small_n} float16, both transposed views",
             tuple(randn(small_n, small_m, dtype=torch.float16).t() for _ in range(2))),
    ]
    if ON_GPU:
        cases.append(Case(f"{big_m}x{big_n} bfloat16, both contiguous",
                          tuple(randn(big_m, big_n, dtype=torch.bfloat16) for _ in range(2))))
    return cases


ADD_2D_ARGS = ["x_ptr", "y_ptr", "out_ptr", "M", "N", "stride_xm", "stride_xn", "stride_ym", "stride_yn",
               "stride_om", "stride_on", "BLOCK_M", "BLOCK_N"]   # the notebook's add_2d_kernel


def _add_2d_unequal_blocks(fn):
    """A structure check: the add_2d_kernel beside fn (in its globals, as a notebook cell's function finds
    it) launched once more in the interpreter with tiles of 16 x 64, then 64 x 16, on a (70, 100) float32
    x + y, y a transposed view. The launcher passes BLOCK_M = BLOCK_N, where a kernel that uses one where
    the other belongs gets every case right. With the smaller block along a dimension, such a kernel's
    tiles leave part of it unwritten (with the larger one they overlap, and the values stay right: hence
    the two runs). Where fn has no such kernel, or one of another signature (a design of the learner's
    own), there is nothing to run."""
    import contextlib

    import triton

    kernel = kernel_beside(fn, "add_2d_kernel", ADD_2D_ARGS)
    if kernel is None:
        return None
    M, N = 70, 100
    x = torch.randn(M, N, device=DEVICE)
    y = torch.randn(N, M, device=DEVICE).t()
    why = (" The launcher passes BLOCK_M = BLOCK_N, so a kernel that uses one where the other belongs gets "
           "every case right. Check each use: the rows (offs_m) go with program_id(0) and BLOCK_M, the "
           "columns (offs_n) with program_id(1) and BLOCK_N.")
    for bm, bn in ((16, 64), (64, 16)):
        def launch(x, y, bm=bm, bn=bn):
            out = torch.full((M, N), float("nan"), device=DEVICE)
            kernel[(triton.cdiv(M, bm), triton.cdiv(N, bn))](
                x, y, out, M, N, x.stride(0), x.stride(1), y.stride(0), y.stride(1), out.stride(0),
                out.stride(1), BLOCK_M=bm, BLOCK_N=bn)
            return out

        where = (f"launched once more with BLOCK_M, BLOCK_N = {bm}, {bn} (a grid of cdiv(M, {bm}) x "
                 f"cdiv(N, {bn}) programs, into an output filled with NaN) on a ({M}, {N}) float32 x + y, "
                 f"y a transposed view, in the interpreter, your add_2d_kernel")
        problem = rerun(contextlib.nullcontext(), launch, (x, y), x + y, where, why)
        if problem:
            return problem
    return None


# ---------------------------------------------------------------- grouped_order


def grouped_order_reference(pid, num_pid_m, num_pid_n, group_m):
    per_group = group_m * num_pid_n
    first_m = (pid // per_group) * group_m
    rows = min(num_pid_m - first_m, group_m)
    return first_m + (pid % per_group) % rows, (pid % per_group) // rows


def stores_of(launches):
    """[(pid, offsets)]: every store the launches made (recorded with touches=True), one per tile."""
    return [(pid, offs) for launch in launches for pid, _arg, kind, offs in launch.touches if kind == "store"]


def tile_order_problem(stores, tiles, block, n_cols, group_m, where):
    """A message if some program did not store the tile grouped_order_reference gives it, else None.

    `stores`: [(pid, offsets)], one store of a tile each (an interpreter record's touches), its offsets
    elements of a contiguous output with `n_cols` columns; `tiles` = (num_pid_m, num_pid_n), `block` =
    (BLOCK_M, BLOCK_N). The values come out right in any order, so only where each program stores shows
    the order. Where every program follows one other order (row-major, column-major, groups of another
    size), the message names it."""
    (tiles_m, tiles_n), (block_m, block_n) = tiles, block
    got = {}
    for pid, offs in stores:
        if pid[1:] != (0, 0):
            return (f"{where} ran program {pid} on a grid of more than one dimension. The launcher's grid "
                    f"is 1-D, one program per tile: program_id(0) is the tile's number, and the grouped "
                    f"order gives its row and column.")
        first = int(offs.min())
        got[pid[0]] = (first // n_cols // block_m, first % n_cols // block_n)
    order = lambda g: {t: grouped_order_reference(t, tiles_m, tiles_n, g) for t in got}  # noqa: E731
    if got == order(group_m):
        return None
    tile = next(t for t in sorted(got) if got[t] != order(group_m)[t])
    want = order(group_m)[tile]
    others = {1: " (row-major: pid // num_pid_n, pid % num_pid_n)",
              tiles_m: f" (column-major: pid % num_pid_m, pid // num_pid_m, as groups of {tiles_m} tile rows "
                       f"or more give)"}
    others.update({g: f" (groups of {g} tile rows, not GROUP_M = {group_m}: is a group size written in?)"
                   for g in range(2, tiles_m) if g != group_m})
    named = next((words for g, words in others.items() if got == order(g)), "")
    return (f"{where}'s program {tile} stored the tile at tile row {got[tile][0]}, column {got[tile][1]}"
            f"{named}. In lesson 04's grouped order program {tile} computes tile row {want[0]}, column "
            f"{want[1]}: tile_coords(program_id(0), num_pid_m, num_pid_n, GROUP_M) gives them, with "
            f"num_pid_m = cdiv(M, BLOCK_M) = {tiles_m}, num_pid_n = cdiv(N, BLOCK_N) = {tiles_n} and "
            f"GROUP_M = {group_m}. The values come out right in any order; the order decides which tiles of "
            f"A and B the programs running together share in L2.")


def _every_program(fn, num_pid_m, num_pid_n, group_m):
    """The tile of every program id, in order: [(pid_m, pid_n), ...]. A row or column that is not an
    integer (a float from `/`, which int() would quietly round down to the right tile) fails here."""
    from helpers.check import CheckFailed  # not at the top: helpers.check imports this package

    out = []
    for pid in range(num_pid_m * num_pid_n):
        tile = fn(pid, num_pid_m, num_pid_n, group_m)
        if tile is None:
            return None
        try:
            out.append(tuple(operator.index(t) for t in tile))
        except TypeError:
            raise CheckFailed(
                f"program {pid} of {num_pid_m}x{num_pid_n} tiles (group_m = {group_m}) got the tile "
                f"{tile!r}: a tile's row and column are integers, and here one is not. In Python `/` gives "
                f"a float even between integers (7 / 2 is 3.5); inside a kernel a float offset cannot "
                f"address memory. Integer arithmetic only (`//`, `%`, `min`).") from None
    return out


def _grouped_order_cases():
    r = random.Random()
    cases = [Case("4x4 tiles, groups of 2 rows", (4, 4, 2)),
             Case("7x5 tiles, groups of 3 rows (the last group has only one)", (7, 5, 3)),
             Case("3x6 tiles, group_m = 1: plain row-major order", (3, 6, 1)),
             Case("2x9 tiles, groups of 8 rows (more than there are)", (2, 9, 8)),
             Case("9x1 tiles, one tile column", (9, 1, 4)),
             Case("5x5 tiles, groups of 3 rows (the last group, 2 rows, starts at program 15: not a "
                  "multiple of its rows)", (5, 5, 3))]
    for _ in range(2):
        g = r.choice([3, 4, 8])
        m, n = r.randint(2, 5) * g + r.randint(1, g - 1), r.randint(5, 40)  # a short last group
        cases.append(Case(f"{m}x{n} tiles, groups of {g} (random sizes, a short last group)", (m, n, g)))
    return cases


# ---------------------------------------------------------------- matmul, matmul_bias_gelu


def matmul_reference(a, b):
    return a @ b  # 2MNK FLOPs; read MK + KN elements, write MN


def matmul_bias_gelu_reference(a, b, bias):
    c = a @ b                                  # read MK + KN, write MN
    c = c + bias                               # read MN + N, write MN
    return F.gelu(c, approximate="tanh")       # read MN, write MN: two round trips the epilogue avoids


STRUCTURE_MNK = (33, 65, 47)   # the product the structure checks measure: a few tiles, none whole


def _structure_args(with_bias=True):
    """float16 (a, b[, bias]) of STRUCTURE_MNK's sizes."""
    M, N, K = STRUCTURE_MNK
    args = (torch.randn(M, K, device=DEVICE, dtype=torch.float16),
            torch.randn(K, N, device=DEVICE, dtype=torch.float16) / K**0.5,
            torch.randn(N, device=DEVICE, dtype=torch.float16))
    return args if with_bias else args[:2]


def _one_kernel(fn):
    """None if the whole layer ran as one Triton launch, else what ran besides it."""
    args = _structure_args()
    fn(*args)  # on a GPU the first call at a new size autotunes, launching each config several times
    return fused(fn, *args)


def _with_tl_dot(with_bias):
    """A structure check: None if the product's kernel multiplies its tiles with tl.dot (the calls counted
    in the interpreter, on a GPU too), else what the lesson asks. A product broadcast and summed over K
    (tl.sum(a[:, :, None] * b[None, :, :], 1)) gives the same values, but builds a BLOCK_M x BLOCK_K x
    BLOCK_N tensor and never reaches the tensor cores."""
    def check(fn):
        M, N, K = STRUCTURE_MNK
        args = _structure_args(with_bias)
        fn(*args)   # on a GPU the first call at a new size autotunes, outside the record
        with interpreter.record() as rec, interpreter.dots() as dots:
            fn(*args)
        if not rec.launches or dots:
            return None
        return (f"at {M}x{N}x{K} its kernel multiplied the tiles without tl.dot. A product broadcast and "
                f"summed over K (tl.sum(a[:, :, None] * b[None, :, :], 1)) gives the same values, but it "
                f"holds a BLOCK_M x BLOCK_K x BLOCK_N tensor at once and runs on the ordinary arithmetic "
                f"units. Step 4 asks for acc = tl.dot(a, b, acc): the tensor cores, with the products "
                f"summed in float32.")
    return check


def _unequal_blocks(kernel_name, with_bias):
    """A structure check: one more product in the interpreter with the autotuner of `kernel_name` given
    tiles of 32 x 64 x 16 in groups of 2 tile rows for the call (rerun_with_config). The CPU's
    configuration, 64 x 64 x 64, has BLOCK_M, BLOCK_N and BLOCK_K equal, and a GPU's autotuner may
    choose square tiles: there a kernel that uses one where another belongs gets the values right; and
    the CPU's cases have fewer tile rows than a group, where a slip in the grouped order goes unseen. A
    (70, 40) @ (40, 200) float16 product: 3 x 4 tiles, the last row and column cut, in two groups (the
    second of one tile row), K in 3 steps of 16, the last partial."""
    def check(fn):
        import triton

        M, K, N = 70, 40, 200
        a = torch.randn(M, K, device=DEVICE, dtype=torch.float16)
        b = (torch.randn(K, N, device=DEVICE) / K**0.5).half()
        args = (a, b, torch.randn(N, device=DEVICE, dtype=torch.float16)) if with_bias else (a, b)
        config = triton.Config({"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 16, "GROUP_M": 2}, num_warps=4,
                               num_stages=1)
        why = UNEQUAL_BLOCKS_WHY + ("the tile's rows (offs_m) go with BLOCK_M, its columns (offs_n) with "
                                    "BLOCK_N, the K loop's step and offs_k with BLOCK_K, and the grid's tile "
                                    "counts divide M by BLOCK_M and N by BLOCK_N. This product also has "
                                    "more tile rows than a group: if the blocks are right, check the grouped "
                                    "order (step 1) past the first group, as `grouped_order` computes it.")
        want = (matmul_bias_gelu_reference if with_bias else matmul_reference)(*(t.float() for t in args))
        where = (f"run with BLOCK_M, BLOCK_N, BLOCK_K = 32, 64, 16 and GROUP_M = 2 (the check gave your "
                 f"autotuner this one configuration for one call) on a ({M}, {K}) @ ({K}, {N}) float16 "
                 f"product in the interpreter (3 x 4 tiles, two groups of tile rows), your kernel")
        # float16 output: rounded once at the store
        return rerun_with_config(fn, kernel_name, config, args, want, where, why, tol=2e-3)
    return check


def _in_grouped_order(fn):
    """Program p stores the tile the grouped order gives it (step 1): matmul_kernel's autotuner given
    32 x 64 x 16 tiles in groups of 3 tile rows for one call on a (150, 40) @ (40, 184) product, in the
    interpreter. 5 x 3 tiles: row-major order, column-major order, groups of another size (8 written in
    for GROUP_M, say) and a last group of 2 rows taken as a full one each put some program on another
    tile, though the values come out right in every one of them: only the stores show the order."""
    kernel = getattr(fn, "__globals__", {}).get("matmul_kernel")
    if not hasattr(kernel, "configs"):   # another design of the learner's own: nothing to run
        return None
    M, K, N, group = 150, 40, 184, 3
    a = torch.randn(M, K, device=DEVICE, dtype=torch.float16)
    b = (torch.randn(K, N, device=DEVICE) / K**0.5).half()
    config = triton.Config({"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 16, "GROUP_M": group}, num_warps=4,
                           num_stages=1)
    with tuned_over(kernel, [config]), interpreter.record(touches=True) as rec:
        fn(a, b)
    where = (f"run with BLOCK_M, BLOCK_N = 32, 64 and GROUP_M = {group} on a ({M}, {K}) @ ({K}, {N}) product "
             f"(5 x 3 tiles) in the interpreter, your kernel")
    return tile_order_problem(stores_of(rec.launches), (5, 3), (32, 64), N, group, where)


# Computed in float32 and rounded once at the store, the output is within half a unit in the last
# place of the exact one: 2**-11 of it in float16 (rtol). atol covers what the float32 partial sums
# lose over a K of a few thousand (tensor cores may truncate them instead of rounding). A bias add
# or GELU done in float16 rounds once more and lands outside, by a factor of three or more; so does
# GELU through erf instead of tanh, in its negative tail.
EPILOGUE_TOL = {torch.float16: (1e-4, 6e-4)}


def _with_bias(cases):
    """The matmul cases, each with a random bias of one float16 value per column."""
    return [Case(c.label, (*c.args, torch.randn(c.args[1].shape[1], device=DEVICE, dtype=c.args[0].dtype)))
            for c in cases]


def _matmul_cases():
    """Fresh fp16 (a, b) pairs; b is scaled by 1/sqrt(K) so that outputs stay of order one.

    The default float16 tolerance (about two units in the last place) is what a float32 accumulator
    meets. A float16 one (`tl.dot(..., out_dtype=tl.float16)`, or `acc` in float16) rounds every
    partial sum; over the long inner dimension below its error grows past the tolerance.
    """
    r = random.Random()

    def operands(M, N, K, layout="contiguous", dtype=torch.float16):
        def randn(rows, cols, scale=1.0):
            return (torch.randn(rows, cols, device=DEVICE) * scale).to(dtype)

        a = randn(M, 2 * K)[:, ::2] if layout == "a strided" else randn(M, K)
        b = randn(N, K, K**-0.5).t() if layout == "b transposed" else randn(K, N, K**-0.5)
        return a, b

    def sizes(k_cpu=(65, 199), k_gpu=(1, 3)):  # M and N: two or more tiles, fewer tile rows than a group
        return (_awkward(r, (65, 161), (3, 7)), _awkward(r, (65, 161), (3, 5)), _awkward(r, k_cpu, k_gpu))

    exact = (pick(64, 256),) * 3
    shape = "{}x{}x{}".format
    plain, transposed, strided = sizes(), sizes(), sizes()
    long_k = sizes(k_cpu=(2001, 3001), k_gpu=(15, 17))
    if not ON_GPU:
        long_k = (_odd(r, 33, 95), _odd(r, 33, 95), long_k[2])  # fewer tiles: the interpreter stays quick
    # float32 on the CPU only (the interpreter's tl.dot multiplies float32 operands as they are; a GPU's
    # takes them as TF32): values float16 cannot hold, so operands converted to float16 in the kernel
    # show there, and so does the output converted to float16 whatever C's dtype
    in_float32 = pick(cpu=[Case(f"{shape(*plain)} float32 (values float16 would round): C in a's dtype",
                                operands(*plain, dtype=torch.float32))], gpu=[])
    # the CPU only: the interpreter sums float32 exactly enough; a GPU's tensor cores may truncate partial
    # sums this large, by more than the output's tolerance
    cancelling = pick(cpu=[Case(f"{shape(33, 65, 513)}: K's second half cancels its first, so the partial "
                                f"sums climb to about 128 before they come back (float16 partial sums round "
                                f"by 1/16 up there)", _cancelling(33, 65, 513))], gpu=[])
    return [Case("1x1x1", operands(1, 1, 1)),
            Case(f"{shape(*exact)} (exact multiples of the blocks)", operands(*exact)),
            Case(f"{shape(*plain)}: no size a multiple of any block", operands(*plain)),
            Case(f"{shape(*transposed)}, b a transposed view", operands(*transposed, "b transposed")),
            Case(f"{shape(*strided)}, a every other column of a wider one", operands(*strided, "a strided")),
            Case(f"{shape(*long_k)}: a long inner dimension (float16 partial sums drift)", operands(*long_k)),
            *in_float32, *cancelling]


def _cancelling(M, N, K):
    """float16 (a, b) with a near 1 and b's last K // 2 rows the negative of its first (near 0.5), one small
    row between (K odd): each output's partial sums over K climb to about K / 4, then come back to a few
    tenths."""
    a = (1 + 0.05 * torch.randn(M, K, device=DEVICE)).half()
    half = 0.5 + 0.05 * torch.randn(K // 2, N, device=DEVICE)
    middle = 0.05 * torch.randn(K % 2, N, device=DEVICE)
    return a, torch.cat([half, middle, -half]).half()


def _epilogue_cases():
    """The matmul cases with a random bias, then biases spread evenly over [-top, top] (shuffled) in
    every draw: GELU's tails, where tanh(u) written through exp(2u) gives inf / inf (|x| above ~10)."""
    cases = _with_bias(_matmul_cases())
    for top in (100.0, 6e4):
        M, N, K = 33, 65, 47
        a = torch.randn(M, K, device=DEVICE, dtype=torch.float16)
        b = (torch.randn(K, N, device=DEVICE) / K**0.5).half()
        bias = torch.linspace(-top, top, N, device=DEVICE)[torch.randperm(N, device=DEVICE)].half()
        cases.append(Case(f"{M}x{N}x{K}, biases spread from {-top:g} to {top:g} (GELU's tails: exp(2u) "
                          f"overflows float32 for |x| above about 10)", (a, b, bias)))
    return cases


EXERCISES = [
    # The launcher allocates a contiguous output ("the result is contiguous"): one allocated like x would
    # keep a transposed x's layout.
    Exercise("04", "add_2d", "x + y over strided 2-D views", add_2d_reference, _add_2d_cases, kernel=True,
             contiguous_output=True, structure=_add_2d_unequal_blocks),
    Exercise("04", "grouped_order", "grouped tile order", grouped_order_reference, _grouped_order_cases,
             run=_every_program, reference_in_float64=False),
    Exercise("04", "matmul", "tiled matmul with tl.dot", matmul_reference, _matmul_cases, kernel=True,
             structure=lambda fn: (_with_tl_dot(with_bias=False)(fn)
                                   or _unequal_blocks("matmul_kernel", with_bias=False)(fn)
                                   or _in_grouped_order(fn))),
    Exercise("04", "matmul_bias_gelu", "matmul + bias + GELU epilogue", matmul_bias_gelu_reference,
             _epilogue_cases, kernel=True, tol=EPILOGUE_TOL,
             structure=lambda fn: (_one_kernel(fn) or _with_tl_dot(with_bias=True)(fn)
                                   or _unequal_blocks("matmul_bias_gelu_kernel", with_bias=True)(fn))),
]
