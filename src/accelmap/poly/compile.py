"""Reverse-strategy tiling and post-tiling fusion of a scheduled subgraph (AKG, PLDI 2021, Sec. 4.2-4.3).

Each group that writes a live-out tensor is tiled (rectangularly, on its outer band). An
intermediate group whose consumers all sit in one tiled kernel is fused into it: the per-tile
instances it must run are the consumers' tile instances composed with their reads and the
inverse of the group's writes, an overlapped tile in general. The producer is grafted under
the tile band with an extension node and its original subtree is marked "skipped".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import islpy as isl

from accelmap.arch.accelerator import Accelerator
from accelmap.errors import MappingError, SpecError
from accelmap.poly.kernel import CUBE, Access, Call, Kernel, Statement, dtype_bytes, strip_casts
from accelmap.poly.program import PolyProgram, build_program
from accelmap.poly.schedule import (
    compute_schedule,
    group_nodes,
    group_statements,
    is_type,
    make_context,
    statements_of,
)
from accelmap.poly.simd import contiguous_inner, inner_dims, sink_fast_dims
from accelmap.poly.tiling import box_sizes, member_extents, per_tensor, tile_map
from accelmap.poly.timing import time_compiled, time_kernel
from accelmap.poly.vector_intrinsics import VECTOR_BYTES

# Alignment of a buffer allocation, bytes (AKG's kMemVCAlign = 32 for UB, kMemC1Align = 512 for L1;
# L0 buffers hold 16x16 fp16 fractals, 512 B).
ALIGN = {"UB": 32, "L1": 512, "L0A": 512, "L0B": 512, "L0C": 512}
# Auto Tiling's fixed warm-up cost per tile (Sec. 4.2 names it, gives no value), in bytes of data movement:
# our assumption, one 512-byte L1 block per tile; it breaks ties toward fewer, larger tiles.
WARMUP_BYTES = 512


@dataclass
class Footprint:
    tensor: str
    box: tuple[int, ...]          # per-tile bounding box, elements per axis
    bytes: int                    # box volume times the element size
    local: bool                   # promoted: lives only on chip, per tile
    buffers: tuple[str, ...]      # where it is kept
    run: int = 1                  # consecutive tiles that share this footprint (it stays resident)


@dataclass
class KernelPlan:
    """One emitted kernel: a tiled group plus the producer groups fused into its tiles."""

    index: int                                   # position of the tiled group in the outer sequence
    group: tuple[str, ...]
    fused: list[tuple[int, tuple[str, ...]]] = field(default_factory=list)   # (position, stmts), in order
    extents: tuple[int, ...] = ()                # band member extents
    coincident: tuple[bool, ...] = ()
    sizes: tuple[int, ...] = ()
    n_tiles: int = 1
    tile_values: tuple[tuple[int, ...], ...] = ()   # tile-loop values per band member, in loop order
    tile_instances: isl.UnionMap | None = None   # tile coordinates -> every instance run in that tile
    extensions: dict[int, isl.UnionMap] = field(default_factory=dict)
    # DMA statements: tile coordinates -> elements of an off-chip tensor to copy in / out per tile
    copy_in: dict[str, isl.Map] = field(default_factory=dict)
    copy_out: dict[str, isl.Map] = field(default_factory=dict)
    footprints: dict[str, Footprint] = field(default_factory=dict)
    buffer_bytes: dict[str, int] = field(default_factory=dict)
    l0_k_chunk: int = 0                          # reduction chunk of the second-level (L0) tiling, 0: no cube
    l0_k_extent: int = 0                         # the tile's reduction extent that the chunk splits
    # the emitted L1 -> L0 copies: operand tensor -> (L0A or L0B, per-chunk box, copy statement name)
    l0_copies: dict[str, tuple[str, tuple[int, ...], str]] = field(default_factory=dict)
    # cube statement -> reduction chunks per tile in the emitted code (its L0 loads and mmads run once per chunk)
    l0_chunks: dict[str, int] = field(default_factory=dict)

    @property
    def statements(self) -> tuple[str, ...]:
        return tuple(s for _, g in self.fused for s in g) + self.group

    def describe(self) -> str:
        fused = " + ".join("{" + ",".join(g) + "}" for _, g in self.fused)
        head = f"kernel {{{','.join(self.group)}}}" + (f" with fused producers {fused}" if fused else "")
        sizes = ", ".join(f"{t}/{e}" for t, e in zip(self.sizes, self.extents, strict=True))
        return f"{head}: tile sizes (tile/extent) [{sizes}], {self.n_tiles} tiles"


@dataclass
class Compiled:
    kernel: Kernel
    program: PolyProgram
    option_set: str
    scheduled: isl.Schedule              # the isl scheduler's result (Fig. 3(c))
    schedule: isl.Schedule               # after tiling and fusion, skipped subtrees still present
    plans: list[KernelPlan]
    arch: Accelerator
    fuse: bool
    # statements fusion left apart because the fused kernel fit the buffers at no tile size
    kept_apart: frozenset[str] = frozenset()
    # why each producer that could have been fused was not (cost-driven fusion)
    fusion_notes: tuple[str, ...] = ()
    # per vector statement: its innermost loop walks its dominant tensor contiguously (full vector repeats)
    vector_contiguous: dict[str, bool] = field(default_factory=dict)
    # per contiguous vector statement: the dim its innermost loop steps (the vector unit's rows run along it)
    vector_row_dims: dict[str, str] = field(default_factory=dict)

    def ast_schedule(self) -> isl.Schedule:
        """The final tree with the skipped subtrees emptied, ready for AST generation."""
        return _drop_skipped(self.schedule, self.program)


def _capacities(arch: Accelerator) -> dict[str, int]:
    """Usable bytes per buffer: half of a double-buffered level (AKG: Util_b <= Cap_b / 2)."""
    out = {}
    for name in ALIGN:
        try:
            lv = arch.level(name)
        except KeyError:
            raise SpecError(f"the accelerator {arch.name} has no {name} buffer; the poly flow needs "
                            f"{', '.join(ALIGN)} (use --arch ascend_like)", where="--arch") from None
        if lv.capacity_bits is None:
            raise SpecError(f"level {name} of {arch.name} must have a finite capacity", where="--arch")
        out[name] = lv.capacity_bits // 8 // (2 if lv.double_buffered else 1)
    return out


def _align(n: int, a: int) -> int:
    return -(-n // a) * a


def _band_of(group_node: isl.ScheduleNode) -> isl.ScheduleNode | None:
    node = group_node.child(0) if is_type(group_node, isl.schedule_node_type.filter) else group_node
    return node if is_type(node, isl.schedule_node_type.band) else None


def _stmt_filter(prog: PolyProgram, names) -> isl.UnionSet:
    return prog.stmt_set(names)


def plan_kernels(prog: PolyProgram, scheduled: isl.Schedule, fuse: bool,
                 apart: frozenset[int] = frozenset()) -> list[KernelPlan]:
    """Kernels: each live-out group and, without fusion or for groups in ``apart``, every group; with fusion an
    intermediate group whose consumers all sit in one kernel is fused into that kernel's tiles."""
    k = prog.kernel
    groups = [group_statements(n) for n in group_nodes(scheduled)]
    live = {t.name for t in k.live_out}
    plans: list[KernelPlan] = []
    owner: dict[str, KernelPlan] = {}
    for idx in _consumers_first(groups):
        g = groups[idx]
        outs, consumers = _outputs_and_consumers(prog, g)
        homes = {id(owner[c]) for c in consumers if c in owner}
        if fuse and idx not in apart and not outs & live and consumers and len(homes) == 1 \
                and all(c in owner for c in consumers):
            plan = owner[next(iter(consumers))]
            plan.fused.insert(0, (idx, g))
        else:
            plan = KernelPlan(idx, g)
            plans.append(plan)
        for s in g:
            owner[s] = plan
    for p in plans:   # producers run in the scheduler's group order (a fill before the copy that overwrites it)
        p.fused.sort(key=lambda f: f[0])
    plans.sort(key=lambda p: min(int(s[1:]) for s in p.statements))
    return plans


