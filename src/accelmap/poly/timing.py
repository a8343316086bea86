"""A decoupled access-execute (DAE) timing model of the Ascend-like core.

Five in-order queues run concurrently (PLDI 2021, Sec. 2 and 5): MTE-in (off-chip -> UB/L1),
MTE L1->L0 (cube operands), the cube, the vector unit, MTE-out (UB -> off-chip). A tile's
instruction on one queue waits for its producers on the others (a set/wait flag pair per
cross-queue edge) and, with double buffering, for the tile two steps earlier to release the
buffer it reuses (one step earlier without). Costs per tile use the full-tile footprints and
instance boxes, so a partial tile at a boundary is charged as a full one (as a padded tile is).

Rates: off-chip bytes/cycle are the DRAM level's bandwidths of the accelerator file, plus a fixed
setup per DMA transfer (DMA_SETUP_CYCLES unless the file gives one); L1 -> L0
is the L1 read bandwidth; the cube does one f x f x f block (f = 16) per cycle; the vector unit
does one 256-byte repeat per cycle (8 blocks of 32 B, AKG's kVBlockNum x kVBlockSize). These
are model assumptions, not measurements of a chip.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import islpy as isl

from accelmap.poly.kernel import CUBE, Access, Call, dtype_bytes, strip_casts
from accelmap.poly.sync import Flag, group_flags, issues_per_tile, plan_flags, tile_program
from accelmap.poly.vector_intrinsics import VECTOR_BYTES, vector_work

if TYPE_CHECKING:   # compile.py costs its fusion choices with this model
    from accelmap.poly.compile import Compiled, KernelPlan

QUEUES = ("MTE-in", "MTE-L1L0", "cube", "vector", "MTE-out")
# Fixed cycles to start one DMA transfer (one tensor's tile) when the accelerator file gives none for
# its DRAM level (transfer_setup_cycles). An assumption of this model: without it a tile of 32 bytes
# would look as cheap per byte as a tile of 32 KiB.
DMA_SETUP_CYCLES = 32
# Cost of one set/wait flag pair in the DP grouping of synchronization (issue slots on both queues): an
# assumption of this model, as the paper gives none; it is weighed against the delay a merged flag adds.
SYNC_FLAG_CYCLES = 16


@dataclass
class TileWork:
    """Cycles of one tile on each queue (for a hand-made uniform kernel)."""

    cycles: dict[str, int]


@dataclass
class KernelTiming:
    plan: KernelPlan
    in_bytes: int                 # off-chip bytes loaded over all tiles
    out_bytes: int                # off-chip bytes stored over all tiles
    cube_blocks: int
    cycles: int
    busy: dict[str, int]
    flags: int                    # set/wait pairs issued between queues after the DP grouping
    flags_direct: int = 0         # one pair per cross-queue dependence
    flags_covered: int = 0        # after eliminating only the waits another flag covers at no delay
    flag_cycles: int = 0          # issue cycles of the flags' sets and waits, summed over the queues
    vector_instructions: int = 0  # block instructions of the vector statements (vector_intrinsics.vector_work)
    vector_repeats: int = 0       # their 256-byte repeats: the vector queue's cycles without drains and flags


@dataclass
class Timing:
    kernels: list[KernelTiming] = field(default_factory=list)

    @property
    def cycles(self) -> int:
        return sum(k.cycles for k in self.kernels)

    @property
    def offchip_bytes(self) -> int:
        return sum(k.in_bytes + k.out_bytes for k in self.kernels)

    @property
    def cube_blocks(self) -> int:
        return sum(k.cube_blocks for k in self.kernels)

    def cube_utilization(self) -> float:
        return self.cube_blocks / self.cycles if self.cycles else 0.0

    def table(self) -> str:
        lines = [f"{'kernel':<28}{'tiles':>8}" + "".join(f"{q:>11}" for q in QUEUES) + f"{'flags':>8}{'cycles':>12}"]
        for kt in self.kernels:
            name = "{" + ",".join(kt.plan.statements) + "}"
            lines.append(f"{name:<28}{kt.plan.n_tiles:>8}" + "".join(f"{kt.busy[q]:>11,}" for q in QUEUES)
                         + f"{kt.flags:>8,}{kt.cycles:>12,}")
        lines.append(f"total (simulated): {self.cycles:,} cycles, off-chip traffic {self.offchip_bytes:,} B; "
                     f"set/wait flags {sum(k.flags for k in self.kernels):,} after the DP grouping, "
                     f"{sum(k.flag_cycles for k in self.kernels):,} queue cycles issuing them "
                     f"({sum(k.flags_covered for k in self.kernels):,} eliminating only covered waits, "
                     f"{sum(k.flags_direct for k in self.kernels):,} one per dependence)")
        return "\n".join(lines)


def _box(s: isl.Set) -> tuple[int, ...]:
    return tuple(s.dim_max_val(i).to_python() - s.dim_min_val(i).to_python() + 1
                 for i in range(s.dim(isl.dim_type.set)))


def _split(u: isl.UnionSet) -> dict[str, isl.Set]:
    out: dict[str, isl.Set] = {}
    u.foreach_set(lambda x: out.__setitem__(x.get_tuple_name(), x))
    return out


class _TileCosts:
    """Work of one tile of ``plan``, computed once per tile class (first / inner / last along each tile loop:
    the tiles of a class have the same footprints and instance boxes) at a representative tile."""

    def __init__(self, c: Compiled, plan: KernelPlan):
        self.c, self.plan = c, plan
        k = c.kernel
        dram, l1 = c.arch.level("DRAM"), c.arch.level("L1")
        self.rd_bw = (dram.read_bw_bits or 8 * 32) / 8
        self.wr_bw = (dram.write_bw_bits or 8 * 32) / 8
        self.l1_bw = (l1.read_bw_bits or 8 * 256) / 8
        self.setup = dram.transfer_setup_cycles or DMA_SETUP_CYCLES
        mine = set(plan.statements)
        self.written = {k.statement(s).out.tensor for s in mine}
        self.read = {a.tensor for s in mine for a in k.statement(s).reads}
        self.layout = k.layout_statements()
        self.cache: dict[tuple[int, ...], tuple[dict[str, int], dict[str, int], int, dict[str, int]]] = {}
        self.vector: dict[tuple[int, ...], tuple[int, int]] = {}   # per tile class: vector instructions, repeats
        self.vector_total = (0, 0)   # over the tiles ``tiles`` has yielded

    def at(self, key: tuple[int, ...]) -> tuple[dict[str, int], dict[str, int], int, dict[str, int]]:
        """Cycles per queue without the off-chip transfers, footprint bytes per tensor, cube blocks,
        and the L0C -> UB cycles of each cube output."""
        if key not in self.cache:
            self.cache[key] = self._compute(key)
        return self.cache[key]

    def _compute(self, key: tuple[int, ...]):
        c, plan, k = self.c, self.plan, self.c.kernel
        assert plan.tile_instances is not None
        if plan.tile_values:
            point = [vals[0] if cls == 0 else vals[-1] if cls == 2 else vals[1]
                     for cls, vals in zip(key, plan.tile_values, strict=True)]
            pt = isl.Set(f"{{ [{', '.join(map(str, point))}] }}", context=c.program.ctx)
            inst = plan.tile_instances.intersect_domain(isl.UnionSet.from_set(pt)).range()
        else:   # no grid: charge the largest tile everywhere
            inst = plan.tile_instances.range()
        per_stmt = _split(inst)
        data = _split(inst.apply(c.program.reads).union(inst.apply(c.program.writes)))
        nbytes = {t: math.prod(_box(s)) * dtype_bytes(k.tensors[t].dtype) for t, s in data.items()}
        cyc = dict.fromkeys(QUEUES, 0)
        blocks = 0
        l0 = 0
        vec = (0, 0)   # vector instructions and repeats of the statements (the L0C drain apart)
        cube_outs: set[str] = set()
        for name, dom in per_stmt.items():
            st = k.statement(name)
            box = dict(zip(st.dim_names, _box(dom), strict=True)) if dom.dim(isl.dim_type.set) else {}
            if st.is_cube:
                body = strip_casts(st.body)
                assert isinstance(body, Call)
                a, b = (strip_casts(x) for x in body.args)
                assert isinstance(a, Access) and isinstance(b, Access)
                batch, m, n, kk = (math.prod(box[d] for d in dims) for dims in st.contraction_dims())
                nb = batch * math.ceil(m / CUBE) * math.ceil(n / CUBE) * math.ceil(kk / CUBE)
                blocks += nb
                cyc["cube"] += nb
                l0 += nbytes[a.tensor] + nbytes[b.tensor]
                cube_outs.add(st.out.tensor)
            elif st.kind == "init" and any(k.statement(o).is_cube and k.statement(o).out == st.out
                                           for o in per_stmt):
                continue   # the cube's first accumulation overwrites L0C: no separate clear
            elif name in self.layout:
                continue   # img2col / fractal layout: the MTE produces it in the cube operand's L1 -> L0 load
            else:   # rows of block instructions, or one element per 32-byte block when strided
                ins, reps = vector_work(k, st, box, c.vector_contiguous.get(name, True), c.vector_row_dims.get(name))
                cyc["vector"] += reps
                vec = (vec[0] + ins, vec[1] + reps)
        # L0C -> UB (on the vector queue), once the accumulation of an output tile is complete
        drain = {t: math.ceil(nbytes[t] / VECTOR_BYTES) for t in cube_outs if "UB" in plan.footprints[t].buffers}
        cyc["MTE-L1L0"] = math.ceil(l0 / self.l1_bw)
        self.vector[key] = vec
        return cyc, nbytes, blocks, drain

    def tiles(self):
        """(cycles per queue, bytes in, bytes out, cube blocks) for every tile in execution order."""
        plan = self.plan
        offchip = [(t, f) for t, f in plan.footprints.items() if not f.local]
        ins = [(t, f.run) for t, f in offchip if t in self.read and t not in self.written]
        outs = [(t, f.run) for t, f in offchip if t in self.written]
        shape = [len(v) for v in plan.tile_values] or [1]
        for idx, pos in enumerate(itertools.product(*(range(n) for n in shape))):
            key = tuple(0 if j == 0 else (2 if j == n - 1 else 1) for j, n in zip(pos, shape, strict=True))
            cyc, nbytes, blocks, drain = self.at(key)
            self.vector_total = (self.vector_total[0] + self.vector[key][0], self.vector_total[1] + self.vector[key][1])
            loads = [nbytes.get(t, 0) for t, run in ins if idx % run == 0]
            stores = [nbytes.get(t, 0) for t, run in outs if idx % run == run - 1]
            bin_, bout = sum(loads), sum(stores)
            full = dict(cyc)
            full["vector"] += sum(n for t, n in drain.items() if idx % plan.footprints[t].run == plan.footprints[t].run - 1)
            full["MTE-in"] = math.ceil(bin_ / self.rd_bw) + self.setup * sum(1 for b in loads if b)
            full["MTE-out"] = math.ceil(bout / self.wr_bw) + self.setup * sum(1 for b in stores if b)
            yield full, bin_, bout, blocks


# Producer -> consumer edges between the queues of one tile.
_EDGES = (("MTE-in", "MTE-L1L0"), ("MTE-L1L0", "cube"), ("MTE-in", "vector"), ("cube", "vector"),
          ("vector", "MTE-out"), ("cube", "MTE-out"))


def simulate_kernel(work: TileWork | list[dict[str, int]], n_tiles: int, double_buffer: bool = True,
                    serialize: bool = False) -> tuple[int, dict[str, int], int]:
    """Cycles of the tiles through the five queues (one work for all tiles, or one per tile);
    also busy cycles per queue and the number of set/wait flag pairs."""
    per_tile = [work.cycles] * n_tiles if isinstance(work, TileWork) else work
    active = [q for q in QUEUES if any(w[q] for w in per_tile)]
    edges = [(a, b) for a, b in _EDGES if a in active and b in active]
    preds = {q: [a for a, b in edges if b == q] for q in active}
    succs = {q: [b for a, b in edges if a == q] for q in active}
    depth = 2 if double_buffer else 1
    free = dict.fromkeys(active, 0)
    ends: list[dict[str, int]] = []
    last = 0
    for t, w in enumerate(per_tile):
        end: dict[str, int] = {}
        for q in active:   # QUEUES order is a topological order of _EDGES
            start = free[q]
            for p in preds[q]:
                start = max(start, end[p])
            # buffer reuse: the consumers of the buffer this tile fills must be done with tile t - depth
            if t >= depth:
                old = ends[t - depth]
                for b in succs[q]:
                    start = max(start, old[b])
            if serialize:
                start = max(start, last)
            end[q] = start + w[q]
            free[q] = end[q]
            last = end[q]
        ends.append(end)
    total = max(ends[-1].values()) if ends and ends[-1] else 0
    busy = {q: sum(w[q] for w in per_tile) for q in QUEUES}
    return total, busy, len(edges) * len(per_tile)


def kernel_flags(c: Compiled, plan: KernelPlan, per_tile: list[dict[str, int]]) -> tuple[list[Flag], int, int]:
    """The set/wait flags of one tile of ``plan`` after the DP grouping, and the counts one per dependence and
    after covered-wait elimination. The DP weighs a flag against the producer work a merged wait adds: a
    queue's mean cycles per tile, shared evenly by its instructions in the tile program."""
    program = tile_program(c, plan)
    direct, kept = plan_flags(program)
    count = {q: sum(1 for ins in program if ins.queue == q) for q in QUEUES}
    mean = {q: sum(w[q] for w in per_tile) / max(1, len(per_tile)) for q in QUEUES}
    weights = [mean[ins.queue] / count[ins.queue] for ins in program]
    grouped, _ = group_flags(program, weights, SYNC_FLAG_CYCLES)
    return grouped, direct, kept


