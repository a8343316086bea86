"""One entry point for mapping an operator: pick a strategy, return the best mappings."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from accelmap.arch.accelerator import Accelerator
from accelmap.errors import SpecError
from accelmap.search.exhaustive import search_exhaustive, space_size
from accelmap.search.objective import Found, check_objective
from accelmap.search.optimal import SearchStats, search_optimal
from accelmap.search.space import Constraints
from accelmap.workload.operator import Operator

STRATEGIES = ("auto", "optimal", "exhaustive", "heuristic", "random")
# Spaces up to this many tilings x bypass choices are searched exactly by default
# (the exact search visits a few thousand nodes per second), within AUTO_EXACT_SECONDS.
EXACT_SPACE_LIMIT = 30_000
AUTO_EXACT_SECONDS = 30.0


@dataclass
class MapResult:
    operator: str
    accelerator: str
    objective: str
    strategy: str
    results: list[Found]
    stats: SearchStats
    proven_optimal: bool          # the search covered the whole space (exhaustively or by safe pruning)
    notes: list[str] = field(default_factory=list)

    @property
    def best(self) -> Found | None:
        return self.results[0] if self.results else None


def map_operator(op: Operator, arch: Accelerator, objective: str = "edp", *, k: int = 1,
                 constraints: Constraints | None = None, strategy: str = "auto",
                 time_limit: float | None = None, seed: int = 0) -> MapResult:
    """Best ``k`` mappings of ``op`` on ``arch`` by ``objective`` (or the Pareto front).

    Raises MappingError when the operator cannot be mapped at all (precision not
    supported, a buffer too small for one element of each operand).
    """
    check_objective(objective)
    if strategy not in STRATEGIES:
        raise SpecError(f"unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}", where="--strategy")
    cons = constraints or Constraints()
    notes: list[str] = []
    padded = any(op.sizes[d] % b for ax in cons.spatial.values() for d, b in ax.items() if d in op.sizes)
    if strategy in ("optimal", "exhaustive") and padded:
        raise SpecError(f"the {strategy} search covers perfect factorizations only, and the spatial constraints "
                        f"pad {op.name}; use --strategy heuristic", where="--strategy")
    if strategy == "auto":
        strategy = "optimal" if not padded and space_size(op, arch) <= EXACT_SPACE_LIMIT else "heuristic"
        if strategy == "optimal" and time_limit is None:
            time_limit = AUTO_EXACT_SECONDS
    if strategy == "exhaustive":
        res, stats = search_exhaustive(op, arch, objective, k=k, constraints=cons)
        proven = True
    elif strategy == "optimal":
        res, stats = search_optimal(op, arch, objective, k=k, constraints=cons, time_limit=time_limit)
        proven = not stats.extra.get("timed_out", False) and not stats.extra.get("orders_restricted", False)
        if stats.extra.get("timed_out"):
            notes.append(f"time limit {time_limit:g} s reached: best found, optimality not proven")
        if stats.extra.get("orders_restricted"):
            notes.append("a level had more loops than orders are enumerated for: optimality not proven")
    elif strategy == "heuristic":
        from accelmap.search.heuristic import search_heuristic
        res, stats = search_heuristic(op, arch, objective, k=k, constraints=cons, time_limit=time_limit, seed=seed)
        proven = False
    else:
        from accelmap.search.baselines import search_random
        res, stats = search_random(op, arch, objective, k=k, constraints=cons, seed=seed)
        proven = False
    if not res:
        notes.append("no valid mapping: every candidate overflowed a buffer or broke a constraint")
    return MapResult(op.name, arch.name, objective, strategy, res, stats, proven, notes)
