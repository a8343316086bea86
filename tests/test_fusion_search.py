"""Cutting a chain into fused groups: the dynamic program against every partition, never worse than
layer by layer."""

from __future__ import annotations

import itertools
import random
import time
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelmap.arch.presets import get_accelerator
from accelmap.cost.model import evaluate
from accelmap.fusion.chain import fusable_chains, span_residual_blocks
from accelmap.fusion.geometry import MODES, schedules
from accelmap.fusion.group_cost import (
    GroupCost,
    InnerMappings,
    TileBounds,
    fmap_bits,
    group_cost,
    group_lower_bound,
    offchip_bits,
)
from accelmap.fusion.search import (
    FusionConfig,
    Point,
    SearchLog,
    Single,
    chain_front,
    group_candidates,
    join_alone,
    joins_alone,
    pareto,
)
from accelmap.mapping.sampling import random_mapping
from accelmap.workload import conv2d
from accelmap.workload.models.chains import ChainLink, Window
from accelmap.workload.models.chains import Join as ChainJoin

EYERISS = get_accelerator("eyeriss_like")
BITS = {"I": 16, "W": 16, "O": 16}


def small_chain(rng: random.Random):
    h, w, c = rng.randint(4, 8), rng.randint(4, 8), rng.randint(1, 3)
    ops, links = {}, []
    for i in range(rng.randint(2, 4)):
        wins: tuple[Window, ...] = ()
        if i and rng.random() < 0.3 and h >= 4 and w >= 4:
            wins = (Window(f"pool{i}", (2, 2), (2, 2), (0, 0, 0, 0)),)
            h, w = h // 2, w // 2
        k = rng.randint(1, 3)
        ops[f"c{i}"] = conv2d(f"c{i}", c=c, h=h, w=w, k=k, r=3, s=3, padding=1, bits=BITS)
        links.append(ChainLink(f"c{i}", wins))
        c = k
    (chain,) = fusable_chains(tuple(links), ops)
    return chain, ops


def singles_of(ops, rng):
    out = {}
    for name, op in ops.items():
        res = evaluate(op, EYERISS, random_mapping(op, EYERISS, rng, check_fit=True))
        out[name] = Single(name, res.energy_total, res.latency, offchip_bits(op, res, "DRAM"),
                           fmap_bits(op, res, "DRAM"))
    return out


def front_equals_every_plan(chain, ops, rng, cfg=None):
    """The dynamic program's front holds, per objective, the best of every partition of the chain into runs and
    every candidate of every run (the same memoized tiles); returns the front, the layer-by-layer singles, the
    tile mappings and the configuration."""
    singles = singles_of(ops, rng)
    inner = InnerMappings(lambda op, arch: random_mapping(op, arch, rng, check_fit=True))
    cfg = cfg or FusionConfig(row_tiles=3, col_tiles=2, per_mode=1)
    front = chain_front(chain, singles, EYERISS, inner, cfg)
    totals = every_plan(chain, singles, inner, cfg)
    for goal in ("energy", "latency", "edp"):
        best = min(p.objective(goal) for p in totals)
        assert abs(min(p.objective(goal) for p in front) - best) <= 1e-9 * best
    return front, singles, inner, cfg


@settings(max_examples=6)
@given(st.integers(0, 10**9))
def test_the_dynamic_program_is_the_best_partition(seed):
    rng = random.Random(seed)
    chain, ops = small_chain(rng)
    front, singles, _, _ = front_equals_every_plan(chain, ops, rng)
    lbl = sum(s.energy for s in singles.values()), sum(s.latency for s in singles.values())
    assert min(p.energy for p in front) <= lbl[0] and min(p.latency for p in front) <= lbl[1]


