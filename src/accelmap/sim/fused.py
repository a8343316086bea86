"""Simulate a fused group: its tile loop, every operator's tile program, and the off-chip DMA around them.

The fused tile loop walks the last stage's output in tiles (rows outer, columns inner). Which
positions of every tensor a tile computes is found by running the tensors' on-chip state, not by
the fusion model's interval arithmetic: every tensor (the group's input included) has a valid flag
per (row, column), cleared as its halo policy evicts it (at every tile when fully recomputed, at
every tile row when H-cached-V-recompute, never when fully cached); working back from the tile's
output, a stage computes the positions the next one reads (position by position through its window)
that are not valid, and the group's input positions read but not valid are fetched from off-chip
memory. A stage's computed positions must form a rectangle: that block is the operator it runs.

Each block runs as the single-operator simulator runs a mapping (``build_program`` and
``run_timing``), with the mapping the fusion model gives that block and on the accelerator whose
outermost level is the store (its bandwidth: a tile reads its window and the staged weights from the
store and writes its output there). Around the tiles, one DMA engine per direction moves the off-chip
data through the outermost level's ports: before a block runs, its weights (unless the group keeps
them in the store, then all of them once before the first tile) and, for the first stage, the input
fetched; after the last stage of a tile, its output. Loads are issued in the blocks' order and, as
the fusion model assumes, prefetched as far ahead as the read port allows (the staged data's room in
the store is not reserved, by the model nor here); ``prefetch_tiles=k`` limits them instead: a block's
load waits until the same stage's block k tiles earlier has started (1: double-buffered staging).
Blocks run one after another on the compute side. The run ends when the last block and the last
write-back end.

A residual join at the end of the group reads its skip tensor at each tile's output positions: kept,
the tile needs of that tensor the rectangle around those positions and its window (computed or
fetched where not valid, as any other read); re-read, the DMA engine loads them with the tile's last
block. A join inside the group (spanning two residual blocks) does the same at the positions of its
tensor a tile computes, its re-read skip loaded with the block computing them.

Producers kept on chip (``producers``: attention's K and V projections, outside the group, whose whole
outputs are second operands of its operators) run alone before its tile loop, with every produced output held
in the store (their mappings must fit next to them), and write their outputs there; the resident load before
the first tile (weights resident) or every block's weight load (weights streamed) then leaves those operands
out. What
the producers still move off chip (their inputs and weights) is counted apart (``producer_offchip_bits``);
their cycles are theirs as run alone, as in the fusion model. A group of one tile loads its input whole before
its tile's blocks; a producer whose first input is that tensor (GPT's K and V projections read the hidden state
the Q projection in the group reads) runs after that load and reads it in the store where its mapping fits next to
it and the produced outputs (``producer_input_store_bits``), as the fusion model's ``producers_on_chip`` prices it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from accelmap.arch.accelerator import Accelerator
from accelmap.cost.model import access_counts
from accelmap.errors import MappingError, SpecError
from accelmap.fusion.geometry import (
    MODES,
    Join,
    Stage,
    all_joins,
    check_chain,
    check_join,
    fused_counts,
    head_segment,
)
from accelmap.fusion.group_cost import (
    InnerMappings,
    Producer,
    block_norm_cycles,
    block_order,
    fits,
    reserved,
    resident_weight_bits,
    shared_port_bandwidth,
    store_index,
    store_priced,
)
from accelmap.fusion.stages import MacStage, head_slice, tile_operator
from accelmap.mapping.validate import validate
from accelmap.sim.engine import run_timing
from accelmap.sim.program import build_program

Block = tuple[int, int, int, int]     # rows [r0, r1) x columns [c0, c1)


@dataclass
class FusedSimResult:
    cycles: float
    tiles: int
    macs: tuple[int, ...]              # per stage, computed (recomputed halos included)
    input_fetched: int                 # elements of the group's input read from off-chip memory
    output_written: int                # elements of the group's output written off-chip
    weight_bits: int                   # off-chip bits of the operators' other operands
    compute_cycles: float              # the blocks' simulated cycles, summed
    read_port_cycles: float            # the off-chip read port's busy time
    write_port_cycles: float
    # each distinct block simulated: (stage index, rows, cols) -> (cycles, off-chip weight bits per run)
    programs: dict[tuple[int, int, int], tuple[float, int]]
    input_bits: int
    output_bits: int
    model_latency: float | None = None
    skip_bits: int = 0                 # a re-read join's skip tensor, read from off-chip memory
    # producers run before the group with their outputs left in the store: what they still move off chip (their
    # other operands), and their outputs' bits moved to and from the store instead
    producer_offchip_bits: int = 0
    producer_store_bits: int = 0
    producer_input_store_bits: int = 0     # the group's input read by producers in the store, not off chip

    @property
    def offchip_bits(self) -> int:
        return self.weight_bits + self.input_bits + self.output_bits + self.skip_bits

    @property
    def model_error(self) -> float | None:
        """(model - simulator) / simulator, when the model's latency was given."""
        if self.model_latency is None or not self.cycles:
            return None
        return (self.model_latency - self.cycles) / self.cycles


