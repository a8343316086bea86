"""Rule B36 (docs/mapper.md, ``search/root_pairs.py``): at the root of an unrolling's search each open level's tile
keeps its refill energy and its stall together. The paired bound's objective value must stay below the objective of
every mapping with that unrolling and bypass choice, on presets and random single-buffered accelerators; the exact
search must find the same optimum where the rule cuts; and it must raise eyeriss_like's root bound."""

import random

from accelmap.arch import get_accelerator
from accelmap.arch.accelerator import adopt_precision
from accelmap.cost.model import evaluate
from accelmap.search import optimal, root_pairs
from accelmap.search.bounds import BoundContext
from accelmap.search.objective import scalar
from accelmap.search.spatial import unrolling_of
from strategies import random_perfect_mappings
from test_bound_open_level_refills import small_single_buffered


def test_the_paired_root_bound_never_exceeds_the_objective_of_a_mapping():
    """For random perfectly factored mappings, the paired root bound of the mapping's own unrolling and bypass choice
    is at most the mapping's objective, for each scalar objective (and the rule applies on most of them)."""
    checked = 0
    mappings = [*random_perfect_mappings(5, 14, [], small_single_buffered),
                *random_perfect_mappings(31, 8, ["eyeriss_like", "simba_like", "edge_tpu_like"])]
    for _, arch, op, m in mappings:
        res = evaluate(op, arch, m, check=False)
        for objective in ("energy", "latency", "edp"):
            paired = root_pairs.paired_root_bound(BoundContext(op, arch, m.keep, unrolling_of(arch, m), objective))
            if paired is None:
                continue
            assert scalar(objective, *paired) <= scalar(objective, res.energy_total, res.latency) * (1 + 1e-12), \
                (arch.name, objective, op, m)
            checked += 1
    assert checked >= 36, checked


def test_the_pairs_raise_the_root_bound_of_a_bypass_choice_on_eyeriss_like():
    """ResNet-18 layer1.0.conv1 on eyeriss_like, P, Q on the array's columns and P, S on its rows, the global buffer
    keeping only inputs: the register files' tiles trade refill energy for stall (three undominated points), and the
    node bound paired the least energy with the least stall; paired, the root's EDP bound rises 1.39x. Each level's
    points are sorted by energy with stalls strictly falling, and their least energy and least stall are rules B35's
    and B27's values."""
    from accelmap.search.open_level_energy import least_refill_energy
    from accelmap.search.open_level_refills import open_level_stall
    from accelmap.workload.models import load_model

    arch = get_accelerator("eyeriss_like")
    op = adopt_precision(next(x for x in load_model("resnet18").layers if x.name == "layer1.0.conv1").operator, arch)
    keep = (frozenset("IWO"), frozenset("I"), frozenset("IWO"))
    ctx = BoundContext(op, arch, keep, {"X": {"P": 2, "Q": 7}, "Y": {"P": 4, "S": 3}}, "edp")
    plain = ctx.lower_bound((), len(arch.levels), dict(op.sizes))
    assert (round(plain[0]), round(plain[1])) == (945_659_392, 1_739_435)
    assert tuple(round(v) for v in root_pairs.paired_root_bound(ctx)) == (1_130_274_304, 2_016_597)
    assert root_pairs.level_points(ctx, 2).round().tolist() == [[273_719_040, 2_214_571], [458_333_952, 1_328_469],
                                                                [794_828_544, 1_051_307]]
    for c in (1, 2):
        pts = root_pairs.level_points(ctx, c)
        assert (pts[1:, 0] >= pts[:-1, 0]).all() and (pts[1:, 1] < pts[:-1, 1]).all()
        assert pts[0, 0] == least_refill_energy(ctx, c)
        assert pts[-1, 1] == open_level_stall(ctx, c)


def test_exact_search_keeps_the_optimum_where_the_rule_cuts(monkeypatch):
    """A small convolution on a random single-buffered accelerator (found by a sweep) with the unrolling fixed, where
    the rule cuts a bypass choice at the root that the node bound does not: the branch and bound finds the same optimum
    with the rule and without it (the search without it is checked against the exhaustive one in ``tests/test_search.py``;
    the exhaustive search with this unrolling fixed, about 130 s of wall clock at load 20, gave the same 500,094 when
    checked once), with fewer nodes."""
    from accelmap.search.optimal import search_optimal
    from accelmap.search.space import Constraints
    from accelmap.workload.constructors import conv2d

    arch = small_single_buffered(random.Random(596853))
    op = adopt_precision(conv2d("c", c=2, h=4, w=3, k=2, r=3, s=1), arch)
    cons = Constraints(spatial={"X": {"P": 2}})
    got, st = search_optimal(op, arch, "edp", constraints=cons)
    with monkeypatch.context() as patch:
        patch.setattr(optimal, "paired_root_bound", lambda ctx: None)
        ref, st_off = search_optimal(op, arch, "edp", constraints=cons)
    assert got[0].value == ref[0].value == 500094.0
    assert st.extra["keeps_cut"] > st_off.extra["keeps_cut"] and st.nodes < st_off.nodes
