"""C calls for the host operators: one function per ONNX op type, returning the lines of its step.

Each emitter gets the step, the graph and a ``Buffers`` that names the C array of a value (and
registers a constant for the weights file when a host op reads it as data). Parameters that only
steer the op (a Clip's bounds, a Reshape's target, quantization scales) are read here from the
model's constants and written into the call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np
import onnx

from accelmap.compile.graph import NetGraph
from accelmap.compile.partition import Step, q_range, quant_params
from accelmap.errors import SpecError
from accelmap.workload.onnx_ops import attrs

TYPE_CODES = {"float": "T_F32", "int8_t": "T_I8", "uint8_t": "T_U8", "int16_t": "T_I16", "int32_t": "T_I32",
              "int64_t": "T_I64"}
ELEM_SIZES = {"float": 4, "int8_t": 1, "uint8_t": 1, "int16_t": 2, "int32_t": 4, "int64_t": 8}


class Buffers(Protocol):
    def __call__(self, name: str) -> str: ...


def c_float(v: float) -> str:
    """A float32 value as an exact C literal."""
    return f"{float(np.float32(v)).hex()}f"


def c_longs(vals) -> str:
    return "(const long[]){" + ", ".join(str(int(v)) for v in vals) + "}"


def c_floats(vals) -> str:
    return "(const float[]){" + ", ".join(c_float(v) for v in np.asarray(vals).reshape(-1)) + "}"


def c_ints(vals, ctype: str = "int") -> str:
    return f"(const {ctype}[]){{" + ", ".join(str(int(v)) for v in np.asarray(vals).reshape(-1)) + "}"


def bcast_strides(shape: tuple[int, ...], out: tuple[int, ...]) -> list[int]:
    shape = (1,) * (len(out) - len(shape)) + tuple(shape)
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(0 if s == 1 else acc)
        acc *= s
    return strides[::-1]


def _problem(g: NetGraph, s: Step, why: str) -> SpecError:
    return SpecError(f"node {s.name!r} ({s.op_type}): {why}", where=g.source)


def _float_io(g: NetGraph, s: Step, names: list[str]) -> None:
    for x in names:
        if g.c_type(x) != "float":
            raise _problem(g, s, f"value {x!r} is {g.c_type(x)}; this host op is implemented for float32")


def _binary(s: Step, g: NetGraph, buf: Buffers) -> list[str]:
    a, b = s.node.input[0], s.node.input[1]
    y = s.outputs[0]
    _float_io(g, s, [a, b, y])
    out = g.shape(y)
    if len(out) > 8:
        raise _problem(g, s, "more than 8 axes")
    op = {"Add": 0, "Sub": 1, "Mul": 2, "Div": 3, "Pow": 4}[s.op_type]
    nd = max(len(out), 1)
    shape = out or (1,)
    sa = bcast_strides(g.shape(a), shape)
    sb = bcast_strides(g.shape(b), shape)
    return [f"bcast_binary({op}, {buf(a)}, {buf(b)}, {buf(y)}, {nd}, {c_longs(shape)}, {c_longs(sa)}, "
            f"{c_longs(sb)});"]


_UNARY = {"Relu": 0, "Clip": 1, "Sigmoid": 4, "Tanh": 5, "Exp": 6, "Sqrt": 7, "Erf": 8, "Neg": 9, "Abs": 10}


def _unary_params(s: Step, g: NetGraph) -> tuple[int, str, str]:
    """The kind code and the (Clip) bounds of an element-wise unary op, as ``unary`` takes them."""
    lo, hi = -np.inf, np.inf
    if s.op_type == "Gelu":
        kind = 3 if attrs(s.node).get("approximate", "none") == "tanh" else 2
    else:
        kind = _UNARY[s.op_type]
    if s.op_type == "Clip":
        a = attrs(s.node)
        lo, hi = a.get("min", lo), a.get("max", hi)
        for pos in (1, 2):
            if len(s.node.input) > pos and s.node.input[pos]:
                v = s.node.input[pos]
                if v not in g.consts:
                    raise _problem(g, s, f"the bound {v!r} must be a constant")
                if pos == 1:
                    lo = float(g.consts[v])
                else:
                    hi = float(g.consts[v])
    lo_c = "-INFINITY" if lo == -np.inf else c_float(lo)
    hi_c = "INFINITY" if hi == np.inf else c_float(hi)
    return kind, lo_c, hi_c


def _unary(s: Step, g: NetGraph, buf: Buffers) -> list[str]:
    x, y = s.node.input[0], s.outputs[0]
    _float_io(g, s, [x, y])
    kind, lo_c, hi_c = _unary_params(s, g)
    return [f"unary({kind}, {buf(x)}, {buf(y)}, {g.size(y)}L, {lo_c}, {hi_c});"]


def _copy(s: Step, g: NetGraph, buf: Buffers) -> list[str]:
    x, y = s.node.input[0], s.outputs[0]
    if g.size(x) != g.size(y) or g.c_type(x) != g.c_type(y):
        raise _problem(g, s, "input and output differ in size or type")
    return [f"memcpy({buf(y)}, {buf(x)}, {g.size(y) * ELEM_SIZES[g.c_type(y)]}UL);"]


def _transpose(s: Step, g: NetGraph, buf: Buffers) -> list[str]:
    x, y = s.node.input[0], s.outputs[0]
    ishape = g.shape(x)
    perm = list(attrs(s.node).get("perm", list(range(len(ishape)))[::-1]))
    istr = [int(np.prod(ishape[d + 1:], dtype=np.int64)) for d in range(len(ishape))]
    oshape = [ishape[p] for p in perm]
    ct = g.c_type(x)
    return [f"transpose((const char *){buf(x)}, (char *){buf(y)}, {ELEM_SIZES[ct]}, {len(perm)}, "
            f"{c_longs(oshape)}, {c_longs([istr[p] for p in perm])});"]


def _softmax(s: Step, g: NetGraph, buf: Buffers) -> list[str]:
    x, y = s.node.input[0], s.outputs[0]
    _float_io(g, s, [x, y])
    shape = g.shape(x)
    axis = int(attrs(s.node).get("axis", -1)) % len(shape)
    outer, n, inner = int(np.prod(shape[:axis])), shape[axis], int(np.prod(shape[axis + 1:]))
    return [f"softmax({buf(x)}, {buf(y)}, {outer}L, {n}L, {inner}L);"]


def _layernorm(s: Step, g: NetGraph, buf: Buffers) -> list[str]:
    x, y = s.node.input[0], s.outputs[0]
    _float_io(g, s, [x, y])
    a = attrs(s.node)
    if len([o for o in s.node.output if o]) > 1:
        raise _problem(g, s, "the mean and inverse std outputs are not produced")
    shape = g.shape(x)
    axis = int(a.get("axis", -1)) % len(shape)
    outer, n = int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))
    for pos in (1, 2):
        if len(s.node.input) > pos and s.node.input[pos] and g.size(s.node.input[pos]) != n:
            raise _problem(g, s, "a scale or bias that broadcasts within the normalized axes is not handled")
    b = buf(s.node.input[2]) if len(s.node.input) > 2 and s.node.input[2] else "NULL"
    return [f"layernorm({buf(x)}, {buf(y)}, {outer}L, {n}L, 1L, {buf(s.node.input[1])}, {b}, "
            f"{c_float(a.get('epsilon', 1e-5))});"]


def _pool(s: Step, g: NetGraph, buf: Buffers) -> list[str]:
    x, y = s.node.input[0], s.outputs[0]
    _float_io(g, s, [x, y])
    a = attrs(s.node)
    ishape, oshape = g.shape(x), g.shape(y)
    if len(ishape) != 4:
        raise _problem(g, s, "only 2-D pooling (NCHW) is handled")
    if s.op_type == "GlobalAveragePool":
        return [f"global_avg({buf(x)}, {buf(y)}, {ishape[0] * ishape[1]}L, {ishape[2] * ishape[3]}L);"]
    if a.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        raise _problem(g, s, "SAME padding is not handled")
    if len([o for o in s.node.output if o]) > 1:
        raise _problem(g, s, "the indices output of MaxPool is not produced")
    kh, kw = a["kernel_shape"]
    sh, sw = a.get("strides", [1, 1])
    dh, dw = a.get("dilations", [1, 1])
    pt, pl, pb, pr = a.get("pads", [0, 0, 0, 0])
    kind = 0 if s.op_type == "MaxPool" else 1
    return [f"pool2d({kind}, {buf(x)}, {buf(y)}, {ishape[0] * ishape[1]}L, {ishape[2]}L, {ishape[3]}L, "
            f"{oshape[2]}L, {oshape[3]}L, {kh}L, {kw}L, {sh}L, {sw}L, {dh}L, {dw}L, {pt}L, {pl}L, {pb}L, {pr}L, "
            f"{int(a.get('count_include_pad', 0))});"]


def _concat(s: Step, g: NetGraph, buf: Buffers) -> list[str]:
    y = s.outputs[0]
    shape = g.shape(y)
    axis = int(attrs(s.node)["axis"]) % len(shape)
    ins = [x for x in s.node.input if x]
    outer = int(np.prod(shape[:axis]))
    chunks = [int(np.prod(g.shape(x)[axis:])) for x in ins]
    ct = g.c_type(y)
    ptrs = "(const char *[]){" + ", ".join(f"(const char *){buf(x)}" for x in ins) + "}"
    return [f"concat({ptrs}, {c_longs(chunks)}, {len(ins)}, (char *){buf(y)}, {outer}L, {ELEM_SIZES[ct]});"]


def _channels(g: NetGraph, x: str, axis: int, nch: int) -> tuple[int, int]:
    shape = g.shape(x)
    if nch == 1:
        return 1, 1
    ax = axis % len(shape)
    return int(np.prod(shape[ax + 1:])), nch


def _quantize_call(s: Step, g: NetGraph, x: str, y: str, n: str, inner: str, nch: int) -> str:
    q = quant_params(g, s.node, "the output")
    lo, hi = q_range(q.elem)
    return (f"quantize({x}, {y}, {TYPE_CODES[g.c_type(s.outputs[0])]}, {n}, {inner}, {nch}L, "
            f"{c_floats(q.scale)}, {c_ints(q.zero_point)}, {lo}, {hi});")


def _dequantize_call(s: Step, g: NetGraph, x: str, y: str, n: str, inner: str, nch: int) -> str:
    q = quant_params(g, s.node, "the input")
    return (f"dequantize({x}, {TYPE_CODES[g.c_type(s.node.input[0])]}, {y}, {n}, {inner}, {nch}L, "
            f"{c_floats(q.scale)}, {c_ints(q.zero_point)});")


def _quantize(s: Step, g: NetGraph, buf: Buffers) -> list[str]:
    x, y = s.node.input[0], s.outputs[0]
    q = quant_params(g, s.node, "the output")
    inner, nch = _channels(g, x, q.axis, q.scale.size)
    return [_quantize_call(s, g, buf(x), buf(y), f"{g.size(y)}L", f"{inner}L", nch)]


def _dequantize(s: Step, g: NetGraph, buf: Buffers) -> list[str]:
    x, y = s.node.input[0], s.outputs[0]
    q = quant_params(g, s.node, "the input")
    inner, nch = _channels(g, x, q.axis, q.scale.size)
    return [_dequantize_call(s, g, buf(x), buf(y), f"{g.size(y)}L", f"{inner}L", nch)]


def _softmax_opset(g: NetGraph) -> int:
    return next((o.version for o in g.model.opset_import if o.domain in ("", "ai.onnx")), 13)


def _qlinear_softmax(s: Step, g: NetGraph, buf: Buffers) -> list[str]:
    """DequantizeLinear -> Softmax -> QuantizeLinear as onnxruntime's QLinearSoftmax computes it."""
    x, y = s.inputs[0], s.outputs[0]
    shape = g.shape(x)
    opset = _softmax_opset(g)
    axis = int(attrs(s.node).get("axis", -1 if opset >= 13 else 1)) % len(shape)
    # before opset 13 Softmax normalizes over all axes from ``axis`` on (the rows of a 2-D view)
    n = shape[axis] if opset >= 13 else int(np.prod(shape[axis:]))
    outer = int(np.prod(shape[:axis]))
    inner = int(np.prod(shape[axis + 1:])) if opset >= 13 else 1
    return [qlinear_softmax_call(s, g, buf(x), buf(y), f"{outer}L", f"{n}L", f"{inner}L")]


