"""Vectorized cost of many tilings of one loop structure.

A structure is the nest with its loops' dimensions, levels and axes fixed; a
row of ``bounds`` gives every loop's bound. Loops of bound 1 change no count
and no latency term, so one structure that lists every dimension at every
slot covers every perfect tiling with the given per-level orders.

Counting follows ``access_counts.entering_perfect`` term by term over the rows
of a ``NestRows``, and energy follows ``model.evaluate``; latency is
``latency.latency_rows``, the one definition the model of a single mapping
also runs. Counts must agree with the scalar counter exactly
(tests/test_cost_batch.py). A sliding-window axis that is not a contiguous
interval (stride larger than the dilated window and coprime with it) is counted
element by element inside ``NestRows`` (exact, cached per shape). Rows that are
not perfectly factored (partial edge tiles) take their access counts from the
scalar counter (``model.access_counts``, row by row: its per-dimension state
histograms are the one definition of edge-tile counts); their energy and latency
are then computed over rows with every other row's.
"""

from __future__ import annotations

from itertools import pairwise

import numpy as np

from accelmap.arch.accelerator import Accelerator
from accelmap.cost.latency import latency_rows
from accelmap.cost.level_energy import fanout_element_energy, level_energy, stream_accesses
from accelmap.cost.model import access_counts, check_countable
from accelmap.cost.nest_rows import NestRows, Structure, final_outputs, tile_sizes
from accelmap.mapping.loopnest import Loop, Mapping
from accelmap.workload.operator import Operand, Operator

__all__ = ["Structure", "evaluate_batch", "structure_mapping", "tile_sizes"]

# Rows x loop slots per piece of a large batch (see evaluate_batch).
CLASS_ELEMENTS = 32768


def _entering(nest: NestRows, X: Operand, c: int) -> np.ndarray:
    """Elements of X entering level c over the run: the first tile plus, per transition class,
    transitions x the elements that change (``_deltas``), times the instances in use."""
    return nest.used(c) * nest.deltas(X, c)[2]


def edge_tile_counts(op: Operator, arch: Accelerator, structure: Structure, keep, B: np.ndarray,
                     rows: np.ndarray, counts: dict[tuple[int, str], list[np.ndarray]]) -> None:
    """Overwrite the counts of ``rows`` (imperfectly factored: partial tiles at the edges) with the
    exact counter's (``model.access_counts``); energy and latency then take them over rows."""
    for r in rows:
        for key, c in access_counts(op, arch, structure_mapping(structure, keep, B[r])).items():
            for k, v in enumerate(c.as_tuple()):
                counts[key][k][r] = v


def batch_counts(nest: NestRows, keep) -> dict[tuple[int, str], list[np.ndarray]]:
    """(level, operand) -> [fills, reads, updates, drains] per row, as ``model.access_counts`` for
    perfectly factored rows (the others are ``edge_tile_counts``' job)."""
    op, arch, structure, B, n, nlev = nest.op, nest.arch, nest.structure, nest.B, nest.n, nest.nlev
    n_out = nest.footprint(op.output)
    init_read = 1 if op.init_output == "read" else 0
    zero = np.zeros(n, dtype=np.int64)
    counts = {(i, X.name): [zero.copy() for _ in range(4)] for X in op.operands for i in range(nlev)
              if X.name in keep[i]}

    def merged_product(X, lo, hi):
        out = np.ones(n, dtype=np.int64)
        for j, (d, lv, ax) in enumerate(structure):
            if ax is not None and arch.inside(lo, lv, ax) and not arch.inside(hi, lv, ax) and d not in X.dims:
                if X.is_output or arch.fanout_axis(lv, ax).multicast:
                    out = out * B[:, j]
        return out

    lineages = nest.lineages

    for X in op.operands:
        chain = [i for i in range(nlev) if X.name in keep[i]]
        for p, c in pairwise(chain):
            member = _entering(nest, X, c)
            group = member // merged_product(X, p, c)
            cc, pc = counts[(c, X.name)], counts[(p, X.name)]
            if X.is_output:
                down = group - n_out * (lineages(X, p) - init_read)
                cc[0] += down
                pc[1] += down
                cc[3] += member
                pc[2] += group
            else:
                cc[0] += member
                pc[1] += group
        last = chain[-1]
        g = nest.total // merged_product(X, last, nlev)
        lc = counts[(last, X.name)]
        if X.is_output:
            lc[2] += g
            lc[1] += g - n_out * (lineages(X, last) - init_read)
        else:
            lc[1] += g
    return counts


