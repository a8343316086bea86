"""Rule B52 (padded equivalents): a padded unrolling whose padded dims each sit on one axis per level costs the same
re-dealt over alike axes (the padded dim's loop moved whole, the dividing dims prime factor by prime factor), and the
exact search that searches one such unrolling per class of equal fan-out products finds what the search of every one
does."""

from __future__ import annotations

import random

from accelmap.arch import get_accelerator
from accelmap.arch.accelerator import adopt_precision
from accelmap.cost.model import evaluate
from accelmap.errors import MappingError
from accelmap.mapping.loopnest import Mapping
from accelmap.mapping.validate import validate
from accelmap.search import exact as exact_module
from accelmap.search.exact import search_exact
from accelmap.search.padded_equivalents import single_axis_padded
from accelmap.search.padded_round_positions import padded_dims
from accelmap.workload.constructors import conv2d, gemm
from test_bound_padded_rounds import padded_ruby_s_mappings
from test_search_equivalent_unrollings import redealt


def _assignment(m: Mapping) -> dict:
    out: dict = {}
    for l in m.loops:
        if l.spatial and l.bound > 1:
            dims = out.setdefault((l.level, l.axis), {})
            dims[l.dim] = dims.get(l.dim, 1) * l.bound
    return out


def test_single_axis_padded_reads_the_padded_dims_only():
    op = conv2d(c=6, h=7, w=7, k=8, r=1, s=1)           # P = Q = 7
    assert single_axis_padded({(1, "X"): {"P": 4, "K": 2}, (1, "Y"): {"K": 4, "C": 3}}, op)    # K split, divides
    assert not single_axis_padded({(1, "X"): {"P": 2}, (1, "Y"): {"P": 4}}, op)                # P = 7 split
    assert single_axis_padded({(1, "X"): {"P": 7}, (1, "Y"): {"K": 8}}, op)                    # nothing padded
    assert single_axis_padded({(0, "X"): {"P": 2}, (1, "Y"): {"P": 2}}, op)                    # one per level


def test_a_padded_unrolling_redealt_with_its_padded_dims_whole_costs_the_same():
    """Random Ruby-S mappings with a padded unrolling on eyeriss_like (14 and 12 PEs, alike), simba_like (two fan-out
    levels) and edge_tpu_like: re-dealt, the counts, energy and latency parts are equal to the last bit."""
    rng = random.Random(3)
    archs = [get_accelerator(n) for n in ("eyeriss_like", "simba_like", "edge_tpu_like")]
    checked = 0
    for arch, op, m, spatial in padded_ruby_s_mappings(900, archs, seed=52):
        if not single_axis_padded(_assignment(m), op):
            continue
        for _ in range(3):
            other = redealt(op, arch, m, rng, whole=padded_dims(op, spatial))
            if other is None:
                continue
            try:
                validate(op, arch, other)
            except MappingError as e:     # the rule's claim: a re-deal of a valid mapping stays valid
                raise AssertionError((arch.name, m, other)) from e
            a, b = evaluate(op, arch, m), evaluate(op, arch, other)
            assert a.counts == b.counts, (arch.name, m, other)
            assert a.energy == b.energy, (arch.name, m, other)
            assert a.latency == b.latency and a.latency_parts == b.latency_parts, (arch.name, m, other)
            checked += 1
    assert checked >= 30


def test_exact_search_skipping_padded_equivalents_keeps_the_optimum(monkeypatch):
    """A 3 x 2 x 2 and a 5 x 1 x 2 GEMM on eyeriss_like (M pads on either axis): the exact search (no heuristic
    incumbent) skips padded unrollings of a class searched to the end and finds the optimum of the search with the
    rule off (every objective), which rule E2 proves over every unrolling (``test_search_padded_unrollings`` checks that
    search against the exhaustive Ruby-S one; on eyeriss_like the exhaustive search of these takes minutes)."""
    arch = get_accelerator("eyeriss_like")
    skipped = 0
    for op in (adopt_precision(gemm(m=3, n=2, k=2), arch), adopt_precision(gemm(m=5, n=1, k=2), arch)):
        for objective in ("energy", "latency", "edp"):
            got, st = search_exact(op, arch, objective, heuristic=False, time_limit=120, window=1)
            with monkeypatch.context() as patch:
                patch.setattr(exact_module, "single_axis_padded", lambda assignment, sizes: False)
                off, st_off = search_exact(op, arch, objective, heuristic=False, time_limit=120, window=1)
            assert st.extra["proven"] and st_off.extra["proven"]
            assert got[0].value == off[0].value, (op.name, objective)
            assert st.extra["spatial_padded_searched"] <= st_off.extra["spatial_padded_searched"]
            skipped += st.extra["spatial_equivalent_skipped"] - st_off.extra["spatial_equivalent_skipped"]
    assert skipped > 0
