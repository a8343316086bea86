"""The exact search (``--strategy optimal``) of chosen layers of a model on a preset, one JSON line per layer as each
finishes: ``mapper_scaling.py --strategy optimal --cpu-clock`` layer by layer, for machines too loaded to wait for a
whole model (what each layer took, whether it was proven, unrollings searched and skipped, nodes).

    python benchmarks/mapper_layers.py --arch eyeriss_like --layers layer1.0.conv1 conv1 fc --time-limit 10 > out.jsonl

Every clock of the search is this process's CPU time (``time.process_time``), as ``--cpu-clock`` does.
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    from accelmap.arch.accelerator import adopt_precision
    from accelmap.arch.presets import get_accelerator
    from accelmap.search.mapper import map_operator
    from accelmap.workload.models import load_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="eyeriss_like")
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--layers", nargs="+", help="these layers, in this order (default: every layer)")
    ap.add_argument("--time-limit", type=float, default=10.0, help="CPU seconds per layer")
    a = ap.parse_args()
    arch = get_accelerator(a.arch)
    layers = {x.name: x for x in load_model(a.model).layers}
    unknown = [n for n in a.layers or [] if n not in layers]
    if unknown:
        raise SystemExit(f"--layers: no layer {', '.join(unknown)} in {a.model}; it has {', '.join(layers)}")
    time.perf_counter = time.process_time       # the search's limits and seconds: CPU time of this process
    for name in a.layers or list(layers):
        op = adopt_precision(layers[name].operator, arch)
        t0 = time.process_time()
        r = map_operator(op, arch, "edp", strategy="optimal", time_limit=a.time_limit)
        ex = r.stats.extra
        print(json.dumps({"layer": name, "proven": r.proven_optimal, "gap": r.gap,
                          "edp": r.results[0].result.edp if r.results else None, "lower_bound": r.lower_bound,
                          "cpu": round(time.process_time() - t0, 2), "searched": ex.get("spatial_searched"),
                          "cut": ex.get("spatial_cut"), "equiv_skipped": ex.get("spatial_equivalent_skipped"),
                          "nodes": r.stats.nodes, "evaluated": r.stats.evaluated}), flush=True)


if __name__ == "__main__":
    main()
