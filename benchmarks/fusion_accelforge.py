"""Fused against unfused on one GPT-3 6.7B decoder layer (2048-token prefill), next to AccelForge.

AccelForge's Fast & Fusiest mapper (Gilbert et al., arXiv 2602.15166) reports, on one GPT-3 6.7B
decoder layer with a 2048-token prefill on a TPU v4i-like accelerator, 1.38x less energy, 1.16x lower
latency and 1.59x better EDP fused than unfused (403 s unfused and 1,170 s fused on 2 cores). This
benchmark:

1. builds that layer as AccelForge's example workload has it (Q/K/V projections, 32 heads of 128,
   the scores, softmax and attention per head, the output projection and the two FFN products of
   16,384; no LayerNorm, GELU or residual adds, which the example leaves out too), all values 8-bit,
   as an ONNX graph;
2. maps it layer by layer and fused (``fuse_model``, best EDP plan) on ``tpu_v4i_like``: AccelForge's
   example architecture in this tool's terms (off-chip memory at 7.03 pJ/bit and 614 GB/s, a 128 MiB
   global buffer at 1.88 / 2.36 pJ/bit and 2,048 / 1,024 GB/s, 4 cores each with a 4 MiB local buffer
   for inputs and outputs and a 128x128 weight-stationary array at 0.084 pJ per MAC, 1.05 GHz);
3. with ``--accelforge``, runs AccelForge 1.0.467 itself in its own virtual environment (Python 3.12,
   created and installed by this script if missing; never a dependency of the package) on its own
   example files, fused (its default: intermediates may stay on chip) and unfused (every tensor kept
   in off-chip memory), each with a time limit, and prints its ratios next to ours.

    python benchmarks/fusion_accelforge.py [--time-limit 10] [--tile-time-limit 1] [--accelforge]
        [--tokens 2048] [--cpu-clock] [--accelforge-timeout 1800] [--two-ports] [--no-head-tiles] [--default-knobs]
        [--no-warm-tiles] [--tile-knobs] [--no-vector-unit] [--double-buffered]

Our side runs with one off-chip port shared by reads and writes (AccelForge's main memory has one; ``--two-ports``
for a port each way: the layers alone, mapped and timed, and the fused groups), with attention tiled over heads where
it pays (``--no-head-tiles`` to leave it out), and with the softmax on a vector unit as fast as AccelForge's scalar
unit (``--no-vector-unit``: it takes no time but its transfers).

Writes benchmarks/results/fusion_accelforge.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from accelmap.arch.presets import get_accelerator
from accelmap.fusion.group_cost import InnerMappings
from accelmap.fusion.model_fusion import TILE_HEURISTIC, fuse_model, layer_warm_starts, mapper_search, model_producers
from accelmap.fusion.search import DEFAULT_FUSION
from accelmap.search.cache import default_cache_path
from accelmap.search.heuristic_config import DEFAULT_HEURISTIC
from accelmap.search.model_mapper import map_model
from accelmap.workload.models import load_model

RESULTS = Path(__file__).resolve().parent / "results"
PAPER = {"energy": 1.38, "latency": 1.16, "edp": 1.59, "unfused_s": 403, "fused_s": 1170}
VENV = Path(os.environ.get("ACCELFORGE_VENV", "/work/venvs/accelforge"))
ACCELFORGE = "accelforge==1.0.467"

# AccelForge's examples/arches/tpu_v4i.yaml in this tool's terms: energies per 64-bit word (its
# per-bit energies x 64; an AccelForge action moves one bit unless told otherwise), bandwidths in bytes per
# cycle at 1.05 GHz. Checked component by component against that file (docs/fusion.md, "GPT-3 6.7B against
# AccelForge"): which fan-outs share data (its `may_reuse`) and which levels must keep which tensors (its
# `keep`) are part of the machine, not only the numbers.
TPU_V4I_LIKE = """
name: tpu_v4i_like
description: AccelForge's TPU v4i example (Jouppi et al., ISCA 2023) in this tool's terms
compute:
  mac_energy: 0.084 pJ
  macs_per_cycle: 1
  precision: {I: 8, W: 8, O: 8}
  # AccelForge's ScalarUnit: 1.05e9 x 128 operations per second in each of the 4 cores, one per softmax element
  vector_elements_per_cycle: 512
