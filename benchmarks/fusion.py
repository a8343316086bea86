"""Layer fusion against layer-by-layer mapping: off-chip traffic, energy, latency, EDP and search time.

1. VGG-16 conv1-5 (conv1_1 .. conv3_1 with the two pooling layers between them) on eyeriss_like with
   its global buffer set to the on-chip budget of Alwani et al. (MICRO 2016, "Fused-layer CNN
   accelerators": 77 MB -> 3.6 MB of off-chip feature-map traffic per image with 362 KB on chip).
   Printed: the feature maps moved off chip layer by layer (as the mapper maps each layer, and the
   ideal of every feature map read and written once), the best EDP plan, and the five layers as
   one group with its least feature-map traffic (the paper's design point).
2. ResNet-18 and the BERT-base encoder layer (and any bundled model, e.g. mobilenetv2) on
   eyeriss_like, tpu_like (and e.g. simba_like): the whole model, layer by layer and fused (the best
   EDP plan; residual adds after chains joined into groups), with the fusion search's time; every
   fused group of the plan is then run by the simulator (``accelmap.sim.fused``) with the same block
   mappings: its cycles against the model's, its off-chip transfers against the model's counts, and
   its cycles with double-buffered staging of the off-chip loads instead of unlimited prefetch. With
   ``--exact`` the fusion search tries every tile size (``--fuse-exact`` of ``accelmap map``) and the
   row reports its certificate: optimal, or the best found with a proven lower bound and gap.

    python benchmarks/fusion.py [--time-limit 10] [--tile-time-limit 1] [--parts vgg models]
        [--models resnet18 bert_base_layer] [--archs eyeriss_like tpu_like] [--exact] [--span-residuals]
        [--tile-reuse] [--cpu-clock] [--out FILE]

Layer-by-layer mappings come from the mapper (heuristic where the space is large, a time limit per
layer; kept in accelmap's default result cache, so a rerun only redoes the fusion). Times
are wall seconds on whatever machine runs it; on a shared 2-core machine they are several times a
quiet machine's. Writes benchmarks/results/fusion.json.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import replace
from pathlib import Path

from accelmap.arch.presets import get_accelerator
from accelmap.fusion.chain import fusable_chains
from accelmap.fusion.group_cost import InnerMappings, Producer, fmap_bits, offchip_bits, store_index
from accelmap.fusion.model_fusion import TILE_HEURISTIC, fuse_model, mapper_search, model_producers
from accelmap.fusion.search import (
    DEFAULT_FUSION,
    EXACT_FUSION,
    FusionConfig,
    SearchLog,
    group_candidates,
    group_producers,
)
from accelmap.search.cache import default_cache_path
from accelmap.search.heuristic_config import DEFAULT_HEURISTIC
from accelmap.search.model_mapper import map_model
from accelmap.sim.fused import simulate_fused
from accelmap.workload.models import load_model
from accelmap.workload.models.bundled import bundled_model_path
from accelmap.workload.models.chains import model_chains
from accelmap.workload.models.result import ModelImport

RESULTS = Path(__file__).resolve().parent / "results"
VGG_CONV1_5 = ("features.0", "features.1", "features.2", "features.3", "features.4")
ALWANI_KB = 362


def with_store(arch_name: str, kib: int):
    arch = get_accelerator(arch_name)
    s = store_index(arch)
    lv = arch.levels[s]
    levels = arch.levels[:s] + (replace(lv, capacity_bits=kib * 1024 * 8),) + arch.levels[s + 1:]
    return replace(arch, name=f"{arch.name}-{lv.name}{kib}KB", levels=levels)


def mb(bits: float) -> float:
    return bits / 8 / 1e6


def vgg_part(time_limit: float, tile_limit: float, cache: Path) -> dict:
    arch = with_store("eyeriss_like", ALWANI_KB)
    full = load_model("vgg16")
    layers = tuple(l for l in full.layers if set(l.nodes) & set(VGG_CONV1_5))
    m = ModelImport("vgg16_conv1-5", full.source, layers)
    mm = map_model(m, arch, "edp", time_limit_per_layer=time_limit, jobs=1, cache_path=cache, progress=False)
    t0 = time.perf_counter()
    inner = InnerMappings(mapper_search("edp", tile_limit))
    fm = fuse_model(mm, tile_time_limit=tile_limit, inner=inner)
    fuse_s = time.perf_counter() - t0
    ops = {n: l.layer.operator for l in mm.layers for n in l.layer.nodes}
    res = {n: l.result for l in mm.layers for n in l.layer.nodes}
    top = arch.levels[0].name
    lbl_fmap = sum(fmap_bits(ops[n], res[n], top) for n in VGG_CONV1_5 if res[n] is not None)
    ideal = sum(_stored_input(ops[n]) + ops[n].footprint(ops[n].output) for n in VGG_CONV1_5)
    bits = ops["features.0"].output.bits
    # The paper's design point: the five layers as one group, its least feature-map traffic.
    (chain,) = fusable_chains(model_chains(bundled_model_path("vgg16"), set(VGG_CONV1_5))[0], ops)
    t1 = time.perf_counter()
    whole = group_candidates(chain, 0, 4, arch, inner, FusionConfig(row_tiles=10, col_tiles=5, per_mode=3),
                             SearchLog())
    whole_s = time.perf_counter() - t1
    best_whole = min(whole, key=lambda g: g.fmap_bits) if whole else None
    sims = simulate_groups(fm.groups + ((best_whole,) if best_whole else ()), fm.chains + (chain,), arch, inner)
    out = {
        "accelerator": arch.name, "precision_bits": bits,
        "layer_by_layer": {"fmap_bits_mapped": lbl_fmap, "fmap_elements_ideal": ideal,
                           "energy_pj": fm.unfused.energy, "latency_cycles": fm.unfused.latency,
                           "offchip_bits": fm.unfused.offchip_bits},
        "best_edp_plan": {**fm.to_dict()["fused"], "groups": fm.to_dict()["groups"],
                          "fmap_bits": sum(f for _, _, f in fm.layer_fmap), "search_seconds": fuse_s},
        "one_group": None if best_whole is None else {
            "tile": [best_whole.tile_rows, best_whole.tile_cols], "policy": best_whole.policies[0],
            "tiles": best_whole.counts.tiles, "buffer_bits": best_whole.counts.buffer_total_bits,
            "fmap_bits": best_whole.fmap_bits, "offchip_bits": best_whole.offchip_bits,
            "energy_pj": best_whole.energy, "latency_cycles": best_whole.latency,
            "recomputed_macs": sum(best_whole.counts.macs) - sum(best_whole.macs_once),
            "search_seconds": whole_s, "candidates": len(whole)},
        "simulated_groups": sims,
        "alwani_micro2016": {"fmap_mb_layer_by_layer": 77, "fmap_mb_fused": 3.6, "on_chip_kb": ALWANI_KB},
    }
    print(f"\nVGG-16 conv1-5 on {arch.name} ({bits}-bit feature maps; MB = 10^6 bytes)")
    print(f"{'plan':<44} {'fmap MB':>9} {'fmap MB @32b':>13} {'off-chip MB':>12} {'energy uJ':>11} "
          f"{'latency Mcyc':>13}")
    u = fm.unfused
    print(f"{'layer by layer, as mapped':<44} {mb(lbl_fmap):>9.2f} {mb(lbl_fmap) * 32 / bits:>13.2f} "
          f"{mb(u.offchip_bits):>12.2f} {u.energy / 1e6:>11.1f} {u.latency / 1e6:>13.2f}")
    print(f"{'layer by layer, each map read/written once':<44} {ideal * bits / 8e6:>9.2f} {ideal * 4 / 1e6:>13.2f}")
    b = fm.best
    bf = sum(f for _, _, f in fm.layer_fmap)
    print(f"{'fused, best EDP plan':<44} {mb(bf):>9.2f} {mb(bf) * 32 / bits:>13.2f} {mb(b.offchip_bits):>12.2f} "
          f"{b.energy / 1e6:>11.1f} {b.latency / 1e6:>13.2f}")
    if best_whole is not None:
        g = best_whole
        label = f"fused, one group, tile {g.tile_rows}x{g.tile_cols} {g.policies[0]}"
        print(f"{label:<44} {mb(g.fmap_bits):>9.2f} {mb(g.fmap_bits) * 32 / bits:>13.2f} "
              f"{mb(g.offchip_bits):>12.2f} {g.energy / 1e6:>11.1f} {g.latency / 1e6:>13.2f}")
    else:
        print("fused, one group: no tile of the five layers fits the budget")
    print(f"{'Alwani et al. (MICRO 2016), 32-bit floats':<44} {'':>9} {'77 -> 3.6':>13}")
    print(f"fusion search {fuse_s:.0f} s (best plan), {whole_s:.0f} s (one group); {fm.tile_searches} tile mappings")
    for grp in fm.groups:
        print(f"  group {' > '.join(grp.names)}: tile {grp.tile_rows}x{grp.tile_cols}, {grp.policies[0]}, "
              f"{grp.counts.buffer_total_bits / 8192:.0f} KiB of buffers")
    if best_whole is not None:
        print(f"  one group: {best_whole.counts.buffer_total_bits / 8192:.0f} KiB of buffers, "
              f"{best_whole.counts.tiles} tiles, {len(whole)} candidates fit")
    print("simulated (the best plan's groups, then the one group):")
    print_sims(sims)
    return out


def _stored_input(op) -> int:
    """Elements of the input as stored (without the padding the cost model moves)."""
    return math.prod(op.inputs[0].shape)


def models_part(models: list[str], archs: list[str], time_limit: float, tile_limit: float, cache: Path,
                exact: bool = False, span: bool = False, compare_span: bool = False, tile_reuse: bool = False,
                cpu_clock: bool = False, knobs: dict | None = None) -> list:
    """``knobs``: the layer-by-layer mapper's heuristic knobs other than its defaults (``HeuristicConfig`` fields)."""
    rows = []
    print(f"\n{'model':<16} {'accelerator':<13} {'groups':>6} {'kept':>4} {'energy':>8} {'latency':>8} {'EDP':>8} "
          f"{'off-chip':>9} {'fmaps':>8} {'LBL s':>7} {'fuse s':>7} {'fuse cpu':>8} {'sim err':>7}   (unfused / "
          "fused; kept: groups keeping a residual's skip on chip; sim err: the worst |model - simulator| / "
          "simulator latency over the fused groups)")
    for model in models:
        for arch_name in archs:
            arch = get_accelerator(arch_name)
            m = load_model(model)
            t0, c0 = time.perf_counter(), time.process_time()
            # cpu_clock: the per-layer and per-tile limits count this process's CPU seconds, so that the mappings
            # found do not depend on the machine's load.
            mm = map_model(m, arch, "edp", time_limit_per_layer=time_limit, jobs=1, cache_path=cache, progress=False,
                           heuristic_config=replace(DEFAULT_HEURISTIC, cpu_clock=cpu_clock, **(knobs or {})))
            lbl_s, lbl_cpu = time.perf_counter() - t0, time.process_time() - c0
            inner = InnerMappings(mapper_search("edp", tile_limit, replace(TILE_HEURISTIC, cpu_clock=cpu_clock)),
                                  reuse_across_room=tile_reuse)
            # --compare-span: without spanning, then with it on the same tile mappings (found once, shared), so
            # that the difference is the spanning groups' alone, not the time-limited tile searches' luck.
            for sp in ((False, True) if compare_span else (span,)):
                rows.append(one_plan(model, arch_name, arch, mm, lbl_s, inner, tile_limit, exact, sp))
                rows[-1].update({"layer_by_layer_cpu_seconds": lbl_cpu, "heuristic_knobs": knobs or {},
                                 "layer_by_layer_energy": mm.energy_total, "layer_by_layer_latency": mm.latency_total})
    return rows


