"""Rule B43 of docs/mapper.md: an input's load into an open level waits for its load into the open parent.

At a tile change the model (``cost.latency._transition_time``) starts a level's load of operand X only after X's load
into the parent level at the same tile change, and a level's load unit takes its operands one after another (the
inputs in the operator's order, then the partial sums: ``open_level_loads.unit_order``). So where X moves into both
levels p and c (p X's parent of c, both single-buffered) the tile change takes at least X's load into p plus c's
loads of X and of every operand c's unit takes after X. Rule B16 adds X's two loads for fixed levels; rule B27 takes
each open level alone.

When does X move into c at every tile change where it moves into p? With perfect factors and X indexed by single
dims only (no sliding window), X's tile at c of one instance starts, along each dim X uses, at a sum of loop indices
times strides that are multiples of c's extent (the loops above c, temporal and spatial, tile the dim): distinct
positions of those loops give disjoint tiles. X's tile at p changes only when some loop above p over a dim X uses
changes its index, and that loop is above c too, so c's tile changes to a disjoint one: X moves into c (its whole
tile). With a sliding window it need not (a window may end where the next begins), so the rule is off there.

Summed over the run the stall is at least X's loads into p plus c's loads of X and the operands after it; each part
is at least its level's least over its tile shapes and the cases above it (``open_level_loads``).
"""

from __future__ import annotations

from itertools import pairwise

from accelmap.search.open_level_loads import open_loads


def open_load_chain(ctx, level: int) -> float:
    """Rule B43 at a node whose levels >= ``level`` are fixed: the largest, over the inputs X indexed by single dims
    only and the pairs (p, c) of adjacent open single-buffered levels of X's chain (1 <= p < c < level), of p's least
    load of X plus c's least loads of X and of what c's load unit takes after X."""
    best = 0.0
    for X in ctx.op.operands:
        if X.is_output or X.name in ctx.loose or any(len(ix.terms) != 1 for ix in X.indices):
            continue
        for p, c in pairwise(ctx.chains[X.name]):
            if p < 1 or c >= level:
                continue
            above, below = open_loads(ctx, p), open_loads(ctx, c)
            if above is None or below is None:
                continue
            best = max(best, above.own.get(X.name, 0.0) + below.suffix.get(X.name, 0.0))
    return best
