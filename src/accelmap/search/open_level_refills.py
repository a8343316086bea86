"""The tile shapes an open level can hold, and rule B27 of docs/mapper.md: their least refills stall compute.

A level c none of whose loops (nor any loop below it) a node has fixed yet holds some tile whose extents divide
each dim (perfect factors) and fit c's capacity (its partition per operand class, double buffering counted). The
temporal loops above c then run ``tiles_above = prod(size / extent)`` instance-iterations of it, and in each of rule
B7's cases (the innermost temporal loop above c runs over dim d) every plain user of d enters c a whole tile at every
one of them. Rules B8 and B35 (``open_level_energy``) charge the least energy of those refills over every shape and
case. Rule B27 charges the least time they take where compute waits for them:

A level that never overlaps its loads with compute (``bounds.serial_fill_levels``: single-buffered, not double-
buffered when two tiles fit, not streaming a tile kept for the whole run) stalls compute while it loads, its loads
one after another (rule B9): the stall is at least, summed over the operands it receives, each operand's elements
entering c over c's write port and its parent-side elements (the entering ones over the most the fan-outs between
parent and c can merge) over the parent's read port, both spread over all instances. For the output the loads are
its reloads (B1's ``down``), and its stores from c followed by its reloads run in sequence too (rule B16): drains
over c's read port, the parent's updates over its write port. Each of those times is non-decreasing in the counts,
and B7's count (a whole tile at every instance-iteration, for the plain users of the case's dim; every element once
for the others) is a lower bound of the counts of every mapping whose tile at c has that shape and whose innermost
temporal loop above c runs over that dim. Every mapping with perfect factors has some shape that fits, and either
some dim has a temporal loop above c (then one is innermost) or none has (then every operand gets its footprint
count). So the least of ``max(B9's sum at c, the output's B16 chain at c)`` over every fitting shape and every case
possible for it bounds the stall of every mapping below a node where c is open; the node's stall bound (the
largest of B9, B12 and B16 over its own counts) takes the larger of the two. It holds for every order, bypass
choice of the levels other than c (the kept operands and their parents are part of the cache key) and unrolling
that the context allows (the merges are the most its fan-outs give). Not with imperfect tiles: a partial tile can
fit where no dividing one does (rule I3), so the rule is off where ``whole_tiles`` is false (rule B53,
``ruby_open_refills``, counts those tiles' refills more weakly).

Why it matters: on eyeriss_like every level is single-buffered and the register files hold 12 input, 224 weight
and 24 partial-sum words; at the root of an unrolling's search (no loop fixed) the latency bound counted every
operand's footprint once, while any tile that fits the register files refetches one of the three operands at
least ``MACs / (a few dozen)`` times over the global buffer's 9-word port or DRAM's 4-word port.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from accelmap.cost.nest_rows import fewest_bits
from accelmap.mapping.sampling import divisors
from accelmap.search.deadline import check as check_deadline
from accelmap.search.open_level_windows import window_shares
from accelmap.workload.index_sets import index_size
from accelmap.workload.operator import Operand

# Tile shapes above which rules B8 and B27 are not computed for a level (they then add nothing; still bounds).
OPEN_FLOOR_SHAPES = 200_000


@dataclass(frozen=True)
class OpenShapes:
    """Every tile shape (extents dividing each dim) that fits an open level c, as rows."""
    grid: np.ndarray                  # rows x dims: c's tile extents
    tiles: dict[str, np.ndarray]      # per operand, its tile at c (elements) per row
    tiles_above: np.ndarray           # per row, the instance-iterations above c (every size over its extent)
    kept: tuple[Operand, ...]         # operands c receives from a parent (not loose)


_SHAPES: dict[tuple, OpenShapes | None] = {}


def open_level_shapes(ctx, c: int) -> OpenShapes | None:
    """``level_shapes`` cached by what it depends on (rules B8, B27, B35 and B36 all read them; a few hundred
    entries at most: they hold arrays of up to ``OPEN_FLOOR_SHAPES`` rows)."""
    if len(_SHAPES) > 256:
        _SHAPES.clear()
    return level_cached(_SHAPES, ctx, c, level_shapes)


def refilled_operands(ctx, c: int) -> tuple[Operand, ...]:
    """The operands level ``c`` receives from a parent (not loose) under ``ctx``'s bypass choice; none where c has no
    capacity to bound their tiles by (the refill rules then add nothing)."""
    lv = ctx.arch.levels[c]
    if lv.capacity_bits is None and not lv.partitions:
        return ()
    return tuple(X for X in ctx.op.operands if c in ctx.chains[X.name] and ctx.chains[X.name][0] != c
                 and X.name not in ctx.loose)


def level_shapes(ctx, c: int) -> OpenShapes | None:
    """The tile shapes that fit level ``c`` under ``ctx``'s bypass choice; None when c receives nothing, has no
    capacity, has more shapes than ``OPEN_FLOOR_SHAPES`` or none fits (the rules then add nothing)."""
    op = ctx.op
    kept = refilled_operands(ctx, c)
    if not kept:
        return None
    dims = op.dim_names
    divs = [divisors(op.sizes[d]) for d in dims]
    if math.prod(len(v) for v in divs) > OPEN_FLOOR_SHAPES:
        return None
    check_deadline(ctx)
    grid = np.array(list(itertools.product(*divs)), dtype=np.int64).reshape(-1, len(dims))
    sizes = np.array([op.sizes[d] for d in dims], dtype=np.int64)
    # Rule B28: a fan-out fixed in advance unrolls exactly its bounds, so c's tile holds the unrolling of every fixed
    # fan-out at or below c, and fits the unrolling of every fixed fan-out above c into what it leaves.
    inside = np.array([math.prod(cap.get(d, 1) for cap in ctx.spatial_cap[c:] if cap is not None) for d in dims])
    outside = np.array([math.prod(cap.get(d, 1) for cap in ctx.spatial_cap[:c] if cap is not None) for d in dims])
    grid = grid[((grid % inside == 0) & (sizes % (grid * outside) == 0)).all(axis=1)]
    if not len(grid):
        return None
    tiles, fits = tiles_that_fit(ctx, c, grid)
    if not fits.any():
        return None
    tiles_above = np.prod((sizes // grid).astype(np.float64), axis=1)
    return OpenShapes(grid[fits], {n: t[fits] for n, t in tiles.items()}, tiles_above[fits], kept)


def tiles_that_fit(ctx, c: int, grid: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Per operand its tile at level c (elements) for each row of tile extents ``grid`` (rows x dims, each extent at
    most its dim), and the rows whose tiles fit c (its partition per operand class, or its capacity; double buffering
    counted, finished outputs at their fewest bits): the capacity check of ``validate.level_usage`` with every
    operand at its fewest bits, so no tile the model accepts is left out."""
    op, arch, keep = ctx.op, ctx.arch, ctx.keep
    lv = arch.levels[c]
    dims = op.dim_names
    col = {d: grid[:, i] for i, d in enumerate(dims)}

    def tile(X: Operand) -> np.ndarray:
        out = np.ones(len(grid), dtype=np.float64)
        for ix in X.indices:
            names = [d for d, _ in ix.terms]
            if len(names) == 1:
                out *= col[names[0]]
                continue
            combos, inverse = np.unique(np.stack([col[d] for d in names], axis=1), axis=0, return_inverse=True)
            sz = np.array([index_size(ix, dict(zip(names, (int(v) for v in row), strict=True))) for row in combos])
            out *= sz[inverse.reshape(-1)]
        return out

    check_deadline(ctx)
    tiles = {X.name: tile(X) for X in op.operands}
    mult = 2 if lv.double_buffered else 1
    # finished outputs may be stored at the output stage's precision (validate.finished_output_levels)
    use = {X.name: tiles[X.name] * fewest_bits(X, arch) * mult for X in op.operands if X.name in keep[c]}
    if lv.partitions:
        fits = np.ones(len(grid), dtype=bool)
        for cls in {op.operand(n).cls for n in use}:
            fits &= sum(u for n, u in use.items() if op.operand(n).cls == cls) <= lv.partition_bits(cls)
    else:
        fits = sum(use.values(), np.zeros(len(grid))) <= lv.capacity_bits
    return tiles, fits