def _window_image(stage: Stage, out_mask: np.ndarray) -> np.ndarray:
    """The input positions the output positions in ``out_mask`` read, one window position at a time."""
    need = np.zeros((stage.in_rows, stage.in_cols), dtype=bool)
    rs, cs = np.nonzero(out_mask)
    for kr in range(stage.rows.span):
        ir = stage.rows.stride * rs - stage.rows.pad + kr
        for kc in range(stage.cols.span):
            ic = stage.cols.stride * cs - stage.cols.pad + kc
            ok = (ir >= 0) & (ir < stage.in_rows) & (ic >= 0) & (ic < stage.in_cols)
            need[ir[ok], ic[ok]] = True
    return need


def _bounds(mask: np.ndarray) -> Block:
    """The bounding rectangle of a non-empty mask."""
    rows, cols = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
    return int(rows[0]), int(rows[-1]) + 1, int(cols[0]), int(cols[-1]) + 1


def _block(mask: np.ndarray, what: str) -> Block | None:
    """The rectangle ``mask`` is (None when empty); an error when it is no rectangle."""
    rows, cols = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
    if rows.size == 0:
        return None
    r0, r1, c0, c1 = int(rows[0]), int(rows[-1]) + 1, int(cols[0]), int(cols[-1]) + 1
    if int(mask.sum()) != (r1 - r0) * (c1 - c0):
        raise SpecError(f"fused simulation: {what} computes positions that are no rectangle")
    return r0, r1, c0, c1


