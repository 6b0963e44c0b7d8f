"""Lesson 09: tma_matmul, persistent_matmul and linear.

Most mutants are one-line edits of the solution. The descriptor mutants share one kernel written out
here, which builds its descriptors in the kernel (tl.make_tensor_descriptor) and can move each
operand through pointers instead: with every operand by descriptor it is a right answer of its own.
"""

import torch
import triton
import triton.language as tl
from matmul_testing import launched_as_in_the_notebook

from helpers.solutions import load_solution
from mutants import Right, Wrong, edit

# Loading the solution also sets Triton's allocator, which descriptors built in a kernel need on a GPU.
course = load_solution("09")
tile_coords = course.tile_coords
tile_origin = course.tile_origin

# ---------------------------------------------------------------- 1. tma_matmul


@triton.jit
def device_side_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
                       A_DESC: tl.constexpr, B_DESC: tl.constexpr, C_DESC: tl.constexpr,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """C = A @ B for tile number program_id(0) in lesson 04's order; each operand through a descriptor
    built here (X_DESC) or through pointers."""
    pid_m, pid_n = tile_coords(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), 8)
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    rm = off_m + tl.arange(0, BLOCK_M)
    rn = off_n + tl.arange(0, BLOCK_N)
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1],
                                       block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[stride_bk, 1],
                                       block_shape=[BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[stride_cm, 1],
                                       block_shape=[BLOCK_M, BLOCK_N])
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        rk = k + tl.arange(0, BLOCK_K)
        if A_DESC:
            a = a_desc.load([off_m, k])
        else:
            a = tl.load(a_ptr + rm[:, None] * stride_am + rk[None, :],
                        mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        if B_DESC:
            b = b_desc.load([k, off_n])
        else:
            b = tl.load(b_ptr + rk[:, None] * stride_bk + rn[None, :],
                        mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    if C_DESC:
        c_desc.store([off_m, off_n], acc.to(c_desc.dtype))
    else:
        tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :], acc.to(c_ptr.dtype.element_ty),
                 mask=(rm[:, None] < M) & (rn[None, :] < N))


def device_side(a, b, a_desc=True, b_desc=True, c_desc=True, b_row_stride=None):
    """a @ b through device_side_kernel; b_row_stride: the row stride the kernel is told b has."""
    (M, K), N = a.shape, b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    BM, BN, BK = course.TMA_TILE
    grid = (triton.cdiv(M, BM) * triton.cdiv(N, BN),)
    device_side_kernel[grid](a, b, c, M, N, K, a.stride(0), b_row_stride or b.stride(0), c.stride(0),
                             A_DESC=a_desc, B_DESC=b_desc, C_DESC=c_desc, BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK)
    return c


TMA_K_LOOP = ("    for k in range(0, K, BLOCK_K):\n"
              "        a = a_desc.load([off_m, k])            # (BLOCK_M, BLOCK_K)")
TMA_GRID = "    grid = (triton.cdiv(M, BM) * triton.cdiv(N, BN),)"
TMA_COORDS = "    pid_m, pid_n = tile_coords(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)"
TMA_OUT = "    c = torch.empty((M, N), device=a.device, dtype=a.dtype)\n    BM, BN, BK = TMA_TILE\n    grid ="