levels:
  - name: MainMemory
    holds: [I, W, O]
    capacity: unbounded
    width: 64 bit
    read_energy: 449.92 pJ          # 7.03 pJ/bit
    write_energy: 449.92 pJ
    read_bandwidth: 585 B/cycle     # 614 GB/s at 1.05 GHz
    write_bandwidth: 585 B/cycle
    shared_port: true               # AccelForge: one port for reads and writes together (its total_latency sums them)
  - name: GlobalBuffer
    holds: [I, W, O]
    capacity: 128 MiB
    width: 64 bit
    read_energy: 120.32 pJ          # 1.88 pJ/bit
    write_energy: 151.04 pJ         # 2.36 pJ/bit
    read_bandwidth: 1950 B/cycle    # 2,048 GB/s (separate ports, as AccelForge's total_latency says)
    write_bandwidth: 975 B/cycle    # 1,024 GB/s
    fanout:
      axes:
        # AccelForge: `spatial: [{name: Z, fanout: 4, may_reuse: Nothing}]`: every core gets its own copy.
        - {name: Z, size: 4, multicast: false, reduce: false}
  - name: LocalBuffer
    holds: [I, O]
    bypass: false                   # AccelForge: `keep: input | output` (must keep, not may)
    capacity: 4 MiB
    width: 64 bit
    read_energy: 15.94 pJ           # 0.249 pJ/bit
    write_energy: 18.75 pJ          # 0.293 pJ/bit
    read_bandwidth: 65536 B/cycle   # unbounded in AccelForge's model
    write_bandwidth: 65536 B/cycle
    fanout:
      axes:
        # AccelForge: `reuse_output` (128, reuse: output): its loops reduce; inputs and weights are not shared.
        - {name: X, size: 128, multicast: false, reduce: true}
        # AccelForge: `reuse_input` (128, reuse: input): the input is shared, nothing reduces.
        - {name: Y, size: 128, multicast: true, reduce: false}
  - name: Register
    holds: [W]
    bypass: false                   # AccelForge: `keep: weight`
    capacity: 1 words
    width: 8 bit
    read_energy: 0 pJ
    write_energy: 0 pJ
"""


def gpt3_layer_onnx(path: Path, tokens: int = 2048) -> None:
    """AccelForge's GPT-3 6.7B example layer as an ONNX graph (weight-free, batch 1)."""
    from accelmap.workload.models.zoo import GraphBuilder

    d, heads, dh, ff = 4096, 32, 128, 16384
    b = GraphBuilder("gpt3_6.7b_layer", [("hidden", [1, tokens, d])])
    heads_shape = b.const_i64("shape.heads", [0, 0, heads, dh])
    merged_shape = b.const_i64("shape.merged", [0, 0, d])

    def proj(x: str, name: str, cin: int, cout: int) -> str:
        return b.node("MatMul", [x, b.weight(f"{name}.weight", [cin, cout])], name)

    def split(x: str, name: str, perm: list[int]) -> str:
        return b.node("Transpose", [b.node("Reshape", [x, heads_shape], f"{name}.reshape")], f"{name}.transpose",
                      perm=perm)

    q = split(proj("hidden", "attention.query", d, d), "query", [0, 2, 1, 3])
    kt = split(proj("hidden", "attention.key", d, d), "key", [0, 2, 3, 1])
    v = split(proj("hidden", "attention.value", d, d), "value", [0, 2, 1, 3])
    probs = b.node("Softmax", [b.node("MatMul", [q, kt], "attention.scores")], "attention.softmax", axis=-1)
    ctx = b.node("MatMul", [probs, v], "attention.context")
    ctx = b.node("Reshape", [b.node("Transpose", [ctx], "context.transpose", perm=[0, 2, 1, 3]), merged_shape],
                 "context.reshape")
    z = proj(ctx, "attention.output", d, d)
    out = proj(proj(z, "ffn.a", d, ff), "ffn.b", ff, d)
    path.write_bytes(b.model(out, [1, tokens, d], doc="GPT-3 6.7B decoder layer as AccelForge's example").
                     SerializeToString())


