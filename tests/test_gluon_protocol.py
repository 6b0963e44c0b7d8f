"""The Gluon forward's barrier protocol (solutions/gluon_attention.py), run on a model of mbarriers through
every interleaving: no GPU, no Triton. A wrong parity on a GPU gives no error message: the kernel hangs,
or a wait returns early and the numbers come out wrong only sometimes. Here each schedule (plain,
OVERLAP, PINGPONG, both) is run with the producer, both consumers and the TMA copies' landings taking
steps in every order, over rings of 1 to 4 slots and 1 to 6 key tiles, and the first problem is reported
(and the plain schedule with three consumers, CONSUMERS = 3, some of which stop reading early, causal;
and persistent programs walking several blocks, PERSISTENT, with Q's barrier pair, further down):

* a hang: no step possible and the work not done;
* an early read: a consumer reading a slot (K for S = Q K^T, V for O += P V) before that tile has
  landed there;
* an overwrite: the producer starting to load into a slot a consumer still reads;
* a turn out of order (PINGPONG): a consumer taking its k-th turn on the tensor cores other than
  right after the other's matching hand-over.

The model: a barrier counts its completed phases; wait(parity) returns once that count's parity differs
from `parity` (a fresh barrier: wait(1) returns at once, wait(0) waits for the first completion).
`consumer_ops` lists one consumer's waits and arrivals in the order the kernel issues them
(_consumer, _attend_tiles, _softmax_pv, _attend_tiles_overlapped, _overlapped_step): keep the two in
step. The producer is the kernel's `_producer` loop: for each tile, wait on k_empty and load K, wait on
v_empty and load V. The wgmmas' own ordering (wait(1) meaning "S(j) is done") is not modelled; a
consumer holds a slot's K from its wait on k_ready to its arrival on k_empty, and V likewise.
"""

import pytest

SCHEDULES = [(False, False), (True, False), (False, True), (True, True)]   # (overlap, pingpong)


def consumer_ops(n_plain, n_tiles, overlap, pingpong, n_mine=None):
    """One consumer's barrier operations, in the kernel's order: ("k", j) / ("v", j) wait on k_ready /
    v_ready for tile j, ("free k", j) / ("free v", j) arrive on k_empty / v_empty, ("take", k) waits for
    the k-th turn, ("hand",) hands the turn over. n_mine (the plain schedule, causal): the consumer reads
    tiles up to n_mine only, and releases the rest unread after its epilogue."""
    n_mine = n_tiles if n_mine is None else n_mine
    ops = []
    if overlap:                          # _attend_tiles_overlapped
        if n_tiles > 0:
            ops.append(("k", 0))
            if pingpong:
                ops.append(("take", 0))
                ops.append(("hand",))
            ops.append(("free k", 0))
            for j in range(1, n_tiles):  # _overlapped_step, in either of its two loops
                ops += [("k", j), ("v", j - 1)]
                if pingpong:
                    ops += [("take", j), ("hand",)]
                ops += [("free k", j), ("free v", j - 1)]
            ops.append(("v", n_tiles - 1))
            if pingpong:
                ops += [("take", n_tiles), ("hand",)]
            ops.append(("free v", n_tiles - 1))
        return ops
    if pingpong:
        ops.append(("take", 0))
    for lo, hi in ((0, n_plain), (n_plain, n_mine)):   # _attend_tiles twice: unmasked, then masked tiles
        for j in range(lo, hi):
            ops.append(("k", j))         # _wait_ready, then _issue_qk
            if pingpong:                 # _softmax_pv
                ops.append(("hand",))
            ops += [("free k", j), ("v", j)]
            if pingpong:
                ops.append(("take", j + 1))
            ops.append(("free v", j))
    if pingpong:
        ops.append(("hand",))
    for j in range(n_mine, n_tiles):     # after the epilogue: each tile waited for, then released
        ops += [("k", j), ("free k", j), ("v", j), ("free v", j)]
    return ops


class Broken(Exception):
    pass


