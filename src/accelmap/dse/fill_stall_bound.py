"""A lower bound on latency from the fills of single-buffered levels (rule F of the co-search).

The mapper's certified bound (``search.spatial.certified_lower_bound``) bounds latency by the MAC schedule
and by each operand's traffic over its ports, taking the larger: it lets every transfer overlap the compute.
In the cost model (``cost.latency``) a level that is neither double-buffered (always or when two tiles fit),
nor a register written at the clock edge, nor a level that streams its single tile does not overlap: compute
waits while it changes tiles, so latency >= MAC schedule + single-buffer stalls. This bound counts the
stalls the operands' first arrival alone forces. docs/dse.md gives the argument; in short:

* latency >= compute + stall (``latency_rows``: ``busy``), and compute >= the MAC schedule >= MACs / (PEs x
  MACs per cycle), since the spatial loops' product is at most the PEs and padding only adds iterations;
* an input X kept at a single-buffered level c, with p the level above c in X's chain, is loaded into c only
  during stalls (the first tiles, before any compute, and every tile change), and over the whole run those
  loads read the parent's whole count of X's reads, pc_reads x bits / (used instances of p), through p's read
  port at its bandwidth (``_single_stall``: each transition moves its delta; the deltas and the first tile sum
  to the elements counted over the run, over which the reads are spread);
* within one transition, the loads paced by one read port take disjoint stretches of its free time
  (``_fill``), so the transition lasts at least their sum; a load into a level with an unbounded write port is
  always paced by the parent's read port; one into a level with a bounded write port lasts at least its
  parent-side time on whichever port paces it (it then counts alone);
* every stored element of X that some MAC touches is read from p at least once, so p's reads of X are at
  least those elements, and p's used instances at most its instances.

So per bypass choice (the levels each operand's chain keeps), stall >= max over ports of the sum, over the
inputs loaded through that port into single-buffered levels, of (touched elements x bits) / (instances of p x
p's read bandwidth). Outputs are left out (their fills may be none; their drains are not counted), which only
weakens the bound. Per bypass choice the certified bound's energy and latency hold too, so
EDP >= min over choices of energy bound x max(latency bound, MAC schedule + stall bound).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from accelmap.arch.accelerator import Accelerator, Level
from accelmap.cost.access_counts import axis_mask, stored_points
from accelmap.search.bounds import chain_options
from accelmap.search.objective import scalar
from accelmap.search.space import Constraints, keep_options
from accelmap.search.spatial import certified_lower_bound
from accelmap.workload.operator import Operand, Operator


@dataclass(frozen=True)
class FillStallBound:
    value: float                 # lower bound of the objective over every mapping (at least rule H's)
    h_value: float               # rule H's bound alone (the certified bound over every bypass choice)
    stall_cycles: float          # the stall bound of the bypass choice that gives ``value``
    choices: int                 # bypass choices (one chain per operand) the minimum ran over


def single_buffered(lv: Level) -> bool:
    """Does compute wait while this level changes tiles, whatever the mapping (``cost.latency.overlapping``)?"""
    return not (lv.double_buffered or lv.written_at_clock_edge or lv.double_buffered_when_fits
                or lv.stream_single_tile)


def touched_stored_elements(op: Operator, X: Operand) -> int:
    """Stored elements of X that some iteration point touches (a padded halo is not stored). Exact when each
    dimension indexes at most one axis of X (a convolution, a matrix product); 0 otherwise (no bound)."""
    dims = [d for ix in X.indices for d, _ in ix.terms]
    if len(dims) != len(set(dims)):
        return 0
    full = tuple(tuple(op.sizes[d] for d, _ in ix.terms) for ix in X.indices)
    stored = stored_points(X, full)
    n = 1
    for ix, f, s in zip(X.indices, full, stored, strict=True):
        n *= s if s is not None else axis_mask(tuple(cf for _, cf in ix.terms), f).bit_count()
    return n


def fill_stall_cycles(op: Operator, arch: Accelerator, chains: dict[str, tuple[int, ...]]) -> float:
    """The stall bound of the module docstring for one bypass choice (``chains``: the levels keeping each operand)."""
    per_port: dict[str, float] = {}
    alone = 0.0
    for X in op.inputs:
        chain = chains[X.name]
        elems = touched_stored_elements(op, X)
        for p, c in zip(chain[:-1], chain[1:], strict=True):
            lc, lp = arch.levels[c], arch.levels[p]
            if not single_buffered(lc) or lp.read_bw_bits is None or not elems:
                continue
            t = elems * X.bits / (lp.instances * lp.read_bw_bits)
            if lc.write_bw_bits is None:
                per_port[lp.name] = per_port.get(lp.name, 0.0) + t
            else:
                alone = max(alone, t)
    return max([alone, *per_port.values()])


def fill_stall_bound(op: Operator, arch: Accelerator, objective: str,
                     cons: Constraints | None = None, energy_floor: float = 0.0) -> FillStallBound:
    """Rule F's bound of ``objective`` over every mapping of ``op`` on ``arch``. ``energy_floor``: a bound on energy
    that holds for every mapping whatever its bypass choice (rule C's), applied within each choice."""
    cons = cons or Constraints()
    options = chain_options(op, keep_options(op, arch, cons))
    h_value = certified_lower_bound(op, arch, cons, options, objective)[0]
    if objective == "energy":
        return FillStallBound(max(h_value, energy_floor), h_value, 0.0, 0)
    schedule = op.macs / (arch.num_pes * arch.compute.macs_per_cycle)
    best, best_stall, n = math.inf, 0.0, 0
    for combo in itertools.product(*(options[X.name] for X in op.operands)):
        chains = {X.name: tuple(ch) for X, ch in zip(op.operands, combo, strict=True)}
        obj, energy, latency = certified_lower_bound(op, arch, cons, {k: [list(v)] for k, v in chains.items()},
                                                     objective)
        n += 1
        if not math.isfinite(obj):       # no mapping keeps the operands so
            continue
        stall = fill_stall_cycles(op, arch, chains)
        value = max(obj, scalar(objective, max(energy, energy_floor), max(latency, schedule + stall)))
        if value < best:
            best, best_stall = value, stall
    if not math.isfinite(best):
        best = h_value
    return FillStallBound(max(best, h_value), h_value, best_stall, n)
