"""Imperfect factorization (Ruby-style, the last tile partial) in the exact search: what it buys on real layers.

Ruby (Horeni et al., ISPASS 2022) reports that imperfect factorization of the spatial loops (Ruby-S) lowers
the EDP of ResNet-50 on an Eyeriss-like accelerator by 20% on average (up to 50%) and of DeepBench layers by
10% on average. Here every distinct ResNet-50 layer and a DeepBench subset (every ``--deepbench-step``-th
inference-server convolution of the bundled copy) are mapped for EDP on each accelerator by the exact search
twice, over perfect factorizations and over imperfect ones, under the same time limit. The imperfect side is
Ruby-S (``imperfect="spatial"``: spatial loops imperfect, temporal ones dividing what is left), the variant
Ruby's averages are for; ``ACCELMAP_IMPERFECT_MODE=all`` runs the full Ruby space instead (which reaches no
leaf on full-size layers within seconds). Both start from
the same incumbent (the heuristic's result, found once per layer with a quarter of the limit, which may
itself use a padded unrolling), so the difference is what each exact search adds in the rest of the time.

Per layer: the EDP of each side, the ratio imperfect / perfect (below 1: imperfect tiles helped), whether the
best mapping has a partial tile, and whether each side was proven optimal over its own space (the search
closed it, or the certificate's lower bound, which holds for every mapping, meets it). Geometric mean of the
ratio per accelerator and model, and MAC-weighted whole-model EDP sums.

    python benchmarks/imperfect_factorization.py [--time-limit 10] [--jobs 2] [--archs eyeriss_like tpu_like]
        [--deepbench-step 13] [--out benchmarks/results/imperfect_factorization.json]

Times are wall clock: on a loaded machine a side gets less CPU within the same limit.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "imperfect_factorization.json"
INCUMBENT_SHARE = 0.25
IMPERFECT = os.environ.get("ACCELMAP_IMPERFECT_MODE", "spatial")    # "spatial" (Ruby-S) or "all" (Ruby)


def _has_partial_tile(op, mapping) -> bool:
    return any(mapping.dim_product(d) != s for d, s in op.dims)


def run_layer(task: tuple[str, str, str, int, float, int]) -> dict:
    """Both sides on one layer: the heuristic's incumbent once, then the exact search perfect and imperfect."""
    from accelmap.arch.accelerator import adopt_precision
    from accelmap.arch.presets import get_accelerator
    from accelmap.search.bounds import chain_options
    from accelmap.search.exact import search_exact
    from accelmap.search.heuristic import search_heuristic
    from accelmap.search.space import Constraints, keep_options
    from accelmap.search.spatial import certified_lower_bound
    from accelmap.workload.models import load_model

    model, layer_name, arch_name, count, limit, seed = task
    arch = get_accelerator(arch_name)
    layer = next(l for l in load_model(model).layers if l.name == layer_name)
    op = adopt_precision(layer.operator, arch)
    cons = Constraints()
    lower = certified_lower_bound(op, arch, cons, chain_options(op, keep_options(op, arch, cons)), "edp")[0]
    t0 = time.perf_counter()
    found, _ = search_heuristic(op, arch, "edp", constraints=cons, time_limit=INCUMBENT_SHARE * limit, seed=seed)
    incumbent = tuple((f.result, f.mapping) for f in found)
    out = {"model": model, "layer": layer_name, "arch": arch_name, "count": count, "macs": op.macs,
           "incumbent_seconds": time.perf_counter() - t0, "lower_bound": lower,
           "incumbent_edp": found[0].value if found else None,
           "incumbent_partial": bool(found) and _has_partial_tile(op, found[0].mapping)}
    for side, imperfect in (("perfect", False), ("imperfect", IMPERFECT)):
        t1 = time.perf_counter()
        res, stats = search_exact(op, arch, "edp", constraints=cons, time_limit=(1 - INCUMBENT_SHARE) * limit,
                                  incumbents=incumbent, heuristic=False, imperfect=imperfect)
        best = res[0] if res else None
        out[side] = {"edp": best.value if best else None,
                     "energy_pj": best.result.energy_total if best else None,
                     "latency_cycles": best.result.latency if best else None,
                     "utilization": best.result.utilization if best else None,
                     "partial_tile": bool(best) and _has_partial_tile(op, best.mapping),
                     "mapping": repr(best.mapping) if best else None,
                     "proven": bool(stats.extra.get("proven")) or bool(best and best.value <= lower * (1 + 1e-9)),
                     "timed_out": bool(stats.extra.get("timed_out")), "seconds": time.perf_counter() - t1,
                     "nodes": stats.nodes, "evaluated": stats.evaluated,
                     "unrollings_searched": stats.extra.get("spatial_searched"),
                     "unrollings_cut": stats.extra.get("spatial_cut")}
    p, q = out["perfect"]["edp"], out["imperfect"]["edp"]
    out["ratio"] = q / p if p and q else None
    return out


