"""ONNX import on small graphs built here with onnx.helper (no downloaded models)."""

from __future__ import annotations

import json

import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from accelmap.cli import main
from accelmap.errors import SpecError
from accelmap.workload import batched_matmul, conv2d, dense, gemm
from accelmap.workload.onnx_import import import_onnx

F = TensorProto.FLOAT


def model(nodes, inputs, outputs, inits=(), opset=17, meta=None):
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                          [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs], initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    for k, v in (meta or {}).items():
        m.metadata_props.append(onnx.StringStringEntryProto(key=k, value=v))
    return m


def conv_model(x_shape, w_shape, bias=False, **attrs):
    ins = [("x", F, x_shape), ("w", F, w_shape)] + ([("b", F, [w_shape[0]])] if bias else [])
    node = helper.make_node("Conv", [i[0] for i in ins], ["y"], name="c", **attrs)
    return model([node], ins, [("y", F, None)])


def only_layer(m):
    assert len(m.layers) == 1
    return m.layers[0]


def same_computation(a, b):
    assert a.dims == b.dims and a.signature() == b.signature() and a.kind == b.kind


# ---- Conv ----------------------------------------------------------------------------------

def test_conv_stride_dilation_asymmetric_pads_bias():
    m = conv_model([2, 8, 15, 17], [16, 8, 3, 5], bias=True, strides=[2, 1], dilations=[1, 2],
                   pads=[1, 0, 2, 3])   # top, left, bottom, right
    layer = only_layer(import_onnx(m))
    ref = conv2d("c", n=2, c=8, h=15, w=17, k=16, r=3, s=5, stride=(2, 1), dilation=(1, 2), padding=(1, 0, 2, 3))
    same_computation(layer.operator, ref)
    # P = (15+1+2-3)/2+1 = 8, Q = (17+0+3-(2*4+1))/1+1 = 12
    assert layer.operator.sizes["P"] == 8 and layer.operator.sizes["Q"] == 12
    assert layer.bias and dict(layer.operator.attrs)["bias"] is True
    assert layer.operator.macs == 2 * 16 * 8 * 8 * 12 * 3 * 5


def test_conv_groups_and_depthwise():
    grouped = only_layer(import_onnx(conv_model([1, 8, 10, 10], [12, 2, 3, 3], group=4, pads=[1] * 4))).operator
    assert grouped.kind == "grouped_conv2d"
    assert dict(grouped.dims) == {"N": 1, "G": 4, "K": 3, "C": 2, "P": 10, "Q": 10, "R": 3, "S": 3}
    dw = only_layer(import_onnx(conv_model([1, 32, 14, 14], [32, 1, 3, 3], group=32, strides=[2, 2],
                                           pads=[1] * 4))).operator
    assert dw.kind == "depthwise_conv2d" and dw.macs == 32 * 7 * 7 * 9


def test_conv_auto_pad_same_upper_and_1d():
    # SAME_UPPER on 10 with k=4, stride 3: out 4, total pad (4-1)*3+4-10 = 3 -> 1 before, 2 after.
    op = only_layer(import_onnx(conv_model([1, 3, 10, 10], [4, 3, 4, 4], auto_pad="SAME_UPPER",
                                           strides=[3, 3]))).operator
    assert dict(op.attrs)["padding"] == (1, 1, 2, 2) and op.sizes["P"] == 4
    one_d = only_layer(import_onnx(conv_model([1, 4, 50], [8, 4, 5], pads=[2, 2]))).operator
    assert one_d.sizes["Q"] == 50 and "P" in one_d.sizes and one_d.sizes["P"] == 1
    assert one_d.macs == 8 * 4 * 50 * 5


def test_conv4d_is_named_with_reason():
    with pytest.raises(SpecError, match=r"node 'c' \(Conv\): 4-D convolution"):
        import_onnx(conv_model([1, 2, 4, 4, 4, 4], [2, 2, 3, 3, 3, 3]))


