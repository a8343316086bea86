"""Rules B38 and B39 of docs/mapper.md: past rule E2's budget the exact search bounds padded unrollings by class (rule
S2's class vectors per group of fan-out axes, ``search/padded_classes.py``) and lists the members of a class only when
its bound is not cut."""

from __future__ import annotations

import math
import time

import pytest

from accelmap.arch import get_accelerator
from accelmap.arch.schema import accelerator_from_dict
from accelmap.search import exact, padded_classes, search_exhaustive
from accelmap.search.bounds import chain_options
from accelmap.search.exact import search_exact
from accelmap.search.padded_classes import PaddedClasses
from accelmap.search.space import Constraints, keep_options
from accelmap.search.spatial import CertificateOutOfTime, TooManyUnrollings, enumerate_spatial, unrolling_of
from accelmap.workload import gemm
from test_bound_pinned_stall import own_unrolling_cases
from test_imperfect_search import _small_cases, row_of_four
from test_search_padded_unrollings import _pads


def _classes(op, arch, objective="edp", cons=None) -> PaddedClasses:
    cons = cons or Constraints()
    return PaddedClasses(op, arch, cons, chain_options(op, keep_options(op, arch, cons)), objective)


def _rows(space) -> list[tuple]:
    """The unrollings of a space as sorted tuples of (axis, dim, bound)."""
    out = []
    for r in range(len(space.pes)):
        out.append(tuple(sorted((axis, d, b) for (_, axis), dims in space.assignment(r).items()
                                for d, b in dims.items())))
    return sorted(out)


def test_the_classes_hold_exactly_the_every_padded_unrollings():
    """Every class opened at once: its members are the rows of ``enumerate_spatial(pad="every")``, each once (small
    accelerators whose axes pad, a padded constraint, and ResNet-18's layer4.0.conv2 on ascend_like past the budget is
    not listed: 7x7 maps on three 16-wide axes)."""
    cases = [(arch, op, Constraints()) for arch, op in _small_cases(10, max_space=300) if _pads(arch, op)]
    cases.append((row_of_four(), gemm("g", m=5, n=3, k=2), Constraints(spatial={"X": {"M": 3}})))
    for arch, op, cons in cases:
        classes = _classes(op, arch, cons=cons)
        members = classes.members(classes.visit)
        want = enumerate_spatial(op, arch, cons, max_dims=len(op.dim_names), pad="every")
        assert _rows(members) == _rows(want), (arch.name, op)
        assert len(members.pes) == len(want.pes)
    assert len(cases) >= 5


def test_a_class_bound_never_exceeds_the_cost_of_a_member():
    """Random operators on four presets and two small machines, random mappings (perfect, imperfect every second one,
    whose rounds pad): the bound of the class of a mapping's own unrolling is at most its EDP, energy and latency; some
    of them pad."""
    archs = [get_accelerator(name) for name in ("edge_tpu_like", "ascend_like", "tpu_like", "simba_like")]
    archs += [_two_rows(), row_of_four()]
    checked = padded = 0
    for _, arch, op, m, res, _, _ in own_unrolling_cases(5, archs, 36, 2):
        spatial = unrolling_of(arch, m)
        used = {d: math.prod(b for dims in spatial.values() for dd, b in dims.items() if dd == d) for d in op.dim_names}
        padded += any(op.sizes[d] % u for d, u in used.items())
        classes = _classes(op, arch)
        row = classes.row_of(spatial)
        assert classes.value[row] <= res.energy_total * res.latency * (1 + 1e-9), (arch.name, op, m)
        assert classes.energy[row] <= res.energy_total * (1 + 1e-9), (arch.name, op, m)
        assert classes.latency[row] <= res.latency * (1 + 1e-9), (arch.name, op, m)
        checked += 1
    assert checked >= 25 and padded >= 3, (checked, padded)


def _two_rows():
    """DRAM with two 4-wide multicast, non-reducing axes over one 64 B register file."""
    return accelerator_from_dict({"name": "rows", "levels": [
        {"name": "DRAM", "holds": ["I", "W", "O"], "capacity": "unbounded", "width": "16 bit",
         "read_energy": "50 pJ", "write_energy": "50 pJ", "fanout": {"axes": [
             {"name": "X", "size": 4, "multicast": True, "reduce": False},
             {"name": "Y", "size": 4, "multicast": True, "reduce": False}], "transfer_energy": "1 pJ"}},
        {"name": "RF", "holds": ["I", "W", "O"], "capacity": "64 B", "width": "16 bit",
         "read_energy": "1 pJ", "write_energy": "1 pJ"}],
        "compute": {"mac_energy": "1 pJ", "precision": {"I": 8, "W": 8, "O": 32}}})


