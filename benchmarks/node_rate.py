"""The exact search's node rate on chosen unrollings of a layer, the same nodes whatever the machine's load.

The heuristic's best is the incumbent (computed once, 10 CPU s, and kept in ``--cache``); then the first ``--first``
unrollings whose S1 bound lies below it (dividing ones, or padded ones too with ``--padded``) are searched one by
one (``search_optimal`` with the unrolling fixed, padded ones over Ruby-S tiles). The search's clock is a counter that
only its own reads between nodes advance (``--budget`` of them per unrolling; 0: none), so two versions of the code
visit the same nodes at any load; the CPU seconds spent inside ``search_optimal`` give the rate. The digest hashes
every bound the search decided on (``optimal._prunes``) and every leaf costed, so equal digests mean the same
decisions on the same bounds, to the bit.

    python benchmarks/node_rate.py tpu_like layer2.0.conv1 --budget 20000
    python benchmarks/node_rate.py simba_like layer4.0.conv2 --first 20 --padded --budget 2500
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import hashlib
import json
import os
import pickle
import pstats
import sys
import time


def main() -> None:
    from accelmap.arch.accelerator import adopt_precision
    from accelmap.arch.presets import get_accelerator
    from accelmap.search import optimal
    from accelmap.search.bounds import chain_options
    from accelmap.search.exact import ranked_unrollings
    from accelmap.search.objective import collector
    from accelmap.search.space import Constraints, keep_options
    from accelmap.workload.models import load_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("arch")
    ap.add_argument("layer")
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--first", type=int, default=1, help="how many unrollings below the incumbent to search")
    ap.add_argument("--padded", action="store_true", help="padded unrollings too (else dividing ones only)")
    ap.add_argument("--budget", type=int, default=0, help="the search's clock reads per unrolling (0: no limit)")
    ap.add_argument("--cache", default="/tmp/node_rate", help="directory keeping the heuristic's incumbents")
    ap.add_argument("--profile", default="", help="write a cProfile (CPU clock) of the searches to this file")
    a = ap.parse_args()
    arch = get_accelerator(a.arch)
    layers = {x.name: x for x in load_model(a.model).layers}
    if a.layer not in layers:
        raise SystemExit(f"layer: no layer {a.layer} in {a.model}; it has {', '.join(layers)}")
    op = adopt_precision(layers[a.layer].operator, arch)
    real_clock = time.perf_counter
    os.makedirs(a.cache, exist_ok=True)
    kept = os.path.join(a.cache, f"{a.model}_{a.arch}_{a.layer}.pkl")
    if os.path.exists(kept):
        with open(kept, "rb") as f:
            inc_result, inc_mapping = pickle.load(f)
    else:
        from accelmap.search.heuristic import search_heuristic

        time.perf_counter = time.process_time
        found, _ = search_heuristic(op, arch, "edp", time_limit=10)
        time.perf_counter = real_clock
        inc_result, inc_mapping = found[0].result, found[0].mapping
        with open(kept, "wb") as f:
            pickle.dump((inc_result, inc_mapping), f)
    inc = inc_result.energy_total * inc_result.latency
    cons = Constraints()
    ranked = ranked_unrollings(op, arch, cons, "edp", chain_options(op, keep_options(op, arch, cons)))
    chosen = [r for r in ranked.order
              if ranked.energy[r] * ranked.latency[r] < inc and (a.padded or ranked.divides[r])][:a.first]

    digest = hashlib.sha256()
    prunes, evaluate = optimal._prunes, optimal.evaluate

    def hashed_prunes(best, bounds):
        digest.update(repr(bounds).encode())
        return prunes(best, bounds)

    def hashed_evaluate(op_, arch_, m, check=True):
        r = evaluate(op_, arch_, m, check=check)
        digest.update(repr((m.loops, r.energy_total, r.latency)).encode())
        return r

    optimal._prunes, optimal.evaluate = hashed_prunes, hashed_evaluate
    reads = [0]

    def counter() -> float:
        # Only the search's own reads between nodes advance it: the bound computations' reads depend on what they
        # have cached, which is what two versions of the code may differ in.
        if sys._getframe(1).f_code.co_filename.endswith("optimal.py"):
            reads[0] += 1
        return float(reads[0])

    best = collector("edp", 1)
    best.offer(inc_result, inc_mapping)
    cpu = 0.0
    totals = dict(nodes=0, pruned=0, evaluated=0, capacity_cut=0)
    prof = cProfile.Profile(time.process_time) if a.profile else None
    for r in chosen:
        spatial = {axis: dict(d) for (_, axis), d in ranked.space.assignment(int(r)).items()}
        label = " ".join(f"{ax}:" + ",".join(f"{d}{b}" for d, b in dims.items() if b > 1) for ax, dims in spatial.items())
        reads[0] = 0
        time.perf_counter = counter
        t0 = time.process_time()
        if prof:
            prof.enable()
        res, st = optimal.search_optimal(op, arch, "edp", constraints=dataclasses.replace(cons, spatial=spatial),
                                         time_limit=a.budget or None,
                                         incumbents=tuple((f.result, f.mapping) for f in best.results()),
                                         imperfect=False if ranked.divides[r] else "spatial")
        if prof:
            prof.disable()
        dt = time.process_time() - t0
        time.perf_counter = real_clock
        cpu += dt
        for f in res:
            best.offer(f.result, f.mapping)
        for k in totals:
            totals[k] += getattr(st, k)
        print(f"  {label:<24} {dt:6.2f} CPU s, nodes {st.nodes}, cut {st.pruned}, costed {st.evaluated}, "
              f"{'budget reached' if st.extra.get('timed_out') else 'closed'}", flush=True)
    print(json.dumps(dict(arch=a.arch, layer=a.layer, unrollings=len(chosen), cpu=round(cpu, 2), **totals,
                          nodes_per_cpu_s=round(totals["nodes"] / cpu) if cpu else None,
                          best=repr(best.results()[0].value), digest=digest.hexdigest()[:16])), flush=True)
    if prof:
        prof.dump_stats(a.profile)
        pstats.Stats(a.profile).sort_stats("cumulative").print_stats(40)


if __name__ == "__main__":
    main()
