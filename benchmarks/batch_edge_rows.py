"""CPU time of the batch cost model on the rows it once sent to the scalar model one by one.

Two measurements, in CPU seconds of this process (``time.process_time``), so other load on the
machine does not distort them:
  imperfect  ``evaluate_batch`` on imperfectly factored rows (partial edge tiles) of one structure:
             a 3x3 convolution on simba_like, every dimension split over two levels by a random
             inner bound and the rounds that cover it (CPU ms per row, and the sums of the rows'
             energy and latency, equal before and after a change that keeps the model)
  holed      the exact search (``map_operator(..., strategy="optimal")``, EDP) of a strided conv1d
             whose window has holes (I[3*p + r], r < 3: p=5, r=2) on eyeriss_like: its proof costs
             thousands of holed rows

    python benchmarks/batch_edge_rows.py [--rows 300]
"""

from __future__ import annotations

import argparse
import random
import time

import numpy as np


def main() -> None:
    from accelmap.arch import get_accelerator
    from accelmap.arch.accelerator import adopt_precision
    from accelmap.cost.batch import evaluate_batch
    from accelmap.search.mapper import map_operator
    from accelmap.workload import conv2d, parse_expression

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=300)
    args = ap.parse_args()

    arch = get_accelerator("simba_like")
    op = adopt_precision(conv2d("c", c=8, h=10, w=10, k=12, r=3, s=3, padding=1, stride=1), arch)
    structure = [(d, lv, None) for lv in range(len(arch.levels)) for d in op.dim_names]
    keep = tuple(frozenset(lv.holds) for lv in arch.levels)
    rng = random.Random(5)
    rows = []
    for _ in range(args.rows):
        row = [1] * len(structure)
        for d, size in op.dims:
            js = [j for j, s in enumerate(structure) if s[0] == d]
            inner = rng.randint(1, size)
            row[js[-1]] = inner
            row[rng.choice(js[:-1])] = -(-size // inner)
        rows.append(row)
    B = np.array(rows)
    t = time.process_time()
    out = evaluate_batch(op, arch, structure, keep, B)
    dt = time.process_time() - t
    imperfect = int((np.prod(B, axis=1) != op.macs).sum())
    print(f"imperfect: {len(B)} rows ({imperfect} imperfect) {dt:.2f} CPU s, {1e3 * dt / len(B):.2f} ms/row; "
          f"energy sum {out['energy'].sum():.9g} pJ, latency sum {out['latency'].sum():.9g} cycles")

    arch = get_accelerator("eyeriss_like")
    op = adopt_precision(parse_expression("O[k,p] += I[3*p+r] * W[k,r]", dict(k=1, p=5, r=2), name="conv1d"), arch)
    t = time.process_time()
    res = map_operator(op, arch, "edp", strategy="optimal", time_limit=300)
    print(f"holed: exact search of {op} on eyeriss_like {time.process_time() - t:.2f} CPU s, "
          f"proven {res.proven_optimal}, EDP {res.best.value:.9g}")


if __name__ == "__main__":
    main()
