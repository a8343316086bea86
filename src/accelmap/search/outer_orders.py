"""Rule B30 (docs/mapper.md): the outermost level's few orders bounded one by one.

At a node of the outermost level every loop of the mapping is fixed but that level's order (rule B3 bounds the node
over all of its orders at once). Rules B20 and B29 need the order of the loops above each stream, and the refetch
counts of B1 are exact only with it, so the bound over every order can lie well below the bound of each order: on
ResNet-18 layer4.0.conv1 on ascend_like a DRAM tiling of three loops had a bound 1% below the incumbent's latency
while each of its six orders costs at least 7% more than the incumbent (its own bound, every loop fixed, is the
model's latency there). With few loops, each order's own bound is cheap: the node's orders are those orders, so a
node whose every order is cut is cut before its non-dominated orders are built (O2), and an order kept is ranked
by the least bound of the orders with its innermost loop (rule B4's key).
"""

from __future__ import annotations

import itertools
import math

from accelmap.mapping.loopnest import Loop

# The most orders of the outermost level bounded one by one (three loops). With four (24 orders) the per-order bounds
# cost six times the node bound on vta_like ResNet-18 layer2.0.conv1 and the exact search lost its proof there at
# 10 s (proven in 4.8 CPU s before B30, not in 10 s with 24, proven in 4.9 s with 6; conv1 8.6 s).
MAX_OUTER_ORDERS = 6


def outer_order_nests(fixed: tuple[Loop, ...], level: int) -> list[tuple[Loop, ...]] | None:
    """``fixed`` with the temporal loops (bound above 1) of the outermost level ``level`` in each of their orders,
    every other loop as it is; None unless ``level`` is 0 with two or three such loops."""
    if level != 0:
        return None
    slots = [i for i, l in enumerate(fixed) if l.level == 0 and not l.spatial and l.bound > 1]
    if len(slots) < 2 or math.factorial(len(slots)) > MAX_OUTER_ORDERS:
        return None
    out = []
    for perm in itertools.permutations([fixed[i] for i in slots]):
        loops = list(fixed)
        for i, l in zip(slots, perm, strict=True):
            loops[i] = l
        out.append(tuple(loops))
    return out


def bounds_by_innermost(ctx, nests: list[tuple[Loop, ...]], level: int, rem: dict[str, int],
                        full_positions: int | None) -> dict[Loop | None, tuple[float, float]]:
    """Per innermost loop of the outermost level, the least energy and the least latency bound over the orders that
    put it innermost (each order's own bound, ``ctx.lower_bound`` with every order fixed)."""
    out: dict[Loop | None, tuple[float, float]] = {}
    for nest in nests:
        inner = [l for l in nest if l.level == level and not l.spatial and l.bound > 1][-1]
        e, lat = ctx.lower_bound(nest, level, rem, full_positions=full_positions)
        if inner in out:
            e, lat = min(e, out[inner][0]), min(lat, out[inner][1])
        out[inner] = (e, lat)
    return out
