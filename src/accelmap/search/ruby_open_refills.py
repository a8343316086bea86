"""Rule B53 of docs/mapper.md: over imperfect (Ruby-S) tiles, an open single-buffered level's least refill still
stalls compute.

Rule B27 (``open_level_refills``) charges an open single-buffered level c the least stall of its refills over every
tile shape whose extents divide each dim; with imperfect tiles it is off, because a partial tile can fit where no
dividing one does (rule I3). Here the shapes are every integer extent up to each dim (the capacity check reads the
extents clipped to the dims, ``validate.tile_extents``), and the counts are ones that hold whatever the tiles' edges:

Take one instance of c and one iteration of the temporal loops above it. What it works on is a box, per dim d an
interval of at most ``E_d`` indices (c's extents, the loops inside c, clipped to the dim, and empty for an idle lane of
a padded fan-out); the non-empty boxes of every instance and iteration partition the MACs' iteration space. An operand
X whose indices read disjoint sets of dims has at least ``prod over its indices of (the extent of one dim of the
index)`` elements in the box's tile (a plain index is its dim's extent; ``stride x a + dilation x b`` over intervals
takes at least as many values as either interval). With ``D`` those dims (per sliding-window index the one of larger
``E``), ``|box| <= |tile| x prod over d not in D of E_d``, so summed over the boxes, the tiles of X come to at least
``MACs / prod over d not in D of E_d``. When the innermost temporal loop above c with more than one iteration runs over
a dim d that X reads as a plain index, every iteration moves X's tile along d to indices it did not hold (a wrap
included: the loop has moved past its first position), so X enters c its whole tile at every non-empty box: at least
that sum, and at least its footprint. Operands that do not read d plainly get their footprint. A dim needs a temporal
loop above c when the fan-outs above c cannot cover what c's extent leaves of it (``ceil(N_d / E_d)`` above what they
unroll at most); when no dim does, there may be no temporal loop above c and every operand gets its footprint. These are
rule B27's counts with its orders (rule B15) and window shares (rule B37) left out, so rule B27's stall of them
(``open_level_refills.level_stall``: B9's loads in sequence over both ports, the output's B16 chain) is, per shape, at
most the stall of every mapping whose tile at c has that shape, and its least over the shapes and cases is a bound
below every node where c is open. Where the extents each dim can take alone in c, all combined, pass ``RUBY_CELLS``
rows, they are grouped in cells (``ruby_cells``): a cell is kept where its least extents fit, its counts are read at
its largest and each case where some shape of it allows the case, so its value is at most every shape's in it.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from accelmap.search.deadline import check as check_deadline
from accelmap.search.open_level_refills import (
    OpenShapes,
    level_cached,
    level_stall,
    refilled_operands,
    tiles_that_fit,
)
from accelmap.workload.operator import Operand


def ruby_open_levels_stall(ctx, level: int) -> float:
    """Rule B53 at a node whose levels >= ``level`` are fixed, with imperfect tiles: the largest, over the open
    single-buffered levels c (1 <= c < level), of c's least stall (``ruby_open_level_stall``)."""
    return max((ruby_open_level_stall(ctx, c) for c in range(1, level) if c in ctx.serial_fill), default=0.0)


_RUBY_STALLS: dict[tuple, float] = {}


def ruby_open_level_stall(ctx, c: int) -> float:
    """Rule B53 for one open single-buffered level c; cached per context and globally per what it depends on."""
    mine = ctx.open_stall
    got = mine.get(c)
    if got is None:
        got = mine[c] = level_cached(_RUBY_STALLS, ctx, c, least_ruby_stall)
    return got