def _consumers_first(groups: list[tuple[str, ...]]) -> list[int]:
    """Group positions, consumers before their producers (statements are numbered in program order)."""
    return sorted(range(len(groups)), key=lambda i: -min(int(s[1:]) for s in groups[i]))


def _outputs_and_consumers(prog: PolyProgram, group: tuple[str, ...]) -> tuple[set[str], set[str]]:
    """The tensors ``group`` writes and the statements outside it that read a value it wrote (flow
    dependences: a reduction's init feeds its update, not the update's readers)."""
    k = prog.kernel
    outs = {k.statement(s).out.tensor for s in group}
    consumers = {b for a, b in _statement_deps(prog, prog.raw) if a in group and b not in group}
    if not consumers:   # every value it writes is overwritten (a padding fill the copy covers): its readers
        consumers = {st.name for st in k.statements if st.name not in group
                     and any(a.tensor in outs and a.tensor != st.out.tensor for a in st.reads)}
    return outs, consumers


def _statement_deps(prog: PolyProgram, deps: isl.UnionMap | None = None) -> set[tuple[str, str]]:
    """(source, sink) statement pairs of every dependence (or of ``deps``) between two different statements."""
    maps: list[isl.Map] = []
    (prog.deps if deps is None else deps).foreach_map(maps.append)
    pairs = {(m.get_tuple_name(isl.dim_type.in_), m.get_tuple_name(isl.dim_type.out)) for m in maps}
    return {(a, b) for a, b in pairs if a != b}


def _in_order(deps: set[tuple[str, str]], plans: list[KernelPlan]) -> bool:
    """Kernels run in the order of their tiled groups, a fused producer inside its kernel: every dependence
    between two kernels must point from an earlier kernel to a later one."""
    pos = {s: p.index for p in plans for s in p.statements}
    return all(pos[a] <= pos[b] for a, b in deps)


def plan_by_cost(prog: PolyProgram, scheduled: isl.Schedule, arch: Accelerator, option_set: str,
                 tile_spec: dict[str, tuple[tuple[int, str], ...]] | None,
                 caps: dict[str, int]) -> tuple[list[KernelPlan], int, list[tuple[tuple[str, ...], str]]]:
    """Cost-driven post-tiling fusion: start from one kernel per group and, consumers first, fuse a group into
    the kernel holding all its consumers only when the timing model says the fused kernel takes fewer
    cycles than the two apart (and the kernels still run in dependence order). The total is a sum over
    kernels and a kernel's sizing depends only on which tensors other kernels touch, which a merge elsewhere
    does not change, so each comparison is exact for the whole subgraph: the result is never slower than
    one kernel per group. Returns the sized kernels, their total cycles and each refused fusion's group and
    reason."""
    k = prog.kernel
    nodes = group_nodes(scheduled)
    groups = [group_statements(n) for n in nodes]
    live = {t.name for t in k.live_out}
    deps = _statement_deps(prog)
    contiguous = contiguous_inner(prog, scheduled)
    row_dims = inner_dims(prog, scheduled)
    owner = {s: plan for plan in (KernelPlan(i, g) for i, g in enumerate(groups)) for s in plan.group}
    # id(plan) -> (plan, (cycles or inf, off-chip bytes), why it does not fit)
    costs: dict[int, tuple[KernelPlan, tuple[float, int], str]] = {}

    def current() -> list[KernelPlan]:
        return list({id(p): p for p in owner.values()}.values())

    def cost(plan: KernelPlan, plans: list[KernelPlan]) -> tuple[float, int]:
        """Simulated cycles, then off-chip bytes (fusion breaks a tie in cycles if it saves traffic)."""
        if id(plan) not in costs:
            try:
                _size_plan(prog, plan, plans, nodes, tile_spec, caps)
                probe = Compiled(k, prog, option_set, scheduled, scheduled, [plan], arch, True,
                                 vector_contiguous=contiguous, vector_row_dims=row_dims)
                t = time_kernel(probe, plan)
                costs[id(plan)] = (plan, (t.cycles, t.in_bytes + t.out_bytes), "")
            except SpecError:
                raise
            except MappingError as e:
                costs[id(plan)] = (plan, (math.inf, 0), str(e))
        return costs[id(plan)][1]

    notes: list[tuple[tuple[str, ...], str]] = []
    for idx in _consumers_first(groups):
        g = groups[idx]
        plans = current()
        alone = owner[g[0]]
        apart = cost(alone, plans)
        outs, consumers = _outputs_and_consumers(prog, g)
        homes = {id(owner[c]) for c in consumers}
        if outs & live or len(homes) != 1:
            continue
        home = owner[next(iter(consumers))]
        merged = KernelPlan(home.index, home.group, sorted(home.fused + [(idx, g)]))
        trial = [p for p in plans if p is not home and p is not alone] + [merged]
        if not _in_order(deps, trial):
            notes.append((g, "not fused: its kernel would run after a statement that depends on it"))
            continue
        home_cost = cost(home, plans)
        separate = (apart[0] + home_cost[0], apart[1] + home_cost[1])
        fused = cost(merged, trial)
        if fused < separate:
            for s in merged.statements:
                owner[s] = merged
        else:
            notes.append((g, f"not fused: fused {fused[0]:,.0f} vs apart {separate[0]:,.0f} cycles (simulated)"
                          if fused[0] < math.inf else "not fused: the fused kernel fits the buffers at no tile size"))
    plans = current()
    for p in plans:
        if costs[id(p)][1][0] == math.inf:
            raise MappingError(costs[id(p)][2])
    plans.sort(key=lambda p: min(int(s[1:]) for s in p.statements))
    return plans, int(sum(costs[id(p)][1][0] for p in plans)), notes


