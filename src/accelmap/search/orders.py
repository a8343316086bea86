"""Exact loop-order pruning per level.

For a fixed tiling, the order of the loops at level i changes only the terms
of transitions of level-i loops, for boundaries below level i: a loop j at
level i contributes (product of the loops before j) * (B_j - 1) * delta_j,
where delta_j depends on which loops follow j at level i and on the (order
independent) loop sets of the other levels. Loops outside level i multiply
every term by the same positive factor. So each level's order adds its own
term to every counter, independent of the other levels' orders
(docs/mapper.md, rule O1), and every objective we offer is non-decreasing in
every counter. Keeping, per level, the orders whose vector of terms is not
dominated loses no optimum (rule O2). Orders whose loops show the same token
sequence for every operand give identical terms (rule O3) and are evaluated once.

The terms count as if no level were shared and every halo moved. A level shared along fan-out
axes (``shared_along``) has the counts of fewer instances, and a generated halo (``padding:
generated``) leaves the same halo rows out of every entry of a tile that spans the padded axis:
either is a positive factor per (operand, level) that the tiling sets and no order changes, so
the dominance between orders is the same (``tests/test_shared_levels.py`` checks the kept
orders against every permutation).

A level that refills while read (``refill_while_read``) overlaps its refill only where the outermost loop
driving its reads moves every operand it keeps (``cost.latency._read_once``): that depends on which loop
of a level is first, which no counter sees, and an order with fewer counts can stall where another does
not. So orders are first split by that loop's effect (rule O4, ``_refill_key``) and the rules above apply
within each class.
"""

from __future__ import annotations

import itertools
import math
from functools import lru_cache
from typing import TypeVar

from accelmap.cost.latency import pipeline_counts, tile_transfers
from accelmap.mapping.loopnest import Loop, Mapping, loop_strides
from accelmap.search.order_tables import pareto_order_counts
from accelmap.workload.index_sets import axis_overlap, axis_size
from accelmap.workload.operator import Operand, Operator


def _signature(order: tuple[Loop, ...], op: Operator, operands: tuple[Operand, ...] | None = None) -> tuple:
    """Per operand (of ``operands``, default all), the token sequence the order shows it (rule O3)."""
    sig = []
    for X in op.operands if operands is None else operands:
        toks: list = []
        run = 1
        for l in order:
            if l.dim in X.dims:
                if run > 1:
                    toks.append(("*", run))
                    run = 1
                toks.append((l.dim, l.bound))
            else:
                run *= l.bound
        sig.append(tuple(toks))
    return tuple(sig)


T = TypeVar("T")


def pareto(items: list[tuple[tuple[int, ...], T]]) -> list[tuple[tuple[int, ...], T]]:
    """Non-dominated (componentwise <=) items; one representative per equal vector."""
    items = sorted(items, key=lambda it: (sum(it[0]), it[0]))
    kept: list[tuple[tuple[int, ...], T]] = []
    for vec, obj in items:
        if any(all(a <= b for a, b in zip(k, vec, strict=True)) for k, _ in kept):
            continue
        kept.append((vec, obj))
    return kept


def _allowed(order: tuple[Loop, ...], fixed: tuple[str, ...] | None, forbidden: tuple[tuple[str, ...], ...]) -> bool:
    dims = tuple(l.dim for l in order)
    if fixed is not None:
        pos = [fixed.index(d) for d in dims if d in fixed]
        if pos != sorted(pos):
            return False
    return dims not in forbidden


# Above this many loops at one level, orders are drawn from operand priorities
# instead of all permutations, and the search says its result is not proven.
EXACT_ORDER_LOOPS = 6


def order_candidates(op: Operator, keep: tuple[frozenset[str], ...], level: int, temporal: tuple[Loop, ...],
                     rest: tuple[Loop, ...], nlev: int, fixed: tuple[str, ...] | None = None,
                     forbidden: tuple[tuple[str, ...], ...] = (), order_costs: tuple[str, ...] | None = None,
                     refills: tuple[int, ...] = ()) -> list[tuple[Loop, ...]]:
    """Orders of ``temporal`` (the level's loops with bound > 1) that may be optimal.

    ``rest`` are the level's spatial loops followed by every deeper loop, in
    nest order. Returns at least one order unless the constraints exclude all.
    ``order_costs``: when the latency model also charges per tile transfer (DMA
    setup) or per result set and row (compute pipeline), the streamed dimensions
    of the pipeline (possibly empty); those counts join the dominance vector.
    ``refills``: the levels that refill while read (``refill_levels``); rule O4.
    """
    return list(_cached(op, keep, level, tuple(sorted(temporal, key=lambda l: l.dim)), rest, nlev, fixed,
                        forbidden, order_costs, refills))