@dataclass(frozen=True)
class RubyCells:
    """The tile shapes that may fit an open level c, as cells of a grid of extents: per cell (row) its least extents
    (``lower``, fit is read there) and its largest (``upper``, counts are read there)."""
    lower: np.ndarray                 # rows x dims
    upper: np.ndarray                 # rows x dims
    kept: tuple[Operand, ...]         # operands c receives from a parent (not loose)
    left_lower: np.ndarray            # rows x dims: ceil(size / lower)
    left_upper: np.ndarray            # rows x dims: ceil(size / upper)
    boxes: dict[str, np.ndarray | None]     # per kept operand, ``box_tiles`` at ``upper``


# Cells above which a coarser grid is taken (each bypass choice and unrolling passes over them once per case: more
# cells are finer but slower), and the growth of a cell's extents per step, tried in turn until the cells fit (1.0:
# every extent).
RUBY_CELLS = 20_000
CELL_RATIOS = (1.0, 1.1, 1.25, 1.5, 2.0, 3.0)

_RUBY_SHAPES: dict[tuple, RubyCells | None] = {}


def ruby_level_shapes(ctx, c: int) -> RubyCells | None:
    """``ruby_cells`` cached by what it depends on: the operator, the accelerator, c, the operands c keeps and those
    it receives (not the unrolling: the cells cover every extent, whatever the fan-outs; a few dozen entries at most,
    each up to ``RUBY_CELLS`` rows)."""
    if len(_RUBY_SHAPES) > 64:
        _RUBY_SHAPES.clear()
    kept = tuple(X.name for X in ctx.op.operands if c in ctx.chains[X.name] and ctx.chains[X.name][0] != c
                 and X.name not in ctx.loose)
    key = (ctx.op, ctx.arch, c, ctx.keep[c], kept)
    if key not in _RUBY_SHAPES:
        _RUBY_SHAPES[key] = ruby_cells(ctx, c)
    return _RUBY_SHAPES[key]


def cell_edges(most: int, ratio: float) -> np.ndarray:
    """Upper extents of a dim's cells over 1..most: each ``ratio`` times the last, rounded up, and at least one more
    (every extent with ``ratio`` 1), ending at ``most``."""
    edges = [1]
    while edges[-1] < most:
        edges.append(min(most, max(edges[-1] + 1, math.ceil(edges[-1] * ratio))))
    return np.array(edges)


