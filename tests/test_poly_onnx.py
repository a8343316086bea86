"""The poly flow's ONNX front end: each op's statements agree with ONNX's reference evaluator, and the
compiled C of an imported subgraph agrees with NumPy."""

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto as TP
from onnx import helper as h
from onnx.reference import ReferenceEvaluator

from accelmap.arch.presets import get_accelerator
from accelmap.cli import main
from accelmap.errors import SpecError
from accelmap.poly.c_code import run_and_check
from accelmap.poly.compile import compile_subgraph
from accelmap.poly.from_onnx import kernel_from_onnx
from accelmap.poly.reference import random_inputs, reference

F, F16, I64 = TP.FLOAT, TP.FLOAT16, TP.INT64
ASCEND = get_accelerator("ascend_like")


def model(nodes, inputs, outputs, opset=17):
    vi = h.make_tensor_value_info
    g = h.make_graph(nodes, "g", [vi(n, t, s) for n, t, s in inputs], [vi(n, t, None) for n, t in outputs])
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)])


def node(op, ins, outs, **attrs):
    return h.make_node(op, ins, outs, name=outs[0], **attrs)


CASES = {
    "conv_bn_relu_residual": model(
        [node("Conv", ["x", "w", "cb"], ["c"], pads=[1, 1, 1, 1]),
         node("BatchNormalization", ["c", "s", "bb", "m", "v"], ["bn"], epsilon=1e-3),
         node("Relu", ["bn"], ["r"]), node("Add", ["r", "x2"], ["y"])],
        [("x", F, [1, 4, 6, 6]), ("w", F, [8, 4, 3, 3]), ("cb", F, [8]), ("s", F, [8]), ("bb", F, [8]),
         ("m", F, [8]), ("v", F, [8]), ("x2", F, [1, 8, 6, 6])], [("y", F)]),
    "grouped_strided_conv": model(
        [node("Conv", ["x", "w"], ["y"], group=2, strides=[2, 1], dilations=[1, 2])],
        [("x", F, [2, 4, 9, 9]), ("w", F, [6, 2, 3, 2])], [("y", F)]),
    "bn_training": model(
        [node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"], training_mode=1,
              momentum=0.8)],
        [("x", F, [2, 3, 4, 5]), ("s", F, [3]), ("b", F, [3]), ("m", F, [3]), ("v", F, [3])],
        [("y", F), ("rm", F), ("rv", F)], opset=15),
    "batched_matmul_broadcast_gemm": model(
        [node("MatMul", ["a", "b"], ["ab"]), node("ReduceSum", ["ab", "ax"], ["s"], keepdims=0),
         node("Gemm", ["s", "g", "gc"], ["y"], alpha=0.5, beta=2.0, transB=1)],
        [("a", F, [3, 4, 5]), ("b", F, [5, 6]), ("ax", I64, [1]), ("g", F, [7, 6]), ("gc", F, [7])],
        [("y", F)]),
    "one_hot_cast_transpose": model(
        [node("OneHot", ["i", "depth", "vals"], ["oh"], axis=1), node("Cast", ["oh"], ["c"], to=F16),
         node("Transpose", ["c"], ["y"], perm=[1, 0])],
        [("i", I64, [6]), ("depth", I64, []), ("vals", F, [2])], [("y", F16)]),
    "elementwise_broadcast_mix": model(
        [node("Sub", ["x", "mu"], ["xc"]), node("Pow", ["xc", "two"], ["sq"]),
         node("ReduceMean", ["sq"], ["var"], axes=[1], keepdims=1),
         node("Sqrt", ["var"], ["sd"]), node("Div", ["xc", "sd"], ["n"]),
         node("Clip", ["n", "lo", "hi"], ["cl"]), node("LeakyRelu", ["cl"], ["lr"], alpha=0.1),
         node("Sigmoid", ["lr"], ["sg"]), node("Unsqueeze", ["sg", "ax0"], ["u"]),
         node("Squeeze", ["u", "ax0"], ["y"]), node("Pad", ["y", "pads", "pv"], ["p"])],
        [("x", F, [4, 8]), ("mu", F, [8]), ("two", F, []), ("lo", F, []), ("hi", F, []), ("ax0", I64, [1]),
         ("pads", I64, [4]), ("pv", F, [])], [("p", F), ("var", F)], opset=18),
    "matmul_residual_layer_norm": model(
        [node("MatMul", ["x", "w"], ["mm"]), node("Add", ["mm", "bias"], ["ba"]), node("Add", ["ba", "h"], ["res"]),
         node("LayerNormalization", ["res", "g", "bt"], ["y"], epsilon=1e-5)],
        [("x", F, [2, 3, 8]), ("w", F, [8, 8]), ("bias", F, [8]), ("h", F, [2, 3, 8]), ("g", F, [8]),
         ("bt", F, [8])], [("y", F)]),
}
# value inputs (axes, exponents, bounds) are given as initializers so the importer can read them
CONSTS = {
    "batched_matmul_broadcast_gemm": {"ax": np.array([1], np.int64)},
    "one_hot_cast_transpose": {"depth": np.array(5, np.int64)},
    "elementwise_broadcast_mix": {"two": np.array(2.0, np.float32), "lo": np.array(-1.5, np.float32),
                                  "hi": np.array(1.0, np.float32), "ax0": np.array([0], np.int64),
                                  "pads": np.array([1, 0, 0, 2], np.int64), "pv": np.array(0.25, np.float32)},
}


