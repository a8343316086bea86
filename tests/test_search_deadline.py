"""The search's time limit inside its long bound computations (``search/deadline.py``): an open level's tile shapes
with every case above them (rules B8/B35, B27, B37, B41-B43) and rule B36's points are computed once per level and
bypass choice, and at a full-size root they took more than a second (ResNet-18 layer2.0.conv1 on eyeriss_like ran 1.44
CPU seconds past a 10-second limit). A deterministic clock checks that the search stops inside such a computation once
its deadline passes, reports a timeout (never infeasible), and that a context without a deadline is never cut short."""

import pytest

from accelmap.arch import get_accelerator
from accelmap.arch.accelerator import adopt_precision
from accelmap.search import open_level_energy, open_level_loads, open_level_refills, root_pairs
from accelmap.search.bounds import BoundContext
from accelmap.search.deadline import SearchTimedOut
from accelmap.search.exact import search_exact
from accelmap.search.optimal import search_optimal
from accelmap.search.space import Constraints
from accelmap.workload import conv2d

SPATIAL = {"X": {"P": 14}, "Y": {"P": 4, "R": 3}}


def _layer():
    """ResNet-18 layer1.0.conv1's shape on eyeriss_like (its register files' shapes and cases: thousands of rows)."""
    arch = get_accelerator("eyeriss_like")
    return adopt_precision(conv2d("c", c=64, h=56, w=56, k=64, r=3, s=3, padding=1), arch), arch


@pytest.fixture
def clock(monkeypatch):
    """A clock that stands still until the first case of an open level's loops is computed, then jumps past any
    deadline; counts the cases computed (``innermost_cases`` runs once per level and shape set)."""
    import time

    state = {"now": 0.0, "cases": 0}
    monkeypatch.setattr(time, "perf_counter", lambda: state["now"])
    real = open_level_refills.innermost_cases

    def counting(ctx, c, grid):
        state["cases"] += 1
        state["now"] = 1e9
        return real(ctx, c, grid)

    monkeypatch.setattr(open_level_refills, "innermost_cases", counting)
    saved = [(store, dict(store)) for store in (open_level_refills._SHAPES, open_level_refills._OPEN_STALLS,
                                                open_level_energy._OPEN_FLOORS, root_pairs._POINTS,
                                                open_level_loads._LOADS)]
    for store, _ in saved:
        store.clear()
    yield state
    for store, old in saved:
        store.clear()
        store.update(old)


def test_the_search_stops_inside_the_root_computation(clock):
    """The clock passes the deadline during the first open level's first cases: the branch and bound stops there
    (one level's cases begun, not the three passes of every level the root computes) and says it timed out."""
    op, arch = _layer()
    found, stats = search_optimal(op, arch, "edp", constraints=Constraints(spatial=SPATIAL), time_limit=10.0)
    assert stats.extra.get("timed_out") is True
    assert clock["cases"] == 1
    assert found == [] and stats.evaluated == 0


def test_the_exact_search_reports_the_timeout_not_infeasibility(clock):
    """The same interruption inside ``search_exact``'s first unrolling: timed out, not proven, nothing claimed."""
    op, arch = _layer()
    found, stats = search_exact(op, arch, "edp", constraints=Constraints(spatial=SPATIAL), time_limit=10.0,
                                heuristic=False)
    assert stats.extra["timed_out"] is True and stats.extra["proven"] is False
    assert clock["cases"] == 1


def test_a_context_without_a_deadline_is_never_cut_short(clock):
    """The certificate and the benchmarks build bound contexts without a deadline: the clock past any deadline does
    not stop them. With a deadline in the past, the same computation raises."""
    op, arch = _layer()
    keep = (frozenset("IWO"), frozenset("IO"), frozenset("IWO"))
    root = ((), len(arch.levels), dict(op.sizes))
    energy, latency = BoundContext(op, arch, keep, SPATIAL).lower_bound(*root)
    assert energy > 0 and latency > 0 and clock["cases"] > 1
    for store in (open_level_refills._SHAPES, open_level_refills._OPEN_STALLS, open_level_energy._OPEN_FLOORS,
                  open_level_loads._LOADS):
        store.clear()
    late = BoundContext(op, arch, keep, SPATIAL)
    late.deadline = 0.0
    with pytest.raises(SearchTimedOut):
        late.lower_bound(*root)


def test_the_search_stops_between_the_leaves_of_a_node(monkeypatch):
    """A node's leaves are costed one after another (a few milliseconds each): with the clock past the deadline once
    the first leaf is costed, the branch and bound costs no second one (it had read the clock only between nodes, and
    ResNet-18 layer2.0.conv1 on eyeriss_like ran 1.66 CPU seconds past its limit in the leaves of one node)."""
    import time

    from accelmap.search import optimal
    from accelmap.workload import gemm

    arch = get_accelerator("eyeriss_like")
    op = adopt_precision(gemm("g", m=16, n=16, k=16), arch)
    state = {"now": 0.0, "leaves": 0}
    monkeypatch.setattr(time, "perf_counter", lambda: state["now"])
    real = optimal.evaluate

    def costing(*args, **kwargs):
        state["leaves"] += 1
        state["now"] = 1e9
        return real(*args, **kwargs)

    monkeypatch.setattr(optimal, "evaluate", costing)
    # (a list of the 50 best keeps every leaf of the first node: none cut by the first one found)
    found, stats = search_optimal(op, arch, "edp", k=50, constraints=Constraints(spatial={"X": {"M": 2}, "Y": {"N": 2}}),
                                  time_limit=10.0)
    assert stats.extra.get("timed_out") is True
    assert state["leaves"] == stats.evaluated == 1 and len(found) == 1
