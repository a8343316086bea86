"""Tiny ONNX networks for the compiler tests (float and int8 QDQ), built with onnx.helper."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT


def _init(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def _conv_params(seed: int):
    """Two draws from one generator of ``seed``: ``w(*shape)``, weights scaled by their fan-in (every axis past the
    first), and ``b(n)``, small biases."""
    rng = np.random.default_rng(seed)
    return ((lambda *s: (rng.standard_normal(s) / np.sqrt(np.prod(s[1:]))).astype(np.float32)),
            (lambda n: (0.1 * rng.standard_normal(n)).astype(np.float32)))


def tiny_cnn(seed: int = 0, softmax: bool = True) -> onnx.ModelProto:
    """conv 3x3 + relu, max pool, depthwise conv + residual add, global pool, flatten, gemm, softmax."""
    rng = np.random.default_rng(seed)
    w = lambda *s: (rng.standard_normal(s) / np.sqrt(np.prod(s[1:]))).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], name="dw2", pads=[1, 1, 1, 1], group=8),
        helper.make_node("Add", ["c2", "p1"], ["a2"], name="add2"),
        helper.make_node("Clip", ["a2", "lo", "hi"], ["r2"], name="clip2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "w3", "b3"], ["fc"], name="fc", transB=1),
        helper.make_node("Softmax", ["fc"], ["y"], name="softmax", axis=-1),
    ]
    if not softmax:
        nodes[-2].output[0] = "y"
        del nodes[-1]
    inits = [_init("w1", w(8, 3, 3, 3)), _init("b1", 0.1 * rng.standard_normal(8).astype(np.float32)),
             _init("w2", w(8, 1, 3, 3)), _init("b2", 0.1 * rng.standard_normal(8).astype(np.float32)),
             _init("lo", np.float32(0.0)), _init("hi", np.float32(6.0)),
             _init("w3", w(10, 8)), _init("b3", 0.1 * rng.standard_normal(10).astype(np.float32))]
    g = helper.make_graph(nodes, "tiny_cnn", [helper.make_tensor_value_info("x", F, ["batch", 3, 8, 8])],
                          [helper.make_tensor_value_info("y", F, None)], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def tiny_attention(seed: int = 0, seq: int = 4, d: int = 16, heads: int = 2) -> onnx.ModelProto:
    """A transformer block in miniature: projections, heads (reshape/transpose), scores, softmax, context,
    residual, layer norm, GELU feed-forward."""
    rng = np.random.default_rng(seed)
    w = lambda *s: (rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32)
    dh = d // heads
    nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q"], name="q"),
        helper.make_node("MatMul", ["x", "wk"], ["k"], name="k"),
        helper.make_node("MatMul", ["x", "wv"], ["v"], name="v"),
        helper.make_node("Add", ["q", "bq"], ["qb"], name="q.bias"),
        helper.make_node("Reshape", ["qb", "heads"], ["qr"], name="q.reshape"),
        helper.make_node("Transpose", ["qr"], ["qt"], name="q.t", perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["k", "heads"], ["kr"], name="k.reshape"),
        helper.make_node("Transpose", ["kr"], ["kt"], name="k.t", perm=[0, 2, 3, 1]),
        helper.make_node("Reshape", ["v", "heads"], ["vr"], name="v.reshape"),
        helper.make_node("Transpose", ["vr"], ["vt"], name="v.t", perm=[0, 2, 1, 3]),
        helper.make_node("MatMul", ["qt", "kt"], ["s"], name="scores"),
        helper.make_node("Div", ["s", "sqrt_dh"], ["ss"], name="scale"),
        helper.make_node("Softmax", ["ss"], ["p"], name="softmax", axis=-1),
        helper.make_node("MatMul", ["p", "vt"], ["c"], name="context"),
        helper.make_node("Transpose", ["c"], ["ct"], name="c.t", perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ct", "merged"], ["cm"], name="c.reshape"),
        helper.make_node("Add", ["cm", "x"], ["res"], name="residual"),
        helper.make_node("LayerNormalization", ["res", "g", "b"], ["ln"], name="ln", axis=-1),
        helper.make_node("MatMul", ["ln", "w1"], ["h"], name="ffn1"),
        helper.make_node("Gelu", ["h"], ["y"], name="gelu"),
    ]
    inits = [_init("wq", w(d, d)), _init("wk", w(d, d)), _init("wv", w(d, d)),
             _init("bq", 0.1 * rng.standard_normal(d).astype(np.float32)),
             _init("heads", np.array([1, seq, heads, dh], dtype=np.int64)),
             _init("merged", np.array([1, seq, d], dtype=np.int64)),
             _init("sqrt_dh", np.float32(np.sqrt(dh))),
             _init("g", (1 + 0.1 * rng.standard_normal(d)).astype(np.float32)),
             _init("b", 0.1 * rng.standard_normal(d).astype(np.float32)), _init("w1", w(d, 2 * d))]
    g = helper.make_graph(nodes, "tiny_attention", [helper.make_tensor_value_info("x", F, [1, seq, d])],
                          [helper.make_tensor_value_info("y", F, None)], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])



def quantize_qdq(model: onnx.ModelProto, seed: int = 0, symmetric_activations: bool = True,
                 reduce_range: bool = False) -> onnx.ModelProto:
    """The model in int8 QDQ form (onnxruntime's quantization tools, random calibration inputs)."""
    from accelmap.compile.graph import load_graph
    from accelmap.compile.quantize import quantize_qdq as quantize

    return quantize(load_graph(model), seed, symmetric_activations=symmetric_activations, reduce_range=reduce_range)


def tiny_classifier(seed: int = 0, batch: int = 6, features: int = 16, classes: int = 300) -> onnx.ModelProto:
    """gemm + softmax over many classes in several rows: the softmax kernels' sums and tables at length."""
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["z"], name="fc", transB=1),
             helper.make_node("Softmax", ["z"], ["y"], name="softmax", axis=-1)]
    inits = [_init("w", (rng.standard_normal((classes, features)) / np.sqrt(features)).astype(np.float32)),
             _init("b", 0.1 * rng.standard_normal(classes).astype(np.float32))]
    g = helper.make_graph(nodes, "tiny_classifier", [helper.make_tensor_value_info("x", F, [batch, features])],
                          [helper.make_tensor_value_info("y", F, None)], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def tiny_pools(size: int = 9, seed: int = 0) -> onnx.ModelProto:
    """conv, then max and average pooling whose ceil_mode windows run past the padded input."""
    rng = np.random.default_rng(seed)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("MaxPool", ["c"], ["m"], name="maxpool", kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
        helper.make_node("AveragePool", ["m"], ["a1"], name="avg_pad", kernel_shape=[3, 3], strides=[2, 2],
                         pads=[1, 1, 1, 1], ceil_mode=1, count_include_pad=1),
        helper.make_node("AveragePool", ["m"], ["a0"], name="avg_nopad", kernel_shape=[3, 3], strides=[2, 2],
                         pads=[0, 1, 1, 0], ceil_mode=1, count_include_pad=0),
    ]
    inits = [_init("w", (rng.standard_normal((4, 3, 3, 3)) / np.sqrt(27)).astype(np.float32))]
    g = helper.make_graph(nodes, "tiny_pools", [helper.make_tensor_value_info("x", F, [1, 3, size, size])],
                          [helper.make_tensor_value_info(o, F, None) for o in ("a1", "a0")], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _two_operand_model(name: str, cases: list[tuple[str, dict, list[int], list[int] | np.ndarray]]
                       ) -> tuple[onnx.ModelProto, dict[str, int]]:
    """One node per case, each with its own graph input A and a B that is a graph input (a shape) or a
    constant (an array): ``cases`` = (op type, attributes, shape of A, shape of B or the B array).

    Every graph input's first dim is symbolic (the compiler takes inputs with a symbolic dim as data, the
    others as parameters to fill); the dims to bind it with are returned with the model."""
    nodes, inputs, outputs, inits = [], [], [], []
    dims: dict[str, int] = {}

    def data(x: str, shape: list[int]):
        dims[f"{x}_0"] = shape[0]
        inputs.append(helper.make_tensor_value_info(x, F, [f"{x}_0", *shape[1:]]))

    for i, (op, at, sa, b) in enumerate(cases):
        data(f"a{i}", sa)
        if isinstance(b, np.ndarray):
            inits.append(_init(f"b{i}", b.astype(np.float32)))
        else:
            data(f"b{i}", b)
        nodes.append(helper.make_node(op, [f"a{i}", f"b{i}"], [f"y{i}"], name=f"{op.lower()}{i}", **at))
        outputs.append(helper.make_tensor_value_info(f"y{i}", F, None))
    g = helper.make_graph(nodes, name, inputs, outputs, initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), dims


def broadcast_matmuls(seed: int = 0) -> tuple[onnx.ModelProto, dict[str, int]]:
    """MatMul with broadcast batch axes: a shared weight, a broadcast left or right operand, 1-D operands."""
    rng = np.random.default_rng(seed)
    return _two_operand_model("broadcast_matmuls", [
        ("MatMul", {}, [2, 3, 8], rng.standard_normal((8, 5))),        # [B,M,K] x [K,N]
        ("MatMul", {}, [2, 3, 5, 8], [2, 3, 8, 4]),                      # [B,H,M,K] x [B,H,K,N]
        ("MatMul", {}, [2, 3, 5, 8], [3, 8, 4]),                         # B broadcast over the first axis
        ("MatMul", {}, [2, 1, 5, 8], [1, 3, 8, 4]),                      # each operand broadcast on one axis
        ("MatMul", {}, [5, 8], [2, 8, 3]),                               # A broadcast
        ("MatMul", {}, [8], [2, 8, 3]),                                  # 1-D A
        ("MatMul", {}, [2, 3, 8], [8]),                                  # 1-D B
    ])


def matrix_einsums(seed: int = 0) -> tuple[onnx.ModelProto, dict[str, int]]:
    """Einsums that are matrix products: batched, transposed, broadcast ('...'), contractions, weights."""
    rng = np.random.default_rng(seed)
    return _two_operand_model("matrix_einsums", [
        ("Einsum", {"equation": "bij,bjk->bik"}, [2, 3, 4], [2, 4, 5]),
        ("Einsum", {"equation": "bhqd,bhkd->bhqk"}, [2, 2, 3, 4], [2, 2, 5, 4]),
        ("Einsum", {"equation": "bsd,df->bsf"}, [2, 3, 8], rng.standard_normal((8, 6))),
        ("Einsum", {"equation": "...ij,...jk->...ik"}, [2, 3, 4], [2, 4, 5]),
        ("Einsum", {"equation": "ij,kj"}, [3, 4], [5, 4]),             # implicit output: ik
        ("Einsum", {"equation": "bij,bkj->bki"}, [2, 3, 4], [2, 5, 4]),  # output axes permuted
        ("Einsum", {"equation": "abc,cd->ad"}, [2, 3, 4], [4, 5]),       # b summed within A only
    ])


def conv_transposes(seed: int = 0) -> tuple[onnx.ModelProto, dict[str, int]]:
    """ConvTranspose: strided with padding and output padding, grouped with bias and dilation, 1-D."""
    rng = np.random.default_rng(seed)
    w = lambda *s: (rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32)
    nodes = [
        helper.make_node("ConvTranspose", ["x0", "w0"], ["y0"], name="up0", strides=[2, 2], pads=[1, 1, 0, 1],
                         output_padding=[1, 0], kernel_shape=[3, 3]),
        helper.make_node("ConvTranspose", ["x1", "w1", "c1"], ["y1"], name="up1", group=2, dilations=[2, 1],
                         strides=[1, 2]),
        helper.make_node("ConvTranspose", ["x2", "w2", "c2"], ["y2"], name="up2", strides=[3]),
    ]
    inits = [_init("w0", w(4, 3, 3, 3)), _init("w1", w(4, 3, 2, 3)), _init("c1", w(6)),
             _init("w2", w(3, 2, 4)), _init("c2", w(2))]
    g = helper.make_graph(nodes, "conv_transposes",
                          [helper.make_tensor_value_info("x0", F, ["n0", 4, 5, 4]),
                           helper.make_tensor_value_info("x1", F, ["n1", 4, 3, 4]),
                           helper.make_tensor_value_info("x2", F, ["n2", 3, 5])],
                          [helper.make_tensor_value_info(f"y{i}", F, None) for i in range(3)], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), {"n0": 1, "n1": 2, "n2": 1}


def conv_transposes_sized(seed: int = 0) -> onnx.ModelProto:
    """ConvTranspose whose output size, not its pads, is given: auto_pad SAME_UPPER and SAME_LOWER (output =
    input x stride; an odd total padding, so the two differ) and output_shape (with output_padding, 1-D too)."""
    rng = np.random.default_rng(seed)
    w = lambda *s: (rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32)
    nodes = [
        helper.make_node("ConvTranspose", ["x", "w0"], ["y0"], name="same_upper", strides=[2, 2], auto_pad="SAME_UPPER"),
        helper.make_node("ConvTranspose", ["x", "w0"], ["y1"], name="same_lower", strides=[2, 2], auto_pad="SAME_LOWER"),
        helper.make_node("ConvTranspose", ["x", "w1", "c1"], ["y2"], name="sized", strides=[2, 3],
                         output_shape=[8, 13], group=2),
        helper.make_node("ConvTranspose", ["x1", "w2"], ["y3"], name="sized_1d", strides=[2], output_shape=[10],
                         output_padding=[1]),
    ]
    inits = [_init("w0", w(4, 3, 3, 3)), _init("w1", w(4, 2, 3, 4)), _init("c1", w(4)), _init("w2", w(3, 2, 4))]
    g = helper.make_graph(nodes, "conv_transposes_sized",
                          [helper.make_tensor_value_info("x", F, [1, 4, 4, 5]),
                           helper.make_tensor_value_info("x1", F, [1, 3, 5])],
                          [helper.make_tensor_value_info(f"y{i}", F, None) for i in range(4)], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def broadcast_matmul_chain(seed: int = 0) -> onnx.ModelProto:
    """x[B,H,M,K] x W[K,N] (a shared weight over two batch axes), relu, x W2[H,N,P] (broadcast over B)."""
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["m1"], name="proj"),
             helper.make_node("Relu", ["m1"], ["r1"], name="relu"),
             helper.make_node("MatMul", ["r1", "w2"], ["y"], name="heads")]
    inits = [_init("w1", (rng.standard_normal((8, 6)) / np.sqrt(8)).astype(np.float32)),
             _init("w2", (rng.standard_normal((2, 6, 5)) / np.sqrt(6)).astype(np.float32))]
    g = helper.make_graph(nodes, "broadcast_matmul_chain", [helper.make_tensor_value_info("x", F, [3, 2, 3, 8])],
                          [helper.make_tensor_value_info("y", F, None)], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def tiny_chain(seed: int = 0, size: int = 12, pool: str = "MaxPool", **pool_attrs) -> onnx.ModelProto:
    """Convolutions that chain (each output read by the next alone): conv + relu, conv + relu, max pool (or
    ``pool`` with ``pool_attrs``), depthwise conv + relu, conv; then a global pool and a classifier. What ``--fuse``
    can run as groups."""
    w, b = _conv_params(seed)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node(pool, ["r2"], ["p2"], name="pool2", **({"kernel_shape": [2, 2], "strides": [2, 2]} | pool_attrs)),
        helper.make_node("Conv", ["p2", "w3", "b3"], ["c3"], name="dw3", pads=[1, 1, 1, 1], group=16),
        helper.make_node("Relu", ["c3"], ["r3"], name="relu3"),
        helper.make_node("Conv", ["r3", "w4", "b4"], ["c4"], name="conv4"),
        helper.make_node("GlobalAveragePool", ["c4"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "w5", "b5"], ["y"], name="fc", transB=1),
    ]
    inits = [_init("w1", w(16, 3, 3, 3)), _init("b1", b(16)), _init("w2", w(16, 16, 3, 3)), _init("b2", b(16)),
             _init("w3", w(16, 1, 3, 3)), _init("b3", b(16)), _init("w4", w(24, 16, 1, 1)), _init("b4", b(24)),
             _init("w5", w(10, 24)), _init("b5", b(10))]
    g = helper.make_graph(nodes, "tiny_chain", [helper.make_tensor_value_info("x", F, [1, 3, size, size])],
                          [helper.make_tensor_value_info("y", F, None)], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def tiny_residual(seed: int = 0, size: int = 8, channels: int = 8, shortcut: bool = True) -> onnx.ModelProto:
    """Two residual blocks (ResNet's pattern): a stem conv + relu; conv + relu, conv, add of the block's input,
    relu; then conv + relu, conv, add of a 1x1 projection shortcut of that block's input (``shortcut``; else of
    the input itself, so a group may span both blocks), relu; a global pool and a classifier. What ``--fuse``
    runs as groups with joins (the skip the group's input, an intermediate, or from outside)."""
    c = channels
    w, b = _conv_params(seed)
    conv = lambda x, wn, y, nm, **kw: helper.make_node("Conv", [x, wn, "b" + wn[1:]], [y], name=nm, **kw)
    nodes = [
        conv("x", "w0", "c0", "stem", pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c0"], ["r0"], name="relu0"),
        conv("r0", "w1", "c1", "b1.conv1", pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c1"], ["r1"], name="b1.relu1"),
        conv("r1", "w2", "c2", "b1.conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "r0"], ["a1"], name="b1.add"), helper.make_node("Relu", ["a1"], ["o1"], name="b1.relu"),
        conv("o1", "w3", "c3", "b2.conv1", pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c3"], ["r3"], name="b2.relu1"),
        conv("r3", "w4", "c4", "b2.conv2", pads=[1, 1, 1, 1]),
        *([conv("o1", "w5", "c5", "b2.shortcut")] if shortcut else []),
        helper.make_node("Add", ["c4", "c5" if shortcut else "o1"], ["a2"], name="b2.add"), helper.make_node("Relu", ["a2"], ["o2"], name="b2.relu"),
        helper.make_node("GlobalAveragePool", ["o2"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "w6", "b6"], ["y"], name="fc", transB=1),
    ]
    inits = [_init("w0", w(c, 3, 3, 3)), _init("b0", b(c))]
    inits += [x for k in (1, 2, 3, 4) for x in (_init(f"w{k}", w(c, c, 3, 3)), _init(f"b{k}", b(c)))]
    inits += [_init("w5", w(c, c, 1, 1)), _init("b5", b(c)), _init("w6", w(10, c)), _init("b6", b(10))]
    g = helper.make_graph(nodes, "tiny_residual", [helper.make_tensor_value_info("x", F, [1, 3, size, size])],
                          [helper.make_tensor_value_info("y", F, None)], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def tiny_ffn(seed: int = 0, seq: int = 8, d: int = 16, hidden: int = 32) -> onnx.ModelProto:
    """A transformer's feed-forward block in miniature (as in BERT): MatMul, bias Add, GELU, MatMul, bias Add,
    the residual Add of the block's input, layer norm."""
    rng = np.random.default_rng(seed)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="ffn1"),
        helper.make_node("Add", ["h", "b1"], ["hb"], name="ffn1.bias"),
        helper.make_node("Gelu", ["hb"], ["a"], name="gelu"),
        helper.make_node("MatMul", ["a", "w2"], ["o"], name="ffn2"),
        helper.make_node("Add", ["o", "b2"], ["ob"], name="ffn2.bias"),
        helper.make_node("Add", ["ob", "x"], ["res"], name="residual"),
        helper.make_node("LayerNormalization", ["res", "g", "b"], ["y"], name="ln", axis=-1),
    ]
    inits = [_init("w1", (rng.standard_normal((d, hidden)) / np.sqrt(d)).astype(np.float32)),
             _init("b1", 0.1 * rng.standard_normal(hidden).astype(np.float32)),
             _init("w2", (rng.standard_normal((hidden, d)) / np.sqrt(hidden)).astype(np.float32)),
             _init("b2", 0.1 * rng.standard_normal(d).astype(np.float32)),
             _init("g", (1 + 0.1 * rng.standard_normal(d)).astype(np.float32)),
             _init("b", 0.1 * rng.standard_normal(d).astype(np.float32))]
    g = helper.make_graph(nodes, "tiny_ffn", [helper.make_tensor_value_info("x", F, [1, seq, d])],
                          [helper.make_tensor_value_info("y", F, [1, seq, d])], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])


def tiny_mlp(seed: int = 0, rows: int = 16, d: int = 16, hidden: int = 32) -> onnx.ModelProto:
    """Two fully connected layers as PyTorch exports them on a 2-D input (Gemm with transB=1 and a bias), a ReLU
    between them: a dense chain fused along its rows."""
    rng = np.random.default_rng(seed)
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], name="fc1", transB=1),
        helper.make_node("Relu", ["h"], ["a"], name="relu"),
        helper.make_node("Gemm", ["a", "w2", "b2"], ["y"], name="fc2", transB=1),
    ]
    inits = [_init("w1", (rng.standard_normal((hidden, d)) / np.sqrt(d)).astype(np.float32)),
             _init("b1", 0.1 * rng.standard_normal(hidden).astype(np.float32)),
             _init("w2", (rng.standard_normal((d, hidden)) / np.sqrt(hidden)).astype(np.float32)),
             _init("b2", 0.1 * rng.standard_normal(d).astype(np.float32))]
    g = helper.make_graph(nodes, "tiny_mlp", [helper.make_tensor_value_info("x", F, [rows, d])],
                          [helper.make_tensor_value_info("y", F, [rows, d])], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def tiny_grouped(seed: int = 0, size: int = 8) -> onnx.ModelProto:
    """ResNeXt-like convolutions that chain: conv 3x3 + relu, a grouped conv 3x3 of 2 groups + relu, a grouped 1x1 conv
    of 4 groups; then a global pool and a classifier. What ``--fuse`` runs as a group of grouped convolutions."""
    w, b = _conv_params(seed)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="gconv2", pads=[1, 1, 1, 1], group=2),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"], name="gconv3", group=4),
        helper.make_node("GlobalAveragePool", ["c3"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "w4", "b4"], ["y"], name="fc", transB=1),
    ]
    inits = [_init("w1", w(8, 3, 3, 3)), _init("b1", b(8)), _init("w2", w(8, 4, 3, 3)), _init("b2", b(8)),
             _init("w3", w(12, 2, 1, 1)), _init("b3", b(12)), _init("w4", w(10, 12)), _init("b4", b(10))]
    g = helper.make_graph(nodes, "tiny_grouped", [helper.make_tensor_value_info("x", F, [1, 3, size, size])],
                          [helper.make_tensor_value_info("y", F, None)], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
