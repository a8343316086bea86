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
