"""The exact search against the exhaustive one on machines whose buffer refills while read.

A level with ``refill_while_read`` stalls or not depending on which of its loops is outermost, which no
access count sees (rule O4 of docs/mapper.md). This sweep draws random small GEMMs and two-level machines
(DRAM and a buffer that refills while read, keeping a random subset of A, B and C, 4-24 B, 0/2/8 setup
cycles per tile, 1-2 words per cycle), runs ``search_exhaustive`` and ``search_optimal`` for latency and
EDP, and prints every case where the optimal values differ. Too slow for the test suite (about 0.4 s CPU
per case); the tests keep the case it found.

``--deep`` draws three-level machines instead (DRAM with a random read port; a buffer that refills while read,
4-32 B, with a fan-out of two that multicasts and reduces or not; under it a 1-4 B level double-buffered when two
tiles fit, refilling while read or not; random kept classes and bypass) and random small operators (GEMM,
conv1d with a stride, three-input products; at most 36 MACs): what the lower-bound rules B*, S*, E* of docs/mapper.md meet on
such levels. Every objective is compared against the exhaustive search over every unrolling (Ruby-S: any
unrolling bound, temporal loops dividing what is left), and every lower bound (the certificate, the root bound
of the exact search) is checked against the optimum.

    python benchmarks/refill_orders_vs_exhaustive.py [--seed 0] [--count 150] [--deep]
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from pathlib import Path

from accelmap.arch import accelerator_from_dict
from accelmap.search.exhaustive import search_exhaustive
from accelmap.search.optimal import search_optimal
from accelmap.workload import gemm

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from strategies import refill_machine, small_operator  # noqa: E402  (the tests draw the same machines)


def machine(holds: list[str], capacity: int, setup: int, bandwidth: int):
    buf = {"name": "Buf", "holds": holds, "capacity": f"{capacity} B", "width": "8 bit",
           "write_bandwidth": f"{bandwidth} words/cycle", "double_buffered": "when_fits", "bypass": False,
           "refill_while_read": True, "transfer_setup_cycles": setup}
    return accelerator_from_dict({"name": "refill", "compute": {"mac_energy": "1 pJ"}, "levels": [
        {"name": "DRAM", "holds": ["I", "W", "O"], "capacity": "unbounded", "width": "8 bit"}, buf]})


def deep(seed: int, count: int) -> None:
    """Three-level machines (``strategies.refill_machine``): the exact search with the unrolling searched against
    exhaustive Ruby-S, every objective, and every lower bound against the optimum."""
    from accelmap.search import Constraints
    from accelmap.search.bounds import BoundContext, chain_options
    from accelmap.search.exact import search_exact
    from accelmap.search.space import keep_options
    from accelmap.search.spatial import certified_lower_bound

    rng = random.Random(seed)
    compared = differ = bound_over = 0
    cpu = time.process_time()
    for _ in range(count):
        arch, op = refill_machine(rng), small_operator(rng)
        if math.prod(op.sizes.values()) > 36:
            continue
        keeps = keep_options(op, arch, Constraints())
        for objective in ("latency", "edp", "energy"):
            every, st = search_exhaustive(op, arch, objective, imperfect="spatial", time_limit=60)
            if st.extra.get("timed_out") or not every:
                continue
            best, st2 = search_exact(op, arch, objective, heuristic=False, time_limit=60)
            compared += 1
            ref = every[0].value
            if not best or abs(best[0].value - ref) > 1e-9 * ref:
                differ += 1
                print(f"{op.name} {op.sizes} {objective}: exact {best[0].value if best else None}, exhaustive {ref:g}"
                      f"\n  machine: {[(lv.name, lv.holds, lv.capacity_bits) for lv in arch.levels]}"
                      f"\n  exhaustive: {every[0].mapping}")
            lower = certified_lower_bound(op, arch, Constraints(), chain_options(op, keeps), objective)[0]
            roots = []
            for keep in keeps:
                e_lb, l_lb = BoundContext(op, arch, keep).lower_bound((), len(arch.levels), dict(op.sizes))
                roots.append({"energy": e_lb, "latency": l_lb, "edp": e_lb * l_lb}[objective])
            print(f"  {op.name} {op.sizes} {objective}: optimum {ref:g}, exact {best[0].value if best else None}, "
                  f"certificate {lower:g}, least root bound {min(roots):g}", flush=True)
            if lower > ref * (1 + 1e-9) or min(roots) > ref * (1 + 1e-9):
                bound_over += 1
                print(f"{op.name} {op.sizes} {objective}: bound above the optimum {ref:g}: certificate {lower:g}, "
                      f"root {min(roots):g}")
    print(f"{compared} searches compared, {differ} differ, {bound_over} with a bound above the optimum; "
          f"{time.process_time() - cpu:.1f} s CPU")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--count", type=int, default=150)
    ap.add_argument("--deep", action="store_true", help="three-level machines with a fan-out, every objective")
    args = ap.parse_args()
    if args.deep:
        deep(args.seed, args.count)
        return
    rng = random.Random(args.seed)
    compared = differ = 0
    cpu = time.process_time()
    for _ in range(args.count):
        op = gemm("g", m=rng.choice([2, 3, 4, 6]), n=rng.choice([2, 3, 4, 6]), k=rng.choice([2, 4, 6, 8]))
        holds = rng.choice([["W"], ["I"], ["O"], ["I", "W"], ["W", "O"], ["I", "O"], ["I", "W", "O"]])
        capacity, setup, bandwidth = rng.choice([4, 6, 8, 12, 16, 24]), rng.choice([0, 2, 8]), rng.choice([1, 2])
        arch = machine(holds, capacity, setup, bandwidth)
        for objective in ("latency", "edp"):
            every, _ = search_exhaustive(op, arch, objective)
            if not every:   # no mapping fits: nothing to compare
                continue
            best, _ = search_optimal(op, arch, objective)
            compared += 1
            if abs(best[0].value - every[0].value) > 1e-9 * every[0].value:
                differ += 1
                print(f"{op.sizes} holds={holds} {capacity} B setup={setup} {bandwidth} words/cycle {objective}: "
                      f"exact {best[0].value:g}, exhaustive {every[0].value:g}\n  exhaustive: {every[0].mapping}")
    print(f"{compared} searches compared, {differ} differ; {time.process_time() - cpu:.1f} s CPU")


if __name__ == "__main__":
    main()
