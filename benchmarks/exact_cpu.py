"""CPU time and nodes of the exact search on a few full-size layers, from the same saved incumbent.

Wall-clock limits make the exact search's numbers depend on the machine's load; this script gives each
layer the heuristic's best once (saved in a pickle, so runs of old and new code start from the same
incumbent), then runs the exact search (``search_exact`` without its own heuristic) and reports CPU seconds
(``time.process_time``), nodes, leaves costed and whether it was proven. With ``--profile`` it writes a
cProfile dump per layer and prints its top functions.

    python benchmarks/exact_cpu.py --arch tpu_like --layers layer2.0.conv1 [--model resnet18]
        [--limit 120] [--incumbents /tmp/incumbents.pkl] [--profile] [--out FILE]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pickle
import pstats
import time
from pathlib import Path


def main() -> None:
    from accelmap.arch.accelerator import adopt_precision
    from accelmap.arch.presets import get_accelerator
    from accelmap.search.exact import search_exact
    from accelmap.search.heuristic import search_heuristic
    from accelmap.workload.models import load_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", required=True)
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--layers", nargs="+", required=True)
    ap.add_argument("--limit", type=float, default=120.0, help="wall-clock limit of the exact search, seconds")
    ap.add_argument("--heuristic-limit", type=float, default=10.0)
    ap.add_argument("--incumbents", type=Path, default=Path("/tmp/accelmap_exact_incumbents.pkl"))
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()

    arch = get_accelerator(args.arch)
    model = load_model(args.model)
    saved = pickle.loads(args.incumbents.read_bytes()) if args.incumbents.exists() else {}
    rows = []
    for layer in model.layers:
        if layer.name not in args.layers:
            continue
        op = adopt_precision(layer.operator, arch)
        key = (args.model, args.arch, layer.name)
        if key not in saved:
            found, _ = search_heuristic(op, arch, "edp", time_limit=args.heuristic_limit)
            saved[key] = [(f.result, f.mapping) for f in found]
            args.incumbents.write_bytes(pickle.dumps(saved))
        prof = cProfile.Profile() if args.profile else None
        c0, w0 = time.process_time(), time.perf_counter()
        if prof:
            prof.enable()
        res, st = search_exact(op, arch, "edp", time_limit=args.limit, heuristic=False,
                               incumbents=tuple(saved[key]))
        if prof:
            prof.disable()
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        row = {"layer": layer.name, "arch": args.arch, "cpu_seconds": round(cpu, 2), "wall_seconds": round(wall, 2),
               "nodes": st.nodes, "pruned": st.pruned, "evaluated": st.evaluated,
               "proven": bool(st.extra.get("proven")), "edp": res[0].result.edp if res else None,
               "incumbent_edp": saved[key][0][0].edp if saved[key] else None,
               "unrollings_searched": st.extra.get("spatial_searched")}
        rows.append(row)
        print(json.dumps(row), flush=True)
        if prof:
            dump = Path(f"/tmp/exact_cpu_{args.arch}_{layer.name}.prof")
            prof.dump_stats(dump)
            pstats.Stats(prof).sort_stats("tottime").print_stats(15)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
