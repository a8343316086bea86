"""Rules B22 and B23 (docs/mapper.md): the node bound keeps each case's (energy, latency) pair together for a scalar
objective, and an open level held to its fixed tile charges its refills' energy in the cases that force them. The
bound of the objective must stay below the objective of every completion of a node (the unrolling known, as the
exact search fixes it) on presets with one-element registers, double buffering and port bandwidths; the batched
bound must equal the scalar one; the exact search must find the exhaustive optimum; and the rules must raise
edge_tpu_like's root bound."""

import math

import numpy as np
import pytest

from accelmap.arch import get_accelerator
from accelmap.arch.accelerator import adopt_precision
from accelmap.cost.model import evaluate
from accelmap.search import bounds, case_pairs
from accelmap.search.bounds import BoundContext
from accelmap.search.node_bounds import open_bounds_rows
from accelmap.search.objective import scalar
from accelmap.search.spatial import unrolling_of
from accelmap.workload import gemm
from strategies import fixed_at_and_above, random_perfect_mappings
from test_bound_network_and_runs import _completions, downsample_on_edge_tpu
from test_search_node_bounds import random_nodes


@pytest.mark.parametrize("arch_name", ["edge_tpu_like", "simba_like", "eyeriss_like", "tpu_like"])
def test_paired_bound_never_exceeds_any_completion(arch_name):
    """At every level, for each scalar objective, the objective of the node's bound is at most the objective of the
    mapping and of random completions that re-deal and re-order the open levels' loops (each in its own case)."""
    checked = 0
    for rng, arch, op, m in random_perfect_mappings(41, 10, [arch_name]):
        spatial = unrolling_of(arch, m)
        ctxs = {obj: BoundContext(op, arch, m.keep, spatial, obj) for obj in ("energy", "latency", "edp")}
        for level in range(len(arch.levels) + 1):
            fixed, rem = fixed_at_and_above(op, m, level)
            got = {obj: scalar(obj, *ctx.lower_bound(fixed, level, rem)) for obj, ctx in ctxs.items()}
            for cand in [m, *_completions(rng, op, arch, m, level, 3)]:
                res = evaluate(op, arch, cand, check=False)
                for obj, lb in got.items():
                    assert lb <= scalar(obj, res.energy_total, res.latency) * (1 + 1e-12), (obj, level, cand)
                checked += 1
    assert checked >= 40


def test_rows_equal_the_scalar_bound_with_an_objective():
    """The batched bound pairs the cases and charges B23 exactly as the scalar one (value for value)."""
    checked = 0
    for ctx, level, inner, s_loops, tilings in random_nodes(7, 60):
        ctx.objective = "edp"
        dims = ctx.op.dim_names
        T = np.array([[next((l.bound for l in t if l.dim == d), 1) for d in dims] for t, _ in tilings])
        rem = np.array([[r[d] for d in dims] for _, r in tilings])
        got = open_bounds_rows(ctx, s_loops + inner, {level: T}, level, rem)
        assert got is not None
        for r, (t_loops, left) in enumerate(tilings):
            want = ctx.lower_bound(t_loops + s_loops + inner, level, dict(left), free_orders=frozenset({level}))
            assert (float(got[0][r]), float(got[1][r])) == want
            checked += 1
    assert checked > 100


@pytest.mark.parametrize("name,op", [
    ("edge_tpu_like", gemm("g", m=2, n=4, k=4)),
    ("simba_like", gemm("g", m=2, n=2, k=4)),
])
def test_exact_search_with_the_rules_equals_the_search_without(monkeypatch, name, op):
    """The exact search (which bounds with B22 and B23) finds the optimum of every objective that it finds with both
    rules off (the search whose bounds ``tests/test_search.py`` checks against exhaustive optima), on one-element
    registers (edge_tpu_like) and single-buffered levels (simba_like). Exhaustive search is too slow on these
    five-level presets for a test (over 19 s of CPU for a 2x2x2 GEMM)."""
    from accelmap.search.exact import search_exact

    arch = get_accelerator(name)
    op = adopt_precision(op, arch)
    for objective in ("energy", "latency", "edp"):
        got, st = search_exact(op, arch, objective, heuristic=False, time_limit=120)
        with monkeypatch.context() as patch:
            patch.setattr(case_pairs, "SCALAR_OBJECTIVES", ())
            patch.setattr(bounds, "open_levels_energy", lambda floors, extras: sum(floors.values()))
            ref, st_ref = search_exact(op, arch, objective, heuristic=False, time_limit=120)
        assert st.extra["proven"] and st_ref.extra["proven"]
        assert math.isclose(got[0].value, ref[0].value, rel_tol=1e-12), objective
        assert st.nodes <= st_ref.nodes, objective


def test_pairs_and_pinned_refills_raise_the_root_bound_on_edge_tpu():
    """edge_tpu_like ResNet-18 layer2.0.downsample with the mapping's unrolling fixed and nothing else: either the
    weights (1-element weight register) or the partial sums (1-element output register) move at every temporal step.
    B8's least refill of each register is 0 (some case leaves it in place), so before B23 every case had the same
    energy; B23 charges the partial sums' drains in the case that moves them, and B22 pairs that energy with that
    case's (short) latency. The root's EDP bound rises 3.8x and stays below the mapping's EDP."""
    arch, op, m = downsample_on_edge_tpu()
    res = evaluate(op, arch, m)
    root = ((), len(arch.levels), dict(op.sizes))
    unrolling = unrolling_of(arch, m)
    paired = BoundContext(op, arch, m.keep, unrolling, "edp").lower_bound(*root)
    apart = BoundContext(op, arch, m.keep, unrolling).lower_bound(*root)
    edp = res.energy_total * res.latency
    assert paired[0] * paired[1] <= edp
    assert round(paired[0] * paired[1] / edp, 4) == 0.8276      # 0.8273 before rule B71's queued first loads
    assert apart[0] == res.energy_total         # B23: the least energy over the cases is the mapping's here
    assert round(apart[0] * apart[1] / edp, 4) == 0.2967      # 0.2966 before rule B71
    original = bounds.open_levels_energy
    try:        # without B23: B8's floors alone, the same energy in every case
        bounds.open_levels_energy = lambda floors, extras: sum(floors.values())
        without = BoundContext(op, arch, m.keep, unrolling, "edp").lower_bound(*root)
    finally:
        bounds.open_levels_energy = original
    assert round(without[0] * without[1] / edp, 4) == 0.2159
