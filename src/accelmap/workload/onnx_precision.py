"""Operand bit widths of an imported ONNX operator.

Three modes: the default (int8 inputs and weights, int32 outputs), an explicit
``{I, W, O}`` override, or ``"onnx"``: each operand's width read from the file.
Read from the file, a tensor's width is that of its element type, except in the
QDQ form, where a float operand is the output of a ``DequantizeLinear`` (possibly
through layout ops such as Transpose or Reshape): then it is the width of the
quantized tensor that was dequantized (int8, int4, ...). Integer products
accumulate in 32 bits whatever the stored output type.
"""

from __future__ import annotations

from onnx import TensorProto

from accelmap.workload.constructors import _bits
from accelmap.workload.onnx_shapes import ShapeProblem, Shapes

FLOAT_BITS: dict[int, int] = {TensorProto.FLOAT: 32, TensorProto.FLOAT16: 16, TensorProto.BFLOAT16: 16,
                              TensorProto.DOUBLE: 64}
INT_BITS: dict[int, int] = {TensorProto.INT8: 8, TensorProto.UINT8: 8, TensorProto.INT16: 16, TensorProto.UINT16: 16,
                            TensorProto.INT32: 32, TensorProto.UINT32: 32, TensorProto.INT64: 64}
for _n in ("INT4", "UINT4"):
    if hasattr(TensorProto, _n):
        INT_BITS[getattr(TensorProto, _n)] = 4
for _n in ("INT2", "UINT2"):
    if hasattr(TensorProto, _n):
        INT_BITS[getattr(TensorProto, _n)] = 2
for _n in ("FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ"):
    if hasattr(TensorProto, _n):
        FLOAT_BITS[getattr(TensorProto, _n)] = 8
if hasattr(TensorProto, "FLOAT4E2M1"):
    FLOAT_BITS[TensorProto.FLOAT4E2M1] = 4

# Ops that move or view data without changing its values (a QDQ weight is often
# dequantized, then transposed or reshaped before the MatMul).
_LAYOUT_OPS = {"Identity", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Cast"}


def _stored_type(shapes: Shapes, name: str) -> int:
    """Element type of the tensor ``name`` holds, or of the quantized tensor it dequantizes (0: unknown)."""
    cur, seen = name, set()
    while cur and cur not in seen:
        seen.add(cur)
        node = shapes.producer.get(cur)
        if node is None:
            break
        if node.op_type == "DequantizeLinear" and node.domain in ("", "ai.onnx", "com.microsoft"):
            return shapes.elem.get(node.input[0], TensorProto.UNDEFINED)
        if node.op_type in _LAYOUT_OPS and node.domain in ("", "ai.onnx") and node.op_type != "Cast":
            cur = node.input[0]
            continue
        break
    return shapes.elem.get(name, TensorProto.UNDEFINED)


def _width(shapes: Shapes, name: str, what: str) -> tuple[int, bool]:
    t = _stored_type(shapes, name)
    if t in INT_BITS:
        return INT_BITS[t], True
    if t in FLOAT_BITS:
        return FLOAT_BITS[t], False
    raise ShapeProblem(f"precision 'onnx': {what} {name!r} has element type "
                       f"{TensorProto.DataType.Name(t) if t else 'unknown'}, which has no bit width here")


def precision(bits, shapes: Shapes, x: str, w: str | None, y: str, *, w_bits: int | None = None) -> dict:
    """{I, W, O} bits of an operator reading ``x`` and ``w`` and writing ``y``.

    ``w_bits`` is the weight width an op states in its attributes (MatMulNBits).
    """
    if bits != "onnx":
        return _bits(bits)
    bi, i_int = _width(shapes, x, "input")
    if w_bits is not None:
        bw, w_int = w_bits, True
    elif w is not None:
        bw, w_int = _width(shapes, w, "weight")
    else:
        raise ValueError("precision of an operator needs its weight tensor or the weight width")   # a caller's bug
    if i_int and w_int:
        return {"I": bi, "W": bw, "O": 32}
    # A float product (also weight-only quantization): the output keeps its float type.
    t = shapes.elem.get(y)
    if t in FLOAT_BITS:
        return {"I": bi, "W": bw, "O": FLOAT_BITS[t]}
    return {"I": bi, "W": bw, "O": 32 if i_int else bi}