def with_constants(name):
    m = onnx.ModelProto()
    m.CopyFrom(CASES[name])
    for n, v in CONSTS.get(name, {}).items():
        m.graph.initializer.append(onnx.numpy_helper.from_array(v, n))
    return m


def onnx_inputs(name, k):
    ins = random_inputs(k, seed=3)
    for t in k.inputs:
        if t.name in ("v", "var"):
            ins[t.name] = np.abs(ins[t.name]) + 0.5   # a variance
        if t.name == "i":
            ins[t.name] = np.array([0, 4, -1, 7, 2, -5], np.int64)   # in range, negative, out of range
    return ins


@pytest.mark.parametrize("name", sorted(CASES))
def test_imported_statements_agree_with_onnx_reference(name):
    m = with_constants(name)
    k = kernel_from_onnx(m)
    ins = onnx_inputs(name, k)
    ref = reference(k, ins)
    feeds = {i.name: ins[i.name].reshape(
        [d.dim_value for d in i.type.tensor_type.shape.dim]) for i in m.graph.input
        if i.name not in CONSTS.get(name, {})}
    got = ReferenceEvaluator(m).run(None, feeds)
    for out, want in zip(m.graph.output, got, strict=True):
        mine = ref[out.name].astype(np.float64).reshape(np.shape(want))
        assert np.allclose(mine, np.asarray(want, np.float64), rtol=2e-3 if out.type.tensor_type.elem_type == F16
                           else 1e-5, atol=1e-5), out.name


@pytest.mark.parametrize("name,fuse", [("conv_bn_relu_residual", True), ("bn_training", True),
                                       ("matmul_residual_layer_norm", True),
                                       ("batched_matmul_broadcast_gemm", True), ("one_hot_cast_transpose", False),
                                       ("elementwise_broadcast_mix", True)])
def test_imported_subgraph_compiles_and_runs(name, fuse):
    k = kernel_from_onnx(with_constants(name))
    r = run_and_check(compile_subgraph(k, ASCEND, fuse=fuse))
    assert r.ok, r.detail


def test_conv_padding_becomes_a_fused_padded_copy():
    k = kernel_from_onnx(with_constants("conv_bn_relu_residual"))
    assert [s.text().split(":")[1].split("=")[0].strip() for s in k.statements[:2]] == \
        ["c_pad[d0, d1, d2, d3]", "c_pad[d0, d1, d2 + 1, d3 + 1]"]
    c = compile_subgraph(k, ASCEND, fuse=True)
    assert len(c.plans) == 1 and [g for _, g in c.plans[0].fused] == [("S0",), ("S1",)]