def geomean(xs: list[float]) -> float | None:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--time-limit", type=float, default=10.0, help="seconds per layer and side")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--archs", nargs="+", default=["eyeriss_like", "tpu_like"])
    ap.add_argument("--deepbench-step", type=int, default=13, help="every N-th DeepBench layer")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args()

    from accelmap.workload.models import load_model

    layers = [("resnet50", l.name, l.count) for l in load_model("resnet50").layers]
    layers += [("deepbench_conv", l.name, l.count) for l in load_model("deepbench_conv").layers[::args.deepbench_step]]
    tasks = [(m, name, a, c, args.time_limit, args.seed) for a in args.archs for m, name, c in layers]
    t0 = time.perf_counter()
    rows = []
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for row in pool.map(run_layer, tasks):
            rows.append(row)
            pf, im = row["perfect"], row["imperfect"]
            print(f"{row['arch']:13s} {row['model']:15s} {row['layer']:22s} perfect {pf['edp']:.4g}"
                  f"{' P' if pf['proven'] else '  '}  imperfect {im['edp']:.4g}{' P' if im['proven'] else '  '}"
                  f"  ratio {row['ratio']:.4f}{'  partial' if im['partial_tile'] else ''}", flush=True)
    wall = time.perf_counter() - t0
    summary = []
    print(f"\n{'accelerator':13s} {'model':15s} {'layers':>6s} {'geomean ratio':>13s} {'best':>7s} "
          f"{'model EDP ratio':>15s} {'partial':>7s} {'proven perf/imp':>15s}")
    for a in args.archs:
        for m in ("resnet50", "deepbench_conv"):
            sel = [r for r in rows if r["arch"] == a and r["model"] == m and r["ratio"] is not None]
            if not sel:
                continue
            ratios = [r["ratio"] for r in sel]
            # Whole model: layers run one after another, so energy and latency add (times each layer's count).
            e = {s: sum(r["count"] * r[s]["energy_pj"] for r in sel) for s in ("perfect", "imperfect")}
            lat = {s: sum(r["count"] * r[s]["latency_cycles"] for r in sel) for s in ("perfect", "imperfect")}
            model_ratio = (e["imperfect"] * lat["imperfect"]) / (e["perfect"] * lat["perfect"])
            s = {"arch": a, "model": m, "layers": len(sel), "geomean_ratio": geomean(ratios), "best_ratio": min(ratios),
                 "model_edp_ratio": model_ratio,
                 "imperfect_partial": sum(r["imperfect"]["partial_tile"] for r in sel),
                 "proven_perfect": sum(r["perfect"]["proven"] for r in sel),
                 "proven_imperfect": sum(r["imperfect"]["proven"] for r in sel),
                 "timed_out_perfect": sum(r["perfect"]["timed_out"] for r in sel),
                 "timed_out_imperfect": sum(r["imperfect"]["timed_out"] for r in sel)}
            summary.append(s)
            print(f"{a:13s} {m:15s} {s['layers']:6d} {s['geomean_ratio']:13.4f} {s['best_ratio']:7.4f} "
                  f"{model_ratio:15.4f} {s['imperfect_partial']:7d} "
                  f"{s['proven_perfect']:>7d}/{s['proven_imperfect']:<7d}")
    load = os.getloadavg()[0]
    print(f"\n{len(rows)} layer runs in {wall:.0f} s wall, {args.jobs} workers, time limit {args.time_limit:g} s per "
          f"side (a quarter of it for the shared heuristic incumbent); load average at the end {load:.1f}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"command": "python benchmarks/imperfect_factorization.py " + " ".join(
        f"--{k.replace('_', '-')} {' '.join(v) if isinstance(v, list) else v}" for k, v in vars(args).items()
        if k != "out"), "imperfect_mode": IMPERFECT, "time_limit": args.time_limit, "jobs": args.jobs, "wall_seconds": wall,
        "load_average_end": load, "summary": summary, "layers": rows}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
