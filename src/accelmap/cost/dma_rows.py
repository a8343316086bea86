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
(``tune.template.laid_out`` declares a convolution's input channels-last).
"""

from __future__ import annotations

import numpy as np

from accelmap.cost.nest_rows import NestRows
from accelmap.workload.operator import Operand


def tile_rows(nest: NestRows, X: Operand, c: int) -> np.ndarray:
    """Contiguous rows of X's tile at level ``c`` in its layout, per row of the nest."""
    n = nest.n
    ext = nest.inner[c]
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
        cut |= tile < stored
    return rows


def load_setup_cycles(nest: NestRows, X: Operand, c: int, p: int) -> np.ndarray:
    """Cycles a tile load of X from level ``p`` into level ``c`` costs beside moving its bits, per row of
    the nest: the DMA setup of ``c`` (``transfer_setup_cycles``) and the request latency of ``p`` per row
    it reads (``read_row_cycles`` x ``tile_rows``). The model's and the simulator's loads both take it."""
    lc, lp = nest.arch.levels[c], nest.arch.levels[p]
    setup = np.full(nest.n, float(lc.transfer_setup_cycles))
    if lp.read_row_cycles:
        setup = setup + lp.read_row_cycles * tile_rows(nest, X, c)
    return setup