def qlinear_softmax_call(s: Step, g: NetGraph, x: str, y: str, outer: str, n: str, inner: str) -> str:
    """The C call of onnxruntime's QLinearSoftmax on ``x`` as [outer, n, inner] (C expressions) into ``y``."""
    assert s.qin is not None and s.qout is not None
    return (f"qlinear_softmax({x}, {TYPE_CODES[g.c_type(s.inputs[0])]}, {y}, {TYPE_CODES[g.c_type(s.outputs[0])]}, "
            f"{outer}, {n}, {inner}, {c_float(s.qin.scale[0])}, {c_float(s.qout.scale[0])}, "
            f"{int(s.qout.zero_point[0])}, {q_range(s.qout.elem)[1]});")


def _qlinear_global_avg(s: Step, g: NetGraph, buf: Buffers) -> list[str]:
    """DequantizeLinear -> GlobalAveragePool -> QuantizeLinear as onnxruntime's QLinearGlobalAveragePool."""
    x, y = s.inputs[0], s.outputs[0]
    assert s.qin is not None and s.qout is not None
    shape = g.shape(x)
    if len(shape) < 3:
        raise _problem(g, s, f"GlobalAveragePool needs an input of rank 3 or more, not {shape}")
    lo, hi = q_range(s.qout.elem)
    return [f"qlinear_global_avg({buf(x)}, {TYPE_CODES[g.c_type(x)]}, {buf(y)}, {TYPE_CODES[g.c_type(y)]}, "
            f"{shape[0] * shape[1]}L, {int(np.prod(shape[2:]))}L, {c_float(s.qin.scale[0])}, "
            f"{int(s.qin.zero_point[0])}, {c_float(s.qout.scale[0])}, {int(s.qout.zero_point[0])}, {lo}, {hi});"]


