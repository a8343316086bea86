"""Code generation and simulation benchmark; analytical latency against the simulator.

For every distinct layer of ResNet-18 and MobileNetV2 on eyeriss_like, tpu_like,
vta_like and diana_like, with the mapper's best mapping (``accelmap.search.map_operator``
if it exists, else a greedy mapping built here, said in the output):

* generation + compile time of the C program (ResNet-18 layers; ``--compile-all`` for all),
* simulated cycles, simulator wall time and simulated cycles per second,
* the analytical latency (``accelmap.cost.evaluate``) against the simulator.

It also reproduces the worked example of Hamdi's thesis (DIANA, Set-A layer L1: 13,632 compute
cycles against an ideal 3,072). Prints tables, writes benchmarks/results/codegen_sim.json.

    python benchmarks/codegen_sim.py [--quick] [--compile-all] [--zigzag] [--archs A ...]
    python benchmarks/codegen_sim.py --reevaluate benchmarks/results/codegen_sim.json ... [--resimulate]

``--zigzag`` adds ZigZag's tpu_like, edge_tpu_like and ascend_like hardware files as converted by
``accelmap.arch.zigzag_import`` (written to codegen_sim_zigzag.json).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from accelmap.arch import get_accelerator
from accelmap.codegen.build import compile_shared
from accelmap.codegen.c_source import generate_c
from accelmap.cost import access_counts, evaluate
from accelmap.cost.latency import latency_terms
from accelmap.errors import MappingError
from accelmap.examples import example_path
from accelmap.mapping import Loop, Mapping, format_text, parse_text, validate
from accelmap.mapping.sampling import prime_factors
from accelmap.mapping.validate import check_capacity, check_structure
from accelmap.sim import simulate
from accelmap.workload import conv2d
from accelmap.workload.models.bundled import load_model

ARCHS = ("eyeriss_like", "tpu_like", "vta_like", "diana_like")
# With --zigzag: ZigZag's own hardware files, converted by accelmap.arch.zigzag_import (ZigZag is
# installed into its own venv by benchmarks/mapper_vs_zigzag.py's ensure_venv)
ZIGZAG_ARCHS = ("zigzag:tpu_like", "zigzag:edge_tpu_like", "zigzag:ascend_like")
_ARCH_CACHE: dict = {}


def get_arch(name: str):
    """A preset, or ``zigzag:NAME``: ZigZag's hardware file NAME converted (with its mapping file's links)."""
    if name not in _ARCH_CACHE:
        if name.startswith("zigzag:"):
            sys.path.insert(0, str(Path(__file__).parent))
            from mapper_vs_zigzag import ensure_venv, zigzag_inputs

            from accelmap.arch.zigzag_import import load_zigzag_accelerator
            py = ensure_venv()
            if py is None:
                raise SystemExit("--zigzag needs ZigZag (see the message above)")
            base, hw = zigzag_inputs(py), name.split(":", 1)[1]
            _ARCH_CACHE[name] = load_zigzag_accelerator(base / "hardware" / f"{hw}.yaml",
                                                        base / "mapping" / f"{hw}.yaml")[0]
        else:
            _ARCH_CACHE[name] = get_accelerator(name)
    return _ARCH_CACHE[name]
MAPPER_TIME_LIMIT = 2.0     # seconds per layer for the project's mapper; 0 = greedy only
MAPPER_CPU_CLOCK = False    # --cpu-clock: the heuristic's limit counts its CPU seconds (a loaded machine)
MODELS = ("resnet18", "mobilenetv2")
RESULTS = Path(__file__).parent / "results"


# ---------------------------------------------------------------- mappings
def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def spatial_choices(op, arch) -> list[tuple[str | None, ...]]:
    """Per fan-out axis, a dim to unroll on it (or None): every combination of the dims that
    can use the axis best, one dim per axis."""
    out_dims = op.output.dims
    per_axis = []
    for lv in arch.levels:
        for ax in (lv.fanout.axes if lv.fanout else ()):
            cands = [d for d in op.dim_names if (d in out_dims or ax.reduce) and op.sizes[d] > 1]
            cands.sort(key=lambda d: -max(x for x in _divisors(op.sizes[d]) if x <= ax.size))
            per_axis.append(cands[:4] or [None])
    combos = [()]
    for cands in per_axis:
        combos = [c + (d,) for c in combos for d in cands if d is None or d not in c] or combos
    return combos


def greedy_mapping(op, arch, keep_deepest: str, reduction_inner: bool, choice: tuple = ()) -> Mapping:
    """Spatial axes take the largest factor of their chosen dim that divides it; then, deepest
    level first, every prime factor moves down while the level's tiles fit (reduction dims first)."""
    nlev = len(arch.levels)
    out_dims = op.output.dims
    rem = dict(op.sizes)
    spatial: list[Loop] = []
    k = 0
    for i, lv in enumerate(arch.levels):
        for ax in (lv.fanout.axes if lv.fanout else ()):
            d = choice[k] if k < len(choice) else None
            k += 1
            if d is None:
                continue
            b = max(x for x in _divisors(rem[d]) if x <= ax.size)
            if b > 1:
                spatial.append(Loop(d, b, i, ax.name))
                rem[d] //= b
    keep = []
    for i, lv in enumerate(arch.levels):
        k = {o.name for o in op.operands if o.cls in lv.holds}
        if i == nlev - 1 and i > 0 and lv.bypass:
            if keep_deepest == "O":
                k = {o.name for o in op.operands if o.is_output and o.cls in lv.holds} or k
            elif keep_deepest == "W":
                k = {o.name for o in op.operands if o.cls == "W" and o.cls in lv.holds} or k
        keep.append(frozenset(k))
    place = {d: [0] * nlev for d in op.dim_names}     # product of factors per (dim, level)
    factors = [(d, p) for d in op.dim_names for p in prime_factors(rem[d])]
    factors.sort(key=lambda x: (x[0] in out_dims, -x[1]))

    def build() -> Mapping:
        loops = []
        for i in range(nlev):
            dims = sorted(op.dim_names, key=lambda d: ((d not in out_dims) == reduction_inner, op.dim_names.index(d)))
            for d in dims:
                b = place[d][i] or 1
                if b > 1:
                    loops.append(Loop(d, b, i))
            loops.extend(l for l in spatial if l.level == i)
        return Mapping(tuple(loops), tuple(keep))

    for d, p in factors:
        place[d][0] = (place[d][0] or 1) * p
    for i in reversed(range(1, nlev)):
        for d, p in factors:
            if not place[d][0] or place[d][0] % p:
                continue
            place[d][0] //= p
            place[d][i] = (place[d][i] or 1) * p
            try:
                check_capacity(op, arch, build())
            except MappingError:
                place[d][i] //= p
                place[d][0] *= p
    m = build()
    check_structure(op, arch, m)
    check_capacity(op, arch, m)
    return m