# The heuristic's knobs for this layer, on both sides (layer by layer and the fused groups' tile mappings), so that
# the two sides are mapped alike. Two knobs differ from the defaults, both for one miss traced on the projections and
# the FFN (docs/fusion.md, "GPT-3 6.7B against AccelForge"): the 4 cores neither multicast nor reduce, so splitting
# tokens or output channels over them has one lower bound, and the ranking kept only the first unrolling of each
# bound (the channel split fell past its 256 candidates); and the channel split pays only when the global buffer
# keeps the input alone, a bypass choice the heuristic reached only by its climbs' toggles from other unrollings.
# With every bypass choice searched in full (8 on this machine) and 3 unrollings per bound it finds AccelForge's own
# mappings (7.214 mJ per projection, 27.440 mJ for the FFN's second product). The fused groups' tile searches keep
# their own knobs (with these, each of them takes its whole second): a tile of a whole layer (every projection and
# FFN product in the one-tile plan) starts from that layer's mapping instead (``layer_warm_starts``).
GPT3_KNOBS = {"tied_unrollings": 3, "bypass_choices": 8}
GPT3_TILE_KNOBS = {**GPT3_KNOBS, "full_searches": 2}


def machine(shared_port: bool = True, vector_unit: bool = True, double_buffered: bool = False) -> str:
    """``TPU_V4I_LIKE``, or with a port each way off chip, or with no vector unit (normalizations take no time), or
    with its local buffers double-buffered where two tiles fit (AccelForge's latency overlaps every transfer)."""
    text = TPU_V4I_LIKE
    if double_buffered:
        text = text.replace("    bypass: false                   # AccelForge: `keep: input | output` (must keep, not may)",
                            "    bypass: false                   # AccelForge: `keep: input | output` (must keep, not may)\n"
                            "    double_buffered: when_fits")
    if not shared_port:
        text = "\n".join(x for x in text.splitlines() if "shared_port: true" not in x) + "\n"
    if not vector_unit:
        text = "\n".join(x for x in text.splitlines() if "vector_elements_per_cycle" not in x) + "\n"
    return text


