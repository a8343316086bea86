"""Top-down TCG matching (Rieber's 2022 dissertation, ch. 3): our counts beside Table 3.3 and Table 3.5.

Per operator and per configuration of Table 3.4: nodes, candidates, solutions, hit rate, median
transformations and search time, with and without input transposes and global layouts, and a
sample of solutions run as instruction programs against the NumPy reference. Prints tables and
writes benchmarks/results/topdown.json. Times are wall-clock on whatever machine runs it.

    python benchmarks/topdown.py [--limit N] [--quick]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from accelmap.embed.tcg import THESIS_OPERATORS, evaluate, parse_program
from accelmap.embed.tcg_execute import run_selection
from accelmap.embed.tcg_match import table_3_1
from accelmap.embed.tcg_rewrite import _all_loads, _index_dims_all, search

TABLE_3_3 = {"fc_bias": (16, 24, 4), "fc_bias_sigmoid": (29, 144, 4), "gemm": (11, 35, 4), "attention": (26, 289, 9),
             "conv2d": (26, 59_503, 682), "conv2d_relu": (56, 440_428, 1_428)}
TABLE_3_5 = {"gemm": (73, 5), "conv2d": (1_372_653, 3_810)}
SMALL = {"gemm": dict(i=3, j=4, k=5), "fc_bias": dict(n=2, j=3, k=4), "fc_bias_sigmoid": dict(n=2, j=3, k=4),
         "attention": dict(i=3, j=2, l=4), "conv2d": dict(n=1, h=3, w=2, c=2, kh=2, kw=2, ic=2),
         "conv2d_relu": dict(n=1, h=3, w=2, c=2, kh=2, kw=2, ic=2)}


def _inputs(prog, rng):
    sizes = dict(prog.sizes)
    produced = {s.out for s in prog.statements}
    shapes: dict[str, list[int]] = {}
    for st in prog.statements:
        for ld in _all_loads(st.expr):
            if ld.tensor not in produced:
                ext = [sum(sizes[d] - 1 for d in _index_dims_all((ix,))) + 1 for ix in ld.indices]
                shapes[ld.tensor] = [max(a, b) for a, b in zip(shapes.get(ld.tensor, ext), ext, strict=True)]
    return {k: rng.standard_normal(v) if v else np.array(rng.standard_normal()) for k, v in shapes.items()}


def _checked(name: str, isa, config: int, sample: int) -> tuple[int, int]:
    """Run up to ``sample`` solutions (small sizes) as instruction programs; (run, equal)."""
    prog = parse_program(THESIS_OPERATORS[name][0], SMALL[name], name)
    data = _inputs(prog, np.random.default_rng(0))
    out = prog.statements[-1].out
    ref = evaluate(prog, data)[out]
    sols = search(prog, isa, config, input_transposes=True).solutions
    picked = sols[::max(1, len(sols) // sample)][:sample]
    ok = sum(np.allclose(run_selection(c.program, c.tcg, c.selection, isa, data)[out], ref) for c in picked)
    return len(picked), ok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=100_000, help="candidate limit per search")
    ap.add_argument("--quick", action="store_true", help="configuration 4 only, no execution check")
    args = ap.parse_args()
    isa = table_3_1()
    rows = []
    configs = (4,) if args.quick else (1, 2, 3, 4)
    print(f"{'operator':<17}{'cfg':>4}{'variant':>22}{'nodes':>7}{'cand.':>9}{'sol.':>7}{'hit':>8}{'trans':>7}"
          f"{'s':>8}   thesis (nodes/cand./sol.)")
    for name in THESIS_OPERATORS:
        for config in configs:
            for transposes, layouts in ((False, False), (True, False), (False, True)):
                r = search(parse_program(*THESIS_OPERATORS[name], name), isa, config,
                           input_transposes=transposes, layouts=layouts, limit=args.limit)
                variant = "transposes" if transposes else "global layouts" if layouts else "none"
                med = r.median_transformations()
                row = dict(operator=name, config=config, variant=variant, nodes=r.nodes,
                           candidates=len(r.candidates), solutions=len(r.solutions), hit_rate=r.hit_rate,
                           median_transformations=med, seconds=round(r.seconds, 3),
                           limit_reached=len(r.candidates) >= args.limit)
                rows.append(row)
                thesis = ""
                if config == 4 and variant == "none":
                    thesis = "/".join(f"{x:,}" for x in TABLE_3_3[name])
                if config == 4 and layouts and name in TABLE_3_5:
                    thesis = "Table 3.5: " + "/".join(f"{x:,}" for x in TABLE_3_5[name])
                lim = "+" if row["limit_reached"] else " "
                print(f"{name:<17}{config:>4}{variant:>22}{r.nodes:>7}{len(r.candidates):>8,}{lim}"
                      f"{len(r.solutions):>7,}{r.hit_rate:>8.1%}{'-' if med is None else f'{med:g}':>7}"
                      f"{r.seconds:>8.2f}   {thesis}")
    checks = {}
    if not args.quick:
        print("\nsolutions run as instruction programs (small sizes, input transposes, configuration 4):")
        for name in THESIS_OPERATORS:
            run, ok = _checked(name, isa, 4, 40)
            checks[name] = dict(run=run, equal=ok)
            print(f"  {name:<17} {ok}/{run} equal to the NumPy reference")
    out = Path(__file__).parent / "results" / "topdown.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(dict(rows=rows, execution=checks), indent=1))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