def best_mapping(op, arch):
    """(mapping, source): the project's mapper if it offers map_operator, else the best greedy variant."""
    map_operator = None
    for mod in ("accelmap.search", "accelmap.search.mapper"):
        try:
            map_operator = getattr(__import__(mod, fromlist=["map_operator"]), "map_operator")
            break
        except (ImportError, AttributeError):
            continue
    if map_operator is not None and MAPPER_TIME_LIMIT > 0:
        from accelmap.search.heuristic_config import DEFAULT_HEURISTIC
        found = map_operator(op, arch, "latency", time_limit=MAPPER_TIME_LIMIT,
                             heuristic_config=replace(DEFAULT_HEURISTIC, cpu_clock=MAPPER_CPU_CLOCK))
        best = getattr(found, "best", found)
        if best is not None:
            clock = " of CPU" if MAPPER_CPU_CLOCK else ""
            return (getattr(best, "mapping", best),
                    f"accelmap.search map_operator ({found.strategy}, {MAPPER_TIME_LIMIT:g} s limit{clock})")
    best = None
    for choice in spatial_choices(op, arch):
        for keep in ("all", "O", "W"):
            for red in (True, False):
                try:
                    m = greedy_mapping(op, arch, keep, red, choice)
                except MappingError:
                    continue
                lat = evaluate(op, arch, m, check=False).latency
                if best is None or lat < best[0]:
                    best = (lat, m)
    if best is None:
        raise MappingError(f"greedy mapper found no valid mapping of {op.name} on {arch.name}")
    return best[1], "greedy (built in this benchmark)"


