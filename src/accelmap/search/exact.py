"""Exact search with the spatial unrolling searched: every unrolling, in order of its bound.

The branch and bound of ``optimal.py`` enumerates spatial loops inside its tree, where a weak bound at
the innermost levels cannot tell unrollings apart; on a full-size layer it never gets past the first
few. Here the unrolling is the outermost choice (Sunstone and the Turbo-Charged Mapper both fix it
first): every unrolling the perfect-factorization space holds (any dims per axis, bounds whose product
divides each dim) and every padded one (an output dim unrolled by any bound that does not divide it, the last
round partial) is enumerated (``spatial.enumerate_spatial``, vectorized) and bounded by rule S1 (+S3) of
docs/mapper.md, which holds for every mapping using it. In bound order:

* an unrolling whose bound the best found already meets is cut, and (for a scalar objective) so is
  every later one;
* a dividing unrolling is searched exactly by ``optimal.search_optimal`` with the unrolling fixed and
  the best found as incumbent, so its bounds prune from the first node;
* the mirror of an unrolling searched to the end (P<->Q and R<->S of a convolution symmetric in them, when
  neither accelerator nor constraints tell them apart: rule S4, ``mirror.py``) has the same optimum and is
  skipped, counted in ``spatial_mirror_skipped``;
* a padded unrolling is searched by the same branch and bound over Ruby-S tiles (``imperfect="spatial"``:
  the unrolling's last round partial, the temporal loops dividing what is left, which is what a padded
  unrolling means; rule E2 of docs/mapper.md), counted in ``spatial_padded_searched``.

Past ``EVERY_PADDED_ROWS`` candidates the unrollings are not listed: they are bounded by class (rule B38 of
docs/mapper.md, ``padded_classes.py``), and the members of the classes the best found does not cut are listed in
tiers, each tier visited as above (rule B39).

With ``imperfect`` (Ruby-style tiles, the last one partial; ``imperfect_tiles.py``) a padded unrolling is
searched over that mode's imperfect tiles (a dividing one over perfect tiles, quickly), and a last pass runs the
branch and bound over imperfect tiles with the unrolling free, which covers the whole space (rule I5 of
docs/mapper.md), unless the certificate's bound already meets the best found.

The incumbent comes from the heuristic first: its whole run as ``--strategy heuristic`` makes it with the same
limit (so the result is never worse than the heuristic's), the exact search in what is left. The result is proven optimal over every unrolling, padded or not, with temporal loops that
divide what the unrolling leaves (perfect factorizations, and Ruby-S's padded rounds), when every unrolling was
cut or searched to the end within the time limit.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from accelmap.arch.accelerator import Accelerator
from accelmap.mapping.validate import check_precision
from accelmap.search.bounds import chain_options
from accelmap.search.heuristic_config import DEFAULT_HEURISTIC, HeuristicConfig
from accelmap.search.mirror import dim_symmetry, mirror_products
from accelmap.search.objective import collector, scalar
from accelmap.search.optimal import SearchStats, search_optimal
from accelmap.search.padded_classes import PaddedClasses
from accelmap.search.padded_equivalents import single_axis_padded
from accelmap.search.padded_mirrors import padded_mirror_keys
from accelmap.search.probes import probe_values
from accelmap.search.space import Constraints, keep_options
from accelmap.search.spatial import (
    CertificateOutOfTime,
    SpatialSpace,
    TooManyUnrollings,
    enumerate_spatial,
    fanout_products,
    ranked_unrolling_bounds,
    row_classes,
)
from accelmap.search.subtree_order import WINDOW, SubtreeOrder
from accelmap.search.tilings import dim_orders
from accelmap.workload.operator import Operator

# Rule E2 enumerates every padded bound while the candidates stay within this many (about 0.1 s and 100 MB per
# 10^5 on the README machine); past it the unrollings are bounded by class (rules B38, B39).
EVERY_PADDED_ROWS = 300_000


def search_exact(op: Operator, arch: Accelerator, objective: str = "edp", *, k: int = 1,
                 constraints: Constraints | None = None, time_limit: float | None = None, seed: int = 0,
                 incumbents: tuple = (), heuristic: bool = True, imperfect: bool | str = False,
                 heuristic_config: HeuristicConfig = DEFAULT_HEURISTIC, window: int = WINDOW):
    """Best mappings of ``op`` by ``objective`` with every spatial unrolling either cut by its bound or
    searched exactly. Returns (results, stats); ``stats.extra["proven"]`` says whether the search closed the
    space (perfect factorizations, any dividing unrolling), ``stats.extra["timed_out"]`` whether it stopped at
    the limit. ``heuristic=False`` skips the heuristic's incumbent (tests compare with exhaustive search); else the
    heuristic runs first exactly as ``--strategy heuristic`` does with the same limit and ``heuristic_config``, so
    the result is never worse than the heuristic's alone.
    ``imperfect``: the space is every imperfect factorization (proven means over that space). ``window``: classes
    of unrollings reordered by their probes at a time (``subtree_order``; 1: bound order)."""
    cons = constraints or Constraints()
    cons.check(op, arch)
    check_precision(op, arch)
    t0 = time.perf_counter()
    deadline = None if time_limit is None else t0 + time_limit
    stats = SearchStats()
    best = collector(objective, k)
    for r, m in incumbents:
        best.offer(r, m)
    if heuristic:
        from accelmap.search.heuristic import search_heuristic

        # The heuristic's whole run, with the whole limit: its probes' budget is a share of its limit, and with a
        # share of ours it probed less and could pick a worse unrolling than `--strategy heuristic` (BERT
        # attention.scores on eyeriss_like: 3.34e13 EDP against 2.92e13 at 10 s). It stops on its own well before
        # the limit on most layers, and the exact search runs in what is left.
        found, hstats = search_heuristic(op, arch, objective, k=k, constraints=cons, time_limit=time_limit,
                                         seed=seed, config=heuristic_config)
        stats.evaluated += hstats.evaluated
        stats.extra["incumbent_timed_out"] = bool(hstats.extra.get("timed_out"))
        for f in found:
            best.offer(f.result, f.mapping)
    stats.extra["seconds_incumbent"] = time.perf_counter() - t0
    chains = chain_options(op, keep_options(op, arch, cons))
    # Rules S4 and S5 keep one best mapping: a top-k list or a front would hold the skipped unrollings' mappings
    # as distinct entries, so they are used only then.
    # Past the deadline already (the heuristic's retry used it up): enumerating and bounding 10^5 unrollings would
    # only overrun the limit further.
    late = deadline is not None and time.perf_counter() >= deadline
    skip_equivalent = k == 1 and objective != "pareto"
    unrollings: RankedUnrollings | None
    first = unrollings = ranked_unrollings(op, arch, cons, objective, chains, skip_equivalent=skip_equivalent,
                                           enumerate_space=not late, classes=True, classes_deadline=deadline)
    padded = first.padded_classes
    swap = unrollings.swap
    # With imperfect tiles a padded unrolling is searched too; a dividing one first over perfect tiles (quick, a good
    # incumbent early), the imperfect tiles of every unrolling coming in the free pass below (rule I5).
    # Without it, a padded unrolling is searched over Ruby-S tiles (its last round partial, temporal loops dividing
    # what is left): every unrolling is then searched or cut (rule E2).
    padded_mode = imperfect or "spatial"
    searched = cut = padded_searched = mirror_skipped = equivalent_skipped = candidates = probed = reordered = 0
    padded_done: set[tuple] = set()       # rule B45: padded unrollings searched to the end (over every tier)
    timed_out, restricted = late or first.classes_out_of_time, False
    # One pass over the unrollings listed; past rule E2's budget, one per tier of padded classes (rule B39: the next
    # classes the best found does not cut, their members listed then).
    while unrollings is not None:
        space, order, e_lb, l_lb, divides = (unrollings.space, unrollings.order, unrollings.energy, unrollings.latency,
                                             unrollings.divides)
        n = len(order)
        candidates += n
        done = np.zeros(unrollings.classes, dtype=bool)
        padded_done_cls = np.zeros(unrollings.classes, dtype=bool)   # rule B52: one padded deal searched to the end
        # The subtrees below the best found in bound order, a window at a time reordered by cheap probes
        # (``subtree_order``): the same rows cut or searched, the good subtrees first.
        # (SubtreeOrder stops at the first row the best found cuts, every later one being cut too: true of the bound
        # the rows are sorted by, S1 without rule B64, not of S1 with it; each row is cut by the latter below.)
        visits = SubtreeOrder(order, e_lb, unrollings.ranking_latency, unrollings.cls, best, window=window, deadline=deadline,
                              probe=_prober(op, arch, cons, objective, space, heuristic_config))
        for row in visits:
            if best.prunes(float(e_lb[row]), float(l_lb[row])):
                cut += 1      # (a later row of its window may still be searched; the rows after the window are
                continue      # counted in ``visits.cut`` once the next window's first row is cut)
            if done[unrollings.cls[row]]:
                equivalent_skipped += 1       # rule S5: an unrolling with the same fan-out products was searched
                continue
            if done[unrollings.mirror_cls[row]]:
                mirror_skipped += 1           # rule S4
                continue
            assignment = space.assignment(int(row))
            # Rule B52 (``padded_equivalents``): over Ruby-S tiles, padded rows of one class whose padded dims sit on
            # one axis per level have the same optimum.
            padded_equal = (not divides[row] and unrollings.skip_equivalent and padded_mode == "spatial"
                            and single_axis_padded(assignment, op))
            if padded_equal and padded_done_cls[unrollings.cls[row]]:
                equivalent_skipped += 1
                continue
            padded_key = None
            if not divides[row] and unrollings.skip_equivalent and swap:
                # Rule B45: the mirror of a padded unrolling searched to the end has the same optimum
                # (``padded_mirrors``).
                padded_key, mirror_key = padded_mirror_keys(assignment, swap)
                if mirror_key in padded_done:
                    mirror_skipped += 1
                    continue
            left = None if deadline is None else deadline - time.perf_counter()
            if left is not None and left <= 0:
                timed_out = True
                break
            fixed = dataclasses.replace(cons, spatial={axis: dict(dims) for (_, axis), dims in assignment.items()})
            res, st = search_optimal(op, arch, objective, k=k, constraints=fixed, time_limit=left,
                                     incumbents=tuple((f.result, f.mapping) for f in best.results()),
                                     imperfect=False if divides[row] else padded_mode)
            for f in res:
                best.offer(f.result, f.mapping)
            searched += 1
            padded_searched += int(not divides[row])
            stats.nodes += st.nodes
            stats.pruned += st.pruned
            stats.evaluated += st.evaluated
            stats.capacity_cut += st.capacity_cut
            restricted |= bool(st.extra.get("orders_restricted"))
            if st.extra.get("timed_out"):
                timed_out = True
                break
            if unrollings.skip_equivalent and divides[row]:
                # (S5 is argued for dividing unrollings; a padded one, searched over imperfect tiles, marks nothing.)
                done[unrollings.cls[row]] = True
            if padded_key is not None:
                padded_done.add(padded_key)
            if padded_equal:
                padded_done_cls[unrollings.cls[row]] = True
        cut += visits.cut
        probed += visits.probed
        reordered += visits.reordered
        if timed_out or padded is None:
            break
        if deadline is not None and time.perf_counter() >= deadline:
            timed_out = True
            break
        tier = padded.next_tier(best)
        unrollings = None if tier is None else rank_space(op, arch, cons, objective, chains, tier,
                                                          skip_equivalent=skip_equivalent, every_padded=True)
    # --- imperfect factorization (imperfect_tiles.py): the unrollings above are not all of the space's ---
    if imperfect and not timed_out:
        from accelmap.search.imperfect_tiles import search_remaining_unrollings

        timed_out, more = search_remaining_unrollings(op, arch, objective, k, cons, deadline, best, stats,
                                                      imperfect)
        restricted |= more
    # --- end imperfect ---
    swapped = ", ".join(f"{a}<->{b}" for a, b in swap.items() if a < b) if swap else ""
    stats.extra.update(spatial_searched=searched, spatial_cut=cut, spatial_padded_searched=padded_searched,
                       spatial_mirror_skipped=mirror_skipped, spatial_equivalent_skipped=equivalent_skipped,
                       spatial_probed=probed, spatial_windows_reordered=reordered,
                       mirror_swap=swapped,
                       timed_out=timed_out, orders_restricted=restricted,
                       spatial_every_padded=first.every_padded, spatial_candidates=candidates,
                       padded_classes=0 if padded is None else len(padded),
                       padded_classes_cut=0 if padded is None else padded.cut,
                       padded_classes_opened=0 if padded is None else padded.opened,
                       # (with imperfect tiles the free pass covers every unrolling, enumerated or not)
                       proven=not timed_out and not restricted and (first.every_padded or bool(imperfect)))
    stats.seconds = time.perf_counter() - t0
    return best.results(), stats


@dataclasses.dataclass
class RankedUnrollings:
    """Every unrolling of the space (``spatial.enumerate_spatial``, padded ones included), with what E1, S4 and S5
    need: rule S1's bounds, the visiting order, whether it divides every dim, and classes of equal fan-out products
    (``cls``; ``mirror_cls`` is the class of the mirror's products, a class of its own when no row has them)."""
    space: SpatialSpace
    order: np.ndarray             # rows, least bound first
    energy: np.ndarray            # S1 (+S3) bounds per row
    latency: np.ndarray
    ranking_latency: np.ndarray   # S1's latency without rule B64 (a weaker bound): ``order`` sorts by it
    divides: np.ndarray
    cls: np.ndarray               # per row, its class of equal ``fanout_products``
    mirror_cls: np.ndarray        # per row, the class of its mirror's products (its own class without a symmetry)
    classes: int
    swap: dict[str, str] | None   # rule S4's relabelling, when it applies
    skip_equivalent: bool         # whether rules S4 and S5 may skip (one best mapping kept)
    every_padded: bool            # every padded bound enumerated (rule E2), not only the fewest-rounds one
    # past rule E2's budget: every padded unrolling as classes opened lazily (rules B38, B39), none listed yet
    padded_classes: PaddedClasses | None = None
    classes_out_of_time: bool = False     # the classes' bounds did not finish by their deadline


def ranked_unrollings(op: Operator, arch: Accelerator, cons: Constraints, objective: str,
                      chains: dict[str, list[list[int]]], *, skip_equivalent: bool = True,
                      enumerate_space: bool = True, classes: bool = False,
                      classes_deadline: float | None = None) -> RankedUnrollings:
    """The unrollings of the exact search, bounded by rule S1 (+S3) and in the order E1 visits them
    (``enumerate_space=False``: none of them; enumerating alone is cheap, bounding 10^5 rows is not).
    ``classes``: past rule E2's budget, every padded unrolling as classes (rules B38, B39: ``padded_classes``, their
    bounds computed by ``classes_deadline`` on ``time.perf_counter``) and none listed here."""
    padded, out_of_time = None, False
    try:
        space = enumerate_spatial(op, arch, cons, max_dims=len(op.dim_names), pad="every", max_rows=EVERY_PADDED_ROWS)
        every_padded = True
    except TooManyUnrollings:
        every_padded = False
        if classes and enumerate_space:
            try:
                padded = PaddedClasses(op, arch, cons, chains, objective, deadline=classes_deadline)
            except TooManyUnrollings:
                pass                    # more class rows than the certificate's limit: as before rule B38
            except CertificateOutOfTime:
                out_of_time = True      # the search then stops at once, timed out
        if padded is not None:
            space, every_padded = padded.members(np.zeros(0, dtype=np.int64)), True
        else:
            # Rule E2 past its budget: the fewest-rounds padded bound only; the search then proves nothing over the
            # other padded unrollings (the certificate's bound, rule S2, still covers them).
            space = enumerate_spatial(op, arch, cons, max_dims=len(op.dim_names), pad=True)
            if out_of_time:
                space = _no_rows(space)
    if not enumerate_space:
        space = _no_rows(space)
    out = rank_space(op, arch, cons, objective, chains, space, skip_equivalent=skip_equivalent,
                     every_padded=every_padded)
    out.padded_classes, out.classes_out_of_time = padded, out_of_time
    return out


def _prober(op: Operator, arch: Accelerator, cons: Constraints, objective: str, space: SpatialSpace,
            config: HeuristicConfig):
    """The probe of rows of ``space`` (``probes.probe_values``: the heuristic's judgement of an unrolling, under the
    fullest bypass choices first) for ``SubtreeOrder``."""
    by_fullness = sorted(keep_options(op, arch, cons), key=lambda kp: -sum(len(x) for x in kp))
    orders = dim_orders(op)
    scalar_objective = objective if objective != "pareto" else "edp"

    def probe(rows: list[int]) -> list[float]:
        return probe_values(op, arch, [space.assignment(r) for r in rows], by_fullness, scalar_objective, orders,
                            config)
    return probe


def _no_rows(space: SpatialSpace) -> SpatialSpace:
    return dataclasses.replace(space, choice=space.choice[:0], used=space.used[:0], pes=space.pes[:0],
                               per_axis=[B[:0] for B in space.per_axis])


def rank_space(op: Operator, arch: Accelerator, cons: Constraints, objective: str,
               chains: dict[str, list[list[int]]], space: SpatialSpace, *, skip_equivalent: bool,
               every_padded: bool) -> RankedUnrollings:
    """The rows of ``space`` bounded by rule S1 (+S3), in E1's order, with rules S4 and S5's classes."""
    n = len(space.pes)
    if n:
        # Ordered without rule B64's refill stall (a bound only): with it, a worse first unrolling took the whole
        # limit on two eyeriss_like layers; cut (``energy``, ``latency``) with it.
        e_lb, l_lb, l_rank = ranked_unrolling_bounds(op, arch, space, chains)
        rank = scalar(objective if objective != "pareto" else "edp", e_lb, l_rank)
        order = np.argsort(rank, kind="stable")
    else:
        e_lb = l_lb = l_rank = np.zeros(0)
        order = np.zeros(0, dtype=np.int64)
    sizes = np.array([op.sizes[d] for d in op.dim_names])
    divides = (sizes % space.used == 0).all(axis=1) if n else np.zeros(0, dtype=bool)
    swap = dim_symmetry(op, arch, cons) if skip_equivalent else None
    products = fanout_products(space)
    mirrored = mirror_products(products, op.dim_names, swap) if swap else products
    inverse, classes = row_classes(np.concatenate([products, mirrored]))
    cls, mirror_cls = inverse[:n], inverse[n:]
    return RankedUnrollings(space, order, e_lb, l_lb, l_rank, divides, cls, mirror_cls, classes, swap, skip_equivalent,
                            every_padded)
