"""What the outermost level's loops trade on one layer: energy against the prologue's latency.

For every chosen layer of a model on a preset: the heuristic's best mapping (EDP), its energy and latency, the node bound
(``search.bounds.BoundContext.lower_bound`` with the mapping's spatial unrolling) with the levels from the innermost up
to each level fixed as the mapping has them, and the same mapping with its outermost level's loops moved, outermost
first, into the level below (so the level below holds a larger tile, read once): energy, latency and EDP of each as
fractions of the best's, and the model's prologue-and-epilogue cycles. Where moving a loop down lowers the energy and
raises the latency, the node bound, which takes the least energy and the least latency of the open levels apart, sees
the two optima of two different mappings while those levels are open.

    python benchmarks/outer_tile_tradeoff.py --arch tpu_like --layers layer2.0.conv1 layer3.0.downsample
    python benchmarks/outer_tile_tradeoff.py --arch tpu_like --layers layer2.0.conv1 --spatial X:C32,Y:K31
"""
from __future__ import annotations

import argparse
import dataclasses
import math


def main() -> None:
    from accelmap.arch.accelerator import adopt_precision
    from accelmap.arch.presets import get_accelerator
    from accelmap.cost.model import evaluate
    from accelmap.errors import MappingError
    from accelmap.search.bounds import BoundContext
    from accelmap.search.heuristic import search_heuristic
    from accelmap.search.space import Constraints
    from accelmap.search.spatial import unrolling_of
    from accelmap.workload.models import load_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="tpu_like")
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--time-limit", type=float, default=3.0, help="heuristic seconds per layer")
    ap.add_argument("--layers", nargs="+", help="only these layers")
    ap.add_argument("--spatial", help="fix the heuristic's spatial unrolling, e.g. X:C32,Y:K31 (padded ones too)")
    a = ap.parse_args()
    arch = get_accelerator(a.arch)
    spatial: dict[str, dict[str, int]] = {}
    for part in (a.spatial or "").split(","):
        if part:
            axis, dim_bound = part.split(":")
            spatial.setdefault(axis, {})[dim_bound[0]] = int(dim_bound[1:])
    cons = Constraints(spatial=spatial) if spatial else None
    nlev = len(arch.levels)
    for layer in load_model(a.model).layers:
        if a.layers and layer.name not in a.layers:
            continue
        op = adopt_precision(layer.operator, arch)
        found, _ = search_heuristic(op, arch, "edp", time_limit=a.time_limit, constraints=cons)
        if not found:
            print(f"{layer.name}: no mapping found in {a.time_limit:g} s")
            continue
        m = found[0].mapping
        best = evaluate(op, arch, m)
        parts = dict(best.latency_parts)
        print(f"{layer.name} {op.sizes}")
        print(f"  best: energy {best.energy_total:.5g} pJ, latency {best.latency:,.0f} cycles, "
              f"EDP {best.energy_total * best.latency:.5g}; latency parts "
              + ", ".join(f"{k} {v:,.0f}" for k, v in parts.items() if v))
        print("  loops (level, dim, bound, spatial): "
              + " ".join(f"{l.level}:{l.dim}{l.bound}{'s' if l.spatial else ''}" for l in m.loops))
        for objective in (None, "edp"):
            # None: an energy bound and a latency bound each valid alone; "edp": the pair the exact search reads
            # (rule B22: each case's energy and latency kept together)
            ctx = BoundContext(op, arch, m.keep, unrolling_of(arch, m), objective)
            for level in [nlev, *range(nlev - 1, 0, -1)]:
                fixed = tuple(l for l in m.loops if l.level >= level)
                rem = dict(op.sizes)
                for l in fixed:
                    rem[l.dim] = math.ceil(rem[l.dim] / l.bound)
                e, lat = ctx.lower_bound(fixed, level, rem)
                what = ("nothing" if level == nlev
                        else "+".join(arch.levels[i].name for i in range(nlev - 1, level - 1, -1)))
                print(f"  node bound ({objective or 'apart'}), {what} fixed: energy {e / best.energy_total:.3f}, "
                      f"latency {lat / best.latency:.3f} ({lat:,.0f} cycles), "
                      f"EDP {e * lat / (best.energy_total * best.latency):.3f}")
        outer = [l for l in m.loops if l.level == 0]
        for k in range(1, len(outer) + 1):
            moved = outer[:k]
            loops = [dataclasses.replace(l, level=1) if any(l is x for x in moved) else l for l in m.loops]
            loops = [l for l in loops if l.level == 0] + [l for l in loops if l.level != 0]
            left = " ".join(f"{l.dim}{l.bound}" for l in loops if l.level == 0) or "none"
            try:
                r = evaluate(op, arch, dataclasses.replace(m, loops=tuple(loops)))
            except MappingError as err:   # the larger tile overflows the level below
                print(f"  {arch.levels[0].name} loops left {left}: {str(err)[:90]}")
                continue
            print(f"  {arch.levels[0].name} loops left {left}: energy {r.energy_total / best.energy_total:.4f}, "
                  f"latency {r.latency / best.latency:.4f}, EDP "
                  f"{r.energy_total * r.latency / (best.energy_total * best.latency):.4f}, prologue and epilogue "
                  f"{dict(r.latency_parts)['prologue and epilogue']:,.0f} cycles")


if __name__ == "__main__":
    main()
