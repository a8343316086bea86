"""Sweeps: every design mapped once, stored as it arrives, resumed from the store; the Dask engine on loopback."""

import importlib.util
import json
import math
import os

import pytest
import yaml

from accelmap.dse.space import space_from_dict
from accelmap.dse.store import DesignStore
from accelmap.dse.sweep import run_sweep
from accelmap.search.model_mapper import map_model
from accelmap.workload.constructors import gemm
from accelmap.workload.models import Layer, ModelImport

TINY = """
name: tiny
compute: {mac_energy: 1 pJ, precision: {I: 8, W: 8, O: 32}}
levels:
  - {name: DRAM, holds: [I, W, O], capacity: unbounded, width: 8 bit, read_energy: 100 pJ,
     read_bandwidth: 4 words/cycle}
  - name: GLB
    holds: [I, W, O]
    capacity: 1 KiB
    width: 8 bit
    read_energy: 6 pJ
    fanout: {axes: [{name: X, size: 2}, {name: Y, size: 2}]}
  - {name: RF, holds: [I, W, O], capacity: 64 B, width: 8 bit, read_energy: 1 pJ}
"""

# The heuristic finishes its whole candidate list for this tiny layer well inside the time limit,
# so its answer does not depend on the machine's speed (the exact search needs longer to prove).
SPACE = {
    "name": "tiny", "base": "tiny.yaml",
    "parameters": [
        {"name": "glb", "set": "levels.GLB.capacity", "values": ["1 KiB", "4 KiB"]},
        {"name": "array", "set": ["levels.GLB.fanout.axes.X.size", "levels.GLB.fanout.axes.Y.size"],
         "values": [[2, 2], [4, 2]]},
    ],
    "mapper": {"strategy": "heuristic", "time_limit": 60},
}


def _model():
    return ModelImport("tiny", "test", (Layer(gemm("g", m=2, n=4, k=2), ("g1", "g2"), "Gemm"),))


@pytest.fixture
def space(tmp_path):
    (tmp_path / "tiny.yaml").write_text(TINY)
    return space_from_dict(SPACE, str(tmp_path / "space.yaml"), tmp_path / "space.yaml")


def test_sweep_maps_each_design_as_map_model_does(tmp_path, space):
    model = _model()
    pts = list(space.grid())
    res = run_sweep(space, model, points=pts[:2], workers=1, store_path=tmp_path / "s.sqlite", progress=False)
    assert [o.status for o in res.outcomes] == ["mapped"] * 2
    assert res.mapped_now == 2
    o = res.outcomes[1]
    assert o.design.accelerator is not None
    mm = map_model(model, o.design.accelerator, strategy="heuristic", time_limit_per_layer=60, jobs=1,
                   cache_path=None, progress=False)
    assert o.energy == mm.energy_total and o.latency == mm.latency_total
    assert [l["count"] for l in o.run.result["layers"]] == [2]
    assert all("mapping" in l for l in o.run.result["layers"])
    # A bigger array is faster on this layer.
    assert res.outcomes[1].latency < res.outcomes[0].latency


def test_sweep_resumes_from_store_and_maps_nothing_twice(tmp_path, space):
    model = _model()
    store = tmp_path / "s.sqlite"
    pts = list(space.grid())
    first = run_sweep(space, model, points=pts[:1], store_path=store, progress=False)
    assert first.mapped_now == 1
    # The stored point again, a new one, and the new one twice more: one design is mapped, once.
    second = run_sweep(space, model, points=[pts[0], pts[2], pts[2], pts[0]], store_path=store, progress=False)
    assert second.mapped_now == 1
    assert [o.cached for o in second.outcomes] == [True, False, False, True]
    assert second.outcomes[0].energy == first.outcomes[0].energy
    assert second.outcomes[2].energy == second.outcomes[1].energy
    s = DesignStore(store)
    assert len(s) == 2
    s.close()
    third = run_sweep(space, model, points=[pts[2], pts[0]], store_path=store, progress=False)
    assert third.mapped_now == 0 and all(o.cached for o in third.outcomes)


def test_constraints_exclude_designs_before_mapping(tmp_path):
    (tmp_path / "tiny.yaml").write_text(TINY)
    space = space_from_dict({**SPACE, "constraints": {"max_sram": "1 KiB"}}, str(tmp_path / "s.yaml"),
                            tmp_path / "s.yaml")
    res = run_sweep(space, _model(), points=list(space.grid())[1:], progress=False)
    assert [o.status for o in res.outcomes] == ["excluded"] * 3 and res.mapped_now == 0
    assert res.outcomes[0].reason == "on-chip storage 12288 bits > max_sram 8192 bits"   # 1 KiB + 8 x 64 B
    assert math.isnan(res.outcomes[2].energy)


def test_unknown_engine_and_local_address_are_refused(space):
    from accelmap.errors import SpecError
    with pytest.raises(SpecError, match="--engine: unknown engine 'spark'"):
        run_sweep(space, _model(), engine="spark", progress=False)
    with pytest.raises(SpecError, match="--address: applies to the dask and ray engines"):
        run_sweep(space, _model(), address="tcp://127.0.0.1:1", progress=False)


@pytest.mark.skipif(importlib.util.find_spec("distributed") is None,
                    reason="the dask engine needs the 'dse' extra (pip install 'accelmap[dse]')")
