"""Imperfect factorization for the exact searches: tiles whose last one along a dimension is partial.

Ruby (Horeni, Taheri, Tsai, Parashar, Emer and Joshi, "Ruby: Improving Hardware Efficiency for Tensor
Algebra Accelerators Through Imperfect Factorization", ISPASS 2022) widens the mapspace from factors that
divide each dimension to any tile size, the last tile of each dimension partial. In our loop-nest form (the
cost model prices it, docs/cost-model.md "Partial tiles") a dimension of size ``n`` gets one loop per slot
with any bounds whose product covers ``n``; a loop's stride is the product of the bounds inside it and its
last iteration must start inside the dimension: ``(b - 1) * stride < n``, i.e. ``b <= ceil(n / stride)``.
Built innermost first, that is one rule: with ``rem = ceil(n / inner product)`` left, the next loop takes
any ``b`` in ``1..rem`` and leaves ``ceil(rem / b)`` (ceil-divisions compose); the outermost slot takes
what is left. Perfect factorization is the special case ``b | rem``.

What this module holds (the exact searches call it when asked for imperfect tiles):

* ``imperfect_factorizations``: every bound sequence of one dimension over the slots (the exhaustive
  reference enumerates their product);
* ``imperfect_choices``: one level's candidates for one dimension (temporal bound and one bound per fan-out
  axis) in the branch and bound, with the two extra rules the cost model imposes (a spatial reduction must
  be complete; a fan-out axis cannot hold more than its instances);
* ``full_positions``: how many positions of a fixed inner nest lie wholly inside the operator (rule I2 of
  docs/mapper.md, what keeps the node bounds valid);
* ``ImperfectBoundContext``: the node bounds without rule B8, whose relaxation ranges over divisor tiles
  only (rule I3);
* ``nest_is_perfect`` and ``every_order``: the per-level order pruning (rules O2/O3) is kept only where the
  fixed nest is perfect (rule I4).
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Iterable

from accelmap.mapping.loopnest import Loop
from accelmap.search.bounds import BoundContext
from accelmap.search.clipped_first_tiles import clipped_first_tiles
from accelmap.search.orders import EXACT_ORDER_LOOPS, _allowed, _priority_perms
from accelmap.search.padded_schedule import node_schedule
from accelmap.search.space import Constraints
from accelmap.workload.operator import Operand, Operator


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def imperfect_factorizations(n: int, parts: int, spatial: tuple[bool, ...] | None = None) -> list[tuple[int, ...]]:
    """Every bound sequence (outermost slot first) of a dimension of size ``n`` over ``parts`` slots that the
    cost model accepts: the product covers ``n`` and every loop's last iteration starts inside it. The
    outermost slot takes ``ceil(n / inner product)`` (covering needs at least that, validity at most).
    ``spatial`` (per slot, outermost first) restricts to Ruby-S: a temporal slot divides what is left."""
    def inner_first(k: int, rem: int) -> list[tuple[int, ...]]:
        if k == 1:
            return [(rem,)]
        free = spatial is None or spatial[k - 1]
        return [rest + (b,) for b in range(1, rem + 1) if free or rem % b == 0
                for rest in inner_first(k - 1, ceil_div(rem, b))]

    return inner_first(parts, n)


def imperfect_mode(imperfect: bool | str) -> str | None:
    """``imperfect`` as given to the searches: False (perfect factors), True or "all" (Ruby: any loop's last
    tile partial) or "spatial" (Ruby-S: only spatial loops imperfect, temporal ones divide what is left)."""
    if imperfect is False or imperfect is None:
        return None
    if imperfect is True or imperfect == "all":
        return "all"
    if imperfect == "spatial":
        return "spatial"
    raise ValueError(f"imperfect must be False, True, 'all' or 'spatial', got {imperfect!r}")


def imperfect_choices(remaining: int, inner: int, size: int, axes: list[tuple[str, int, bool, bool]], dim: str,
                      out_dims: frozenset[str], cons: Constraints, last_level: bool,
                      temporal_divides: bool = False) -> list[tuple[int, tuple[int, ...]]]:
    """(temporal bound, spatial bound per axis) for ``dim`` at one level when tiles may be partial: the
    imperfect counterpart of ``space.factor_choices``. ``remaining`` is ``ceil(size / inner)``, ``inner`` the
    product of the dim's loops fixed inside this level. The level's spatial loops sit inside its temporal
    loop, the last axis innermost (the nest order of ``Mapping``), so they are dealt first, innermost first.
    A dim that does not index the output reduces across the axis, and the reduction must be complete: the
    loops from the spatial one inward must span a divisor of the dim. ``temporal_divides`` keeps the temporal
    bounds to divisors of what is left (Ruby-S: only spatial loops imperfect)."""
    partial: list[tuple[tuple[int, ...], int, int]] = [((), remaining, inner)]
    for name, cap, _, reduce in reversed(axes):
        nxt = []
        for sp, rem, span in partial:
            if name in cons.spatial:
                opts: Iterable[int] = (cons.spatial[name].get(dim, 1),)
            elif dim not in out_dims and not reduce:
                opts = (1,)
            else:
                opts = range(1, min(cap, rem) + 1)
            for b in opts:
                if b > rem or (b > 1 and dim not in out_dims and size % (span * b)):
                    continue
                nxt.append((sp + (b,), ceil_div(rem, b), span * b))
        partial = nxt
    out = []
    for sp, rem, _ in partial:
        bounds = tuple(reversed(sp))
        if last_level:
            out.append((rem, bounds))
        else:
            out.extend((t, bounds) for t in range(1, rem + 1) if not temporal_divides or rem % t == 0)
    return out


def dim_products(op: Operator, loops: Iterable[Loop]) -> dict[str, int]:
    prod = dict.fromkeys(op.dim_names, 1)
    for l in loops:
        prod[l.dim] *= l.bound
    return prod


def full_positions(op: Operator, loops: Iterable[Loop]) -> int:
    """Positions of the nest ``loops`` (a fixed inner part of a mapping) that lie wholly inside the operator:
    the outer loops place it at multiples of its extent ``P_d`` along each dim, and a position is whole
    where every dim has room for a full extent, ``floor(N_d / P_d)`` of the ``ceil(N_d / P_d)`` per dim."""
    prod = dim_products(op, loops)
    return math.prod(op.sizes[d] // prod[d] for d in op.dim_names)


def nest_is_perfect(op: Operator, loops: Iterable[Loop]) -> bool:
    """Does every dim's extent in ``loops`` divide the dim (so no position of this nest holds a partial tile)?"""
    prod = dim_products(op, loops)
    return all(op.sizes[d] % prod[d] == 0 for d in op.dim_names)