def ours(time_limit: float, tile_limit: float, fuse_limit: float, tmp: Path, tokens: int = 2048,
         cpu_clock: bool = False, shared_port: bool = True, head_tiles: bool = True,
         default_knobs: bool = False, warm_tiles: bool = True, tile_knobs_on: bool = False,
         vector_unit: bool = True, double_buffered: bool = False, simulate: bool = False) -> dict:
    arch_file, model_file = tmp / "tpu_v4i_like.yaml", tmp / "gpt3_6.7b_layer.onnx"
    arch_file.write_text(machine(shared_port, vector_unit, double_buffered))
    gpt3_layer_onnx(model_file, tokens)
    arch = get_accelerator(str(arch_file))
    m = load_model(model_file, bits={"I": 8, "W": 8, "O": 8})
    t0, c0 = time.perf_counter(), time.process_time()
    # cpu_clock: the per-layer and per-tile limits count this process's CPU seconds, so that the mappings found do
    # not depend on the machine's load.
    knobs, tile_knobs = ({}, {}) if default_knobs else (GPT3_KNOBS, GPT3_TILE_KNOBS if tile_knobs_on else {})
    mm = map_model(m, arch, "edp", time_limit_per_layer=time_limit, jobs=1, cache_path=Path(default_cache_path()),
                   progress=False, heuristic_config=replace(DEFAULT_HEURISTIC, cpu_clock=cpu_clock, **knobs))
    lbl = (time.perf_counter() - t0, time.process_time() - c0)
    t1, c1 = time.perf_counter(), time.process_time()
    # The fusion search gets its own limit: unbounded, it ran for over an hour here with nothing printed.
    # AccelForge's main memory has one port for reads and writes (shared_port); attention may be tiled over heads.
    cfg = replace(DEFAULT_FUSION, shared_offchip_port=shared_port, head_tiles=head_tiles)
    inner = InnerMappings(mapper_search("edp", tile_limit, replace(TILE_HEURISTIC, cpu_clock=cpu_clock, **tile_knobs),
                                        warm=layer_warm_starts(mm) if warm_tiles else None))
    fm = fuse_model(mm, tile_time_limit=tile_limit, time_limit=fuse_limit, config=cfg, inner=inner)
    fuse = (time.perf_counter() - t1, time.process_time() - c1)
    u, f = fm.unfused, fm.best
    sims = []
    if simulate:
        # the plan's fused groups run by the simulator with the model's own block mappings (fusion.py's check)
        from fusion import simulate_groups
        sims = simulate_groups(fm.groups, fm.chains, arch, inner, model_producers(mm, fm.chains),
                               shared_port=cfg.shared_offchip_port)
    return {"accelerator": arch.name, "tokens": tokens, "layers": [lm.layer.name for lm in mm.layers],
            "failed_layers": [lm.layer.name for lm in mm.layers if lm.result is None],
            "unfused": fm.to_dict()["unfused"], "fused": fm.to_dict()["fused"], "groups": fm.to_dict()["groups"],
            "energy_ratio": u.energy / f.energy, "latency_ratio": u.latency / f.latency,
            "edp_ratio": u.energy * u.latency / (f.energy * f.latency), "offchip_ratio": u.offchip_bits / f.offchip_bits,
            "layer_by_layer_wall_s": lbl[0], "layer_by_layer_cpu_s": lbl[1], "fusion_wall_s": fuse[0],
            "fusion_cpu_s": fuse[1], "fusion_timed_out": bool(fm.stats.timed_out), "notes": list(fm.notes),
            "search": fm.to_dict()["search"], "cpu_clock": cpu_clock, "shared_offchip_port": shared_port,
            "head_tiles": head_tiles, "vector_unit": vector_unit, "double_buffered": double_buffered,
            "heuristic_knobs": knobs,
            "tile_heuristic_knobs": tile_knobs, "simulated_groups": sims,
            "tiles_warm_started": warm_tiles,
            # layer by layer, per layer (all its occurrences) and level: what the component check compares
            "unfused_by_layer": {lm.layer.name: {"count": lm.count, "energy_pj": lm.result.energy_total * lm.count,
                                                 "latency_cycles": lm.result.latency * lm.count,
                                                 "latency_parts": {k: v * lm.count for k, v in
                                                                   lm.result.latency_parts},
                                                 "energy_pj_by_level": {lv: e * lm.count for lv, e in
                                                                        lm.result.energy_by_level().items()}}
                                 for lm in mm.layers if lm.result is not None}}


RUNNER = '''
import json, sys, time
import accelforge as af
mode = sys.argv[1]
af.set_n_parallel_jobs(1, print_message=False)
ex = af.examples
spec = af.Spec.from_yaml(ex.arches.tpu_v4i, ex.workloads.gpt3_6_7B, jinja_parse_data={"N_TOKENS": 2048})
if mode == "unfused":
    spec.arch.nodes[0].tensors.keep = "All"     # every tensor, intermediates included, kept off chip
t0, c0 = time.perf_counter(), time.process_time()
m = spec.map_workload_to_arch(print_progress=False)
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
# per Einsum and component: what the component check compares
by = m.energy(per_einsum=True, per_component=True)
lat = m.latency(per_einsum=True)
print(json.dumps({"mode": mode, "wall_s": wall, "cpu_s": cpu, "energy": float(m.energy()), "latency": float(m.latency()),
                  "energy_by_einsum_component": {f"{e}|{c}": float(v) for (e, c), v in by.items()},
                  "latency_by_einsum": {e: float(v) for e, v in lat.items()}}))
'''


