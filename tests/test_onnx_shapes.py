"""Shapes through shape arithmetic, binding symbolic dims by name, and the unknown-shape error."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner
from onnx import TensorProto

from accelmap.cli import main
from accelmap.errors import SpecError
from accelmap.workload.onnx_import import import_onnx
from onnx_graphs import F, I64, census, const, graph_model, init, node, weight


def attention_block():
    """A GPT-2-like block exported with a dynamic sequence axis: head_dim = Shape(x)[2] / heads,
    computed through Div and a float round trip (Cast), as the legacy exporter writes it."""
    nodes = [
        node("MatMul", ["x", "wq"], ["q"]),
        node("Shape", ["x"], ["s"]),
        const("i0", 0), const("i1", 1), const("i2", 2), const("heads", 8),
        node("Gather", ["s", "i0"], ["b"], axis=0),
        node("Gather", ["s", "i1"], ["sq"], axis=0),
        node("Gather", ["s", "i2"], ["d"], axis=0),
        node("Div", ["d", "heads"], ["hd"]),
        node("Cast", ["hd"], ["hdf"], to=TensorProto.FLOAT),
        node("Cast", ["hdf"], ["hdi"], to=TensorProto.INT64),
        node("Unsqueeze", ["b", "ax0"], ["bu"]), node("Unsqueeze", ["sq", "ax0"], ["squ"]),
        node("Unsqueeze", ["hdi", "ax0"], ["hdu"]),
        node("Concat", ["bu", "squ", "h1", "hdu"], ["shp"], axis=0),
        node("Reshape", ["q", "shp"], ["q4"]),
        node("Transpose", ["q4"], ["qh"], perm=[0, 2, 1, 3]),
        node("Transpose", ["qh"], ["kt"], perm=[0, 1, 3, 2]),
        node("MatMul", ["qh", "kt"], ["scores"]),
        node("Softmax", ["scores"], ["p"], axis=-1),
        node("MatMul", ["p", "qh"], ["ctx"]),
        node("Transpose", ["ctx"], ["ctx2"], perm=[0, 2, 1, 3]),
        node("Mul", ["hd", "heads"], ["width"]),
        node("Unsqueeze", ["width", "ax0"], ["wu"]),
        node("Concat", ["bu", "squ", "wu"], ["shp3"], axis=0),
        node("Reshape", ["ctx2", "shp3"], ["merged"]),
        node("MatMul", ["merged", "wo"], ["y"]),
    ]
    inits = [init("ax0", [0]), init("h1", [8]), weight("wq", [64, 64]), weight("wo", [64, 64])]
    return graph_model(nodes, [("x", F, ["batch", "sequence", 64])], inits=inits)


def test_head_dim_from_shape_arithmetic_with_a_dynamic_sequence_axis():
    b, s = 2, 13
    m = import_onnx(attention_block(), batch=b, seq_len=s)
    assert m.total_macs == 2 * (b * s * 64 * 64) + 2 * (b * 8 * s * s * 8)
    assert census(m) == {"MatMul": 4}
    kinds = sorted(l.operator.kind for l in m.layers)
    assert kinds == ["batched_matmul", "batched_matmul", "matmul"]   # q and o projections are one layer


def window_and_chunk():
    """Swin-style pad to a multiple of the window, ShuffleNet-style chunk -> Slice, all from Shape."""
    nodes = [
        node("Shape", ["x"], ["s"]),
        const("i1", 1), const("i3", 3), const("win", 7), const("two", 2),
        node("Gather", ["s", "i3"], ["w"], axis=0),
        node("Mod", ["w", "win"], ["r1"]), node("Sub", ["win", "r1"], ["r2"]), node("Mod", ["r2", "win"], ["pad"]),
        node("Unsqueeze", ["pad", "ax0"], ["padu"]),
        node("Concat", ["z", "z", "z", "z", "z", "z", "padu", "padu"], ["pads"], axis=0),
        node("Pad", ["x", "pads"], ["xp"]),
        node("Conv", ["xp", "wwin"], ["win_out"], strides=[7, 7]),
        node("Gather", ["s", "i1"], ["c"], axis=0),
        node("Div", ["c", "two"], ["half"]),
        node("Unsqueeze", ["half", "ax0"], ["halfu"]),
        node("Slice", ["xp", "z", "halfu", "one"], ["x1"]),
        node("Conv", ["x1", "wpw"], ["y"]),
    ]
    inits = [init("ax0", [0]), init("z", [0]), init("one", [1]), weight("wwin", [8, 4, 7, 7]),
             weight("wpw", [3, 2, 1, 1])]
    return graph_model(nodes, [("x", F, [1, 4, "height", "width"])], inits=inits,
                       outputs=[("y", F, None), ("win_out", F, None)])


def test_pad_amounts_and_chunk_slices_from_shape_arithmetic_with_named_dims():
    m = import_onnx(window_and_chunk(), dims={"height": 13, "width": 13})
    # Pad 13 -> 14 on both axes; 7x7/7 windows -> 2x2; half the 4 channels -> 1x1 conv on 2 channels.
    assert m.total_macs == 8 * 4 * 2 * 2 * 49 + 3 * 2 * 14 * 14
    assert dict(m.params) == {"height": 13, "width": 13}
    assert m.layers[0].operator.sizes["P"] == 2


def test_cli_dim_option_is_repeatable(tmp_path):
    p = tmp_path / "w.onnx"
    p.write_bytes(window_and_chunk().SerializeToString())
    res = CliRunner().invoke(main, ["import", str(p), "--dim", "height=13", "--dim", "width=13", "--json"])
    assert res.exit_code == 0, res.output
    assert f'"total_macs": {8 * 4 * 2 * 2 * 49 + 3 * 2 * 14 * 14}' in res.output and '"height": 13' in res.output
    bad = CliRunner().invoke(main, ["import", str(p), "--dim", "height"])
    assert bad.exit_code == 2 and "NAME=VALUE" in bad.output


def test_unbound_named_dim_asks_for_dim_not_batch_or_seq_len():
    with pytest.raises(SpecError, match=r"symbolic size 'height'.*--dim height=VALUE") as e:
        import_onnx(window_and_chunk(), dims={"width": 13})
    assert "--batch" not in str(e.value) and "--seq-len" not in str(e.value)
    with pytest.raises(SpecError, match=r"--dim depth given, but the model has no symbolic dimension"):
        import_onnx(window_and_chunk(), dims={"height": 13, "width": 13, "depth": 2})


def test_unresolved_shape_names_the_node_and_the_dim():
    # The reshape target is a graph input: its value is not known before run time.
    nodes = [node("Reshape", ["x", "target"], ["r"]), node("MatMul", ["r", "w"], ["y"])]
    m = graph_model(nodes, [("x", F, [4, 6]), ("target", I64, [2])], inits=[weight("w", [6, 5])])
    with pytest.raises(SpecError) as e:
        import_onnx(m)
    msg = str(e.value)
    assert "node 'y' (MatMul): shape of input A 'r'" in msg
    assert "unknown at axis 0" in msg and "axis 1" in msg
    assert "first lost at node 'r' (Reshape), whose input 'target' is a value that could not be computed" in msg
    assert "--batch" not in msg and "--seq-len" not in msg and ".py" not in msg


def test_float_round_trip_through_a_value_float_constant():
    # head size = float(Shape(x)[2]) / 8.0 cast back to int64, the 8.0 a Constant(value_float)
    from onnx import helper
    nodes = [node("Shape", ["x"], ["s"]), const("i2", 2), node("Gather", ["s", "i2"], ["d"], axis=0),
             node("Cast", ["d"], ["df"], to=TensorProto.FLOAT),
             helper.make_node("Constant", [], ["h"], name="h", value_float=8.0),
             node("Div", ["df", "h"], ["hf"]), node("Cast", ["hf"], ["hd"], to=TensorProto.INT64),
             node("Unsqueeze", ["hd", "ax0"], ["hu"]), node("Concat", ["m1", "e8", "hu"], ["shp"], axis=0),
             node("Reshape", ["x", "shp"], ["r"]), node("MatMul", ["r", "w"], ["y"])]
    m = graph_model(nodes, [("x", F, [2, 5, 64])],
                    inits=[init("ax0", [0]), init("m1", [-1]), init("e8", [8]), weight("w", [8, 3])])
    assert import_onnx(m).total_macs == (2 * 5 * 8) * 8 * 3
