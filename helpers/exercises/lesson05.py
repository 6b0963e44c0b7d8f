"""Lesson 05 exercises: softmax one row per program, online softmax in PyTorch and in a tiled
kernel, RMSNorm fused into the linear layer after it, and GroupNorm + Mish in one kernel (two passes
over each group, in (channels x positions) tiles; the variance must survive a large mean, Mish both
of its tails, channels-last strides and groups of more channels than a tile holds).

Convention for every softmax here: a row whose entries are all -inf (a fully masked row) has
output 0 everywhere. torch.softmax returns NaN for it (its max is -inf, and -inf - (-inf) is
NaN); zeros are what a masked-out query should contribute downstream, and they keep NaN out of
the loss.

Beyond the values, the checks measure what the lesson teaches: the online softmax in PyTorch
works one chunk of columns at a time and reads x in two passes (a dispatch mode watches every
op), and the tiled kernel reads x exactly twice and writes the output once (the interpreter's
record of every load and store).
"""

import dataclasses
import math

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from helpers import interpreter
from helpers.device import DEVICE, ON_GPU, pick
from helpers.exercises import Case, Exercise, kernel_beside, later, rerun, room_for
from helpers.exercises.lesson02 import fused

NEG_INF = float("-inf")
F16, F32, F64 = torch.float16, torch.float32, torch.float64


# ---------------------------------------------------------------- the reference


def softmax_reference(x, *_, **__):
    """Softmax over the last dimension; fully masked rows give zeros (extra arguments are ignored)."""
    out = torch.softmax(x, dim=-1)                      # read MN, write MN (one fused kernel)
    fully_masked = (x == NEG_INF).all(dim=-1, keepdim=True)
    return out.masked_fill(fully_masked, 0.0)           # torch gives NaN there; the course gives 0


# Softmax outputs are probabilities of about 1/N, far below the default atol (1e-5 for float32,
# 1e-3 for float16), which would accept almost any answer on long rows. The tolerances here are
# relative, set by what a kernel that computes in float32 can get wrong:
# - float32: exp magnifies the rounding of x - max, by up to |x - max| * 2**-24 (5e-6 at the
#   bottom of float32's range), plus the float32 sums: rtol 1e-5. atol only covers outputs below
#   1e-10, far below 1/N for every case.
# - float16: one rounding when the result is stored, at most half a unit (2**-11 = 4.9e-4 of the
#   value), plus the float32 arithmetic: rtol 5.5e-4. atol is one unit of float16's smallest
#   (subnormal) numbers, 2**-24. Exponentials or sums kept in float16 round again and again, and
#   miss this.
SOFTMAX_TOL = {F32: (1e-10, 1e-5), F16: (2.0**-24, 5.5e-4)}

SOFTMAX_NAN_HINT = ("If the NaNs are in fully masked rows (all -inf): this course's softmax gives 0 there, "
                    "where torch.softmax gives NaN, because the max of such a row is -inf and "
                    "-inf - (-inf) is NaN.")


# ---------------------------------------------------------------- inputs


