"""The node-rate structures of the exact search equal what they replace, on random operators and presets:
rule O2's orders from tables (``order_tables``, with the counter's memoized steps), the open-order counts' shared parts,
the nest-without-loops-above shortcut of ``_tile_and_entering`` and the node's kept bounds."""

from __future__ import annotations

import itertools
import random

import pytest

import strategies
from accelmap.arch.presets import get_accelerator
from accelmap.cost.access_counts import NestInfo, entering_perfect
from accelmap.mapping.loopnest import Loop, Mapping
from accelmap.search import bounds, order_tables, orders
from accelmap.search.bounds import BoundContext, _tile_and_entering, entering_any_order
from accelmap.workload.index_sets import tile_size

PRESETS = ["eyeriss_like", "simba_like", "tpu_like", "edge_tpu_like", "ascend_like", "vta_like"]
_ARCHS: dict = {}


def mappings(seed: int, draws: int):
    """``strategies.random_perfect_mappings`` over PRESETS in turn, each preset parsed once for the file."""
    turn = itertools.count()

    def preset(_rng):
        name = PRESETS[next(turn) % len(PRESETS)]
        if name not in _ARCHS:
            _ARCHS[name] = get_accelerator(name)
        return _ARCHS[name]
    return strategies.random_perfect_mappings(seed, draws, PRESETS, draw_arch=preset)


def merged_levels(op, m, level):
    """A level with one temporal loop per dim (every temporal loop at ``level`` and above merged into it, so up to
    seven loops) and the mapping's deeper loops: the nests ``orders._pruned`` orders."""
    bound = dict.fromkeys(op.dim_names, 1)
    for l in m.loops:
        if l.level <= level and not l.spatial:
            bound[l.dim] *= l.bound
    temporal = tuple(Loop(d, b, level) for d, b in bound.items() if b > 1)
    rest = tuple(l for l in m.loops if l.level > level or (l.level == level and l.spatial))
    return temporal, rest


