"""The tuning benchmark's simulator ground truth (``benchmarks/tuning.py --ground-truth sim``): every valid
configuration's cycles are the simulator backend's, as a tuner measuring with ``--backend sim`` would get them."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from accelmap.arch.accelerator import adopt_precision
from accelmap.arch.presets import get_accelerator
from accelmap.tune.measure import measure_one
from accelmap.tune.template import ScheduleTemplate
from accelmap.workload.constructors import conv2d

VTA = get_accelerator("vta_like")


def _benchmark():
    path = Path(__file__).parents[1] / "benchmarks" / "tuning.py"
    spec = importlib.util.spec_from_file_location("tuning_benchmark", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("tuning_benchmark", module)
    spec.loader.exec_module(module)
    return module


def test_sim_ground_truth_is_the_simulator_run_on_every_valid_configuration():
    bench = _benchmark()
    template = ScheduleTemplate(adopt_precision(conv2d("t", n=1, k=32, h=2, w=4, r=1, s=1, c=16), VTA), VTA)
    model = bench.ground_truth(template)
    table, record = bench.sim_ground_truth(template, model, jobs=1)
    direct = {p: measure_one(template, "sim", p) for p in model}
    assert len(table) == template.space.size == 96
    assert {p for p, m in table.items() if m.valid} == {p for p, m in direct.items() if m.valid}
    assert sum(m.valid for m in table.values()) == 54
    assert all(table[p].cost == direct[p].cost for p in table)
    assert record["refused"] == [] and len(record["cycles"]) == 54
    # the simulator is not the model here (double-buffered threads): the table is not the model's relabelled
    threaded = {p for p in model if any(v > 1 for k, v in template.space.values(p).items() if k.endswith("nthread"))}
    diff = bench.model_vs_sim(model, table, threaded)
    assert diff["configs"] == 54 and diff["differ"] == 1
    assert diff["threaded_differ"] == 1 and diff["single_differ"] == 0
    # the cached record gives the same table without simulating
    again, same = bench.sim_ground_truth(template, model, jobs=1, cached=record)
    assert same is record and again == table
