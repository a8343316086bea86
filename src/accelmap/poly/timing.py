"""A decoupled access-execute (DAE) timing model of the Ascend-like core.

Five in-order queues run concurrently (PLDI 2021, Sec. 2 and 5): MTE-in (off-chip -> UB/L1),
MTE L1->L0 (cube operands), the cube, the vector unit, MTE-out (UB -> off-chip). A tile's
instruction on one queue waits for its producers on the others (a set/wait flag pair per
cross-queue edge) and, with double buffering, for the tile two steps earlier to release the
buffer it reuses (one step earlier without). Costs per tile use the full-tile footprints and
instance boxes, so a partial tile at a boundary is charged as a full one (as a padded tile is).

Rates: off-chip bytes/cycle are the DRAM level's bandwidths of the accelerator file; L1 -> L0
is the L1 read bandwidth; the cube does one f x f x f block (f = 16) per cycle; the vector unit
does one 256-byte repeat per cycle (8 blocks of 32 B, AKG's kVBlockNum x kVBlockSize). These
are model assumptions, not measurements of a chip.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import islpy as isl

from accelmap.poly.compile import CUBE, Compiled, KernelPlan
from accelmap.poly.kernel import Access, Call, dtype_bytes, strip_casts
from accelmap.poly.tiling import box_sizes

QUEUES = ("MTE-in", "MTE-L1L0", "cube", "vector", "MTE-out")
VECTOR_BYTES = 256


@dataclass
class TileWork:
    """Cycles of one tile on each queue, and the bytes behind them."""

    cycles: dict[str, int]
    in_bytes: int
    out_bytes: int
    cube_blocks: int


@dataclass
class KernelTiming:
    plan: KernelPlan
    work: TileWork
    cycles: int
    busy: dict[str, int]
    flags: int                    # set/wait pairs inserted between queues


@dataclass
class Timing:
    kernels: list[KernelTiming] = field(default_factory=list)

    @property
    def cycles(self) -> int:
        return sum(k.cycles for k in self.kernels)

    @property
    def offchip_bytes(self) -> int:
        return sum((k.work.in_bytes + k.work.out_bytes) * k.plan.n_tiles for k in self.kernels)

    @property
    def cube_blocks(self) -> int:
        return sum(k.work.cube_blocks * k.plan.n_tiles for k in self.kernels)

    def cube_utilization(self) -> float:
        return self.cube_blocks / self.cycles if self.cycles else 0.0

    def table(self) -> str:
        lines = [f"{'kernel':<28}{'tiles':>8}" + "".join(f"{q:>11}" for q in QUEUES) + f"{'flags':>8}{'cycles':>12}"]
        for kt in self.kernels:
            name = "{" + ",".join(kt.plan.statements) + "}"
            lines.append(f"{name:<28}{kt.plan.n_tiles:>8}" + "".join(f"{kt.busy[q]:>11,}" for q in QUEUES)
                         + f"{kt.flags:>8,}{kt.cycles:>12,}")
        lines.append(f"total (simulated): {self.cycles:,} cycles, off-chip traffic {self.offchip_bytes:,} B")
        return "\n".join(lines)


def _instance_box(plan: KernelPlan, stmt: str, c: Compiled) -> dict[str, int]:
    """Extent of each of ``stmt``'s dims inside one (full) tile."""
    assert plan.tile_instances is not None
    st = c.kernel.statement(stmt)
    space = isl.UnionSet(f"{{ {stmt}[{', '.join(st.dim_names)}] }}", context=c.program.ctx)
    maps: list[isl.Map] = []
    plan.tile_instances.intersect_range(space).foreach_map(maps.append)
    if not maps:
        return dict.fromkeys(st.dim_names, 0)
    return dict(zip(st.dim_names, box_sizes(maps[0]), strict=True))


