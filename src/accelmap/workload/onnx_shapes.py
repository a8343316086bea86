"""Static shapes of every tensor of an ONNX graph.

Three steps, repeated until nothing changes: ONNX shape inference with data
propagation; output shapes of onnxruntime contrib ops (``onnx_contrib``); values
of shape arithmetic the inference does not evaluate (``onnx_fold``), whose nodes
are then replaced by constants in a working copy. The caller's model and the
list of nodes the importer walks are never changed.

Symbolic input dimensions are bound to numbers first (``bind_dims``). When a
shape stays unknown, ``explain_unknown`` finds the node where it was lost.
"""

from __future__ import annotations

from collections import ChainMap

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper, shape_inference

from accelmap.errors import SpecError
from accelmap.workload.onnx_contrib import contrib_output_shapes
from accelmap.workload.onnx_fold import fold_values, tensor_value
from accelmap.workload.onnx_subgraphs import body_inputs, body_model

_SEQ_WORDS = ("seq", "len", "token", "sentence", "time")
_BATCH_WORDS = ("batch",)
# Metadata keys through which a bundled model names defaults for its parameters.
META_DEFAULT = "accelmap.default."
_MAX_ROUNDS = 30
# Inputs whose value (not shape) decides an op's output shape.
_VALUE_INPUTS = {"Reshape": (1,), "Pad": (1, 2, 3), "Slice": (1, 2, 3, 4), "Expand": (1,), "Tile": (1,),
                 "ConstantOfShape": (0,), "Range": (0, 1, 2), "Resize": (1, 2, 3), "Upsample": (1,),
                 "Split": (1,), "TopK": (1,), "Squeeze": (1,), "Unsqueeze": (1,), "OneHot": (1,),
                 "ReduceSum": (1,), "ReduceMean": (1,), "ReduceMax": (1,), "ReduceMin": (1,),
                 "ReduceProd": (1,), "CenterCropPad": (1,), "NonZero": (0,)}


class ShapeProblem(Exception):
    """A shape the importer needs is unknown; the message names the node and the dims."""


def _dims(vi) -> list:
    t = vi.type
    if not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
        return []
    return list(t.tensor_type.shape.dim)


def _sym(d) -> str | None:
    return d.dim_param if d.HasField("dim_param") and d.dim_param else None


def bind_dims(model: onnx.ModelProto, dims: dict[str, int], batch: int | None, seq_len: int | None,
              source: str) -> dict[str, int]:
    """Replace symbolic input dims by numbers in place; return {param: value}.

    A name in ``dims`` binds that symbolic dimension; otherwise axis 0 or a name
    with 'batch' takes ``batch`` (default 1) and a name that reads as a sequence
    length takes ``seq_len``. An input dim without a name is called ``input[axis]``.
    """
    g = model.graph
    meta = {p.key: p.value for p in model.metadata_props}
    default_batch = int(meta.get(META_DEFAULT + "batch", 1))
    default_seq_len = int(meta[META_DEFAULT + "seq_len"]) if META_DEFAULT + "seq_len" in meta else None
    init_names = {t.name for t in g.initializer}
    bound: dict[str, int] = {}
    kinds_used: set[str] = set()

    def value_for(param: str, axis: int, inp: str) -> int:
        if param in dims:
            return dims[param]
        low = param.lower()
        if any(w in low for w in _BATCH_WORDS) or (axis == 0 and not any(w in low for w in _SEQ_WORDS)):
            kinds_used.add("batch")
            return batch if batch is not None else default_batch
        if any(w in low for w in _SEQ_WORDS):
            kinds_used.add("seq_len")
            v = seq_len if seq_len is not None else default_seq_len
            if v is None:
                raise SpecError(f"input {inp!r} axis {axis} is the sequence length {param!r}; pass --seq-len "
                                f"(or --dim {param}=VALUE)", where=source)
            return v
        raise SpecError(f"input {inp!r} axis {axis} has symbolic size {param!r} that is neither the batch "
                        f"(axis 0 or a name with 'batch') nor a sequence length (a name with "
                        f"{', '.join(repr(w) for w in _SEQ_WORDS)}); bind it with --dim {param}=VALUE",
                        where=source)

    for inp in g.input:
        if inp.name in init_names:
            continue
        for axis, d in enumerate(_dims(inp)):
            if d.HasField("dim_value") and d.dim_value > 0:
                continue
            param = _sym(d) or f"{inp.name}[{axis}]"
            if param not in bound:
                bound[param] = value_for(param, axis, inp.name)
    for key, given in (("batch", batch), ("seq_len", seq_len)):
        if given is not None and key not in kinds_used:
            flag = "--batch" if key == "batch" else "--seq-len"
            raise SpecError(f"{flag} {given} given, but no input of the model has a symbolic "
                            f"{'batch' if key == 'batch' else 'sequence-length'} dimension to bind", where=source)
    for k, v in dims.items():
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise SpecError(f"--dim {k}: must be a non-negative integer, got {v!r}", where=source)
    # Names bound through ``dims`` may also appear only in annotated intermediate shapes.
    table = {**{k: v for k, v in dims.items()}, **bound}
    for coll in (g.input, g.value_info, g.output):
        for vi in coll:
            for axis, d in enumerate(_dims(vi)):
                key = _sym(d) or f"{vi.name}[{axis}]"
                if key in table and not (d.HasField("dim_value") and d.dim_value > 0):
                    if key not in bound:
                        bound[key] = table[key]
                    d.Clear()
                    d.dim_value = table[key]
    for k, v in bound.items():
        if v < 1:
            raise SpecError(f"symbolic dimension {k!r} must be a positive integer, got {v}", where=source)
    return bound