def one_plan(model: str, arch_name: str, arch, mm, lbl_s: float, inner: InnerMappings, tile_limit: float,
             exact: bool, span: bool) -> dict:
    """The fusion search on one layer-by-layer mapping, its row printed and its groups simulated."""
    t1, c1 = time.perf_counter(), time.process_time()
    config = replace(EXACT_FUSION if exact else DEFAULT_FUSION, span_residuals=span)
    fm = fuse_model(mm, tile_time_limit=tile_limit, inner=inner, config=config)
    fuse_s, fuse_cpu = time.perf_counter() - t1, time.process_time() - c1
    u, b = fm.unfused, fm.best
    fu = sum(x for _, x, _ in fm.layer_fmap)
    ff = sum(x for _, _, x in fm.layer_fmap)
    sims = simulate_groups(fm.groups, fm.chains, arch, inner, model_producers(mm, fm.chains))
    worst = max((abs(x["model_error"]) for x in sims), default=0.0)
    kept = sum(1 for g in fm.groups if g.skip_policy == "kept")
    spanning = sum(1 for g in fm.groups if g.inner_joins)
    row = {"model": model, "accelerator": arch_name, "span_residuals": span, "layer_by_layer_seconds": lbl_s,
           "fusion_seconds": fuse_s, "fusion_cpu_seconds": fuse_cpu, "fmap_bits_unfused": fu,
           "fmap_bits_fused": ff, "spanning_groups": spanning, **fm.to_dict(), "simulated_groups": sims}
    label = f"{arch_name}{' span' if span else ''}"
    print(f"{model:<16} {label:<13} {len(fm.groups):>6} {kept:>4} {u.energy / b.energy:>7.2f}x "
          f"{u.latency / b.latency:>7.2f}x {u.energy * u.latency / (b.energy * b.latency):>7.2f}x "
          f"{u.offchip_bits / b.offchip_bits:>8.2f}x {fu / max(ff, 1):>7.2f}x {lbl_s:>7.0f} {fuse_s:>7.0f}"
          f" {fuse_cpu:>8.0f} {worst:>7.2%}")
    if fm.certificate is not None:
        gap = fm.gap
        print(f"    exact tile search: {fm.certificate}, lower bound {fm.lower_bound:.4g}"
              + (f", gap {gap:.1%}" if gap is not None else "")
              + f"; {fm.stats.candidates_costed} costed, {fm.stats.candidates_pruned} pruned, "
                f"{fm.stats.candidates_unresolved} unresolved, {fm.stats.inexact_groups} groups too large")
    print(f"    off-chip MB: layer by layer {mb(u.offchip_bits):.3f}, fused {mb(b.offchip_bits):.3f}; "
          f"EDP {u.energy * u.latency:.4g} -> {b.energy * b.latency:.4g}; {spanning} groups span blocks")
    print_sims(sims)
    return row


