"""The Gluon forward's barrier protocol (solutions/gluon_attention.py), run on a model of mbarriers through
every interleaving: no GPU, no Triton. A wrong parity on a GPU gives no error message: the kernel hangs,
or a wait returns early and the numbers come out wrong only sometimes. Here each schedule (plain,
OVERLAP, PINGPONG, both) is run with the producer, both consumers and the TMA copies' landings taking
steps in every order, over rings of 1 to 4 slots and 1 to 6 key tiles, and the first problem is reported:

* a hang: no step possible and the work not done;
* an early read: a consumer reading a slot (K for S = Q K^T, V for O += P V) before that tile has
  landed there;
* an overwrite: the producer starting to load into a slot a consumer still reads;
* a turn out of order (PINGPONG): a consumer taking its k-th turn on the tensor cores other than
  right after the other's matching hand-over.

The model: a barrier counts its completed phases; wait(parity) returns once that count's parity differs
from `parity` (a fresh barrier: wait(1) returns at once, wait(0) waits for the first completion).
`consumer_ops` lists one consumer's waits and arrivals in the order the kernel issues them
(_consumer, _attend_tiles, _attend_tiles_overlapped, _issue_qk, _softmax_pv): keep the two in step.
The producer is the kernel's `_producer` loop. The wgmmas' own ordering (wait(1) meaning "S(j) is done")
is not modelled; a consumer holds a slot from its wait on k_ready to its arrival on kv_empty.
"""

import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

SCHEDULES = [(False, False), (True, False), (False, True), (True, True)]   # (overlap, pingpong)


def min_stages(overlap, pingpong):
    """The kernel's rule (its static_asserts, and the host's min_stages)."""
    return 1 + overlap + pingpong


def consumer_ops(n_plain, n_tiles, overlap, pingpong):
    """One consumer's barrier operations, in the kernel's order: ("k", j) / ("v", j) wait on k_ready /
    v_ready for tile j, ("free", j) arrives on kv_empty, ("take", k) waits for the k-th turn, ("hand",)
    hands the turn over."""
    ops = []

    def issue_qk(j):                     # _issue_qk
        ops.append(("k", j))

    def softmax_pv(j):                   # _softmax_pv
        if pingpong:
            ops.append(("hand",))
        ops.append(("v", j))
        if pingpong:
            ops.append(("take", j + 1))
        ops.append(("free", j))

    if pingpong:
        ops.append(("take", 0))
    if overlap:                          # _attend_tiles_overlapped(0, n_tiles)
        lo, hi = 0, n_tiles
        if lo < hi:
            issue_qk(lo)
            for j in range(lo, hi - 2, 2):
                issue_qk(j + 1)
                softmax_pv(j)
                issue_qk(j + 2)
                softmax_pv(j + 1)
            if (hi - lo) % 2 == 0:
                issue_qk(hi - 1)
                softmax_pv(hi - 2)
                softmax_pv(hi - 1)
            else:
                softmax_pv(hi - 1)
    else:                                # _attend_tiles twice: the unmasked tiles, then the masked ones
        for lo, hi in ((0, n_plain), (n_plain, n_tiles)):
            for j in range(lo, hi):
                issue_qk(j)
                softmax_pv(j)
    if pingpong:
        ops.append(("hand",))
    return ops


class Broken(Exception):
    pass


def run_protocol(n_plain, n_tiles, stages, overlap, pingpong):
    """None if every interleaving finishes cleanly; else what went wrong first (breadth first)."""
    programs = [consumer_ops(n_plain, n_tiles, overlap, pingpong)] * 2
    # state: (producer's next tile, loads in flight ((kind, slot, tile), ...), slot contents K and V,
    #         k_ready / v_ready / kv_empty completed phases per slot, kv_empty arrivals in the current
    #         phase, turn[0] / turn[1] completed phases, hand-overs made by each consumer, consumer pcs)
    none = (None,) * stages
    zero = (0,) * stages
    start = (0, (), none, none, zero, zero, zero, zero, (0, 0), (0, 0), (0, 0))
    seen, frontier = {start}, [start]
    try:
        while frontier:
            following = []
            for state in frontier:
                moves = _moves(state, programs, n_tiles, stages)
                if not moves and not (state[0] == n_tiles and not state[1]
                                      and all(pc == len(p) for pc, p in zip(state[10], programs))):
                    return f"hang: producer at tile {state[0]}, consumers at steps {state[10]} " \
                           f"({[p[pc] if pc < len(p) else 'done' for pc, p in zip(state[10], programs)]})"
                for move in moves:
                    if move not in seen:
                        seen.add(move)
                        following.append(move)
            frontier = following
    except Broken as broken:
        return str(broken)
    return None


def _put(values, i, value):
    return values[:i] + (value,) + values[i + 1:]


def _passes(completed, parity):
    return completed % 2 != parity


def _holding(programs, pcs, stages):
    """Per consumer, the tiles it reads now: waited on k_ready, not yet arrived on kv_empty."""
    held = []
    for program, pc in zip(programs, pcs):
        tiles = set()
        for op in program[:pc]:
            if op[0] == "k":
                tiles.add(op[1])
            elif op[0] == "free":
                tiles.discard(op[1])
        held.append(tiles)
    return held