def ruby_cells(ctx, c: int) -> RubyCells | None:
    """Cells covering every tile shape (integer extents up to each dim) that fits level c: a cell's extents run from
    one past the previous edge to its own edge per dim, and it is kept where its least extents fit (a tile only grows
    with each extent, so every shape that fits lies in a kept cell). None when c receives nothing, has no capacity,
    nothing fits or even the coarsest cells pass ``RUBY_CELLS``."""
    op = ctx.op
    kept = refilled_operands(ctx, c)
    if not kept:
        return None
    dims = op.dim_names
    sizes = np.array([op.sizes[d] for d in dims], dtype=np.int64)
    # An extent that does not fit with every other extent at 1 fits with none.
    largest = []
    for i in range(len(dims)):
        alone = np.ones((int(sizes[i]), len(dims)), dtype=np.int64)
        alone[:, i] = np.arange(1, sizes[i] + 1)
        _, fits = tiles_that_fit(ctx, c, alone)
        if not fits.any():
            return None
        largest.append(int(np.nonzero(fits)[0].max()) + 1)
    for ratio in CELL_RATIOS:
        edges = [cell_edges(most, ratio) for most in largest]
        if math.prod(len(e) for e in edges) <= RUBY_CELLS:
            break
    else:
        return None
    check_deadline(ctx)
    lows = [np.concatenate([[1], e[:-1] + 1]) for e in edges]
    index = np.array(list(itertools.product(*(range(len(e)) for e in edges))), dtype=np.int64).reshape(-1, len(dims))
    lower = np.stack([lows[i][index[:, i]] for i in range(len(dims))], axis=1)
    upper = np.stack([edges[i][index[:, i]] for i in range(len(dims))], axis=1)
    _, fits = tiles_that_fit(ctx, c, lower)
    if not fits.any():
        return None
    lower, upper = lower[fits], upper[fits]
    return RubyCells(lower, upper, kept, -(-sizes // lower), -(-sizes // upper),
                     {X.name: box_tiles(ctx, X, upper) for X in kept})


def least_ruby_stall(ctx, c: int) -> float:
    """The least of rule B27's stall (``level_stall``) over every cell of ``ruby_level_shapes`` and every case of
    ``ruby_cases`` possible for it; 0 where c has no shape to bound."""
    cells = ruby_level_shapes(ctx, c)
    if cells is None:
        return 0.0
    shapes = OpenShapes(cells.upper, {}, np.ones(len(cells.upper)), cells.kept)     # (level_stall reads rows, kept)
    least = np.full(len(cells.upper), np.inf)
    for rows, counts in ruby_cases(ctx, c, cells):
        least = np.where(rows, np.minimum(least, level_stall(ctx, c, shapes, counts)), least)
    return float(least.min()) if np.isfinite(least).all() else 0.0


def ruby_cases(ctx, c: int, cells: RubyCells):
    """Every case of the loops above open level c over imperfect tiles, per cell: yields (rows where the case is
    possible for some shape of the cell, {operand c receives: at most the elements entering c per row, for every
    shape of the cell}). The case with no temporal loop above c (every operand its footprint) where some shape of the
    cell forces no dim to keep one; per dim d, the innermost temporal loop above c over d (possible wherever some
    shape's extent leaves some of d), whose plain users enter their tile at every non-empty box (a count that only
    falls as extents grow: read at the cell's largest)."""
    dims = ctx.op.dim_names
    most = np.array([math.prod(ctx.fan_sizes[l] if cap is None else cap.get(d, 1)
                               for l, cap in enumerate(ctx.spatial_cap[:c])) for d in dims])
    forced = (cells.left_upper > most).any(axis=1)
    yield ~forced, {X.name: float(ctx.footprint[X.name]) for X in cells.kept}
    for _, possible, counts in ruby_dim_cases(ctx, c, cells):
        yield possible, counts


def ruby_dim_cases(ctx, c: int, cells: RubyCells):
    """``ruby_cases`` without the case of no temporal loop above c: per dim d, (d, rows, counts) for the innermost
    temporal loop above c over d (rule B64, ``unrolling_refills``, decides per unrolling where the other case is
    possible)."""
    dims = ctx.op.dim_names
    base = {X.name: float(ctx.footprint[X.name]) for X in cells.kept}
    left = cells.left_lower
    boxes = cells.boxes
    for i, d in enumerate(dims):
        possible = left[:, i] > 1
        if not possible.any():
            continue
        check_deadline(ctx)
        counts: dict[str, Any] = dict(base)
        for X in cells.kept:
            got = boxes[X.name]
            if d in ctx.plain[X.name] and got is not None:
                counts[X.name] = np.maximum(got, base[X.name])
        yield d, possible, counts


def box_tiles(ctx, X, grid: np.ndarray, along: str | None = None) -> np.ndarray | None:
    """Per shape, at least the elements of X's tiles summed over every non-empty box: ``MACs / prod E_d`` over the
    dims outside D (X's plain dims and, per sliding-window index, its dim of larger extent; the index that reads
    ``along``, that dim: rule B65's count of a window's new values, ``unrolling_refills``). None when two of X's
    indices read a common dim (the tile is then no product over its indices)."""
    op = ctx.op
    dims = op.dim_names
    col = {d: i for i, d in enumerate(dims)}
    seen: set[str] = set()
    covered = np.ones(len(grid), dtype=np.int64)      # prod over D of E_d, per row
    for ix in X.indices:
        names = [d for d, coef in ix.terms if coef != 0]
        if not names or seen & set(names):
            return None
        seen |= set(names)
        covered = covered * grid[:, [col[d] for d in ([along] if along in names else names)]].max(axis=1)
    outside = np.prod(grid, axis=1) // covered      # exact: covered divides the product of the extents
    return float(op.macs) / outside