def test_a_fused_pair_keeps_its_intermediate_on_chip():
    ops = {"a": conv2d("a", c=2, h=8, w=8, k=4, r=3, s=3, padding=1, bits=BITS),
           "b": conv2d("b", c=4, h=8, w=8, k=2, r=3, s=3, padding=1, bits=BITS)}
    (chain,) = fusable_chains((ChainLink("a"), ChainLink("b")), ops)
    rng = random.Random(0)
    inner = InnerMappings(lambda op, arch: random_mapping(op, arch, rng, check_fit=True))
    found = group_candidates(chain, 0, 1, EYERISS, inner, FusionConfig(), SearchLog())
    assert found and all(isinstance(g, GroupCost) for g in found)
    for g in found:
        # Off chip: the input (each element once or, recomputing halos, again), the weights, the output once.
        w_at_least = (4 * 2 * 9 + 2 * 4 * 9) * 16
        assert g.offchip_bits >= 2 * 64 * 16 + w_at_least + 2 * 64 * 16
        assert g.counts.macs[1] == ops["b"].macs


def test_pareto_keeps_the_non_dominated_points():
    pts = [Point(1, 5, 0, ()), Point(2, 4, 0, ()), Point(3, 4, 0, ()), Point(4, 1, 0, ()), Point(5, 2, 0, ())]
    assert [(p.energy, p.latency) for p in pareto(pts)] == [(1, 5), (2, 4), (4, 1)]


def test_past_the_deadline_no_group_is_tried_and_the_search_says_so():
    rng = random.Random(3)
    ops = {f"c{i}": conv2d(f"c{i}", c=2, h=6, w=6, k=2, r=3, s=3, padding=1, bits=BITS) for i in range(4)}
    (chain,) = fusable_chains(tuple(ChainLink(n) for n in ops), ops)
    singles = singles_of(ops, rng)
    inner = InnerMappings(lambda op, arch: random_mapping(op, arch, rng, check_fit=True))
    stats = SearchLog()
    front = chain_front(chain, singles, EYERISS, inner, FusionConfig(), stats, deadline=time.perf_counter() - 1)
    # Groups of 2..4 of 4 operators: 3 + 2 + 1, none tried; layer by layer is the only plan left.
    assert stats.timed_out and stats.groups_tried == 0 and stats.groups_skipped == 6 and inner.searched == 0
    assert [(p.energy, p.latency) for p in front] == [(sum(s.energy for s in singles.values()),
                                                        sum(s.latency for s in singles.values()))]
    # Without a deadline the same search tries every group and is not marked.
    free = SearchLog()
    chain_front(chain, singles, EYERISS, inner, FusionConfig(row_tiles=2, col_tiles=1, per_mode=1), free)
    assert not free.timed_out and free.groups_tried == 6 and free.groups_skipped == 0


def residual_chain(rng: random.Random, n: int | None = None, size: tuple[int, int] | None = None):
    """2-3 padded 3x3 convolutions keeping h x w x c, then a residual add of the chain's input."""
    h, w = size or (rng.randint(3, 6), rng.randint(3, 6))
    c = rng.randint(1, 3)
    ops = {f"c{i}": conv2d(f"c{i}", c=c, h=h, w=w, k=c, r=3, s=3, padding=1, bits=BITS)
           for i in range(n or rng.randint(2, 3))}
    links = [ChainLink(name) for name in ops]
    links[-1] = ChainLink(links[-1].node, join=ChainJoin("add", "c0"))
    (chain,) = fusable_chains(tuple(links), ops)
    return chain, ops


