"""The exhaustive mapper under constraints, and the random-sampling baseline (search/baselines.py)."""

from __future__ import annotations

import pytest

from accelmap.arch.schema import accelerator_from_dict
from accelmap.errors import MappingError
from accelmap.mapping.validate import validate
from accelmap.search import baselines
from accelmap.search.baselines import search_random
from accelmap.search.exhaustive import search_exhaustive
from accelmap.search.optimal import search_optimal
from accelmap.search.space import Constraints
from accelmap.workload.constructors import gemm
from test_model_mapper import TINY

ARCH = accelerator_from_dict(TINY, "tiny")
OP = gemm("mm", m=2, n=4, k=2)          # 8-bit inputs and 32-bit output, as TINY computes


def _all_mappings(op, cons: Constraints):
    """Every mapping the exhaustive search costs under ``cons``: key -> (EDP, mapping)."""
    res, stats = search_exhaustive(op, ARCH, "edp", k=10 ** 6, constraints=cons)
    assert len(res) == stats.evaluated           # k exceeds the space: every costed mapping is kept
    return {f.mapping.key(): (f.value, f.mapping) for f in res}


CONSTRAINTS = [
    Constraints(spatial={"X": {"K": 2}}),
    Constraints(spatial={"Y": {"N": 2}, "X": {}}),
    Constraints(orders={"DRAM": ("N", "M")}),
    Constraints(forbid_orders={"DRAM": (("M", "N"), ("N", "M"))}),
    Constraints(keep={"Buf": frozenset({"O", "A"})}),
    Constraints(min_utilization=0.75),
    Constraints(spatial={"X": {"K": 2}}, orders={"Reg": ("K", "N")}, keep={"Buf": frozenset({"O", "B"})}),
]


@pytest.fixture(scope="module")
def free():
    return _all_mappings(OP, Constraints())


@pytest.mark.parametrize("cons", CONSTRAINTS, ids=range(len(CONSTRAINTS)))
def test_exhaustive_under_constraints_costs_exactly_the_allowed_mappings(cons, free):
    allowed = {key: vm for key, vm in free.items() if cons.violation(vm[1], ARCH) is None}
    got = _all_mappings(OP, cons)
    # The constrained enumeration is the unconstrained one filtered by the constraints, no more, no less.
    assert {k: v for k, (v, _) in got.items()} == {k: v for k, (v, _) in allowed.items()}
    assert 0 < len(got) < len(free)
    # And its optimum is the branch and bound's under the same constraints.
    best, _ = search_optimal(OP, ARCH, "edp", constraints=cons)
    assert best[0].value == min(v for v, _ in got.values())


def test_exhaustive_stops_at_its_limit_and_at_its_time_limit():
    with pytest.raises(MappingError, match="exhaustive search of mm exceeds 5 mappings"):
        search_exhaustive(OP, ARCH, "edp", limit=5)
    res, stats = search_exhaustive(OP, ARCH, "edp", time_limit=1e-9)
    assert stats.extra["timed_out"] and stats.evaluated == len(res) == 0


def test_random_search_is_valid_deterministic_and_never_beats_the_optimum():
    opt, _ = search_exhaustive(OP, ARCH, "edp")
    a, sa = search_random(OP, ARCH, "edp", k=3, seed=5, victory=50)
    b, sb = search_random(OP, ARCH, "edp", k=3, seed=5, victory=50)
    assert [f.mapping for f in a] == [f.mapping for f in b] and sa.evaluated == sb.evaluated
    assert len(a) == 3 and a[0].value <= a[1].value <= a[2].value
    assert len({f.mapping.key() for f in a}) == 3
    for f in a:
        validate(OP, ARCH, f.mapping)
        assert f.value >= opt[0].value
    # Another seed draws other mappings.
    c, _ = search_random(OP, ARCH, "edp", k=3, seed=6, victory=50)
    assert [f.mapping for f in c] != [f.mapping for f in a]


def test_random_search_keeps_only_mappings_the_constraints_allow():
    cons = Constraints(spatial={"X": {"K": 2}}, keep={"Buf": frozenset({"O", "A"})})
    res, stats = search_random(OP, ARCH, "edp", k=5, constraints=cons, seed=1, victory=200)
    assert res and all(cons.violation(f.mapping, ARCH) is None for f in res)
    assert stats.extra["rejected_by_constraints"] > 0
    opt, _ = search_optimal(OP, ARCH, "edp", constraints=cons)
    assert res[0].value >= opt[0].value


def test_victory_stops_after_that_many_samples_without_improvement(monkeypatch):
    first, _ = search_random(OP, ARCH, "edp", seed=0, max_samples=1)
    same = first[0].mapping
    monkeypatch.setattr(baselines, "random_mapping", lambda *a, **k: same)
    # The first sample improves on nothing found yet; then 7 that do not improve end the search.
    res, stats = search_random(OP, ARCH, "edp", victory=7)
    assert stats.evaluated == 8 and res[0].mapping == same


def test_failed_draws_count_toward_victory_and_max_samples_bounds_the_search(monkeypatch):
    def never(*a, **k):
        raise MappingError("nothing fits")

    monkeypatch.setattr(baselines, "random_mapping", never)
    res, stats = search_random(OP, ARCH, "edp", victory=9)
    assert res == [] and stats.evaluated == 0 and stats.extra["failed_draws"] == 9
    monkeypatch.undo()
    res, stats = search_random(OP, ARCH, "edp", victory=10 ** 6, max_samples=12)
    assert stats.evaluated + stats.extra.get("failed_draws", 0) + stats.extra.get("rejected_by_constraints", 0) == 12


def test_random_search_honours_its_time_limit():
    res, stats = search_random(OP, ARCH, "edp", time_limit=1e-9)
    assert stats.extra["timed_out"] and res == [] and stats.evaluated == 0


def test_random_search_samples_imperfect_factors_when_asked():
    op = gemm("odd", m=3, n=5, k=2)
    res, stats = search_random(op, ARCH, "energy", k=50, imperfect=True, seed=2, victory=400)
    assert any(any(f.mapping.dim_product(d) != s for d, s in op.dims) for f in res)
    for f in res:
        validate(op, ARCH, f.mapping)