def at_precision(op, arch, out_bits: int = 32):
    """Operands at 8/8/``out_bits`` bits where the datapath supports it, else at its first precision
    (a converted ZigZag accelerator: its first, ZigZag's 16-bit partial sums)."""
    if "converted from ZigZag" in arch.description:
        out_bits = arch.compute.supported_bits("O")[0]
    want = {"I": 8, "W": 8, "O": out_bits}
    ops = []
    for o in op.operands:
        ok = arch.compute.supported_bits(o.cls)
        ops.append(replace(o, bits=want[o.cls] if want[o.cls] in ok else ok[0]))
    return replace(op, operands=tuple(ops))


# ---------------------------------------------------------------- the thesis' worked example


def hamdi_example() -> dict:
    arch = get_accelerator("diana_like")
    op = conv2d("setA_L1", c=16, h=16, w=48, k=64, r=1, s=1, bits={"I": 8, "W": 8, "O": 32})
    m = parse_text(Path(example_path("diana_setA_L1.mapping.txt")).read_text(), arch, "diana_setA_L1.mapping.txt")
    validate(op, arch, m)
    res = evaluate(op, arch, m)
    terms = latency_terms(op, arch, m, access_counts(op, arch, m))
    sim = simulate(op, arch, m, functional=True)
    ideal = op.macs // 256
    return {"layer": "Set-A L1 (K=64, C=16, 1x1, OY=16, OX=48)", "ideal_cycles": ideal,
            "model_compute_cycles": terms.compute_cycles + terms.pipeline_cycles, "sim_compute_busy": sim.timing.busy.get("compute"),
            "expected": 13632, "model_latency": res.latency, "sim_cycles": sim.cycles,
            "functional_ok": sim.functional}


# ---------------------------------------------------------------- random mappings
RANDOM_MAX_STEPS = 60_000   # random mappings with more tile-program steps are drawn again


def random_draws(arch, diana: bool, layers: list, rng, n: int, max_steps: int = RANDOM_MAX_STEPS):
    """Up to ``n`` random valid mappings (``mapping.sampling``, 30% imperfect) of random layers of ``layers`` on
    ``arch``, as (layer, operator, mapping); at most 40 draws per mapping; a mapping with more than ``max_steps``
    tile-program steps is drawn again."""
    from accelmap.mapping.sampling import random_mapping

    got = draws = 0
    while got < n and draws < 40 * n:
        draws += 1
        layer = rng.choice(layers)
        op = at_precision(layer.operator, arch, 8 if diana else 32)
        try:
            m = random_mapping(op, arch, rng, imperfect=rng.random() < 0.3, check_fit=True, tries=50)
            validate(op, arch, m)
        except MappingError:
            continue
        chains = [[i for i in range(len(arch.levels)) if X.name in m.keep[i]] for X in op.operands]
        deepest = max((c[-1] for c in chains if len(c) > 1), default=0)
        if math.prod(l.bound for l in m.loops if not l.spatial and l.level < deepest) > max_steps:
            continue
        got += 1
        yield layer, op, m


