"""The GPT-3 layer's layers alone, simulated with one off-chip port above double-buffered local buffers.

Above a level that refills while computing, the latency model's overlap terms schedule a window's loads on one port
(``shared_port``) but not the same double buffer's drains beside them, so the model can be below the simulator where
both that level's inputs and its output cross the port (docs/cost-model.md, "One port above double buffers"). This
checks the GPT-3 layer's own mappings: ``fusion_accelforge.py``'s machine with its local buffers double-buffered where
two tiles fit (``--double-buffered``), the layers mapped on two ports as that benchmark maps them, then each layer's
mapping simulated on two ports and on one, with the model's latency on one port next to it.

    python benchmarks/fusion_accelforge_one_port_sim.py [--time-limit 5] [--mapped-on-one-port] [--out FILE]

``--mapped-on-one-port``: the layers mapped on the one-port machine itself (as ``fusion_accelforge.py
--double-buffered`` maps them, with the same cache), each row saying what crosses the port into or out of a double
buffer (``shared_port_crossings``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fusion_accelforge as fa  # noqa: E402

from accelmap.arch import accelerator_from_dict  # noqa: E402
from accelmap.cost.latency import shared_port_crossings  # noqa: E402
from accelmap.cost.model import evaluate  # noqa: E402
from accelmap.search.cache import default_cache_path  # noqa: E402
from accelmap.search.heuristic_config import DEFAULT_HEURISTIC  # noqa: E402
from accelmap.search.model_mapper import map_model  # noqa: E402
from accelmap.sim.simulate import simulate  # noqa: E402
from accelmap.workload.models import load_model  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--time-limit", type=float, default=5.0, help="CPU seconds per layer, as the benchmark maps them")
    ap.add_argument("--mapped-on-one-port", action="store_true", help="map the layers on the one-port machine")
    ap.add_argument("--out", default=str(fa.RESULTS / "fusion_accelforge_one_port_sim.json"))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model_file = Path(tmp) / "gpt3_6.7b_layer.onnx"
        fa.gpt3_layer_onnx(model_file)
        arch = accelerator_from_dict(yaml.safe_load(fa.machine(shared_port=False, double_buffered=True)))
        one = replace(arch, levels=(replace(arch.levels[0], shared_port=True),) + arch.levels[1:])
        mm = map_model(load_model(model_file, bits={"I": 8, "W": 8, "O": 8}), one if a.mapped_on_one_port else arch,
                       "edp",
                       time_limit_per_layer=a.time_limit, jobs=1, cache_path=Path(default_cache_path()), progress=False,
                       heuristic_config=replace(DEFAULT_HEURISTIC, cpu_clock=True, **fa.GPT3_KNOBS))
    rows = []
    print(f"{'layer':<20} {'count':>5} {'two ports: sim':>15} {'one port: sim':>14} {'one port: model':>16}  "
          "crossing the port into or out of a double buffer")
    for lm in mm.layers:
        op = lm.layer.operator
        two = simulate(op, arch, lm.mapping, functional=False).cycles
        sim = simulate(op, one, lm.mapping, functional=False).cycles
        model = evaluate(op, one, lm.mapping, check=False).latency
        rows.append({"layer": lm.layer.name, "count": lm.count, "two_ports_sim": two, "one_port_sim": sim,
                     "one_port_model": model, "crossing": sorted(shared_port_crossings(op, one, lm.mapping))})
        print(f"{lm.layer.name:<20} {lm.count:>5} {two:>15,.0f} {sim:>14,.0f} {model:>16,.0f}  "
              f"{'+'.join(rows[-1]['crossing']) or '-'}")
    totals = {k: sum(r[k] * r["count"] for r in rows) for k in ("two_ports_sim", "one_port_sim", "one_port_model")}
    print("all occurrences: " + ", ".join(f"{k} {v:,.0f}" for k, v in totals.items()))
    Path(a.out).write_text(json.dumps({"layers": rows, "totals": totals}, indent=2) + "\n")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
