"""Rule B32 (docs/mapper.md, ``search/padded_schedule.py``): a padded unrolling's MAC schedule counts its idle lanes.
Per dim the temporal loops cover at least ``ceil(size / unrolling)`` rounds, so the schedule is at least their product
over the MACs per cycle: in S1 (rows of dims), in the certificate (classes of dims: the fewest rounds over every split)
and at the nodes of a padded unrolling's search (Ruby-S tiles). The bounds must stay below the model's compute and
latency on random padded and imperfect mappings, the exact search must equal the exhaustive Ruby-S optimum where the
rule raises the unrollings' bounds, and the rule must tell ResNet-18's padded P = 16 from P 4 x Q 4 on edge_tpu_like."""

from __future__ import annotations

import math
import random

import numpy as np

from accelmap.arch import get_accelerator
from accelmap.arch.accelerator import adopt_precision
from accelmap.cost.model import evaluate
from accelmap.errors import MappingError
from accelmap.mapping.sampling import random_mapping
from accelmap.search import search_exhaustive
from accelmap.search.bounds import chain_options
from accelmap.search.exact import search_exact
from accelmap.search.imperfect_tiles import ImperfectBoundContext
from accelmap.search.padded_schedule import dim_schedule, fewest_rounds
from accelmap.search.space import Constraints, keep_options
from accelmap.search.spatial import (
    certified_lower_bound,
    enumerate_spatial,
    spatial_lower_bound,
    unrolling_bounds,
    unrolling_of,
)
from accelmap.workload import conv2d, gemm
from strategies import random_operator
from test_bound_pinned_stall import _splits
from test_imperfect_search import row_of_four

PRESETS = ["edge_tpu_like", "eyeriss_like", "tpu_like"]


def _used(op, m) -> np.ndarray:
    used = np.ones((1, len(op.dim_names)), dtype=np.int64)
    for l in m.loops:
        if l.spatial:
            used[0, op.dim_names.index(l.dim)] *= l.bound
    return used


