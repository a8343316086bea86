"""Cutting a chain into fused groups: the dynamic program against every partition, never worse than
layer by layer."""

from __future__ import annotations

import itertools
import random
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from accelmap.arch.presets import get_accelerator
from accelmap.cost.model import evaluate
from accelmap.fusion.chain import fusable_chains
from accelmap.fusion.group_cost import GroupCost, InnerMappings, fmap_bits, offchip_bits
from accelmap.fusion.search import FusionConfig, Point, SearchLog, Single, chain_front, group_candidates, pareto
from accelmap.mapping.sampling import random_mapping
from accelmap.workload import conv2d
from accelmap.workload.models.chains import ChainLink, Window

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


@settings(max_examples=6)
@given(st.integers(0, 10**9))
def test_the_dynamic_program_is_the_best_partition(seed):
    rng = random.Random(seed)
    chain, ops = small_chain(rng)
    singles = singles_of(ops, rng)
    inner = InnerMappings(lambda op, arch: random_mapping(op, arch, rng, check_fit=True))
    cfg = FusionConfig(row_tiles=3, col_tiles=2, per_mode=1)
    front = chain_front(chain, singles, EYERISS, inner, cfg)
    n = len(chain.nodes)
    # Every partition of the chain into runs, every candidate of every run (the same memoized tiles).
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
            totals.append(Point(sum(p.energy for p in pick), sum(p.latency for p in pick),
                                sum(p.offchip_bits for p in pick), tuple(pick)))
    for goal in ("energy", "latency", "edp"):
        best = min(p.objective(goal) for p in totals)
        assert abs(min(p.objective(goal) for p in front) - best) <= 1e-9 * best
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
