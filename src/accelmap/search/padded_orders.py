"""Rule B51 (docs/mapper.md): a level's order pruning (rules O1-O3) over Ruby-S tiles where no clip moves during its run.

Rule I4 gives every order to a level whose nest has partial tiles: O1's argument (every transition of a loop moves the
tile the same way) fails where a tile is clipped at some positions and not at others, so the per-level Pareto set of
orders, computed on the unclipped counts, is not proven there. In a padded unrolling's Ruby-S subtree every nest below
the padded fan-out has partial tiles, and each tiling then costs its orders one by one (720 for six loops).

Over Ruby-S tiles only the clipping dims (``padded_round_positions.clipping_dims``) have partial tiles. Take level i
being ordered and a counter of O2's vector, operand X entering level c > i. Suppose

* no temporal loop over a clipping dim lies at a level from i down to c (``i <= level < c``), and
* every clipping dim X uses is a plain index of X that no other index uses.

Then during one run of level i's loops (the outer levels' loops at one position) every instance of c keeps its range
along each clipping dim: the loops that move it are spatial (they make the instances) or outer. So in that run the
instance is empty throughout or non-empty throughout, and when non-empty its tile of X is the unclipped tile with each
clipping dim's factor replaced by a constant clipped length (X's tile is a product over its indices, and the clipping
dims are plain ones). Every transition inside the run then brings the unclipped transition's elements times the product
of those constant shares (or nothing): the run's count is ``phi x`` the unclipped run's count, ``phi`` fixed by the
position and the instance, not by level i's order. The transitions of the outer loops compare the last tile of a run
(every level-i loop at its last index) with the first of the next (every one at zero): no order changes them. Summed
over positions and instances, X's count at c for every completion of the node is ``a + b x`` its unclipped count, with
``a`` and ``b >= 0`` the same for every order of level i; multicast groups (one read per group) and the output's drains
and updates are sums of the same per-instance counts. So an order whose unclipped counters are all at most another's
has all of the model's counters at most the other's, and O2's Pareto set (and O3's signatures) keeps an optimum, as
over perfect tiles. Where the conditions fail for some counter, rule I4 stands (every order).
"""

from __future__ import annotations

from accelmap.mapping.loopnest import Loop
from accelmap.search.padded_round_positions import clipping_dims


def orders_prunable(ctx, keep, loops: tuple[Loop, ...], level: int) -> bool:
    """Rule B51 (module doc): may level ``level``'s orders of the nest ``loops`` (the level's loops and every deeper
    one) be pruned by rules O1-O3 over Ruby-S tiles? Needs the unrolling pinned (``ctx.pinned``, as the exact search
    fixes it)."""
    if not getattr(ctx, "pinned", False):
        return False
    op = ctx.op
    clips = clipping_dims(op, ctx.unrolled, loops, level)
    if not clips:
        return True
    nlev = len(ctx.arch.levels)
    # The deepest level below which a counter is kept: the temporal loops over clipping dims must lie inside it.
    deepest = level
    for X in op.operands:
        chain = [c for c in range(level + 1, nlev) if X.name in keep[c]]
        if not chain:
            continue
        if (clips & set(X.dims)) - ctx.alone[X.name]:
            return False        # a window (or a repeated index) over a clipping dim: its overlap is not in proportion
        deepest = max(deepest, chain[-1])
    return not any(l.dim in clips and not l.spatial and l.bound > 1 and level <= l.level < deepest for l in loops)