def run_protocol(n_plain, n_tiles, stages, overlap, pingpong, edit=None, mine=(None, None),
                 ops_of=consumer_ops):
    """None if every interleaving finishes cleanly; else what went wrong first (breadth first).
    edit: a function from consumer_ops' list to another, for the broken protocols below. mine: each
    consumer's n_mine (None: every tile), as many as there are consumers; ops_of: consumer_ops, or a
    broken version of it."""
    programs = [ops_of(n_plain, n_tiles, overlap, pingpong, n_mine) for n_mine in mine]
    programs = [edit(ops) if edit else ops for ops in programs]
    # state: (the producer's next load (2j: K of tile j, 2j+1: V of tile j), loads in flight
    #         ((kind, slot, tile), ...), slot contents of the K ring and the V ring, k_ready / v_ready /
    #         k_empty / v_empty completed phases per slot, k_empty / v_empty arrivals in the current
    #         phase, turn[0] / turn[1] completed phases, hand-overs made by each consumer, consumer pcs)
    none = (None,) * stages
    zero = (0,) * stages
    start = (0, (), none, none, zero, zero, zero, zero, zero, zero, (0, 0), (0, 0), (0,) * len(programs))

    def finished(state):
        return (state[0] == 2 * n_tiles and not state[1]
                and all(pc == len(p) for pc, p in zip(state[12], programs)))

    def hang(state):
        return (f"hang: producer at load {state[0]}, consumers at steps {state[12]} "
                f"({[p[pc] if pc < len(p) else 'done' for pc, p in zip(state[12], programs)]})")

    return explore(start, lambda state: _moves(state, programs, n_tiles, stages), finished, hang)


def explore(start, moves, finished, hang):
    """Every state reachable from start, breadth first: None if each one that has no move is finished;
    else hang(state) of the first that is not, or the message of the first Broken a move raised."""
    seen, frontier = {start}, [start]
    try:
        while frontier:
            following = []
            for state in frontier:
                after = moves(state)
                if not after and not finished(state):
                    return hang(state)
                for move in after:
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


def _holding(programs, pcs, kind):
    """Per consumer, the tiles whose K (kind "k") or V ("v") it reads now: waited on its ready barrier,
    not yet arrived on its empty one."""
    held = []
    for program, pc in zip(programs, pcs):
        tiles = set()
        for op in program[:pc]:
            if op[0] == kind:
                tiles.add(op[1])
            elif op[0] == "free " + kind:
                tiles.discard(op[1])
        held.append(tiles)
    return held


