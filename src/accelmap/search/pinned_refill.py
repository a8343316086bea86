"""Rule B23 of docs/mapper.md: the refills of an open level held to its fixed tile count for energy, per case.

Rule B17 finds, at a node, open levels c that can hold no more of an operand X than its fixed tile; in the cases
where X gets every run of the fixed nest (the innermost unfixed temporal loop runs over a dim X uses as a plain
index), X enters c at least ``T x instances x tile`` times. B17 let that count into the latency terms only: the
energy keeps B1's footprint count at c, and rule B8 adds a least refill of every open level over every tile shape
and every case, so adding B17's count as well would count c's refills twice. But B8's least is over every case,
and is 0 where some case refetches nothing at c (edge_tpu_like's one-element registers: the case where the weights
move leaves the partial sums in place, and the other way round), while B17's count holds in its case only.

Per case, the energy of c's boundary (from its parent p into c) is at least both B1's charge plus B8's least refill
of c, and B1's charge plus what B17's count costs there beyond B1's. Both extras bound the same quantity (the energy
at c's boundaries beyond B1's charge), so their larger one does: per open level c, the node's energy in the case
takes ``max(B8 of c, sum over the operands B17 pins at c of their extra)`` instead of B8 alone. With rule B22
(``case_pairs``) the case's energy and latency then stay paired, which is where this pays: the case where the
partial sums move has the least latency and now its own (large) energy.

The charge of a boundary's counts is B1's: fills and drains at c, reads and updates at p, each at the level's
energy per access scaled to X's fewest bits, plus rule B14's network energy of the fills and drains.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def boundary_charge(ctx, X, c: int, moved: dict[tuple[int, str], Any]) -> Any:
    """Energy of the counts ``moved`` ((level, kind) -> count: c's fills and drains, its parent's reads and
    updates) at the boundary into level c, as ``BoundContext.lower_bound`` charges them (numbers or rows)."""
    out: Any = 0.0
    for (lv, kind), v in moved.items():
        L = ctx.arch.levels[lv]
        out = out + v * (L.read_energy_pj if kind in ("reads", "drains") else L.write_energy_pj) * ctx.scale[(lv, X.name)]
    unit = ctx.net_unit[(X.name, c)]
    if unit:
        out = out + (moved[(c, "fills")] + moved.get((c, "drains"), 0.0)) * unit
    return out


def open_levels_energy(floors: dict[int, float], extras: list[dict[int, Any]]) -> Any:
    """Per open level c, the larger of rule B8's least refill (``floors``) and the summed B17 extras of the operands
    pinned at c (``extras``, one dict per operand); summed over the open levels."""
    pinned: dict[int, Any] = {}
    for got in extras:
        for c, v in got.items():
            pinned[c] = pinned.get(c, 0.0) + v
    total: Any = 0.0
    for c, floor in floors.items():
        v = pinned.get(c)
        if v is None:
            total = total + floor
        elif isinstance(v, np.ndarray):
            total = total + np.maximum(v, floor)
        else:
            total = total + max(v, floor)
    return total