WRONG = [
    Wrong("tma_matmul", "pure PyTorch, no kernel", lambda a, b: a @ b),
    # the CPU's tile written in: right at the lesson's tile on the CPU, wrong at any other (the check's
    # product with another tile sets course.TMA_TILE for a call: launched as the notebook does)
    Wrong("tma_matmul", "the K loop steps by 16, the CPU's BLOCK_K", launched_as_in_the_notebook(edit(
        "09", "tma_matmul_kernel", ("    for k in range(0, K, BLOCK_K):\n        a = a_desc.load([off_m, k])",
                                    "    for k in range(0, K, 16):\n        a = a_desc.load([off_m, k])")))),
    Wrong("tma_matmul", "B's tiles loaded through pointers", lambda a, b: device_side(a, b, b_desc=False)),
    Wrong("tma_matmul", "A's tiles loaded through pointers", lambda a, b: device_side(a, b, a_desc=False)),
    Wrong("tma_matmul", "C stored through pointers", lambda a, b: device_side(a, b, c_desc=False)),
    Wrong("tma_matmul", "b's descriptor told a row stride of K, not N",
          lambda a, b: device_side(a, b, b_row_stride=a.shape[1])),
    Wrong("tma_matmul", "b's descriptor told a row stride of N, its width (b assumed contiguous)",
          lambda a, b: device_side(a, b, b_row_stride=b.shape[1])),
    Wrong("tma_matmul", "the K loop steps by BLOCK_N", edit(
        "09", "tma_matmul", ("    for k in range(0, K, BLOCK_K):\n        a = a_desc.load([off_m, k])",
                             "    for k in range(0, K, BLOCK_N):\n        a = a_desc.load([off_m, k])"))),
    # BLOCK_M where BLOCK_N belongs: on a GPU the tile is square, and only the check's product with
    # unequal blocks, which sets course.TMA_TILE for a call, sees it; so launched as the notebook does
    Wrong("tma_matmul", "the tile's column offset pid_n * BLOCK_M", launched_as_in_the_notebook(edit(
        "09", "tma_matmul_kernel", ("pid_n * BLOCK_N\n    acc = tl.zeros((BLOCK_M, BLOCK_N)",
                                    "pid_n * BLOCK_M\n    acc = tl.zeros((BLOCK_M, BLOCK_N)")))),
    # tile_coords uses the count of tile columns only past the first group of GROUP_M tile rows: the CPU's
    # cases have one group at most, a GPU's a square tile; only the check's product with another tile and
    # more tile rows than a group sees this
    Wrong("tma_matmul", "the columns of tiles counted with BLOCK_M", launched_as_in_the_notebook(edit(
        "09", "tma_matmul_kernel", ("tl.cdiv(N, BLOCK_N), GROUP_M)\n    off_m, off_n",
                                    "tl.cdiv(N, BLOCK_M), GROUP_M)\n    off_m, off_n")))),
    Wrong("tma_matmul", "the K loop stops one step early", edit(
        "09", "tma_matmul", (TMA_K_LOOP, TMA_K_LOOP.replace("range(0, K, BLOCK_K)", "range(0, K - BLOCK_K, BLOCK_K)")))),
    Wrong("tma_matmul", "the K loop over whole tiles only: the partial last step skipped", edit(
        "09", "tma_matmul", (TMA_K_LOOP, TMA_K_LOOP.replace("range(0, K, BLOCK_K)", "range(0, K // BLOCK_K * BLOCK_K, BLOCK_K)")))),
    Wrong("tma_matmul", "the grid counts N // BLOCK_N columns of tiles: some tiles never computed", edit(
        "09", "tma_matmul", (TMA_GRID, TMA_GRID.replace("triton.cdiv(N, BN)", "N // BN")))),
    Wrong("tma_matmul", "C allocated in float32, whatever the inputs' dtype", edit(
        "09", "tma_matmul", (TMA_OUT, TMA_OUT.replace("dtype=a.dtype", "dtype=torch.float32")))),
    # one tile too many each way only where M and N fill their tiles: the case of sizes that are multiples
    # of the blocks, with two columns of tiles, where tile_coords then skips some of C's tiles
    Wrong("tma_matmul", "the tile counts as M // BLOCK_M + 1 and N // BLOCK_N + 1, not cdiv", edit(
        "09", "tma_matmul", (TMA_COORDS, TMA_COORDS.replace("tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)",
                                                            "M // BLOCK_M + 1, N // BLOCK_N + 1")))),
    # the values are right in any order: only where the programs store says which order they took
    Wrong("tma_matmul", "tiles in row-major order, not lesson 04's grouped order", edit(
        "09", "tma_matmul", (TMA_COORDS, "    pid_m, pid_n = tl.program_id(0) // tl.cdiv(N, BLOCK_N), "
                                         "tl.program_id(0) % tl.cdiv(N, BLOCK_N)"))),
    Wrong("tma_matmul", "tiles in column-major order, not lesson 04's grouped order", edit(
        "09", "tma_matmul", (TMA_COORDS, "    pid_m, pid_n = tl.program_id(0) % tl.cdiv(M, BLOCK_M), "
                                         "tl.program_id(0) // tl.cdiv(M, BLOCK_M)"))),
    Wrong("tma_matmul", "a 2-D grid, program (i, j) computing tile row i, column j", edit(
        "09", "tma_matmul", (TMA_COORDS, "    pid_m, pid_n = tl.program_id(0), tl.program_id(1)"),
        (TMA_GRID, "    grid = (triton.cdiv(M, BM), triton.cdiv(N, BN))"))),
    Wrong("tma_matmul", "the running sum kept in C's dtype (float16 for float16 inputs)", edit(
        "09", "tma_matmul", ("    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)\n    for k in range(0, K, BLOCK_K):\n"
                             "        a = a_desc.load",
                             "    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=c_desc.dtype)\n    for k in range(0, K, BLOCK_K):\n"
                             "        a = a_desc.load"),
                            ("        acc = tl.dot(a, b, acc)", "        acc = tl.dot(a, b, acc, out_dtype=c_desc.dtype)"))),
]

