"""Greedy heuristic mapper for spaces too large to search exactly.

1. Spatial candidates: per fan-out axis, the factor combinations (at most two
   dimensions per axis) with the highest utilization.
2. For each, the remaining prime factors are ordered innermost-first by an
   operand priority (factors of dimensions that do not index the first operand
   go innermost, keeping it stationary, and so on) and packed into the levels
   innermost-first while the tile fits (ZigZag's LOMA allocation).
3. Each level's loop order is then chosen exactly (``orders.py``).
4. A local search moves single prime factors between adjacent levels and
   toggles bypass, keeping any move that improves the objective.

Nothing here is safe pruning: the result is good, not proven optimal.
"""

from __future__ import annotations

import itertools
import math
import random
import time

from accelmap.arch.accelerator import Accelerator
from accelmap.cost.model import evaluate
from accelmap.errors import MappingError
from accelmap.mapping.loopnest import Loop, Mapping
from accelmap.mapping.sampling import divisors
from accelmap.mapping.validate import check_capacity
from accelmap.search.objective import collector, scalar
from accelmap.mapping.validate import check_precision, tile_fits
from accelmap.search.optimal import SearchStats
from accelmap.search.orders import order_candidates, order_costs
from accelmap.search.space import Constraints, keep_options
from accelmap.workload.operator import Operator


def prime_factors(n: int) -> list[int]:
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1:
        out.append(n)
    return out


def spatial_candidates(op: Operator, arch: Accelerator, cons: Constraints, limit: int = 12) -> list[dict]:
    """Assignments {(level, axis): {dim: bound}} ranked by spatial utilization."""
    out_dims = op.output.dims
    axes = [(i, a) for i, lv in enumerate(arch.levels) if lv.fanout for a in lv.fanout.axes]
    per_axis = []
    for i, a in axes:
        if a.name in cons.spatial:
            per_axis.append([{d: b for d, b in cons.spatial[a.name].items() if b > 1}])
            continue
        dims = [d for d in op.dim_names if d in out_dims or a.reduce]
        opts = [{}]
        for d in dims:
            opts += [{d: b} for b in divisors(op.sizes[d]) if 1 < b <= a.size]
        for d1, d2 in itertools.combinations(dims, 2):
            for b1 in divisors(op.sizes[d1]):
                for b2 in divisors(op.sizes[d2]):
                    if b1 > 1 and b2 > 1 and b1 * b2 <= a.size:
                        opts.append({d1: b1, d2: b2})
        opts.sort(key=lambda o: -math.prod(o.values()))
        per_axis.append(opts[:limit])
    cands = []
    for combo in itertools.product(*per_axis):
        used: dict[str, int] = {}
        ok = True
        for o in combo:
            for d, b in o.items():
                used[d] = used.get(d, 1) * b
                if op.sizes[d] % used[d]:
                    ok = False
        if ok:
            cands.append({(i, a.name): o for (i, a), o in zip(axes, combo)})
    cands.sort(key=lambda c: -math.prod(b for o in c.values() for b in o.values()))
    return cands[:limit]


def _priority_orders(op: Operator) -> list[list[str]]:
    """Dimension orders, innermost first, one per operand priority."""
    orders = []
    for perm in itertools.permutations(op.operands):
        key = lambda d: tuple(d in X.dims for X in perm)
        orders.append(sorted(op.dim_names, key=key))
    uniq = []
    for o in orders:
        if o not in uniq:
            uniq.append(o)
    return uniq


