"""Builds the bundled weight-free ONNX models with ``onnx.helper``.

The graphs follow the reference definitions (torchvision for the CNNs, the
BERT paper / HuggingFace layout for the encoder layer) node for node where it
matters for compute: every Conv/Gemm/MatMul with its exact attributes, and the
host work around them (BatchNorm is folded into the convolutions, as inference
deployments do). Weights are graph inputs with static shapes, so the files
hold shapes only. The batch (and for BERT the sequence length) is symbolic.

Regenerate the files in ``accelmap/data/models`` with
``python -m accelmap.workload.models.zoo``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import onnx
from onnx import TensorProto, helper

OPSET = 20   # LayerNormalization (17) and Gelu (20) as single nodes
IR_VERSION = 9   # the oldest IR that carries opset 20, so onnx >= 1.15 reads the files


class GraphBuilder:
    """Appends nodes, tracking the channel count of the current activation."""

    def __init__(self, name: str, inputs: list[tuple[str, list]]):
        self.name = name
        self.nodes: list = []
        self.inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs]
        self.inits: list = []
        self._count: dict[str, int] = {}

    def _uniq(self, base: str) -> str:
        k = self._count.get(base, 0)
        self._count[base] = k + 1
        return base if k == 0 else f"{base}_{k}"

    def weight(self, name: str, shape: list[int]) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, shape))
        return name

    def const_i64(self, name: str, values: list[int]) -> str:
        # Shape operands of Reshape must be data, not graph inputs; they are tiny.
        self.inits.append(helper.make_tensor(name, TensorProto.INT64, [len(values)], values))
        return name

    def node(self, op: str, inputs: list[str], name: str | None = None, n_out: int = 1, **attrs) -> str:
        nm = self._uniq(name or op.lower())
        outs = [nm if i == 0 else f"{nm}:{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=nm, **attrs))
        return outs[0]

    def conv(self, x: str, name: str, cin: int, cout: int, k: int, stride: int = 1, pad: int | None = None,
             groups: int = 1, bias: bool = True) -> str:
        pad = (k // 2) if pad is None else pad
        w = self.weight(f"{name}.weight", [cout, cin // groups, k, k])
        ins = [x, w] + ([self.weight(f"{name}.bias", [cout])] if bias else [])
        return self.node("Conv", ins, name, kernel_shape=[k, k], strides=[stride, stride],
                         pads=[pad] * 4, dilations=[1, 1], group=groups)

    def fc(self, x: str, name: str, cin: int, cout: int) -> str:
        w = self.weight(f"{name}.weight", [cout, cin])
        b = self.weight(f"{name}.bias", [cout])
        return self.node("Gemm", [x, w, b], name, transB=1)

    def model(self, out: str, out_shape: list, meta: dict[str, str] | None = None,
              doc: str = "") -> onnx.ModelProto:
        y = helper.make_tensor_value_info(out, TensorProto.FLOAT, out_shape)
        graph = helper.make_graph(self.nodes, self.name, self.inputs, [y], initializer=self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="accelmap.workload.models.zoo", doc_string=doc)
        m.ir_version = IR_VERSION
        for k, v in (meta or {}).items():
            m.metadata_props.append(onnx.StringStringEntryProto(key=k, value=v))
        onnx.checker.check_model(m)
        return m


def _image_input() -> list[tuple[str, list]]:
    return [("image", ["batch", 3, 224, 224])]


def _classifier(b: GraphBuilder, x: str, cin: int) -> str:
    x = b.node("GlobalAveragePool", [x], "avgpool")
    x = b.node("Flatten", [x], "flatten", axis=1)
    return b.fc(x, "fc", cin, 1000)


def resnet(depth: int) -> onnx.ModelProto:
    """torchvision resnet18 / resnet50 (v1.5: the stride sits in the 3x3 conv)."""
    blocks = {18: [2, 2, 2, 2], 50: [3, 4, 6, 3]}[depth]
    bottleneck = depth >= 50
    b = GraphBuilder(f"resnet{depth}", _image_input())
    x = b.node("Relu", [b.conv("image", "conv1", 3, 64, 7, stride=2, pad=3)], "relu")
    x = b.node("MaxPool", [x], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for stage, (n_blocks, width) in enumerate(zip(blocks, [64, 128, 256, 512], strict=True), start=1):
        for i in range(n_blocks):
            stride = 2 if (i == 0 and stage > 1) else 1
            p = f"layer{stage}.{i}"
            if bottleneck:
                cout = width * 4
                y = b.node("Relu", [b.conv(x, f"{p}.conv1", cin, width, 1)], f"{p}.relu1")
                y = b.node("Relu", [b.conv(y, f"{p}.conv2", width, width, 3, stride)], f"{p}.relu2")
                y = b.conv(y, f"{p}.conv3", width, cout, 1)
            else:
                cout = width
                y = b.node("Relu", [b.conv(x, f"{p}.conv1", cin, width, 3, stride)], f"{p}.relu1")
                y = b.conv(y, f"{p}.conv2", width, width, 3)
            short = x
            if stride != 1 or cin != cout:
                short = b.conv(x, f"{p}.downsample", cin, cout, 1, stride)
            x = b.node("Relu", [b.node("Add", [y, short], f"{p}.add")], f"{p}.relu")
            cin = cout
    out = _classifier(b, x, cin)
    return b.model(out, ["batch", 1000], doc=f"torchvision resnet{depth}, BatchNorm folded, weight-free")


def vgg16() -> onnx.ModelProto:
    """torchvision vgg16 (configuration D, no batch norm)."""
    cfg: list[int | str] = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]
    b = GraphBuilder("vgg16", _image_input())
    x, cin, i = "image", 3, 0
    for v in cfg:
        if isinstance(v, str):   # "M"
            x = b.node("MaxPool", [x], "maxpool", kernel_shape=[2, 2], strides=[2, 2])
            continue
        x = b.node("Relu", [b.conv(x, f"features.{i}", cin, v, 3)], "relu")
        cin, i = v, i + 1
    # torchvision's AdaptiveAvgPool2d((7, 7)) is the identity at 224x224; kept as host work.
    x = b.node("AveragePool", [x], "avgpool", kernel_shape=[1, 1])
    x = b.node("Flatten", [x], "flatten", axis=1)
    for j, (cin, cout) in enumerate([(512 * 7 * 7, 4096), (4096, 4096)]):
        x = b.node("Relu", [b.fc(x, f"classifier.{j}", cin, cout)], "relu")
    out = b.fc(x, "classifier.2", 4096, 1000)
    return b.model(out, ["batch", 1000], doc="torchvision vgg16, weight-free")


def mobilenet_v2() -> onnx.ModelProto:
    """torchvision mobilenet_v2 (width 1.0, 224x224)."""
    b = GraphBuilder("mobilenetv2", _image_input())
    b.inits += [helper.make_tensor("relu6.min", TensorProto.FLOAT, [], [0.0]),
                helper.make_tensor("relu6.max", TensorProto.FLOAT, [], [6.0])]
    relu6 = lambda x, n: b.node("Clip", [x, "relu6.min", "relu6.max"], n)
    x = relu6(b.conv("image", "features.0", 3, 32, 3, stride=2), "features.0.relu6")
    cin = 32
    # (expansion t, output channels c, repeats n, first stride s): Table 2 of Sandler et al. 2018
    settings = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                (6, 160, 3, 2), (6, 320, 1, 1)]
    idx = 1
    for t, c, n, s in settings:
        for i in range(n):
            stride = s if i == 0 else 1
            p = f"features.{idx}"
            hidden = cin * t
            y = x
            if t != 1:
                y = relu6(b.conv(y, f"{p}.expand", cin, hidden, 1), f"{p}.expand.relu6")
            y = relu6(b.conv(y, f"{p}.dw", hidden, hidden, 3, stride, groups=hidden), f"{p}.dw.relu6")
            y = b.conv(y, f"{p}.project", hidden, c, 1)
            if stride == 1 and cin == c:
                y = b.node("Add", [x, y], f"{p}.add")
            x, cin, idx = y, c, idx + 1
    x = relu6(b.conv(x, f"features.{idx}", cin, 1280, 1), f"features.{idx}.relu6")
    out = _classifier(b, x, 1280)
    return b.model(out, ["batch", 1000], doc="torchvision mobilenet_v2, BatchNorm folded, weight-free")


def bert_base_layer(default_seq_len: int = 128) -> onnx.ModelProto:
    """One BERT-base encoder layer: hidden 768, 12 heads of 64, FFN 3072, post-LN."""
    d, heads, dh, ff = 768, 12, 64, 3072
    b = GraphBuilder("bert_base_layer", [("hidden", ["batch", "seq", d])])
    heads_shape = b.const_i64("shape.heads", [0, 0, heads, dh])    # 0 keeps batch and seq
    merged_shape = b.const_i64("shape.merged", [0, 0, d])

    def proj(x: str, name: str, cin: int, cout: int) -> str:
        y = b.node("MatMul", [x, b.weight(f"{name}.weight", [cin, cout])], name)
        return b.node("Add", [y, b.weight(f"{name}.bias", [cout])], f"{name}.bias_add")

    def split_heads(x: str, name: str, perm: list[int]) -> str:
        x = b.node("Reshape", [x, heads_shape], f"{name}.reshape")
        return b.node("Transpose", [x], f"{name}.transpose", perm=perm)

    q = split_heads(proj("hidden", "attention.query", d, d), "query", [0, 2, 1, 3])   # [b,h,s,dh]
    kt = split_heads(proj("hidden", "attention.key", d, d), "key", [0, 2, 3, 1])      # [b,h,dh,s]
    v = split_heads(proj("hidden", "attention.value", d, d), "value", [0, 2, 1, 3])   # [b,h,s,dh]
    scores = b.node("MatMul", [q, kt], "attention.scores")                             # [b,h,s,s]
    b.inits.append(helper.make_tensor("sqrt_dh", TensorProto.FLOAT, [], [float(dh) ** 0.5]))
    scores = b.node("Div", [scores, "sqrt_dh"], "attention.scale")
    probs = b.node("Softmax", [scores], "attention.softmax", axis=-1)
    ctx = b.node("MatMul", [probs, v], "attention.context")                             # [b,h,s,dh]
    ctx = b.node("Transpose", [ctx], "context.transpose", perm=[0, 2, 1, 3])
    ctx = b.node("Reshape", [ctx, merged_shape], "context.reshape")
    att = proj(ctx, "attention.output", d, d)
    x = b.node("Add", [att, "hidden"], "attention.residual")
    x = b.node("LayerNormalization", [x, b.weight("ln1.weight", [d]), b.weight("ln1.bias", [d])], "ln1", axis=-1)
    h = b.node("Gelu", [proj(x, "ffn.intermediate", d, ff)], "ffn.gelu")
    y = proj(h, "ffn.output", ff, d)
    y = b.node("Add", [y, x], "ffn.residual")
    out = b.node("LayerNormalization", [y, b.weight("ln2.weight", [d]), b.weight("ln2.bias", [d])], "ln2", axis=-1)
    return b.model(out, ["batch", "seq", d], meta={"accelmap.default.seq_len": str(default_seq_len)},
                   doc="BERT-base encoder layer (Devlin et al. 2019), weight-free; batch and seq symbolic")


BUILDERS = {
    "resnet18": lambda: resnet(18),
    "resnet50": lambda: resnet(50),
    "vgg16": vgg16,
    "mobilenetv2": mobilenet_v2,
    "bert_base_layer": bert_base_layer,
}


def write_all(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for name, build in BUILDERS.items():
        p = directory / f"{name}.onnx"
        tmp = p.with_suffix(".onnx.tmp")
        tmp.write_bytes(build().SerializeToString())
        tmp.replace(p)
        out.append(p)
    return out


def main(argv: list[str]) -> None:
    from importlib import resources

    target = Path(argv[0]) if argv else Path(str(resources.files("accelmap") / "data" / "models"))
    for p in write_all(target):
        print(f"{p}  {p.stat().st_size:,} bytes")


if __name__ == "__main__":
    main(sys.argv[1:])
