"""Vectorized energy of many perfectly factored tilings of one loop structure.

A structure is the nest with its loops' dimensions, levels and axes fixed; a
row of ``bounds`` gives every loop's bound. Loops of bound 1 change no count,
so one structure that lists every dimension at every slot covers every
perfect tiling with the given per-level orders. Counting follows
``access_counts.entering_perfect`` term by term with NumPy arrays over rows,
and must agree with ``cost.model.evaluate`` exactly (tests/test_cost_batch.py).
Latency is not vectorized: ``cost/latency.py`` models the tile program the
simulator runs (per-transfer setup, pipelines, buffering), which is not yet
written over arrays; only the MAC schedule (a lower bound of latency) is.
Rows whose sliding-window axis is not a contiguous interval (stride larger
than the dilated window and coprime with it) are evaluated by the scalar
model; they are rare.
"""

from __future__ import annotations

import math

import numpy as np

from accelmap.arch.accelerator import Accelerator
from accelmap.cost.model import evaluate
from accelmap.mapping.loopnest import Loop, Mapping
from accelmap.workload.operator import Operator


def _axis_size(coeffs, exts):
    """Size of {sum c*x} for one or two terms, or -1 where it has holes (scalar fallback)."""
    if len(coeffs) == 1:
        return exts[0]
    if len(coeffs) > 2:
        return np.full_like(exts[0], -1)
    (c1, c2), (e1, e2) = coeffs, exts
    g = math.gcd(c1, c2)
    a, b = c1 // g, c2 // g
    size = np.full_like(e1, -1)
    # One term fixed: an arithmetic progression of the other.
    size = np.where(e2 == 1, e1, np.where(e1 == 1, e2, size))
    # Windows that touch or overlap: one interval (in steps of the gcd).
    if a == 1:
        size = np.where((e1 > 1) & (e2 > 1) & (b <= e1), b * (e2 - 1) + e1, size)
    if b == 1:
        size = np.where((e1 > 1) & (e2 > 1) & (a <= e2), a * (e1 - 1) + e2, size)
    return size