def _qlinear_add(s: Step, g: NetGraph, buf: Buffers) -> list[str]:
    """DequantizeLinear (a), DequantizeLinear (b) -> Add -> QuantizeLinear as onnxruntime's QLinearAdd."""
    a, b, y = s.inputs[0], s.inputs[1], s.outputs[0]
    return [qlinear_add_call(s, g, buf(a), buf(b), buf(y), f"{g.size(y)}L")]


def qlinear_add_call(s: Step, g: NetGraph, a: str, b: str, y: str, n: str) -> str:
    """The C call of an ``Add (QDQ)`` step on ``n`` elements of C arrays ``a``, ``b`` into ``y``."""
    assert s.qin is not None and s.qin_b is not None and s.qout is not None
    ta, tb, ty = (TYPE_CODES[g.c_type(v)] for v in (*s.inputs[:2], s.outputs[0]))
    lo, hi = q_range(s.qout.elem)
    return (f"qlinear_add({a}, {ta}, {b}, {tb}, {y}, {ty}, {n}, {c_float(s.qin.scale[0])}, "
            f"{int(s.qin.zero_point[0])}, {c_float(s.qin_b.scale[0])}, {int(s.qin_b.zero_point[0])}, "
            f"{c_float(s.qout.scale[0])}, {int(s.qout.zero_point[0])}, {lo}, {hi});")


