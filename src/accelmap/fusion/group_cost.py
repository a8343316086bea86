"""Energy, latency and off-chip traffic of a fused group: the tile loop's geometry on top of every
operator's own mapping of its tiles, costed by the single-operator model.

The intermediates of a group live in the *store*: the outermost on-chip level that holds inputs and
outputs and has one instance (Eyeriss' global buffer, the TPU's unified buffer). Their windows (and
line buffers) are reserved there, so each operator's tile is mapped on the accelerator with the
store's capacity reduced by those buffers. A tile reads its input window from the store and writes
its output tile to it; in the single-operator model those are the accesses of the outermost level,
so a tile is costed twice with the same counts: on the accelerator as it is (the weights and other
non-chained operands come from off-chip memory) and on a copy whose outermost level has the store's
energy per bit and bandwidth (the chained input and the output); each operand takes the outermost
level's energy from the copy it belongs to. The group adds the off-chip fetch of its input (halos
once or again, as its policy says) into the store and the write-back of its output.

Latency: the tiles' blocks run one after another, each as the single-operator model times it with
the outermost port at the store's bandwidth; the off-chip transfers (each block's weights and the
first stage's input fetched before it, each tile's output after it) overlap them as a three-stage
pipeline, in closed form (``pipeline_latency``), checked against the simulator running the group
(``accelmap.sim.fused``). Pooling windows inside a group cost no multiply-accumulates and are not
charged (comparisons on the output path).

A residual join (the add after the last operator) is applied as the output is written, like any
element-wise work, so what it costs is its skip tensor's read (``skip_energy``): from the store
when the group keeps it there (its tensor's windows widened to hold it, in the buffers), else fetched from off-chip memory into the store and read from it,
per tile before the tile's last block (its load waits for it). A join outside any group (layer by
layer) reads its skip the same way, as one transfer at the off-chip read bandwidth. A join inside a
group (spanning two residual blocks) reads its skip at every position of its tensor computed (again
where recomputed), its re-read skip loading with the block that computes them.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from accelmap.arch.accelerator import Accelerator, Level
from accelmap.cost.model import CostResult, evaluate
from accelmap.errors import MappingError, SpecError
from accelmap.fusion.geometry import (
    AxisSchedule,
    FusedCounts,
    Join,
    Stage,
    all_joins,
    fused_counts,
    head_segment,
    schedules,
)
from accelmap.fusion.stages import MacStage, head_slice, tile_operator
from accelmap.mapping.loopnest import Loop, Mapping, loop_strides
from accelmap.mapping.validate import validate
from accelmap.workload.operator import Operator

# Buffers are reserved in steps of this share of the store, so that groups whose buffers differ a
# little map their tiles on the same reduced accelerator (one search each, cached).
RESERVE_STEPS = 64


def store_index(arch: Accelerator) -> int:
    """The level that holds a fused group's intermediates."""
    for i, lv in enumerate(arch.levels[1:], start=1):
        if lv.instances == 1 and "I" in lv.holds and "O" in lv.holds:
            if lv.partitioned:
                raise SpecError(f"level {lv.name} of {arch.name} is partitioned per operand class; fused groups "
                                "need one shared on-chip store for their intermediates", where="--fuse")
            return i
        if lv.instances > 1:
            break
    raise SpecError(f"{arch.name} has no single on-chip level below {arch.levels[0].name} that holds inputs and "
                    "outputs, where a fused group could keep its intermediates", where="--fuse")


def store_capacity(arch: Accelerator) -> int | None:
    return arch.levels[store_index(arch)].capacity_bits


