"""Rule B63 (docs/mapper.md): each instance of a level below a pinned fan-out brings every element its MACs use.

Rule B1 floors what enters a level of an input's chain at the input's footprint: every element enters at least once.
Below a fan-out the level has one instance per combination of the spatial loops above it, and each instance's MACs
read their operands through their own buffer: what enters the level, summed over its instances (as the model counts
fills), is at least the sum over the instances of the elements each one's MACs use. Where the lanes' tiles overlap
(a convolution's input halos between PEs unrolled over P) or repeat (an operand multicast to lanes over a dim it does
not use), that sum exceeds the footprint, and it holds at every node, the root included.

With every fan-out pinned (rule E1), along each dim d: with no spatial loop above the level, every instance covers all
of d (it runs every temporal iteration). With spatial loops above it whose product with the ones below covers d (no
temporal loop over d: Ruby-S leaves ``ceil(N_d / product) = 1``), the lanes above sit at offsets ``k x E`` (``E`` the
product of d's spatial loops below, a mixed radix over the lanes' loops whatever their order), each covering
``[k E, k E + E)`` clipped to ``N_d`` (empty past the end). Along a dim the input does not use, with spatial loops that
divide d, every lane is non-empty; along a plain index of its own that they divide, the lanes split d into equal
shares of ``N_d / lanes``. In any other case the rule is not applied (0). An instance whose range is empty along some
dim runs no MAC; the others use the input's elements over the product of their ranges (``tile_size``: a window over
contiguous ranges reads their window). The output is left out (what it drains is rule B47's).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter

from accelmap.workload.operator import Operand


def instance_footprint_floor(ctx, X: Operand, c: int) -> float:
    """The sum over level c's instances of the elements of input X their MACs use (module doc); 0 where the rule does
    not apply. ``ctx``: a Ruby-S bound context with every fan-out pinned (``unrolled``: per dim, fan-out level ->
    product)."""
    if X.is_output or not ctx.pinned:
        return 0.0
    sizes = ctx.op.sizes
    ext = {d: sizes[d] for d in sizes}
    lanes: dict[str, Counter[int]] = {}
    repeat = 1
    plain = ctx.plain[X.name]
    for d, per_level in ctx.unrolled.items():
        above = math.prod(b for lv, b in per_level.items() if lv < c)
        if above == 1:
            continue
        below = math.prod(b for lv, b in per_level.items() if lv >= c)
        n = sizes[d]
        if above * below >= n:
            lanes[d] = Counter(max(0, min(below, n - k * below)) for k in range(above))
        elif n % (above * below):
            return 0.0          # a padded dim with temporal loops: the lanes' ranges are not known here
        elif d not in X.dims:
            repeat *= above
        elif d in plain and sum(1 for ix in X.indices for t in ix.terms if t[0] == d) == 1:
            ext[d] = n // above
            repeat *= above
        else:
            return 0.0
    total = 0.0
    dims = list(lanes)
    for combo in itertools.product(*(lanes[d].items() for d in dims)):
        if any(length == 0 for length, _ in combo):
            continue
        count = repeat
        for d, (length, k) in zip(dims, combo, strict=True):
            count *= k
            if d in X.dims:
                ext[d] = length
        total += count * ctx.tile_of(X, ext)
    return total