RIGHT = [
    Right("tma_matmul", "descriptors built in the kernel (tl.make_tensor_descriptor)", device_side),
    Right("tma_matmul", "other tiles: 64 x 32, 32 deep", edit(
        "09", "tma_matmul", ("TMA_TILE = pick(cpu=(32, 64, 16), gpu=(128, 128, 64))",
                             "TMA_TILE = pick(cpu=(64, 32, 32), gpu=(64, 128, 32))"))),
]

# ---------------------------------------------------------------- 2. persistent_matmul

LOOP = "    for tile in range(tl.program_id(0), num_pid_m * num_pid_n, tl.num_programs(0)):"
COORDS = ("        pid_m, pid_n = tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)\n"
          "        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)\n"
          "        for k in range(0, K, BLOCK_K):\n"
          "            acc = tl.dot(a_desc.load")
LAUNCH = "    persistent_matmul_kernel[(programs,)]("
PROGRAMS = "    programs = SMS if programs is None else programs\n"
PERSISTENT_OUT = ("    c = torch.empty((M, N), device=a.device, dtype=a.dtype)\n    BM, BN, BK = TMA_TILE\n"
                  "    programs =")

WRONG += [
    Wrong("persistent_matmul", "pure PyTorch, no kernel", lambda a, b, programs: a @ b),
    Wrong("persistent_matmul", "the tile counts with 32 and 64, the CPU's tile, written in",
          launched_as_in_the_notebook(edit(
              "09", "persistent_matmul_kernel", (
                  "    num_pid_m = tl.cdiv(M, BLOCK_M)\n    num_pid_n = tl.cdiv(N, BLOCK_N)\n"
                  "    for tile in range(tl.program_id(0)",
                  "    num_pid_m = tl.cdiv(M, 32)\n    num_pid_n = tl.cdiv(N, 64)\n"
                  "    for tile in range(tl.program_id(0)")), persistent=True)),
    Wrong("persistent_matmul", "one program per tile, whatever `programs` says", edit(
        "09", "persistent_matmul", (LAUNCH, "    persistent_matmul_kernel[(triton.cdiv(M, BM) * triton.cdiv(N, BN),)]("))),
    Wrong("persistent_matmul", "`programs` ignored: one program per SM", edit(
        "09", "persistent_matmul", (PROGRAMS, "    programs = SMS\n"))),
    Wrong("persistent_matmul", "each program walks from its tile to the end, without the stride", edit(
        "09", "persistent_matmul", (LOOP, "    for tile in range(tl.program_id(0), num_pid_m * num_pid_n):"))),
    Wrong("persistent_matmul", "each program computes one tile and stops", edit(
        "09", "persistent_matmul", (LOOP, "    for tile in range(tl.program_id(0), tl.program_id(0) + 1):"))),
    Wrong("persistent_matmul", "contiguous runs of n_tiles // programs tiles: the remainder dropped", edit(
        "09", "persistent_matmul", (LOOP, "    per = num_pid_m * num_pid_n // tl.num_programs(0)\n"
                                          "    for tile in range(tl.program_id(0) * per, tl.program_id(0) * per + per):"))),
    Wrong("persistent_matmul", "the last group of tile rows taken as a full GROUP_M rows", edit(
        "09", "persistent_matmul", ("    rows = min(num_pid_m - first_m, GROUP_M)\n", "    rows = GROUP_M\n"))),
    Wrong("persistent_matmul", "the running sum kept in C's dtype (float16 for float16 inputs)", edit(
        "09", "persistent_matmul", (COORDS, COORDS.replace("dtype=tl.float32", "dtype=c_desc.dtype")),
        ("acc = tl.dot(a_desc.load([pid_m * BLOCK_M, k]), b_desc.load([k, pid_n * BLOCK_N]), acc)",
         "acc = tl.dot(a_desc.load([pid_m * BLOCK_M, k]), b_desc.load([k, pid_n * BLOCK_N]), acc, "
         "out_dtype=c_desc.dtype)"))),
    Wrong("persistent_matmul", "a's descriptor built with a row stride of K, its width (a assumed contiguous)", edit(
        "09", "persistent_matmul", (LAUNCH + "descriptor(a, [BM, BK])",
                                    LAUNCH + "TensorDescriptor(a, [M, K], [K, 1], [BM, BK])"))),
    Wrong("persistent_matmul", "columns of tiles counted with BLOCK_M", launched_as_in_the_notebook(edit(
        "09", "persistent_matmul_kernel", ("tl.cdiv(N, BLOCK_N)\n    for tile in range(",
                                           "tl.cdiv(N, BLOCK_M)\n    for tile in range(")), persistent=True)),
    Wrong("persistent_matmul", "every program walks as many tiles as program 0: past the last tile", edit(
        "09", "persistent_matmul", (
            "    for tile in range(tl.program_id(0), num_pid_m * num_pid_n, tl.num_programs(0)):",
            "    for tile in range(tl.program_id(0), tl.cdiv(num_pid_m * num_pid_n, tl.num_programs(0))"
            " * tl.num_programs(0), tl.num_programs(0)):"))),
    Wrong("persistent_matmul", "program 0 walks every tile, the other programs none", edit(
        "09", "persistent_matmul", (LOOP, "    for tile in range(tl.program_id(0) * num_pid_m * num_pid_n, num_pid_m * num_pid_n):"))),
    # the values stay right (the extra tiles lie past C's edges); the structure check's product, a whole
    # number of tiles each way, shows the walk past the last tile
    Wrong("persistent_matmul", "the tile counts as M // BLOCK_M + 1 and N // BLOCK_N + 1, not cdiv", edit(
        "09", "persistent_matmul", (
            "    num_pid_m = tl.cdiv(M, BLOCK_M)\n    num_pid_n = tl.cdiv(N, BLOCK_N)\n    for tile in range(",
            "    num_pid_m = M // BLOCK_M + 1\n    num_pid_n = N // BLOCK_N + 1\n    for tile in range("))),
    Wrong("persistent_matmul", "C allocated in float32, whatever the inputs' dtype", edit(
        "09", "persistent_matmul", (PERSISTENT_OUT, PERSISTENT_OUT.replace("dtype=a.dtype", "dtype=torch.float32")))),
]

