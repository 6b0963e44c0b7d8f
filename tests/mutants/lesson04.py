"""Lesson 04: add_2d, grouped_order, matmul and matmul_bias_gelu."""

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

import helpers  # noqa: F401  (first: picks the GPU or the interpreter)
from mutants import Right, Wrong, edit

# ---------------------------------------------------------------- add_2d

_X_LOAD = "x = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_n[None, :] * stride_xn, mask=mask)"
_Y_LOAD = "y = tl.load(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn, mask=mask)"
_ADD_MASK = "mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)\n    x = tl.load("
_ROWS = "offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)"
_COLUMNS = "offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)"

WRONG = [
    Wrong("add_2d", "pure PyTorch, no kernel", lambda x, y: x + y),
    Wrong("add_2d", "no row mask (columns only)", edit(
        "04", "add_2d", (_ADD_MASK, "mask = offs_n[None, :] < N\n    x = tl.load("))),
    Wrong("add_2d", "row mask off by one (offs_m <= M)", edit(
        "04", "add_2d", (_ADD_MASK, "mask = (offs_m[:, None] <= M) & (offs_n[None, :] < N)\n    x = tl.load("))),
    Wrong("add_2d", "strides ignored: row * N + column", edit(
        "04", "add_2d", (_X_LOAD, "x = tl.load(x_ptr + offs_m[:, None] * N + offs_n[None, :], mask=mask)"),
        (_Y_LOAD, "y = tl.load(y_ptr + offs_m[:, None] * N + offs_n[None, :], mask=mask)"))),
    Wrong("add_2d", "y read with x's strides", edit(
        "04", "add_2d", (_Y_LOAD, _Y_LOAD.replace("stride_ym", "stride_xm").replace("stride_yn", "stride_xn")))),
    Wrong("add_2d", "y's two strides swapped", edit(
        "04", "add_2d", (_Y_LOAD, _Y_LOAD.replace("stride_ym", "STRIDE").replace("stride_yn", "stride_ym")
                         .replace("STRIDE", "stride_yn")))),
    Wrong("add_2d", "x's column stride taken to be 1", edit(
        "04", "add_2d", (_X_LOAD, _X_LOAD.replace("offs_n[None, :] * stride_xn", "offs_n[None, :]")))),
    Wrong("add_2d", "output allocated like x: a transposed x gives a transposed output", edit(
        "04", "add_2d", ("    out = torch.empty((M, N), device=x.device, dtype=x.dtype)\n",
                         "    out = torch.empty_like(x)\n"))),
    Wrong("add_2d", "one tile too few each way (M // BLOCK)", edit(
        "04", "add_2d", ("grid = (triton.cdiv(M, BLOCK), triton.cdiv(N, BLOCK))", "grid = (M // BLOCK, N // BLOCK)"))),
    # BLOCK_M and BLOCK_N mixed up: the launcher passes them equal, so only the check's launch of the
    # kernel with unequal blocks (16 x 64, then 64 x 16) sees these
    Wrong("add_2d", "the row offsets sized and stepped by BLOCK_N", edit(
        "04", "add_2d", (_ROWS, "offs_m = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)"))),
    Wrong("add_2d", "the column offsets stepped by BLOCK_M", edit(
        "04", "add_2d", (_COLUMNS, "offs_n = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_N)"))),
]

# ---------------------------------------------------------------- grouped_order


def grouped_by_divmod(pid, num_pid_m, num_pid_n, group_m):
    """The same order from divmod, the short last group found by subtraction."""
    group, inside = divmod(pid, group_m * num_pid_n)
    first_m = group * group_m
    rows = group_m if num_pid_m - first_m >= group_m else num_pid_m - first_m
    pid_n, row = divmod(inside, rows)
    return first_m + row, pid_n