def _moves(state, programs, n_tiles, stages):
    (load, flight, k_in, v_in, k_ready, v_ready, k_empty, v_empty, k_arrived, v_arrived, turn, handed,
     pcs) = state
    moves = []
    if load < 2 * n_tiles:               # _producer: wait on k_empty, load K; wait on v_empty, load V
        tile, kind = load // 2, "kv"[load % 2]
        slot, phase = tile % stages, (tile // stages) & 1
        if _passes((k_empty, v_empty)[load % 2][slot], phase ^ 1):
            for c, tiles in enumerate(_holding(programs, pcs, kind)):
                if any(t % stages == slot for t in tiles):
                    raise Broken(f"overwrite: the producer loads {kind.upper()} of tile {tile} into slot "
                                 f"{slot} while consumer {c} still reads tile "
                                 f"{[t for t in tiles if t % stages == slot][0]} there")
            moves.append((load + 1, flight + ((kind.upper(), slot, tile),)) + state[2:])
    for i, (kind, slot, tile) in enumerate(flight):   # a copy lands: its ready barrier completes a phase
        rest = flight[:i] + flight[i + 1:]
        if kind == "K":
            moves.append((load, rest, _put(k_in, slot, tile), v_in, _put(k_ready, slot, k_ready[slot] + 1))
                         + state[5:])
        else:
            moves.append((load, rest, k_in, _put(v_in, slot, tile), k_ready,
                          _put(v_ready, slot, v_ready[slot] + 1)) + state[6:])
    for c in range(len(programs)):
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
                moves.append(state[:12] + (next_pcs,))
        elif op[0] in ("free k", "free v"):
            slot, which = op[1] % stages, op[0] == "free v"   # 0: the K ring, 1: the V ring
            empty, arrived = (k_empty, v_empty)[which], (k_arrived, v_arrived)[which]
            done = arrived[slot] == len(programs) - 1   # the last consumer's arrival completes the phase
            empty = _put(empty, slot, empty[slot] + done)
            arrived = _put(arrived, slot, 0 if done else arrived[slot] + 1)
            if which:
                moves.append(state[:7] + (empty, k_arrived, arrived) + state[10:12] + (next_pcs,))
            else:
                moves.append(state[:6] + (empty, v_empty, arrived, v_arrived) + state[10:12] + (next_pcs,))
        elif op[0] == "take":            # _take_turn: wait on turn[c] for parity (k + 1 - c) & 1
            k = op[1]
            if _passes(turn[c], (k + 1 - c) & 1):
                other = handed[1 - c]    # 0's turn k follows 1's k-th hand-over, 1's turn k 0's (k+1)-th
                if other != k + c:
                    raise Broken(f"turn out of order: consumer {c} takes turn {k} after {other} hand-overs "
                                 f"from consumer {1 - c}")
                moves.append(state[:12] + (next_pcs,))
        else:                            # _hand_over: arrive on the other consumer's turn barrier
            moves.append(state[:10] + (_put(turn, 1 - c, turn[1 - c] + 1), _put(handed, c, handed[c] + 1),
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
def test_protocol_runs_clean_on_every_ring(overlap, pingpong):
    """Every schedule finishes, from a ring of one slot up (the kernel's "Ring depth")."""
    for stages in range(1, 5):
        for n_plain, n_tiles in _shapes():
            problem = run_protocol(n_plain, n_tiles, stages, overlap, pingpong)
            assert problem is None, (f"overlap={overlap} pingpong={pingpong}, {stages} slots, "
                                     f"{n_tiles} tiles ({n_plain} unmasked): {problem}")


def _one_release(ops):
    """K and V released together after the PV, as one kv_empty barrier per slot would."""
    ops = [op for op in ops if op[0] != "free k"]
    return [op2 for op in ops for op2 in ([("free k", op[1]), op] if op[0] == "free v" else [op])]


def _problems(stages, overlap, pingpong, edit):
    return [run_protocol(n_plain, n_tiles, stages, overlap, pingpong, edit) for n_plain, n_tiles in _shapes()]


@pytest.mark.parametrize("overlap,pingpong", [s for s in SCHEDULES if any(s)])
def test_one_release_barrier_hangs_on_one_slot(overlap, pingpong):
    """Why K and V have empty barriers of their own: released together after the PV, OVERLAP and
    PINGPONG hang on a ring of one slot (two are enough then)."""
    assert any(p and p.startswith("hang") for p in _problems(1, overlap, pingpong, _one_release))
    assert not any(_problems(2, overlap, pingpong, _one_release))


@pytest.mark.parametrize("overlap,pingpong", SCHEDULES)
def test_the_model_finds_broken_protocols(overlap, pingpong):
    """The model is not blind: a consumer that never releases V hangs the producer; one that releases
    each K before waiting for it completes k_empty's phases out of step with the producer's parities,
    which overwrites a tile still in use or hangs; and (PINGPONG) a turn counted wrong is caught."""
    never_frees_v = lambda ops: [op for op in ops if op[0] != "free v"]  # noqa: E731
    assert any(p and p.startswith("hang") for p in _problems(2, overlap, pingpong, never_frees_v))

    def frees_k_first(ops):      # each tile's K released before the wait that reads it
        out = [op for op in ops if op[0] != "free k"]
        return [op2 for op in out for op2 in ([("free k", op[1]), op] if op[0] == "k" else [op])]
    assert any(_problems(1, overlap, pingpong, frees_k_first))
    if pingpong:
        late_turn = lambda ops: [("take", op[1] + 1) if op[0] == "take" else op for op in ops]  # noqa: E731
        assert any(_problems(2, overlap, pingpong, late_turn))


def _three_shapes():
    """(n_plain, n_tiles, mine) for a block of three consumers (192 query rows), causal: consumer WG reads
    up to its own rows' last tile, n_mine = cdiv(start_m + 64 (WG + 1), BLOCK_N), the block's last
    consumer every tile. With tiles of 128 keys, start_m = 192 b: the block's first n_plain = 3b // 2
    tiles unmasked."""
    shapes = []
    for block in range(3):
        start = 192 * block
        n_tiles = -(-(start + 192) // 128)
        mine = tuple(-(-(start + 64 * (wg + 1)) // 128) for wg in range(3))
        shapes.append((start // 128, n_tiles, mine))
    return shapes


def test_three_consumers_some_stopping_early():
    """The plain schedule with three consumers, the first ones releasing their last tiles unread after
    their epilogue: clean on every ring (the first blocks' shapes, which the later ones repeat); and not
    if a consumer released those tiles without waiting for them to land."""
    assert [mine for _, _, mine in _three_shapes()] == [(1, 1, 2), (2, 3, 3), (4, 4, 5)]
    for stages in range(1, 4):
        for n_plain, n_tiles, mine in _three_shapes():
            problem = run_protocol(n_plain, n_tiles, stages, False, False, mine=mine)
            assert problem is None, f"{stages} slots, {n_tiles} tiles, read up to {mine}: {problem}"

    def frees_unread_at_once(n_plain, n_tiles, overlap, pingpong, n_mine):
        """The tiles after n_mine released without waiting for them to land."""
        ops = consumer_ops(n_plain, n_tiles, overlap, pingpong, n_mine)
        return [op for op in ops if not (op[0] in ("k", "v") and n_mine is not None and op[1] >= n_mine)]
    assert any(run_protocol(n_plain, n_tiles, 1, False, False, mine=mine, ops_of=frees_unread_at_once)
               for n_plain, n_tiles, mine in _three_shapes())


# ---------------------------------------------------------------- persistent programs (PERSISTENT)
#
# A persistent program walks several query blocks with the plain schedule. The ring's count of tiles runs
# on from block to block (tile j of a block is ring0 + j), and each Q buffer gets a barrier pair of its
# own. Block k uses buffer b = k % q_buffers for the u-th time (u = k // q_buffers): the producer waits
# on q_empty[b] (parity (u & 1) ^ 1) before loading block k's Q, the consumers wait on q_ready[b]
# (parity u & 1) before reading it and each arrives on q_empty[b] once its last S of the block is done.
# After the last block the producer waits once more and arrives on q_ready with no copy: the
# consumers, finding no block there, stop. (Which block comes next, taken from the
# counter and passed through shared memory, is not modelled: only that there is one, or none.)


Q_BUFFERS = 2   # the kernel with q_buffers=2: block k's Q in buffer k % 2, the next block's Q can land early


def persistent_programs(blocks, consumers, edit=None):
    """(producer ops, [consumer ops]) for blocks [(n_plain, n_tiles, mine)] in turn, mine each consumer's
    n_mine (None: every tile). Producer: ("Q", k), ("K", r), ("V", r), ("stop", k); consumer: ("q", k),
    ("end", k), ("free q", k), and consumer_ops' own on ring tiles r, with the block whose Q they read:
    ("k", r, k) (None in the release loop after the epilogue, which reads no Q)."""
    producer, programs, ring0 = [], [[] for _ in range(consumers)], 0
    for k, (n_plain, n_tiles, mine) in enumerate(blocks):
        producer.append(("Q", k))
        producer += [(kind, ring0 + j) for j in range(n_tiles) for kind in ("K", "V")]
        for c in range(consumers):
            n_mine = n_tiles if mine[c] is None else mine[c]
            ops = [(op[0], op[1] + ring0, k) for op in consumer_ops(n_plain, n_tiles, False, False, n_mine)]
            released = 4 * (n_tiles - n_mine)            # the release loop after the epilogue
            reads = ops[:len(ops) - released]
            rest = [(op, r, None) for op, r, _ in ops[len(ops) - released:]]   # waits that read no Q
            programs[c] += [("q", k)] + reads + [("free q", k)] + rest
        ring0 += n_tiles
    producer.append(("stop", len(blocks)))
    programs = [program + [("end", len(blocks))] for program in programs]
    return producer, [edit(p) if edit else p for p in programs]


def run_persistent(blocks, stages, consumers, edit=None, q_buffers=Q_BUFFERS):
    """None if every interleaving of the producer, the consumers and the copies' landings finishes;
    else the first problem (breadth first), as run_protocol. Block k's Q goes to buffer k % q_buffers."""
    producer, programs = persistent_programs(blocks, consumers, edit)
    none, zero = (None,) * stages, (0,) * stages
    # (producer pc, copies in flight, K slots, V slots, Q's buffers, k_ready, v_ready, k_empty, v_empty,
    #  k/v_empty arrivals, q_ready, q_empty, q_empty arrivals (each per Q buffer), consumer pcs)
    q_none, q_zero = (None,) * q_buffers, (0,) * q_buffers
    start = (0, (), none, none, q_none, zero, zero, zero, zero, zero, zero, q_zero, q_zero, q_zero,
             (0,) * consumers)

    def finished(state):
        return (state[0] == len(producer) and not state[1]
                and all(pc == len(p) for pc, p in zip(state[14], programs)))

    def hang(state):
        at = [p[pc] if pc < len(p) else "done" for pc, p in zip(state[14], programs)]
        where = producer[state[0]] if state[0] < len(producer) else "done"
        return f"hang: producer at {where}, consumers at {at}"

    return explore(start, lambda state: _persistent_moves(state, producer, programs, stages, q_buffers),
                   finished, hang)


def _persistent_moves(state, producer, programs, stages, q_buffers):
    (pc, flight, k_in, v_in, q_in, k_ready, v_ready, k_empty, v_empty, k_arrived, v_arrived, q_ready, q_empty,
     q_arrived, pcs) = state
    moves = []
    if pc < len(producer):
        kind, n = producer[pc]
        b, use = n % q_buffers, n // q_buffers   # block n's Q buffer, and which use of it
        if kind in ("Q", "stop") and _passes(q_empty[b], (use & 1) ^ 1):
            if kind == "Q":
                moves.append((pc + 1, flight + (("Q", b, n),)) + state[2:])
            else:   # no copy: q_ready's phase completes with the arrival, and there is no block
                moves.append((pc + 1, flight, k_in, v_in, _put(q_in, b, "stop")) + state[5:11]
                             + (_put(q_ready, b, q_ready[b] + 1),) + state[12:])
        elif kind in ("K", "V"):
            slot, phase = n % stages, (n // stages) & 1
            if _passes((k_empty, v_empty)[kind == "V"][slot], phase ^ 1):
                for c, tiles in enumerate(_holding(programs, pcs, kind.lower())):
                    if any(t % stages == slot for t in tiles):
                        raise Broken(f"overwrite: the producer loads {kind} of ring tile {n} into slot "
                                     f"{slot} while consumer {c} still reads it")
                moves.append((pc + 1, flight + ((kind, slot, n),)) + state[2:])
    for i, (kind, slot, n) in enumerate(flight):   # a copy lands
        rest = flight[:i] + flight[i + 1:]
        if kind == "Q":
            moves.append((pc, rest, k_in, v_in, _put(q_in, slot, n)) + state[5:11]
                         + (_put(q_ready, slot, q_ready[slot] + 1),) + state[12:])
        elif kind == "K":
            moves.append((pc, rest, _put(k_in, slot, n), v_in, q_in, _put(k_ready, slot, k_ready[slot] + 1))
                         + state[6:])
        else:
            moves.append((pc, rest, k_in, _put(v_in, slot, n), q_in, k_ready,
                          _put(v_ready, slot, v_ready[slot] + 1)) + state[7:])
    for c, program in enumerate(programs):
        if pcs[c] == len(program):
            continue
        (op, n, *block), next_pcs = program[pcs[c]], _put(pcs, c, pcs[c] + 1)
        if op in ("q", "end"):
            b = n % q_buffers
            if _passes(q_ready[b], (n // q_buffers) & 1):
                if q_in[b] != (n if op == "q" else "stop"):
                    raise Broken(f"early read: consumer {c} reads Q of block {n}, and buffer {b} holds "
                                 f"{'nothing' if q_in[b] is None else q_in[b]}")
                moves.append(state[:14] + (next_pcs,))
        elif op == "free q":
            b = n % q_buffers
            done = q_arrived[b] == len(programs) - 1
            moves.append(state[:12] + (_put(q_empty, b, q_empty[b] + done),
                                       _put(q_arrived, b, 0 if done else q_arrived[b] + 1), next_pcs))
        elif op in ("k", "v"):
            slot, phase = n % stages, (n // stages) & 1
            ready, holds = (k_ready, k_in) if op == "k" else (v_ready, v_in)
            if _passes(ready[slot], phase):
                if holds[slot] != n:
                    raise Broken(f"early read: consumer {c} reads {op.upper()} of ring tile {n} from slot "
                                 f"{slot}, which holds {holds[slot]}")
                held = q_in[block[0] % q_buffers] if block[0] is not None else None
                if op == "k" and block[0] is not None and held != block[0]:   # S = Q K^T reads Q too
                    raise Broken(f"overwrite: consumer {c} computes S of block {block[0]} with "
                                 f"{'nothing' if held is None else 'block ' + str(held) + chr(39) + 's Q'} "
                                 f"in its Q buffer")
                moves.append(state[:14] + (next_pcs,))
        else:                            # "free k" / "free v"
            slot, which = n % stages, op == "free v"
            empty, arrived = (k_empty, v_empty)[which], (k_arrived, v_arrived)[which]
            done = arrived[slot] == len(programs) - 1
            empty = _put(empty, slot, empty[slot] + done)
            arrived = _put(arrived, slot, 0 if done else arrived[slot] + 1)
            if which:
                moves.append(state[:8] + (empty, k_arrived, arrived) + state[11:14] + (next_pcs,))
            else:
                moves.append(state[:7] + (empty, v_empty, arrived, v_arrived) + state[11:14] + (next_pcs,))
    return moves


# Block sequences a persistent program may walk: full attention (every tile, the last one maybe masked)
# with two consumers; causal blocks of three consumers in the counter's order (longest first), whose first
# consumers stop early (_three_shapes); a single block; and one that takes no tile of the ring twice.
PERSISTENT_RUNS = [(2, [(2, 2, (None, None)), (1, 2, (None, None))]),
                   (2, [(1, 1, (None, None))]),
                   (3, [(3, 5, (4, 4, 5)), (0, 2, (1, 1, 2))]),
                   (3, [(1, 3, (2, 3, 3)), (0, 2, (1, 1, 2)), (1, 3, (2, 3, 3))])]


def test_persistent_programs_run_clean_on_every_ring():
    """Clean on rings of 1 to 3 slots, with the kernel's two Q buffers and with one."""
    assert _three_shapes() == [(0, 2, (1, 1, 2)), (1, 3, (2, 3, 3)), (3, 5, (4, 4, 5))]   # the blocks above
    for consumers, blocks in PERSISTENT_RUNS:
        for stages in range(1, 4):
            for q_buffers in (Q_BUFFERS, 1):
                problem = run_persistent(blocks, stages, consumers, q_buffers=q_buffers)
                assert problem is None, (f"{consumers} consumers, {stages} slots, {q_buffers} Q buffers, "
                                         f"blocks {blocks}: {problem}")


def test_the_persistent_model_finds_broken_protocols():
    """A consumer that frees Q's buffer before its last S lets the producer overwrite Q under it; one
    that never frees it hangs the producer; and the ring's broken releases are still caught across
    blocks."""
    consumers, blocks = 2, [(1, 1, (None, None))] * (Q_BUFFERS + 1)   # a Q buffer used twice

    def frees_q_at_once(ops):
        out = [op for op in ops if op[0] != "free q"]
        return [op2 for op in out for op2 in ([op, ("free q", op[1])] if op[0] == "q" else [op])]
    assert run_persistent(blocks, 2, consumers, frees_q_at_once).startswith("overwrite")
    never_frees_q = lambda ops: [op for op in ops if op[0] != "free q"]  # noqa: E731
    assert run_persistent(blocks, 2, consumers, never_frees_q).startswith("hang")
    never_frees_v = lambda ops: [op for op in ops if op[0] != "free v"]  # noqa: E731
    assert run_persistent(blocks, 2, consumers, never_frees_v).startswith("hang")
