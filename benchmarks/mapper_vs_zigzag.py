"""accelmap's whole-model mapper against ZigZag (zigzag-dse 3.9.1) on ZigZag's own inputs.

For ResNet-18 and MobileNetV2 (the ONNX files in ZigZag's wheel) on tpu_like,
edge_tpu_like and ascend_like (hardware and mapping files from the wheel):

1. ZigZag's default search (LOMA, uneven temporal mappings, lpf_limit 6, the
   spatial mapping of the wheel's mapping file) runs in its own virtual
   environment (benchmarks/.venv-zigzag, created and filled with
   ``pip install zigzag-dse==3.9.1 six`` on first use), in a subprocess, one
   process per (model, hardware). Its wall time covers parsing and search.
2. accelmap maps the same ONNX file on the same hardware converted by
   ``accelmap.arch.zigzag_import`` with the same spatial constraints
   (``load_zigzag_spatial_constraints``), using ``map_model`` (strategy auto,
   every core, cache off). Its wall time covers import and search.
3. ZigZag's chosen mapping of every layer is converted into our Mapping and
   evaluated in our cost model next to ours (same objective), and our cost of
   that mapping is set against ZigZag's own cost of it.
4. accelmap maps the model again with the spatial unrolling free (no constraints):
   a second table shows how much better than ZigZag's own spatial choice that is,
   both costed in our model.

Converting a ZigZag mapping (docs/mapping-models.md has the full argument):
ZigZag lists, per operand, the loops (innermost first) held by each memory of
that operand's hierarchy; the loops of all operands form one order. Our levels
are one chain, so each loop gets one level. A loop goes to the innermost level
at which every operand sees the memory ZigZag chose for it. Where none does
(ZigZag's per-operand memories sit side by side, e.g. tpu_like's O and W
registers both feed the multiplier, which the import stacks), the loop goes to
the innermost level between the operands' choices whose tiles still fit; the
layer is then marked ``approx`` and the displaced loops are counted. Spatial
unrollings go to the fan-out axis of the same name; a fractional one (ZigZag's
uneven K=31.25) is rounded up (a padded, imperfect loop). Operands keep every
level that holds their class (ZigZag has no bypass choice).

    python benchmarks/mapper_vs_zigzag.py [--objective edp] [--models resnet18 mobilenetv2]
        [--hardware tpu_like edge_tpu_like ascend_like] [--jobs 2] [--time-limit 10]
    python benchmarks/mapper_vs_zigzag.py --model-only [--simulate]   # both cost models on ZigZag's mappings
    python benchmarks/mapper_vs_zigzag.py --report A.json B.json ...  # the tables of earlier runs together
    python benchmarks/mapper_vs_zigzag.py --zigzag-only [--models M] [--hardware H]  # ZigZag alone, its CPU seconds

Search time is compared in CPU seconds on both sides (ZigZag's process and its children; our process and
the mapper's workers): on a shared machine wall time measures the load. --report takes ZigZag's CPU
seconds from results/zigzag_raw/ (written by --zigzag-only) for a run that compared the same ZigZag result.

Prints a summary table and the per-layer disagreements; writes
benchmarks/results/mapper_vs_zigzag.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
VENV = HERE / ".venv-zigzag"
RESULTS = HERE / "results" / "mapper_vs_zigzag.json"
ZIGZAG_VERSION = "3.9.1"

# Runs inside the ZigZag venv: one (model, hardware) pair; prints JSON with time and per-layer mappings.
ZIGZAG_SCRIPT = r'''
import json, os, resource, sys, time, logging, tempfile
import zigzag
from zigzag.api import get_hardware_performance_zigzag
base = os.path.join(os.path.dirname(zigzag.__file__), "inputs")
model, hw, opt = sys.argv[1], sys.argv[2], sys.argv[3]
logging.disable(logging.WARNING)
dump = tempfile.mkdtemp(prefix="zigzag-")
load0 = os.getloadavg()[0]
t0, c0 = time.perf_counter(), time.process_time()
if len(sys.argv) > 4:   # a pickled result list (ZigZag's list_of_cmes format): re-extract without searching
    import pickle
    cmes = pickle.load(open(sys.argv[4], "rb"))
    energy, latency = cmes[0][0].energy_total, cmes[0][0].latency_total2
else:
    energy, latency, cmes = get_hardware_performance_zigzag(
        os.path.join(base, "workload", model + ".onnx"), os.path.join(base, "hardware", hw + ".yaml"),
        os.path.join(base, "mapping", hw + ".yaml"), opt=opt, dump_folder=dump, loma_show_progress_bar=False)
wall = time.perf_counter() - t0
kids = resource.getrusage(resource.RUSAGE_CHILDREN)   # ZigZag's own worker processes, if any
cpu = time.process_time() - c0 + kids.ru_utime + kids.ru_stime
layers = []
for cme, _ in cmes[0][1]:
    lay = cme.layer
    links = {str(k): str(v) for k, v in cme.memory_operand_links.data.items()}
    hier = {str(k): [m.name for m in v] for k, v in cme.mem_hierarchy_dict.items()}
    temporal = {str(op): [[[str(d), int(s)] for d, s in lvl] for lvl in levels]
                for op, levels in cme.temporal_mapping.mapping_dic_origin.items()}
    spatial_axes = {str(ax): {str(d): float(s) for d, s in v.items()} for ax, v in lay.spatial_mapping.items()}
    spatial_eff = {}
    for op, levels in cme.spatial_mapping.mapping_dict_origin.items():
        for lvl in levels:
            for d, s in lvl:
                spatial_eff[str(d)] = float(s)
    layers.append({"name": lay.name, "dims": {str(k): int(v) for k, v in lay.layer_dim_sizes.items()},
                   "links": links, "hierarchy": hier, "temporal": temporal, "spatial_axes": spatial_axes,
                   "spatial": spatial_eff, "energy": float(cme.energy_total), "latency": float(cme.latency_total2),
                   "mac_energy": float(cme.mac_energy),
                   "mem_energy": {str(op): [float(x) for x in v] for op, v in cme.mem_energy_breakdown.items()}})
print(json.dumps({"model": model, "hardware": hw, "wall_seconds": wall, "cpu_seconds": cpu,
                  "load_average": [load0, os.getloadavg()[0]], "energy": float(energy),
                  "latency": float(latency), "layers": layers}))
'''


def ensure_venv() -> Path | None:
    """The ZigZag venv's python, installing it on first use; None (with a message) when that fails."""
    py = VENV / "bin" / "python"
    check = [str(py), "-c", f"import zigzag, six, importlib.metadata as m; assert m.version('zigzag-dse') == '{ZIGZAG_VERSION}'"]
    if py.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return py
    print(f"installing zigzag-dse=={ZIGZAG_VERSION} and six into {VENV} ...", file=sys.stderr)
    steps = [[sys.executable, "-m", "venv", str(VENV)],
             [str(py), "-m", "pip", "install", "-q", f"zigzag-dse=={ZIGZAG_VERSION}", "six"]]
    for cmd in steps:
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            print(f"SKIP: cannot install ZigZag ({' '.join(cmd[:4])} ... failed):\n{p.stderr[-2000:]}", file=sys.stderr)
            return None
    if subprocess.run(check, capture_output=True).returncode != 0:
        print("SKIP: ZigZag installed but does not import", file=sys.stderr)
        return None
    return py


