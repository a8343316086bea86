"""The latency model against the simulator on random valid mappings with the outermost level moving at the on-chip
store's bandwidth, as a fused group's blocks run (``fusion.group_cost.store_priced``), beside the same draws on the
presets as they are. With a fast outermost level the on-chip buffer's own read port paces its output drains, the
case where a drain holds the port a single-buffered load needs (docs/cost-model.md, "Single-buffered levels").

    python benchmarks/latency_store_priced.py [--per 40] [--seed 7] [--archs tpu_like eyeriss_like ...]

Prints per (accelerator, outermost level) the mappings, mean and largest |model - simulated| / simulated, and
those beyond 2% (one line each). CPU seconds of this process at the end.
"""
from __future__ import annotations

import argparse
import random
import statistics
import time

from codegen_sim import random_draws  # benchmarks/codegen_sim.py, next to this file

from accelmap.arch import get_accelerator
from accelmap.cost import evaluate
from accelmap.errors import SpecError
from accelmap.fusion.group_cost import store_priced
from accelmap.mapping import format_text
from accelmap.sim.engine import run_timing
from accelmap.sim.program import build_program
from accelmap.workload.models.bundled import load_model

MAX_STEPS = 4096      # steps above the deepest level that receives tiles: keeps each simulation short


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--per", type=int, default=40, help="random mappings per accelerator and outermost level")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--archs", nargs="+", default=["tpu_like", "eyeriss_like", "vta_like", "diana_like"])
    ap.add_argument("--show", action="store_true", help="print the mapping of every row beyond 2%%")
    args = ap.parse_args()
    layers = [lay for model in ("resnet18", "mobilenetv2") for lay in load_model(model).layers]
    t0 = time.process_time()
    print(f"{'accelerator':<14} {'outermost':<10} {'n':>3} {'mean |err|':>10} {'max |err|':>10} {'> 2%':>5}")
    for name in args.archs:
        for priced in (False, True):
            arch = get_accelerator(name)
            if priced:
                try:
                    arch = store_priced(arch)
                except SpecError as e:
                    print(f"{name:<14} {'store':<10} skipped: {e}")
                    continue
            rng = random.Random(args.seed)
            errs, beyond = [], []
            for layer, op, m in random_draws(arch, name == "diana_like", layers, rng, args.per, MAX_STEPS):
                sim = run_timing(build_program(op, arch, m), 0).cycles
                err = (evaluate(op, arch, m, check=False).latency - sim) / sim
                errs.append(abs(err))
                if abs(err) > 0.02:
                    beyond.append((layer.operator.name, err, format_text(m, arch, op)))
            where = "store" if priced else arch.levels[0].name
            print(f"{name:<14} {where:<10} {len(errs):>3} {statistics.mean(errs):>10.3%} {max(errs):>10.2%} "
                  f"{len(beyond):>5}")
            for lname, err, text in beyond:
                print(f"    {lname}: {err:+.2%}" + (("\n" + text) if args.show else ""))
    print(f"cpu {time.process_time() - t0:.1f} s")


if __name__ == "__main__":
    main()
