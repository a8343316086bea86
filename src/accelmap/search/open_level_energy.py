"""Rules B8 and B35 of docs/mapper.md: the least energy an open level's refills cost, over every tile that fits it.

A level c none of whose loops (nor any below it) a node has fixed holds some tile whose extents divide each dim and fit
c (``open_level_refills.open_level_shapes``). Rule B8 charged c's boundary, beyond B1's footprint count, the least over
those shapes and rule B7's cases (the innermost temporal loop above c runs over dim d: every plain user of d enters c a
whole tile at each instance-iteration above c) of what the case's refetches cost. Rule B35 takes rule B15's orders in
each case as well, exactly as rule B27 counts c's stall (``open_level_refills.refill_cases``): with every fan-out above
c fixed, the operands c receives that do not use d as a plain index enter c, in every order of their innermost loop
over a plain dim, the k-th a whole tile at the instances above c times the temporal iterations above c of the plain
dims of the first k. In particular an operand kept stationary still enters every instance that uses it, which B8's
footprint floor (every element once, in all the instances together) did not see: on eyeriss_like, with P on the
array, every weight enters each of the PEs along P. The charge of a boundary is non-decreasing in the count, every
mapping with that tile at c is in some case and order whose counts it meets, so the least over shapes, cases and orders
of the summed extra charges is a lower bound of c's boundary energy beyond B1's, as B8's was; and it is at least B8's
(the orders only add counts), so it replaces it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from accelmap.search.open_level_refills import OpenShapes, least_over_cases, level_cached
from accelmap.workload.operator import Operand

_OPEN_FLOORS: dict[tuple, Any] = {}


def least_refill_energy(ctx, c: int) -> float:
    """Rules B8 and B35 for open level ``c``: the least, over every tile shape that fits it and every case and order
    of the loops above it, of the energy its boundaries cost beyond B1's footprint charge. Cached by what it depends
    on (``level_cached``)."""
    return level_cached(_OPEN_FLOORS, ctx, c, _least_refill_energy)


def _least_refill_energy(ctx, c: int) -> float:
    return least_over_cases(ctx, c, refill_energy)


def refill_energy(ctx, c: int, shapes: OpenShapes, counts: dict[str, Any]) -> np.ndarray:
    """Per shape, the energy of c's boundaries beyond B1's charge when the operands c receives enter it ``counts``
    times (``refill_cases``): each operand's charge at its count minus its charge at its floor (footprint)."""
    out = np.zeros(len(shapes.grid))
    for X in shapes.kept:
        chain = ctx.chains[X.name]
        p = chain[chain.index(c) - 1]
        base = float(max(ctx.footprint[X.name], ctx.n_out) if X.is_output else ctx.footprint[X.name])
        member = np.broadcast_to(np.asarray(counts[X.name], dtype=np.float64), out.shape)
        out = out + np.maximum(0.0, boundary_energy(ctx, X, p, c, member) - boundary_energy(ctx, X, p, c,
                                                                                          np.full(1, base)))
    return out


def boundary_energy(ctx, X: Operand, p: int, c: int, member: np.ndarray) -> np.ndarray:
    """Energy B1 charges the boundary from p into c for ``member`` elements entering c, with group counts
    divided by the most the fan-outs between p and c can merge (and the most reduction lineages above p)."""
    P, C = ctx.arch.levels[p], ctx.arch.levels[c]
    s_c, s_p = ctx.scale[(c, X.name)], ctx.scale[(p, X.name)]
    merge = math.prod(ctx.merge_cap[X.name][l] for l in range(p, c))
    net = ctx.net_unit[(X.name, c)]      # rule B14: the network energy of the fills (and drains)
    if not X.is_output:
        fp = ctx.footprint[X.name]
        return member * (C.write_energy_pj * s_c + net) + np.maximum(member / merge, fp) * P.read_energy_pj * s_p
    n = ctx.n_out
    lineage = math.prod(ctx.merge_cap[X.name][l] for l in range(0, p))
    group = np.maximum(member / merge, n)
    down = np.maximum(0.0, group - n * (lineage - ctx.init_read))
    return (down * (C.write_energy_pj * s_c + P.read_energy_pj * s_p + net) + member * (C.read_energy_pj * s_c + net)
            + group * P.write_energy_pj * s_p)