def zigzag_inputs(py: Path) -> Path:
    out = subprocess.run([str(py), "-c", "import zigzag, os; print(os.path.dirname(zigzag.__file__))"],
                         capture_output=True, text=True, check=True).stdout.strip()
    return Path(out) / "inputs"


def run_zigzag(py: Path, model: str, hw: str, opt: str, reuse: bool = False) -> dict:
    raw = RESULTS.parent / "zigzag_raw" / f"{model}-{hw}-{opt}.json"
    if reuse and raw.exists():
        return json.loads(raw.read_text())
    zz = _run_zigzag(py, model, hw, opt)
    raw.parent.mkdir(parents=True, exist_ok=True)
    raw.write_text(json.dumps(zz) + "\n")
    return zz


def _run_zigzag(py: Path, model: str, hw: str, opt: str) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(ZIGZAG_SCRIPT)
        script = f.name
    try:
        p = subprocess.run([str(py), script, model, hw, opt], capture_output=True, text=True)
    finally:
        os.unlink(script)
    if p.returncode != 0:
        raise RuntimeError(f"ZigZag failed on {model}/{hw}:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- conversion

def _level_of(arch, memory: str) -> int:
    for i, lv in enumerate(arch.levels):
        if memory in lv.name.split("."):
            return i
    raise KeyError(memory)


def convert_mapping(zl: dict, op, arch, dim_names: dict[str, str], moved_loops: list[str] | None = None):
    """ZigZag's mapping of one layer -> (our Mapping, displaced loops, displaced loops some operand they
    index sees elsewhere, notes). See the module docstring. ``moved_loops``: filled with one line per
    such loop (where it went, where ZigZag's operands see it)."""
    from accelmap.errors import MappingError
    from accelmap.mapping.loopnest import Loop, Mapping
    from accelmap.mapping.validate import check_capacity

    # ZigZag layer operand (O, W, I) -> our operand name, through the class.
    opnd = {z: next(o.name for o in op.operands if o.cls == z) for z in zl["temporal"]}
    notes: list[str] = []
    # Per operand: our level index of each of its ZigZag memories, innermost first.
    mem_levels = {z: [_level_of(arch, m) for m in zl["hierarchy"][zl["links"][z]]] for z in zl["temporal"]}
    # The global loop order, innermost first, with each operand's memory position per loop.
    seqs = {z: [(d, s, k) for k, lvl in enumerate(levels) for d, s in lvl] for z, levels in zl["temporal"].items()}
    n = {len(v) for v in seqs.values()}
    if len(n) != 1:
        raise ValueError("operands list different loops")
    first = next(iter(seqs))
    loops_inner_first = []
    for p in range(n.pop()):
        d, s, _ = seqs[first][p]
        want = {z: mem_levels[z][seqs[z][p][2]] for z in seqs}
        loops_inner_first.append((dim_names.get(d, d), s, want))
    # Spatial loops at the fan-out of their axis.
    axes = arch.fanout_axes()
    spatial = []
    for ax, dims in zl["spatial_axes"].items():
        for d, _ in dims.items():
            eff = zl["spatial"].get(d)
            if eff is None or eff <= 1:
                continue
            b = math.ceil(eff - 1e-9)
            if abs(b - eff) > 1e-9:
                notes.append(f"spatial {dim_names.get(d, d)}={eff:g} on {ax} rounded up to {b} (padded)")
            spatial.append(Loop(dim_names.get(d, d), b, axes[ax][0], ax))
    keep = tuple(frozenset(o.name for o in op.operands if o.cls in lv.holds) for lv in arch.levels)
    nlev = len(arch.levels)

    def build(placed):
        # Loops not yet placed stay at the outermost level, which is unbounded: inner tiles are unaffected.
        per = {i: [] for i in range(nlev)}
        for dim, b, lvl in placed:
            per[lvl].append(Loop(dim, b, lvl))
        rest = [Loop(d, b, 0) for d, b, _ in loops_inner_first[len(placed):]]
        order = []
        for i in range(nlev):
            t = list(reversed(per[i]))
            if i == 0:
                t = list(reversed(rest)) + t
            order += t + [l for l in spatial if l.level == i]
        return Mapping(tuple(order), keep)

    placed, displaced, relevant, bound = [], 0, 0, nlev - 1
    for dim, b, want in loops_inner_first:
        lo, hi = min(want.values()), max(want.values())
        # Innermost level at which each operand's innermost holding level at or outside it is ZigZag's choice.
        exact = [L for L in range(hi, lo - 1, -1) if L <= bound and all(
            max((x for x in mem_levels[z] if x <= L), default=0) == want[z] for z in want)]
        cands = exact or [L for L in range(min(hi, bound), lo - 1, -1)] or [min(lo, bound)]
        chosen = None
        for L in cands:
            try:
                check_capacity(op, arch, build(placed + [(dim, b, L)]))
            except MappingError:
                continue
            chosen = L
            break
        if chosen is None:
            chosen = min(cands)
        if chosen not in exact:
            displaced += 1
            # Operands that see this loop at another memory than ZigZag chose. If none of them is
            # indexed by the loop, their tiles and fetches are the same either way (stationarity).
            moved = [z for z in want if max((x for x in mem_levels[z] if x <= chosen), default=0) != want[z]]
            if any(dim in op.operand(opnd[z]).dims for z in moved):
                relevant += 1
                if moved_loops is not None:
                    moved_loops.append(f"{dim}{b} at {arch.levels[chosen].name} (ZigZag: " + ", ".join(
                        f"{z} at {arch.levels[want[z]].name}" for z in moved if dim in op.operand(opnd[z]).dims) + ")")
        placed.append((dim, b, chosen))
        bound = chosen
    m = build(placed)
    return m, displaced, relevant, notes


# ---------------------------------------------------------------- our side and comparison

def run_ours(onnx: Path, hw_path: Path, map_path: Path, objective: str, jobs: int, time_limit: float | None,
             free_spatial: bool = False, cpu_clock: bool = False, knobs: dict | None = None):
    from accelmap.arch.zigzag_import import load_zigzag_accelerator, load_zigzag_spatial_constraints
    from accelmap.search.heuristic_config import DEFAULT_HEURISTIC
    from accelmap.search.model_mapper import map_model
    from accelmap.search.space import Constraints
    from accelmap.workload.models import load_model

    t0, c0 = time.perf_counter(), cpu_seconds()
    arch, notes = load_zigzag_accelerator(hw_path, map_path)
    cons = Constraints(spatial={ax: dict(pairs) for ax, pairs in load_zigzag_spatial_constraints(map_path).items()})
    if free_spatial:
        cons = Constraints()
    model = load_model(onnx)
    mm = map_model(model, arch, objective, constraints=cons, strategy="auto", time_limit_per_layer=time_limit,
                   jobs=jobs, cache_path=None, progress=False,
                   heuristic_config=replace(DEFAULT_HEURISTIC, cpu_clock=cpu_clock, **(knobs or {})))
    return mm, arch, time.perf_counter() - t0, cpu_seconds() - c0, notes


def cpu_seconds() -> float:
    """CPU seconds of this process and of its finished worker processes (the mapper's pool): what the
    search costs whatever the machine's load, unlike its wall time."""
    import resource

    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + kids.ru_utime + kids.ru_stime


def energy_components(zl: dict, op, arch, r) -> dict[str, list[float]]:
    """'operand@memory' -> [ours, ZigZag's] pJ for ZigZag's mapping; ours adds the NoC below that memory."""
    out: dict[str, list[float]] = {"MAC": [r.energy.get(("MAC", "-"), 0.0), zl["mac_energy"]]}
    for z, per_level in zl.get("mem_energy", {}).items():
        name = next(o.name for o in op.operands if o.cls == z)
        for mem, e in zip(zl["hierarchy"][zl["links"][z]], per_level):
            lv = arch.levels[_level_of(arch, mem)].name
            ours = r.energy.get((lv, name), 0.0) + r.energy.get((f"NoC:{lv}", name), 0.0)
            out[f"{z}@{mem}"] = [ours, e]
    return out


def compare(zz: dict, mm, arch, objective: str) -> list[dict]:
    from accelmap.arch.accelerator import adopt_precision
    from accelmap.arch.zigzag_import import ZIGZAG_DIMS
    from accelmap.cost.model import evaluate
    from accelmap.errors import AccelmapError

    by_node = {zl["name"]: zl for zl in zz["layers"]}
    rows = []
    for l in mm.layers:
        zl = by_node.get(l.layer.nodes[0])
        row = {"layer": l.name, "count": l.count, "ours": None, "zigzag_in_ours": None, "zigzag_own": None,
               "status": "", "displaced_loops": None, "notes": []}
        if zl is None:
            row["status"] = "not in ZigZag's results"
            rows.append(row)
            continue
        # The operator at the precision our side mapped it with (the accelerator's, as map_model adopts).
        op = adopt_precision(l.layer.operator, arch)
        dim_names = dict(ZIGZAG_DIMS)
        if "D" in zl["dims"] and "N" in op.sizes:
            dim_names["D"] = "N"         # ZigZag's Gemm batch dim
        row["zigzag_own"] = {"energy": zl["energy"], "latency": zl["latency"],
                             "edp": zl["energy"] * zl["latency"]}
        if l.ok:
            row["ours"] = {"energy": l.result.energy_total, "latency": l.result.latency, "edp": l.result.edp,
                           "how": l.how}
        try:
            m, displaced, relevant, notes = convert_mapping(zl, op, arch, dim_names)
            r = evaluate(op, arch, m)
        except (AccelmapError, KeyError, ValueError, StopIteration) as e:
            row["status"] = f"not convertible: {e}"
            rows.append(row)
            continue
        row["displaced_loops"] = displaced
        row["displaced_relevant"] = relevant
        row["notes"] = notes
        row["status"] = ("exact" if displaced == 0 and not notes else
                         "equivalent" if relevant == 0 and not notes else "approx")
        row["zigzag_in_ours"] = {"energy": r.energy_total, "latency": r.latency, "edp": r.edp,
                                 "stall_cycles": r.stall_cycles, "compute_cycles": r.compute_cycles}
        row["energy_components"] = energy_components(zl, op, arch, r)
        rows.append(row)
    return rows


# Properties of the converted machine that bring it to what ZigZag models; --model-only reports each
# one's share by converting without it (cause -> how to drop it from a converted Accelerator).
CAUSES = {
    "finished outputs at the activation precision (final_output_bits)":
        lambda arch: replace(arch, compute=replace(arch.compute, final_output_bits=None)),
    "double-buffered when two tiles fit (double_buffered: when_fits)":
        lambda arch: replace(arch, levels=tuple(replace(lv, double_buffered_when_fits=False) for lv in arch.levels)),
    "single buffers refilled while read (refill_while_read)":
        lambda arch: replace(arch, levels=tuple(replace(lv, refill_while_read=False) for lv in arch.levels)),
    "registers written at the clock edge (written_at_clock_edge)":
        lambda arch: replace(arch, levels=tuple(replace(lv, written_at_clock_edge=False) for lv in arch.levels)),
    "tiles kept for the whole run streamed during compute (stream_single_tile)":
        lambda arch: replace(arch, levels=tuple(replace(lv, stream_single_tile=False) for lv in arch.levels)),
    "access granularity (access_granularity: bandwidth_min)":
        lambda arch: replace(arch, levels=tuple(replace(lv, access_granularity_bits=None) for lv in arch.levels)),
    "accumulators shared along an array column (shared_along)":
        lambda arch: unshared(arch),
    "padded halos generated, not moved (padding: generated)":
        lambda arch: replace(arch, padding_generated=False),
}


def unshared(arch):
    """The machine with one instance of every level per position of the fan-outs above it, as the import
    placed a column's accumulator before ``shared_along`` (one per multiplier)."""
    levels = []
    for lv in arch.levels:
        extra = math.prod(arch.fanout_axis(i, a.name).size for i, x in enumerate(arch.levels) if x.fanout
                          for a in x.fanout.axes if a.name in lv.shared_axes)
        levels.append(replace(lv, shared_axes=(), instances=lv.instances * extra))
    return replace(arch, levels=tuple(levels))


# The targets of the comparison: EDP within 1.3x of ZigZag's, energy within 10%.
EDP_TARGET, ENERGY_TARGET = 1.3, 0.10


def classify(row: dict, notes: list[str]) -> list[tuple[str, str]]:
    """The causes of a layer's remaining difference, each with its class (our convention, ZigZag's
    error, not expressible, conversion), read off the layer's energy components and latency parts;
    'not traced' where none of the known causes shows. ``notes``: the import's notes on the machine."""
    causes: list[tuple[str, str]] = []
    comps = row.get("energy_components", {})
    o, z = row["ours"]["as converted"], row["zigzag"]
    excess_e = o["energy"] - z["energy"]
    approx_placed = {n.split()[0] for n in notes if "placed as serving" in n}
    if abs(excess_e) > ENERGY_TARGET * z["energy"]:
        # the component that differs most, in the direction of the layer's difference
        name, (ours_c, theirs_c) = max(comps.items(), key=lambda kv: (kv[1][0] - kv[1][1]) * (1 if excess_e > 0 else -1))
        share = (ours_c - theirs_c) / excess_e
        mem = name.split("@")[-1]
        if mem in approx_placed:
            causes.append((f"energy: {name} {ours_c / max(theirs_c, 1e-30):.1f}x ZigZag's ({share:.0%} of the "
                           f"difference): {mem} serves a whole array column in ZigZag, one multiplier here",
                           "not expressible"))
        elif name.startswith("I@dram") and abs(ours_c / max(theirs_c, 1e-30) / row.get("halo_ratio", 1.0) - 1) < 0.03:
            causes.append((f"energy: {name} {ours_c / max(theirs_c, 1e-30):.2f}x ZigZag's ({share:.0%}): the padded "
                           f"halo moves from DRAM here, real input only in ZigZag", "our convention"))
        elif name.startswith("I@dram") and row.get("fractional_ratio", 1.0) > 1 and \
                abs(ours_c / max(theirs_c, 1e-30) / row["fractional_ratio"] - 1) < 0.03:
            causes.append((f"energy: {name} {ours_c / max(theirs_c, 1e-30):.2f}x ZigZag's ({share:.0%}): ZigZag reads "
                           f"floor(u) x the temporal rows of a dim unrolled a fractional u times (OX 3.5 x 4: 12 of 14), "
                           f"ours every input once; with ZigZag's at the real input the layer's energy is "
                           f"{o['energy'] / (z['energy'] - theirs_c + ours_c):.3f}x", "ZigZag's error"))
        else:
            causes.append((f"energy: {name} {ours_c / max(theirs_c, 1e-30):.2f}x ZigZag's ({share:.0%})", "not traced"))
    if o["energy"] * o["latency"] > EDP_TARGET * z["energy"] * z["latency"]:
        excess_l = o["latency"] - z["latency"]
        parts = row.get("latency_parts", {})
        stalls = parts.get("single-buffer stalls", 0.0)
        if excess_l > 0 and stalls >= excess_l / 2:
            causes.append((f"latency: single-buffer stalls {stalls:.0f} of {excess_l:.0f} cycles over ZigZag's: a "
                           "single buffer whose tile a loop on top reads more than once stalls the compute for its "
                           "whole refill here; ZigZag refills it during the last pass of those loops "
                           "(refill_while_read covers a tile read once)", "our convention"))
        elif excess_l > 0:
            big = max(((k, v) for k, v in parts.items() if k != "MAC schedule"), key=lambda kv: kv[1],
                      default=("", 0.0))
            moved = row.get("moved_loops", [])
            if moved:
                # a chain of levels gives a loop one place for all operands; ZigZag's operands see it at
                # memories the chain cannot put in that order (side by side, or not fitting together)
                causes.append((f"latency: {excess_l:.0f} cycles over ZigZag's, most in '{big[0]}' ({big[1]:.0f}); "
                               f"loops the operands index sit elsewhere than ZigZag's memories for them: "
                               f"{'; '.join(moved)}", "not expressible"))
            else:
                causes.append((f"latency: {excess_l:.0f} cycles over ZigZag's, most in '{big[0]}' ({big[1]:.0f})",
                               "not traced"))
    if row.get("status") == "approx" and causes and not row.get("moved_loops"):
        causes.append(("the mapping converter moved loops ZigZag's operands see at different memories",
                       "conversion"))
    return causes


def _geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


# --simulate: our simulator on ZigZag's mappings up to this many tile steps (its time grows with them)
SIM_MAX_STEPS = 200_000


def model_only(models: list[str], hardware: list[str], opt: str, sim: bool = False) -> dict:
    """Both cost models on ZigZag's own mappings (round-tripped into ours), per layer, and the share of
    every conversion property (the converted machine without it); no search on our side."""
    from accelmap.arch.accelerator import adopt_precision
    from accelmap.arch.zigzag_import import ZIGZAG_DIMS, load_zigzag_accelerator
    from accelmap.cost.model import evaluate
    from accelmap.errors import AccelmapError, MappingError
    from accelmap.sim import simulate
    from accelmap.sim.program import tile_steps
    from accelmap.workload.models import load_model

    py = ensure_venv()
    if py is None:
        sys.exit(0)
    inputs = zigzag_inputs(py)
    variants = {"as converted": lambda a: a, **{f"without {k}": f for k, f in CAUSES.items()}}
    rows = []
    for model in models:
        onnx = load_model(inputs / "workload" / f"{model}.onnx")
        for hw in hardware:
            zz = run_zigzag(py, model, hw, opt, reuse=True)
            base, import_notes = load_zigzag_accelerator(inputs / "hardware" / f"{hw}.yaml",
                                                         inputs / "mapping" / f"{hw}.yaml")
            by_node = {zl["name"]: zl for zl in zz["layers"]}
            for layer in onnx.layers:
                zl = by_node.get(layer.nodes[0])
                if zl is None:
                    continue
                op = adopt_precision(layer.operator, base)
                dim_names = dict(ZIGZAG_DIMS)
                if "D" in zl["dims"] and "N" in op.sizes:
                    dim_names["D"] = "N"
                row = {"model": model, "hardware": hw, "layer": layer.operator.name,
                       "zigzag": {"energy": zl["energy"], "latency": zl["latency"]}, "ours": {}}
                try:
                    moved_loops: list[str] = []
                    m, displaced, relevant, notes = convert_mapping(zl, op, base, dim_names, moved_loops)
                    row["moved_loops"] = moved_loops
                    for name, drop in variants.items():
                        try:
                            r = evaluate(op, drop(base), m)
                        except MappingError as e:
                            if name == "as converted":
                                raise
                            # the mapping needs this property to be valid at all (ZigZag's conv1 on
                            # ascend_like fits its SRAM only with finished outputs at 8 bits)
                            row.setdefault("invalid_without", {})[name] = str(e)
                            continue
                        row["ours"][name] = {"energy": r.energy_total, "latency": r.latency}
                        if name == "as converted":
                            row["energy_components"] = energy_components(zl, op, base, r)
                            row["latency_parts"] = dict(r.latency_parts)
                    row["status"] = ("exact" if displaced == 0 and not notes else
                                     "equivalent" if relevant == 0 and not notes else "approx")
                    # index space over stored elements of the padded input: what a padded halo adds
                    X = next((o for o in op.inputs if o.shape and any(o.pad_lo)), None)
                    row["halo_ratio"] = 1.0 if X is None else math.prod(op.index_extent(X)) / math.prod(
                        min(e, n) for e, n in zip(op.index_extent(X), X.shape, strict=True))
                    # ZigZag counts floor(u) x the temporal loops of a dim unrolled a fractional u times
                    # (OX 3.5 x 4: 12 of 14 columns) in the input's traffic; ours counts all of them
                    I = next((o for o in op.inputs if o.cls == "I"), None)
                    row["fractional_ratio"] = math.prod(
                        u / math.floor(u) for d, u in zl["spatial"].items()
                        if I is not None and u > 1 and abs(u - round(u)) > 1e-9 and dim_names.get(d, d) in I.dims)
                    row["causes"] = classify(row, import_notes)
                    if sim and tile_steps(op, base, m) <= SIM_MAX_STEPS:
                        row["simulator_cycles"] = simulate(op, base, m, functional=False).cycles
                except (AccelmapError, KeyError, ValueError, StopIteration) as e:
                    row["status"] = f"not convertible: {e}"
                rows.append(row)
    ok = [r for r in rows if r["ours"]]
    print(f"{'model':<10} {'hardware':<14} {'layer':<28} {'energy':>7} {'latency':>8} {'EDP':>7}  status "
          f"(ours / ZigZag on ZigZag's mapping)")
    for r in rows:
        if not r["ours"]:
            print(f"{r['model']:<10} {r['hardware']:<14} {r['layer'][:28]:<28} {r['status']}")
            continue
        o, z = r["ours"]["as converted"], r["zigzag"]
        e, lat = o["energy"] / z["energy"], o["latency"] / z["latency"]
        print(f"{r['model']:<10} {r['hardware']:<14} {r['layer'][:28]:<28} {e:>7.3f} {lat:>8.3f} {e * lat:>7.3f}  "
              f"{r['status']}")
    summary: dict = {}
    for scope in [*models, "all"] if len(models) > 1 else models:
        sel = [r for r in ok if scope in ("all", r["model"])]
        total = sum(1 for r in rows if scope in ("all", r["model"]))
        within = sum(1 for r in sel if abs(r["ours"]["as converted"]["energy"] / r["zigzag"]["energy"] - 1) <= 0.10)
        print(f"\n{scope}: geomean over {len(sel)} of {total} layers converted, ours / ZigZag (and the largest EDP "
              f"ratio); energy within 10% on {within} of {len(sel)}:")
        summary[scope] = {"layers": total, "converted": len(sel), "energy_within_10pct": within}
        for name in variants:
            sv = [r for r in sel if name in r["ours"]]
            e = _geomean([r["ours"][name]["energy"] / r["zigzag"]["energy"] for r in sv])
            lat = _geomean([r["ours"][name]["latency"] / r["zigzag"]["latency"] for r in sv])
            worst = max((r["ours"][name]["energy"] * r["ours"][name]["latency"] /
                         (r["zigzag"]["energy"] * r["zigzag"]["latency"]) for r in sv), default=float("nan"))
            summary[scope][name] = {"energy": e, "latency": lat, "edp": e * lat, "worst_edp": worst,
                                    "invalid_without": len(sel) - len(sv)}
            gone = f"; {len(sel) - len(sv)} layer(s) invalid without it, left out" if len(sv) < len(sel) else ""
            print(f"  {name:<78} energy {e:.3f}  latency {lat:.3f}  EDP {e * lat:.3f}  (max {worst:.2f}){gone}")
    beyond = [r for r in ok if r.get("causes")]
    print(f"\nremaining differences (EDP above {EDP_TARGET}x or energy beyond {ENERGY_TARGET:.0%}), by cause and "
          f"class: {len(beyond)} of {len(ok)} layers")
    by_class: dict[str, int] = {}
    for r in beyond:
        o, z = r["ours"]["as converted"], r["zigzag"]
        e, lat = o["energy"] / z["energy"], o["latency"] / z["latency"]
        print(f"  {r['model']} {r['hardware']} {r['layer']}: energy {e:.3f}, latency {lat:.3f}, EDP {e * lat:.3f}")
        for text, cls in r["causes"]:
            print(f"    [{cls}] {text}")
            by_class[cls] = by_class.get(cls, 0) + 1
    print("  causes per class: " + ", ".join(f"{k} {v}" for k, v in sorted(by_class.items())))
    simmed = [r for r in ok if "simulator_cycles" in r]
    if simmed:
        errs = sorted((r["ours"]["as converted"]["latency"] / r["simulator_cycles"] - 1, r["model"], r["hardware"],
                       r["layer"]) for r in simmed)
        within = sum(abs(e[0]) <= 0.02 for e in errs)
        print(f"\nour model against our simulator on ZigZag's mappings ({len(simmed)} layers of at most "
              f"{SIM_MAX_STEPS:,} tile steps): within 2% on {within}; largest errors:")
        for e, mo, hw, lay in sorted(errs, key=lambda t: -abs(t[0]))[:5]:
            print(f"  {e:+.2%}  {mo} {hw} {lay}")
    return {"rows": rows, "summary": summary, "causes_per_class": by_class}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--objective", default="edp", choices=["edp", "energy", "latency"])
    ap.add_argument("--models", nargs="+", default=["resnet18", "mobilenetv2"])
    ap.add_argument("--hardware", nargs="+", default=["tpu_like", "edge_tpu_like", "ascend_like"])
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--time-limit", type=float, default=10.0, help="our search seconds per layer")
    ap.add_argument("--out", type=Path, help=f"results JSON (default {RESULTS.relative_to(HERE.parent)}; with "
                    "--model-only, results/zigzag_model_agreement.json)")
    ap.add_argument("--cpu-clock", action="store_true",
                    help="our heuristic's time limit counts CPU seconds of its worker, not wall clock (a machine "
                         "shared with other jobs starves a wall-clock search; results then do not depend on the load)")
    ap.add_argument("--reuse-zigzag", action="store_true",
                    help="use ZigZag's results (and wall times) stored by an earlier run in results/zigzag_raw/")
    ap.add_argument("--simulate", action="store_true",
                    help="with --model-only: our simulator on ZigZag's mappings too (up to 200,000 tile steps)")
    ap.add_argument("--zigzag-only", action="store_true",
                    help="run ZigZag's search alone on each pair and store it in results/zigzag_raw/ (its mappings, "
                         "wall and CPU seconds, load average); later runs take it with --reuse-zigzag")
    ap.add_argument("--model-only", action="store_true",
                    help="no search: both cost models on ZigZag's stored mappings, per layer and per conversion "
                         "property (needs results/zigzag_raw/ from an earlier run)")
    ap.add_argument("--unrolling", choices=["both", "fixed", "free"], default="both",
                    help="which of our searches to run: ZigZag's spatial unrolling fixed, ours free, or both "
                         "(--report puts a fixed run and a free run of the same pair together)")
    ap.add_argument("--heuristic", nargs="+", default=[], metavar="KNOB=VALUE",
                    help="the heuristic's knobs (accelmap.search.heuristic_config.HeuristicConfig fields) for both "
                         "searches, e.g. climbs=4 packing_climbs=2 (the budget before this session's change)")
    ap.add_argument("--report", type=Path, nargs="+", metavar="JSON",
                    help="no search: print the tables of results written by earlier runs (e.g. one run per pair, "
                         "started side by side), together")
    a = ap.parse_args()
    knobs = heuristic_knobs(a.heuristic)
    if a.report:
        stored = [json.loads(path.read_text()) for path in a.report]
        pairs = merge_pairs([p for d in stored for p in d["pairs"]])
        zigzag_times_from_raw(pairs, stored[0]["objective"])
        report(pairs, stored[0]["objective"])
        return
    if a.model_only:
        zz_opt = {"edp": "EDP", "energy": "energy", "latency": "latency"}[a.objective]
        out = model_only(a.models, a.hardware, zz_opt, a.simulate)
        path = a.out or RESULTS.parent / "zigzag_model_agreement.json"
        path.write_text(json.dumps(out, indent=1) + "\n")
        print(f"wrote {path}")
        return
    py = ensure_venv()
    if py is None:
        sys.exit(0)
    inputs = zigzag_inputs(py)
    zz_opt = {"edp": "EDP", "energy": "energy", "latency": "latency"}[a.objective]
    if a.zigzag_only:
        for model in a.models:
            for hw in a.hardware:
                zz = run_zigzag(py, model, hw, zz_opt)
                print(f"{model} on {hw}: ZigZag {zz['cpu_seconds']:.1f} CPU s, {zz['wall_seconds']:.1f} s wall, load "
                      + "-".join(f"{x:.1f}" for x in zz["load_average"]), flush=True)
        return
    pairs = []
    for model in a.models:
        for hw in a.hardware:
            print(f"  {model} on {hw}: ZigZag ...", file=sys.stderr, flush=True)
            zz = run_zigzag(py, model, hw, zz_opt, a.reuse_zigzag)
            print(f"  {model} on {hw}: ZigZag {zz['wall_seconds']:.1f} s; accelmap ...", file=sys.stderr, flush=True)
            load_before = os.getloadavg()[0]
            files = (inputs / "workload" / f"{model}.onnx", inputs / "hardware" / f"{hw}.yaml",
                     inputs / "mapping" / f"{hw}.yaml")
            fixed = (run_ours(*files, a.objective, a.jobs, a.time_limit, cpu_clock=a.cpu_clock, knobs=knobs)
                     if a.unrolling != "free" else None)
            free = (run_ours(*files, a.objective, a.jobs, a.time_limit, free_spatial=True, cpu_clock=a.cpu_clock,
                             knobs=knobs)
                    if a.unrolling != "fixed" else None)
            arch = (fixed or free)[1]
            rows = compare(zz, (fixed or free)[0], arch, a.objective)
            if fixed is None:       # the rows compare ZigZag's mapping only; ours is the free search's
                for r in rows:
                    r["ours"] = None
            if free is not None:
                by_name = {l.name: l for l in free[0].layers}
                for r in rows:
                    fl = by_name.get(r["layer"])
                    r["ours_free_spatial"] = None if fl is None or not fl.ok else {
                        "energy": fl.result.energy_total, "latency": fl.result.latency, "edp": fl.result.edp,
                        "gap": fl.gap, "spatial": [f"{lp.dim}{lp.bound}@{lp.axis}" for lp in fl.mapping.loops
                                                   if lp.spatial]}
            pairs.append({"model": model, "hardware": hw, "zigzag_seconds": zz["wall_seconds"],
                          "zigzag_cpu_seconds": zz.get("cpu_seconds"), "zigzag_load_average": zz.get("load_average"),
                          "ours_seconds": fixed and fixed[2], "ours_cpu_seconds": fixed and fixed[3],
                          "ours_free_spatial_cpu_seconds": free and free[3],
                          # 1-minute load average before and after our runs (2-core machine shared)
                          "load_average": [load_before, os.getloadavg()[0]],
                          "zigzag_layers_mapped": len(zz["layers"]),
                          "our_distinct_layers": len(rows), "conversion_notes": (fixed or free)[4],
                          "zigzag_total": {"energy": zz["energy"], "latency": zz["latency"]},
                          "ours_total": fixed and {"energy": fixed[0].energy_total, "latency": fixed[0].latency_total},
                          "ours_free_spatial_seconds": free and free[2],
                          "ours_free_spatial_total": free and {"energy": free[0].energy_total,
                                                               "latency": free[0].latency_total},
                          "layers": rows})
            print(f"  {model} on {hw}: " + (f"accelmap {fixed[2]:.1f} s ({fixed[3]:.1f} s CPU) " if fixed else "")
                  + (f"spatial free {free[2]:.1f} s ({free[3]:.1f} s CPU) " if free else "")
                  + f"load {load_before:.1f}-{os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)
    report(pairs, a.objective)
    a.out = a.out or RESULTS
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"objective": a.objective, "jobs": a.jobs, "time_limit_per_layer": a.time_limit,
                                   "time_limit_clock": "cpu" if a.cpu_clock else "wall", "heuristic_knobs": knobs,
                                   "zigzag_version": ZIGZAG_VERSION, "pairs": pairs}, indent=2) + "\n")
    print(f"wrote {a.out}")