def walk_blocks(stages: tuple[Stage, ...], tile_rows: int, tile_cols: int, policies: tuple[str, ...],
                join: Join | None = None, skip_policy: str = "re-read",
                inner_joins: tuple[tuple[Join, str], ...] = ()) -> tuple[list[list[Block | None]], list[int]]:
    """Per tile (loop order) and stage: the block it computes; and per tile the input elements fetched.
    A kept join's skip positions (where its add computes) are read from their tensor like any other read."""
    check_chain(stages)
    kept: list[tuple[int, int]] = []          # (skip tensor, the tensor its add applies to)
    for jn, sp in all_joins(join, skip_policy, inner_joins):
        check_join(stages, jn, sp)
        if sp == "kept":
            assert jn.skip is not None
            kept.append((jn.skip, jn.target(len(stages))))
    if len(policies) != len(stages) or any(p not in MODES for p in policies):
        raise SpecError(f"fused simulation needs one halo policy of {', '.join(MODES)} per tensor before the "
                        f"last stage ({len(stages)}), got {policies}")
    n = len(stages)
    last = stages[-1]
    shapes = [(stages[0].in_rows, stages[0].in_cols)] + [(s.out_rows, s.out_cols) for s in stages]
    valid = [np.zeros(shape, dtype=bool) for shape in shapes[:n]]
    blocks: list[list[Block | None]] = []
    fetched: list[int] = []
    for ty in range(-(-last.out_rows // tile_rows)):
        for j, p in enumerate(policies):
            if not MODES[p][0]:
                valid[j][:] = False           # rows recomputed: nothing outlives its tile row
        for tx in range(-(-last.out_cols // tile_cols)):
            for j, p in enumerate(policies):
                if not MODES[p][1]:
                    valid[j][:] = False       # columns recomputed too: nothing outlives its tile
            comp = np.zeros(shapes[n], dtype=bool)
            comp[ty * tile_rows:(ty + 1) * tile_rows, tx * tile_cols:(tx + 1) * tile_cols] = True
            computed = {n: comp}
            row: list[Block | None] = [None] * n
            for j in range(n - 1, -1, -1):
                row[j] = _block(comp, f"{stages[j].name} at tile ({ty}, {tx})")
                comp = _window_image(stages[j], comp)
                for skip, k in kept:
                    if skip != j:
                        continue
                    if not comp.any() or not computed[k].any():
                        raise SpecError(f"fused simulation: a kept skip of tensor {j} at tile ({ty}, {tx}) is no "
                                        "rectangle of the two axes (the model refuses it)")
                    # the add reads the skip where its tensor is computed: the rectangle around them
                    r0, r1, c0, c1 = _bounds(comp | computed[k])
                    comp = np.zeros_like(comp)
                    comp[r0:r1, c0:c1] = True
                comp &= ~valid[j]
                valid[j] |= comp
                computed[j] = comp
            blocks.append(row)
            fetched.append(int(comp.sum()) * stages[0].in_depth)
    return blocks, fetched


def simulate_fused(stages: tuple[Stage, ...], macs: dict[int, MacStage], arch: Accelerator, tile_rows: int,
                   tile_cols: int, policies: tuple[str, ...], inner: InnerMappings,
                   weights_resident: bool = False, model_latency: float | None = None,
                   prefetch_tiles: int | None = None, join: Join | None = None,
                   skip_policy: str = "re-read", inner_joins: tuple[tuple[Join, str], ...] = (),
                   producers: dict[int, Producer] | None = None, head_tile: int | None = None,
                   shared_port: bool = False, norms: tuple[tuple[int, int], ...] = (),
                   input_held: bool = False) -> FusedSimResult:
    """Run the group's tile loop; ``inner`` gives each block's mapping (the fusion model's, when shared).
    With ``join``, the group ends with that residual add, its skip ``kept`` or ``re-read``; with
    ``inner_joins``, adds inside the group (each with its skip policy); with ``producers`` (by stage index),
    the producers of those stages' second operands run first and leave them in the store. With ``head_tile``
    the head-split stages (attention's scores and context) run once per head tile within each tile, each block
    on ``head_tile`` heads; ``shared_port``: one off-chip port serves the loads and write-backs in program
    order (the DMA engines take turns); ``norms``: (stage, count) of the normalizations applied to a stage's
    output inside the group: the vector unit runs them over each block's output before the next block starts;
    ``input_held`` (``GroupCost.input_held``): a group of several tiles fetches its input whole before the producers
    run and keeps it in the store (in place of its input buffer), its tiles loading no rows of it."""
    blocks, fetched = walk_blocks(stages, tile_rows, tile_cols, policies, join, skip_policy, inner_joins)
    segment = head_segment(stages, head_tile, all_joins(join, skip_policy, inner_joins))
    head_tiles = 1 if segment is None or head_tile is None else stages[segment[0]].heads // head_tile
    n = len(stages)
    # per stage: bits of re-read skip per position of its output (its adds' skips, loaded with its block)
    reread: dict[int, int] = {}
    for jn, sp in all_joins(join, skip_policy, inner_joins):
        if sp != "kept":
            k = jn.target(n)
            reread[k - 1] = reread.get(k - 1, 0) + stages[k - 1].out_depth * jn.bits
    counts = fused_counts(stages, tile_rows, tile_cols, policies, join, skip_policy, inner_joins, head_tile)
    keep = counts.buffer_total_bits
    # one tile, or the input held: the group's input is in the store, whole, before the producers run
    whole_input = macs[0].operator.footprint(macs[0].operator.inputs[0]) * macs[0].operator.inputs[0].bits \
        if (len(blocks) == 1 or input_held) and 0 in macs else 0
    if input_held:
        if len(blocks) == 1 or sum(fetched) != stages[0].in_rows * stages[0].in_cols * stages[0].in_depth:
            raise SpecError("fused simulation: only a group of several tiles fetching each input element once holds "
                            "its input whole")
        keep += whole_input - counts.buffer_bits[0]
    in_store, producer_off, producer_store, producer_input = _run_producers(producers or {}, macs, arch, whole_input)
    # resident: every weight (the produced operands among them); streamed: the produced operands alone
    keep += resident_weight_bits(macs) if weights_resident else in_store
    got = reserved(arch, keep)
    if got is None:
        raise SpecError(f"fused simulation: buffers of {keep / 8192:,.1f} KiB do not fit "
                        f"{arch.levels[store_index(arch)].name}")
    arch_r, _ = got
    arch_s = store_priced(arch_r)
    top = arch.levels[0]
    # The mapping of a stage's blocks comes from its largest block, as in the fusion model.
    largest: dict[int, tuple[int, int]] = {}
    for row in blocks:
        for j, b in enumerate(row):
            if b is not None and j in macs:
                r, c = b[1] - b[0], b[3] - b[2]
                lr, lc = largest.get(j, (0, 0))
                largest[j] = (max(lr, r), max(lc, c))
    programs: dict[tuple[int, int, int], tuple[float, int]] = {}    # (stage, rows, cols) -> (cycles, weight bits)
    passes = dict(norms)

    def block_run(j: int, r: int, c: int) -> tuple[float, int]:
        key = (j, r, c)
        if key not in programs:
            ms = macs[j]
            if segment is not None and head_tile is not None and segment[0] <= j <= segment[1]:
                ms = head_slice(ms, head_tile)          # a block of one head tile
            m = inner.mapping(ms, largest[j], (r, c), arch_r)
            if isinstance(m, str):
                raise SpecError(f"fused simulation: {ms.operator.name}'s {r}x{c} block cannot be mapped: {m}")
            tile = tile_operator(ms, r, c)
            prog = build_program(tile, arch_s, m, access_counts(tile, arch_s, m))
            op = ms.operator
            # streamed weights, less a second operand its producer left in the store
            others = set() if weights_resident else {x.name for x in op.inputs[1:]} - (
                {op.inputs[1].name} if producers and j in producers else set())
            bits = {x.name: x.bits for x in tile.operands}
            w = sum(sum(cnt.as_tuple()) * bits[x] for (lv, x), cnt in access_counts(tile, arch_r, m).items()
                    if lv == 0 and x in others)
            programs[key] = (run_timing(prog).cycles + block_norm_cycles(arch, ms, r, c, passes.get(j, 0)), w)
        return programs[key]

    rd_bw, wr_bw = top.read_bw_bits, top.write_bw_bits
    if shared_port:
        rd_bw = wr_bw = shared_port_bandwidth(top)

    def port_time(bits: int, bw: float | None) -> float:
        return bits / bw if bw else 0.0

    read_free = write_free = compute_free = 0.0
    read_busy = write_busy = compute_busy = 0.0
    weight_bits = written = 0
    if weights_resident:
        weight_bits = resident_weight_bits(macs) - in_store      # the producers' outputs are there already
        read_free = read_busy = port_time(weight_bits, rd_bw)
    if prefetch_tiles is not None and prefetch_tiles < 1:
        raise SpecError(f"fused simulation: prefetch_tiles must be at least 1 (or None: unlimited), got {prefetch_tiles}")
    starts: dict[int, list[float]] = {j: [] for j in macs}
    macs_done = [0] * n
    skip_bits = 0
    end = 0.0
    order = block_order(tuple(range(n)), segment, head_tiles)
    for t, row in enumerate(blocks):
        for i, j in enumerate(order):
            b = row[j]
            if b is None:
                continue
            r, c = b[1] - b[0], b[3] - b[2]
            in_segment = segment is not None and segment[0] <= j <= segment[1]
            macs_done[j] += stages[j].macs_per_pixel * r * c // (head_tiles if in_segment else 1)
            if j not in macs:
                continue        # a pooling window: comparisons on the output path, not charged
            cycles, w = block_run(j, r, c)
            load = w + (fetched[t] * stages[0].in_bits if i == 0 and not input_held else 0)
            if input_held and t == 0 and i == 0:
                load += whole_input             # held whole: fetched before the first block
            if j in reread:
                skip = r * c * reread[j]           # the skip where the block computes its add's tensor
                load += skip
                skip_bits += skip
            weight_bits += w
            ready = read_free
            if prefetch_tiles is not None and len(starts[j]) >= prefetch_tiles:
                ready = max(ready, starts[j][-prefetch_tiles])
            read_free = ready + port_time(load, rd_bw)
            read_busy += port_time(load, rd_bw)
            if shared_port:
                write_free = read_free
            start = max(compute_free, read_free)
            starts[j].append(start)
            compute_free = start + cycles
            compute_busy += cycles
        b = row[n - 1]
        out_elems = 0 if b is None else (b[1] - b[0]) * (b[3] - b[2]) * stages[-1].out_depth
        written += out_elems
        out_bits = out_elems * stages[-1].out_bits
        write_free = max(write_free, compute_free) + port_time(out_bits, wr_bw)
        write_busy += port_time(out_bits, wr_bw)
        if shared_port:
            read_free = write_free
        end = max(end, compute_free, write_free)
    return FusedSimResult(end, len(blocks), tuple(macs_done), sum(fetched), written, weight_bits, compute_busy,
                          read_busy, write_busy,
                          programs, sum(fetched) * stages[0].in_bits,
                          written * stages[-1].out_bits, model_latency, skip_bits, producer_off, producer_store,
                          producer_input)


def _run_producers(producers: dict[int, Producer], macs: dict[int, MacStage],
                   arch: Accelerator, whole_input: int = 0) -> tuple[int, int, int, int]:
    """The producers run alone before the group, every produced output held in the store: (bits of the group's
    operands they leave there, their own off-chip bits with their outputs in the store, their outputs' bits
    moved to and from the store, the group's input bits they read in the store). ``whole_input``: bits of the
    group's input in the store when they run (0: none)."""
    if not producers:
        return 0, 0, 0, 0
    names = ", ".join(p.node for p in producers.values())
    st = arch.levels[store_index(arch)]
    if "W" not in st.holds:
        raise SpecError(f"fused simulation: producers ({names}) cannot leave their outputs in {st.name}: it holds no "
                        "weights")
    held = sum(p.output_bits for p in producers.values())
    got = reserved(arch, held)
    if got is None:
        raise SpecError(f"fused simulation: the produced outputs of {names} ({held / 8192:,.1f} KiB) do not fit "
                        f"{arch.levels[store_index(arch)].name}")
    with_input = reserved(arch, held + whole_input) if whole_input else None
    in_store = off = store = from_input = 0
    for j, p in producers.items():
        if j not in macs or len(macs[j].operator.inputs) < 2:
            raise SpecError(f"fused simulation: {p.node} produces no second operand of the group's stage {j}")
        try:
            validate(p.operator, got[0], p.mapping)
        except (MappingError, SpecError) as err:
            raise SpecError(f"fused simulation: {p.node}'s mapping does not fit next to the produced outputs: "
                            f"{err}") from None
        bits = {x.name: x.bits for x in p.operator.operands}
        out = p.operator.output.name
        first = p.operator.inputs[0].name if (p.reads_group_input and with_input is not None
                                              and fits(p, with_input[0])) else None
        for (lv, x), cnt in access_counts(p.operator, arch, p.mapping).items():
            if lv == 0:
                moved = sum(cnt.as_tuple()) * bits[x]
                store += moved if x == out else 0
                from_input += moved if x == first else 0
                off += 0 if x in (out, first) else moved
        operand = macs[j].operator.inputs[1]
        in_store += macs[j].operator.footprint(operand) * operand.bits
    return in_store, off, store, from_input
