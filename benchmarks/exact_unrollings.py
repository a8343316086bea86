"""Where the exact search's time goes, unrolling by unrolling, on full-size layers.

For each preset and layer: how many spatial unrollings the exact search enumerates, how many rules S1 (bound),
S4 (mirror) and S5 (equal fan-out products) leave to search, the root bound of each one left (rule B8+B9, the
least over bypass choices) against the best found, and then each unrolling searched in the exact search's order
with its own CPU budget: nodes, CPU seconds, whether its subtree closed, and when the final incumbent was found.
Times are CPU seconds of this process (the machine is shared; wall clock would count other jobs).

    python benchmarks/exact_unrollings.py [--archs eyeriss_like ...] [--layers conv1 ...]
        [--per-unrolling 2] [--budget 20] [--out FILE]

Prints one summary row per (preset, layer) and writes every unrolling's row to
benchmarks/results/exact_unrollings.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from pathlib import Path

ARCHS = ("eyeriss_like", "simba_like", "edge_tpu_like", "ascend_like", "tpu_like")
LAYERS = ("conv1", "layer1.0.conv1", "layer2.0.downsample", "layer4.0.conv1")
RESULTS = Path(__file__).resolve().parent / "results" / "exact_unrollings.json"


def root_bound(op, arch, keeps, spatial, objective, best):
    """Rule B8+B9's root bound of one unrolling: the least over the bypass choices (those S1 does not cut)."""
    from accelmap.search.bounds import BoundContext
    from accelmap.search.objective import scalar

    values = []
    for keep in keeps:
        ctx = BoundContext(op, arch, keep, spatial)
        e, lat = ctx.lower_bound((), len(arch.levels), dict(op.sizes))
        values.append(scalar(objective, e, lat))
    return min(values) if values else float("inf")