RIGHT += [
    Right("persistent_matmul", "each program takes a contiguous run of tiles", edit(
        "09", "persistent_matmul", (LOOP, "    n_tiles = num_pid_m * num_pid_n\n"
                                          "    per = tl.cdiv(n_tiles, tl.num_programs(0))\n"
                                          "    for tile in range(tl.program_id(0) * per, min(tl.program_id(0) * per + per, n_tiles)):"))),
    Right("persistent_matmul", "the grid capped at the number of tiles", edit(
        "09", "persistent_matmul", (LAUNCH, "    persistent_matmul_kernel[(min(programs, triton.cdiv(M, BM) * triton.cdiv(N, BN)),)]("))),
    Right("persistent_matmul", "tiles in row-major order, not grouped", edit(
        "09", "persistent_matmul", (COORDS, COORDS.replace("tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)",
                                                           "tile // num_pid_n, tile % num_pid_n")))),
]

# ---------------------------------------------------------------- 3. linear

SCALE = ("        if HAS_SCALE:                                   # one float32 per row: RMSNorm's 1 / rms\n"
         "            rows = off_m + tl.arange(0, BLOCK_M)\n"
         "            acc = acc * tl.load(s_ptr + rows, mask=rows < M, other=0.0)[:, None]\n")
RESIDUAL = "            acc = acc + r_desc.load([off_m, off_n]).to(tl.float32)\n"
EPILOGUE = (SCALE + "        if HAS_RESIDUAL:                                # read once, added in float32\n" + RESIDUAL)
STORE = "        out_desc.store([off_m, off_n], acc.to(out_desc.dtype))\n"
LINEAR_LOOP = "    for tile in tl.range(tl.program_id(0), n_tiles, tl.num_programs(0), flatten=FLATTEN,"
R_DESC = "        r_desc = tl.make_tensor_descriptor(r_ptr, shape=[M, N], strides=[stride_r, 1],"
LINEAR_OUT = "    out = h.new_empty((M, N))   # h's dtype and device\n    _check_tma("
LINEAR_LAUNCH = "    _linear_launcher(_persistent_grid(M, N), "


@triton.jit
def add_into_kernel(out_ptr, r_ptr, M, N, stride_r, BLOCK: tl.constexpr):
    """out (M, N), contiguous, += r (M, N) with row stride stride_r: one row per program."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    for start in range(0, N, BLOCK):
        c = start + cols
        r = tl.load(r_ptr + row * stride_r + c, mask=c < N, other=0.0).to(tl.float32)
        o = tl.load(out_ptr + row * N + c, mask=c < N, other=0.0).to(tl.float32)
        tl.store(out_ptr + row * N + c, (o + r).to(out_ptr.dtype.element_ty), mask=c < N)


def residual_in_a_second_kernel(h, w, scale=None, residual=None):
    """The lesson's linear without the residual, then a second kernel adding it into the output."""
    out = course.linear(h, w, scale)
    if residual is not None:
        add_into_kernel[(out.shape[0],)](out, residual, *out.shape, residual.stride(0), BLOCK=64)
    return out


# linear_kernel's mainloop call and its row scale, as the solution writes them
LINEAR_TILE_AND_SCALE = (
    "        acc = linear_tile(h_desc, w_desc, off_m, off_n, K, BLOCK_M, BLOCK_N, BLOCK_K)\n"
    "        if HAS_SCALE:                                   # one float32 per row: RMSNorm's 1 / rms\n"
    "            rows = off_m + tl.arange(0, BLOCK_M)\n"
    "            acc = acc * tl.load(s_ptr + rows, mask=rows < M, other=0.0)[:, None]\n")

