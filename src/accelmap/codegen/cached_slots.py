"""Where a fully cached tensor of a fused group keeps each of its positions on chip: a buffer of exactly the
model's reservation for it (``fusion.geometry.live_elements``), not the whole tensor.

Cached along rows and columns (DeFiNES' fully cached), a position (r, c) is computed at the tile (first tile row
needing row r, first tile column needing column c) and lives to the tile (last tile row needing r, last tile
column needing c), tile rows outer, tile columns inner: an interval of tiles in the loop's order. The model's
reservation is the most positions live at one tile, i.e. the most of these intervals that overlap. Giving each
position, in the order of the tiles computing them, a slot freed by a position dead before that tile (left-edge
interval colouring) uses exactly that many slots: a new slot is opened only when every open one holds a position
live at the new position's first tile, so at that tile all open slots are live at once. Such a line buffer is no
rectangle (its rows hold different columns as the tile column moves), so the slot of each position is a table
computed here, from the schedule, and emitted with the C.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from accelmap.fusion.geometry import AxisSchedule


@dataclass(frozen=True)
class CachedSlots:
    """Per position of a tensor (row-major, ``height`` x ``width``): its slot, or -1 where no tile needs it; and
    the slots used (per channel)."""

    table: tuple[int, ...]
    slots: int


def cached_slots(rows: AxisSchedule, cols: AxisSchedule, tensor: int, height: int, width: int) -> CachedSlots:
    """The slots of fully cached tensor ``tensor`` (module docstring)."""
    y0, y1 = rows.first_last(tensor, height)
    x0, x1 = cols.first_last(tensor, width)
    tiles_x = len(cols.need)
    rr, cc = np.nonzero((y0 >= 0)[:, None] & (x0 >= 0)[None, :])
    born = y0[rr] * tiles_x + x0[cc]
    dies = y1[rr] * tiles_x + x1[cc]
    order = np.lexsort((cc, rr, born))     # by first tile, then position: a deterministic table
    table = np.full(height * width, -1, dtype=np.int64)
    live: list[tuple[int, int]] = []       # (last tile, slot) of the positions holding a slot
    free: list[int] = []
    opened = 0
    for i in order:
        b = int(born[i])
        while live and live[0][0] < b:
            heapq.heappush(free, heapq.heappop(live)[1])
        if free:
            s = heapq.heappop(free)
        else:
            s, opened = opened, opened + 1
        table[rr[i] * width + cc[i]] = s
        heapq.heappush(live, (int(dies[i]), s))
    return CachedSlots(tuple(int(v) for v in table), opened)