def diagnose(arch_name: str, layer_name: str, per_unrolling: float, budget: float, objective: str = "edp") -> dict:
    from accelmap.arch.accelerator import adopt_precision
    from accelmap.arch.presets import get_accelerator
    from accelmap.search.bounds import chain_options
    from accelmap.search.exact import ranked_unrollings
    from accelmap.search.heuristic import search_heuristic
    from accelmap.search.objective import collector, scalar
    from accelmap.search.optimal import search_optimal
    from accelmap.search.space import Constraints, keep_options
    from accelmap.workload.models import load_model

    arch = get_accelerator(arch_name)
    layer = next(l for l in load_model("resnet18").layers if l.name == layer_name)
    op = adopt_precision(layer.operator, arch)
    cons = Constraints()
    keeps = keep_options(op, arch, cons)
    chains = chain_options(op, keeps)
    best = collector(objective, 1)
    c0 = time.process_time()
    # (the heuristic's run of a 10 s exact search; it was 2.5 s, a quarter of the limit, before the exact search gave it all)
    found, _ = search_heuristic(op, arch, objective, constraints=cons, time_limit=10)
    for f in found:
        best.offer(f.result, f.mapping)
    heuristic_cpu = time.process_time() - c0
    heuristic_value = best.results()[0].value if best.results() else None
    c0 = time.process_time()
    u = ranked_unrollings(op, arch, cons, objective, chains)
    rank_cpu = time.process_time() - c0
    s1 = scalar(objective, u.energy, u.latency)
    below = [int(r) for r in u.order if heuristic_value is None or s1[r] < heuristic_value]
    dividing_below = [r for r in below if u.divides[r]]
    classes_below = {int(u.cls[r]) for r in dividing_below}
    mirror_pairs = {frozenset((int(u.cls[r]), int(u.mirror_cls[r]))) for r in dividing_below}
    # The search, as the exact search runs it, with a CPU budget per unrolling and per layer.
    rows = []
    done: set[int] = set()
    t_start = time.process_time()
    final_found_at = 0.0
    for r in dividing_below:
        if heuristic_value is not None and best.prunes(float(u.energy[r]), float(u.latency[r])):
            break
        if int(u.cls[r]) in done or int(u.mirror_cls[r]) in done:
            continue
        spent = time.process_time() - t_start
        if spent > budget:
            break
        assignment = u.space.assignment(r)
        spatial = {axis: dict(dims) for (_, axis), dims in assignment.items()}
        fixed = dataclasses.replace(cons, spatial=spatial)
        c0 = time.process_time()
        root = root_bound(op, arch, keeps, spatial, objective, best)
        root_cpu = time.process_time() - c0
        before = best.results()[0].value if best.results() else None
        c0 = time.process_time()
        res, st = search_optimal(op, arch, objective, constraints=fixed, time_limit=per_unrolling,
                                 incumbents=tuple((f.result, f.mapping) for f in best.results()))
        cpu = time.process_time() - c0
        for f in res:
            best.offer(f.result, f.mapping)
        after = best.results()[0].value if best.results() else None
        if after is not None and (before is None or after < before):
            final_found_at = time.process_time() - t_start
        closed = not st.extra.get("timed_out")
        if closed:
            done.add(int(u.cls[r]))
        rows.append({"row": r, "unrolling": {k: v for k, v in spatial.items() if v}, "pes": int(u.space.pes[r]),
                     "s1_bound": float(s1[r]), "root_bound": root, "root_cpu": root_cpu, "nodes": st.nodes,
                     "evaluated": st.evaluated, "cpu": cpu, "closed": closed, "best_before": before,
                     "best_after": after, "keeps_cut": st.extra.get("keeps_cut", 0)})
    final = best.results()[0].value if best.results() else None
    searched = [x for x in rows]
    return {
        "arch": arch_name, "layer": layer_name, "objective": objective,
        "unrollings": int(len(u.order)), "dividing": int(u.divides.sum()), "classes": int(u.classes),
        "dividing_classes": len({int(u.cls[r]) for r in range(len(u.order)) if u.divides[r]}),
        "s1_below_heuristic": len(dividing_below), "classes_below_heuristic": len(classes_below),
        "mirror_pairs_below_heuristic": len(mirror_pairs), "rank_cpu": rank_cpu,
        "heuristic_cpu": heuristic_cpu, "heuristic_value": heuristic_value, "final_value": final,
        "improved_by": (heuristic_value / final - 1) if heuristic_value and final else None,
        "final_found_at_cpu": final_found_at, "searched": len(searched),
        "closed": sum(x["closed"] for x in searched),
        "root_below_final": sum(1 for x in searched if final is not None and x["root_bound"] < final),
        "median_root_gap": statistics.median([final / x["root_bound"] - 1 for x in searched])
        if searched and final else None,
        "median_s1_gap": statistics.median([final / x["s1_bound"] - 1 for x in searched]) if searched and final else None,
        "median_nodes": statistics.median([x["nodes"] for x in searched]) if searched else None,
        "median_cpu": statistics.median([x["cpu"] for x in searched]) if searched else None,
        "median_root_cpu": statistics.median([x["root_cpu"] for x in searched]) if searched else None,
        "search_cpu": time.process_time() - t_start, "rows": rows,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--archs", nargs="+", default=list(ARCHS))
    ap.add_argument("--layers", nargs="+", default=list(LAYERS))
    ap.add_argument("--per-unrolling", type=float, default=2.0, help="wall-clock limit of one unrolling's subtree")
    ap.add_argument("--budget", type=float, default=20.0, help="CPU seconds of unrolling subtrees per layer")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    out = []
    head = (f"{'arch':14} {'layer':20} {'unrl':>6} {'div':>6} {'cls':>5} {'<heur':>6} {'cls<h':>6} {'srch':>5} "
            f"{'clsd':>5} {'med nodes':>9} {'med cpu':>8} {'root<fin':>8} {'root gap':>8} {'S1 gap':>7} "
            f"{'heur/fin':>8} {'found@':>7}")
    print(head, flush=True)
    for arch in args.archs:
        for layer in args.layers:
            d = diagnose(arch, layer, args.per_unrolling, args.budget)
            out.append(d)

            def f(v, fmt):
                return format(v, fmt) if v is not None else "-"
            print(f"{arch:14} {layer:20} {d['unrollings']:>6} {d['dividing']:>6} {d['dividing_classes']:>5} "
                  f"{d['s1_below_heuristic']:>6} {d['classes_below_heuristic']:>6} {d['searched']:>5} {d['closed']:>5} "
                  f"{f(d['median_nodes'], '>9.0f')} {f(d['median_cpu'], '>8.2f')} {d['root_below_final']:>8} "
                  f"{f(d['median_root_gap'], '>8.1%')} {f(d['median_s1_gap'], '>7.1%')} "
                  f"{f(d['improved_by'], '>8.1%')} {d['final_found_at_cpu']:>7.1f}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
