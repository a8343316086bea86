"""Rows of a tile transfer: what a 2-D DMA pays a memory request for.

A 2-D DMA (VTA's load instruction: ``y_size`` rows of ``x_size`` elements, ``x_stride`` apart) reads a
tile as its contiguous rows in the source memory, one read request per row: VTA's load unit
(``TensorLoad`` in Apache TVM's VTA hardware) issues a row's read command, takes its data and only then
issues the next row's. A row costs the memory's latency per request (``Level.read_row_cycles`` of the
level read from) before its data, so the same tile costs more in a layout that cuts it into more rows.

The layout of an operand is its axes in the order it declares them (outermost first), each axis's
block of the compute unit (its spatial loops at and below the level) innermost, as the embedding packs
the tensors (VTA's NCHWnc: the 16 input channels of the GEMM's reduction side by side). A tile is the
dense box of every axis (``(extent - 1) x stride + window`` for a windowed axis: VTA loads the box,
padding and strided rows included), clipped to the stored tensor. From the innermost axis out, the
axes the tile spans whole continue one contiguous run; the first it cuts ends it; every axis outside
that one multiplies the rows by its extent. A layout is chosen by the order of the operand's axes
(``workload.layouts.laid_out`` declares a convolution's input channels-last).

Edge tiles: where a tile does not divide its dim, the last tile along it is smaller and may have fewer
rows. A load whose tile is known pays that tile's rows; a count of loads pays the mean over the tiles
(``mean_tile_rows``), which times the count is the exact total.
"""

from __future__ import annotations

import itertools

import numpy as np

from accelmap.cost.nest_rows import NestRows
from accelmap.workload.operator import Operand


def tile_rows(nest: NestRows, X: Operand, c: int, ext: dict[str, np.ndarray] | None = None) -> np.ndarray:
    """Contiguous rows of X's tile at level ``c`` in its layout, per row of the nest: the first tile's, or
    a tile of extents ``ext`` (per dim, arrays broadcasting against the nest's rows; dims left out keep
    the first tile's)."""
    n = nest.n
    ext = nest.inner[c] if ext is None else {**nest.inner[c], **ext}
    block = {d: np.ones(n, dtype=np.int64) for d in nest.op.dim_names}
    for j, (d, lv, ax) in enumerate(nest.structure):
        if ax is not None and lv >= c:
            block[d] = block[d] * nest.B[:, j]
    rows = np.ones(n, dtype=np.int64)
    cut = np.zeros(n, dtype=bool)          # rows where an inner axis already ended the contiguous run
    for a in reversed(range(len(X.indices))):
        ix = X.indices[a]
        box = 1 + sum(coef * (ext[d] - 1) for d, coef in ix.terms)
        full = X.shape[a] if X.shape else 1 + sum(coef * (nest.op.sizes[d] - 1) for d, coef in ix.terms)
        unit = block[ix.terms[0][0]] if len(ix.terms) == 1 else np.ones(n, dtype=np.int64)
        tile = -(-np.minimum(box, full) // unit)
        stored = -(-full // unit)
        rows = np.where(cut, rows * tile, rows)
        cut = cut | (tile < stored)
    return rows


def mean_tile_rows(nest: NestRows, X: Operand, c: int) -> np.ndarray:
    """Rows per tile of X at level ``c`` averaged over every tile it loads, per row of the nest.

    Along a dim whose tile extent E does not divide its size, the tiles start at 0, E, 2E, ... and the
    last of the ceil(size / E) is the remainder: fewer elements, and so fewer rows where the dim lies
    outside the contiguous run (or ends it). The loops above ``c`` visit every tile position equally
    often (they enumerate the positions in mixed radix, pass after pass), so the mean over positions is
    the mean over the loads: each combination of full and edge extents weighs the product, over the
    imperfect dims, of (ceil - 1) / ceil for a full extent and 1 / ceil for the edge."""
    first = tile_rows(nest, X, c).astype(np.float64)
    if nest.perfect.all():
        return first
    ext = nest.inner[c]
    sizes = nest.op.sizes
    dims = [d for d in X.dims if (sizes[d] % ext[d] != 0).any()]
    if not dims:
        return first
    count = {d: -(-sizes[d] // ext[d]) for d in dims}
    edge = {d: sizes[d] - (count[d] - 1) * ext[d] for d in dims}
    partial = {d: edge[d] < ext[d] for d in dims}
    mean = np.zeros(nest.n, dtype=np.float64)
    for pick in itertools.product((False, True), repeat=len(dims)):
        weight = np.ones(nest.n, dtype=np.float64)
        for d, at_edge in zip(dims, pick, strict=True):
            if at_edge:
                weight = weight * np.where(partial[d], 1.0 / count[d], 0.0)
            else:
                weight = weight * np.where(partial[d], (count[d] - 1) / count[d], 1.0)
        if not weight.any():
            continue
        rows = tile_rows(nest, X, c, {d: edge[d] for d, at_edge in zip(dims, pick, strict=True) if at_edge})
        mean = mean + weight * rows
    return mean


def load_setup_cycles(nest: NestRows, X: Operand, c: int, p: int, ext: dict[str, np.ndarray] | None = None
                      ) -> np.ndarray:
    """Cycles a tile load of X from level ``p`` into level ``c`` costs beside moving its bits, per row of
    the nest: the DMA setup of ``c`` (``transfer_setup_cycles``) and the request latency of ``p`` per row
    it reads (``read_row_cycles`` x rows). The rows are those of a tile of extents ``ext`` where given
    (a load whose tile is known: an edge case of the model's transitions), else the mean over all of X's
    tiles (``mean_tile_rows``: the edge tiles of imperfect factors included), so that a load count times
    this is the run's exact total. The model's and the simulator's loads both take it."""
    lc, lp = nest.arch.levels[c], nest.arch.levels[p]
    setup = np.full(nest.n, float(lc.transfer_setup_cycles))
    if lp.read_row_cycles:
        rows = mean_tile_rows(nest, X, c) if ext is None else tile_rows(nest, X, c, ext)
        setup = setup + lp.read_row_cycles * rows
    return setup
