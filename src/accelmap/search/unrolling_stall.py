"""Rule S7 of docs/mapper.md: under an unrolling, single-buffered loads add to the MAC schedule.

Rule S1 bounds latency by the larger of the MAC schedule and the busiest port. But a level that never overlaps its
loads with compute (rule B9's levels) stops compute while it loads, and loads a parent's read port paces queue on
that port one after another (rule B12): the model's latency is at least the MAC schedule plus that stall. At the root
of the branch and bound (nothing fixed) the node bound has this term with footprint counts (every element of an input
enters each level that keeps it at least once, and leaves its parent at least once), which do not depend on the
unrolling; only the MAC schedule (the unrolling's PEs) and which level sets can hold the smallest tiles (rule S6) do.
The output's stores from its single-buffered levels run one after another (rule B16), each at least its footprint.
So it is computed for every unrolling at once, before any subtree is opened: per operand and level set, a stall
vector (per parent port the B12 queue, per level the B9 load time, per operand its B16 chain) is summed over a
combination of the operands' level sets, and rule S3's loop over combinations takes, per combination, the larger of
the busiest port and the MAC schedule plus the summed vector's largest entry, then the least over combinations (a set
S6 rules out has infinite traffic there). Outputs enter with their stores only (their first-touch fills may be none),
which only weakens the bound. On simba_like (every level single-buffered, the weights streamed from DRAM into the PE
buffers past the global buffer) this is most of what the root bound adds to S1.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

import numpy as np

from accelmap.arch.accelerator import Accelerator
from accelmap.cost.nest_rows import fewest_bits
from accelmap.search.bounds import loose_operand, paced_by_parent, serial_fill_levels
from accelmap.workload.operator import Operator


def operand_stall_vectors(op: Operator, arch: Accelerator,
                          chains: dict[str, list[list[int]]]) -> dict[str, list[np.ndarray]]:
    """Per operand, per level set: a vector of stall cycles whose sum over the operands' sets has, in every entry,
    a lower bound of the model's single-buffer stall under that choice, for footprint counts spread over all
    instances. Entries: per parent level, the B12 queue on its read port (inputs' loads into single-buffered levels
    it paces, summed over operands); per level, the B9 load time (the larger of its write port's and the parent's
    read port's time, summed over operands); per operand, its own B16 chain (its loads into two adjacent
    single-buffered levels in sequence; for the output, its stores from every single-buffered level of its set,
    each the larger of the child's read and the parent's write time). Loose operands: zeros."""
    nlev = len(arch.levels)
    serial = serial_fill_levels(arch)
    out: dict[str, list[np.ndarray]] = {}
    for k, X in enumerate(op.operands):
        vecs = []
        fp = op.footprint(X) * fewest_bits(X, arch)
        for chain in chains[X.name]:
            queue, load, own = np.zeros(nlev), np.zeros(nlev), np.zeros(len(op.operands))
            if not loose_operand(arch, X, chain):
                for p, c in itertools.pairwise(chain):
                    if c not in serial:
                        continue
                    P, C = arch.levels[p], arch.levels[c]
                    if X.is_output:
                        # B16: the stores from c (at least the footprint drains out, and is updated at p).
                        child = 0.0 if C.read_bw_bits is None else fp / C.instances / C.read_bw_bits
                        parent = 0.0 if P.write_bw_bits is None else fp / P.instances / P.write_bw_bits
                        own[k] += max(child, parent)
                        continue
                    parent = 0.0 if P.read_bw_bits is None else fp / P.instances / P.read_bw_bits
                    child = 0.0 if C.write_bw_bits is None else fp / C.instances / C.write_bw_bits
                    if paced_by_parent(arch, p, c):
                        queue[p] += parent
                    load[c] = max(parent, child)
                if not X.is_output:
                    own[k] = max((load[p] + load[c] for p, c in itertools.pairwise(chain) if p in serial),
                                 default=0.0)
            vecs.append(np.concatenate([queue, load, own]))
        out[X.name] = vecs
    return out


def stall_terms(op: Operator, arch: Accelerator, pes: np.ndarray, chains: dict[str, list[list[int]]],
                used: np.ndarray | None = None) -> tuple[np.ndarray, dict[str, list[np.ndarray]]]:
    """What ``bounds.spatial_bounds`` takes as ``stall``: the MAC schedule over ``pes`` per row and every operand's
    stall vectors (``operand_stall_vectors``). Rule S3's combination loop adds, per combination of level
    sets, the schedule plus the summed vectors' largest entry: a level set that loads nothing (weights read straight
    from DRAM) is charged its port traffic there instead, so the least over combinations holds for every choice.
    ``used`` (rows x dims, each dim's unrolling): the schedule of a padded unrolling is longer than MACs over PEs
    (``padded_schedule``)."""
    compute = np.ceil(np.ceil(op.macs / pes) / arch.compute.macs_per_cycle)
    if used is not None:
        compute = np.maximum(compute, np.ceil(padded_schedule(op, used) / arch.compute.macs_per_cycle))
    return compute, operand_stall_vectors(op, arch, chains)


def choice_stall_cycles(op: Operator, arch: Accelerator, chains: Mapping[str, Sequence[int]]) -> float:
    """The stall bound of one bypass choice (``chains``: the levels keeping each operand): the largest entry of its
    operands' stall vectors summed, which is what rule S3's combination loop adds to the MAC schedule for it. Every
    mapping keeping the operands so stalls at least this long (rule F of the co-search reports it)."""
    vecs = operand_stall_vectors(op, arch, {name: [list(chain)] for name, chain in chains.items()})
    return float(np.sum([v[0] for v in vecs.values()], axis=0).max())


def padded_schedule(op: Operator, used: np.ndarray) -> np.ndarray:
    """Rule S1's MAC schedule with each dim's unrolling known (``used``: rows x dims, the product of a dim's spatial
    bounds): the temporal loops over dim d must cover what the unrolling leaves, so their bounds multiply to at least
    ``ceil(size_d / unrolling_d)``, and the model's schedule is the product of every temporal bound (a partial last
    round still occupies its slots, ``cost/latency.py``). Equal to MACs over PEs where every unrolling divides; on a
    padded one (ResNet-18 layer1.0.conv1 on eyeriss_like, K=64 as 14 x 3 = 42 per round) two rounds of K where
    MACs over PEs counted 64/42 of one."""
    sizes = np.array([op.sizes[d] for d in op.dim_names], dtype=np.int64)
    return np.prod(-(-sizes // used), axis=1).astype(np.float64)