def heuristic_knobs(items: list[str]) -> dict:
    """``KNOB=VALUE`` words -> HeuristicConfig fields with their types; a bad one exits with one line."""
    from dataclasses import fields

    from accelmap.search.heuristic_config import HeuristicConfig

    types = {f.name: type(getattr(HeuristicConfig(), f.name)) for f in fields(HeuristicConfig)}
    out: dict = {}
    for item in items:
        name, _, value = item.partition("=")
        if name not in types or not value:
            sys.exit(f"--heuristic {item}: expected KNOB=VALUE with KNOB one of {', '.join(sorted(types))}")
        try:
            out[name] = value.lower() in ("1", "true", "yes") if types[name] is bool else types[name](value)
        except ValueError:
            sys.exit(f"--heuristic {item}: {value!r} is not a {types[name].__name__}")
    return out


def zigzag_times_from_raw(pairs: list[dict], objective: str) -> None:
    """A pair run against a stored ZigZag result without CPU seconds (--reuse-zigzag of an older run) takes
    them from results/zigzag_raw/ when a later ZigZag run (--zigzag-only) stored them there, and only if that
    run found the same result: every layer's energy and latency equal to the ones the pair compared."""
    zz_opt = {"edp": "EDP", "energy": "energy", "latency": "latency"}[objective]
    for p in pairs:
        if p.get("zigzag_cpu_seconds") is not None:
            continue
        raw = RESULTS.parent / "zigzag_raw" / f"{p['model']}-{p['hardware']}-{zz_opt}.json"
        if not raw.exists():
            continue
        zz = json.loads(raw.read_text())
        if zz.get("cpu_seconds") is None:
            continue
        theirs = {zl["name"]: (zl["energy"], zl["latency"]) for zl in zz["layers"]}
        by_name = {r["layer"]: r for r in p["layers"]}
        same = all(r["zigzag_own"] is None or any(
            math.isclose(e, r["zigzag_own"]["energy"], rel_tol=1e-12)
            and math.isclose(lat, r["zigzag_own"]["latency"], rel_tol=1e-12) for e, lat in theirs.values())
            for r in by_name.values())
        if same:
            p["zigzag_cpu_seconds"], p["zigzag_load_average"] = zz["cpu_seconds"], zz.get("load_average")
        else:
            print(f"{raw}: a different ZigZag result from the one {p['model']}/{p['hardware']} compared; its CPU "
                  "seconds are not used", file=sys.stderr)


