"""Program limits of a target beyond buffer capacity: what makes a tile program impossible to build.

VTA's limits come from its hardware configuration (``vta_config.json`` and ``hw_spec.h`` in Apache
TVM's VTA): a GEMM instruction iterates two hardware loops (``VTA_LOOP_ITER_WIDTH`` = 14 bits, so an
extent of at most 16,383 each) over a micro-op kernel held in the micro-op buffer
(``LOG_UOP_BUFF_SIZE`` = 15: 32 KiB of 32-bit micro-ops, 8,192 entries). The compute of one tile is
that instruction: the two outermost temporal loops of the tile level are its hardware loops, and
every iteration of the loops inside them is one micro-op. A tile whose inner loops need more
micro-ops than the buffer holds, or a hardware loop longer than its counter, cannot be built, which
is what the dissertation counts as an invalid configuration (instruction-buffer overflow).
Accumulator capacity is the accelerator's output partition (checked with every other capacity).

Two more VTA facts decide whether a tiling builds:

* **Partial sums stay in the accumulator.** VTA's store unit writes only the output buffer, whose
  elements are the narrow output type (``VTA_OUT_WIDTH`` = 8 bits, after the ALU's shift and clip);
  32-bit partial sums cannot be written to DRAM and read back. A loop order that leaves an output tile
  before its reduction is finished (a reduction loop in DRAM outside a loop over output tiles) cannot be
  built: the dissertation's "loop ordering issues".
* **The input tile is a dense box, padding included.** TVM's bound inference gives each axis of the
  input tile one interval, ``(tile - 1) * stride + (window - 1) * dilation + 1`` wide, and VTA's DMA
  writes the padding zeros into the buffer (its load instruction's pad fields). The model counts the
  distinct points a strided window touches (a 1x1 window at stride 2 touches every other row), so for
  VTA the box, not the model's footprint, must fit the input buffer, once per virtual thread.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from accelmap.arch.accelerator import Accelerator
from accelmap.mapping.loopnest import Loop, Mapping
from accelmap.workload.operator import AffineIndex, Operator

VTA_UOP_BUFFER_ENTRIES = 2 ** 15 // 4
VTA_LOOP_EXTENT_MAX = 2 ** 14 - 1
VTA_HARDWARE_LOOPS = 2


@dataclass(frozen=True)
class ProgramLimits:
    uop_entries: int | None = None        # micro-ops one tile's compute may use; None: no limit
    loop_extent_max: int | None = None    # largest extent of a hardware loop; None: no limit
    hardware_loops: int = 0               # outermost tile-level loops run by the instruction itself
    partial_sums_stay: bool = False       # the accumulator cannot spill partial sums to DRAM
    dense_input_box: bool = False         # input tiles are loaded as dense boxes, padding included
    dma_2d: bool = False                  # every tile copy is one 2-D strided transfer (conv2d, dense, matmul)

    def check(self, op: Operator, mapping: Mapping, tile_level: int, outer: list[Loop] | None = None,
              input_bits: int | None = None, copies: int = 1,
              layouts: dict[str, tuple[int, ...]] | None = None) -> str | None:
        """Why the tile program of ``mapping`` cannot be built, or None. ``outer``: the DRAM loops
        that change which output tile is resident, outermost first (virtual-thread loops excluded:
        each thread owns its accumulator tile); ``input_bits``: the input buffer's capacity, which
        ``copies`` input tiles (one per virtual thread, or two when double-buffered) must share;
        ``layouts``: operand -> the order of its axes in DRAM where it is not the declared one."""
        if self.partial_sums_stay and outer is not None:
            out_dims = set(op.output.dims)
            reduction = next((lp for lp in outer if lp.bound > 1 and lp.dim not in out_dims), None)
            if reduction is not None:
                after = [lp for lp in outer[outer.index(reduction) + 1:] if lp.bound > 1 and lp.dim in out_dims]
                if after:
                    return (f"the reduction loop over {reduction.dim} runs outside the output loop over "
                            f"{after[0].dim}: partial sums would leave the accumulator, and VTA stores only "
                            f"the 8-bit output")
        if self.dense_input_box and input_bits is not None:
            ext = {d: 1 for d in op.dim_names}
            for lp in mapping.loops:
                if lp.level >= tile_level:
                    ext[lp.dim] *= lp.bound
            for X in op.inputs:
                if X.cls != "I":
                    continue
                box = copies * X.bits * math.prod(_box(ix, ext) for ix in X.indices)
                if box > input_bits:
                    return (f"the input tile is a {box:,}-bit dense box (padding and strided rows included, "
                            f"x{copies}); the input buffer holds {input_bits:,} bits")
        if self.dma_2d and op.kind in DMA_OUTSIDE_COPY:
            problem = _dma_problem(op, mapping, tile_level, layouts or {})
            if problem:
                return problem
        temporal = [lp for lp in mapping.loops_at(tile_level) if not lp.spatial]
        hw, body = temporal[:self.hardware_loops], temporal[self.hardware_loops:]
        if self.loop_extent_max is not None:
            for lp in hw:
                if lp.bound > self.loop_extent_max:
                    return (f"hardware loop over {lp.dim} has extent {lp.bound:,}; "
                            f"the loop counter allows {self.loop_extent_max:,}")
        if self.uop_entries is not None:
            uops = math.prod(lp.bound for lp in body)
            if uops > self.uop_entries:
                return f"the tile's compute needs {uops:,} micro-ops; the micro-op buffer holds {self.uop_entries:,}"
        return None


def _box(ix: AffineIndex, ext: dict[str, int]) -> int:
    """Width of the interval one input axis spans for tile extents ``ext`` (TVM's bound inference)."""
    return sum(c * (ext[d] - 1) for d, c in ix.terms) + 1


def dma_runs(extents: list[int], stored: list[int]) -> tuple[int, bool]:
    """How many contiguous runs TVM folds a tile copy into, and whether the innermost run starts away
    from the element (``_fold_buffer_dim`` then adds a dummy row). ``extents`` and ``stored``: the tile's
    and the tensor's extent per axis in DRAM order (outermost first), in elements of one block."""
    runs, away, whole, seen = 0, False, True, False
    for ext, size in zip(reversed(extents), reversed(stored), strict=True):
        if ext == 1:
            whole = whole and size == 1       # a dropped loop over a longer axis breaks the run
            continue
        if not seen:
            away, runs, seen = not whole, 1, True
        elif not whole:
            runs += 1
        whole = ext == size
    return runs, away


# Dims whose loop lies outside every tile copy in VTA's schedule of the operator kind (Apache TVM,
# ``vta/top``): conv2d's batch (``schedule_packed_conv2d`` copies (channel blocks, rows, columns) per batch
# element). ``packed_dense`` packs data as (batch blocks, input blocks, BATCH, BLOCK_IN) and weights as
# (output blocks, input blocks, BLOCK_OUT, BLOCK_IN), and ``schedule_packed_dense`` copies a box of both
# outer axes: no dim outside. Matrix products have no VTA schedule; they are copied like dense.
DMA_OUTSIDE_COPY: dict[str, tuple[str, ...]] = {"conv2d": ("N",), "dense": (), "matmul": ()}


def _dma_problem(op: Operator, mapping: Mapping, tile_level: int,
                 layouts: dict[str, tuple[int, ...]]) -> str | None:
    """Why one of the operator's tile copies is not a single 2-D DMA transfer, or None."""
    ext = {d: 1 for d in op.dim_names}
    block = {d: 1 for d in op.dim_names}
    for lp in mapping.loops:
        if lp.level >= tile_level:
            ext[lp.dim] *= lp.bound
            if lp.spatial:
                block[lp.dim] *= lp.bound
    for X in op.operands:
        tile, stored = [], []
        for a in layouts.get(X.name, range(len(X.indices))):
            ix = X.indices[a]
            if len(ix.dims) == 1 and ix.dims[0] in DMA_OUTSIDE_COPY[op.kind]:
                continue                       # that loop lies outside the copy
            unit = math.prod(block[d] for d, _ in ix.terms) if len(ix.terms) == 1 else 1
            full = X.shape[a] if X.shape else _box(ix, dict(op.sizes))
            tile.append(_box(ix, ext) // unit)
            stored.append(full // unit)
        padded = X.cls == "I" and any(X.pad_lo)
        runs, away = dma_runs(tile, stored)
        if padded:
            present = [t for t in tile if t > 1]
            inner_cut = tile[-1] == 1 and stored[-1] > 1
            if len(present) != 2 or inner_cut or away:
                return (f"the padded {X.name} tile {'x'.join(map(str, tile))} (blocks x rows x columns) is not "
                        f"one 2-D DMA transfer of rows and columns; VTA's padded load needs exactly those two")
        elif runs + away > 2:
            return (f"the {X.name} tile {'x'.join(map(str, tile))} is {runs + away} non-contiguous runs in DRAM; "
                    f"a VTA DMA transfer is 2-D")
    return None


NO_LIMITS = ProgramLimits()
VTA_LIMITS = ProgramLimits(VTA_UOP_BUFFER_ENTRIES, VTA_LOOP_EXTENT_MAX, VTA_HARDWARE_LOOPS,
                           partial_sums_stay=True, dense_input_box=True, dma_2d=True)


def limits_for(arch: Accelerator) -> ProgramLimits:
    """The VTA presets' limits; none known for other accelerators (capacity alone decides)."""
    return VTA_LIMITS if arch.name.startswith("vta") else NO_LIMITS