HOST_OPS: dict[str, Callable[[Step, NetGraph, Buffers], list[str]]] = {
    **{k: _binary for k in ("Add", "Sub", "Mul", "Div", "Pow")},
    **{k: _unary for k in (*_UNARY, "Gelu")},
    **{k: _copy for k in ("Reshape", "Flatten", "Identity", "Squeeze", "Unsqueeze", "Dropout")},
    "Transpose": _transpose, "Softmax": _softmax, "LayerNormalization": _layernorm,
    "MaxPool": _pool, "AveragePool": _pool, "GlobalAveragePool": _pool, "Concat": _concat,
    "QuantizeLinear": _quantize, "DequantizeLinear": _dequantize,
    "Softmax (QDQ)": _qlinear_softmax, "GlobalAveragePool (QDQ)": _qlinear_global_avg, "Add (QDQ)": _qlinear_add,
}


def host_lines(s: Step, g: NetGraph, buf: Buffers) -> list[str]:
    fn = HOST_OPS.get(s.op_type)
    if s.op_type == "Einsum":
        # two-operand products run on the accelerator; what reaches the host has no product to map
        raise _problem(g, s, f"equation {attrs(s.node).get('equation', '')!r} is not a product of two operands; "
                             "the compiler runs two-operand einsums (matrix products and contractions) only")
    if fn is None or s.node.domain not in ("", "ai.onnx"):
        known = ", ".join(sorted(HOST_OPS))
        raise _problem(g, s, f"no host implementation of this op; the host runs {known}")
    return fn(s, g, buf)