def refill_levels(arch) -> tuple[int, ...]:
    """Levels whose stalls depend on which of their loops is outermost (``refill_while_read``; rule O4)."""
    return tuple(c for c, lv in enumerate(arch.levels) if lv.refill_while_read)


def _refill_key(op: Operator, keep: tuple[frozenset[str], ...], level: int, nlev: int, refills: tuple[int, ...]):
    """Rule O4: the dim sets of the operands whose reads at a refill-while-read level c <= ``level`` are
    driven by this level's loops (``level`` lies below c and above the next level of the operand's chain, or
    the compute): per order, whether its first loop moves each of them decides ``_read_once`` of c wherever
    no loop of bound above 1 sits between c and this level, and nothing else of the latency reads which loop
    is first. Orders are compared only within a class of equal answers."""
    driven = []
    for c in refills:
        if c > level:
            continue
        for X in op.operands:
            if X.name in keep[c]:
                child = next((i for i in range(c + 1, nlev) if X.name in keep[i]), nlev)
                if child > level:
                    driven.append(X.dims)
    return tuple(dict.fromkeys(driven))


def order_costs(arch) -> tuple[str, ...] | None:
    """Streamed dims if the latency model charges per tile transfer (DMA setup, per-row read latency) or per
    pipeline result, else None."""
    pipe = arch.compute.pipeline
    if pipe is None and not any(lv.transfer_setup_cycles or lv.read_row_cycles for lv in arch.levels):
        return None
    return tuple(pipe.streamed_dims) if pipe else ()


def orders_exact(n_loops: int, level: int, nlev: int) -> bool:
    return n_loops <= EXACT_ORDER_LOOPS or level == nlev - 1


def _priority_perms(op: Operator, temporal: tuple[Loop, ...]):
    """One order per operand priority: loops that do not index the first operand innermost, and so on."""
    for prio in itertools.permutations(op.operands):
        key = lambda l, prio=prio: tuple(l.dim not in X.dims for X in prio)
        yield tuple(sorted(temporal, key=key))


@lru_cache(maxsize=200_000)
def _cached(op, keep, level, temporal, rest, nlev, fixed, forbidden, order_costs=None, refills=()):
    if orders_exact(len(temporal), level, nlev):
        perms = list(itertools.permutations(temporal)) if fixed is None and not forbidden else \
            [p for p in itertools.permutations(temporal) if _allowed(p, fixed, forbidden)]
    else:
        perms = list(dict.fromkeys(p for p in _priority_perms(op, temporal) if _allowed(p, fixed, forbidden)))
    driven = _refill_key(op, keep, level, nlev, refills) if perms and perms[0] else ()
    if not driven:
        return _pruned(op, keep, level, rest, nlev, perms, order_costs)
    # Rule O4: prune within each class of orders whose first loop moves the same driven operands.
    classes: dict[tuple[bool, ...], list[tuple[Loop, ...]]] = {}
    for p in perms:
        classes.setdefault(tuple(p[0].dim in dims for dims in driven), []).append(p)
    return tuple(p for ps in classes.values() for p in _pruned(op, keep, level, rest, nlev, ps, order_costs))


