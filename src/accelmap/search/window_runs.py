"""Rule B18 (docs/mapper.md): runs of the fixed nest that start with a partly new tile of a sliding-window operand.

Rules B7 and B15 count the runs of the fixed nest (one per unfixed temporal iteration and instance) whose first
tile is wholly new for an operand X, and only through the dims X uses as a plain index. A convolution's input
uses P and Q only inside sliding-window indices (``p + r``): a step of an unfixed loop over P moves the input's
window by less than its extent, so those rules count nothing for it, while the model refetches the overlap-free
part of every window step. This module counts that part, in B7's case (the innermost unfixed temporal loop runs
over d) for an operand X that uses d in a sliding-window index whose other dims have no unfixed temporal loop
(what is left of them is unrolled on the fixed fan-outs, or nothing is left). Then every run of the fixed nest
follows a step of that loop, the window axis moves by at least ``coefficient of d x the fixed nest's extent of d``
between two runs of one instance (the loops over d telescope; the other dims stay put), and the first tile of the
new run overlaps the last tile of the previous run by at most the largest overlap of the tile with itself shifted
by any amount that such a move allows. The rest of the tile enters. Used only when every fan-out is fixed (as the
exact search fixes them, so that the other dims' temporal iterations are known to be none) and with whole tiles.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from accelmap.mapping.loopnest import Loop
from accelmap.workload.index_sets import axis_mask
from accelmap.workload.operator import Operand, Operator


def window_indices(op: Operator) -> dict[tuple[str, str], tuple[int, ...]]:
    """Per (operand, dim), the positions of the operand's sliding-window indices (two or more dims) that use the
    dim, for the operands that do not also use it as a plain index (those already get whole tiles: B7)."""
    out: dict[tuple[str, str], tuple[int, ...]] = {}
    for X in op.operands:
        plain = {ix.terms[0][0] for ix in X.indices if len(ix.terms) == 1}
        for pos, ix in enumerate(X.indices):
            if len(ix.terms) < 2:
                continue
            for d, _ in ix.terms:
                if d not in plain:
                    out[(X.name, d)] = (*out.get((X.name, d), ()), pos)
    return out


def window_users(op: Operator, windows: dict[tuple[str, str], tuple[int, ...]], loose: frozenset[str], d: str,
                 still: set[str]) -> tuple[tuple[str, str], ...]:
    """The (operand, d) pairs for which rule B18 applies when the innermost unfixed temporal loop runs over d: X
    uses d in a sliding-window index none of whose other dims is in ``still`` (the dims with unfixed temporal
    iterations left)."""
    out = []
    for X in op.operands:
        if X.name in loose:
            continue
        for pos in windows.get((X.name, d), ()):
            if all(k == d or k not in still for k, _ in X.indices[pos].terms):
                out.append((X.name, d))
                break
    return tuple(out)


@lru_cache(maxsize=65536)
def least_new_on_axis(coeffs: tuple[int, ...], extents: tuple[int, ...], last_offset: int, move: int) -> int:
    """The fewest values of a window axis tile (values ``sum(c x)``, x in [0, e)) that are not in the previous tile,
    when the previous tile sits ``last_offset`` past the start of its run's span and the new run's span starts at
    least ``move`` away (either way) from the previous one's: the new tile is the old one shifted by
    ``s = delta - last_offset`` with ``|delta| >= move``, and shares at most the largest ``|A & (A + s)|``."""
    mask = axis_mask(coeffs, extents)
    size = mask.bit_count()
    span = sum(c * (e - 1) for c, e in zip(coeffs, extents, strict=True)) + 1
    worst = 0
    for s in range(-span + 1, span):
        if abs(s + last_offset) < move:
            continue
        shared = (mask & (mask << s)).bit_count() if s >= 0 else ((mask << -s) & mask).bit_count()
        worst = max(worst, shared)
        if worst == size:
            break
    return size - worst


def first_tile_share(X: Operand, positions: tuple[int, ...], d: str, fixed: tuple[Loop, ...], level: int,
                     c: int) -> float:
    """Rule B18 for one node and boundary c (>= ``level``, below every unfixed loop): the least share of X's tile at c
    that the first tile of a run brings, in the case where the innermost unfixed temporal loop runs over d. The
    largest over X's qualifying window indices (each alone is a bound); 0 when none moves the tile off itself."""
    # Extents at c (the loops at levels >= c), the offset of the last tile at c in its run (the fixed temporal
    # loops at levels in [level, c) at their last iteration, each times its stride), and d's whole fixed extent.
    ext: dict[str, int] = {}
    offset: dict[str, int] = {}
    stride: dict[str, int] = {}
    for l in reversed(fixed):
        s = stride.get(l.dim, 1)
        if l.level >= c:
            ext[l.dim] = ext.get(l.dim, 1) * l.bound
        elif not l.spatial:
            offset[l.dim] = offset.get(l.dim, 0) + (l.bound - 1) * s
        stride[l.dim] = s * l.bound
    best = 0.0
    for pos in positions:
        terms = X.indices[pos].terms
        coeffs = tuple(k for _, k in terms)
        extents = tuple(ext.get(k, 1) for k, _ in terms)
        last = sum(k * offset.get(dim, 0) for dim, k in terms)
        move = next(k for dim, k in terms if dim == d) * stride.get(d, 1)
        size = axis_mask(coeffs, extents).bit_count()
        best = max(best, least_new_on_axis(coeffs, extents, last, move) / size)
    return best


def first_tile_share_rows(X: Operand, positions: tuple[int, ...], d: str, shared: tuple[Loop, ...],
                          free: dict[int, np.ndarray], dims: tuple[str, ...], level: int, c: int, n: int) -> Any:
    """``first_tile_share`` per row of ``node_bounds.open_bounds_rows`` (the free levels' temporal bounds per row,
    one loop per dim and level, outside the same level's spatial loops; ``shared`` every other fixed loop)."""
    col = {k: i for i, k in enumerate(dims)}
    ext = np.ones((n, len(dims)), dtype=np.int64)
    offset = np.zeros((n, len(dims)), dtype=np.int64)
    stride = np.ones((n, len(dims)), dtype=np.int64)
    by_level: dict[int, list[Loop]] = {}
    for l in shared:
        by_level.setdefault(l.level, []).append(l)
    for lv in sorted(set(by_level) | set(free), reverse=True):
        for l in reversed(by_level.get(lv, [])):
            i = col[l.dim]
            if lv >= c:
                ext[:, i] *= l.bound
            elif not l.spatial:
                offset[:, i] += (l.bound - 1) * stride[:, i]
            stride[:, i] *= l.bound
        if lv in free:
            b = free[lv]
            if lv >= c:
                ext *= b
            else:
                offset += (b - 1) * stride
            stride = stride * b
    best = np.zeros(n)
    for pos in positions:
        terms = X.indices[pos].terms
        coeffs = tuple(k for _, k in terms)
        cols = [col[k] for k, _ in terms]
        key = np.concatenate([ext[:, cols], (offset[:, cols] * np.array(coeffs)).sum(axis=1, keepdims=True),
                              stride[:, [col[d]]] * next(k for dim, k in terms if dim == d)], axis=1)
        combos, inverse = np.unique(key, axis=0, return_inverse=True)
        share = np.array([least_new_on_axis(coeffs, tuple(int(v) for v in row[:-2]), int(row[-2]), int(row[-1]))
                          / axis_mask(coeffs, tuple(int(v) for v in row[:-2])).bit_count() for row in combos])
        best = np.maximum(best, share[inverse.reshape(-1)])
    return best