def accelforge(timeout: float) -> dict:
    """AccelForge's own fused and unfused runs, or why they could not run."""
    if shutil.which("dot") is None:
        # AccelForge renders every chosen mapping to SVG with Graphviz after its search, and fails without it.
        return {"skipped": "Graphviz's dot is not installed (apt-get install graphviz): AccelForge 1.0.467 renders "
                           "each chosen mapping with it and fails after its search"}
    py = VENV / "bin" / "python"
    if not py.exists():
        made = subprocess.run(["python3.12", "-m", "venv", str(VENV)], capture_output=True, text=True,
                              env={**os.environ, "PYENV_VERSION": os.environ.get("PYENV_VERSION", "3.12.1")})
        if made.returncode:
            return {"skipped": f"no Python 3.12 virtual environment: {made.stderr.strip()[-300:]}"}
    if subprocess.run([str(py), "-c", "import accelforge"], capture_output=True).returncode:
        got = subprocess.run([str(py), "-m", "pip", "install", "-q", ACCELFORGE], capture_output=True, text=True)
        if got.returncode:
            return {"skipped": f"pip install {ACCELFORGE} failed: {got.stderr.strip()[-300:]}"}
    out: dict = {}
    for mode in ("unfused", "fused"):
        try:
            r = subprocess.run([str(py), "-c", RUNNER, mode], capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            out[mode] = {"timed_out_s": timeout}
            continue
        lines = [x for x in r.stdout.splitlines() if x.startswith("{")]
        out[mode] = json.loads(lines[-1]) if r.returncode == 0 and lines else {"error": r.stderr.strip()[-500:]}
    if all("energy" in out.get(k, {}) for k in ("unfused", "fused")):
        u, f = out["unfused"], out["fused"]
        out["energy_ratio"] = u["energy"] / f["energy"]
        out["latency_ratio"] = u["latency"] / f["latency"]
        out["edp_ratio"] = out["energy_ratio"] * out["latency_ratio"]
    return out


# Our layers as AccelForge's example names its Einsums (our Q projection's mapping serves K, V and Z too).
EINSUMS = {"attention.query": ("Q", "K", "V", "Z"), "attention.scores": ("QK",), "attention.context": ("AV",),
           "ffn.a": ("FFA",), "ffn.b": ("FFB",)}
THEIRS_UNFUSED = RESULTS / "fusion_accelforge_theirs_unfused_breakdown.json"
CLOCK_HZ = 1.05e9


def per_layer(o: dict, theirs_path: Path = THEIRS_UNFUSED) -> list[dict]:
    """Layer by layer, per layer (all its occurrences): our cycles and energy next to AccelForge's own run's (its
    per-Einsum latency is the largest of its components' times, its layer latency their sum); the softmax alone is
    the rest of our layer-by-layer total."""
    if not theirs_path.exists():
        return []
    t = json.loads(theirs_path.read_text())
    lat: dict[str, float] = {}
    for key, sec in t["latency_s_by_einsum_component"].items():
        e = key.split("|")[0]
        lat[e] = max(lat.get(e, 0.0), sec * CLOCK_HZ)
    energy: dict[str, float] = {}
    for key, j in t["energy_j_by_einsum_component_tensor_action"].items():
        e = key.split("|")[0]
        energy[e] = energy.get(e, 0.0) + j * 1e12
    rows = []
    for name, lm in o["unfused_by_layer"].items():
        es = EINSUMS[name]
        rows.append({"layer": name, "einsums": list(es), "ours_cycles": lm["latency_cycles"],
                     "theirs_cycles": sum(lat[e] for e in es), "ours_pj": lm["energy_pj"],
                     "theirs_pj": sum(energy[e] for e in es), "ours_parts": lm.get("latency_parts", {})})
    rest = o["unfused"]["latency_cycles"] - sum(r["ours_cycles"] for r in rows)
    rest_e = o["unfused"]["energy_pj"] - sum(r["ours_pj"] for r in rows)
    rows.append({"layer": "attention.softmax (alone)", "einsums": ["QK_softmax"], "ours_cycles": rest,
                 "theirs_cycles": lat["QK_softmax"], "ours_pj": rest_e, "theirs_pj": energy["QK_softmax"],
                 "ours_parts": {}})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--time-limit", type=float, default=10.0, help="seconds per layer, layer by layer")
    ap.add_argument("--tile-time-limit", type=float, default=1.0, help="seconds per tile mapping search")
    ap.add_argument("--fuse-time-limit", type=float, default=1800.0, help="seconds for our fusion search")
    ap.add_argument("--tokens", type=int, default=2048, help="prefill tokens (AccelForge's example: 2048)")
    ap.add_argument("--cpu-clock", action="store_true",
                    help="the time limits count CPU seconds (results independent of the machine's load)")
    ap.add_argument("--accelforge", action="store_true", help="also run AccelForge 1.0.467 (its own venv)")
    ap.add_argument("--accelforge-timeout", type=float, default=1800.0, help="seconds per AccelForge run")
    ap.add_argument("--two-ports", action="store_true",
                    help="a read port and a write port off chip (default: one shared port, as AccelForge's main memory)")
    ap.add_argument("--no-head-tiles", action="store_true", help="attention not tiled over heads (query tokens only)")
    ap.add_argument("--double-buffered", action="store_true",
                    help="the local buffers double-buffered where two tiles fit (AccelForge's latency overlaps every "
                         "transfer); needs --two-ports (one port above a double buffer is refused)")
    ap.add_argument("--no-vector-unit", action="store_true",
                    help="no vector unit: the softmax takes no time on either side but its off-chip transfers")
    ap.add_argument("--default-knobs", action="store_true",
                    help="the heuristic's default knobs on both sides (not this layer's: see GPT3_KNOBS)")
    ap.add_argument("--no-warm-tiles", action="store_true",
                    help="tile searches not started from the layer-by-layer mapping (default: where the tile is a "
                         "whole layer, its layer's mapping is a candidate)")
    ap.add_argument("--tile-knobs", action="store_true",
                    help="the tile searches with this layer's knobs too (GPT3_TILE_KNOBS; default: the tile "
                         "searches' own, the layer's better mappings reaching whole-layer tiles as warm starts)")
    ap.add_argument("--simulate", action="store_true",
                    help="run the plan's fused groups in the simulator (model against simulator per group)")
    ap.add_argument("--out", default=str(RESULTS / "fusion_accelforge.json"))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        res = {"ours": ours(a.time_limit, a.tile_time_limit, a.fuse_time_limit, Path(tmp), a.tokens, a.cpu_clock,
                            not a.two_ports, not a.no_head_tiles, a.default_knobs, not a.no_warm_tiles,
                            a.tile_knobs, not a.no_vector_unit, a.double_buffered, a.simulate), "paper": PAPER}
    o = res["ours"]
    print(f"GPT-3 6.7B decoder layer, {o['tokens']} tokens, on {o['accelerator']} (unfused / fused, above 1 is a gain)")
    print(f"{'':<34} {'energy':>8} {'latency':>8} {'EDP':>8} {'search s':>10}")
    print(f"{'ours (best EDP plan)':<34} {o['energy_ratio']:>7.2f}x {o['latency_ratio']:>7.2f}x {o['edp_ratio']:>7.2f}x "
          f"{o['layer_by_layer_wall_s'] + o['fusion_wall_s']:>10.0f}   (cpu {o['layer_by_layer_cpu_s']:.0f} + "
          f"{o['fusion_cpu_s']:.0f} s)")
    print(f"{'AccelForge, published (2 cores)':<34} {PAPER['energy']:>7.2f}x {PAPER['latency']:>7.2f}x "
          f"{PAPER['edp']:>7.2f}x {PAPER['unfused_s'] + PAPER['fused_s']:>10}")
    st = o["search"]
    print(f"  search: {st['groups_tried']} groups tried, {st['candidates_costed']} candidates costed, "
          f"{st['candidates_rejected']} rejected, {st['tile_searches']} tile searches"
          f"{', limits on CPU seconds' if o['cpu_clock'] else ', limits on wall seconds'}")
    print(f"  off-chip: {'one port for reads and writes (as AccelForge)' if o['shared_offchip_port'] else 'a read and a write port'}"
          f"; attention {'may be' if o['head_tiles'] else 'not'} tiled over heads"
          f"; the softmax {'on the vector unit' if o['vector_unit'] else 'takes no time (no vector unit)'}")
    for g in o["groups"]:
        heads = f", {g['head_tile']} heads per head tile" if g.get("head_tile") else ""
        readers = g.get("input_read_in_store_by")
        print(f"  group {' > '.join(g['stages'])}: tile {g['tile'][0]}x{g['tile'][1]}, {g['tiles']} tiles{heads}"
              f"{', weights resident' if g['weights_resident'] else ''}"
              f"{', kept: ' + ', '.join(g['producers_on_chip']) if g['producers_on_chip'] else ''}"
              + (f", its input read in the store by {', '.join(readers)}" if readers else ""))
    res["per_layer_unfused"] = rows = per_layer(o)
    if rows:
        print(f"  layer by layer against AccelForge 1.0.467's own unfused run (cycles at 1.05 GHz; {THEIRS_UNFUSED.name}):")
        print(f"    {'layer':<26} {'ours cycles':>12} {'theirs':>12} {'ours mJ':>9} {'theirs':>9}  ours: stalls")
        for r in rows:
            stall = r["ours_parts"].get("single-buffer stalls", 0.0)
            print(f"    {r['layer']:<26} {r['ours_cycles']:>12,.0f} {r['theirs_cycles']:>12,.0f} {r['ours_pj'] / 1e9:>9.3f} "
                  f"{r['theirs_pj'] / 1e9:>9.3f}  {stall:,.0f}")
    if a.accelforge:
        res["accelforge"] = af_res = accelforge(a.accelforge_timeout)
        if "energy_ratio" in af_res:
            print(f"{'AccelForge 1.0.467, here':<34} {af_res['energy_ratio']:>7.2f}x {af_res['latency_ratio']:>7.2f}x "
                  f"{af_res['edp_ratio']:>7.2f}x {af_res['unfused']['wall_s'] + af_res['fused']['wall_s']:>10.0f}")
        else:
            print(f"AccelForge 1.0.467: {json.dumps(af_res)[:400]}")
    Path(a.out).write_text(json.dumps(res, indent=2) + "\n")
    print(f"wrote {a.out}")
    incomplete = []
    if o["failed_layers"]:
        incomplete.append(f"{len(o['failed_layers'])} layers not mapped ({', '.join(o['failed_layers'])}), "
                          "left out of both sides' totals")
    if o["fusion_timed_out"]:
        incomplete.append(f"our fusion search stopped at its {a.fuse_time_limit:.0f} s limit (best plan so far)")
    for line in incomplete:
        print(f"incomplete: {line}")
    return 1 if incomplete else 0


if __name__ == "__main__":
    sys.exit(main())
