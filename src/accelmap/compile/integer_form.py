"""The integer form of a QDQ model: each DequantizeLinear -> product -> QuantizeLinear that the compiler runs
as an integer product becomes the ONNX integer op that states exactly that computation.

A QDQ model means float arithmetic between its DequantizeLinear and QuantizeLinear nodes; onnxruntime
evaluates some such groups with integer kernels (fused) and others in float, so at a rounding tie its result
depends on which. The integer form removes that freedom: ``QLinearConv`` and ``QLinearMatMul`` (ONNX) and
``com.microsoft.QGemm`` (onnxruntime) multiply the int8 values, accumulate in int32 and requantize with
rounding half to even and saturation, as the compiled program does. A Softmax or GlobalAveragePool
between a DequantizeLinear and a QuantizeLinear becomes ``com.microsoft.QLinearSoftmax`` /
``QLinearGlobalAveragePool``, the kernels onnxruntime's QDQ transformer puts there for the file itself
(a table-based softmax, an integer sum requantized), which the program computes too; an Add of two
dequantized tensors quantized again becomes ``com.microsoft.QLinearAdd`` (every one, including those
onnxruntime would leave in float because a DequantizeLinear has other readers). The program must
match onnxruntime on this form bit for bit.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from accelmap.compile.graph import NetGraph
from accelmap.compile.partition import Step
from accelmap.workload.onnx_ops import attrs


def integer_form(g: NetGraph, steps: list[Step]) -> onnx.ModelProto | None:
    """The model with every integer product as one integer op; None when the model has none."""
    qsteps = [s for s in steps if s.dtype == "int" and s.qdq_nodes]
    if not qsteps:
        return None
    m = onnx.ModelProto()
    m.CopyFrom(g.model)
    replace: dict[str, onnx.NodeProto] = {}
    drop: set[str] = set()
    extra_inits = []

    def zp_of(node: onnx.NodeProto, like: str) -> str:
        if len(node.input) > 2 and node.input[2]:
            return node.input[2]
        name = f"{node.name or like}__zero_point"
        extra_inits.append(numpy_helper.from_array(np.array(0, dtype=np.uint8), name))
        return name

    for s in qsteps:
        dqx, dqw, q, dqb = s.qdq_nodes
        n = s.node
        x = [dqx.input[0], dqx.input[1], zp_of(dqx, "x")]
        w = [dqw.input[0], dqw.input[1], zp_of(dqw, "w")] if dqw is not None else []
        y = [q.input[1], zp_of(q, "y")]
        a = attrs(n)
        if n.op_type == "Add":     # com.microsoft QLinearAdd: A, its scale and zero point, B, ..., C's
            new = helper.make_node("QLinearAdd", x + w + y, [q.output[0]], name=n.name, domain="com.microsoft")
        elif n.op_type == "Softmax":
            opset = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), 13)
            new = helper.make_node("QLinearSoftmax", x + y, [q.output[0]], name=n.name, domain="com.microsoft",
                                   axis=int(a.get("axis", -1 if opset >= 13 else 1)), opset=int(opset))
        elif n.op_type == "GlobalAveragePool":
            new = helper.make_node("QLinearGlobalAveragePool", x + y, [q.output[0]], name=n.name,
                                   domain="com.microsoft", channels_last=0)
        elif n.op_type == "Conv":
            ins = x + w + y + ([dqb.input[0]] if dqb is not None else [])
            new = helper.make_node("QLinearConv", ins, [q.output[0]], name=n.name, **a)
        elif n.op_type == "MatMul":
            new = helper.make_node("QLinearMatMul", x + w + y, [q.output[0]], name=n.name)
        else:   # Gemm: onnxruntime's QGemm has the bias and the transposes
            ins = x + w + [dqb.input[0] if dqb is not None else ""] + y
            new = helper.make_node("QGemm", ins, [q.output[0]], name=n.name, domain="com.microsoft",
                                   transA=int(a.get("transA", 0)), transB=int(a.get("transB", 0)),
                                   alpha=float(a.get("alpha", 1.0)))
        replace[n.output[0]] = new
        drop.add(q.output[0])
    # nodes are known by their first output (unique in a graph; names may be empty)
    nodes = [replace.get(n.output[0], n) for n in m.graph.node if n.output[0] not in drop]
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    m.graph.initializer.extend(extra_inits)
    if not any(o.domain == "com.microsoft" for o in m.opset_import):
        m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return m
