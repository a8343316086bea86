"""The reader keeps the graph and every tensor's type and dims, and drops large tensor payloads."""

from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper

from accelmap.workload.onnx_import import import_onnx
from accelmap.workload.onnx_read import LARGE, read_onnx
from onnx_graphs import F, graph_model, init, node


def test_large_payloads_are_dropped_small_values_kept(tmp_path):
    big = numpy_helper.from_array(np.ones((64, 256), np.float32), "w")          # 64 KiB of raw_data
    big_const = helper.make_node("Constant", [], ["w2"], name="w2",
                                 value=numpy_helper.from_array(np.ones((256, 64), np.float32)))
    nodes = [node("Reshape", ["x", "target"], ["r"]), node("MatMul", ["r", "w"], ["h"]), big_const,
             node("MatMul", ["h", "w2"], ["y"])]
    m = graph_model(nodes, [("x", F, [2, 4, 16])], inits=[big, init("target", [8, 64])])
    p = tmp_path / "embedded.onnx"
    p.write_bytes(m.SerializeToString())
    assert p.stat().st_size > (64 * 256 + 256 * 64) * 4

    slim = read_onnx(p)
    w = next(t for t in slim.graph.initializer if t.name == "w")
    assert list(w.dims) == [64, 256] and w.data_type == F and len(w.raw_data) == 0
    target = next(t for t in slim.graph.initializer if t.name == "target")
    assert numpy_helper.to_array(target).tolist() == [8, 64]       # a reshape target keeps its value
    const = slim.graph.node[2].attribute[0].t
    assert list(const.dims) == [256, 64] and len(const.raw_data) == 0
    assert slim.ByteSize() < LARGE

    out = import_onnx(p)
    assert out.total_macs == 8 * 64 * 256 + 8 * 256 * 64


def test_an_in_memory_model_is_imported_without_copying_its_weights_into_every_round():
    from accelmap.workload.onnx_read import strip_payloads

    big = numpy_helper.from_array(np.ones((64, 256), np.float32), "w")
    m = graph_model([node("MatMul", ["x", "w"], ["y"])], [("x", F, [3, 64])], inits=[big])
    assert import_onnx(m).total_macs == 3 * 64 * 256
    assert len(m.graph.initializer[0].raw_data) == 64 * 256 * 4      # the caller's model is untouched
    strip_payloads(m)
    assert len(m.graph.initializer[0].raw_data) == 0 and list(m.graph.initializer[0].dims) == [64, 256]