@pytest.mark.parametrize("attrs,said", [
    ({"strides": [1, 2]}, r"strides \[1, 2\] or dilations \[1, 1, 1\] do not have 3 entries"),
    ({"dilations": [1, 1]}, r"strides \[1, 1, 1\] or dilations \[1, 1\] do not have 3 entries"),
    ({"pads": [1] * 4}, r"pads \[1, 1, 1, 1\] do not have 6 entries"),
])
def test_conv3d_attribute_counts_must_match_the_kernel(attrs, said):
    with pytest.raises(SpecError, match=r"node 'c' \(Conv\): " + said):
        import_onnx(conv_model([1, 4, 6, 7, 8], [8, 4, 3, 3, 3], **attrs))


def test_conv3d_grouped_strided_dilated_padded():
    op = only_layer(import_onnx(conv_model([1, 4, 6, 7, 8], [8, 2, 3, 3, 3], group=2, strides=[1, 2, 2],
                                           dilations=[1, 1, 2], pads=[1] * 6))).operator
    # D = 6+2-3+1 = 6, P = (7+2-3)//2+1 = 4, Q = (8+2-5)//2+1 = 3
    assert op.kind == "grouped_conv3d" and (op.sizes["D"], op.sizes["P"], op.sizes["Q"]) == (6, 4, 3)
    assert op.macs == 8 * 6 * 4 * 3 * 2 * 27
    assert str(op.operand("I")) == "I[N,G,C,D+T,2*P+R,2*Q+2*S]"
    dw = only_layer(import_onnx(conv_model([2, 3, 4, 4, 4], [3, 1, 1, 3, 3], group=3, pads=[0, 1, 1, 0, 1, 1])))
    assert dw.operator.kind == "depthwise_conv3d" and dw.operator.macs == 2 * 3 * 4 * 4 * 4 * 9


# ---- Gemm / MatMul ------------------------------------------------------------------------