def every_plan(chain, singles, inner, cfg):
    """Every partition of the chain into runs and every candidate of every run; a run that leaves the
    join after it out runs that join alone after it."""
    n = len(chain.nodes)
    alone_after = joins_alone(chain, EYERISS)
    cands: dict[tuple[int, int], list] = {}
    for i in range(n):
        cands[(i, i)] = [singles[chain.nodes[i]]]
        for j in range(i + 1, n):
            cands[(i, j)] = group_candidates(chain, i, j, EYERISS, inner, cfg, SearchLog())
    totals = []
    for cuts in itertools.product([False, True], repeat=n - 1):
        runs, start = [], 0
        for k, cut in enumerate(cuts, start=1):
            if cut:
                runs.append((start, k - 1))
                start = k
        runs.append((start, n - 1))
        for pick in itertools.product(*(cands[r] for r in runs)):
            pick = tuple(pick) + tuple(alone_after[b] for (_, b), p in zip(runs, pick, strict=True)
                                       if b in alone_after and not (isinstance(p, GroupCost) and p.join is not None))
            totals.append(Point(sum(p.energy for p in pick), sum(p.latency for p in pick),
                                sum(p.offchip_bits for p in pick), tuple(pick)))
    return totals


@settings(max_examples=2, deadline=None)
@given(st.integers(0, 10**9))
def test_the_dynamic_program_is_the_best_partition_with_a_residual_join(seed):
    rng = random.Random(seed)
    chain, ops = residual_chain(rng)
    assert chain.join is not None and chain.join.skip == 0
    _, _, inner, cfg = front_equals_every_plan(chain, ops, rng)
    # Groups spanning the whole chain carry the join, the skip kept (no off-chip read of it); where it lies
    # in the tiles' windows (always for two convolutions) that alone, else re-reading it is tried too.
    whole = group_candidates(chain, 0, len(ops) - 1, EYERISS, inner, cfg, SearchLog())
    kept = [g for g in whole if g.skip_policy == "kept"]
    assert kept and all(g.join_cost is not None and g.join_cost.offchip_bits == 0 for g in kept)
    if len(ops) == 2:
        assert kept == whole
    # A group not starting at the chain's input sees the skip from outside: re-read, or the add alone.
    if len(ops) == 3:
        tail = group_candidates(chain, 1, 2, EYERISS, inner, cfg, SearchLog())
        assert {g.skip_policy for g in tail} <= {None, "re-read"}


@settings(max_examples=1, deadline=None)
@given(st.integers(0, 10**9))
def test_the_dynamic_program_is_the_best_partition_over_two_residual_blocks(seed):
    """Two residual blocks (2 convolutions each), the first add's result read by the next block and the
    next add, as one chain: the dynamic program over cuts (a join inside a group, ending it, or alone)
    equals every partition's best, and the whole chain is a group keeping both skips on chip."""
    rng = random.Random(seed)
    h, w, c = rng.randint(3, 4), rng.randint(3, 4), 1
    ops = {f"c{i}": conv2d(f"c{i}", c=c, h=h, w=w, k=c, r=3, s=3, padding=1, bits=BITS) for i in range(4)}
    a = fusable_chains((ChainLink("c0"), ChainLink("c1", join=ChainJoin("add1", "c0", "c2"))), ops)
    b = fusable_chains((ChainLink("c2"), ChainLink("c3", join=ChainJoin("add2", "c2"))), ops)
    (chain,) = span_residual_blocks(a + b)
    assert chain.nodes == ("c0", "c1", "c2", "c3") and chain.joins_after().keys() == {1, 3}
    front, singles, inner, cfg = front_equals_every_plan(chain, ops, rng,
                                                         FusionConfig(row_tiles=2, col_tiles=1, per_mode=1))
    # Every plan of the two blocks as separate chains is a plan of the spanned chain (the same groups, the
    # first add ending a group or run alone): spanning is never worse, with the same tile mappings.
    apart = [chain_front(c, singles, EYERISS, inner, cfg) for c in a + b]
    for goal in ("energy", "latency"):
        assert min(p.objective(goal) for p in front) <= sum(min(p.objective(goal) for p in f) for f in apart) * (
            1 + 1e-12)
    whole = group_candidates(chain, 0, 3, EYERISS, inner, cfg, SearchLog())
    assert all(len(g.inner_joins) == 1 for g in whole)
    assert any(g.inner_joins[0][1] == "kept" and g.inner_join_costs[0].offchip_bits == 0 for g in whole)
    # A group from the second convolution on sees the first add's skip from outside: re-read.
    mid = group_candidates(chain, 1, 2, EYERISS, inner, cfg, SearchLog())
    assert {g.skip_policy for g in mid} <= {None, "re-read"}


