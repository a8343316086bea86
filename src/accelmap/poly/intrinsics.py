"""The cube's block intrinsic in the emitted C: ``mmad`` on 16x16x16 fractal blocks with an L0C accumulator.

On the Ascend core the cube does not multiply element by element: one ``mmad`` takes a 16x16 block of
the first operand from L0A and a 16x16 block of the second from L0B and accumulates their product in a
16x16 block of L0C (fp16 or int8 operands, fp32 or int32 accumulation); L0C is then moved to UB (PLDI
2021, Sec. 2 and 4.5). AKG marks the cube subtree and maps it to these intrinsics. Here a cube statement
whose innermost band walks whole blocks becomes one call per block: the AST schedule keeps only the
block origins (multiples of 16 in the block's M, N and K dims), the statement's macro becomes a C
function that runs one 16x16x16 block into a static L0C array, and a drain statement copies L0C to the
tile's UB buffer once the accumulation of an output tile is complete (the last tile of the footprint's
run, as the timing model charges it). The reduction's init is folded into the mmad: an element whose
reduction dims are all 0 starts from the identity instead of reading L0C (the chip's mmad has an init
bit). Every mmad call increments ``accelmap_counts[0]``, which a test compares with the timing model's
cube blocks.

A cube statement is blocked when (otherwise it stays element by element and ``CubeBlocks.notes`` says
why): its M, N and K classes each have one dim to walk 16 at a time (the only dim of the class, or the
class's 16-wide fractal dim); it is in the kernel's own group, not a fused producer (those
instances come from an extension, which restricting the domain does not reach), with its init; the kernel is
tiled; its innermost band
holds only the statement and its init; every block lies in one tile and one L0 chunk (checked with isl:
instances of one block have equal prefix schedules); and when K spans several tiles, no other statement
of the kernel reads the accumulator (it sees UB only after the drain).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import islpy as isl

from accelmap.poly.compile import independent_of_tile_loop
from accelmap.poly.kernel import CUBE, Statement
from accelmap.poly.schedule import group_nodes, innermost_band, next_sequence, statements_of, subtree_statements

if TYPE_CHECKING:
    from accelmap.poly.compile import Compiled, KernelPlan


@dataclass(frozen=True)
class CubeBlock:
    plan: int                       # kernel index
    stmt: str                       # the cube update statement
    init: str                       # its reduction's init, folded into the first mmad
    dims: tuple[str, str, str]      # the M, N and K dims walked 16 at a time
    out: str                        # the accumulator tensor
    box: tuple[int, ...]            # its per-tile box: the L0C array
    drain: str                      # the L0C -> UB statement

    def l0c(self) -> str:
        return f"{self.out}_l0c{self.plan}"


@dataclass
class CubeBlocks:
    blocks: list[CubeBlock] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)   # cube statements left element by element, and why


def block_dims(st: Statement) -> tuple[str, str, str] | str:
    """The dim of each of M, N, K that an mmad walks 16 at a time, or why there is none."""
    _batch, *classes = st.contraction_dims()
    extent = dict(st.dims)
    out = []
    for label, dims in zip("MNK", classes, strict=True):
        if len(dims) == 1:
            out.append(dims[0])
            continue
        fractal = [d for d in dims if extent[d] == CUBE]
        if not dims:
            return f"it has no {label} dim"
        if not fractal:
            return f"its {label} dims {', '.join(dims)} have no single dim to block by {CUBE}"
        out.append(fractal[-1])
    return out[0], out[1], out[2]


def _same_block(st: Statement, dims: tuple[str, ...]) -> str:
    """isl text of { S[x] -> S[y] : x and y in one block }."""
    x = [f"x_{d}" for d in st.dim_names]
    y = [f"y_{d}" for d in st.dim_names]
    cons = [f"floor(x_{d}/{CUBE}) = floor(y_{d}/{CUBE})" if d in dims else f"x_{d} = y_{d}" for d in st.dim_names]
    return f"{{ {st.name}[{', '.join(x)}] -> {st.name}[{', '.join(y)}] : {' and '.join(cons)} }}"


def _run_end_tiles(plan: KernelPlan, tensor: str, ctx: isl.Context) -> isl.UnionSet:
    """The tiles after which ``tensor``'s footprint changes (the last tile of each run): there the
    accumulation of an output tile is complete."""
    assert plan.tile_instances is not None
    tiles = plan.tile_instances.domain()
    run = plan.footprints[tensor].run
    if run <= 1 or not plan.tile_values:
        return tiles
    n = len(plan.tile_values)
    fixed, covered = [], 1
    for i in reversed(range(n)):
        if covered >= run:
            break
        fixed.append(f"t{i} = {plan.tile_values[i][-1]}")
        covered *= len(plan.tile_values[i])
    names = ", ".join(f"t{i}" for i in range(n))
    return tiles.intersect(isl.UnionSet(f"{{ [{names}] : {' and '.join(fixed)} }}", context=ctx))


def cube_blocks(c: Compiled, schedule: isl.Schedule) -> CubeBlocks:
    """Which cube statements of ``c`` run as block mmad calls in the code of ``schedule``."""
    k = c.kernel
    res = CubeBlocks()
    root = schedule.get_root()
    for plan in c.plans:
        for name in plan.statements:
            st = k.statement(name)
            if not st.is_cube:
                continue
            why = _why_not(c, plan, st, root)
            if isinstance(why, str):
                res.notes.append(f"{name} stays element by element: {why}")
                continue
            init, dims = why
            res.blocks.append(CubeBlock(plan.index, name, init, dims, st.out.tensor,
                                        plan.footprints[st.out.tensor].box, f"l0c{plan.index}_{st.out.tensor}"))
    return res


def _why_not(c: Compiled, plan: KernelPlan, st: Statement,
             root: isl.ScheduleNode) -> str | tuple[str, tuple[str, str, str]]:
    k, prog = c.kernel, c.program
    dims = block_dims(st)
    if isinstance(dims, str):
        return dims
    if st.name not in plan.group:
        return "it is a fused producer (an extension brings its instances into the tiles, not the domain)"
    inits = [s for s in plan.group if k.statement(s).kind == "init" and k.statement(s).out == st.out]
    if not inits:
        return "its reduction's init runs in another kernel"
    if not plan.sizes or plan.tile_instances is None:
        return "its kernel is not tiled"
    band = innermost_band(root, st.name)
    if band is None:
        return "it has no band"
    others = set(statements_of(band.band_get_partial_schedule_union_map().domain())) - {st.name, inits[0]}
    if others:
        return f"its innermost band also runs {', '.join(sorted(others))}"
    prefix = band.get_prefix_schedule_relation().intersect_domain(prog.stmt_set([st.name]))
    same = isl.UnionMap(_same_block(st, dims), context=prog.ctx).intersect_domain(prog.domain).intersect_range(
        prog.domain)
    if not same.is_subset(prefix.apply_range(prefix.reverse())):
        return f"a {CUBE}x{CUBE}x{CUBE} block would straddle two tiles or L0 chunks"
    if _sharing_tiles(c, plan, st) != plan.footprints[st.out.tensor].run:
        return "the tiles of one output tile's reduction are not consecutive (L0C would not stay resident)"
    readers = [s for s in plan.statements if s not in (st.name, inits[0])
               and st.out.tensor in {a.tensor for a in k.statement(s).reads}]
    if readers and plan.footprints[st.out.tensor].run > 1:
        return f"{', '.join(readers)} read the accumulator while the reduction spans several tiles"
    return inits[0], dims


def _sharing_tiles(c: Compiled, plan: KernelPlan, st: Statement) -> int:
    """How many tiles write the same output tile of ``st``: the product of the tile loops it does not depend on."""
    assert plan.tile_instances is not None
    if not plan.tile_values:
        return 1
    writes = plan.tile_instances.intersect_range(c.program.stmt_set([st.name])).apply_range(c.program.writes)
    m = isl.Map.from_union_map(writes)
    return math.prod(len(vals) for i, vals in enumerate(plan.tile_values)
                     if independent_of_tile_loop(m, m.domain(), i))


def block_origins(c: Compiled, blocks: CubeBlocks) -> isl.UnionSet:
    """The statement instances the code runs: a blocked cube statement and its init only at block origins."""
    prog = c.program
    dom = prog.domain
    for b in blocks.blocks:
        for name in (b.stmt, b.init):
            names = c.kernel.statement(name).dim_names
            cons = " and ".join(f"({d}) mod {CUBE} = 0" for d in b.dims if d in names) or "true"
            dom = dom.intersect(isl.UnionSet(f"{{ {name}[{', '.join(names)}] : {cons} }}", context=prog.ctx)
                                .union(dom.subtract(prog.stmt_set([name]))))
    return dom


def with_blocks(c: Compiled, schedule: isl.Schedule, blocks: CubeBlocks) -> isl.Schedule:
    """``schedule`` running the blocked statements at block origins, with each L0C drain grafted after the
    cube's part of the tile (an extension from the tile coordinates, like the DMA copies)."""
    prog = c.program
    sched = schedule.intersect_domain(block_origins(c, blocks))
    for b in blocks.blocks:
        plan = next(p for p in c.plans if p.index == b.plan)
        assert plan.tile_instances is not None
        ends = _run_end_tiles(plan, b.out, prog.ctx)
        rel = plan.tile_instances.intersect_domain(ends).intersect_range(prog.stmt_set([b.stmt])) \
            .apply_range(prog.writes)
        rel = isl.UnionMap.from_map(isl.Map.from_union_map(rel).set_tuple_name(isl.dim_type.out, b.drain))
        n_out = len(c.kernel.tensors[b.out].shape)
        graft = isl.ScheduleNode.from_extension(rel)
        graft = graft.child(0).insert_partial_schedule(isl.MultiUnionPwAff.from_union_map(isl.UnionMap(
            f"{{ {b.drain}[{', '.join(f'a{i}' for i in range(n_out))}] -> [{', '.join(f'a{i}' for i in range(n_out))}] }}",
            context=prog.ctx))).root() if n_out else graft.root()
        seq = next_sequence(group_nodes(sched)[plan.index], 1)
        assert seq is not None, "a tiled kernel's tile holds a sequence (its DMA copies)"
        while True:   # the innermost sequence (no loop on the way) whose child holds the cube's loops
            (where,) = [i for i in range(seq.n_children()) if b.stmt in subtree_statements(seq.child(i))]
            inner = next_sequence(seq.child(where).child(0), 0) if seq.child(where).has_children() else None
            if inner is None:
                break
            seq = inner
        sched = seq.child(where).child(0).graft_after(graft).get_schedule()
    return sched


def accumulator_ctype(dtype: str) -> str:
    """L0C's element type: fp32 for float results (fp16 inputs accumulate in fp32), int32 up to 32-bit
    integers, 64 bits for int64."""
    if dtype.startswith("float"):
        return "float"
    return "long long" if dtype == "int64" else "int"
