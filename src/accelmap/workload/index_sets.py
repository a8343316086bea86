"""Exact sizes and overlaps of the index sets an affine operand axis touches.

A tile of an operand is the product over its axes of the values
``sum(c_d * x_d)`` with every ``x_d`` in an interval. A single-dimension axis is
an interval (closed forms); a sliding-window axis (``2*p + 3*r``) may have holes,
so it is held as a Python integer bit set, which is exact for any stride and
dilation. Results are cached: a mapper asks for the same shapes again and again.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Mapping

from accelmap.workload.operator import AffineIndex, Operand


@lru_cache(maxsize=65536)
def axis_mask(coeffs: tuple[int, ...], extents: tuple[int, ...]) -> int:
    """Bit set of the values sum(c*x), x in [0, e), for each (c, e)."""
    if any(e <= 0 for e in extents):
        return 0
    mask = 1
    for c, e in zip(coeffs, extents, strict=True):
        if e == 1:
            continue
        step = 0
        for k in range(e):
            step |= mask << (c * k)
        mask = step
    return mask


@lru_cache(maxsize=65536)
def axis_size(coeffs: tuple[int, ...], extents: tuple[int, ...]) -> int:
    if len(coeffs) == 1:
        return max(extents[0], 0)
    if any(e <= 0 for e in extents):
        return 0
    # Contiguous case, stride no larger than the window: a closed form avoids
    # building the bit set for the common conv axis (stride <= dilated kernel).
    if len(coeffs) == 2:
        (c1, c2), (e1, e2) = coeffs, extents
        if c2 == 1 and c1 <= e2:
            return c1 * (e1 - 1) + e2
        if c1 == 1 and c2 <= e1:
            return c2 * (e2 - 1) + e1
    return axis_mask(coeffs, extents).bit_count()


@lru_cache(maxsize=262144)
def axis_overlap(coeffs: tuple[int, ...], ext_old: tuple[int, ...], ext_new: tuple[int, ...],
                 shifts: tuple[int, ...]) -> int:
    """|A_old ∩ A_new| where A_new's dimension intervals start ``shifts`` later."""
    if len(coeffs) == 1:
        lo = max(0, shifts[0])
        hi = min(ext_old[0], shifts[0] + ext_new[0])
        return max(0, hi - lo)
    if any(e <= 0 for e in ext_old + ext_new):
        return 0
    off = sum(c * s for c, s in zip(coeffs, shifts, strict=True))
    # Both sets lie in [0, span): disjoint when the shift moves one past the other, and intervals
    # when they have no holes. Either way no bit set, which had as many bits as the shift is long
    # (a tile a whole 10^10-row image away built a 1.25 GiB integer).
    span_old = sum(c * (e - 1) for c, e in zip(coeffs, ext_old, strict=True)) + 1
    span_new = sum(c * (e - 1) for c, e in zip(coeffs, ext_new, strict=True)) + 1
    if off >= span_old or off + span_new <= 0:
        return 0
    if axis_size(coeffs, ext_old) == span_old and axis_size(coeffs, ext_new) == span_new:
        return max(0, min(span_old, off + span_new) - max(0, off))
    old, new = axis_mask(coeffs, ext_old), axis_mask(coeffs, ext_new)
    if off >= 0:
        return (old & (new << off)).bit_count()
    return ((old << -off) & new).bit_count()


def index_size(ix: AffineIndex, extents: Mapping[str, int]) -> int:
    return axis_size(tuple(c for _, c in ix.terms), tuple(extents[d] for d, _ in ix.terms))


def tile_size(operand: Operand, extents: Mapping[str, int]) -> int:
    """Distinct points of ``operand`` touched when each dim d spans extents[d] values."""
    return math.prod(index_size(ix, extents) for ix in operand.indices)