def tile_work(c: Compiled, plan: KernelPlan) -> TileWork:
    k = c.kernel
    arch = c.arch
    dram = arch.level("DRAM")
    l1 = arch.level("L1")
    rd_bw = (dram.read_bw_bits or 8 * 32) / 8
    wr_bw = (dram.write_bw_bits or 8 * 32) / 8
    l1_bw = (l1.read_bw_bits or 8 * 256) / 8
    mine = set(plan.statements)
    written = {k.statement(s).out.tensor for s in mine}
    read = {a.tensor for s in mine for a in k.statement(s).reads}
    in_bytes = sum(f.bytes for n, f in plan.footprints.items() if not f.local and n in read and n not in written)
    out_bytes = sum(f.bytes for n, f in plan.footprints.items() if not f.local and n in written)
    cyc = dict.fromkeys(QUEUES, 0)
    cube_blocks = 0
    l0_bytes = 0
    cube_outs = set()
    for s in plan.statements:
        st = k.statement(s)
        box = _instance_box(plan, s, c)
        if st.is_cube:
            body = strip_casts(st.body)
            assert isinstance(body, Call)
            a, b = (strip_casts(x) for x in body.args)
            assert isinstance(a, Access) and isinstance(b, Access)
            out_dims = set(st.out.dims_used())
            in_a = {d for ix in a.index for d in ix.dims}
            in_b = {d for ix in b.index for d in ix.dims}
            batch = math.prod(box[d] for d in out_dims if d in in_a and d in in_b)
            m = math.prod(box[d] for d in out_dims if d in in_a and d not in in_b)
            n = math.prod(box[d] for d in out_dims if d in in_b and d not in in_a)
            kk = math.prod(box[d] for d in st.reduce_dims)
            blocks = batch * math.ceil(m / CUBE) * math.ceil(n / CUBE) * math.ceil(kk / CUBE)
            cube_blocks += blocks
            cyc["cube"] += blocks
            l0_bytes += plan.footprints[a.tensor].bytes + plan.footprints[b.tensor].bytes
            cube_outs.add(st.out.tensor)
        elif st.kind == "init" and any(k.statement(o).is_cube for o in mine if k.statement(o).out == st.out):
            continue   # the cube's first accumulation overwrites L0C: no separate clear
        else:
            inst = math.prod(box.values()) if box else 1
            cyc["vector"] += math.ceil(inst * dtype_bytes(k.tensors[st.out.tensor].dtype) / VECTOR_BYTES)
    for t in cube_outs:   # L0C -> UB for the vector unit or the way out
        cyc["vector"] += math.ceil(plan.footprints[t].bytes / VECTOR_BYTES)
    cyc["MTE-in"] = math.ceil(in_bytes / rd_bw)
    cyc["MTE-out"] = math.ceil(out_bytes / wr_bw)
    cyc["MTE-L1L0"] = math.ceil(l0_bytes / l1_bw)
    return TileWork(cyc, in_bytes, out_bytes, cube_blocks)


# Producer -> consumer edges between the queues of one tile.
_EDGES = (("MTE-in", "MTE-L1L0"), ("MTE-L1L0", "cube"), ("MTE-in", "vector"), ("cube", "vector"),
          ("vector", "MTE-out"), ("cube", "MTE-out"))


def simulate_kernel(work: TileWork, n_tiles: int, double_buffer: bool = True,
                    serialize: bool = False) -> tuple[int, dict[str, int], int]:
    """Cycles of ``n_tiles`` tiles through the five queues; also busy cycles and flag count."""
    active = [q for q in QUEUES if work.cycles[q] > 0]
    edges = [(a, b) for a, b in _EDGES if a in active and b in active]
    preds = {q: [a for a, b in edges if b == q] for q in active}
    depth = 2 if double_buffer else 1
    free = dict.fromkeys(active, 0)
    ends: list[dict[str, int]] = []
    last = 0
    for t in range(n_tiles):
        end: dict[str, int] = {}
        for q in active:   # QUEUES order is a topological order of _EDGES
            start = free[q]
            for p in preds[q]:
                start = max(start, end[p])
            # buffer reuse: the consumers of the buffer this tile fills must be done with tile t - depth
            if t >= depth:
                old = ends[t - depth]
                for a, b in edges:
                    if a == q:
                        start = max(start, old[b])
            if serialize:
                start = max(start, last)
            end[q] = start + work.cycles[q]
            free[q] = end[q]
            last = end[q]
        ends.append(end)
    total = max(ends[-1].values()) if ends else 0
    busy = {q: work.cycles[q] * n_tiles for q in QUEUES}
    return total, busy, len(edges) * n_tiles


def time_compiled(c: Compiled, double_buffer: bool = True, serialize: bool = False) -> Timing:
    out = Timing()
    for plan in c.plans:
        w = tile_work(c, plan)
        cycles, busy, flags = simulate_kernel(w, plan.n_tiles, double_buffer, serialize)
        out.kernels.append(KernelTiming(plan, w, cycles, busy, flags))
    return out
