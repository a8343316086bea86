"""The README job's search, layer by layer, in CPU seconds: what `accelmap map resnet18 --arch eyeriss_like
--no-cache` searches for each distinct layer (strategy auto, EDP, the accelerator's precision), with the time limit
counted on the CPU clock and set high enough that no layer reaches it, so the result and its CPU do not depend on the
machine's load (the command's own 60 s wall-clock limit cuts the search on a loaded machine).

    python benchmarks/readme_layers_cpu.py OUT.json [--arch eyeriss_like] [--layers conv1 fc ...]

Prints one line per layer (EDP, CPU seconds, seconds spent probing unrollings) and the total; writes them to OUT.json.
To compare two versions, run it with PYTHONPATH on each version's src/ side by side (the same load for both).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace

from accelmap.arch.accelerator import adopt_precision
from accelmap.arch.presets import get_accelerator
from accelmap.search.heuristic_config import DEFAULT_HEURISTIC
from accelmap.search.mapper import map_operator
from accelmap.workload.models import load_model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--arch", default="eyeriss_like")
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--layers", nargs="*", default=[], help="only these distinct layers (default: all)")
    a = ap.parse_args()
    arch = get_accelerator(a.arch)
    config = replace(DEFAULT_HEURISTIC, cpu_clock=True)
    out = {}
    for layer in load_model(a.model).layers:
        if a.layers and layer.name not in a.layers:
            continue
        op = adopt_precision(layer.operator, arch)
        t = time.process_time()
        r = map_operator(op, arch, "edp", time_limit=120, heuristic_config=config)
        cpu = time.process_time() - t
        extra = r.stats.extra
        out[layer.name] = {"edp": r.best.value if r.best else None, "cpu": cpu, "count": layer.count,
                           "strategy": r.strategy, "timed_out": r.timed_out,
                           "probing": extra.get("seconds_probing"), "probed": extra.get("spatial_probed")}
        edp = f"{r.best.value:.6e}" if r.best else "none"
        print(f"{layer.name:22s} {r.strategy:9s} edp {edp} cpu {cpu:6.2f} probing {extra.get('seconds_probing', 0):.2f} "
              f"probed {extra.get('spatial_probed')}{' TIMED OUT' if r.timed_out else ''}", flush=True)
    print(f"total cpu {sum(v['cpu'] for v in out.values()):.2f}")
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
