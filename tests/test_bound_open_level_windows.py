"""Rule B37 (docs/mapper.md, ``search/open_level_windows.py``): at an open level, a sliding-window operand of the
innermost loop's dim enters a share of its tile at every instance-iteration above it (all of them where the window's
other dims have no temporal iteration above the level, else the innermost loop's own steps). The open levels' stall
(rule B27 with it) must stay below the model's single-buffer stalls, and the node bound below the cost, of random
convolutions (strides, dilations, padding) and random completions of their open levels at every level; the exact
search must keep its optimum where the rule cuts; and it must raise eyeriss_like's root bound."""

import functools
import random

from accelmap.arch import get_accelerator
from accelmap.arch.accelerator import adopt_precision
from accelmap.cost.model import evaluate
from accelmap.search import open_level_refills
from accelmap.search.bounds import BoundContext
from accelmap.search.open_level_refills import open_levels_stall
from accelmap.search.open_level_windows import least_prime_factor
from accelmap.search.spatial import unrolling_of
from strategies import fixed_at_and_above, random_perfect_mappings
from test_bound_network_and_runs import _completions
from test_bound_open_level_refills import small_single_buffered


def _stall(res) -> float:
    return dict(res.latency_parts).get("single-buffer stalls", 0.0)


def test_the_window_counts_never_exceed_any_completion():
    """Convolutions only (the rule counts sliding windows), the unrolling known (it needs every fan-out above the open
    level fixed): at every level the open levels' stall is at most the single-buffer stalls of the mapping and of a
    random completion of its open levels, and the node's bound at most their energy and latency."""
    checked = fired = 0
    mappings = [*random_perfect_mappings(13, 30, [], small_single_buffered),
                *random_perfect_mappings(17, 10, ["eyeriss_like", "simba_like"])]
    for rng, arch, op, m in mappings:
        if not any(len(ix.terms) > 1 for X in op.operands for ix in X.indices):
            continue
        ctx = BoundContext(op, arch, m.keep, unrolling_of(arch, m))
        for level in range(1, len(arch.levels) + 1):
            fixed, rem = fixed_at_and_above(op, m, level)
            floor = open_levels_stall(ctx, level)
            energy, lat = ctx.lower_bound(fixed, level, rem)
            for cand in [m, *_completions(rng, op, arch, m, level, 1)]:
                res = evaluate(op, arch, cand, check=False)
                assert floor <= _stall(res) * (1 + 1e-12), (arch.name, level, cand)
                assert lat <= res.latency * (1 + 1e-12), (arch.name, level, cand)
                assert energy <= res.energy_total * (1 + 1e-12), (arch.name, level, cand)
                checked += 1
            fired += floor > 0
    assert checked > 20 and fired > 3, (checked, fired)


def test_least_prime_factor():
    import numpy as np

    assert least_prime_factor(np.array([1, 2, 7, 9, 56, 49])).tolist() == [1, 2, 7, 3, 2, 7]


def test_the_rule_raises_the_root_bound_on_eyeriss_like(monkeypatch):
    """ResNet-18 layer1.0.conv1 on eyeriss_like with C, P on the array's columns and C, R on its rows (the class of
    the heuristic's mapping), every level keeping every operand it may: the register files' least stall was a tile
    that keeps the input and refetches partial sums, costed as if the input never moved while Q steps outside it; with
    the window's share every tile refetches something over the global buffer's 9-word port. Root latency bound 765,874
    -> 987,250 cycles (the MAC schedule is 688,128; that class's best mapping found takes 1,132,471)."""
    from accelmap.search import open_level_energy
    from accelmap.workload.models import load_model

    arch = get_accelerator("eyeriss_like")
    op = adopt_precision(next(x for x in load_model("resnet18").layers if x.name == "layer1.0.conv1").operator, arch)
    keep = (frozenset("IWO"), frozenset("IO"), frozenset("IWO"))
    spatial = {"X": {"C": 2, "P": 7}, "Y": {"C": 4, "R": 3}}
    root = ((), len(arch.levels), dict(op.sizes))
    energy, latency = BoundContext(op, arch, keep, spatial).lower_bound(*root)
    with monkeypatch.context() as patch:
        patch.setattr(open_level_refills, "window_shares", lambda *a: {})
        # (the caches are keyed by what the rules read, not by whether B37 is on: fresh ones while it is off)
        patch.setattr(open_level_refills, "_OPEN_STALLS", {})
        patch.setattr(open_level_energy, "_OPEN_FLOORS", {})
        without = BoundContext(op, arch, keep, spatial).lower_bound(*root)
    assert (round(without[0]), round(without[1])) == (702_107_392, 765_874)
    assert (round(energy), round(latency)) == (721_845_760, 987_250)


def test_exact_search_keeps_the_optimum_where_the_rule_cuts(monkeypatch):
    """A small convolution on a random single-buffered accelerator (found by a sweep) with the unrolling fixed, where
    the window's share cuts nodes: the branch and bound finds the same optimum with the rule and without it (the search
    without it is checked against the exhaustive one in ``tests/test_search.py``), with fewer nodes."""
    from accelmap.search import bounds, open_level_energy, root_pairs
    from accelmap.search.optimal import search_optimal
    from accelmap.search.space import Constraints
    from accelmap.workload.constructors import conv2d

    arch = small_single_buffered(random.Random(993869))
    op = adopt_precision(conv2d("c", c=1, h=3, w=6, k=2, r=1, s=3), arch)
    cons = Constraints(spatial={"X": {"Q": 2}})
    # Rules B70 and B71 (later) cut every node B37 cuts here: both searches go without them, so the case still shows B37.
    monkeypatch.setattr(bounds, "first_queue_terms", lambda *a, **k: [])
    monkeypatch.setattr(bounds, "last_drain_terms", functools.partial(bounds.last_drain_terms, spread=False))
    got, st = search_optimal(op, arch, "edp", constraints=cons)
    with monkeypatch.context() as patch:
        patch.setattr(open_level_refills, "window_shares", lambda *a: {})
        # (the caches are keyed by what the rules read, not by whether B37 is on: fresh ones while it is off)
        patch.setattr(open_level_refills, "_OPEN_STALLS", {})
        patch.setattr(open_level_energy, "_OPEN_FLOORS", {})
        patch.setattr(root_pairs, "_POINTS", {})
        ref, st_off = search_optimal(op, arch, "edp", constraints=cons)
    assert got[0].value == ref[0].value == 500472.0
    assert st.nodes < st_off.nodes