def innermost_cases(ctx, c: int, grid: np.ndarray) -> tuple[list[tuple[str, np.ndarray]], np.ndarray]:
    """Rule B7's cases above an open level c per tile shape: (dim d, rows where a temporal loop over d may be
    innermost above c: some of d is left above c that the fan-outs above c cannot all unroll, or may not when
    some of them is open), and the rows where some dim is forced to keep a temporal loop above c (elsewhere the
    case with no temporal loop above c is possible too)."""
    op = ctx.op
    sizes = np.array([op.sizes[d] for d in op.dim_names], dtype=np.int64)
    caps = ctx.spatial_cap[:c]
    exact = all(cap is not None for cap in caps)
    forced = np.zeros(len(grid), dtype=bool)
    out = []
    for i, d in enumerate(op.dim_names):
        left = sizes[i] // grid[:, i]
        most = math.prod(ctx.fan_sizes[l] if cap is None else cap.get(d, 1) for l, cap in enumerate(caps))
        out.append((d, (left > 1) & ((left > most) if exact else True)))
        forced |= left > most
    return out, forced


_OPEN_STALLS: dict[tuple, float] = {}


def open_levels_stall(ctx, level: int) -> float:
    """Rule B27 at a node whose levels >= ``level`` are fixed: the largest, over the open single-buffered levels c
    (1 <= c < level), of c's least stall (``open_level_stall``); and the terms of several open levels together, rules
    B41 (loads queued on one port), B42 (the output's stores in sequence) and B43 (an input's load after its load into
    the parent). With imperfect tiles rule B53 (``ruby_open_refills``) instead, each level alone."""
    if not ctx.whole_tiles:
        from accelmap.search.ruby_open_refills import ruby_open_levels_stall
        return ruby_open_levels_stall(ctx, level)
    # (imported here: those rules' modules read this one's shapes and cases)
    from accelmap.search.open_load_chain import open_load_chain
    from accelmap.search.open_port_queue import open_port_queue
    from accelmap.search.open_store_chain import open_store_chain

    own = max((open_level_stall(ctx, c) for c in range(1, level) if c in ctx.serial_fill), default=0.0)
    return max(own, open_port_queue(ctx, level), open_store_chain(ctx, level), open_load_chain(ctx, level))


