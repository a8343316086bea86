"""Rule B3's bound for every tiling of one level at once, NumPy over the tilings.

The branch and bound bounds each tiling of a level over every order of that level before enumerating its
orders (``BoundContext.lower_bound`` with ``free_orders``). The tilings of one node share everything but the
level's temporal bounds: the fixed levels below, the level's spatial loops (fixed per unrolling in the exact
search), the tile at every inner boundary. So the bound of all of them is the same arithmetic over rows of
temporal bounds. ``open_bounds_rows`` is that arithmetic; it gives exactly the values of the scalar bound
(the same operations in the same order; ``tests/test_search_node_bounds.py`` asserts equality on random nodes)
for perfect nests, and returns None where it does not apply (the caller then uses the scalar bound).
"""

from __future__ import annotations

import itertools
import math
from itertools import pairwise
from typing import Any

import numpy as np

from accelmap.cost.nest_rows import fewest_bits
from accelmap.mapping.loopnest import Loop
from accelmap.search.bounds import BoundContext, _tile_and_entering, fixed_spatial_lineage, fixed_spatial_merge
from accelmap.search.burst_bound import burst_cycles, burst_node_classes
from accelmap.search.case_pairs import CaseBoundRows
from accelmap.search.drain_after_prologue import drain_lead_terms, drains_after_prologue_cycles
from accelmap.search.first_fill import first_block_cycles, last_drain_cycles
from accelmap.search.last_step import last_step_cycles_rows
from accelmap.search.merge_ceiling import merge_room
from accelmap.search.open_level_refills import open_levels_stall
from accelmap.search.padded_mac_reads import mac_read_groups
from accelmap.search.pinned_refill import boundary_charge, open_levels_energy
from accelmap.search.window_runs import first_tile_share_rows, window_users
from accelmap.workload.index_sets import axis_size
from accelmap.workload.operator import Operand


def tile_rows(X: Operand, ext: np.ndarray, dims: tuple[str, ...]) -> np.ndarray:
    """``tile_size`` of X per row of extents (rows x dims, int64): plain axes multiply, compound ones (sliding
    windows) are sized once per distinct combination of their extents."""
    col = {d: i for i, d in enumerate(dims)}
    out = np.ones(len(ext), dtype=np.int64)
    for ix in X.indices:
        names = [d for d, _ in ix.terms]
        if len(names) == 1:
            out = out * np.maximum(ext[:, col[names[0]]], 0)
            continue
        coeffs = tuple(c for _, c in ix.terms)
        combos, inverse = np.unique(ext[:, [col[d] for d in names]], axis=0, return_inverse=True)
        sz = np.array([axis_size(coeffs, tuple(int(v) for v in row)) for row in combos], dtype=np.int64)
        out = out * sz[inverse.reshape(-1)]
    return out