def cases(seed, draws):
    for rng, arch, op, m in mappings(seed, draws):
        nlev = len(arch.levels)
        for level in range(nlev - 1):
            temporal, rest = merged_levels(op, m, level)
            if len(temporal) >= 3:
                perms = list(itertools.permutations(temporal))
                if len(perms) > 120:
                    perms = perms[:: len(perms) // 120]     # (a fixed subset of one set of loops: any list may come)
                yield rng, op, m.keep, level, nlev, rest, perms


def test_orders_from_tables_equal_the_walk_and_the_whole_nest(monkeypatch):
    """``pareto_orders`` keeps the orders ``_pruned``'s walk keeps, in its order (with the tables used from three
    loops on), and the walk's counters equal ``entering_perfect`` of the whole nest."""
    monkeypatch.setattr(order_tables, "TABLE_ORDERS", 2)
    compared = tabled = 0
    for _, op, keep, level, nlev, rest, perms in cases(5, 10):
        pairs = [(X, c) for X in op.operands for c in range(level + 1, nlev) if X.name in keep[c]]
        if not pairs:
            continue
        counters = [orders._LevelCounter(op, X, c, rest) for X, c in pairs]
        got = order_tables.pareto_orders(counters, perms)
        tabled += got is not None
        with monkeypatch.context() as walk:
            walk.setattr(orders, "pareto_order_counts", lambda *_: None)
            want = orders._pruned(op, keep, level, rest, nlev, perms, None)
        assert got == want
        # the counts the node bounds read for each kept order (``kept_counts``, left by the walk here) are the
        # tables' and the walk's
        for p, vec in order_tables.pareto_order_counts(counters, perms) or []:
            assert vec == tuple(ct.entering(p) for ct in counters)
            assert orders.kept_counts(op, rest, p) == {(X.name, c): n for (X, c), n in zip(pairs, vec, strict=True)}
        # the walk's vectors against the whole nest's counts, on a few orders
        for p in perms[:3]:
            info = NestInfo(op, Mapping(p + rest, keep))
            assert [ct.entering(p) for ct in counters] == [entering_perfect(info, X, c) for X, c in pairs]
        compared += 1
    assert compared >= 6 and tabled == compared


def test_orders_from_tables_refuse_what_they_do_not_cover():
    op_loops = (Loop("K", 2, 1), Loop("K", 3, 1), Loop("C", 2, 1))
    assert order_tables.pareto_orders([object()], list(itertools.permutations(op_loops))) is None   # a dim twice
    assert order_tables.pareto_orders([], list(itertools.permutations(op_loops[1:]))) is None


def test_tile_and_entering_with_no_loop_above_the_boundary_equals_a_fresh_count():
    checked = 0
    for _, _, op, m in mappings(9, 10):
        for c in range(1, 1 + max((l.level for l in m.loops), default=0)):
            inside = tuple(l for l in m.loops if l.level >= c)     # the nest with the loops above c taken out
            info = NestInfo(op, Mapping(inside, ()))
            for X in op.operands:
                want = (tile_size(X, info.inner_extents(c)), entering_perfect(info, X, c))
                bounds._ENTERING.clear()
                assert _tile_and_entering(op, inside, X.name, c) == want
                checked += 1
    assert checked > 15


def test_open_order_counts_with_shared_parts_equal_fresh_ones():
    """One memo of parts shared by the counts of every innermost loop (and asked in shuffled order) gives what a
    count without the memo gives."""
    checked = 0
    for rng, arch, op, m in mappings(31, 10):
        nlev = len(arch.levels)
        for level in range(nlev - 1):
            fixed = tuple(l for l in m.loops if l.level >= level)
            own = [l for l in fixed if l.level == level and not l.spatial and l.bound > 1]
            for free in ({level}, {level, level + 1} if level + 1 < nlev - 1 else {level}):
                parts: dict = {}
                asks = [(innermost, X, c) for innermost in [None, *own] for X in op.operands
                        for c in range(level + 1, nlev)]
                rng.shuffle(asks)
                for innermost, X, c in asks:
                    shared = entering_any_order(op, fixed, frozenset(free), m.keep, innermost, parts)(X, c)
                    assert shared == entering_any_order(op, fixed, frozenset(free), m.keep, innermost)(X, c)
                    checked += 1
    assert checked > 100


def test_a_nest_bounded_again_gets_the_bound_of_a_fresh_context():
    checked = 0
    for _, arch, op, m in mappings(17, 8):
        ctx = BoundContext(op, arch, m.keep, objective="edp")
        for level in range(len(arch.levels)):
            fixed, rem = strategies.fixed_at_and_above(op, m, level)
            asks = [dict()] + ([dict(free_orders=frozenset({level}))] if level < len(arch.levels) - 1 else [])
            for kw in asks:
                fresh = BoundContext(op, arch, m.keep, objective="edp").lower_bound(fixed, level, dict(rem), **kw)
                # asked twice, the second time with an equal nest that is not the same object
                assert ctx.lower_bound(fixed, level, dict(rem), **kw) == fresh
                assert ctx.lower_bound(tuple(list(fixed)), level, dict(rem), **kw) == fresh
                checked += 1
    assert checked > 15


@pytest.mark.parametrize("seed", [3])
def test_counter_equals_the_whole_nest_for_orders_with_a_dim_twice(seed):
    """A nest not in the search's form (a dim twice at the level) still gets the whole nest's count."""
    rng = random.Random(seed)
    compared = 0
    for _, _, op, m in mappings(seed, 8):
        for level in range(1, 1 + max(l.level for l in m.loops)):
            rest = tuple(l for l in m.loops if l.level >= level)
            dims = [d for d in op.dim_names if op.sizes[d] >= 4]
            if len(dims) < 1:
                continue
            d = rng.choice(dims)
            order = (Loop(d, 2, level - 1), Loop(d, 2, level - 1))
            for X in op.operands:
                counter = orders._LevelCounter(op, X, level, rest)
                info = NestInfo(op, Mapping(order + rest, m.keep))
                assert counter.entering(order) == entering_perfect(info, X, level)
                compared += 1
    assert compared > 8
