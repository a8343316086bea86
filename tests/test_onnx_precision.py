"""Precision read from the file: QDQ (dequantized operands take their quantized type) and QOperator."""

from __future__ import annotations

import json

from click.testing import CliRunner
from onnx import TensorProto

from accelmap.cli import main
from accelmap.workload.onnx_import import import_onnx
from onnx_graphs import F, graph_model, init, node, weight

I8, U8, I4 = TensorProto.INT8, TensorProto.UINT8, TensorProto.INT4


def qdq_model():
    """int8 activations and weights around a Conv; an int4 weight-only MatMul (dequantized, then transposed)."""
    nodes = [node("QuantizeLinear", ["x", "s", "z8"], ["xq"]),
             node("DequantizeLinear", ["xq", "s", "z8"], ["xd"]),
             node("DequantizeLinear", ["wq", "s"], ["wd"]),
             node("Conv", ["xd", "wd"], ["c"]),
             node("Flatten", ["c"], ["f"]),
             node("DequantizeLinear", ["w4", "s"], ["w4d"]),
             node("Transpose", ["w4d"], ["w4t"], perm=[1, 0]),
             node("MatMul", ["f", "w4t"], ["y"])]
    inits = [init("s", 0.1, "float32"), init("z8", 0, "int8"), weight("wq", [4, 3, 3, 3], I8),
             weight("w4", [5, 64], I4)]
    return graph_model(nodes, [("x", F, [1, 3, 6, 6])], inits=inits, opset=21)


def bits_of(m):
    return {l.source_op: {o.cls: o.bits for o in l.operator.operands} for l in m.layers}


def test_qdq_operands_take_their_quantized_widths():
    m = import_onnx(qdq_model(), bits="onnx")
    assert m.total_macs == 4 * 3 * 16 * 9 + 64 * 5
    assert bits_of(m) == {"Conv": {"O": 32, "I": 8, "W": 8},        # int8 x int8 accumulates in int32
                          "MatMul": {"O": 32, "I": 32, "W": 4}}     # float activations, int4 weights
    # Without --precision onnx the tool's default (int8/int8/int32) stays.
    assert bits_of(import_onnx(qdq_model()))["MatMul"] == {"O": 32, "I": 8, "W": 8}


def test_cli_precision_onnx_on_a_qdq_model(tmp_path):
    p = tmp_path / "qdq.onnx"
    p.write_bytes(qdq_model().SerializeToString())
    res = CliRunner().invoke(main, ["import", str(p), "--precision", "onnx", "--json"])
    assert res.exit_code == 0, res.output
    layers = json.loads(res.output)["layers"]
    assert [l["bits"] for l in layers] == [{"O": 32, "I": 8, "W": 8}, {"O": 32, "A": 32, "B": 4}]


def test_qoperator_uint8_activations_int8_weights():
    q = lambda n: [n + "_s", n + "_z"]
    nodes = [node("QLinearConv", ["x", *q("x"), "w", *q("w"), *q("y")], ["y"])]
    inits = [weight("w", [8, 4, 1, 1], I8)]
    for n, t in (("x", "uint8"), ("w", "int8"), ("y", "uint8")):
        inits += [init(n + "_s", 0.05, "float32"), init(n + "_z", 0, t)]
    m = graph_model(nodes, [("x", U8, [1, 4, 5, 5])], inits=inits, outputs=[("y", U8, None)])
    assert bits_of(import_onnx(m, bits="onnx")) == {"QLinearConv": {"O": 32, "I": 8, "W": 8}}