def _moves(state, programs, n_tiles, stages):
    (prod, flight, k_in, v_in, k_ready, v_ready, empty, arrived, turn, handed, pcs) = state
    moves = []
    if prod < n_tiles:                   # _producer: wait on kv_empty, then load K and V
        slot, phase = prod % stages, (prod // stages) & 1
        if _passes(empty[slot], phase ^ 1):
            for c, tiles in enumerate(_holding(programs, pcs, stages)):
                if any(t % stages == slot for t in tiles):
                    raise Broken(f"overwrite: the producer loads tile {prod} into slot {slot} while consumer "
                                 f"{c} still reads tile {[t for t in tiles if t % stages == slot][0]} there")
            moves.append((prod + 1, flight + (("K", slot, prod), ("V", slot, prod))) + state[2:])
    for i, (kind, slot, tile) in enumerate(flight):   # a copy lands: its ready barrier completes a phase
        rest = flight[:i] + flight[i + 1:]
        if kind == "K":
            moves.append((prod, rest, _put(k_in, slot, tile), v_in, _put(k_ready, slot, k_ready[slot] + 1))
                         + state[5:])
        else:
            moves.append((prod, rest, k_in, _put(v_in, slot, tile), k_ready,
                          _put(v_ready, slot, v_ready[slot] + 1)) + state[6:])
    for c in (0, 1):
        if pcs[c] == len(programs[c]):
            continue
        op, next_pcs = programs[c][pcs[c]], _put(pcs, c, pcs[c] + 1)
        if op[0] in ("k", "v"):
            j = op[1]
            slot, phase = j % stages, (j // stages) & 1
            ready, holds = (k_ready, k_in) if op[0] == "k" else (v_ready, v_in)
            if _passes(ready[slot], phase):
                if holds[slot] != j:
                    there = "nothing" if holds[slot] is None else f"tile {holds[slot]}"
                    raise Broken(f"early read: consumer {c} reads {op[0].upper()} of tile {j} from slot "
                                 f"{slot}, which holds {there}")
                moves.append(state[:10] + (next_pcs,))
        elif op[0] == "free":
            slot = op[1] % stages
            done = arrived[slot] == 1    # the second consumer's arrival completes the phase
            moves.append(state[:6] + (_put(empty, slot, empty[slot] + done),
                                      _put(arrived, slot, 0 if done else 1), turn, handed, next_pcs))
        elif op[0] == "take":            # _take_turn: wait on turn[c] for parity (k + 1 - c) & 1
            k = op[1]
            if _passes(turn[c], (k + 1 - c) & 1):
                other = handed[1 - c]    # 0's turn k follows 1's k-th hand-over, 1's turn k 0's (k+1)-th
                if other != k + c:
                    raise Broken(f"turn out of order: consumer {c} takes turn {k} after {other} hand-overs "
                                 f"from consumer {1 - c}")
                moves.append(state[:10] + (next_pcs,))
        else:                            # _hand_over: arrive on the other consumer's turn barrier
            moves.append(state[:8] + (_put(turn, 1 - c, turn[1 - c] + 1), _put(handed, c, handed[c] + 1),
                                      next_pcs))
    return moves


def _shapes():
    """(n_plain, n_tiles): full attention (all unmasked, or the last tile masked) and causal blocks
    (the diagonal tiles masked, one or two of them), from a single tile up."""
    shapes = set()
    for n in range(1, 7):
        shapes |= {(n, n), (n - 1, n), (max(n - 2, 0), n)}
    return sorted(shapes)


@pytest.mark.parametrize("overlap,pingpong", SCHEDULES)
def test_protocol_runs_clean_on_rings_deep_enough(overlap, pingpong):
    for stages in range(min_stages(overlap, pingpong), 5):
        for n_plain, n_tiles in _shapes():
            problem = run_protocol(n_plain, n_tiles, stages, overlap, pingpong)
            assert problem is None, (f"overlap={overlap} pingpong={pingpong}, {stages} slots, "
                                     f"{n_tiles} tiles ({n_plain} unmasked): {problem}")


@pytest.mark.parametrize("overlap,pingpong", [s for s in SCHEDULES if min_stages(*s) > 1])
def test_protocol_deadlocks_one_slot_short(overlap, pingpong):
    """The kernel refuses NUM_STAGES below min_stages: one slot fewer hangs (so the bound is tight)."""
    stages = min_stages(overlap, pingpong) - 1
    problems = [run_protocol(n - 1, n, stages, overlap, pingpong) for n in range(1, 6)]
    assert any(p and p.startswith("hang") for p in problems), problems


def test_kernel_and_model_agree_on_ring_depth():
    """The host's min_stages is the model's (and the kernel's static_asserts say the same)."""
    source = (ROOT / "solutions" / "gluon_attention.py").read_text()
    assert "def min_stages(overlap=False, pingpong=False):\n" in source
    assert "return 1 + overlap + pingpong" in source
    assert "NUM_STAGES >= 3" in source and "NUM_STAGES >= 2" in source
    for overlap, pingpong in SCHEDULES:
        assert min_stages(overlap, pingpong) == 1 + overlap + pingpong
