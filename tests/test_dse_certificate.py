"""A design's certificate: its model objective's lower bound from the layers' bounds (proven, or best found with a
certified gap), and a sweep on the CPU clock that reports it per design."""

import math

import pytest
from tests.test_dse_sweep import SPACE, TINY

from accelmap.dse.certificate import design_certificate
from accelmap.dse.space import space_from_dict
from accelmap.dse.store import run_key
from accelmap.dse.sweep import run_sweep
from accelmap.workload.constructors import gemm
from accelmap.workload.models import Layer, ModelImport


def test_certificate_of_a_design_from_its_layers():
    layers = [{"count": 2, "lower_bound": 4.0, "proven_optimal": False},
              {"count": 1, "lower_bound": 8.0, "proven_optimal": True, "energy_pj": 3.0, "latency_cycles": 3.0}]
    # EDP: (2 sqrt(4) + 1 sqrt(3 x 3))^2 = 49 (a proven layer's bound is its own value).
    cert = design_certificate(layers, "edp")
    assert cert.lower_bound == 49.0 and not cert.proven and (cert.proven_layers, cert.layers) == (1, 2)
    assert cert.gap(98.0) == pytest.approx(1.0)
    assert design_certificate(layers, "energy").lower_bound == 2 * 4.0 + 3.0
    assert design_certificate(layers, "latency").lower_bound == 2 * 4.0 + 3.0
    done = design_certificate([dict(layers[1])], "edp")
    assert done.proven and done.gap(9.0) == 0.0
    # A layer without a bound: no certified gap, rather than a wrong one.
    assert design_certificate([{"count": 1, "lower_bound": None}], "edp").gap(5.0) is None


def test_sweep_on_the_cpu_clock_reports_each_designs_certificate(tmp_path):
    (tmp_path / "tiny.yaml").write_text(TINY)
    space = space_from_dict(SPACE, str(tmp_path / "space.yaml"), tmp_path / "space.yaml")
    model = ModelImport("tiny", "test", (Layer(gemm("g", m=2, n=4, k=2), ("g1", "g2"), "Gemm"),))
    res = run_sweep(space, model, points=list(space.grid())[:2], progress=False, time_limit=5, cpu_clock=True)
    for o in res.outcomes:
        d = o.to_dict()
        assert d["status"] == "mapped" and d["cpu_seconds"] > 0
        ly = o.run.result["layers"][0]
        # The layer's bound holds for the layer, and the design's bound (two occurrences) for the design.
        assert ly["lower_bound"] <= ly["energy_pj"] * ly["latency_cycles"] * (1 + 1e-9)
        if not ly["proven_optimal"]:
            assert d["objective_lower_bound"] == pytest.approx(4 * ly["lower_bound"])     # (2 sqrt(b))^2
        assert d["objective_lower_bound"] <= o.edp * (1 + 1e-9)
        assert d["gap"] == (0.0 if d["proven"] else pytest.approx(o.edp / d["objective_lower_bound"] - 1))
        assert math.isfinite(d["gap"])
    # A CPU-clock budget is another setting than the same number of wall seconds: its own store rows.
    d0 = res.outcomes[0].design.key
    assert run_key(d0, model, "heuristic", "edp", 5, 0) != run_key(d0, model, "heuristic", "edp", 5, 0, cpu_clock=True)