def batch_energy(nest: NestRows, keep, counts) -> np.ndarray:
    op, arch, nlev = nest.op, nest.arch, nest.nlev
    energy = np.full(nest.n, float(op.macs * arch.compute.mac_energy_pj))
    fb = arch.compute.final_output_bits
    finals = final_outputs(nest, keep) if fb is not None else {}
    for (i, name), c in counts.items():
        lv = arch.levels[i]
        out = name == op.output.name
        acc = stream_accesses(nest, keep, op.operand(name), i) if lv.access_granularity_bits is not None else None
        energy += level_energy(lv, op.operand(name).bits, c, finals.get(i) if out else None, fb, out, acc)
    for X in op.operands:
        chain = [i for i in range(nlev) if X.name in keep[i]] + [nlev]
        for p, c in pairwise(chain):
            for f in range(p, c):
                unit = fanout_element_energy(arch.levels[f], X.bits)
                if not unit:
                    continue
                if c == nlev:
                    energy += op.macs * (2 if X.is_output else 1) * unit
                else:
                    cc = counts[(c, X.name)]
                    energy += (cc[0] + cc[3]) * unit
    return energy


def evaluate_batch(op: Operator, arch: Accelerator, structure: Structure, keep: tuple[frozenset[str], ...],
                   bounds: np.ndarray, latency: bool = True) -> dict[str, np.ndarray]:
    """Energy, latency, EDP and MAC-schedule cycles of every row of ``bounds`` (rows x loops)."""
    check_countable(op)
    B = np.asarray(bounds, dtype=np.int64)
    if B.ndim != 2 or B.shape[1] != len(structure):
        raise ValueError(f"bounds must be rows x {len(structure)} loops, got shape {B.shape}")
    # The per-class terms hold (classes x rows) matrices and the single-buffer schedule stacks
    # (classes + 1) copies of the rows: past a few tens of thousands of elements they fall out
    # of cache and a large batch is faster in pieces.
    piece = max(256, CLASS_ELEMENTS // max(1, len(structure)))
    if len(B) > piece:
        parts = [evaluate_batch(op, arch, structure, keep, B[s:s + piece], latency)
                 for s in range(0, len(B), piece)]
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    # Slots of bound 1 in every row change nothing: drop them (the per-slot work is quadratic).
    live = np.flatnonzero((B != 1).any(axis=0)).tolist()
    if len(live) < B.shape[1]:
        structure, B = [structure[j] for j in live], B[:, live]
    nest = NestRows(op, arch, structure, B)
    counts = batch_counts(nest, keep)
    imperfect = np.nonzero(~nest.perfect)[0]
    if len(imperfect):
        edge_tile_counts(op, arch, structure, keep, B, imperfect, counts)
    out = {"energy": batch_energy(nest, keep, counts),
           "compute_cycles": -(-nest.temporal // arch.compute.macs_per_cycle)}
    if latency:
        out["latency"] = latency_rows(nest, keep, counts)["latency"]
    if latency:
        out["edp"] = out["energy"] * out["latency"]
    return out


def structure_mapping(structure: Structure, keep, row) -> Mapping:
    """The Mapping of one row (loops of bound 1 dropped)."""
    return Mapping(tuple(Loop(d, int(b), lv, ax) for (d, lv, ax), b in zip(structure, row, strict=True) if b > 1), keep)