def open_level_stall(ctx, c: int) -> float:
    """Rule B27 for one open single-buffered level c: the least, over every tile shape that fits it and every case
    of the innermost temporal loop above it, of the stall its loads (and the output's stores and reloads) force.
    Cached per context and globally per what it depends on."""
    mine = ctx.open_stall
    got = mine.get(c)
    if got is None:
        got = mine[c] = level_cached(_OPEN_STALLS, ctx, c, _least_stall)
    return got


def level_cached(store: dict[tuple, Any], ctx, c: int, compute) -> Any:
    """``compute(ctx, c)`` cached in ``store`` by what rules B8 and B27 depend on (so that bypass choices and
    unrollings that agree on it share it): the operator, the accelerator, c's kept operands with their chains (their
    parents, whether they are loose) and merges, and every fan-out's fixed unrolling (rule B28)."""
    key = (ctx.op, ctx.arch, c, ctx.keep[c], ctx.loose,
           tuple((X.name, tuple(ctx.chains[X.name]), tuple(ctx.merge_cap[X.name])) for X in ctx.op.operands
                 if c in ctx.chains[X.name]),
           tuple(None if cap is None else tuple(sorted(cap.items())) for cap in ctx.spatial_cap))
    got = store.get(key)
    if got is None:
        if len(store) > 100_000:
            store.clear()
        got = store[key] = compute(ctx, c)
    return got


def _least_stall(ctx, c: int) -> float:
    return least_over_cases(ctx, c, level_stall)


def least_over_cases(ctx, c: int, term) -> float:
    """The least of ``term(ctx, c, shapes, counts)`` (an array over tile shapes) over every tile shape that fits open
    level c and every case of ``refill_cases`` possible for it; 0 where c has no shape to bound."""
    shapes = open_level_shapes(ctx, c)
    if shapes is None:
        return 0.0
    least = np.full(len(shapes.grid), np.inf)
    for rows, counts in refill_cases(ctx, c, shapes):
        least = np.where(rows, np.minimum(least, term(ctx, c, shapes, counts)), least)
    # (a row where no case is possible and some dim is forced cannot occur: forced implies possible)
    return float(least.min()) if np.isfinite(least).all() else 0.0


def level_stall(ctx, c: int, shapes: OpenShapes, counts: dict[str, Any]) -> np.ndarray:
    """Rule B27's stall at c per shape for the operands' entering counts ``counts``: the larger of B9's loads in
    sequence and the output's B16 chain."""
    n = len(shapes.grid)
    serial: Any = np.zeros(n)
    chained: Any = np.zeros(n)
    for X in shapes.kept:
        chain = ctx.chains[X.name]
        load, stores = _load_and_chain(ctx, X, chain[chain.index(c) - 1], c, counts[X.name])
        serial = serial + load
        chained = np.maximum(chained, stores)
    return np.maximum(serial, chained)


