"""Stages of a fused chain from operators and pooling windows, and the operator of one fused tile.

A multiply-accumulate operator is fused along the rows (and columns) of its output: ``P``/``Q``
for convolutions (NCHW), the token dim ``M`` of a matrix product, ``N`` of a dense layer. Its
first input is the tensor the previous stage produced; the axis of that input which the row dim
indexes tells how many input rows an output row reads (stride, window span, padding).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from accelmap.errors import SpecError
from accelmap.fusion.geometry import AxisMap, Stage
from accelmap.workload.operator import Operand, Operator

# Output dims a fused tile loop walks: (rows, columns or None), by operator kind.
_FUSED_DIMS = {"conv2d": ("P", "Q"), "depthwise_conv2d": ("P", "Q"), "grouped_conv2d": ("P", "Q"),
               "matmul": ("M", None), "dense": ("N", None), "batched_matmul": ("M", None)}


@dataclass(frozen=True)
class MacStage:
    """A stage that is an accelerator operator, with the dims its tiles shrink."""

    stage: Stage
    operator: Operator
    row_dim: str
    col_dim: str | None


def fused_dims(op: Operator) -> tuple[str, str | None] | None:
    """The (row, column) output dims of ``op`` a fused tile loop can walk; None when it has none."""
    dims = _FUSED_DIMS.get(op.kind)
    if dims is None:
        return None
    if op.kind == "dense" and op.sizes.get("N", 1) == 1:
        return None      # one token: nothing to tile
    return dims


def _axis_of(x: Operand, dim: str) -> int:
    for a, ix in enumerate(x.indices):
        if dim in ix.dims:
            return a
    raise SpecError(f"operand {x.name} is not indexed by {dim}")


def _axis_map(op: Operator, x: Operand, dim: str | None) -> tuple[AxisMap, int]:
    """How the output dim ``dim`` reads ``x``'s axis, and that axis's stored size."""
    if dim is None:
        return AxisMap(), 1
    a = _axis_of(x, dim)
    ix = x.indices[a]
    span = sum(c * (op.sizes[d] - 1) for d, c in ix.terms if d != dim) + 1
    pad = x.pad_lo[a] if x.pad_lo else 0
    size = x.shape[a] if x.shape else ix.extent(op.sizes) - pad
    return AxisMap(ix.coeff(dim), span, pad), size


def mac_stage(op: Operator) -> MacStage:
    dims = fused_dims(op)
    if dims is None:
        raise SpecError(f"operator {op.name!r} ({op.kind}) has no output rows or tokens to fuse along")
    rdim, cdim = dims
    x = op.inputs[0]
    rows, in_rows = _axis_map(op, x, rdim)
    cols, in_cols = _axis_map(op, x, cdim)
    for name, m in (("rows", rows), ("columns", cols)):
        if m.stride > m.span:
            # Such a window skips rows: what a tile reads is no interval, which the closed forms assume.
            raise SpecError(f"operator {op.name!r}: its stride {m.stride} along the {name} exceeds its window "
                            f"{m.span}; it cannot be fused along them")
    out_rows, out_cols = op.sizes[rdim], op.sizes[cdim] if cdim else 1
    out_elems = op.footprint(op.output)
    in_elems = math.prod(x.shape) if x.shape else op.footprint(x)
    stage = Stage(op.name, out_rows, out_cols, out_elems // (out_rows * out_cols), in_rows, in_cols,
                  in_elems // (in_rows * in_cols), rows, cols, op.macs // (out_rows * out_cols), x.bits, op.output.bits,
                  _heads(op))
    return MacStage(stage, op, rdim, cdim)


def _heads(op: Operator) -> int:
    """The independent heads of a batched product: its batch dim ``B`` when it indexes the first input and the
    output (each head's output reads only that head's input); 1 otherwise."""
    if op.kind != "batched_matmul" or op.sizes.get("B", 1) <= 1:
        return 1
    if not all(any("B" in ix.dims for ix in x.indices) for x in (op.inputs[0], op.output)):
        return 1
    return op.sizes["B"]


def head_slice(ms: MacStage, heads: int) -> MacStage:
    """The operator of one head tile: ``heads`` of its heads (its batch dim ``B`` shrunk)."""
    op = ms.operator
    dims = tuple((d, heads if d == "B" else s) for d, s in op.dims)
    # The stored shapes describe the whole tensors (as in ``tile_operator``).
    operands = tuple(replace(o, shape=(), pad_lo=()) for o in op.operands)
    return replace(ms, stage=ms.stage.head_slice(heads), operator=replace(op, dims=dims, operands=operands))


def pool_stage(name: str, *, channels: int, in_rows: int, in_cols: int, kernel: tuple[int, int],
               stride: tuple[int, int], pads: tuple[int, int, int, int], bits: int) -> Stage:
    """A pooling window (max or average): no multiply-accumulates, ``pads`` = (top, left, bottom, right)."""
    kh, kw = kernel
    sh, sw = stride
    top, left, bottom, right = pads
    out_rows = (in_rows + top + bottom - kh) // sh + 1
    out_cols = (in_cols + left + right - kw) // sw + 1
    return Stage(name, out_rows, out_cols, channels, in_rows, in_cols, channels, AxisMap(sh, kh, top),
                 AxisMap(sw, kw, left), 0, bits, bits)


def tile_operator(ms: MacStage, rows: int, cols: int) -> Operator:
    """The operator one fused tile runs: ``rows`` x ``cols`` output positions of ``ms``.

    Its input is the window those positions read; the cost model counts the window's index space,
    so a tile at the border moves its padded rows like data, as the whole layer does.
    """
    op = ms.operator
    sizes = {ms.row_dim: rows, **({ms.col_dim: cols} if ms.col_dim else {})}
    dims = tuple((d, sizes.get(d, s)) for d, s in op.dims)
    # The stored shape and padding describe the whole layer's tensor, not the tile's window.
    operands = tuple(replace(o, shape=(), pad_lo=()) for o in op.operands)
    return replace(op, name=f"{op.name}[{rows}x{cols}]", dims=dims, operands=operands)