def _axis_overlap(coeffs, exts, shifts, size):
    """|A ∩ (A + shift)| where A is an interval (in gcd steps) or a progression of one term."""
    if len(coeffs) == 1:
        return np.maximum(0, exts[0] - np.abs(shifts[0]))
    (c1, c2), (e1, e2) = coeffs, exts
    g = math.gcd(c1, c2)
    off = np.abs(c1 * shifts[0] + c2 * shifts[1])
    interval = np.maximum(0, size - off // g)
    prog1 = np.where(off % c1 == 0, np.maximum(0, e1 - off // c1), 0)
    prog2 = np.where(off % c2 == 0, np.maximum(0, e2 - off // c2), 0)
    # A progression of one term when the other extent is 1 (both 1: a single point, off 0 or not).
    return np.where((e1 > 1) & (e2 > 1), interval, np.where(e2 == 1, prog1, prog2))


def evaluate_batch(op: Operator, arch: Accelerator, structure: list[tuple[str, int, str | None]],
                   keep: tuple[frozenset[str], ...], bounds: np.ndarray) -> dict[str, np.ndarray]:
    """Energy and MAC-schedule cycles of every row of ``bounds`` (shape rows x loops)."""
    B = np.asarray(bounds, dtype=np.int64)
    n, L = B.shape
    nlev = len(arch.levels)
    dims = op.dim_names
    # Stride of each loop: product of the bounds of later loops of the same dimension.
    stride = np.ones_like(B)
    for j in range(L):
        for k in range(j + 1, L):
            if structure[k][0] == structure[j][0]:
                stride[:, j] *= B[:, k]
    inner = {c: {d: np.ones(n, dtype=np.int64) for d in dims} for c in range(nlev)}
    for c in range(nlev):
        for j, (d, lv, _) in enumerate(structure):
            if lv >= c:
                inner[c][d] = inner[c][d] * B[:, j]
    fallback = np.zeros(n, dtype=bool)

    def entering(X, c):
        axes = [(tuple(cf for _, cf in ix.terms), tuple(d for d, _ in ix.terms)) for ix in X.indices]
        ext = inner[c]
        sizes = [_axis_size(cf, [ext[d] for d in ds]) for cf, ds in axes]
        for s in sizes:
            fallback[:] |= s < 0
        tile = np.prod(np.stack([np.maximum(s, 0) for s in sizes]), axis=0)
        inst = np.ones(n, dtype=np.int64)
        temporal = []
        for j, (d, lv, ax) in enumerate(structure):
            if lv >= c:
                break
            if ax is not None:
                inst = inst * B[:, j]
            else:
                temporal.append(j)
        total = tile.copy()
        prefix = [np.ones(n, dtype=np.int64)]
        for j in temporal:
            prefix.append(prefix[-1] * B[:, j])
        resets = {d: np.zeros(n, dtype=np.int64) for d in dims}
        for t in range(len(temporal) - 1, -1, -1):
            j = temporal[t]
            dj = structure[j][0]
            overlap = np.ones(n, dtype=np.int64)
            for (cf, ds), size in zip(axes, sizes):
                sh = [resets[d] + (stride[:, j] if d == dj else 0) for d in ds]
                overlap = overlap * _axis_overlap(cf, [ext[d] for d in ds], sh, np.maximum(size, 0))
            count = prefix[t] * (B[:, j] - 1)
            total = total + count * (tile - overlap)
            if dj in X.dims:
                resets[dj] = resets[dj] - (B[:, j] - 1) * stride[:, j]
        return inst * total

    energy = np.full(n, float(op.macs * arch.compute.mac_energy_pj))
    n_out = op.footprint(op.output)
    init_read = 1 if op.init_output == "read" else 0
    total_prod = np.prod(B, axis=1)

    def merged_product(X, lo, hi):
        out = np.ones(n, dtype=np.int64)
        for j, (d, lv, ax) in enumerate(structure):
            if ax is not None and lo <= lv < hi and d not in X.dims:
                if X.is_output or arch.levels[lv].fanout.axis(ax).multicast:
                    out = out * B[:, j]
        return out

    def lineages(X, level):
        out = np.ones(n, dtype=np.int64)
        for j, (d, lv, ax) in enumerate(structure):
            if ax is not None and lv < level and d not in X.dims:
                out = out * B[:, j]
        return out

    def add(i, X, kind, v):
        lv = arch.levels[i]
        scale = X.bits / lv.width_bits
        if kind in ("reads", "drains"):
            energy[:] += v * lv.read_energy_pj * scale
        else:
            energy[:] += v * lv.write_energy_pj * scale

    for X in op.operands:
        chain = [i for i in range(nlev) if X.name in keep[i]]
        for p, c in zip(chain, chain[1:]):
            member = entering(X, c)
            group = member // merged_product(X, p, c)
            if X.is_output:
                down = group - n_out * (lineages(X, p) - init_read)
                add(c, X, "fills", down)
                add(p, X, "reads", down)
                add(c, X, "drains", member)
                add(p, X, "updates", group)
                moved = down + member
            else:
                add(c, X, "fills", member)
                add(p, X, "reads", group)
                moved = member
            for f in range(p, c):
                fo = arch.levels[f].fanout
                if fo is not None and fo.transfer_energy_pj:
                    energy[:] += moved * fo.transfer_energy_pj * X.bits / arch.levels[f].width_bits
        last = chain[-1]
        g = total_prod // merged_product(X, last, nlev)
        if X.is_output:
            add(last, X, "updates", g)
            add(last, X, "reads", g - n_out * (lineages(X, last) - init_read))
        else:
            add(last, X, "reads", g)
        for f in range(last, nlev):
            fo = arch.levels[f].fanout
            if fo is not None and fo.transfer_energy_pj:
                energy[:] += op.macs * (2 if X.is_output else 1) * fo.transfer_energy_pj * X.bits / arch.levels[f].width_bits
    spatial = np.ones(n, dtype=np.int64)
    for j, (_, _, ax) in enumerate(structure):
        if ax is not None:
            spatial = spatial * B[:, j]
    compute = -(-(total_prod // spatial) // arch.compute.macs_per_cycle)
    if fallback.any():
        for r in np.nonzero(fallback)[0]:
            res = evaluate(op, arch, structure_mapping(structure, keep, B[r]), check=False)
            energy[r] = res.energy_total
    return {"energy": energy, "compute_cycles": compute}


def structure_mapping(structure, keep, row) -> Mapping:
    """The Mapping of one row (loops of bound 1 dropped)."""
    return Mapping(tuple(Loop(d, int(b), lv, ax) for (d, lv, ax), b in zip(structure, row) if b > 1), keep)