def merge_pairs(pairs: list[dict]) -> list[dict]:
    """Runs of the same (model, hardware) made apart (--unrolling fixed, --unrolling free) as one pair: the
    fixed run's fields and rows, the free run's ``ours_free_spatial*`` fields and per-layer results."""
    out: dict[tuple[str, str], dict] = {}
    for p in pairs:
        key = (p["model"], p["hardware"])
        if key not in out:
            out[key] = json.loads(json.dumps(p))
            continue
        have = out[key]
        fixed, free = (have, p) if have.get("ours_seconds") is not None else (p, have)
        merged = json.loads(json.dumps(fixed))
        for k in ("ours_free_spatial_cpu_seconds", "ours_free_spatial_seconds", "ours_free_spatial_total"):
            merged[k] = free[k]
        merged["load_average"] = fixed["load_average"] + free["load_average"]
        by_layer = {r["layer"]: r for r in free["layers"]}
        for r in merged["layers"]:
            r["ours_free_spatial"] = by_layer.get(r["layer"], {}).get("ours_free_spatial")
        out[key] = merged
    return list(out.values())


def _ratio(a: float, b: float) -> float:
    return a / b if b else float("inf")


def report(pairs: list[dict], objective: str) -> None:
    key = objective
    hdr = (f"{'model':<12} {'hardware':<14} {'ZZ CPU s':>8} {'ZZ load':>9} {'ours CPU s':>10} {'ZZ/ours':>7} "
           f"{'our load':>9} {'layers':>6} "
           f"{'ours<=ZZ':>8} {'worse':>5} {'exact':>5} {'equiv':>5} {'approx':>6} {'n/c':>4} "
           f"{'ZZ map ours/ZZ: exact':>21} {'all':>8}")
    print(hdr)
    print("-" * len(hdr))
    for p in pairs:
        if p["ours_seconds"] is None:      # a run of the free search only
            continue
        rows = p["layers"]
        comp = [r for r in rows if r["ours"] and r["zigzag_in_ours"]]
        better = sum(1 for r in comp if r["ours"][key] <= r["zigzag_in_ours"][key] * (1 + 1e-9))
        worse = len(comp) - better
        exact = [r for r in rows if r["status"] in ("exact", "equivalent")]
        n_exact = sum(1 for r in rows if r["status"] == "exact")
        approx = sum(1 for r in rows if r["status"] == "approx")
        nc = sum(1 for r in rows if r["status"].startswith("not"))
        # Cost-model disagreement on ZigZag's own mapping, exact conversions only: geometric mean of ours / ZigZag's.
        def gmean(rs):
            ratios = [_ratio(r["zigzag_in_ours"][key], r["zigzag_own"][key]) for r in rs]
            return math.exp(sum(math.log(x) for x in ratios) / len(ratios)) if ratios else float("nan")
        gm = gmean(exact)
        gm_all = gmean([r for r in rows if r["zigzag_in_ours"]])
        # ZigZag's CPU seconds where its run recorded them; else its wall time (older runs, marked *)
        zz_cpu = p.get("zigzag_cpu_seconds")
        zz_s = zz_cpu if zz_cpu is not None else p["zigzag_seconds"]
        p["summary"] = {"speedup": _ratio(p["zigzag_seconds"], p["ours_seconds"]),
                        "speedup_by_cpu": _ratio(zz_s, p["ours_cpu_seconds"]),
                        "zigzag_seconds_are_cpu": zz_cpu is not None, "compared": len(comp),
                        "ours_equal_or_better": better, "ours_worse": worse, "exact": n_exact,
                        "equivalent": len(exact) - n_exact,
                        "approx": approx, "not_convertible": nc, "model_ratio_geomean_exact": gm,
                        "model_ratio_geomean_converted": gm_all}
        load = "-".join(f"{x:.0f}" for x in p["load_average"])
        zz_load = "-".join(f"{x:.0f}" for x in p.get("zigzag_load_average") or []) or "quiet"
        zz_col = f"{zz_s:.1f}" + ("" if zz_cpu is not None else "*")
        print(f"{p['model']:<12} {p['hardware']:<14} {zz_col:>8} {zz_load:>9} {p['ours_cpu_seconds']:>10.1f} "
              f"{p['summary']['speedup_by_cpu']:>6.1f}x {load:>9} {len(rows):>6} {better:>8} {worse:>5} {n_exact:>5} {len(exact) - n_exact:>5} {approx:>6} "
              f"{nc:>4} {gm:>21.3g} {gm_all:>8.3g}")
    print(f"\nour spatial unrolling free (no constraints), against ZigZag's mapping (its spatial unrolling "
          f"from the wheel's mapping file), both in our model, objective {objective}:")
    hdr2 = (f"{'model':<12} {'hardware':<14} {'ours s':>7} {'CPU s':>6} {'layers':>6} {'free<=ZZ':>8} "
            f"{'geomean ZZ/free':>15} {'best layer':>10} {'model ZZ/free':>13} {'model fixed/free':>16}")
    print(hdr2)
    print("-" * len(hdr2))
    for p in pairs:
        if p.get("ours_free_spatial_seconds") is None:     # a run of the fixed search only
            continue
        rows = [r for r in p["layers"] if r.get("ours_free_spatial") and r["zigzag_in_ours"]]
        ratios = [_ratio(r["zigzag_in_ours"][key], r["ours_free_spatial"][key]) for r in rows]
        gm = math.exp(sum(math.log(x) for x in ratios) / len(ratios)) if ratios else float("nan")
        # Whole model: ZigZag's mappings (where converted) against ours, summed over occurrences.
        zz_e = sum(r["zigzag_in_ours"]["energy"] * r["count"] for r in rows)
        zz_l = sum(r["zigzag_in_ours"]["latency"] * r["count"] for r in rows)
        fr_e = sum(r["ours_free_spatial"]["energy"] * r["count"] for r in rows)
        fr_l = sum(r["ours_free_spatial"]["latency"] * r["count"] for r in rows)
        zz_v = {"energy": zz_e, "latency": zz_l, "edp": zz_e * zz_l}[key]
        fr_v = {"energy": fr_e, "latency": fr_l, "edp": fr_e * fr_l}[key]
        ft, ff = p["ours_total"], p["ours_free_spatial_total"]
        fixed_v = ({"energy": ft["energy"], "latency": ft["latency"], "edp": ft["energy"] * ft["latency"]}[key]
                   if ft else math.nan)
        free_v = {"energy": ff["energy"], "latency": ff["latency"], "edp": ff["energy"] * ff["latency"]}[key]
        p["summary_free_spatial"] = {"compared": len(rows), "free_equal_or_better": sum(1 for x in ratios if x >= 1 - 1e-9),
                                     "geomean_zigzag_over_free": gm, "best_layer": max(ratios, default=float("nan")),
                                     "model_zigzag_over_free": _ratio(zz_v, fr_v),
                                     "model_fixed_over_free": _ratio(fixed_v, free_v)}
        sf = p["summary_free_spatial"]
        print(f"{p['model']:<12} {p['hardware']:<14} {p['ours_free_spatial_seconds']:>7.1f} "
              f"{p['ours_free_spatial_cpu_seconds']:>6.1f} {len(rows):>6} "
              f"{sf['free_equal_or_better']:>8} {gm:>14.2f}x {sf['best_layer']:>9.1f}x "
              f"{sf['model_zigzag_over_free']:>12.2f}x {sf['model_fixed_over_free']:>15.2f}x")
    print("\n'ZZ CPU s': ZigZag's CPU seconds for the whole model (parsing and search; results/zigzag_raw/, "
          "--zigzag-only; * marks a stored run without them: its wall time on a quiet machine); 'ours CPU s': ours "
          "(import and search, main process and workers); 'ZZ/ours' their ratio; loads: the 1-minute load average "
          "before and after each tool's run (2 cores; wall times are in the JSON).")
    print(f"objective {objective}; 'ours<=ZZ': layers where our mapping's {objective} in our model is at most "
          "that of ZigZag's mapping converted into our model.")
    print("'ZZ map ours/ZZ': geometric mean, over exact or equivalent conversions and over all converted layers, of "
          f"our model's {objective} of ZigZag's mapping divided by ZigZag's own.")
    print("\nper layer, where the cost models disagree by more than 10% on ZigZag's mapping (energy and "
          "latency ratios ours/ZigZag; [approx]: the conversion moved loops, see the docstring):")
    for p in pairs:
        for r in p["layers"]:
            if not r["zigzag_in_ours"]:
                continue
            e = _ratio(r["zigzag_in_ours"]["energy"], r["zigzag_own"]["energy"])
            l = _ratio(r["zigzag_in_ours"]["latency"], r["zigzag_own"]["latency"])
            r["model_ratio"] = {"energy": e, "latency": l}
            if abs(math.log(e)) > math.log(1.1) or abs(math.log(l)) > math.log(1.1):
                comps = sorted(r.get("energy_components", {}).items(), key=lambda kv: -abs(kv[1][0] - kv[1][1]))
                top = ", ".join(f"{k} {v[0] / 1e6:.3g} vs {v[1] / 1e6:.3g} uJ" for k, v in comps[:2])
                print(f"  {p['model']}/{p['hardware']} {r['layer']}: energy x{e:.3g}, latency x{l:.3g}"
                      f" [{r['status']}]; largest energy gaps (ours vs ZigZag): {top}; our stalls "
                      f"{r['zigzag_in_ours']['stall_cycles']:,.0f} of {r['zigzag_in_ours']['latency']:,.0f} cycles")
    for p in pairs:
        for r in p["layers"]:
            if r["ours"] and r["zigzag_in_ours"] and r["ours"][key] > r["zigzag_in_ours"][key] * (1 + 1e-9):
                print(f"  worse than ZigZag's mapping: {p['model']}/{p['hardware']} {r['layer']} "
                      f"({r['ours']['how']}): ours {r['ours'][key]:.4g} vs {r['zigzag_in_ours'][key]:.4g} "
                      f"[{r['status']}]")
            free = r.get("ours_free_spatial")
            if free and r["zigzag_in_ours"] and free[key] > r["zigzag_in_ours"][key] * (1 + 1e-9):
                print(f"  worse than ZigZag's mapping with our unrolling free: {p['model']}/{p['hardware']} "
                      f"{r['layer']}: ours {free[key]:.4g} vs {r['zigzag_in_ours'][key]:.4g} [{r['status']}]")


if __name__ == "__main__":
    main()
