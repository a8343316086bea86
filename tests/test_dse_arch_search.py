"""``search: {method: sunstone}`` through the CLI: each layer's co-search answer equals a grid over the space."""

import json

import pytest
import yaml
from click.testing import CliRunner

from accelmap.arch.accelerator import adopt_precision
from accelmap.cli import main
from accelmap.dse.design import make_design
from accelmap.dse.space import load_space, space_from_dict
from accelmap.errors import SpecError
from accelmap.search import pinned_cases, pinned_stall
from accelmap.search.mapper import map_operator
from accelmap.workload.constructors import gemm

# Per-tensor L1 buffers below a shared L2 with a 2x2 PE array (the thesis' Ch. 7 shape, scaled down).
SPLIT = """
name: split
compute: {mac_energy: 1 pJ, precision: {I: 16, W: 16, O: 16}}
levels:
  - {name: DRAM, holds: [I, W, O], capacity: unbounded, width: 16 bit, read_bandwidth: 4 words/cycle}
  - name: L2
    holds: [I, W, O]
    capacity: 4 KiB
    width: 16 bit
    read_bandwidth: 16 words/cycle
    fanout: {axes: [{name: X, size: 2}, {name: Y, size: 2}]}
  - {name: L1I, holds: [I], capacity: 32 words, width: 16 bit}
  - {name: L1W, holds: [W], capacity: 32 words, width: 16 bit}
  - {name: L1O, holds: [O], capacity: 32 words, width: 16 bit}
"""

SIZES = ["8 words", "16 words"]
CAP_MM2 = 0.0249      # 3 of the 4 designs: all but L1I = L1W = 16 words
SPACE = {
    "name": "l1split", "base": "split.yaml",
    "parameters": [{"name": n, "set": f"levels.{n}.capacity", "values": SIZES} for n in ("L1I", "L1W")],
    "constraints": {"max_area": f"{CAP_MM2} mm2"},
    "search": {"method": "sunstone"},
    # The exact search proves each configuration's optimum of this small layer, so the grid below and the
    # co-search see the same per-configuration answers on any machine.
    "mapper": {"strategy": "optimal", "objective": "edp", "time_limit": 60},
}
GEMM = "name: g\ngemm: {m: 2, n: 4, k: 2}\n"


@pytest.fixture
def files(tmp_path):
    (tmp_path / "split.yaml").write_text(SPLIT)
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(SPACE))
    (tmp_path / "g.yaml").write_text(GEMM)
    return tmp_path


