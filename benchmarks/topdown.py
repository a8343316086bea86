"""Top-down TCG matching (Rieber's 2022 dissertation, ch. 3): our counts beside Table 3.3 and Table 3.5.

Per operator and per configuration of Table 3.4: nodes, candidates, solutions, hit rate, median
transformations and search time, with and without input transposes and global layouts, and a
sample of solutions run as instruction programs against the NumPy reference. Prints tables and
writes benchmarks/results/topdown.json. Times are wall-clock on whatever machine runs it.

A second table runs the same operators through both methods with our intrinsic library: top-down
(the intrinsic as the only TCG pattern, configuration 4 with input transposes) and the dataflow
embedding of chapter 4 (relaxed and strict), on the operator's multiply-accumulate statement (the
only part the dataflow embedding takes; bias, activation and scaling are left to other units).

The default run caps every search (stated in its output) so that it takes a few minutes; ``--full``
is the run with the larger caps (over 20 minutes on a loaded 2-core machine).

    python benchmarks/topdown.py [--full] [--limit N] [--capsule-limit N] [--compare-limit N] [--quick]
                                 [--compare-only] [--thesis-layouts]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from accelmap.arch.intrinsics import get_intrinsic
from accelmap.embed.program import verify_program
from accelmap.embed.search import embed
from accelmap.embed.tcg import (
    THESIS_OPERATORS,
    evaluate,
    operator_from_statement,
    parse_program,
    program_from_operator,
    routing_host_inputs,
    thesis_program,
)
from accelmap.embed.tcg_execute import run_selection
from accelmap.embed.tcg_match import intrinsic_instruction, table_3_1
from accelmap.embed.tcg_rewrite import input_shapes, search
from accelmap.embed.tcg_tiling import instruction_calls

TABLE_3_3 = {"fc_bias": (16, 24, 4), "fc_bias_sigmoid": (29, 144, 4), "gemm": (11, 35, 4), "attention": (26, 289, 9),
             "conv2d": (26, 59_503, 682), "conv2d_relu": (56, 440_428, 1_428),
             "capsule_routing": (127, 1_023_516, 12)}
TABLE_3_5 = {"gemm": (73, 5), "conv2d": (1_372_653, 3_810)}
SMALL = {"gemm": dict(i=3, j=4, k=5), "fc_bias": dict(n=2, j=3, k=4), "fc_bias_sigmoid": dict(n=2, j=3, k=4),
         "attention": dict(i=3, j=2, l=4), "conv2d": dict(n=1, h=3, w=2, c=2, kh=2, kw=2, ic=2),
         "conv2d_relu": dict(n=1, h=3, w=2, c=2, kh=2, kw=2, ic=2), "capsule_routing": dict(i=3, j=2, d=2, e=2),
         "capsule_routing_sqrt": dict(i=3, j=2, d=2, e=2)}
CAPSULES = ("capsule_routing", "capsule_routing_sqrt")
# Capsule Routing in Table 3.3's setting is twelve statements: with input transposes its first graph alone has
# thousands of access orders (w has 24), so its execution check runs the search without them.
NO_TRANSPOSES_CHECK = {"capsule_routing"}


def _inputs(prog, rng):
    shapes = input_shapes(prog)
    return {k: rng.standard_normal(v) if v else np.array(rng.standard_normal()) for k, v in shapes.items()}


def _checked(name: str, isa, config: int, sample: int, limit: int) -> dict:
    """Run up to ``sample`` solutions (small sizes, evenly spaced in search order) as instruction programs."""
    prog = parse_program(THESIS_OPERATORS[name][0], SMALL[name], name)
    data = _inputs(prog, np.random.default_rng(0))
    out = prog.statements[-1].out
    reference = "the operator"
    if name == "capsule_routing":
        # the host's inputs (bl transposed, the squash's norm): the reference is Sabour et al.'s routing itself,
        # square root and all (capsule_routing_sqrt, which reads w as [i,j,d,e])
        data = routing_host_inputs(prog, data)
        sabour = parse_program(THESIS_OPERATORS["capsule_routing_sqrt"][0], SMALL[name], name)
        ref = evaluate(sabour, dict(data, w=data["w"].transpose(2, 0, 1, 3)))[out]
        reference = "Sabour et al.'s routing (square root included)"
    else:
        ref = evaluate(prog, data)[out]
    transposes = name not in NO_TRANSPOSES_CHECK
    sols = search(prog, isa, config, input_transposes=transposes, limit=limit).solutions
    picked = sols[::max(1, len(sols) // sample)][:sample]
    ok = sum(np.allclose(run_selection(c.program, c.tcg, c.selection, isa, data)[out], ref) for c in picked)
    return dict(solutions=len(sols), run=len(picked), equal=int(ok), fused=sum(bool(c.program.fused) for c in picked),
                input_transposes=transposes, reference=reference)


INTRINSICS = ("vta_gemm", "ascend_cube", "gemv_16x16", "dot_16", "simd2d_16x2")

# Table 3.3's setting has no input transposes (Sec. 3.5 adds them). There, configuration 1 covers GEMM
# and Attention "natively" and Conv2D only after fission (Fig. 3.15), which needs the second operand
# read with the reduced dimension innermost, as eq. 3.2 writes k^T: these are our operators so written.
THESIS_LAYOUTS = {
    "gemm": "c[i,j] = sum(a[i,k] * b[j,k], k)",
    "attention": "t[i,j] = sum(q[i,l] * k[j,l], l); r[i,j] = s * t[i,j]",
    "conv2d": "y[n,h,w,c] = sum(x[n,h+kh,w+kw,ic] * f[c,kh,kw,ic], kh, kw, ic)",
    "conv2d_relu": "t[n,h,w,c] = sum(x[n,h+kh,w+kw,ic] * f[c,kh,kw,ic], kh, kw, ic); y[n,h,w,c] = max(t[n,h,w,c], 0)",
}


def thesis_layouts(isa, limit: int) -> list[dict]:
    """Configurations 1-4 without transposes on the operators written with Table 3.3's operand layouts."""
    print("\nTable 3.3's setting (no transposes), second operand with the reduced dimension innermost:")
    print(f"{'operator':<17}{'cfg':>4}{'cand.':>9}{'sol.':>7}{'sol.~':>7}{'trans':>7}{'s':>8}   thesis (cand./sol.)")
    rows = []
    for name, text in THESIS_LAYOUTS.items():
        for config in (1, 2, 3, 4):
            r = search(parse_program(text, THESIS_OPERATORS[name][1], name), isa, config, limit=limit)
            med = r.median_transformations()
            rows.append(dict(operator=name, program=text, config=config, candidates=len(r.candidates),
                             solutions=len(r.solutions), solutions_up_to_swaps=r.solutions_up_to_swaps,
                             median_transformations=med, seconds=round(r.seconds, 3)))
            thesis = "/".join(f"{x:,}" for x in TABLE_3_3[name][1:]) if config == 4 else ""
            print(f"{name:<17}{config:>4}{len(r.candidates):>9,}{len(r.solutions):>7,}{r.solutions_up_to_swaps:>7,}"
                  f"{'-' if med is None else f'{med:g}':>7}{r.seconds:>8.2f}   {thesis}")
    return rows