WRONG += [
    Wrong("linear", "the scale loaded once a tile, applied to each K step's tile of h (float32 products)", edit(
        "09", "linear", (
            LINEAR_TILE_AND_SCALE,
            "        rows = off_m + tl.arange(0, BLOCK_M)\n"
            "        s = tl.full((BLOCK_M,), 1.0, tl.float32)\n"
            "        if HAS_SCALE:\n"
            "            s = tl.load(s_ptr + rows, mask=rows < M, other=0.0)\n"
            "        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)\n"
            "        for k in range(0, tl.cdiv(K, BLOCK_K)):\n"
            "            a = h_desc.load([off_m, k * BLOCK_K]).to(tl.float32) * s[:, None]\n"
            "            acc = tl.dot(a, w_desc.load([off_n, k * BLOCK_K]).to(tl.float32).T, acc)\n"))),
    Wrong("linear", "the accumulator rounded to the output's dtype before the epilogue", edit(
        "09", "linear", ("        acc = linear_tile(h_desc, w_desc, off_m, off_n, K, BLOCK_M, BLOCK_N, BLOCK_K)\n",
                         "        acc = linear_tile(h_desc, w_desc, off_m, off_n, K, BLOCK_M, BLOCK_N, BLOCK_K)"
                         ".to(out_desc.dtype).to(tl.float32)\n"))),
    Wrong("linear", "pure PyTorch, no kernel",
          lambda h, w, s=None, r=None: ((h.float() @ w.float().T) * (1 if s is None else s[:, None])
                                        + (0 if r is None else r.float())).to(h.dtype)),
    Wrong("linear", "the residual added before the scale: scale * (h @ w.T + residual)", edit(
        "09", "linear", (EPILOGUE, "        if HAS_RESIDUAL:\n" + RESIDUAL + SCALE))),
    Wrong("linear", "the scale's load not masked past M", edit(
        "09", "linear", (SCALE, SCALE.replace(", mask=rows < M, other=0.0", "")))),
    Wrong("linear", "the scale applied per column (s[None, :]), not per row", edit(
        "09", "linear", (SCALE, "        if HAS_SCALE:\n            cols = off_n + tl.arange(0, BLOCK_N)\n"
                                "            acc = acc * tl.load(s_ptr + cols, mask=cols < N, other=0.0)[None, :]\n"))),
    Wrong("linear", "the residual's descriptor given h's row stride", edit(
        "09", "linear", (R_DESC, R_DESC.replace("strides=[stride_r, 1]", "strides=[stride_h, 1]")))),
    Wrong("linear", "w's descriptor given a row stride of K, its width (w assumed contiguous)", edit(
        "09", "linear", ("w_desc = tl.make_tensor_descriptor(w_ptr, shape=[N, K], strides=[stride_w, 1],",
                         "w_desc = tl.make_tensor_descriptor(w_ptr, shape=[N, K], strides=[K, 1],"))),
    Wrong("linear", "h's descriptor given a row stride of K, its width (h assumed contiguous)", edit(
        "09", "linear", ("h_desc = tl.make_tensor_descriptor(h_ptr, shape=[M, K], strides=[stride_h, 1],",
                         "h_desc = tl.make_tensor_descriptor(h_ptr, shape=[M, K], strides=[K, 1],"))),
    Wrong("linear", "every program walks as many tiles as program 0: past the last tile", edit(
        "09", "linear", ("    for tile in tl.range(tl.program_id(0), n_tiles, tl.num_programs(0), flatten=FLATTEN,",
                         "    for tile in tl.range(tl.program_id(0), tl.cdiv(n_tiles, tl.num_programs(0)) * "
                         "tl.num_programs(0), tl.num_programs(0), flatten=FLATTEN,"))),
    Wrong("linear", "the scale's rows counted with BLOCK_N", edit(
        "09", "linear", ("RMSNorm's 1 / rms\n            rows = off_m + tl.arange(0, BLOCK_M)",
                         "RMSNorm's 1 / rms\n            rows = off_m + tl.arange(0, BLOCK_N)"))),
    Wrong("linear", "the row scale applied to each K step's tile of h, not once in the epilogue", edit(
        "09", "linear", (
            LINEAR_TILE_AND_SCALE,
            "        rows = off_m + tl.arange(0, BLOCK_M)\n"
            "        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)\n"
            "        for k in range(0, tl.cdiv(K, BLOCK_K)):\n"
            "            a = h_desc.load([off_m, k * BLOCK_K]).to(tl.float32)\n"
            "            if HAS_SCALE:\n"
            "                a = a * tl.load(s_ptr + rows, mask=rows < M, other=0.0)[:, None]\n"
            "            acc = tl.dot(a, w_desc.load([off_n, k * BLOCK_K]).to(tl.float32).T, acc)\n"))),
    Wrong("linear", "program 0 walks every tile, the other programs none", edit(
        "09", "linear", (LINEAR_LOOP, LINEAR_LOOP.replace("tl.program_id(0), n_tiles, tl.num_programs(0)",
                                                          "tl.program_id(0) * n_tiles, n_tiles, 1")))),
    Wrong("linear", "the output returned as a transposed copy's view: right values, not contiguous",
          lambda h, w, s=None, r=None: course.linear(h, w, s, r).T.contiguous().T),
    Wrong("linear", "each program computes only its first tile", edit(
        "09", "linear", (LINEAR_LOOP, LINEAR_LOOP.replace("n_tiles, tl.num_programs(0)",
                                                          "tl.program_id(0) + 1, tl.num_programs(0)")))),
    Wrong("linear", "the output allocated in float32, whatever h's dtype", edit(
        "09", "linear", (LINEAR_OUT, LINEAR_OUT.replace("new_empty((M, N))", "new_empty((M, N), dtype=torch.float32)")))),
    Wrong("linear", "the residual added in float16, after the product is rounded to the output's dtype", edit(
        "09", "linear", (RESIDUAL + STORE,
                         "            out_desc.store([off_m, off_n], acc.to(out_desc.dtype) + r_desc.load([off_m, off_n]))\n"
                         "        else:\n" + "    " + STORE))),
    Wrong("linear", "one program per tile: the kernel not persistent", edit(
        "09", "linear", (LINEAR_LAUNCH, "    _linear_launcher(lambda meta: (triton.cdiv(M, meta['BLOCK_M']) "
                                        "* triton.cdiv(N, meta['BLOCK_N']),), "))),
    Wrong("linear", "the residual tile read twice, half of it added each time", edit(
        "09", "linear", (RESIDUAL, "            acc = acc + 0.5 * r_desc.load([off_m, off_n]).to(tl.float32)\n"
                                   "            acc = acc + 0.5 * r_desc.load([off_m, off_n]).to(tl.float32)\n"))),
    Wrong("linear", "the residual added by a second kernel, the output stored twice", residual_in_a_second_kernel),
    # as persistent_matmul's: right values, a walk past the last tile where M and N fill their tiles
    Wrong("linear", "the tile count as (M // BLOCK_M + 1) * (N // BLOCK_N + 1), not cdiv", edit(
        "09", "linear", ("    n_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)",
                         "    n_tiles = (M // BLOCK_M + 1) * (N // BLOCK_N + 1)"))),
]

