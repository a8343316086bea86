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
"""

from __future__ import annotations

from dataclasses import dataclass

from accelmap.arch.accelerator import Accelerator
from accelmap.search.bounds import BoundContext, chain_options
from accelmap.search.exact import ranked_unrollings
from accelmap.search.objective import scalar
from accelmap.search.space import Constraints, keep_options
from accelmap.workload.operator import Operator


@dataclass(frozen=True)
class RootBoundCheck:
    beaten: bool                  # every mapping costs at least the bar
    ratio: float | None           # when kept: the bound of the first unrolling not cut over the bar
    unrollings_bounded: int       # unrollings whose bypass choices were bounded at the root


def beaten_by_root_bounds(op: Operator, arch: Accelerator, objective: str, bar: float,
                          constraints: Constraints | None = None) -> RootBoundCheck:
    """Whether every mapping of ``op`` on ``arch`` costs at least ``bar`` by the exact search's S1 and root bounds
    (module docstring)."""
    cons = constraints or Constraints()
    keeps = keep_options(op, arch, cons)
    un = ranked_unrollings(op, arch, cons, objective, chain_options(op, keeps), skip_equivalent=False)
    s1 = scalar(objective, un.energy, un.latency)
    bounded = 0
    for row in un.order:
        if s1[row] >= bar:
            break                  # in S1 order: every later unrolling is cut too
        if not un.divides[row]:
            return RootBoundCheck(False, float(s1[row]) / bar, bounded)
        spatial = {axis: dict(dims) for (_, axis), dims in un.space.assignment(int(row)).items()}
        bounded += 1
        # The unrolling's bound: its least bypass choice's.
        root = min(float(scalar(objective, *BoundContext(op, arch, keep, spatial).lower_bound(
            (), len(arch.levels), dict(op.sizes)))) for keep in keeps)
        if root < bar:
            return RootBoundCheck(False, root / bar, bounded)
    return RootBoundCheck(True, None, bounded)