def test_a_dim_split_past_its_size_keeps_its_class_bound():
    """M = 7 as 4 x 2 over two 4-wide axes pads past the dim (8 lanes for 7): its class row is loose (rule S6 left
    out), and its bound is at most the exhaustive Ruby-S optimum under that unrolling, every objective."""
    arch = _two_rows()
    op = gemm("g", m=7, n=2, k=2)
    cons = Constraints(spatial={"X": {"M": 4}, "Y": {"M": 2}})
    for objective in ("energy", "latency", "edp"):
        ref, _ = search_exhaustive(op, arch, objective, constraints=cons, imperfect="spatial", time_limit=60)
        assert ref
        classes = _classes(op, arch, objective)
        row = classes.row_of(cons.spatial)
        assert classes.loose[row]
        assert classes.value[row] <= ref[0].value * (1 + 1e-9), objective


@pytest.mark.parametrize("tier", [1, 1000])
def test_exact_search_by_classes_equals_exhaustive(monkeypatch, tier):
    """Rule E2's budget set to one candidate, so every case goes through the classes (tiers of one class, or of
    many): the exact search (no heuristic incumbent) equals the exhaustive Ruby-S optimum (every unrolling bound; one
    exhaustive pass, whose energy-latency front holds the optimum of each objective), every objective, proven; with
    tiers of one class, classes are cut unlisted."""
    monkeypatch.setattr(exact, "EVERY_PADDED_ROWS", 1)
    monkeypatch.setattr(padded_classes, "TIER_ROWS", tier)
    value = {"energy": lambda r: r.energy_total, "latency": lambda r: r.latency,
             "edp": lambda r: r.energy_total * r.latency}
    compared = classes_cut = 0
    for arch, op in [case for case in _small_cases(12, max_space=300) if _pads(*case)]:
        front, st_ref = search_exhaustive(op, arch, "pareto", imperfect="spatial", time_limit=60)
        assert not st_ref.extra.get("timed_out")
        for objective, f in value.items():
            got, st = search_exact(op, arch, objective, heuristic=False, time_limit=60)
            assert st.extra["padded_classes"] > 0 and st.extra["proven"]
            if not front:
                assert not got
                continue
            assert got and math.isclose(got[0].value, min(f(x.result) for x in front), rel_tol=1e-9), \
                (arch.name, op, objective)
            classes_cut += st.extra["padded_classes_cut"]
            compared += 1
    assert compared >= 15 and classes_cut >= (5 if tier == 1 else 0), (compared, classes_cut)


def test_a_search_past_the_budget_is_now_proven(monkeypatch):
    """A 5 x 3 GEMM on a 4-wide row with rule E2's budget at 2 candidates: without the classes the search lists only
    the fewest-rounds padded bounds and proves nothing; with them it is proven, at the exhaustive Ruby-S optimum."""
    arch = row_of_four()
    op = gemm("g", m=5, n=3, k=1)
    ref, _ = search_exhaustive(op, arch, "edp", imperfect="spatial", time_limit=60)
    monkeypatch.setattr(exact, "EVERY_PADDED_ROWS", 2)
    got, st = search_exact(op, arch, "edp", heuristic=False, time_limit=60)
    assert st.extra["proven"] and st.extra["padded_classes"] > 0 and got[0].value == ref[0].value

    def too_many(*args, **kwargs):
        raise TooManyUnrollings

    monkeypatch.setattr(exact, "PaddedClasses", too_many)
    _, before = search_exact(op, arch, "edp", heuristic=False, time_limit=60)
    assert not before.extra["proven"] and not before.extra["spatial_every_padded"]


def test_classes_out_of_time_are_a_timeout_not_a_proof(monkeypatch):
    """The class bounds read the clock between chunks: past the deadline they stop (``CertificateOutOfTime``), the
    exact search's unrollings are then none, not every padded bound, and the search says it timed out."""
    arch = row_of_four()
    op = gemm("g", m=5, n=3, k=1)
    chains = chain_options(op, keep_options(op, arch, Constraints()))
    with pytest.raises(CertificateOutOfTime):
        PaddedClasses(op, arch, Constraints(), chains, "edp", deadline=1.0, clock=lambda: 2.0)
    monkeypatch.setattr(exact, "EVERY_PADDED_ROWS", 2)
    ranked = exact.ranked_unrollings(op, arch, Constraints(), "edp", chains, classes=True,
                                     classes_deadline=time.perf_counter() - 1.0)
    assert ranked.classes_out_of_time and not ranked.every_padded and not len(ranked.order)

    def out_of_time(*args, **kwargs):
        raise CertificateOutOfTime

    monkeypatch.setattr(exact, "PaddedClasses", out_of_time)
    _, st = search_exact(op, arch, "edp", heuristic=False, time_limit=60)
    assert st.extra["timed_out"] and not st.extra["proven"]
