"""The exact search of this tree against another git revision, layer by layer, in CPU seconds and nodes.

Both sides start from the same incumbent (the heuristic's best, found once by this tree and handed to both), so
the comparison measures the exact search alone. Each side runs in its own process, with the package of its own
revision on the path (``git archive`` of the base revision into a temporary folder); the search's wall-clock
limit is generous and the CPU time of the process is what is reported, because the machine is shared.

    python benchmarks/exact_search_ab.py --base REV [--cases eyeriss_like:layer4.0.downsample ...]
        [--time-limit 120] [--out FILE]

Prints a table and writes benchmarks/results/exact_search_ab.json.
"""

from __future__ import annotations

import argparse
import json
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "exact_search_ab.json"
CASES = ("eyeriss_like:layer4.0.downsample", "eyeriss_like:layer3.0.downsample", "tpu_like:layer4.0.conv1",
         "tpu_like:layer2.0.downsample", "ascend_like:layer4.0.downsample", "simba_like:layer4.0.downsample")

CHILD = r"""
import pickle, sys, time
from accelmap.arch.accelerator import adopt_precision
from accelmap.arch.presets import get_accelerator
from accelmap.search.exact import search_exact
from accelmap.workload.models import load_model
arch_name, layer_name, limit, incumbent_file = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
arch = get_accelerator(arch_name)
op = adopt_precision(next(l for l in load_model("resnet18").layers if l.name == layer_name).operator, arch)
with open(incumbent_file, "rb") as f:
    incumbents = pickle.load(f)
c0 = time.process_time()
res, st = search_exact(op, arch, "edp", time_limit=limit, heuristic=False, incumbents=incumbents)
cpu = time.process_time() - c0
print(repr({"cpu": cpu, "nodes": st.nodes, "evaluated": st.evaluated, "proven": bool(st.extra.get("proven")),
            "value": res[0].value if res else None, "searched": st.extra.get("spatial_searched"),
            "cut": st.extra.get("spatial_cut"), "mirror_skipped": st.extra.get("spatial_mirror_skipped"),
            "equivalent_skipped": st.extra.get("spatial_equivalent_skipped", 0)}))
"""


def incumbent(arch_name: str, layer_name: str, path: Path) -> None:
    from accelmap.arch.accelerator import adopt_precision
    from accelmap.arch.presets import get_accelerator
    from accelmap.search.heuristic import search_heuristic
    from accelmap.workload.models import load_model

    arch = get_accelerator(arch_name)
    op = adopt_precision(next(l for l in load_model("resnet18").layers if l.name == layer_name).operator, arch)
    found, _ = search_heuristic(op, arch, "edp", time_limit=30)
    path.write_bytes(pickle.dumps(tuple((f.result, f.mapping) for f in found)))


def run(src: Path, arch: str, layer: str, limit: float, inc: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, arch, layer, str(limit), str(inc)], capture_output=True,
                         text=True, env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"}, check=True)
    return eval(out.stdout.strip().splitlines()[-1])  # noqa: S307 (our own child's repr of a dict)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="git revision to compare with (e.g. main)")
    ap.add_argument("--cases", nargs="+", default=list(CASES), help="preset:layer of ResNet-18")
    ap.add_argument("--time-limit", type=float, default=120.0, help="wall-clock limit of each exact search")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        base.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.base, "src"], capture_output=True,
                                 check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(base)], input=archive, check=True)
        print(f"{'case':36} {'side':5} {'cpu s':>7} {'nodes':>8} {'proven':>6} {'searched':>8} {'S4':>4} {'S5':>4} "
              f"{'EDP':>12}", flush=True)
        for case in args.cases:
            arch, layer = case.split(":")
            inc = Path(tmp) / f"{arch}_{layer}.pkl"
            incumbent(arch, layer, inc)
            row = {"arch": arch, "layer": layer}
            for side, src in (("base", base / "src"), ("this", ROOT / "src")):
                r = run(src, arch, layer, args.time_limit, inc)
                row[side] = r
                print(f"{case:36} {side:5} {r['cpu']:>7.2f} {r['nodes']:>8} {str(r['proven']):>6} {r['searched']:>8} "
                      f"{r['mirror_skipped']:>4} {r['equivalent_skipped']:>4} {r['value']:>12.5g}", flush=True)
            rows.append(row)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"base": args.base, "time_limit": args.time_limit, "rows": rows}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
