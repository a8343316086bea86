"""Rule B61 (docs/mapper.md): where no position of the fixed nest is whole, each instance's first tile is clipped.

Rules B1, B7 and B15 charge every run of the fixed nest that starts with a new tile ``fi x t``: each of the ``fi``
fixed instances above a boundary c brings X's whole tile ``t`` at c. Over partial tiles (rule E2's padded unrollings,
searched over Ruby-S tiles, and imperfect factorizations) a run counted by rule I2's whole positions is whole for every
instance; the one run rules B7 and B15 count whatever the positions (``runs`` of 1) is not, once the fixed nest
overshoots a dim at every position (``full_positions`` 0): its lanes past the dim's end hold a clipped tile or none.

The argument. An instance of c is one combination of the fixed spatial loops above c; along a dim d its range at a
time is ``[o, o + E)`` clipped to ``[0, N_d)``, ``E`` the product of d's loops at or below c and ``o`` the sum of
``index x stride`` over d's loops above c (``loop_strides``). At the first position every temporal index is 0, so
``o`` is the lane's spatial offset, the least it ever takes: ranges only move forward, so the clipped length
``min(E, N_d - o)`` (0 when ``o >= N_d``) is the lane's largest. The tile the instance holds at that time lies
wholly in its buffer, so the instance brings at least that much over the run; and it is X's tile of the clipped
extents (``tile_size``: a window axis over a clipped range reads the window of that range), empty when some
dim's range is (model: a dim an operand does not use matters to its tile only through emptiness). Summed over the
instances, this is at most ``fi x t`` and replaces it where no position is whole; elsewhere ``fi x t`` stands.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter

from accelmap.mapping.loopnest import Loop, Mapping, loop_strides
from accelmap.workload.operator import Operand


def clipped_first_tiles(ctx, X: Operand, c: int, fixed: tuple[Loop, ...], ext: dict[str, int]) -> float:
    """The sum over the fixed instances above boundary c of X's tile at the first position, each clipped to the
    operator (module doc). ``fixed``: the node's nest; ``ext``: X's unclipped extents at c (the product of each dim's
    loops at or below c, clipped to the dim's size as the node's tiles are)."""
    sizes = ctx.op.sizes
    strides = loop_strides(Mapping(fixed, ()))
    # Per dim, the multiset of the lanes' clipped lengths (the spatial loops above c over different dims vary
    # independently, so the instances are the product of these per-dim multisets).
    inner = dict.fromkeys(sizes, 1)
    for l in fixed:
        if l.level >= c:
            inner[l.dim] *= l.bound
    lengths: dict[str, Counter[int]] = {}
    for d in sizes:
        lanes = [(l.bound, s) for l, s in zip(fixed, strides, strict=True) if l.dim == d and l.level < c and l.spatial]
        if not lanes:
            continue
        offsets = [sum(i * s for i, (_, s) in zip(idx, lanes, strict=True))
                   for idx in itertools.product(*(range(b) for b, _ in lanes))]
        if max(offsets) + inner[d] <= sizes[d]:
            continue        # no lane clips along d: every one has the full extent
        lengths[d] = Counter(max(0, min(ext[d], sizes[d] - o)) for o in offsets)
    fi = math.prod(l.bound for l in fixed if l.spatial and l.level < c)
    if not lengths:
        return fi * ctx.tile_of(X, ext)
    rest = fi // math.prod(sum(n.values()) for n in lengths.values())
    total = 0.0
    dims = list(lengths)
    for combo in itertools.product(*(lengths[d].items() for d in dims)):
        if any(n == 0 for n, _ in combo):
            continue
        clipped = dict(ext)
        count = rest
        for d, (n, k) in zip(dims, combo, strict=True):
            clipped[d] = n
            count *= k
        total += count * ctx.tile_of(X, clipped)
    return total
