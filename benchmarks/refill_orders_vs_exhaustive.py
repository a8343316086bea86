"""The exact search against the exhaustive one on machines whose buffer refills while read.

A level with ``refill_while_read`` stalls or not depending on which of its loops is outermost, which no
access count sees (rule O4 of docs/mapper.md). This sweep draws random small GEMMs and two-level machines
(DRAM and a buffer that refills while read, keeping a random subset of A, B and C, 4-24 B, 0/2/8 setup
cycles per tile, 1-2 words per cycle), runs ``search_exhaustive`` and ``search_optimal`` for latency and
EDP, and prints every case where the optimal values differ. Too slow for the test suite (about 0.4 s CPU
per case); the tests keep the case it found.

    python benchmarks/refill_orders_vs_exhaustive.py [--seed 0] [--count 150]
"""

from __future__ import annotations

import argparse
import random
import time

from accelmap.arch import accelerator_from_dict
from accelmap.search.exhaustive import search_exhaustive
from accelmap.search.optimal import search_optimal
from accelmap.workload import gemm


def machine(holds: list[str], capacity: int, setup: int, bandwidth: int):
    buf = {"name": "Buf", "holds": holds, "capacity": f"{capacity} B", "width": "8 bit",
           "write_bandwidth": f"{bandwidth} words/cycle", "double_buffered": "when_fits", "bypass": False,
           "refill_while_read": True, "transfer_setup_cycles": setup}
    return accelerator_from_dict({"name": "refill", "compute": {"mac_energy": "1 pJ"}, "levels": [
        {"name": "DRAM", "holds": ["I", "W", "O"], "capacity": "unbounded", "width": "8 bit"}, buf]})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--count", type=int, default=150)
    args = ap.parse_args()
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