def test_a_selection_keeps_outputs_read_outside_it():
    m = with_constants("elementwise_broadcast_mix")
    k = kernel_from_onnx(m, ["xc", "sq", "var"])
    assert [t.name for t in k.inputs] == ["x", "mu"]
    assert [t.name for t in k.live_out] == ["xc", "var"]   # xc is read by Div, outside the selection


def test_unsupported_ops_are_one_line_errors():
    m = model([node("Tanh", ["x"], ["y"])], [("x", F, [2, 3])], [("y", F)])
    with pytest.raises(SpecError, match=r"node 'y' \(Tanh\): op type not supported .*supported: .*Add.*Softmax"):
        kernel_from_onnx(m)
    m = model([node("Softmax", ["x"], ["y"])], [("x", TP.INT32, [2, 3])], [("y", TP.INT32)])
    with pytest.raises(SpecError, match=r"node 'y' \(Softmax\): Softmax of int32 values is not supported"):
        kernel_from_onnx(m)
    with pytest.raises(SpecError, match="no node named 'nope'"):
        kernel_from_onnx(with_constants("bn_training"), ["nope"])


def test_cli_poly_takes_an_onnx_file_and_a_node_range(tmp_path):
    p = tmp_path / "sub.onnx"
    onnx.save(with_constants("conv_bn_relu_residual"), p)
    r = CliRunner().invoke(main, ["poly", str(p), "--nodes", "1:3", "--fuse", "--run", "--no-code"])
    assert r.exit_code == 0, r.output
    assert "input c[1, 8, 6, 6]" in r.output and "run on the host: OK" in r.output
    r = CliRunner().invoke(main, ["poly", str(p), "--nodes", "9:3"])
    assert r.exit_code == 2 and "--nodes" in r.output


def basic_block(c=16, hw=10):
    """A ResNet basic block: conv-relu-conv, residual add, relu (both convs zero-padded)."""
    return model([node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]), node("Relu", ["c1"], ["r1"]),
                  node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]), node("Add", ["c2", "x"], ["a"]),
                  node("Relu", ["a"], ["y"])],
                 [("x", F, [1, c, hw, hw]), ("w1", F, [c, c, 3, 3]), ("b1", F, [c]), ("w2", F, [c, c, 3, 3]),
                  ("b2", F, [c])], [("y", F)])


def test_a_fused_basic_block_runs_its_producers_in_dependence_order():
    k = kernel_from_onnx(basic_block())
    c = compile_subgraph(k, ASCEND, fuse=True)
    (plan,) = c.plans
    order = [s for _, g in plan.fused for s in g]
    # the second conv's zero fill (S6) must run before the copy of the first conv's result into it (S7)
    assert order.index("S6") < order.index("S7") and order.index("S0") < order.index("S1")
    assert run_and_check(c).ok


def test_producers_that_cannot_fit_a_fused_tile_become_kernels_again():
    """LayerNorm after a 768 x 768 fp32 GEMM: each tile of the normalization needs whole rows, so the fused
    GEMM's weight block (2.3 MB) cannot fit L1 at any tile size; the GEMM is given back as its own kernel."""
    m = model([node("MatMul", ["x", "w"], ["mm"]), node("LayerNormalization", ["mm", "g", "bt"], ["y"])],
              [("x", F, [16, 768]), ("w", F, [768, 768]), ("g", F, [768]), ("bt", F, [768])], [("y", F)])
    for fusion, apart in (("greedy", {"S0", "S1", "S2", "S3", "S4", "S5"}), ("cost", {"S0", "S1"})):
        c = compile_subgraph(kernel_from_onnx(m), ASCEND, fuse=True, fusion=fusion)
        assert ("S0", "S1") in [p.group for p in c.plans] and all(("S0", "S1") not in [g for _, g in p.fused]
                                                                  for p in c.plans)
        # said in `accelmap poly`'s kernel list; greedy fusion gives back all the direct producers of the
        # kernel that does not fit, the cost-driven one refuses only the GEMM
        assert c.kept_apart == apart
    assert compile_subgraph(kernel_from_onnx(m), ASCEND, fuse=False).kept_apart == frozenset()


