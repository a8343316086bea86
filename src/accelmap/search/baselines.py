"""Random sampling with a victory condition, the way Timeloop's random mapper stops.

Samples valid mappings (imperfect factors included when asked) and stops after
``victory`` consecutive samples without improvement, or ``max_samples``.
"""

from __future__ import annotations

import random
import time

from accelmap.arch.accelerator import Accelerator
from accelmap.cost.model import evaluate
from accelmap.errors import MappingError
from accelmap.mapping.sampling import random_mapping
from accelmap.mapping.validate import check_precision
from accelmap.search.objective import collector, scalar
from accelmap.search.optimal import SearchStats
from accelmap.search.space import Constraints
from accelmap.workload.operator import Operator


def search_random(op: Operator, arch: Accelerator, objective: str = "edp", *, k: int = 1,
                  constraints: Constraints | None = None, seed: int = 0, victory: int = 500,
                  max_samples: int = 20_000, imperfect: bool = False, time_limit: float | None = None):
    cons = constraints or Constraints()
    cons.check(op, arch)
    check_precision(op, arch)
    rng = random.Random(seed)
    stats = SearchStats()
    best = collector(objective, k)
    t0 = time.perf_counter()
    best_val, since = float("inf"), 0
    deadline = None if time_limit is None else t0 + time_limit
    for _ in range(max_samples):
        if deadline is not None and time.perf_counter() > deadline:
            stats.extra["timed_out"] = True
            break
        try:
            m = random_mapping(op, arch, rng, imperfect=imperfect, check_fit=True, tries=50)
        except MappingError:
            stats.extra["failed_draws"] = stats.extra.get("failed_draws", 0) + 1
            since += 1
            if since >= victory:
                break
            continue
        if cons.violation(m, arch) is not None:
            stats.extra["rejected_by_constraints"] = stats.extra.get("rejected_by_constraints", 0) + 1
            since += 1
            if since >= victory:
                break
            continue
        r = evaluate(op, arch, m, check=False)
        stats.evaluated += 1
        best.offer(r, m)
        v = scalar(objective if objective != "pareto" else "edp", r.energy_total, r.latency)
        if v < best_val:
            best_val, since = v, 0
        else:
            since += 1
            if since >= victory:
                break
    stats.seconds = time.perf_counter() - t0
    return best.results(), stats
