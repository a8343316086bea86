"""Rule B57 (docs/mapper.md): below a padded fan-out that multicasts an input, the MACs read the input once per
round, the last round's idle lanes included.

Rule B1 counts what the MACs read of an input X at its last level as ``MACs / merge``, ``merge`` the product of the
spatial loops below that level that multicast X (over dims X does not use). The model counts the (time step, group)
pairs with at least one valid MAC, the multicast loops collapsed (``cost.access_counts.compute_groups``), which is a
product over dims: per dim d, the offsets of d's other loops (the free ones) that lie below d's size ``D``. Along d the
loops' offsets (each loop's index times its stride) enumerate every value in ``[0, E)`` once (``E >= D`` the product of
d's bounds); each free offset f heads a group ``f + C`` of ``P_d`` values, ``C`` the collapsed loops' offsets (0
among them), and the groups are disjoint. A value below D lies in a group whose head is below D, so at least
``ceil(D / P_d)`` heads are (``P_d`` the product of d's collapsed loops). For a dim X uses nothing is collapsed and
the count is D. So the reads are at least ``prod over dims X uses of D x prod over the others of ceil(D / P_d)``,
which is ``MACs / merge`` where every P_d divides its dim and more where a padded round is partial (ResNet-18's fc on
edge_tpu_like: K = 1000 over 128 lanes that multicast the inputs: 8 x 512 = 4,096 reads where B1 counted 4,000).

Used only where every fan-out below X's last level is fixed, at the node or in advance (as the exact search fixes
the unrolling), so every collapsed loop is known; an output is left to B1 (its collapsed dims are reduced ones, which no
padded unrolling pads).
"""

from __future__ import annotations

import math

from accelmap.workload.operator import Operand


def mac_read_groups(ctx, spatial, X: Operand, last: int, level: int) -> float | None:
    """The least count of the MACs' reads of input X at its last level ``last`` at a node whose levels >= ``level``
    are fixed, ``spatial`` its spatial loops; the fan-outs of open levels from the unrolling fixed in advance
    (``BoundContext.fixed_axes``). None where the rule does not apply (X the output, or a fan-out below ``last``
    neither fixed at the node nor in advance)."""
    if X.is_output:
        return None
    arch, op = ctx.arch, ctx.op
    collapsed = dict.fromkeys(op.dim_names, 1)
    for lv in range(last, min(ctx.nlev, level)):
        fan = arch.levels[lv].fanout
        if fan is None:
            continue
        if any(a.name not in ctx.fixed_axes for a in fan.axes):
            return None
        for a in fan.axes:
            if a.multicast:
                for d, b in ctx.fixed_axes[a.name].items():
                    if d not in X.dims:
                        collapsed[d] *= b
    for l in spatial:
        if l.level >= max(last, level) and l.dim not in X.dims and arch.fanout_axis(l.level, l.axis).multicast:
            collapsed[l.dim] *= l.bound
    return float(math.prod(D if d in X.dims else -(-D // collapsed[d]) for d, D in op.sizes.items()))