def time_kernel(c: Compiled, plan: KernelPlan, double_buffer: bool = True, serialize: bool = False) -> KernelTiming:
    """The simulated cycles, traffic and flags of one kernel of ``c`` (kernels run one after another). Every
    tile issues its flags: a set costs SYNC_FLAG_CYCLES / 2 on the producer's queue, a wait as much on the
    consumer's (the pair's SYNC_FLAG_CYCLES, which the DP grouping minimizes)."""
    costs = _TileCosts(c, plan)
    per_tile, bin_, bout, blocks = [], 0, 0, 0
    for cyc, i, o, b in costs.tiles():
        per_tile.append(cyc)
        bin_, bout, blocks = bin_ + i, bout + o, blocks + b
    grouped, direct, kept = kernel_flags(c, plan, per_tile)
    program = tile_program(c, plan)
    issue = dict.fromkeys(QUEUES, 0)
    issued = 0
    for f in grouped:
        times = issues_per_tile(program, f, plan.l0_chunks)   # a flag inside the L0 chunk loop: once per chunk
        issued += times
        issue[f.producer] += times * SYNC_FLAG_CYCLES // 2
        issue[f.consumer] += times * SYNC_FLAG_CYCLES // 2
    per_tile = [{q: w[q] + issue[q] if w[q] or issue[q] else 0 for q in QUEUES} for w in per_tile]
    cycles, busy, _edges = simulate_kernel(per_tile, len(per_tile), double_buffer, serialize)
    n = len(per_tile)
    return KernelTiming(plan, bin_, bout, blocks, cycles, busy, issued * n, direct * n, kept * n,
                        sum(issue.values()) * n, *costs.vector_total)


def time_compiled(c: Compiled, double_buffer: bool = True, serialize: bool = False) -> Timing:
    return Timing([time_kernel(c, plan, double_buffer, serialize) for plan in c.plans])