def refill_cases(ctx, c: int, shapes: OpenShapes):
    """Every case of the loops above an open level c, per tile shape: yields (rows where the case is possible,
    {operand c receives: the elements entering c per row}). Every mapping with perfect factors whose tile at c has
    a row's shape is in some case possible for that row, and its counts at c are at least the case's: rule B7's
    innermost dim d (its plain users get a whole tile at each of the instance-iterations above c) with rule B15's
    orders of the others (with every fan-out above c fixed: the k-th a whole tile at S x the temporal iterations
    above c of the plain dims of the first k), or, where no dim is forced to keep a temporal loop above c, no
    temporal loop above c at all (every operand its footprint)."""
    op = ctx.op
    grid, kept = shapes.grid, shapes.kept
    base = {X.name: float(max(ctx.footprint[X.name], ctx.n_out) if X.is_output else ctx.footprint[X.name])
            for X in kept}

    def entering(X: Operand, runs: Any) -> Any:
        # X enters c a whole tile at each of ``runs`` instance-iterations above c, and every element at least once.
        return np.maximum(runs * shapes.tiles[X.name], base[X.name])

    caps = ctx.spatial_cap[:c]
    exact = all(cap is not None for cap in caps)
    dims = op.dim_names
    outside = np.array([math.prod(cap.get(d, 1) for cap in caps if cap is not None) for d in dims])
    sizes = np.array([op.sizes[d] for d in dims], dtype=np.int64)
    T = (sizes // grid) // outside if exact else None
    instances = float(np.prod(outside)) if exact else 1.0

    def orders(users: frozenset[str]):
        others = [X.name for X in kept if X.name not in users]
        if T is None:
            yield {name: base[name] for name in others}
            return
        for perm in itertools.permutations(others):
            seen: set[str] = set()
            got = {}
            for name in perm:
                seen |= ctx.plain[name]
                own = np.prod(T[:, [i for i, d in enumerate(dims) if d in ctx.plain[name]]], axis=1)
                runs = np.where(own > 1, instances * np.prod(T[:, [i for i, d in enumerate(dims) if d in seen]],
                                                             axis=1), instances)
                got[name] = entering(op.operand(name), runs)
            yield got

    cases, forced = innermost_cases(ctx, c, grid)
    yield ~forced, dict(base)
    for d, possible in cases:
        if not possible.any():
            continue
        check_deadline(ctx)     # each case costs a pass over up to OPEN_FLOOR_SHAPES rows per order
        users = frozenset(X.name for X in kept if d in ctx.plain[X.name])
        every = {name: entering(op.operand(name), shapes.tiles_above) for name in users}
        # Rule B37: the sliding-window users of d bring a share of their tile at every instance-iteration above c.
        shares = window_shares(ctx, d, grid, T, [X.name for X in kept if X.name not in users])
        for rest in orders(users):
            check_deadline(ctx)
            for name, share in shares.items():
                rest[name] = np.maximum(rest[name], shapes.tiles_above * shapes.tiles[name] * share)
            yield possible, {**every, **rest}


def _load_and_chain(ctx, X: Operand, p: int, c: int, member: Any) -> tuple[Any, Any]:
    """For ``member`` elements of X entering c from its parent p: rule B9's load time at c (the larger of the
    elements over c's write port and the parent-side elements over p's read port, spread over all instances), and
    for the output rule B16's chain at c (its stores from c, then its reloads); with B1's group counts, divided by
    the most the fan-outs between p and c can merge."""
    load, _, store = load_sides(ctx, X, p, c, member)
    return load, (store + load if X.is_output else 0.0)


def load_sides(ctx, X: Operand, p: int, c: int, member: Any) -> tuple[Any, Any, Any]:
    """``_load_and_chain``'s parts for ``member`` elements of X entering c from p: (rule B9's load time at c, its
    parent side alone (the elements leaving p over p's read port, spread over p's instances), the output's stores
    from c (0 for an input))."""
    arch = ctx.arch
    P, C = arch.levels[p], arch.levels[c]
    w = fewest_bits(X, arch)
    merge = math.prod(ctx.merge_cap[X.name][l] for l in range(p, c))

    def port(elements: Any, level, bw: float | None) -> Any:
        return 0.0 if bw is None else elements * w / level.instances / bw

    if not X.is_output:
        group = np.maximum(member / merge, ctx.footprint[X.name])
        parent = port(group, P, P.read_bw_bits)
        return np.maximum(port(member, C, C.write_bw_bits), parent), parent, 0.0
    n = ctx.n_out
    lineage = math.prod(ctx.merge_cap[X.name][l] for l in range(0, p))
    group = np.maximum(member / merge, n)
    down = np.maximum(0.0, group - n * (lineage - ctx.init_read))
    parent = port(down, P, P.read_bw_bits)
    load = np.maximum(port(down, C, C.write_bw_bits), parent)
    store = np.maximum(port(member, C, C.read_bw_bits), port(group, P, P.write_bw_bits))
    return load, parent, store

