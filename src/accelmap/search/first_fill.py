"""Rules B56 and B59 (docs/mapper.md): the first tiles' loads into single-buffered levels come before any compute and
before any store of the output, so their time adds to the output's stores from single-buffered levels (B56); the
output's last drains from single-buffered levels come after the last compute and after every load, so their time adds
to any level's loads (B59).

The model (``cost.latency._single_stall``) charges the single-buffer stall as three parts that add: the first tiles'
loads (a block of its own, timed by ``_transition_time`` with loads only: the first tiles only load), every later
tile change (each timed the same way), and the output's last drains after the last compute (summed over the
single-buffered output levels). So the stall is at least the first block plus every store of the output from a
single-buffered level (each store is in some later change or in the last drains, and within one change the stores
drain one after another, ``_transition_time``), which is rule B16's store chain summed over all such levels. The
first block is at least any one level's loads of its first tiles: a level's load unit takes its loads one after
another, each at least its setup plus its data over the slower of the child's write port and the parent's read port.

Rules B9 and B16 each take the largest of such sums without the split: a level's loads and another level's stores
may share one change in general, so their times were not added. Only the first block is told apart here, because
no store is in it.

A first tile's data: the model moves ``full`` elements (X's tile at c, the first position's) at ``X.bits x
fills / (instances used x elements counted)`` bits each. Where c and its parent have one instance each, that factor
is ``X.bits`` exactly (the one instance receives every fill), so the rule takes only such levels (on edge_tpu_like the
activation memory and the weight memory, fed by DRAM) and X's fewest bits. At a node the tile is ``tile_at(X, c)``:
exact once c is fixed, a lower bound before (tiles only grow with loops). Setup cycles are left out (at least 0).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from itertools import pairwise
from typing import Any

import numpy as np

from accelmap.arch.accelerator import Accelerator
from accelmap.cost.nest_rows import fewest_bits
from accelmap.workload.operator import Operator


def first_fill_terms(op: Operator, arch: Accelerator, chains: dict[str, list[int]], serial_fill: frozenset[int],
                     loose: frozenset[str] | set[str]) -> list[tuple[str, int, float]]:
    """Per input X and single-buffered level c of X's chain whose parent p feeds it one to one (c and p one instance
    each): (X's name, c, cycles per element of X's first tile at c: X's fewest bits over the slower of c's write port
    and p's read port)."""
    terms = []
    for X in op.operands:
        if X.is_output or X.name in loose:
            continue
        w = fewest_bits(X, arch)
        for P, C, c in _one_to_one_links(arch, chains[X.name], serial_fill):
            per = w * _cycles_per_bit(C.write_bw_bits, P.read_bw_bits)
            if per > 0:
                terms.append((X.name, c, per))
    return terms


def first_fill_cycles(op: Operator, terms: list[tuple[str, int, float]], tile_at) -> Any:
    """The least time of the first tiles' loads: the largest over levels of the sum of their terms' first tiles.
    ``tile_at(X, c)``: X's tile at c (a number, or an array of rows as ``node_bounds`` asks)."""
    by_level: dict[int, Any] = {}
    for name, c, per in terms:
        by_level[c] = by_level.get(c, 0.0) + tile_at(op.operand(name), c) * per
    out: Any = 0.0
    for t in by_level.values():
        out = np.maximum(out, t)
    return out


def last_drain_terms(op: Operator, arch: Accelerator, chains: dict[str, list[int]], serial_fill: frozenset[int],
                     loose: frozenset[str] | set[str],
                     spatial_cap: Sequence[dict[str, int] | None] | None = None,
                     spread: bool = True) -> list[tuple[int, float]]:
    """Rule B59: per single-buffered level c of the output's chain whose parent p it drains to one to one (c and p one
    instance each): (c, cycles per element of the output's last tile at c: its fewest bits over the slower of c's
    read port and p's write port). Rule B70: the same for every other single-buffered level c of the chain, the
    parent's side taking the distinct outputs of ``spread_drains``' instances of c per instance of p (``spatial_cap``:
    per level, the fan-out's fixed unrolling, dim -> bound, or None where it is open). ``spread=False``: rule B59's
    terms alone."""
    O = op.output
    if O.name in loose:
        return []
    w = fewest_bits(O, arch)
    terms = []
    for P, C, c in _one_to_one_links(arch, chains[O.name], serial_fill):
        per = w * _cycles_per_bit(C.read_bw_bits, P.write_bw_bits)
        if per > 0:
            terms.append((c, per))
    if not spread:
        return terms
    for p, c in pairwise(chains[O.name]):
        P, C = arch.levels[p], arch.levels[c]
        if c not in serial_fill or (P.instances == 1 and C.instances == 1):
            continue
        per = w * max(_cycles_per_bit(C.read_bw_bits), spread_drains(op, spatial_cap, p, c) * _cycles_per_bit(
            P.write_bw_bits))
        if per > 0:
            terms.append((c, per))
    return terms


def spread_drains(op: Operator, spatial_cap: Sequence[dict[str, int] | None] | None, p: int, c: int) -> int:
    """Rule B70: the fewest instances of level c below one instance of its parent p whose output tiles are distinct
    (``distinct_instances`` over the output's dims)."""
    return distinct_instances(op, spatial_cap, frozenset(op.output.dims), p, c)


def distinct_instances(op: Operator, spatial_cap: Sequence[dict[str, int] | None] | None, dims: frozenset[str],
                       p: int, c: int) -> int:
    """The fewest instances of level c below one instance of its parent p that hold distinct data of an operand that
    indexes ``dims`` each by itself (distinct values of such a dim are distinct elements): the product of the fixed
    fan-outs' bounds between p and c (levels p to c - 1) over ``dims``, counting a dim only where its whole unrolling
    divides it (every lane then busy); 1 where nothing is known (at least one instance)."""
    if spatial_cap is None:
        return 1
    total: dict[str, int] = {}
    for cap in spatial_cap:
        for d, b in (cap or {}).items():
            total[d] = total.get(d, 1) * b
    out = 1
    for cap in spatial_cap[p:c]:
        for d, b in (cap or {}).items():
            if d in dims and op.sizes[d] % total[d] == 0:
                out *= b
    return out


def first_queue_terms(op: Operator, arch: Accelerator, chains: dict[str, list[int]], serial_fill: frozenset[int],
                      loose: frozenset[str] | set[str], spatial_cap: Sequence[dict[str, int] | None] | None,
                      port_paced: Collection[tuple[int, int]]) -> list[tuple[str, int, float, int]]:
    """Rule B71: per input X and single-buffered level c of X's chain whose load from its parent p is paced by p's
    read port (rule B12's ``port_paced``): (X's name, c, cycles per element of X's first tile at c on p's port, p).
    Per element the port carries the distinct data of ``distinct_instances`` instances of c (over the dims X indexes
    by themselves), at X's fewest bits over p's read bandwidth."""
    terms = []
    for X in op.operands:
        if X.is_output or X.name in loose:
            continue
        w = fewest_bits(X, arch)
        plain = frozenset(ix.terms[0][0] for ix in X.indices if len(ix.terms) == 1)
        for p, c in pairwise(chains[X.name]):
            P = arch.levels[p]
            if c not in serial_fill or (p, c) not in port_paced or P.read_bw_bits is None:
                continue
            terms.append((X.name, c, w * distinct_instances(op, spatial_cap, plain, p, c) / P.read_bw_bits, p))
    return terms


def first_block_cycles(op: Operator, terms: list[tuple[str, int, float]],
                       queue_terms: Sequence[tuple[str, int, float, int]], tile_at) -> Any:
    """The least time of the first tiles' loads: rule B56's (``first_fill_cycles``) and rule B71's, the largest over
    parent ports of the sum of ``queue_terms``' first tiles on that port (pass none where tiles may be partial)."""
    out = first_fill_cycles(op, terms, tile_at)
    by_port: dict[int, Any] = {}
    for name, c, per, p in queue_terms:
        by_port[p] = by_port.get(p, 0.0) + tile_at(op.operand(name), c) * per
    for t in by_port.values():
        out = np.maximum(out, t)
    return out


def _one_to_one_links(arch: Accelerator, chain: list[int], serial_fill: frozenset[int]):
    """(parent level, level, its index) along an operand's chain where the level is single-buffered (in
    ``serial_fill``) and it and its parent have one instance each."""
    for p, c in pairwise(chain):
        P, C = arch.levels[p], arch.levels[c]
        if c in serial_fill and P.instances == 1 and C.instances == 1:
            yield P, C, c


def _cycles_per_bit(*bandwidths: float | None) -> float:
    """The slowest of the ports' cycles per bit (a port with no bandwidth given takes no time)."""
    return max(0.0 if bw is None else 1 / bw for bw in bandwidths)


def last_drain_cycles(op: Operator, terms: list[tuple[int, float]], tile_at) -> Any:
    """Rule B59: the least time of the output's last drains, summed over the levels of ``terms`` (the model adds them
    after the last compute), with whole tiles: the last tile is the tile ``tile_at(output, c)``."""
    out: Any = 0.0
    for c, per in terms:
        out = out + tile_at(op.output, c) * per
    return out
