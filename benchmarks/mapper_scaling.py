"""How the mapper scales on full-size layers: time, memory, and how close to optimal it is proven.

For ResNet-18, ResNet-50, MobileNetV2, VGG-16 and one BERT-base encoder layer on eyeriss_like,
simba_like, tpu_like, edge_tpu_like, ascend_like and vta_like, every distinct layer is mapped the
way ``accelmap map``
does it (strategy auto: exact branch and bound where the space is small enough,
else the heuristic; a time limit per layer), with the cache off. Each
(model, accelerator) pair runs in its own process so its peak memory (resident
set of that process and of its worker processes, from getrusage) is its own.

    python benchmarks/mapper_scaling.py [--time-limit 10] [--jobs 2] [--budget 900]
        [--strategy optimal] [--models resnet18 ...] [--archs tpu_like ...] [--skip-small] [--cpu-clock]
        [--out FILE]

``--cpu-clock`` (with ``--jobs 1``) makes every clock of the search in the (model, accelerator) process its CPU time
(``time.process_time``): the time limits, the heuristic's share of them and the seconds reported per layer. On a
shared machine a wall-clock limit gives each layer whatever CPU the other jobs leave, so what is proven depends on
the load; with the CPU clock it does not (the pair's wall seconds still count the waiting).

Every whole-model layer's space exceeds the exact-search limit, so ``auto`` runs the
heuristic there; a second table runs the exact branch and bound on small operators
(a time limit each) to show its time and work against the space size.

Prints a per-pair table, a table by space-size decade and the exact-search table; writes
benchmarks/results/mapper_scaling.json.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

MODELS = ("resnet18", "resnet50", "mobilenetv2", "vgg16", "bert_base_layer")
ARCHS = ("eyeriss_like", "simba_like", "tpu_like", "edge_tpu_like", "ascend_like", "vta_like")
RESULTS = Path(__file__).resolve().parent / "results" / "mapper_scaling.json"
MEMORY_LIMIT_MB = 1024


def run_one(model: str, arch_name: str, time_limit: float, jobs: int, strategy: str = "auto",
            cpu_clock: bool = False) -> dict:
    from accelmap.arch.accelerator import adopt_precision
    from accelmap.arch.presets import get_accelerator
    from accelmap.search.exhaustive import space_size
    from accelmap.search.model_mapper import map_model
    from accelmap.workload.models import load_model

    arch = get_accelerator(arch_name)
    m = load_model(model)
    t0, wall_clock = time.perf_counter(), time.perf_counter
    if cpu_clock:
        time.perf_counter = time.process_time    # the search's limits and seconds: CPU time of this process
    mm = map_model(m, arch, "edp", strategy=strategy, time_limit_per_layer=time_limit, jobs=jobs,
                   cache_path=None, progress=False)
    time.perf_counter = wall_clock
    wall = time.perf_counter() - t0
    layers = []
    for l in mm.layers:
        layers.append({"layer": l.name, "count": l.count, "macs_each": l.layer.operator.macs,
                       "space_size": space_size(adopt_precision(l.layer.operator, arch), arch),
                       "strategy": l.strategy, "proven_optimal": l.proven_optimal,
                       "lower_bound": l.lower_bound, "gap": l.gap, "timed_out": l.timed_out,
                       "seconds": l.search_seconds, "evaluated": l.evaluated,
                       "edp": l.result.edp if l.ok else None, "error": l.error,
                       # says when a proof covers perfect factorizations only (padded unrollings not excluded)
                       "notes": list(l.notes)})
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {"model": model, "arch": arch_name, "wall_seconds": wall, "jobs": jobs, "time_limit": time_limit,
            "peak_rss_mb_parent": own, "peak_rss_mb_worker": kids, "peak_rss_mb": max(own, kids),
            "energy_pj": mm.energy_total, "latency_cycles": mm.latency_total, "macs": mm.macs_mapped,
            "utilization": mm.utilization, "layers": layers}


def exact_sweep(time_limit: float) -> list[dict]:
    """The exact branch and bound on small operators, where it can finish: time and work vs space size."""
    from accelmap.arch.accelerator import adopt_precision
    from accelmap.arch.presets import get_accelerator
    from accelmap.search.exhaustive import space_size
    from accelmap.search.mapper import map_operator
    from accelmap.workload.constructors import conv2d, gemm

    ops = [gemm("gemm4", m=4, n=4, k=4), gemm("gemm8", m=8, n=8, k=8), gemm("gemm16x16x8", m=16, n=16, k=8),
           gemm("gemm16", m=16, n=16, k=16), conv2d("conv_tiny", n=1, c=4, h=6, w=6, k=4, r=3, s=3, padding=1)]
    out = []
    for arch_name in ARCHS:
        arch = get_accelerator(arch_name)
        for op in ops:
            op = adopt_precision(op, arch)
            r = map_operator(op, arch, "edp", strategy="optimal", time_limit=time_limit)
            out.append({"arch": arch_name, "operator": op.name, "space_size": space_size(op, arch),
                        "seconds": r.stats.seconds, "evaluated": r.stats.evaluated, "nodes": r.stats.nodes,
                        "pruned": r.stats.pruned, "proven_optimal": r.proven_optimal})
    return out


def print_per_preset(runs: list[dict]) -> None:
    """The issue's table: per preset, layers proven, the certificate gaps, time per layer, and the
    whole models' pJ/MAC and utilization."""
    hdr = (f"{'preset':<14} {'layers':>6} {'failed':>6} {'proven':>6} {'gap median':>10} {'gap max':>8} "
           f"{'median s':>8} {'max s':>6} {'timed out':>9}   pJ/MAC and utilization per model")
    print(hdr)
    print("-" * len(hdr))
    for arch in ARCHS:
        mine = [r for r in runs if r["arch"] == arch]
        if not mine:
            continue
        L = [l for r in mine for l in r["layers"]]
        ok = [l for l in L if not l["error"]]
        gaps = sorted(l["gap"] for l in ok if l["gap"] is not None)
        secs = sorted(l["seconds"] for l in L)
        per_model = ", ".join(f"{r['model']} {r['energy_pj'] / max(r['macs'], 1):.2f}/{r['utilization']:.0%}"
                              for r in mine)
        print(f"{arch:<14} {len(L):>6} {len(L) - len(ok):>6} {sum(1 for l in ok if l['proven_optimal']):>6} "
              f"{(f'{statistics.median(gaps):.0%}' if gaps else '-'):>10} {(f'{gaps[-1]:.0%}' if gaps else '-'):>8} "
              f"{statistics.median(secs):>8.2f} {secs[-1]:>6.2f} {sum(1 for l in L if l['timed_out']):>9}   {per_model}")
    print()


