"""The least of each load term of an open single-buffered level, over its tile shapes and the cases above it.

Rule B27 (``open_level_refills``) takes, per open level c, the least over every tile shape that fits c and every case
and order of the loops above it (``refill_cases``) of c's whole stall. Rules B41-B43 of docs/mapper.md add terms of
*different* open levels (loads of several levels queued on one port, the output's stores from several levels in
sequence, an operand's load into a level after its load into the parent), and the least of a sum over levels is at
least the sum of each level's least, so each level contributes the least of its own part alone. This module computes
those parts, per level, in one pass over the level's shapes and cases:

* ``port[p]``: the loads into c from parent p whose pace is p's read port (rule B12's pairs, ``ctx.port_paced``),
  their parent side summed over the operands (rule B41);
* ``store`` and ``store_reload``: the output's stores from c, and those stores followed by its reloads into c
  (rule B42);
* ``suffix[X]``: for an input X, c's loads of X and of every operand c's load unit takes after X (rule B43);
  ``own[X]``: c's load of X alone (rule B43, where c is the parent).

Each per-row value is one of rule B27's own terms (``open_level_refills.load_sides``) at the case's counts, so it is a
lower bound of what every mapping with that tile at c and loops above c in that case spends on it, summed over the run
(rule B27's argument, term by term). Not with imperfect tiles (rule I3), as B27.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from accelmap.search.open_level_refills import level_cached, load_sides, open_level_shapes, refill_cases
from accelmap.workload.operator import Operand


@dataclass(frozen=True)
class LevelLoads:
    """One open level's least load terms (cycles), each over every fitting tile shape and every case above it."""
    port: dict[int, float]        # parent level -> its read port's paced loads into this level
    store: float                  # the output's stores from this level (0 where it keeps no output)
    store_reload: float           # ... followed by its reloads into this level
    own: dict[str, float]         # input -> this level's load of it
    suffix: dict[str, float]      # input -> this level's loads of it and of every operand its load unit takes after it


def unit_order(kept: tuple[Operand, ...]) -> list[Operand]:
    """The order in which a level's load unit takes its operands at a tile change in the cost model
    (``cost.latency._transition_time`` sorts a level's loads by whether they are the output, stably over the
    operator's operands): the inputs in the operator's order, then the output."""
    return [X for X in kept if not X.is_output] + [X for X in kept if X.is_output]


_LOADS: dict[tuple, LevelLoads | None] = {}


def open_loads(ctx, c: int) -> LevelLoads | None:
    """``level_loads`` of open level c where c never overlaps its loads with compute (rule B9's levels), kept on the
    context too (a node bound reads it per level); None elsewhere."""
    if c not in ctx.serial_fill:
        return None
    mine = ctx.open_loads
    if c not in mine:
        mine[c] = level_loads(ctx, c)
    return mine[c]


def level_loads(ctx, c: int) -> LevelLoads | None:
    """``LevelLoads`` of open level c (cached by what it depends on, ``level_cached``); None where c has no shape to
    bound (the rules then add nothing for c)."""
    return level_cached(_LOADS, ctx, c, _level_loads)


def _level_loads(ctx, c: int) -> LevelLoads | None:
    shapes = open_level_shapes(ctx, c)
    if shapes is None:
        return None
    n = len(shapes.grid)
    order = unit_order(shapes.kept)
    parent = {X.name: ctx.chains[X.name][ctx.chains[X.name].index(c) - 1] for X in order}
    least: dict[tuple, np.ndarray] = {}

    def take(key: tuple, rows: np.ndarray, value: Any) -> None:
        cur = least.get(key)
        if cur is None:
            cur = least[key] = np.full(n, np.inf)
        least[key] = np.where(rows, np.minimum(cur, value), cur)

    for rows, counts in refill_cases(ctx, c, shapes):
        sides = {X.name: [np.broadcast_to(np.asarray(v, dtype=np.float64), (n,))
                          for v in load_sides(ctx, X, parent[X.name], c, counts[X.name])] for X in order}
        ports: dict[int, Any] = {}
        for X in order:
            p = parent[X.name]
            if (p, c) in ctx.port_paced:
                ports[p] = ports.get(p, 0.0) + sides[X.name][1]
        for p, t in ports.items():
            take(("port", p), rows, t)
        after: Any = 0.0
        for X in reversed(order):
            load, _, store = sides[X.name]
            after = after + load
            if X.is_output:
                take(("store",), rows, store)
                take(("store_reload",), rows, store + load)
            else:
                take(("own", X.name), rows, load)
                take(("suffix", X.name), rows, after)

    def value(key: tuple) -> float:
        # (as ``least_over_cases``: a row with no case possible leaves the term at 0)
        got = least.get(key)
        return float(got.min()) if got is not None and np.isfinite(got).all() else 0.0

    names = [X.name for X in order if not X.is_output]
    return LevelLoads({p: value(("port", p)) for p in {k[1] for k in least if k[0] == "port"}},
                      value(("store",)), value(("store_reload",)),
                      {x: value(("own", x)) for x in names}, {x: value(("suffix", x)) for x in names})
