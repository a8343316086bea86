"""Evaluations per second of the cost model on ResNet-18 conv layers, on one core.

Three rates per (layer, preset), each over the same random valid mappings:
  full     accelmap.cost.evaluate (counts, energy, latency model, utilization, EDP)
  counts   accelmap.cost.access_counts (exact access counts only)
  batch    accelmap.cost.batch.evaluate_batch: the full model (counts, energy, the
           whole latency model, EDP) of many tilings of one loop structure at once
           with NumPy (rows need not fit the buffers: capacity is checked
           separately by the mapper); 20 rows of every batch are checked against
           the scalar model and must agree exactly
Target (issue 2): 20,000 full evaluations per second (50 us each). Rates are CPU
seconds of this one process (time.process_time; NumPy runs single-threaded here),
so other load on the machine does not distort them.

    python benchmarks/evaluate_speed.py [--mappings 200] [--batch 20000]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

import math
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from accelmap.arch import get_accelerator
from accelmap.arch.accelerator import adopt_precision
from accelmap.cost.batch import evaluate_batch, structure_mapping
from accelmap.cost.model import access_counts, evaluate
from accelmap.mapping.sampling import divisors, random_mapping, slots
from accelmap.workload.models import load_model

PRESETS = ("eyeriss_like", "tpu_like", "vta_like")


def random_tilings(op, arch, structure, n, rng):
    """``n`` random perfect tilings of a structure that lists every dimension at every slot."""
    rows = []
    per_dim = {d: [k for k, (dd, _, _) in enumerate(structure) if dd == d] for d in op.dim_names}
    axis_sizes = {a: s.size for a, (_, s) in arch.fanout_axes().items()}
    while len(rows) < n:
        row = [1] * len(structure)
        used = {a: 1 for a in axis_sizes}
        for d, size in op.dims:
            rest = size
            for k in per_dim[d][1:]:
                ax = structure[k][2]
                opts = [b for b in divisors(rest) if ax is None or used[ax] * b <= axis_sizes[ax]]
                b = rng.choice(opts)
                row[k] = b
                rest //= b
                if ax is not None:
                    used[ax] *= b
            row[per_dim[d][0]] = rest
        rows.append(row)
    return np.array(rows, dtype=np.int64)


def _check(op, arch, structure, keep, tilings, got, rng, n=20) -> None:
    """Rows of the batch against the scalar model: they must agree (energy, latency) exactly."""
    for r in rng.sample(range(len(tilings)), min(n, len(tilings))):
        ref = evaluate(op, arch, structure_mapping(structure, keep, tilings[r]), check=False)
        if not (math.isclose(got["energy"][r], ref.energy_total, rel_tol=1e-9)
                and math.isclose(got["latency"][r], ref.latency, rel_tol=1e-9)):
            raise SystemExit(f"batch and scalar disagree on {op.name}/{arch.name} row {r}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mappings", type=int, default=200)
    ap.add_argument("--batch", type=int, default=20_000)
    ap.add_argument("--out", default="benchmarks/results/evaluate_speed.json")
    args = ap.parse_args()
    model = load_model("resnet18")
    convs = [l for l in model.layers if l.operator.kind.endswith("conv2d")]
    rows = []
    print(f"{'layer':<28} {'preset':<13} {'full/s':>8} {'us':>6} {'counts/s':>9} {'batch/s':>10}")
    for preset in PRESETS:
        arch = get_accelerator(preset)
        for layer in convs:
            op = adopt_precision(layer.operator, arch)
            rng = random.Random(0)
            ms = [random_mapping(op, arch, rng) for _ in range(args.mappings)]
            t = time.process_time()
            for m in ms:
                evaluate(op, arch, m, check=False)
            full = len(ms) / (time.process_time() - t)
            t = time.process_time()
            for m in ms:
                access_counts(op, arch, m)
            counts = len(ms) / (time.process_time() - t)
            structure = [(d, lv, ax) for lv, ax, _ in slots(arch) for d in op.dim_names]
            structure.sort(key=lambda s: (s[1], s[2] is not None))
            keep = ms[0].keep
            tilings = random_tilings(op, arch, structure, args.batch, rng)
            t = time.process_time()
            got = evaluate_batch(op, arch, structure, keep, tilings)
            batch = len(tilings) / (time.process_time() - t)
            _check(op, arch, structure, keep, tilings, got, rng)
            rows.append({"layer": layer.name, "preset": preset, "full_per_s": full, "us_per_full": 1e6 / full,
                         "counts_per_s": counts, "batch_full_per_s": batch})
            print(f"{layer.name[:28]:<28} {preset:<13} {full:>8.0f} {1e6 / full:>6.0f} {counts:>9.0f} {batch:>10.0f}")
    for key in ("full_per_s", "counts_per_s", "batch_full_per_s"):
        print(f"median {key}: {statistics.median(r[key] for r in rows):,.0f}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"target_full_per_s": 20_000, "rows": rows}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
