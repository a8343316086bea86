"""The exact search's certificate checked against other strategies' mappings on full-size layers.

For each case (model:preset:layer) the layer is mapped by ``optimal``, ``heuristic`` and ``random`` with the same time
limit (CPU seconds of this process: the search's clock is switched to ``time.process_time``), every best mapping is
re-costed by the cost model (``cost.model.evaluate`` with its validity check), and the run flags

- ``violation``: some strategy's lower bound exceeds some valid mapping's cost (the certificate would be wrong);
- ``proven_but_beaten``: ``optimal`` says proven and another strategy found a cheaper mapping (the proof would be
  wrong, unless that mapping is padded and a note says the padded unrollings were not excluded).

    python benchmarks/exact_crosscheck.py --time-limit 10 [--out FILE] MODEL:PRESET:LAYER ...

Prints one JSON line per case and writes them all to ``--out`` (default
benchmarks/results/exact_crosscheck.json).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

STRATEGIES = ("optimal", "heuristic", "random")
RESULTS = Path(__file__).resolve().parent / "results" / "exact_crosscheck.json"


def check_case(model: str, arch_name: str, layer: str, limit: float) -> dict:
    from accelmap.arch.accelerator import adopt_precision
    from accelmap.arch.presets import get_accelerator
    from accelmap.cost.model import evaluate
    from accelmap.search.mapper import map_operator
    from accelmap.workload.models import load_model

    arch = get_accelerator(arch_name)
    lay = next((x for x in load_model(model).layers if x.name == layer), None)
    if lay is None:
        raise SystemExit(f"{model} has no layer {layer!r}")
    op = adopt_precision(lay.operator, arch)
    row: dict = {"case": f"{model}:{arch_name}:{layer}", "sizes": dict(op.sizes)}
    for strategy in STRATEGIES:
        t = time.process_time()
        r = map_operator(op, arch, "edp", strategy=strategy, time_limit=limit)
        d = {"cpu_seconds": time.process_time() - t, "proven": r.proven_optimal, "lower_bound": r.lower_bound,
             "bound_kind": r.bound_kind, "timed_out": r.timed_out, "notes": r.notes}
        if r.best:
            d["edp"] = r.best.value
            d["edp_recosted"] = evaluate(op, arch, r.best.mapping, check=True).edp
        row[strategy] = d
    costs = [row[s]["edp_recosted"] for s in STRATEGIES if "edp_recosted" in row[s]]
    bounds = [row[s]["lower_bound"] for s in STRATEGIES if row[s]["lower_bound"] is not None]
    row["recost_matches"] = all(abs(row[s]["edp_recosted"] - row[s]["edp"]) <= 1e-9 * row[s]["edp"]
                                for s in STRATEGIES if "edp" in row[s])
    row["violation"] = bool(costs and bounds and max(bounds) > min(costs) * (1 + 1e-9))
    opt = row["optimal"]
    row["proven_but_beaten"] = bool(opt["proven"] and costs and opt.get("edp_recosted", 0) > min(costs) * (1 + 1e-9))
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="+", help="MODEL:PRESET:LAYER")
    ap.add_argument("--time-limit", type=float, default=10.0, help="CPU seconds per strategy and layer")
    ap.add_argument("--out", type=Path, default=RESULTS)
    a = ap.parse_args()
    time.perf_counter = time.process_time     # the searches' limits and seconds: CPU time of this process
    rows = []
    for case in a.cases:
        parts = case.split(":")
        if len(parts) != 3:
            raise SystemExit(f"case {case!r}: expected MODEL:PRESET:LAYER")
        rows.append(check_case(*parts, a.time_limit))
        print(json.dumps(rows[-1]), flush=True)
        # written after every case: a long run stopped early keeps what it checked
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps({"time_limit_cpu_seconds": a.time_limit, "cases": rows}, indent=2) + "\n")
    print(f"{sum(r['violation'] for r in rows)} violations, {sum(r['proven_but_beaten'] for r in rows)} proofs beaten, "
          f"{sum(not r['recost_matches'] for r in rows)} re-costing mismatches in {len(rows)} cases; wrote {a.out}")


if __name__ == "__main__":
    main()