RIGHT += [
    Right("linear", "the tile loop not flattened (FLATTEN forced off)", edit(
        "09", "linear", (LINEAR_LOOP, LINEAR_LOOP.replace("flatten=FLATTEN", "flatten=False")))),
    Right("linear", "the residual read through pointers, with masks", edit(
        "09", "linear", (RESIDUAL,
                         "            rr = off_m + tl.arange(0, BLOCK_M)\n"
                         "            rc = off_n + tl.arange(0, BLOCK_N)\n"
                         "            acc = acc + tl.load(r_ptr + rr[:, None] * stride_r + rc[None, :],\n"
                         "                                mask=(rr[:, None] < M) & (rc[None, :] < N), other=0.0).to(tl.float32)\n"))),
]

# ---------------------------------------------------------------- the work each exercise does, and strides
#
# Right values, wrong work: found by writing the mistakes a learner would make and seeing what check
# said. The counts of multiply-adds and stores (helpers/exercises/lesson09.py, _work_done) catch these.

TMA_MAINLOOP = ("    off_m, off_n = pid_m * BLOCK_M, pid_n * BLOCK_N\n"
                "    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)\n"
                "    for k in range(0, K, BLOCK_K):\n"
                "        a = a_desc.load([off_m, k])            # (BLOCK_M, BLOCK_K): zeros past A's edges\n"
                "        b = b_desc.load([k, off_n])            # (BLOCK_K, BLOCK_N)\n"
                "        acc = tl.dot(a, b, acc)\n"
                "    c_desc.store([off_m, off_n], acc.to(c_desc.dtype))")
PERSISTENT_DOT = "            acc = tl.dot(a_desc.load([pid_m * BLOCK_M, k]), b_desc.load([k, pid_n * BLOCK_N]), acc)"