def _footprints(prog: PolyProgram, plan: KernelPlan, band: isl.ScheduleNode | None, sizes: tuple[int, ...],
                caps: dict[str, int], all_plans: list[KernelPlan]) -> None:
    """Tile relations, extensions, per-tile footprints and buffer use of ``plan`` at ``sizes``. Memoized per
    program: the result depends only on the kernel's statements, its band, the sizes, the capacities and the
    tensors other kernels touch (auto-tiling revisits sizes; cost-driven fusion re-sizes unchanged kernels)."""
    k = prog.kernel
    elsewhere_rw: set[str] = set()
    for other in all_plans:
        if other is plan:
            continue
        for s in other.statements:
            st = k.statement(s)
            elsewhere_rw.add(st.out.tensor)
            elsewhere_rw.update(a.tensor for a in st.reads)
    key = ("footprints", plan.group, tuple(plan.fused), sizes, frozenset(elsewhere_rw), tuple(sorted(caps.items())),
           None if band is None else str(band.band_get_partial_schedule()))
    if key in prog.cache:
        for name, value in prog.cache[key].items():
            setattr(plan, name, dict(value) if isinstance(value, dict) else value)
        return
    _compute_footprints(prog, plan, band, sizes, caps, elsewhere_rw)
    prog.cache[key] = {name: dict(getattr(plan, name)) if isinstance(getattr(plan, name), dict) else getattr(plan, name)
                       for name in _FOOTPRINT_FIELDS}


# the KernelPlan fields _footprints sets
_FOOTPRINT_FIELDS = ("extensions", "tile_instances", "sizes", "n_tiles", "tile_values", "footprints", "copy_in",
                     "copy_out", "l0_k_chunk", "l0_k_extent", "buffer_bytes", "l0_chunks")


