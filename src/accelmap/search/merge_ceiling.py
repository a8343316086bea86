"""Rule B60 (docs/mapper.md): a merge over a padded dim counts no more lanes than the dim has indices.

A fan-out merges an operand's transfers across its lanes over dims the operand does not use (an input multicast, the
output reduced): rules B1 and B11 divide what crosses a boundary by the product of those spatial loops, the fixed ones
(``fixed_spatial_merge``) and the most the open fan-outs can add (``BoundContext.merge_cap``). Along a padded dim the
product exceeds the dim's size: the lanes past its end are idle (Ruby-S's clipped last round) and merge nothing. At
one time the lanes that read one element of X differ only in the dims X does not use, and along each such dim d they
hold distinct in-range indices: at most ``N_d`` of them. So the merge is at most, per dim, the product of every
spatial loop over it on the merging axes, fixed or fixed in advance (E1 pins every fan-out), capped at ``N_d``.
Where the loops divide each dim the cap is never reached and nothing changes.
"""

from __future__ import annotations

import math

from accelmap.mapping.loopnest import Loop
from accelmap.workload.operator import Operand


def pinned_merge_dims(ctx, X: Operand, lv: int) -> dict[str, int] | None:
    """Per dim outside X, the product of the bounds that the fan-out of level ``lv``, fixed in advance, unrolls on
    the axes that merge X's transfers (multicast for an input, any for the output, as ``merge_cap``); None when some
    axis of the level is not fixed in advance."""
    fan = ctx.arch.levels[lv].fanout
    if fan is None:
        return {}
    if any(a.name not in ctx.fixed_axes for a in fan.axes):
        return None
    out: dict[str, int] = {}
    for a in fan.axes:
        if X.is_output or a.multicast:
            for d, b in ctx.fixed_axes[a.name].items():
                if d not in X.dims:
                    out[d] = out.get(d, 1) * b
    return out


def merge_room(ctx, X: Operand, lo: int, hi: int, level: int, spatial: list[Loop], fixed_merge: int) -> float:
    """How much the open fan-outs at levels ``lo .. min(hi, level) - 1`` can still merge X's transfers beyond the
    fixed spatial loops' ``fixed_merge`` once every dim's product is capped at its size (module doc); infinity where
    the cap does not bind or some open fan-out is not fixed in advance."""
    per: dict[str, int] = {}
    for l in spatial:
        if lo <= l.level < hi and l.dim not in X.dims:
            ax = ctx.arch.fanout_axis(l.level, l.axis)
            if X.is_output or ax.multicast:
                per[l.dim] = per.get(l.dim, 1) * l.bound
    unfixed = 1
    for lv in range(lo, min(hi, level)):
        dims = pinned_merge_dims(ctx, X, lv)
        if dims is None:
            return math.inf
        for d, b in dims.items():
            per[d] = per.get(d, 1) * b
            unfixed *= b
    sizes = ctx.op.sizes
    ceiling = math.prod(min(b, sizes[d]) for d, b in per.items())
    if ceiling >= fixed_merge * unfixed:
        return math.inf
    return ceiling / fixed_merge