def random_mapping_check(n_per_arch: int, seed: int = 0) -> dict:
    """Model against simulator on random valid mappings (``mapping.sampling``, 30% imperfect) of
    random ResNet-18 / MobileNetV2 layers: the model must be faithful in general, not only on
    the mappings the mapper prefers today."""
    import random

    from accelmap.mapping import format_text
    from accelmap.sim.engine import run_timing
    from accelmap.sim.program import build_program

    rng = random.Random(seed)
    layers = [l for model in MODELS for l in load_model(model).layers]
    rows, summary = [], {}
    for a in ARCHS:
        arch = get_arch(a)
        errs = []
        for layer, op, m in random_draws(arch, a == "diana_like", layers, rng, n_per_arch):
            t0 = time.perf_counter()
            timing = run_timing(build_program(op, arch, m), 0)
            wall = time.perf_counter() - t0
            lat = evaluate(op, arch, m, check=False).latency
            err = (lat - timing.cycles) / timing.cycles
            errs.append(abs(err))
            rows.append({"arch": a, "layer": layer.operator.name, "mapping": format_text(m, arch, op),
                         "sim_cycles": timing.cycles, "model_latency": lat, "error": err, "sim_wall_s": wall})
        if errs:
            summary[a] = {"mappings": len(errs), "mean_abs_error": statistics.mean(errs), "max_abs_error": max(errs),
                          "over_15pct": sum(e > 0.15 for e in errs)}
    return {"seed": seed, "per_arch": n_per_arch, "max_steps": RANDOM_MAX_STEPS, "summary": summary, "rows": rows}


# ---------------------------------------------------------------- stored mappings re-evaluated
def reevaluate(paths: list[Path], resimulate: bool = False) -> dict:
    """The model of every stored mapping (mapper rows and random rows of earlier runs' JSON) against the
    simulator cycles stored beside it, or simulated again (``resimulate``: where the accelerator or
    the simulator changed since). The same draws, so a model change shows row by row."""
    from accelmap.sim.engine import run_timing
    from accelmap.sim.program import build_program

    ops: dict[tuple[str, str], list] = {}
    for model in MODELS:
        for layer in load_model(model).layers:
            ops.setdefault((model, layer.operator.name), []).append(layer.operator)
            ops.setdefault(("", layer.operator.name), []).append(layer.operator)
    out: dict = {}
    for path in paths:
        data = json.loads(path.read_text())
        for kind, rows in (("mapper", data["rows"]), ("random", (data.get("random_mappings") or {}).get("rows", []))):
            errs: dict[str, list[float]] = {}
            for r in rows:
                arch = get_arch(r["arch"])
                bits = int(r.get("output_bits") or (8 if r["arch"] == "diana_like" else 32))
                found = None
                for cand in ops[(r.get("model", ""), r["layer"])]:
                    op = at_precision(cand, arch, bits)
                    try:
                        m = parse_text(r["mapping"], arch, str(path))
                        validate(op, arch, m)
                    except MappingError:
                        continue
                    found = op, m
                    break
                if found is None:
                    print(f"  {path.name} {kind} {r['arch']} {r['layer']}: stored mapping no longer valid, skipped")
                    continue
                op, m = found
                sim = run_timing(build_program(op, arch, m), 0).cycles if resimulate else float(r["sim_cycles"])
                err = (evaluate(op, arch, m, check=False).latency - sim) / sim
                errs.setdefault(r["arch"], []).append(abs(err))
                before = float(r["error"])
                if abs(err) > 0.02 or abs(abs(err) - abs(before)) > 0.002:
                    print(f"  {path.name} {kind} {r['arch']} {r['layer']}: stored {before:+.2%}, now {err:+.2%}")
            for a, e in errs.items():
                out[f"{path.name} {kind} {a}"] = {"n": len(e), "mean_abs_error": statistics.mean(e), "max_abs_error": max(e)}
    print(f"\n{'stored rows':<48} {'n':>4} {'mean |err|':>11} {'max |err|':>10}")
    for k, v in out.items():
        print(f"{k:<48} {v['n']:>4} {v['mean_abs_error']:>11.2%} {v['max_abs_error']:>10.2%}")
    return out


