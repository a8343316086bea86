"""CPU seconds of the README main job's searches, by part, and what they found.

`accelmap map resnet18 --arch eyeriss_like` runs ``map_operator(op, eyeriss_like, "edp")`` on each of the 12
distinct layers in worker processes; this runs the same calls one after another in this process, sums each part's
``time.process_time`` and writes every layer's best value, lower bound, mapping and rows evaluated to a JSON file.
Two versions of the code (``PYTHONPATH=...``) run back to back compare by CPU, and by ``cmp`` of their JSON files:
a speed-up that changes nothing gives identical files.

    PYTHONPATH=src python benchmarks/readme_job_parts.py out.json

``--phases`` instead times the whole command's phases in CPU seconds, as ``accelmap map resnet18 --arch
eyeriss_like --no-cache`` runs them but in one process (``--jobs 1``) and with the heuristic's time limit on the CPU
clock (so no phase depends on the machine's load): importing the CLI (in a fresh interpreter), loading the model and
the accelerator, each layer's search with its certificate apart, and the report (table, files, the two plots apart):

    PYTHONPATH=src python benchmarks/readme_job_parts.py --phases phases.json
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from dataclasses import replace

from accelmap.arch.accelerator import adopt_precision
from accelmap.arch.presets import get_accelerator
from accelmap.search import certificate, heuristic, mapper, probes
from accelmap.workload.models import load_model

PARTS = [(probes, "_draw", "probe tilings"), (probes, "_cost", "probe model calls"),
         (heuristic, "rank_tilings", "seed ranking"), (heuristic, "climb", "climbs"),
         (heuristic, "evaluate", "scalar model"), (heuristic, "ranked_spatial", "unrolling ranking"),
         (certificate, "certified_lower_bound", "certificate")]


def main(out_path: str) -> None:
    arch = get_accelerator("eyeriss_like")
    ops = [adopt_precision(layer.operator, arch) for layer in load_model("resnet18").layers]
    spent: dict[str, float] = {}

    def timed(f, label):
        def call(*args, **kwargs):
            t = time.process_time()
            try:
                return f(*args, **kwargs)
            finally:
                spent[label] = spent.get(label, 0.0) + time.process_time() - t
        return call

    for module, name, label in PARTS:
        setattr(module, name, timed(getattr(module, name), label))
    t0 = time.process_time()
    found = {}
    for op in ops:
        r = mapper.map_operator(op, arch, "edp")
        m = r.best.mapping
        found[op.name] = [r.best.value, r.lower_bound, repr(m.loops) + repr([sorted(k) for k in m.keep]),
                          r.stats.evaluated]
    total = time.process_time() - t0
    print(f"total {total:.2f} s of CPU; " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(spent.items(),
                                                                                      key=lambda x: -x[1])))
    with open(out_path, "w") as f:
        json.dump(found, f, indent=1)


def phases(out_path: str) -> None:
    from accelmap.report import model_report
    from accelmap.search.heuristic_config import DEFAULT_HEURISTIC
    from accelmap.search.model_mapper import map_model

    code = "import time; t = time.process_time(); import accelmap.cli.map_cmd; print(time.process_time() - t)"
    spent: dict[str, float] = {"import": float(subprocess.run([sys.executable, "-c", code], check=True,
                                                              capture_output=True, text=True).stdout)}
    t = time.process_time()
    arch = get_accelerator("eyeriss_like")
    model = load_model("resnet18")
    spent["load"] = time.process_time() - t
    certs: list[float] = []
    cert_fn = mapper.certificate

    def timed_certificate(*args, **kwargs):
        c0 = time.process_time()
        try:
            return cert_fn(*args, **kwargs)
        finally:
            certs.append(time.process_time() - c0)

    mapper.certificate = timed_certificate
    per_layer: dict[str, float] = {}
    last = [time.process_time()]

    def done(lm) -> None:
        now = time.process_time()
        per_layer[lm.name] = now - last[0]
        last[0] = now

    mm = map_model(model, arch, "edp", jobs=1, cache_path=None, progress=False, on_layer=done,
                   heuristic_config=replace(DEFAULT_HEURISTIC, cpu_clock=True))
    plots = {"plot_energy": 0.0, "plot_latency_utilization": 0.0}
    for name in plots:
        fn = getattr(model_report, name)

        def timed_plot(*args, _fn=fn, _name=name, **kwargs):
            p0 = time.process_time()
            try:
                return _fn(*args, **kwargs)
            finally:
                plots[_name] += time.process_time() - p0

        setattr(model_report, name, timed_plot)
    t = time.process_time()
    model_report.format_summary(mm)
    with tempfile.TemporaryDirectory() as tmp:
        model_report.write_report(mm, f"{tmp}/out", plots=True)
    report = time.process_time() - t
    spent["search (certificates apart)"] = sum(per_layer.values()) - sum(certs)
    spent["certificates"] = sum(certs)
    spent["report: plots"] = sum(plots.values())
    spent["report: table and files"] = report - sum(plots.values())
    spent["total"] = sum(spent.values())
    for k, v in spent.items():
        print(f"{k:30s} {v:7.2f} s of CPU")
    print("per layer (search with its certificate): " + ", ".join(f"{k} {v:.2f}" for k, v in per_layer.items()))
    print(f"model EDP {mm.edp_total:.6e}")
    with open(out_path, "w") as f:
        json.dump({"phases": spent, "layers": per_layer, "edp": mm.edp_total,
                   "values": {l.name: l.cost.edp for l in mm.layers if l.ok}}, f, indent=1)


if __name__ == "__main__":
    if sys.argv[1] == "--phases":
        phases(sys.argv[2])
    else:
        main(sys.argv[1])
