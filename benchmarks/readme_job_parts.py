"""CPU seconds of the README main job's searches, by part, and what they found.

`accelmap map resnet18 --arch eyeriss_like` runs ``map_operator(op, eyeriss_like, "edp")`` on each of the 12
distinct layers in worker processes; this runs the same calls one after another in this process, sums each part's
``time.process_time`` and writes every layer's best value, lower bound, mapping and rows evaluated to a JSON file.
Two versions of the code (``PYTHONPATH=...``) run back to back compare by CPU, and by ``cmp`` of their JSON files:
a speed-up that changes nothing gives identical files.

    PYTHONPATH=src python benchmarks/readme_job_parts.py out.json
"""

from __future__ import annotations

import json
import sys
import time

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


if __name__ == "__main__":
    main(sys.argv[1])