def compare_methods(name: str, intrinsic: str, limit: int) -> dict:
    """One operator, one intrinsic, both methods on the operator's multiply-accumulate statement.

    Top-down: candidates, solutions, seconds, and every solution run (small sizes) as an instruction
    program against NumPy. Dataflow: solutions (relaxed, strict), expanded search nodes, seconds, and
    the best-ranked relaxed program verified exactly on random integers at full size."""
    op = operator_from_statement(thesis_program(name))
    if op is None:
        raise ValueError(f"{name}: the first statement is not a multiply-accumulate")
    intr = get_intrinsic(intrinsic)
    isa = (intrinsic_instruction(intr),)
    td = search(program_from_operator(op), isa, 4, input_transposes=True, limit=limit)
    small = operator_from_statement(parse_program(THESIS_OPERATORS[name][0], SMALL[name], name))
    assert small is not None
    sprog = program_from_operator(small)
    sdata = _inputs(sprog, np.random.default_rng(0))
    ref = evaluate(sprog, sdata)[small.output.name]
    sols = search(sprog, isa, 4, input_transposes=True, limit=limit).solutions
    td_ok = sum(np.allclose(run_selection(c.program, c.tcg, c.selection, isa, sdata)[small.output.name], ref)
                for c in sols)
    # Issue cycles of the fewest-cycle program of each method, by one rule: calls x the intrinsic's issue
    # interval (compute only; the dataflow embedding's modelled latency on an accelerator is `accelmap embed`'s)
    td_cycles = min((sum(c.cycles for c in instruction_calls(s.program, s.tcg, s.selection, isa))
                     for s in td.solutions), default=None)
    row = dict(operator=name, mac_statement=str(op).split("  (")[0].split(": ", 1)[1], intrinsic=intrinsic,
               topdown=dict(candidates=len(td.candidates), solutions=len(td.solutions), seconds=round(td.seconds, 3),
                            limit_reached=len(td.candidates) >= limit, run_small=len(sols), equal_small=td_ok,
                            best_cycles=td_cycles))
    for mode in ("relaxed", "strict"):
        r = embed(op, intr, mode, processes=1, time_limit=60)
        entry = dict(solutions=len(r.solutions), expanded=r.stats.expanded, seconds=round(r.stats.seconds, 3),
                     timed_out=r.stats.timed_out, reason=r.reason,
                     best_cycles=min((e.costs.calls for e in r.embeddings), default=None))
        if entry["best_cycles"] is not None:
            entry["best_cycles"] *= intr.cycles
        if r.found:
            entry["best_verified"] = verify_program(r.embeddings[0].program)[0]
        row[f"dataflow_{mode}"] = entry
    return row