@settings(max_examples=4, deadline=None)
@given(st.integers(0, 10**9))
def test_the_lower_bound_is_below_every_costed_plan(seed):
    rng = random.Random(seed)
    chain, _ = residual_chain(rng)
    stages, macs = chain.group(0, len(chain.nodes) - 1)
    inner = InnerMappings(lambda op, arch: random_mapping(op, arch, rng, check_fit=True))
    tile_bounds = TileBounds(EYERISS)
    last = stages[-1]
    for _ in range(4):
        tr, tc = rng.randint(1, last.out_rows), rng.randint(1, last.out_cols)
        policies = (rng.choice(list(MODES)),) * len(stages)
        join, sp = rng.choice([(None, "re-read"), (chain.join, "kept"), (replace(chain.join, skip=None), "re-read")])
        g = group_cost(stages, macs, EYERISS, tr, tc, policies, inner, False, join, sp)
        if isinstance(g, str):
            continue
        rows, cols = schedules(stages, tr, tc, policies)
        e, lat = group_lower_bound(stages, macs, EYERISS, g.counts, rows, cols, False, join, sp)
        assert e <= g.energy * (1 + 1e-12) and lat <= g.latency * (1 + 1e-12)
        # The tiles' certified bounds are tighter, and still below.
        te, tlat = group_lower_bound(stages, macs, EYERISS, g.counts, rows, cols, False, join, sp, tile_bounds)
        assert e < te <= g.energy * (1 + 1e-12) and tlat <= g.latency * (1 + 1e-12)


def all_tile_plans(chain, singles, inner):
    """Layer by layer, or the two operators fused with every tile size and mode, the skip kept, re-read or
    added alone."""
    stages, macs = chain.group(0, 1)
    alone = join_alone(chain, EYERISS)
    plans = [Point(sum(s.energy for s in singles.values()) + alone.energy,
                   sum(s.latency for s in singles.values()) + alone.latency, 0, ())]
    for tr in range(1, stages[-1].out_rows + 1):
        for tc in range(1, stages[-1].out_cols + 1):
            for mode in MODES:
                for join, sp, extra in ((chain.join, "kept", None), (chain.join, "re-read", None),
                                        (None, "re-read", alone)):
                    g = group_cost(stages, macs, EYERISS, tr, tc, (mode,) * 2, inner, False, join, sp)
                    if not isinstance(g, str):
                        plans.append(Point(g.energy + (extra.energy if extra else 0.0),
                                           g.latency + (extra.latency if extra else 0.0), 0, (g,)))
    return plans


def test_exact_tile_search_finds_the_best_of_every_tile_size_and_says_so():
    rng = random.Random(5)
    chain, ops = residual_chain(rng, 2, (4, 3))
    singles = singles_of(ops, rng)
    inner = InnerMappings(lambda op, arch: random_mapping(op, arch, rng, check_fit=True))
    cfg = FusionConfig(exact_tiles=True, front_limit=None)
    stats = SearchLog()
    bound: list[Point] = []
    front = chain_front(chain, singles, EYERISS, inner, cfg, stats, bound_front=bound)
    assert stats.candidates_unresolved == 0 and not stats.fronts_thinned
    # 4 x 3 tile sizes and 3 modes (re-reading the skip too where keeping it costs buffer), each costed or
    # pruned by its bound.
    assert stats.candidates_pruned + stats.candidates_costed >= 36 and stats.candidates_pruned > 0
    totals = all_tile_plans(chain, singles, inner)
    for goal in ("energy", "latency", "edp"):
        best = min(p.objective(goal) for p in totals)
        assert abs(min(p.objective(goal) for p in front) - best) <= 1e-9 * best
        # Nothing unresolved: the bound front is the front.
        assert abs(min(p.objective(goal) for p in bound) - best) <= 1e-9 * best


