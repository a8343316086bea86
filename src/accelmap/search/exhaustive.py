"""Exhaustive mapper: the reference the pruned mapper is proven against.

Enumerates every perfect factorization of every dimension over every slot
(each level's temporal loops and each fan-out axis), every bypass choice and
every order of every level's temporal loops, and costs each valid mapping
with the exact model. With ``imperfect``, every imperfect factorization instead
(any bounds covering the dimension, the last tile partial; ``imperfect_tiles``). It shares no pruning with ``optimal.py``. Use it on
small operators only: the space is the product of all those choices.
"""

from __future__ import annotations

import itertools
import math
import time

from accelmap.arch.accelerator import Accelerator
from accelmap.cost.model import evaluate
from accelmap.errors import MappingError
from accelmap.mapping.loopnest import Loop, Mapping
from accelmap.mapping.sampling import divisors, prime_factors, slots
from accelmap.search.imperfect_tiles import imperfect_factorizations, imperfect_mode
from accelmap.search.objective import collector
from accelmap.search.optimal import SearchStats
from accelmap.search.space import Constraints, keep_options
from accelmap.workload.operator import Operator


def ordered_factorizations(n: int, parts: int) -> list[tuple[int, ...]]:
    if parts == 1:
        return [(n,)]
    return [(d,) + rest for d in divisors(n) for rest in ordered_factorizations(n // d, parts - 1)]


def count_factorizations(n: int, parts: int) -> int:
    """len(ordered_factorizations(n, parts)) without listing them: each prime's exponent e
    is spread over the parts independently, C(e + parts - 1, parts - 1) ways."""
    exps: dict[int, int] = {}
    for p in prime_factors(n):
        exps[p] = exps.get(p, 0) + 1
    return math.prod(math.comb(e + parts - 1, parts - 1) for e in exps.values())


def space_size(op: Operator, arch: Accelerator) -> int:
    """Tilings x bypass choices (orders not counted): what the exhaustive mapper walks."""
    sl = slots(arch)
    tilings = math.prod(count_factorizations(s, len(sl)) for _, s in op.dims)
    return tilings * len(keep_options(op, arch, Constraints()))


def search_exhaustive(op: Operator, arch: Accelerator, objective: str = "edp", *, k: int = 1,
                      constraints: Constraints | None = None, limit: int = 5_000_000,
                      time_limit: float | None = None, imperfect: bool | str = False):
    cons = constraints or Constraints()
    sl = slots(arch)
    stats = SearchStats()
    t0 = time.perf_counter()
    best = collector(objective, k)
    deadline = None if time_limit is None else t0 + time_limit
    mode = imperfect_mode(imperfect)
    spatial_slots = tuple(axis is not None for _, axis, _ in sl) if mode == "spatial" else None
    per_dim = [imperfect_factorizations(s, len(sl), spatial_slots) if mode else ordered_factorizations(s, len(sl))
               for _, s in op.dims]
    names = op.dim_names
    for keep in keep_options(op, arch, cons):
        if stats.extra.get("timed_out"):
            break
        for combo in itertools.product(*per_dim):
            if deadline is not None and time.perf_counter() > deadline:
                stats.extra["timed_out"] = True
                break
            per_level_t: dict[int, list[Loop]] = {}
            spatial: list[Loop] = []
            for d, facts in zip(names, combo, strict=True):
                for (lv, axis, _), b in zip(sl, facts, strict=True):
                    if b == 1:
                        continue
                    if axis is None:
                        per_level_t.setdefault(lv, []).append(Loop(d, b, lv))
                    else:
                        spatial.append(Loop(d, b, lv, axis))
            if cons.spatial:
                got: dict[str | None, dict[str, int]] = {}
                for l in spatial:
                    got.setdefault(l.axis, {})[l.dim] = l.bound
                if any(got.get(ax, {}) != {d: b for d, b in want.items() if b > 1} for ax, want in cons.spatial.items()):
                    continue
            if cons.min_utilization and math.prod(l.bound for l in spatial) < cons.min_utilization * arch.num_pes:
                continue
            levels = range(len(arch.levels))
            perms = [list(itertools.permutations(per_level_t.get(i, []))) for i in levels]
            for orders in itertools.product(*perms):
                loops: list[Loop] = []
                for i in levels:
                    loops.extend(orders[i])
                    loops.extend(l for l in spatial if l.level == i)
                if not _orders_allowed(arch, orders, cons):
                    continue
                m = Mapping(tuple(loops), keep)
                try:
                    res = evaluate(op, arch, m, check=True)
                except MappingError:
                    continue
                stats.evaluated += 1
                if stats.evaluated > limit:
                    raise MappingError(f"exhaustive search of {op.name} exceeds {limit} mappings; "
                                       "use the pruned mapper")
                best.offer(res, m)
    stats.seconds = time.perf_counter() - t0
    return best.results(), stats


def _orders_allowed(arch: Accelerator, orders, cons: Constraints) -> bool:
    for i, order in enumerate(orders):
        name = arch.levels[i].name
        dims = tuple(l.dim for l in order)
        fixed = cons.orders.get(name)
        if fixed is not None:
            pos = [fixed.index(d) for d in dims if d in fixed]
            if pos != sorted(pos):
                return False
        if dims in cons.forbid_orders.get(name, ()):
            return False
    return True
