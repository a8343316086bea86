"""Energy of one operand at one memory level: the one definition the model of a single mapping
(``model.evaluate``) and the batch model (``batch.batch_energy``) both call.

Reads and drains cost the level's read energy, fills and updates its write energy, each per word
of the level's width and scaled by the bits moved; finished outputs move at the output stage's
``final_output_bits``. A level with an access granularity moves whole granules: an access of w
bits is charged ``ceil(w / granularity)`` granules (ZigZag 3.9.1 rounds each transfer up to its
port's ``bandwidth_min``, ``CostModelEvaluation._calc_memory_access``), through
``Level.charged_bits``. Two streams of accesses cross a level, and each is rounded at its own
access size:
- towards the compute side (reads, and updates for the output): at the innermost level that keeps
  the operand, one access per cycle of the MAC schedule per instance, carrying the elements its
  compute units read that cycle; at a level above it, one access per tile transfer of the next
  level down per instance of this level, carrying the elements that transfer moves (the
  children's tiles, multicast once);
- from the parent (fills, and drains for the output): one access per tile transfer into each
  instance, carrying the elements that enter it (``tile_transfers``).
A partial-sum read is an access of as many elements as the update (drain) it precedes. Where
transfers of one stream differ in size (a sliding window's first tile and its deltas), each is
rounded on its own, as ZigZag rounds every transfer period: the first tile and each transition
class's delta (the first instance's) carry their share of the stream.
"""

from __future__ import annotations

import numpy as np

from accelmap.arch.accelerator import Level
from accelmap.cost.nest_rows import NestRows
from accelmap.workload.operator import Operand

__all__ = ["compute_accesses", "fanout_element_energy", "level_energy", "stream_accesses", "tile_transfers",
           "transfer_sizes"]


def fanout_element_energy(level: Level, bits: int) -> float:
    """Energy (pJ) the fan-out below ``level`` charges per element of ``bits`` bits it carries to or from the
    instances below: the one definition of the network term, used by the model of a single mapping, the
    batch model and the mapper's lower bound (0 where the level has no fan-out or it is free)."""
    fan = level.fanout
    if fan is None or not fan.transfer_energy_pj:
        return 0.0
    return fan.transfer_energy_pj * bits / level.width_bits


def compute_accesses(nest: NestRows, level: int) -> np.ndarray:
    """Accesses the compute side makes to ``level`` per row and stream: one per cycle of the MAC
    schedule (temporal slots over MACs per cycle, a partial last cycle counted) per instance in use."""
    per = nest.arch.compute.macs_per_cycle
    return -(-nest.temporal // per) * nest.used(level)


def tile_transfers(nest: NestRows, X: Operand, c: int) -> np.ndarray:
    """Tile transfers of X into one instance of level c per row: the first tile, then every
    transition of a loop above c that changes some of the tile's elements."""
    cnt, _ = nest.classes(c)
    _, dl, _ = nest.deltas(X, c)
    return 1 + (cnt * (dl > 0)).sum(axis=0)


def transfer_sizes(nest: NestRows, X: Operand, c: int, instances) -> tuple[np.ndarray, np.ndarray]:
    """X's tile transfers into level c as (counts, shares), classes x rows: the first tile once per
    instance, then each transition class whose delta is not empty as often as it occurs per instance,
    each carrying its elements (the first instance's tile and deltas)."""
    key = ("transfer sizes", X.name, c)
    cached = nest._geo.get(key)
    if cached is None:
        # per nest, level and operand (a level's stream from its parent and its parent's stream towards it
        # ask for the same transfers, scaled by different instances)
        cnt, _ = nest.classes(c)
        full, dl, _ = nest.deltas(X, c)
        cached = (np.vstack([np.ones((1, nest.n)), cnt * (dl > 0)]), np.vstack([full[None, :], dl]).astype(np.float64))
        for a in cached:
            a.flags.writeable = False
        nest._geo[key] = cached
    each, shares = cached
    return each * instances, shares


def stream_accesses(nest: NestRows, keep, X: Operand, level: int) -> tuple:
    """Accesses of X's two streams at ``level`` per row, (from the parent, towards the compute
    side): None where the level has no such stream. A stream of tile transfers is given as
    ``transfer_sizes`` (counts, shares); the compute side's as a count of equal accesses."""
    chain = [i for i in range(nest.nlev) if X.name in keep[i]]
    k = chain.index(level)
    parent = transfer_sizes(nest, X, level, nest.used(level)) if k > 0 else None
    below: tuple | np.ndarray = (transfer_sizes(nest, X, chain[k + 1], nest.used(level)) if k + 1 < len(chain)
                                 else compute_accesses(nest, level))
    return parent, below


def level_energy(lv: Level, bits: int, counts, finished=None, final_bits: int | None = None,
                 is_output: bool = False, accesses=None):
    """pJ of one operand at level ``lv``. ``counts``: (fills, reads, updates, drains) in elements of
    ``bits`` bits (numbers or NumPy rows); ``finished``: the (updates, drains) among them that carry
    finished outputs at ``final_bits``; ``accesses``: ``stream_accesses`` of the operand at ``lv``,
    needed when ``lv`` has an access granularity (without one every stream is charged by the bit)."""
    fills, reads, updates, drains = counts
    fu, fd = finished if finished is not None else (0, 0)
    fb = bits if final_bits is None else final_bits
    if accesses is None or lv.access_granularity_bits is None:
        read_bits, update_bits = reads * bits, (updates - fu) * bits + fu * fb
        fill_bits, drain_bits = fills * bits, (drains - fd) * bits + fd * fb
    else:
        from_parent, towards_compute = accesses
        granules: dict[tuple[int, int], tuple] = {}   # (stream, bits) -> its transfers' granules, once

        def charged(elements, b, stream, acc):
            if acc is None:
                return elements * b
            if isinstance(acc, tuple):
                key = (id(acc), b)
                if key not in granules:
                    granules[key] = lv.transfer_granules(b, stream, *acc)
                return lv.charged_bits_of_granules(elements, b, granules[key])
            return lv.charged_bits(elements, b, stream, acc)

        stream = updates if is_output else reads
        read_bits = charged(reads, bits, stream, towards_compute)
        update_bits = (charged(updates - fu, bits, stream, towards_compute)
                       + charged(fu, fb, stream, towards_compute))
        stream = drains if is_output else fills
        fill_bits = charged(fills, bits, stream, from_parent)
        drain_bits = charged(drains - fd, bits, stream, from_parent) + charged(fd, fb, stream, from_parent)
    return ((read_bits + drain_bits) * lv.read_energy_pj + (fill_bits + update_bits) * lv.write_energy_pj) \
        / lv.width_bits