def reserved(arch: Accelerator, bits: int) -> tuple[Accelerator, int] | None:
    """The accelerator with ``bits`` (rounded up to a step) of the store taken; None if they do not fit."""
    s = store_index(arch)
    lv = arch.levels[s]
    if lv.capacity_bits is None:
        return arch, 0
    step = max(1, lv.capacity_bits // RESERVE_STEPS)
    taken = -(-bits // step) * step
    if taken >= lv.capacity_bits:
        return None
    levels = arch.levels[:s] + (replace(lv, capacity_bits=lv.capacity_bits - taken),) + arch.levels[s + 1:]
    return replace(arch, levels=levels), taken


def store_priced(arch: Accelerator) -> Accelerator:
    """The accelerator whose outermost level costs and moves like the store (per bit)."""
    top, st = arch.levels[0], arch.levels[store_index(arch)]
    scale = top.width_bits / st.width_bits
    return replace(arch, levels=(replace(top, read_energy_pj=st.read_energy_pj * scale,
                                         write_energy_pj=st.write_energy_pj * scale,
                                         read_bw_bits=st.read_bw_bits, write_bw_bits=st.write_bw_bits,
                                         shared_port=st.shared_port),)
                   + arch.levels[1:])


def vector_cycles(arch: Accelerator, elements: int) -> float:
    """Cycles the accelerator's vector unit takes to normalize ``elements`` elements (one element per lane per
    cycle, as AccelForge's scalar unit counts one operation per element of a softmax); 0 where the accelerator
    describes no vector unit (``Compute.vector_elements_per_cycle``)."""
    rate = arch.compute.vector_elements_per_cycle
    return elements / rate if rate else 0.0


def block_norm_cycles(arch: Accelerator, ms: MacStage, rows: int, cols: int, passes: int) -> float:
    """The vector unit's cycles for ``passes`` normalizations over the output of ``ms``'s ``rows`` x ``cols`` block
    (``ms`` a head tile's where the block is one): what follows the block before the next one starts."""
    if not passes or not arch.compute.vector_elements_per_cycle:
        return 0.0
    tile = tile_operator(ms, rows, cols)
    return vector_cycles(arch, tile.footprint(tile.output) * passes)


def transfer_energy(level: Level, read_bits: int, write_bits: int) -> float:
    return (read_bits * level.read_energy_pj + write_bits * level.write_energy_pj) / level.width_bits


def skip_energy(arch: Accelerator, bits: int, kept: bool) -> float:
    """Energy of a join reading ``bits`` of its skip tensor: from the store when kept there, else
    fetched from off-chip memory into the store first."""
    st = arch.levels[store_index(arch)]
    fetch = 0.0 if kept else transfer_energy(arch.levels[0], bits, 0) + transfer_energy(st, 0, bits)
    return fetch + transfer_energy(st, bits, 0)


def host_level(arch: Accelerator) -> Level:
    """Where host work run alone (a normalization between two operators) stages its data: the innermost
    on-chip level that holds inputs and outputs, the memory next to the units (AccelForge's TPU v4i example
    runs its softmax on a scalar unit below the local buffer that must keep every input and output)."""
    for lv in reversed(arch.levels[1:]):
        if "I" in lv.holds and "O" in lv.holds:
            return lv
    return arch.levels[store_index(arch)]


def pass_energy(arch: Accelerator, read_bits: int, write_bits: int) -> float:
    """Energy of host work run alone on tensors in off-chip memory, each element once: what it reads is
    fetched into ``host_level`` and read from it, what it writes is written there and from it off-chip."""
    return (transfer_energy(arch.levels[0], read_bits, write_bits)
            + transfer_energy(host_level(arch), read_bits + write_bits, read_bits + write_bits))


def offchip_bits(op: Operator, res: CostResult, top: str, operands: set[str] | None = None) -> int:
    """Bits the outermost level moves for ``operands`` (default all) in one result."""
    bits = {o.name: o.bits for o in op.operands}
    return sum(sum(c) * bits[x] for (lv, x), c in res.counts.items()
               if lv == top and (operands is None or x in operands))


def fmap_bits(op: Operator, res: CostResult, top: str) -> int:
    """Off-chip bits of a layer's feature maps: its first input (what a chain passes on) and its output."""
    return offchip_bits(op, res, top, {op.inputs[0].name, op.output.name})


def clip_mapping(m: Mapping, dim: str, size: int) -> Mapping:
    """``m`` for an operator whose ``dim`` shrank to ``size``: outer loops over ``dim`` lose the
    iterations past it (a loop left with none beyond the first runs once)."""
    strides = loop_strides(m)
    loops = list(m.loops)
    for i, l in enumerate(loops):
        if l.dim != dim:
            continue
        need = -(-size // strides[i])
        if need < l.bound:
            loops[i] = Loop(l.dim, need, l.level, l.axis)
        if need > 1:
            break
    return Mapping(tuple(loops), m.keep)


InnerSearch = Callable[[Operator, Accelerator], Mapping]


class InnerMappings:
    """Each tile operator's mapping, found once per (operator, reduced accelerator).

    The largest tile of an operator is searched (``search``); smaller tiles of the same operator (the
    first and last of a row or column) take its mapping clipped to their size, or are searched when
    the clipped mapping is not valid.
    """

    def __init__(self, search: InnerSearch, reuse_across_room: bool = False):
        self.search = search
        self.found: dict[tuple, Mapping | str] = {}
        self.searched = 0
        # Groups leave the store different room (their buffers, in 1/64 steps), so one tile operator is searched
        # once per room: on whole MobileNetV2 with groups spanning residual blocks, 3,305 searches of 413 tile
        # operators. With ``reuse_across_room`` a mapping found for the operator with other room is taken where it
        # is valid (it fits this room), and only otherwise is the operator searched again: fewer searches, and
        # a tile given more room than its mapping was found with may miss a better mapping.
        self.reuse_across_room = reuse_across_room
        self.by_operator: dict[tuple, list[Mapping]] = {}
        self.reused = 0

    def _search(self, op: Operator, arch: Accelerator) -> Mapping | str:
        key = (op.signature(), arch)
        if key not in self.found and self.reuse_across_room:
            for m in self.by_operator.get((key[0], _without_store_room(arch)), []):
                try:
                    validate(op, arch, m)
                except (MappingError, SpecError):
                    continue
                self.found[key] = m
                self.reused += 1
                break
        if key not in self.found:
            try:
                found = self.search(op, arch)
                self.found[key] = found
                self.by_operator.setdefault((key[0], _without_store_room(arch)), []).append(found)
            except MappingError as e:
                self.found[key] = str(e)
            self.searched += 1
        return self.found[key]

    def mapping(self, ms: MacStage, largest: tuple[int, int], shape: tuple[int, int],
                arch: Accelerator) -> Mapping | str:
        big = self._search(tile_operator(ms, *largest), arch)
        if shape == largest or isinstance(big, str):
            return big
        m = clip_mapping(big, ms.row_dim, shape[0])
        if ms.col_dim:
            m = clip_mapping(m, ms.col_dim, shape[1])
        try:
            validate(tile_operator(ms, *shape), arch, m)
            return m
        except (MappingError, SpecError):
            return self._search(tile_operator(ms, *shape), arch)


def _without_store_room(arch: Accelerator) -> Accelerator:
    """``arch`` with its store's capacity set aside: the accelerators one tile operator is mapped on across groups."""
    s = store_index(arch)
    return replace(arch, levels=arch.levels[:s] + (replace(arch.levels[s], capacity_bits=None),) + arch.levels[s + 1:])


@dataclass(frozen=True)
class StageCost:
    name: str
    macs: int                  # computed, recomputed halos included
    energy: float
    latency: float             # tile latencies summed
    offchip_bits: int          # weights, and the group's input (first) or output (last) moved off chip
    fmap_bits: int             # of those, the feature maps: the group's input and output
    tiles: int                 # tile shapes costed x how often each runs
    # per block shape: (rows, columns, runs, latency of one run, off-chip weight bits of one run)
    blocks: tuple[tuple[int, int, int, float, int], ...] = ()


@dataclass(frozen=True)
class GroupCost:
    names: tuple[str, ...]     # the stages, pooling windows included
    tile_rows: int
    tile_cols: int
    policies: tuple[str, ...]  # per tensor: the group's input, then every intermediate
    weights_resident: bool     # the operators' weights fetched once and kept in the store for all tiles
    counts: FusedCounts
    macs_once: tuple[int, ...]  # per stage: MACs with every output computed once
    reserved_bits: int         # of the store, for the buffers
    stages: tuple[StageCost, ...]
    energy: float
    latency: float
    offchip_bits: int
    join: Join | None = None   # a residual add after the last stage, with its skip tensor
    skip_policy: str | None = None     # "kept" on chip or "re-read" per tile
    join_cost: StageCost | None = None  # the join's skip read (included in energy and offchip_bits)
    # joins inside the group (spanning residual blocks), each with its skip policy and its cost (included)
    inner_joins: tuple[tuple[Join, str], ...] = ()
    inner_join_costs: tuple[StageCost, ...] = ()
    # producers of second operands run before the group, their outputs left in the store (``producers_on_chip``;
    # what they save is in energy and offchip_bits)
    producers_on_chip: tuple[str, ...] = ()
    # attention tiled over heads: heads per head tile of the head-split stages (None: not tiled over heads)
    head_tile: int | None = None
    # producers among ``producers_on_chip`` reading the group's input in the store (a group of one tile)
    input_readers: tuple[str, ...] = ()
    # normalizations inside the group (``FusableChain.group_norms``): (stage whose blocks they follow, how many)
    norms: tuple[tuple[int, int], ...] = ()

    @property
    def edp(self) -> float:
        return self.energy * self.latency

    @property
    def input_held(self) -> bool:
        """A group of several tiles holding its input whole in the store for its producers (``held_input_bits``)."""
        return self.counts.tiles > 1 and bool(self.input_readers)

    @property
    def fmap_bits(self) -> int:
        return (sum(s.fmap_bits for s in self.stages) + (self.join_cost.fmap_bits if self.join_cost else 0)
                + sum(c.fmap_bits for c in self.inner_join_costs))

    def objective(self, name: str) -> float:
        return {"energy": self.energy, "latency": self.latency, "edp": self.edp}[name]


def resident_weight_bits(macs: dict[int, MacStage]) -> int:
    """Bits of every operand of the group's operators other than their chained input and output."""
    return sum(ms.operator.footprint(x) * x.bits for ms in macs.values() for x in ms.operator.inputs[1:])


@dataclass(frozen=True)
class Producer:
    """An operator outside the group whose whole output is one group operator's second operand (attention's K or
    V projection), with its layer-by-layer mapping and cost."""

    node: str
    operator: Operator
    mapping: Mapping
    result: CostResult
    # its first input is the group's input (GPT's hidden state, read by the Q projection in the group too)
    reads_group_input: bool = False

    @property
    def output_bits(self) -> int:
        return self.operator.footprint(self.operator.output) * self.operator.output.bits


@dataclass(frozen=True)
class KeptProducers:
    """The producers a group keeping its weights resident runs right before its tile loop, their outputs left
    in the store (``producers_on_chip``)."""

    names: tuple[str, ...] = ()
    energy_saved: float = 0.0      # their outputs written to the store instead of off-chip memory
    offchip_saved: int = 0         # bits those writes no longer move off chip
    # per group stage: the bits of its second operand already in the store (not fetched off-chip for the group)
    operand_bits: tuple[tuple[int, int], ...] = ()
    # The producers reading the group's input (``Producer.reads_group_input``) from the store, where a group of one
    # tile holds it whole before they run (its tile's input, fetched once): what they save by reading it there
    # instead of off-chip. ``group_cost`` credits it to a group of one tile only.
    input_readers: tuple[str, ...] = ()
    input_energy_saved: float = 0.0
    input_offchip_saved: int = 0

    @property
    def operand_total(self) -> int:
        return sum(b for _, b in self.operand_bits)


def producers_on_chip(arch: Accelerator, produced: dict[int, Producer],
                      macs: dict[int, MacStage]) -> KeptProducers:
    """With the group's weights resident, the producers of its second operands (``produced``, by stage index) run
    alone right before its tile loop and leave their outputs in the store instead of off-chip memory (AccelForge
    keeps GPT-3's K and V in its global buffer so). A producer qualifies where its own mapping still fits with
    every produced output of the group in the store. The same for every tile of the group: found once."""
    if not produced:
        return KeptProducers()
    top = arch.levels[0].name
    held = sum(p.output_bits for p in produced.values())
    got = reserved(arch, held)
    if got is None:
        return KeptProducers()
    # A producer reading the group's input reads it in the store where its mapping fits next to it too.
    x0 = macs[0].operator.inputs[0] if 0 in macs else None
    with_input = reserved(arch, held + macs[0].operator.footprint(x0) * x0.bits) if x0 is not None else None
    saved_e, saved_bits, names, operands = 0.0, 0, [], []
    readers: list[str] = []
    in_e, in_bits = 0.0, 0
    for j, p in produced.items():
        if not fits(p, got[0]):
            continue
        o = p.operator.output.name
        priced = evaluate(p.operator, store_priced(arch), p.mapping, check=False)
        saved_e += p.result.energy.get((top, o), 0.0) - priced.energy.get((top, o), 0.0)
        saved_bits += offchip_bits(p.operator, p.result, top, {o})
        names.append(p.node)
        x = macs[j].operator.inputs[1]
        operands.append((j, macs[j].operator.footprint(x) * x.bits))
        if p.reads_group_input and with_input is not None and fits(p, with_input[0]):
            i = p.operator.inputs[0].name
            in_e += p.result.energy.get((top, i), 0.0) - priced.energy.get((top, i), 0.0)
            in_bits += offchip_bits(p.operator, p.result, top, {i})
            readers.append(p.node)
    return KeptProducers(tuple(names), saved_e, saved_bits, tuple(operands), tuple(readers), in_e, in_bits)


def held_input_bits(stages: tuple[Stage, ...], counts: FusedCounts, kept: KeptProducers) -> int:
    """Bits of the group's input a group of several tiles holds whole in the store, or 0. A one-tile group fetches
    its input whole before its blocks anyway; a group of several tiles whose producers read its input
    (``KeptProducers.input_readers``) may fetch it whole before they run and keep it until its last tile, its tiles
    reading their rows there (in place of their input buffer), where every input element is fetched once (no halo
    fetched again)."""
    first = stages[0]
    whole = first.in_rows * first.in_cols * first.in_depth
    if counts.tiles <= 1 or not kept.input_readers or counts.input_fetched != whole:
        return 0
    return whole * first.in_bits


def fits(p: Producer, arch_held: Accelerator) -> bool:
    """Whether the producer's mapping fits on ``arch_held`` (the accelerator with what the store holds taken)."""
    try:
        validate(p.operator, arch_held, p.mapping)
    except (MappingError, SpecError):
        return False
    return True


def group_cost(stages: tuple[Stage, ...], macs: dict[int, MacStage], arch: Accelerator, tile_rows: int,
               tile_cols: int, policies: tuple[str, ...], inner: InnerMappings,
               weights_resident: bool = False, join: Join | None = None,
               skip_policy: str = "re-read", inner_joins: tuple[tuple[Join, str], ...] = (),
               produced: dict[int, Producer] | None = None, kept: KeptProducers | None = None,
               head_tile: int | None = None, shared_port: bool = False,
               keep_producers: bool = False, norms: tuple[tuple[int, int], ...] = ()) -> GroupCost | str:
    """The group's cost, or why it cannot run (buffers too big, a tile that cannot be mapped).

    ``macs`` maps the index of every multiply-accumulate stage to its operator. With
    ``weights_resident`` every operator's weights are fetched into the store once and stay there
    for all tiles (reserved next to the buffers): the tiles read them at the store's price. With
    ``join`` the group ends with that residual add, its skip tensor ``kept`` or ``re-read``; with
    ``inner_joins`` adds inside the group (each with its skip policy) span residual blocks. ``produced`` (by
    stage index) names operators outside the group whose outputs are second operands of its operators: with
    the weights resident they run right before the group and leave them in the store (``producers_on_chip``),
    so those operands are not fetched off-chip; the producers' own cost stays theirs, less what they save.
    ``kept``: ``producers_on_chip(arch, produced, macs)`` when the caller has it already (the same for every tile).
    ``head_tile``: attention tiled over heads (``geometry.head_segment``): the head-split stages run once per head
    tile, each block on ``head_tile`` heads (``stages.head_slice``). ``shared_port``: one off-chip port for reads
    and writes (``pipeline_latency``). ``keep_producers``: the producers leave their outputs in the store for a
    group streaming its other weights too (reserved next to the buffers, read by its tiles at the store's price;
    without it, only a group keeping its weights resident keeps them). ``norms``: (stage, count) of the
    normalizations applied to a stage's output inside the group (``FusableChain.group_norms``): each of its blocks
    is followed by those passes over the elements it wrote, on the vector unit (``vector_cycles``), before the next
    block starts (the blocks run one after another).
    """
    try:
        counts = fused_counts(stages, tile_rows, tile_cols, policies, join, skip_policy, inner_joins, head_tile)
    except SpecError as err:
        if join is None and not inner_joins:
            raise
        return f"joins: {err}"
    st_lv = arch.levels[store_index(arch)]
    if (weights_resident or (keep_producers and produced)) and "W" not in st_lv.holds:
        return f"{st_lv.name} holds no weights"
    if not (produced and (weights_resident or keep_producers)):
        kept = KeptProducers()
    elif kept is None:
        kept = producers_on_chip(arch, produced, macs)
    in_store = dict(kept.operand_bits)
    # Resident, every weight is reserved (the produced operands among them); streamed, the produced operands alone.
    keep_bits = counts.buffer_total_bits + (resident_weight_bits(macs) if weights_resident else kept.operand_total)
    # Several tiles: the input held whole for the producers reading it, where that fits (else fetched per tile).
    held = held_input_bits(stages, counts, kept)
    if held and reserved(arch, keep_bits - counts.buffer_bits[0] + held) is not None:
        keep_bits += held - counts.buffer_bits[0]
    else:
        held = 0
    got = reserved(arch, keep_bits)
    if got is None:
        return (f"buffers of {keep_bits / 8192:,.1f} KiB"
                f"{' (weights included)' if weights_resident else ''} do not fit {st_lv.name}")
    arch_r, taken = got
    arch_s = store_priced(arch_r)
    top = arch.levels[0]
    rows, cols = schedules(stages, tile_rows, tile_cols, policies, join, skip_policy, inner_joins)
    segment = head_segment(stages, head_tile)
    n = len(stages)
    out: list[StageCost] = []
    # per multiply-accumulate stage: (latency, off-chip weight bits) of each block shape it runs
    blocks: dict[int, dict[tuple[int, int], tuple[float, int]]] = {}
    passes = dict(norms)
    for j, st in enumerate(stages):
        ms = macs.get(j)
        if ms is None:
            if passes.get(j):
                raise SpecError(f"a normalization after {st.name}, which computes nothing: not timed inside a group")
            out.append(StageCost(st.name, 0, 0.0, 0.0, 0, 0, 0))
            continue
        op = ms.operator
        chained = ({x.name for x in op.operands} if weights_resident else
                   {op.inputs[0].name, op.output.name} | ({op.inputs[1].name} if j in in_store else set()))
        shapes = block_shapes(rows, cols, j, segment, counts.head_tiles)
        if segment is not None and segment[0] <= j <= segment[1]:
            assert head_tile is not None
            ms = head_slice(ms, head_tile)      # every block on one head tile
        largest = (max(r for r, _ in shapes), max(c for _, c in shapes)) if shapes else (0, 0)
        energy = latency = 0.0
        wbits = fmap = 0
        per_shape: dict[tuple[int, int], tuple[float, int]] = {}
        for (r, c), times in shapes.items():
            m = inner.mapping(ms, largest, (r, c), arch_r)
            if isinstance(m, str):
                return f"{op.name}: a {r}x{c} tile cannot be mapped: {m}"
            tile = tile_operator(ms, r, c)
            real = evaluate(tile, arch_r, m, check=False)
            priced = evaluate(tile, arch_s, m, check=False)
            e = priced.energy_total + sum(real.energy[(top.name, x)] - priced.energy[(top.name, x)]
                                          for (lv, x) in real.energy if lv == top.name and x not in chained)
            energy += times * e
            block = priced.latency + block_norm_cycles(arch, ms, r, c, passes.get(j, 0))
            latency += times * block
            w = offchip_bits(tile, real, top.name, {o.name for o in tile.operands} - chained)
            wbits += times * w
            per_shape[(r, c)] = (block, w)
        blocks[j] = per_shape
        if weights_resident:
            once = sum(op.footprint(x) * x.bits for x in op.inputs[1:]) - in_store.get(j, 0)   # less: in the store
            energy += transfer_energy(top, once, 0) + transfer_energy(st_lv, 0, once)
            wbits += once
        if j == 0:
            fetched = counts.input_fetched * st.in_bits
            energy += transfer_energy(top, fetched, 0) + transfer_energy(st_lv, 0, fetched)
            wbits += fetched
            fmap += fetched
        if j == n - 1:
            written = counts.output_written * st.out_bits
            energy += transfer_energy(top, 0, written) + transfer_energy(st_lv, written, 0)
            wbits += written
            fmap += written
        out.append(StageCost(st.name, counts.macs[j], energy, latency, wbits, fmap, sum(shapes.values()),
                             tuple((r, c, shapes[(r, c)], lat, w) for (r, c), (lat, w) in per_shape.items())))
    if macs.get(n - 1) is None or macs.get(0) is None:
        raise SpecError("a fused group starts and ends with a multiply-accumulate operator")
    join_costs: list[StageCost] = []
    skip_bits_per_elem: dict[int, int] = {}      # per stage: re-read skip bits per position it computes
    for jn, sp, read in join_reads(stages, rows, cols, all_joins(join, skip_policy, inner_joins)):
        k = jn.target(n)
        fetched_skip = 0 if sp == "kept" else read
        join_costs.append(StageCost(jn.name, 0, skip_energy(arch, read, sp == "kept"), 0.0,
                                    fetched_skip, fetched_skip, 0))
        if sp != "kept":
            skip_bits_per_elem[k - 1] = skip_bits_per_elem.get(k - 1, 0) + stages[k - 1].out_depth * jn.bits
    energy = sum(s.energy for s in out) + sum(c.energy for c in join_costs) - kept.energy_saved
    off = sum(s.offchip_bits for s in out) + sum(c.offchip_bits for c in join_costs) - kept.offchip_saved
    # One tile: its input, fetched whole before the tile's blocks, is in the store when the producers run (they run
    # after that load), so those reading it read it there (``KeptProducers.input_readers``); several tiles: the same
    # where the group holds its input whole (``held``), fetched before its first block.
    input_readers = kept.input_readers if counts.tiles == 1 or held else ()
    if input_readers:
        energy -= kept.input_energy_saved
        off -= kept.input_offchip_saved
    latency = pipeline_latency(top, blocks, stages, rows, cols,
                               resident_weight_bits(macs) - kept.operand_total if weights_resident else 0,
                               skip_bits_per_elem, segment, counts.head_tiles, shared_port, held)
    join_cost = join_costs[-1] if join is not None else None
    return GroupCost(tuple(s.name for s in stages), tile_rows, tile_cols, policies, weights_resident, counts,
                     tuple(s.macs for s in stages), taken, tuple(out),
                     energy, latency, off, join, skip_policy if join is not None else None, join_cost,
                     tuple(inner_joins), tuple(join_costs[:len(inner_joins)]), kept.names,
                     head_tile if segment is not None else None, input_readers, tuple(norms))


def join_reads(stages: tuple[Stage, ...], rows: AxisSchedule, cols: AxisSchedule,
               joins: tuple[tuple[Join, str], ...]) -> list[tuple[Join, str, int]]:
    """Per join, the bits of its skip its add reads: at every position of its tensor computed
    (recomputed ones again; the group's output is computed once)."""
    n = len(stages)
    return [(jn, sp, rows.computed_total(k) * cols.computed_total(k) * stages[k - 1].out_depth * jn.bits)
            for jn, sp in joins for k in (jn.target(n),)]


def block_shapes(rows: AxisSchedule, cols: AxisSchedule, stage: int, segment: tuple[int, int] | None = None,
                 head_tiles: int = 1) -> Counter[tuple[int, int]]:
    """How often the tile loop runs each (rows, columns) block of a stage (tiles computing none left out); a
    stage of the head-split ``segment`` once per head tile."""
    times = head_tiles if segment is not None and segment[0] <= stage <= segment[1] else 1
    return Counter({shape: k * times for shape, k in Counter(
        (r, c) for r in (t[stage + 1][1] - t[stage + 1][0] for t in rows.comp)
        for c in (t[stage + 1][1] - t[stage + 1][0] for t in cols.comp) if r and c).items()})


class TileBounds:
    """Per tile operator, (energy, latency) below every mapping of it on the accelerator with its
    outermost level priced as the store: the single-operator mapper's certified bound (any unrolling,
    tiling, order and bypass), on the full store (a tile mapped with less room is one of those
    mappings). Found once per tile shape."""

    def __init__(self, arch: Accelerator):
        self.arch_s = store_priced(arch)
        top = arch.levels[0]
        # Off-chip minus store price per bit: what a weight read from off-chip costs on top of the
        # store-priced bound; the bound needs it non-negative.
        self.extra_per_bit = (top.read_energy_pj / top.width_bits
                              - self.arch_s.levels[0].read_energy_pj / self.arch_s.levels[0].width_bits)
        self.found: dict[tuple, tuple[float, float]] = {}

    @property
    def usable(self) -> bool:
        return self.extra_per_bit >= 0

    def __call__(self, ms: MacStage, rows: int, cols: int) -> tuple[float, float]:
        from accelmap.search.bounds import chain_options
        from accelmap.search.space import Constraints, keep_options
        from accelmap.search.spatial import certified_lower_bound

        op = tile_operator(ms, rows, cols)
        key = op.signature()
        if key not in self.found:
            cons = Constraints()
            _, e, lat = certified_lower_bound(op, self.arch_s, cons, chain_options(op, keep_options(op, self.arch_s,
                                                                                                    cons)), "energy")
            self.found[key] = (max(e, op.macs * self.arch_s.compute.mac_energy_pj),
                               max(lat, op.macs / self.arch_s.peak_macs_per_cycle))
        return self.found[key]


def group_lower_bound(stages: tuple[Stage, ...], macs: dict[int, MacStage], arch: Accelerator,
                      counts: FusedCounts, rows: AxisSchedule, cols: AxisSchedule, weights_resident: bool,
                      join: Join | None = None, skip_policy: str = "re-read",
                      tile_bounds: TileBounds | None = None,
                      inner_joins: tuple[tuple[Join, str], ...] = (),
                      kept: KeptProducers | None = None, head_tile: int | None = None,
                      shared_port: bool = False, norms: tuple[tuple[int, int], ...] = ()) -> tuple[float, float]:
    """(energy, latency) no mapping of the group's tiles can go below, from its geometry alone.

    Energy: the multiply-accumulates computed, the group's own transfers exactly as ``group_cost``
    charges them (input fetched, output written, weights kept once, the join's skip), and every tile's
    weights read from off-chip memory at least once each when they are not kept. Latency: the
    pipeline takes at least its busiest unit: the blocks' multiply-accumulates at the accelerator's
    peak, the off-chip loads (the same bits) at the read bandwidth, the write-backs at the write one.
    With ``tile_bounds`` every block's energy and latency are instead at least its tile operator's
    certified bound (a tile is costed with its outermost level at the store's price, plus the extra
    price of the weights it reads off-chip). ``kept``: the producers leaving second operands in the store
    (``producers_on_chip``; with the weights resident or streamed): those operands are not fetched, and what the
    producers save by writing them to the store is credited, exactly as ``group_cost`` does. ``head_tile``: the head-split
    stages' blocks are head tiles (``group_cost``). ``shared_port``: loads and write-backs share one port.
    ``norms``: the normalizations inside the group (``group_cost``): their vector passes, exactly as charged, add to
    the blocks' time (the blocks and the passes run one after another).
    """
    top, st = arch.levels[0], arch.levels[store_index(arch)]
    segment = head_segment(stages, head_tile)
    refined = tile_bounds is not None and tile_bounds.usable
    energy = 0.0 if refined else sum(counts.macs) * arch.compute.mac_energy_pj
    compute = 0.0 if refined else sum(counts.macs) / arch.peak_macs_per_cycle
    if refined:
        assert tile_bounds is not None
        for j, ms in macs.items():
            if segment is not None and segment[0] <= j <= segment[1]:
                assert head_tile is not None
                ms = head_slice(ms, head_tile)
            for (r, c), times in block_shapes(rows, cols, j, segment, counts.head_tiles).items():
                e, lat = tile_bounds(ms, r, c)
                energy += times * e
                compute += times * lat
    for j, k in norms:
        if k and j in macs:
            ms = macs[j]
            if segment is not None and segment[0] <= j <= segment[1]:
                assert head_tile is not None
                ms = head_slice(ms, head_tile)
            compute += sum(times * block_norm_cycles(arch, ms, r, c, k)
                           for (r, c), times in block_shapes(rows, cols, j, segment, counts.head_tiles).items())
    load_bits = counts.input_fetched * stages[0].in_bits
    written = counts.output_written * stages[-1].out_bits
    energy += transfer_energy(top, load_bits, 0) + transfer_energy(st, 0, load_bits)
    energy += transfer_energy(top, 0, written) + transfer_energy(st, written, 0)
    if kept is not None and (counts.tiles == 1 or held_input_bits(stages, counts, kept)):
        energy -= kept.input_energy_saved       # producers reading the group's input in the store (``group_cost``)
    if weights_resident:
        kept = kept or KeptProducers()
        once = resident_weight_bits(macs) - kept.operand_total
        energy += transfer_energy(top, once, 0) + transfer_energy(st, 0, once) - kept.energy_saved
        load_bits += once
    else:
        # Streamed weights; the producers' outputs (``kept``, when given) are in the store already.
        in_store = dict(kept.operand_bits) if kept else {}
        energy -= kept.energy_saved if kept else 0.0
        for j, ms in macs.items():
            runs = (sum(1 for t in rows.comp if t[j + 1][1] > t[j + 1][0])
                    * sum(1 for t in cols.comp if t[j + 1][1] > t[j + 1][0]))
            w = runs * (sum(ms.operator.footprint(x) * x.bits for x in ms.operator.inputs[1:]) - in_store.get(j, 0))
            # Refined, the store-priced bound already reads them; off-chip they cost the difference more.
            energy += w * tile_bounds.extra_per_bit if refined and tile_bounds else transfer_energy(top, w, 0)
            load_bits += w
    for _, sp, read in join_reads(stages, rows, cols, all_joins(join, skip_policy, inner_joins)):
        energy += skip_energy(arch, read, sp == "kept")
        load_bits += 0 if sp == "kept" else read

    def t(bits: float, bw: float | None) -> float:
        return bits / bw if bw else 0.0

    if shared_port:
        latency = max(compute, t(load_bits + written, shared_port_bandwidth(top)))
    else:
        latency = max(compute, t(load_bits, top.read_bw_bits), t(written, top.write_bw_bits))
    return energy, latency


def block_order(stages: tuple[int, ...], segment: tuple[int, int] | None, head_tiles: int) -> list[int]:
    """The order one tile of the fused loop runs its stages' blocks in: each once, and with a head tile the
    stages of the head-split run (``segment``) once per head tile, one head tile after another."""
    if segment is None or head_tiles <= 1:
        return sorted(stages)
    a, b = segment
    run = [j for j in sorted(stages) if a <= j <= b]
    return [j for j in sorted(stages) if j < a] + run * head_tiles + [j for j in sorted(stages) if j > b]


def shared_port_bandwidth(top: Level, where: str = "shared_offchip_port") -> float | None:
    """The bandwidth of one off-chip port that reads and writes (AccelForge's main memory): the level's, which
    must be the same both ways (``where`` names the option in the error)."""
    if top.read_bw_bits != top.write_bw_bits:
        raise SpecError(f"one shared off-chip port needs {top.name}'s read and write bandwidths equal, got "
                        f"{top.read_bw_bits} and {top.write_bw_bits} bits per cycle", where=where)
    return top.read_bw_bits


def pipeline_latency(top: Level, blocks: dict[int, dict[tuple[int, int], tuple[float, int]]],
                     stages: tuple[Stage, ...], rows: AxisSchedule, cols: AxisSchedule, resident_bits: int,
                     skip_bits: dict[int, int] | None = None, segment: tuple[int, int] | None = None,
                     head_tiles: int = 1, shared_port: bool = False, input_held_bits: int = 0) -> float:
    """The group's cycles as a three-stage pipeline: off-chip loads, the blocks, off-chip write-backs.

    The blocks run one after another in the tile loop's order (``blocks[j][shape]``: the latency and
    off-chip weight bits of stage j's block of that shape; with ``head_tiles`` > 1 the stages of
    ``segment`` once per head tile, ``block_order``). Each waits for its off-chip load (its
    weights, and for the tile's first block the tile's input fetched; the resident weights before the first
    one), loads are issued in the same order and prefetched while earlier blocks compute, and a
    tile's output is written back after its last block. A flow shop with its order fixed: with L, C,
    W the loads, blocks and write-backs in order, the run takes the most over i <= k of
    L_1..L_i + C_i..C_k + W_k..W_N (the path through the three units turning at i and k).
    A re-read join's skip (``skip_bits[j]`` per position stage j computes, for the adds to its output)
    loads with the block computing the positions it is added to.

    ``shared_port``: one off-chip port reads and writes (``shared_port_bandwidth``), serving its transfers in
    the program's order (a tile's loads, then its write-back once its last block has ended, then the next
    tile's loads); no closed form then, the recurrence is run block by block. ``input_held_bits``: the group's input
    held whole (``held_input_bits``), loaded before the first block, no tile loading its rows.
    """
    def t(bits: float, bw: float | None) -> float:
        return bits / bw if bw else 0.0

    n = len(stages)
    order = block_order(tuple(blocks), segment, head_tiles)
    in_elems = stages[0].in_depth * stages[0].in_bits
    out_elems = stages[-1].out_depth * stages[-1].out_bits
    rd_bw = shared_port_bandwidth(top) if shared_port else top.read_bw_bits
    wr_bw = rd_bw if shared_port else top.write_bw_bits
    load: list[float] = []
    comp: list[float] = []
    write: list[float] = []
    for ry in range(len(rows.comp)):
        for cx in range(len(cols.comp)):
            for i, j in enumerate(order):
                shape = (rows.comp[ry][j + 1][1] - rows.comp[ry][j + 1][0],
                         cols.comp[cx][j + 1][1] - cols.comp[cx][j + 1][0])
                lat, w = blocks[j].get(shape, (0.0, 0))
                bits = w + (((rows.comp[ry][0][1] - rows.comp[ry][0][0]) * (cols.comp[cx][0][1] - cols.comp[cx][0][0])
                             * in_elems) if i == 0 and not input_held_bits else 0)
                if skip_bits and j in skip_bits:
                    bits += shape[0] * shape[1] * skip_bits[j]
                load.append(t(bits, rd_bw))
                comp.append(lat)
                write.append(0.0)
            write[-1] = t((rows.need[ry][n][1] - rows.need[ry][n][0]) * (cols.need[cx][n][1] - cols.need[cx][n][0])
                          * out_elems, wr_bw)
    load[0] += t(resident_bits + input_held_bits, rd_bw)
    if shared_port:
        per_tile = len(order)
        port = free = 0.0
        for i, (ld, cy, wb) in enumerate(zip(load, comp, write, strict=True)):
            port += ld
            free = max(free, port) + cy
            if (i + 1) % per_tile == 0:
                port = max(port, free) + wb
        return max(port, free)
    L, C, W = np.cumsum(load), np.cumsum(comp), np.cumsum(np.asarray(write)[::-1])[::-1]
    # turning at i into the blocks and at k into the write-backs: L[i] + (C[k] - C[i-1]) + W[k]
    into = np.maximum.accumulate(L - np.r_[0.0, C[:-1]])
    return float(np.max(into + C + W))


def tile_candidates(size: int, limit: int = 8) -> list[int]:
    """Tile sizes along an axis: the whole axis, then halves (rounded up) down to one."""
    out: list[int] = []
    t = size
    while t >= 1 and len(out) < limit:
        if t not in out:
            out.append(t)
        if t == 1:
            break
        t = math.ceil(t / 2)
    return out
