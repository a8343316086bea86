"""CPU seconds of the certificate (``spatial.certified_lower_bound``: rule S1 over the S2 relaxation), which
``map_operator`` computes after every search, outside the search's time limit, for every distinct layer of
ResNet-18, ResNet-50, MobileNetV2, VGG-16 and the BERT-base layer.

    python benchmarks/certificate_seconds.py PRESET [PRESET ...]

Prints per preset the median and max seconds, the slowest layer and how many take over 1 s; writes
benchmarks/results/certificate_cpu_seconds.json (per preset, [model, layer, seconds] rows).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

MODELS = ("resnet18", "resnet50", "mobilenetv2", "vgg16", "bert_base_layer")
RESULTS = Path(__file__).resolve().parent / "results" / "certificate_cpu_seconds.json"


def main() -> None:
    from accelmap.arch.accelerator import adopt_precision
    from accelmap.arch.presets import get_accelerator
    from accelmap.search.bounds import chain_options
    from accelmap.search.space import Constraints, keep_options
    from accelmap.search.spatial import certified_lower_bound
    from accelmap.workload.models import load_model

    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    out: dict[str, list] = {}
    for name in sys.argv[1:]:
        arch = get_accelerator(name)
        rows = []
        for model in MODELS:
            for lay in load_model(model).layers:
                op = adopt_precision(lay.operator, arch)
                cons = Constraints()
                t = time.process_time()
                certified_lower_bound(op, arch, cons, chain_options(op, keep_options(op, arch, cons)), "edp")
                rows.append((model, lay.name, time.process_time() - t))
        worst = max(rows, key=lambda r: r[2])
        print(f"{name}: {len(rows)} layers, median {statistics.median(r[2] for r in rows):.2f} s, max {worst[2]:.2f} s "
              f"({worst[0]} {worst[1]}), {sum(1 for r in rows if r[2] > 1)} over 1 s", flush=True)
        out[name] = rows
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