def allocate(op: Operator, arch: Accelerator, keep, spatial: dict, dim_order: list[str]) -> dict[int, dict[str, int]] | None:
    """Pack prime factors into levels innermost first while tiles fit; level 0 takes the rest."""
    nlev = len(arch.levels)
    ext = {d: 1 for d in op.dim_names}
    sp_at: dict[int, dict[str, int]] = {}
    for (lvl, ax), o in spatial.items():
        for d, b in o.items():
            sp_at.setdefault(lvl, {})[d] = sp_at.get(lvl, {}).get(d, 1) * b
    rem = {d: op.sizes[d] // math.prod(sp_at.get(l, {}).get(d, 1) for l in sp_at) for d in op.dim_names}
    lpfs = [(d, p) for d in dim_order for p in prime_factors(rem[d])]
    temporal: dict[int, dict[str, int]] = {i: {} for i in range(nlev)}
    k = 0
    for lvl in range(nlev - 1, 0, -1):
        for d, b in sp_at.get(lvl, {}).items():
            ext[d] *= b
        if not tile_fits(op, arch, keep[lvl], lvl, ext):
            return None
        while k < len(lpfs):
            d, p = lpfs[k]
            ext[d] *= p
            if tile_fits(op, arch, keep[lvl], lvl, ext):
                temporal[lvl][d] = temporal[lvl].get(d, 1) * p
                k += 1
            else:
                ext[d] //= p
                break
    for d, p in lpfs[k:]:
        temporal[0][d] = temporal[0].get(d, 1) * p
    return temporal


def build_mappings(op: Operator, arch: Accelerator, keep, temporal: dict[int, dict[str, int]], spatial: dict,
                   cons: Constraints, cap: int = 16) -> list[Mapping]:
    """Mappings for a tiling, with each level's order chosen among its non-dominated orders."""
    nlev = len(arch.levels)
    per_level: list[list[tuple[Loop, ...]]] = []
    rest: tuple[Loop, ...] = ()
    options_by_level: dict[int, list[tuple[Loop, ...]]] = {}
    for lvl in range(nlev - 1, -1, -1):
        t_loops = tuple(Loop(d, b, lvl) for d, b in temporal[lvl].items() if b > 1)
        s_loops = tuple(Loop(d, b, lvl, ax) for (l2, ax), o in spatial.items() if l2 == lvl
                        for d, b in o.items() if b > 1)
        name = arch.levels[lvl].name
        orders = order_candidates(op, keep, lvl, t_loops, s_loops + rest, nlev, cons.orders.get(name),
                                  cons.forbid_orders.get(name, ()), order_costs(arch))
        if not orders:
            return []
        options_by_level[lvl] = [o + s_loops for o in orders]
        rest = options_by_level[lvl][0] + rest
    levels = sorted(options_by_level)
    out = []
    for combo in itertools.islice(itertools.product(*(options_by_level[l] for l in levels)), cap):
        loops = tuple(l for part in combo for l in part)
        out.append(Mapping(loops, keep))
    return out


def search_heuristic(op: Operator, arch: Accelerator, objective: str = "edp", *, k: int = 1,
                     constraints: Constraints | None = None, time_limit: float | None = None,
                     seed: int = 0, local_steps: int = 400):
    cons = constraints or Constraints()
    cons.check(op, arch)
    check_precision(op, arch)
    t0 = time.perf_counter()
    deadline = t0 + (time_limit if time_limit else 60.0)
    stats = SearchStats()
    best = collector(objective, k)
    rng = random.Random(seed)
    seen: set = set()
    pes = arch.num_pes

    def consider(m: Mapping):
        if m.key() in seen:
            return None
        seen.add(m.key())
        try:
            check_capacity(op, arch, m)
        except MappingError:
            return None
        if cons.min_utilization and m.spatial_product() < cons.min_utilization * pes:
            return None
        stats.evaluated += 1
        r = evaluate(op, arch, m, check=False)
        best.offer(r, m)
        return r

    keeps = keep_options(op, arch, cons)
    # Fullest bypass choices first (more reuse); fall back to leaner ones where tiny
    # buffers cannot hold every operand. Stop at the first few that admit a tiling.
    by_fullness = sorted(keeps, key=lambda kp: -sum(len(x) for x in kp))
    spatials = spatial_candidates(op, arch, cons)
    orders = _priority_orders(op)
    usable = []
    for keep in by_fullness:
        if any(allocate(op, arch, keep, sp, orders[0]) is not None for sp in spatials[:3] or [{}]):
            usable.append(keep)
            if len(usable) >= 3:
                break
    seeds: list[tuple[float, dict, dict, tuple]] = []
    for spatial in spatials:
        for order in orders:
            for keep in usable:
                temporal = allocate(op, arch, keep, spatial, order)
                if temporal is None:
                    continue
                for m in build_mappings(op, arch, keep, temporal, spatial, cons, cap=4):
                    r = consider(m)
                    if r is not None:
                        seeds.append((scalar(objective if objective != "pareto" else "edp", r.energy_total, r.latency),
                                      temporal, spatial, keep))
        if time.perf_counter() > deadline:
            break
    seeds.sort(key=lambda s: s[0])
    # Local search from the best few starting points.
    nlev = len(arch.levels)
    for start in seeds[:3]:
        val, temporal, spatial, keep = start
        temporal = {l: dict(v) for l, v in temporal.items()}
        for _ in range(local_steps):
            if time.perf_counter() > deadline:
                break
            cand_t = {l: dict(v) for l, v in temporal.items()}
            cand_keep = keep
            move = rng.random()
            if move < 0.8:
                lvl = rng.randrange(nlev)
                movable = sorted(d for d, b in cand_t[lvl].items() if b > 1)
                if not movable:
                    continue
                d = rng.choice(movable)
                p = rng.choice(prime_factors(cand_t[lvl][d]))
                to = lvl + rng.choice((-1, 1))
                if not 0 <= to < nlev:
                    continue
                cand_t[lvl][d] //= p
                cand_t[to][d] = cand_t[to].get(d, 1) * p
            else:
                options = [kp for kp in keeps if sum(a != b for a, b in zip(kp, keep)) == 1]
                if not options:
                    continue
                cand_keep = rng.choice(options)
            improved = False
            for m in build_mappings(op, arch, cand_keep, cand_t, spatial, cons, cap=4):
                r = consider(m)
                if r is not None:
                    v = scalar(objective if objective != "pareto" else "edp", r.energy_total, r.latency)
                    if v < val:
                        val, improved = v, True
            if improved:
                temporal, keep = cand_t, cand_keep
    stats.seconds = time.perf_counter() - t0
    stats.extra["timed_out"] = time.perf_counter() > deadline
    return best.results(), stats