def _compute_footprints(prog: PolyProgram, plan: KernelPlan, band: isl.ScheduleNode | None, sizes: tuple[int, ...],
                        caps: dict[str, int], elsewhere_rw: set[str]) -> None:
    k = prog.kernel
    ctx = prog.ctx
    group_dom = _stmt_filter(prog, plan.group)
    if band is not None:
        tm = tile_map(band, sizes)
    else:   # no band to tile: one tile holds everything
        tm = isl.UnionMap.from_domain_and_range(group_dom, isl.UnionSet("{ [] }", context=ctx))
    inst = tm.reverse()
    plan.extensions = {}
    for idx, g in reversed(plan.fused):
        # the producer instances whose values the tile reads: flow dependences (last writers), not every writer
        # of the elements read; a reduction's init feeds only the first update of each element, so with the
        # reduction split over tiles it runs in the first tile only (all writers re-ran it in every tile)
        wg = prog.writes.intersect_domain(_stmt_filter(prog, g))
        ext = inst.apply_range(prog.raw.reverse().intersect_range(_stmt_filter(prog, g)))
        while True:   # inside the group, every writer of what its instances read (a reduction, then its use)
            more = ext.union(ext.apply_range(prog.reads).apply_range(wg.reverse()))
            if more.is_equal(ext):
                break
            ext = more
        plan.extensions[idx] = ext
        inst = inst.union(ext)
    plan.tile_instances = inst
    plan.sizes = sizes
    tiles = tm.range()
    plan.n_tiles = int(sum(_count(s) for s in _sets(tiles)))
    plan.tile_values = _grid(tiles, len(sizes), plan.n_tiles)
    reads = per_tensor(inst.apply_range(prog.reads))
    writes = per_tensor(inst.apply_range(prog.writes))
    mine = set(plan.statements)
    live = {t.name for t in k.live_out}
    inputs = {t.name for t in k.inputs}
    # program order: the buffer check and the L0 chunk must not depend on set iteration order
    cube = [k.statement(s) for s in sorted(mine, key=lambda n: int(n[1:])) if k.statement(s).is_cube]
    cube_in: dict[str, str] = {}
    cube_out = set()
    for st in cube:
        body = strip_casts(st.body)
        assert isinstance(body, Call)
        for a, buf in zip(body.args, ("L0A", "L0B"), strict=True):
            acc = strip_casts(a)
            assert isinstance(acc, Access)
            cube_in[acc.tensor] = buf
        cube_out.add(st.out.tensor)
    vector_reads = {a.tensor for s in mine if not k.statement(s).is_cube for a in k.statement(s).reads}
    tensors = k.tensors
    plan.footprints = {}
    plan.copy_in, plan.copy_out = {}, {}
    use = dict.fromkeys(ALIGN, 0)
    for name in sorted(set(reads) | set(writes)):
        m = reads[name].union(writes[name]) if name in reads and name in writes else reads.get(name) or writes[name]
        box = box_sizes(m)
        nbytes = math.prod(box) * dtype_bytes(tensors[name].dtype)
        local = name not in inputs and name not in live and name not in elsewhere_rw \
            and _tile_private(prog, plan, name, tm)
        bufs: list[str] = []
        if name in cube_in:
            bufs += ["L1", cube_in[name]]
        if name in cube_out:
            bufs.append("L0C")
        if name not in cube_in and (name not in cube_out or name in vector_reads or not local):
            bufs.append("UB")
        # the run matters only for what moves off chip and for the cube's L0C drain
        run = _run(m, tiles, plan) if not local or name in cube_out else 1
        plan.footprints[name] = Footprint(name, box, nbytes, local, tuple(bufs), run)
        if not local and sizes:
            if name in reads:
                plan.copy_in[name] = reads[name].set_tuple_name(isl.dim_type.out, copy_name("in", plan, name))
            if name in writes:
                plan.copy_out[name] = writes[name].set_tuple_name(isl.dim_type.out, copy_name("out", plan, name))
        for b in bufs:
            if b not in ("L0A", "L0B"):
                use[b] += _align(nbytes, ALIGN[b])
    # Second-level tiling for the cube: L0A/L0B hold a chunk of the tile's reduction (a multiple of f), so
    # an operand tile needs (its bytes / the tile's reduction extent) per reduction step.
    plan.l0_k_chunk, plan.l0_k_extent = 0, 0
    for st in cube:
        (stmt_map,) = per_tensor(inst.intersect_range(_stmt_filter(prog, [st.name])).reverse()).values()
        inst_box = dict(zip(st.dim_names, box_sizes(stmt_map.reverse()), strict=True))
        kext = math.prod(inst_box[d] for d in st.reduce_dims)
        body = strip_casts(st.body)
        assert isinstance(body, Call)
        operands = [strip_casts(a) for a in body.args]
        # this statement's own operands (a kernel with two convolutions has two of each)
        per_k = {b: -(-plan.footprints[a.tensor].bytes // kext)
                 for a, b in zip(operands, ("L0A", "L0B"), strict=True) if isinstance(a, Access)}
        chunk = _align(kext, CUBE)
        while chunk > CUBE and any(_align(r * chunk, ALIGN[b]) > caps[b] for b, r in per_k.items()):
            chunk -= CUBE
        plan.l0_k_chunk, plan.l0_k_extent = chunk, kext
        for b, r in per_k.items():
            use[b] = max(use[b], _align(r * chunk, ALIGN[b]))
    plan.buffer_bytes = use
    plan.l0_chunks = _expected_l0_chunks(prog, plan, band)


def copy_name(direction: str, plan: KernelPlan, tensor: str) -> str:
    """The statement that moves one element of ``tensor`` between off-chip memory and ``plan``'s buffer."""
    return f"{direction}{plan.index}_{tensor}"


def _copy_graft(rel: isl.Map) -> isl.ScheduleNode:
    """An extension tree running the copy instances of ``rel`` (tile -> elements) in element order."""
    name = rel.get_tuple_name(isl.dim_type.out)
    n = rel.dim(isl.dim_type.out)
    dims = ", ".join(f"a{i}" for i in range(n))
    sched = isl.MultiUnionPwAff("[" + ", ".join(f"{{ {name}[{dims}] -> [(a{i})] }}" for i in range(n)) + "]",
                                context=rel.get_ctx())
    g = isl.ScheduleNode.from_extension(isl.UnionMap.from_map(rel)).child(0)
    return g.insert_partial_schedule(sched).root()


def _tile_private(prog: PolyProgram, plan: KernelPlan, tensor: str, tm: isl.UnionMap) -> bool:
    """No dependence on ``tensor`` crosses from one tile to another (extended producers are per tile)."""
    group = set(plan.group)
    writers = prog.writers_of({tensor})
    if not writers <= group:
        return True   # written by a fused producer: recomputed inside every tile that needs it
    on_t = prog.writes.union(prog.reads).intersect_domain(_stmt_filter(prog, plan.group))
    on_t = on_t.intersect_range(prog.writes.union(prog.reads).range().intersect(_tensor_space(prog, tensor)))
    stmts = on_t.domain()
    cross = prog.deps.intersect_domain(stmts).intersect_range(stmts).apply_domain(tm).apply_range(tm)
    return cross.is_subset(cross.domain().identity())


def _tensor_space(prog: PolyProgram, tensor: str) -> isl.UnionSet:
    n = len(prog.kernel.tensors[tensor].shape)
    return isl.UnionSet(f"{{ {tensor}[{', '.join(f'i{j}' for j in range(n))}] }}", context=prog.ctx)


def _grid(tiles: isl.UnionSet, n: int, count: int) -> tuple[tuple[int, ...], ...]:
    """The values of each tile loop, if the tiles form a full grid (else empty: no reuse is modelled)."""
    if n == 0:
        return ()
    (tset,) = _sets(tiles)
    vals = []
    for i in range(n):
        proj = tset.project_out(isl.dim_type.set, i + 1, n - i - 1).project_out(isl.dim_type.set, 0, i)
        pts: list[isl.Point] = []
        proj.foreach_point(pts.append)
        vals.append(tuple(sorted(p.get_coordinate_val(isl.dim_type.set, 0).to_python() for p in pts)))
    return tuple(vals) if math.prod(len(v) for v in vals) == count else ()


def _run(tile_to_data: isl.Map, tiles: isl.UnionSet, plan: KernelPlan) -> int:
    """Tiles in a row (innermost tile loops first) that access the same data, so it stays on chip."""
    if not plan.tile_values:
        return 1
    (tset,) = _sets(tiles)
    n = len(plan.tile_values)
    run = 1
    m = tile_to_data.intersect_domain(tset)
    for i in reversed(range(n)):
        if not independent_of_tile_loop(m, tset, i):
            break
        run *= len(plan.tile_values[i])
    return run


def independent_of_tile_loop(tile_to_data: isl.Map, tiles: isl.Set, i: int) -> bool:
    """The data of a tile does not depend on tile loop ``i``: forgetting t_i and taking every t_i back gives the
    same map."""
    spread = tile_to_data.project_out(isl.dim_type.in_, i, 1).insert_dims(isl.dim_type.in_, i, 1) \
        .intersect_domain(tiles)
    return bool(spread.is_equal(tile_to_data))


def _sets(u: isl.UnionSet) -> list[isl.Set]:
    out: list[isl.Set] = []
    u.foreach_set(out.append)
    return out


def _count(s: isl.Set) -> int:
    return s.count_val().to_python()


def _fits(plan: KernelPlan, caps: dict[str, int]) -> list[str]:
    return [f"{b} {plan.buffer_bytes[b]:,} B > {caps[b]:,} B" for b in caps if plan.buffer_bytes[b] > caps[b]]


def _auto_sizes(prog, plan, band, caps, plans, elem_bytes: int) -> tuple[int, ...]:
    """Greedy auto-tiling: start from whole bands and halve the tiled member that keeps the data moved per
    computation lowest until every buffer fits half its capacity; the innermost tiled member stays a
    multiple of 32 bytes (AKG's Auto Tiling, Sec. 4.2, with its 0.5 allocation ratio and alignment)."""
    ext = plan.extents
    # a cube kernel aligns members to the fractal size f, unless its schedule already counts f x f blocks in
    # the band (the external fractal-GEMM tree keeps the 16 x 16 x 16 block loops below it)
    cube = any(prog.kernel.statement(s).is_cube for s in plan.statements) and not prog.kernel.external_schedule
    # In a permutable band every member may be tiled, reductions included (the cube's K at L1; a vector
    # reduction's accumulator then stays resident across the reduction's tiles).
    tiled = [i for i, c in enumerate(plan.coincident) if c or band.band_get_permutable()]
    align = max(1, 32 // elem_bytes)
    inner = tiled[-1] if tiled else -1
    sizes = list(ext)
    _footprints(prog, plan, band, tuple(sizes), caps, plans)
    while _fits(plan, caps):
        best = None
        for i in tiled:
            # the innermost member keeps whole 32-byte blocks; a cube kernel keeps multiples of the fractal
            # size f while a member is at least f (below f a member is one of 8, 4, 2, 1: other members
            # of the same matrix dimension then carry the alignment)
            step = align if i == inner and ext[i] >= align and not cube else 1
            if sizes[i] <= step:
                continue
            cand = list(sizes)
            half = -(-sizes[i] // 2)
            cand[i] = _align(half, CUBE) if cube and half >= CUBE else max(step, _align(half, step))
            if cand[i] >= sizes[i]:
                continue
            _footprints(prog, plan, band, tuple(cand), caps, plans)
            moved = sum(f.bytes * (plan.n_tiles // f.run) for f in plan.footprints.values() if not f.local)
            # between equal data moved, keep the innermost member at least one vector repeat long: the vector
            # unit issues its instructions per row of it (vector_intrinsics.vector_work)
            short_rows = i == inner and not cube and cand[i] * elem_bytes < VECTOR_BYTES
            score = (bool(_fits(plan, caps)), moved + WARMUP_BYTES * plan.n_tiles, short_rows, -i)
            if best is None or score < best[0]:
                best = (score, cand)
        if best is None:
            _footprints(prog, plan, band, tuple(sizes), caps, plans)
            raise MappingError(f"kernel {{{','.join(plan.group)}}} does not fit the buffers even with the "
                               f"smallest tiles: {'; '.join(_fits(plan, caps))}")
        sizes = best[1]
        _footprints(prog, plan, band, tuple(sizes), caps, plans)

    def cost() -> int:
        return sum(f.bytes * (plan.n_tiles // f.run) for f in plan.footprints.values() if not f.local) \
            + WARMUP_BYTES * plan.n_tiles

    # Halving can overshoot a member that costs nothing to shrink; grow members back while they fit and pay.
    current = cost()
    grown = True
    while grown:
        grown = False
        for i in tiled:
            if sizes[i] >= ext[i]:
                continue
            cand = list(sizes)
            cand[i] = min(ext[i], sizes[i] * 2)
            _footprints(prog, plan, band, tuple(cand), caps, plans)
            if not _fits(plan, caps) and cost() < current:
                sizes, current, grown = cand, cost(), True
        _footprints(prog, plan, band, tuple(sizes), caps, plans)
    return tuple(sizes)


FUSION_MODES = ("cost", "greedy")


def compile_subgraph(k: Kernel, arch: Accelerator, *, fuse: bool = True, option_set: str = "akg",
                     tile_spec: dict[str, tuple[tuple[int, str], ...]] | None = None,
                     fusion: str = "cost", sink: bool = True) -> Compiled:
    """Schedule, tile and (with ``fuse``) fuse the subgraph. ``fusion="greedy"`` fuses every producer whose
    consumers share a kernel, as the paper does, giving back only producers that cannot fit. ``"cost"`` (the
    default) chooses by simulated cycles among three groupings: ``plan_by_cost`` (fuse a producer only when
    the timing model says it pays) on the groups of ``option_set``'s schedule and on one statement per group
    (the ``distribute`` schedule), and the greedy one. So it is never slower than the greedy grouping nor
    than one kernel per statement. ``sink`` makes the contiguous loop of vector bands innermost
    (``simd.sink_fast_dims``)."""
    if fusion not in FUSION_MODES:
        raise SpecError(f"fusion mode {fusion!r} is not one of {', '.join(FUSION_MODES)}", where="fusion")
    for spec_stmt in tile_spec or {}:
        if spec_stmt not in {s.name for s in k.statements}:
            raise SpecError(f"tile spec names {spec_stmt.replace('S', 'S_')}, which is not a statement "
                            f"(statements: {', '.join(s.name.replace('S', 'S_') for s in k.statements)})",
                            where="--tiles")
    caps = _capacities(arch)
    if not fuse or fusion == "greedy":
        return _compile_greedy(k, arch, fuse, option_set, tile_spec, caps, sink)
    best: Compiled | None = None
    best_cycles = 0
    error: MappingError | None = None
    seen: list[list[tuple[str, ...]]] = []
    mine: tuple[PolyProgram, isl.Schedule] | None = None
    for opts in dict.fromkeys([option_set] if k.external_schedule else [option_set, "distribute"]):
        prog = build_program(k, make_context(opts))
        scheduled = external_schedule(prog) if k.external_schedule \
            else fuse_siblings(prog, compute_schedule(prog.domain, prog.deps, prog.raw))
        if sink and not k.external_schedule:
            scheduled = sink_fast_dims(prog, scheduled)
        if opts == option_set:
            mine = (prog, scheduled)
        groups = [group_statements(n) for n in group_nodes(scheduled)]
        if groups in seen:
            continue   # the same grouping gives the same plans
        seen.append(groups)
        try:
            plans, cycles, notes = plan_by_cost(prog, scheduled, arch, opts, tile_spec, caps)
        except MappingError as e:
            error = error or e
            continue
        if best is None or cycles < best_cycles:
            kept = frozenset(s for g, _why in notes for s in g)
            best = Compiled(k, prog, opts, scheduled, _transform(prog, scheduled, plans), plans, arch, True, kept,
                            tuple("{" + ",".join(g) + "} " + why for g, why in notes), contiguous_inner(prog, scheduled),
                            inner_dims(prog, scheduled))
            best_cycles = cycles
    try:   # the paper's greedy grouping is a candidate too (cost-driven choices are greedy themselves)
        greedy = _compile_greedy(k, arch, True, option_set, tile_spec, caps, sink, mine)
    except MappingError as e:
        error = error or e
    else:
        cycles = time_compiled(greedy).cycles
        if best is None or cycles < best_cycles:
            best = replace(greedy, fusion_notes=(f"greedy fusion ({cycles:,} cycles, simulated) beat the cost-driven "
                                                 f"groupings ({best_cycles:,})" if best else "greedy fusion",))
    if best is None:
        assert error is not None
        raise error
    return best


def _compile_greedy(k: Kernel, arch: Accelerator, fuse: bool, option_set: str,
                    tile_spec: dict[str, tuple[tuple[int, str], ...]] | None, caps: dict[str, int],
                    sink: bool = True, scheduled_program: tuple[PolyProgram, isl.Schedule] | None = None) -> Compiled:
    """The paper's greedy post-tiling fusion. ``scheduled_program``: the program and schedule of ``option_set``
    when the caller already has them (with ``fuse`` and ``sink``), so their memoized footprints are reused."""
    if scheduled_program is not None:
        prog, scheduled = scheduled_program
    else:
        prog = build_program(k, make_context(option_set))
        scheduled = external_schedule(prog) if k.external_schedule \
            else compute_schedule(prog.domain, prog.deps, prog.raw)
        if fuse:
            scheduled = fuse_siblings(prog, scheduled)
        if sink and not k.external_schedule:
            scheduled = sink_fast_dims(prog, scheduled)
    plans = plan_kernels(prog, scheduled, fuse)
    nodes = group_nodes(scheduled)
    apart: set[int] = set()
    apart_names: set[str] = set()
    while True:
        try:
            _size_plans(prog, plans, nodes, tile_spec, caps)
            break
        except _NoFit as e:
            # Post-tiling fusion is greedy: a kernel whose fused producers cannot fit even with the smallest
            # tiles (a row reduction needing a whole GEMM row per tile) keeps its direct producers apart
            direct = _direct_producers(prog, e.plan)
            if not direct:
                raise MappingError(str(e)) from None
            apart |= direct
            apart_names |= {name for idx, group in e.plan.fused if idx in direct for name in group}
            plans = plan_kernels(prog, scheduled, fuse, frozenset(apart))
    schedule = _transform(prog, scheduled, plans)
    return Compiled(k, prog, option_set, scheduled, schedule, plans, arch, fuse, frozenset(apart_names),
                    vector_contiguous=contiguous_inner(prog, scheduled),
                    vector_row_dims=inner_dims(prog, scheduled))


def external_schedule(prog: PolyProgram) -> isl.Schedule:
    """The kernel's prebuilt schedule tree, checked: it covers every statement instance exactly and runs
    the source of every dependence before its sink."""
    k = prog.kernel
    try:
        sched = isl.Schedule.read_from_str(prog.ctx, k.external_schedule)
    except isl.Error:
        raise SpecError("the external schedule tree does not parse as an isl schedule", where=k.name) from None
    if not sched.get_domain().is_equal(prog.domain):
        raise SpecError("the external schedule tree's domain differs from the statements' domains", where=k.name)
    bad = _violated(prog, sched)
    if bad:
        raise SpecError(f"the external schedule tree violates a dependence, e.g. {bad}", where=k.name)
    return sched


def _violated(prog: PolyProgram, sched: isl.Schedule) -> str:
    """A dependence the schedule runs backwards or at the same time ("" if it respects them all)."""
    smap = sched.get_map()
    steps = prog.deps.apply_domain(smap).apply_range(smap)
    maps: list[isl.Map] = []
    steps.foreach_map(maps.append)
    for m in maps:
        bad = m.subtract(isl.Map.lex_lt(m.get_space().domain()))
        if not bad.is_empty():
            return str(bad.wrap().sample_point())
    return ""


def fuse_siblings(prog: PolyProgram, scheduled: isl.Schedule) -> isl.Schedule:
    """Sibling (horizontal) fusion: consecutive top-level groups that read a common tensor, do not depend on
    each other and have bands of equal member extents share one band (the union of their partial
    schedules) with the groups in a sequence below it, so a tile loads the common tensor once (two
    reductions of one input, as in BatchNorm's statistics). The result is checked against the dependences;
    a merge that would violate one is not made."""
    top = scheduled.get_root().child(0)
    if not is_type(top, isl.schedule_node_type.sequence, isl.schedule_node_type.set) or any(
            top.child(i).has_children() and is_type(top.child(i).child(0), isl.schedule_node_type.sequence,
                                                    isl.schedule_node_type.set) for i in range(top.n_children())):
        return scheduled
    k = prog.kernel
    groups = [top.child(i) for i in range(top.n_children())]

    def reads_of(f: isl.ScheduleNode) -> set[str]:
        names = statements_of(f.filter_get_filter())
        written = {k.statement(n).out.tensor for n in names}
        return {a.tensor for n in names for a in k.statement(n).reads} - written

    def extents(f: isl.ScheduleNode):
        band = _band_of(f)
        return member_extents(band) if band is not None else None

    clusters: list[list[isl.ScheduleNode]] = []
    for f in groups:
        if clusters:
            last = clusters[-1]
            dom = f.filter_get_filter()
            other = last[0].filter_get_filter()
            for g in last[1:]:
                other = other.union(g.filter_get_filter())
            between = prog.deps.intersect_domain(other).intersect_range(dom).union(
                prog.deps.intersect_domain(dom).intersect_range(other))
            if extents(f) is not None and extents(f) == extents(last[0]) and between.is_empty() \
                    and any(reads_of(f) & reads_of(g) for g in last):
                last.append(f)
                continue
        clusters.append([f])
    if all(len(cl) == 1 for cl in clusters):
        return scheduled
    ctx = prog.ctx
    filters = isl.UnionSetList.alloc(ctx, len(clusters))
    for cl in clusters:
        u = cl[0].filter_get_filter()
        for g in cl[1:]:
            u = u.union(g.filter_get_filter())
        filters = filters.add(u)
    node = isl.Schedule.from_domain(prog.domain).get_root().child(0).insert_sequence(filters)
    for ci, cl in enumerate(clusters):
        leaf = node.child(ci).child(0)
        if len(cl) == 1:
            node = _copy_into(leaf, cl[0].child(0)).parent().parent()
            continue
        bands = [b for b in (_band_of(g) for g in cl) if b is not None]   # every member has one (equal extents)
        mupa = bands[0].band_get_partial_schedule()
        for b in bands[1:]:
            mupa = mupa.union_add(b.band_get_partial_schedule())
        band = leaf.insert_partial_schedule(mupa)
        band = band.band_set_permutable(int(all(b.band_get_permutable() for b in bands)))
        for i in range(band.band_n_member()):
            band = band.band_member_set_coincident(i, int(all(b.band_member_get_coincident(i) for b in bands)))
        parts = isl.UnionSetList.alloc(ctx, len(cl))
        for g in cl:
            parts = parts.add(g.filter_get_filter())
        seq = band.child(0).insert_sequence(parts)
        for i, b in enumerate(bands):
            if b.has_children():
                seq = _copy_into(seq.child(i).child(0), b.child(0)).parent().parent()
        node = seq.parent().parent().parent()
    merged = node.get_schedule()
    return scheduled if _violated(prog, merged) else merged


def _direct_producers(prog: PolyProgram, plan: KernelPlan) -> set[int]:
    """The fused groups of ``plan`` whose results its own group reads."""
    k = prog.kernel
    read = {a.tensor for s in plan.group for a in k.statement(s).reads}
    return {idx for idx, g in plan.fused if any(k.statement(s).out.tensor in read for s in g)}


class _NoFit(MappingError):
    def __init__(self, message: str, plan: KernelPlan):
        super().__init__(message)
        self.plan = plan


def _size_plans(prog: PolyProgram, plans: list[KernelPlan], nodes: list[isl.ScheduleNode],
                tile_spec: dict[str, tuple[tuple[int, str], ...]] | None, caps: dict[str, int]) -> None:
    """Tile sizes (from the spec or auto-tiling), footprints and buffer use of every kernel."""
    for plan in plans:
        plan.footprints, plan.buffer_bytes = {}, {}
    for plan in plans:
        try:
            _size_plan(prog, plan, plans, nodes, tile_spec, caps)
        except MappingError as e:
            raise _NoFit(str(e), plan) from None


def _size_plan(prog: PolyProgram, plan: KernelPlan, plans: list[KernelPlan], nodes: list[isl.ScheduleNode],
               tile_spec: dict[str, tuple[tuple[int, str], ...]] | None, caps: dict[str, int]) -> None:
    k = prog.kernel
    band = _band_of(nodes[plan.index])
    if band is not None:
        ext = member_extents(band)
        plan.extents = tuple(hi - lo + 1 for lo, hi in ext)
        plan.coincident = tuple(bool(band.band_member_get_coincident(i)) for i in range(band.band_n_member()))
    spec = next((tile_spec[s] for s in plan.group if tile_spec and s in tile_spec), None)
    if band is None:
        if spec is not None:
            raise SpecError(f"statements {', '.join(plan.group)} have no band to tile (the scheduler gave "
                            "them none); drop their tile spec", where="--tiles")
        _footprints(prog, plan, None, (), caps, plans)
    elif spec is not None:
        if len(spec) > len(plan.extents):
            raise SpecError(f"{len(spec)} tile sizes for a band of {len(plan.extents)} members "
                            f"(statements {', '.join(plan.group)})", where="--tiles")
        sizes = tuple(min(spec[i][0], e) if i < len(spec) else e for i, e in enumerate(plan.extents))
        _footprints(prog, plan, band, sizes, caps, plans)
    else:
        elem = min(dtype_bytes(k.tensors[k.statement(s).out.tensor].dtype) for s in plan.group)
        _auto_sizes(prog, plan, band, caps, plans, elem)
    over = _fits(plan, caps)
    if over:
        raise MappingError(f"kernel {{{','.join(plan.group)}}} with tile sizes {list(plan.sizes)} does not fit: "
                           + "; ".join(over) + " (half of each buffer is kept for double buffering)")


def _group_node(schedule: isl.Schedule, index: int) -> isl.ScheduleNode:
    return group_nodes(schedule)[index]


def _copy_into(dst: isl.ScheduleNode, src: isl.ScheduleNode) -> isl.ScheduleNode:
    """Rebuild the subtree at ``src`` below the leaf ``dst``; returns the node at ``dst``'s position."""
    if is_type(src, isl.schedule_node_type.band):
        dst = dst.insert_partial_schedule(src.band_get_partial_schedule())
        dst = dst.band_set_permutable(int(src.band_get_permutable()))
        for i in range(src.band_n_member()):
            dst = dst.band_member_set_coincident(i, int(src.band_member_get_coincident(i)))
        if src.has_children():
            dst = _copy_into(dst.child(0), src.child(0)).parent()
        return dst
    if is_type(src, isl.schedule_node_type.sequence, isl.schedule_node_type.set):
        filters = isl.UnionSetList.alloc(src.get_ctx(), src.n_children())
        for i in range(src.n_children()):
            filters = filters.add(src.child(i).filter_get_filter())
        dst = dst.insert_sequence(filters)
        for i in range(src.n_children()):
            if src.child(i).has_children():
                dst = _copy_into(dst.child(i).child(0), src.child(i).child(0)).parent().parent()
        return dst
    if is_type(src, isl.schedule_node_type.filter):
        return _copy_into(dst, src.child(0)) if src.has_children() else dst
    if is_type(src, isl.schedule_node_type.mark):
        dst = dst.insert_mark(src.mark_get_id())
        return _copy_into(dst.child(0), src.child(0)).parent() if src.has_children() else dst
    return dst


def _transform(prog: PolyProgram, scheduled: isl.Schedule, plans: list[KernelPlan]) -> isl.Schedule:
    sched = scheduled
    ctx = prog.ctx
    for plan in plans:
        node = _group_node(sched, plan.index)
        band = _band_of(node)
        if band is None or not plan.sizes:
            continue
        mv = isl.MultiVal.zero(band.band_get_space())
        for i, t in enumerate(plan.sizes):
            mv = mv.set_val(i, isl.Val.int_from_si(ctx, t))
        point = _distribute(prog, band.band_tile(mv).child(0), plan.group)
        point = _l0_tiling(prog, plan, point)
        # DMA: the staged tiles of off-chip tensors come in before anything of the tile runs, go out after
        for rel in plan.copy_in.values():
            point = point.graft_before(_copy_graft(rel))
        for idx, g in plan.fused:
            src = _band_of(_group_node(sched, idx)) or _group_node(sched, idx)
            if is_type(src, isl.schedule_node_type.band) and len(g) > 1:
                # the producer's statements distributed as the tile's are (isl cannot reorder below an extension
                # node: distribute a copy in a tree of their own first)
                alone = isl.Schedule.from_domain(prog.domain.intersect(prog.stmt_set(g))).get_root().child(0)
                src = _distribute(prog, _copy_into(alone, src), g)
            graft = isl.ScheduleNode.from_extension(plan.extensions[idx])
            graft = _copy_into(graft.child(0), src).root()
            point = point.graft_before(graft)
        for rel in plan.copy_out.values():
            point = point.graft_after(_copy_graft(rel))
        sched = point.get_schedule()
        for idx, _g in plan.fused:
            node = _group_node(sched, idx)
            inner = node.child(0) if is_type(node, isl.schedule_node_type.filter) else node
            sched = inner.insert_mark(isl.Id("skipped", context=ctx)).get_schedule()
    return sched


def with_extensions(c: Compiled, extensions: dict[int, dict[int, isl.UnionMap]]) -> Compiled:
    """``c`` rebuilt with some fused producers' extension relations replaced (kernel index -> producer group ->
    tile -> instances): the vector code brings a producer that runs in rows into each tile at its rows' first
    instances only. The plans are copied; their sizes, footprints and timing are unchanged."""
    plans = [replace(p, extensions={**p.extensions, **extensions.get(p.index, {})}) for p in c.plans]
    return replace(c, schedule=_transform(c.program, c.scheduled, plans), plans=plans)


def _first_band_with(node: isl.ScheduleNode, stmt: isl.UnionSet) -> isl.ScheduleNode | None:
    """The first band at or below ``node`` (depth first) that the instances ``stmt`` pass through."""
    if is_type(node, isl.schedule_node_type.band) and stmt.is_subset(node.get_domain()):
        return node
    if is_type(node, isl.schedule_node_type.filter) and node.filter_get_filter().intersect(stmt).is_empty():
        return None
    for i in range(node.n_children()):
        found = _first_band_with(node.child(i), stmt)
        if found is not None:
            return found
    return None


def l0_copy_name(plan: KernelPlan, tensor: str) -> str:
    return f"l0{plan.index}_{tensor}"


def _l0_tiling(prog: PolyProgram, plan: KernelPlan, point: isl.ScheduleNode) -> isl.ScheduleNode:
    """Second-level tiling for the cube (Sec. 4.4): inside a tile, split the point band's reduction member into
    chunks of ``plan.l0_k_chunk`` (the L0A/L0B capacity check's chunk) and graft, before each chunk, copy
    statements that move the chunk's operand footprints from L1 to L0A / L0B; the cube reads them there.
    When no point-band member is the reduction (its loops are in inner bands) the whole tile's operands are
    copied once, which the capacity check allows only when the chunk is the whole reduction.
    Returns the node at ``point``'s position."""
    k = prog.kernel
    depth = point.get_tree_depth()
    plan.l0_copies, plan.l0_chunks = {}, {}
    node = point
    for st in (k.statement(s) for s in plan.group if k.statement(s).is_cube):
        body = strip_casts(st.body)
        assert isinstance(body, Call)
        ops = [strip_casts(a) for a in body.args]
        assert all(isinstance(a, Access) for a in ops)
        if len({a.tensor for a in ops if isinstance(a, Access)}) < 2:
            continue   # both operands from one tensor: kept in L1 (one buffer per tensor here)
        mine = prog.stmt_set([st.name])
        band = _first_band_with(node, mine)
        if band is None:
            continue
        split = _l0_split(prog, plan, st, band)
        target = band
        if split is not None:
            i, chunk, sizes = split
            if chunk < sizes[i]:
                tile = list(sizes)
                tile[i] = chunk
                mv = isl.MultiVal.zero(band.band_get_space())
                for j, t in enumerate(tile):
                    mv = mv.set_val(j, isl.Val.int_from_si(prog.ctx, t))
                target = band.band_tile(mv).child(0)
                plan.l0_chunks[st.name] = sizes[i] // chunk
        elif plan.l0_k_chunk < plan.l0_k_extent:
            continue   # the reduction's loops are inner bands: the chunking stays in the model
        prefix = target.get_prefix_schedule_union_map().intersect_domain(mine)
        for a, buf in zip(ops, ("L0A", "L0B"), strict=True):
            assert isinstance(a, Access)
            acc = prog.reads.intersect_domain(mine).intersect_range(
                isl.UnionSet(f"{{ {a.tensor}[{', '.join(f'i{j}' for j in range(len(a.index)))}] }}", context=prog.ctx))
            (rel,) = per_tensor(prefix.reverse().apply_range(acc)).values()
            name = l0_copy_name(plan, a.tensor)
            plan.l0_copies[a.tensor] = (buf, box_sizes(rel), name)
            target = target.graft_before(_copy_graft(rel.set_tuple_name(isl.dim_type.out, name)))
        node = target.ancestor(target.get_tree_depth() - depth)
    return node


def _l0_split(prog: PolyProgram, plan: KernelPlan, st: Statement,
              band: isl.ScheduleNode) -> tuple[int, int, list[int]] | None:
    """How the L0 tiling splits cube statement ``st``'s reduction in the point band ``band``: the reduction
    member, the chunk (in steps of that member) and the members' sizes in one tile; None when no member of the
    band is the reduction or one chunk holds it all."""
    mine = prog.stmt_set([st.name])
    n = band.band_n_member()
    sched = band.band_get_partial_schedule_union_map().intersect_domain(mine)
    # the point band's members are the tiled band's (or a distributed copy of it): a member spans one tile
    sizes = [hi - lo + 1 for lo, hi in member_extents(band)]
    if n == len(plan.sizes):
        sizes = [min(a, b) for a, b in zip(sizes, plan.sizes, strict=True)]
    red = []
    for i in range(n):
        only_i = isl.Map(f"{{ [{', '.join(f'o{j}' for j in range(n))}] -> [o{i}] }}", context=prog.ctx)
        for d in st.reduce_dims:
            want = isl.UnionMap(f"{{ {st.name}[{', '.join(st.dim_names)}] -> [{d}] }}", context=prog.ctx)
            if sched.apply_range(isl.UnionMap.from_map(only_i)).is_equal(want.intersect_domain(mine)):
                red.append(i)
    if not red or plan.l0_k_chunk >= plan.l0_k_extent:
        return None
    i = red[0]
    per_step = max(1, plan.l0_k_extent // max(1, sizes[i]))   # reduction elements per step of member i
    chunk = max(1, plan.l0_k_chunk // per_step)
    while sizes[i] % chunk:   # chunks that divide the tile, so none straddles two tiles
        chunk -= 1
    return i, chunk, sizes


def _expected_l0_chunks(prog: PolyProgram, plan: KernelPlan, band: isl.ScheduleNode | None) -> dict[str, int]:
    """The reduction chunks per tile that ``_l0_tiling`` will emit, known when the kernel is sized, so that the
    timing model issues the flags inside the chunk loop as often during fusion costing as in the final code."""
    if band is None or not plan.sizes:
        return {}
    mv = isl.MultiVal.zero(band.band_get_space())
    for j, t in enumerate(plan.sizes):
        mv = mv.set_val(j, isl.Val.int_from_si(prog.ctx, t))
    point = band.band_tile(mv).child(0)
    out = {}
    for name in plan.group:
        st = prog.kernel.statement(name)
        if not st.is_cube:
            continue
        body = strip_casts(st.body)
        assert isinstance(body, Call)
        if len({a.tensor for a in (strip_casts(x) for x in body.args) if isinstance(a, Access)}) < 2:
            continue
        split = _l0_split(prog, plan, st, point)
        if split is not None and split[1] < split[2][split[0]]:
            out[name] = split[2][split[0]] // split[1]
    return out


def _distribute(prog: PolyProgram, point: isl.ScheduleNode, group: tuple[str, ...]) -> isl.ScheduleNode:
    """Intra-tile distribution (Sec. 4.3, Fig. 3(f)): inside the tile, each vector statement (a reduction's
    init and update stay together when the cube runs the update) gets its own copy of the point loops, under a "local_UB" mark; the cube
    statements keep theirs. Legal because every dependence in a kernel points forward in program order.
    Returns the node at ``point``'s position (now the sequence of the parts)."""
    k = prog.kernel
    parts: list[tuple[tuple[str, str], list[str]]] = []
    for name in sorted(group, key=lambda n: int(n[1:])):
        st = k.statement(name)
        # a cube reduction's init stays with its update (the first mmad folds it); a vector reduction's init gets
        # its own loops, so that the vector unit fills the tile's accumulator in rows before the update runs
        cube_init = st.kind == "init" and any(w.is_cube for w in k.writer(st.out.tensor))
        key = ("tensor", st.out.tensor) if st.kind == "update" or cube_init else ("statement", name)
        if parts and parts[-1][0] == key:
            parts[-1][1].append(name)
        else:
            parts.append((key, [name]))
    if len(parts) < 2:
        return point
    depth = point.get_tree_depth()
    node = point
    for i in range(1, len(parts)):
        later = [n for _key, names in parts[i:] for n in names]
        node = node.order_after(prog.stmt_set(later)).parent().next_sibling().child(0)
    top = node.ancestor(node.get_tree_depth() - depth)
    vector = {n for _key, names in parts for n in names if not k.statement(n).is_cube}
    cube_parts = any(k.statement(n).is_cube for n in group)

    def mark(n: isl.ScheduleNode) -> isl.ScheduleNode:
        if is_type(n, isl.schedule_node_type.filter) and cube_parts \
                and set(statements_of(n.filter_get_filter())) <= vector and n.has_children() \
                and is_type(n.child(0), isl.schedule_node_type.band):
            return n.child(0).insert_mark(isl.Id("local_UB", context=n.get_ctx())).parent()
        for i in range(n.n_children()):
            n = mark(n.child(i)).parent()
        return n

    return mark(top)


def _drop_skipped(schedule: isl.Schedule, prog: PolyProgram) -> isl.Schedule:
    """The code generator does not scan below a "skipped" mark (Fig. 3(e)): give it an empty filter."""
    sched = schedule
    for i in range(len(group_nodes(sched))):
        node = group_nodes(sched)[i]
        inner = node.child(0) if is_type(node, isl.schedule_node_type.filter) else node
        if is_type(inner, isl.schedule_node_type.mark) and inner.mark_get_id().get_name() == "skipped":
            sched = inner.child(0).insert_filter(isl.UnionSet.empty(prog.domain.get_space())).get_schedule()
    return sched