def _odd(lo, hi, chunk=None):
    """A random odd size in [lo, hi]: a multiple of no block (blocks are powers of two), nor of `chunk`."""
    while True:
        n = int(torch.randint(lo // 2, (hi - 1) // 2 + 1, ())) * 2 + 1
        if chunk is None or n % chunk:
            return n


def _rows(n_rows, n_cols, dtype=torch.float32, kind="randn"):
    """A fresh (n_rows, n_cols) matrix of one of the kinds the cases need."""
    if kind == "randn":
        x = torch.randn(n_rows, n_cols, device=DEVICE) * 3
    elif kind == "huge":            # uniform in [-1e4, 1e4]: exp(x) overflows without the max
        x = (torch.rand(n_rows, n_cols, device=DEVICE) * 2 - 1) * 1e4
    elif kind == "ascending":       # each row climbs from -1e4 to 1e4: the max grows at every chunk
        x = torch.linspace(-1e4, 1e4, n_cols, device=DEVICE).repeat(n_rows, 1)
        x = x + torch.rand(n_rows, 1, device=DEVICE)
    elif kind == "flat":            # a random level plus noise of 0.1: every output is about 1/N
        x = torch.rand(n_rows, 1, device=DEVICE) * 10 - 5 + torch.rand(n_rows, n_cols, device=DEVICE) * 0.1
    elif kind == "masked":          # -inf entries, a -inf prefix, and fully masked rows
        x = torch.randn(n_rows, n_cols, device=DEVICE) * 3
        x[torch.rand(n_rows, n_cols, device=DEVICE) < 0.3] = NEG_INF
        x[1::4, : n_cols // 2] = NEG_INF   # the first half of some rows is masked, like a causal prefix
        x[3::4] = NEG_INF                  # every fourth row is masked entirely
    elif kind == "negative":        # odd rows wholly in [far - 20, far]: exp(x) is 0 there without the max
        x = torch.randn(n_rows, n_cols, device=DEVICE) * 3
        x[1::2] = float(_far(dtype)) - torch.rand(n_rows // 2, n_cols, device=DEVICE) * 20
    else:
        raise ValueError(kind)
    return x.to(dtype)


def _strided_rows(n_rows, n_cols, dtype=torch.float32):
    """Three non-contiguous views: a slice of a wider matrix, every other column, and a transposed matrix
    (whose torch.empty_like is transposed too: an output the kernel cannot write row by row)."""
    wider = torch.randn(n_rows, n_cols + 13, device=DEVICE).to(dtype)[:, :n_cols]
    every_other = torch.randn(n_rows, 2 * n_cols, device=DEVICE).to(dtype)[:, ::2]
    transposed = torch.randn(n_cols, n_rows, device=DEVICE).to(dtype).t()
    return [(f"{n_rows}x{n_cols} slice of a {n_rows}x{n_cols + 13} matrix (rows {n_cols + 13} apart)",
             wider),
            (f"{n_rows}x{n_cols} every other column (column stride 2)", every_other),
            (f"{n_rows}x{n_cols} transposed view (x.t(): column stride {n_rows}, row stride 1)", transposed)]


# Past 2**31 elements (cases built on a GPU only). The matrix's last rows start at or past element
# 2**31, where `row * stride_xm` wraps in int32. Dense (the default), its rows are contiguous, so an
# output of its shape passes 2**31 elements too, and `row * stride_om` wraps as well (about 13 GB of GPU
# memory in float16: x, the check's copy of it, the output). Otherwise it is a slice of rows far apart
# (a few columns of each row of a wide buffer), for an output narrower than x: its addresses pass 2**31
# elements while the check copies only what the slice holds.
INT32_SPAN = 2**31
PAST_INT32 = "past 2**31 elements"  # the label of such a case until it is built
INT32_ROW_STRIDE = 2**16


def int32_hint(what, how):
    """Said after any failure on a case past 2**31 elements: `what` is the index to widen, `how` shows it."""
    return ("This case spans more than 2**31 elements. If the smaller cases pass, suspect an offset computed "
            "in int32: it wraps past 2**31 - 1 (to a negative address, or another row's), which reads or "
            f"writes the wrong values or crashes the GPU. Make {what} int64 before any product with a "
            f"stride ({how}), the output's strides as well as the input's, as the lesson's kernels do.")


def _rows_past_int32(n_cols, dtype, compared, dense):
    """(x, its last `compared` rows), filled with randn * 3; the last `compared` rows start at element
    INT32_SPAN or later. dense: x contiguous, ceil(INT32_SPAN / n_cols) + compared rows; otherwise a
    slice of the first n_cols columns of INT32_SPAN // INT32_ROW_STRIDE + compared rows INT32_ROW_STRIDE
    long."""
    if dense:
        x = torch.empty(-(-INT32_SPAN // n_cols) + compared, n_cols, device=DEVICE, dtype=dtype)
    else:
        n_rows = INT32_SPAN // INT32_ROW_STRIDE + compared
        x = torch.empty(n_rows, INT32_ROW_STRIDE, device=DEVICE, dtype=dtype)[:, :n_cols]
    x.normal_(0.0, 3.0)
    return x, x[-compared:].clone()


def past_int32_case(label, n_cols, dtype, compared, hint, kwargs=None, extra=(), dense=True):
    """A Case whose x spans more than 2**31 elements, compared on its last `compared` rows only (see
    _rows_past_int32); None where the GPU has no room for x, the check's copy of it and, dense, an
    output as large."""
    if not room_for((3 if dense else 2) * INT32_SPAN * dtype.itemsize):
        return None
    x, last = _rows_past_int32(n_cols, dtype, compared, dense)
    layout = ("rows contiguous: x, and an output of its shape, span" if dense else
              f"rows {x.stride(0)} apart: x spans")
    return Case(f"{x.shape[0]}x{n_cols} {str(dtype)[6:]}{label}, {layout} more than 2**31 elements "
                f"(compared on its last {compared} rows)", (x, *extra), kwargs or {},
                hint=hint, reference_args=(last, *extra), part=lambda out: out[-compared:])


FLAT_WHY = "near-constant rows, every output about 1/N: float16 exponentials or sums lose those digits"
ASCENDING_WHY = "rows ascending from -1e4 to 1e4: the max grows at every "
MASKED_WHY = "-inf entries, -inf prefixes, fully masked rows (0s)"


def _far(dtype):
    """How far below zero the "negative" rows sit, as written in their label: past -1e4, so that a running
    max started at -1e4 (a common stand-in for -inf) is far off too, and inside the dtype's range (float16
    ends at -65504)."""
    return "-3e4" if dtype == F16 else "-1e5"


def negative_why(dtype=F32):
    far = _far(dtype)
    return (f"rows 1, 3, 5, ... have every value far below zero, in [{far} - 20, {far}]: exp(x) underflows "
            "to 0 in those rows unless the row's true max is subtracted (a max that starts at 0, or at a "
            "stand-in for minus infinity such as -1e4, stays there)")


NEGATIVE_WHY = negative_why()


# ---------------------------------------------------------------- 1. softmax_rows


def _softmax_rows_cases():
    # the widest row the lesson's block holds (MAX_ROW_BLOCK), on the CPU too: a block of 2048 or 4096
    # written in (the widest row another case needs) fails
    widest = 16384
    specs = [((_odd(3, 7), 1), F32, "randn", "a single column: every output is 1"),
             ((_odd(21, 41), _odd(65, 127)), F32, "randn", "width not a power of two: lanes past the end "
                                                           "are masked"),
             ((16, 128), F16, "randn", "float16, a power of two: accumulate in float32"),
             ((pick(9, 301), _odd(*pick((1025, 1535), (2049, 4095)))), F16, "randn", "float16, ragged width"),
             ((8, _odd(200, 300)), F32, "huge", "uniform in [-1e4, 1e4]: exp overflows unless the max is "
                                                "subtracted"),
             ((8, _odd(200, 300)), F16, "huge", "float16, uniform in [-1e4, 1e4]"),
             ((6, _odd(65, 127)), F32, "negative", NEGATIVE_WHY),
             ((12, _odd(150, 250)), F32, "masked", "-inf entries, -inf prefixes, every 4th row fully masked "
                                                   "(0s)"),
             ((8, 128), F32, "masked", "-inf entries, -inf prefixes, rows 3 and 7 fully masked (0s), and a "
                                       "power of two wide: no lane past the end stands in for the row"),
             ((4, _odd(widest // 2 + 1, widest - 1)), F16, "flat", "float16, " + FLAT_WHY),
             ((4, _odd(widest // 2 + 1, widest - 1)), F32, "flat", FLAT_WHY),
             ((4, widest), F32, "randn", f"{widest} columns, the widest row of the course's block")]
    cases = [Case(f"{m}x{n} {str(dt)[6:]} ({why})", (_rows(m, n, dt, kind),))
             for (m, n), dt, kind, why in specs]
    cases += [Case(label, (x,)) for label, x in _strided_rows(_odd(9, 15), _odd(101, 199))]
    if ON_GPU:
        n = _odd(1001, 2047)
        cases.append(later(PAST_INT32, lambda: past_int32_case(
            "", n, F16, 3, int32_hint("the row index", "`tl.program_id(0).to(tl.int64)`"))))
    return cases


def _passes(fn, x, **kwargs):
    """(bytes loaded, bytes stored, each as a multiple of x's bytes) by the Triton kernels fn launches."""
    with interpreter.record() as rec:
        fn(x, **kwargs)
    loaded = sum(launch.bytes_loaded for launch in rec.launches)
    stored = sum(launch.bytes_stored for launch in rec.launches)
    return loaded, stored, loaded / x.nbytes, stored / x.nbytes


def _rows_structure(fn):
    """A row that fits one program is loaded once and its output stored once."""
    x = torch.randn(5, _odd(65, 127), device=DEVICE)
    loaded, stored, reads, writes = _passes(fn, x)
    where = f"for x of shape {tuple(x.shape)} float32, your kernel"
    if reads != 1:
        return (f"{where} loaded {loaded:,} bytes, {reads:.3g} times x ({x.nbytes:,} bytes). A row that fits "
                f"one program is loaded once, into registers: the max and the sum are two reductions of "
                f"those registers, and cost no memory traffic.")
    if writes != 1:
        return (f"{where} stored {stored:,} bytes, {writes:.3g} times the output ({x.nbytes:,} bytes): store "
                f"each output element once, when the max and the sum are known.")
    return None


# ---------------------------------------------------------------- 2. online_softmax_torch


def _online_torch_cases():
    # odd chunks, and odd widths that they do not divide
    c1, c2, c3, c4, c5 = _odd(9, 15), _odd(17, 31), _odd(17, 47), _odd(33, 63), _odd(33, 47)
    specs = [((5, 1), 4, F32, "randn", "one column, a chunk wider than the row"),
             ((7, _odd(81, 119, c1)), c1, F32, "randn", "the chunk does not divide the width"),
             ((6, _odd(41, 63)), 1, F32, "randn", "chunks of one element: the recurrence element by element"),
             ((4, _odd(401, 511)), 32, F32, "ascending", ASCENDING_WHY + "chunk"),
             ((8, _odd(251, 349, c2)), c2, F32, "huge", "uniform in [-1e4, 1e4]"),
             ((6, _odd(61, 99, c1)), c1, F32, "negative", NEGATIVE_WHY),
             ((12, _odd(151, 249, c3)), c3, F32, "masked", MASKED_WHY),
             ((4, _odd(1501, 2047)), 16, F32, "flat", FLAT_WHY),
             ((10, _odd(251, 349, c4)), c4, F64, "randn", "float64")]
    cases = [Case(f"{m}x{n} {str(dt)[6:]}, chunk={c} ({why})", (_rows(m, n, dt, kind), c))
             for (m, n), c, dt, kind, why in specs]
    strided = _strided_rows(9, _odd(201, 299, c5))
    cases += [Case(f"{label}, chunk={c5}", (x, c5)) for label, x in strided]
    return cases


# Ops that allocate or fill memory without reading x: the output may be allocated whole.
_ALLOCATIONS = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros",
                "zeros_like", "new_zeros", "full", "full_like", "new_full", "ones", "ones_like", "new_ones",
                "fill_", "zero_", "detach", "alias", "lift_fresh", "_local_scalar_dense", "set_", "resize_"}


def _flat(tree):
    if isinstance(tree, torch.Tensor):
        yield tree
    elif isinstance(tree, (list, tuple)):
        for item in tree:
            yield from _flat(item)
    elif isinstance(tree, dict):
        for item in tree.values():
            yield from _flat(item)


def _distinct(t):
    """The elements a view really holds: a broadcast (stride 0) dimension counts once."""
    return math.prod(n for n, s in zip(t.shape, t.stride()) if s != 0)


def _elements(t):
    """The positions in its storage of the elements of tensor t."""
    size = t.untyped_storage().nbytes() // t.element_size()
    return torch.arange(size).as_strided(t.shape, t.stride(), t.storage_offset()).reshape(-1).unique()


@dataclasses.dataclass
class _Storage:
    storage: object      # kept alive, so that no later tensor reuses its address
    passes: torch.Tensor  # per element: in how many separate passes it was touched
    last: torch.Tensor    # per element: the op (counted on this storage) that touched it last
    ops: int = 0          # ops that touched this storage so far


class _Passes:
    """In how many separate passes each element of each storage was touched.

    A pass is a run of consecutive ops on that storage that all touch the element: amax of a
    chunk, then exp of the same chunk, is one pass over that chunk; coming back to it later is
    another.
    """

    def __init__(self):
        self.storages = {}  # data_ptr -> _Storage

    def touch(self, tensors):
        by_storage = {}
        for t in tensors:
            if t.numel() and t.device.type != "meta":
                by_storage.setdefault(t.untyped_storage().data_ptr(), []).append(t)
        for key, ts in by_storage.items():
            if key not in self.storages:
                size = ts[0].untyped_storage().nbytes() // ts[0].element_size()
                self.storages[key] = _Storage(ts[0].untyped_storage(), torch.zeros(size, dtype=torch.long),
                                              torch.full((size,), -2))
            s = self.storages[key]
            index = torch.cat([_elements(t) for t in ts]).unique()
            s.passes[index] += (s.last[index] != s.ops - 1).long()  # not touched by the op before: a new pass
            s.last[index] = s.ops
            s.ops += 1

    def most(self, t):
        """The most separate passes any element of tensor t was touched in."""
        s = self.storages.get(t.untyped_storage().data_ptr())
        return int(s.passes[_elements(t)].max()) if s is not None and t.numel() else 0


class _WatchChunks(TorchDispatchMode):
    """Watches every ATen op: the first one wider than a chunk of x, the reads and the writes."""

    def __init__(self, limit, x=None):
        super().__init__()
        self.limit = limit          # elements in one chunk of columns of x
        self.too_wide = None        # (op, shape) of the first op that read or made a wider tensor
        self.reads, self.writes = _Passes(), _Passes()
        self.x = x
        self.rows_read = 0          # the most rows of x that one op read at once
        self.cols_read = 0          # the most columns of x that one op read at once

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func.overloadpacket.__name__
        if func.is_view or name in _ALLOCATIONS:
            return out
        schema = func._schema.arguments
        mutated = {a.name for a in schema if a.alias_info is not None and a.alias_info.is_write}
        named = dict(zip((a.name for a in schema), args)) | kwargs
        read = [t for key, v in named.items() if key not in mutated for t in _flat(v)]
        written = [t for key, v in named.items() if key in mutated for t in _flat(v)] + list(_flat(out))
        for t in read + written:
            if self.too_wide is None and _distinct(t) > self.limit:
                self.too_wide = (name, tuple(t.shape))
        self.reads.touch(read)
        self.writes.touch(written)
        for t in read:
            if self.x is not None and t.untyped_storage().data_ptr() == self.x.untyped_storage().data_ptr():
                self.rows_read = max(self.rows_read, t.shape[0] if t.dim() == 2 else 1)
                self.cols_read = max(self.cols_read, t.shape[-1] if t.dim() else 1)
        return out


def _online_torch_structure(fn):
    """One chunk of columns at a time; x read in two passes (max and sum together, then the output)."""
    n_rows, chunk = 3, _odd(13, 19)
    n_cols = 4 * n_rows * chunk + _odd(1, chunk - 2)   # one row is wider than a whole chunk of x
    x = torch.randn(n_rows, n_cols, device=DEVICE, dtype=F32) * 3
    watch = _WatchChunks(n_rows * chunk, x)
    with torch.no_grad(), watch:
        out = fn(x, chunk)
    if watch.rows_read < n_rows:
        return (f"for x of shape {tuple(x.shape)} with chunk={chunk}, no operation read more than "
                f"{watch.rows_read} row(s) of x at once: a loop over the rows. Treat all rows at once, "
                f"chunk by chunk (x[:, start:start + chunk]): each step is then one operation on a "
                f"({n_rows}, chunk) tile, not {n_rows} small ones.")
    if watch.too_wide:
        from helpers.check import _OP_NAMES

        op, shape = watch.too_wide
        return (f"for x of shape {tuple(x.shape)} with chunk={chunk}, PyTorch's {_OP_NAMES.get(op, op)} "
                f"worked on a tensor of shape "
                f"{shape}, more than one chunk of columns ({n_rows} x {chunk}). The online softmax sees x "
                f"one chunk at a time (x[:, start:start + chunk]), in both passes, and writes the output "
                f"chunk by chunk into a tensor it allocated; no step touches a whole row.")
    if watch.cols_read < chunk:
        return (f"for x of shape {tuple(x.shape)} with chunk={chunk}, no operation read more than "
                f"{watch.cols_read} column(s) of x at once: use the chunk size the function is given, "
                f"x[:, start:start + chunk].")
    reads = watch.reads.most(x)
    if reads > 2:
        return (f"some elements of x were read in {reads} separate passes over the row. The online "
                f"softmax needs two: one that updates the running max and the running sum together, "
                f"chunk by chunk, and one that writes the output.")
    writes = watch.writes.most(out) if isinstance(out, torch.Tensor) else 0
    if writes > 1:
        return (f"some elements of the output were written in {writes} separate passes. Write each chunk "
                f"of the output once, in the second pass, when the max and the sum are final.")
    return None


# ---------------------------------------------------------------- 3. softmax_tiled


def _tiled_cases():
    long_rows, long_block = pick(3, 16), pick(256, 4096)
    long_cols = _odd(*pick((4097, 5119), (262_145, 300_001)))
    # float16 running sums drift over about 100 tiles per lane (more on a GPU, where it costs nothing)
    flat_rows, flat_cols, flat_block = pick(2, 4), _odd(*pick((1501, 1701), (65_537, 80_001))), pick(16, 64)
    specs = [((3, 1), 16, F32, "randn", "a single column"),
             ((5, _odd(901, 1023)), 128, F32, "randn", "a ragged last tile"),
             ((4, _odd(65, 255)), 256, F32, "randn", "the row is shorter than one tile"),
             ((4, _odd(401, 511)), 64, F32, "ascending", ASCENDING_WHY + "tile"),
             ((6, _odd(513, 767)), 128, F16, "randn", "float16: accumulate in float32"),
             ((6, _odd(257, 511)), 128, F16, "huge", "float16, uniform in [-1e4, 1e4]"),
             ((6, _odd(161, 255)), 64, F32, "negative", NEGATIVE_WHY),
             ((4, _odd(161, 255)), 64, F16, "negative", "float16, " + negative_why(F16)),
             ((12, _odd(257, 383)), 64, F32, "masked", MASKED_WHY),
             ((8, 256), 64, F32, "masked", MASKED_WHY + ", rows of whole tiles: no lane past the end"),
             ((flat_rows, flat_cols), flat_block, F16, "flat", f"float16, {FLAT_WHY}"),
             ((long_rows, long_cols), long_block, F32, "randn", "a long row, many tiles")]
    cases = [Case(f"{m}x{n} {str(dt)[6:]}, block={b} ({why})", (_rows(m, n, dt, kind),), {"block": b})
             for (m, n), b, dt, kind, why in specs]
    strided = _strided_rows(5, _odd(501, 699))
    cases += [Case(label + ", block=128", (x,), {"block": 128}) for label, x in strided]
    if ON_GPU:
        n = _odd(2049, 4095)
        cases.append(later(PAST_INT32, lambda: past_int32_case(
            ", block=512", n, F16, 3,
            int32_hint("the row index", "`tl.program_id(0).to(tl.int64)`"), kwargs={"block": 512})))
    return cases


def _tiled_structure(fn):
    """The tiled kernel loads tiles of `block` columns, reads x at most twice (a kernel may keep a tile
    of pass 1 in registers for pass 2) and writes the output once."""
    block = 32
    x = torch.randn(3, _odd(5 * block + 1, 8 * block - 1), device=DEVICE)
    with interpreter.record(touches=True) as rec:
        fn(x, block=block)
    loaded = sum(launch.bytes_loaded for launch in rec.launches)
    stored = sum(launch.bytes_stored for launch in rec.launches)
    loads = [offs for launch in rec.launches for _pid, _arg, kind, offs in launch.touches if kind == "load"]
    widest = max((len(offs) for offs in loads), default=0)   # lanes of the widest load
    reads, writes = loaded / x.nbytes, stored / x.nbytes
    where = f"for x of shape {tuple(x.shape)} float32 with block={block}, your kernel"
    if reads == 1:
        return (f"{where} read x only once: each row was held whole, as in exercise 1. This exercise is "
                f"for rows far longer than a block: walk each row in tiles of `block` columns.")
    if widest > block:
        return (f"{where} loaded {widest} values at once, more than a tile of `block` columns: use the "
                f"tile size it is given (long rows do not fit one program).")
    if reads > 2:
        return (f"{where} loaded {loaded:,} bytes, {reads:.3f} times x ({x.nbytes:,} bytes): more than "
                f"twice. The online softmax reads each row twice: once to update the running max and sum "
                f"together, once to write the output. Every load counts, a value computed outside the "
                f"kernel and passed in (a row max from PyTorch, say) too: the kernel computes the max.")
    if writes != 1:
        return (f"{where} stored {stored:,} bytes, {writes:.3g} times the output ({x.nbytes:,} bytes): "
                f"store each output element once, in the second pass.")
    return None


# ---------------------------------------------------------------- 4. rmsnorm_linear


def _rmsnorm_linear_args():
    """float16 (x, gamma, w, eps) for the structure checks."""
    x = torch.randn(33, 65, device=DEVICE).to(F16)
    gamma = (1 + 0.2 * torch.randn(65, device=DEVICE)).to(F16)
    w = (torch.randn(47, 65, device=DEVICE) / 8).to(F16)
    return x, gamma, w, 1e-6


def _rmsnorm_linear_fused(fn):
    """One launch: the normalized x never goes through memory."""
    return fused(fn, *_rmsnorm_linear_args())


def _rmsnorm_linear_16_bit_dot(fn):
    """For float16 x and w, tl.dot multiplies float16 operands (counted in the interpreter, on a GPU
    too). float32 ones give values within the tolerance, but a GPU's tensor cores take them as TF32, at
    half the 16-bit rate."""
    args = _rmsnorm_linear_args()
    fn(*args)   # on a GPU the first call at a new size may compile, outside the record
    with interpreter.record(), interpreter.dots() as dots:
        fn(*args)
    wide = next((dot.dtypes for dot in dots if set(dot.dtypes) != {"float16"}), None)
    if wide is None:
        return None
    return (f"for float16 x and w, your kernel's tl.dot multiplied {wide[0]} by {wide[1]}. The tensor cores "
            f"multiply 16-bit operands at their full rate and take float32 ones as TF32 (10 bits of "
            f"mantissa, at half the rate): convert x * gamma back to x's dtype before the dot (step 3), "
            f"and give it w as loaded. The sum stays in float32 (acc).")


RMSNORM_LINEAR_ARGS = ["x_ptr", "g_ptr", "w_ptr", "out_ptr", "M", "N", "K", "eps", "stride_xm", "stride_xk",
                       "stride_wn", "stride_wk", "stride_om", "stride_on", "BLOCK_M", "BLOCK_N", "BLOCK_K"]


def _rmsnorm_linear_unequal_blocks(fn):
    """The rmsnorm_linear_kernel beside fn (in its globals, as a notebook cell's function finds it)
    launched once more in the interpreter with BLOCK_M, BLOCK_N, BLOCK_K = 16, 64, 32, then 64, 32, 16,
    on a (70, 100) x and a (90, 100) w, float32. The launcher passes three equal blocks (32 on the CPU,
    64 on a GPU), where a kernel that uses one where another belongs gets every case right. Where fn has
    no such kernel, or one of another signature (a design of the learner's own), there is nothing to
    run."""
    import contextlib

    import triton

    kernel = kernel_beside(fn, "rmsnorm_linear_kernel", RMSNORM_LINEAR_ARGS)
    if kernel is None:
        return None
    M, K, N = 70, 100, 90
    x = torch.randn(M, K, device=DEVICE)
    gamma = 1 + 0.2 * torch.randn(K, device=DEVICE)
    w = torch.randn(N, K, device=DEVICE) / K**0.5
    why = (" The launcher passes BLOCK_M = BLOCK_N = BLOCK_K, so a kernel that uses one where another "
           "belongs gets every case right. Check each use: the tile's rows (offs_m) go with BLOCK_M, its "
           "columns (offs_n) and the count of tiles along N with BLOCK_N, the K loop's step and offs_k "
           "with BLOCK_K.")
    for bm, bn, bk in ((16, 64, 32), (64, 32, 16)):
        def launch(x, gamma, w, bm=bm, bn=bn, bk=bk):
            out = torch.full((M, N), float("nan"), device=DEVICE)
            kernel[(triton.cdiv(M, bm) * triton.cdiv(N, bn),)](
                x, gamma, w, out, M, N, K, 1e-6, x.stride(0), x.stride(1), w.stride(0), w.stride(1),
                out.stride(0), out.stride(1), BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk)
            return out

        where = (f"launched once more with BLOCK_M, BLOCK_N, BLOCK_K = {bm}, {bn}, {bk} (a grid of "
                 f"cdiv(M, {bm}) * cdiv(N, {bn}) programs, into an output filled with NaN) on a ({M}, {K}) "
                 f"float32 x and a ({N}, {K}) w, in the interpreter, your rmsnorm_linear_kernel")
        problem = rerun(contextlib.nullcontext(), launch, (x, gamma, w),
                        rmsnorm_linear_reference(x, gamma, w), where, why)
        if problem:
            return problem
    return None


def rmsnorm_linear_reference(x, gamma, w, eps=1e-6):
    """rms_norm(x) * gamma, then the linear layer x_normed @ w.T (w stored (N, K) like nn.Linear)."""
    inv_rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)
    x_normed = x * inv_rms * gamma   # F.rms_norm: read MK + K, write MK
    return x_normed @ w.t()          # matmul: read MK + NK, write MN


def _rmsnorm_linear_cases():
    cpu_dtype_big = pick(F16, torch.bfloat16)  # bfloat16 arithmetic is wrong in the interpreter
    # On a GPU, tl.dot rounds float32 operands to tf32 (10-bit mantissa) unless told otherwise, which
    # the float32 tolerance rightly rejects: there the float32 cases run in float16.
    f32 = pick(F32, F16)

    def make(m, k, n, dtype, scale=1.0, x=None, w=None):
        x = (torch.randn(m, k, device=DEVICE) * scale).to(dtype) if x is None else x
        gamma = (1 + 0.2 * torch.randn(k, device=DEVICE)).to(dtype)
        w = (torch.randn(n, k, device=DEVICE) / math.sqrt(k)).to(dtype) if w is None else w
        return x, gamma, w

    # Odd sizes are multiples of no block; the launcher's blocks are 32 (CPU) or 64 (GPU).
    specs = [((_odd(33, 63), 64, 48), F16, 1.0, 1e-6, "M not a multiple of BLOCK_M"),
             ((_odd(41, 63), _odd(65, 127), _odd(33, 63)), f32, 1.0, 1e-6,
              "M, K, N multiples of no block: mask the reduction's tail"),
             ((64, 128, 64), F16, 1.0, 1e-6, "sizes that are multiples of the blocks"),
             ((_odd(17, 31), _odd(65, 127), _odd(17, 31)), F16, 300.0, 1e-6,
              "|x| ~ 300: x*x overflows float16, square in float32"),
             ((_odd(17, 31), _odd(65, 95), _odd(33, 63)), F16, 1e-3, 1e-5,
              "|x| ~ 1e-3 with eps = 1e-5: eps dominates the mean square"),
             ((pick(64, 1000), pick(96, 2048), pick(80, 1536)), cpu_dtype_big, 1.0, 1e-6, "larger"),
             ((_odd(*pick((65, 95), (1001, 1999))), _odd(*pick((97, 159), (2049, 2999))),
               _odd(*pick((65, 95), (1025, 1535)))), cpu_dtype_big, 1.0, 1e-6, "larger, odd sizes")]
    cases = [Case(f"M,K,N={m},{k},{n} {str(dt)[6:]} ({why})", make(m, k, n, dt, scale), {"eps": eps})
             for (m, k, n), dt, scale, eps, why in specs]
    m, k, n = _odd(33, 47), _odd(65, 95), _odd(33, 63)
    x = torch.randn(m, k + 19, device=DEVICE).to(f32)[:, :k]
    w = (torch.randn(k, n, device=DEVICE) / math.sqrt(k)).to(f32).t()
    cases.append(Case(f"M,K,N={m},{k},{n} {str(f32)[6:]}, x a slice of a wider matrix, w a transposed view",
                      make(m, k, n, f32, x=x, w=w), {"eps": 1e-6}))
    # Outputs near 140 from 4001 terms: each of a float16 accumulator's roundings, once per K step, is
    # up to 0.06 there, and they add up past the float16 tolerance (0.14); one rounding at the store
    # stays within it.
    m, k, n = 33, 4001, 33
    x = (1 + torch.randn(m, k, device=DEVICE)).to(F16)
    w = (0.05 + 0.01 * torch.randn(n, k, device=DEVICE)).to(F16)
    cases.append(Case(f"M,K,N={m},{k},{n} float16, a long inner dimension, x near 1 and w near 0.05: "
                      f"outputs near 140, whose running sums float16 rounds coarsely (accumulate in "
                      f"float32)", make(m, k, n, F16, x=x, w=w), {"eps": 1e-6}))
    m, k, n = _odd(33, 47), _odd(65, 95), _odd(33, 63)
    x = torch.randn(m, 2 * k, device=DEVICE).to(F16)[:, ::2]
    w = (torch.randn(n, k + 7, device=DEVICE) / math.sqrt(k)).to(F16)[:, :k]
    cases.append(Case(f"M,K,N={m},{k},{n} float16, x every other column (stride_xk = 2), w a slice of a "
                      f"wider matrix (stride_wn = {k + 7})", make(m, k, n, F16, x=x, w=w), {"eps": 1e-6}))
    if ON_GPU:
        k, n = _odd(129, 255), _odd(65, 99)  # M * N under 2**22: the launcher does not autotune
        gamma = (1 + 0.2 * torch.randn(k, device=DEVICE)).to(F16)
        w = (torch.randn(n, k, device=DEVICE) / math.sqrt(k)).to(F16)
        cases.append(later(PAST_INT32, lambda: past_int32_case(
            f", K={k}, N={n}, x a slice of a wide buffer", k, F16, 67,
            int32_hint("the tile's row offsets", "`offs_m = (...).to(tl.int64)`"), kwargs={"eps": 1e-6},
            extra=(gamma, w), dense=False)))
    return cases


# The kernel rounds x * gamma to the input dtype before the matmul (tensor cores take 16-bit
# operands), just as F.rms_norm + matmul rounds its normalized output. Each output then sums K
# products that each carry up to one unit of rounding (u = 2**-11 for float16, 2**-8 for
# bfloat16): with outputs of unit size the error is a few u in absolute terms, even where the
# output is near zero, so atol is about 8u. The relative part keeps two units for the final store.
RMSNORM_LINEAR_TOL = {torch.float16: (4e-3, 2e-3), torch.bfloat16: (3e-2, 1.6e-2)}


# ---------------------------------------------------------------- groupnorm_mish


def groupnorm_mish_reference(x, num_groups, weight, bias, eps):
    """Mish(GroupNorm(x)): x (N, C, H, W), weight and bias (C,)."""
    return F.mish(F.group_norm(x, num_groups, weight, bias, eps))


def _nchw(N, C, H, W, dtype, layout, mean=0.0, scale=2.0):
    if layout == "channels_last":   # strides (HWC, 1, WC, C)
        return (torch.randn(N, H, W, C, device=DEVICE) * scale + mean).to(dtype).permute(0, 3, 1, 2)
    return (torch.randn(N, C, H, W, device=DEVICE) * scale + mean).to(dtype)


def _groupnorm_cases():
    big = pick((2, 12, 33, 35), (4, 96, 65, 63))
    specs = [((2, 15, 7, 9), 5, F32, "contiguous", 0.0, 1.0, "3 channels per group"),
             ((1, 6, 1, 1), 2, F32, "contiguous", 0.0, 1.0, "H = W = 1: 3 values per group"),
             ((2, 9, _odd(15, 21), _odd(15, 21)), 3, F32, "channels_last", 0.0, 1.0,
              "channels_last strides, several tiles per group"),
             ((2, 10, 11, 13), 2, F32, "contiguous", 300.0, 1.0,
              "mean 300, spread 2: sum(x^2)/n - mean^2 cancels in float32"),
             ((1, 14, 5, 7), 7, F32, "contiguous", 0.0, 30.0,
              "weight and bias of size ~30: outputs far into both of Mish's tails"),
             ((2, 21, 9, 7), 7, F16, "channels_last", 0.0, 1.0, "float16 inputs, float32 arithmetic"),
             (big, 4, pick(F32, F16), "contiguous", 0.0, 1.0, "larger groups")]
    cases = []
    for shape, groups, dtype, layout, mean, affine, why in specs:
        x = _nchw(*shape, dtype, layout, mean)
        C = shape[1]
        weight = (torch.randn(C, device=DEVICE) * affine).to(dtype)
        bias = (torch.randn(C, device=DEVICE) * affine).to(dtype)
        eps = round(float(torch.empty(()).uniform_(1e-6, 1e-4)), 7)
        kind = str(dtype).removeprefix("torch.")
        label = f"{'x'.join(map(str, shape))} G{groups} {kind}, eps={eps} ({why})"
        cases.append(Case(label, (x, groups, weight, bias, eps)))
    # Mish's tails in every draw: per-channel biases spread evenly from -top to top put most outputs
    # beyond |y| = 44, where exp(y) * (exp(y) + 2) overflows float32, and on both sides of zero.
    for dtype, top in ((F32, 100.0), (F16, 6e4)):
        x = _nchw(1, 8, 3, 5, dtype, "contiguous")
        weight = torch.randn(8, device=DEVICE).to(dtype)
        bias = torch.linspace(-top, top, 8, device=DEVICE)[torch.randperm(8, device=DEVICE)].to(dtype)
        kind = str(dtype).removeprefix("torch.")
        cases.append(Case(f"1x8x3x5 G2 {kind}, eps=1e-05 (biases from {-top:g} to {top:g}: GroupNorm's "
                          f"outputs reach |y| = {top:g}, where exp(y) overflows float32)",
                          (x, 2, weight, bias, 1e-5)))
    # A mean of its own in each (sample, group), 300, -300, 0 or 150, spread 2: a shift taken once for the
    # whole tensor (its first value), not per group, leaves the others far from it, where
    # sum((x - shift)^2)/n - (mean - shift)^2 cancels in float32.
    means = torch.tensor([[300.0, -300.0], [0.0, 150.0]], device=DEVICE).repeat_interleave(5, dim=1)
    x = _nchw(2, 10, 11, 13, F32, "contiguous") + means[:, :, None, None]
    weight, bias = torch.randn(10, device=DEVICE), torch.randn(10, device=DEVICE)
    cases.append(Case("2x10x11x13 G2 float32, eps=1e-05 (group means 300 and -300 in sample 0, 0 and 150 "
                      "in sample 1, spread 2: each group needs its own shift)", (x, 2, weight, bias, 1e-5)))
    # Groups whose variance (~1e-5) is the size of eps: here eps changes every output, so a kernel
    # that ignores the eps it is given (a hard-coded 1e-5) fails. eps is kept away from 1e-5.
    x = _nchw(2, 8, 5, 6, F32, "contiguous", mean=0.5, scale=3e-3)
    weight, bias = torch.randn(8, device=DEVICE), torch.randn(8, device=DEVICE)
    eps = round(float(torch.empty(()).uniform_(3e-5, 1e-4)), 7)
    cases.append(Case(f"2x8x5x6 G4 float32, eps={eps} (nearly constant groups: variance about eps)",
                      (x, 4, weight, bias, eps)))
    # Channels 2 to 10 of a 13-channel tensor: samples 13 * H * W apart, not C * H * W (sx_n).
    x = torch.randn(3, 13, 5, 7, device=DEVICE)[:, 2:11]
    weight, bias = torch.randn(9, device=DEVICE), torch.randn(9, device=DEVICE)
    cases.append(Case("3x9x5x7 G3 float32, eps=1e-05, x channels 2 to 10 of a 3x13x5x7 tensor (samples "
                      "13 x 5 x 7 values apart: sx_n is not C x H x W)", (x, 3, weight, bias, 1e-5)))
    if ON_GPU:
        cases.append(later(PAST_INT32, _groupnorm_past_int32_case))
    return cases


def _groupnorm_past_int32_case(compared=2, C=8, H=8, W=8):
    """x contiguous, its last `compared` samples starting at or past element 2**31, in x and in an
    output of its shape (None where the GPU has no room for x, the check's copy of it and the output)."""
    if not room_for(3 * INT32_SPAN * F16.itemsize):
        return None
    n = -(-INT32_SPAN // (C * H * W)) + compared
    x = torch.empty(n, C, H, W, device=DEVICE, dtype=F16).normal_(0.0, 2.0)
    weight, bias = torch.randn(C, device=DEVICE).to(F16), torch.randn(C, device=DEVICE).to(F16)
    return Case(f"{n}x{C}x{H}x{W} G2 float16, eps=1e-05, contiguous: x, and an output of its shape, span "
                f"more than 2**31 elements (compared on its last {compared} samples)",
                (x, 2, weight, bias, 1e-5),
                hint=int32_hint("the sample and group indices", "`n`, `g` with `.to(tl.int64)`"),
                reference_args=(x[-compared:].clone(), 2, weight, bias, 1e-5),
                part=lambda out: out[-compared:])


def _groupnorm_structure(fn):
    """One launch, nothing computed by PyTorch beside it, x read in two passes, and Mish with one
    exponential per value.

    Groups of 2 channels x 32 positions: the launcher's tiles cover them exactly, so a kernel that
    computes one exponential per value computes exactly x.numel() of them."""
    x = torch.randn(2, 8, 4, 8, device=DEVICE)
    weight, bias = torch.randn(8, device=DEVICE), torch.randn(8, device=DEVICE)
    problem = fused(fn, x, 4, weight, bias, 1e-5)
    if problem:
        return problem
    with interpreter.record(touches=True) as rec, interpreter.exponentials() as sizes:
        fn(x, 4, weight, bias, 1e-5)
    # The loads of x (and of anything as large), not of weight and bias: a kernel that indexes each value
    # on its own loads its channel's weight and bias once per value, and still reads x twice. (Every
    # tensor here is float32: elements stand for bytes.)
    loads = [(name, offs) for launch in rec.launches for _pid, name, kind, offs in launch.touches
             if kind == "load" and len(offs)]
    per_channel = {name for name, _ in loads} - {name for name, offs in loads if offs.max() >= x.shape[1]}
    reads = sum(len(offs) for name, offs in loads if name not in per_channel) / x.numel()
    if reads > 2.5:
        return (f"for x of shape {tuple(x.shape)} your kernel loaded {reads:.2f}x x's values: x is read "
                f"{round(reads)} times. Two passes over each group are enough: the shifted sums of x - s "
                f"and (x - s)^2 together in the first, the output in the second.")
    count = sum(sizes)
    per_value = count / x.numel()
    if per_value > 1.5:
        return (f"for x of shape {tuple(x.shape)} your kernel computed {count:,} exponentials, "
                f"{per_value:.3g} per value of x. Mish needs one per value: with e = exp(y), "
                f"tanh(softplus(y)) is e (e + 2) / (e (e + 2) + 2), as the lesson shows.")
    return None


# float32 GroupNorm + Mish: the output is y = weight * (x - mean) / std + bias, and a float32 kernel
# rounds each term to 2**-24 of its own size, not of y's. With weight and bias of size ~30 (the
# tails case), weight * (x - mean) / std reaches ~100 where y may be near 0: errors of a few 1e-5
# there, measured up to 7e-5 on the CPU. With a mean of 300 the float32 mean itself is off by up
# to half a unit of 300 (1.5e-5), divided by the spread and multiplied by the weight. So atol 2e-4;
# forgetting the shift costs about 3e-3 on the same case, a wrong formula far more.
GROUPNORM_TOL = {F32: (2e-4, 1e-5)}


EXERCISES = [
    Exercise("05", "softmax_rows", "row softmax, one row per program", softmax_reference,
             _softmax_rows_cases, tol=SOFTMAX_TOL, kernel=True, nan_hint=SOFTMAX_NAN_HINT,
             contiguous_output=True, structure=_rows_structure),
    Exercise("05", "online_softmax_torch", "online softmax in PyTorch, over chunks", softmax_reference,
             _online_torch_cases, tol=SOFTMAX_TOL, nan_hint=SOFTMAX_NAN_HINT,
             structure=_online_torch_structure),
    Exercise("05", "softmax_tiled", "tiled online softmax for long rows", softmax_reference, _tiled_cases,
             tol=SOFTMAX_TOL, kernel=True, nan_hint=SOFTMAX_NAN_HINT, structure=_tiled_structure),
    Exercise("05", "rmsnorm_linear", "RMSNorm fused into the linear layer", rmsnorm_linear_reference,
             _rmsnorm_linear_cases, tol=RMSNORM_LINEAR_TOL, kernel=True,
             structure=lambda fn: (_rmsnorm_linear_fused(fn) or _rmsnorm_linear_16_bit_dot(fn)
                                   or _rmsnorm_linear_unequal_blocks(fn))),
    Exercise("05", "groupnorm_mish", "GroupNorm + Mish, one kernel", groupnorm_mish_reference,
             _groupnorm_cases, tol=GROUPNORM_TOL, kernel=True, contiguous_output=True,
             structure=_groupnorm_structure),
]
