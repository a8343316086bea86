"""Rule B42 of docs/mapper.md: the output's stores from several open levels run one after another.

At a tile change the model (``cost.latency._transition_time``) drains the output's stores one after another, deepest
level first, and a level's reload of partial sums waits for its own store, so compute waits at least for the stores
of every single-buffered output level at or below c and then c's reload, for each such c (rule B16, which the node
bound counts for fixed levels with their own counts and for open ones with their footprints; rule B27 counts one open
level's stores and reloads with its refills, level by level). A store that a transition does not make adds nothing
there, so summed over the run the stall is at least, for each open single-buffered output level c, c's stores and
reloads plus the stores of every deeper open one. Each level's part is at least its least over its tile shapes and
the cases above it (``open_level_loads``), and the least of a sum is at least the sum of the least.
"""

from __future__ import annotations

from accelmap.search.open_level_loads import open_loads


def open_store_chain(ctx, level: int) -> float:
    """Rule B42 at a node whose levels >= ``level`` are fixed: the largest, over the open single-buffered levels c
    (1 <= c < level), of c's least stores and reloads plus the least stores of the deeper open ones."""
    loads = [got for c in range(1, level) if (got := open_loads(ctx, c)) is not None]
    best = 0.0
    deeper = 0.0
    for got in reversed(loads):       # deepest first, as the stores drain
        best = max(best, got.store_reload + deeper)
        deeper += got.store
    return best
