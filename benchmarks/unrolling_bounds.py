"""How many unrollings the exact search must open, and how tight the certificate is, for a fixed incumbent.

For every layer of a results file of ``mapper_scaling.py`` (one preset), with that run's result (EDP) as the
incumbent: the exact search's unrollings (``exact.ranked_unrollings``: rule S1 with S3, S6 and S7), the classes of
dividing unrollings of equal fan-out products (rule S5) whose bound is below the incumbent (each is a subtree the
search must open), the padded unrollings below it (each a subtree over Ruby-S tiles, rule E2) and how many of those
rule B52 leaves to open, the CPU seconds of ranking them, and the certificate's gap (rule S2) against the incumbent. With
``--sample N``, N of those classes drawn at random (seed 0) get the node bound at the root (``BoundContext.lower_bound``
with nothing fixed, the least over the bypass choices), and the table says how many of them it puts at or above the
incumbent (subtrees the search opens only to cut at their root). Run it with ``PYTHONPATH`` on two versions of ``src``
to compare their rules on the same incumbents.

    python benchmarks/unrolling_bounds.py --arch simba_like --results benchmarks/results/FILE.json [--sample 30]
"""

from __future__ import annotations

import argparse
import time

from scaling_incumbents import parse_with_incumbents


def main() -> None:
    import numpy as np

    from accelmap.arch.accelerator import adopt_precision
    from accelmap.arch.presets import get_accelerator
    from accelmap.search.bounds import BoundContext, chain_options
    from accelmap.search.exact import ranked_unrollings
    from accelmap.search.padded_equivalents import single_axis_padded
    from accelmap.search.space import Constraints, keep_options
    from accelmap.search.spatial import certified_lower_bound
    from accelmap.workload.models import load_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sample", type=int, default=0, help="classes below the incumbent to bound at the root")
    a, incumbent = parse_with_incumbents(ap)
    arch = get_accelerator(a.arch)
    cons = Constraints()
    print(f"{'layer':<22} {'unrollings':>10} {'classes':>8} {'below':>7} {'padded below':>12} {'B52 leaves':>10} "
          f"{'rank CPU s':>10} {'certificate gap':>15}"
          + ("   sampled: root bound >= incumbent" if a.sample else ""))
    rng = np.random.default_rng(0)
    for layer in load_model(a.model).layers:
        if incumbent.get(layer.name) is None or (a.layers and layer.name not in a.layers):
            continue
        op = adopt_precision(layer.operator, arch)
        chains = chain_options(op, keep_options(op, arch, cons))
        t = time.process_time()
        ranked = ranked_unrollings(op, arch, cons, "edp", chains)
        cpu = time.process_time() - t
        below = (ranked.energy * ranked.latency < incumbent[layer.name]) & ranked.divides
        bound = certified_lower_bound(op, arch, cons, chains, "edp")[0]
        # Padded rows below the incumbent (each a subtree over Ruby-S tiles), and how many rule B52 leaves to open:
        # one per class among those whose padded dims sit on one axis per level, every other one.
        padded = np.flatnonzero((ranked.energy * ranked.latency < incumbent[layer.name]) & ~ranked.divides)
        single = np.array([single_axis_padded(ranked.space.assignment(int(r)), op) for r in padded], dtype=bool)
        b52 = int((~single).sum()) + len(np.unique(ranked.cls[padded[single]]))
        sampled = ""
        if a.sample:
            first: dict[int, int] = {}
            for row in ranked.order[below[ranked.order]]:
                first.setdefault(int(ranked.cls[row]), int(row))
            rows = list(first.values())
            pick = rng.choice(len(rows), size=min(a.sample, len(rows)), replace=False) if rows else []
            keeps = keep_options(op, arch, cons)
            cut = 0
            for i in pick:
                spatial = {axis: dict(dims) for (_, axis), dims in ranked.space.assignment(rows[i]).items()}
                root = min(e * lat for e, lat in (BoundContext(op, arch, keep, spatial).lower_bound(
                    (), len(arch.levels), dict(op.sizes)) for keep in keeps))
                cut += root >= incumbent[layer.name]
            sampled = f"   {cut} of {len(pick)}"
        print(f"{layer.name:<22} {len(ranked.order):>10} {ranked.classes:>8} {len(np.unique(ranked.cls[below])):>7} "
              f"{len(padded):>12} {b52:>10} {cpu:>10.2f} {incumbent[layer.name] / bound - 1:>14.1%}{sampled}", flush=True)


if __name__ == "__main__":
    main()