def _pruned(op, keep, level, rest, nlev, perms, order_costs):
    """Rules O1-O3 over ``perms``: the orders that may be optimal."""
    if len(perms) <= 1 or (level == nlev - 1 and order_costs is None):
        # The innermost level's order changes no access count: its loops run inside every tile.
        return tuple(perms[:1])
    pairs: list[tuple[Operand, int]] = []
    for X in op.operands:
        chain = [i for i in range(nlev) if X.name in keep[i]]
        pairs.extend((X, c) for c in chain if c > level)
    if not pairs and order_costs is None:
        return tuple(perms[:1])
    if order_costs is None:
        # Many orders: every order's counters from tables of terms per loop and set of later loops, at once
        # (``order_tables``; the same orders kept, in the same order).
        counters = {(X.name, c): _LevelCounter(op, X, c, rest) for X, c in pairs}
        got = pareto_order_counts([counters[(X.name, c)] for X, c in pairs], perms)
        if got is not None:
            _remember(op, rest, pairs, got)
            return tuple(p for p, _ in got)
    # Only the operands with a counter below this level tell orders apart: orders that show each of them the
    # same sequence have the same counters (O3), whatever they show the others.
    relevant = tuple(X for X in op.operands if any(X is Y for Y, _ in pairs))
    signed = [(_signature(p, op, relevant), p) for p in perms]
    if order_costs is None:
        first: dict[tuple, tuple[Loop, ...]] = {}
        for sig, p in signed:
            first.setdefault(sig, p)
        signed = list(first.items())
    # (else every order is costed: tile and pipeline counts are not captured by the signature)
    # Rule O3 per operand: X's counter at c depends only on X's own token sequence, so orders that show X
    # the same sequence share it; the nest is built only for an order that shows some operand a new one.
    # Each operand's counter at a boundary is computed from the deeper loops once (``_LevelCounter``).
    index = {X.name: i for i, X in enumerate(relevant)}
    if order_costs is not None:
        counters = {(X.name, c): _LevelCounter(op, X, c, rest) for X, c in pairs}
    entering_by_sig: dict[tuple, int] = {}
    items = []
    for sig, p in signed:
        vec_list = []
        for X, c in pairs:
            key = (X.name, c, sig[index[X.name]])
            n = entering_by_sig.get(key)
            if n is None:
                n = entering_by_sig[key] = counters[(X.name, c)].entering(p)
            vec_list.append(n)
        vec = tuple(vec_list)
        if order_costs is not None:
            m = Mapping(p + rest, keep)
            vec += tuple(tile_transfers(op, m, X.dims, c) for X, c in pairs)
            vec += pipeline_counts(op, p + rest, order_costs)
        items.append((vec, p))
    kept = pareto(items)
    _remember(op, rest, pairs, [(p, vec) for vec, p in kept])
    return tuple(p for _, p in kept)


# The counts rule O2 computed for the orders it keeps, per (operator's id, the deeper loops ``rest``, order):
# (operand, boundary) -> ``entering_perfect`` of ``order + rest``. The node bound of each kept order needs the same
# counts (``BoundContext.ordered_entering``) and reads them here instead of walking the order again. Each operator
# keyed is held in ``_KEPT_OPS``, so its id names no other while its entries live; both are cleared past
# KEPT_COUNTS_MAX entries (a node's orders are bounded right after O2 keeps them: a short memory serves, and a
# miss only walks the order).
_KEPT_COUNTS: dict[tuple, dict[tuple[str, int], int]] = {}
_KEPT_OPS: dict[int, Operator] = {}
KEPT_COUNTS_MAX = 20_000


def _remember(op: Operator, rest: tuple[Loop, ...], pairs: list[tuple[Operand, int]],
              kept: list[tuple[tuple[Loop, ...], tuple[int, ...]]]) -> None:
    if len(_KEPT_COUNTS) > KEPT_COUNTS_MAX:
        _KEPT_COUNTS.clear()
        _KEPT_OPS.clear()
    _KEPT_OPS[id(op)] = op
    for order, vec in kept:
        # (a vector with order costs goes on with tile and pipeline counts: the counters are its first entries)
        _KEPT_COUNTS[(id(op), rest, order)] = {(X.name, c): int(n)
                                               for (X, c), n in zip(pairs, vec[:len(pairs)], strict=True)}


def kept_counts(op: Operator, rest: tuple[Loop, ...], order: tuple[Loop, ...]) -> dict[tuple[str, int], int] | None:
    """The counts of ``order + rest`` that rule O2 computed when it kept ``order`` ((operand, boundary below the
    order's level) -> ``entering_perfect``), or None."""
    return _KEPT_COUNTS.get((id(op), rest, order))


