"""Rule B52 of docs/mapper.md: padded unrollings of equal fan-out products whose padded dims each sit on one axis per
level have the same optimum, so once one was searched to the end the others are skipped.

Rule S5 (``exact.py``) skips an unrolling whose class of equal fan-out products (per level and multicast flag, the
product of each dim's spatial bounds) holds one already searched to the end; it was argued for perfect nests, so only
dividing unrollings marked their class, and a padded one (rule E2, searched over Ruby-S tiles) was searched again for
every re-deal of its dims over alike axes. On ResNet-18 on eyeriss_like 0.1-6 thousand padded unrollings lie below the
best found per layer (the 14- and 12-PE axes both multicast and reduce, so a dim's bound can move between them).

Two rows U and V of one class where, at every fan-out level, each dim the unrolling pads (its spatial bounds do not
divide its size) has its spatial loops on a single axis: the padded dim's loops (level, bound, spatial or not) are the
same in U and V, only the axis name differs, and each dividing dim has the same per-level product. Then:

* the Ruby-S spaces are the same: what an unrolling leaves of a dim (``ceil(size / product)``) depends on the products
  only, so the same temporal loops are placed; the validator reads a dim's loops as their bounds from the outermost
  in (the padded dim's list is the same in U and V; a dividing dim's loops divide its size in any deal), each axis'
  product against its size (both rows are in the space, so both pass), and a reduced dim only on reducing axes (the
  same alike axes);
* a mapping of U and its image under V cost the same: the model reads a fan-out through each level's per-dim products
  on its multicast axes and on its other axes, and through the axis only by its multicast flag (rule S5), and a padded
  dim's lanes take the offsets ``0, 1, ..., bound - 1`` times the same stride in both (one loop on one axis), so the
  instances' clipped ranges are the same multiset and the counts, which sum or take the largest over instances, are
  equal.

So both subtrees have the same optimum (over Ruby-S tiles), and once U's was searched to the end the best found is at
most V's optimum: V is skipped. A padded dim split over two axes of a level is left out (the order of its two loops
changes which iterations start past the dim, so the two deals need not admit the same mappings). As rule S5: only with
one best mapping kept and a scalar objective, and only over Ruby-S tiles (not with ``imperfect``, whose free pass
covers imperfect tiles of every dim).
"""

from __future__ import annotations

from accelmap.search.padded_round_positions import padded_dims
from accelmap.workload.operator import Operator


def single_axis_padded(assignment: dict, op: Operator) -> bool:
    """Does every dim the unrolling ``assignment`` ((level, axis) -> {dim: bound}) pads sit on one axis per level?"""
    padded = padded_dims(op, assignment)
    axes: dict[tuple[int, str], int] = {}
    for (level, _axis), dims in assignment.items():
        for d, b in dims.items():
            if b > 1 and d in padded:
                axes[(level, d)] = axes.get((level, d), 0) + 1
    return all(n == 1 for n in axes.values())
