"""Rule S4 (mirror unrollings): the symmetry is detected only where it holds, a mapping and its mirror cost
exactly the same, and the exact search that skips mirrors still finds the exhaustive optimum."""

from __future__ import annotations

import math
import random

import pytest

from accelmap.arch import get_accelerator
from accelmap.arch.accelerator import adopt_precision
from accelmap.arch.presets import preset_names
from accelmap.cost.model import evaluate
from accelmap.errors import MappingError
from accelmap.mapping.sampling import random_mapping
from accelmap.search import Constraints, search_exhaustive
from accelmap.search import exact as exact_module
from accelmap.search.exact import search_exact
from accelmap.search.mirror import dim_symmetry, mirror_mapping
from accelmap.workload.constructors import conv2d

PQRS = {"P": "Q", "Q": "P", "R": "S", "S": "R"}


def test_symmetric_convolutions_are_detected():
    arch = get_accelerator("eyeriss_like")
    assert dim_symmetry(conv2d(c=4, h=8, w=8, k=4, r=3, s=3, padding=1), arch, Constraints()) == PQRS
    assert dim_symmetry(conv2d(c=4, h=8, w=8, k=4, r=3, s=3, stride=2, dilation=2), arch, Constraints()) == PQRS
    assert dim_symmetry(conv2d(c=4, h=8, w=8, k=4, r=1, s=1), arch, Constraints()) == {"P": "Q", "Q": "P"}


@pytest.mark.parametrize("kw", [
    dict(c=4, h=8, w=6, k=4, r=3, s=3),                    # P != Q
    dict(c=4, h=8, w=8, k=4, r=3, s=1),                    # R != S
    dict(c=4, h=8, w=8, k=4, r=3, s=3, stride=(1, 2)),     # strides differ
    dict(c=4, h=8, w=8, k=4, r=3, s=3, dilation=(2, 1)),   # dilations differ
    dict(c=4, h=8, w=8, k=4, r=3, s=3, padding=(1, 0, 1, 0)),   # padding differs
    dict(c=4, h=9, w=8, k=4, r=3, s=3, padding=(1, 1, 0, 1)),   # sizes equal only through padding
])
def test_asymmetric_operators_are_refused(kw):
    op = conv2d(**kw)
    assert dim_symmetry(op, get_accelerator("eyeriss_like"), Constraints()) is None


def test_asymmetric_constraints_and_pipelines_are_refused():
    op = conv2d(c=4, h=8, w=8, k=4, r=3, s=3, padding=1)
    arch = get_accelerator("eyeriss_like")
    axis = next(iter(arch.fanout_axes()))
    level = arch.levels[1].name
    assert dim_symmetry(op, arch, Constraints(spatial={axis: {"P": 2}})) is None
    assert dim_symmetry(op, arch, Constraints(spatial={axis: {"K": 2}})) == PQRS
    assert dim_symmetry(op, arch, Constraints(orders={level: ("P", "Q")})) is None
    assert dim_symmetry(op, arch, Constraints(orders={level: ("K", "C")})) == PQRS
    assert dim_symmetry(op, arch, Constraints(forbid_orders={level: (("P", "K"),)})) is None
    assert dim_symmetry(op, arch, Constraints(forbid_orders={level: (("P", "K"), ("Q", "K"))})) == PQRS
    assert dim_symmetry(op, arch, Constraints(forbid_orders={level: (("P", "R"), ("Q", "R"))})) is None
    # DIANA streams the kernel column S only: R and S are not interchangeable there.
    diana = get_accelerator("diana_like")
    assert diana.compute.pipeline is not None and "S" in diana.compute.pipeline.streamed_dims
    assert dim_symmetry(op, diana, Constraints()) is None
    assert dim_symmetry(conv2d(c=4, h=8, w=8, k=4, r=1, s=1), diana, Constraints()) == {"P": "Q", "Q": "P"}


