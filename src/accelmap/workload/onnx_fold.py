"""Values of the small integer tensors that shape arithmetic computes.

Exporters compute reshape targets, pad amounts and slice bounds from ``Shape``
through ``Gather``, ``Div``, ``Cast``, ``Mod``, ``Concat``... ONNX's own data
propagation (``infer_shapes(data_prop=True)``) follows ``Shape``, ``Gather``,
``Unsqueeze``, ``Concat`` and ``Add``/``Sub``/``Mul``, but not ``Div``, ``Cast``,
``Mod`` or the values ``Pad`` and ``Slice`` read, so shapes after them are lost.
This pass evaluates such nodes with NumPy once the shapes they read are known;
the caller replaces them by constants and runs shape inference again.

Only small tensors are evaluated (shape arithmetic, never activations or
weights), and only nodes whose every input value is known.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import onnx
from onnx import helper, numpy_helper

# Larger tensors are data, not shape arithmetic.
MAX_ELEMENTS = 4096


def tensor_value(t: onnx.TensorProto) -> np.ndarray | None:
    """The value of an embedded small tensor; None when it is large or its data is absent."""
    n = int(np.prod(t.dims)) if len(t.dims) else 1
    if n > MAX_ELEMENTS or t.data_location == onnx.TensorProto.EXTERNAL:
        return None
    if n and not (t.raw_data or t.int64_data or t.int32_data or t.float_data or t.double_data
                  or t.uint64_data):
        return None
    try:
        return numpy_helper.to_array(t)
    except Exception:   # an unusual element type or inconsistent data: not shape arithmetic
        return None


def _attrs(node) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _ints(v) -> list[int]:
    return [int(x) for x in np.asarray(v).reshape(-1)]


def _div(a, b):
    if np.issubdtype(a.dtype, np.integer) and np.issubdtype(b.dtype, np.integer):
        q = np.abs(a) // np.abs(b)      # ONNX integer division truncates toward zero
        return (np.sign(a) * np.sign(b) * q).astype(np.result_type(a, b))
    return a / b


def _mod(a, b, fmod: int):
    return np.fmod(a, b) if fmod else np.mod(a, b)


def _shape(ins, a, shape_of):
    s = shape_of(0)
    if s is None:
        return None
    start, end = a.get("start", 0), a.get("end", len(s))
    return np.array(s[slice(start, end)], dtype=np.int64)


def _gather(ins, a, _):
    return np.take(ins[0], ins[1], axis=a.get("axis", 0))


def _unsqueeze(ins, a, _):
    axes = _ints(ins[1]) if len(ins) > 1 and ins[1] is not None else list(a.get("axes", []))
    out = ins[0]
    rank = out.ndim + len(axes)
    for ax in sorted(x % rank for x in axes):
        out = np.expand_dims(out, ax)
    return out


def _squeeze(ins, a, _):
    axes = _ints(ins[1]) if len(ins) > 1 and ins[1] is not None else a.get("axes")
    if axes is None:
        return np.squeeze(ins[0])
    return np.squeeze(ins[0], axis=tuple(x % ins[0].ndim for x in axes))


def _slice(ins, a, _):
    data = ins[0]
    if len(ins) == 1:   # opset < 10: attributes
        starts, ends = list(a["starts"]), list(a["ends"])
        axes = list(a.get("axes", range(len(starts))))
        steps = [1] * len(starts)
    else:
        starts, ends = _ints(ins[1]), _ints(ins[2])
        axes = _ints(ins[3]) if len(ins) > 3 and ins[3] is not None else list(range(len(starts)))
        steps = _ints(ins[4]) if len(ins) > 4 and ins[4] is not None else [1] * len(starts)
    idx = [slice(None)] * data.ndim
    for s, e, ax, st in zip(starts, ends, axes, steps, strict=True):
        idx[ax % data.ndim] = slice(s, e, st)
    return data[tuple(idx)]


def _cast(ins, a, _):
    return ins[0].astype(helper.tensor_dtype_to_np_dtype(a["to"]))


def _reshape(ins, a, _):
    target = _ints(ins[1])
    src = ins[0].shape
    target = [src[i] if t == 0 and not a.get("allowzero", 0) else t for i, t in enumerate(target)]
    return ins[0].reshape(target)


def _range(ins, a, _):
    return np.arange(ins[0].item(), ins[1].item(), ins[2].item()).astype(ins[0].dtype)


def _constant_of_shape(ins, a, _):
    v = a.get("value")
    fill = numpy_helper.to_array(v).reshape(-1)[0] if v is not None else np.float32(0)
    return np.full(_ints(ins[0]), fill, dtype=np.asarray(fill).dtype)


def _reduce(fn):
    def run(ins, a, _):
        axes = _ints(ins[1]) if len(ins) > 1 and ins[1] is not None else a.get("axes")
        keep = bool(a.get("keepdims", 1))
        ax = None if axes is None or len(axes) == 0 else tuple(x % ins[0].ndim for x in axes)
        return fn(ins[0], axis=ax, keepdims=keep)
    return run


def _binary(fn):
    return lambda ins, a, _: fn(ins[0], ins[1])


def _unary(fn):
    return lambda ins, a, _: fn(ins[0])


_EVAL: dict[str, Callable] = {
    "Shape": _shape,
    "Size": lambda ins, a, shape_of: (None if shape_of(0) is None
                                      else np.array(int(np.prod(shape_of(0))), dtype=np.int64)),
    "Identity": _unary(lambda x: x),
    "Gather": _gather,
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Concat": lambda ins, a, _: np.concatenate([np.atleast_1d(x) for x in ins], axis=a.get("axis", 0)),
    "Slice": _slice,
    "Cast": _cast,
    "Reshape": _reshape,
    "Flatten": lambda ins, a, _: ins[0].reshape(int(np.prod(ins[0].shape[:a.get("axis", 1)])), -1),
    "Range": _range,
    "ConstantOfShape": _constant_of_shape,
    "Expand": lambda ins, a, _: ins[0] * np.ones(_ints(ins[1]), dtype=ins[0].dtype),
    "Tile": lambda ins, a, _: np.tile(ins[0], _ints(ins[1])),
    "Transpose": lambda ins, a, _: np.transpose(ins[0], a.get("perm")),
    "Add": _binary(np.add), "Sub": _binary(np.subtract), "Mul": _binary(np.multiply), "Div": _binary(_div),
    "Mod": lambda ins, a, _: _mod(ins[0], ins[1], a.get("fmod", 0)),
    "Pow": _binary(lambda x, y: np.power(x, y).astype(x.dtype)),
    "Min": lambda ins, a, _: np.minimum.reduce(ins), "Max": lambda ins, a, _: np.maximum.reduce(ins),
    "Equal": _binary(np.equal), "Less": _binary(np.less), "Greater": _binary(np.greater),
    "LessOrEqual": _binary(np.less_equal), "GreaterOrEqual": _binary(np.greater_equal),
    "And": _binary(np.logical_and), "Or": _binary(np.logical_or), "Not": _unary(np.logical_not),
    "Where": lambda ins, a, _: np.where(ins[0], ins[1], ins[2]),
    "Neg": _unary(np.negative), "Abs": _unary(np.abs), "Sign": _unary(np.sign),
    "Floor": _unary(np.floor), "Ceil": _unary(np.ceil), "Sqrt": _unary(np.sqrt),
    "Reciprocal": _unary(lambda x: 1 / x), "Round": _unary(np.round),
    "ReduceProd": _reduce(np.prod), "ReduceSum": _reduce(np.sum),
    "ReduceMin": _reduce(np.min), "ReduceMax": _reduce(np.max),
    "Clip": lambda ins, a, _: np.clip(ins[0], ins[1] if len(ins) > 1 and ins[1] is not None else a.get("min"),
                                      ins[2] if len(ins) > 2 and ins[2] is not None else a.get("max")),
}
# Ops whose value needs only the input's shape, not its value.
_SHAPE_ONLY = {"Shape", "Size"}


def fold_values(graph: onnx.GraphProto, shape_of: Callable[[str], tuple[int, ...] | None],
                known: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Values of the node outputs of ``graph`` that shape arithmetic computes.

    ``shape_of(name)`` gives a tensor's static shape or None; ``known`` holds the
    values already known (small initializers, constants). Returns the newly
    computed values (node output name -> array), graph order.
    """
    values = dict(known)
    new: dict[str, np.ndarray] = {}
    for node in graph.node:
        if node.domain not in ("", "ai.onnx"):
            continue
        if node.op_type == "Constant":
            continue
        fn = _EVAL.get(node.op_type)
        if fn is None or not node.output or node.output[0] in values:
            continue
        if node.op_type in _SHAPE_ONLY:
            ins = []
        else:
            if any(i and i not in values for i in node.input):
                continue
            ins = [values[i] if i else None for i in node.input]
        try:
            with np.errstate(all="ignore"):
                out = fn(ins, _attrs(node), lambda k, node=node: shape_of(node.input[k]))
        except Exception:   # a value this small evaluator cannot compute stays unknown
            continue
        if out is None:
            continue
        out = np.asarray(out)
        if out.size > MAX_ELEMENTS:
            continue
        values[node.output[0]] = new[node.output[0]] = out
    return new
