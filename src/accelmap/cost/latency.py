"""Latency of a mapping from its access counts.

Compute cycles are the product of all temporal loop bounds (the static
schedule: a partial last tile still occupies its slots). A level's transfer
cycles are its per-instance read and write traffic over its bandwidth.
Double-buffered levels overlap transfers with compute; filling a
single-buffered level stalls the compute below it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from accelmap.arch.accelerator import Accelerator
from accelmap.mapping.loopnest import Mapping
from accelmap.workload.operator import Operator


@dataclass(frozen=True)
class LatencyTerms:
    compute_cycles: int
    transfer_cycles: dict[str, float]
    stall_cycles: float
    latency: float


def latency_terms(op: Operator, arch: Accelerator, m: Mapping, raw: dict) -> LatencyTerms:
    """``raw`` maps (level index, operand name) to Counts."""
    nlev = len(arch.levels)
    bits = {o.name: o.bits for o in op.operands}
    rd = [0.0] * nlev
    wr = [0.0] * nlev
    fill = [0.0] * nlev
    for (i, name), c in raw.items():
        rd[i] += (c.reads + c.drains) * bits[name]
        wr[i] += (c.fills + c.updates) * bits[name]
        fill[i] += c.fills * bits[name]
    compute = math.ceil(m.temporal_product() / arch.compute.macs_per_cycle)
    transfer: dict[str, float] = {}
    stall = 0.0
    for i, lv in enumerate(arch.levels):
        n = lv.instances
        t_r = 0.0 if lv.read_bw_bits is None else rd[i] / n / lv.read_bw_bits
        t_w = 0.0 if lv.write_bw_bits is None else wr[i] / n / lv.write_bw_bits
        transfer[lv.name] = max(t_r, t_w)
        if not lv.double_buffered and lv.write_bw_bits is not None and i > 0:
            stall += fill[i] / n / lv.write_bw_bits
    latency = max(compute + stall, max(transfer.values(), default=0.0))
    return LatencyTerms(compute, transfer, stall, latency)
