"""What the exact search's node rate rests on gives the values it replaced, to the bit (docs/mapper.md, "the node rate,
session 18"): rule B29's loads counted with integers equal the one-row ``NestRows`` counts; a context whose memos
(``temporal_left``, the open fan-outs per level, the merge caps, the run cases of partial-tile nests, ``holds_only``)
were filled by other nodes gives every bound a fresh context gives, on plain and Ruby-S contexts; and the run cases
of a partial-tile nest, made from the placeholder's cases, equal those computed with its whole positions."""

import random

import pytest

from accelmap.search.bounds import BoundContext
from accelmap.search.burst_bound import _nest_rows_loads, _slot_loads
from accelmap.search.padded_busy_lanes import BusyLaneContext
from accelmap.search.padded_interior_lanes import InteriorLaneContext
from strategies import random_perfect_mappings
from test_bound_bursts import small_double_buffered
from test_bound_padded_rounds import _padded_mappings
from test_search_node_parts import PRESETS, node_calls, padded_node_calls, unrolling_of


def test_burst_loads_counted_with_integers_equal_the_one_row_nest():
    rng = random.Random(3)
    compared = moved = 0
    draws = list(random_perfect_mappings(11, 16, PRESETS)) + list(random_perfect_mappings(12, 16, [],
                                                                                          small_double_buffered))
    for _, arch, op, m in draws:
        ctx = BoundContext(op, arch, m.keep)
        for c in range(1, len(arch.levels)):
            if arch.levels[c].shared_axes:
                continue
            streams = [X for X in op.operands if c in ctx.chains[X.name][1:]]
            if not streams:
                continue
            ext = dict.fromkeys(op.dim_names, 1)
            for l in m.loops:
                if l.level >= c:
                    ext[l.dim] *= l.bound
            ext = {d: min(e, op.sizes[d]) for d, e in ext.items()}
            above = [l for l in m.loops if l.level < c]
            for _ in range(3):
                want = _nest_rows_loads(ctx, tuple(above), ext, c, streams)
                assert _slot_loads(ctx, tuple(above), ext, c, streams) == want, (arch.name, c, above, ext)
                compared += 1
                moved += any(t > 0 for t in want[2])
                rng.shuffle(above)      # (any nest order of the loops above c: the counts read it)
    assert compared > 100 and moved > 30, (compared, moved)


def test_a_context_with_memos_filled_by_other_nodes_gives_a_fresh_contexts_bounds():
    rng = random.Random(8)
    checked = 0
    for n, (_, arch, op, m) in enumerate(random_perfect_mappings(23, 12, PRESETS)):
        spatial = unrolling_of(arch, m) if n % 2 else None
        objective = "edp" if n % 3 else None
        warm = BoundContext(op, arch, m.keep, spatial, objective)
        calls = []
        for level in range(len(arch.levels)):
            rem = dict(op.sizes)
            for l in m.loops:
                if l.level >= level:
                    rem[l.dim] //= l.bound
            calls += [(fixed, level, rem, kw) for fixed, kw in node_calls(m, level, rng)]
        rng.shuffle(calls)
        for fixed, level, rem, kw in calls:
            want = BoundContext(op, arch, m.keep, spatial, objective).lower_bound(fixed, level, dict(rem), **kw)
            assert warm.lower_bound(fixed, level, dict(rem), **kw) == want, (level, fixed, kw)
            checked += 1
    assert checked > 100


@pytest.mark.parametrize("context", [BusyLaneContext, InteriorLaneContext])
def test_ruby_s_contexts_with_filled_memos_give_a_fresh_contexts_bounds_and_run_cases(context):
    rng = random.Random(9)
    checked = placeholders = 0
    for arch, op, m, spatial in _padded_mappings(30, ("tpu_like", "vta_like", "edge_tpu_like", "simba_like"), seed=6):
        warm = context(op, arch, m.keep, spatial)
        calls = padded_node_calls(op, arch, m)
        rng.shuffle(calls)
        for fixed, level, rem, full, kw in calls:
            fresh = context(op, arch, m.keep, spatial)
            want = fresh.lower_bound(fixed, level, dict(rem), full_positions=full, **kw)
            assert warm.lower_bound(fixed, level, dict(rem), full_positions=full, **kw) == want, (level, fixed, kw)
            checked += 1
            if full != 1:
                # the run cases made from the placeholder's, against those computed with the whole positions
                assert warm.run_alternatives(rem, level, full, perfect=False) == \
                    fresh._run_cases(rem, level, full, False)
                placeholders += 1
    assert checked > 60 and placeholders > 20, (checked, placeholders)


def test_rule_b4_rows_reusing_the_plain_calls_traffic_equal_rows_computed_afresh():
    """``open_bounds_rows`` over some rows with an innermost loop, reading the traffic its call over every order kept
    (``keep``/``reuse``) for the operands the loop does not move, equals the same call computing everything."""
    import numpy as np

    from accelmap.search.node_bounds import open_bounds_rows
    from test_search_node_bounds import random_nodes

    rng = random.Random(4)
    compared = reused = 0
    for ctx, level, inner, s_loops, tilings in random_nodes(17, 40):
        dims = ctx.op.dim_names
        T = np.array([[next((l.bound for l in t if l.dim == d), 1) for d in dims] for t, _ in tilings])
        rem = np.array([[r[d] for d in dims] for _, r in tilings])
        frees = [({level: T}, level, rem)]
        if level == 1:
            frees.append(({1: T, 0: rem}, 0, np.ones_like(rem)))
        for free, low, left in frees:
            kept: dict = {}
            if open_bounds_rows(ctx, s_loops + inner, free, low, left, keep=kept) is None:
                continue
            for d in rng.sample(dims, min(3, len(dims))):
                idx = np.array(sorted(rng.sample(range(len(tilings)), rng.randint(1, len(tilings)))))
                sub = {f: a[idx] for f, a in free.items()}
                want = open_bounds_rows(ctx, s_loops + inner, sub, low, left[idx], d)
                got = open_bounds_rows(ctx, s_loops + inner, sub, low, left[idx], d, reuse=(kept, idx))
                assert want is not None and got is not None
                assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1]), (ctx.arch.name, d)
                compared += 1
                reused += any(d not in ctx.plain[X.name] and not ctx.plain[X.name] <= {d} for X in ctx.op.operands)
    assert compared > 50 and reused > 30, (compared, reused)


def test_a_subclass_computing_the_run_cases_otherwise_gets_them_computed():
    """The placeholder's run cases stand for ``_innermost_alternatives``' own: a context that overrides it has its
    cases computed from it at every (rem, level, whole positions), not read from the placeholder's."""
    calls = []

    class Counting(BusyLaneContext):
        def _innermost_alternatives(self, rem, level, *, windows=False):
            calls.append(level)
            return super()._innermost_alternatives(rem, level, windows=windows)

    arch, op, m, spatial = next(iter(_padded_mappings(5, ("tpu_like",), seed=6)))
    ctx = Counting(op, arch, m.keep, spatial)
    rem = dict(op.sizes)
    for full in (2, 3, 5):
        assert ctx.run_alternatives(rem, 0, full, perfect=False) == BusyLaneContext._run_cases(ctx, rem, 0, full, False)
    assert len(calls) == 6      # each full asked computes its cases (and the check above once more)