def open_bounds_rows(ctx: BoundContext, shared: tuple[Loop, ...], free: dict[int, np.ndarray], level: int,
                     rem: np.ndarray, innermost: str | None = None, *, keep: dict | None = None,
                     reuse: tuple[dict, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """Per row, ``ctx.lower_bound(fixed, level, rem_row, free_orders=frozenset(free), innermost=...)`` where
    ``fixed`` is the row's temporal loops at the free levels (``free[f]``: rows x dims bounds at level f, 1 for no
    loop) plus ``shared`` (every other fixed loop, the same for all rows, no temporal loop at a free level), and
    ``innermost`` the dim of the loop assumed innermost at the innermost free level (rule B4). ``rem``: rows x dims
    left below ``level``, the lowest fixed level. Perfect nests only. None when a boundary's count would need the
    nest per row (a shared temporal loop above a boundary whose tile a free level shapes; the exact search never
    asks for one).

    ``keep``: a dict that receives each operand's traffic per case (and without runs) of this call, by (operand, case
    key), for ``reuse`` by a later call of rule B4 over some of its rows: ``reuse`` = (that dict, the rows, as indices
    of the earlier call's). An operand that does not use ``innermost`` as a plain index has the same counts with or
    without it, so its traffic is the earlier call's on those rows (every term is computed row by row; only an entry
    with rule B23's pinned terms, whose presence depends on the rows together, is computed again)."""
    op, arch, nlev = ctx.op, ctx.arch, ctx.nlev
    dims = op.dim_names
    n = len(rem)
    sizes = np.array([op.sizes[d] for d in dims], dtype=np.int64)
    levels = sorted(free)
    top_free = levels[-1]
    prod_r = np.prod(rem, axis=1)
    full = prod_r
    spatial = [l for l in shared if l.spatial]

    ext_cache: dict[int, np.ndarray] = {}

    def inner_ext(c: int) -> np.ndarray:
        got = ext_cache.get(c)
        if got is None:
            base = np.ones(len(dims), dtype=np.int64)
            for l in shared:
                if l.level >= c:
                    base[dims.index(l.dim)] *= l.bound
            got = np.broadcast_to(base, (n, len(dims))).copy()
            for f in levels:
                if f >= c:
                    got *= free[f]
            got = ext_cache[c] = np.minimum(got, sizes)
        return got

    tiles: dict[tuple[str, int], np.ndarray] = {}

    def tile_at(X: Operand, c: int) -> np.ndarray:
        t = tiles.get((X.name, c))
        if t is None:
            t = tiles[(X.name, c)] = tile_rows(X, inner_ext(c), dims)
        return t

    def instances_below(c: int) -> int:
        return math.prod(l.bound for l in spatial if l.level < c)

    own_prod = {f: np.prod(free[f], axis=1) for f in levels}
    entered: dict[tuple[str, int], np.ndarray] = {}

    def entering_at(X: Operand, c: int) -> np.ndarray | None:
        got = entered.get((X.name, c))
        if got is not None:
            return got
        inst = instances_below(c)
        plain = ctx.plain[X.name]
        if c <= top_free:
            # A free level shapes the tile at c: the count of the deeper nest is its first tile per instance only
            # when no shared temporal loop runs above c.
            if any(not l.spatial and l.bound > 1 and l.level < c for l in shared):
                return None
            tile = tile_at(X, c)
            deeper = inst * tile
        else:
            t, d = _tile_and_entering(op, shared, X.name, c)
            tile, deeper = np.full(n, t, dtype=np.int64), np.full(n, d, dtype=np.int64)
        every = any(not l.spatial and l.bound > 1 and l.level not in free and l.level < c and l.dim in plain
                    for l in shared) or (innermost is not None and top_free < c and innermost in plain)
        sel = [i for i, d in enumerate(dims) if every or d in plain]
        count = np.ones(n, dtype=np.int64)
        outer = np.ones(n, dtype=np.int64)
        for f in levels:
            if f >= c:
                break
            count = count + outer * (np.prod(free[f][:, sel], axis=1) - 1)
            outer = outer * own_prod[f]
        got = entered[(X.name, c)] = inst * tile * count + outer * (deeper - inst * tile)
        return got

    # Rule B60 where tiles may be partial (as ``BoundContext.lower_bound``).
    clip = None if ctx.whole_tiles else ctx.op.sizes

    def unfixed_merge(X: Operand, lo: int, hi: int) -> np.ndarray | int:
        cap: float = math.prod(ctx.merge_cap[X.name][l] for l in range(lo, min(hi, level)))
        if cap == 1:
            return 1
        outside = [i for i, d in enumerate(dims) if d not in X.dims]
        if clip is not None:    # rule B60
            cap = min(cap, merge_room(ctx, X, lo, hi, level, spatial, fixed_merge(X, lo, hi)))
        return np.minimum(cap, np.prod(rem[:, outside], axis=1))

    def fixed_merge(X: Operand, lo: int, hi: int) -> int:
        return fixed_spatial_merge(arch, spatial, X, lo, hi, clip)

    def lineage_max(X: Operand, p: int):
        return fixed_spatial_lineage(spatial, X, p, clip) * unfixed_merge(X, 0, p)

    inner_first = min((l.level for l in shared if not l.spatial and l.bound > 1), default=nlev)
    first_temporal = np.full(n, inner_first, dtype=np.int64)
    for f in reversed(levels):
        first_temporal = np.where((free[f] > 1).any(axis=1), np.minimum(first_temporal, f), first_temporal)

    shares: dict[tuple[str, str, int], np.ndarray] = {}      # rule B18's share per (operand, dim, boundary)

    def operand_traffic(X: Operand, runs: np.ndarray | None, window: str | None = None):
        if X.name in ctx.loose:      # kept at a shared level: no terms (``BoundContext.loose``)
            return 0.0, [], {}, [], {}, {}, 0.0, {}

        def first_tiles(c: int, t: np.ndarray, fi: int) -> np.ndarray:
            # Rules B7 and B15: ``runs`` runs start with a whole new tile; rule B18: in its case every run brings
            # at least a share of one (as ``BoundContext.lower_bound``).
            assert runs is not None
            first = runs * fi * t
            if window is not None:
                share = shares.get((X.name, window, c))
                if share is None:
                    share = shares[(X.name, window, c)] = first_tile_share_rows(
                        X, ctx.windows[(X.name, window)], window, shared, free, dims, level, c, n)
                first = np.maximum(first, full * fi * t * share)
            return first

        chain = ctx.chains[X.name]
        fp = ctx.footprint[X.name]
        floor = ctx.n_out if X.is_output else fp
        per: list[tuple[int, str, Any]] = []
        per_lat: list[tuple[int, str, Any]] = []     # rule B17's counts for the latency terms (B8 has the energy)
        loads = []
        pinned_extra: dict[int, np.ndarray] = {}     # rule B23 (as ``BoundContext.lower_bound``)
        for p, c in pairwise(chain):
            if c > level:
                t = tile_at(X, c)
                fi = instances_below(c)
                part = entering_at(X, c)
                if part is None:
                    return None
                if runs is None:
                    member = full * (part - fi * t) + fi * t
                else:
                    first = first_tiles(c, t, fi)
                    member = full * (part - fi * t) + first
                    if level <= c:
                        member = np.where(c <= first_temporal, first, member)
            elif runs is not None and level <= c:
                t = tile_at(X, c)
                member = np.where(c <= first_temporal, first_tiles(c, t, instances_below(c)), fp)
            else:
                member = np.full(n, fp, dtype=np.int64)
            member = np.maximum(member, floor)
            # Rule B17 (as ``BoundContext.lower_bound``): the latency terms' count at an open level that holds no more
            # than X's fixed tile, in the cases where X gets every run.
            counted = member
            pinned = None
            if runs is not None and pinned_steps is not None and c < level:
                t = tile_at(X, c)
                pinned = (runs == full) & ctx.holds_only(X, c, t)
                if np.any(pinned):
                    counted = np.where(pinned, np.maximum(pinned_steps * ctx.open_instances_above(c) * t, floor),
                                       member)
            charged = []
            for counts, m in ((per, member), (per_lat, counted)):
                group = np.maximum(m / (fixed_merge(X, p, c) * unfixed_merge(X, p, c)),
                                   fp if not X.is_output else 0)
                if X.is_output:
                    group = np.maximum(group, ctx.n_out)
                    down = np.maximum(0.0, group - ctx.n_out * (lineage_max(X, p) - ctx.init_read))
                    moved = [(c, "fills", down), (p, "reads", down), (c, "drains", m), (p, "updates", group)]
                    into, out = down, down
                else:
                    moved = [(c, "fills", m), (p, "reads", group)]
                    into, out = m, group
                counts += moved
                if pinned is not None and np.any(pinned):
                    charged.append(boundary_charge(ctx, X, c, {(lv, kind): v for lv, kind, v in moved}))
            if charged:
                pinned_extra[c] = np.maximum(0.0, charged[1] - charged[0])
            loads.append((p, c, into, out))
        last = chain[-1]
        merge = fixed_merge(X, last, nlev) * unfixed_merge(X, last, nlev)
        g = op.macs / merge
        rounds = mac_read_groups(ctx, spatial, X, last, level)      # rule B57 (as ``BoundContext.lower_bound``)
        if rounds is not None:
            g = np.maximum(g, rounds)
        if X.is_output:
            mac = [(last, "updates", 0 + g),
                   (last, "reads", 0 + np.maximum(0.0, g - ctx.n_out * (lineage_max(X, last) - ctx.init_read)))]
        else:
            mac = [(last, "reads", 0 + g)]
        per += mac
        per_lat += mac
        energy = np.zeros(n)
        w = fewest_bits(X, arch)
        for lv, kind, v in per:
            L = arch.levels[lv]
            s = ctx.scale[(lv, X.name)]
            energy = energy + v * (L.read_energy_pj if kind in ("reads", "drains") else L.write_energy_pj) * s
        bits = [(lv, kind, v * w) for lv, kind, v in per_lat]
        energy = energy + ctx.network_energy(X, {(lv, kind): v for lv, kind, v in per})
        serial = {}
        for p, c, into, out in loads:
            if c in ctx.serial_fill:
                P, C = arch.levels[p], arch.levels[c]
                serial[c] = np.maximum(0.0 if C.write_bw_bits is None else into * w / C.instances / C.write_bw_bits,
                                       0.0 if P.read_bw_bits is None else out * w / P.instances / P.read_bw_bits)
        queued, on_port = ctx.load_port_cycles(loads, w)
        served = [(last, True, per[-1][2] * w)]
        if X.is_output:
            served.append((last, False, per[-2][2] * w))
        lat_counts = {(lv, kind): v for lv, kind, v in per_lat}
        first_fill = first_block_cycles(op, ctx.first_fill_terms, ctx.first_queue_terms if ctx.whole_tiles else (),
                                        tile_at) if X.is_output else 0.0     # rules B56, B71
        return (energy, bits, serial, served, queued, on_port,
                ctx.chain_stall_cycles(X, lat_counts, serial, w, first_fill), pinned_extra)

    spatial_fixed = math.prod(l.bound for l in spatial)
    open_fans = math.prod(ctx.fan_sizes[l] if cap is None else math.prod(cap.values())
                          for l, cap in enumerate(ctx.spatial_cap[:level]))
    spatial_max = spatial_fixed * np.minimum(prod_r, open_fans)
    compute = np.ceil(np.ceil(op.macs / spatial_max) / arch.compute.macs_per_cycle)
    alternatives = _alternative_masks(ctx, rem, level)
    # Rule B17: the unfixed temporal iterations per row, when every fan-out is fixed (None: the rule is off).
    T_left, fans_fixed = _temporal_left_rows(ctx, rem, level)
    pinned_steps = np.prod(T_left, axis=1) if fans_fixed and ctx.whole_tiles else None
    def reused(name: str, key: Any):
        if reuse is None or innermost in ctx.plain[name]:
            return None
        prior = reuse[0].get((name, key))
        return None if prior is None or prior[7] else _traffic_rows(prior, reuse[1])

    def operand_traffic_of(name: str, key: Any, runs: np.ndarray | None, window: str | None):
        got = reused(name, key)
        if got is None:
            got = operand_traffic(op.operand(name), runs, window)
        if keep is not None and got is not None:
            keep[(name, key)] = got
        return got

    base = {}
    for X in op.operands:
        got = operand_traffic_of(X.name, "base", None, None)
        if got is None:
            return None
        base[X.name] = got
    # Rules B7 and B15 (``BoundContext.run_alternatives``, per row): per case and order of the other operands, the
    # runs of the fixed nest that start with a new first tile, per operand.
    T, exact = _temporal_left_rows(ctx, rem, level)
    S = prod_r // np.prod(T, axis=1) if exact else np.ones(n, dtype=np.int64)
    traffic: dict[tuple[str, frozenset[str] | None], tuple] = {}
    cases = []
    for (users, windows), mask in alternatives.items():
        others = [X.name for X in op.operands if X.name not in users]
        for perm in itertools.permutations(others):
            keys: dict[str, Any] = dict.fromkeys(users)
            seen: frozenset[str] = frozenset()
            for name in perm:
                seen = seen | ctx.plain[name]
                keys[name] = seen
            for name, d in windows:       # rule B18's case for this operand: (dims dealt, the window's dim)
                keys[name] = (keys[name], d)
            for name, key in keys.items():
                if (name, key) in traffic:
                    continue
                dealt, window = key if isinstance(key, tuple) else (key, None)
                if dealt is None:
                    runs = prod_r
                else:
                    own = np.prod(T[:, [i for i, d in enumerate(dims) if d in ctx.plain[name]]], axis=1)
                    runs = np.where(own > 1, S * np.prod(T[:, [i for i, d in enumerate(dims) if d in dealt]], axis=1),
                                    S)
                got = operand_traffic_of(name, key, runs, window)
                if got is None:
                    return None
                traffic[(name, key)] = got
            cases.append((keys, mask))
    least = CaseBoundRows(ctx.objective, n)      # rule B22
    # Rule B59 (as ``BoundContext.lower_bound``).
    last_drains = last_drain_cycles(op, ctx.last_drain_terms, tile_at) + np.zeros(n) if ctx.whole_tiles else np.zeros(n)
    edge_terms = ctx.edge_cycle_terms(tile_at, level)
    edge, drain = ctx.edge_cycles(tile_at, level, edge_terms)
    edge, drain = edge + np.zeros(n), drain + np.zeros(n)
    leads = drain_lead_terms(ctx, edge_terms,      # rule B73 (as ``BoundContext.lower_bound``)
                             lambda c: last_step_cycles_rows(shared, free, c, arch.compute.macs_per_cycle, n))
    busy = np.maximum(compute, ctx.stream_cycles([t for X in op.operands for t in base[X.name][3]]))
    floors = {c: ctx.open_level_floor(c) for c in range(1, level)}
    open_stall = open_levels_stall(ctx, level)      # rule B27 (as ``BoundContext.lower_bound``)
    # Rule B19 (as ``BoundContext.lower_bound``).
    step = last_step_cycles_rows(shared, free, ctx.last_step_level, arch.compute.macs_per_cycle, n) \
        if ctx.last_step_level is not None and ctx.whole_tiles else np.zeros(n)
    # Rule B29 (as ``BoundContext.lower_bound``): the free levels' temporal loops are outside the ordered ones.
    bursts, outside = burst_node_classes(ctx, shared, level, frozenset(free), 1) if pinned_steps is not None \
        else ([], 0)
    if bursts:
        assert pinned_steps is not None
        outside = pinned_steps
        for f in levels:
            outside = outside * own_prod[f]
    for keys, mask in cases:
        # Rule B23 (as ``BoundContext.lower_bound``).
        energy = op.macs * arch.compute.mac_energy_pj + np.zeros(n) + open_levels_energy(
            floors, [traffic[(X.name, keys[X.name])][7] for X in op.operands])
        port: dict[tuple[int, bool], np.ndarray] = {}
        serial = {lv: np.zeros(n) for lv in ctx.serial_fill}
        port_queue: dict[int, np.ndarray] = {}
        port_loads: dict[int, np.ndarray] = {}
        chained = np.zeros(n)
        led = np.zeros(n)
        for X in op.operands:
            e, bits, loads, _, queued, on_port, own, _ = traffic[(X.name, keys[X.name])]
            if leads and X.is_output:
                led = np.maximum(led, drains_after_prologue_cycles(arch, leads, bits))     # rule B73
            chained = np.maximum(chained, own)
            energy = energy + e
            for lv, kind, b in bits:
                key = (lv, kind in ("reads", "drains"))
                port[key] = port.get(key, 0.0) + b
            for lv, t in loads.items():
                serial[lv] = serial[lv] + t
            for lv, t in queued.items():
                port_queue[lv] = port_queue.get(lv, 0.0) + t
            for lv, t in on_port.items():
                port_loads[lv] = port_loads.get(lv, 0.0) + t
        stall = np.maximum.reduce(list(serial.values())) if serial else np.zeros(n)
        if port_queue:
            stall = np.maximum(stall, np.maximum.reduce(list(port_queue.values())))
        stall = stall + last_drains     # rule B59 (as ``BoundContext.lower_bound``)
        stall = np.maximum(np.maximum(stall, chained), open_stall)       # rules B16, B27 (as ``BoundContext.lower_bound``)
        transfer = np.zeros(n)
        for (lv, is_read), b in port.items():
            L = arch.levels[lv]
            bw = L.read_bw_bits if is_read else L.write_bw_bits
            if bw is not None:
                transfer = np.maximum(transfer, b / L.instances / bw)
        # Rule B13 (as ``BoundContext.lower_bound``).
        tail = (np.maximum.reduce(list(port_loads.values())) if port_loads else np.zeros(n)) + drain + step
        inner = burst_cycles(bursts, outside, busy + stall) if bursts else busy + stall
        least.add(energy, np.maximum(np.maximum(np.maximum(inner + edge, transfer), tail), led), mask)
    return least.rows()


def _traffic_rows(traffic: tuple, rows: np.ndarray) -> tuple:
    """An operand's traffic (``open_bounds_rows``' ``operand_traffic``: energy, port bits, serial loads, served bits,
    queued and port cycles, chained stall; no pinned terms) on some of its rows: each per-row array taken at ``rows``,
    numbers (the same for every row) as they are."""
    def take(v: Any) -> Any:
        return v[rows] if isinstance(v, np.ndarray) and v.ndim == 1 else v

    energy, bits, serial, served, queued, on_port, own, pinned = traffic
    return (take(energy), [(lv, kind, take(b)) for lv, kind, b in bits], {c: take(v) for c, v in serial.items()},
            [(lv, is_read, take(b)) for lv, is_read, b in served], {lv: take(v) for lv, v in queued.items()},
            {lv: take(v) for lv, v in on_port.items()}, take(own), pinned)


def _temporal_left_rows(ctx: BoundContext, rem: np.ndarray, level: int) -> tuple[np.ndarray, bool]:
    """``BoundContext.temporal_left`` per row: rows x dims."""
    caps = ctx.spatial_cap[:level]
    most = np.array([math.prod(ctx.fan_sizes[l] if cap is None else cap.get(d, 1) for l, cap in enumerate(caps))
                     for d in ctx.op.dim_names], dtype=np.int64)
    return np.maximum(1, -(-rem // most)), all(cap is not None for cap in caps)


def _alternative_masks(ctx: BoundContext, rem: np.ndarray, level: int
                       ) -> dict[tuple[frozenset[str], tuple[tuple[str, str], ...]], np.ndarray]:
    """``BoundContext._innermost_alternatives`` per row: each case (the operands a plain dim serves, and the
    (operand, dim) pairs rule B18 counts in it; the empty case for "no temporal loop left") with the rows that have
    it. A row with the empty case has it alone."""
    caps = ctx.spatial_cap[:level]
    exact = all(cap is not None for cap in caps)
    n = len(rem)
    forced = np.zeros(n, dtype=bool)
    dims = ctx.op.dim_names
    # Rule B18 (every fan-out fixed, whole tiles): per row, the dims with unfixed temporal iterations left.
    windows = exact and ctx.whole_tiles
    still = rem > np.array([math.prod(cap.get(d, 1) for cap in caps if cap is not None) for d in dims]) \
        if windows else np.zeros_like(rem, dtype=bool)
    none: tuple[tuple[str, str], ...] = ()
    out: dict[tuple[frozenset[str], tuple[tuple[str, str], ...]], np.ndarray] = {}
    for i, d in enumerate(dims):
        most = math.prod(ctx.fan_sizes[l] if cap is None else cap.get(d, 1) for l, cap in enumerate(caps))
        r = rem[:, i]
        possible = (r != 1) & ~(exact & (r <= most))
        forced |= r > most
        users = frozenset(X.name for X in ctx.op.operands if d in ctx.plain[X.name])
        if not windows or not possible.any():
            groups = [(none, possible)]
        else:
            combos, inverse = np.unique(still, axis=0, return_inverse=True)
            inverse = inverse.reshape(-1)
            groups = []
            for j, row in enumerate(combos):
                pairs = window_users(ctx.op, ctx.windows, ctx.loose, d, {k for k, s in zip(dims, row, strict=True) if s})
                groups.append((pairs, possible & (inverse == j)))
        for pairs, rows in groups:
            alt = (users, pairs)
            out[alt] = out.get(alt, np.zeros(n, dtype=bool)) | rows
    empty = out.get((frozenset(), none), np.zeros(n, dtype=bool)) | ~forced
    out = {alt: m & ~empty for alt, m in out.items() if alt != (frozenset(), none)}
    out[(frozenset(), none)] = empty
    return {alt: m for alt, m in out.items() if m.any()}
