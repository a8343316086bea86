"""Design-space exploration: sweep throughput, engine overhead, an Eyeriss-like Pareto front, and
Sunstone-arch's L1-split study (Ng's 2022 UBC thesis, Ch. 7, Table 7.1) beside a grid.

    python benchmarks/dse.py [--parts throughput,engines,eyeriss,sunstone,...] [--designs 4] [--engines local:2]
                             [--eyeriss-samples 12] [--time-limit 2] [--ray-python PATH]

Prints a table per part and writes benchmarks/results/dse.json (and dse_eyeriss.png). Timings are
wall-clock on whatever machine runs it; say how loaded it was when quoting them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from importlib import resources
from pathlib import Path

from accelmap.arch import get_accelerator
from accelmap.arch.accelerator import adopt_precision
from accelmap.dse import components
from accelmap.dse.design import derive, make_design
from accelmap.dse.memory_search import co_search, config_arch, configs_within, grid_search, split_l1_base
from accelmap.dse.report import plot, summary
from accelmap.dse.space import load_space
from accelmap.dse.store import DesignStore, StoredRun
from accelmap.dse.sweep import run_sweep
from accelmap.search.mapper import map_operator
from accelmap.search.model_mapper import map_model
from accelmap.workload.constructors import conv2d
from accelmap.workload.models import load_model

RESULTS = Path(__file__).resolve().parent / "results"
SPACE = resources.files("accelmap") / "data" / "dse" / "eyeriss_sweep.yaml"

# A tiny CPU-bound task run through each engine: what the engine adds per task and to start.
_OVERHEAD = r'''
import json, sys, time
def work(x):
    t = time.perf_counter()
    while time.perf_counter() - t < 0.2:
        pass
    return x
def main(engine, n=20):
    if engine == "dask":
        from distributed import Client, LocalCluster, as_completed
        t0 = time.perf_counter()
        cl = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None)
        c = Client(cl)
        t1 = time.perf_counter()
        for f in as_completed(c.map(work, range(n), pure=False)):
            f.result()
        t2 = time.perf_counter()
        c.close(); cl.close()
    else:
        import ray
        t0 = time.perf_counter()
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
        t1 = time.perf_counter()
        r = ray.remote(num_cpus=1)(work)
        refs = [r.remote(i) for i in range(n)]
        while refs:
            ready, refs = ray.wait(refs, num_returns=1); ray.get(ready[0])
        t2 = time.perf_counter()
        ray.shutdown()
    t3 = time.perf_counter()
    print(json.dumps({"engine": engine, "start_s": t1 - t0, "tasks_s": t2 - t1, "ideal_tasks_s": n * 0.2 / 2,
                      "per_task_overhead_s": (t2 - t1 - n * 0.2 / 2) / n * 2, "stop_s": t3 - t2}))
if __name__ == "__main__":
    main(sys.argv[1])
'''


def engines(ray_python: str | None) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as d:
        script = Path(d) / "overhead.py"
        script.write_text(_OVERHEAD)
        for engine, py in (("dask", sys.executable), ("ray", ray_python)):
            if py is None:
                rows.append({"engine": engine, "skipped": "no interpreter with it (pass --ray-python)"})
                continue
            r = subprocess.run([py, str(script), engine], capture_output=True, text=True, timeout=300)
            if r.returncode:
                rows.append({"engine": engine, "skipped": r.stderr.strip().splitlines()[-1:]})
            else:
                rows.append(json.loads(r.stdout.strip().splitlines()[-1]))
    print("\nengine overhead: 20 tasks of 0.2 s CPU on 2 local workers (ideal 2.0 s)")
    print(f"{'engine':<6} {'start s':>8} {'tasks s':>8} {'per task s':>11} {'stop s':>7}")
    for r in rows:
        if "skipped" in r:
            print(f"{r['engine']:<6} skipped: {r['skipped']}")
        else:
            print(f"{r['engine']:<6} {r['start_s']:8.2f} {r['tasks_s']:8.2f} {r['per_task_overhead_s']:11.3f} "
                  f"{r['stop_s']:7.2f}")
    return rows


def store_rate(n: int = 300) -> float:
    """Designs per second the driver can commit to the SQLite store (a ResNet-18-sized row)."""
    layers = [{"name": f"l{i}", "count": 1, "how": "heuristic", "error": None, "energy_pj": 1.0,
               "latency_cycles": 1.0, "mapping": [{"level": "L", "keep": ["I"], "temporal": [["K", 4]] * 6}] * 3}
              for i in range(12)]
    run = StoredRun(1.0, 1.0, True, None, 1.0, "w", {"utilization": 0.5, "layers": layers})
    with tempfile.TemporaryDirectory() as d:
        s = DesignStore(Path(d) / "s.sqlite")
        t0 = time.perf_counter()
        for i in range(n):
            s.put(f"k{i}", "a", "m", run)
        dt = time.perf_counter() - t0
        s.close()
    return n / dt


def throughput(n_designs: int, strategy: str, time_limit: float | None, engine_runs: list[tuple[str, int]],
               warm_starts: tuple[bool, ...] = (False,), cpu_clock: bool = False) -> dict:
    space = load_space(str(SPACE))
    model = load_model("resnet18")
    pts = [p for p in space.grid() if dict(p)["array"] in ((14, 12), (16, 16))][:n_designs]
    rows = []
    for (engine, workers), warm in ((r, w) for r in engine_runs for w in warm_starts):
        load_before = os.getloadavg()[0]
        with tempfile.TemporaryDirectory() as d:
            res = run_sweep(space, model, points=pts, engine=engine, workers=workers, store_path=Path(d) / "s.sqlite",
                            progress=False, strategy=strategy, time_limit=time_limit, warm_start=warm,
                            cpu_clock=cpu_clock)
        per = sum(res.map_seconds) / len(res.map_seconds)
        cpu = [o.run.result.get("cpu_seconds") for o in res.outcomes if o.run is not None]
        # How many layer mappings the mapper proved optimal (the exact search finished, or its best met the
        # certified lower bound, within the time limit; "how" alone says "optimal" for an unproven exact run), and
        # the EDP it reached, so the exact and heuristic runs can be compared on the same designs.
        proven = [ly.get("proven_optimal", False) for o in res.outcomes if o.run is not None
                  for ly in o.run.result["layers"]]
        layer_rows = [ly for o in res.outcomes if o.run is not None for ly in o.run.result["layers"]]
        rows.append({"engine": engine, "workers": workers, "warm_start": warm,
                     "load_average_before_after": [load_before, os.getloadavg()[0]],
                     "layers_timed_out": sum(bool(ly.get("timed_out")) for ly in layer_rows),
                     "layers_warm_started": sum(ly.get("warm_start_valid", 0) > 0 for ly in layer_rows),
                     "cpu_seconds_per_design_each": [o.run.result.get("cpu_seconds") for o in res.outcomes
                                                     if o.run is not None],
                     "designs": res.mapped_now, "wall_s": res.wall_seconds,
                     "designs_per_minute": 60 * res.mapped_now / res.wall_seconds, "seconds_per_design": per,
                     "cpu_seconds_per_design": sum(c for c in cpu if c is not None) / max(len(cpu), 1),
                     "layers_proven_optimal": sum(proven), "layers_mapped": len(proven),
                     "edp_per_design": {o.design.label: o.edp for o in res.outcomes if o.ok}})
    rate = store_rate()
    # Wall seconds per design: a time-limited search runs to its limit in wall time whatever CPU share it gets,
    # so the CPU seconds a loaded machine gives it understate what an idle core spends (on an unloaded machine
    # the two agree for searches that finish early; under load the wall figure is the conservative one).
    per_design = rows[0]["seconds_per_design"]
    cores = 100 * 2
    est = {"machines": 100, "cores_each": 2, "seconds_per_design_one_core": per_design,
           "designs_per_minute_compute_bound": 60 * cores / per_design,
           "store_commits_per_second": rate,
           "designs_per_minute": min(60 * cores / per_design, 60 * rate),
           "minutes_for_500_designs": 500 / min(60 * cores / per_design, 60 * rate)}
    print(f"\nthroughput: ResNet-18 ({len(model.layers)} distinct layers) on {len(pts)} Eyeriss-like designs, "
          f"strategy {strategy}, time limit {time_limit} s per layer")
    print(f"{'engine':<6} {'workers':>7} {'warm':>5} {'designs':>7} {'wall s':>8} {'designs/min':>12} {'s/design':>9} "
          f"{'CPU s/design':>12} {'proven layers':>14}")
    for r in rows:
        print(f"{r['engine']:<6} {r['workers']:>7} {str(r['warm_start']):>5} {r['designs']:>7} {r['wall_s']:8.1f} "
              f"{r['designs_per_minute']:12.2f} {r['seconds_per_design']:9.1f} {r['cpu_seconds_per_design']:12.1f} "
              f"{r['layers_proven_optimal']:>6} of {r['layers_mapped']:<5}")
    for r in rows:
        for label, edp in r["edp_per_design"].items():
            print(f"  {r['engine']}:{r['workers']} warm {r['warm_start']}: EDP {edp:.4g}  {label}")
    print(f"100 machines x 2 cores: {est['designs_per_minute']:.0f} designs/min (store commits "
          f"{rate:.0f}/s, so the store is not the limit); 500 designs in {est['minutes_for_500_designs']:.1f} min")
    return {"strategy": strategy, "time_limit": time_limit, "cpu_clock": cpu_clock, "runs": rows,
            "estimate_100_machines": est}


def profile_design() -> dict:
    """Where one design's mapping spends its CPU seconds: the heuristic without a binding limit on the first
    Eyeriss-like design of the throughput part, layer by layer under cProfile (which adds its own overhead), with
    the share of the CPU time of the functions that dominate."""
    import cProfile
    import pstats

    from accelmap.arch.accelerator import adopt_precision as adopt
    space = load_space(str(SPACE))
    model = load_model("resnet18")
    d = make_design(space, next(p for p in space.grid() if dict(p)["array"] == (14, 12)))
    arch = d.accelerator
    prof = cProfile.Profile()
    c0 = time.process_time()
    for layer in model.layers:
        prof.enable()
        map_operator(adopt(layer.operator, arch), arch, "edp", strategy="heuristic", time_limit=600)
        prof.disable()
    total = time.process_time() - c0
    st = pstats.Stats(prof)
    parts = {"cost model, batch (cost.batch.evaluate_batch)": "evaluate_batch",
             "  latency rows (cost.latency.latency_rows)": "latency_rows",
             "  single-buffer stall schedule (cost.latency._single_stall)": "_single_stall",
             "  access counts (cost.batch.batch_counts)": "batch_counts",
             "maximal tilings (search.tilings.maximal_tilings)": "maximal_tilings",
             "climb (search.tilings.climb)": "climb",
             "scalar model for exact orders (cost.model.evaluate)": "evaluate"}
    stats = st.stats  # type: ignore[attr-defined]
    shares = {}
    for label, fn in parts.items():
        cum = max((v[3] for k, v in stats.items() if k[2] == fn), default=0.0)
        shares[label] = cum / total
    print(f"\none design ({d.label}), ResNet-18, heuristic without a binding limit: {total:.1f} CPU s under cProfile")
    for label, share in shares.items():
        print(f"  {share:6.1%}  {label}")
    return {"design": d.label, "cpu_seconds_profiled": total, "shares": shares}


def _sweep_run(space, model, pts, strategy: str, time_limit: float, warm: bool, workers: int = 2) -> dict:
    """One sweep of ``pts`` with the heuristic's limit on the CPU clock: per design its EDP, CPU seconds and
    certificate (proven, or best found with its certified gap)."""
    load_before = os.getloadavg()[0]
    res = run_sweep(space, model, points=pts, workers=workers, store_path=None, progress=False, strategy=strategy,
                    time_limit=time_limit, warm_start=warm, cpu_clock=True)
    designs = {}
    for o in res.outcomes:
        d = o.to_dict("edp")
        designs[o.design.label] = {"edp": d.get("edp"), "cpu_seconds": d.get("cpu_seconds"), "proven": d.get("proven"),
                                   "gap": d.get("gap"), "status": o.status}
    cpu = [v["cpu_seconds"] for v in designs.values() if v["cpu_seconds"] is not None]
    return {"time_limit_cpu_s": time_limit, "warm_start": warm, "workers": workers, "wall_s": res.wall_seconds,
            "load_average_before_after": [load_before, os.getloadavg()[0]],
            "cpu_seconds_per_design": sum(cpu) / len(cpu), "cpu_seconds_per_design_max": max(cpu),
            "minutes_for_500_on_2_idle_cores": 500 * (sum(cpu) / len(cpu)) / 2 / 60, "designs": designs}


def budget(n_designs: int, budgets: list[float], reference: dict | None) -> dict:
    """The heuristic with a CPU budget per layer against the same heuristic without a binding limit, on the same
    designs: what the budget saves in CPU seconds and what it loses in EDP, design by design, and the certified
    gap each budgeted design reports."""
    space = load_space(str(SPACE))
    model = load_model("resnet18")
    pts = [p for p in space.grid() if dict(p)["array"] in ((14, 12), (16, 16))][:n_designs]
    labels = [make_design(space, p).label for p in pts]
    if reference is None or set(labels) - set(reference["designs"]):
        # A limit of 600 CPU s per layer is never reached on ResNet-18 (a whole design takes ~45 CPU s).
        reference = _sweep_run(space, model, pts, "heuristic", 600.0, False)
        print(f"reference (no binding limit): {reference['cpu_seconds_per_design']:.1f} CPU s per design", flush=True)
    runs = []
    for b in budgets:
        for warm in (False, True):
            r = _sweep_run(space, model, pts, "heuristic", b, warm)
            for label, d in r["designs"].items():
                ref = reference["designs"][label]["edp"]
                d["edp_vs_reference"] = d["edp"] / ref - 1 if d["edp"] and ref else None
            runs.append(r)
            print(f"budget {b} CPU s/layer, warm {warm}: {r['cpu_seconds_per_design']:.2f} CPU s/design", flush=True)
    print(f"\nbudgeted heuristic on {len(pts)} Eyeriss-like designs, ResNet-18, 2 workers, limits on the CPU clock")
    print(f"{'limit/layer':>11} {'warm':>5} {'CPU s/design':>12} {'max':>6} {'500 designs, min':>16} "
          f"{'EDP vs full: median':>20} {'max':>7} {'best':>7} {'max certified gap':>17}")
    for r in [dict(reference, ref=True)] + runs:
        loss = sorted(d.get("edp_vs_reference", 0.0) or 0.0 for d in r["designs"].values())
        gaps = [d["gap"] for d in r["designs"].values() if d["gap"] is not None]
        print(f"{r['time_limit_cpu_s']:>11} {str(r['warm_start']):>5} {r['cpu_seconds_per_design']:12.2f} "
              f"{r['cpu_seconds_per_design_max']:6.2f} {r['minutes_for_500_on_2_idle_cores']:16.1f} "
              f"{loss[len(loss) // 2]:20.1%} {loss[-1]:7.1%} {loss[0]:7.1%} {max(gaps) if gaps else float('nan'):17.1%}")
    return {"designs": labels, "reference": reference, "runs": runs}


def eyeriss(samples: int, strategy: str, time_limit: float | None, workers: int) -> dict:
    space = load_space(str(SPACE))
    model = load_model("resnet18")
    with tempfile.TemporaryDirectory() as d:
        res = run_sweep(space, model, points=space.sample(samples, seed=0), workers=workers,
                        store_path=Path(d) / "s.sqlite", progress=False, strategy=strategy, time_limit=time_limit)
    # The published design (Chen et al., ISCA 2016: 14x12 PEs, 108 KB global buffer, 12/224/24-word
    # scratchpads), costed by the same derived energies and mapper.
    pub, area, *_ = derive(get_accelerator("eyeriss_like"))
    mm = map_model(model, pub, strategy=strategy, time_limit_per_layer=time_limit, jobs=workers, cache_path=None,
                   progress=False)
    RESULTS.mkdir(exist_ok=True)
    plot(res, RESULTS / "dse_eyeriss.png",
         marks=(("Eyeriss (ISCA 2016 parameters)", area, mm.energy_total, mm.latency_total),))
    s = summary(res)
    front = sorted((o for o in s["outcomes"] if o["design"] in s["front_edp_area"]), key=lambda o: o["area_mm2"])
    print(f"\nEyeriss-like sweep: {len(res.outcomes)} of {space.size} designs, ResNet-18; EDP-area front:")
    print(f"{'area mm2':>9} {'energy uJ':>10} {'Mcycles':>9} {'EDP':>10}  design")
    for o in front:
        print(f"{o['area_mm2']:9.3f} {o['energy_pj'] / 1e6:10.2f} {o['latency_cycles'] / 1e6:9.3f} "
              f"{o['edp']:10.4g}  {o['design']}")
    print(f"{area:9.3f} {mm.energy_total / 1e6:10.2f} {mm.latency_total / 1e6:9.3f} "
          f"{mm.energy_total * mm.latency_total:10.4g}  Eyeriss (14x12, 108 KiB GLB, 224-word W RF)")
    return {"summary": s, "eyeriss": {"area_mm2": area, "energy_pj": mm.energy_total,
                                      "latency_cycles": mm.latency_total}, "plot": "dse_eyeriss.png"}


# The four commonly stacked ResNet layers of the thesis' Ch. 7 (conv-1 as in the Sunstone repository's
# example: P = Q = 56, R = S = 3, C = K = 64; the next three halve P, Q and double C, K as ResNet does).
SUNSTONE_LAYERS = {"conv1": (56, 64), "conv2": (28, 128), "conv3": (14, 256), "conv4": (7, 512)}


def sunstone(time_limit: float, layers: list[str]) -> dict:
    base = split_l1_base()
    levels = ("L1I", "L1W", "L1O")
    choices = (8, 16, 32, 64, 128)
    cap = components.sram(128 * 16, 16)[2]
    configs = configs_within(base, levels, choices, cap)
    rows = []
    for name in layers:
        hw, ck = SUNSTONE_LAYERS[name]
        op = adopt_precision(conv2d(name, c=ck, h=hw, w=hw, k=ck, r=3, s=3, padding=1), base)
        memo: dict = {}
        spent = [0.0]

        def mapper(c, arch, op=op, memo=memo, spent=spent):
            # One mapper run per configuration, shared by the grid and the co-search, so both see the same
            # answers (the heuristic stops at its time limit, and a second run could differ).
            if c not in memo:
                t0 = time.perf_counter()
                r = map_operator(op, arch, "edp", strategy="heuristic", time_limit=time_limit)
                spent[0] += time.perf_counter() - t0
                memo[c] = (r.best.value, r.best.mapping) if r.best else None
            return memo[c]

        co = co_search(op, base, levels, choices, configs, mapper)
        co_map_s = spent[0]
        grid = grid_search(op, base, levels, configs, mapper)
        # Rule T (the thesis' Observation 4), opt-in and uncertified: does it lose the grid's optimum?
        tiles = co_search(op, base, levels, choices, configs, mapper, tile_dominance=True)
        row = {"layer": name, "configs_in_budget": len(configs), "grid_best": grid.best, "grid_edp": grid.value,
               "co_best": co.best, "co_edp": co.value, "same_result": co.value == grid.value,
               "co_mapped": len(co.mapped), "pruned_by_bound": len(co.pruned_by_bound),
               "proven_by_incumbent": len(co.proven_by_incumbent), "dominated": len(co.dominated),
               "pruned_fraction": co.pruned_fraction, "co_seconds": co.seconds,
               "co_mapper_seconds": co_map_s, "grid_mapper_seconds": spent[0],
               "bound_gap_at_best": co.value / co.lower_bounds[co.best] - 1 if co.best else None,
               "tiles_pruned": len(tiles.pruned_by_tiles), "tiles_pruned_fraction": tiles.pruned_fraction,
               "tiles_mapped": len(tiles.mapped), "tiles_best": tiles.best, "tiles_edp": tiles.value,
               # Lost: worse than the best either certified search found (the co-search may beat the grid: rule S
               # re-prices a mapping on the smallest configuration holding it, which the heuristic can miss there).
               "tiles_lost_optimum": tiles.value > min(grid.value, co.value),
               "grid_best_pruned_by_tiles": grid.best in tiles.pruned_by_tiles}
        rows.append(row)
        print(f"{name}: {row}", flush=True)
    print("\nSunstone-arch L1 split (16x16 PEs, 128 KiB L2, L1 I/W/O in {8..128} words, area <= one 128-word "
          f"buffer: {len(configs)} configurations)")
    print(f"{'layer':<6} {'grid best (I,W,O)':>18} {'co best':>14} {'same':>5} {'mapped':>7} {'pruned':>7} "
          f"{'dominated':>9} {'bound gap':>9} {'T pruned':>9} {'T best':>14} {'T lost':>6}")
    for r in rows:
        print(f"{r['layer']:<6} {str(r['grid_best']):>18} {str(r['co_best']):>14} {str(r['same_result']):>5} "
              f"{r['co_mapped']:>7} {r['pruned_fraction']:7.0%} {r['dominated']:>9} {r['bound_gap_at_best']:9.1%} "
              f"{r['tiles_pruned_fraction']:9.0%} {str(r['tiles_best']):>14} {str(r['tiles_lost_optimum']):>6}")
    print("thesis (Table 7.1 text): same configuration as the grid for conv2-conv4, conv1 within 0.1%; up to 30% "
          "of memory configurations pruned (conv4), few to none for the earlier layers")
    return {"configs": [list(c) for c in configs], "area_cap_um2": cap, "rows": rows}


def _table71_space():
    """Table 7.1's split-L1 machine, its three buffers and the configurations within the area of one 128-word
    buffer."""
    base = split_l1_base()
    levels = ("L1I", "L1W", "L1O")
    return base, levels, configs_within(base, levels, (8, 16, 32, 64, 128), components.sram(128 * 16, 16)[2])


def capacity(incumbents: dict[str, float], layers: list[str] | None = None) -> dict:
    """Rules C and F on the Table 7.1 space, bounds only (no mapping): how far their bounds are from rule H's, and
    how many configurations F's bound would prune against ``incumbents`` (per layer, the best EDP the sunstone part
    found: a co-search with those answers prunes a configuration whose bound is at least it)."""
    from accelmap.dse.capacity_bound import capacity_energy_bound
    from accelmap.dse.fill_stall_bound import fill_stall_bound
    from accelmap.search.bounds import chain_options
    from accelmap.search.space import Constraints, keep_options
    from accelmap.search.spatial import certified_lower_bound

    base, levels, configs = _table71_space()
    rows = []
    print("\nrule C (capacity bound) beside rule H on the Table 7.1 space (bounds only)")
    for name, (hw, ck) in SUNSTONE_LAYERS.items():
        if layers is not None and name not in layers:
            continue
        op = adopt_precision(conv2d(name, c=ck, h=hw, w=hw, k=ck, r=3, s=3, padding=1), base)
        ratios, raised, traffic, f_ratios, f_best = [], 0, [], [], []
        for c in configs:
            arch = config_arch(base, levels, c)
            cons = Constraints()
            obj, e, lat = certified_lower_bound(op, arch, cons, chain_options(op, keep_options(op, arch, cons)), "edp")
            cb = capacity_energy_bound(op, arch)
            fb = fill_stall_bound(op, arch, "edp", cons, energy_floor=cb.energy_pj)
            f_ratios.append(fb.value / max(obj, cb.energy_pj * lat))
            if name in incumbents:
                f_best.append(fb.value / incumbents[name])
            ratios.append(cb.energy_pj / e)
            raised += cb.energy_pj * lat > obj
            traffic.append((cb.transfers / op.macs, cb.transfers * cb.per_transfer_pj / e, cb.per_transfer_pj, c))
        most = max(traffic)
        row = {"layer": name, "configs": len(configs), "raised_above_h": raised,
               "c_over_h_energy": [min(ratios), max(ratios)], "most_forced_words_per_mac": most[0],
               "its_energy_share_of_h": most[1], "pj_per_transfer": most[2], "at_config": list(most[3]),
               "f_over_h_and_c": [min(f_ratios), max(f_ratios)], "incumbent_edp": incumbents.get(name),
               "f_over_incumbent": [min(f_best), max(f_best)] if f_best else None,
               "f_would_prune": sum(r >= 1 for r in f_best) if f_best else None}
        rows.append(row)
        print(f"{name}: C above H on {raised} of {len(configs)}; C/H energy {min(ratios):.3f}-{max(ratios):.3f}; "
              f"most forced traffic {most[0]:.3f} words/MAC on {most[3]} at {most[2]:.3g} pJ each, "
              f"{most[1]:.2%} of H's energy bound; F/max(H, C) {min(f_ratios):.3f}-{max(f_ratios):.3f}"
              + (f"; F/incumbent {min(f_best):.3f}-{max(f_best):.3f}, prunes {row['f_would_prune']}" if f_best else ""),
              flush=True)
    return {"rows": rows}


SPACE_504 = resources.files("accelmap") / "data" / "dse" / "eyeriss_sweep_504.yaml"


def sweep500(design_budget: float, store: str, first: int | None, reference_at: list[int], neighbours: int,
             at: list[int] | None = None, budget_weight: str = "even") -> dict:
    """The 504-design ResNet-18 sweep as a user runs it (2 local workers, the heuristic with ``design_budget`` CPU
    seconds per design split over the layers, warm starts from ``neighbours`` neighbours, rule D), resumable from
    ``store``; ``first``: only the first designs in order of area (the order rule D maps them in). Per design its
    status, CPU seconds and EDP; against the same heuristic without a binding limit (600 CPU s per layer, stored in
    the same store) on the designs at positions ``reference_at`` of that order. ``at``: instead of the first designs,
    only those at these positions (a sample, e.g. neighbouring designs of one array size, so they warm-start each
    other as in the full sweep). ``budget_weight``: how the budget is shared between the designs
    (``dse.layer_budget``; ``unrollings``: by the spatial unrollings the heuristic ranks, the same average)."""
    space = load_space(str(SPACE_504))
    model = load_model("resnet18")
    pts = sorted(space.points(), key=lambda p: make_design(space, p).area_mm2)
    t0 = time.perf_counter()
    load_before = os.getloadavg()[0]
    res = run_sweep(space, model, points=[pts[i] for i in at] if at else pts[:first], workers=2, store_path=store, progress=False,
                    strategy="heuristic", design_budget=design_budget, warm_start=True, warm_neighbours=neighbours,
                    prune=True, budget_weight=budget_weight)
    wall = time.perf_counter() - t0
    outs = {o.design.label: o for o in res.outcomes}
    cpu = {st: [o.run.result["cpu_seconds"] for o in res.outcomes if o.status == st and o.run] for st in
           ("mapped", "pruned")}
    all_cpu = cpu["mapped"] + cpu["pruned"]
    ref = run_sweep(space, model, points=[pts[i] for i in reference_at], workers=1, store_path=store,
                    progress=False, strategy="heuristic", time_limit=600.0, cpu_clock=True)
    losses = []
    for o in ref.outcomes:
        mine = outs.get(o.design.label)
        losses.append({"design": o.design.label, "reference_edp": o.edp,
                       "reference_cpu_s": o.run.result.get("cpu_seconds") if o.run else None,
                       "status": mine.status if mine else "not in this run",
                       "edp": mine.edp if mine and mine.ok else None,
                       "edp_vs_reference": mine.edp / o.edp - 1 if mine and mine.ok else None})
    out = {"designs": len(res.outcomes), "of": len(pts), "positions": at,
           "mapped": len(cpu["mapped"]), "pruned": len(cpu["pruned"]),
           "mapped_now": res.mapped_now, "wall_s_this_call": wall, "load_average_before_after":
           [load_before, os.getloadavg()[0]], "design_budget_cpu_s": design_budget, "warm_neighbours": neighbours,
           "budget_weight": budget_weight,
           "cpu_s_per_mapped_design": sum(cpu["mapped"]) / max(1, len(cpu["mapped"])),
           "cpu_s_per_pruned_design": sum(cpu["pruned"]) / max(1, len(cpu["pruned"])),
           "cpu_s_total": sum(all_cpu), "minutes_on_2_idle_cores": sum(all_cpu) / 2 / 60,
           "loss_vs_unbudgeted": losses,
           "outcomes": [{"design": o.design.label, "area_mm2": o.area, "status": o.status,
                         "edp": o.edp if o.ok else None, "cpu_s": o.run.result.get("cpu_seconds") if o.run else None,
                         "seconds": o.run.seconds if o.run else None, "reason": o.reason} for o in res.outcomes]}
    which = "at " + ",".join(map(str, at)) if at else "first by area"
    print(f"\n504-design sweep, {len(res.outcomes)} designs ({which}): {out['mapped']} mapped, {out['pruned']} "
          f"pruned by rule D; CPU s per mapped design {out['cpu_s_per_mapped_design']:.2f}, per pruned "
          f"{out['cpu_s_per_pruned_design']:.2f}; {out['minutes_on_2_idle_cores']:.1f} min of 2 idle cores")
    for row in losses:
        print(f"  {row['design']}: {row['status']}, EDP vs unbudgeted "
              + (f"{row['edp_vs_reference']:+.1%}" if row["edp_vs_reference"] is not None else "-"))
    return out


def root_bounds(incumbents: dict[str, float]) -> dict:
    """Rule R (``dse.root_bound``: the exact search's own S1 and root bounds as a per-configuration prune) on the
    Table 7.1 space, bounds only, against each layer's incumbent (the best EDP the sunstone part found)."""
    from accelmap.dse.root_bound import beaten_by_root_bounds

    base, levels, configs = _table71_space()
    rows = []
    print("\nrule R (the exact search's root bounds) per configuration on the Table 7.1 space")
    for name, (hw, ck) in SUNSTONE_LAYERS.items():
        if name not in incumbents:
            continue
        inc = incumbents[name]
        op = adopt_precision(conv2d(name, c=ck, h=hw, w=hw, k=ck, r=3, s=3, padding=1), base)
        c0 = time.process_time()
        checks = [(c, beaten_by_root_bounds(op, config_arch(base, levels, c), "edp", inc)) for c in configs]
        ratios = [r.ratio for _, r in checks if r.ratio is not None]
        row = {"layer": name, "incumbent_edp": inc, "configs": len(configs),
               "pruned": [list(c) for c, r in checks if r.beaten],
               "bound_over_incumbent_where_kept": [min(ratios), max(ratios)] if ratios else None,
               "cpu_seconds": time.process_time() - c0}
        rows.append(row)
        print(f"{name}: pruned {len(row['pruned'])} of {len(configs)} {row['pruned']}; bound / incumbent where kept: "
              f"{min(ratios):.3f}-{max(ratios):.3f}; {row['cpu_seconds']:.1f} CPU s", flush=True)
    return {"rows": rows}


def root_order(time_limit: float, layers: list[str], unrollings: int) -> dict:
    """Rule R as a check in rule H's order (``co_search(..., root_bounds=True)``) beside rule R as the order
    (``root_order=True``) on the Table 7.1 space: configurations mapped and cut, and CPU seconds. Every
    configuration is mapped at most once by the heuristic (``time_limit`` CPU seconds) and the answer shared by the
    searches, so they see the same values; each search is charged the bounds it computed (CPU seconds of the call
    minus the mapping done in it) plus the mapping of the configurations it mapped."""
    from accelmap.search.heuristic_config import HeuristicConfig

    base, levels, configs = _table71_space()
    config = HeuristicConfig(cpu_clock=True)
    rows = []
    print(f"\nrule R in rule H's order and as the order, Table 7.1 space ({len(configs)} configurations), "
          f"heuristic {time_limit} CPU s per configuration")
    for name in layers:
        hw, ck = SUNSTONE_LAYERS[name]
        op = adopt_precision(conv2d(name, c=ck, h=hw, w=hw, k=ck, r=3, s=3, padding=1), base)
        memo: dict = {}
        cpu: dict = {}

        def mapper(c, arch, op=op, memo=memo, cpu=cpu):
            if c not in memo:
                c0 = time.process_time()
                r = map_operator(op, arch, "edp", strategy="heuristic", time_limit=time_limit, heuristic_config=config)
                cpu[c] = time.process_time() - c0
                memo[c] = (r.best.value, r.best.mapping) if r.best else None
            return memo[c]

        runs = {}
        for how, kw in (("H", {}), ("H order, R check", {"root_bounds": True}),
                        ("R order", {"root_order": True, "root_order_unrollings": unrollings}),
                        ("R order, R check", {"root_order": True, "root_order_unrollings": unrollings,
                                              "root_bounds": True})):
            before = sum(cpu.values())
            c0 = time.process_time()
            res = co_search(op, base, levels, (8, 16, 32, 64, 128), configs, mapper, **kw)
            own = time.process_time() - c0 - (sum(cpu.values()) - before)
            runs[how] = {"value": res.value, "best": list(res.best) if res.best else None, "mapped": len(res.mapped),
                         "pruned_by_bound": len(res.pruned_by_bound),
                         "pruned_by_root_bounds": [list(c) for c in res.pruned_by_root_bounds],
                         "raised_by_root_bounds": len(res.raised_by_root_bounds),
                         "proven_by_incumbent": len(res.proven_by_incumbent),
                         "bounds_cpu_s": own, "mapping_cpu_s": sum(cpu[c] for c in res.mapped if c in cpu),
                         "cpu_s": own + sum(cpu[c] for c in res.mapped if c in cpu)}
            print(f"{name} {how}: best {res.best} {res.value:.4g}; mapped {len(res.mapped)}, cut by H "
                  f"{len(res.pruned_by_bound)}, by R {len(res.pruned_by_root_bounds)}; bounds {own:.1f} CPU s, "
                  f"mapping {runs[how]['mapping_cpu_s']:.1f}", flush=True)
        rows.append({"layer": name, "configs": len(configs), "runs": runs,
                     "same_result": len({r["value"] for r in runs.values()}) == 1})
    return {"time_limit_cpu_s": time_limit, "unrollings": unrollings, "rows": rows}


def prunable(time_limit: float, layers: list[str], k: int) -> dict:
    """How tight a certified bound must be to prune a Table 7.1 configuration. Each configuration is mapped once by
    the heuristic (``time_limit`` CPU seconds, its ``k`` best mappings kept); every mapping found on any
    configuration is then re-priced on every configuration it is valid on (the cost model, one evaluation each), so
    U(c), the least value over those, is the EDP of a real mapping of c: an upper bound of c's optimum. The incumbent
    is the least U. A certified bound LB(c) prunes c only if LB(c) >= incumbent, and LB(c) <= opt(c) <= U(c), so it
    must reach at least incumbent / U(c) of c's optimum; rules H and C's bound (``lower_bound``) is put beside it."""
    from accelmap.cost.model import evaluate
    from accelmap.dse.memory_search import lower_bound
    from accelmap.errors import AccelmapError
    from accelmap.search.heuristic_config import HeuristicConfig

    base, levels, configs = _table71_space()
    archs = {c: config_arch(base, levels, c) for c in configs}
    rows = []
    for name in layers:
        hw, ck = SUNSTONE_LAYERS[name]
        op = adopt_precision(conv2d(name, c=ck, h=hw, w=hw, k=ck, r=3, s=3, padding=1), base)
        c0 = time.process_time()
        found = []
        for c in configs:
            r = map_operator(op, archs[c], "edp", strategy="heuristic", time_limit=time_limit, k=k,
                             heuristic_config=HeuristicConfig(cpu_clock=True))
            found += [(c, f.mapping) for f in r.results]
        map_s = time.process_time() - c0
        c0 = time.process_time()
        upper, own = {}, {}
        for c in configs:
            best = float("inf")
            for src, m in found:
                try:
                    v = evaluate(op, archs[c], m).edp
                except AccelmapError:        # does not fit c (or its unrolling does not)
                    continue
                best = min(best, v)
                if src == c:
                    own[c] = min(own.get(c, v), v)
            upper[c] = best
        price_s = time.process_time() - c0
        inc = min(upper.values())
        bounds = {c: lower_bound(op, archs[c], "edp") for c in configs}
        need = sorted(inc / upper[c] for c in configs)
        has = sorted(bounds[c] / upper[c] for c in configs)
        within = {f"{p:.0%}": sum(1 for c in configs if upper[c] <= inc * (1 + p)) for p in (0.01, 0.05, 0.10, 0.20)}
        row = {"layer": name, "configs": len(configs), "incumbent_edp": inc,
               "incumbent_config": min(configs, key=lambda c: upper[c]),
               "mapped_cpu_s": map_s, "repriced_cpu_s": price_s, "mappings": len(found),
               "improved_by_repricing": sum(1 for c in configs if upper[c] < own.get(c, float("inf")) * (1 - 1e-12)),
               "configs_within_of_incumbent": within, "worst_upper_over_incumbent": max(upper.values()) / inc,
               "needed_bound_over_optimum_min_median_max": [need[0], need[len(need) // 2], need[-1]],
               "h_c_bound_over_upper_min_median_max": [has[0], has[len(has) // 2], has[-1]],
               "h_c_would_prune": sum(1 for c in configs if bounds[c] >= inc),
               "per_config": [{"config": list(c), "upper_edp": upper[c], "own_edp": own.get(c),
                               "h_c_bound": bounds[c]} for c in configs]}
        rows.append(row)
        print(f"{name}: incumbent {inc:.4g} on {row['incumbent_config']}; configurations within 1/5/10/20% of it: "
              f"{list(within.values())} of {len(configs)}; worst U/incumbent {row['worst_upper_over_incumbent']:.3f}; "
              f"a pruning bound must reach {need[0]:.3f}-{need[-1]:.3f} (median {need[len(need) // 2]:.3f}) of the "
              f"optimum; H+C reach at most {has[0]:.3f}-{has[-1]:.3f} of U (median {has[len(has) // 2]:.3f}); "
              f"{map_s:.0f} CPU s mapping, {price_s:.0f} re-pricing", flush=True)
    return {"time_limit_cpu_s": time_limit, "k": k, "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", default="engines,throughput,eyeriss,sunstone")
    ap.add_argument("--designs", type=int, default=4, help="designs per engine in the throughput part")
    ap.add_argument("--strategy", default="auto")
    ap.add_argument("--engines", default="local:1,local:2,dask:2",
                    help="engine:workers runs of the throughput part, comma-separated")
    ap.add_argument("--time-limit", type=float, default=None, help="mapper seconds per layer (sweeps)")
    ap.add_argument("--warm-start", choices=("off", "on", "both"), default="off",
                    help="throughput: start each design from its mapped neighbours' mappings (both: a run of each)")
    ap.add_argument("--cpu-clock", action="store_true",
                    help="throughput: the heuristic's --time-limit per layer counts CPU seconds")
    ap.add_argument("--budgets", default="0.4",
                    help="budget part: CPU seconds per layer for the heuristic, comma-separated")
    ap.add_argument("--reuse-reference", action="store_true",
                    help="budget part: take the unbudgeted reference from --out if it has these designs")
    ap.add_argument("--design-budget", type=float, default=5.4, help="sweep500: CPU seconds per design")
    ap.add_argument("--warm-neighbours", type=int, default=4, help="sweep500: neighbours giving warm starts")
    ap.add_argument("--budget-weight", default="even", choices=("even", "unrollings"),
                    help="sweep500: the design budget the same for every design, or by the heuristic's unrollings")
    ap.add_argument("--sweep-key", default="sweep500",
                    help="sweep500: the key of --out the results go under (several runs in one file)")
    ap.add_argument("--store", default=str(Path.home() / ".cache" / "accelmap" / "dse_sweep500.sqlite"),
                    help="sweep500: the result store (resumable)")
    ap.add_argument("--sweep-designs", type=int, default=None,
                    help="sweep500: only the first N designs in order of area (default all 504)")
    ap.add_argument("--sweep-at", default=None,
                    help="sweep500: only the designs at these positions in order of area (comma-separated), a sample")
    ap.add_argument("--reference-at", default="5,17,25,40",
                    help="sweep500: positions (in order of area) of the designs mapped without a binding limit")
    ap.add_argument("--eyeriss-samples", type=int, default=12)
    ap.add_argument("--sunstone-time-limit", type=float, default=2.0)
    ap.add_argument("--sunstone-layers", default="conv1,conv2,conv3,conv4")
    ap.add_argument("--prunable-time-limit", type=float, default=1.0,
                    help="prunable: heuristic CPU seconds per configuration")
    ap.add_argument("--rootorder-time-limit", type=float, default=0.5,
                    help="rootorder: heuristic CPU seconds per configuration")
    ap.add_argument("--rootorder-unrollings", type=int, default=1,
                    help="rootorder: unrollings bounded at the root per configuration for the order")
    ap.add_argument("--prunable-k", type=int, default=3, help="prunable: best mappings kept per configuration")
    ap.add_argument("--ray-python", default=None, help="a Python with Ray installed, for the engine overhead")
    ap.add_argument("--out", default=str(RESULTS / "dse.json"))
    args = ap.parse_args()
    parts = args.parts.split(",")
    out_path = Path(args.out)
    out: dict = json.loads(out_path.read_text()) if out_path.exists() else {}
    out["machine"] = {"cpus": os.cpu_count(), "load_average": os.getloadavg()}
    for part in parts:
        if part == "engines":
            out["engines"] = engines(args.ray_python)
        elif part == "throughput":
            import importlib.util
            runs = [(e, int(w)) for e, w in (x.split(":") for x in args.engines.split(","))]
            if importlib.util.find_spec("distributed") is None:
                runs = [r for r in runs if r[0] != "dask"]
            warm = {"off": (False,), "on": (True,), "both": (False, True)}[args.warm_start]
            out["throughput"] = throughput(args.designs, args.strategy, args.time_limit, runs, warm, args.cpu_clock)
        elif part == "eyeriss":
            out["eyeriss"] = eyeriss(args.eyeriss_samples, args.strategy, args.time_limit, 2)
        elif part == "profile":
            out["profile"] = profile_design()
        elif part == "budget":
            ref = out.get("budget", {}).get("reference") if args.reuse_reference else None
            out["budget"] = budget(args.designs, [float(b) for b in args.budgets.split(",")], ref)
        elif part == "capacity":
            out["capacity"] = capacity({r["layer"]: min(r["grid_edp"], r["co_edp"])
                                        for r in out.get("sunstone", {}).get("rows", [])},
                                       args.sunstone_layers.split(","))
        elif part == "sweep500":
            out[args.sweep_key] = sweep500(args.design_budget, args.store, args.sweep_designs,
                                       [int(x) for x in args.reference_at.split(",") if x], args.warm_neighbours,
                                       [int(x) for x in args.sweep_at.split(",")] if args.sweep_at else None,
                                       args.budget_weight)
        elif part == "rootbound":
            # Against the best EDP known per layer: the sunstone part's, or the prunable part's re-priced incumbent.
            best = {r["layer"]: min(r["grid_edp"], r["co_edp"]) for r in out.get("sunstone", {}).get("rows", [])}
            for r in out.get("prunable", {}).get("rows", []):
                best[r["layer"]] = min(best.get(r["layer"], r["incumbent_edp"]), r["incumbent_edp"])
            out["rootbound"] = root_bounds(best)
        elif part == "rootorder":
            out["rootorder"] = root_order(args.rootorder_time_limit, args.sunstone_layers.split(","),
                                          args.rootorder_unrollings)
        elif part == "prunable":
            out["prunable"] = prunable(args.prunable_time_limit, args.sunstone_layers.split(","), args.prunable_k)
        elif part == "sunstone":
            out["sunstone"] = sunstone(args.sunstone_time_limit, args.sunstone_layers.split(","))
        else:
            sys.exit(f"unknown part {part!r}")
        RESULTS.mkdir(exist_ok=True)
        out_path.write_text(json.dumps(out, indent=2, default=str))
    print(f"\nwrote {out_path}")


if __name__ == "__main__":
    main()
