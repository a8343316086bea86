"""The bodies of If, Loop and Scan as models of their own, for shape inference.

A body reads tensors of the enclosing graphs by name and, for Loop and Scan,
gets its inputs from the node (the loop-carried values, one slice of each scan
input). ``body_model`` makes a standalone model of a body: its inputs take the
types and shapes the node gives them where the body states none, and every
name it reads from outside becomes a graph input of the known shape (or an
initializer, when its value is a small known constant).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from accelmap.errors import SpecError
from accelmap.workload.onnx_fold import MAX_ELEMENTS

# name -> (element type, shape or None, small value or None) in the enclosing scopes
Lookup = Callable[[str], tuple[int, tuple[int, ...] | None, np.ndarray | None]]


def outer_refs(g: onnx.GraphProto) -> set[str]:
    """Names a subgraph (and its nested subgraphs) reads from enclosing scopes."""
    local = {i.name for i in g.input} | {t.name for t in g.initializer} | {o for n in g.node for o in n.output}
    refs = set()
    for n in g.node:
        refs |= {i for i in n.input if i and i not in local}
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                refs |= {r for r in outer_refs(a.g) if r not in local}
            elif a.type == onnx.AttributeProto.GRAPHS:
                for sub in a.graphs:
                    refs |= {r for r in outer_refs(sub) if r not in local}
    return refs


def value_info(name: str, elem: int, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem or TensorProto.FLOAT, None if shape is None else list(shape))


def _static(vi) -> bool:
    tt = vi.type.tensor_type
    return tt.HasField("shape") and all(d.HasField("dim_value") and d.dim_value > 0 for d in tt.shape.dim)


def body_inputs(node, lookup: Lookup) -> list[tuple[int, tuple[int, ...] | None] | None]:
    """(element type, shape) the node gives each input of its body (If: none)."""
    def of(name):
        elem, shape, _ = lookup(name) if name else (0, None, None)
        return elem, shape
    if node.op_type == "Loop":
        return [(TensorProto.INT64, ()), (TensorProto.BOOL, ())] + [of(i) for i in node.input[2:]]
    if node.op_type == "Scan":
        a = {x.name: helper.get_attribute_value(x) for x in node.attribute}
        n_scan = int(a["num_scan_inputs"])
        n_state = len(node.input) - n_scan
        axes = list(a.get("scan_input_axes", [0] * n_scan))
        if len(axes) != n_scan:
            raise SpecError(f"Scan {node.name!r}: scan_input_axes {axes} has {len(axes)} entries for {n_scan} "
                            "scan inputs")
        out = [of(i) for i in node.input[:n_state]]
        for i, ax in zip(node.input[n_state:], axes, strict=True):
            elem, s = of(i)
            out.append((elem, None if s is None else s[:ax % len(s)] + s[ax % len(s) + 1:]))
        return out
    return []


def body_model(body: onnx.GraphProto, inputs: list, lookup: Lookup,
               opsets) -> tuple[onnx.GraphProto, onnx.ModelProto]:
    """(a copy of the body with typed inputs, a standalone model of it for shape inference)."""
    g = onnx.GraphProto()
    g.CopyFrom(body)
    if inputs and len(inputs) != len(g.input):
        raise SpecError(f"subgraph {body.name!r} has {len(g.input)} inputs; its node gives it {len(inputs)}")
    for vi, given in zip(g.input, inputs or [None] * len(g.input), strict=True):   # none known: If, others
        if given is not None and not _static(vi):
            vi.CopyFrom(value_info(vi.name, vi.type.tensor_type.elem_type or given[0], given[1]))
    for name in sorted(outer_refs(g)):
        elem, shape, value = lookup(name)
        if value is not None and value.size <= MAX_ELEMENTS:
            g.initializer.append(numpy_helper.from_array(np.asarray(value), name))
        else:
            g.input.append(value_info(name, elem, shape))
    return g, helper.make_model(g, opset_imports=list(opsets))
