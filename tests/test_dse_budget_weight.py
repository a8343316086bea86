"""A sweep's design budget shared between its designs by the spatial unrollings the heuristic ranks on each
(``--budget-weight unrollings``), the same average over the space."""

import pytest
from click.testing import CliRunner
from tests.test_dse_sweep import TINY

from accelmap.arch.accelerator import adopt_precision
from accelmap.cli import main
from accelmap.dse.design import make_design
from accelmap.dse.layer_budget import design_budgets, layer_budgets, unrolling_candidates
from accelmap.dse.space import space_from_dict
from accelmap.dse.sweep import run_sweep
from accelmap.errors import SpecError
from accelmap.search.bounds import chain_options
from accelmap.search.heuristic_config import DEFAULT_HEURISTIC as H
from accelmap.search.space import Constraints, keep_options
from accelmap.search.spatial import ranked_spatial
from accelmap.workload.constructors import gemm
from accelmap.workload.models import Layer, ModelImport


def _space(tmp_path):
    # Three designs: a 2x2, a 4x4 and a 2x8 array under the same buffers.
    (tmp_path / "tiny.yaml").write_text(TINY)
    data = {"name": "arrays", "base": "tiny.yaml", "energy": "base",
            "parameters": [{"name": "array", "set": ["levels.GLB.fanout.axes.X.size", "levels.GLB.fanout.axes.Y.size"],
                            "values": [[2, 2], [4, 4], [2, 8]]}],
            "mapper": {"strategy": "heuristic", "time_limit": 60}}
    return space_from_dict(data, str(tmp_path / "space.yaml"), tmp_path / "space.yaml")


def _model():
    return ModelImport("two", "test", (Layer(gemm("a", m=8, n=8, k=8), ("a1",), "Gemm"),
                                       Layer(gemm("b", m=4, n=2, k=16), ("b1", "b2"), "Gemm")))


def test_unrolling_candidates_are_what_the_heuristic_ranks_and_budgets_keep_their_average(tmp_path):
    space = _space(tmp_path)
    model = _model()
    archs = [make_design(space, pt).accelerator for pt in space.grid()]
    counts = []
    for arch in archs:
        ranked = 0
        for layer in model.layers:
            op = adopt_precision(layer.operator, arch)
            keeps = keep_options(op, arch, Constraints())
            ranked += len(ranked_spatial(op, arch, Constraints(), chain_options(op, keeps), "edp",
                                         max_dims=H.max_dims_per_axis, min_pe_fraction=H.min_pe_fraction,
                                         limit=10 ** 6))
        assert unrolling_candidates(model, arch) == ranked
        counts.append(ranked)
    # More PEs, more unrollings to probe.
    assert counts[0] < counts[1] and counts[0] < counts[2]
    memo: dict = {}
    assert [unrolling_candidates(model, a, memo=memo) for a in archs] == counts and len(memo) == 3
    assert design_budgets(model, archs, 3.0, "even") == [3.0, 3.0, 3.0]
    weighted = design_budgets(model, archs, 3.0, "unrollings")
    assert weighted == pytest.approx([9.0 * n / sum(counts) for n in counts], rel=1e-12)
    assert sum(weighted) == pytest.approx(9.0)
    with pytest.raises(SpecError, match="even, unrollings"):
        design_budgets(model, archs, 3.0, "pes")


def test_sweep_gives_each_design_its_weighted_share_split_over_its_layers(tmp_path):
    space = _space(tmp_path)
    model = ModelImport("one", "test", (Layer(gemm("a", m=4, n=4, k=4), ("a1",), "Gemm"),))
    archs = [make_design(space, pt).accelerator for pt in space.grid()]
    want = design_budgets(model, archs, 0.02, "unrollings")
    pts = list(space.grid())
    # Two of the three designs mapped: their shares are of the whole space's average, not of the points mapped.
    res = run_sweep(space, model, points=pts[:2], workers=1, store_path=tmp_path / "s.sqlite", progress=False,
                    design_budget=0.02, budget_weight="unrollings")
    got = [o.run.result["design_budget_cpu_s"] for o in res.outcomes]
    assert [o.status for o in res.outcomes] == ["mapped", "mapped"]
    assert got == pytest.approx(want[:2], rel=1e-12)
    assert sum(layer_budgets(model, want[1]).values()) == pytest.approx(want[1])
    # An even budget is another store row: the weighted rows are not answered for it.
    even = run_sweep(space, model, points=pts[:1], workers=1, store_path=tmp_path / "s.sqlite", progress=False,
                     design_budget=0.02)
    assert even.mapped_now == 1 and even.outcomes[0].run.result["design_budget_cpu_s"] == pytest.approx(0.02)
    again = run_sweep(space, model, points=pts[:2], workers=1, store_path=tmp_path / "s.sqlite", progress=False,
                      design_budget=0.02, budget_weight="unrollings")
    assert again.mapped_now == 0


def test_cli_budget_weight_needs_a_design_budget(tmp_path):
    _space(tmp_path)
    (tmp_path / "space.yaml").write_text(
        "name: arrays\nbase: tiny.yaml\nparameters:\n  - {name: glb, set: levels.GLB.capacity, values: [1 KiB]}\n")
    r = CliRunner().invoke(main, ["dse", str(tmp_path / "space.yaml"), "--model", "resnet18",
                                  "--budget-weight", "unrollings"])
    assert r.exit_code == 2 and r.output.startswith("error: --budget-weight: shares the budget per design"), r.output
