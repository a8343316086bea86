"""Per spatial unrolling class of one layer: the exact search's root bound against the best mapping of the class.

The exact search (``--strategy optimal``) visits unrollings in order of their S1 bound and, for each one the
incumbent does not cut, runs the branch and bound with the unrolling fixed; the first thing that can cut it there
is the root bound of each bypass choice (``BoundContext.lower_bound((), levels, sizes)``: B1, B8, B27, ...). This
prints, for the first uncut classes (one row per class of equal fan-out products, rule S5), the root bound (least
EDP over the bypass choices) with and without rule B27, and the best mapping the class's own search finds in
``--seconds`` (half the heuristic with the unrolling fixed, half the exact search from its best; wall clock;
``proven``: the exact search searched the class to the end), each term as a fraction:
energy bound / best energy, latency bound / best latency, and the best mapping's stall share of its latency.

    python benchmarks/bound_gap_classes.py --arch eyeriss_like --layer layer1.0.conv1 --classes 8 --seconds 5
"""

from __future__ import annotations

import argparse
import dataclasses
import time


def main() -> None:
    import accelmap.search.bounds as bounds
    from accelmap.arch.accelerator import adopt_precision
    from accelmap.arch.presets import get_accelerator
    from accelmap.search.bounds import BoundContext, chain_options
    from accelmap.search.exact import ranked_unrollings
    from accelmap.search.heuristic import search_heuristic
    from accelmap.search.optimal import search_optimal
    from accelmap.search.space import Constraints, keep_options
    from accelmap.workload.models import load_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="eyeriss_like")
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--layer", default="layer1.0.conv1")
    ap.add_argument("--classes", type=int, default=8, help="uncut unrolling classes to measure")
    ap.add_argument("--seconds", type=float, default=5.0, help="seconds of each class's own search (wall clock)")
    ap.add_argument("--root-only", action="store_true",
                    help="no searches: count the uncut classes whose root bound (every bypass choice) cuts them")
    ap.add_argument("--incumbent-seconds", type=float, default=4.0, help="heuristic seconds for the incumbent")
    ap.add_argument("--incumbent-edp", type=float,
                    help="with --root-only: cut against this EDP instead of the heuristic's (the same on every machine load)")
    a = ap.parse_args()
    arch = get_accelerator(a.arch)
    layer = next(x for x in load_model(a.model).layers if x.name == a.layer)
    op = adopt_precision(layer.operator, arch)
    nlev = len(arch.levels)
    found, _ = search_heuristic(op, arch, "edp", time_limit=a.incumbent_seconds)
    inc = found[0].result
    inc_edp = inc.energy_total * inc.latency
    if a.incumbent_edp:
        inc_edp = a.incumbent_edp
    print(f"{a.arch} {a.layer}: incumbent EDP {inc_edp:.4g} (energy {inc.energy_total:.4g} pJ, "
          f"latency {inc.latency:,.0f} cycles)")
    cons = Constraints()
    keeps = keep_options(op, arch, cons)
    ranked = ranked_unrollings(op, arch, cons, "edp", chain_options(op, keeps))
    with_b27 = bounds.open_levels_stall

    def root(spatial, rule: bool):
        bounds.open_levels_stall = with_b27 if rule else (lambda ctx, level: 0.0)
        try:
            best = None
            for keep in keeps:
                e, lat = BoundContext(op, arch, keep, spatial, "edp").lower_bound((), nlev, dict(op.sizes))
                if best is None or e * lat < best[0] * best[1]:
                    best = (e, lat)
            return best
        finally:
            bounds.open_levels_stall = with_b27

    if a.root_only:
        from accelmap.search.objective import collector
        from accelmap.search.optimal import SearchStats, _keeps_by_bound

        best = collector("edp", 1)
        best.offer(inc, found[0].mapping)
        if a.incumbent_edp:
            # (a bound at or above the given EDP is cut, as TopK.prunes cuts against its k-th best)
            best.prunes = lambda e, lat: e * lat >= inc_edp      # type: ignore[method-assign]
        counts = [0, 0, 0, 0]
        seen_root: set[int] = set()
        t0 = time.process_time()
        for row in ranked.order:
            if float(ranked.energy[row] * ranked.latency[row]) >= inc_edp:
                break
            if ranked.cls[row] in seen_root or not ranked.divides[row]:
                continue
            seen_root.add(int(ranked.cls[row]))
            spatial = {axis: dict(dims) for (_, axis), dims in ranked.space.assignment(int(row)).items()}
            fixed = dataclasses.replace(cons, spatial=spatial)
            open_keeps = list(_keeps_by_bound(op, arch, fixed, "edp", best, SearchStats()))
            counts[0] += 1
            for i, rule in ((1, False), (2, True)):
                bounds.open_levels_stall = with_b27 if rule else (lambda ctx, level: 0.0)
                ok = [best.prunes(*BoundContext(op, arch, keep, spatial, "edp").lower_bound((), nlev, dict(op.sizes)))
                      for keep in open_keeps]
                counts[i] += all(ok)
            bounds.open_levels_stall = with_b27
            # rule B36 as the search applies it at the root: either bound cuts the bypass choice (code without it: none)
            try:
                from accelmap.search.root_pairs import paired_root_bound
            except ImportError:
                def paired_root_bound(ctx):
                    return None
            ok = []
            for keep in open_keeps:
                ctx = BoundContext(op, arch, keep, spatial, "edp")
                paired = paired_root_bound(ctx)
                ok.append(best.prunes(*ctx.lower_bound((), nlev, dict(op.sizes)))
                          or (paired is not None and best.prunes(*paired)))
            counts[3] += all(ok)
        print(f"incumbent EDP {inc_edp:.6g}; dividing unrolling classes below it by S1: {counts[0]}; cut at the root by every bypass "
              f"choice's bound: {counts[1]} without rule B27, {counts[2]} with it, {counts[3]} with rule B36 as well "
              f"({time.process_time() - t0:.1f} s CPU)")
        return
    print(f"{'#':>3} {'unrolling':<34} {'S1/inc':>7} {'root/inc':>8} {'+B27':>7} {'best/inc':>8} {'proven':>6}"
          f" {'e_lb/e':>7} {'l_lb/l':>7} {'+B27':>7} {'stall':>6}")
    seen: set[int] = set()
    shown = 0
    for row in ranked.order:
        s1 = float(ranked.energy[row] * ranked.latency[row])
        if s1 >= inc_edp or shown >= a.classes:
            break
        if ranked.cls[row] in seen or not ranked.divides[row]:
            continue
        seen.add(int(ranked.cls[row]))
        shown += 1
        assignment = ranked.space.assignment(int(row))
        spatial = {axis: dict(dims) for (_, axis), dims in assignment.items()}
        label = " ".join(f"{ax}:" + ",".join(f"{d}{b}" for d, b in dims.items() if b > 1)
                         for ax, dims in spatial.items())
        e0, l0 = root(spatial, False)
        e1, l1 = root(spatial, True)
        fixed = dataclasses.replace(cons, spatial=spatial)
        t0 = time.process_time()
        # The class's best: its own exact search from the heuristic's best with the unrolling fixed.
        start, _ = search_heuristic(op, arch, "edp", constraints=fixed, time_limit=a.seconds / 2)
        res, st = search_optimal(op, arch, "edp", constraints=fixed, time_limit=a.seconds / 2,
                                 incumbents=tuple((f.result, f.mapping) for f in start))
        if not res:
            print(f"{shown:>3} {label:<34} {s1 / inc_edp:>7.3f} {e0 * l0 / inc_edp:>8.3f} {e1 * l1 / inc_edp:>7.3f}"
                  f" no mapping in {time.process_time() - t0:.1f} s")
            continue
        r = res[0].result
        edp = r.energy_total * r.latency
        stall = dict(r.latency_parts).get("single-buffer stalls", 0.0) / r.latency
        proven = "yes" if not st.extra.get("timed_out") else "no"
        print(f"{shown:>3} {label:<34} {s1 / inc_edp:>7.3f} {e0 * l0 / inc_edp:>8.3f} {e1 * l1 / inc_edp:>7.3f}"
              f" {edp / inc_edp:>8.3f} {proven:>6} {e1 / r.energy_total:>7.3f} {l0 / r.latency:>7.3f}"
              f" {l1 / r.latency:>7.3f} {stall:>6.2f}", flush=True)


if __name__ == "__main__":
    main()