WRONG += [
    Wrong("tma_matmul", "C's tile stored at every K step: right in the end, stored K / BLOCK_K times",
          launched_as_in_the_notebook(edit("09", "tma_matmul_kernel", (
              "        acc = tl.dot(a, b, acc)\n    c_desc.store([off_m, off_n], acc.to(c_desc.dtype))",
              "        acc = tl.dot(a, b, acc)\n        c_desc.store([off_m, off_n], acc.to(c_desc.dtype))")))),
    Wrong("tma_matmul", "the tiles converted to float32 before tl.dot: off the float16 tensor cores",
          launched_as_in_the_notebook(edit("09", "tma_matmul_kernel", (
              "        acc = tl.dot(a, b, acc)\n    c_desc.store",
              "        acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc)\n    c_desc.store")))),
    Wrong("tma_matmul", "the K loop one step past K: a step of zeros (the descriptors pad) per tile",
          launched_as_in_the_notebook(edit("09", "tma_matmul_kernel", (
              "    for k in range(0, K, BLOCK_K):\n        a = a_desc.load([off_m, k])",
              "    for k in range(0, K + BLOCK_K, BLOCK_K):\n        a = a_desc.load([off_m, k])")))),
    Wrong("tma_matmul", "each program computes and stores its whole row of tiles",
          launched_as_in_the_notebook(edit("09", "tma_matmul_kernel", (TMA_MAINLOOP,
              "    off_m = pid_m * BLOCK_M\n"
              "    for pn in range(0, tl.cdiv(N, BLOCK_N)):\n"
              "        off_n = pn * BLOCK_N\n"
              "        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)\n"
              "        for k in range(0, K, BLOCK_K):\n"
              "            acc = tl.dot(a_desc.load([off_m, k]), b_desc.load([k, off_n]), acc)\n"
              "        c_desc.store([off_m, off_n], acc.to(c_desc.dtype))")))),
    Wrong("persistent_matmul", "the tiles converted to float32 before tl.dot: off the float16 tensor cores",
          launched_as_in_the_notebook(edit("09", "persistent_matmul_kernel", (
              PERSISTENT_DOT, PERSISTENT_DOT.replace("b_desc.load([k, pid_n * BLOCK_N])",
                                                     "b_desc.load([k, pid_n * BLOCK_N]).to(tl.float32)")
                                             .replace("a_desc.load([pid_m * BLOCK_M, k])",
                                                      "a_desc.load([pid_m * BLOCK_M, k]).to(tl.float32)"))),
              persistent=True)),
    Wrong("persistent_matmul", "every program computes as many tiles as program 0, only the store guarded",
          launched_as_in_the_notebook(edit("09", "persistent_matmul_kernel", (
              LOOP + "\n" + COORDS,
              "    n_tiles = num_pid_m * num_pid_n\n"
              "    for i in range(0, tl.cdiv(n_tiles, tl.num_programs(0))):\n"
              "        tile = tl.program_id(0) + i * tl.num_programs(0)\n" + COORDS),
              ("        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_desc.dtype))",
               "        if tile < n_tiles:\n"
               "            c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_desc.dtype))")),
              persistent=True)),
    # runs of n_tiles // programs + 1 fit the share only where programs do not divide the tiles
    Wrong("persistent_matmul", "contiguous runs of n_tiles // programs + 1 tiles (for cdiv)",
          launched_as_in_the_notebook(edit("09", "persistent_matmul_kernel", (
              LOOP, "    n_tiles = num_pid_m * num_pid_n\n"
                    "    per = n_tiles // tl.num_programs(0) + 1\n"
                    "    for tile in range(tl.program_id(0) * per, min(tl.program_id(0) * per + per, n_tiles)):")),
              persistent=True)),
    Wrong("linear", "contiguous runs of n_tiles // programs + 1 tiles (for cdiv)", edit(
        "09", "linear", ("    for tile in tl.range(tl.program_id(0), n_tiles, tl.num_programs(0), flatten=FLATTEN,",
                         "    per = n_tiles // tl.num_programs(0) + 1\n"
                         "    for tile in tl.range(tl.program_id(0) * per, min(tl.program_id(0) * per + per, n_tiles), "
                         "1, flatten=FLATTEN,"))),
    Wrong("linear", "w's descriptor given h's row stride", edit(
        "09", "linear", ("w_desc = tl.make_tensor_descriptor(w_ptr, shape=[N, K], strides=[stride_w, 1],",
                         "w_desc = tl.make_tensor_descriptor(w_ptr, shape=[N, K], strides=[stride_h, 1],"))),
    Wrong("linear", "h's descriptor given w's row stride", edit(
        "09", "linear", ("h_desc = tl.make_tensor_descriptor(h_ptr, shape=[M, K], strides=[stride_h, 1],",
                         "h_desc = tl.make_tensor_descriptor(h_ptr, shape=[M, K], strides=[stride_w, 1],"))),
]

# ---------------------------------------------------------------- the product computed outside the kernel
#
# NumPy computes the product (where the PyTorch meter does not look), and a kernel only copies its tiles
# out, or adds the epilogue: every value right, every tile stored once by descriptor, in the right order.
# Only the count of tl.dot's multiply-adds (helpers/exercises/lesson09.py, _dot_count) tells.


