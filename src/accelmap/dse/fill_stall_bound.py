"""Rule F of the co-search: the certified bound taken per bypass choice, so that energy and stalls pair up.

The mapper's certified bound (``search.spatial.certified_lower_bound``) bounds energy and latency each by its least
value over every bypass choice, and the two least values may come from different choices: the choice that keeps an
operand out of a single-buffered level (streaming it from above) has no fill stalls, while the one that keeps it
there has the cheaper accesses. Within one choice both bounds hold for every mapping that makes that choice, and the
latency bound there includes the stalls single-buffered levels force (rule S7 of docs/mapper.md,
``search.unrolling_stall``: a level that neither overlaps its loads with compute nor streams a single tile stops
compute while it loads, so latency >= MAC schedule + those loads). docs/dse.md gives the argument. So

    objective >= min over bypass choices of objective(max(energy bound, energy_floor), latency bound),

each bound taken over that choice alone (``certified_lower_bound`` with one level set per operand), ``energy_floor``
a bound on energy that holds whatever the choice (rule C's). The stall term is the search's own (one definition):
this module only regroups the certified bound by choice.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from accelmap.arch.accelerator import Accelerator
from accelmap.search.bounds import chain_options
from accelmap.search.objective import scalar
from accelmap.search.space import Constraints, keep_options
from accelmap.search.spatial import certified_lower_bound
from accelmap.search.unrolling_stall import choice_stall_cycles
from accelmap.workload.operator import Operator


@dataclass(frozen=True)
class FillStallBound:
    value: float                 # lower bound of the objective over every mapping (at least rule H's)
    h_value: float               # rule H's bound alone (the certified bound over every bypass choice)
    stall_cycles: float          # the stall bound (rule S7's) of the bypass choice that gives ``value``
    choices: int                 # bypass choices (one chain per operand) the minimum ran over


def fill_stall_bound(op: Operator, arch: Accelerator, objective: str,
                     cons: Constraints | None = None, energy_floor: float = 0.0) -> FillStallBound:
    """Rule F's bound of ``objective`` over every mapping of ``op`` on ``arch``. ``energy_floor``: a bound on energy
    that holds for every mapping whatever its bypass choice (rule C's), applied within each choice."""
    cons = cons or Constraints()
    options = chain_options(op, keep_options(op, arch, cons))
    h_value = certified_lower_bound(op, arch, cons, options, objective)[0]
    if objective == "energy":
        return FillStallBound(max(h_value, energy_floor), h_value, 0.0, 0)
    best, best_chains, n = math.inf, None, 0
    for combo in itertools.product(*(options[X.name] for X in op.operands)):
        chains = {X.name: list(ch) for X, ch in zip(op.operands, combo, strict=True)}
        obj, energy, latency = certified_lower_bound(op, arch, cons, {k: [v] for k, v in chains.items()}, objective)
        n += 1
        if not math.isfinite(obj):       # no mapping keeps the operands so
            continue
        value = max(obj, scalar(objective, max(energy, energy_floor), latency))
        if value < best:
            best, best_chains = value, chains
    if best_chains is None:
        return FillStallBound(h_value, h_value, 0.0, n)
    return FillStallBound(max(best, h_value), h_value, choice_stall_cycles(op, arch, best_chains), n)