def print_sims(sims: list[dict]) -> None:
    for x in sims:
        join = "".join(f" + {a} inside (skip {sp})" for a, sp in x.get("inner_joins", []))
        join += f" + {x['join']} (skip {x['skip']})" if x.get("join") else ""
        join += "".join(f", {p} in store" for p in x.get("producers_on_chip", []))
        join += f", {x['head_tile']} heads per head tile" if x.get("head_tile") else ""
        print(f"    sim {' > '.join(x['stages'])}{join}: tile {x['tile'][0]}x{x['tile'][1]} {x['policy']}, "
              f"{x['tiles']} tiles: model {x['model_cycles']:,.0f}, simulated {x['sim_cycles']:,.0f} cycles "
              f"({x['model_error']:+.2%}), off-chip bits {'equal' if x['offchip_equal'] else 'DIFFERENT'}; "
              f"blocks alone: model {x['model_block_cycles']:,.0f}, simulated {x['sim_block_cycles']:,.0f}; "
              f"double-buffered staging {x['sim_cycles_double_buffered']:,.0f} cycles; {x['sim_seconds']:.1f} s")
        for b in x.get("block_errors", [])[:3]:
            share = "" if b["share_of_group_error"] is None else f", {b['share_of_group_error']:.0%} of the group's"
            print(f"      block {b['stage']} {b['rows']}x{b['cols']} x{b['runs']}: model {b['model_cycles']:,.1f}, "
                  f"simulated {b['sim_cycles']:,.1f} ({b['error']:+.2%}{share})")


