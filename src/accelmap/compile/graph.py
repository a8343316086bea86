"""An ONNX model as the compiler needs it: bound shapes, element types and constant values.

The importer (``workload.onnx_import``) reads graphs without tensor data; compiling needs the
data too. This module loads the whole model, binds its symbolic dimensions the importer's way
(``bind_dims``), gives random weights to parameter inputs that have none (the bundled graphs ship
without weights), and infers every value's shape and type.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from accelmap.errors import SpecError
from accelmap.workload.onnx_shapes import bind_dims

# ONNX element type -> (NumPy type, C type)
ELEM_TYPES: dict[int, tuple[type, str]] = {
    onnx.TensorProto.FLOAT: (np.float32, "float"),
    onnx.TensorProto.INT8: (np.int8, "int8_t"),
    onnx.TensorProto.UINT8: (np.uint8, "uint8_t"),
    onnx.TensorProto.INT16: (np.int16, "int16_t"),
    onnx.TensorProto.INT32: (np.int32, "int32_t"),
    onnx.TensorProto.INT64: (np.int64, "int64_t"),
}


@dataclass
class NetGraph:
    """A loaded model: its proto (weights included), every value's shape and type, the constants."""

    model: onnx.ModelProto
    source: str
    inputs: list[str]                                   # the data inputs, in graph order
    outputs: list[str]
    shapes: dict[str, tuple[int, ...]]
    types: dict[str, int]                               # ONNX element type
    consts: dict[str, np.ndarray]
    params: dict[str, int]                              # bound symbolic dims
    notes: list[str] = field(default_factory=list)

    @property
    def nodes(self) -> list[onnx.NodeProto]:
        return list(self.model.graph.node)

    def np_type(self, name: str) -> type:
        t = self.types.get(name)
        if t not in ELEM_TYPES:
            raise SpecError(f"value {name!r} has element type {onnx.TensorProto.DataType.Name(t or 0)}; the "
                            f"compiler handles float32, int8, uint8, int16, int32 and int64", where=self.source)
        return ELEM_TYPES[t][0]

    def c_type(self, name: str) -> str:
        self.np_type(name)
        return ELEM_TYPES[self.types[name]][1]

    def shape(self, name: str) -> tuple[int, ...]:
        if name not in self.shapes:
            raise SpecError(f"the shape of value {name!r} is unknown after shape inference", where=self.source)
        return self.shapes[name]

    def size(self, name: str) -> int:
        return int(np.prod(self.shape(name), dtype=np.int64))


def _param_users(model: onnx.ModelProto) -> dict[str, tuple[str, int]]:
    """Which (op type, input position) reads each value (the first reader)."""
    users: dict[str, tuple[str, int]] = {}
    for n in model.graph.node:
        for k, x in enumerate(n.input):
            users.setdefault(x, (n.op_type, k))
    return users


def _random_weight(shape: tuple[int, ...], user: tuple[str, int], rng: np.random.Generator) -> np.ndarray:
    """A weight of the scale a trained network has (variance 1/fan-in), so activations stay in range."""
    op, pos = user
    if len(shape) >= 2:
        fan_in = shape[0] if op == "MatMul" else int(np.prod(shape[1:]))
        return (rng.standard_normal(shape) / np.sqrt(max(fan_in, 1))).astype(np.float32)
    if op in ("LayerNormalization", "BatchNormalization") and pos == 1:
        return (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
    return (0.1 * rng.standard_normal(shape)).astype(np.float32)


def load_graph(model: str | Path | onnx.ModelProto, *, dims: dict[str, int] | None = None,
               batch: int | None = None, seq_len: int | None = None, seed: int = 0) -> NetGraph:
    """Load a model with its weights and bind its dims.

    Data inputs are the graph inputs without an initializer that have a symbolic dim (or, in a
    fully static graph, the first such input). Every other graph input without an initializer is
    a parameter: it gets random weights (seeded), and a note says so.
    """
    if isinstance(model, onnx.ModelProto):
        proto = onnx.ModelProto()
        proto.CopyFrom(model)
        source = proto.graph.name or "<model>"
    else:
        source = str(model)
        try:
            proto = onnx.load(source)
        except Exception as e:  # noqa: BLE001 - a missing file, a protobuf decode error, external data not found
            raise SpecError(f"cannot read the ONNX model: {e}", where=source) from None
    g = proto.graph
    init = {t.name for t in g.initializer}
    free = [i for i in g.input if i.name not in init]

    def symbolic(vi) -> bool:
        return any(not d.HasField("dim_value") for d in vi.type.tensor_type.shape.dim)

    data = ([i.name for i in free if symbolic(i)] or [free[0].name]) if free else []
    params = bind_dims(proto, dict(dims or {}), batch, seq_len, source)
    notes = []
    users = _param_users(proto)
    rng = np.random.default_rng(seed)
    filled = []
    for vi in free:
        if vi.name in data:
            continue
        shape = tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)
        if vi.type.tensor_type.elem_type != onnx.TensorProto.FLOAT:
            raise SpecError(f"graph input {vi.name!r} has no initializer and is not float; give the model its "
                            f"weights", where=source)
        arr = _random_weight(shape, users.get(vi.name, ("", 0)), rng)
        g.initializer.append(numpy_helper.from_array(arr, vi.name))
        filled.append(vi.name)
    if filled:
        notes.append(f"{len(filled)} parameter inputs had no weights; random weights (seed {seed}) were given")
        keep = [i for i in g.input if i.name not in set(filled)]
        del g.input[:]
        g.input.extend(keep)
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, data_prop=True)
    except Exception as e:  # noqa: BLE001 - ONNX raises several types for an inconsistent graph
        raise SpecError(f"ONNX shape inference failed: {e}", where=source) from None
    shapes: dict[str, tuple[int, ...]] = {}
    types: dict[str, int] = {}
    for vi in list(inferred.graph.input) + list(inferred.graph.value_info) + list(inferred.graph.output):
        tt = vi.type.tensor_type
        types[vi.name] = tt.elem_type
        ds = tt.shape.dim
        if tt.HasField("shape") and all(d.HasField("dim_value") for d in ds):
            shapes[vi.name] = tuple(int(d.dim_value) for d in ds)
    consts: dict[str, np.ndarray] = {}
    for t in g.initializer:
        arr = numpy_helper.to_array(t)
        consts[t.name] = arr
        shapes[t.name] = tuple(arr.shape)
        types[t.name] = t.data_type
    for n in g.node:
        if n.op_type == "Constant":
            if n.attribute[0].name != "value":
                raise SpecError(f"Constant node {n.name!r}: only the 'value' form is handled", where=source)
            arr = numpy_helper.to_array(n.attribute[0].t)
            consts[n.output[0]] = arr
            shapes[n.output[0]] = tuple(arr.shape)
    return NetGraph(proto, source, data, [o.name for o in g.output], shapes, types, consts, params, notes)
