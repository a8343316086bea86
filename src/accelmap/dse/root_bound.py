"""Rule R: a configuration certifiably no better than an incumbent, by the exact search's own bounds.

The exact search (``search.exact``) visits a layer's spatial unrollings in the order of their rule-S1 bound and cuts
every unrolling from the first whose S1 bound the best value found meets; below each unrolling it bounds each bypass
choice at the root of its tiling tree (``BoundContext.lower_bound`` with nothing fixed, rule B8 adding each level's
least refill over the tiles that fit it: the one bound here that sees buffer capacities) and cuts the choices the
best value meets. Both are the cuts its proofs of optimality rest on. Applied to a configuration with the
incumbent's value as the bar: if every unrolling is cut by S1, or is a dividing unrolling whose every bypass choice
the root bound cuts, then every mapping of the configuration (perfect temporal factors, any unrolling, padded
included) costs at least the incumbent, and the configuration can be dropped without mapping it. A padded unrolling
whose S1 bound is below the bar stops the walk (the root bound is argued for whole tiles), and so does the first
unrolling that is not cut: the configuration is then kept, and the ratio of that unrolling's bound to the bar says
how far the rule was from pruning it. Over the mapper's space this is what "proven optimal" means too (perfect
temporal factors: ``map_operator``'s proofs cover the same).

The same cuts give each configuration a certified lower bound without a bar (``root_lower_bound``, used to order
the co-search, ``co_search(..., root_order=True)``): the least, over every unrolling, of its S1 bound raised by its
root bound (S1 alone for a padded one), walked in S1 order and completed by the next unrolling's S1 bound once a
given number of unrollings has been bounded at the root. When the unrollings could not all be enumerated (more
padded bounds than rule E2 lists, ``RankedUnrollings.every_padded``), the ones not listed have no bound here, and
neither function claims anything.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from accelmap.arch.accelerator import Accelerator
from accelmap.search.bounds import BoundContext, chain_options
from accelmap.search.exact import RankedUnrollings, ranked_unrollings
from accelmap.search.objective import scalar
from accelmap.search.space import Constraints, keep_options
from accelmap.workload.operator import Operator


@dataclass(frozen=True)
class RootBoundCheck:
    beaten: bool                  # every mapping costs at least the bar
    ratio: float | None           # when kept: the bound of the first unrolling not cut over the bar
    unrollings_bounded: int       # unrollings whose bypass choices were bounded at the root


def _ranked(op: Operator, arch: Accelerator, objective: str, constraints: Constraints | None):
    cons = constraints or Constraints()
    keeps = keep_options(op, arch, cons)
    un = ranked_unrollings(op, arch, cons, objective, chain_options(op, keeps), skip_equivalent=False)
    s1 = scalar(objective, un.energy, un.latency)
    # In S1 order (the walks below stop at the first bound past a bar): E1's ``un.order`` ranks by S1 without rule
    # B64, whose order S1 with it need not keep.
    return keeps, un, s1, np.argsort(s1, kind="stable")


def _unrolling_root_bound(op: Operator, arch: Accelerator, objective: str, keeps, un: RankedUnrollings,
                          row: int) -> float:
    """The root bound of one dividing unrolling: its least bypass choice's (``BoundContext.lower_bound`` with
    nothing fixed)."""
    spatial = {axis: dict(dims) for (_, axis), dims in un.space.assignment(int(row)).items()}
    return min(float(scalar(objective, *BoundContext(op, arch, keep, spatial).lower_bound(
        (), len(arch.levels), dict(op.sizes)))) for keep in keeps)


def beaten_by_root_bounds(op: Operator, arch: Accelerator, objective: str, bar: float,
                          constraints: Constraints | None = None) -> RootBoundCheck:
    """Whether every mapping of ``op`` on ``arch`` costs at least ``bar`` by the exact search's S1 and root bounds
    (module docstring)."""
    keeps, un, s1, s1_order = _ranked(op, arch, objective, constraints)
    if not un.every_padded:
        return RootBoundCheck(False, None, 0)     # padded unrollings left out of the list: no claim
    bounded = 0
    for row in s1_order:
        if s1[row] >= bar:
            break                  # in S1 order: every later unrolling is cut too
        if not un.divides[row]:
            return RootBoundCheck(False, float(s1[row]) / bar, bounded)
        bounded += 1
        root = _unrolling_root_bound(op, arch, objective, keeps, un, row)
        if root < bar:
            return RootBoundCheck(False, root / bar, bounded)
    return RootBoundCheck(True, None, bounded)


@dataclass(frozen=True)
class RootLowerBound:
    value: float                  # every mapping costs at least this (0: no claim)
    unrollings_bounded: int       # unrollings bounded at the root
    complete: bool                # the least over every unrolling (the walk was not cut short)


def root_lower_bound(op: Operator, arch: Accelerator, objective: str, unrollings: int,
                     constraints: Constraints | None = None) -> RootLowerBound:
    """A certified lower bound of every mapping of ``op`` on ``arch``: the least over its unrollings of their S1
    bound raised by their root bound (a padded unrolling: its S1 bound). Unrollings are walked in S1 order; the walk
    ends at the first whose S1 bound is not below the least so far (every later one is at least that), or after
    ``unrollings`` root bounds, the rest then bounded by the next S1 bound. Why it holds: each mapping uses one
    unrolling, and both bounds of that unrolling hold for it (module docstring)."""
    keeps, un, s1, s1_order = _ranked(op, arch, objective, constraints)
    if not un.every_padded or not len(s1_order):
        return RootLowerBound(0.0, 0, False)
    least, bounded = float("inf"), 0
    for row in s1_order:
        s = float(s1[row])
        if s >= least:
            return RootLowerBound(least, bounded, True)
        if not un.divides[row]:
            least = s              # below the least so far; the next unrolling's S1 is at least it
            continue
        if bounded == unrollings:
            return RootLowerBound(s, bounded, False)    # s < least: the rest are at least s
        bounded += 1
        least = min(least, max(s, _unrolling_root_bound(op, arch, objective, keeps, un, row)))
    return RootLowerBound(least, bounded, True)
