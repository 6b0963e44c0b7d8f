"""Lesson 09 exercises: the Hopper matmul.

1. `tma_matmul`: a @ b with one program per output tile, every tile of A and B loaded, and every
   tile of C stored, through tensor descriptors (built on the host or in the kernel). Rows must be
   16-byte aligned, so K and N are multiples of 8 values (float16) or 4 (float32), but of no block:
   the last K step is partial and the last column of tiles is cut by C's edge. M is odd. A, and in
   another case B, is a column slice of a wider matrix (its row stride is not its width).
2. `persistent_matmul`: the same product with exactly `programs` programs, each walking the tiles
   a scheduler hands it; more tiles than programs, fewer, and counts that do not divide; A and B as
   column slices.
3. `linear`: scale[:, None] * (h @ w.T) + residual from the persistent, flattened tile loop, the
   scale and the residual in its epilogue: each alone and both; h, w and the residual as column
   slices of wider matrices; odd M (the scale's load must be masked past M); random scales of both
   signs; more tiles than programs; float32 and float16, with a residual that brings back a product
   too large for float16 (the epilogue's arithmetic must stay in float32 until the one store). The
   output must be contiguous (the next matmul's descriptor reads it so).

Beyond the values, each check measures what the lesson teaches, with the interpreter's record of
every load and store (on a GPU too, on small inputs): the bytes a tensor descriptor moved, the
programs a launch ran, which elements each stored, which tile each of `tma_matmul`'s programs
stored (program p the tile tile_coords(p) gives: lesson 04's grouped order, which the values do not
show), how many tiles each program stored (no program more than its share, cdiv(tiles, programs)),
whether a program stored a tile wholly past the output (those products fill their tiles exactly, so
that a count of tiles one too many shows), how often each residual element was read, and how many
multiply-adds the kernel's tl.dot calls did: the product's, no more (a tile computed twice, or past the
last with its store guarded) and no fewer (a product from NumPy, which no meter sees, copied out or
given its epilogue by a kernel that does no tl.dot).
`tma_matmul` and `persistent_matmul` run one more product in the interpreter with another tile of
three sizes: 32 x 64 x 16 where the lesson's tile is square (a GPU's 128 x 128), so that BLOCK_M and
BLOCK_N mixed up show there too, and 64 x 32 x 32 where the lesson's is the CPU's 32 x 64 x 16, so
that tile sizes written into the kernel show; `linear` runs one such product always, its autotuner
given 32 x 64 x 16 for the call (on a GPU it may choose a square tile for every other case).
Cases whose operands are views carry a hint: NaN there most often means a row stride taken as the
width. (No case needs int64 offsets: descriptors and the scale's row index stay far below 2**31.)
"""

import contextlib
import math

import numpy as np
import torch
import triton

from helpers import interpreter
from helpers.device import DEVICE, ON_GPU, pick
from helpers.exercises import UNEQUAL_BLOCKS_WHY, Case, Exercise, rerun, rerun_with_config
from helpers.exercises.lesson04 import stores_of, tile_order_problem

F16, F32 = torch.float16, torch.float32
NEG_INF = float("-inf")

# A persistent kernel's programs on a GPU: one per SM, as the lesson launches them.
SMS = torch.cuda.get_device_properties(DEVICE).multi_processor_count if ON_GPU else 2


