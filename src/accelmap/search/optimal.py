"""Pruned optimal mapper: branch and bound over levels, innermost first.

Each node fixes one more level: a bound per dimension for the level's
temporal loops and for each axis of its fan-out, then one of the level's
non-dominated loop orders (``orders.py``). Children are visited in order of
their lower bound (``bounds.py``) and the first child whose bound cannot beat
the k-th best found so far ends the node, as in Sunstone's alpha-beta step,
but with a bound that is valid for our cost model and for the objective.
Capacity prunes as soon as a partial tile overflows: tiles only grow as
factors are added. Every rule is safe (docs/mapper.md), so the result is
optimal among perfectly factored mappings; tests compare it with the
exhaustive mapper.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from accelmap.arch.accelerator import Accelerator
from accelmap.cost.model import evaluate
from accelmap.mapping.loopnest import Loop, Mapping
from accelmap.mapping.validate import check_precision, shared_axis_dims, tile_fits
from accelmap.search.bounds import BoundContext
from accelmap.search.deadline import SearchTimedOut
from accelmap.search.fixed_transitions import FIXED_CLASSES_LEVEL, fixed_classes_prune
from accelmap.search.imperfect_tiles import (
    ImperfectBoundContext,
    every_order,
    full_positions,
    imperfect_choices,
    imperfect_mode,
    nest_is_perfect,
)
from accelmap.search.node_bounds import open_bounds_rows
from accelmap.search.objective import collector
from accelmap.search.orders import order_candidates, order_costs, orders_exact, refill_levels
from accelmap.search.outer_orders import bounds_by_innermost, outer_order_nests
from accelmap.search.padded_interior_lanes import InteriorLaneContext
from accelmap.search.padded_orders import orders_prunable
from accelmap.search.root_pairs import paired_root_bound
from accelmap.search.space import Constraints, factor_choices, keep_options, level_axes
from accelmap.search.spatial import keep_lower_bounds
from accelmap.workload.operator import Operator


@dataclass
class SearchStats:
    nodes: int = 0              # partial mappings whose bound was computed
    pruned: int = 0             # of those, cut by the bound
    evaluated: int = 0          # complete mappings costed
    capacity_cut: int = 0       # partial tiles that overflowed
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)


def level_assignments(op: Operator, arch: Accelerator, keep, level: int, rem: dict[str, int],
                      inner_ext: dict[str, int], cons: Constraints, stats: SearchStats, imperfect: bool | str = False,
                      *, fits: dict[tuple, bool] | None = None):
    """Yield (temporal {dim: b}, spatial {axis: {dim: b}}) for one level whose tile fits. ``imperfect``: any
    bounds, the last tile partial (``imperfect_tiles``); else bounds that divide what is left. ``fits``: a memo of
    ``tile_fits`` by (level's operands, level, extents) that the caller keeps across nodes (siblings and cousins
    test the same partial tiles)."""
    axes = level_axes(arch, level)
    out_dims = op.output.dims
    dims = op.dim_names
    last = level == 0
    if imperfect:
        choices = {d: imperfect_choices(rem[d], inner_ext[d], op.sizes[d], axes, d, out_dims, cons, last,
                                        temporal_divides=imperfect_mode(imperfect) == "spatial") for d in dims}
    else:
        choices = {d: factor_choices(rem[d], axes, d, out_dims, cons, last) for d in dims}
    # a level shared along an axis holds one tile for the whole axis: no dim its operands use on it
    banned = [shared_axis_dims(op, arch, a[0]) for a in axes]
    if any(banned):
        choices = {d: [(t, sp) for t, sp in ch if all(b == 1 or d not in ban for b, ban in zip(sp, banned, strict=True))]
                   for d, ch in choices.items()}
    axis_size = [a[1] for a in axes]
    axis_used = [1] * len(axes)
    ext = dict(inner_ext)
    temporal: dict[str, int] = {}
    spatial: list[dict[str, int]] = [{} for _ in axes]

    def rec(k: int):
        if k == len(dims):
            yield dict(temporal), {axes[a][0]: dict(spatial[a]) for a in range(len(axes))}
            return
        d = dims[k]
        base = inner_ext[d]
        for t, sp in choices[d]:
            if any(s * axis_used[a] > axis_size[a] for a, s in enumerate(sp)):
                continue
            ext[d] = min(base * t * math.prod(sp), op.sizes[d])    # a partial last tile is clipped
            ok: bool | None
            if fits is None:
                ok = tile_fits(op, arch, keep[level], level, ext)
            else:
                key = (keep[level], level, tuple(ext.values()))
                ok = fits.get(key)
                if ok is None:
                    if len(fits) > 200_000:
                        fits.clear()
                    ok = fits[key] = tile_fits(op, arch, keep[level], level, ext)
            if not ok:
                stats.capacity_cut += 1
                continue
            temporal[d] = t
            for a, s in enumerate(sp):
                axis_used[a] *= s
                spatial[a][d] = s
            yield from rec(k + 1)
            for a, s in enumerate(sp):
                axis_used[a] //= s
        ext[d] = base
        temporal.pop(d, None)
        for a in range(len(axes)):
            spatial[a].pop(d, None)

    yield from rec(0)


def search_optimal(op: Operator, arch: Accelerator, objective: str = "edp", *, k: int = 1,
                   constraints: Constraints | None = None, time_limit: float | None = None,
                   incumbents: tuple = (), imperfect: bool | str = False):
    """Best mappings by ``objective`` ('energy', 'latency', 'edp' or 'pareto').

    ``incumbents``: (CostResult, Mapping) pairs already known (e.g. from the heuristic); they enter
    the best-so-far first, so the bounds prune against them from the first node on. ``imperfect``: search
    imperfect factorizations too (True or "all": any loop's last tile partial; "spatial": only the spatial
    loops', as Ruby-S; rules I1-I6 of docs/mapper.md)."""
    imperfect = imperfect_mode(imperfect) or False
    cons = constraints or Constraints()
    cons.check(op, arch)
    check_precision(op, arch)
    stats = SearchStats()
    best = collector(objective, k)
    for r, m in incumbents:
        best.offer(r, m)
    nlev = len(arch.levels)
    t0 = time.perf_counter()
    deadline = None if time_limit is None else t0 + time_limit
    pes = arch.num_pes
    fits: dict[tuple, bool] = {}        # ``level_assignments``' capacity memo, shared by every node of this search

    def children(ctx, keep, level, rem, fixed):
        inner_ext = {d: 1 for d in op.dim_names}
        for l in fixed:
            inner_ext[l.dim] *= l.bound
        out: list[tuple[float, float, tuple[Loop, ...], dict[str, int], list[tuple[float, float]] | None]] = []
        tilings: list[tuple[tuple[Loop, ...], tuple[Loop, ...], dict[str, int]]] = []
        for temporal, spatial in level_assignments(op, arch, keep, level, rem, inner_ext, cons, stats, imperfect,
                                                     fits=fits):
            if deadline and time.perf_counter() > deadline:
                stats.extra["timed_out"] = True
                break
            t_loops = tuple(Loop(d, b, level) for d, b in temporal.items() if b > 1)
            s_loops = tuple(Loop(d, b, level, ax) for ax, dims in spatial.items() for d, b in dims.items() if b > 1)
            # What is left of each dim: ceil(rem / bounds), which is rem / bounds for perfect factors.
            new_rem = {d: -(-rem[d] // (temporal[d] * math.prod(spatial[ax].get(d, 1) for ax in spatial)))
                       for d in rem}
            tilings.append((t_loops, s_loops, new_rem))
        # Rule B3: cut a tiling before its orders are enumerated, by a bound over all of them; when the next level
        # is the last and has no fan-out, its loops are what is left, in any order. (The innermost level has one
        # order to try: its own bound below does the same job.) Computed for all tilings of the node at once.
        b3 = open_order_bounds_batch(ctx, fixed, level, tilings, best) if level < nlev - 1 and not imperfect \
            else [None] * len(tilings)
        lvname = arch.levels[level].name
        for (t_loops, s_loops, new_rem), batched in zip(tilings, b3, strict=True):
            if deadline and time.perf_counter() > deadline:
                stats.extra["timed_out"] = True
                break
            rest = s_loops + fixed
            open_bounds: dict[Loop | None, tuple[float, float]] = {}
            if level < nlev - 1 and len(t_loops) > 1:
                open_bounds = batched if batched is not None else \
                    open_order_bounds(ctx, t_loops + rest, level, new_rem, frozenset({level}), best, imperfect)
                if _prunes(best, list(open_bounds.values())):
                    stats.nodes += 1
                    stats.pruned += 1
                    stats.extra["cut_before_orders"] = stats.extra.get("cut_before_orders", 0) + 1
                    continue
            if not orders_exact(len(t_loops), level, nlev):
                stats.extra["orders_restricted"] = True
            if imperfect and level < nlev - 1 and not nest_is_perfect(op, t_loops + rest) \
                    and not (imperfect == "spatial" and orders_prunable(ctx, keep, t_loops + rest, level)):
                # Rule I4: partial tiles in this nest; the per-level Pareto sets of orders are not proven here (rule B51:
                # over Ruby-S tiles they are where no clip moves during the level's run, ``padded_orders``).
                orders = every_order(op, t_loops, cons.orders.get(lvname), cons.forbid_orders.get(lvname, ()))
            else:
                orders = order_candidates(op, keep, level, t_loops, rest, nlev, cons.orders.get(lvname),
                                          cons.forbid_orders.get(lvname, ()), order_costs(arch), refill_levels(arch))
            for order in orders:
                loops = order + rest
                if level == 0 and cons.min_utilization and \
                        math.prod(l.bound for l in loops if l.spatial) < cons.min_utilization * pes:
                    continue
                stats.nodes += 1
                perfect = not imperfect or nest_is_perfect(op, loops)
                # Rule B4 shared: the bound over the orders with this order's innermost loop holds for this
                # order; the order's own (tighter) bound is computed only if the node gets its turn. (Not for a
                # nest with partial tiles: it is ranked by an estimate, rule I6, so its valid bound is kept too.)
                early = open_bounds.get(order[-1] if order else None, open_bounds.get(None)) if perfect else None
                if early is not None:
                    out.append((early[0], early[1], loops, new_rem, None))
                    continue
                alts = bound_any_order(ctx, loops, level, new_rem, frozenset(), best, imperfect)
                # Rule I6: a nest with partial tiles is ranked by the bound as if its positions were all whole
                # (an estimate, not a bound): its valid bound is weaker and would put it first for no reason.
                ranked = alts if perfect else bound_any_order(ctx, loops, level, new_rem, frozenset())
                e_lb, l_lb = _least(objective, ranked)
                out.append((e_lb, l_lb, loops, new_rem, alts))
        return out

    def descend(ctx, rank, keep, level, rem, fixed):
        if deadline and time.perf_counter() > deadline:
            stats.extra["timed_out"] = True
            return
        # Ranked (and cut in that order) by ``rank``'s bounds, each child cut by ``ctx``'s at its turn: ``rank`` leaves
        # out rules B70/B71, so the children come in the order they did before those rules (docs/mapper.md).
        kids = children(rank, keep, level, rem, fixed)
        kids.sort(key=lambda c: _rank(objective, c[0], c[1]))
        # Ranked by valid bounds only when no child has partial tiles (rule I6): only then may a cut end the node.
        estimated = imperfect and any(not nest_is_perfect(op, c[2]) for c in kids)
        for n, (e_lb, l_lb, loops, new_rem, alts) in enumerate(kids):
            if _prunes(best, [(e_lb, l_lb)] if alts is None else alts):
                # Sorted by the bound of the scalar objective: the rest cannot win either (not with imperfect
                # tiles, whose children are ranked by an estimate, rule I6).
                if objective == "pareto" or estimated:
                    stats.pruned += 1
                    continue
                stats.pruned += len(kids) - n
                break
            if alts is None or rank is not ctx:
                # Its turn: the bound of its own order, which the ranking bound (all orders) cannot cut, with every
                # rule of ``ctx``.
                alts = bound_any_order(ctx, loops, level, new_rem, frozenset(), best, imperfect)
                if _prunes(best, alts):
                    stats.pruned += 1
                    stats.extra["cut_at_turn"] = stats.extra.get("cut_at_turn", 0) + 1
                    continue
            if level == 0:
                # (a node's leaves are costed one by one, a few milliseconds each: thousands of them ran past the
                # limit by over a second on ResNet-18 layer2.0.conv1 on eyeriss_like)
                if deadline and time.perf_counter() > deadline:
                    stats.extra["timed_out"] = True
                    return
                m = Mapping(loops, keep)
                stats.evaluated += 1
                best.offer(evaluate(op, arch, m, check=False), m)
            else:
                # Rule B67 (``fixed_transitions``): below the outermost level, every tile change but its own is timed
                # as the model times it.
                if level == FIXED_CLASSES_LEVEL and not imperfect and \
                        fixed_classes_prune(ctx, best, level, loops, new_rem, alts):
                    stats.pruned += 1
                    stats.extra["fixed_classes_cut"] = stats.extra.get("fixed_classes_cut", 0) + 1
                    continue
                descend(ctx, rank, keep, level - 1, new_rem, loops)

    for keep in _keeps_by_bound(op, arch, cons, objective, best, stats):
        if stats.extra.get("timed_out") or (deadline and time.perf_counter() > deadline):
            stats.extra["timed_out"] = True
            break
        # Over Ruby-S tiles (a padded unrolling, rule E2) rules B44, B46-B50 and B62 count refetches at every position.
        context = BoundContext if not imperfect else InteriorLaneContext if imperfect == "spatial" \
            else ImperfectBoundContext
        ctx = context(op, arch, keep, cons.spatial, objective)
        ctx.deadline = deadline      # read inside the long bound computations (``deadline.py``)
        try:
            # The root's bound (rule B8 adds every level's least refill over the tiles that fit it) can cut the
            # bypass choice before any tiling is enumerated.
            # Rule B36 (``root_pairs``): each open level's tile keeps its refill energy and its stall together.
            paired = None if imperfect else paired_root_bound(ctx)
            if _prunes(best, [ctx.lower_bound((), nlev, dict(op.sizes))]) or \
                    (paired is not None and best.prunes(*paired)):
                stats.nodes += 1
                stats.pruned += 1
                stats.extra["keeps_cut"] = stats.extra.get("keeps_cut", 0) + 1
                continue
            descend(ctx, ctx.ranking_context(), keep, nlev - 1, dict(op.sizes), ())
        except SearchTimedOut:
            stats.extra["timed_out"] = True
            break
    stats.seconds = time.perf_counter() - t0
    return best.results(), stats


def open_order_bounds(ctx: BoundContext, fixed: tuple[Loop, ...], level: int, rem: dict[str, int],
                      free: frozenset[int], best=None,
                      imperfect: bool | str = False) -> dict[Loop | None, tuple[float, float]]:
    """(energy, latency) bounds of ``ctx.lower_bound`` with the orders of the levels ``free`` left open, one per
    loop the innermost free level may put innermost (rule B4): every order is covered by one of them, so a node
    is cut only when all of them are. When the only level left is the outermost and it has no fan-out, its
    loops are forced (what is left of each dim), so they join the nest with their order open too, and the
    outermost boundary is bounded by its refetches, not its footprint. Given ``best`` (the collector), the bound
    over every order is tried first and returned alone when ``best`` already prunes it (B4 only tightens).
    ``imperfect``: the fixed nest's refetches count only at its whole positions (rule I2)."""
    if level == 1 and ctx.arch.levels[0].fanout is None:
        fixed = tuple(Loop(d, r, 0) for d, r in rem.items() if r > 1) + fixed
        level, rem, free = 0, dict.fromkeys(rem, 1), free | {0}
    full = full_positions(ctx.op, fixed) if imperfect else None
    if not free:
        return {None: ctx.lower_bound(fixed, level, rem, full_positions=full)}
    inner = max(free)
    candidates = [l for l in fixed if l.level == inner and not l.spatial and l.bound > 1]
    if len(candidates) < 2 or best is not None:
        plain = ctx.lower_bound(fixed, level, rem, free_orders=free, full_positions=full)
        if len(candidates) < 2 or best.prunes(*plain):
            return {None: plain}
    # Rule B30: the outermost level's few orders, each bounded with its order known.
    nests = outer_order_nests(fixed, level) if free == {0} else None
    if nests is not None:
        return bounds_by_innermost(ctx, nests, level, rem, full)
    # The bound sees the innermost loop only through the operands that use its dim as a plain index: loops
    # alike in that share one bound.
    by_users: dict[frozenset[str], tuple[float, float]] = {}
    out: dict[Loop | None, tuple[float, float]] = {}
    for l in candidates:
        users = frozenset(name for name, dims in ctx.plain.items() if l.dim in dims)
        if users not in by_users:
            by_users[users] = ctx.lower_bound(fixed, level, rem, free_orders=free, innermost=l, full_positions=full)
        out[l] = by_users[users]
    return out


# Fewer tilings than this share one spatial assignment: the scalar bound is cheaper than NumPy's per-call overhead
# (the outermost level's single forced tiling, most often).
BATCH_ROWS = 4


def open_order_bounds_batch(ctx: BoundContext, fixed: tuple[Loop, ...], level: int,
                            tilings: list[tuple[tuple[Loop, ...], tuple[Loop, ...], dict[str, int]]],
                            best) -> list[dict[Loop | None, tuple[float, float]] | None]:
    """``open_order_bounds(ctx, t_loops + s_loops + fixed, level, rem, {level}, best)`` for every tiling
    (t_loops, s_loops, rem) of a node with more than one temporal loop, computed over all of them at once
    (``node_bounds.open_bounds_rows``, equal values); None for the others, for groups of fewer than BATCH_ROWS
    tilings, and where the batch does not apply."""
    out: list[dict[Loop | None, tuple[float, float]] | None] = [None] * len(tilings)
    dims = ctx.op.dim_names
    groups: dict[tuple[Loop, ...], list[int]] = {}
    for i, (t_loops, s_loops, _) in enumerate(tilings):
        if len(t_loops) > 1:
            groups.setdefault(s_loops, []).append(i)
    forced = level == 1 and ctx.arch.levels[0].fanout is None
    for s_loops, rows in groups.items():
        if len(rows) < BATCH_ROWS:
            continue
        T = np.ones((len(rows), len(dims)), dtype=np.int64)
        for r, i in enumerate(rows):
            for l in tilings[i][0]:
                T[r, dims.index(l.dim)] = l.bound
        rem = np.array([[tilings[i][2][d] for d in dims] for i in rows], dtype=np.int64)
        if forced:
            # The outermost level's loops are what is left, in any order (as ``open_order_bounds``).
            free, low, left = {level: T, 0: rem}, 0, np.ones_like(rem)
        else:
            free, low, left = {level: T}, level, rem
        shared = s_loops + fixed
        kept: dict = {}     # each operand's traffic per case, for the B4 calls below
        plain = open_bounds_rows(ctx, shared, free, low, left, keep=kept)
        if plain is None:
            continue
        need: dict[frozenset[str], list[int]] = {}
        for r, i in enumerate(rows):
            e_lb, l_lb = float(plain[0][r]), float(plain[1][r])
            if best.prunes(e_lb, l_lb):
                out[i] = {None: (e_lb, l_lb)}
                continue
            for loop in tilings[i][0]:
                users = frozenset(name for name, ds in ctx.plain.items() if loop.dim in ds)
                if not need.get(users) or need[users][-1] != r:
                    need.setdefault(users, []).append(r)
        by_users: dict[frozenset[str], dict[int, tuple[float, float]]] = {}
        for users, sub in need.items():
            rep = next(l.dim for r in sub[:1] for l in tilings[rows[r]][0]
                       if frozenset(name for name, ds in ctx.plain.items() if l.dim in ds) == users)
            idx = np.array(sub)
            got = open_bounds_rows(ctx, shared, {f: a[idx] for f, a in free.items()}, low, left[idx], rep,
                                   reuse=(kept, idx))
            if got is None:
                break
            by_users[users] = {r: (float(got[0][k]), float(got[1][k])) for k, r in enumerate(sub)}
        else:
            for r, i in enumerate(rows):
                if out[i] is None:
                    out[i] = {loop: by_users[frozenset(name for name, ds in ctx.plain.items() if loop.dim in ds)][r]
                              for loop in tilings[i][0]}
    return out


def bound_any_order(ctx: BoundContext, fixed: tuple[Loop, ...], level: int, rem: dict[str, int],
                    free: frozenset[int], best=None, imperfect: bool | str = False) -> list[tuple[float, float]]:
    """The bounds of ``open_order_bounds``, without saying which innermost loop each covers."""
    return list(open_order_bounds(ctx, fixed, level, rem, free, best, imperfect).values())


def _prunes(best, bounds: list[tuple[float, float]]) -> bool:
    return all(best.prunes(e, l) for e, l in bounds)


def _least(objective: str, bounds: list[tuple[float, float]]) -> tuple[float, float]:
    """The alternative with the least objective bound (for ranking children; pruning tests all)."""
    return min(bounds, key=lambda b: _rank(objective, *b))


def _keeps_by_bound(op: Operator, arch: Accelerator, cons: Constraints, objective: str, best, stats: SearchStats):
    """The bypass choices to search, most promising first. When the constraints fix every fan-out axis (as the
    exact search does for each unrolling), each choice is bounded by rule S1 with its own level sets, which
    holds for every mapping with that unrolling and bypass: a choice whose bound the best found meets is
    skipped when its turn comes."""
    keeps = keep_options(op, arch, cons)
    axes = arch.fanout_axes()
    if not axes or any(name not in cons.spatial for name in axes):
        yield from keeps
        return
    loops = tuple(Loop(d, b, axes[name][0], name) for name, dims in cons.spatial.items() for d, b in dims.items()
                  if b > 1)
    scored = []
    for keep, (e, l) in zip(keeps, keep_lower_bounds(op, arch, loops, keeps), strict=True):
        scored.append((_rank(objective, e, l), e, l, keep))
    scored.sort(key=lambda t: t[0])
    for _, e, l, keep in scored:
        if best.prunes(e, l):
            stats.extra["keeps_cut"] = stats.extra.get("keeps_cut", 0) + 1
            continue
        yield keep


def _rank(objective: str, e: float, l: float) -> float:
    return e if objective in ("energy", "pareto") else (l if objective == "latency" else e * l)
