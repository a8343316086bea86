"""Output shapes of the onnxruntime contrib ops (domain ``com.microsoft``).

ONNX shape inference knows no shapes for these ops, so everything after them
would lose its shape. Each rule here gives the output shapes and element types
from the input shapes and attributes, following the onnxruntime contrib op
documentation (ContribOperators.md). Only the outputs whose shape follows from
static input shapes are given; the others stay unknown.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
from onnx import TensorProto, helper

from accelmap.workload.constructors import conv_output_size

Shape = tuple[int, ...]
# A rule gets (node, attributes, shape_of(i), type_of(i)) for input position i and
# returns [(output position, element type, shape)].
Rule = Callable[..., list[tuple[int, int, Shape]]]


def _inp(node, i: int) -> bool:
    return i < len(node.input) and bool(node.input[i])


def matmul_shape(a: Shape, b: Shape) -> Shape:
    """numpy.matmul's result shape (1-D operands promoted and dropped again)."""
    a1, b1 = len(a) == 1, len(b) == 1
    a = (1,) + tuple(a) if a1 else tuple(a)
    b = tuple(b) + (1,) if b1 else tuple(b)
    batch = np.broadcast_shapes(a[:-2], b[:-2])
    out = tuple(batch) + (a[-2], b[-1])
    if a1:
        out = out[:-2] + out[-1:]
    if b1:
        out = out[:-1]
    return tuple(int(x) for x in out)