class _LevelCounter:
    """``entering_perfect`` of X at boundary c for the nests ``order + rest``, one per order of a level's temporal
    loops (each with bound > 1, one per dim, all above c; ``rest`` the level's spatial loops and every deeper
    loop, in nest order). The deeper loops are walked once: their terms are the same for every order, times the
    product of the level's loops (every one of which is outside them); only the level's own loops are walked per
    order, starting from the deeper loops' wrap-back. Equal to ``entering_perfect`` of the whole nest
    (``tests/test_search.py`` checks it on random nests)."""

    def __init__(self, op: Operator, X: Operand, c: int, rest: tuple[Loop, ...]):
        self.xdims = X.dims
        above = [l for l in rest if l.level < c]
        ext = dict.fromkeys(op.sizes, 1)
        for l in rest:
            if l.level >= c:
                ext[l.dim] *= l.bound
        self.ext = ext
        self.axes = [(tuple(cf for _, cf in ix.terms), tuple(d for d, _ in ix.terms)) for ix in X.indices]
        self.tile = math.prod(axis_size(coeffs, tuple(ext[d] for d in dims)) for coeffs, dims in self.axes)
        self.inst = math.prod(l.bound for l in above if l.spatial)
        # A level loop's step in its dim: the product of the bounds of every later loop of that dim (rest's, and
        # the level's after it).
        self.dim_span = dict.fromkeys(op.sizes, 1)
        for l in rest:
            self.dim_span[l.dim] *= l.bound
        strides = loop_strides(Mapping(rest, ()))
        temporal = [(l, strides[i]) for i, l in enumerate(rest) if l.level < c and not l.spatial and l.bound > 1]
        prefix = [1]
        for l, _ in temporal:
            prefix.append(prefix[-1] * l.bound)
        resets: dict[str, int] = {}
        deeper = 0
        for n in range(len(temporal) - 1, -1, -1):
            l, stride = temporal[n]
            deeper += prefix[n] * (l.bound - 1) * self._moved_in(l.dim, l.bound, stride, resets)
        self.deeper, self.resets = deeper, resets
        # The walk's state between steps: the wrap-back of each of X's dims (``_moved_in`` reads and writes no other),
        # as a tuple; each step's effect memoized on it (``_step``) for the tables of ``order_tables``, which visit
        # every (loop, set of later loops) once. (Memoizing the walk of ``entering`` too made padded nodes slower: a
        # node's few orders rarely repeat a step.)
        self._state = tuple(resets.get(d, 0) for d in self.xdims)
        self._steps: dict[tuple, tuple[int, tuple[int, ...]]] = {}

    def _step(self, dim: str, bound: int, stride: int, state: tuple[int, ...]) -> tuple[int, tuple[int, ...]]:
        """``_moved_in`` from the wrap-back ``state`` (per dim of X): the elements brought and the state after it,
        memoized (a function of its arguments alone)."""
        key = (dim, bound, stride, state)
        got = self._steps.get(key)
        if got is None:
            resets = dict(zip(self.xdims, state, strict=True))
            new = self._moved_in(dim, bound, stride, resets)
            got = self._steps[key] = (new, tuple(resets[d] for d in self.xdims))
        return got

    def _moved_in(self, dim: str, bound: int, stride: int, resets: dict[str, int]) -> int:
        """Elements a step of a loop over ``dim`` (``bound`` steps of ``stride``) brings, given the wrap-back
        ``resets`` of the loops inside it; updates ``resets`` with this loop's own wrap-back (as ``entering_perfect``
        walks)."""
        xdims, ext = self.xdims, self.ext
        new = 0
        if dim in xdims or any(resets.get(d, 0) for d in xdims):
            overlap = 1
            for coeffs, dims in self.axes:
                if len(dims) == 1:
                    d = dims[0]
                    if resets.get(d, 0) + (stride if d == dim else 0):
                        overlap = 0
                        break
                    overlap *= ext[d]
                else:
                    shifts = tuple(resets.get(d, 0) + (stride if d == dim else 0) for d in dims)
                    e = tuple(ext[d] for d in dims)
                    overlap *= axis_overlap(coeffs, e, e, shifts)
                    if not overlap:
                        break
            new = self.tile - overlap
        if dim in xdims:
            resets[dim] = resets.get(dim, 0) - (bound - 1) * stride
        return new

    def entering(self, order: tuple[Loop, ...]) -> int:
        prefix = [1]
        for l in order:
            prefix.append(prefix[-1] * l.bound)
        total = self.tile + prefix[-1] * self.deeper
        span = dict(self.dim_span)
        resets = dict(self.resets)
        for n in range(len(order) - 1, -1, -1):
            l = order[n]
            total += prefix[n] * (l.bound - 1) * self._moved_in(l.dim, l.bound, span[l.dim], resets)
            span[l.dim] *= l.bound
        return self.inst * total