def test_cli_sunstone_finds_the_grid_optimum_of_each_layer(files):
    out = files / "out"
    r = CliRunner().invoke(main, ["dse", str(files / "space.yaml"), "--model", str(files / "g.yaml"),
                                  "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "Sunstone-arch co-search of L1I, L1W" in r.output
    summary = json.loads((out / "summary.json").read_text())
    (layer,) = summary["layers"]
    assert summary["method"] == "sunstone"
    # The grid: every design of the space within its constraints, mapped exactly.
    space = load_space(files / "space.yaml")
    grid = {}
    for pt in space.grid():
        d = make_design(space, pt)
        if d.accelerator is None or d.area_mm2 > CAP_MM2:
            continue
        op = adopt_precision(gemm("g", m=2, n=4, k=2), d.accelerator)
        found = map_operator(op, d.accelerator, "edp", strategy="optimal", time_limit=60)
        assert found.best is not None and found.proven_optimal
        grid[d.label] = found.best.value
    assert len(grid) == 3 and len(summary["excluded"]) == 1
    assert layer["configs"] == len(grid)
    assert layer["value"] == pytest.approx(min(grid.values()), rel=1e-12)
    assert grid[layer["best"]] == pytest.approx(layer["value"], rel=1e-12)
    assert layer["mapped"] + layer["pruned_by_bound"] + layer["proven_by_incumbent"] == layer["configs"]
    assert list((out / "mappings").glob("*.mapping.yaml"))


def test_sunstone_space_must_size_buffers(tmp_path):
    (tmp_path / "split.yaml").write_text(SPLIT)
    bad = {**SPACE, "parameters": [{"name": "x", "set": "levels.L2.fanout.axes.X.size", "values": [2, 4]}]}
    with pytest.raises(SpecError) as e:
        space_from_dict(bad, str(tmp_path / "space.yaml"), tmp_path / "space.yaml")
    msg = str(e.value)
    assert "parameters[0].set" in msg and "levels.NAME.capacity" in msg and "\n" not in msg


def test_bad_search_method_is_one_line_naming_the_valid_ones(files):
    (files / "space.yaml").write_text(yaml.safe_dump({**SPACE, "search": {"method": "anneal"}}))
    r = CliRunner().invoke(main, ["dse", str(files / "space.yaml"), "--model", str(files / "g.yaml")])
    assert r.exit_code == 2
    assert r.output.startswith(f"error: {files / 'space.yaml'}: search.method"), r.output
    assert "'grid', 'random' or 'sunstone'" in r.output and r.output.count("\n") == 1
    r = CliRunner().invoke(main, ["dse", str(files / "space.yaml"), "--model", str(files / "g.yaml"),
                                  "--method", "anneal"])
    assert r.exit_code == 2 and "'grid', 'random', 'sunstone'" in r.output


def test_sunstone_refuses_sweep_only_flags(files):
    r = CliRunner().invoke(main, ["dse", str(files / "space.yaml"), "--model", str(files / "g.yaml"),
                                  "--engine", "dask"])
    assert r.exit_code == 2 and r.output.startswith("error: --engine: applies to grid and random"), r.output


def test_cli_tile_dominance_is_opt_in_and_sunstone_only(files):
    out = files / "out"
    r = CliRunner().invoke(main, ["dse", str(files / "space.yaml"), "--model", str(files / "g.yaml"),
                                  "--out", str(out), "--tile-dominance"])
    assert r.exit_code == 0, r.output
    assert "with the uncertified tile-dominance rule" in r.output
    summary = json.loads((out / "summary.json").read_text())
    (layer,) = summary["layers"]
    assert summary["tile_dominance"] is True
    assert layer["mapped"] + layer["pruned_by_bound"] + layer["proven_by_incumbent"] + layer["pruned_by_tiles"] \
        == layer["configs"] == 3
    r = CliRunner().invoke(main, ["dse", str(files / "space.yaml"), "--model", str(files / "g.yaml"),
                                  "--method", "grid", "--tile-dominance"])
    assert r.exit_code == 2 and r.output.startswith("error: --tile-dominance: applies to search method sunstone")


# One PE straight under a DRAM that delivers a word a cycle, with single-class buffers that cannot be bypassed:
# a 1-word input buffer with a 4096-word output buffer is so much worse than the best configuration that the exact
# search's own bounds (rule R) show it before it is mapped, while rules H and C, blind or nearly blind to capacity,
# would map it.
PE = """
name: pe
compute: {mac_energy: 0.1 pJ, precision: {I: 8, W: 8, O: 8}}
levels:
  - {name: DRAM, holds: [I, W, O], capacity: unbounded, width: 8 bit, read_energy: 1 pJ, write_energy: 1 pJ,
     read_bandwidth: 1 words/cycle}
  - {name: L1I, holds: [I], capacity: 1 words, width: 8 bit, bypass: false}
  - {name: L1W, holds: [W], capacity: 1 words, width: 8 bit, bypass: false}
  - {name: L1O, holds: [O], capacity: 1 words, width: 8 bit, bypass: false}
"""
PE_SPACE = {
    "name": "pe_l1", "base": "pe.yaml",
    "parameters": [{"name": "L1I", "set": "levels.L1I.capacity", "values": ["1 words", "2 words", "4096 words"]},
                   {"name": "L1O", "set": "levels.L1O.capacity", "values": ["2 words", "4096 words"]}],
    "search": {"method": "sunstone"},
    "mapper": {"strategy": "exhaustive", "objective": "edp", "time_limit": 60},
}


def test_cli_root_bounds_prune_a_configuration_no_better_at_its_optimum(tmp_path, monkeypatch):
    # Rule B33's cases off (the certified bound as before them): with them rule H's bound alone prunes the 1-word
    # input buffer (its register refills at every step) and rule R, the subject here, is left nothing to prune.
    monkeypatch.setattr(pinned_cases.PinnedCases, "cases", pinned_stall.PinnedStall.cases)
    (tmp_path / "pe.yaml").write_text(PE)
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(PE_SPACE))
    (tmp_path / "g.yaml").write_text("name: g\ngemm: {m: 2, n: 2, k: 2}\n")
    args = ["dse", str(tmp_path / "space.yaml"), "--model", str(tmp_path / "g.yaml")]
    r = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "with"), "--root-bounds"])
    assert r.exit_code == 0, r.output
    assert "(with the root-bound rule)" in r.output
    summary = json.loads((tmp_path / "with" / "summary.json").read_text())
    (layer,) = summary["layers"]
    assert summary["root_bounds"] is True
    # Every configuration's true optimum (the exhaustive search proves it).
    space = load_space(tmp_path / "space.yaml")
    grid = {}
    for pt in space.grid():
        d = make_design(space, pt)
        found = map_operator(adopt_precision(gemm("g", m=2, n=2, k=2), d.accelerator), d.accelerator, "edp",
                             strategy="exhaustive", time_limit=60)
        assert found.proven_optimal
        grid[d.label] = found.best.value
    assert len(grid) == layer["configs"] == 6
    # The co-search's answer is the grid's; rule R dropped the 1-word input buffer beside the 4096-word output
    # buffer without mapping it, and that configuration is no better at its optimum (it is 30% worse).
    assert layer["value"] == pytest.approx(min(grid.values()), rel=1e-12)
    assert layer["root_bound_pruned_designs"] == ["L1I=1 words, L1O=4096 words"]
    assert layer["pruned_by_root_bounds"] == 1 and layer["mapped"] == 5 and layer["pruned_by_bound"] == 0
    assert grid["L1I=1 words, L1O=4096 words"] > 1.3 * layer["value"]
    # The flag is refused outside the co-search.
    r = CliRunner().invoke(main, [*args, "--method", "grid", "--root-bounds"])
    assert r.exit_code == 2 and r.output.startswith("error: --root-bounds: applies to search method sunstone")


def test_cli_root_order_is_sunstone_only(files):
    r = CliRunner().invoke(main, ["dse", str(files / "space.yaml"), "--model", str(files / "g.yaml"),
                                  "--method", "grid", "--root-order"])
    assert r.exit_code == 2 and r.output.startswith("error: --root-order: applies to search method sunstone")