def simulate_groups(groups, chains, arch, inner: InnerMappings,
                    producers: dict[str, Producer] | None = None, shared_port: bool = False) -> list[dict]:
    """Fused groups run by the simulator with the model's own block mappings (and the producers the plan has
    leave their outputs in the store: then the off-chip bits compared are the group's and its producers').
    ``shared_port``: the off-chip loads and write-backs take turns on one port, as the plan was costed."""
    out = []
    top = arch.levels[0].name
    for g in groups:
        chain = next(c for c in chains if set(g.names) <= {s.name for s in c.stages})
        names = [s.name for s in chain.stages]
        a = names.index(g.names[0])
        stages = chain.stages[a:a + len(g.names)]
        by_name = {ms.stage.name: ms for ms in chain.mac_stages}
        macs = {i: by_name[s.name] for i, s in enumerate(stages) if s.name in by_name}
        kept = {n: (producers or {})[n] for n in g.producers_on_chip}
        ops = [n for n in g.names if n in chain.nodes]
        produced = group_producers(chain, chain.nodes.index(ops[0]), chain.nodes.index(ops[-1]), kept)
        t0 = time.perf_counter()
        sim = simulate_fused(stages, macs, arch, g.tile_rows, g.tile_cols, g.policies, inner, g.weights_resident,
                             g.latency, join=g.join, skip_policy=g.skip_policy or "re-read", inner_joins=g.inner_joins,
                             producers=produced, head_tile=g.head_tile, norms=g.norms, input_held=g.input_held,
                             shared_port=shared_port)
        sim_s = time.perf_counter() - t0
        db = simulate_fused(stages, macs, arch, g.tile_rows, g.tile_cols, g.policies, inner, g.weights_resident,
                            prefetch_tiles=1, join=g.join, skip_policy=g.skip_policy or "re-read",
                            inner_joins=g.inner_joins, producers=produced, head_tile=g.head_tile, norms=g.norms,
                            input_held=g.input_held, shared_port=shared_port)
        # the model credits the producers' saved writes to the group; the simulator counts them apart
        alone = sum(offchip_bits(p.operator, p.result, top) for p in produced.values())
        out.append({"stages": list(g.names), "tile": [g.tile_rows, g.tile_cols], "policy": g.policies[0],
                    "join": None if g.join is None else g.join.name, "skip": g.skip_policy,
                    "inner_joins": [[j.name, sp] for j, sp in g.inner_joins], "head_tile": g.head_tile,
                    "weights_resident": g.weights_resident, "tiles": sim.tiles, "model_cycles": g.latency,
                    "sim_cycles": sim.cycles, "model_error": sim.model_error or 0.0,
                    "offchip_equal": sim.offchip_bits + sim.producer_offchip_bits == g.offchip_bits + alone
                    and sim.macs == g.counts.macs,
                    "sim_offchip_bits": sim.offchip_bits, "model_offchip_bits": g.offchip_bits,
                    "producers_on_chip": list(g.producers_on_chip),
                    "sim_producer_offchip_bits": sim.producer_offchip_bits, "producers_alone_offchip_bits": alone,
                    "sim_cycles_double_buffered": db.cycles, "sim_seconds": sim_s,
                    # where a difference comes from: the blocks alone, simulated and modeled
                    "sim_block_cycles": sim.compute_cycles, "model_block_cycles": sum(s.latency for s in g.stages),
                    "block_errors": block_errors(g, stages, sim)})
    return out