def test_dask_cluster_on_loopback_runs_a_sweep(tmp_path, space):
    from distributed import LocalCluster

    model = _model()
    pts = [p for p in space.grid() if p[0][1] == "1 KiB"]
    local = run_sweep(space, model, points=pts, progress=False)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None) as cluster:
        assert cluster.scheduler_address.startswith("tcp://127.0.0.1:")
        res = run_sweep(space, model, points=pts, engine="dask", address=cluster.scheduler_address,
                        store_path=tmp_path / "s.sqlite", progress=False)
    assert res.mapped_now == 2
    assert [o.energy for o in res.outcomes] == [o.energy for o in local.outcomes]
    assert [o.latency for o in res.outcomes] == [o.latency for o in local.outcomes]
    # Everything is in the store now: the sweep needs no cluster to answer again.
    again = run_sweep(space, model, points=pts, engine="dask", address=cluster.scheduler_address,
                      store_path=tmp_path / "s.sqlite", progress=False)
    assert again.mapped_now == 0 and [o.energy for o in again.outcomes] == [o.energy for o in res.outcomes]


@pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                    reason="the ray engine needs Ray (pip install 'accelmap[ray]')")
def test_ray_local_instance_on_loopback_runs_a_sweep(tmp_path, space):
    model = _model()
    pts = [p for p in space.grid() if p[0][1] == "1 KiB"]
    local = run_sweep(space, model, points=pts, progress=False)
    # No address: the engine starts a Ray instance of its own on 127.0.0.1 with two worker processes.
    res = run_sweep(space, model, points=pts, engine="ray", workers=2, store_path=tmp_path / "s.sqlite",
                    progress=False)
    assert res.mapped_now == 2
    assert [o.energy for o in res.outcomes] == [o.energy for o in local.outcomes]
    assert [o.latency for o in res.outcomes] == [o.latency for o in local.outcomes]
    # The two designs ran in Ray's worker processes, not in this one.
    assert all(o.run is not None and not o.run.worker.endswith(f":{os.getpid()}") for o in res.outcomes)
    again = run_sweep(space, model, points=pts, engine="ray", workers=2, store_path=tmp_path / "s.sqlite",
                      progress=False)
    assert again.mapped_now == 0 and [o.energy for o in again.outcomes] == [o.energy for o in res.outcomes]


def test_cli_sweep_writes_fronts_mappings_and_plot_and_resumes(tmp_path):
    from click.testing import CliRunner

    from accelmap.cli import main
    (tmp_path / "tiny.yaml").write_text(TINY)
    (tmp_path / "space.yaml").write_text(yaml.safe_dump({**SPACE, "parameters": SPACE["parameters"][1:]}))
    (tmp_path / "g.yaml").write_text("name: g\ngemm: {m: 2, n: 4, k: 2}\n")
    args = ["dse", str(tmp_path / "space.yaml"), "--model", str(tmp_path / "g.yaml"), "--workers", "1",
            "--store", str(tmp_path / "s.sqlite"), "--out", str(tmp_path / "out")]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    assert "2 mapped (2 now, 0 from the store)" in r.output and "EDP-area Pareto front:" in r.output
    out = tmp_path / "out"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["mapped"] == 2 and summary["front_edp_area"]
    assert (out / "pareto.png").stat().st_size > 0
    assert (out / "designs.csv").read_text().startswith("design,status,cached,area_mm2")
    assert list((out / "designs" / "00").glob("*.mapping.yaml"))
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 0 and "2 mapped (0 now, 2 from the store)" in again.output


def test_cli_sweep_with_no_mapped_design_exits_1(tmp_path):
    from click.testing import CliRunner

    from accelmap.cli import main
    (tmp_path / "tiny.yaml").write_text(TINY)
    space = {**SPACE, "parameters": SPACE["parameters"][1:], "constraints": {"max_sram": "1 bit"}}
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(space))
    (tmp_path / "g.yaml").write_text("name: g\ngemm: {m: 2, n: 4, k: 2}\n")
    r = CliRunner().invoke(main, ["dse", str(tmp_path / "space.yaml"), "--model", str(tmp_path / "g.yaml"),
                                  "--workers", "1", "--no-store", "--out", str(tmp_path / "out")])
    assert r.exit_code == 1, r.output
    assert "error: no design of the space mapped every layer of the model" in r.output


def test_cli_the_full_sweeps_flags_in_one_line_resume_from_the_store(tmp_path):
    """The line docs/dse.md gives for the 504-design sweep (2 workers, a CPU budget per design, warm starts from 4
    neighbours, rule D, a store) on the tiny space: run again, it answers every design from the store."""
    from click.testing import CliRunner

    from accelmap.cli import main
    (tmp_path / "tiny.yaml").write_text(TINY)
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(SPACE))
    (tmp_path / "g.yaml").write_text("name: g\ngemm: {m: 2, n: 4, k: 2}\n")
    args = ["dse", str(tmp_path / "space.yaml"), "--model", str(tmp_path / "g.yaml"), "--workers", "2",
            "--design-budget", "1", "--warm-start", "--warm-neighbours", "4", "--prune-dominated",
            "--store", str(tmp_path / "s.sqlite"), "--no-plots", "--no-progress", "--out", str(tmp_path / "out")]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    first = json.loads((tmp_path / "out" / "summary.json").read_text())
    done = {d["design"]: d["status"] for d in first["outcomes"]}
    assert len(done) == 4 and set(done.values()) <= {"mapped", "pruned"} and "mapped" in done.values()
    assert first["mapped_now"] == first["mapped"] and first["from_store"] == 0
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 0, again.output
    second = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert {d["design"]: d["status"] for d in second["outcomes"]} == done
    assert second["mapped_now"] == 0 and second["from_store"] == 4
