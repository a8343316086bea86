"""Energy of one operand at one memory level: the one definition the model of a single mapping
(``model.evaluate``) and the batch model (``batch.batch_energy``) both call.

Reads and drains cost the level's read energy, fills and updates its write energy, each per word
of the level's width and scaled by the bits moved; finished outputs move at the output stage's
``final_output_bits``. A level with an access granularity moves whole granules: an access of w
bits is charged ``ceil(w / granularity)`` granules (ZigZag 3.9.1 rounds each transfer up to its
port's ``bandwidth_min``, ``CostModelEvaluation._calc_memory_access``). The accesses priced so
are the compute side's: at the innermost level that keeps an operand, each instance of the level
makes one access per cycle of the MAC schedule, carrying the elements its compute units read
that cycle (for the output: the elements they update, a partial-sum read being an access of as
many elements). Tile transfers between levels (fills, drains, and the parent's reads and updates
that serve them) are still charged by the bit.
"""

from __future__ import annotations

import numpy as np

from accelmap.arch.accelerator import Level
from accelmap.cost.nest_rows import NestRows

__all__ = ["compute_accesses", "innermost_level", "level_energy"]


def innermost_level(name: str, keep) -> int:
    """The innermost level that keeps operand ``name``: the one the compute unit reads and updates."""
    return max(i for i, k in enumerate(keep) if name in k)


def compute_accesses(nest: NestRows, level: int) -> np.ndarray:
    """Accesses the compute side makes to ``level`` per row and stream: one per cycle of the MAC
    schedule (temporal slots over MACs per cycle, a partial last cycle counted) per instance in use."""
    per = nest.arch.compute.macs_per_cycle
    return -(-nest.temporal // per) * nest.used(level)


def level_energy(lv: Level, bits: int, counts, finished=None, final_bits: int | None = None,
                 is_output: bool = False, accesses=None):
    """pJ of one operand at level ``lv``. ``counts``: (fills, reads, updates, drains) in elements of
    ``bits`` bits (numbers or NumPy rows); ``finished``: the (updates, drains) among them that carry
    finished outputs at ``final_bits``; ``accesses``: the compute side's accesses per stream when
    ``lv`` is the operand's innermost level (its reads and updates are then the compute unit's)."""
    fills, reads, updates, drains = counts
    fu, fd = finished if finished is not None else (0, 0)
    fb = bits if final_bits is None else final_bits
    drain_bits = (drains - fd) * bits + fd * fb
    if accesses is None or lv.access_granularity_bits is None:
        read_bits, update_bits = reads * bits, (updates - fu) * bits + fu * fb
    else:
        stream = updates if is_output else reads
        read_bits = lv.charged_bits(reads, bits, stream, accesses)
        update_bits = lv.charged_bits(updates - fu, bits, stream, accesses) + lv.charged_bits(fu, fb, stream, accesses)
    return ((read_bits + drain_bits) * lv.read_energy_pj + (fills * bits + update_bits) * lv.write_energy_pj) \
        / lv.width_bits
