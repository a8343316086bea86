"""Where the certificate's gap comes from, layer by layer: the exact search's best against the bounds' terms.

For every layer of a model on a preset, the exact search (``--strategy optimal``, EDP, a CPU-second limit) runs as
``accelmap map`` runs it, then prints:

* whether it closed (``timed out``), and whether every padded spatial bound was enumerated (rule E2: without it the
  search cannot prove a layer, only the certificate can);
* the best mapping's energy and latency, and what its latency is made of (the model's parts);
* the certificate (rule S1 over every unrolling class, with S3, S6, S7): the gap, and its least energy and least
  latency over the classes as fractions of the best's (a fraction well below 1 is the loose term);
* the node bound of the best's own unrolling (the exact search's bound with that unrolling fixed) at the root and with
  every loop fixed (the leaf), as energy/latency fractions of the best's.

    python benchmarks/bound_gap_terms.py --arch edge_tpu_like --model resnet18 --time-limit 10 [--layers fc conv1]

The time limit is CPU seconds of this process (``time.process_time``), as ``mapper_scaling.py --cpu-clock`` runs it.
"""

from __future__ import annotations

import argparse
import math
import time


def main() -> None:
    from accelmap.arch.accelerator import adopt_precision
    from accelmap.arch.presets import get_accelerator
    from accelmap.cost.model import evaluate
    from accelmap.search.bounds import BoundContext, chain_options
    from accelmap.search.exact import search_exact
    from accelmap.search.objective import scalar
    from accelmap.search.space import Constraints, keep_options
    from accelmap.search.spatial import certified_lower_bound, unrolling_of
    from accelmap.workload.models import load_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="edge_tpu_like")
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--time-limit", type=float, default=10.0, help="CPU seconds of the exact search per layer")
    ap.add_argument("--layers", nargs="+", help="only these layers")
    a = ap.parse_args()
    arch = get_accelerator(a.arch)
    wall = time.perf_counter
    print(f"{'layer':<20} {'closed':>6} {'padded':>6} {'energy uJ':>10} {'latency':>11} {'gap':>7} "
          f"{'cert e/l':>11} {'root e/l':>11} {'leaf e/l':>11}  latency parts of the best")
    for layer in load_model(a.model).layers:
        if a.layers and layer.name not in a.layers:
            continue
        op = adopt_precision(layer.operator, arch)
        time.perf_counter = time.process_time      # the search's clock: CPU seconds of this process
        try:
            found, st = search_exact(op, arch, "edp", time_limit=a.time_limit)
        finally:
            time.perf_counter = wall
        if not found:
            print(f"{layer.name:<20} no mapping found in {a.time_limit:g} s")
            continue
        m = found[0].mapping
        res = evaluate(op, arch, m)
        best = scalar("edp", res.energy_total, res.latency)
        cons = Constraints()
        chains = chain_options(op, keep_options(op, arch, cons))
        cert, cert_e, cert_l = certified_lower_bound(op, arch, cons, chains, "edp")
        ctx = BoundContext(op, arch, m.keep, unrolling_of(arch, m))
        nlev = len(arch.levels)
        root = ctx.lower_bound((), nlev, dict(op.sizes))
        leaf_rem = dict.fromkeys(op.sizes, 1)
        leaf = ctx.lower_bound(tuple(m.loops), 0, leaf_rem)
        def frac(pair, res=res) -> str:
            return f"{pair[0] / res.energy_total:.3f}/{pair[1] / res.latency:.3f}"

        parts = ", ".join(f"{k} {v / res.latency:.2f}" for k, v in res.latency_parts if v)
        closed = "yes" if not st.extra.get("timed_out") else "no"
        padded = "every" if st.extra.get("spatial_every_padded") else "fewest"
        print(f"{layer.name:<20} {closed:>6} {padded:>6} {res.energy_total / 1e6:>10.2f} {res.latency:>11,.0f} "
              f"{best / cert - 1:>7.1%} {frac((cert_e, cert_l)):>11} {frac(root):>11} {frac(leaf):>11}  {parts}",
              flush=True)
        print(f"{'':<20} unrollings {st.extra.get('spatial_candidates')}: searched {st.extra.get('spatial_searched')},"
              f" cut {st.extra.get('spatial_cut')}; nodes {st.nodes:,}, costed {st.evaluated:,}; "
              f"spatial {unrolling_of(arch, m)}", flush=True)
        assert math.isfinite(cert)


if __name__ == "__main__":
    main()
