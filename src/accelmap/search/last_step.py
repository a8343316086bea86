"""Rule B19 (docs/mapper.md): the compute of the last step follows a memory port's last load.

The model (``cost/latency.py``, ``latency_rows``) charges, when some double-buffered level keeps the output, every
parent read port that carries loads at least its loads, then one step of compute, then the last output drain: the
port's last load is needed by a step that computes after it. A step is one iteration of the temporal loops above the
deepest level that receives tiles, so it takes the MAC schedule over the number of those iterations, at least the
product of the temporal loops at and below that level over the MACs per cycle. Rule B13 counted the step as zero; on
ascend_like, where layers stream their weights from DRAM, that step is the whole difference between the bound and
the latency of the best mappings (7 of 151,623 cycles on ResNet-18 layer4.0.conv2), so every mapping as good as the
incumbent stayed open and was costed.
"""

from __future__ import annotations

import math

import numpy as np

from accelmap.arch.accelerator import Accelerator
from accelmap.mapping.loopnest import Loop
from accelmap.workload.operator import Operator


def last_step_level(op: Operator, arch: Accelerator, chains: dict[str, list[int]]) -> int | None:
    """The deepest level that receives tiles (the last level of every operand's chain past its first), when the
    model charges the step after a port's loads: some level of the output's chain past its first overlaps its
    transfers with compute under every mapping (it refills during compute; a level that is double-buffered only
    when two tiles fit may not be). None when the rule does not apply."""
    out = chains[op.output.name]
    if not any(arch.levels[c].refills_during_compute for c in out[1:]):
        return None
    deepest = [chain[-1] for chain in chains.values() if len(chain) > 1]
    return max(deepest) if deepest else None


def last_step_cycles(fixed: tuple[Loop, ...], deepest: int, macs_per_cycle: int) -> float:
    """The fewest cycles of one step: the MAC schedule (at least the temporal iterations over the MACs per cycle)
    over the temporal iterations above ``deepest`` is at least the temporal iterations at and below it over the
    MACs per cycle; the fixed temporal loops there are some of them (open levels only add loops, bounds >= 1)."""
    return math.prod(l.bound for l in fixed if not l.spatial and l.level >= deepest) / macs_per_cycle


def last_step_cycles_rows(shared: tuple[Loop, ...], free: dict[int, np.ndarray], deepest: int,
                          macs_per_cycle: int, n: int) -> np.ndarray:
    """``last_step_cycles`` per row of ``node_bounds.open_bounds_rows`` (``free[f]``: rows x dims temporal bounds
    at level f; ``shared``: every other fixed loop, the same for all rows)."""
    out = np.full(n, float(last_step_cycles(shared, deepest, macs_per_cycle)))
    for f, bounds in free.items():
        if f >= deepest:
            out = out * np.prod(bounds, axis=1)
    return out


def stream_period(fixed: tuple[Loop, ...], dims: frozenset[str], c: int) -> tuple[int, bool]:
    """Rule B20: the steps one tile at level c of an operand over ``dims`` stays, from the fixed loops (``fixed`` in
    nest order, outermost first): the product of the innermost run of temporal loops above c whose advance does not
    move it (``cost.latency._period``: loops over other dims, and over its own dims with bound 1), and whether a loop
    that moves it closes the run (then the product is the period; else the run may go on into open levels and the
    product is a lower bound)."""
    out = 1
    for l in reversed(fixed):
        if l.spatial or l.level >= c:
            continue
        if l.dim in dims and l.bound > 1:
            return out, True
        out *= l.bound
    return out, False


def last_tile_tail(op: Operator, fixed: tuple[Loop, ...], level: int, unfixed: int,
                   streams: dict[tuple[int, int, str], float], compute: float) -> float:
    """Rule B20: the least port tail (without the last drain) over the input streams whose level c is fixed (c >=
    ``level``), with the loop order of every level fixed: after the port's last load, the stream's last tile computes
    for its whole period. ``streams``: (parent, child, operand) -> lower bound of that stream's load cycles on the
    parent's read port; ``unfixed``: the unfixed temporal iterations (exact); ``compute``: a lower bound of the MAC
    schedule. 0 when no stream qualifies.

    The model's tail of the port for stream X is at least ``total - inside + share x compute`` (its step plus the
    period's other steps, each at least compute's share), ``share`` = X's period over the run's tiles of c, and
    ``inside`` (the other streams' loads that may run beside X's last tile) at most ``share x`` the loads of every
    other stream, and zero for a stream whose own share is at least X's. Linear in ``share``: the least over the
    range ``share`` may take (one value when the period is closed) is a bound."""
    nest = sorted(fixed, key=lambda l: l.level)       # stable: each level's own order kept, outermost level first
    tiles: dict[int, int] = {}

    def share(name: str, c: int) -> tuple[float, bool]:
        if c not in tiles:
            tiles[c] = unfixed * math.prod(l.bound for l in nest if not l.spatial and l.level < c)
        if tiles[c] <= 1:
            return math.inf, True        # the tile never changes: no period (the model gives it no term)
        period, closed = stream_period(tuple(nest), op.operand(name).dims, c)
        return period / tiles[c], closed

    best = 0.0
    for (p, c, name), t in streams.items():
        if c < level or op.operand(name).is_output:
            continue
        s, closed = share(name, c)
        if not math.isfinite(s):
            continue
        others = [(k, v) for k, v in streams.items() if k[0] == p and k != (p, c, name)]
        if closed:
            kept = 0.0
            for (_, ck, other), v in others:
                if ck >= level and share(other, ck)[0] >= s:
                    continue            # its period is no shorter than X's: none of its loads runs beside the last tile
                kept += v
            rest = sum(v for _, v in others)
            got = t + rest - s * kept + s * compute
        else:
            rest = sum(v for _, v in others)
            got = min(t + rest - s * rest + s * compute, t + compute)
        best = max(best, got)
    return best


def stream_load_cycles(arch: Accelerator, name: str, loads, w: int) -> dict[tuple[int, int, str], float]:
    """Rule B20's streams of one operand: (parent, child, operand) -> its loads' cycles on the parent's read port,
    spread over all instances (rule B13's per-port sum, kept apart per child). ``loads``: (parent, child, elements
    in, parent-side elements)."""
    out = {}
    for p, c, _, parent_side in loads:
        bw = arch.levels[p].read_bw_bits
        if bw is not None:
            out[(p, c, name)] = parent_side * w / arch.levels[p].instances / bw
    return out