def print_comparison(rows: list[dict], limit: int) -> None:
    print("\nTop-down matching vs the dataflow embedding, same operator (its multiply-accumulate statement),"
          " same intrinsic:")
    print(f"  (top-down: configuration 4 with input transposes, the first {limit:,} candidates, + where that cap"
          " stopped it; cycles: the fewest issue cycles of a program, calls x the intrinsic's issue interval, for both"
          " methods; compute only)")
    print(f"{'operator':<22}{'intrinsic':<13}{'TD cand.':>9}{'TD sol.':>8}{'TD cycles':>11}{'TD s':>7}{'TD run=ref':>11}"
          f"{'DF rel. sol.':>13}{'DF strict':>10}{'DF cycles':>11}{'DF nodes':>9}{'DF s':>7}{'DF best ok':>11}")

    def cyc(x) -> str:
        return "-" if x is None else f"{x:,}"

    for r in rows:
        td, rel, st = r["topdown"], r["dataflow_relaxed"], r["dataflow_strict"]
        print(f"{r['operator']:<22}{r['intrinsic']:<13}{td['candidates']:>8,}{'+' if td['limit_reached'] else ' '}"
              f"{td['solutions']:>8,}{cyc(td['best_cycles']):>11}{td['seconds']:>7.2f}"
              f"{td['equal_small']:>7}/{td['run_small']:<3}"
              f"{rel['solutions']:>13,}{st['solutions']:>10,}{cyc(rel['best_cycles']):>11}"
              f"{rel['expanded'] + st['expanded']:>9,}"
              f"{rel['seconds'] + st['seconds']:>7.2f}{str(rel.get('best_verified', '-')):>11}")


