"""Heuristic mapper for spaces too large to search exactly.

1. Spatial candidates (``spatial.py``): every unrolling of up to two dims per
   fan-out axis (padded where it does not divide an output dim), or the fixed
   one of the constraints, ranked by a lower bound on the cost of any mapping
   that uses it. In that order each is probed (its maximal tilings and a few
   random ones costed under the fullest bypass choice that admits one), skipping
   those whose bound cannot beat the best probe, until the probe budget is spent.
   With no more candidates than are searched in full (a fixed unrolling) nothing is probed.
2. For the best few probed candidates and a few bypass choices, every maximal tiling
   (``tilings.py``: no level's tile can take one more prime factor; also under the other packings
   of ``tilings.Packing``, whose best starts climb besides the plain ones) and a
   random sample of the others are costed under several per-level loop orders
   at once by the vectorized model; LOMA's greedy allocation per operand
   priority adds a few more candidates.
3. From the best few, a steepest descent moves single prime factors between
   levels and changes orders, every neighbour costed at once (vectorized); the
   best few ends climb on with one-level bypass toggles too (one scalar
   evaluation each, so only there).
4. The best candidates get each level's loop order chosen exactly
   (``orders.py``) and are costed by the scalar model on the real operator.

Nothing here is safe pruning: the result is good, not proven optimal.
"""

from __future__ import annotations

import itertools
import logging
import math
import time

import numpy as np

from accelmap.arch.accelerator import Accelerator
from accelmap.cost.model import evaluate
from accelmap.errors import MappingError
from accelmap.mapping.loopnest import Loop, Mapping
from accelmap.mapping.sampling import prime_factors
from accelmap.mapping.validate import check_capacity, check_precision, tile_fits
from accelmap.search.bounds import chain_options
from accelmap.search.heuristic_config import DEFAULT_HEURISTIC, HeuristicConfig
from accelmap.search.objective import collector
from accelmap.search.optimal import SearchStats
from accelmap.search.orders import order_candidates, order_costs, refill_levels
from accelmap.search.probes import probe_unrollings
from accelmap.search.space import Constraints, keep_options
from accelmap.search.spatial import ranked_spatial
from accelmap.search.tiling import (
    Temporal,
    Tiling,
    describe_spatial,
    factors_of,
    padded_operator,
    spatial_at,
    temporal_remainder,
)
from accelmap.search.tilings import Ranked, climb, dim_orders, random_tilings, rank_tilings, seed_tilings
from accelmap.workload.operator import Operator

log = logging.getLogger(__name__)


def allocate(op: Operator, arch: Accelerator, keep, spatial: dict, dim_order: list[str]) -> Temporal | None:
    """Pack prime factors into levels innermost first while tiles fit; level 0 takes the rest."""
    nlev = len(arch.levels)
    ext = {d: 1 for d in op.dim_names}
    sp_at = spatial_at(spatial)
    rem = temporal_remainder(op, spatial)
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