def block_errors(g, stages, sim) -> list[dict]:
    """Every distinct block whose modeled cycles differ from the simulator's on the same mapping: the
    single-operator latency model's own error, which is where a group's difference comes from."""
    modeled = {(s.name, r, c): (runs, lat) for s in g.stages for (r, c, runs, lat, _) in s.blocks}
    out = []
    for (j, r, c), (cycles, _) in sim.programs.items():
        runs, lat = modeled[(stages[j].name, r, c)]
        if abs(lat - cycles) > 1e-6 * max(cycles, 1.0):
            out.append({"stage": stages[j].name, "rows": r, "cols": c, "runs": runs, "model_cycles": lat,
                        "sim_cycles": cycles, "error": (lat - cycles) / cycles,
                        "share_of_group_error": runs * (lat - cycles) / (g.latency - sim.cycles)
                        if g.latency != sim.cycles else None})
    return sorted(out, key=lambda b: -abs(b["runs"] * (b["model_cycles"] - b["sim_cycles"])))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--time-limit", type=float, default=10.0, help="seconds per layer, layer by layer")
    ap.add_argument("--tile-time-limit", type=float, default=1.0, help="seconds per tile mapping search")
    ap.add_argument("--parts", nargs="+", default=["vgg", "models"], choices=["vgg", "models"])
    ap.add_argument("--models", nargs="+", default=["resnet18", "bert_base_layer"])
    ap.add_argument("--archs", nargs="+", default=["eyeriss_like", "tpu_like"])
    ap.add_argument("--exact", action="store_true", help="exact tile search (every tile size, with a certificate)")
    ap.add_argument("--span-residuals", action="store_true",
                    help="groups may span consecutive residual blocks (FusionConfig.span_residuals)")
    ap.add_argument("--compare-span", action="store_true",
                    help="each model without and then with spanning groups, on the same tile mappings")
    ap.add_argument("--tile-reuse", action="store_true",
                    help="a tile operator's mapping found with other store room is reused where it fits "
                         "(InnerMappings(reuse_across_room=True)): fewer tile searches")
    ap.add_argument("--cpu-clock", action="store_true",
                    help="the per-layer and per-tile limits count CPU seconds (mappings independent of the load)")
    ap.add_argument("--knobs", default="",
                    help="the layer-by-layer mapper's heuristic knobs, e.g. tied_unrollings=3,bypass_choices=8")
    ap.add_argument("--out", default=str(RESULTS / "fusion.json"))
    a = ap.parse_args()
    knobs = {k: int(v) for k, v in (x.split("=") for x in a.knobs.split(",") if x)}
    cache = Path(default_cache_path())
    # A run of some parts keeps the other parts' last results in the same file.
    previous = json.loads(Path(a.out).read_text()) if Path(a.out).exists() else {}
    out: dict = {k: v for k, v in previous.items() if k in ("vgg16_conv1_5", "models")}
    out.update({"time_limit_per_layer": a.time_limit, "tile_time_limit": a.tile_time_limit})
    if "vgg" in a.parts:
        out["vgg16_conv1_5"] = vgg_part(a.time_limit, a.tile_time_limit, cache)
    if "models" in a.parts:
        rows = models_part(a.models, a.archs, a.time_limit, a.tile_time_limit, cache, a.exact, a.span_residuals,
                           a.compare_span, a.tile_reuse, a.cpu_clock, knobs)
        for r in rows:
            r["exact"] = a.exact
            r["cpu_clock"] = a.cpu_clock
            r["tile_reuse"] = a.tile_reuse
        # rows of (model, accelerator, exact, span) not rerun keep their last results
        redone = {(r["model"], r["accelerator"], r["exact"], r["span_residuals"]) for r in rows}
        out["models"] = [r for r in out.get("models", [])
                         if (r["model"], r["accelerator"], r.get("exact", False), r.get("span_residuals", False))
                         not in redone] + rows
    Path(a.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"\nwrote {a.out}")


if __name__ == "__main__":
    main()
