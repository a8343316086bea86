"""How close the exact search's node bound is to a good mapping, level by level.

For every layer of a model on a preset: the heuristic's best mapping (EDP), then the node bound
(``search.bounds.BoundContext.lower_bound``, with the mapping's spatial unrolling known, as the exact search
fixes it) at the root and with the levels from the innermost up to each level fixed as the mapping has them,
each as a fraction of the mapping's energy and latency. A fraction well below 1 at a level says what the bound
misses while that level and the ones above it are open; the mapping's latency parts say what the model charges.

    python benchmarks/bound_by_level.py --arch eyeriss_like --model resnet18 --time-limit 4
"""

from __future__ import annotations

import argparse
import math


def main() -> None:
    from accelmap.arch.accelerator import adopt_precision
    from accelmap.arch.presets import get_accelerator
    from accelmap.cost.model import evaluate
    from accelmap.search.bounds import BoundContext
    from accelmap.search.heuristic import search_heuristic
    from accelmap.search.spatial import unrolling_of
    from accelmap.workload.models import load_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="eyeriss_like")
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--time-limit", type=float, default=4.0, help="heuristic seconds per layer")
    ap.add_argument("--layers", nargs="+", help="only these layers")
    a = ap.parse_args()
    arch = get_accelerator(a.arch)
    nlev = len(arch.levels)
    names = " ".join(f"{lv.name:>13}" for lv in arch.levels[:0:-1])
    print(f"{'layer':<22} {'latency':>10} {'stall share':>11} {'root e/l':>13} fixed from the innermost up to: {names}")
    for layer in load_model(a.model).layers:
        if a.layers and layer.name not in a.layers:
            continue
        op = adopt_precision(layer.operator, arch)
        found, _ = search_heuristic(op, arch, "edp", time_limit=a.time_limit)
        if not found:
            print(f"{layer.name:<22} no mapping found in {a.time_limit:g} s")
            continue
        m = found[0].mapping
        res = evaluate(op, arch, m)
        ctx = BoundContext(op, arch, m.keep, unrolling_of(arch, m))
        cells = []
        for level in [nlev, *range(nlev - 1, 0, -1)]:
            fixed = tuple(l for l in m.loops if l.level >= level)
            rem = dict(op.sizes)
            for l in fixed:
                rem[l.dim] = math.ceil(rem[l.dim] / l.bound)
            e, lat = ctx.lower_bound(fixed, level, rem)
            cells.append(f"{e / res.energy_total:.3f}/{lat / res.latency:.3f}")
        stall = dict(res.latency_parts).get("single-buffer stalls", 0.0) / res.latency
        print(f"{layer.name:<22} {res.latency:>10,.0f} {stall:>11.2f} {cells[0]:>13} "
              + " ".join(f"{c:>13}" for c in cells[1:]), flush=True)


if __name__ == "__main__":
    main()