def decade(n: int) -> int:
    return int(math.floor(math.log10(n))) if n > 0 else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=10.0, help="search seconds per layer")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--budget", type=float, default=1800.0, help="skip remaining pairs after this many seconds")
    ap.add_argument("--exact-time-limit", type=float, default=10.0, help="seconds per small operator, exact search")
    ap.add_argument("--strategy", default="auto", help="strategy per layer (optimal: the exact search, proofs)")
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS, help="restrict the models")
    ap.add_argument("--archs", nargs="+", default=list(ARCHS), choices=ARCHS, help="restrict the presets")
    ap.add_argument("--skip-small", action="store_true", help="skip the exact search on small operators")
    ap.add_argument("--out", type=Path, default=RESULTS, help="JSON results file")
    ap.add_argument("--cpu-clock", action="store_true", help="limits and seconds in CPU time (use with --jobs 1)")
    ap.add_argument("--one", nargs=2, metavar=("MODEL", "ARCH"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(run_one(a.one[0], a.one[1], a.time_limit, a.jobs, a.strategy, a.cpu_clock)))
        return
    t_start = time.perf_counter()
    runs, skipped = [], []
    for model in a.models:
        for arch in a.archs:
            if time.perf_counter() - t_start > a.budget:
                skipped.append(f"{model}/{arch}")
                continue
            p = subprocess.run([sys.executable, __file__, "--one", model, arch, "--time-limit", str(a.time_limit),
                                "--jobs", str(a.jobs), "--strategy", a.strategy]
                               + (["--cpu-clock"] if a.cpu_clock else []), capture_output=True, text=True)
            if p.returncode != 0:
                print(f"{model} on {arch} failed:\n{p.stderr}", file=sys.stderr)
                sys.exit(1)
            r = json.loads(p.stdout.strip().splitlines()[-1])
            runs.append(r)
            print(f"  {model} on {arch}: {r['wall_seconds']:.1f} s", file=sys.stderr, flush=True)

    print_per_preset(runs)
    hdr = (f"{'model':<16} {'arch':<13} {'layers':>6} {'space (min..max)':>18} {'optimal':>7} {'heur.':>5} "
           f"{'failed':>6} {'evaluated':>10} {'search s':>9} {'wall s':>7} {'peak MiB':>8}")
    print(hdr)
    print("-" * len(hdr))
    for r in runs:
        L = r["layers"]
        sizes = [l["space_size"] for l in L]
        proven = sum(1 for l in L if l["proven_optimal"])
        print(f"{r['model']:<16} {r['arch']:<13} {len(L):>6} {f'1e{decade(min(sizes))}..1e{decade(max(sizes))}':>18} "
              f"{proven:>7} {sum(1 for l in L if l['strategy'] == 'heuristic'):>5} {sum(1 for l in L if l['error']):>6} "
              f"{sum(l['evaluated'] for l in L):>10,} {sum(l['seconds'] for l in L):>9.1f} {r['wall_seconds']:>7.1f} "
              f"{r['peak_rss_mb']:>8.0f}")
    print()
    by_dec: dict[int, list[dict]] = {}
    for r in runs:
        for l in r["layers"]:
            by_dec.setdefault(decade(l["space_size"]), []).append(l)
    hdr2 = f"{'space size':>10} {'layers':>6} {'failed':>6} {'proven':>6} {'median s':>9} {'max s':>7} {'median evaluated':>16} {'strategy':>18}"
    print(hdr2)
    print("-" * len(hdr2))
    table2 = []
    for d in sorted(by_dec):
        L = by_dec[d]
        strat = sorted({l["strategy"] for l in L})
        row = {"decade": d, "layers": len(L), "failed": sum(1 for l in L if l["error"]), "proven": sum(1 for l in L if l["proven_optimal"]),
               "median_seconds": statistics.median(l["seconds"] for l in L),
               "max_seconds": max(l["seconds"] for l in L),
               "median_evaluated": statistics.median(l["evaluated"] for l in L), "strategies": strat}
        table2.append(row)
        print(f"{'1e' + str(d):>10} {row['layers']:>6} {row['failed']:>6} {row['proven']:>6} {row['median_seconds']:>9.2f} "
              f"{row['max_seconds']:>7.2f} {row['median_evaluated']:>16,.0f} {'/'.join(strat):>18}")
    print(f"\nexact search (strategy optimal, {a.exact_time_limit:g} s limit) on small operators:")
    exact = [] if a.skip_small else exact_sweep(a.exact_time_limit)
    hdr3 = f"{'arch':<13} {'operator':<12} {'space':>10} {'nodes':>9} {'evaluated':>9} {'seconds':>8} {'proven':>6}"
    print(hdr3)
    print("-" * len(hdr3))
    for e in exact:
        print(f"{e['arch']:<13} {e['operator']:<12} {e['space_size']:>10,} {e['nodes']:>9,} {e['evaluated']:>9,} "
              f"{e['seconds']:>8.2f} {'yes' if e['proven_optimal'] else 'no':>6}")
    r50 = [r for r in runs if r["model"] == "resnet50"]
    peak = max((r["peak_rss_mb"] for r in r50), default=None)
    if peak is not None:
        print(f"\nResNet-50 peak resident memory: {peak:.0f} MiB per process "
              f"({'under' if peak < MEMORY_LIMIT_MB else 'OVER'} the {MEMORY_LIMIT_MB} MiB target)")
    if skipped:
        print(f"skipped (budget {a.budget:g} s reached): {', '.join(skipped)}")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"time_limit_per_layer": a.time_limit, "jobs": a.jobs, "strategy": a.strategy,
                                 "cpu_clock": a.cpu_clock,
                                 "models": a.models, "archs": a.archs,
                                 "total_seconds": time.perf_counter() - t_start, "skipped": skipped,
                                 "resnet50_peak_rss_mb": peak, "by_space_decade": table2, "exact_small": exact,
                                 "runs": runs},
                                indent=2) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