SOFTMAX_RESHAPE = {
    "softmax_reduce_max": model(
        [node("Softmax", ["x"], ["sm"], axis=1), node("ReduceMax", ["x"], ["mx"], axes=[0, 2], keepdims=0),
         node("Softmax", ["x"], ["sl"])],
        [("x", F, [3, 5, 4])], [("sm", F), ("mx", F), ("sl", F)]),
    "reshape_regroups_axes": model(
        [node("Reshape", ["x", "shape"], ["r"]), node("Flatten", ["x"], ["f"], axis=2),
         node("Relu", ["r"], ["y"])],
        [("x", F, [2, 3, 4, 5])], [("y", F), ("f", F)]),
    "reduce_max_int": model([node("ReduceMax", ["x"], ["y"], axes=[1], keepdims=1)], [("x", TP.INT32, [4, 6])],
                            [("y", TP.INT32)]),
}
SOFTMAX_RESHAPE_CONSTS = {"reshape_regroups_axes": {"shape": np.array([3, 8, 5], np.int64)}}


@pytest.mark.parametrize("name", sorted(SOFTMAX_RESHAPE))
def test_softmax_reduce_max_and_reshapes_agree_with_onnx_reference_and_run(name):
    m = onnx.ModelProto()
    m.CopyFrom(SOFTMAX_RESHAPE[name])
    for n, v in SOFTMAX_RESHAPE_CONSTS.get(name, {}).items():
        m.graph.initializer.append(onnx.numpy_helper.from_array(v, n))
    k = kernel_from_onnx(m)
    ins = random_inputs(k, seed=4)
    ref = reference(k, ins)
    got = ReferenceEvaluator(m).run(None, {i.name: ins[i.name] for i in m.graph.input})
    for out, want in zip(m.graph.output, got, strict=True):
        assert ref[out.name].shape == np.shape(want)
        if np.issubdtype(np.asarray(want).dtype, np.integer):
            assert np.array_equal(ref[out.name], want), out.name
        else:
            assert np.allclose(ref[out.name], want, rtol=1e-5, atol=1e-6), out.name
    r = run_and_check(compile_subgraph(k, ASCEND, fuse=True))
    assert r.ok, r.detail
    if name == "reduce_max_int":
        assert r.exact


def test_softmax_before_opset_13_normalizes_the_flattened_trailing_axes():
    """Opset 11's Softmax sees the input as a [2, 12] matrix at axis 1 (the spec's coercion to 2-D). ONNX's
    reference evaluator applies the opset-13 single-axis rule to every opset, so this one is checked against
    the spec's formula in NumPy."""
    m = model([node("Softmax", ["x"], ["y"], axis=1)], [("x", F, [2, 3, 4])], [("y", F)], opset=11)
    k = kernel_from_onnx(m)
    x = random_inputs(k, seed=4)["x"].astype(np.float64).reshape(2, 12)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    assert np.allclose(reference(k, random_inputs(k, seed=4))["y"], (e / e.sum(axis=1, keepdims=True)).reshape(2, 3, 4),
                       rtol=1e-5, atol=1e-7)
    assert run_and_check(compile_subgraph(k, ASCEND, fuse=True)).ok


def test_regrouping_reshape_reads_with_floor_division_and_modulo():
    from accelmap.poly.from_onnx import reshape_index
    # [4, 6] -> [3, 8]: no common cut; x[(8*d0 + d1) // 6, (8*d0 + d1) % 6]
    assert [ix.isl() for ix in reshape_index((4, 6), (3, 8), ("d0", "d1"))] == \
        ["floor((8*d0 + d1)/6)", "((8*d0 + d1) mod 6)"]
    # Flatten [2, 3, 4, 5] at axis 2 -> [6, 20]: two segments, size-1 axes read index 0
    assert [ix.isl() for ix in reshape_index((2, 3, 1, 4, 5), (6, 20), ("d0", "d1"))] == \
        ["floor((d0)/3)", "((d0) mod 3)", "0", "floor((d1)/5)", "((d1) mod 5)"]
    assert [ix.isl() for ix in reshape_index((1, 7), (7,), ("d0",))] == ["0", "d0"]
