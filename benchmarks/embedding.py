"""Intrinsic embedding benchmark (Rieber's dissertation, ch. 4).

1. DeepBench inference convolutions (the copy bundled with accelmap, ``deepbench_conv``):
   strict and relaxed embedding of vta_gemm, search effort, full-size programs, and numerical
   verification of the strict and the best relaxed program on reduced spatial sizes (the same
   solution, re-extrapolated to an operator with small output images).
2. The dissertation's Table 4.2 (14 low-channel and dilated convs) on vta_like, and Table 4.6 (8x8x8
   variant) on vta_8x8x8: best embedding by operator cost, combined cost and memory, relative to the
   TVM-like default (strict: NCHW, input channels padded). MODELLED numbers (our cost model) are
   printed next to the dissertation's REPORTED FPGA numbers; they are not the same measurement.
3. Dense, batched matmul, depthwise and grouped convolutions on all five intrinsics, verified.

Run: python benchmarks/embedding.py [--quick]   -> prints tables, writes benchmarks/results/embedding.json
     (--quick: every 8th DeepBench layer, written to embedding_quick.json)
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from accelmap.arch.intrinsics import get_intrinsic
from accelmap.arch.presets import get_accelerator
from accelmap.embed.program import build_program, verify_program
from accelmap.embed.rank import geomean
from accelmap.embed.search import embed, with_mapper
from accelmap.workload.constructors import batched_matmul, conv2d, dense, depthwise_conv2d

ROOT = Path(__file__).resolve().parent
# The bundled copy (the same rows as the file in the project's shared data), so the benchmark runs
# from a checkout alone.
CSV = ROOT.parent / "src" / "accelmap" / "data" / "models" / "deepbench_conv_inference_server.csv"

# The dissertation's Table 4.2: N, IC, H, W, OC, KH, KW, pad, stride, dilation (as printed).
TABLE_4_2 = [
    (1, 1, 700, 161, 32, 20, 5, 0, 2, 1), (2, 1, 700, 161, 32, 20, 5, 0, 2, 1),
    (4, 1, 700, 161, 32, 20, 5, 0, 2, 1), (1, 1, 480, 48, 16, 3, 3, 1, 1, 1),
    (1, 3, 108, 108, 64, 3, 3, 1, 2, 1), (1, 3, 224, 224, 64, 3, 3, 1, 1, 1),
    (2, 3, 224, 224, 64, 3, 3, 1, 1, 1), (1, 3, 224, 224, 64, 7, 7, 3, 2, 1),
    (2, 3, 224, 224, 64, 7, 7, 3, 2, 1), (1, 1, 151, 40, 32, 20, 5, 8, 2, 1),
    (1, 1, 700, 161, 64, 5, 5, 1, 2, 1), (2, 1, 700, 161, 64, 5, 5, 1, 2, 1),
    (1, 304, 18, 18, 448, 3, 3, 0, 1, 2), (1, 208, 72, 72, 304, 3, 3, 0, 1, 3),
]
# The dissertation's Table 4.6: (N,C,H,W), (K,C,R,S), pad, stride.
TABLE_4_6 = [
    ((1, 32, 8, 8), (64, 32, 3, 3), 1, 1), ((1, 32, 16, 16), (64, 32, 3, 3), 1, 1),
    ((1, 32, 32, 32), (64, 32, 3, 3), 1, 1), ((1, 256, 8, 8), (256, 256, 3, 3), 1, 1),
    ((1, 128, 16, 16), (256, 128, 3, 3), 1, 1), ((1, 128, 32, 32), (256, 128, 3, 3), 1, 1),
    ((1, 72, 56, 56), (96, 72, 1, 1), 0, 1), ((1, 256, 7, 7), (512, 256, 1, 1), 0, 1),
    ((1, 8, 224, 224), (24, 8, 3, 3), 1, 2), ((1, 72, 56, 56), (96, 72, 3, 3), 1, 2),
]
REPORTED = {
    "table_4_3_best_operator": {"operator": 10.234, "transform": 0.019, "combined": 1.005, "memory_total": 1.328},
    "table_4_4_best_combined": {"operator": 8.788, "transform": 0.069, "combined": 2.813},
    "table_4_5_best_memory": {"operator": 6.068, "combined": 1.938, "memory_total": 0.643},
    "table_4_6_8x8x8": {"operator": 6.26, "transform": 4.21, "combined": 4.99, "memory_total": 0.33},
}


def deepbench_layers():
    rows = []
    with open(CSV) as f:
        lines = [l for l in f if not l.startswith("#")]
    for r in csv.DictReader(lines):
        v = {k: int(x) for k, x in r.items()}
        rows.append(v)
    return rows


def deepbench_op(v, shrink: bool = False):
    h, w = v["h"], v["w"]
    if shrink:
        # Keep channels, kernel, stride, padding; cut the image to a few output rows/columns.
        h = min(h, (v["filter_h"] - 1) + 3 * v["stride_h"] + 1)
        w = min(w, (v["filter_w"] - 1) + 3 * v["stride_w"] + 1)
    return conv2d(f"db{v['index']}", n=v["n"], c=v["c"], h=h, w=w, k=v["k"], r=v["filter_h"], s=v["filter_w"],
                  stride=(v["stride_h"], v["stride_w"]), padding=(v["pad_h"], v["pad_w"]))


def run_deepbench_layer(v):
    arch = get_accelerator("vta_like")
    intr = get_intrinsic("vta_gemm")
    op = deepbench_op(v)
    out = {"index": v["index"], "layer": f"{v}", "macs": op.macs}
    for mode in ("strict", "relaxed"):
        t0 = time.monotonic()
        r = embed(op, intr, mode, arch=arch, processes=1, time_limit=30)
        out[mode] = {"found": r.found, "embeddings": len(r.embeddings), "expanded": r.stats.expanded,
                     "search_s": r.stats.seconds, "total_s": time.monotonic() - t0, "timed_out": r.stats.timed_out,
                     "reason": r.reason}
        if r.found:
            best = r.embeddings[0]
            small = deepbench_op(v, shrink=True)
            prog = build_program(small, intr.operator, best.solution)
            ok, msg = verify_program(prog)
            out[mode].update(best=str(best.solution), calls=best.costs.calls, latency=best.costs.latency,
                             utilization=best.costs.utilization, full_program_loops=len(best.program.loops),
                             verified=ok, verify_msg=msg, verified_on=dict(small.dims))
    return out


def table_op(row):
    n, c, h, w, k, r, s, pad, stride, dil = row
    return conv2d("t", n=n, c=c, h=h, w=w, k=k, r=r, s=s, padding=pad, stride=stride, dilation=dil)


def compare(op, intr_name, arch_name):
    arch = get_accelerator(arch_name)
    intr = get_intrinsic(intr_name)
    # The best few of each search are re-costed through the mapper (latency objective). The built
    # mapping's latency only pre-selects them: on vta_8x8x8 it is up to 5x off the mapper's, and
    # for Table 4.6 ID 10 the mapper's best embedding was 5th by built latency.
    ref = embed(op, intr, "strict", arch=arch, processes=1, mapper_top=1)
    rel = embed(op, intr, "relaxed", arch=arch, processes=1, mapper_top=8)
    if not ref.found or not rel.found:
        return {"error": ref.reason or rel.reason}
    d = ref.embeddings[0].costs
    embs = rel.embeddings + ref.embeddings
    by_op = min(embs, key=lambda e: (e.costs.operator_cost, e.costs.combined_cost))
    by_comb = min(embs, key=lambda e: (e.costs.combined_cost, e.costs.operator_cost))
    by_mem = min(embs, key=lambda e: (e.costs.memory_bytes, e.costs.operator_cost))
    by_op, by_comb, by_mem = (e if e.costs.mapped_latency is not None else with_mapper(e, arch)
                              for e in (by_op, by_comb, by_mem))

    def rel_to_default(e):
        c = e.costs
        return {"solution": str(e.solution), "rules": list(e.program.rules), "mapper": c.mapped_latency is not None,
                "latency_built": c.latency, "latency_mapped": c.mapped_latency,
                "operator": d.operator_cost / c.operator_cost,
                "transform": (d.transform_cycles / c.transform_cycles) if c.transform_cycles else None,
                "combined": d.combined_cost / c.combined_cost,   # operator cost: mapper latency where it ran
                "data": c.data_bytes / d.data_bytes, "weights": c.weight_bytes / d.weight_bytes,
                "memory_total": c.memory_bytes / d.memory_bytes, "calls": c.calls, "latency": c.operator_cost}

    small = op  # verify the best-by-operator program on a reduced image
    attrs = dict(op.attrs)
    (h, w), (sh, sw), (dh, dw) = attrs["input_hw"], attrs["stride"], attrs["dilation"]
    r, s = op.sizes.get("R", 1), op.sizes.get("S", 1)
    pt, pl, pb, pr = attrs["padding"]
    small = conv2d("t_small", n=op.sizes.get("N", 1), c=op.operand("I").shape[1], k=op.operand("O").indices and
                   op.sizes.get("K", 1), h=min(h, dh * (r - 1) + 3 * sh + 1), w=min(w, dw * (s - 1) + 3 * sw + 1),
                   r=r, s=s, stride=(sh, sw), dilation=(dh, dw), padding=(pt, pl, pb, pr))
    ok = all(verify_program(build_program(small, intr.operator, e.solution))[0] for e in (by_op, by_comb, by_mem))
    return {"default": {"solution": str(ref.embeddings[0].solution), "calls": d.calls, "latency": d.operator_cost,
                        "latency_built": d.latency, "latency_mapped": d.mapped_latency, "memory": d.memory_bytes},
            "best_operator": rel_to_default(by_op), "best_combined": rel_to_default(by_comb),
            "best_memory": rel_to_default(by_mem), "verified_reduced": ok,
            "search_s": ref.stats.seconds + rel.stats.seconds, "embeddings": len(rel.embeddings)}


def run_table(item):
    kind, idx, op = item
    if kind == "4.2":
        return kind, idx, compare(op, "vta_gemm", "vta_like")
    return kind, idx, compare(op, "vta_gemm_8x8x8", "vta_8x8x8")


OTHER_OPS = {
    "dense": dense("dense", n=4, c=100, k=40),
    "batched_matmul": batched_matmul("bmm", batch=4, m=12, n=20, k=36),
    "depthwise": depthwise_conv2d("dw", c=32, h=10, w=10, r=3, s=3, padding=1),
    "grouped": conv2d("grouped", c=32, h=8, w=8, k=64, r=3, s=3, groups=4, padding=1),
}
INTRINSICS = ["vta_gemm", "vta_gemm_8x8x8", "ascend_cube", "gemv_16x16", "dot_16", "simd2d_16x2"]


def run_other(item):
    name, intr_name = item
    op = OTHER_OPS[name]
    r = embed(op, get_intrinsic(intr_name), "relaxed", processes=1)
    if not r.found:
        return name, intr_name, {"found": False, "reason": r.reason, "search_s": r.stats.seconds}
    best = r.embeddings[0]
    ok, msg = verify_program(best.program)
    return name, intr_name, {"found": True, "best": str(best.solution), "calls": best.costs.calls,
                             "utilization": best.costs.utilization, "verified": ok, "embeddings": len(r.embeddings),
                             "search_s": r.stats.seconds}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="every 8th DeepBench layer only")
    ap.add_argument("--procs", type=int, default=2)
    args = ap.parse_args()
    t_all = time.monotonic()
    layers = deepbench_layers()
    if args.quick:
        layers = layers[::8]
    results = {"deepbench": [], "table_4_2": {}, "table_4_6": {}, "other": {}, "reported": REPORTED}
    with ProcessPoolExecutor(args.procs) as ex:
        results["deepbench"] = sorted(ex.map(run_deepbench_layer, layers), key=lambda d: d["index"])
        items = [("4.2", k + 1, table_op(r)) for k, r in enumerate(TABLE_4_2)]
        for k, (dshape, wshape, pad, stride) in enumerate(TABLE_4_6):
            n, c, h, w = dshape
            kk, _, r, s = wshape
            items.append(("4.6", k + 1, conv2d("t", n=n, c=c, h=h, w=w, k=kk, r=r, s=s, padding=pad, stride=stride)))
        for kind, idx, res in ex.map(run_table, items):
            results["table_4_2" if kind == "4.2" else "table_4_6"][idx] = res
        for name, intr, res in ex.map(run_other, [(n, i) for n in OTHER_OPS for i in INTRINSICS]):
            results["other"].setdefault(name, {})[intr] = res

    # ---- DeepBench summary ----
    db = results["deepbench"]
    print(f"DeepBench inference convs on vta_gemm: {len(db)} layers")
    print(f"{'idx':>4} {'strict':<26} {'s':>6} {'relaxed best':<40} {'s':>6} {'nodes':>6} verified")
    for d in db:
        st, rl = d["strict"], d["relaxed"]
        print(f"{d['index']:>4} {st.get('best', 'none')[:26]:<26} {st['search_s']:6.2f} "
              f"{rl.get('best', 'none')[:40]:<40} {rl['search_s']:6.2f} {rl['expanded']:>6} "
              f"{st.get('verified')}/{rl.get('verified')}")
    summ = {}
    for mode in ("strict", "relaxed"):
        secs = [d[mode]["search_s"] for d in db]
        summ[mode] = {"embedded": sum(d[mode]["found"] for d in db), "layers": len(db),
                      "verified": sum(bool(d[mode].get("verified")) for d in db),
                      "median_search_s": statistics.median(secs), "max_search_s": max(secs),
                      "over_30s": sum(s > 30 for s in secs), "timed_out": sum(d[mode]["timed_out"] for d in db),
                      "median_expanded": statistics.median(d[mode]["expanded"] for d in db)}
    results["deepbench_summary"] = summ
    for mode, s in summ.items():
        print(f"  {mode}: embedded {s['embedded']}/{s['layers']}, verified {s['verified']}, median search "
              f"{s['median_search_s']:.3f} s, max {s['max_search_s']:.2f} s, median expanded nodes "
              f"{s['median_expanded']}, timed out {s['timed_out']}")

    # ---- Tables 4.2 and 4.6 ----
    def table(name, data, reported_keys):
        print(f"\n{name}: MODELLED speed-up vs TVM-like default (ratio >1 = better; memory <1 = smaller);"
              f" operator cost = latency of the mapper's best loop nest for the program")
        print(f"{'ID':>3} {'op(best op)':>12} {'comb(best comb)':>16} {'mem(best mem)':>14} verified  best-by-operator")
        gm = {"best_operator": {}, "best_combined": {}, "best_memory": {}}
        for idx, res in sorted(data.items()):
            if "error" in res:
                print(f"{idx:>3} error: {res['error']}")
                continue
            print(f"{idx:>3} {res['best_operator']['operator']:>12.2f} {res['best_combined']['combined']:>16.2f} "
                  f"{res['best_memory']['memory_total']:>14.3f} {str(res['verified_reduced']):>8}  "
                  f"{res['best_operator']['solution']}")
            for sel in gm:
                for key in ("operator", "combined", "memory_total", "data", "weights"):
                    gm[sel].setdefault(key, []).append(res[sel][key])
        out = {sel: {k: geomean(v) for k, v in d.items()} for sel, d in gm.items()}
        print(f"GeoMean MODELLED: best-operator op x{out['best_operator']['operator']:.2f} "
              f"(combined x{out['best_operator']['combined']:.2f}); best-combined combined "
              f"x{out['best_combined']['combined']:.2f}; best-memory total x{out['best_memory']['memory_total']:.3f}")
        for k in reported_keys:
            print(f"REPORTED (Rieber's dissertation, FPGA measurements) {k}: {REPORTED[k]}")
        return out

    results["table_4_2_geomean"] = table("Table 4.2 layers, vta_gemm on vta_like", results["table_4_2"],
                                         ["table_4_3_best_operator", "table_4_4_best_combined", "table_4_5_best_memory"])
    results["table_4_6_geomean"] = table("Table 4.6 layers, vta_gemm_8x8x8 on vta_8x8x8", results["table_4_6"],
                                         ["table_4_6_8x8x8"])

    print("\nOther operators on every intrinsic (relaxed, best by operator cost, verified exactly)")
    for name, per in results["other"].items():
        for intr, res in per.items():
            if res["found"]:
                print(f"  {name:<15} {intr:<15} calls {res['calls']:>7} util {res['utilization']:6.1%} "
                      f"verified {res['verified']}  {res['best']}")
            else:
                print(f"  {name:<15} {intr:<15} no embedding: {res['reason']}")
    results["wall_s"] = time.monotonic() - t_all
    print(f"\nwall time {results['wall_s']:.0f} s")
    # A quick run must not overwrite the full results.
    out = ROOT / "results" / ("embedding_quick.json" if args.quick else "embedding.json")
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=1, default=str))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