def constant_value(node) -> np.ndarray | None:
    """The value of a Constant node, when it is small."""
    for a in node.attribute:
        if a.name == "value":
            return tensor_value(a.t)
        if a.name in ("value_int", "value_ints"):
            return np.array(helper.get_attribute_value(a), dtype=np.int64)
        if a.name in ("value_float", "value_floats"):
            return np.array(helper.get_attribute_value(a), dtype=np.float32)
    return None


class Shapes:
    """Static shapes, element types and small values of the tensors of one graph (and its outer scopes)."""

    def __init__(self, graph: onnx.GraphProto, outer: "Shapes | None" = None, values: dict | None = None,
                 earlier: "Shapes | None" = None):
        self.graph = graph
        shape, partial, elem = _read_graph(graph, earlier)
        self.shape: ChainMap = ChainMap(shape, *(outer.shape.maps if outer else ()))
        self.partial: ChainMap = ChainMap(partial, *(outer.partial.maps if outer else ()))
        self.elem: ChainMap = ChainMap(elem, *(outer.elem.maps if outer else ()))
        self.values: ChainMap = ChainMap(dict(values or {}), *(outer.values.maps if outer else ()))
        self._producer: dict | None = None

    @property
    def producer(self) -> dict:
        """Output name -> the node that writes it (the nodes the importer walks, once it sets them)."""
        if self._producer is None:
            self._producer = {o: n for n in self.graph.node for o in n.output if o}
        return self._producer

    @producer.setter
    def producer(self, table: dict) -> None:
        self._producer = table

    def get(self, name: str) -> tuple[int, ...] | None:
        return self.shape.get(name)

    def of(self, name: str, what: str) -> tuple[int, ...]:
        s = self.shape.get(name)
        if s is None:
            raise ShapeProblem(f"shape of {what} {name!r} is {self.describe(name)}{explain_unknown(self, name)}")
        return s

    def describe(self, name: str) -> str:
        p = self.partial.get(name)
        if p is None:
            return "unknown"
        axes = [f"axis {i} ({d!r})" if d != "?" else f"axis {i}" for i, d in enumerate(p) if not isinstance(d, int)]
        return f"[{', '.join(str(d) for d in p)}], unknown at {', '.join(axes)}"


def _read_graph(graph: onnx.GraphProto, earlier: "Shapes | None" = None) -> tuple[dict, dict, dict]:
    """{name: static shape or None}, {name: dims with names or '?' for unknown ones}, {name: element type}.

    ``earlier``: the same graph's shapes from a previous round; static shapes found then are kept.
    """
    shape: dict = {}
    partial: dict = {}
    elem: dict = {}
    known = {k: v for k, v in earlier.shape.maps[0].items() if v is not None} if earlier is not None else {}
    if earlier is not None and known:
        shape.update(known)
        partial.update({k: list(v) for k, v in known.items()})
        elem.update(earlier.elem.maps[0])

    def put(name: str, t: int, dims: list | None) -> None:
        if t:
            elem[name] = t
        partial[name] = dims
        shape[name] = None if dims is None or any(type(d) is not int for d in dims) else tuple(dims)

    inits = set()
    for t in graph.initializer:
        inits.add(t.name)
        put(t.name, t.data_type, list(t.dims))
    for coll in (graph.input, graph.value_info, graph.output):
        for vi in coll:
            if vi.name in known or vi.name in inits or not vi.type.HasField("tensor_type"):
                continue
            tt = vi.type.tensor_type
            dims = None
            if tt.HasField("shape"):
                dims = [d.dim_value if d.dim_value > 0 else (d.dim_param or "?") for d in tt.shape.dim]
            if vi.name in partial and not _more_known(dims, partial[vi.name]):
                continue   # a graph output declared without shape after an inferred value_info
            put(vi.name, tt.elem_type, dims)
    for n in graph.node:
        if n.op_type == "Constant" and n.output and n.output[0] not in known:
            for a in n.attribute:
                if a.name == "value":
                    put(n.output[0], a.t.data_type, list(a.t.dims))
    return shape, partial, elem