def every_order(op: Operator, temporal: tuple[Loop, ...], fixed: tuple[str, ...] | None,
                forbidden: tuple[tuple[str, ...], ...]) -> list[tuple[Loop, ...]]:
    """Every allowed order of one level's temporal loops (rule I4: no Pareto pruning where tiles are partial);
    above the exact-order limit, the operand-priority orders (the search then says it is not proven)."""
    loops = tuple(sorted(temporal, key=lambda l: l.dim))
    if len(loops) <= EXACT_ORDER_LOOPS:
        return [p for p in itertools.permutations(loops) if _allowed(p, fixed, forbidden)]
    return list(dict.fromkeys(p for p in _priority_perms(op, loops) if _allowed(p, fixed, forbidden)))


class ImperfectBoundContext(BoundContext):
    """The node bounds of ``BoundContext`` for a search whose tiles may be partial. Rule B8 (an open level's
    least refill over every tile that fits it) ranges over tiles whose extents divide each dim; a partial
    tile can fit where no divisor tile does, so B8 is not a bound there and is left out (rule I3). A level's last
    tile may be partial, so rule B10 counts no data for the output's last drain."""

    whole_tiles = False

    def open_level_floor(self, c: int) -> float:
        return 0.0

    def first_tiles(self, X: Operand, c: int, fi: int, t: int, full: int, fixed: tuple[Loop, ...],
                    ext: dict[str, int]) -> float:
        """Rule B61 (``clipped_first_tiles``): where no position of the fixed nest is whole, each instance's first
        tile clipped to the operator; else every instance holds the whole tile at a whole position."""
        return fi * t if full > 0 else clipped_first_tiles(self, X, c, fixed, ext)

    def least_schedule(self, fixed: tuple[Loop, ...], level: int, rem: dict[str, int]) -> int:
        """Rule B32 (``padded_schedule``): with every fan-out fixed, the fixed temporal loops' product times each dim's
        fewest open temporal iterations (a padded unrolling's idle lanes and partial tiles occupy their slots)."""
        T, exact = self.temporal_left(rem, level)
        if not exact:
            return 0
        fixed_temporal = math.prod(l.bound for l in fixed if not l.spatial)
        return node_schedule(fixed_temporal, T, self.arch.compute.macs_per_cycle)


def search_remaining_unrollings(op: Operator, arch, objective: str, k: int, cons: Constraints,
                                deadline: float | None, best, stats, imperfect: bool | str = True) -> tuple[bool, bool]:
    """Rule I5: the exact search enumerates the dividing and fewest-rounds padded unrollings, but with imperfect
    tiles any bound of an output dim (and any split of a dim over axes) is an unrolling too. Unless the
    certificate's bound (which holds for every mapping) already meets the best found, the branch and bound
    runs once more with the unrolling free, from the best found. Offers what it finds to ``best`` and adds
    its counts to ``stats``; returns (timed out, orders restricted)."""
    from accelmap.search.bounds import chain_options
    from accelmap.search.optimal import search_optimal
    from accelmap.search.space import keep_options
    from accelmap.search.spatial import CertificateOutOfTime, certified_lower_bound

    found = best.results()
    if objective != "pareto" and k == 1 and found:
        try:
            lower = certified_lower_bound(op, arch, cons, chain_options(op, keep_options(op, arch, cons)), objective,
                                          deadline=deadline, clock=time.perf_counter)[0]
        except CertificateOutOfTime:
            return True, False
        if found[0].value <= lower * (1 + 1e-9):
            stats.extra["imperfect_closed_by_bound"] = True
            return False, False
    left = None if deadline is None else deadline - time.perf_counter()
    if left is not None and left <= 0:
        return True, False
    res, st = search_optimal(op, arch, objective, k=k, constraints=cons, time_limit=left,
                             incumbents=tuple((f.result, f.mapping) for f in found), imperfect=imperfect)
    for f in res:
        best.offer(f.result, f.mapping)
    stats.nodes += st.nodes
    stats.pruned += st.pruned
    stats.evaluated += st.evaluated
    stats.capacity_cut += st.capacity_cut
    stats.extra["imperfect_free_pass_seconds"] = st.seconds
    return bool(st.extra.get("timed_out")), bool(st.extra.get("orders_restricted"))
