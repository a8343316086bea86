"""Rule B41 of docs/mapper.md: the loads of several open levels queue on one parent port.

Rule B12 adds, per parent port p, the loads into single-buffered levels that p's read port paces (the child's write
port no slower), whatever level or operand they feed: at a tile change the model (``cost.latency._transition_time``)
places each such load on p's read port in the port's free time, one transfer at a time, and compute waits for every
load, so each tile change takes at least the sum of their parent-side times, and the run at least their sum over
the run. At a node B12 counts the open levels' loads by their footprint (every element once), while rule B27 counts
an open level's refills (its least over the tile shapes that fit it and the cases of the loops above it) but one
level at a time. Every mapping has one tile at each open level, and its parent-side loads into that level are at
least that level's least over shapes and cases (``open_level_loads``: B27's count in each case, B9's parent term), so
the port's queue is at least the sum over the open levels of each level's least: the least of a sum over levels is
at least the sum of the levels' least. On eyeriss_like DRAM's 4-word read port feeds the global buffer (inputs and
partial sums) and the register files (weights, which bypass the global buffer); on simba_like DRAM feeds the global
buffer and the weight buffers, and the global buffer's port the input and accumulation buffers.
"""

from __future__ import annotations

from accelmap.search.open_level_loads import open_loads


def open_port_queue(ctx, level: int) -> float:
    """Rule B41 at a node whose levels >= ``level`` are fixed: the largest, over parent ports, of the open
    single-buffered levels' (1 <= c < level) least paced loads on that port, summed over the levels."""
    queue: dict[int, float] = {}
    for c in range(1, level):
        got = open_loads(ctx, c)
        if got is None:
            continue
        for p, t in got.port.items():
            queue[p] = queue.get(p, 0.0) + t
    return max(queue.values(), default=0.0)