# Host ops that act on each element alone (per channel at most): they run on a block of a fused group's
# tensor (channels x positions of one tile) as on the whole tensor.
BLOCK_OPS = frozenset({*_UNARY, "Gelu", "QuantizeLinear", "DequantizeLinear", "Identity", "Dropout"})


# Float binary ops with one constant operand that a block runs when the constant is a scalar or varies along the
# channels only (a bias): the same single float operation as ``bcast_binary``, so the same bits.
BLOCK_CONST_OPS = {"Add": "+", "Sub": "-", "Mul": "*", "Div": "/"}


def block_constant(s: Step, g: NetGraph, channel_axis: int) -> tuple[str, int, bool]:
    """For a ``BLOCK_CONST_OPS`` step of one value and one constant: (the constant, how many channel values it
    has (1: a scalar), whether it is the first operand). One clear line when a block cannot run it: the
    constant varies along another axis than ``channel_axis`` of the value, or the value broadcasts."""
    if s.op_type not in BLOCK_CONST_OPS or len(s.node.input) != 2:
        raise _problem(g, s, f"not a binary op of {', '.join(BLOCK_CONST_OPS)}")
    a, b = s.node.input[0], s.node.input[1]
    const_first = a in g.consts
    c, v = (a, b) if const_first else (b, a)
    if c not in g.consts or v in g.consts:
        raise _problem(g, s, "a fused block runs a binary op of one value and one constant")
    _float_io(g, s, [a, b, s.outputs[0]])
    shape, cshape = g.shape(v), g.shape(c)
    if g.shape(s.outputs[0]) != shape or len(cshape) > len(shape):
        raise _problem(g, s, f"its value {v!r} broadcasts to {list(g.shape(s.outputs[0]))}")
    axis = channel_axis % len(shape)
    full = (1,) * (len(shape) - len(cshape)) + tuple(cshape)
    if any(d != 1 for i, d in enumerate(full) if i != axis):
        raise _problem(g, s, f"its constant {c!r} of shape {list(cshape)} varies along another axis than the "
                             f"channels (axis {axis}); a fused block adds a scalar or one value per channel")
    return c, full[axis], const_first


