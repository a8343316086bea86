"""The blocks of a fused group run through their own tile mappings: each block of a multiply-accumulate stage is
the single-operator tile program (``codegen.c_source.generate_c``) of the block's tile operator
(``fusion.stages.tile_operator``) under the mapping the fusion model costed it with (``fusion.group_cost``:
the same ``InnerMappings`` object, the same reduced accelerator), so its loops, its buffers at every level and
its counters per level are the program's; summed over the blocks, the counters equal the model's per-level
counts of the group's blocks (``block_level_counts``).

``block_mappings`` is the one place where a group's block shapes get their mappings; the weights' fetch programs
(``codegen.fused_weights``) take theirs from it too.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from accelmap.arch.accelerator import Accelerator
from accelmap.codegen.c_source import c_type, generate_c
from accelmap.cost.model import access_counts
from accelmap.errors import SpecError
from accelmap.fusion.geometry import Stage, head_segment, schedules
from accelmap.fusion.group_cost import GroupCost, InnerMappings, block_shapes, reserved
from accelmap.fusion.stages import MacStage, head_slice, tile_operator
from accelmap.mapping.loopnest import Mapping
from accelmap.workload.operator import Operator


@dataclass(frozen=True)
class BlockMappings:
    """Per multiply-accumulate stage: the stage as its blocks run it (a head tile's share inside a head-tiled run)
    and, per block shape (rows, columns), how often the tile loop runs it and its mapping; ``arch``: the
    accelerator the blocks run on (the store less the group's reservation)."""

    stages: dict[int, MacStage]
    shapes: dict[int, dict[tuple[int, int], tuple[int, Mapping]]]
    arch: Accelerator


def block_mappings(name: str, stages: tuple[Stage, ...], macs: dict[int, MacStage], arch: Accelerator,
                   cost: GroupCost, inner: InnerMappings) -> BlockMappings:
    """The mappings the fusion model costed the group's blocks with (``fusion.group_cost``): each stage's largest
    block searched, the smaller ones clipped from it (``InnerMappings.mapping``)."""
    got = reserved(arch, cost.reserved_bits)
    if got is None:
        raise SpecError(f"fused group {name}: its reserved {cost.reserved_bits} bits do not fit the store")
    arch_r = got[0]
    rows, cols = schedules(stages, cost.tile_rows, cost.tile_cols, cost.policies, cost.join,
                           cost.skip_policy or "re-read", cost.inner_joins)
    segment = head_segment(stages, cost.head_tile)
    run: dict[int, MacStage] = {}
    out: dict[int, dict[tuple[int, int], tuple[int, Mapping]]] = {}
    for j, ms in macs.items():
        shapes = block_shapes(rows, cols, j, segment, cost.counts.head_tiles)
        if segment is not None and segment[0] <= j <= segment[1]:
            assert cost.head_tile is not None
            ms = head_slice(ms, cost.head_tile)
        run[j], out[j] = ms, {}
        if not shapes:
            continue
        largest = (max(r for r, _ in shapes), max(c for _, c in shapes))
        for (r, c), times in sorted(shapes.items()):
            m = inner.mapping(ms, largest, (r, c), arch_r)
            if isinstance(m, str):
                raise SpecError(f"fused group {name}: {ms.operator.name}'s {r}x{c} block has no mapping: {m}")
            out[j][(r, c)] = (times, m)
    return BlockMappings(run, out, arch_r)


@dataclass(frozen=True)
class BlockProgram:
    """The tile program of one block shape of a stage: a C translation unit of its own (the tile runtime's globals
    are per program), entry point ``int FUNCTION(void **T, long long *counters)``, ``T`` the tile operator's
    tensors in operand order, counters ``[levels][operands][4]``."""

    function: str
    operator: Operator
    source: str


@dataclass(frozen=True)
class BlockPrograms:
    """Per multiply-accumulate stage, its blocks' tile programs by shape, on ``levels`` levels, of elements of
    ``dtypes[j]`` (``generate_c``'s; a group may mix float and integer stages, as a QDQ transformer's float attention
    products and its integer projections); ``plain``: the stages whose blocks run plain loops, with the reason."""

    programs: dict[int, dict[tuple[int, int], BlockProgram]]
    levels: int
    plain: dict[int, str]
    dtypes: dict[int, str]

    def types(self, j: int) -> tuple[str, str, str]:
        """The C types of stage ``j``'s programs' input, weight and output elements."""
        op = next(iter(self.programs[j].values())).operator
        dt = self.dtypes[j]
        return c_type(op.inputs[0], dt)[0], c_type(op.inputs[1], dt)[0], c_type(op.output, dt)[0]

    def without(self, j: int, why: str) -> BlockPrograms:
        """The same with stage ``j``'s blocks in plain loops, for reason ``why``."""
        return BlockPrograms({k: v for k, v in self.programs.items() if k != j}, self.levels,
                             {**self.plain, j: why}, self.dtypes)

    def units(self) -> list[tuple[str, str]]:
        """(function, C source) of every block program."""
        return [(p.function, p.source) for by in self.programs.values() for p in by.values()]


def covered(ms: MacStage) -> bool:
    """Whether a stage's blocks run their tile programs: a single-image convolution (grouped or depthwise too), a
    dense layer
    (``O[N][K] += I[N][C] * W[K][C]``) or a matrix product, batched or not (``O[b][M][N] += A[b][M][K] * B[b][K][N]``,
    ``codegen.fused_c.product_batch``), whose tile operators' input and output are the block's window (channel-major)
    or tokens (token-major)."""
    from accelmap.codegen.fused_c import product_batch  # fused_c runs these programs: it imports this module

    op = ms.operator
    # a depthwise one's I[1][G][..] and W[G][R][S] alike, and a grouped one's I[1][G][C][..], W[G][K][C][R][S] and
    # O[1][G][K][..]: channel g * C + c, channel-major as on chip, and the weights as ONNX stores them
    if op.kind in ("conv2d", "depthwise_conv2d", "grouped_conv2d"):
        return op.sizes.get("N", 1) == 1
    return op.kind == "dense" or op.kind in ("matmul", "batched_matmul") and product_batch(ms) is not None


def plan_block_programs(name: str, stages: tuple[Stage, ...], macs: dict[int, MacStage], arch: Accelerator,
                        cost: GroupCost, inner: InnerMappings, dtype: str | dict[int, str] = "fp32") -> BlockPrograms:
    """Each block shape's tile program (``dtype``: its elements' type, ``generate_c``'s, one for every stage or per
    stage) for the group of plan
    ``cost``. Covered (``covered``): single-image convolutions (grouped and depthwise too), dense layers and matrix
    products (inside a head-tiled run, the program of a head tile's share, ``fusion.stages.head_slice``, run once
    per head tile); the other stages' blocks run plain loops (``BlockPrograms.plain`` says why)."""
    bm = block_mappings(name, stages, macs, arch, cost, inner)
    dtypes = dtype if isinstance(dtype, dict) else dict.fromkeys(macs, dtype)
    programs: dict[int, dict[tuple[int, int], BlockProgram]] = {}
    plain: dict[int, str] = {}
    for j, by_shape in bm.shapes.items():
        ms = bm.stages[j]
        op = ms.operator
        if not covered(ms):
            plain[j] = (f"{op.name} is {op.kind}; tile programs run the blocks of single-image convolutions, dense "
                        "layers and matrix products")
            continue
        programs[j] = {}
        for (r, c), (_, m) in by_shape.items():
            tile = tile_operator(ms, r, c)
            fn = f"{name}_block{j}_{r}x{c}"
            src = generate_c(tile, bm.arch, m, dtypes[j]).replace("int accelmap_run(", f"int {fn}(", 1)
            programs[j][(r, c)] = BlockProgram(fn, tile, src)
    return BlockPrograms(programs, len(bm.arch.levels), plain, {j: dtypes[j] for j in programs})


def block_level_counts(name: str, stages: tuple[Stage, ...], macs: dict[int, MacStage], arch: Accelerator,
                       cost: GroupCost, inner: InnerMappings) -> dict[int, np.ndarray]:
    """Per multiply-accumulate stage, the cost model's counters ``[levels][operands][4]`` of its blocks (each
    shape's ``access_counts`` under its mapping, times its runs): what the blocks' tile programs count."""
    bm = block_mappings(name, stages, macs, arch, cost, inner)
    out: dict[int, np.ndarray] = {}
    for j, by_shape in bm.shapes.items():
        total = np.zeros((len(bm.arch.levels), len(macs[j].operator.operands), 4), dtype=np.int64)
        for (r, c), (times, m) in by_shape.items():
            tile = tile_operator(bm.stages[j], r, c)
            names = [o.name for o in tile.operands]
            for (lv, x), cnt in access_counts(tile, bm.arch, m).items():
                total[lv, names.index(x)] += times * np.array(cnt.as_tuple(), dtype=np.int64)
        out[j] = total
    return out
