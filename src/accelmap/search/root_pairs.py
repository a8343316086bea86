"""Rule B36 of docs/mapper.md: at the root of an unrolling's search, each open level's tile keeps its refill energy and
its stall together.

At the root of the branch and bound with the unrolling fixed (nothing else fixed), every level but the outermost is
open, and the node bound adds, per open level c, the least refill energy over every tile shape that fits c (rules B8,
B35) and takes as stall the least over the same shapes of c's stall (rule B27): the energy of the shape that refetches
the cheap operand paired with the stall of the shape that refetches the slow one. But a mapping has one tile at c, and
its loops above c fall in one case and order of ``open_level_refills.refill_cases``: both its energy beyond B1's at c's
boundaries and c's stall are at least that (shape, case)'s, at once (the same counts give both). So per level the
(energy, stall) points of every (shape, case) bound it jointly, and every mapping takes one point from each open level:

    energy >= E0 + sum over levels of the point's energy,
    latency >= max(L0, MAC schedule + the largest of the points' stalls),

where (E0, L0) is the node bound at the root without rules B8/B35 and B27 (their per-level caches set to zero: every
other term is the same and holds for every case of the node, so the least over its cases, energy and latency taken
separately, holds for every mapping), B8's energy adds over levels (each charges its own boundaries), and the stall is
at least each level's (rule B27: the node's stall is the largest of its terms, the MAC schedule the least compute). For
a scalar objective f, non-decreasing in both, every mapping's f is at least the least f over the combinations of one
point per level (rules B22 and B25's argument, over tile shapes). Only points not dominated within a level are kept
(a dominated point's combinations are never the least). The rule needs every fan-out fixed (the exact MAC schedule),
whole tiles (rule I3), and no open level that can hold only one element of some operand (rule B23 then charges the
energy of rule B17's count in place of B8's, which the sum above does not model).
"""

from __future__ import annotations

import copy
import math

import numpy as np

from accelmap.search.case_pairs import SCALAR_OBJECTIVES
from accelmap.search.deadline import check as check_deadline
from accelmap.search.objective import scalar
from accelmap.search.open_level_energy import refill_energy
from accelmap.search.open_level_refills import level_cached, level_stall, open_level_shapes, refill_cases

# Combinations of per-level points above which the rule is not computed (it then cuts nothing: still safe).
ROOT_PAIR_COMBINATIONS = 200_000

_POINTS: dict[tuple, np.ndarray] = {}


def level_points(ctx, c: int) -> np.ndarray:
    """Per open level c, the (energy beyond B1's, stall) points of every (tile shape, case) not dominated by another,
    as a (k, 2) array sorted by energy; the single point (0, 0) where c has no shape to bound."""
    return level_cached(_POINTS, ctx, c, _level_points)


def _level_points(ctx, c: int) -> np.ndarray:
    shapes = open_level_shapes(ctx, c)
    if shapes is None:
        return np.zeros((1, 2))
    stalls = c in ctx.serial_fill
    parts = []
    for rows, counts in refill_cases(ctx, c, shapes):
        e = refill_energy(ctx, c, shapes, counts)
        t = level_stall(ctx, c, shapes, counts) if stalls else np.zeros(len(e))
        parts.append(np.stack([e[rows], t[rows]], axis=1))
    pts = np.concatenate(parts) if parts else np.zeros((0, 2))
    if not len(pts):
        return np.zeros((1, 2))
    pts = pts[np.lexsort((pts[:, 1], pts[:, 0]))]
    # keep a point only if its stall is below every point of no more energy
    before = np.minimum.accumulate(np.concatenate([[np.inf], pts[:-1, 1]]))
    return pts[pts[:, 1] < before]


def paired_root_bound(ctx) -> tuple[float, float] | None:
    """Rule B36: an (energy, latency) pair whose objective value is a lower bound of ``ctx.objective`` for every
    mapping of the context's bypass choice and unrolling; None where the rule does not apply."""
    op, arch, nlev = ctx.op, ctx.arch, ctx.nlev
    if ctx.objective not in SCALAR_OBJECTIVES or not ctx.whole_tiles or any(cap is None for cap in ctx.spatial_cap):
        return None
    # (rule B23's pinned refills fire only at a level that holds a single element of an operand at the root)
    if any(ctx.holds_only(X, c, 1) for X in op.operands for c in ctx.chains[X.name][1:] if X.name not in ctx.loose):
        return None
    points = [level_points(ctx, c) for c in range(1, nlev)]
    if math.prod(len(p) for p in points) > ROOT_PAIR_COMBINATIONS:
        return None
    rest = copy.copy(ctx)
    rest.objective = None
    rest._open_floor = dict.fromkeys(range(nlev), 0.0)      # rules B8/B35 left out (added per point below)
    rest.open_stall = dict.fromkeys(range(nlev), 0.0)       # rule B27 left out (taken per point below)
    rest._runs = {}
    e0, l0 = rest.lower_bound((), nlev, dict(op.sizes))
    pes = math.prod(math.prod(cap.values()) for cap in ctx.spatial_cap if cap)
    compute = math.ceil(math.ceil(op.macs / pes) / arch.compute.macs_per_cycle)
    check_deadline(ctx)
    # One point per level, every combination (broadcast over one axis per level; the sum in the levels' order, as
    # ``sum`` over a combination adds them).
    total: np.ndarray = np.zeros(())
    most: np.ndarray = np.full((), -np.inf)
    for i, p in enumerate(points):
        shape = [1] * len(points)
        shape[i] = len(p)
        total = total + p[:, 0].reshape(shape)
        most = np.maximum(most, p[:, 1].reshape(shape))
    energy = (e0 + total).reshape(-1)
    stall = most.reshape(-1)
    latency = np.maximum(l0, compute + stall)
    value = scalar(ctx.objective, energy, latency)
    k = int(np.argmin(value))
    return float(energy[k]), float(latency[k])
