"""The heuristic mapper's knobs against its defaults, whole models layer by layer: what ``accelmap map MODEL --arch
ARCH --no-cache`` finds (strategy auto, EDP, one process) under each knob setting, back to back per (model, preset),
with every limit counted on this process's CPU clock so that the mappings do not depend on the machine's load.

    python benchmarks/heuristic_knobs.py --models resnet18 bert_base_layer --archs eyeriss_like tpu_like \\
        --variants default bypass_choices=8 bypass_choices=64 --out OUT.json

A variant is ``default`` or comma-separated ``HeuristicConfig`` fields (``bypass_choices=8,tied_unrollings=3``).
Prints one row per (model, preset, variant): whole-model energy, latency and EDP (the sums over every layer
occurrence), the EDP relative to the first variant, the CPU seconds of the whole mapping (loading the model
included) and of the layers the heuristic searched (the exact search's layers do not read the knobs), and the layers whose EDP moved.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import replace

from accelmap.arch.presets import get_accelerator
from accelmap.search.heuristic_config import DEFAULT_HEURISTIC
from accelmap.search.model_mapper import map_model
from accelmap.workload.models import load_model


def parse_variant(text: str) -> dict:
    if text == "default":
        return {}
    return {k: int(v) for k, v in (x.split("=") for x in text.split(",") if x)}


def run(model: str, arch_name: str, knobs: dict, time_limit: float | None) -> dict:
    arch = get_accelerator(arch_name)
    config = replace(DEFAULT_HEURISTIC, cpu_clock=True, **knobs)
    layer_cpu: dict[str, float] = {}
    last = [time.process_time()]

    def on_layer(lm) -> None:       # jobs=1: called in this process right after each layer's search
        now = time.process_time()
        layer_cpu[lm.name], last[0] = now - last[0], now

    c0 = last[0]
    mm = map_model(load_model(model), arch, "edp", time_limit_per_layer=time_limit, jobs=1, cache_path=None,
                   progress=False, heuristic_config=config, on_layer=on_layer)
    cpu = time.process_time() - c0
    layers = {lm.name: {"strategy": lm.strategy, "edp": lm.result.edp if lm.result else None, "count": lm.count,
                        "cpu_seconds": layer_cpu.get(lm.name), "timed_out": lm.timed_out} for lm in mm.layers}
    return {"model": model, "accelerator": arch_name, "knobs": knobs, "cpu_seconds": cpu,
            "heuristic_cpu_seconds": sum(v["cpu_seconds"] or 0.0 for v in layers.values()
                                         if v["strategy"] == "heuristic"),
            "energy_pj": mm.energy_total, "latency_cycles": mm.latency_total, "edp": mm.edp_total,
            "load_average": os.getloadavg()[0], "layers": layers}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["resnet18", "bert_base_layer"])
    ap.add_argument("--archs", nargs="+", default=["eyeriss_like"])
    ap.add_argument("--variants", nargs="+", default=["default", "bypass_choices=8"])
    ap.add_argument("--time-limit", type=float, default=None,
                    help="CPU seconds per layer (default: the mapper's per-strategy defaults)")
    ap.add_argument("--both-orders", action="store_true",
                    help="run the variants again in reverse order after the first pass (the first run of a process "
                         "pays one-time costs: imports, caches)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    rows = []
    print(f"{'model':<16} {'accelerator':<14} {'variant':<32} {'EDP':>11} {'vs first':>8} {'cpu s':>7} "
          f"{'heur s':>7} {'load':>5} {'timed out':>9} layers moved")
    for model in a.models:
        for arch_name in a.archs:
            first = None
            order = a.variants + (a.variants[::-1] if a.both_orders else [])
            for variant in order:
                row = run(model, arch_name, parse_variant(variant), a.time_limit)
                row["variant"] = variant
                rows.append(row)
                first = first or row
                rel = row["edp"] / first["edp"] - 1
                moved = [f"{n} {v['edp'] / first['layers'][n]['edp'] - 1:+.1%}" for n, v in row["layers"].items()
                         if v["edp"] and first["layers"][n]["edp"] and v["edp"] != first["layers"][n]["edp"]]
                timed = sum(v["timed_out"] for v in row["layers"].values())
                print(f"{model:<16} {arch_name:<14} {variant:<32} {row['edp']:>11.4e} {rel:>+8.2%} "
                      f"{row['cpu_seconds']:>7.1f} {row['heuristic_cpu_seconds']:>7.1f} {row['load_average']:>5.1f} "
                      f"{timed:>9} {', '.join(moved)}", flush=True)
                with open(a.out, "w") as f:
                    json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
