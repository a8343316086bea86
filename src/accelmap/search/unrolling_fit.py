"""Rule S6 of docs/mapper.md: a level set is open to an operand under an unrolling only if every level of it can
hold the operand's smallest tile there.

A level's tile spans every loop inside it (``mapping.validate.tile_extents``): its own and deeper levels' loops,
temporal and spatial, and the spatial loops of axes it is shared along. Loops only grow a tile (index sizes are
non-decreasing in each extent), so under a fixed unrolling the tile of X at level c is at least X's span over the
spatial loops inside c alone. The capacity check (``tile_fits``) charges a level the sum over the operands it keeps
(per partition, or in its shared capacity) of tile x bits (x2 double-buffered); so if X's smallest tile alone
exceeds c's capacity for X, no mapping with that unrolling keeps X at c. Rule S1 minimizes each operand's terms
over its level sets; dropping the sets no mapping can use keeps it a bound, and raises it where the cheap set was
one no mapping can take (edge_tpu_like's 16-bit output register under an unrolling that spreads outputs over its
fan-out: the partial sums must then live in the activation memory).

Two forms: per real unrolling (``unrolling_chain_fits``: dims as columns, every index form, with the validator's
tile sizes vectorized) and per class vector of rule S2 (``class_chain_fits``: classes as columns; only operands
whose every index is a single dim, whose tile is then the product of the class extents they use, are restricted).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from accelmap.arch.accelerator import Accelerator
from accelmap.cost.nest_rows import fewest_bits, tile_sizes
from accelmap.workload.operator import Operand, Operator


def level_extents(arch: Accelerator, groups: Sequence[tuple[int, str | None, np.ndarray]], c: int) -> np.ndarray:
    """[row, column]: the product of the spatial bounds inside level ``c``'s tiles (``Accelerator.inside``).
    ``groups``: (fan-out level, axis name or None when unknown, bounds[row, column]). An axis of unknown name
    counts only when at or below c (leaving out a loop only shrinks the tile: the test stays necessary)."""
    out = np.ones_like(groups[0][2])
    for lvl, axis, B in groups:
        if lvl >= c or (axis is not None and arch.inside(c, lvl, axis)):
            out = out * B
    return out


def _fits(arch: Accelerator, X: Operand, c: int, tile: np.ndarray) -> np.ndarray | None:
    """Rows where X's smallest tile fits level c (``tile_fits`` for X alone), or None when c has no limit."""
    lv = arch.levels[c]
    cap = lv.capacity_for(X.cls)
    if cap is None:
        return None
    # at X's fewest bits: finished outputs may be stored at the output stage's precision
    return tile * fewest_bits(X, arch) * (2 if lv.double_buffered else 1) <= cap


def _chain_masks(op: Operator, arch: Accelerator, chains: dict[str, list[list[int]]], rows: int,
                 fits_at) -> dict[str, list[np.ndarray]]:
    masks: dict[str, list[np.ndarray]] = {}
    for X in op.operands:
        per_level: dict[int, np.ndarray | None] = {}
        out = []
        for chain in chains[X.name]:
            ok = np.ones(rows, dtype=bool)
            for c in chain:
                if c not in per_level:
                    per_level[c] = fits_at(X, c)
                if per_level[c] is not None:
                    ok &= per_level[c]
            out.append(ok)
        masks[X.name] = out
    return masks


def unrolling_chain_fits(op: Operator, arch: Accelerator, axes: list, per_axis: list[np.ndarray], rows: int,
                         chains: dict[str, list[list[int]]]) -> dict[str, list[np.ndarray]]:
    """Per operand, per level set of ``chains``, bool[row]: can every level of the set hold the operand's smallest
    tile under the row's unrolling (``axes``: [(level, FanoutAxis)], ``per_axis``: bounds[row, dim] per axis, as
    ``spatial.SpatialSpace`` holds them, ``rows`` of them)?"""
    groups = [(lvl, a.name, B) for (lvl, a), B in zip(axes, per_axis, strict=True)]
    dims = op.dim_names
    sizes = np.array([op.sizes[d] for d in dims], dtype=np.int64)

    def fits_at(X: Operand, c: int) -> np.ndarray | None:
        if not groups or arch.levels[c].capacity_for(X.cls) is None:
            return None
        ext = np.minimum(level_extents(arch, groups, c), sizes)
        tile, _ = tile_sizes(X, {d: ext[:, i] for i, d in enumerate(dims)})
        return _fits(arch, X, c, tile)

    return _chain_masks(op, arch, chains, rows, fits_at)


def class_chain_fits(op: Operator, arch: Accelerator, groups: list[tuple[int, np.ndarray]],
                     classes_used: dict[str, np.ndarray],
                     chains: dict[str, list[list[int]]]) -> dict[str, list[np.ndarray]]:
    """``unrolling_chain_fits`` over rule S2's class vectors: ``groups`` (fan-out level, vectors[row, class]),
    ``classes_used`` per operand. An operand with an index over several dims (a sliding window) is not
    restricted: its tile is not a function of the class products."""
    rows = len(groups[0][1]) if groups else 1
    tagged = [(lvl, None, V) for lvl, V in groups]

    def fits_at(X: Operand, c: int) -> np.ndarray | None:
        if not tagged or any(len(ix.terms) != 1 for ix in X.indices):
            return None
        ext = level_extents(arch, tagged, c)
        tile = np.where(classes_used[X.name], ext, 1).prod(axis=1)
        return _fits(arch, X, c, tile)

    return _chain_masks(op, arch, chains, rows, fits_at)
