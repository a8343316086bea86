"""The heuristic's work budget: what it skips (probes of a fixed unrolling, bypass toggles outside the best
climbs, orders beyond the best seeds') must not cost it the optimum where the space is small enough to check."""

import pytest
from tests.test_search_tilings import per_operand_chain

from accelmap.arch.accelerator import adopt_precision
from accelmap.search.heuristic import search_heuristic
from accelmap.search.heuristic_config import HeuristicConfig
from accelmap.search.space import Constraints
from accelmap.workload import gemm


def test_a_fixed_unrolling_is_searched_without_probes():
    """The exhaustive optimum of this case is checked in test_search_tilings (the default knobs find it)."""
    arch = per_operand_chain()
    op = adopt_precision(gemm("g", m=8, n=8, k=4), arch)
    cons = Constraints(spatial={"X": {"M": 4}})
    res, stats = search_heuristic(op, arch, "edp", constraints=cons, time_limit=60,
                                  config=HeuristicConfig(cpu_clock=True, toggle_climbs=0, climb_orders=1))
    # One candidate, and two are searched in full: probing it would only cost its seeds twice.
    assert stats.extra["spatial_candidates"] == 1 and stats.extra["spatial_probed"] == 0
    assert not stats.extra["timed_out"]
    best = res[0].mapping
    assert [(lp.dim, lp.bound, lp.axis) for lp in best.loops if lp.spatial] == [("M", 4, "X")]
    assert cons.violation(best, arch) is None


def test_the_budget_knobs_are_checked():
    assert HeuristicConfig(toggle_climbs=0).key() != HeuristicConfig().key()
    with pytest.raises(ValueError, match="HeuristicConfig.climb_orders must be an integer >= 1, got 0"):
        HeuristicConfig(climb_orders=0)
    with pytest.raises(ValueError, match="HeuristicConfig.toggle_climbs must be an integer >= 0, got -1"):
        HeuristicConfig(toggle_climbs=-1)