DEFAULT_CAPS = dict(limit=10_000, capsule_limit=2_000, compare_limit=3_000)
FULL_CAPS = dict(limit=100_000, capsule_limit=20_000, compare_limit=5_000)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true",
                    help="the larger caps: " + ", ".join(f"{k.replace('_', '-')} {v:,}" for k, v in FULL_CAPS.items())
                    + " (over 20 minutes on a loaded 2-core machine)")
    ap.add_argument("--limit", type=int, default=None,
                    help=f"candidate limit per search (default {DEFAULT_CAPS['limit']:,}, --full {FULL_CAPS['limit']:,})")
    ap.add_argument("--quick", action="store_true", help="configuration 4 only, no execution check")
    ap.add_argument("--capsule-limit", type=int, default=None,
                    help="candidate limit for the Capsule Routing searches (a few ms a candidate: twelve statements; "
                         f"default {DEFAULT_CAPS['capsule_limit']:,}, --full {FULL_CAPS['capsule_limit']:,})")
    ap.add_argument("--compare-only", action="store_true", help="only the top-down vs dataflow table")
    ap.add_argument("--thesis-layouts", action="store_true",
                    help="only the table of Table 3.3's setting with the thesis' operand layouts")
    ap.add_argument("--compare-limit", type=int, default=None,
                    help="candidate limit of the top-down searches in the method comparison and the execution check "
                         f"(default {DEFAULT_CAPS['compare_limit']:,}, --full {FULL_CAPS['compare_limit']:,})")
    args = ap.parse_args()
    caps = FULL_CAPS if args.full else DEFAULT_CAPS
    for key, value in caps.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    isa = table_3_1()
    print(f"caps ({'--full' if args.full else 'default; --full for the larger ones'}): every search stops after "
          f"{args.limit:,} candidates, Capsule Routing's after {args.capsule_limit:,}, the method comparison's and "
          f"the execution check's after {args.compare_limit:,}; a count that reached its cap is marked +. The caps "
          "keep the first candidates in the search's breadth-first order (operand orders and transposes of the "
          "original graph, of the fissioned graph, then fusions and inlinings by depth).")
    if args.thesis_layouts:
        out = Path(__file__).parent / "results" / "topdown_thesis_layouts.json"
        out.parent.mkdir(exist_ok=True)
        out.write_text(json.dumps(dict(rows=thesis_layouts(isa, args.limit)), indent=1))
        print(f"\nwrote {out}")
        return
    rows: list[dict] = []
    configs: tuple[int, ...] = () if args.compare_only else (4,) if args.quick else (1, 2, 3, 4)
    if configs:
        print("Capsule Routing: the operator in Table 3.3's setting (host norm, both layouts of the twice-reduced "
              "tensors) with no layout change only; Sabour et al.'s form with the square root (capsule_routing_sqrt) "
              "under configuration 4 only, as a second row without a Table 3.3 counterpart.")
        print(f"{'operator':<21}{'cfg':>4}{'variant':>22}{'nodes':>7}{'cand.':>9}{'sol.':>7}{'sol.~':>7}{'hit':>8}"
              f"{'trans':>7}{'s':>8}   thesis (nodes/cand./sol.)")
        print("  (sol.~: solutions with operand-swap twins covered by the same instructions counted once)")

    def limit_for(name: str) -> int:
        return args.capsule_limit if name in CAPSULES else args.limit

    for name in THESIS_OPERATORS:
        for config in configs:
            if name == "capsule_routing_sqrt" and config != 4:
                continue
            variants = [(False, False, False)]
            if name not in CAPSULES:
                variants += [(True, False, False), (False, False, True)]
            if config == 4 and name in ("gemm", "fc_bias", "attention"):
                variants += [(False, True, False), (True, True, False)]
            for transposes, outputs, layouts in variants:
                r = search(parse_program(*THESIS_OPERATORS[name], name), isa, config, input_transposes=transposes,
                           output_transposes=outputs, layouts=layouts, limit=limit_for(name))
                variant = {(False, False, False): "none", (True, False, False): "transposes",
                           (False, False, True): "global layouts", (False, True, False): "output transposes",
                           (True, True, False): "in+out transposes"}[transposes, outputs, layouts]
                med = r.median_transformations()
                row = dict(operator=name, config=config, variant=variant, nodes=r.nodes,
                           candidates=len(r.candidates), solutions=len(r.solutions),
                           solutions_up_to_swaps=r.solutions_up_to_swaps, hit_rate=r.hit_rate,
                           median_transformations=med, seconds=round(r.seconds, 3),
                           limit_reached=len(r.candidates) >= limit_for(name))
                rows.append(row)
                thesis = ""
                if config == 4 and variant == "none" and name in TABLE_3_3:
                    thesis = "/".join(f"{x:,}" for x in TABLE_3_3[name])
                if config == 4 and layouts and name in TABLE_3_5:
                    thesis = "Table 3.5: " + "/".join(f"{x:,}" for x in TABLE_3_5[name])
                lim = "+" if row["limit_reached"] else " "
                print(f"{name:<21}{config:>4}{variant:>22}{r.nodes:>7}{len(r.candidates):>8,}{lim}"
                      f"{len(r.solutions):>7,}{r.solutions_up_to_swaps:>7,}{r.hit_rate:>8.1%}"
                      f"{'-' if med is None else f'{med:g}':>7}"
                      f"{r.seconds:>8.2f}   {thesis}")
    checks = {}
    if not args.quick and not args.compare_only:
        print("\nsolutions run as instruction programs (small sizes, configuration 4, input transposes except for "
              f"Capsule Routing, the first {args.compare_limit:,} candidates, at most 40 solutions evenly spaced in "
              "search order):")
        for name in THESIS_OPERATORS:
            if name == "capsule_routing_sqrt":
                continue   # no solution: Table 3.1 computes no square root
            c = _checked(name, isa, 4, 40, min(limit_for(name), args.compare_limit))
            checks[name] = c
            print(f"  {name:<21} {c['equal']}/{c['run']} of {c['solutions']:,} solutions equal to {c['reference']} "
                  f"({c['fused']} of them with fused loops)")
    # fc_bias_sigmoid and conv2d_relu share their multiply-accumulate statement with fc_bias and conv2d, and
    # capsule_routing_sqrt its prediction vectors with capsule_routing.
    mac_ops = [n for n in THESIS_OPERATORS if n not in ("fc_bias_sigmoid", "conv2d_relu", "capsule_routing_sqrt")]
    comparison = [compare_methods(n, i, args.compare_limit) for n in mac_ops for i in INTRINSICS]
    print_comparison(comparison, args.compare_limit)
    out = Path(__file__).parent / "results" / ("topdown_compare.json" if args.compare_only else "topdown.json")
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(dict(caps=dict(full=args.full, limit=args.limit, capsule_limit=args.capsule_limit,
                                             compare_limit=args.compare_limit),
                                   rows=rows, execution=checks, comparison=comparison), indent=1))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
