"""Rule D (a design pruned because a mapped design of no more area beats every mapping it could have) and the
per-design CPU budget split over layers."""

import math
from importlib import resources

import pytest
from click.testing import CliRunner
from tests.test_dse_sweep import TINY

from accelmap.arch.accelerator import adopt_precision
from accelmap.cli import main
from accelmap.dse.design_bound import DesignBounds, MappedPoint, design_bounds, dominator, off_three_metric_front
from accelmap.dse.layer_budget import FLOOR_SHARE, layer_budgets
from accelmap.dse.pareto import pareto_front
from accelmap.dse.report import summary
from accelmap.dse.space import load_space, space_from_dict
from accelmap.dse.store import StoredRun
from accelmap.dse.sweep import DesignTask, run_sweep, with_warm_start
from accelmap.errors import SpecError
from accelmap.search.mapper import map_operator
from accelmap.workload.constructors import gemm
from accelmap.workload.models import Layer, ModelImport


def _space(tmp_path, strategy="heuristic"):
    # Two designs: the second has the larger buffer (more area) and a DRAM four times as costly per access, so every
    # mapping of it is worse than the first's best: rule D's bound must see that before mapping it.
    (tmp_path / "tiny.yaml").write_text(TINY)
    data = {"name": "tiny", "base": "tiny.yaml", "energy": "base",
            "parameters": [{"name": "mem", "set": ["levels.GLB.capacity", "levels.DRAM.read_energy"],
                            "values": [["1 KiB", "100 pJ"], ["256 KiB", "400 pJ"]]}],
            "mapper": {"strategy": strategy, "time_limit": 60}}
    return space_from_dict(data, str(tmp_path / "space.yaml"), tmp_path / "space.yaml")


def _model():
    return ModelImport("tiny", "test", (Layer(gemm("g", m=2, n=2, k=2), ("g1",), "Gemm"),))


def test_layer_budgets_split_a_design_budget_by_work_above_a_floor():
    model = ModelImport("m", "test", (Layer(gemm("a", m=4, n=4, k=4), ("a1", "a2", "a3"), "Gemm"),   # 3 x 64 MACs
                                      Layer(gemm("b", m=2, n=2, k=2), ("b1",), "Gemm")))              # 8 MACs
    b = layer_budgets(model, 4.0)
    floor = FLOOR_SHARE * 4.0 / 2
    assert b == pytest.approx({"a": floor + 3.0 * 192 / 200, "b": floor + 3.0 * 8 / 200})
    assert sum(b.values()) == pytest.approx(4.0)
    with pytest.raises(SpecError, match="positive CPU seconds"):
        layer_budgets(model, 0.0)


def test_dominator_needs_no_more_area_and_edp_at_most_the_bound_one_strictly():
    bounds = DesignBounds(energy=10.0, latency=10.0, edp=100.0)
    small_good = MappedPoint("a", 1.0, 9.0, 10.0)      # EDP 90 at less area: dominates
    same_area_tie = MappedPoint("b", 2.0, 10.0, 10.0)  # EDP 100 = the bound at the same area: a tie, kept
    bigger = MappedPoint("c", 3.0, 1.0, 1.0)           # far better EDP but more area: on the front beside it
    tie_smaller = MappedPoint("d", 1.5, 10.0, 10.0)    # EDP = bound at less area: dominates
    assert dominator(bounds, 2.0, (same_area_tie, bigger)) is None
    assert dominator(bounds, 2.0, (same_area_tie, tie_smaller)) is tie_smaller
    assert dominator(bounds, 2.0, (tie_smaller, small_good, bigger)) is small_good   # the least EDP
    # Energy and latency both within their bounds: off the three-metric front too; 9 x 10 is, 12 x 5 is not.
    assert off_three_metric_front(bounds, 2.0, (small_good,))
    assert not off_three_metric_front(bounds, 2.0, (MappedPoint("e", 1.0, 12.0, 5.0),))