def _odd(lo, hi):
    """A random odd integer in [lo, hi]."""
    return int(torch.randint(lo // 2, (hi - 1) // 2 + 1, ())) * 2 + 1


def _aligned(lo, hi, dtype):
    """A random size in about [lo, hi] whose rows are 16-byte aligned but a multiple of no block:
    an odd multiple of 8 values (float16) or of 4 (float32), so never of 16, 32, 64, ..."""
    unit = 16 // torch.empty((), dtype=dtype).element_size()
    return unit * _odd(max(1, lo // unit), max(1, hi // unit))


def _name(dtype):
    return str(dtype).removeprefix("torch.")


# Said after a failure on a case whose operands are column slices of wider matrices.
VIEW_HINT = ("In this case {which}: a row starts stride(0) values after "
             "the one before, more than the row's width, and the check fills the gap with NaN. NaN here "
             "most often means a row stride taken as the width: give each descriptor its tensor's own "
             "row stride.")


def _calling(fn, *args):
    """(result, None), or (None, a message) if the call raised."""
    try:
        return fn(*args), None
    except Exception as e:  # noqa: BLE001  (the learner's code, measured: say what it raised)
        return None, f"measuring it, your function raised {type(e).__name__}: {e}"


def _recorded(fn, *args, touches=False):
    """(the interpreter's launches while fn(*args) ran, None), or (None, a message).

    On a GPU fn runs once before it is measured: an autotuner times its configurations on the first
    call at a new size, and the record would count those runs as the kernel's own."""
    if ON_GPU:
        _, problem = _calling(fn, *args)
        if problem:
            return None, problem
    with interpreter.record(touches=touches) as rec:
        _, problem = _calling(fn, *args)
    if problem:
        return None, problem
    if not rec.launches:
        return None, "the meters saw no Triton launch."
    return rec.launches, None


# ---------------------------------------------------------------- 1. tma_matmul


def matmul_reference(a, b, *_):
    """a @ b (a persistent kernel's `programs` argument changes nothing in the result)."""
    return a @ b                  # read MK + KN, write MN


def _operands(M, K, N, dtype, a_view=False, b_view=False):
    """a (M, K) and b (K, N), b scaled by 1 / sqrt(K) so that C's values are of order one.
    a_view, b_view: that operand is a column slice of a wider matrix (rows 16 values longer than its
    width, the first 8 skipped: start and row stride stay 16-byte aligned, as descriptors need)."""
    def make(rows, cols, view, scale=1.0):
        wide = torch.randn(rows, cols + 16 if view else cols, device=DEVICE) * scale
        return wide.to(dtype)[:, 8:8 + cols] if view else wide.to(dtype)

    return make(M, K, a_view), make(K, N, b_view, 1 / math.sqrt(K))


def _long_k_case(*programs):
    """float16, a long K, every product positive: the running sum climbs steadily to about 1, so a sum
    kept in float16 rounds at every K step and the roundings pile up; one kept in float32 rounds once."""
    M, K, N = _odd(17, 47), _aligned(2000, 2100, F16), _aligned(40, 72, F16)
    a = torch.rand(M, K, device=DEVICE).to(F16)
    b = (torch.rand(K, N, device=DEVICE) * (4 / K)).to(F16)
    launch = f", programs={programs[0]}" if programs else ""
    return Case(f"M={M} K={K} N={N} float16{launch} (a long K, every product positive: the running sum "
                f"must be kept in float32)", (a, b, *programs))


def _tma_cases():
    def sizes(k_range, n_range, dtype):
        return _aligned(*k_range, dtype), _aligned(*n_range, dtype)

    M_big, K_big, N_big = pick((_odd(97, 159), 200, 100), (_odd(1025, 2047), 1000, 1000))
    dtype_big = pick(F32, F16)
    # (M, K, N, dtype, (a a view, b a view), why)
    plain, a_view, b_view = (False, False), (True, False), (False, True)
    specs = [(1, *sizes((40, 100), (40, 100), F32), F32, plain, "a single row"),
             (_odd(33, 95), *sizes((40, 100), (40, 100), F32), F32, plain,
              "odd M; K and N multiples of no block: a partial last K step, a cut last column of tiles"),
             (_odd(33, 95), *sizes((40, 100), (40, 100), F16), F16, plain,
              "float16 inputs, float32 accumulation"),
             (_odd(9, 31), *sizes((70, 130), (8, 24), F16), F16, plain, "N narrower than a tile"),
             # two rows and two columns of tiles, none cut: a count of tiles made as M // BLOCK_M + 1
             # (one too many where M fills its tiles) sends tile_coords' programs to the wrong tiles
             (*pick((64, 128, 128), (256, 256, 256)), F16, plain, "sizes that are multiples of the blocks"),
             (_odd(33, 63), *sizes((40, 100), (40, 100), F32), F32, a_view,
              "A is a column slice of a wider matrix: rows K + 16 values apart"),
             (_odd(33, 63), *sizes((40, 100), (40, 100), F16), F16, b_view,
              "B is a column slice of a wider matrix: rows N + 16 values apart, not N"),
             (M_big, *sizes((K_big, K_big + 60), (N_big, N_big + 60), dtype_big), dtype_big, plain, "larger")]
    def hint(a_view, b_view):
        which = " and ".join(name for name, view in (("A", a_view), ("B", b_view)) if view)
        what = ("are column slices of wider matrices" if a_view and b_view
                else "is a column slice of a wider matrix")
        return VIEW_HINT.format(which=f"{which} {what}") if which else ""

    return [Case(f"M={M} K={K} N={N} {_name(dtype)} ({why})", _operands(M, K, N, dtype, *views),
                 hint=hint(*views))
            for M, K, N, dtype, views, why in specs] + [_long_k_case()]


# float32 on the CPU: the interpreter's tl.dot multiplies float32 exactly and sums in float32;
# with C's values of order one (b scaled by 1 / sqrt(K)) and K up to 260, the sums' rounding is a
# few 1e-7: check's float32 tolerance. On a GPU tl.dot takes float32 operands as TF32 (2**-11
# relative each): a few 1e-3 on outputs of order one, so 1e-2, as lesson 09's matmuls.
# float16: the products are exact in float32 and summed in float32 over K <= 1100; the one rounding
# that matters is the store to float16 (2**-12 of the value): check's float16 tolerance.
MATMUL_TOL = {F32: pick(cpu=(1e-5, 1e-5), gpu=(1e-2, 1e-2))}
# linear's epilogue stays in float32 until its one store: in float16 the output is then within half a
# unit in the last place (2**-11 of it at most, rtol) plus what float32's sums lose (atol), as lesson
# 04's epilogue. The accumulator rounded to float16 before the scale and the residual rounds once more,
# and on the large-residual case (values near 80,000 brought back to near 40,000) lands outside.
LINEAR_TOL = {**MATMUL_TOL, F16: (1e-4, 6e-4)}


# The exercises' launchers read the lesson's tile, course.TMA_TILE, at every call. On a GPU it is
# 128 x 128 x 64: BLOCK_M == BLOCK_N, so a kernel that uses one where the other belongs still gets
# every case right. The CPU's tile, 32 x 64 x 16, has three sizes, and every case runs with it: there a
# kernel with those sizes written in, where BLOCK_M, BLOCK_N and BLOCK_K belong, gets every case
# right. So each structure check runs one more product in the interpreter with another tile set for
# the call: the CPU's where the lesson's tile is square, OTHER_TILE where the lesson's is the CPU's.
UNEQUAL_TILE = (32, 64, 16)
OTHER_TILE = (64, 32, 32)

# Said after _with_unequal_blocks finds a mistake, {tile} the lesson's tile.
_SQUARE_HERE = (" The lesson's tile on this device is {tile}: BLOCK_M and BLOCK_N are equal there, so a "
                "kernel that uses one where the other belongs passes every other case. Check each use: "
                "rows of tiles and row offsets go with BLOCK_M, columns with BLOCK_N, the K loop steps by "
                "BLOCK_K.")
_OTHER_HERE = (" The lesson's tile on this device is {tile}, and every other case ran with it: a kernel "
               "with those sizes written in, where BLOCK_M, BLOCK_N or BLOCK_K belong, passes them. Use the "
               "block sizes the kernel is given everywhere: rows of tiles and row offsets go with BLOCK_M, "
               "columns with BLOCK_N, the K loop steps by BLOCK_K.")


def _with_unequal_blocks(fn, *programs):
    """None, or a message: fn(a, b, *programs) run in the interpreter with course.TMA_TILE set for the
    call to a tile of three sizes other than the lesson's (UNEQUAL_TILE where the lesson's is square, a
    GPU's; OTHER_TILE where it is the CPU's), against a @ b. A (600, 40) @ (40, 136) product: its last row
    and column of tiles cut by C's edge, its last step along K partial, and more rows of tiles (10 or 19)
    than a group of the launchers' GROUP_M = 8: tile_coords uses the count of tile columns only past the
    first group; the CPU's other cases have one group at most, and a GPU's run at a square tile: a count
    of tile columns made with BLOCK_M shows here alone."""
    from helpers.solutions import load_solution

    course = load_solution("09")
    lesson_tile = tuple(course.TMA_TILE)
    square = lesson_tile[0] == lesson_tile[1]
    other = UNEQUAL_TILE if square or lesson_tile != UNEQUAL_TILE else OTHER_TILE
    M, K, N = 600, 40, 136
    a, b = _operands(M, K, N, F32)
    tile = " x ".join(map(str, other))
    where = (f"with course.TMA_TILE set to {tile} (BLOCK_M, BLOCK_N, BLOCK_K) for one ({M}, {K}) @ ({K}, "
             f"{N}) float32 product, run in the interpreter, your function")
    why = (_SQUARE_HERE if square else _OTHER_HERE).format(tile=" x ".join(map(str, lesson_tile)))
    # a persistent walk's columns of tiles counted with BLOCK_M: tiles past C's last column
    # (_past_the_last_tile). With one program per tile (no `programs`) a program sent past the last tile
    # leaves one of C's tiles unwritten: the values say so, in words that fit a kernel without a walk.
    return rerun(_tile_set(course, other), fn, (a, b, *programs), a @ b, where, why, names=("C",),
                 each_launch=_past_the_last_tile if programs else None)


@contextlib.contextmanager
def _tile_set(course, tile):
    """course.TMA_TILE, which the exercises' launchers read at every call, set to `tile` for a while."""
    kept, course.TMA_TILE = course.TMA_TILE, tile
    try:
        yield
    finally:
        course.TMA_TILE = kept



def _through_descriptors(fn):
    """Every byte the kernel loaded and stored went through a tensor descriptor; and the product right
    with another tile of unequal blocks (_with_unequal_blocks)."""
    M, K, N = _odd(33, 63), 40, 24
    a, b = _operands(M, K, N, F32)
    launches, problem = _recorded(fn, a, b)
    if problem:
        return problem
    loaded = sum(launch.bytes_loaded for launch in launches)
    stored = sum(launch.bytes_stored for launch in launches)
    by_pointer_loaded = loaded - sum(launch.descriptor_bytes_loaded for launch in launches)
    by_pointer_stored = stored - sum(launch.descriptor_bytes_stored for launch in launches)
    where = f"for a ({M}, {K}) @ ({K}, {N}) float32 product your kernel"
    if by_pointer_loaded:
        return (f"{where} loaded {by_pointer_loaded:,} of its {loaded:,} bytes through pointers "
                f"(tl.load of a block of addresses), not through a tensor descriptor. This exercise moves "
                f"every tile by descriptor: on Hopper that is one TMA copy per tile, no address per "
                f"element and no mask, the edges handled by the descriptor's shape.")
    if by_pointer_stored:
        return (f"{where} stored {by_pointer_stored:,} of its {stored:,} bytes through pointers "
                f"(tl.store), not through a tensor descriptor: C's tiles go out by descriptor too, and "
                f"the rows and columns past C's edges are dropped by it, not by a mask.")
    return _work_done(fn) or _in_tile_order(fn) or _with_unequal_blocks(fn)


GROUP_M = 8   # the exercises' launchers pass it to tile_coords


def _in_tile_order(fn):
    """Program p stores tile tile_coords(p) (lesson 04's grouped order, GROUP_M rows of tiles at a time):
    at the lesson's tile, 10 rows of tiles (a full group and 2 more) by 2 columns, where row-major and
    column-major orders both differ from it."""
    from helpers.solutions import load_solution

    BM, BN, _ = load_solution("09").TMA_TILE
    M, K, N = 9 * max(BM, BN) + 3, 24, 2 * BN - 8
    a, b = _operands(M, K, N, F32)
    with interpreter.dots() as dots:
        launches, problem = _recorded(fn, a, b, touches=True)
    if problem:
        return problem
    if dots:   # the tile the kernel ran: its launcher's, which may be its own
        BM, _, BN = dots[0].shape
    tiles_m, tiles_n = math.ceil(M / BM), math.ceil(N / BN)
    where = f"for a ({M}, {K}) @ ({K}, {N}) product ({tiles_m} x {tiles_n} tiles of {BM} x {BN}), your kernel"
    return tile_order_problem(stores_of(launches), (tiles_m, tiles_n), (BM, BN), N, GROUP_M, where)


# ---------------------------------------------------------------- 2. persistent_matmul


# Square tiles a kernel might use on this device: a tile count these do not divide is awkward for all.
TILES = pick((16, 32, 64), (64, 128, 256))


def _not_dividing(programs, M_range, N_range, dtype):
    """M and N whose count of output tiles, for each tile size of TILES, is not a multiple of `programs`."""
    while True:
        M, N = _odd(*M_range), _aligned(*N_range, dtype)
        if all(math.ceil(M / t) * math.ceil(N / t) % programs for t in TILES):
            return M, N


BOTH = "A and B are column slices of wider matrices"


def _persistent_cases():
    """On the CPU 2 to 5 programs and tiles of 32 or so; on a GPU odd counts and one per SM, at sizes
    with more tiles than programs (except where fewer is the point)."""
    p_odd = pick(3, 7)
    M_odd, N_odd = _not_dividing(p_odd, pick((97, 159), (1001, 1999)), pick((80, 160), (800, 1600)), F32)
    M_many, M_f16, M_big = pick((_odd(97, 159), _odd(65, 127), _odd(161, 255)),
                                (_odd(1025, 2047), _odd(1025, 1535), _odd(2049, 3071)))
    # (M, K range, N range, dtype, programs, A and B column slices of wider matrices, why)
    specs = [(M_many, pick((40, 100), (200, 300)), pick((100, 160), (1000, 1100)), F32, pick(2, 5), False,
              "more tiles than programs: each walks several; odd M"),
             (M_odd, (40, 72), N_odd, F32, p_odd, False, "a tile count the programs do not divide"),
             (M_f16, pick((70, 130), (264, 300)), pick((64, 136), (1000, 1100)), F16, pick(4, 11), False,
              "float16, several tiles per program"),
             (_odd(5, 15), (40, 72), (8, 16), F32, pick(5, SMS), False,
              "fewer tiles than programs: some have none"),
             (1, (40, 72), (40, 100), F16, 3, False, "a single row"),
             (M_f16, (40, 72), pick((64, 136), (1000, 1100)), F16, pick(3, 11), True,
              "A and B column slices of wider matrices: rows K + 16 and N + 16 values apart"),
             (M_big, pick((100, 160), (1000, 1060)), pick((160, 260), (1500, 1600)), pick(F32, F16),
              pick(5, SMS), False, "larger")]
    cases = []
    for M, k_range, n_range, dtype, programs, views, why in specs:
        K = _aligned(*k_range, dtype)
        N = n_range if isinstance(n_range, int) else _aligned(*n_range, dtype)
        cases.append(Case(f"M={M} K={K} N={N} {_name(dtype)}, programs={programs} ({why})",
                          (*_operands(M, K, N, dtype, views, views), programs),
                          hint=VIEW_HINT.format(which=BOTH) if views else ""))
    return cases + [_long_k_case(pick(3, 11))]


def _unshared(stores, programs, where):
    """A message if one program stored more tiles than its share, cdiv(tiles, programs): the tiles were
    not handed out among the programs (program 0 walking all of them, say). `stores`: [(pid, offsets)],
    one per tile stored."""
    per_program = {}
    for pid, _offs in stores:
        per_program[pid[0]] = per_program.get(pid[0], 0) + 1
    tiles, (busiest, most) = len(stores), max(per_program.items(), key=lambda item: item[1])
    share = math.ceil(tiles / programs)
    if most <= share:
        return None
    idle = programs - len(per_program)
    return (f"{where} stored {tiles} tiles, {most} of them from program {busiest}"
            f"{f', while {idle} program(s) stored none' if idle > 0 else ''}. The programs share the "
            f"tiles: with {programs} programs each takes at most cdiv({tiles}, {programs}) = {share} of "
            f"them, so that they all work at once. Check where each program's walk starts and how far "
            f"it steps.")


def _past_the_last_tile(launch, where):
    """A message if some program stored a tile that lies wholly outside the output: its walk went past
    the last tile. Nothing lands (the hardware drops such a store, and so does the interpreter), so
    only this record of the store shows it."""
    if not launch.stores_outside:
        return None
    programs = sorted({pid[0] for pid in launch.stores_outside})
    return (f"{where} stored {len(launch.stores_outside)} tile(s) lying wholly outside the output, from "
            f"program(s) {programs}: the walk goes past the last tile. Such a store lands nowhere (the "
            f"hardware drops it), but the program computed that tile for nothing, and the others wait "
            f"for it. Stop at the last tile: the loop runs over tile numbers below "
            f"cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N).")


def _each_tile_once(fn):
    """The launch has `programs` programs, every element of C is stored exactly once, and no program
    stores more than its share of the tiles, or a tile past the last; and the product right with
    another tile of unequal blocks (_with_unequal_blocks).

    C is 3 x 3 of the lesson's tiles: more tiles than programs (a launcher that caps the grid at the
    number of tiles still launches `programs` programs), and a number of tiles that `programs` does not
    divide: a walk that runs on past the last tile has a tile to show for it. No tile is cut by C's
    edge (the value cases cut them): a count of tiles made as M // BLOCK_M + 1, one too many there,
    walks a row of tiles past the last."""
    from helpers.solutions import load_solution

    programs = 4
    block_m, block_n, _ = load_solution("09").TMA_TILE
    M, K, N = 3 * block_m, 24, 3 * block_n
    a, b = _operands(M, K, N, F32)
    launches, problem = _recorded(lambda a, b: fn(a, b, programs), a, b, touches=True)
    if problem:
        return problem
    where = f"for a ({M}, {K}) @ ({K}, {N}) product with programs={programs}, your kernel"
    main = max(launches, key=lambda launch: launch.bytes_stored)    # the launch that wrote C
    ran = math.prod(main.grid)
    if ran != programs:
        return (f"{where} ran a grid of {ran} programs {main.grid}, not {programs}. A persistent kernel "
                f"launches the programs it is given, however many tiles there are, and each program "
                f"works through its share of the tiles in a loop.")
    past = _past_the_last_tile(main, where)
    if past:
        return past
    stores = stores_of(launches)
    return (_stored_twice(stores, N, where) or _unshared(stores, programs, where) or _dividing_count(fn)
            or _work_done(fn, programs) or _with_unequal_blocks(fn, 3))


def _stored_twice(stores, N, where):
    """A message if an element of C (N columns, contiguous) was stored more than once. `stores`: [(pid,
    offsets)], one per store."""
    elements, counts = np.unique(np.concatenate([offs for _, offs in stores]), return_counts=True)
    if counts.max() <= 1:
        return None
    element = int(elements[np.argmax(counts)])
    by = sorted({pid[0] for pid, offs in stores if element in offs})
    row, col = divmod(element, N)
    return (f"{where} stored {int((counts > 1).sum()):,} elements of C more than once: C[{row}, {col}] "
            f"was stored {int(counts.max())} times, by program(s) {by}. Each output tile belongs to one "
            f"program, which computes it once and stores it once, after its K loop: check how your "
            f"programs take their tiles, so that no two programs, and no program twice, take the same "
            f"tile, and that the store comes after the loop.")


def _dot_count(where, dots, M, K, N, tile):
    """A message if the multiply-adds of the recorded tl.dot calls are not those an (M, K) @ (K, N)
    product needs in tiles of the kernel's own size (the first dot's; `tile`, (BLOCK_M, BLOCK_N,
    BLOCK_K), if it ran none): cdiv(M, BLOCK_M) x cdiv(N, BLOCK_N) tiles, each over cdiv(K, BLOCK_K)
    steps. More: a tile computed twice or past the last, or a K step past K, whatever was stored. Fewer,
    with every value right (the cases passed first): the rest came from elsewhere, NumPy before a launch
    that only copies tiles, say, where neither the PyTorch meter nor the stores' count looks."""
    BM, BN, BK = tile
    if dots:
        BM, BK, BN = dots[0].shape
    tiles, steps = math.ceil(M / BM) * math.ceil(N / BN), math.ceil(K / BK)
    need, done = tiles * steps * BM * BN * BK, sum(math.prod(d.shape) for d in dots)
    words = f"the product's {tiles} tile(s) of {BM} x {BN}, each over {steps} K step(s) of {BK},"
    if done > need:
        return (f"{where}'s tl.dot calls did {done:,} multiply-adds where {words} need {need:,}: "
                f"{done / need:.2f} times the work. Each tile is computed once, by one program, over K "
                f"once: no program goes past the last tile (even with its store guarded), and the K loop "
                f"stops at K.")
    if done < need:
        ran, part = ((f"'s tl.dot calls did {done:,} multiply-adds", "the rest of the product") if done
                     else (" ran no tl.dot", "the product"))
        return (f"{where}{ran}, where {words} need {need:,}. The values are right, so {part} was "
                f"computed somewhere else: before the launch (by PyTorch or NumPy), or in the kernel "
                f"without tl.dot. The product is the kernel's work, on the tensor cores: each output tile "
                f"is the tl.dot of its tiles of the two operands, over every step of K.")
    return None


def _work_done(fn, *programs):
    """On float16 A and B: every tl.dot multiplies float16 tiles as loaded, and the dots' multiply-adds
    add up to the product's, tile by tile and K step by K step (cdiv(M, BLOCK_M) x cdiv(N, BLOCK_N)
    tiles, each over cdiv(K, BLOCK_K) steps): no tile computed twice or past the last, no K step past
    K, however the values come out; none computed outside tl.dot either (a result from NumPy, copied
    out by a kernel, passes every other count); and, with one program per tile, each element of C
    stored once. 2 x 3 tiles cut by C's edges, K in 3 steps, the last partial; with `programs` = 4,
    more tiles than programs and a count they do not divide."""
    from helpers.solutions import load_solution

    BM, BN, BK = load_solution("09").TMA_TILE   # the lesson's tile: the sizes (2 x 3 tiles, 3 K steps)
    M, K, N = 2 * BM - 3, 3 * BK - 8, 3 * BN - 8
    a, b = _operands(M, K, N, F16)
    with interpreter.dots() as dots:
        launches, problem = _recorded(lambda a, b: fn(a, b, *programs), a, b, touches=not programs)
    if problem:
        return problem
    launch = f" with programs={programs[0]}" if programs else ""
    where = f"for float16 A ({M}, {K}) and B ({K}, {N}){launch}, your kernel"
    other = sorted({d.dtypes for d in dots if d.dtypes != ("float16", "float16")})
    if other:
        return (f"{where}'s tl.dot multiplied {' and '.join(other[0])} tiles: the tiles were converted "
                f"before their product. tl.dot takes them as loaded, float16 on the tensor cores, and adds "
                f"into the float32 accumulator it is given.")
    counted = _dot_count(where, dots, M, K, N, (BM, BN, BK))
    if counted or programs:
        return counted
    stores = stores_of(launches)
    return _stored_twice(stores, N, where)


def _dividing_count(fn):
    """No program stores more than its share where `programs` divides the tile count (2 x 2 tiles, 2
    programs). A walk in runs of tiles // programs + 1 consecutive tiles (for cdiv) fits the share
    where the count does not divide, as in _each_tile_once, and here gives one program three tiles
    and the other one."""
    from helpers.solutions import load_solution

    block_m, block_n, _ = load_solution("09").TMA_TILE
    M, K, N = 2 * block_m, 24, 2 * block_n
    a, b = _operands(M, K, N, F32)
    launches, problem = _recorded(lambda a, b: fn(a, b, 2), a, b, touches=True)
    if problem:
        return problem
    stores = stores_of(launches)
    return _unshared(stores, 2, f"for a ({M}, {K}) @ ({K}, {N}) product with programs=2, your kernel")


EXERCISES = [
    Exercise("09", "tma_matmul", "a matmul fed by tensor descriptors", matmul_reference, _tma_cases,
             tol=MATMUL_TOL, kernel=True, structure=_through_descriptors),
    Exercise("09", "persistent_matmul", "a persistent matmul: a fixed grid walking the tiles",
             matmul_reference, _persistent_cases, tol=MATMUL_TOL, kernel=True, structure=_each_tile_once),
]


# ---------------------------------------------------------------- 3. linear: the epilogues


def linear_reference(h, w, scale=None, residual=None):
    """scale[:, None] * (h @ w.T) + residual, in float32 at least, returned in h's dtype."""
    wide = torch.promote_types(h.dtype, F32)
    out = h.to(wide) @ w.to(wide).T                              # read MK + NK
    if scale is not None:
        out = scale.to(wide)[:, None] * out                       # read M
    if residual is not None:
        out = out + residual.to(wide)                             # read MN
    return out.to(h.dtype)                                        # write MN


def _column_slice(rows, cols, dtype, scale=1.0, extra=16):
    """A (rows, cols) view of a wider matrix: rows cols + extra values apart (a multiple of 16), the
    first 16 bytes skipped, so that the view's start and rows stay 16-byte aligned while its row stride
    is not its width."""
    unit = 16 // torch.empty((), dtype=dtype).element_size()
    return (torch.randn(rows, cols + extra, device=DEVICE) * scale).to(dtype)[:, unit:unit + cols]


def _linear_operands(M, K, N, dtype, scale, residual, views):
    """(h, w, scale or None, residual or None): w scaled by 1 / sqrt(K), so that h @ w.T is of order one;
    the scale of both signs. views: h, w and the residual column slices of wider matrices, no two with
    the same row stride (h's K + 16, w's K + 48, the residual's another), so that a descriptor given
    another operand's row stride reads the wrong rows."""
    if views:
        extra_r = next(e for e in (16, 32, 64, 80) if N + e not in (K + 16, K + 48))
        h, w = _column_slice(M, K, dtype), _column_slice(N, K, dtype, K**-0.5, extra=48)
        r = _column_slice(M, N, dtype, extra=extra_r) if residual else None
    else:
        h = torch.randn(M, K, device=DEVICE).to(dtype)
        w = (torch.randn(N, K, device=DEVICE) * K**-0.5).to(dtype)
        r = torch.randn(M, N, device=DEVICE).to(dtype) if residual else None
    s = torch.randn(M, device=DEVICE) if scale else None
    return h, w, s, r


def _large_residual_case(M, K, N):
    """float16: in every row, scale * (h @ w.T) reaches 75,000 to 90,000, past float16's largest value
    (65504), and the residual, -p / 2 -+ 10,000, brings each value p back to p / 2 +- 10,000: at least
    10,000 from zero (a sum that small would be decided by float32's rounding of the large terms),
    at most 55,000. Rounded to float16 before the residual is added, p would be infinite."""
    h, w, _, _ = _linear_operands(M, K, N, F16, False, False, True)
    product = h.double() @ w.double().T
    sign = torch.where(torch.rand(M, device=DEVICE) < 0.5, -1.0, 1.0).double()
    s = sign * (75_000 + 15_000 * torch.rand(M, device=DEVICE).double()) / product.abs().amax(dim=1)
    p = s[:, None] * product
    r = _column_slice(M, N, F16)
    r.copy_(-0.5 * p + 10_000 * torch.sign(p))
    return Case(f"M={M} K={K} N={N} float16, scale and residual (a residual of large magnitude: "
                f"scale * (h @ w.T) passes float16's largest value before the residual brings it back)",
                (h, w, s.float(), r), hint=VIEW_HINT.format(which=WIDER))


WIDER = "h, w and the residual are column slices of wider matrices"


def _linear_cases():
    small = pick(((33, 95), (40, 100), (40, 100)), ((129, 383), (200, 300), (200, 400)))
    many = pick(((_odd(129, 191), (40, 72), (136, 200))), ((_odd(2305, 2559), (40, 72), (2300, 2600))))

    def sizes(m_range, k_range, n_range, dtype):
        M = m_range if isinstance(m_range, int) else _odd(*m_range)
        return M, _aligned(*k_range, dtype), _aligned(*n_range, dtype)

    specs = [(sizes(*small, F32), F32, True, False, False, "the row scale alone; odd M, so the last "
              "tiles' rows past M must not load a scale"),
             (sizes(*small, F32), F32, False, True, False, "the residual alone"),
             (sizes(*small, F32), F32, True, True, True, "scale and residual; h, w and the residual are "
              "column slices of wider matrices: row strides differ from the widths"),
             (sizes(*small, F16), F16, True, True, True, "float16: scale and residual on the float32 "
              "accumulator, one rounding at the store"),
             (sizes(1, small[1], small[2], F16), F16, False, False, False, "a single row, no epilogue"),
             (sizes(*many, F32), F32, True, True, False, "more tiles than programs: each program walks "
              "several")]
    cases = []
    for (M, K, N), dtype, scale, residual, views, why in specs:
        cases.append(Case(f"M={M} K={K} N={N} {_name(dtype)} ({why})",
                          _linear_operands(M, K, N, dtype, scale, residual, views),
                          hint=VIEW_HINT.format(which=WIDER) if views else ""))
    return cases + [_large_residual_case(*sizes(*small, F16))]


def _epilogue_structure(fn):
    """One launch stores the output, with min(SMS, tiles) programs, none storing more than its share
    of the tiles; each element of the output is stored once; the tl.dot calls do the product's
    multiply-adds (_dot_count), no more (a tile computed past the last, its store guarded) and no
    fewer; each row's scale is loaded once per tile holding it; each element of the residual is loaded
    once (its loads are found by the elements they cover, whatever the kernel names its argument)."""
    # more output tiles than SMS, even at 256 x 256 tiles: one program per tile is then told apart from
    # a persistent grid (on a GPU 132 SMs: about 3,000 x 3,000 outputs, run through the interpreter)
    # an odd number of tiles on the CPU (3 x 3 at 64 x 128), one that 132 does not divide on a GPU (at
    # every configuration's tile): a walk that runs on past the last tile has a tile to show for it.
    # M and N multiples of every configuration's blocks (the value cases cut the edge tiles): a count of
    # tiles made as M // BLOCK_M + 1, one too many there, walks past the last tile
    M, N = pick((3 * 64, 3 * 128), (3072, 3072))
    K = _aligned(40, 72, F32)
    h, w, s, r = _linear_operands(M, K, N, F32, True, True, True)
    with interpreter.dots() as dots:
        launches, problem = _recorded(fn, h, w, s, r, touches=True)
    if problem:
        return problem
    where = f"for h ({M}, {K}), w ({N}, {K}), a scale and a residual, your code"
    storing = [launch for launch in launches if launch.bytes_stored]
    if len(storing) > 1:
        return (f"{where} ran {len(storing)} launches that store ({', '.join(l.kernel for l in storing)}). "
                f"The epilogue is the end of the kernel that computed the tile: the scale and the "
                f"residual go onto the accumulator before the tile's one store, in one kernel.")
    (main,) = storing
    past = _past_the_last_tile(main, where)
    if past:
        return past
    stores = stores_of([main])
    ran, tiles = math.prod(main.grid), len(stores)     # one store per output tile
    if ran != min(SMS, tiles):
        return (f"{where} launched a grid of {ran} programs {main.grid} for {tiles} output tiles, with "
                f"SMS = {SMS} (one program per SM on a GPU, two under the interpreter). A persistent "
                f"kernel runs min(SMS, tiles) programs, and each walks its share of the tiles in a loop.")
    elements, counts = np.unique(np.concatenate([offs for _pid, offs in stores]), return_counts=True)
    if counts.max() > 1:
        row, col = divmod(int(elements[np.argmax(counts)]), N)
        return (f"{where} stored {int((counts > 1).sum()):,} elements of the output more than once "
                f"(out[{row}, {col}] {int(counts.max())} times): each output tile belongs to one "
                f"program, which stores it once.")
    unshared = _unshared(stores, ran, where)
    if unshared:
        return unshared
    # before the scale's count: a walk past the last tile with its store alone guarded loads the scale
    # for those tiles too, and the count of products says which mistake that is
    from helpers.solutions import load_solution

    counted = _dot_count(where, dots, M, K, N, load_solution("09").LINEAR_TILES[0][:3])
    if counted:
        return counted
    wanted = (np.arange(M)[:, None] * r.stride(0) + np.arange(N)[None, :]).reshape(-1)
    reads = {}
    for _pid, name, kind, offs in main.touches:
        if kind == "load":
            reads.setdefault(name, []).append(offs)
    # the scale: the argument whose loads cover exactly its M elements; each row's factor is loaded
    # once for each output tile holding that row (in the epilogue), not at every step of the K loop
    tiles_holding = np.zeros(M, dtype=np.int64)
    for _pid, offs in stores:
        tiles_holding[np.unique(offs // N)] += 1     # the output is contiguous: row = offset // N
    for parts in reads.values():
        found, times = np.unique(np.concatenate(parts), return_counts=True)
        if np.array_equal(found, np.arange(M)) and (times > tiles_holding).any():
            row = int(np.argmax(times - tiles_holding))
            return (f"{where} loaded the scale of row {row} {int(times[row])} times, for the "
                    f"{int(tiles_holding[row])} output tile(s) that hold the row: the row scale belongs in "
                    f"the epilogue, once per tile, on the float32 accumulator after the K loop, not in "
                    f"the loop on each step's tile of h.")
    for parts in reads.values():
        found, times = np.unique(np.concatenate(parts), return_counts=True)
        if np.array_equal(found, wanted):
            if times.max() > 1:
                row, col = divmod(int(found[np.argmax(times)]), r.stride(0))
                return (f"{where} read {int((times > 1).sum()):,} elements of the residual more than "
                        f"once (residual[{row}, {col}] {int(times.max())} times). Each residual tile "
                        f"belongs to one output tile: read it once, in that tile's epilogue, after "
                        f"the K loop.")
            return None
    return (f"{where} never read the residual's {M} x {N} elements (row stride {r.stride(0)}) as a "
            f"whole: read each of its tiles, with the residual's own row stride, in the epilogue.")


def _linear_dividing_count(fn):
    """No program stores more than its share where the programs divide the tiles: a (128, K) @ (K, 256)
    product, 2 x 2 tiles at the CPU's 64 x 128 for SMS = 2 programs, and at most 16 tiles (so as many
    programs) at any of a GPU's configurations. A walk in runs of tiles // programs + 1 consecutive
    tiles fits the share where the count does not divide (_epilogue_structure's), and not here."""
    M, K, N = 128, _aligned(40, 72, F32), 256
    launches, problem = _recorded(fn, *_linear_operands(M, K, N, F32, False, False, False), touches=True)
    if problem:
        return problem
    main = max(launches, key=lambda launch: launch.bytes_stored)
    stores = stores_of([main])
    return _unshared(stores, math.prod(main.grid), f"for h ({M}, {K}) and w ({N}, {K}), your code")


def _linear_structure(fn):
    """_epilogue_structure, the shares where the programs divide the tiles (_linear_dividing_count), the
    mainloop's products in the inputs' dtype and as many as the product's (_dots_as_loaded), then the
    product with unequal blocks (_linear_unequal_blocks)."""
    return (_epilogue_structure(fn) or _linear_dividing_count(fn) or _dots_as_loaded(fn)
            or _linear_unequal_blocks(fn))


def _dots_as_loaded(fn):
    """On float16 h and w, with a scale and a residual, every tl.dot multiplies float16 tiles: the
    mainloop feeds the tensor cores the tiles as they arrive, and the epilogue works on the float32
    accumulator. A tile converted before its product (the scale applied to h's tiles in the K loop,
    say) shows as float32 operands. And the dots' multiply-adds are the product's (_dot_count): none
    computed outside tl.dot (h @ w.T from NumPy, the kernel doing only the epilogue), none twice."""
    from helpers.solutions import load_solution

    M, K, N = 70, 40, 136
    h, w, scale, residual = _linear_operands(M, K, N, torch.float16, True, True, False)
    with interpreter.dots() as dots:
        _launches, problem = _recorded(fn, h, w, scale, residual)
    if problem:
        return problem
    where = f"for float16 h ({M}, {K}) and w ({N}, {K}) with a scale and a residual, your kernel"
    other = sorted({d.dtypes for d in dots if d.dtypes != ("float16", "float16")})
    if other:
        return (f"{where}'s tl.dot multiplied {' and '.join(other[0])} tiles: h's or w's tiles were "
                f"converted before their product (the scale applied to h's tiles inside the K loop, say). "
                f"The mainloop multiplies the tiles as they arrive, float16 on the tensor cores; the scale "
                f"goes onto the float32 accumulator in the epilogue, once per output tile.")
    return _dot_count(where, dots, M, K, N, load_solution("09").LINEAR_TILES[0][:3])


def _linear_unequal_blocks(fn):
    """One product run in the interpreter with linear_kernel's autotuner given a single configuration
    of tiles 32 x 64 x 16 for the call (rerun_with_config), against the reference: a (70, 40) @ (40, 136)
    product with a scale and a residual, 3 x 3 tiles, the last row and column cut by the output's edge,
    and K in 3 steps of 16, the last partial."""
    bm, bn, bk = UNEQUAL_TILE
    config = triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "FLATTEN": True,
                            "WARP_SPECIALIZE": False}, num_warps=4, num_stages=1)
    M, K, N = 70, 40, 136
    h, w, scale, residual = _linear_operands(M, K, N, F32, True, True, False)
    why = UNEQUAL_BLOCKS_WHY + ("rows of tiles, row offsets and the scale's rows go with BLOCK_M, columns "
                                "with BLOCK_N, the K loop steps by BLOCK_K, and each descriptor's block is "
                                "(rows, columns) of its own tensor.")
    where = (f"run with BLOCK_M, BLOCK_N, BLOCK_K = {bm}, {bn}, {bk} (the check gave your autotuner this one "
             f"configuration for one call) on h ({M}, {K}), w ({N}, {K}), a scale and a residual, "
             f"float32, in the interpreter, your code")
    return rerun_with_config(fn, "linear_kernel", config, (h, w, scale, residual),
                             linear_reference(h, w, scale, residual), where, why,
                             each_launch=_past_the_last_tile)


EXERCISES += [
    Exercise("09", "linear", "the flattened persistent matmul with its epilogues", linear_reference,
             _linear_cases, tol=LINEAR_TOL, kernel=True, structure=_linear_structure,
             contiguous_output=True),
]
