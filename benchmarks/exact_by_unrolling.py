"""Where the exact search's CPU goes on one layer, unrolling by unrolling.

The heuristic's best is the incumbent (as ``--strategy optimal`` takes it); then the unrollings whose S1 bound lies below
it are searched in E1's order, each with the unrolling fixed (``search_optimal``, padded ones over Ruby-S tiles), until
the CPU-second limit: per unrolling its S1 bound over the incumbent, whether it divides, its CPU seconds, nodes, nodes
cut, leaves costed and bypass choices cut at the root. Rules S4/S5/B45's skips are applied to dividing unrollings only
(each padded one is shown), so a padded unrolling's mirror shows what B45 saves.

    python benchmarks/exact_by_unrolling.py --arch tpu_like --layers layer4.0.conv1 layer2.0.conv1 --time-limit 10

Every clock is this process's CPU time (``time.process_time``), as ``mapper_scaling.py --cpu-clock``.
"""

from __future__ import annotations

import argparse
import dataclasses
import time


def main() -> None:
    time.perf_counter = time.process_time
    from accelmap.arch.accelerator import adopt_precision
    from accelmap.arch.presets import get_accelerator
    from accelmap.search.bounds import chain_options
    from accelmap.search.exact import ranked_unrollings
    from accelmap.search.heuristic import search_heuristic
    from accelmap.search.objective import collector
    from accelmap.search.optimal import search_optimal
    from accelmap.search.space import Constraints, keep_options
    from accelmap.workload.models import load_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="tpu_like")
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--layers", nargs="+", required=True)
    ap.add_argument("--time-limit", type=float, default=10.0, help="CPU seconds per layer, the heuristic included")
    a = ap.parse_args()
    arch = get_accelerator(a.arch)
    layers = {x.name: x for x in load_model(a.model).layers}
    unknown = [n for n in a.layers if n not in layers]
    if unknown:
        raise SystemExit(f"--layers: no layer {', '.join(unknown)} in {a.model}; it has {', '.join(layers)}")
    for name in a.layers:
        op = adopt_precision(layers[name].operator, arch)
        t0 = time.process_time()
        found, _ = search_heuristic(op, arch, "edp", time_limit=a.time_limit)
        inc = found[0].result.energy_total * found[0].result.latency
        cons = Constraints()
        ranked = ranked_unrollings(op, arch, cons, "edp", chain_options(op, keep_options(op, arch, cons)))
        below = [r for r in ranked.order if ranked.energy[r] * ranked.latency[r] < inc]
        print(f"{a.arch} {name}: incumbent EDP {inc:.5g} after {time.process_time() - t0:.2f} s; {len(ranked.order)} "
              f"unrollings, {len(below)} below it by S1 ({sum(not ranked.divides[r] for r in below)} padded)", flush=True)
        best = collector("edp", 1)
        best.offer(found[0].result, found[0].mapping)
        done: set[int] = set()
        for r in below:
            if best.prunes(float(ranked.energy[r]), float(ranked.latency[r])):
                print("  the rest cut by the best found")
                break
            if ranked.cls[r] in done or ranked.mirror_cls[r] in done:
                continue
            left = t0 + a.time_limit - time.process_time()
            if left <= 0:
                print("  time limit reached")
                break
            spatial = {axis: dict(d) for (_, axis), d in ranked.space.assignment(int(r)).items()}
            t1 = time.process_time()
            res, st = search_optimal(op, arch, "edp", constraints=dataclasses.replace(cons, spatial=spatial),
                                     time_limit=left, incumbents=tuple((f.result, f.mapping) for f in best.results()),
                                     imperfect=False if ranked.divides[r] else "spatial")
            for f in res:
                best.offer(f.result, f.mapping)
            if ranked.divides[r]:
                done.add(int(ranked.cls[r]))
            label = " ".join(f"{ax}:" + ",".join(f"{d}{b}" for d, b in dims.items() if b > 1)
                             for ax, dims in spatial.items())
            print(f"  {label:<28} {'divides' if ranked.divides[r] else 'padded ':<7} S1/incumbent "
                  f"{ranked.energy[r] * ranked.latency[r] / inc:.3f} {time.process_time() - t1:6.2f} s, nodes "
                  f"{st.nodes}, cut {st.pruned}, costed {st.evaluated}, bypass choices cut "
                  f"{st.extra.get('keeps_cut', 0)}{' (timed out)' if st.extra.get('timed_out') else ''}", flush=True)
        print(f"  {time.process_time() - t0:.2f} s in all; best EDP {best.results()[0].value:.5g}", flush=True)


if __name__ == "__main__":
    main()
