"""Rule B73 (docs/mapper.md): every drain of the output from a double-buffered level follows the prologue.

The model (``cost/latency.py``, ``latency_rows``) bounds the run of a level c that overlaps its transfers with compute
and drains the output by c's store unit: its drains start after the first output tile computes, so the run inside
the prologue and epilogue is at least ``store unit(c) - epilogue(c) + first``, and the latency adds the prologue and
epilogue of every level on top. ``first`` is the run's compute over c's output tiles, at least the temporal
iterations at and below c over the MACs per cycle (the tiles are at most the iterations above c). Latency is
therefore at least c's whole store time plus every other prologue and epilogue term plus that first tile. Rules B10 and B13 counted the output's drains only as port traffic (no prologue added) or as the last
one alone; on ascend_like ResNet-18 conv1, whose output streams from L0C to DRAM for 50,176 cycles behind a prologue
of 637 (L0A's and L0B's first tiles), that prologue was the bound's whole gap with every loop below DRAM fixed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from accelmap.arch.accelerator import Accelerator


def drain_lead_terms(ctx, terms: list[tuple[Any, int, Any, Any]],
                     step_at: Callable[[int], Any]) -> list[tuple[int, int, Any, Any]]:
    """Per level c of the output's chain that rule B10 gives an epilogue term: (c, its parent p in the chain, the sum
    of B10's other terms plus the compute of c's first output tile, the mask of rows where the model surely overlaps
    c's transfers). ``ctx``: the node's ``BoundContext``; ``terms``: its ``edge_cycle_terms`` at the node (numbers or
    rows); ``step_at(c)``: the temporal iterations at and below c over the MACs per cycle (``last_step.last_step_cycles``
    with c as the deepest level), at least the first tile's compute."""
    if not ctx.drains_after_prologue:
        return []
    total: Any = 0.0
    for _, _, term, _ in terms:
        total = total + term
    chain = ctx.chains[ctx.op.output.name]
    return [(c, chain[chain.index(c) - 1], total - term + step_at(c), ok) for X, c, term, ok in terms if X.is_output]


def drains_after_prologue_cycles(arch: Accelerator, leads: list[tuple[int, int, Any, Any]],
                                 bits: list[tuple[int, str, Any]]) -> Any:
    """The latency rule B73 bounds: over ``leads`` (``drain_lead_terms``), the output's store time from c (its drains
    over c's read port, its updates at p over p's write port, each spread over all instances: the slower side) plus
    the other prologue and epilogue terms. ``bits``: the output's (level, kind, bits) of one case of the node bound,
    lower bounds of the model's counts at its fewest bits. 0 where no level qualifies."""
    drains = {lv: b for lv, kind, b in bits if kind == "drains"}
    updates = {lv: b for lv, kind, b in bits if kind == "updates"}
    best: Any = 0.0
    for c, p, others, ok in leads:
        C, P = arch.levels[c], arch.levels[p]
        store: Any = 0.0
        if C.read_bw_bits is not None and c in drains:
            store = np.maximum(store, drains[c] / C.instances / C.read_bw_bits)
        if P.write_bw_bits is not None and p in updates:
            store = np.maximum(store, updates[p] / P.instances / P.write_bw_bits)
        got = store + others
        best = np.maximum(best, got if ok is True else np.where(ok, got, 0.0))
    return best
