"""Latency of mapped loop nests from their access counts, over NumPy rows.

Every term is defined once, over the rows of a ``NestRows`` (one structure,
many bound vectors); the model of one mapping (``latency_terms``) is the same
code run on one row. The run is modeled as the tile program the simulator
executes (``accelmap.sim``): decoupled load, compute and store units per level,
double buffering where the level has it. Terms, all in cycles:

* compute: the static MAC schedule (product of temporal bounds over MACs per
  cycle; a partial last tile still occupies its slots), or the compute side's
  streaming traffic at a level over its bandwidth if that is longer, plus the
  compute-pipeline overheads of Eq. 4.1 of Hamdi's thesis (row setup and per-result
  overhead, ``compute.pipeline``);
* per level and operand, load and store time: bits per instance the mapping
  occupies over the bandwidth of the slower side, plus ``transfer_setup_cycles``
  per tile transfer (DMA call) — Hamdi's thesis found these per-call overheads and the
  *sum* (not max) of weight and input loads to dominate its latency error — and, for a
  load, the parent's ``read_row_cycles`` per row of the tile (``dma_rows``: a 2-D DMA
  requests its rows one at a time; the operand's layout decides how many there are);
* a single-buffered level serializes with compute: at every tile change (one
  transition class per temporal loop above it) the exact deltas of the levels
  below that loop move, timed as the DMA units run them (``_transition_time``: each drain holds its
  slower side's port, a double buffer's drain at the same transition too, and the loads fill the
  port's time around them); a double-buffered level overlaps them, except for its first load (prologue)
  and last drain (epilogue); a window of compute hides at most one transition's
  loads and the parent port's share of loads recurring within it, at the pace of
  compute or of drains (``_burst``); refills chained through overlapping levels
  run one after another (``_chained``); an output half must be computed, drained
  (after the drains below it) and refilled before its next use (two-half cycle); where the
  output loop leaves an edge tile, unequal tiles do not pair up and drains chain on the one
  store unit across three tiles: the halves' max-plus recurrence is walked over the loop's
  positions to its periodic regime (``_unequal_halves``);
  and a parent's drain holding its read port blocks the reload below it;
  single-buffer stalls add to that cycle beyond the wait for the halves a step has anyway;
* every unit and memory port must also fit its own total work, a port's
  transfers ending before the last tile of each of its streams computes, but for
  the other streams' loads inside that tile.

latency = max(max(compute + stall, compute + stall with the held drains, busiest double-buffered unit,
                  bursts, two-half cycle, chained refills) + blocked reloads + prologue + epilogue, busiest port)
(every other term keeps the stall without the drains a single-buffered transition finds holding its ports).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from accelmap.arch.accelerator import Accelerator
from accelmap.cost.dma_rows import load_setup_cycles
from accelmap.cost.nest_rows import NestRows, axis_sizes, cycles, operand_axes, output_bits
from accelmap.mapping.loopnest import Loop, Mapping
from accelmap.workload.index_sets import axis_overlap
from accelmap.workload.operator import Operator


@dataclass(frozen=True)
class LatencyTerms:
    compute_cycles: int             # the static MAC schedule; pipeline overheads are separate
    transfer_cycles: dict[str, float]
    stall_cycles: float
    latency: float
    pipeline_cycles: float = 0.0
    setup_cycles: float = 0.0
    parts: tuple[tuple[str, float], ...] = ()   # what the latency is made of; sums to it


def used_instances(arch: Accelerator, m: Mapping, level: int) -> int:
    """Instances of a level that a mapping occupies: the product of the spatial loops above it, less
    those on axes it is shared along (``NestRows.used`` over rows)."""
    out = 1
    for l in m.loops:
        if l.spatial and not arch.inside(level, l.level, l.axis):
            out *= l.bound
    return out


# ---------------------------------------------------------------- compute pipeline (Eq. 4.1)

def pipeline_counts_rows(out_dims, streamed_dims, dims: list[str], B: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Result sets and rows of the compute pipeline per row of temporal bounds ``B`` (rows x loops
    over ``dims``, outermost first): both shrink with the innermost temporal loops over dims the
    output does not use (loops of bound 1 change nothing)."""
    n = B.shape[0]
    in_suffix = np.ones(n, dtype=bool)
    suffix = np.ones(n, dtype=np.int64)
    streamed = np.ones(n, dtype=np.int64)
    for j in reversed(range(len(dims))):
        d, b = dims[j], B[:, j]
        if d in out_dims:
            in_suffix &= b == 1
            continue
        f = np.where(in_suffix, b, 1)
        suffix *= f
        if d in streamed_dims:
            streamed *= f
    total = np.prod(B, axis=1) if len(dims) else np.ones(n, dtype=np.int64)
    return total // suffix, total // streamed


def pipeline_counts(op: Operator, loops: tuple[Loop, ...], streamed: tuple[str, ...]) -> tuple[int, int]:
    """``pipeline_counts_rows`` of one loop list (spatial loops skipped)."""
    temporal = [l for l in loops if not l.spatial]
    B = np.array([[l.bound for l in temporal]], dtype=np.int64).reshape(1, len(temporal))
    results, rows = pipeline_counts_rows(op.output.dims, streamed, [l.dim for l in temporal], B)
    return int(results[0]), int(rows[0])


def _pipeline(nest: NestRows) -> np.ndarray:
    pipe = nest.arch.compute.pipeline
    if pipe is None:
        return np.zeros(nest.n)
    ts = nest.temporal_slots
    results, rows = pipeline_counts_rows(nest.op.output.dims, pipe.streamed_dims,
                                         [nest.structure[j][0] for j in ts], nest.B[:, ts])
    return (rows * pipe.row_setup_cycles + results * pipe.result_overhead_cycles).astype(float)


def pipeline_overhead(op: Operator, arch: Accelerator, m: Mapping) -> float:
    """Total compute-pipeline cycles of a mapping: rows x row setup + result sets x result overhead."""
    return float(_pipeline(NestRows.of_mapping(op, arch, m))[0])


# ---------------------------------------------------------------- tile transfers

def _moving_loops(nest: NestRows, dims: frozenset[str], c: int) -> np.ndarray:
    """Per row and temporal slot above c (rows x slots): does that loop's advance move the tile of
    an operand over ``dims`` (its own dim is one of them, or a loop inside it over one of them has
    a bound above 1 and resets)?"""
    key = (dims, c)
    if key in nest._moving:
        return nest._moving[key]
    above = nest.above(c)
    mine = np.array([nest.structure[j][0] in dims for j in above], dtype=bool).reshape(1, len(above))
    ind = mine & (nest.B[:, above] > 1)
    inner = np.zeros_like(ind)
    if above:
        inner[:, :-1] = np.logical_or.accumulate(ind[:, :0:-1], axis=1)[:, ::-1]
    nest._moving[key] = mine | inner
    return nest._moving[key]


def tile_transfer_rows(nest: NestRows, dims: frozenset[str], c: int) -> np.ndarray:
    """Tiles of an operand over ``dims`` that level c receives per row: one at the start, and one at
    every advance of a temporal loop above c that moves it (its own dim is the operand's, or a loop
    inside it over the operand's dims has a bound above 1 and resets). Cached on the nest (read-only)."""
    key = ("transfers", dims, c)
    out = nest._geo.get(key)
    if out is None:
        if not nest.above(c):
            out = np.ones(nest.n, dtype=np.int64)
        else:
            cnt, _ = nest.classes(c)
            out = 1 + (_moving_loops(nest, dims, c) * cnt.T).sum(axis=1)
        out.flags.writeable = False
        nest._geo[key] = out
    return out


def tile_transfers(op: Operator, m: Mapping, dims: frozenset[str], level: int) -> int:
    """``tile_transfer_rows`` of one mapping."""
    structure = [(l.dim, l.level, l.axis) for l in m.loops]
    B = np.array([[l.bound for l in m.loops]], dtype=np.int64).reshape(1, len(structure))
    nest = NestRows.__new__(NestRows)
    # Only the classes are needed: skip the extents of the full constructor (this runs in order searches).
    nest.op, nest.structure, nest.B, nest.n = op, structure, B, 1
    nest.stride = np.ones_like(B)
    for d in dict.fromkeys(s[0] for s in structure):
        js = [j for j, s in enumerate(structure) if s[0] == d]
        if len(js) > 1:
            nest.stride[:, js[:-1]] = np.cumprod(B[:, js[:0:-1]], axis=1)[:, ::-1]
    nest.temporal_slots = [j for j, s in enumerate(structure) if s[2] is None]
    nest._classes, nest._all_classes, nest._moving, nest._above, nest._geo = {}, None, {}, {}, {}
    return int(tile_transfer_rows(nest, dims, level)[0])


# ---------------------------------------------------------------- double buffering

def overlapping(nest: NestRows, keep, c: int) -> np.ndarray:
    """Rows in which level c's transfers overlap the compute that reads it: a double buffer, a
    register written at the clock edge, a level double-buffered when two of the mapping's tiles
    fit (in its capacity, or in each class's partition) or, refilled while read
    (``refill_while_read``), whose tiles are each read through once (``_read_once``), or a level that streams its tiles
    (``stream_single_tile``) and keeps one tile of every operand for the whole run: it never
    changes tiles, so it needs no second buffer to stream them. Cached on the nest (read-only)."""
    key = ("overlapping", c)
    out = nest._memo.get(key)
    if out is None:
        out = nest._memo[key] = _overlapping(nest, keep, c)
        out.flags.writeable = False
    return out


def _overlapping(nest: NestRows, keep, c: int) -> np.ndarray:
    lv = nest.arch.levels[c]
    if lv.refills_during_compute:
        return np.ones(nest.n, dtype=bool)
    if lv.stream_single_tile and ("one tile", c) not in nest._fits:
        one = np.ones(nest.n, dtype=bool)
        for X in nest.op.operands:
            if X.name in keep[c]:
                one &= tile_transfer_rows(nest, X.dims, c) == 1
        nest._fits[("one tile", c)] = one
    one_tile = nest._fits.get(("one tile", c), np.zeros(nest.n, dtype=bool))
    if not lv.double_buffered_when_fits:
        return one_tile.copy()
    if c not in nest._fits:
        use: dict[str | None, np.ndarray] = {}
        for X in nest.op.operands:
            if X.name in keep[c]:
                part = X.cls if lv.partitioned else None
                use[part] = use.get(part, 0) + nest.sizes(X, c)[1] * X.bits
        fits = np.ones(nest.n, dtype=bool)
        for part, bits in use.items():
            cap = lv.capacity_bits if part is None else lv.capacity_for(part)
            if cap is not None:
                fits &= 2 * bits <= cap
        if lv.refill_while_read:
            fits |= _read_once(nest, keep, c)
        nest._fits[c] = fits
    return nest._fits[c] | one_tile


def _read_once(nest: NestRows, keep, c: int) -> np.ndarray:
    """Rows where each operand's tile at level c is read through once: the outermost loop of bound
    above 1 among the loops that drive its reads (those at c and below, down to the next level of the
    operand's chain, or to the compute) moves it. A level that refills while read
    (``refill_while_read``) then overlaps its refill with that pass; a loop over other dims on top
    (ZigZag's top irrelevant loops) reads the whole tile again, and the refill waits for the last
    pass (ZigZag narrows its window to that pass; here the level stalls). Rows without such a loop
    read the tile in one step."""
    ok = np.ones(nest.n, dtype=bool)
    for X in nest.op.operands:
        if X.name not in keep[c]:
            continue
        child = next((i for i in range(c + 1, nest.nlev) if X.name in keep[i]), nest.nlev)
        seen = np.zeros(nest.n, dtype=bool)
        for j in nest.temporal_slots:
            d, lv, _ = nest.structure[j]
            if c <= lv < child:
                first = ~seen & (nest.B[:, j] > 1)
                if d not in X.dims:
                    ok &= ~first
                seen |= first
    return ok


def double_buffers(op: Operator, arch: Accelerator, m: Mapping) -> tuple[bool, ...]:
    """Per level, does it overlap its transfers with compute under mapping ``m`` (``overlapping``)?"""
    nest = NestRows.of_mapping(op, arch, m)
    return tuple(bool(overlapping(nest, m.keep, c)[0]) for c in range(len(arch.levels)))