def test_the_schedule_never_exceeds_the_models_compute():
    """Random mappings (imperfect ones, so that spatial rounds pad, and perfect ones) of three presets: the rule's
    schedule of a mapping's own unrolling is at most the model's MAC schedule, S1 of that unrolling at most its latency
    and energy, and the node bound of a padded search (Ruby-S context, every fan-out fixed) at most its latency at the
    root and with every loop fixed; every eighth mapping's certificate is at most its EDP. The schedule passes
    ``ceil(MACs / PEs)`` on some (the padded ones)."""
    rng = random.Random(5)
    checked = raised = 0
    for n in range(20):
        arch = get_accelerator(PRESETS[n % 3])
        op = adopt_precision(random_operator(rng), arch)
        try:
            m = random_mapping(op, arch, rng, check_fit=True, tries=30, imperfect=n % 4 != 3)
        except MappingError:
            continue
        res = evaluate(op, arch, m, check=False)
        own = dim_schedule(op, arch.compute.macs_per_cycle, _used(op, m))[0]
        assert own <= res.compute_cycles, (arch.name, m, own, res.compute_cycles)
        pes = math.prod(l.bound for l in m.loops if l.spatial)
        raised += own > math.ceil(math.ceil(op.macs / pes) / arch.compute.macs_per_cycle)
        chains = chain_options(op, keep_options(op, arch, Constraints()))
        e_lb, l_lb = spatial_lower_bound(op, arch, tuple(l for l in m.loops if l.spatial), chains)
        assert e_lb <= res.energy_total * (1 + 1e-9) and l_lb <= res.latency * (1 + 1e-9), (arch.name, m)
        if n % 8 == 0:
            cert = certified_lower_bound(op, arch, Constraints(), chains, "edp")[0]
            assert cert <= res.energy_total * res.latency * (1 + 1e-9), (arch.name, m)
        ctx = ImperfectBoundContext(op, arch, m.keep, unrolling_of(arch, m))
        nlev = len(arch.levels)
        for fixed, level in (((), nlev), (tuple(m.loops), 0)):
            rem = dict(op.sizes)
            for l in fixed:
                rem[l.dim] = -(-rem[l.dim] // l.bound)
            _, lat = ctx.lower_bound(fixed, level, rem, full_positions=0)
            assert lat <= res.latency * (1 + 1e-9), (arch.name, m, level, lat, res.latency)
        checked += 1
    assert checked >= 14 and raised >= 1, (checked, raised)


def test_fewest_rounds_is_the_least_over_every_split():
    """The certificate's rounds of a class against a brute force over every split of its unrolling."""
    for sizes, product in [((56, 56), 16), ((7,), 4), ((3, 5), 6), ((7, 7), 49), ((1, 112, 112), 64), ((5, 3), 8)]:
        want = min(math.prod(math.ceil(s / u) for s, u in zip(sizes, split, strict=True))
                   for split in _splits(product, len(sizes)))
        assert fewest_rounds(sizes, product) == want, (sizes, product)
    assert fewest_rounds((56,), 16) == 4 and fewest_rounds((56, 56), 16) == 14 * 14


def test_a_padded_unrolling_is_told_from_a_dividing_one_on_edge_tpu_like():
    """ResNet-18 layer1.0.conv1 (P = Q = 56) on edge_tpu_like: K 8, C 8 and P 16 over the two 4-wide axes leaves 4
    rounds of P for 3.5 of work, so every mapping with it computes at least 129,024 cycles; P 4 x Q 4 divides and
    needs 112,896 (MACs over 1024 PEs). Before the rule S1 gave both 112,896-cycle schedules."""
    arch = get_accelerator("edge_tpu_like")
    op = adopt_precision(conv2d("layer1.0.conv1", c=64, h=56, w=56, k=64, r=3, s=3, padding=1), arch)
    p, q = [d for d in op.dim_names if op.sizes[d] == 56]
    k = next(d for d in op.dim_names if op.sizes[d] == 64 and d in op.output.dims)
    c = next(d for d in op.dim_names if op.sizes[d] == 64 and d not in op.output.dims)
    padded = {"D1": {k: 8}, "D2": {c: 8}, "D3": {p: 4}, "D4": {p: 4}}
    dividing = {"D1": {k: 8}, "D2": {c: 8}, "D3": {p: 4}, "D4": {q: 4}}
    schedules = []
    for spatial in (padded, dividing):
        space = enumerate_spatial(op, arch, Constraints(spatial=spatial), max_dims=len(op.dim_names), pad="every")
        assert len(space.pes) == 1 and space.pes[0] == 1024
        schedules.append(dim_schedule(op, 1, space.used)[0])
    assert schedules == [129_024, 112_896]


def test_exact_search_equals_exhaustive_where_the_rule_cuts(monkeypatch):
    """A 4-wide row over a GEMM with M = 5 beside N = 3 (padded rounds): the rule raises the S1 latency of padded unrollings
    to or past the optimum where S1 without it stayed below (unrollings it cuts), and the exact search (no heuristic
    incumbent) still finds the exhaustive Ruby-S optimum of latency and EDP (the objectives the rule moves), proven."""
    arch = row_of_four()
    cut = 0
    for op in (gemm("g", m=5, n=3, k=1),):
        op = adopt_precision(op, arch)
        chains = chain_options(op, keep_options(op, arch, Constraints()))
        space = enumerate_spatial(op, arch, Constraints(), max_dims=len(op.dim_names), pad="every")
        _, with_rule = unrolling_bounds(op, arch, space, chains)
        with monkeypatch.context() as patch:
            patch.setattr("accelmap.search.spatial.dim_schedule", lambda op, mpc, used: np.zeros(len(used)))
            _, without = unrolling_bounds(op, arch, space, chains)
        assert (with_rule >= without).all()
        for objective in ("latency", "edp"):
            ref, st_ref = search_exhaustive(op, arch, objective, imperfect="spatial", time_limit=60)
            got, st = search_exact(op, arch, objective, heuristic=False, time_limit=60)
            assert not st_ref.extra.get("timed_out") and st.extra["proven"]
            assert math.isclose(got[0].value, ref[0].value, rel_tol=1e-9), objective
            if objective == "latency":
                cut += int(((with_rule >= ref[0].value) & (without < ref[0].value)).sum())
    assert cut >= 1, cut


def test_padded_unrollings_no_longer_rank_first_on_eyeriss_like():
    """ResNet-18 layer1.0.conv1 on eyeriss_like, K=64 as 14 on the columns and 3 on the rows beside C=4: two rounds of
    K, 903,168 cycles of MACs where MACs over its 168 PEs gave 688,128 (every one of the first six unrollings E1
    visited was such a padded one, each searched over Ruby-S tiles, where the open-level rules are off). E1 ranks by
    the bound without rule B64's refill stall, which raises the dividing unrolling's bound past the padded one's
    (969,113.6 against 953,344 cycles): ranked, the dividing one still comes first (741,952 cycles)."""
    from accelmap.mapping.loopnest import Loop
    from accelmap.search.spatial import spatial_lower_bound
    from accelmap.workload.models import load_model

    arch = get_accelerator("eyeriss_like")
    op = adopt_precision(next(x for x in load_model("resnet18").layers if x.name == "layer1.0.conv1").operator, arch)
    spatial = (Loop("K", 14, 1, "X"), Loop("K", 3, 1, "Y"), Loop("C", 4, 1, "Y"))
    chains = chain_options(op, keep_options(op, arch, Constraints()))
    ranking: list[np.ndarray] = []
    energy, latency = spatial_lower_bound(op, arch, spatial, chains, ranking)
    assert op.macs / 168 == 688_128 and latency >= 903_168
    dividing = (Loop("P", 14, 1, "X"), Loop("P", 4, 1, "Y"), Loop("R", 3, 1, "Y"))
    dividing_energy, dividing_latency = spatial_lower_bound(op, arch, dividing, chains, ranking)
    assert dividing_latency > latency                                 # the bound, with rule B64
    assert ranking[1][0] < ranking[0][0] <= latency                   # the ranking key, without it
    assert dividing_energy * ranking[1][0] < energy * ranking[0][0]   # E1's EDP order