def test_rule_d_prunes_a_design_whose_true_optimum_is_dominated(tmp_path):
    space = _space(tmp_path)
    res = run_sweep(space, _model(), workers=1, store_path=tmp_path / "s.sqlite", progress=False, prune=True)
    assert [o.status for o in res.outcomes] == ["mapped", "pruned"]
    small, big = res.outcomes
    assert "rule D" in big.reason and "mem=" in big.reason and big.run.result["pruned_by"]["edp"] == small.edp
    # Brute force: the pruned design's proven optimum is no better than the mapped design's EDP, at more area.
    arch = big.design.accelerator
    opt = map_operator(adopt_precision(_model().layers[0].operator, arch), arch, "edp", strategy="optimal")
    assert opt.proven_optimal
    assert opt.best.value >= small.edp and big.area > small.area
    bounds = design_bounds(_model(), arch)
    assert bounds.edp <= opt.best.value * (1 + 1e-9)
    assert bounds.energy <= opt.best.result.energy_total * (1 + 1e-9)
    assert bounds.latency <= opt.best.result.latency * (1 + 1e-9)
    assert [o.design.label for o in pareto_front(res.outcomes, ("edp", "area"))] == [small.design.label]
    s = summary(res)
    assert s["pruned"] == 1 and s["mapped"] == 1
    # Its energy and latency bounds are both above the small design's: off the three-metric front as well.
    assert big.run.result["off_three_metric_front"] and s["pruned_maybe_on_three_metric_front"] == 0
    # The store keeps the proof: the same sweep again maps nothing and prunes the same design; without rule D
    # the design is mapped (its own store row).
    again = run_sweep(space, _model(), workers=1, store_path=tmp_path / "s.sqlite", progress=False, prune=True)
    assert again.mapped_now == 0 and [o.status for o in again.outcomes] == ["mapped", "pruned"]


def test_design_budget_maps_every_layer_in_model_order_with_the_heuristic_only(tmp_path):
    space = _space(tmp_path)
    pts = list(space.grid())[:1]
    # Two layers of different work get different limits, so they are mapped in two groups and put back in order.
    model = ModelImport("two", "test", (Layer(gemm("small", m=2, n=2, k=2), ("s1",), "Gemm"),
                                        Layer(gemm("big", m=4, n=4, k=4), ("b1", "b2"), "Gemm")))
    assert len(set(layer_budgets(model, 0.3).values())) == 2
    res = run_sweep(space, model, points=pts, workers=1, store_path=None, progress=False, design_budget=0.3)
    o = res.outcomes[0]
    assert o.status == "mapped" and o.run.result["cpu_seconds"] < 5 and math.isfinite(o.edp)
    layers = o.run.result["layers"]
    assert [(ly["name"], ly["count"]) for ly in layers] == [("small", 1), ("big", 2)]
    assert o.energy == pytest.approx(sum(ly["count"] * ly["energy_pj"] for ly in layers))
    assert o.latency == pytest.approx(sum(ly["count"] * ly["latency_cycles"] for ly in layers))
    with pytest.raises(SpecError, match="heuristic"):
        run_sweep(space, model, points=pts, workers=1, store_path=None, progress=False, design_budget=0.2,
                  strategy="optimal")


def test_cli_refuses_a_design_budget_beside_a_time_limit_and_a_nonpositive_neighbour_count():
    space = str(resources.files("accelmap") / "data" / "dse" / "eyeriss_sweep_504.yaml")
    r = CliRunner().invoke(main, ["dse", space, "--model", "resnet18", "--design-budget", "5", "--time-limit", "1"])
    assert r.exit_code == 2 and r.output.startswith("error: --design-budget: a budget per design replaces"), r.output
    r = CliRunner().invoke(main, ["dse", space, "--model", "resnet18", "--warm-start", "--warm-neighbours", "0"])
    assert r.exit_code == 2 and r.output.startswith("error: --warm-neighbours: must be a positive integer"), r.output
    assert load_space(space).size == 504


def test_warm_start_from_more_neighbours_gives_each_mapping_once(tmp_path):
    space = _space(tmp_path)
    a, b = list(space.grid())
    task = DesignTask("k", None, _model(), "heuristic", "edp", None, 0)

    def run(forms):
        return StoredRun(1.0, 1.0, True, None, 0.0, "w", {"layers": [{"name": "g", "mapping": f} for f in forms]})

    mapped = [(a, "A", run([{"m": 1}])), (b, "B", run([{"m": 1}])), (b, "C", run([{"m": 2}]))]
    two = with_warm_start(task, space, b, mapped)
    assert two.warm_from == ("B", "C") and two.warm_start == (("g", ({"m": 1}, {"m": 2})),)
    three = with_warm_start(task, space, b, mapped, neighbours=3)
    # A's mapping equals B's: handed over once.
    assert three.warm_from == ("B", "C", "A") and three.warm_start == (("g", ({"m": 1}, {"m": 2})),)
