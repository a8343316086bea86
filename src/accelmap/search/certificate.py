"""The certificate of a mapping search: a lower bound of the objective over every mapping, within a time budget.

The full bound (``spatial.certified_lower_bound``: rule S1 minimized over rule S2's relaxation of the unrolling to
class vectors) bounds every combination of the fan-out groups' vectors; on most layers that takes well under a
second, but on a batched matmul on ascend_like it bounds 383,554 combinations (4.3 s of CPU for BERT's
``attention.scores``). A strategy's time limit covers its certificate too (``mapper.map_operator``), so the full
bound gets a share of the limit, read between chunks of rows, and when it does not finish within that share the
certificate is the *relaxed* bound instead (rule S8 of docs/mapper.md): rule S1 of one point that dominates every
unrolling (each fan-out level's merge of each operand at its largest, every PE used, no level set ruled out by
rule S6), a few milliseconds whatever the layer. Both hold for every mapping the constraints allow; the relaxed one
is weaker. The result says which one it is.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from accelmap.arch.accelerator import Accelerator
from accelmap.search import spatial
from accelmap.search.bounds import chain_options, spatial_bounds
from accelmap.search.objective import scalar
from accelmap.search.space import Constraints, keep_options
from accelmap.search.spatial import CertificateOutOfTime, TooManyUnrollings, certified_lower_bound
from accelmap.search.unrolling_stall import stall_terms
from accelmap.workload.operator import Operator

# What the result says its bound is.
FULL = "full"          # rule S1 over rule S2's relaxation (spatial.certified_lower_bound)
RELAXED = "relaxed"    # rule S8: one dominating point, when the full bound did not finish in its share of the limit


@dataclass(frozen=True)
class Certificate:
    value: float          # of the objective
    energy: float
    latency: float
    kind: str             # FULL or RELAXED
    seconds: float        # on the clock it was computed against
    why: str = ""         # with RELAXED: why the full bound was not computed


def relaxed_lower_bound(op: Operator, arch: Accelerator, cons: Constraints, chains: dict[str, list[list[int]]],
                        objective: str) -> tuple[float, float, float]:
    """Rule S8: (objective, energy, latency) lower bounds over every mapping the constraints allow, from one point.

    ``bounds.spatial_bounds`` without rule S6's fit masks is non-increasing in every merge and in the PEs (each
    term falls as the merges inside a level grow: fewer fills of the output, fewer MACs served per read, fewer
    cycles of MACs and of port traffic). Every unrolling's merge of an operand at a fan-out level is a product over
    the level's axes that merge it (multicast axes for inputs, every axis for the output) of bounds within each
    axis' size, and its PEs at most the product of every axis' size; an axis the constraints fix contributes its
    fixed bounds. So that point's bound, without the fit masks (which only leave level sets out of a minimum),
    is at most every unrolling's rule S1 bound, hence at most the cost of every mapping."""
    nlev = len(arch.levels)
    pes = 1
    merges = {X.name: np.ones((1, nlev), dtype=np.float64) for X in op.operands}
    for lvl, lv in enumerate(arch.levels):
        if lv.fanout is None:
            continue
        for a in lv.fanout.axes:
            fixed = cons.spatial.get(a.name)
            pes *= a.size if fixed is None else math.prod(b for b in fixed.values())
            for X in op.operands:
                if not (a.multicast or X.is_output):
                    continue
                merges[X.name][0, lvl] *= a.size if fixed is None else \
                    math.prod(b for d, b in fixed.items() if d not in X.dims)
    rows = np.array([float(pes)])
    energy, latency = spatial_bounds(op, arch, merges, rows, chains, None, stall_terms(op, arch, rows, chains))
    value = scalar(objective if objective != "pareto" else "edp", energy, latency)
    return float(value[0]), float(energy[0]), float(latency[0])


def certificate(op: Operator, arch: Accelerator, cons: Constraints, objective: str, *, deadline: float | None = None,
                clock: Callable[[], float] = time.perf_counter) -> Certificate:
    """The full bound if it finishes by ``deadline`` (on ``clock``), else the relaxed one (rule S8)."""
    t0 = clock()
    chains = chain_options(op, keep_options(op, arch, cons))
    try:
        value, energy, latency = certified_lower_bound(op, arch, cons, chains, objective, deadline=deadline,
                                                       clock=clock, floor_past_limit=False)
        kind, why = FULL, ""
    except CertificateOutOfTime:
        value, energy, latency = relaxed_lower_bound(op, arch, cons, chains, objective)
        kind, why = RELAXED, "did not finish within its share of the time limit"
    except TooManyUnrollings:
        value, energy, latency = relaxed_lower_bound(op, arch, cons, chains, objective)
        kind, why = RELAXED, f"would combine more than {spatial.BOUND_COMBINATIONS:,} unrolling vectors"
    return Certificate(value, energy, latency, kind, clock() - t0, why)