def shared_port_crossings(op: Operator, arch: Accelerator, m: Mapping) -> frozenset[str]:
    """What mapping ``m`` moves through a level's one port (``Level.shared_port``) into or out of a level that
    overlaps its transfers with compute (``double_buffers``): "input" (an input operand), "output". Where both, the
    model's windows count the loads but not that level's drains against each other on the port, and the latency
    can be below the simulator's (docs/cost-model.md, "One port above double buffers")."""
    if not any(lv.shared_port for lv in arch.levels):
        return frozenset()
    db = double_buffers(op, arch, m)
    out = set()
    for X in op.operands:
        chain = [i for i in range(len(arch.levels)) if X.name in m.keep[i]]
        for p, c in zip(chain, chain[1:], strict=False):
            if arch.levels[p].shared_port and db[c]:
                out.add("output" if X.is_output else "input")
    return frozenset(out)


def streamed_tile(nest: NestRows, keep, X, c: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows in which input X's only tile at level c streams in during compute (``stream_single_tile``),
    and per row the first piece's share of it and the number of pieces. The pieces follow the
    *driver*, the first level below c in X's chain whose tile moves: one piece per tile the driver
    receives, each the driver's load of that tile's share of the whole (the first instance's deltas,
    as the simulator's), and the driver's tile waits only for its piece. A level in between streams
    too, or c does not. Only a level that overlaps its transfers with compute streams: a
    single-buffered one keeps the loaded-whole rule. Cached on the nest."""
    key = ("streamed", X.name, c)
    cached = nest._loads.get(key)
    if cached is not None:
        return cached[0], cached[1], cached[2]
    n = nest.n
    off = (np.zeros(n, dtype=bool), np.ones(n), np.ones(n))
    chain = [i for i in range(nest.nlev) if X.name in keep[i]]
    lv = nest.arch.levels[c]
    if X.is_output or not lv.stream_single_tile or c not in chain[1:-1]:
        nest._loads[key] = off
        return off
    d = chain[chain.index(c) + 1]
    on = overlapping(nest, keep, c) & (tile_transfer_rows(nest, X.dims, c) == 1)
    moves = tile_transfer_rows(nest, X.dims, d)
    full, _, counted = nest.deltas(X, d)
    below_on, below_share, below_pieces = streamed_tile(nest, keep, X, d)
    drives = (moves > 1) & (counted > 0)
    share = np.where(below_on, below_share, full / np.where(drives, counted, 1))
    pieces = np.where(below_on, below_pieces, moves)
    out = (on & (below_on | drives), np.where(on, share, 1.0), np.where(on, pieces, 1))
    nest._loads[key] = out
    return out


def streamed_drain(nest: NestRows, keep, c: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Rows in which the output's only tile at level c drains to its parent during compute
    (``stream_single_tile``); per row the number of equal pieces it drains in, one after each drain
    of the driver (the first level below c in the output's chain whose tile moves) that leaves
    finished outputs (every loop above the driver that does not index the output at its last
    position), i.e. one per position of the loops above the driver over the output's dims; the
    share of the run computed when the first finished drain leaves; and the share before the step
    that finishes it. As for inputs, a level in
    between streams too, and only a level that overlaps its transfers with compute streams. Cached
    on the nest."""
    X = nest.op.output
    key = ("streamed drain", c)
    cached = nest._loads.get(key)
    if cached is not None:
        return cached[0], cached[1], cached[2], cached[3]
    n = nest.n
    chain = [i for i in range(nest.nlev) if X.name in keep[i]]
    if not nest.arch.levels[c].stream_single_tile or c not in chain[1:-1]:
        out = (np.zeros(n, dtype=bool), np.ones(n), np.ones(n), np.zeros(n))
        nest._loads[key] = out
        return out
    d = chain[chain.index(c) + 1]
    on = overlapping(nest, keep, c) & (tile_transfer_rows(nest, X.dims, c) == 1)
    below_on, below_pieces, below_lead, below_start = streamed_drain(nest, keep, d)
    above = nest.above(d)
    finished, tiles, first = np.ones(n), np.ones(n), np.zeros(n)
    for j in reversed(above):            # innermost first: the position of the first finished tile
        b = nest.B[:, j]
        if nest.structure[j][0] in X.dims:
            finished = finished * b
        else:
            first = first + (b - 1) * tiles
        tiles = tiles * b
    pieces = np.where(below_on, below_pieces, finished)
    lead = np.where(below_on, below_lead, (first + 1) / tiles)
    start = np.where(below_on, below_start, first / tiles)
    out = (on & (below_on | (finished > 1)), np.where(on, pieces, 1.0), np.where(on, lead, 1.0),
           np.where(on, start, 0.0))
    nest._loads[key] = out
    return out


def _drain_run(nest: NestRows, keep, c: int) -> tuple[np.ndarray, np.ndarray]:
    """For a streamed drain at level c (``streamed_drain``): per row, how many of its pieces leave
    one after another at the end of the run, one per tile of the driver (the innermost loops above
    the driver over the output's dims, up to the first other loop of bound above 1: a kernel row or
    column, say, leaves outputs finished only at its last position), and the driver's tiles in the run."""
    X = nest.op.output
    chain = [i for i in range(nest.nlev) if X.name in keep[i]]
    d = chain[chain.index(c) + 1]
    below_on = streamed_drain(nest, keep, d)[0]
    below_run, below_tiles = _drain_run(nest, keep, d) if below_on.any() else (np.ones(nest.n), np.ones(nest.n))
    run, tiles, open_ = np.ones(nest.n), np.ones(nest.n), np.ones(nest.n, dtype=bool)
    for j in reversed(nest.above(d)):    # innermost first
        b = nest.B[:, j]
        if nest.structure[j][0] in X.dims:
            run = np.where(open_, run * b, run)
        else:
            open_ &= b == 1
        tiles = tiles * b
    return np.where(below_on, below_run, run), np.where(below_on, below_tiles, tiles)


def _period_share(nest: NestRows, keep, X, c: int) -> np.ndarray:
    """The share of the run one of X's tiles at level c stays (its period over the run's tiles), per
    row; for a streamed tile its driver's; infinite where the tile never changes. Cached on the nest (read-only)."""
    key = ("period share", X.name, c)
    cached = nest._memo.get(key)
    if cached is not None:
        return cached
    n = nest.n
    share = np.full(n, np.inf)
    if nest.above(c):
        tiles_c = nest.steps(c)
        share = np.where(tiles_c > 1, _period(nest, X.dims, c) / tiles_c, np.inf)
    streams = streamed_tile(nest, keep, X, c)[0]
    if streams.any():
        chain = [i for i in range(nest.nlev) if X.name in keep[i]]
        d, per_d, pending = chain[chain.index(c) + 1], np.full(n, np.inf), streams.copy()
        while pending.any():
            tiles_d = nest.steps(d)
            here = pending & ~streamed_tile(nest, keep, X, d)[0] & (tiles_d > 1)
            per_d = np.where(here, _period(nest, X.dims, d) / tiles_d, per_d)
            pending &= streamed_tile(nest, keep, X, d)[0]
            d = chain[chain.index(d) + 1] if pending.any() else d
        share = np.where(streams, per_d, share)
    share.flags.writeable = False
    nest._memo[key] = share
    return share


def _edge_states(nest: NestRows, levels: tuple[int, ...]) -> tuple:
    """Transitions split by the edge tiles of imperfect factors, jointly for ``levels`` (which move
    together in a single-buffered transition), over the transition classes of the deepest of them
    (the slots above a level are a prefix of the slots above any deeper one). Returns (per edge dim:
    (dim, per level its edge extent where that level has the edge, else -1)), and the cases: (weight
    per class and row, dim -> (old tile at its edge, new tile at its edge), masks per class and row).

    Per transition class j and per edge dim (``NestRows.edges``) with its loop g: g sits at its last
    position (the edge tile) in 1/bound of the transitions of loops outside it, lands there in
    1/(bound-1) of its own, and leaves it for its first position (full) whenever a loop inside it
    advances. Loops' positions are independent, so the edge dims' cases multiply. Perfect rows: one
    case of weight 1."""
    key = ("edge states", levels)
    cached = nest._geo.get(key)       # the loops alone decide them
    if cached is not None:
        return cached
    cnt, _ = nest.classes(max(levels))
    K = cnt.shape[0]
    kk = np.arange(K)[:, None]
    found: dict[str, list] = {}       # dim -> [slot of g, g's bound, {level: edge extent or -1}]
    for c in levels:
        for d, k, b, e in nest.edges(c):
            slot, bound, ext = found.setdefault(d, [np.full(nest.n, -1), b, {}])
            found[d][0] = np.maximum(slot, k)          # the same loop g, a prefix slot, wherever present
            ext[c] = np.where(k >= 0, e, -1)
    dims = tuple((d, ext) for d, (_, _, ext) in found.items())
    cases: list[tuple[np.ndarray, dict[str, tuple]]] = [(np.ones(cnt.shape), {})]
    for d, (k, b, _) in found.items():
        outside = (k[None] >= 0) & (k[None] < kk)
        at = (k[None] >= 0) & (k[None] == kk)
        # a loop outside g advances only when g is at its last position: g leaves its edge tile
        leaving = (k[None] >= 0) & (k[None] > kk)
        p = (np.where(outside, 1.0 / b, 0.0) + np.where(at, 1.0 / np.maximum(b - 1, 1), 0.0)
             + np.where(leaving, 1.0, 0.0))
        state = (np.broadcast_to(outside | leaving, cnt.shape), np.broadcast_to(~leaving, cnt.shape))
        split = []
        for w, over in cases:
            split.append((w * p, {**over, d: state}))
            split.append((w * (1.0 - p), over))
        cases = [(w, over) for w, over in split if (w > 0).any()]
    out = (dims, tuple(cases))
    nest._geo[key] = out
    return out


def _case_extents(nest: NestRows, c: int, dims: tuple, over: dict[str, tuple]) -> dict[str, tuple]:
    """One edge case's (old, new) extents of level c's tile (classes above c x rows), for the dims
    where c's tile has an edge (``_edge_states``); the other dims keep the full extent."""
    K = len(nest.above(c))
    ext = nest.inner[c]
    out = {}
    for d, e_at in dims:
        e = e_at.get(c)
        if d not in over or e is None or not (e >= 0).any():
            continue
        has = e[None] >= 0
        old, new = over[d]
        out[d] = (np.where(old[:K] & has, e[None], ext[d][None]), np.where(new[:K] & has, e[None], ext[d][None]))
    return out


def _edge_cases(nest: NestRows, c: int) -> list[tuple[np.ndarray, dict[str, tuple]]]:
    """Transitions of level c's tiles split by edge tiles (``_edge_states`` for c alone): (weight per
    class and row, dim -> (old, new) extents where they differ from the full tile)."""
    dims, cases = _edge_states(nest, (c,))
    return [(w, _case_extents(nest, c, dims, over)) for w, over in cases]


def _case_extents_full(nest: NestRows, c: int, w: np.ndarray, over: dict[str, tuple]) -> tuple[dict, dict]:
    """Old and new extents of level c's tile per dim for one edge case, as (classes x rows) arrays."""
    ext = nest.inner[c]
    eo = {d: over[d][0] if d in over else np.broadcast_to(ext[d][None], w.shape) for d in ext}
    en = {d: over[d][1] if d in over else np.broadcast_to(ext[d][None], w.shape) for d in ext}
    return eo, en


def _points(X, e: dict[str, np.ndarray]) -> np.ndarray:
    """Points of X touched by tiles of extents ``e`` ((classes x rows) arrays), zero where one is empty."""
    shape = next(iter(e.values())).shape
    flat = {d: np.maximum(v, 1).reshape(-1) for d, v in e.items()}
    size = axis_sizes(X, flat)[1].reshape(shape)
    empty = np.zeros(shape, dtype=bool)
    for v in e.values():
        empty |= v <= 0
    return np.where(empty, 0, size)


def _case_deltas(nest: NestRows, X, c: int, w: np.ndarray, over: dict[str, tuple]) -> np.ndarray:
    """Elements of X entering level c at the transitions of one edge case (classes x rows), from
    the first instance's tiles: the new tile less its overlap with the old one; entries of zero
    weight are left at zero. A single-term axis overlaps in closed form; a sliding-window axis is
    counted exactly, entry by entry (edge cases occur only in imperfect rows)."""
    if not over:
        return nest.deltas(X, c)[1]
    _, shifts = nest.classes(c)
    eo, en = _case_extents_full(nest, c, w, over)
    zero = np.zeros(w.shape, dtype=np.int64)
    sh = {d: shifts[d] if d in shifts else zero for d in eo}
    on = w > 0
    ov = np.ones(w.shape, dtype=np.int64)
    for coeffs, ds in operand_axes(X):
        if len(ds) == 1:
            d = ds[0]
            ov = ov * np.maximum(0, np.minimum(eo[d], sh[d] + en[d]) - np.maximum(0, sh[d]))
            continue
        # entry by entry, but each distinct (old extents, new extents, shifts) once: the classes and
        # rows of one structure repeat a few shapes
        o = np.zeros(w.shape, dtype=np.int64)
        keys = np.stack([np.broadcast_to(a[d], w.shape)[on] for a in (eo, en, sh) for d in ds], axis=1)
        uniq, inv = np.unique(keys, axis=0, return_inverse=True)
        nd = len(ds)
        vals = np.array([axis_overlap(coeffs, tuple(u[:nd]), tuple(u[nd:2 * nd]), tuple(u[2 * nd:]))
                         for u in uniq.tolist()], dtype=np.int64)
        o[on] = vals[inv.reshape(-1)] if len(vals) else 0
        ov = ov * o
    new = _points(X, en)
    return np.where(on & (new > 0), np.maximum(0, new - ov), 0)


def _case_old_sizes(nest: NestRows, X, c: int, w: np.ndarray, over: dict[str, tuple]) -> np.ndarray:
    """Elements of X's tile at level c before the transitions of one edge case (classes x rows; the
    first instance's, the old extents of ``over``): what an output tile drains as it leaves."""
    eo, _ = _case_extents_full(nest, c, w, over)
    return np.where(w > 0, _points(X, eo), 0)


def _last_tile(nest: NestRows, X, c: int) -> np.ndarray:
    """Elements of X's last tile at level c per row (the first instance's, every loop above c at
    its last position): smaller than the first where an imperfect factor leaves an edge tile last.
    Rows whose last position holds no data (the program skips it) keep the first tile."""
    ext = {}
    empty = np.zeros(nest.n, dtype=bool)
    for d, e in nest.inner[c].items():
        base = np.zeros(nest.n, dtype=np.int64)
        for j in nest.above(c):
            if nest.structure[j][0] == d:
                base = base + (nest.B[:, j] - 1) * nest.stride[:, j]
        ext[d] = np.minimum(e, nest.op.sizes[d] - base)
        empty |= ext[d] <= 0
    first = nest.sizes(X, c)[1]
    if empty.all():
        return first
    last = axis_sizes(X, {d: np.maximum(e, 1) for d, e in ext.items()})[1]
    return np.where(empty, first, last)


def _period(nest: NestRows, dims: frozenset[str], c: int) -> np.ndarray:
    """Steps (iterations of the loops above c) a tile over ``dims`` stays at level c: the product of
    the innermost loops above c that do not move it. Cached on the nest (read-only)."""
    key = ("period", dims, c)
    out = nest._geo.get(key)
    if out is None:
        out = np.prod(np.where(_moving_loops(nest, dims, c), 1, nest.B[:, nest.above(c)]), axis=1)
        out.flags.writeable = False
        nest._geo[key] = out
    return out


def _stream_loads(nest: NestRows, keep, counts, c: int, X) -> tuple | None:
    """The loads of operand X into level c per transition class: (rows where X loads into c,
    moving loops (rows x slots above c), X's period at c in steps, per edge case its load time
    (classes x rows)), or None where X does not load into c. Cached on the nest.

    A stream's tile stays while the innermost loops above c that do not move it run (its period,
    in steps). The load when loop j advances is the first instance's exact tile delta (inner loops
    reset), with edge tiles of imperfect factors apart (``_edge_cases``); its share of the level's
    total fills scales it to the counted traffic. Its time is the DMA setup and the slower of the
    child's write port and the parent's read port."""
    key = (c, X.name)
    if key in nest._loads:
        return nest._loads[key]
    chain = [i for i in range(nest.nlev) if X.name in keep[i]]
    if c not in chain[1:] or not nest.above(c):
        nest._loads[key] = None
        return None
    levels = nest.arch.levels
    lv = levels[c]
    p = chain[chain.index(c) - 1]
    cnt, _ = nest.classes(c)
    cases = _edge_cases(nest, c)
    fills, reads_p = counts[(c, X.name)][0], counts[(p, X.name)][1]
    full = nest.deltas(X, c)[0]
    moves = _moving_loops(nest, X.dims, c)          # rows x slots above c
    dls = [_case_deltas(nest, X, c, w, over) for w, over in cases]
    counted = full + sum((cnt * w * dl).sum(axis=0) for (w, _), dl in zip(cases, dls, strict=True))
    valid = (counted != 0) & (fills != 0)
    period = _period(nest, X.dims, c)
    safe = np.where(valid, counted, 1)
    per_c = fills * X.bits / nest.used(c) / safe
    per_p = reads_p * X.bits / nest.used(p) / safe
    times = []
    for (w, over), dl in zip(cases, dls, strict=True):
        # the load pays the rows of the tile it brings: an edge case's extents, else the full tile's
        setup = load_setup_cycles(nest, X, c, p, {d: new for d, (_, new) in over.items()})
        t = (np.where(dl != 0, setup, 0.0) +
             np.maximum(cycles(dl * per_c, lv.write_bw_bits), cycles(dl * per_p, levels[p].read_bw_bits)))
        times.append((w, np.where(valid, t, 0.0)))
    nest._loads[key] = (valid, moves, period, times)
    return nest._loads[key]


def _burst(nest: NestRows, keep, counts, c: int, busy: np.ndarray, held: dict, drain_paces=()) -> np.ndarray:
    """A double buffer hides a load only behind the compute of the stream's previous tile:
    transitions of each loop above ``c`` cost max(compute of a window, that loop's loads), not the
    average of all loads. The level's loads run in one in-order queue, so no load runs further
    ahead than the stream that changes most often allows: the window is the shortest period of the
    streams that load into c (``_stream_loads``). Returning partial sums (outputs with fills) load
    into the same halves and count too.

    A load shares its parent's read port with the loads of other levels that the window's steps
    need (``held``: port -> (level, operand) -> cycles those loads hold it over the run): a window's
    loads take at least their own time plus the window's share of the others' that recur within
    it (a period no longer than the window; rarer loads are prefetched over their own windows).
    ``drain_paces``: (bound, output tiles) of double-buffered output levels whose drains, where they
    recur within every window, set the windows' pace when slower than compute."""
    n = nest.n
    above = nest.above(c)
    if not above:
        return np.zeros(n)
    cnt, _ = nest.classes(c)
    key = ("burst", c)
    cached = nest._loads.get(key)
    if cached is None:
        cached = nest._loads[key] = _burst_loads(nest, keep, counts, c, held)
    steps, cases, total_load, any_load, window, moved, early = cached
    # Drains that recur within every window (an output tile per window or more) pace its steps too,
    # from the second window on: a tile drains while the next one computes.
    first = busy / steps * window
    for bound, tiles in drain_paces:
        busy = np.maximum(busy, np.where(tiles * window >= steps, bound, 0.0))
    # Classes inside the shortest period move no loading stream: their steps are in the windows.
    span = busy / steps * window
    # A load starts when the compute of the tile two back ends: at the drains' pace that is the
    # window's compute plus its wait for the drains before it, so a load longer than that delays
    # the next window by the rest. The first transition's load waits for no release and no drain:
    # of T transitions, T - 1 are paced.
    moves = (cnt * moved).sum(axis=0)
    paced = np.where(moves > 0, (moves - 1) / np.maximum(moves, 1), 0.0)
    # A rarer stream queued before every stream that loads each window starts one window early: its
    # tile two back was released long ago, so it follows the previous window's loads (those
    # streams' F, with the port's share of the others), and the window's own loads follow it
    # after their release: the window takes max(F + the later loads, 2F + the loads - the window).
    total_load = [np.where(pre > 0, np.minimum(tl, np.maximum(tl - pre, tl + f - first)), tl)
                  for tl, (f, pre) in zip(total_load, early, strict=True)]
    out = first + sum((cnt * w * np.where(moved, np.maximum(first, tl) + paced * (
        np.maximum(span, tl - (span - first)) - np.maximum(first, tl)), 0.0)).sum(axis=0)
                      for (w, _), tl in zip(cases, total_load, strict=True))
    return np.where((steps > 1) & any_load, out, 0.0)


def _burst_loads(nest: NestRows, keep, counts, c: int, held: dict) -> tuple:
    """What ``_burst`` needs of level c's loads whatever the pace of compute (computed once per
    nest and level): steps, edge cases, per case the window's loads (classes x rows, with the
    shared port's), rows that load, the window in steps, classes that move a loading stream."""
    n = nest.n
    steps = nest.steps(c)
    cnt, _ = nest.classes(c)
    cases = _edge_cases(nest, c)
    total_load = [np.zeros(cnt.shape) for _ in cases]
    any_load = np.zeros(n, dtype=bool)
    window = steps.copy()               # per row: the shortest period of a stream that loads
    moved = np.zeros(cnt.shape, dtype=bool)   # classes at which some loading stream changes tile
    ports: set[str] = set()             # the parents' read ports the loads into c use
    streams = []
    # the level's load queue: inputs in operand order, then returning partial sums (as the simulator)
    for X in sorted(nest.op.operands, key=lambda X: X.is_output):
        loads = _stream_loads(nest, keep, counts, c, X)
        if loads is None:
            continue
        valid, moves, period, times = loads
        streams.append((valid, period, times))
        any_load |= valid
        window = np.where(valid, np.minimum(window, period), window)
        moved |= moves.T & valid[None]
        for tl, (_, t) in zip(total_load, times, strict=True):
            tl += t
        chain = [i for i in range(nest.nlev) if X.name in keep[i]]
        ports.add(nest.arch.levels[chain[chain.index(c) - 1]].port("read"))
    # per case: the loads of the streams that change every window (F) and of the rarer ones queued
    # before all of those (periods are products of suffixes of the loops above c, so a rarer
    # stream's period is at least two windows)
    every = [np.zeros(cnt.shape) for _ in cases]
    pre = [np.zeros(cnt.shape) for _ in cases]
    before = np.ones(n, dtype=bool)     # no stream of every window queued yet
    for valid, period, times in streams:
        frequent = valid & (period == window)
        rare = valid & (period > window) & before
        for f, r, (_, t) in zip(every, pre, times, strict=True):
            f += np.where(frequent, t, 0.0)
            r += np.where(rare, t, 0.0)
        before &= ~frequent
    shared = np.zeros(n)                # other levels' loads on those ports that recur within a window
    for port in ports:
        for (lvl, name), t in held.get(port, {}).items():
            if lvl != c:
                other = _stream_loads(nest, keep, counts, lvl, nest.op.operand(name))
                if other is not None:   # periods compared as shares of the run
                    o_steps = nest.steps(lvl)
                    shared = shared + np.where(other[2] * steps <= window * o_steps, t, 0.0)
    total_load = [tl + np.where(tl > 0, shared / steps * window, 0.0) for tl in total_load]
    early = [(f + np.where(f > 0, shared / steps * window, 0.0), r) for f, r in zip(every, pre, strict=True)]
    return steps, cases, total_load, any_load, window, moved, early


def _chained(nest: NestRows, keep, counts, busy: np.ndarray, below: int = 0) -> np.ndarray:
    """Refills chained through levels that all overlap compute. When a stream's tile at level c
    changes, the levels below c in the operand's chain change tiles too, and each of their loads
    waits for its parent's: the compute of the new tile waits for the chain's loads one after
    another. A level's load may start only when the compute of the tile two back has released its
    half, so the compute of the previous tile (a period of w steps) and the chain's loads, then the
    new tile's step, run in sequence: every transition of c takes the w + 1 steps ending with it at
    least one step plus max(w steps, the chain's loads). Alternate transitions' spans are
    disjoint, so the run takes at least the compute plus the excess of every second transition
    after the first, whose load needs no released half: ceil((T - 2) / 2) of T - 1 transitions,
    each with the mean excess (1.5 steps per step for two one-step loads into a register fed by a
    double buffer, every step).

    The chain's load at a class is the sum, over c and each level below it in the operand's chain
    while they overlap, of the edge-case weighted mean of its load (``_stream_loads``). ``below``:
    only chains whose top level c is deeper than it (the pace of that level's windows: the excess
    of its own transitions is its burst, not a pace)."""
    out = np.zeros(nest.n)
    for c, total, linked, cnt, steps_c, period, moves in _chains(nest, keep, counts):
        if c <= below:
            continue
        span = busy / steps_c * period
        mean_excess = (cnt * np.maximum(total - span, 0.0)).sum(axis=0) / np.maximum(moves, 1)
        extra = mean_excess * (moves // 2)
        out = np.maximum(out, np.where(linked, busy + extra, 0.0))
    return out


def _chains(nest: NestRows, keep, counts) -> list[tuple]:
    """What ``_chained`` needs of the chains whatever the pace of compute (computed once per nest): per chain
    with a link, its top level c, the chain's load per class (classes x rows), the rows where it binds, c's
    transitions per class, c's steps, c's period and its transitions."""
    key = ("chains",)
    cached = nest._memo.get(key)
    if cached is not None:
        return cached
    n = nest.n
    found = []
    steps = nest.temporal        # every temporal loop's iterations
    for X in nest.op.operands:
        chain = [i for i in range(nest.nlev) if X.name in keep[i]]
        mean: dict[int, np.ndarray] = {}
        on: dict[int, np.ndarray] = {}
        period: dict[int, np.ndarray] = {}
        for c in chain[1:]:
            loads = _stream_loads(nest, keep, counts, c, X)
            if loads is None:
                continue
            mean[c] = sum((w * t for w, t in loads[3]), np.zeros(1))
            on[c] = loads[0] & overlapping(nest, keep, c)
            period[c] = loads[2]
        for i, c in enumerate(chain[1:-1], start=1):
            if c not in mean or chain[i + 1] not in mean:
                continue
            K = mean[c].shape[0]
            total = mean[c].copy()
            live = on[c].copy()
            links = np.zeros(n, dtype=bool)
            for d in chain[i + 1:]:
                if d not in mean:
                    break
                live &= on[d]
                links |= live
                total = total + np.where(live[None], mean[d][:K], 0.0)
            if not links.any():
                continue
            cnt, _ = nest.classes(c)
            # the first transition's load needs no released half: of the others, every second one
            # (rounded up) has a span of its own; each carries the mean excess (``_chained``)
            found.append((c, total, links & (steps > 1), cnt, nest.steps(c), period[c], cnt.sum(axis=0)))
    nest._memo[key] = found
    return found


def _position_sums(size, stride, ext, bound):
    """Of the tile sizes ``min(ext, size - k*stride)`` for k < bound that are positive: how many, the
    sum at even k, and the sum of all (scalars or arrays). Closed form: the first ``full``
    positions hold ``ext``, the rest up to ``n`` an arithmetic series."""
    n = np.minimum(bound, -(-size // stride))                 # size - k*stride > 0  <=>  k < ceil(size/stride)
    full = np.where(size >= ext, np.minimum(n, (size - ext) // stride + 1), 0)

    def series(lo, parity):                                   # sum of size - k*stride, lo <= k < n
        k0 = lo + (0 if parity is None else (lo % 2 != parity))
        step = 1 if parity is None else 2
        cnt = np.maximum(0, (n - k0 + step - 1) // step)
        return cnt * size - stride * (cnt * k0 + step * cnt * (cnt - 1) // 2)

    even_sum = ext * ((full + 1) // 2) + series(full, 0)
    total = ext * full + series(full, None)
    return n, even_sum, total


def _output_positions(nest: NestRows, c: int) -> tuple[np.ndarray, ...]:
    """The innermost temporal loop above c over an output dim (bound above 1) per row: (found,
    the dim's size, the loop's stride and bound, the tile's extent at c, the dim's index in the
    output's dims, its slot). Consecutive output tiles of c walk its positions. Cached on the nest's geometry."""
    key = ("output positions", c)
    cached = nest._geo.get(key)
    if cached is None:
        cached = nest._geo[key] = _find_output_positions(nest, c)
    return cached


def _find_output_positions(nest: NestRows, c: int) -> tuple[np.ndarray, ...]:
    op, n = nest.op, nest.n
    out_dims = list(op.output.dims)
    found = np.zeros(n, dtype=bool)
    size, stride, ext, bound = (np.ones(n, dtype=np.int64) for _ in range(4))
    dim = np.full(n, -1, dtype=np.int64)
    slot = np.full(n, -1, dtype=np.int64)
    for j in reversed(nest.above(c)):
        d = nest.structure[j][0]
        if d not in out_dims:
            continue
        hit = ~found & (nest.B[:, j] > 1)
        if n == 1:      # one mapping (the scalar model): plain assignments, no masked copies
            if hit[0]:
                size, stride = np.full(1, op.sizes[d]), nest.stride[:, j]
                ext, bound, dim = nest.inner[c][d], nest.B[:, j], np.full(1, out_dims.index(d))
                found, slot = hit, np.full(1, j)
                break
            continue
        size = np.where(hit, op.sizes[d], size)
        stride = np.where(hit, nest.stride[:, j], stride)
        ext = np.where(hit, nest.inner[c][d], ext)
        bound = np.where(hit, nest.B[:, j], bound)
        dim = np.where(hit, out_dims.index(d), dim)
        slot = np.where(hit, j, slot)
        found |= hit
    return found, size, stride, bound, ext, dim, slot


def _heavier_half(nest: NestRows, c: int, positions: tuple[np.ndarray, ...]) -> np.ndarray:
    """Share of level c's output traffic that falls on the busier of its two buffer halves.

    Consecutive output tiles alternate between the halves. The output tile moves with the
    innermost temporal loop above c over an output dim; when that loop's positions that hold
    data are even in number, every half keeps the same positions, and an edge tile (the last
    position of an imperfect factor, smaller) always lands in the same half. Otherwise the
    halves share the traffic equally. (The positions are taken at the first iteration of the
    outer loops.)"""
    found, size, stride, bound, ext, _, _ = positions
    cnt, even_sum, total = _position_sums(size, stride, ext, bound)
    even = even_sum / np.where(total > 0, total, 1)
    return np.where(found & (cnt % 2 == 0) & (total > 0), np.maximum(even, 1.0 - even), 0.5)


def _follows_walk(nest: NestRows, c: int, dims, walk_dim: list[str], slot: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Rows (of ``B``) where an operand over ``dims`` changes tile at every output tile of level c:
    it uses the walked dim (``walk_dim``, the loop at ``slot``), or a loop inside that one above c."""
    out = np.array([d in dims for d in walk_dim], dtype=bool)
    for j in nest.above(c):
        if nest.structure[j][0] in dims:
            out |= (slot < j) & (B[:, j] > 1)
    return out


def _restarts_with_walk(nest: NestRows, c: int, dims, slot: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Rows (of ``B``) where an operand over ``dims`` changes tile whenever the walk of level c's output
    tiles (the loop at ``slot``) starts over: the innermost loop above c outside the walked one (of
    bound above 1) moves it. Its loads then fall on the walk's first position, once per pass."""
    out = np.zeros(len(B), dtype=bool)
    seen = np.zeros(len(B), dtype=bool)
    for j in reversed(nest.above(c)):
        hit = ~seen & (slot > j) & (B[:, j] > 1)
        out |= hit & (nest.structure[j][0] in dims)
        seen |= hit
    return out


def _pass_loads(nest: NestRows, keep, counts, c: int, X, slot: np.ndarray, rows: np.ndarray,
                every: np.ndarray, equal: np.ndarray) -> tuple:
    """The loads of operand X into level c at the positions of the walk of c's output tiles (the loop at
    ``slot``, per row of ``rows``), where they are not all the same. A pass of the walk starts when a loop outside
    it advances: the innermost one (bound b above 1) b - 1 times in b, the loops outside that one once, and each
    brings its own tile (a sliding window's new rows, or a whole tile); the walk's own positions bring the walked
    loop's. X changes tile at every position (``every``, where the walked loop is the innermost loop above c)
    or only where a pass starts; where it changes at every position and the walk's tiles are not all equal
    (``equal``), the walk keeps its loads in proportion to the tiles and nothing here applies. Per row: the passes to walk (b where the passes' first loads differ, else 1; 1
    also past MAX_VARIED_PASSES), and relative to the mean load per position of those passes: the first pass's
    load at the first position, the other passes' there, and the load at every other position (from the
    per-class loads of ``_stream_loads``, edge cases weighted). Rows where nothing differs get 1, 1, 1."""
    m = len(rows)
    ones = np.ones(m)
    b = np.ones(m, dtype=np.int64)
    loads = _stream_loads(nest, keep, counts, c, X)
    above = nest.above(c)
    if loads is None or not above:
        return b, ones, ones, ones
    valid, _, _, times = loads
    cnt, _ = nest.classes(c)
    t = sum((w * tt for w, tt in times), np.zeros(cnt.shape))[:, rows]     # a transition's mean load per class
    cnt = cnt[:, rows]
    B = nest.B[rows]
    at = np.arange(m)
    k1 = np.full(m, -1)         # the innermost loop outside the walk (bound above 1)
    k_walk = np.full(m, -1)
    inside = np.zeros(m, dtype=bool)     # a loop of bound above 1 inside the walk, above c
    for k, j in enumerate(above):        # outermost first
        k1 = np.where((j < slot) & (B[:, j] > 1), k, k1)
        k_walk = np.where(j == slot, k, k_walk)
        inside |= (j > slot) & (B[:, j] > 1)
    per_pass = np.where(k_walk >= 0, B[at, np.array(above)[np.maximum(k_walk, 0)]], 1)
    bound = B[at, np.array(above)[np.maximum(k1, 0)]]
    first_in = np.where(k1 >= 0, t[np.maximum(k1, 0), at], 0.0)
    outside = np.arange(cnt.shape[0])[:, None] < k1[None]
    n_out = (cnt * outside).sum(axis=0)
    first_out = (cnt * t * outside).sum(axis=0) / np.maximum(n_out, 1)
    # X at every position: the walked loop's load at the others (the walk innermost, so a position is a step)
    tracks = every & ~inside & (k_walk >= 0)
    other = np.where(tracks, t[np.maximum(k_walk, 0), at], 0.0)
    passes = (k1 >= 0) & (n_out > 0) & (bound <= MAX_VARIED_PASSES) & \
        (np.abs(first_out - first_in) > 1e-9 * np.maximum(first_out, first_in))
    n_pass = np.where(passes, bound, 1)
    # one pass only: its first load is the mean of the loops outside the walk
    first_mean = np.where(k1 >= 0, (first_out * n_out + first_in * cnt[np.maximum(k1, 0), at]) /
                          np.maximum(n_out + cnt[np.maximum(k1, 0), at], 1), first_out)
    r_first = np.where(passes, first_out, first_mean)
    r_rest = np.where(passes, first_in, first_mean)
    mean = (r_first + (n_pass - 1) * r_rest) / n_pass
    mean = np.where(tracks, (mean + (per_pass - 1) * other) / per_pass, mean)
    # no loop outside the walk: one pass, whose first load is the prologue's (the walk's mean stands)
    starts = n_out + np.where(k1 >= 0, cnt[np.maximum(k1, 0), at], 0) > 0
    differ = valid[rows] & (mean > 0) & starts & (equal | ~every) & (passes | (tracks & (np.abs(first_mean - other) >
                                                             1e-9 * np.maximum(first_mean, other))))
    safe = np.where(differ, mean, 1.0)
    return (np.where(differ, n_pass, 1), np.where(differ, r_first / safe, 1.0), np.where(differ, r_rest / safe, 1.0),
            np.where(differ & tracks, other / safe, 1.0))


def _settle(one_run, state: tuple, periods: int) -> tuple:
    """Run ``one_run`` (the halves' recurrence over one sequence of tiles) ``periods`` times: the last
    drain's end after the first run, at the start of the second-to-last, and at the end (the regime's
    growth over the last two runs)."""
    first = mark = state[2]
    for rep in range(periods):
        if rep == 1:
            first = state[2]
        if rep == periods - 2:
            mark = state[2]
        state = one_run(state)
    return first, mark, state[2]


def _halves_step(state: tuple, a_first, a_every, pen_c, load, pen_r, compute, store, mx) -> tuple:
    """One output tile of the halves' recurrence: end times (last load, compute, drain, previous
    compute, previous drain) after the tile. The load unit takes the other operands' loads (those
    at the first position at once; those changing with every tile after the compute two tiles
    back, ``pen_c`` 0, else -inf: no such load) and then the reload (after the drain two tiles back,
    ``pen_r`` 0, else -inf: no reloads, the unit is free once its loads are done); the compute waits
    for them, the previous compute and its half's drain; the drain for the compute and the previous
    drain. ``mx``: ``max`` on floats, ``np.maximum`` on rows."""
    l, cm, s, c_prev, s_prev = state
    nl = mx(mx(l + a_first, c_prev + pen_c) + a_every, s_prev + pen_r) + load
    nc = mx(mx(cm, nl), s_prev) + compute
    return nl, nc, mx(s, nc) + store, cm, s


# an unequal-tile chain is followed over at most this many positions of the output loop
MAX_CHAIN_POSITIONS = 64
# ... and runs of edge tiles of the outer output loops in order over at most this many passes of it
MAX_WALK_PASSES = 64
# ... and passes of the loop outside it with unequal first loads one by one up to this bound of that loop (beyond,
# their mean): two, a loop of two virtual threads; the walk's time grows with the passes (the exact search on
# vta_like ResNet-18 layer3.0.conv2: the model's calls 0.45 CPU s on main, 0.72 at 2, 1.4 at 4 and at 8)
MAX_VARIED_PASSES = 2


def _unequal_halves(nest: NestRows, keep, counts, c: int, positions: tuple[np.ndarray, ...], load, store,
                    inputs: list, compute: np.ndarray, tiles: np.ndarray) -> np.ndarray:
    """The output halves' steady state where the innermost output loop above c leaves an edge tile:
    tiles of unequal size do not pair up into the two-half cycle. Tile k's reload waits for the
    drain of tile k-2 and for the load unit, its compute for its reload and the previous compute,
    its drain for its compute and the previous drain (one store unit, in order): with a small
    tile after two large ones, a large drain, the next large drain and the reload after them
    chain across three tiles. The recurrence of those four end times is max-plus linear; run
    over the positions of the output loop (each tile's reload and drain its share of the run's by
    size, plus the DMA setup; its compute the run's mean per output tile) it settles into a
    periodic regime whose growth per tile, times the output tiles, bounds the run. ``load`` and
    ``store``: (cycles over the run, setup per tile) of c's partial-sum reloads and drains; ``inputs``:
    (operand, (cycles, setup per tile)) of the other operands' loads into c.

    An operand whose tile changes when the walk starts over loads at its first position, and its load
    need not be the same at every pass (a sliding window's new rows after a whole tile): the passes of
    the innermost loop outside the walk are then walked one by one (``_pass_loads``)."""
    n = nest.n
    found, size, stride, bound, ext, dim, slot = positions
    # equal tiles pair up into the two-half cycle unless another operand's loads, queued on the same
    # load unit, fall on some positions only (its tile changes when the walk starts over)
    out_dims = list(nest.op.output.dims)
    walk_dim_all = [out_dims[i] if i >= 0 else "" for i in dim.tolist()]
    rare = np.zeros(n, dtype=bool)
    for X, mv in inputs:
        rare |= (mv[0] > 0) & ~_follows_walk(nest, c, X.dims, walk_dim_all, slot, nest.B) & \
            _restarts_with_walk(nest, c, X.dims, slot, nest.B)
    # An edge tile of a dim outside the output (a reduction loop above the walked one at its last position)
    # leaves the output tiles equal but shrinks the other operands' loads for whole runs of the walk: the
    # halves settle at each run's own rate (the load unit may pace one run and the halves' cycle the other).
    above = nest.above(c)
    pos = np.full(len(nest.structure) + 1, -1)       # (a nest with no loop at all: slot -1 reads the extra entry)
    pos[above] = np.arange(len(above))
    walk_k = np.where(slot >= 0, pos[slot], -1)      # the walked loop's index in ``above``
    input_edges = []
    for d, kk, b, e in nest.edges(c):
        if d in out_dims or not any(d in X.dims for X, _ in inputs):
            continue
        outside = (kk >= 0) & (walk_k > kk)
        if outside.any():
            input_edges.append((d, np.where(outside, kk, -1), b, e))
    shrinks = np.zeros(n, dtype=bool)
    for _, kk, _, _ in input_edges:
        shrinks |= kk >= 0
    edge = found & ((bound * stride > size) | rare | shrinks) & (bound <= MAX_CHAIN_POSITIONS)
    if not edge.any():
        return np.zeros(n)
    rows = np.flatnonzero(edge)
    size, stride, bound, ext, dim, slot = size[rows], stride[rows], bound[rows], ext[rows], dim[rows], slot[rows]
    B = nest.B[rows]
    T = tiles[rows].astype(float)
    P = int(bound.max())
    k = np.arange(P)[None]
    w = np.clip(np.minimum(ext[:, None], size[:, None] - k * stride[:, None]), 0, None).astype(float)
    w = np.where(k < bound[:, None], w, 0.0)
    live = w > 0
    per_period = np.maximum(live.sum(axis=1), 1)
    mean_w = w.sum(axis=1) / per_period
    walk_dim = [out_dims[i] if i >= 0 else "" for i in dim.tolist()]
    # An edge tile of another output dim (an outer loop at its last position, 1/bound of the
    # tiles), or of a dim outside the output that the other operands use, scales whole runs of the
    # walk: each such segment settles at its own rate.
    segments: list[tuple[np.ndarray, dict[str, np.ndarray]]] = [(np.ones(len(rows)), {})]   # (share, dim -> scale)
    outer_edges = [x for x in nest.edges(c) if x[0] in out_dims] + input_edges
    for d, kk, b, e in outer_edges:
        on = (kk[rows] >= 0) & ((dim != out_dims.index(d)) if d in out_dims else True)
        f = np.where(on, 1.0 / b[rows], 0.0)
        r = e[rows] / nest.inner[c][d][rows]
        segments = [x for share, sc in segments for x in ((share * (1 - f), sc), (share * f, {**sc, d: r}))]

    def seg_scale(sc: dict[str, np.ndarray], dims) -> np.ndarray:
        out = np.ones(len(rows))
        for d, r in sc.items():
            if d in dims:
                out = out * r
        return out

    def per_tile(move, dims, sc) -> np.ndarray:
        """A move's time at each position: its DMA setup, and its data in proportion to the tile
        where the operand's tile grows with the walked dim (or the segment's), else the mean."""
        if move is None:
            return np.zeros_like(w)
        total, setup = move[0][rows], move[1][rows]
        grows = np.array([d in dims for d in walk_dim], dtype=bool)
        # an operand over no dim of the walk nor of a loop inside it changes tile when the walk
        # starts over: its loads fall on the first position
        every = _follows_walk(nest, c, dims, walk_dim, slot, B)
        shape = np.where(grows[:, None], w / mean_w[:, None],
                         np.where(every[:, None], 1.0, np.where(k == 0, per_period[:, None], 0.0)))
        mean_seg = sum(share * seg_scale(x, dims) for share, x in segments)
        data = np.maximum(total / T - setup, 0.0) / mean_seg * seg_scale(sc, dims)
        return np.where(live, setup[:, None] + data[:, None] * shape, 0.0)

    C = compute[rows] / T
    reloads = np.zeros(len(rows), dtype=bool) if load is None else load[0][rows] > 0
    moves: dict[tuple[tuple[str, ...], int | None], tuple] = {}     # (segment dims, pass) -> moves

    # the passes of the innermost loop outside the walk where a first-position load differs between them
    every_of = [_follows_walk(nest, c, X.dims, walk_dim, slot, B) for X, _ in inputs]
    # (an operand whose tile follows the walk's edge tiles keeps their shape: only where the walk's tiles are equal)
    equal = bound * stride <= size
    varied = [_pass_loads(nest, keep, counts, c, X, slot, rows, every, equal)
              for (X, _), every in zip(inputs, every_of, strict=True)]
    n_pass = np.ones(len(rows), dtype=np.int64)
    for b, *_ in varied:
        n_pass = np.maximum(n_pass, b)

    def tile_moves(sc: dict[str, np.ndarray], q: int | None) -> tuple:
        """Per position of a pass at the segment's scale: reload, drain, and the other operands' loads
        (those whose tile changes with every output tile wait, like the reload, for the compute of
        the tile two back; the others, at the first position, for their own tile two back, long done).
        ``q``: the pass's index in the passes of the innermost loop outside the walk (None: their mean)."""
        key = (tuple(sorted(sc)), q if q is None else min(q, 1))
        if key not in moves:
            L, S = per_tile(load, out_dims, sc), per_tile(store, out_dims, sc)
            A_every, A_first = np.zeros_like(w), np.zeros_like(w)
            for (X, mv), every, (_, r_first, r_rest, r_other) in zip(inputs, every_of, varied, strict=True):
                t = per_tile(mv, X.dims, sc)
                if q is not None:       # the first pass brings what the outer loops move, the others their own
                    t = t * np.where(k == 0, (r_first if q == 0 else r_rest)[:, None], r_other[:, None])
                A_every, A_first = A_every + np.where(every[:, None], t, 0.0), A_first + np.where(every[:, None], 0.0, t)
            moves[key] = (L, S, A_every, A_first)
        return moves[key]

    def walk(passes: list[tuple[dict[str, np.ndarray], int | None]], sel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The end of the first run of ``passes`` (each a pass over the walked loop's positions at a
        segment's scale, with its index among the passes of the loop outside the walk) and the growth per
        output tile in the periodic regime, for rows ``sel`` (one row: the same recurrence over plain
        floats, the live positions only)."""
        periods = 4
        Cs, pen_r = C[sel], np.where(reloads[sel], 0.0, -np.inf)
        seq = []
        for sc, q in passes:
            L, S, A_every, A_first = (x[sel] for x in tile_moves(sc, q))
            seq.append((L, S, A_every, A_first, np.where(A_every > 0, 0.0, -np.inf)))
        if sel.sum() == 1:
            c1, r1 = float(Cs[0]), float(pen_r[0])
            on1 = np.flatnonzero(live[sel][0]).tolist()
            steps = [(float(A_first[0, j]), float(A_every[0, j]), float(pen_c[0, j]), float(L[0, j]), float(S[0, j]))
                     for L, S, A_every, A_first, pen_c in seq for j in on1]
            def floats(st: tuple) -> tuple:
                for a_first, a_every, p_c, ld, sd in steps:
                    st = _halves_step(st, a_first, a_every, p_c, ld, r1, c1, sd, max)
                return st

            first1, mark1, end1 = _settle(floats, (0.0,) * 5, periods)
            return np.array([first1]), np.array([(end1 - mark1) / (2 * per_period[sel][0] * len(passes))])

        def rows_(state: tuple) -> tuple:
            for L, S, A_every, A_first, pen_c in seq:
                for j in range(P):
                    on = live[sel, j]
                    new = _halves_step(state, A_first[:, j], A_every[:, j], pen_c[:, j], L[:, j], pen_r, Cs, S[:, j],
                                       np.maximum)
                    state = tuple(np.where(on, x, y) for x, y in zip(new, state, strict=True))
            return state

        z = np.zeros(int(sel.sum()))
        first, mark, end = _settle(rows_, (z,) * 5, periods)
        return first, (end - mark) / (2 * per_period[sel] * len(passes))

    total = np.zeros(len(rows))
    done = np.zeros(len(rows), dtype=bool)
    if len(segments) > 1:
        # Runs of edge tiles and of full ones follow each other in the loop order, and a run of small
        # tiles lets the units catch up on a run of large ones: where the passes from the outermost
        # edge loop in to the walked loop are few, they are walked in order, one sequence per row.
        edge_dims = {d: (kk[rows], e[rows] / nest.inner[c][d][rows]) for d, kk, _, e in outer_edges}
        for i in range(len(rows)):
            segs = {d: (int(kk[i]), r[i]) for d, (kk, r) in edge_dims.items()
                    if kk[i] >= 0 and (d not in out_dims or out_dims.index(d) != dim[i])}
            if not segs:
                continue
            w_k = above.index(int(slot[i]))
            outer = min(k for k, _ in segs.values())
            span = [int(B[i, above[k]]) for k in range(outer, w_k)]
            if outer >= w_k or math.prod(span) > MAX_WALK_PASSES:
                continue
            passes = []
            for digits in itertools.product(*(range(b) for b in span)):
                passes.append({d: np.full(len(rows), r) for d, (k, r) in segs.items()
                               if k - outer < len(span) and digits[k - outer] == span[k - outer] - 1})
            sel = np.zeros(len(rows), dtype=bool)
            sel[i] = True
            first, rate = walk([(sc, None) for sc in passes], sel)
            total[i] = (first + rate * max(T[i] - per_period[i] * len(passes), 0.0))[0]
            done[i] = True
    if not done.all():
        # otherwise each segment settles at its own rate, weighted by its share of the tiles
        rest = ~done
        for share, sc in segments:
            if not share[rest].any():
                continue
            # rows with as many passes walked together (a row of many passes would hold up the others)
            for runs in np.unique(n_pass[rest]).tolist():
                sel = rest & (n_pass == runs)
                first, rate = walk([(sc, q) for q in range(runs)], sel)
                total[sel] = total[sel] + share[sel] * (first + rate * np.maximum(T[sel] - per_period[sel] * runs, 0.0))
    out = np.zeros(n)
    out[rows] = total
    return out


# ---------------------------------------------------------------- single buffering

def _transition_time(moves: list[tuple], n: int) -> np.ndarray:
    """Time from the end of a compute step to the next one's start while single-buffered levels
    change tiles, per row. ``moves``: (level, operand, parent level, is output, load, store,
    present, waited), a load being (moves data, setup, data cycles, paced by the parent's read port
    rather than the child's write port, the two port names) and a store (setup, data cycles, paced
    by the child's read port rather than the parent's write port, the two port names); a move
    absent from a row (``present`` false) is left out of that row's schedule. ``waited`` false:
    the drain of a level that overlaps its transfers with compute, which neither the compute nor
    any load waits for, but which holds its port at the transition as the simulator runs it.

    Stores drain one after another, deepest level first, each holding its slower side's port for
    its data. Each level's load unit takes its inputs, then its returning partial sums (which wait
    for their own drain); a load also waits for its operand's load into the parent at the same
    transition, and its data for the port it shares with the drains and the earlier loads (in its
    free time, ``_fill``): a drain placed first keeps its port, the loads fill the time around it,
    as the simulator's one transfer at a time. Different levels' load units run side by side,
    beside the stores. The compute waits for the loads and the waited drains."""
    zero = np.zeros(n)
    port: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    t_store, drained = zero, {}
    last = zero
    for c, x, _, out, _, st, present, waited in sorted(moves, key=lambda mv: -mv[0]):
        if not out:
            continue
        su, t, to_child, c_port, p_port = st
        e = t_store + su
        moving = present & (t > 0)
        for name, side in ((c_port, to_child), (p_port, ~to_child)):
            paced = moving & side
            if paced.any():
                e = _fill(port, name, e, t, paced)      # (``e`` where not paced)
        t_store = np.where(present, e, t_store)
        if waited:
            drained[(c, x)] = np.where(present, t_store, 0.0)
            last = np.maximum(last, drained[(c, x)])
    unit: dict[int, np.ndarray] = {}
    loaded: dict[tuple, np.ndarray] = {}
    for c, x, p, _out, ld, _, present, waited in sorted(moves, key=lambda mv: (mv[0], mv[3])):
        if not waited:
            continue
        has_ld, su, t, to_parent, p_port, c_port = ld
        end = np.maximum(loaded.get((p, x), zero), drained.get((c, x), zero))
        has = present & has_ld
        e = np.maximum(end, unit.get(c, zero)) + su
        moving = has & (t > 0)
        for name, side in ((p_port, to_parent), (c_port, ~to_parent)):
            paced = moving & side
            if paced.any():
                e = _fill(port, name, e, t, paced)
        end = np.where(has, e, end)
        unit[c] = np.where(has, end, unit.get(c, zero))
        loaded[(c, x)] = np.where(present, end, 0.0)
        last = np.maximum(last, loaded[(c, x)])
    return last


def _fill(port: dict, name: str, t0: np.ndarray, dur: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Move ``dur`` cycles of data from ``t0`` on in the free time of port ``name`` (updated); only ``rows`` are
    placed (``dur`` > 0 there), the others keep ``t0``. The bursts of different DMA engines interleave, so a transfer placed later can use the gaps before
    earlier ones.

    A port's busy intervals are lists of (start, end) arrays, one entry per row of the schedule, in order of start
    within each row; an entry a row does not have is (-inf, -inf), which every walk skips (it ends before any
    time). A transfer that fills the gap before an interval lies between it and the interval before, so its
    pieces are inserted there and the order holds without a sort (a sort of the intervals by start, stable, would
    give each row the same sequence: a gap's piece starts after every earlier interval's start, strictly before
    its own interval's, and the remainder after all)."""
    inf = np.inf
    if name not in port:
        # an idle port: the transfer runs from t0 on (rows placed only where it moves data)
        placed = rows & (dur > 0)
        if placed.any():
            port[name] = ([np.where(placed, t0, -inf)], [np.where(placed, t0 + dur, -inf)])
        return np.where(placed, t0 + dur, t0)
    starts, ends = port[name]
    cur, left = t0.copy(), np.where(rows, dur, 0.0)
    done = ~rows
    new_s: list[np.ndarray] = []
    new_e: list[np.ndarray] = []
    for s, e in zip(starts, ends, strict=True):
        skip = done | (e <= cur)
        gap = ~skip & (s > cur)
        if gap.any():
            take = np.where(gap, np.minimum(left, s - cur), 0.0)
            new_s.append(np.where(gap, cur, -inf))
            new_e.append(np.where(gap, cur + take, -inf))
            left = left - take
            cur = cur + take
            done = done | (gap & (left <= 0))
        new_s.append(s)
        new_e.append(e)
        cur = np.where(~skip & ~done, np.maximum(cur, e), cur)
    rest = ~done & (left > 0)
    if rest.any():
        new_s.append(np.where(rest, cur, -inf))
        new_e.append(np.where(rest, cur + left, -inf))
        cur = np.where(rest, cur + left, cur)
    port[name] = (new_s, new_e)
    return cur


def _blocks(x: np.ndarray, nb: int) -> np.ndarray:
    """``nb`` copies of the rows ``x`` one after another (``np.tile`` without its Python overhead; a copy into
    place costs a quarter of ``broadcast_to(...).flatten()`` on a few hundred rows)."""
    out = np.empty(nb * len(x), dtype=x.dtype)
    out.reshape(nb, len(x))[:] = x
    return out


def _scheduled_transitions(moves: list[tuple], nb: int, n: int, trans: np.ndarray, ncases: int,
                           only: np.ndarray | None = None) -> np.ndarray:
    """``_transition_time`` of the stacked blocks of ``_single_stall`` (block 0 the first tiles, then per case one
    block per class), timed only where a time counts: a column where no move is present takes no time (0), and a
    class that never occurs in a row (``trans`` 0: its loop has bound 1 there) is multiplied by 0 wherever its time
    is used, so it is left at 0 too. Each column of the schedule is timed on its own (its ports' busy intervals are
    its own), so leaving columns out changes no other column's time. On the README's ResNet-18 on eyeriss_like about
    half the (class, row) pairs never occur; the (case, class) blocks of imperfect rows are mostly empty. ``only``:
    time no other columns (the others are left at 0)."""
    total = nb * n
    need = np.zeros(total, dtype=bool)
    for mv in moves:
        if mv[7]:                      # a drain nothing waits for takes no time on its own
            need |= mv[6]
    need[n:] &= _blocks((trans != 0).reshape(-1), ncases)
    if only is not None:
        need &= only
    cols = np.flatnonzero(need)
    if len(cols) == total:
        return _transition_time(moves, total)
    T = np.zeros(total)
    if len(cols):
        def sub(a):
            return a[cols] if isinstance(a, np.ndarray) and a.shape == (total,) else a

        sub_moves = [(c, x, p, out, tuple(sub(a) for a in ld), tuple(sub(a) for a in st), sub(pr), waited)
                     for c, x, p, out, ld, st, pr, waited in moves]
        T[cols] = _transition_time(sub_moves, len(cols))
    return T


def _single_stall(nest: NestRows, keep, counts, on: dict[int, np.ndarray]) -> tuple[np.ndarray, ...]:
    """Compute waits while single-buffered levels change tiles; ``on[c]``: rows where single-buffered
    level c moves data. Per transition class (the loop that advances), the levels below that loop
    move the exact deltas of their operands, timed by ``_transition_time``. The first tiles load
    before any compute and the last ones drain after it (whole tiles; the last one an edge tile
    where an imperfect factor leaves one last).

    Edge tiles of imperfect factors split every class into cases (``_edge_states``, joint over the
    levels, since they move together): a transition's time is a maximum over units and ports, so
    it is timed on each case's exact deltas (the first instance's, scaled to the counts as the
    simulator scales them), not on a mean delta. An output tile drains what entered it: the old
    tile's size.

    The first fill and every (case, class) are scheduled in one ``_transition_time`` call over
    stacked copies of the rows (block 0: first tiles, then per case one block per temporal slot),
    a move absent from a block being marked not present. The slots above a level are a prefix of
    the slots above any deeper level, and a slot's transitions do not depend on the level, so the
    deepest level's classes index all.

    The output levels at or above the deepest single-buffered one that overlap their transfers with
    compute (double buffers, registers written at the clock edge; not a streamed drain, whose pieces
    leave at other steps) drain at the same transitions as their tiles change: nothing waits for
    that drain, but it holds its slower side's port, and a single-buffered load through that port
    waits behind it (the simulator's port serves one transfer at a time; tpu_like MobileNetV2
    features.5.expand as a fused group maps it: the unified buffer's 768-cycle output drain ahead
    of the next tile's weight load into the PE registers, -16.6% before this term).

    Returns, without the drains nothing waits for, the stall per row and per transition class and
    row how often it occurs and its mean stall over the cases; and the stall per row with those
    drains holding their ports (equal to the first where there are none)."""
    op, levels, n = nest.op, nest.arch.levels, nest.n
    deepest = max(on)
    trans, _ = nest.classes(deepest)
    K = trans.shape[0]
    out_chain = [i for i in range(nest.nlev) if op.output.name in keep[i]]
    held = {c: overlapping(nest, keep, c) & ~streamed_drain(nest, keep, c)[0]
            for c in out_chain[1:] if c <= deepest}
    held = {c: rows for c, rows in held.items() if rows.any()}
    dims, cases = _edge_states(nest, tuple(sorted(set(on) | set(held))))
    nb = 1 + K * len(cases)
    moves = []
    last = np.zeros(n)
    ob: dict[int, tuple[np.ndarray, np.ndarray]] | None = None   # ``output_bits``, once for every output level
    for c, active_c, waited in [(c, a, True) for c, a in on.items()] + [(c, a, False) for c, a in held.items()]:
        lc = levels[c]
        Kc = len(nest.above(c))
        for X in op.operands:
            chain = [i for i in range(nest.nlev) if X.name in keep[i]]
            if c not in chain[1:] or not (waited or X.is_output):
                continue
            p = chain[chain.index(c) - 1]
            lp = levels[p]
            cc, pc = counts[(c, X.name)], counts[(p, X.name)]
            nc, np_ = nest.used(c), nest.used(p)
            full, dl, _ = nest.deltas(X, c)
            k = np.zeros((nb, n), dtype=np.int64)
            gone = np.zeros((nb, n), dtype=np.int64)       # outputs: the size of the tile that leaves
            k[0] = full
            counted = full.copy()
            for i, (w, over) in enumerate(cases):
                ext = _case_extents(nest, c, dims, over)
                dl_i = _case_deltas(nest, X, c, w[:Kc], ext) if ext else dl
                blk = slice(1 + i * K, 1 + i * K + Kc)
                k[blk] = dl_i
                counted = counted + (trans[:Kc] * w[:Kc] * dl_i).sum(axis=0)
                if X.is_output:
                    gone[blk] = np.where(dl_i > 0, _case_old_sizes(nest, X, c, w[:Kc], ext) if ext else dl_i, 0)
            valid = active_c & (counted != 0)
            safe = np.where(valid, counted, 1)
            k = k.reshape(-1)
            ld_c, ld_p = _blocks(cc[0] * X.bits / nc / safe, nb), _blocks(pc[1] * X.bits / np_ / safe, nb)
            tc, tp = cycles(k * ld_c, lc.write_bw_bits), cycles(k * ld_p, lp.read_bw_bits)
            load = ((k > 0) & ((ld_c > 0) | (ld_p > 0)) & waited, _blocks(load_setup_cycles(nest, X, c, p), nb),
                    np.maximum(tc, tp), tp >= tc, lp.port("read"), lc.port("write"))
            st_su, st_t, st_child = np.zeros(nb * n), np.zeros(nb * n), np.zeros(nb * n, dtype=bool)
            if X.is_output:
                ob = ob if ob is not None else output_bits(nest, keep, counts)
                st_c, st_p = _blocks(ob[c][1] / nc / safe, nb), _blocks(ob[p][0] / np_ / safe, nb)
                gone[0] = _last_tile(nest, X, c) if not nest.perfect.all() else full
                g = gone.reshape(-1)
                sc, sp = cycles(g * st_c, lc.read_bw_bits), cycles(g * st_p, lp.write_bw_bits)
                moving = (g > 0) & ((st_c > 0) | (st_p > 0))
                st_su = np.where(moving, float(lc.transfer_setup_cycles), 0.0)
                st_t = np.where(moving, np.maximum(sc, sp), 0.0)
                st_child = sc >= sp              # the slower side's port is held for the transfer
            if waited:
                last = last + np.where(valid, st_su[:n] + st_t[:n], 0.0)
            st_su[:n] = st_t[:n] = 0.0       # the first tiles only load; the last ones drain after compute
            store = (st_su, st_t, st_child, lc.port("read"), lp.port("write"))
            present = _blocks(valid, nb)
            for i in range(len(cases)):      # classes below c: c does not move
                present[(1 + i * K + Kc) * n:(1 + (i + 1) * K) * n] = False
            present[n:] &= (k[n:] != 0) & (load[0][n:] | (st_su[n:] + st_t[n:] != 0))
            moves.append((c, X.name, p, X.is_output, load, store, present, waited))
    def stalls(T: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        each = sum(w * T[(1 + i * K) * n:(1 + (i + 1) * K) * n].reshape(K, n) for i, (w, _) in enumerate(cases))
        return T[:n] + last + (trans * each).sum(axis=0), each

    waited = [mv for mv in moves if mv[7]]
    T = _scheduled_transitions(waited, nb, n, trans, len(cases))
    own, each = stalls(T)
    # The held drains change a transition only where one holds a port that a waited load of the same
    # transition moves its data through, or comes before a waited drain in the chain (that of a level
    # above it): only those columns are timed again.
    again = np.zeros(nb * n, dtype=bool)
    for mv in moves:
        if mv[7]:
            continue
        _, t, to_child, c_port, p_port = mv[5]
        for mw in waited:
            if mw[3] and mw[0] < mv[0]:
                again |= mv[6] & mw[6]
            has_ld, _, tl, to_parent, lp_port, lc_port = mw[4]
            loads = mw[6] & has_ld & (tl > 0)
            for port, holds in ((c_port, to_child), (p_port, ~to_child)):
                if port in (lp_port, lc_port):
                    again |= mv[6] & (t > 0) & holds & loads & (to_parent if port == lp_port else ~to_parent)
    if not again.any():
        return own, trans, each, own
    T = np.where(again, _scheduled_transitions(moves, nb, n, trans, len(cases), again), T)
    return own, trans, each, stalls(T)[0]


# ---------------------------------------------------------------- the whole run

def latency_rows(nest: NestRows, keep, counts) -> dict:
    """Latency terms per row. ``counts``: (level, operand) -> [fills, reads, updates, drains] per row.
    Returns arrays ``latency``, ``compute_cycles`` (MAC schedule), ``stall`` (single-buffer stalls
    plus double-buffer prologue and epilogue), ``pipeline``, ``setup`` and a dict ``transfer`` of
    per-level busy time (its busiest port or DMA unit)."""
    op, arch, n, nlev = nest.op, nest.arch, nest.n, nest.nlev
    levels = arch.levels
    zeros = lambda: np.zeros(n)  # noqa: E731
    ports: dict[str, np.ndarray] = {}

    def use(port: str, t: np.ndarray) -> None:
        ports[port] = ports[port] + t if port in ports else t

    macs = -(-nest.temporal // arch.compute.macs_per_cycle)
    out_bits = output_bits(nest, keep, counts)     # finished outputs may move at fewer bits
    # compute side: the reads and updates of the last level of every operand stream during compute
    for X in op.operands:
        last = max(i for i in range(nlev) if X.name in keep[i])
        c, lv, inst = counts[(last, X.name)], levels[last], nest.used(last)
        use(lv.port("read"), cycles(c[1] * X.bits / inst, lv.read_bw_bits))
        use(lv.port("write"), cycles(out_bits[last][0] / inst, lv.write_bw_bits) if X.is_output else zeros())
    stream = np.max(np.stack(list(ports.values())), axis=0)
    pipe = _pipeline(nest)
    compute = np.maximum(macs, stream) + pipe

    load_unit: dict[int, np.ndarray] = {}
    store_unit: dict[int, np.ndarray] = {}
    tiles_at: dict[int, np.ndarray] = {}
    out_tiles: dict[int, np.ndarray] = {}   # output tiles a level receives
    drain_pieces: dict[int, np.ndarray] = {}   # ... the drains they leave in (streamed: the pieces)
    drain_lead: dict[int, np.ndarray] = {}     # ... the share of the run computed before the first
    drain_streamed: dict[int, np.ndarray] = {}   # ... rows where the level's output tile drains streamed
    drain_start: dict[int, np.ndarray] = {}      # ... the share of the run before the first finished step
    drain_run: dict[int, tuple] = {}   # ... streamed: (last run of pieces, driver tiles, a piece's time)
    pro: dict[int, np.ndarray] = {}      # double-buffered levels: first loads, before any compute
    pro_on: dict[int, np.ndarray] = {}
    epi: dict[int, np.ndarray] = {}      # ... and last drains, after all compute
    epi_on: dict[int, np.ndarray] = {}
    ring: dict[int, np.ndarray] = {}     # double-buffered levels: output drains and partial-sum reloads
    ring_moves: dict[tuple[int, str], tuple] = {}   # ... apart: (level, load/store) -> (cycles, setup per tile)
    ring_inputs: dict[int, list] = {}     # ... and the other operands' loads into them: (operand, (cycles, setup))
    drain_time: dict[int, np.ndarray] = {}   # output levels: the store unit's time over the run
    drain_holds: dict[int, np.ndarray] = {}  # ... where the drain holds the level's own read port
    setups = zeros()
    load_ports: set[str] = set()        # parents' read ports that carry loads
    held: dict[str, dict[tuple[int, str], np.ndarray]] = {}   # parent read port -> (level, operand) -> cycles
    load_time: dict[str, dict[tuple[int, str], np.ndarray]] = {}   # ... the loads' time on it, held or not
    add = lambda d, c, v: d.__setitem__(c, d[c] + v if c in d else v)  # noqa: E731
    orr = lambda d, c, v: d.__setitem__(c, d[c] | v if c in d else v)  # noqa: E731
    for X in op.operands:
        chain = [i for i in range(nlev) if X.name in keep[i]]
        for p, c in zip(chain[:-1], chain[1:], strict=True):
            lc, lp = levels[c], levels[p]
            nc, np_ = nest.used(c), nest.used(p)
            cc, pc = counts[(c, X.name)], counts[(p, X.name)]
            tiles = tile_transfer_rows(nest, X.dims, c)
            tiles_at[c] = np.maximum(tiles_at[c], tiles) if c in tiles_at else np.maximum(tiles, 1)
            if X.is_output:
                out_tiles[c] = np.maximum(tiles, 1)
            first = nest.deltas(X, c)[0]      # the elements the first tile moves (a generated halo is not)
            last_tile = _last_tile(nest, X, c) if X.is_output and not nest.perfect.all() else first
            vols = [("load", cc[0] * X.bits / nc, pc[1] * X.bits / np_, cc[0] / nc)]
            if X.is_output:
                vols.append(("store", out_bits[c][1] / nc, out_bits[p][0] / np_, cc[3] / nc))
            for kind, child_bits, parent_bits, child_elems in vols:
                active = (child_bits > 0) | (parent_bits > 0)
                # one transfer's cycles beside its bits: a load also pays the parent's per-row latency
                per = load_setup_cycles(nest, X, c, p) if kind == "load" else lc.transfer_setup_cycles
                if kind == "load":
                    tc, tp = cycles(child_bits, lc.write_bw_bits), cycles(parent_bits, lp.read_bw_bits)
                    use(lc.port("write"), tc)
                    use(lp.port("read"), tp)
                    load_ports.add(lp.port("read"))
                    # the slower side's port is held for the transfer
                    held.setdefault(lp.port("read"), {})[(c, X.name)] = np.where(tp >= tc, tp, 0.0)
                    load_time.setdefault(lp.port("read"), {})[(c, X.name)] = tp
                else:
                    tc, tp = cycles(child_bits, lc.read_bw_bits), cycles(parent_bits, lp.write_bw_bits)
                    use(lc.port("read"), tc)
                    use(lp.port("write"), tp)
                setup = np.where(active, tiles * per, 0.0)
                setups = setups + setup
                add(load_unit if kind == "load" else store_unit, c, setup + np.maximum(tc, tp))
                db = overlapping(nest, keep, c)
                # a streamed drain leaves the level's one tile in pieces: no half is drained for reuse
                streamed_out, pieces_out, lead_out, start_out = streamed_drain(nest, keep, c) if kind == "store" \
                    else (None, None, None, None)
                ringed = db & ~streamed_out if streamed_out is not None else db
                if db.any() and X.is_output:
                    add(ring, c, np.where(ringed, setup + np.maximum(tc, tp), 0.0))
                    ring_moves[(c, kind)] = (np.where(ringed, setup + np.maximum(tc, tp), 0.0),
                                             np.where(active & ringed, per, 0.0))
                elif db.any() and kind == "load":
                    ring_inputs.setdefault(c, []).append((X, (np.where(db, setup + np.maximum(tc, tp), 0.0),
                                                                   np.where(active & db, per, 0.0))))
                if kind == "store":
                    drain_time[c] = setup + np.maximum(tc, tp)
                    # its own read port paces the drain: the reloads of the level below wait for it
                    drain_holds[c] = np.where(tc >= tp, drain_time[c], 0.0)
                if db.any():
                    # the first tile (load) and the last tile (store) do not overlap compute: their share
                    # of the elements moved (finished outputs may move at fewer bits than the rest)
                    share = np.where(child_elems > 0, np.minimum(
                        1.0, (first if kind == "load" else last_tile) / np.where(child_elems > 0, child_elems, 1)), 0.0)
                    if kind == "load":
                        # a streamed tile: only its first piece comes before compute; the last piece's
                        # compute follows the last load (the overlapped bound below)
                        streams, piece, pieces = streamed_tile(nest, keep, X, c)
                        share = np.where(streams, piece, share)
                        tiles_at[c] = np.where(streams, np.maximum(tiles_at[c], pieces), tiles_at[c])
                    elif streamed_out is not None and pieces_out is not None and lead_out is not None \
                            and start_out is not None:
                        # ... and only the last piece of a streamed drain comes after compute
                        share = np.where(streamed_out, 1.0 / pieces_out, share)
                        if streamed_out.any():
                            run, drv_tiles = _drain_run(nest, keep, c)
                            drain_run[c] = (np.where(streamed_out, run, 1.0), drv_tiles,
                                            per + np.maximum(tc, tp) / pieces_out)
                        drain_pieces[c] = np.where(streamed_out, pieces_out, out_tiles[c])
                        drain_lead[c] = np.where(streamed_out, lead_out, 1.0 / out_tiles[c])
                        drain_streamed[c] = streamed_out
                        drain_start[c] = np.where(streamed_out, start_out, 0.0)
                    edge = np.where(active & db, per + np.maximum(tc, tp) * share, 0.0)
                    if kind == "load":
                        add(pro, c, edge)
                        orr(pro_on, c, active & db)
                    else:
                        add(epi, c, edge)
                        orr(epi_on, c, active & db)
                    if X.is_output:
                        # the first reload and the last drain are in the prologue and epilogue
                        add(ring, c, -np.where(ringed, edge, 0.0))
    get = lambda d, c: d.get(c, 0.0)  # noqa: E731
    on = {c: ((get(load_unit, c) != 0) | (get(store_unit, c) != 0)) & ~overlapping(nest, keep, c)
          for c in range(1, nlev) if not levels[c].refills_during_compute and (c in load_unit or c in store_unit)}
    stall, stall_count, stall_each, held_stall = _single_stall(nest, keep, counts, on) if on else \
        (zeros(), None, None, zeros())
    edge = sum(pro.values(), zeros()) + sum(epi.values(), zeros())
    # A double-buffered level's units overlap compute between its first load and last drain;
    # when they are the bottleneck, the compute of the last tile still follows its load.
    busy = compute + stall
    overlapped = zeros()
    for c in pro:
        overlapped = np.maximum(overlapped, np.where(pro_on[c], get(load_unit, c) - pro[c] + busy / tiles_at[c], 0.0))
    # refills chained through overlapping levels, and drains, stretch the steps every window is made of
    chained = _chained(nest, keep, counts, busy) if len(pro) > 1 else zeros()
    paced = np.maximum(busy, chained)

    windows: dict[int, np.ndarray] = {}     # per level: the shortest period of its loading streams
    paces: dict[int, np.ndarray] = {}       # ... the pace of its windows' steps
    unpaced: dict[int, np.ndarray] = {}     # ... its ``_burst`` with no drain paces
    # (each the same whichever caller asks: ``bursts`` runs once per double-buffered output level and once more)

    def bursts(drains, tiles=None) -> np.ndarray:
        """``_burst`` over the double-buffered levels; with ``tiles`` (output tiles of the run) only
        levels some of whose loads recur within an output tile: the others fetch the next tile."""
        out = zeros()
        for c in pro:
            on = pro_on[c]
            if tiles is not None and nest.above(c):
                if c not in windows:
                    window = np.full(n, np.inf)
                    for X in op.operands:
                        loads = _stream_loads(nest, keep, counts, c, X)
                        if loads is not None:
                            window = np.where(loads[0], np.minimum(window, loads[2]), window)
                    windows[c] = window
                on = on & (windows[c] * tiles < nest.steps(c))
            if on.any():
                if c not in paces:
                    # the window's steps run at the pace of the refills chained below c (a chain from c
                    # itself is c's own transitions, which the burst counts) and at the two-half pace of
                    # the output levels below
                    pace = np.maximum(busy, _chained(nest, keep, counts, busy, c)) if len(pro) > 1 else busy
                    below = [t for d, t in cycle_at.items() if d > c]
                    paces[c] = np.maximum(pace, np.max(below, axis=0)) if below else pace
                if drains:
                    burst = _burst(nest, keep, counts, c, paces[c], held, drains)
                else:
                    if c not in unpaced:
                        unpaced[c] = _burst(nest, keep, counts, c, paces[c], held, drains)
                    burst = unpaced[c]
                out = np.maximum(out, np.where(on, burst, 0.0))
        return out

    # Two halves, three stages: a tile's output half is computed, drained, refilled with the
    # partial sums of the tile two ahead, and only then computed again, so every two tiles take
    # at least compute + drain + reload of one: half the sum over the run.
    # Data drains upward: a level's drain waits for the drains of the levels below it at the same
    # transition (each of them drains at every transition of c, its share of its own drains).
    for c in ring:
        for d, t in drain_time.items():
            if d > c:
                ring[c] = ring[c] + np.where(overlapping(nest, keep, c),
                                             t / out_tiles[d] * np.maximum(out_tiles[c] - 1, 0), 0.0)
    # The cycle binds the compute, not the stalls for single-buffered levels: a transition's stall
    # hides only behind the wait for the halves that the step would have had anyway (the cycle's
    # excess over compute, per output tile); beyond it, the halves, at most one tile ahead, wait too.
    cycle = zeros()
    cycle_at: dict[int, np.ndarray] = {}    # ... per level, its own two-half bound
    out_chain = [i for i in range(nlev) if op.output.name in keep[i]]
    for c, r in ring.items():
        positions = _output_positions(nest, c)
        half = _heavier_half(nest, c, positions)
        # stalls between the steps of one of c's tiles are part of that tile's compute: one tile of
        # every two is on the cycle, as its compute is
        a = len(nest.above(c))
        inside = (stall_count[a:] * stall_each[a:]).sum(axis=0) if stall_count is not None and \
            stall_each is not None else zeros()
        bound = (compute + inside) / 2 + half * np.maximum(r, 0.0)
        # The reload on the cycle holds its parent's read port, which the deeper levels' loads of the
        # other half's tile share while it computes: in the steady state that tile computes from
        # half a cycle less its compute to half a cycle after the drain before the reload (tile
        # times: compute with its stalls C, drain D, reload R), so a share
        # min(1, (C + R - D) / 2C) of its loads on the port falls in the reload and delays it.
        par = out_chain[out_chain.index(c) - 1]
        port = levels[par].port("read")
        reload = held.get(port, {}).get((c, op.output.name))
        if reload is not None:
            others = sum((t for (lvl, _), t in load_time[port].items() if lvl > c), zeros())
            tiles = out_tiles[c]
            c_t, r_t = (compute + inside) / tiles, reload / tiles
            d_t = np.maximum(r / tiles - r_t, 0.0)
            share = np.clip((c_t + r_t - d_t) / np.where(c_t > 0, 2 * c_t, 1.0), 0.0, 1.0)
            bound = bound + half * np.where(reload > 0, others * share, 0.0)
        if (c, "store") in ring_moves:
            # the chain runs from the first load to the last drain: the prologue and epilogue are added below
            walk = _unequal_halves(nest, keep, counts, c, positions, ring_moves.get((c, "load")), ring_moves[(c, "store")],
                                   ring_inputs.get(c, []), compute, out_tiles[c])
            bound = np.maximum(bound, walk - get(pro, c) - get(epi, c))
        hidden = zeros()
        if stall_count is not None and stall_each is not None:
            wait = np.maximum(bound - compute, 0.0) / out_tiles[c]
            hidden = (stall_count * np.minimum(stall_each, wait[None])).sum(axis=0)
        cycle_at[c] = bound + stall - hidden
        cycle = np.maximum(cycle, cycle_at[c])
    # ... and its first drain waits for the compute of the first output tile, at the pace the
    # loads within it allow
    drains = zeros()
    drain_paces = []       # per double-buffered output level: its drains' bound and output tiles
    for c in epi:
        pieces = drain_pieces.get(c, out_tiles[c])
        # the steps before it also run at the two-half pace of the output levels below (their
        # drains and reloads, which go on whether or not c drains)
        below = [t for d, t in cycle_at.items() if d > c]
        first = paced_first = np.maximum(np.maximum(busy, bursts((), pieces)), np.max(below, axis=0) if below else 0.0) \
            * drain_lead.get(c, 1.0 / out_tiles[c])
        if c in drain_streamed and load_ports:
            # Outputs that finish late (a reduction loop outermost) need the loads before them: the
            # step that finishes the first needs every stream's tile of that step, so on each port the
            # loads up to one period beyond the steps before it (the first loads are in the prologue).
            start = drain_start[c]
            needed = zeros()
            for name in load_ports:
                on_port = zeros()
                for (lvl, x), t in load_time[name].items():
                    share = _period_share(nest, keep, op.operand(x), lvl)
                    on_port = on_port + t * np.minimum(1.0, start + np.where(np.isfinite(share), share, 1.0))
                needed = np.maximum(needed, on_port)
            # ... and then computes
            step = busy * (drain_lead[c] - start)
            first = np.where(drain_streamed[c], np.maximum(first, needed - sum(pro.values(), zeros()) + step), first)
        bound = np.where(epi_on[c], get(store_unit, c) - epi[c] + first, 0.0)
        if c in drain_run:
            # A streamed drain's pieces leave only where the loops above its driver over other dims
            # (kernel rows and columns, reductions) are at their last position: the last run of them
            # leaves back to back after the tile that starts it (at the same pace as the first), then
            # its pieces one after another; the earlier runs' may catch up in the tiles between.
            run, drv_tiles, piece = drain_run[c]
            last_run = paced_first / drain_lead[c] * (drv_tiles - run + 1) / drv_tiles + (run - 1) * piece
            bound = np.where(drain_streamed[c] & epi_on[c], np.maximum(bound, last_run), bound)
        drains = np.maximum(drains, bound)
        # as the pace of the run's steps, the drains count from the compute before them: a wait for
        # loads before the first finished output is no pace
        drain_paces.append((np.where(epi_on[c], get(store_unit, c) - epi[c] + paced_first, 0.0), pieces))
    overlapped = np.maximum(overlapped, drains)
    bursty = bursts(drain_paces)
    # A parent's drain that holds its read port blocks the reload of partial sums from it into the
    # double-buffered level below, which waits for it: at every output tile of the parent but its
    # last (in the epilogue), the compute stalls for the drain and the reload beyond the period
    # of compute the reload was ahead by (one tile of the level below).
    blocked = zeros()
    for c in ring:
        par = out_chain[out_chain.index(c) - 1]
        reload = held.get(levels[par].port("read"), {}).get((c, op.output.name))
        loads = _stream_loads(nest, keep, counts, c, op.output)
        if par not in drain_holds or reload is None or loads is None:
            continue
        ahead = busy / nest.steps(c) * loads[2]
        wait = drain_holds[par] / out_tiles[par] + reload / np.maximum(tiles_at[c], 1) - ahead
        blocked = blocked + np.where((reload > 0) & (drain_holds[par] > 0),
                                     np.maximum(out_tiles[par] - 1, 0) * np.maximum(wait, 0.0), 0.0)
    port_max = np.max(np.stack(list(ports.values())), axis=0)
    # A port that carries loads finishes its last load before the last tile of its stream computes
    # (the stream on the port that changes tile most often: its period, as steps; the port's
    # drains and the compute side's streaming through it run beside that tile), and a
    # double-buffered level's last drain follows. The first step of that tile computes, the
    # others take the pace of compute and drains (loads are done). (A step: one iteration of the
    # temporal loops above the deepest level that receives tiles, the simulator's unit of compute.)
    if tiles_at and epi:
        steps = nest.steps(max(tiles_at))
        step = compute / steps
        last_drain = np.max(np.stack(list(epi.values())), axis=0)
        for name in load_ports:
            total = sum(load_time[name].values())
            periods = {}
            for c, x in held[name]:
                # a level with no loop of bound above 1 above it gets one tile: no period (the loops of
                # bound 1 a batch keeps for its other rows must not give it one); a streamed tile's
                # pieces recur with its driver's tiles
                share = _period_share(nest, keep, op.operand(x), c)
                periods[(c, x)] = np.where((counts[(c, x)][0] != 0) & np.isfinite(share), share * steps, np.inf)
            # Every stream on the port bounds the run, the rarer ones too: the loads the first step
            # of its last tile needs come first, and only the other streams' loads that fall
            # strictly inside that tile (their share of the run beyond one of their periods) may
            # run beside its steps. No stream with a period: the port's loads, then one step.
            tail = total + step
            finite = {k: (np.isfinite(q), np.where(np.isfinite(q), q, 0.0)) for k, q in periods.items()}
            for key, per in periods.items():
                has = finite[key][0]
                p_s = np.where(has, per, 1.0)
                inside = zeros()
                for k, (fin, q0) in finite.items():
                    if k != key:
                        inside = inside + np.where(fin, load_time[name][k] * np.maximum(p_s - q0, 0.0) / steps, 0.0)
                # drains pace those steps where more than one output tile falls in that last tile
                paced = busy
                for bound, tiles in drain_paces:
                    paced = np.maximum(paced, np.where(tiles * p_s > steps, bound, 0.0))
                tail = np.maximum(tail, np.where(has, total - inside + step + (p_s - 1) * paced / steps, 0.0))
            port_max = np.maximum(port_max, tail + last_drain)
    # A double buffer's drain that holds a port ahead of a single-buffered load (``_single_stall``) adds to
    # the run one after another with the compute and the stalls; every other bound above keeps the
    # stalls without it: those drains are among the ones the two-half cycle and the drain-paced windows
    # count already, and a window's loads hide behind the mean pace of compute only where the stall
    # does not fall (the blocked transitions are the full tiles', whose loads are the largest).
    serial = compute + held_stall
    inner = np.maximum(np.maximum(np.maximum(np.maximum(np.maximum(busy, serial), overlapped), bursty), cycle),
                       chained) + blocked
    latency = np.maximum(inner + edge, port_max)
    parts = {"MAC schedule": macs.astype(np.float64), "compute-side streaming": np.maximum(macs, stream) - macs,
             "pipeline overheads": pipe + zeros(), "single-buffer stalls": held_stall,
             "double-buffered transfers not hidden": inner - serial, "prologue and epilogue": edge,
             "busiest memory port beyond that": latency - inner - edge}
    transfer = {}
    for i, lv in enumerate(levels):
        t = zeros()
        for part in (ports.get(lv.port("read")), ports.get(lv.port("write")),
                     load_unit.get(i), store_unit.get(i)):
            if part is not None:
                t = np.maximum(t, part)
        transfer[lv.name] = t
    # per transition class (temporal slot above the deepest single-buffered level that moves): how often it occurs and
    # its stall, and the stall with the first fill and last drains, for the search's bound over the classes a node has
    # fixed (rule B67 of docs/mapper.md)
    classes = None if stall_count is None else (nest.above(max(on)), stall_count, stall_each, stall)
    return {"latency": latency, "compute_cycles": macs, "stall": held_stall + edge, "pipeline": pipe,
            "setup": setups, "transfer": transfer, "parts": parts, "stall_classes": classes}


def latency_terms(op: Operator, arch: Accelerator, m: Mapping, raw: dict, nest: NestRows | None = None) -> LatencyTerms:
    """The latency of one mapping: ``latency_rows`` on its one row. ``raw`` maps (level index,
    operand name) to Counts; ``nest``: the mapping's one-row nest where the caller has it already."""
    nest = NestRows.of_mapping(op, arch, m) if nest is None else nest
    counts = {k: [np.array([v], dtype=np.int64) for v in c.as_tuple()] for k, c in raw.items()}
    r = latency_rows(nest, m.keep, counts)
    return LatencyTerms(int(r["compute_cycles"][0]), {k: float(v[0]) for k, v in r["transfer"].items()},
                        float(r["stall"][0]), float(r["latency"][0]), float(r["pipeline"][0]),
                        float(r["setup"][0]), tuple((k, float(v[0])) for k, v in r["parts"].items()))