def test_a_mapping_and_its_mirror_cost_the_same_on_every_preset():
    """Whatever the cost model reads (footprints, halos, multicast, pipelines, ports), relabelling P<->Q and
    R<->S of a symmetric convolution changes neither energy nor latency, on every preset the rule applies to."""
    rng = random.Random(31)
    ops = [conv2d(c=4, h=10, w=10, k=8, r=3, s=3, padding=1), conv2d(c=8, h=14, w=14, k=4, r=3, s=3, stride=2),
           conv2d(c=16, h=8, w=8, k=16, r=1, s=1), conv2d(c=3, h=17, w=17, k=8, r=5, s=5, stride=2, padding=2)]
    checked = 0
    for name in preset_names():
        arch = get_accelerator(name)
        for base in ops:
            op = adopt_precision(base, arch)
            swap = dim_symmetry(op, arch, Constraints())
            if swap is None:
                continue
            for _ in range(4):
                try:
                    m = random_mapping(op, arch, rng, check_fit=True, tries=50)
                except MappingError:
                    continue
                a, b = evaluate(op, arch, m), evaluate(op, arch, mirror_mapping(m, swap))
                assert a.counts == b.counts, (name, m)
                assert math.isclose(a.energy_total, b.energy_total, rel_tol=1e-12), (name, m)
                assert math.isclose(a.latency, b.latency, rel_tol=1e-12), (name, m)
                checked += 1
    assert checked >= 60


@pytest.mark.parametrize("name,kw", [
    ("tpu_like", dict(c=1, h=2, w=2, k=1, r=3, s=3, padding=1)),
    ("vta_like", dict(c=1, h=2, w=2, k=1, r=3, s=3, padding=1)),
])
def test_exact_search_skipping_mirrors_equals_exhaustive(name, kw):
    arch = get_accelerator(name)
    op = adopt_precision(conv2d(**kw), arch)
    ref, _ = search_exhaustive(op, arch, "edp", time_limit=60)
    got, st = search_exact(op, arch, "edp", heuristic=False, time_limit=60)
    assert st.extra["mirror_swap"] == "P<->Q, R<->S"
    assert st.extra["spatial_mirror_skipped"] > 0
    assert st.extra["proven"]
    assert math.isclose(got[0].value, ref[0].value, rel_tol=1e-12)


def test_exact_search_skipping_mirrors_equals_the_search_of_every_unrolling(monkeypatch):
    arch = get_accelerator("eyeriss_like")
    op = adopt_precision(conv2d(c=2, h=2, w=2, k=2, r=1, s=1), arch)
    skipped = 0
    for objective in ("energy", "latency", "edp"):
        got, st = search_exact(op, arch, objective, heuristic=False, time_limit=60)
        assert st.extra["proven"]
        skipped += st.extra["spatial_mirror_skipped"]
        with monkeypatch.context() as patch:
            patch.setattr(exact_module, "dim_symmetry", lambda *_: None)
            ref, st_ref = search_exact(op, arch, objective, heuristic=False, time_limit=60)
        assert st_ref.extra["spatial_mirror_skipped"] == 0 and st_ref.extra["proven"]
        assert st.extra["spatial_searched"] + st.extra["spatial_mirror_skipped"] >= st_ref.extra["spatial_searched"]
        assert math.isclose(got[0].value, ref[0].value, rel_tol=1e-12), objective
    assert skipped > 0


def test_top_k_and_pareto_do_not_skip_mirrors():
    arch = get_accelerator("tpu_like")
    op = adopt_precision(conv2d(c=2, h=2, w=2, k=2, r=1, s=1), arch)
    for objective, k in (("edp", 3), ("pareto", 1)):
        _, st = search_exact(op, arch, objective, k=k, heuristic=False, time_limit=60)
        assert st.extra["spatial_mirror_skipped"] == 0 and st.extra["mirror_swap"] == ""
