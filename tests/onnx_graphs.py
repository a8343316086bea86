"""Small ONNX graphs for the importer tests, built with onnx.helper (no downloads, no torch)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
I64 = TensorProto.INT64
MS = "com.microsoft"


def node(op, ins, outs, name=None, domain="", **attrs):
    return helper.make_node(op, list(ins), list(outs), name=name or outs[0], domain=domain, **attrs)


def const(name, value, dtype=np.int64):
    return helper.make_node("Constant", [], [name], name=name,
                            value=numpy_helper.from_array(np.array(value, dtype=dtype), name))


def init(name, value, dtype=np.int64):
    return numpy_helper.from_array(np.array(value, dtype=dtype), name)


def weight(name, dims, dtype=F):
    """An initializer with dims and type but no data (as in a weight-free model)."""
    return TensorProto(name=name, data_type=dtype, dims=list(dims))


def graph_model(nodes, inputs, outputs=(("y", F, None),), inits=(), opset=17, ms=False, value_info=()):
    """inputs/outputs: (name, elem type, shape) with None for an unknown shape."""
    vi = lambda n, t, s: helper.make_tensor_value_info(n, t, s)
    g = helper.make_graph(list(nodes), "t", [vi(*i) for i in inputs], [vi(*o) for o in outputs],
                          initializer=list(inits), value_info=[vi(*v) for v in value_info])
    ops = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(MS, 1)] if ms else [])
    return helper.make_model(g, opset_imports=ops)


def census(m):
    """{source op: count} over the accelerator layers of an import."""
    out: dict[str, int] = {}
    for l in m.layers:
        out[l.source_op] = out.get(l.source_op, 0) + l.count
    return out