def block_gemm_bias(s: Step, g: NetGraph) -> int:
    """How many values a Gemm step's bias has (1: a scalar) when a fused block (channel-major) can add it as a
    channel bias: a scalar or one value per output feature; one clear line when it varies along the rows."""
    b = s.node.input[2]
    if g.size(b) not in (1, g.shape(s.outputs[0])[-1]) or any(d != 1 for d in g.shape(b)[:-1]):
        raise _problem(g, s, f"its bias {b!r} of shape {list(g.shape(b))} varies along the rows; a fused block adds "
                             "a scalar or one value per output feature")
    return g.size(b)


def _feature_rows(s: Step, g: NetGraph, channel_axis: int, what: str) -> int:
    """The feature count of the rows a fused block normalizes for ``s`` (softmax, layer norm): its axis and the
    block's channel axis must both be the last of its input; one clear line naming the step otherwise (``what``
    describes it, ``{axis}`` filled in)."""
    shape = g.shape(s.inputs[0])
    axis = int(attrs(s.node).get("axis", -1)) % len(shape)
    if channel_axis % len(shape) != len(shape) - 1 or axis != len(shape) - 1:
        raise _problem(g, s, f"{what.format(axis=axis)} of {list(shape)}; a fused block normalizes over the "
                             "features (last axis) of a matrix product")
    return shape[-1]


def block_softmax(s: Step, g: NetGraph, channel_axis: int) -> int:
    """The length of the rows a Softmax step normalizes when a fused block can run it: a softmax (float, or a
    quantized one as onnxruntime's QLinearSoftmax) over the channels (the last axis) of a matrix product's
    tensor, whose block holds every channel of its positions; one clear line otherwise."""
    x = s.inputs[0]
    if s.op_type == "Softmax":
        _float_io(g, s, [x, s.outputs[0]])
    elif _softmax_opset(g) < 13:
        raise _problem(g, s, "a softmax before opset 13 normalizes over several axes; a fused block does not")
    return _feature_rows(s, g, channel_axis, "a softmax over axis {axis}")


def block_layernorm(s: Step, g: NetGraph, channel_axis: int) -> int:
    """The length of the rows a LayerNormalization step normalizes when a fused block can run it: a float layer
    norm over the features (the last axis, its scale and bias one value per feature) of a matrix product's tensor,
    whose block holds every feature of its positions; one clear line otherwise."""
    x = s.inputs[0]
    _float_io(g, s, [x, s.outputs[0]])
    if len([o for o in s.node.output if o]) > 1:
        raise _problem(g, s, "the mean and inverse std outputs are not produced")
    shape = g.shape(x)
    _feature_rows(s, g, channel_axis, "a layer norm over axes {axis}..")
    for pos in (1, 2):
        if len(s.node.input) > pos and s.node.input[pos] and g.size(s.node.input[pos]) != shape[-1]:
            raise _problem(g, s, "a scale or bias that broadcasts within the normalized axis is not handled")
    return shape[-1]