def test_exact_tile_search_out_of_time_keeps_a_proven_bound():
    rng = random.Random(6)
    chain, ops = residual_chain(rng, 2, (3, 3))
    singles = singles_of(ops, rng)
    inner = InnerMappings(lambda op, arch: random_mapping(op, arch, rng, check_fit=True))
    stats = SearchLog()
    bound: list[Point] = []
    front = chain_front(chain, singles, EYERISS, inner, FusionConfig(exact_tiles=True, exact_group_seconds=0.0,
                                                                       front_limit=None), stats, bound_front=bound)
    assert stats.candidates_costed == 0 and stats.candidates_unresolved > 0
    # Only layer by layer was costed; the bound is below it and below every plan of the space.
    totals = all_tile_plans(chain, singles, inner)
    for goal in ("energy", "latency", "edp"):
        low = min(p.objective(goal) for p in bound)
        assert low <= min(p.objective(goal) for p in totals) * (1 + 1e-12)
        assert low <= min(p.objective(goal) for p in front)


def test_each_skip_inside_a_group_is_kept_or_re_read_by_cost():
    """Three blocks of two convolutions (kernels 1 3, 1 1, 3 1) as one group. The first add's skip is the
    group's input (kept or re-read); the other two are intermediates of the group, never written to memory, so
    only kept. Keeping the first is refused at some tiles where the second is still kept: there the search
    keeps one inner skip and re-reads the other, and its best plan for energy, latency and EDP equals the best
    of every treatment costed one by one."""
    ops = {}
    for b, (r1, r2) in enumerate(((1, 3), (1, 1), (3, 1))):
        ops[f"p{b}"] = conv2d(f"p{b}", c=1, h=4, w=4, k=1, r=r1, s=r1, padding=r1 // 2, bits=BITS)
        ops[f"q{b}"] = conv2d(f"q{b}", c=1, h=4, w=4, k=1, r=r2, s=r2, padding=r2 // 2, bits=BITS)
    chains = [fusable_chains((ChainLink(f"p{b}"), ChainLink(f"q{b}", join=ChainJoin(
        f"add{b}", f"p{b}", f"p{b + 1}" if b < 2 else None))), ops)[0] for b in range(3)]
    (chain,) = span_residual_blocks(chains)
    rng = random.Random(11)
    inner = InnerMappings(lambda op, arch: random_mapping(op, arch, rng, check_fit=True))
    found = group_candidates(chain, 0, 5, EYERISS, inner, FusionConfig(row_tiles=3, col_tiles=2, per_mode=1),
                             SearchLog())
    stages, macs = chain.group(0, 5)
    join, ij = chain.group_join(0, 5), chain.group_inner_joins(0, 5)
    assert [j.skip for j in ij] == [0, 2] and join.skip == 4
    assert all(g.skip_policy == "kept" and g.inner_joins[1][1] == "kept" for g in found)
    mixed = {(g.tile_rows, g.tile_cols, g.policies) for g in found if g.inner_joins[0][1] == "re-read"}
    assert mixed
    every = []
    for tr, tc, pol in mixed:
        for first in ("kept", "re-read"):
            g = group_cost(stages, macs, EYERISS, tr, tc, pol, inner, False, join, "kept",
                           ((ij[0], first), (ij[1], "kept")))
            if not isinstance(g, str):
                every.append((g.energy, g.latency))
    best = [(g.energy, g.latency) for g in found if (g.tile_rows, g.tile_cols, g.policies) in mixed]
    for f in (lambda p: p[0], lambda p: p[1], lambda p: p[0] * p[1]):
        assert min(map(f, best)) == pytest.approx(min(map(f, every)), rel=1e-12)
