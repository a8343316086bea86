"""Every MAC-bearing ONNX and onnxruntime contrib op becomes operators (exact MACs), or is named."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from accelmap.cli import main
from accelmap.errors import SpecError
from accelmap.workload.onnx_import import import_onnx
from onnx_graphs import MS, F, census, graph_model, init, node, weight

U8, I8 = TensorProto.UINT8, TensorProto.INT8


def test_conv_transpose_is_the_gemm_it_computes():
    # Every input pixel meets every tap: N*H*W * C * (K/G)*R*S, strides and pads aside.
    for group in (1, 2):
        nodes = [node("ConvTranspose", ["x", "w"], ["t"], strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1],
                      group=group),
                 node("Conv", ["t", "w2"], ["y"])]
        m = graph_model(nodes, [("x", F, [1, 4, 5, 5])],
                        inits=[weight("w", [4, 3, 3, 3]), weight("w2", [2, 3 * group, 1, 1])])
        out = import_onnx(m)
        up = out.layers[0].operator
        assert up.macs == 1 * 5 * 5 * 4 * 3 * 9
        assert up.kind == ("matmul" if group == 1 else "batched_matmul")
        # The following conv sees the upsampled 10x10 map: (5-1)*2 - 2 + 3 + 1 = 10.
        assert out.layers[1].operator.macs == 2 * 3 * group * 10 * 10
        assert census(out) == {"ConvTranspose": 1, "Conv": 1}


def test_fused_conv_and_fused_matmul_keep_shapes_downstream():
    nodes = [node("FusedConv", ["x", "w", "b"], ["c"], domain=MS, activation="Relu", pads=[1, 1, 1, 1]),
             node("MaxPool", ["c"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             node("Flatten", ["p"], ["f"]),
             node("FusedMatMul", ["f", "wf"], ["h"], domain=MS, transB=1, alpha=0.5),
             node("TransposeMatMul", ["h", "wo"], ["y"], domain=MS, transB=1)]
    m = graph_model(nodes, [("x", F, [2, 3, 8, 8])], ms=True,
                    inits=[weight("w", [6, 3, 3, 3]), weight("b", [6]), weight("wf", [10, 96]),
                           weight("wo", [4, 10])])
    out = import_onnx(m)
    assert out.total_macs == 2 * 6 * 3 * 64 * 9 + 2 * 96 * 10 + 2 * 10 * 4
    assert census(out) == {"com.microsoft.FusedConv": 1, "com.microsoft.FusedMatMul": 1,
                           "com.microsoft.TransposeMatMul": 1}
    assert out.layers[0].bias


def test_llm_weight_formats_qgemm_matmulnbits_matmulintegertofloat():
    nodes = [node("MatMulNBits", ["x", "wq", "sc"], ["h"], domain=MS, K=64, N=32, bits=4, block_size=32),
             node("DynamicQuantizeLinear", ["h"], ["hq", "hs", "hz"]),
             node("MatMulIntegerToFloat", ["hq", "w8", "hs", "ws"], ["g"], domain=MS),
             node("QuantizeLinear", ["g", "ys", "yz"], ["gq"]),
             node("Reshape", ["gq", "flat"], ["g2"]),
             node("QGemm", ["g2", "gs", "yz", "wg", "ws", "wz", "", "ys", "yz"], ["y"], domain=MS, transB=1)]
    inits = [weight("wq", [32, 2, 16], U8), weight("sc", [64]), weight("w8", [32, 16], I8), init("ws", 0.1, "float32"),
             init("ys", 0.1, "float32"), init("yz", 0, "uint8"), init("gs", 0.1, "float32"), init("wz", 0, "int8"),
             init("flat", [7, 16]), weight("wg", [8, 16], I8)]
    m = graph_model(nodes, [("x", F, [1, 7, 64])], inits=inits, ms=True, outputs=[("y", U8, None)])
    out = import_onnx(m, bits="onnx")
    assert out.total_macs == 7 * 64 * 32 + 7 * 32 * 16 + 7 * 16 * 8
    assert census(out) == {"com.microsoft.MatMulNBits": 1, "com.microsoft.MatMulIntegerToFloat": 1,
                           "com.microsoft.QGemm": 1}
    bits = {l.source_op.split(".")[-1]: {o.cls: o.bits for o in l.operator.operands} for l in out.layers}
    assert bits == {"MatMulNBits": {"O": 32, "I": 32, "W": 4},
                    "MatMulIntegerToFloat": {"O": 32, "I": 8, "W": 8},
                    "QGemm": {"O": 32, "I": 8, "W": 8}}


def test_einsum_forms():
    def run(eq, *shapes):
        ins = [f"x{i}" for i in range(len(shapes))]
        m = graph_model([node("Einsum", ins, ["y"], equation=eq)], [(n, F, s) for n, s in zip(ins, shapes)])
        return import_onnx(m)
    assert run("bhqd,bhkd->bhqk", [2, 3, 5, 4], [2, 3, 6, 4]).total_macs == 2 * 3 * 5 * 6 * 4
    assert run("...ij,jk", [2, 5, 4], [4, 7]).total_macs == 2 * 5 * 4 * 7
    assert run("nC,Cn->n", [3, 4], [4, 3]).total_macs == 3 * 4      # case-distinct indices, implicit-free
    with pytest.raises(SpecError, match=r"node 'y' \(Einsum\): einsum of 3 operands"):
        run("ij,jk,kl->il", [2, 3], [3, 4], [4, 5])
    with pytest.raises(SpecError, match="no accelerator operator"):
        run("ij->ji", [2, 3])          # a transpose: host work, no MACs


def test_attention_ops_contrib_and_standard():
    b, s, d, heads = 2, 5, 16, 4
    nodes = [node("Attention", ["x", "wqkv", "bqkv"], ["a"], domain=MS, num_heads=heads),
             node("MatMul", ["a", "wo"], ["y"])]
    m = graph_model(nodes, [("x", F, [b, s, d])], ms=True,
                    inits=[weight("wqkv", [d, 3 * d]), weight("bqkv", [3 * d]), weight("wo", [d, 8])])
    out = import_onnx(m)
    assert out.total_macs == b * s * d * 3 * d + 2 * (b * heads * s * s * (d // heads)) + b * s * d * 8
    assert [l.name for l in out.layers] == ["a.qkv", "a.scores", "a.context", "y"]

    l = 7
    mha = graph_model([node("MultiHeadAttention", ["q", "k", "v"], ["y"], domain=MS, num_heads=heads)],
                      [("q", F, [b, s, d]), ("k", F, [b, l, d]), ("v", F, [b, l, d])], ms=True)
    assert import_onnx(mha).total_macs == 2 * b * heads * s * l * (d // heads)

    # ONNX Attention (opset 23), grouped-query: 4 query heads share 2 key/value heads.
    std = graph_model([node("Attention", ["q", "k", "v"], ["y"])],
                      [("q", F, [1, 4, 5, 8]), ("k", F, [1, 2, 6, 8]), ("v", F, [1, 2, 6, 8])], opset=23)
    assert import_onnx(std).total_macs == 2 * 1 * 4 * 5 * 6 * 8


def test_qoperator_chain_keeps_shapes_through_contrib_ops():
    """onnxruntime static int8 (QOperator): QLinearConv, com.microsoft QLinearAdd / QLinearGlobalAveragePool,
    then QLinearMatMul needs the pooled shape."""
    q = lambda n: [n + "_s", n + "_z"]
    nodes = [node("QuantizeLinear", ["x", "x_s", "x_z"], ["xq"]),
             node("QLinearConv", ["xq", *q("x"), "w", *q("w"), *q("c"), "bias"], ["c"], pads=[1, 1, 1, 1]),
             node("QLinearAdd", ["c", *q("c"), "c", *q("c"), *q("a")], ["a"], domain=MS),
             node("QLinearGlobalAveragePool", ["a", *q("a"), *q("p")], ["p"], domain=MS),
             node("Flatten", ["p"], ["f"]),
             node("QLinearMatMul", ["f", *q("p"), "wf", *q("w"), *q("y")], ["y"])]
    inits = [weight("w", [16, 3, 3, 3], I8), weight("bias", [16], TensorProto.INT32), weight("wf", [16, 10], I8)]
    for n in ("x", "w", "c", "a", "p", "y"):
        inits += [init(n + "_s", 0.05, "float32"), init(n + "_z", 0, "int8" if n == "w" else "uint8")]
    m = graph_model(nodes, [("x", F, [1, 3, 12, 12])], inits=inits, ms=True, outputs=[("y", U8, None)])
    out = import_onnx(m, bits="onnx")
    assert out.total_macs == 16 * 3 * 144 * 9 + 16 * 10
    assert census(out) == {"QLinearConv": 1, "QLinearMatMul": 1}
    assert [[o.bits for o in l.operator.operands] for l in out.layers] == [[32, 8, 8], [32, 8, 8]]
    host = {h.op_type: h.shape for h in out.host_ops}
    assert host["com.microsoft.QLinearGlobalAveragePool"] == (1, 16, 1, 1)


def unknown_model():
    nodes = [node("Conv", ["x", "w"], ["c"]),
             node("SecretSauce", ["c"], ["y"], domain="com.vendor")]
    m = graph_model(nodes, [("x", F, [1, 3, 6, 6])], inits=[weight("w", [4, 3, 3, 3])])
    m.opset_import.append(helper.make_opsetid("com.vendor", 1))
    return m


def test_cli_unknown_ops_are_listed_and_fail_unless_lenient(tmp_path):
    p, out = tmp_path / "u.onnx", tmp_path / "u.json"
    p.write_bytes(unknown_model().SerializeToString())
    res = CliRunner().invoke(main, ["import", str(p), "-o", str(out)])
    assert res.exit_code == 1
    assert "unknown op node" in res.stdout and "com.vendor.SecretSauce" in res.stdout
    assert res.stderr.count("\n") == 1 and "'y' (com.vendor.SecretSauce)" in res.stderr and "--lenient" in res.stderr
    assert not out.exists()
    ok = CliRunner().invoke(main, ["import", str(p), "--lenient", "-o", str(out)])
    assert ok.exit_code == 0, ok.output
    data = json.loads(out.read_text())
    assert data["total_macs"] == 4 * 3 * 16 * 9 and [u["op_type"] for u in data["unknown_ops"]] == ["com.vendor.SecretSauce"]
    assert data["host_ops"] == []


def test_load_model_refuses_unknown_ops_for_the_mapper(tmp_path):
    from accelmap.workload.models import load_model
    p = tmp_path / "u.onnx"
    p.write_bytes(unknown_model().SerializeToString())
    with pytest.raises(SpecError, match=r"1 node of op types the importer does not know.*'y' \(com.vendor.SecretSauce\)"):
        load_model(p)
    assert load_model(p, strict=False).unknown_ops[0].name == "y"


def test_refused_mac_op_is_one_clear_line(tmp_path):
    nodes = [node("DecoderMaskedMultiHeadAttention", ["q", "k", "v"], ["y"], domain=MS, num_heads=2)]
    m = graph_model(nodes, [("q", F, [1, 1, 8]), ("k", F, [1, 1, 8]), ("v", F, [1, 1, 8])], ms=True)
    p = tmp_path / "g.onnx"
    p.write_bytes(m.SerializeToString())
    res = CliRunner().invoke(main, ["import", str(p)])
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1
    assert "node 'y' (com.microsoft.DecoderMaskedMultiHeadAttention): has multiply-accumulates but no mapping" \
        in res.output


def test_onnxruntime_nchwc_layout_ops_are_refused_with_a_fix():
    nodes = [node("Conv", ["x", "w"], ["y"], domain="com.microsoft.nchwc")]
    m = graph_model(nodes, [("x", F, [1, 8, 4, 4])], inits=[weight("w", [8, 8, 1, 1])])
    m.opset_import.append(helper.make_opsetid("com.microsoft.nchwc", 1))
    with pytest.raises(SpecError, match=r"node 'y' \(com.microsoft.nchwc.Conv\): a layout-specific op.*ORT_ENABLE_EXTENDED"):
        import_onnx(m)


@pytest.mark.parametrize("op,gates", [("LSTM", 4), ("GRU", 3), ("RNN", 1)])
def test_recurrent_layers_are_an_input_projection_and_one_recurrent_product_per_step(op, gates):
    seq, batch, inp, hidden, dirs = 7, 2, 5, 6, 2
    nodes = [node(op, ["x", "w", "r", "b"], ["y"], hidden_size=hidden, direction="bidirectional")]
    m = graph_model(nodes, [("x", F, [seq, batch, inp])],
                    inits=[weight("w", [dirs, gates * hidden, inp]), weight("r", [dirs, gates * hidden, hidden]),
                           weight("b", [dirs, 2 * gates * hidden])])
    out = import_onnx(m)
    proj, step = out.layers
    assert (proj.name, proj.count, proj.operator.macs) == ("y.input", dirs, seq * batch * inp * gates * hidden)
    assert (step.name, step.count, step.operator.macs) == ("y.recurrent", dirs * seq, batch * hidden * gates * hidden)
    assert out.total_macs == dirs * seq * batch * gates * hidden * (inp + hidden)
    # layout=1: [batch, seq, input]
    m.graph.node[0].attribute.append(helper.make_attribute("layout", 1))
    m.graph.input[0].CopyFrom(helper.make_tensor_value_info("x", F, [batch, seq, inp]))
    assert import_onnx(m).total_macs == dirs * seq * batch * gates * hidden * (inp + hidden)


def test_qattention_and_group_query_attention():
    b, s, d, heads = 2, 5, 16, 4
    q = graph_model([node("QAttention", ["x", "w", "bias", "xs", "ws"], ["y"], domain=MS, num_heads=heads)],
                    [("x", U8, [b, s, d])], ms=True,
                    inits=[weight("w", [d, 3 * d], I8), weight("bias", [3 * d]), init("xs", 0.1, "float32"),
                           init("ws", 0.1, "float32")])
    out = import_onnx(q, bits="onnx")
    assert out.total_macs == b * s * d * 3 * d + 2 * b * heads * s * s * (d // heads)
    assert [[o.bits for o in l.operator.operands] for l in out.layers] == [[32, 8, 8], [32, 32, 32], [32, 32, 32]]

    # GQA: 4 query heads share 2 key/value heads; the total length comes from the mask's symbolic width.
    nodes = [node("Shape", ["mask"], ["ms"]), node("Gather", ["ms", "one"], ["t64"], axis=0),
             node("Cast", ["t64"], ["total"], to=TensorProto.INT32),
             node("GroupQueryAttention", ["q", "k", "v", "", "", "lens", "total"], ["y"], domain=MS,
                  num_heads=4, kv_num_heads=2)]
    g = graph_model(nodes, [("q", F, [1, 3, 32]), ("k", F, [1, 3, 16]), ("v", F, [1, 3, 16]),
                            ("mask", TensorProto.INT64, [1, "total_sequence_length"]),
                            ("lens", TensorProto.INT32, [1])], ms=True, inits=[init("one", 1)])
    assert import_onnx(g, dims={"total_sequence_length": 8}).total_macs == 2 * 1 * 4 * 3 * 8 * 8
    g.graph.input[3].type.tensor_type.shape.dim[1].dim_param = "width"
    with pytest.raises(SpecError, match=r"symbolic size 'width'.*--dim width=VALUE"):
        import_onnx(g)


def test_group_query_attention_needs_a_constant_total_length():
    nodes = [node("GroupQueryAttention", ["q", "", "", "", "", "lens", "total"], ["y"], domain=MS,
                  num_heads=4, kv_num_heads=2)]
    g = graph_model(nodes, [("q", F, [1, 3, 64]), ("lens", TensorProto.INT32, [1]),
                            ("total", TensorProto.INT32, [])], ms=True)
    with pytest.raises(SpecError, match=r"node 'y' \(com.microsoft.GroupQueryAttention\): its total sequence length "
                                        r"'total' is not a constant"):
        import_onnx(g)
    g.graph.input.pop()
    g.graph.initializer.append(init("total", 6, "int32"))
    assert import_onnx(g).total_macs == 2 * 4 * 3 * 6 * 8      # packed QKV: 64 = (4 + 2*2) heads x 8