def _more_known(new: list | None, old: list | None) -> bool:
    count = lambda d: -1 if d is None else sum(isinstance(x, int) for x in d)
    return count(new) >= count(old)


def explain_unknown(shapes: Shapes, name: str) -> str:
    """'; first lost at node X (Op): why' for a tensor whose shape is unknown."""
    cur, seen = name, set()
    while cur not in seen:
        seen.add(cur)
        node = shapes.producer.get(cur)
        if node is None:
            return ""
        value_pos = _VALUE_INPUTS.get(node.op_type, ()) if node.domain in ("", "ai.onnx") else ()
        data = [i for k, i in enumerate(node.input) if i and k not in value_pos]
        lost = [i for i in data if shapes.get(i) is None]
        if lost:
            cur = lost[0]
            continue
        where = f"; first lost at node {node.name or node.output[0]!r} ({node.op_type})"
        missing = [node.input[k] for k in value_pos if k < len(node.input) and node.input[k]
                   and node.input[k] not in shapes.values]
        if missing:
            return (f"{where}, whose input {missing[0]!r} is a value that could not be computed from the "
                    "static shapes and constants")
        if node.domain not in ("", "ai.onnx") and node.domain != "com.microsoft":
            return f"{where}: ONNX shape inference does not know op {node.domain}.{node.op_type}"
        return f"{where}: its output shape could not be inferred from its input shapes"
    return ""


def _constant_node(name: str, node_name: str, value: np.ndarray):
    return helper.make_node("Constant", [], [name], name=node_name,
                            value=numpy_helper.from_array(np.asarray(value), name))


def initial_values(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    vals: dict[str, np.ndarray] = {}
    for t in graph.initializer:
        v = tensor_value(t)
        if v is not None:
            vals[t.name] = v
    for n in graph.node:
        if n.op_type == "Constant" and n.output:
            v = constant_value(n)
            if v is not None:
                vals[n.output[0]] = v
    return vals


def infer(model: onnx.ModelProto, source: str, outer: Shapes | None = None) -> tuple[onnx.ModelProto, Shapes]:
    """Shape inference, contrib-op shapes and shape-arithmetic folding until a fixed point.

    ``model`` is a working copy: folded nodes are replaced by constants in it.
    Returns the inferred model and the shapes of its main graph.
    """
    values = initial_values(model.graph)
    if outer is not None:
        values = {**{k: v for k, v in outer.values.items()}, **values}
    inferred = model
    shapes = None
    tried: set = set()
    for _ in range(_MAX_ROUNDS):
        try:
            inferred = shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=True)
        except Exception as e:
            raise SpecError(f"ONNX shape inference failed: {str(e).splitlines()[0][:160]}", where=source) from None
        shapes = Shapes(inferred.graph, outer, values, earlier=shapes)
        changed = False
        for node in inferred.graph.node:
            if node.domain != "com.microsoft":
                continue
            shape_of = lambda i, n=node, s=shapes: s.get(n.input[i]) if i < len(n.input) and n.input[i] else None
            type_of = lambda i, n=node, s=shapes: s.elem.get(n.input[i], 0) if i < len(n.input) and n.input[i] else 0
            for out, elem, shp in contrib_output_shapes(node, shape_of, type_of):
                if shapes.get(out) is None:
                    _annotate(model.graph, out, elem, shp)
                    changed = True
        for node in inferred.graph.node:
            if node.domain in ("", "ai.onnx") and node.op_type in ("If", "Loop", "Scan"):
                if all(shapes.get(o) is not None for o in node.output if o):
                    continue
                key = (node.output[0], tuple(shapes.get(i) for i in node.input if i))
                if key in tried:
                    continue
                tried.add(key)
                for out, elem, shp in _control_output_shapes(node, shapes, list(model.opset_import), source):
                    if shapes.get(out) is None:
                        _annotate(model.graph, out, elem, shp)
                        changed = True
        new = fold_values(inferred.graph, shapes.get, values)
        if new:
            values.update(new)
            for i, node in enumerate(model.graph.node):
                if len(node.output) == 1 and node.output[0] in new and node.op_type != "Constant":
                    model.graph.node[i].CopyFrom(_constant_node(node.output[0], node.name, new[node.output[0]]))
                    changed = True
        if not changed:
            break
    return inferred, Shapes(inferred.graph, outer, values, earlier=shapes)