def conv_shape(x: Shape, w: Shape, a: dict) -> Shape:
    nsp = len(x) - 2
    k = list(w[2:])
    strides = list(a.get("strides", [1] * nsp))
    dil = list(a.get("dilations", [1] * nsp))
    auto = a.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else str(auto)
    out = []
    for i in range(nsp):
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            out.append(-(-x[2 + i] // strides[i]))
        else:
            pads = list(a.get("pads", [0] * (2 * nsp))) if auto == "NOTSET" else [0] * (2 * nsp)
            out.append(conv_output_size(x[2 + i], k[i], strides[i], dil[i], pads[i], pads[i + nsp]))
    return (x[0], w[0], *out)


def pool_shape(x: Shape, a: dict) -> Shape:
    nsp = len(x) - 2
    k = list(a["kernel_shape"])
    strides = list(a.get("strides", [1] * nsp))
    pads = list(a.get("pads", [0] * (2 * nsp)))
    ceil = int(a.get("ceil_mode", 0))
    out = []
    for i in range(nsp):
        num = x[2 + i] + pads[i] + pads[i + nsp] - k[i]
        out.append((-(-num // strides[i]) if ceil else num // strides[i]) + 1)
    return (x[0], x[1], *out)


def _same(pos: int = 0, type_from: int | None = None) -> Rule:
    def rule(node, a, shape_of, type_of):
        s = shape_of(pos)
        t = type_of(type_from if type_from is not None and _inp(node, type_from) else pos)
        return [] if s is None else [(0, t, s)]
    return rule


def _fused_matmul(node, a, shape_of, type_of):
    sa, sb = shape_of(0), shape_of(1)
    if sa is None or sb is None or a.get("transBatchA", 0) or a.get("transBatchB", 0):
        return []
    sa, sb = list(sa), list(sb)
    if a.get("transA", 0) and len(sa) >= 2:
        sa[-2:] = sa[-1], sa[-2]
    if a.get("transB", 0) and len(sb) >= 2:
        sb[-2:] = sb[-1], sb[-2]
    return [(0, type_of(0), matmul_shape(tuple(sa), tuple(sb)))]


def _gemm_like(a_pos: int, b_pos: int, out_type: Callable) -> Rule:
    def rule(node, a, shape_of, type_of):
        sa, sb = shape_of(a_pos), shape_of(b_pos)
        if sa is None or sb is None or len(sa) != 2 or len(sb) != 2:
            return []
        m = sa[1] if a.get("transA", 0) else sa[0]
        n = sb[0] if a.get("transB", 0) else sb[1]
        return [(0, out_type(node, type_of), (m, n))]
    return rule


def _qgemm_type(node, type_of):
    # With y_scale the output is quantized like y_zero_point (uint8 without it); else float.
    if _inp(node, 7):
        return type_of(8) if _inp(node, 8) else TensorProto.UINT8
    return TensorProto.FLOAT


def _matmul_like(a_pos: int, b_pos: int, out_type: Callable) -> Rule:
    def rule(node, a, shape_of, type_of):
        sa, sb = shape_of(a_pos), shape_of(b_pos)
        if sa is None or sb is None:
            return []
        try:
            return [(0, out_type(node, type_of), matmul_shape(sa, sb))]
        except ValueError:
            return []
    return rule


def _matmul_nbits(node, a, shape_of, type_of):
    sa = shape_of(0)
    return [] if sa is None else [(0, type_of(0), tuple(sa[:-1]) + (int(a["N"]),))]


def _conv_like(x_pos: int, w_pos: int, out_type: Callable) -> Rule:
    def rule(node, a, shape_of, type_of):
        x, w = shape_of(x_pos), shape_of(w_pos)
        if x is None or w is None or len(x) != len(w) or len(x) < 3:
            return []
        return [(0, out_type(node, type_of), conv_shape(x, w, a))]
    return rule


def _qlinear_binary(node, a, shape_of, type_of):
    sa, sb = shape_of(0), shape_of(3)
    if sa is None or sb is None:
        return []
    t = type_of(7) if _inp(node, 7) else type_of(0)
    return [(0, t, tuple(int(x) for x in np.broadcast_shapes(sa, sb)))]


def _qlinear_pool(node, a, shape_of, type_of):
    x = shape_of(0)
    if x is None or a.get("channels_last", 0):
        return []
    t = type_of(4) if _inp(node, 4) else type_of(0)
    return [(0, t, pool_shape(x, a))]


def _qlinear_global_pool(node, a, shape_of, type_of):
    x = shape_of(0)
    if x is None:
        return []
    t = type_of(4) if _inp(node, 4) else type_of(0)
    if a.get("channels_last", 0):
        return [(0, t, (x[0],) + (1,) * (len(x) - 2) + (x[-1],))]
    return [(0, t, tuple(x[:2]) + (1,) * (len(x) - 2))]


def _qlinear_concat(node, a, shape_of, type_of):
    shapes = [shape_of(i) for i in range(2, len(node.input), 3)]
    if not shapes or any(s is None for s in shapes):
        return []
    ax = int(a["axis"]) % len(shapes[0])
    out = list(shapes[0])
    out[ax] = sum(s[ax] for s in shapes)
    return [(0, type_of(1) if _inp(node, 1) else type_of(2), tuple(out))]


def _quantize(node, a, shape_of, type_of):
    s = shape_of(0)
    return [] if s is None else [(0, type_of(2) if _inp(node, 2) else TensorProto.UINT8, s)]


def _attention(node, a, shape_of, type_of):
    x, w = shape_of(0), shape_of(1)
    if x is None or w is None or len(x) != 3:
        return []
    sizes = list(a.get("qkv_hidden_sizes", []))
    v_hidden = sizes[2] if sizes else w[1] // 3
    return [(0, type_of(0), (x[0], x[1], v_hidden))]


def _gqa(node, a, shape_of, type_of):
    q = shape_of(0)
    if q is None or len(q) != 3:
        return []
    heads, kv = int(a["num_heads"]), int(a["kv_num_heads"])
    width = heads + 2 * kv if not _inp(node, 1) else heads
    return [(0, type_of(0), (q[0], q[1], q[2] // width * heads))]


def _mha(node, a, shape_of, type_of):
    q, v = shape_of(0), shape_of(2) if _inp(node, 2) else None
    if q is None or len(q) != 3 or v is None:
        return []
    v_hidden = v[2] if len(v) == 3 else v[1] * v[3]
    return [(0, type_of(0), (q[0], q[1], v_hidden))]


def _embed_layer_norm(node, a, shape_of, type_of):
    ids, emb = shape_of(0), shape_of(2)
    if ids is None or emb is None:
        return []
    out: list[tuple[int, int, Shape]] = [(0, type_of(2), (ids[0], ids[1], emb[1]))]
    if len(node.output) > 1 and node.output[1]:
        out.append((1, TensorProto.INT32, (ids[0],)))
    return out


def _float_out(node, type_of):
    return TensorProto.FLOAT


def _type0(node, type_of):
    return type_of(0)


def _qconv_type(node, type_of):
    return type_of(7) if _inp(node, 7) else type_of(0)


def _scale_type(pos: int) -> Callable:
    return lambda node, type_of: type_of(pos) if _inp(node, pos) else TensorProto.FLOAT


RULES: dict[str, Rule] = {
    "FusedConv": _conv_like(0, 1, _type0),
    "NhwcFusedConv": lambda *args: [],   # channels-last: left unknown (stops with a clear error if used)
    "QLinearConv": _conv_like(0, 3, _qconv_type),
    "FusedMatMul": _fused_matmul, "TransposeMatMul": _fused_matmul,
    "MatMulInteger16": _matmul_like(0, 1, lambda node, type_of: TensorProto.INT32),
    "FusedGemm": _gemm_like(0, 1, _type0),
    "QGemm": _gemm_like(0, 3, _qgemm_type),
    "MatMulNBits": _matmul_nbits,
    "MatMulIntegerToFloat": _matmul_like(0, 1, _scale_type(2)),
    "DynamicQuantizeMatMul": _matmul_like(0, 1, _float_out),
    "GemmFastGelu": _matmul_like(0, 1, _type0),
    "QLinearAdd": _qlinear_binary, "QLinearMul": _qlinear_binary,
    "QLinearSigmoid": _same(0, 4), "QLinearLeakyRelu": _same(0, 4), "QLinearSoftmax": _same(0, 4),
    "QLinearAveragePool": _qlinear_pool, "QLinearGlobalAveragePool": _qlinear_global_pool,
    "QLinearConcat": _qlinear_concat,
    "QuantizeLinear": _quantize, "DequantizeLinear": lambda n, a, s, t: ([] if s(0) is None else [(0, t(1), s(0))]),
    "Attention": _attention, "MultiHeadAttention": _mha,
    "QAttention": lambda n, a, s, t: [(i, t(3) if _inp(n, 3) else TensorProto.FLOAT, sh)
                                      for i, _, sh in _attention(n, a, s, t)],
    "GroupQueryAttention": _gqa,
    "EmbedLayerNormalization": _embed_layer_norm,
    "Gelu": _same(), "FastGelu": _same(), "BiasGelu": _same(), "QuickGelu": _same(), "BiasAdd": _same(),
    "BiasSoftmax": _same(), "BiasDropout": _same(), "SkipLayerNormalization": _same(),
    "SkipSimplifiedLayerNormalization": _same(), "SimplifiedLayerNormalization": _same(),
    "LayerNormalization": _same(), "RotaryEmbedding": _same(), "Inverse": _same(),
}


def contrib_output_shapes(node, shape_of: Callable[[int], Shape | None],
                          type_of: Callable[[int], int]) -> list[tuple[str, int, Shape]]:
    """[(output name, element type, shape)] of a com.microsoft node, as far as known."""
    rule = RULES.get(node.op_type)
    if rule is None:
        return []
    a = {x.name: helper.get_attribute_value(x) for x in node.attribute}
    try:
        outs = rule(node, a, shape_of, type_of)
    except (KeyError, IndexError, ValueError, ZeroDivisionError):
        return []   # malformed attributes: the shape stays unknown and the importer says so
    return [(node.output[i], t, s) for i, t, s in outs
            if i < len(node.output) and node.output[i] and all(int(d) > 0 for d in s)]
