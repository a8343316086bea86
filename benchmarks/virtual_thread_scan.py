"""The latency model against the simulator on VTA configurations with virtual threads (docs/tuning.md).

Per Table 5.1 layer (Rieber's dissertation, the tuning benchmark's templates): valid configurations in a
random order of the space (seeded with the layer's id) up to N, the model's and the simulator's cycles on each,
and over the configurations with a virtual thread (the double-buffered ones) how many differ and the largest
and mean |model / simulator - 1|; single-threaded configurations are counted apart (they agree exactly).

    python benchmarks/virtual_thread_scan.py --layers 3,5,8 --n 150 --out vt_scan.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from tuning import table_layer  # noqa: E402  (the benchmark's Table 5.1 layers)

from accelmap.arch.presets import get_accelerator  # noqa: E402
from accelmap.tune.measure import measure_one  # noqa: E402
from accelmap.tune.template import ScheduleTemplate  # noqa: E402


def scan_layer(lid: int, n: int) -> dict:
    arch = get_accelerator("vta_like")
    t0 = time.process_time()
    tpl = ScheduleTemplate(table_layer(lid, arch), arch)
    points = [tuple(int(v) for v in p) for p in tpl.space.all_points()]
    order = np.random.default_rng(lid).permutation(len(points)) if n else np.arange(len(points))
    rows = []
    for i in order:
        p = points[i]
        if not tpl.build(p).valid:
            continue
        model = measure_one(tpl, "model", p)
        if not model.valid:
            continue
        values = tpl.space.values(p)
        threaded = any(int(v) > 1 for k, v in values.items() if k.endswith("nthread"))
        sim = measure_one(tpl, "sim", p).cost
        rows.append((model.cost / sim - 1, threaded, model.cost, sim, tpl.describe(p)))
        if n and len(rows) >= n:
            break
    th = [r for r in rows if r[1]]
    single = [r for r in rows if not r[1]]
    return {"space": len(points), "sampled": len(rows), "threaded": len(th),
            "threaded_differ": sum(abs(r[0]) > 1e-9 for r in th),
            "threaded_max_abs": max((abs(r[0]) for r in th), default=0.0),
            "threaded_mean_abs": float(np.mean([abs(r[0]) for r in th])) if th else 0.0,
            "single_differ": sum(abs(r[0]) > 1e-9 for r in single),
            "worst": [{"rel_dev": r[0], "model": r[2], "sim": r[3], "config": r[4]}
                      for r in sorted(rows, key=lambda r: -abs(r[0]))[:5]],
            "cpu_s": time.process_time() - t0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", default="3,5,8,17,42,48,53,59,76,78,92,106,107")
    ap.add_argument("--n", type=int, default=60, help="valid configurations per layer (0: all)")
    ap.add_argument("--out", help="JSON results file")
    args = ap.parse_args()
    out = {}
    for lid in (int(x) for x in args.layers.split(",")):
        out[lid] = r = scan_layer(lid, args.n)
        print(f"{lid}: {r['sampled']} valid ({r['threaded']} threaded): {r['threaded_differ']} threaded differ, "
              f"max {r['threaded_max_abs']:.2%}, mean {r['threaded_mean_abs']:.3%}; {r['single_differ']} "
              f"single-threaded differ; {r['cpu_s']:.0f} CPU s", flush=True)
        if args.out:
            Path(args.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