def _annotate(graph: onnx.GraphProto, name: str, elem: int, shape: tuple[int, ...]) -> None:
    for vi in graph.output:
        if vi.name == name:
            vi.CopyFrom(helper.make_tensor_value_info(name, elem or TensorProto.FLOAT, list(shape)))
            return
    for vi in graph.value_info:
        if vi.name == name:
            graph.value_info.remove(vi)
            break
    graph.value_info.append(helper.make_tensor_value_info(name, elem or TensorProto.FLOAT, list(shape)))


def _graph_output_shapes(node, body: onnx.GraphProto, shapes: Shapes, opsets, source: str) -> list:
    """[(element type, shape or None)] of a body's outputs."""
    lookup = lambda name: (shapes.elem.get(name, 0), shapes.get(name), shapes.values.get(name))
    try:
        _, model = body_model(body, body_inputs(node, lookup), lookup, opsets)
    except SpecError as e:   # a malformed node or body: name the file
        raise SpecError(str(e), where=source) from None
    try:
        _, sub = infer(model, source, outer=shapes)
    except SpecError:
        return [(0, None)] * len(body.output)
    return [(sub.elem.get(o.name, 0), sub.get(o.name)) for o in body.output]


def _control_output_shapes(node, shapes: Shapes, opsets, source: str) -> list[tuple[str, int, tuple]]:
    """Output shapes of If / Loop / Scan from their bodies, where they follow from static shapes.

    If: the branch its constant condition picks, or the shape both branches agree on. Loop and
    Scan: a loop-carried value keeps its shape when the body returns it unchanged; per-iteration
    outputs are stacked along a new axis of the trip count (a Loop's needs a constant count).
    """
    a = {x.name: x for x in node.attribute}
    outs: list[tuple[int, tuple | None]] = []
    if node.op_type == "If":
        cond = shapes.values.get(node.input[0])
        branches = [a["then_branch"].g, a["else_branch"].g]
        if cond is not None and cond.size == 1:
            branches = [branches[0] if bool(cond.reshape(-1)[0]) else branches[1]]
        per = [_graph_output_shapes(node, b, shapes, opsets, source) for b in branches]
        outs = [first if all(p[i] == first for p in per) else (first[0], None) for i, first in enumerate(per[0])]
    elif node.op_type == "Loop":
        body = _graph_output_shapes(node, a["body"].g, shapes, opsets, source)[1:]   # drop the condition
        carried = node.input[2:]
        trips = shapes.values.get(node.input[0]) if node.input and node.input[0] else None
        n_trips = int(trips.reshape(-1)[0]) if trips is not None and trips.size == 1 else None
        if n_trips is not None and n_trips >= 2**31 - 1:
            n_trips = None   # a while loop: the condition ends it
        for i, (elem, s) in enumerate(body):
            if i < len(carried):
                outs.append((elem, s if s is not None and s == shapes.get(carried[i]) else None))
            else:
                outs.append((elem, None if s is None or n_trips is None else (n_trips, *s)))
    else:   # Scan
        at = {k: helper.get_attribute_value(v) for k, v in a.items()}
        n_scan = int(at["num_scan_inputs"])
        n_state = len(node.input) - n_scan
        first = shapes.get(node.input[n_state])
        axes_in = list(at.get("scan_input_axes", [0] * n_scan))
        iters = None if first is None else first[int(axes_in[0]) % len(first)]
        body = _graph_output_shapes(node, a["body"].g, shapes, opsets, source)
        axes_out = list(at.get("scan_output_axes", [0] * (len(body) - n_state)))
        for i, (elem, s) in enumerate(body):
            if i < n_state:
                outs.append((elem, s if s is not None and s == shapes.get(node.input[i]) else None))
            elif s is None or iters is None:
                outs.append((elem, None))
            else:
                ax = int(axes_out[i - n_state]) % (len(s) + 1)
                outs.append((elem, (*s[:ax], iters, *s[ax:])))
    return [(node.output[i], elem, s) for i, (elem, s) in enumerate(outs)
            if i < len(node.output) and node.output[i] and s is not None]
