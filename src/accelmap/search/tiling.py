"""The heuristic search's one form of a tiling, and every conversion from it.

The heuristic costs thousands of tilings per call, so it keeps a tiling as a
factor array: ``factors[level, dim]`` (dims in ``op.dim_names`` order) holds
the temporal bound of each dim at each level. A ``Tiling`` adds what the
array alone does not say: the spatial unrolling ``{(level, axis): {dim:
bound}}``, the operands each level keeps, and the per-level loop order (the
same at every level, outermost first), or None while each level's order is
still to be chosen exactly (``orders.py``).

Every other form the search needs is derived here, and only here: the
per-level temporal bounds as a dict, the spatial bounds per level, the
operator padded to whole spatial rounds, the loop nest (``Mapping``) the
scalar model costs, and the (loop structure, bound matrix) pair the
vectorized model (``cost.batch``) costs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from accelmap.arch.accelerator import Accelerator
from accelmap.cost.batch import Structure
from accelmap.mapping.loopnest import Loop, Mapping
from accelmap.workload.operator import Operator

# {(level, axis): {dim: bound}}: the dims each fan-out axis unrolls.
Spatial = dict[tuple[int, str], dict[str, int]]
# {level: {dim: bound}}: temporal bounds, 1s left out.
Temporal = dict[int, dict[str, int]]
# Per level, the operands it keeps.
Keep = tuple[frozenset[str], ...]


@dataclass(frozen=True, eq=False)
class Tiling:
    """One candidate of the heuristic: temporal factors, spatial unrolling, bypass and loop order."""

    factors: np.ndarray                  # [level, dim], dims in op.dim_names order
    spatial: Spatial
    keep: Keep
    order: tuple[str, ...] | None = None  # dims outermost first at every level; None: chosen per level later

    def temporal(self, op: Operator) -> Temporal:
        return temporal_of(op, self.factors)

    def mapping(self, op: Operator) -> Mapping:
        """The loop nest this tiling stands for (its order at every level); needs an order."""
        if self.order is None:
            raise ValueError("a tiling without an order has no single loop nest")
        return ordered_mapping(self.temporal(op), self.spatial, self.keep, self.order, self.factors.shape[0])

    def with_order(self, order: tuple[str, ...]) -> Tiling:
        return replace(self, order=order)


def spatial_at(spatial: Spatial) -> Temporal:
    """{(level, axis): {dim: bound}} -> {level: {dim: product of bounds}}."""
    out: Temporal = {}
    for (lvl, _), o in spatial.items():
        for d, b in o.items():
            out.setdefault(lvl, {})[d] = out.get(lvl, {}).get(d, 1) * b
    return out


def temporal_remainder(op: Operator, spatial: Spatial) -> dict[str, int]:
    """Per dim, the temporal product left once the spatial loops took their share (rounded up)."""
    sp = spatial_at(spatial)
    return {d: -(-op.sizes[d] // math.prod(sp[lvl].get(d, 1) for lvl in sp)) for d in op.dim_names}


def padded_operator(op: Operator, spatial: Spatial) -> tuple[Operator, dict[str, int]]:
    """The operator with every dimension rounded up to whole spatial rounds, and the temporal remainder."""
    sp = spatial_at(spatial)
    total = {d: math.prod(sp[lvl].get(d, 1) for lvl in sp) for d in op.dim_names}
    rem = temporal_remainder(op, spatial)
    if all(rem[d] * total[d] == op.sizes[d] for d in op.dim_names):
        return op, rem
    return replace(op, dims=tuple((d, rem[d] * total[d]) for d in op.dim_names)), rem


def temporal_of(op: Operator, factors: np.ndarray) -> Temporal:
    """A factor array [level, dim] as {level: {dim: bound > 1}}."""
    return {lv: {d: int(factors[lv, i]) for i, d in enumerate(op.dim_names) if factors[lv, i] > 1}
            for lv in range(factors.shape[0])}


def factors_of(op: Operator, temporal: Temporal, nlev: int) -> np.ndarray:
    """{level: {dim: bound}} as a factor array [level, dim] (the inverse of ``temporal_of``)."""
    F = np.ones((nlev, len(op.dim_names)), dtype=np.int64)
    for lv, o in temporal.items():
        for d, b in o.items():
            F[lv, op.dim_names.index(d)] = b
    return F


def ordered_mapping(temporal: Temporal, spatial: Spatial, keep: Keep, order: tuple[str, ...], nlev: int) -> Mapping:
    """The Mapping a batch row stands for: at every level its loops in ``order``, then its spatial loops."""
    loops = []
    for lv in range(nlev):
        loops += [Loop(d, temporal.get(lv, {})[d], lv) for d in order if temporal.get(lv, {}).get(d, 1) > 1]
        loops += [Loop(d, b, lvl, ax) for (lvl, ax), o in spatial.items() if lvl == lv for d, b in o.items() if b > 1]
    return Mapping(tuple(loops), keep)


def batch_form(op: Operator, nlev: int, spatials: list[Spatial], order: tuple[str, ...],
               factor_groups: list[np.ndarray]) -> tuple[Structure, np.ndarray]:
    """Factor arrays F[row, level, dim] under one per-level order as the vectorized model's input: the
    loop slots (every dim at every level in ``order``, then the level's spatial loops) and the bound
    of every slot in every row. ``factor_groups[g]`` is tiled under the unrolling ``spatials[g]`` (rows
    in that order): the structure holds every spatial loop any of them has, and the rows of the others
    give that loop bound 1, which changes no count and no latency term (``cost.batch``). So one call of
    the vectorized model costs several unrollings' tilings (its cost is mostly per call)."""
    dims = op.dim_names
    slots: dict[tuple[int, str, str], None] = {}      # (level, axis, dim), in first-seen order
    for spatial in spatials:
        for (lvl, ax), o in spatial.items():
            for d, b in o.items():
                if b > 1:
                    slots.setdefault((lvl, ax, d))
    structure: Structure = []
    temporal_cols: list[tuple[int, int, int]] = []    # (slot, level, dim index)
    spatial_col: dict[tuple[int, str, str], int] = {}
    for lv in range(nlev):
        for d in order:
            temporal_cols.append((len(structure), lv, dims.index(d)))
            structure.append((d, lv, None))
        for lvl, ax, d in slots:
            if lvl == lv:
                spatial_col[(lvl, ax, d)] = len(structure)
                structure.append((d, lv, ax))
    F = np.concatenate(factor_groups) if len(factor_groups) > 1 else factor_groups[0]
    bounds = np.ones((len(F), len(structure)), dtype=np.int64)
    for j, lv, i in temporal_cols:
        bounds[:, j] = F[:, lv, i]
    lo = 0
    for spatial, G in zip(spatials, factor_groups, strict=True):
        for (lvl, ax), o in spatial.items():
            for d, b in o.items():
                if b > 1:
                    bounds[lo:lo + len(G), spatial_col[(lvl, ax, d)]] = b
        lo += len(G)
    return structure, bounds


def describe_spatial(spatial: Spatial, arch: Accelerator | None = None) -> str:
    """An unrolling in a line, for logs: ``Buf.X K=16 C=4, Buf.Y P=8``; ``none`` when nothing unrolls."""
    parts = []
    for (lvl, ax), o in sorted(spatial.items()):
        dims = " ".join(f"{d}={b}" for d, b in o.items() if b > 1)
        if dims:
            where = f"{arch.levels[lvl].name}.{ax}" if arch is not None else ax
            parts.append(f"{where} {dims}")
    return ", ".join(parts) or "none"