WRONG += [
    Wrong("grouped_order", "plain row-major order", lambda pid, m, n, g: (pid // n, pid % n)),
    Wrong("grouped_order", "column-major order over the whole grid", lambda pid, m, n, g: (pid % m, pid // m)),
    Wrong("grouped_order", "the short last group treated as a full one", edit(
        "04", "grouped_order", ("rows = min(num_pid_m - first_m, group_m)", "rows = group_m"))),
    Wrong("grouped_order", "first row of the group not scaled by group_m", edit(
        "04", "grouped_order", ("first_m = (pid // per_group) * group_m", "first_m = pid // per_group"))),
    Wrong("grouped_order", "column from // group_m instead of // rows", edit(
        "04", "grouped_order", ("pid_n = (pid % per_group) // rows             # ...then",
                                "pid_n = (pid % per_group) // group_m          # ...then"))),
    # right until a group starts at a program that is not a multiple of its rows (the check's 5x5, 3)
    Wrong("grouped_order", "the row within the group from pid, not from its place in the group", edit(
        "04", "grouped_order", ("pid_m = first_m + (pid % per_group) % rows    # walk",
                                "pid_m = first_m + pid % rows    # walk"))),
    Wrong("grouped_order", "the column from pid // rows over the whole grid", edit(
        "04", "grouped_order", ("pid_n = (pid % per_group) // rows             # ...then",
                                "pid_n = (pid // rows) % num_pid_n             # ...then"))),
    # every tile right once int() rounds 2.5 down; a float column cannot index a tensor or address memory
    Wrong("grouped_order", "the column by true division (/): a float", edit(
        "04", "grouped_order", ("pid_n = (pid % per_group) // rows             # ...then",
                                "pid_n = (pid % per_group) / rows              # ...then"))),
]

# ---------------------------------------------------------------- matmul: the mainloop, matmul_tile

_A_LOAD = "a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)"
_B_LOAD = "b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)"
_MAINLOOP_SLIPS = {
    "no mask along K": [(_A_LOAD, "a = tl.load(a_ptrs, mask=offs_m[:, None] < M, other=0.0)"),
                        (_B_LOAD, "b = tl.load(b_ptrs, mask=offs_n[None, :] < N, other=0.0)")],
    "float16 accumulator": [("acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
                             "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float16)"),
                            ("acc = tl.dot(a, b, acc)", "acc = tl.dot(a, b, acc, out_dtype=tl.float16)")],
    "pointers never moved along K": [("        a_ptrs += BLOCK_K * stride_ak\n        b_ptrs += BLOCK_K * stride_bk\n",
                                      "")],
    "b assumed contiguous (row * N + column)": [(
        "b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn",
        "b_ptrs = b_ptr + offs_k[:, None] * N + offs_n[None, :]"), ("b_ptrs += BLOCK_K * stride_bk",
                                                                    "b_ptrs += BLOCK_K * N")],
    "a assumed contiguous (row * K + column)": [(
        "a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak",
        "a_ptrs = a_ptr + offs_m[:, None] * K + offs_k[None, :]"), ("a_ptrs += BLOCK_K * stride_ak",
                                                                    "a_ptrs += BLOCK_K")],
    "the short last group of tile rows treated as a full one": [
        ("rows = min(num_pid_m - first_m, GROUP_M)", "rows = GROUP_M")],
    # the grouped order slips past the first group: the CPU's cases have fewer tile rows than a group,
    # so only the check's run with unequal blocks (3 x 4 tiles, GROUP_M = 2) sees these
    "the group's first tile row not scaled by GROUP_M": [("first_m = (pid // per_group) * GROUP_M",
                                                          "first_m = pid // per_group")],
    "a group's programs counted with the tile rows (GROUP_M * num_pid_m)": [
        ("per_group = GROUP_M * num_pid_n", "per_group = GROUP_M * num_pid_m")],
    "K loop one step short (K // BLOCK_K)": [("for k in range(0, tl.cdiv(K, BLOCK_K)):",
                                              "for k in range(0, K // BLOCK_K):")],
    # BLOCK_M, BLOCK_N and BLOCK_K mixed up: the CPU's tiles are 64 x 64 x 64, so only the check's run
    # with unequal blocks (32 x 64 x 16) sees these
    "the K offsets sized BLOCK_N": [("    offs_k = tl.arange(0, BLOCK_K)\n", "    offs_k = tl.arange(0, BLOCK_N)\n")],
    "the pointers advanced by BLOCK_M along K": [
        ("        a_ptrs += BLOCK_K * stride_ak\n        b_ptrs += BLOCK_K * stride_bk\n",
         "        a_ptrs += BLOCK_M * stride_ak\n        b_ptrs += BLOCK_M * stride_bk\n")],
}

WRONG += [
    # Triton's interpreter gives masked-off lanes zeros; a GPU gives whatever its registers held.
    # helpers.interpreter makes them NaN, so that the padding a dot needs must be asked for (other=0.0)
    Wrong("matmul", "tiles in row-major order, not the grouped order of step 1", edit(
        "04", "matmul", ("    pid_m = first_m + (pid % per_group) % rows\n    pid_n = (pid % per_group) // rows\n",
                         "    pid_m = pid // num_pid_n\n    pid_n = pid % num_pid_n\n"))),
    Wrong("matmul", "groups of 8 tile rows written in for GROUP_M", edit(
        "04", "matmul", ("    per_group = GROUP_M * num_pid_n\n    first_m = (pid // per_group) * GROUP_M\n"
                         "    rows = min(num_pid_m - first_m, GROUP_M)\n",
                         "    per_group = 8 * num_pid_n\n    first_m = (pid // per_group) * 8\n"
                         "    rows = min(num_pid_m - first_m, 8)\n"))),
    Wrong("matmul", "the grouped order's column taken from pid, not from its place in the group", edit(
        "04", "matmul", ("    pid_n = (pid % per_group) // rows\n", "    pid_n = (pid // rows) % num_pid_n\n"))),
    Wrong("matmul", "masked loads without other=0.0: the padding past K is undefined on a GPU", edit(
        "04", "matmul", ("(offs_k[None, :] < k_left), other=0.0)", "(offs_k[None, :] < k_left))"),
        ("(offs_n[None, :] < N), other=0.0)", "(offs_n[None, :] < N))"))),
    Wrong("matmul", "pure PyTorch, no kernel", lambda a, b: a @ b),
    # the CPU's cancelling case: its partial sums climb to about 128, where float16 rounds by 1/16
    Wrong("matmul", "float32 acc, but each step's tl.dot in float16 (out_dtype=tl.float16)", edit(
        "04", "matmul", ("acc = tl.dot(a, b, acc)", "acc += tl.dot(a, b, out_dtype=tl.float16)")),
          cpu_only=True),
    Wrong("matmul", "no tl.dot: the tiles broadcast and summed over K", edit(
        "04", "matmul", ("acc = tl.dot(a, b, acc)",
                         "acc += tl.sum(a.to(tl.float32)[:, :, None] * b.to(tl.float32)[None, :, :], axis=1)"))),
    Wrong("matmul", "the output converted to float16 whatever C's dtype", edit(
        "04", "matmul", ("tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)",
                         "tl.store(c_ptrs, acc.to(tl.float16), mask=mask)")), cpu_only=True),
    # the CPU's float32 case holds values float16 cannot: rounded once each, they miss its tolerance
    Wrong("matmul", "float32 operands converted to float16 for tl.dot", edit(
        "04", "matmul", ("acc = tl.dot(a, b, acc)", "acc = tl.dot(a.to(tl.float16), b.to(tl.float16), acc)")),
          cpu_only=True),
    Wrong("matmul", "store without the M mask", edit(
        "04", "matmul", ("tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)",
                         "tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=offs_n[None, :] < N)"))),
    *[Wrong("matmul", why, edit("04", "matmul", *changes)) for why, changes in _MAINLOOP_SLIPS.items()],
]

# ---------------------------------------------------------------- matmul_bias_gelu: the epilogue
# The mainloop is given (matmul_tile): every edit below is of the epilogue after it.

_BIAS = "bias = tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)"
_X = "x = acc + bias[None, :]"
_GELU = "y = x * tl.sigmoid(2.0 * u)"
_STORE = "tl.store(c_ptrs, y.to(c_ptr.dtype.element_ty), mask=mask)"


def _epilogue(*changes):
    return edit("04", "matmul_bias_gelu", *changes)


def _torch_gelu_after_triton_matmul(a, b, bias):
    """The bias and GELU in float32, but by PyTorch, after the Triton matmul has stored C."""
    c = edit("04", "matmul")(a, b)
    return F.gelu(c.float() + bias.float(), approximate="tanh").to(c.dtype)


@triton.jit
def _bias_gelu_after_kernel(c_ptr, bias_ptr, out_ptr, n_elements, n_cols, BLOCK: tl.constexpr):
    """out = GELU(c + bias) over a contiguous float32 C: the epilogue as a second kernel."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(c_ptr + offs, mask=mask) + tl.load(bias_ptr + offs % n_cols, mask=mask).to(tl.float32)
    u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    tl.store(out_ptr + offs, (x * tl.sigmoid(2.0 * u)).to(out_ptr.dtype.element_ty), mask=mask)


def _matmul_then_epilogue_kernel(a, b, bias):
    """Two launches, each right: the Triton matmul into a float32 C, then the bias and GELU in a second kernel."""
    c = edit("04", "matmul", ("    c = torch.empty((M, N), device=a.device, dtype=a.dtype)\n    grid = lambda meta: "
                              "(triton.cdiv(M, meta[\"BLOCK_M\"]) * triton.cdiv(N, meta[\"BLOCK_N\"]),)\n"
                              "    matmul_kernel[grid]",
                              "    c = torch.empty((M, N), device=a.device, dtype=torch.float32)\n    grid = lambda "
                              "meta: (triton.cdiv(M, meta[\"BLOCK_M\"]) * triton.cdiv(N, meta[\"BLOCK_N\"]),)\n"
                              "    matmul_kernel[grid]"))(a, b)
    out = torch.empty(c.shape, device=a.device, dtype=a.dtype)
    _bias_gelu_after_kernel[(triton.cdiv(c.numel(), 1024),)](c, bias, out, c.numel(), c.shape[1], BLOCK=1024)
    return out


WRONG += [
    Wrong("matmul_bias_gelu", "pure PyTorch, no kernel",
          lambda a, b, bias: F.gelu(a @ b + bias, approximate="tanh")),
    Wrong("matmul_bias_gelu", "PyTorch's bias and GELU after a Triton matmul", _torch_gelu_after_triton_matmul),
    Wrong("matmul_bias_gelu", "two launches: the matmul, then the bias and GELU in a second kernel",
          _matmul_then_epilogue_kernel),
    Wrong("matmul_bias_gelu", "one bias value per row, not per column", _epilogue(
        (_BIAS, "bias = tl.load(bias_ptr + offs_m, mask=offs_m < M, other=0.0).to(tl.float32)"),
        (_X, "x = acc + bias[:, None]"))),
    Wrong("matmul_bias_gelu", "no bias", _epilogue((_X, "x = acc"))),
    Wrong("matmul_bias_gelu", "GELU applied before the bias", _epilogue(
        (_X, "x = acc"), (_GELU, "y = x * tl.sigmoid(2.0 * u) + bias[None, :]"))),
    Wrong("matmul_bias_gelu", "sigmoid(u) instead of sigmoid(2u)", _epilogue((_GELU, "y = x * tl.sigmoid(u)"))),
    Wrong("matmul_bias_gelu", "tanh(u) as (exp(2u) - 1) / (exp(2u) + 1): inf / inf for large x", _epilogue(
        (_GELU, "y = 0.5 * x * (1.0 + (tl.exp(2.0 * u) - 1.0) / (tl.exp(2.0 * u) + 1.0))"))),
    Wrong("matmul_bias_gelu", "GELU through erf, not the tanh form the lesson asks", _epilogue(
        (_GELU, "y = 0.5 * x * (1.0 + tl.math.erf(0.7071067811865476 * x))"))),
    Wrong("matmul_bias_gelu", "bias add and GELU's polynomial in float16 (only the sigmoid in float32)", _epilogue(
        (_BIAS, "bias = tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0)"),
        (_X, "x = acc.to(c_ptr.dtype.element_ty) + bias[None, :]"), (_GELU, "y = x * tl.sigmoid(2.0 * u.to(tl.float32))"))),
    Wrong("matmul_bias_gelu", "the tile rounded to float16 before the bias add", _epilogue(
        (_X, "x = acc.to(c_ptr.dtype.element_ty) + bias[None, :]"))),
    Wrong("matmul_bias_gelu", "store masked on the rows only", _epilogue(
        (_STORE, "tl.store(c_ptrs, y.to(c_ptr.dtype.element_ty), mask=offs_m[:, None] < M)"))),
    Wrong("matmul_bias_gelu", "store masked on the columns only", _epilogue(
        (_STORE, "tl.store(c_ptrs, y.to(c_ptr.dtype.element_ty), mask=offs_n[None, :] < N)"))),
]


# ---------------------------------------------------------------- right answers written another way


@triton.jit
def _matmul_2d_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K,
                      stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EPILOGUE: tl.constexpr):
    """A 2-D grid in row-major order; the pointers are rebuilt from k at every step; GELU through exp."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak,
                    mask=(offs_m[:, None] < M) & (offs_k[None, :] < K), other=0.0)
        b = tl.load(b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn,
                    mask=(offs_k[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    if EPILOGUE:
        x = acc + tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)[None, :]
        u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
        e = tl.exp(-2.0 * tl.abs(u))                     # tanh(|u|) = (1 - e) / (1 + e), no overflow
        tanh = tl.where(u >= 0, 1.0, -1.0) * (1.0 - e) / (1.0 + e)
        acc = 0.5 * x * (1.0 + tanh)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty),
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def matmul_2d(a, b, bias=None, BLOCK_M=32, BLOCK_N=64, BLOCK_K=32):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))
    _matmul_2d_kernel[grid](a, b, c if bias is None else bias, c, M, N, K, *a.stride(), *b.stride(), *c.stride(),
                            BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, EPILOGUE=bias is not None)
    return c


_OTHER_TILES = [("cpu=[_config(64, 64, 64, 4, warps=4, stages=1)]", "cpu=[_config(32, 64, 16, 2, warps=4, stages=1)]"),
                ("gpu=[_config(bm, bn, 64, 8, warps, stages)", "gpu=[_config(bm // 2, bn, 32, 4, warps, stages)")]

RIGHT = [
    Right("add_2d", "tiles of 16 x 128", edit(
        "04", "add_2d", ("grid = (triton.cdiv(M, BLOCK), triton.cdiv(N, BLOCK))",
                         "grid = (triton.cdiv(M, 16), triton.cdiv(N, 128))"),
        ("BLOCK_M=BLOCK, BLOCK_N=BLOCK)", "BLOCK_M=16, BLOCK_N=128)"))),
    Right("grouped_order", "divmod, the short group by subtraction", grouped_by_divmod),
    Right("matmul", "other tiles and groups", edit("04", "matmul", *_OTHER_TILES)),
    Right("matmul", "2-D grid in row-major order, pointers rebuilt from k", matmul_2d),
    Right("matmul_bias_gelu", "other tiles and groups", _epilogue(*_OTHER_TILES)),
    Right("matmul_bias_gelu", "the bias loaded as a 1 x BLOCK_N row, GELU as 0.5 x (1 + tanh)", _epilogue(
        (_BIAS, "bias = tl.load(bias_ptr + offs_n[None, :], mask=offs_n[None, :] < N, other=0.0).to(tl.float32)"),
        (_X, "x = acc + bias"), (_GELU, "y = 0.5 * x * (1.0 + (2.0 * tl.sigmoid(2.0 * u) - 1.0))"))),
    Right("matmul_bias_gelu", "2-D grid, tanh through exp", matmul_2d),
]