# ---------------------------------------------------------------- main
def main(argv: list[str]) -> int:
    global MAPPER_TIME_LIMIT, MAPPER_CPU_CLOCK, ARCHS
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="ResNet-18 only, no compiles")
    ap.add_argument("--compile-all", action="store_true", help="generate and compile every layer, not only ResNet-18's")
    ap.add_argument("--greedy", action="store_true", help="use the greedy mapper even if accelmap.search has one")
    ap.add_argument("--mapper-time", type=float, default=MAPPER_TIME_LIMIT, help="time limit per layer of the mapper")
    ap.add_argument("--cpu-clock", action="store_true",
                    help="the mapper's heuristic counts its time limit in CPU seconds, not wall clock (a machine shared "
                         "with other jobs otherwise starves it into other mappings)")
    ap.add_argument("--random", type=int, default=40, help="random valid mappings per accelerator for the model check")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random mappings")
    ap.add_argument("--zigzag", action="store_true", help="also ZigZag's tpu_like, edge_tpu_like and ascend_like, "
                    "converted (installs ZigZag into benchmarks/.venv-zigzag on first use)")
    ap.add_argument("--archs", nargs="+", help="only these accelerators (presets or zigzag:NAME)")
    ap.add_argument("--reevaluate", type=Path, nargs="+", metavar="JSON",
                    help="only re-evaluate the model on the mappings stored in these results files")
    ap.add_argument("--resimulate", action="store_true", help="with --reevaluate: simulate the stored mappings again")
    args = ap.parse_args(argv)
    if args.reevaluate:
        reevaluate(args.reevaluate, args.resimulate)
        return 0
    if args.zigzag:
        ARCHS = ARCHS + ZIGZAG_ARCHS
    if args.archs:
        ARCHS = tuple(args.archs)
    MAPPER_TIME_LIMIT = 0.0 if args.greedy else args.mapper_time
    MAPPER_CPU_CLOCK = args.cpu_clock
    RESULTS.mkdir(parents=True, exist_ok=True)

    ex = hamdi_example()
    print(f"Hamdi's thesis worked example, {ex['layer']} on diana_like: compute cycles model {ex['model_compute_cycles']:,}, "
          f"simulator {ex['sim_compute_busy']:,.0f} (expected {ex['expected']:,}; ideal {ex['ideal_cycles']:,}); "
          f"latency model {ex['model_latency']:,.0f} vs simulator {ex['sim_cycles']:,.0f}; "
          f"functional {'ok' if ex['functional_ok'] else 'MISMATCH'}")

    rows = []
    invalid: list[dict] = []
    sources = set()
    models = MODELS[:1] if args.quick else MODELS
    hdr = (f"{'model':<12} {'layer':<22} {'arch':<13} {'gen ms':>7} {'cc s':>6} {'sim cycles':>13} {'sim s':>6} "
           f"{'Mcyc/s':>8} {'model':>13} {'error':>8}")
    print("\n" + hdr)
    print("-" * len(hdr))
    for model in models:
        layers = load_model(model).layers
        for layer in layers:
            for a in ARCHS:
                arch = get_arch(a)
                m, err_msg = None, ""
                # 32-bit results, or the int8 results DIANA writes back when 32-bit ones do not fit its 512 KiB
                for out_bits in (32, 8):
                    op = at_precision(layer.operator, arch, out_bits)
                    if out_bits == 8 and op.output.bits != 8:
                        break
                    try:
                        m, src = best_mapping(op, arch)
                        break
                    except MappingError as e:
                        err_msg = str(e)
                if m is None:
                    print(f"{model:<12} {layer.operator.name[:22]:<22} {a:<13} no mapping: {err_msg}")
                    continue
                sources.add(src)
                gen_ms = cc_s = None
                if not args.quick and (model == "resnet18" or args.compile_all):
                    t0 = time.perf_counter()
                    code = generate_c(op, arch, m)
                    t1 = time.perf_counter()
                    # a fresh file in a fresh directory: the build cache must not hide the compiler's time
                    with tempfile.TemporaryDirectory() as tmp:
                        compile_shared(code, Path(tmp) / f"{op.name}.c")
                    t2 = time.perf_counter()
                    gen_ms, cc_s = (t1 - t0) * 1e3, t2 - t1
                try:
                    sim = simulate(op, arch, m, functional=False)
                except MappingError as e:
                    # the mapper's answer fails validation: say so, it is a search bug, not a model error
                    print(f"{model:<12} {layer.operator.name[:22]:<22} {a:<13} INVALID mapping from {src}: {e}")
                    invalid.append({"model": model, "layer": op.name, "arch": a, "error": str(e),
                                    "mapping": format_text(m, arch, op)})
                    continue
                err = sim.model_error
                row = {"model": model, "layer": op.name, "arch": a, "macs": op.macs, "count": layer.count,
                       "output_bits": op.output.bits, "mapping": format_text(m, arch, op),
                       "mapping_source": src, "generate_ms": gen_ms, "compile_s": cc_s,
                       "sim_cycles": sim.cycles, "sim_wall_s": sim.wall_s,
                       "sim_cycles_per_s": sim.cycles / sim.wall_s if sim.wall_s else None,
                       "sim_steps": sim.program.n_steps, "model_latency": sim.model_latency, "error": err,
                       "utilization": sim.timing.utilization()}
                rows.append(row)
                print(f"{model:<12} {op.name[:22]:<22} {a:<13} "
                      f"{'' if gen_ms is None else f'{gen_ms:7.0f}':>7} {'' if cc_s is None else f'{cc_s:6.2f}':>6} "
                      f"{sim.cycles:>13,.0f} {sim.wall_s:>6.2f} {sim.cycles / sim.wall_s / 1e6 if sim.wall_s else 0:>8.1f} "
                      f"{sim.model_latency:>13,.0f} {err:>+8.1%}", flush=True)
    print("\nmappings from: " + "; ".join(f"{src} ({sum(r['mapping_source'] == src for r in rows)} layers)"
                                         for src in sorted(sources)))
    summary = {}
    for a in ARCHS + ("all",):
        errs = [abs(r["error"]) for r in rows if a == "all" or r["arch"] == a]
        if errs:
            summary[a] = {"layers": len(errs), "mean_abs_error": statistics.mean(errs), "max_abs_error": max(errs)}
    print(f"\n{'arch':<13} {'layers':>6} {'mean |err|':>11} {'max |err|':>10}")
    for a, s in summary.items():
        print(f"{a:<13} {s['layers']:>6} {s['mean_abs_error']:>11.2%} {s['max_abs_error']:>10.2%}")
    resnet = [r for r in rows if r["model"] == "resnet18"]
    if resnet:
        worst = max(resnet, key=lambda r: r["sim_wall_s"])
        print(f"\nslowest ResNet-18 simulation: {worst['layer']} on {worst['arch']}, {worst['sim_wall_s']:.2f} s "
              f"({worst['sim_steps']:,} steps)")
    rnd = random_mapping_check(args.random, args.seed) if args.random > 0 else None
    if rnd:
        print(f"\nrandom valid mappings (seed {rnd['seed']}, up to {RANDOM_MAX_STEPS:,} steps), model against simulator:")
        print(f"{'arch':<13} {'mappings':>8} {'mean |err|':>11} {'max |err|':>10} {'>15%':>5}")
        for a, s_ in rnd["summary"].items():
            print(f"{a:<13} {s_['mappings']:>8} {s_['mean_abs_error']:>11.2%} {s_['max_abs_error']:>10.2%} {s_['over_15pct']:>5}")
    name = "codegen_sim_greedy" if args.greedy else "codegen_sim"
    out = RESULTS / (f"{name}_archs.json" if args.archs else f"{name}_zigzag.json" if args.zigzag else f"{name}.json")
    out.write_text(json.dumps({"hamdi_example": ex, "mapping_sources": sorted(sources), "summary": summary,
                               "rows": rows, "invalid_mappings": invalid, "random_mappings": rnd}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
