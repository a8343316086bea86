"""The exact search ranks a node's children by bounds without rules B70/B71 (``BoundContext.ranking_context``) and
cuts each child with every rule at its turn (docs/mapper.md, "Ranked without B70/B71"): the ranking bounds stay below
the full bounds, which stay below the cost; and the leaves the search costs are, in order, a subsequence of those it
costs with B70/B71 switched off (the same order of children, fewer of them), with the same best value."""

import math

import pytest

from accelmap.arch.accelerator import adopt_precision
from accelmap.cost.model import evaluate
from accelmap.search import bounds, optimal
from accelmap.search.bounds import BoundContext
from accelmap.search.space import Constraints
from accelmap.workload import parse_expression
from strategies import random_perfect_mappings
from test_bound_spread_drains import accumulators_over_dram


def test_ranking_bounds_lie_below_the_full_bounds_and_the_cost():
    """At every level of random simba_like mappings (and the small Simba-like acc4's): ranking bound <= full bound <=
    the model's latency, the ranking bound lower on some nodes (B70/B71 count there: the test can tell)."""
    lower = 0
    draws = [(arch, op, m) for _, arch, op, m in random_perfect_mappings(70, 24, ["simba_like"])]
    draws += [(arch, op, m) for _, arch, op, m in random_perfect_mappings(
        71, 24, [], draw_arch=lambda rng: accumulators_over_dram("24 B", "16 bit/cycle"))]
    for arch, op, m in draws:
        ctx = BoundContext(op, arch, m.keep)
        rank = ctx.ranking_context()
        assert rank.first_queue_terms == [] and rank.last_drain_terms == [
            t for t in ctx.last_drain_terms if arch.levels[t[0]].instances == 1]
        cost = evaluate(op, arch, m)
        for level in range(len(arch.levels)):
            fixed = tuple(l for l in m.loops if l.level >= level)
            rem = {d: -(-s // math.prod(l.bound for l in fixed if l.dim == d)) for d, s in op.sizes.items()}
            e_r, l_r = rank.lower_bound(fixed, level, rem)
            e_f, l_f = ctx.lower_bound(fixed, level, rem)
            assert e_r == e_f and l_r <= l_f <= cost.latency * (1 + 1e-9)
            lower += l_r < l_f
    assert lower > 0


def _leaves(op, arch, cons, mode, monkeypatch):
    """The mappings the search costs, in order, and its best value: ``mode`` 'ranked' (as committed), 'off' (B70/B71
    switched off everywhere) or 'full' (children ranked by the full bounds, as before the ranking context)."""
    seen = []

    def costed(o, a, m, check=True):
        seen.append(m)
        return evaluate(o, a, m, check=check)

    drains = bounds.last_drain_terms
    with monkeypatch.context() as patch:
        patch.setattr(optimal, "evaluate", costed)
        if mode == "off":
            patch.setattr(bounds, "first_queue_terms", lambda *a, **k: [])
            patch.setattr(bounds, "last_drain_terms", lambda *a, **k: drains(*a, **{**k, "spread": False}))
        if mode == "full":
            patch.setattr(BoundContext, "ranking_context", lambda self: self)
        got, _ = optimal.search_optimal(op, arch, "edp", constraints=cons)
    return seen, got[0].value


def _in_order_within(a, b) -> bool:
    rest = iter(b)
    return all(x in rest for x in a)


@pytest.mark.parametrize(("sizes", "unrolling"), [({"k": 4, "p": 4, "r": 4}, {"k": 2, "p": 2}),
                                                  ({"k": 4, "p": 4, "r": 4}, {"k": 2}),
                                                  ({"k": 4, "p": 8, "r": 2}, {"k": 2, "p": 2})])
def test_search_costs_the_leaves_it_costed_without_b70_b71_in_their_order(sizes, unrolling, monkeypatch):
    """A 1-D convolution on four single-buffered PE buffers under one fan-out (B70 and B71 count there), one unrolling:
    the leaves costed are, in order, within those costed with B70/B71 off, at the same best EDP; ranked by the full
    bounds (the merge before the ranking context) they are not (another order)."""
    arch = accumulators_over_dram("24 B", "32 bit/cycle")
    op = adopt_precision(parse_expression("O[k,p] += I[p+r] * W[k,r]", sizes, name="conv1d"), arch)
    cons = Constraints(keep={"PEBuf": frozenset("IWO")}, spatial={"X": unrolling})
    ranked, v_ranked = _leaves(op, arch, cons, "ranked", monkeypatch)
    off, v_off = _leaves(op, arch, cons, "off", monkeypatch)
    full, v_full = _leaves(op, arch, cons, "full", monkeypatch)
    assert v_ranked == v_off == v_full
    assert _in_order_within(ranked, off) and len(ranked) < len(off)
    assert not _in_order_within(full, off)