def _numpy_product(x, y, dtype):
    """x @ y by NumPy, in float64, rounded to `dtype` (NumPy's), handed back on x's device."""
    import numpy as np

    product = x.cpu().numpy().astype(np.float64) @ y.cpu().numpy().astype(np.float64)
    return torch.from_numpy(product.astype(dtype)).to(x.device)


@triton.jit
def copy_tiles_kernel(src_desc, c_desc, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      GROUP_M: tl.constexpr):
    """C's tiles copied from src, program p walking tiles p, p + P, ... in lesson 04's grouped order."""
    num_pid_m, num_pid_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    for tile in range(tl.program_id(0), num_pid_m * num_pid_n, tl.num_programs(0)):
        pid_m, pid_n = tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], src_desc.load([pid_m * BLOCK_M, pid_n * BLOCK_N]))


def numpy_then_copy(a, b, programs=None):
    """a @ b by NumPy, copied into C through descriptors: one program per tile (tma_matmul), or
    `programs` programs (persistent_matmul)."""
    (M, _), N = a.shape, b.shape[1]
    src = _numpy_product(a, b, "float16" if a.dtype == torch.float16 else "float32")
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    BM, BN, _ = course.TMA_TILE
    grid = (triton.cdiv(M, BM) * triton.cdiv(N, BN),) if programs is None else (programs,)
    copy_tiles_kernel[grid](course.descriptor(src, [BM, BN]), course.descriptor(c, [BM, BN]), M, N,
                            BLOCK_M=BM, BLOCK_N=BN, GROUP_M=8)
    return c


@triton.jit
def epilogue_only_kernel(p_ptr, s_ptr, r_ptr, out_ptr, M, N, stride_r, HAS_SCALE: tl.constexpr,
                         HAS_RESIDUAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """out = s[:, None] * p + r from a product p (M, N, contiguous) computed elsewhere; persistent."""
    p_desc = tl.make_tensor_descriptor(p_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    out_desc = tl.make_tensor_descriptor(out_ptr, shape=[M, N], strides=[N, 1],
                                         block_shape=[BLOCK_M, BLOCK_N])
    if HAS_RESIDUAL:
        r_desc = tl.make_tensor_descriptor(r_ptr, shape=[M, N], strides=[stride_r, 1],
                                           block_shape=[BLOCK_M, BLOCK_N])
    for tile in range(tl.program_id(0), tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N), tl.num_programs(0)):
        off_m, off_n = tile_origin(tile, M, N, BLOCK_M, BLOCK_N, 8)
        acc = p_desc.load([off_m, off_n])
        if HAS_SCALE:
            rows = off_m + tl.arange(0, BLOCK_M)
            acc = acc * tl.load(s_ptr + rows, mask=rows < M, other=0.0)[:, None]
        if HAS_RESIDUAL:
            acc = acc + r_desc.load([off_m, off_n]).to(tl.float32)
        out_desc.store([off_m, off_n], acc.to(out_desc.dtype))


def numpy_product_then_epilogue(h, w, scale=None, residual=None):
    """h @ w.T by NumPy (float32), the scale and the residual added by a persistent kernel."""
    M, N = h.shape[0], w.shape[0]
    p, out = _numpy_product(h, w.T, "float32"), torch.empty((M, N), device=h.device, dtype=h.dtype)
    grid = (min(course.SMS, triton.cdiv(M, 64) * triton.cdiv(N, 64)),)
    epilogue_only_kernel[grid](p, scale, residual, out, M, N, 0 if residual is None else residual.stride(0),
                               HAS_SCALE=scale is not None, HAS_RESIDUAL=residual is not None,
                               BLOCK_M=64, BLOCK_N=64)
    return out


WRONG += [
    Wrong("tma_matmul", "NumPy computes C; a kernel copies its tiles out by descriptor, in order",
          lambda a, b: numpy_then_copy(a, b)),
    Wrong("persistent_matmul", "NumPy computes C; a persistent kernel copies its tiles out",
          numpy_then_copy),
    Wrong("linear", "NumPy computes h @ w.T; the kernel adds only the epilogue", numpy_product_then_epilogue),
    # the values and the stores are right: only the count of products shows the tiles past the last
    Wrong("linear", "every program walks as many tiles as program 0, only the store guarded", edit(
        "09", "linear", (LINEAR_LOOP, "    for i in tl.range(0, tl.cdiv(n_tiles, tl.num_programs(0)), flatten=FLATTEN,"),
        ("        off_m, off_n = tile_origin(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)\n",
         "        tile = tl.program_id(0) + i * tl.num_programs(0)\n"
         "        off_m, off_n = tile_origin(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)\n"),
        (STORE, "        if tile < n_tiles:\n    " + STORE))),
]