def build_mappings(op: Operator, arch: Accelerator, tiling: Tiling, cons: Constraints, cap: int = 16) -> list[Mapping]:
    """Mappings for a tiling, with each level's order chosen among its non-dominated orders."""
    nlev = len(arch.levels)
    temporal, spatial, keep = tiling.temporal(op), tiling.spatial, tiling.keep
    rest: tuple[Loop, ...] = ()
    options_by_level: dict[int, list[tuple[Loop, ...]]] = {}
    for lvl in range(nlev - 1, -1, -1):
        t_loops = tuple(Loop(d, b, lvl) for d, b in temporal[lvl].items() if b > 1)
        s_loops = tuple(Loop(d, b, lvl, ax) for (l2, ax), o in spatial.items() if l2 == lvl
                        for d, b in o.items() if b > 1)
        name = arch.levels[lvl].name
        orders = order_candidates(op, keep, lvl, t_loops, s_loops + rest, nlev, cons.orders.get(name),
                                  cons.forbid_orders.get(name, ()), order_costs(arch), refill_levels(arch))
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
                     seed: int = 0, config: HeuristicConfig = DEFAULT_HEURISTIC, rank_by: str | None = None):
    """Best mappings of ``op`` by ``objective``; see the module doc. ``rank_by`` is the scalar the
    search ranks and climbs by (default: the objective; EDP for the Pareto front)."""
    cons = constraints or Constraints()
    cons.check(op, arch)
    check_precision(op, arch)
    # The clock the time limit counts on: wall clock, or this process's CPU seconds (config.cpu_clock).
    clock = time.process_time if config.cpu_clock else time.perf_counter
    t0 = clock()
    deadline = t0 + (time_limit if time_limit else 60.0)
    stats = SearchStats()
    best = collector(objective, k)
    seen: set = set()
    pes = arch.num_pes
    obj = rank_by or (objective if objective != "pareto" else "edp")

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
    # Fullest bypass choices first (more reuse); leaner ones where tiny buffers cannot
    # hold every operand. A few that admit a tiling are searched in full.
    by_fullness = sorted(keeps, key=lambda kp: -sum(len(x) for x in kp))
    ranked = ranked_spatial(op, arch, cons, chain_options(op, keeps), obj, max_dims=config.max_dims_per_axis,
                            min_pe_fraction=config.min_pe_fraction, limit=config.spatial_candidates,
                            tied=config.tied_unrollings)
    orders = dim_orders(op)
    nprng = np.random.default_rng(seed)
    costed = 0
    # Probe the spatial candidates in order of their lower bound (probes.py): the maximal tilings of each (and a
    # few random ones) under the fullest bypass choice that admits one. A candidate whose bound is not below the
    # best probe cannot beat it and is skipped; the probes stop when their budget is spent.
    probe_deadline = t0 + config.probe_share * (deadline - t0)
    stats.extra["spatial_candidates"] = len(ranked)
    log.info("%s: %d spatial unrollings ranked by lower bound (%s); probing in that order",
             op.name, len(ranked), obj)
    # Probes choose which unrollings are searched in full: with no more candidates than that (a fixed unrolling)
    # every one is searched in full anyway, and probing would only cost their seeds twice.
    unprobed = len(ranked) <= config.full_searches
    if unprobed:
        probes = [(cand.bound(obj), cand.assignment) for cand in ranked]
        cut_by_bound = 0
    else:
        found = probe_unrollings(op, arch, ranked, by_fullness, obj, orders, nprng, config, clock,
                                 probe_deadline, deadline)
        probes, cut_by_bound = found.found, found.cut_by_bound
        costed += found.costed
    stats.extra["spatial_probed"] = 0 if unprobed else len(probes)
    stats.extra["seconds_probing"] = clock() - t0
    stats.extra["spatial_cut_by_bound"] = cut_by_bound
    probes.sort(key=lambda p: p[0])
    spatials = [sp for _, sp in probes]
    if log.isEnabledFor(logging.INFO):
        what = "lower bound" if unprobed else "probe"
        log.info("%s: %d unrollings probed, %d skipped by their bound; searched in full: %s", op.name,
                 stats.extra["spatial_probed"], cut_by_bound, "; ".join(f"{describe_spatial(sp, arch)} ({what} {v:.4g})"
                                                                        for v, sp in probes[:config.full_searches])
                 or "none")
    # Per (spatial, bypass) choice: the best maximal tilings and the best of a random sample,
    # costed under a few per-level orders at once.
    starts: list[tuple[Ranked, Operator]] = []
    packed_starts: list[tuple[Ranked, Operator]] = []    # from the packings other than the plain one
    for spatial in spatials[:config.full_searches] or ([{}] if not ranked else []):
        op_pad, rem = padded_operator(op, spatial)
        usable = 0
        for keep in by_fullness:
            if usable >= config.bypass_choices or clock() > deadline:
                break
            F, P = seed_tilings(op_pad, arch, keep, spatial, rem, nprng, rows_per_level=config.rows_per_level)
            R = random_tilings(op_pad, arch, keep, spatial, rem, nprng, config.random_tilings)
            if not len(F) and not len(R) and not len(P):
                continue
            usable += 1
            # The best few of the plain maximal tilings, of the sample and of the other packings, costed together.
            (f_best, r_best, p_best), n = rank_tilings(op_pad, arch, keep, spatial, [F, R, P], obj, orders,
                                                       top=config.starts_per_group)
            costed += n
            starts.extend((f, op_pad) for f in f_best + r_best)
            packed_starts.extend((f, op_pad) for f in p_best)
        if clock() > deadline:
            break
    stats.extra["seconds_to_climb"] = clock() - t0
    starts.sort(key=lambda r: r[0].value)
    packed_starts.sort(key=lambda r: r[0].value)
    # Steepest descent from the best few over factor moves, one-level bypass toggles and orders; the best
    # starts of the other packings climb besides, so that they add to the plain starts, not crowd them out
    # (a better start can end in a worse local optimum).
    to_climb = starts[:config.climbs] + packed_starts[:config.packing_climbs]
    finals: list[Ranked] = []
    toggled: dict[str, dict] = {}           # per spatial choice: the bypass toggles already costed
    # The climbs first move factors and change orders only; the best few ends then climb on with one-level bypass
    # toggles as well. A toggle is one scalar evaluation (one bypass choice per batch call), tried at every local
    # optimum of every climb: on ZigZag's ascend_like (8 levels) they were about 60% of the search's CPU time.
    # At each local optimum a climb tries every other order over the whole neighbourhood (one batch call per
    # order); it tries the orders the best seeds ranked under first, and only config.climb_orders of them.
    by_seed = sorted(starts + packed_starts, key=lambda r: r[0].value)
    seed_orders = list(dict.fromkeys([r.tiling.order for r, _ in by_seed if r.tiling.order is not None] + orders))
    climb_orders = seed_orders[:config.climb_orders]
    ends: list[tuple[Ranked, Operator]] = []
    for start, op_pad in to_climb:
        end, n = climb(op_pad, arch, start, obj, climb_orders, (), max_steps=config.climb_steps, deadline=deadline,
                       clock=clock)
        costed += n
        if log.isEnabledFor(logging.INFO):
            log.info("%s: climb from %.4g (%s) ends at %.4g after %d rows costed", op.name, start.value,
                     describe_spatial(start.tiling.spatial, arch), end.value, n)
        ends.append((end, op_pad))
    ends.sort(key=lambda r: r[0].value)
    for i, (end, op_pad) in enumerate(ends):
        if i < config.toggle_climbs and len(keeps) > 1:
            further, n = climb(op_pad, arch, end, obj, climb_orders, keeps, max_steps=config.climb_steps,
                               memo=toggled.setdefault(repr(end.tiling.spatial), {}), deadline=deadline,
                               clock=clock)
            costed += n
            if log.isEnabledFor(logging.INFO):
                log.info("%s: climb with bypass toggles from %.4g ends at %.4g after %d rows costed", op.name,
                         end.value, further.value, n)
            finals.append(further)
        finals.append(end)
    finals += [f for f, _ in starts[config.climbs:] + packed_starts[config.packing_climbs:]]
    # LOMA's single greedy allocation per operand priority: cheap extra candidates.
    for spatial in spatials[:config.greedy_unrollings]:
        for order in orders:
            for keep in by_fullness[:config.greedy_bypass_choices]:
                temporal = allocate(op, arch, keep, spatial, list(reversed(order)))
                if temporal is not None:
                    finals.append(Ranked(math.inf, Tiling(factors_of(op, temporal, len(arch.levels)), spatial, keep)))
    stats.extra["seconds_to_orders"] = clock() - t0
    finals.sort(key=lambda r: r.value)
    # Exact per-level orders and the scalar model (real, unpadded operator) for the best few:
    # the orders often matter as much as the tiling. At least one is costed past the deadline.
    done = 0
    for final in finals:
        if done >= config.exact_candidates or (done and clock() > deadline):
            break
        ms = build_mappings(op, arch, final.tiling, cons, cap=config.orders_per_candidate)
        if final.tiling.order is not None and not (cons.orders or cons.forbid_orders):
            ms.append(final.tiling.mapping(op))
        got = [consider(m) for m in ms]
        done += any(r is not None for r in got)
    stats.extra["batch_costed"] = costed
    stats.extra["scalar_costed"] = stats.evaluated
    # Every batch row is a complete mapping (tiling, order, bypass) costed by the full model.
    stats.evaluated += costed
    stats.seconds = clock() - t0
    stats.extra["timed_out"] = clock() > deadline
    if stats.extra["timed_out"]:
        log.info("%s: time limit reached; %d candidates got exact orders", op.name, done)
    return best.results(), stats
