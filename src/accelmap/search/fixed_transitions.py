"""Rule B67 of docs/mapper.md: the tile changes of a node's fixed loops stall compute as the model times them.

The model's single-buffer stall (``cost.latency._single_stall``) is the first tiles' loads, plus, per temporal loop
(a transition class: the loop that advances, every loop inside it wrapping), how often it advances times the time of
its transition (``_transition_time``: the deltas of every single-buffered level below that loop, scheduled over the
ports), plus the last drains; every part is at least zero and the latency is at least the MAC schedule plus that stall.

At a node of the branch and bound every level from ``level`` inward is fixed (its loops, their order and the fan-outs),
and what is left of each dim (``rem``) goes to the open levels above. A fixed loop at level l moves only the tiles of
the levels below l, all fixed, so its transition's deltas, the instances that move them and the ports they cross are
the node's own; it advances ``(bound - 1) x prod(the bounds outside it)`` times, where the open loops' product is
``prod(rem)`` whatever their order or level (perfect factors). So the model's time of each fixed class is the same in
every completion of the node, and so is its count, provided that:

* the data each element carries is the same in every completion: the output moves at its operand precision where the
  accelerator has no separate final-output precision (``compute.final_output_bits`` is None; else the drains' mean
  bits depend on where the open loops put the reduction);
* the open levels have no fan-out (the parent-side counts of a fixed level whose parent is open are then divided by
  the fixed fan-outs only, and each open level has one instance);
* the nest is perfect (every bound divides; imperfect and Ruby-S nests split classes into edge cases).

Then the stall of every completion is at least the sum over the fixed classes of count x time, read off one
completion (the open loops all at the outermost level), and the latency at least the MAC schedule (exact: every
fan-out is fixed) plus that sum. ``tests/test_bound_fixed_transitions.py`` checks it against the model on random
completions.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from accelmap.cost.latency import latency_rows
from accelmap.cost.model import access_counts
from accelmap.cost.nest_rows import NestRows
from accelmap.mapping.loopnest import Loop, Mapping

# The search applies the rule at the children of this level only (every level from it inward fixed, the outermost open):
# there every tile change but the outermost loops' is known, and the first fill and last drains too. Deeper (more levels
# open) it holds as well but cut 24 of 413 nodes on ResNet-18 layer3.0.conv1 on edge_tpu_like, at about 3 ms each (one
# run of the model per node).
FIXED_CLASSES_LEVEL = 1
# At the children of level 1 with at most this many dims left, every order of the outermost loops is run by the model
# and the least latency taken (with more, one run and the stall less the outermost loops' classes). With one dim the
# completion is the mapping. Measured at 3 (up to 6 runs per node): on ResNet-18 conv1 on eyeriss_like the 10-second
# search reached 56-73 unrollings against 73-84 without the rule, and 81 at 1; on edge_tpu_like layer3.0.conv1's subtree
# (above) 3 cut 923 nodes in 15 s, 1 cut 917.
OUTER_ORDERS_DIMS = 1


def applies(arch, level: int, loops: tuple[Loop, ...], sizes: dict[str, int], rem: dict[str, int]) -> bool:
    """Does rule B67 hold at a node whose levels >= ``level`` are fixed with ``loops``, ``rem`` left per dim?"""
    if level < 1 or arch.compute.final_output_bits is not None:
        return False
    if any(arch.levels[i].fanout is not None for i in range(level)):
        return False
    got: dict[str, int] = {}
    for loop in loops:
        got[loop.dim] = got.get(loop.dim, 1) * loop.bound
    return all(got.get(d, 1) * rem[d] == n for d, n in sizes.items())


def fixed_classes_latency(op, arch, keep, level: int, loops: tuple[Loop, ...], rem: dict[str, int]) -> float:
    """Rule B67: at least the latency of every completion of the node (levels >= ``level`` fixed as ``loops``, the
    open levels above taking ``rem``): the MAC schedule plus the fixed loops' transition classes' stall. 0 where the
    rule does not apply."""
    if not applies(arch, level, loops, op.sizes, rem):
        return 0.0
    outer = tuple(Loop(d, r, 0) for d, r in rem.items() if r > 1)
    if level == 1 and len(outer) <= OUTER_ORDERS_DIMS:
        # The outermost level's loops are forced (what is left of each dim); only their order is open: every
        # completion is one of these few mappings, each with the model's latency.
        return min(_classes_latency(op, arch, keep, 0, Mapping(order + loops, keep))
                   for order in itertools.permutations(outer))
    return _classes_latency(op, arch, keep, level, Mapping(outer + loops, keep))


def _classes_latency(op, arch, keep, level: int, completion: Mapping) -> float:
    """The MAC schedule plus the stall of the transition classes of the loops at levels >= ``level`` of the model's run
    of ``completion`` (with the first fill and last drains where only the outermost level is open; the model's latency
    where ``level`` is 0: the completion is then the mapping)."""
    raw = access_counts(op, arch, completion)
    nest = NestRows.of_mapping(op, arch, completion)
    counts = {k: [np.array([v], dtype=np.int64) for v in c.as_tuple()] for k, c in raw.items()}
    r = latency_rows(nest, keep, counts)
    if level == 0:
        return float(r["latency"][0])        # nothing open: the completion is the mapping
    compute = float(r["compute_cycles"][0])
    classes = r["stall_classes"]
    if classes is None:
        return compute
    slots, count, each, stall = classes
    if level == 1:
        # Only the outermost level is open, and it loads nothing: the first fill and the last drains are the node's too.
        open_classes = [k for k, j in enumerate(slots) if nest.structure[j][1] < level]
        return compute + max(0.0, float(stall[0]) - math.fsum(float(count[k, 0] * each[k, 0]) for k in open_classes))
    fixed = [k for k, j in enumerate(slots) if nest.structure[j][1] >= level]
    return compute + math.fsum(float(count[k, 0] * each[k, 0]) for k in fixed)


def fixed_classes_prune(ctx, best, level: int, loops: tuple[Loop, ...], rem: dict[str, int],
                        bounds: list[tuple[float, float]]) -> bool:
    """Does rule B67 cut the node (levels >= ``level`` fixed as ``loops``)? ``bounds``: the node's (energy, latency)
    bounds, one per alternative that covers some of its completions; each latency is raised to the rule's, which holds
    for every completion."""
    lat = fixed_classes_latency(ctx.op, ctx.arch, ctx.keep, level, loops, rem)
    return lat > 0 and all(best.prunes(e, max(l_b, lat)) for e, l_b in bounds)