@pytest.mark.parametrize("ta,tb", [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_gemm_transposes(ta, tb):
    a = [7, 5] if ta else [5, 7]      # M=5, K=7
    b = [9, 7] if tb else [7, 9]      # N=9
    node = helper.make_node("Gemm", ["a", "b"], ["y"], name="g", transA=ta, transB=tb)
    op = only_layer(import_onnx(model([node], [("a", F, a), ("b", F, b)], [("y", F, None)]))).operator
    assert op.macs == 5 * 7 * 9 and op.output.indices[0].dims == (op.dim_names[0],)
    if (ta, tb) == (0, 1):
        same_computation(op, dense("g", n=5, c=7, k=9))
    elif (ta, tb) == (0, 0):
        same_computation(op, gemm("g", m=5, n=9, k=7))
    else:
        # A is stored [K, M]: its first axis is the reduction dim.
        assert str(op.operand("A")) == "A[k,m]" and op.kind == "matmul"


def matmul_op(sa, sb):
    node = helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")
    return only_layer(import_onnx(model([node], [("a", F, sa), ("b", F, sb)], [("y", F, None)]))).operator


def test_matmul_forms():
    same_computation(matmul_op([4, 6], [6, 8]), gemm("mm", m=4, n=8, k=6))
    # A projection: batch and sequence rows share the weight, so they fold into M.
    same_computation(matmul_op([2, 10, 6], [6, 8]), gemm("mm", m=20, n=8, k=6))
    # Attention: both operands carry the (batch, heads) dims.
    same_computation(matmul_op([2, 3, 10, 4], [2, 3, 4, 10]), batched_matmul("mm", batch=6, m=10, n=10, k=4))
    vec = matmul_op([6], [6, 8])
    assert vec.macs == 48


def test_matmul_broadcast_keeps_the_shared_operand_unindexed():
    op = matmul_op([2, 3, 10, 4], [3, 4, 5])
    assert op.kind == "batched_matmul" and op.macs == 2 * 3 * 10 * 4 * 5
    assert str(op.operand("B")) == "B[b1,k,n]" and str(op.operand("A")) == "A[b0,b1,m,k]"
    with pytest.raises(SpecError, match="do not broadcast"):
        matmul_op([2, 10, 4], [3, 4, 5])


# ---- host work, dedup, binding -------------------------------------------------------------

def small_cnn(batch_dim="N"):
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv_a", pads=[1] * 4),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu_a"),
             helper.make_node("Conv", ["r1", "w1"], ["c2"], name="conv_b", pads=[1] * 4),
             helper.make_node("Add", ["c2", "r1"], ["s"], name="add"),
             helper.make_node("MaxPool", ["s"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p"], ["f"], name="flat"),
             helper.make_node("Gemm", ["f", "wf"], ["y"], name="fc", transB=1)]
    ins = [("x", F, [batch_dim, 4, 8, 8]), ("w1", F, [4, 4, 3, 3]), ("wf", F, [10, 64])]
    return model(nodes, ins, [("y", F, [batch_dim, 10])])


def test_host_ops_listed_and_identical_layers_grouped():
    m = import_onnx(small_cnn())
    assert [(l.name, l.count, l.nodes) for l in m.layers] == [("conv_a", 2, ("conv_a", "conv_b")), ("fc", 1, ("fc",))]
    host = {h.name: (h.op_type, h.elements) for h in m.host_ops}
    assert host == {"relu_a": ("Relu", 256), "add": ("Add", 256), "pool": ("MaxPool", 64), "flat": ("Flatten", 64)}
    assert m.total_macs == 2 * (4 * 4 * 8 * 8 * 9) + 64 * 10
    assert m.params == (("N", 1),)


def test_batch_binding_and_errors():
    assert import_onnx(small_cnn(), batch=3).total_macs == 3 * import_onnx(small_cnn()).total_macs
    static = small_cnn(batch_dim=1)
    with pytest.raises(SpecError, match="--batch 2 given, but no input of the model has a symbolic batch"):
        import_onnx(static, batch=2)
    with pytest.raises(SpecError, match="--seq-len"):
        import_onnx(small_cnn(), seq_len=16)


def seq_model(meta=None, dim="seq"):
    node = helper.make_node("MatMul", ["x", "w"], ["y"], name="proj")
    return model([node], [("x", F, ["batch", dim, 16]), ("w", F, [16, 32])], [("y", F, None)], meta=meta)


def test_sequence_length_binding():
    with pytest.raises(SpecError, match="sequence length 'seq'; pass --seq-len"):
        import_onnx(seq_model())
    assert only_layer(import_onnx(seq_model(), seq_len=10, batch=2)).operator.sizes["M"] == 20
    assert only_layer(import_onnx(seq_model({"accelmap.default.seq_len": "7"}))).operator.sizes["M"] == 7
    with pytest.raises(SpecError, match="symbolic size 'heads'"):
        import_onnx(seq_model(dim="heads"))


def test_unsupported_mac_op_is_named_or_listed_when_lenient():
    nodes = [helper.make_node("DeformConv", ["x", "w", "off"], ["t"], name="dc"),
             helper.make_node("Conv", ["x", "w"], ["y"], name="c")]
    m = model(nodes, [("x", F, [1, 2, 5, 5]), ("w", F, [3, 2, 3, 3]), ("off", F, [1, 18, 3, 3])],
              [("y", F, None)], opset=19)
    with pytest.raises(SpecError, match=r"node 'dc' \(DeformConv\): has multiply-accumulates but no mapping"):
        import_onnx(m)
    lenient = import_onnx(m, strict=False)
    assert [l.name for l in lenient.layers] == ["c"]
    assert lenient.host_ops[0].op_type == "DeformConv" and "not imported" in lenient.host_ops[0].note


def test_custom_op_is_listed_as_unknown_not_host_work():
    nodes = [helper.make_node("Mystery", ["x"], ["z"], name="m", domain="com.example"),
             helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")]
    m = model(nodes, [("x", F, [4, 8]), ("w", F, [8, 2])], [("y", F, None)])
    m.opset_import.append(helper.make_opsetid("com.example", 1))
    out = import_onnx(m)
    assert out.host_ops == ()
    assert [(u.name, u.op_type, u.elements) for u in out.unknown_ops] == [("m", "com.example.Mystery", None)]


def test_weight_free_initializer_with_missing_external_data():
    # ZigZag ships models whose initializers point at a data file that is not there.
    w = TensorProto(name="w", data_type=F, dims=[8, 3, 3, 3])
    w.data_location = TensorProto.EXTERNAL
    w.external_data.append(onnx.StringStringEntryProto(key="location", value="missing.bin"))
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="c", pads=[1] * 4)
    m = model([node], [("x", F, [1, 3, 6, 6])], [("y", F, None)], inits=[w])
    assert only_layer(import_onnx(m)).operator.macs == 8 * 3 * 36 * 9


def test_precision_from_onnx_types():
    node = helper.make_node("MatMulInteger", ["a", "b"], ["y"], name="q")
    m = model([node], [("a", TensorProto.INT8, [4, 8]), ("b", TensorProto.INT8, [8, 2])],
              [("y", TensorProto.INT32, None)], opset=17)
    op = only_layer(import_onnx(m, bits="onnx")).operator
    assert [o.bits for o in op.operands] == [32, 8, 8]
    half = helper.make_node("MatMul", ["a", "b"], ["y"], name="h")
    F16 = TensorProto.FLOAT16
    m16 = model([half], [("a", F16, [4, 8]), ("b", F16, [8, 2])], [("y", F16, None)])
    assert [o.bits for o in only_layer(import_onnx(m16, bits="onnx")).operator.operands] == [16, 16, 16]
    assert [o.bits for o in only_layer(import_onnx(m16, bits={"I": 4})).operator.operands] == [32, 4, 8]


# ---- bad input through the CLI --------------------------------------------------------------

def run(*args):
    return CliRunner().invoke(main, ["import", *map(str, args)])


def assert_clean_failure(res, *needles):
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1
    for n in needles:
        assert n in res.output


def test_cli_truncated_and_non_onnx_files(tmp_path):
    good = small_cnn().SerializeToString()
    trunc = tmp_path / "trunc.onnx"
    trunc.write_bytes(good[: len(good) // 2])
    text = tmp_path / "notes.onnx"
    text.write_text("this is not a model\n")
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    out = tmp_path / "out.json"
    for bad in (trunc, text, empty):
        res = run(bad, "-o", out)
        assert_clean_failure(res, str(bad), "ONNX")
        assert not out.exists() and list(tmp_path.glob(".out.json*")) == []


def test_cli_only_host_ops(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="r"), helper.make_node("Softmax", ["r"], ["y"], name="s")]
    p = tmp_path / "host.onnx"
    p.write_bytes(model(nodes, [("x", F, [2, 5])], [("y", F, None)]).SerializeToString())
    out = tmp_path / "out.json"
    res = run(p, "-o", out)
    assert_clean_failure(res, "no accelerator operator", "Relu x1", "Softmax x1")
    assert not out.exists()


def test_cli_precision_the_accelerator_does_not_support(tmp_path):
    p = tmp_path / "cnn.onnx"
    p.write_bytes(small_cnn().SerializeToString())
    out = tmp_path / "out.json"
    res = run(p, "--arch", "vta_like", "--precision", "I=16,W=16,O=32", "-o", out)
    assert_clean_failure(res, "operand I", "16-bit", "vta_like", "8 bits")
    assert not out.exists()
    assert_clean_failure(run(p, "--precision", "I=eight"), "--precision")
    # Without --precision the operands take the accelerator's own widths.
    ok = run(p, "--arch", "vta_like", "--batch", "2", "-o", out)
    assert ok.exit_code == 0, ok.output
    data = json.loads(out.read_text())
    assert data["params"] == {"N": 2} and data["total_macs"] == 2 * (2 * 9216 + 640)
    assert "conv_a" in ok.output and "count" in ok.output and "MaxPool" in ok.output
