"""Rule S5 (equivalent unrollings): the cost model reads a fan-out only through each level's per-dim products over
its multicast axes and over its other axes, so an unrolling re-dealt across alike axes costs exactly the same, and
the exact search that searches one unrolling per class of equal products finds what the search of every one does."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from accelmap.arch import get_accelerator
from accelmap.arch.accelerator import adopt_precision
from accelmap.arch.presets import preset_names
from accelmap.cost.model import evaluate
from accelmap.errors import MappingError
from accelmap.mapping.loopnest import Loop, Mapping
from accelmap.mapping.sampling import prime_factors, random_mapping
from accelmap.mapping.validate import validate
from accelmap.search import Constraints, pinned_cases, pinned_stall, search_exhaustive
from accelmap.search import exact as exact_module
from accelmap.search.bounds import chain_options
from accelmap.search.exact import ranked_unrollings, search_exact
from accelmap.search.space import keep_options
from accelmap.workload.constructors import conv2d, gemm


def redealt(op, arch, m: Mapping, rng: random.Random, whole: frozenset[str] = frozenset()) -> Mapping | None:
    """``m`` with each level's spatial loops dealt anew, prime factor by prime factor, over the axes of that level
    that share their multicast flag (each axis within its size, reduced dims on reducing axes only); the dims in
    ``whole`` as one factor (the level's product on one axis); None when no different deal was drawn."""
    loops = list(m.loops)
    changed = False
    for lvl, lv in enumerate(arch.levels):
        if lv.fanout is None:
            continue
        for multicast in (True, False):
            group = [a for a in lv.fanout.axes if a.multicast == multicast]
            names = {a.name for a in group}
            at = [i for i, l in enumerate(loops) if l.spatial and l.level == lvl and l.axis in names]
            if len(group) < 2 or not at:
                continue
            product: dict[str, int] = {}
            for i in at:
                product[loops[i].dim] = product.get(loops[i].dim, 1) * loops[i].bound
            left = {a.name: a.size for a in group}
            deal: dict[tuple[str, str], int] = {}
            for d, p in product.items():
                for f in [p] if d in whole else prime_factors(p):
                    fits = [a.name for a in group if left[a.name] >= f and (d in op.output.dims or a.reduce)]
                    if not fits:
                        return None
                    a = rng.choice(fits)
                    left[a] //= f
                    deal[(a, d)] = deal.get((a, d), 1) * f
            new = [Loop(d, b, lvl, a) for (a, d), b in sorted(deal.items())]
            old = sorted((loops[i].axis, loops[i].dim, loops[i].bound) for i in at)
            changed |= sorted((l.axis, l.dim, l.bound) for l in new) != old
            first = at[0]
            loops = [l for i, l in enumerate(loops) if i not in at]
            loops[first:first] = new
    return Mapping(tuple(loops), m.keep) if changed else None


def test_an_unrolling_redealt_over_alike_axes_costs_the_same_on_every_preset():
    rng = random.Random(5)
    ops = [conv2d(c=8, h=10, w=10, k=16, r=3, s=3, padding=1), conv2d(c=16, h=8, w=8, k=32, r=1, s=1),
           gemm(m=16, n=24, k=32), conv2d(c=12, h=9, w=9, k=8, r=3, s=3, stride=2)]
    checked = 0
    for name in preset_names():
        arch = get_accelerator(name)
        for base in ops:
            op = adopt_precision(base, arch)
            for _ in range(12):
                try:
                    m = random_mapping(op, arch, rng, check_fit=True, tries=50, spatial_prob=0.9)
                except MappingError:
                    continue
                other = redealt(op, arch, m, rng)
                if other is None:
                    continue
                try:
                    validate(op, arch, other)
                except MappingError:
                    continue
                a, b = evaluate(op, arch, m), evaluate(op, arch, other)
                assert a.counts == b.counts, (name, m, other)
                assert a.energy == b.energy, (name, m, other)
                assert a.latency == b.latency and a.latency_parts == b.latency_parts, (name, m, other)
                checked += 1
    assert checked >= 40


def test_equivalent_unrollings_share_a_class_and_their_bound():
    arch = get_accelerator("eyeriss_like")          # X (14) and Y (12): both multicast, both reduce
    op = adopt_precision(conv2d(c=8, h=8, w=8, k=6, r=3, s=3, padding=1), arch)
    u = ranked_unrollings(op, arch, Constraints(), "edp", chain_options(op, keep_options(op, arch, Constraints())))
    assert u.classes < len(u.cls)
    for c in np.unique(u.cls):
        rows = np.flatnonzero(u.cls == c)
        assert len({float(u.energy[r]) for r in rows}) == 1 and len({float(u.latency[r]) for r in rows}) == 1
        assert len({int(u.space.pes[r]) for r in rows}) == 1


def test_exact_search_skipping_equivalent_unrollings_equals_exhaustive():
    arch = get_accelerator("tpu_like")        # X reduces, Y does not: an output dim may sit on either
    op = adopt_precision(gemm(m=2, n=2, k=2), arch)
    for objective in ("energy", "latency", "edp"):
        ref, st_ref = search_exhaustive(op, arch, objective, time_limit=120)
        got, st = search_exact(op, arch, objective, heuristic=False, time_limit=120)
        assert not st_ref.extra.get("timed_out") and st.extra["proven"]
        assert math.isclose(got[0].value, ref[0].value, rel_tol=1e-12), objective
        assert st.extra["spatial_equivalent_skipped"] > 0 or objective == "latency"


def test_no_unrollings_are_ranked_past_the_deadline():
    arch = get_accelerator("eyeriss_like")
    op = adopt_precision(conv2d(c=8, h=8, w=8, k=6, r=3, s=3, padding=1), arch)     # symmetric: rule S4 applies
    cons = Constraints()
    u = ranked_unrollings(op, arch, cons, "edp", chain_options(op, keep_options(op, arch, cons)), enumerate_space=False)
    assert u.swap is not None and len(u.order) == len(u.cls) == len(u.mirror_cls) == u.classes == 0
    res, st = search_exact(op, arch, "edp", heuristic=False, time_limit=1e-9)
    assert res == [] and st.extra["timed_out"] and not st.extra["proven"] and st.extra["spatial_candidates"] == 0


@pytest.mark.parametrize("name,op", [
    ("eyeriss_like", gemm(m=2, n=2, k=2)),
    ("tpu_like", gemm(m=2, n=4, k=2)),
    ("simba_like", gemm(m=2, n=2, k=4)),     # (2, 2, 2): the bound cuts every equivalent unrolling first (B14)
    ("edge_tpu_like", gemm(m=2, n=4, k=4)),
])
def test_exact_search_skipping_equivalent_unrollings_equals_searching_every_one(monkeypatch, name, op):
    arch = get_accelerator(name)
    op = adopt_precision(op, arch)
    # E1 ranked without rule B33's cases, as before them: they make the search that opens every unrolling slower, and
    # with them (and B25's pairs, which E1 does not rank by) the bounds cut every equivalent unrolling of these small
    # cases before S5 could skip one (rule S5 does not depend on the bound that orders the unrollings).
    monkeypatch.setattr(pinned_cases.PinnedCases, "cases", pinned_stall.PinnedStall.cases)
    skipped = 0
    # Both in E1's bound order (window 1): the probe order (``subtree_order``) forms its windows by these classes,
    # so with every row a class of its own it would visit another order and the searched counts would not compare.
    for objective in ("energy", "latency", "edp"):
        got, st = search_exact(op, arch, objective, heuristic=False, time_limit=120, window=1)
        with monkeypatch.context() as patch:
            patch.setattr(exact_module, "fanout_products", lambda space: np.arange(len(space.pes))[:, None])
            ref, st_ref = search_exact(op, arch, objective, heuristic=False, time_limit=120, window=1)
        assert st.extra["proven"] and st_ref.extra["proven"]
        assert st_ref.extra["spatial_equivalent_skipped"] == 0
        assert st.extra["spatial_searched"] <= st_ref.extra["spatial_searched"]
        assert math.isclose(got[0].value, ref[0].value, rel_tol=1e-12), objective
        skipped += st.extra["spatial_equivalent_skipped"]
    assert skipped > 0