def block_lines(s: Step, g: NetGraph, x: str, y: str, n: str, inner: str, channel_axis: int = 1,
                const: Callable[[str], str] | None = None) -> list[str]:
    """The host step ``s`` applied to a block of its input, channel-major (``n`` elements, ``inner`` per
    channel, C expressions): ``x`` in, ``y`` out. Element-wise ops (``BLOCK_OPS``), and a float binary op with a
    constant per channel or scalar (``BLOCK_CONST_OPS``; ``const`` names a constant in C); per-channel
    quantization only along the channels (``channel_axis`` of the tensor: 1 for a convolution's NCHW, the last
    for a matrix product's tokens x features)."""
    if s.op_type in BLOCK_CONST_OPS and s.node.domain in ("", "ai.onnx"):
        assert const is not None
        c, nch, const_first = block_constant(s, g, channel_axis)
        # a batched product's block channel is b * X + x: a constant along its last axis is indexed by x
        at = f"{const(c)}[(i / ({inner})) % {nch}]" if nch > 1 else f"{const(c)}[0]"
        op = BLOCK_CONST_OPS[s.op_type]
        expr = f"{at} {op} {x}[i]" if const_first else f"{x}[i] {op} {at}"
        return [f"for (long i = 0; i < {n}; i++) {y}[i] = {expr};"]
    if s.op_type in ("Softmax", "Softmax (QDQ)") and s.node.domain in ("", "ai.onnx"):
        # the block is [batch][features][positions]: the host's softmax over its middle axis, the same sums
        rows = block_softmax(s, g, channel_axis)
        outer = f"({n}) / ({rows}L * ({inner}))"
        if s.op_type == "Softmax (QDQ)":
            return [qlinear_softmax_call(s, g, x, y, outer, f"{rows}L", f"({inner})")]
        return [f"softmax({x}, {y}, {outer}, {rows}L, {inner});"]
    if s.op_type == "LayerNormalization" and s.node.domain in ("", "ai.onnx"):
        # the block is [batch][features][positions]: the host's layer norm over its middle axis, the same sums
        assert const is not None
        rows = block_layernorm(s, g, channel_axis)
        bias = const(s.node.input[2]) if len(s.node.input) > 2 and s.node.input[2] else "NULL"
        eps = c_float(attrs(s.node).get("epsilon", 1e-5))
        return [f"for (long o = 0; o < ({n}) / ({rows}L * ({inner})); o++)",
                f"  for (long p = 0; p < ({inner}); p++)",
                f"    layernorm({x} + o * {rows}L * ({inner}) + p, {y} + o * {rows}L * ({inner}) + p, 1L, {rows}L, "
                f"({inner}), {const(s.node.input[1])}, {bias}, {eps});"]
    if s.op_type not in BLOCK_OPS or s.node.domain not in ("", "ai.onnx"):
        raise _problem(g, s, f"not element-wise; a fused group's tile can run {', '.join(sorted(BLOCK_OPS))}")
    src, dst = s.node.input[0], s.outputs[0]
    if s.op_type in ("Identity", "Dropout"):
        return [f"memcpy({y}, {x}, {ELEM_SIZES[g.c_type(dst)]} * (size_t){n});"]
    if s.op_type in ("QuantizeLinear", "DequantizeLinear"):
        q = quant_params(g, s.node, "the output" if s.op_type == "QuantizeLinear" else "the input")
        nd = len(g.shape(src))
        if q.scale.size > 1 and q.axis % nd != channel_axis % nd:
            raise _problem(g, s, f"quantized per channel along axis {q.axis}; in a fused tile only along the "
                                 f"channels (axis {channel_axis % nd})")
        call = _quantize_call if s.op_type == "QuantizeLinear" else _dequantize_call
        return [call(s, g, x, y, n, inner, q.scale.size)]
    _float_io(g, s, [src, dst])
    kind, lo_c, hi_c = _unary_params(s, g)
    return [f"unary({kind}, {x}, {y}, {n}, {lo_c}, {hi_c});"]


@dataclass
class HostWork:
    """What the host reads and writes for one step (the host model's input): elements and their bytes."""

    read: int = 0
    written: int = 0
    bytes: int = 0          # read + written

    def add(self, n_read: int, read_size: int, n_written: int = 0, write_size: int = 0) -> None:
        self.read += n_read
        self.written += n_written
        self.bytes += n_read * read_size + n_written * write_size


def host_work(s: Step, g: NetGraph) -> HostWork:
    """Elements (and bytes) a host step reads and writes; scalar constants (parameters) are not counted."""
    w = HostWork()
    for x in s.inputs:
        if (x not in g.consts or g.size(x) > 1) and x in g.shapes:
            w.add(g.size(x), ELEM_SIZES[g.c_type(x)])
    for y in s.outputs:
        if y in g.shapes:
            w.add(0, 0, g.size(y), ELEM_SIZES[g.c_type(y)])
    return w


def onnx_elem_name(t: int) -> str:
    return onnx.TensorProto.DataType.Name(t)
