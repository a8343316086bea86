"""Split a model into accelerator operators and host work.

Every node that the importer turned into an accelerator operator (Conv, Gemm, MatMul, a two-operand
Einsum, ConvTranspose as its GEMM) runs on the accelerator; everything else runs on the host. In a QDQ model (DequantizeLinear -> float op ->
QuantizeLinear, onnxruntime's quantization format) an accelerator node whose data input is
dequantized, whose weight is a dequantized constant and whose only reader is a QuantizeLinear runs
as an integer product: the accelerator multiplies the int8 values, the host requantizes (ONNX's
rounding half to even and saturation). Dequantized constants are folded. Nodes whose outputs no
graph output needs are dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx

from accelmap.compile.graph import NetGraph
from accelmap.errors import SpecError
from accelmap.workload.onnx_ops import attrs

ACCEL_OPS = ("Conv", "Gemm", "MatMul", "Einsum", "ConvTranspose")
# Accelerator ops that become an integer product in a QDQ model: those onnxruntime's integer form states as
# one op (QLinearConv, QLinearMatMul, QGemm). An Einsum or ConvTranspose between DequantizeLinear and
# QuantizeLinear runs in float, as the file says.
INTEGER_PRODUCT_OPS = ("Conv", "Gemm", "MatMul")

# Host ops that onnxruntime runs as one integer kernel when they sit between a DequantizeLinear and a
# QuantizeLinear (its QDQ transformer makes them com.microsoft QLinearSoftmax / QLinearGlobalAveragePool):
# the compiled program computes what those kernels compute, not the float op of the file.
QLINEAR_HOST_OPS = ("Softmax", "GlobalAveragePool")


def node_names(graph: onnx.GraphProto) -> list[str]:
    """Node names as the importer gives them (an unnamed node is OPTYPE_INDEX)."""
    used: set[str] = set()
    out = []
    for i, n in enumerate(graph.node):
        name = n.name or f"{n.op_type}_{i}"
        if name in used:
            name = f"{name}_{i}"
        used.add(name)
        out.append(name)
    return out


@dataclass(frozen=True)
class Quant:
    """Per-tensor or per-axis quantization parameters of one tensor."""

    scale: np.ndarray      # float32, one value or one per channel
    zero_point: np.ndarray  # int, same length
    elem: int              # ONNX element type of the quantized tensor
    axis: int = 1


@dataclass
class Step:
    """One unit of the compiled program, in execution order."""

    name: str                         # the (first) ONNX node's name
    op_type: str
    placement: str                    # "accelerator" or "host"
    node: onnx.NodeProto
    inputs: list[str]                 # values read (constants included)
    outputs: list[str]
    fused: list[str] = field(default_factory=list)    # names of QDQ nodes folded into this step
    dtype: str = "fp32"               # "int": a QDQ integer product or integer host kernel; else "fp32"
    qin: Quant | None = None          # integer product: the data input's quantization
    qw: Quant | None = None           # ... the weight's
    qout: Quant | None = None         # ... the output's
    qin_b: Quant | None = None        # a two-input integer host kernel (QLinearAdd): the second input's
    weight_q: np.ndarray | None = None   # quantized weight values
    bias_q: np.ndarray | None = None     # int32 bias of an integer product
    # an integer product's folded nodes: DequantizeLinear of data, of weight, QuantizeLinear, of bias (or None)
    qdq_nodes: tuple = ()


def quant_params(g: NetGraph, node: onnx.NodeProto, what: str) -> Quant:
    """The scale, zero point and type of a QuantizeLinear / DequantizeLinear node (constants only)."""
    a = attrs(node)
    if node.input[1] not in g.consts or (len(node.input) > 2 and node.input[2] and node.input[2] not in g.consts):
        raise SpecError(f"node {node.name!r} ({node.op_type}): scale and zero point must be constants",
                        where=g.source)
    scale = np.asarray(g.consts[node.input[1]], dtype=np.float32).reshape(-1)
    if len(node.input) > 2 and node.input[2]:
        zp_arr = g.consts[node.input[2]]
        elem = int(onnx.helper.np_dtype_to_tensor_dtype(zp_arr.dtype))
        zp = zp_arr.astype(np.int64).reshape(-1)
    else:
        zp = np.zeros(1, dtype=np.int64)
        elem = int(onnx.TensorProto.UINT8)
    if node.op_type == "QuantizeLinear" and "output_dtype" in a and a["output_dtype"]:
        elem = int(a["output_dtype"])
    if a.get("block_size"):
        raise SpecError(f"node {node.name!r} ({node.op_type}): blocked quantization is not handled", where=g.source)
    if elem not in (onnx.TensorProto.INT8, onnx.TensorProto.UINT8):
        raise SpecError(f"node {node.name!r} ({node.op_type}): {what} quantized to "
                        f"{onnx.TensorProto.DataType.Name(elem)}; the compiler handles int8 and uint8",
                        where=g.source)
    if zp.size != scale.size:
        zp = np.broadcast_to(zp, scale.shape).copy()
    return Quant(scale, zp, elem, int(a.get("axis", 1)))


def q_range(elem: int) -> tuple[int, int]:
    return (-128, 127) if elem == onnx.TensorProto.INT8 else (0, 255)


def dequantize_const(g: NetGraph, node: onnx.NodeProto) -> np.ndarray:
    """A DequantizeLinear of a constant, evaluated as ONNX defines it (float32)."""
    q = g.consts[node.input[0]]
    scale = np.asarray(g.consts[node.input[1]], dtype=np.float32)
    zp = np.asarray(g.consts[node.input[2]]).astype(np.int32) if len(node.input) > 2 and node.input[2] else 0
    if scale.size > 1:
        axis = int(attrs(node).get("axis", 1)) % q.ndim
        shape = [1] * q.ndim
        shape[axis] = scale.size
        scale = scale.reshape(shape)
        if isinstance(zp, np.ndarray):
            zp = zp.reshape(shape)
    return ((q.astype(np.int32) - zp).astype(np.float32) * scale).astype(np.float32)


def partition(g: NetGraph, accel_nodes: set[str]) -> list[Step]:
    """The steps of the program: ``accel_nodes`` (names) run on the accelerator, the rest on the host."""
    nodes = g.nodes
    names = node_names(g.model.graph)
    producer = {o: (n, nm) for n, nm in zip(nodes, names, strict=True) for o in n.output if o}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for n in nodes:
        for x in n.input:
            if x:
                readers.setdefault(x, []).append(n)
    graph_outputs = set(g.outputs)

    # Fold dequantized constants (weights, biases) into float constants.
    for n in nodes:
        if n.op_type == "DequantizeLinear" and n.input[0] in g.consts:
            g.consts[n.output[0]] = dequantize_const(g, n)
            g.shapes[n.output[0]] = tuple(g.consts[n.output[0]].shape)
            g.types[n.output[0]] = onnx.TensorProto.FLOAT

    steps: list[Step] = []
    skip: set[str] = set()          # outputs produced by a fused step already
    for n, nm in zip(nodes, names, strict=True):
        if n.op_type == "Constant" or all(o in g.consts for o in n.output if o):
            continue
        if any(o in skip for o in n.output):
            continue
        if nm in accel_nodes:
            steps.append(_accel_step(g, n, nm, producer, readers, graph_outputs, skip))
            continue
        if n.op_type in QLINEAR_HOST_OPS or n.op_type == "Add":
            qstep = (_qlinear_add_step if n.op_type == "Add" else _qlinear_host_step)(
                g, n, nm, producer, readers, graph_outputs, skip)
            if qstep is not None:
                steps.append(qstep)
                continue
        steps.append(Step(nm, n.op_type, "host", n, [x for x in n.input if x], [o for o in n.output if o]))
    return _live(steps, graph_outputs)


def _accel_step(g: NetGraph, n, nm: str, producer, readers, graph_outputs: set[str], skip: set[str]) -> Step:
    data = [x for x in n.input if x]
    out = n.output[0]
    x_prod = producer.get(n.input[0])
    w_name = n.input[1]
    w_prod = producer.get(w_name)
    y_readers = readers.get(out, [])
    qdq = (n.op_type in INTEGER_PRODUCT_OPS and x_prod is not None and x_prod[0].op_type == "DequantizeLinear" and x_prod[0].input[0] not in g.consts
           and w_prod is not None and w_prod[0].op_type == "DequantizeLinear" and w_prod[0].input[0] in g.consts
           and len(y_readers) == 1 and y_readers[0].op_type == "QuantizeLinear" and out not in graph_outputs)
    if not qdq:
        return Step(nm, n.op_type, "accelerator", n, data, [out])
    dqx, dqw, q = x_prod[0], w_prod[0], y_readers[0]
    qin, qw = quant_params(g, dqx, "the data input"), quant_params(g, dqw, "the weight")
    if qw.scale.size > 1 and qw.axis % len(g.shape(dqw.input[0])) != _out_channel_axis(g, n):
        # Scales along another axis than the output channels (onnxruntime's quantizer puts a 3-D MatMul
        # weight's on axis 1, the reduction axis) do not factor out of the sum: the product stays float.
        return Step(nm, n.op_type, "accelerator", n, data, [out])
    qout = quant_params(g, q, "the output")
    if qin.scale.size != 1 or qout.scale.size != 1:
        raise SpecError(f"node {nm!r} ({n.op_type}): per-channel quantization of activations is not handled",
                        where=g.source)
    bias_q = None
    dqb = None
    if n.op_type in ("Conv", "Gemm") and len(n.input) > 2 and n.input[2]:
        b_prod = producer.get(n.input[2])
        dqb = b_prod[0] if b_prod is not None else None
        if b_prod is None or b_prod[0].op_type != "DequantizeLinear" or b_prod[0].input[0] not in g.consts:
            raise SpecError(f"node {nm!r} ({n.op_type}): the bias of a quantized product must be a dequantized "
                            f"int32 constant", where=g.source)
        bias_q = np.asarray(g.consts[b_prod[0].input[0]]).astype(np.int64).reshape(-1)
        if bias_q.dtype != np.int64 or g.consts[b_prod[0].input[0]].dtype != np.int32:
            raise SpecError(f"node {nm!r}: the quantized bias must be int32", where=g.source)
    skip.add(q.output[0])
    return Step(nm, n.op_type + " (QDQ)", "accelerator", n, [dqx.input[0]], [q.output[0]],
                fused=[dqx.name, q.name], dtype="int", qin=qin, qw=qw, qout=qout,
                weight_q=np.asarray(g.consts[dqw.input[0]]), bias_q=bias_q, qdq_nodes=(dqx, dqw, q, dqb))


def _out_channel_axis(g: NetGraph, n: onnx.NodeProto) -> int:
    """The weight axis that indexes the output channels of a Conv, Gemm or MatMul."""
    if n.op_type == "Conv":
        return 0
    if n.op_type == "Gemm":
        return 0 if attrs(n).get("transB", 0) else 1
    return len(g.shape(n.input[1])) - 1


def _qlinear_host_step(g: NetGraph, n, nm: str, producer, readers, graph_outputs: set[str],
                       skip: set[str]) -> Step | None:
    """DequantizeLinear -> Softmax / GlobalAveragePool -> QuantizeLinear (per tensor) as one integer host step."""
    x_prod = producer.get(n.input[0])
    out = n.output[0]
    y_readers = readers.get(out, [])
    if (x_prod is None or x_prod[0].op_type != "DequantizeLinear" or x_prod[0].input[0] in g.consts
            or len(y_readers) != 1 or y_readers[0].op_type != "QuantizeLinear" or out in graph_outputs):
        return None
    dqx, q = x_prod[0], y_readers[0]
    qin, qout = quant_params(g, dqx, "the data input"), quant_params(g, q, "the output")
    if qin.scale.size != 1 or qout.scale.size != 1 or qin.elem != qout.elem:
        return None
    skip.add(q.output[0])
    return Step(nm, n.op_type + " (QDQ)", "host", n, [dqx.input[0]], [q.output[0]], fused=[dqx.name, q.name],
                dtype="int", qin=qin, qout=qout, qdq_nodes=(dqx, None, q, None))


def _qlinear_add_step(g: NetGraph, n, nm: str, producer, readers, graph_outputs: set[str],
                      skip: set[str]) -> Step | None:
    """DequantizeLinear (a), DequantizeLinear (b) -> Add -> QuantizeLinear, per tensor, of one shape and one
    element type, as one integer host step: onnxruntime's QLinearAdd (the residual add of a QDQ network).

    onnxruntime's QDQ transformer fuses such an Add only when each DequantizeLinear has the Add as its only
    reader; the program computes every one as the integer kernel, and the integer form states each one as
    ``com.microsoft.QLinearAdd`` (``integer_form.py``), so both sides round the same way."""
    if len(n.input) != 2:
        return None
    prods = [producer.get(x) for x in n.input]
    out = n.output[0]
    y_readers = readers.get(out, [])
    if (any(p is None or p[0].op_type != "DequantizeLinear" or p[0].input[0] in g.consts for p in prods)
            or len(y_readers) != 1 or y_readers[0].op_type != "QuantizeLinear" or out in graph_outputs):
        return None
    dqa, dqb, q = prods[0][0], prods[1][0], y_readers[0]
    if not g.shape(dqa.input[0]) == g.shape(dqb.input[0]) == g.shape(out):
        return None            # a broadcast add stays float (dequantize, add, quantize)
    qa, qb = quant_params(g, dqa, "the first input"), quant_params(g, dqb, "the second input")
    qout = quant_params(g, q, "the output")
    if qa.scale.size != 1 or qb.scale.size != 1 or qout.scale.size != 1 or not qa.elem == qb.elem == qout.elem:
        return None
    skip.add(q.output[0])
    return Step(nm, "Add (QDQ)", "host", n, [dqa.input[0], dqb.input[0]], [q.output[0]],
                fused=[dqa.name, dqb.name, q.name], dtype="int", qin=qa, qin_b=qb, qout=qout,
                qdq_nodes=(dqa, dqb, q, None))


def _live(steps: list[Step], graph_outputs: set[str]) -> list[Step]:
    """Steps some graph output depends on, in order."""
    need = set(graph_outputs)
    keep = []
    for s in reversed(steps):
        if any(o in need for o in s.outputs):
            keep.append(s)
            need.update(s.inputs)
    return keep[::-1]
