"""accelmap compile on the other matrix products: broadcast-batch MatMul, Einsum, ConvTranspose (onnxruntime)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).parent))
from accelmap.arch.presets import get_accelerator  # noqa: E402
from accelmap.compile import compile_model  # noqa: E402
from accelmap.errors import SpecError  # noqa: E402
from compile_models import (  # noqa: E402
    broadcast_matmul_chain,
    broadcast_matmuls,
    conv_transposes,
    conv_transposes_sized,
    matrix_einsums,
    quantize_qdq,  # noqa: E402
)

pytest.importorskip("onnxruntime")

FAST = {"time_limit_per_layer": 0.3}


def _passes(r) -> None:
    assert r.verification is not None and r.verification.ok, r.verification.summary()
    # every output compared, every tile program moved what the cost model counts
    assert len(r.verification.outputs) == len(r.graph.outputs)
    assert r.counts_checked and all(r.counts_checked.values())


def test_broadcast_batch_matmuls_run_on_the_accelerator_and_match(tmp_path):
    m, dims = broadcast_matmuls()
    r = compile_model(m, get_accelerator("vta_like"), tmp_path, dims=dims, **FAST)
    _passes(r)
    assert [s.placement for s in r.steps] == ["accelerator"] * 7
    ops = {s: r.layer_of[s].layer.operator for s in r.layer_of}
    # a shared weight: batch rows are more rows of one GEMM (M = 2*3)
    assert ops["matmul0"].kind == "matmul" and dict(ops["matmul0"].dims) == {"M": 6, "N": 5, "K": 8}
    # a broadcast operand is indexed by its own batch axes only (its reuse is visible to the cost model)
    b3 = next(X for X in ops["matmul3"].operands if X.name == "B")
    assert ops["matmul3"].kind == "batched_matmul" and len(b3.indices) == 3


def test_qdq_broadcast_matmul_is_bit_exact(tmp_path):
    q = quantize_qdq(broadcast_matmul_chain())
    r = compile_model(q, get_accelerator("vta_like"), tmp_path, **FAST)
    assert r.verification is not None and r.verification.ok, r.verification.summary()
    v = r.verification
    assert v.quantized and all(c.ok for c in v.quantized)
    steps = {s.name: s for s in r.steps}
    # [3,2,3,8] x W[8,6]: an integer product (its intrinsic program on vta_like)
    assert steps["proj"].dtype == "int" and r.program.layers["proj"].intrinsic is not None
    # [3,2,3,6] x W2[2,6,5]: onnxruntime's quantizer scales W2 along axis 1, the reduction axis, which cannot
    # be factored out of an integer sum, so the product runs in float, as the file says
    assert steps["heads"].dtype == "fp32" and steps["heads"].placement == "accelerator"


def test_matrix_einsums_run_on_the_accelerator_and_match(tmp_path):
    m, dims = matrix_einsums()
    r = compile_model(m, get_accelerator("tpu_like"), tmp_path, dims=dims, **FAST)
    _passes(r)
    assert [s.op_type for s in r.steps] == ["Einsum"] * 7
    assert all(s.placement == "accelerator" for s in r.steps)


def _einsum_model(equation: str, shapes: list[list[int]]):
    ins = [helper.make_tensor_value_info(f"a{i}", TensorProto.FLOAT, [f"d{i}", *s[1:]]) for i, s in enumerate(shapes)]
    nodes = [helper.make_node("Einsum", [f"a{i}" for i in range(len(shapes))], ["e"], name="odd", equation=equation),
             helper.make_node("MatMul", ["a0", "a0"], ["y2"], name="mm")]
    g = helper.make_graph(nodes, "e", ins, [helper.make_tensor_value_info("e", TensorProto.FLOAT, None),
                                            helper.make_tensor_value_info("y2", TensorProto.FLOAT, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), {f"d{i}": s[0]
                                                                                for i, s in enumerate(shapes)}


@pytest.mark.parametrize("equation, shapes, why", [
    ("ij->ji", [[4, 4]], r"node 'odd' \(Einsum\): equation 'ij->ji' is not a product of two operands"),
    ("ii,ij->ij", [[4, 4], [4, 4]], r"node 'odd' \(Einsum\): equation 'ii,ij->ij' repeats an index"),
    ("ij,jk,kl->il", [[4, 4], [4, 4], [4, 4]], r"node 'odd' \(Einsum\): einsum of 3 operands \('ij,jk,kl->il'\)"),
])
def test_an_einsum_that_is_not_a_matrix_product_is_one_clear_error(equation, shapes, why, tmp_path):
    m, dims = _einsum_model(equation, shapes)
    with pytest.raises(SpecError, match=why):
        compile_model(m, get_accelerator("vta_like"), tmp_path, dims=dims, run=False, simulate=False, **FAST)


def test_conv_transpose_runs_as_its_gemm_and_matches(tmp_path):
    m, dims = conv_transposes()
    r = compile_model(m, get_accelerator("eyeriss_like"), tmp_path, dims=dims, **FAST)
    _passes(r)
    ops = {s: r.layer_of[s].layer.operator for s in r.layer_of}
    assert set(ops) == {"up0", "up1", "up2"}
    assert all(dict(op.attrs).get("lowered_from") == "ConvTranspose" for op in ops.values())
    # up1 (batch 2, 4 input channels in 2 groups, 3 output channels per group, 2x3 kernel, 3x4 input): a GEMM
    # per group over the 2*3*4 input pixels, one MAC per (pixel, input channel, output channel of its group,
    # tap) = N*C*H*W*Kg*R*S: no inserted zeros are multiplied
    assert ops["up1"].kind == "batched_matmul" and dict(ops["up1"].dims) == {"B": 2, "M": 24, "N": 18, "K": 2}
    assert ops["up1"].macs == 2 * 4 * 3 * 4 * 3 * 2 * 3
    main = (r.program.folder / "main.c").read_text()
    assert main.count("col2im(") == 4     # definition + three calls
    assert np.prod(r.graph.shape("y0")) == 3 * 11 * 7
    # the host work around up0's GEMM: the input transposed (80 elements read and written), the 20 x 27
    # products read and scattered onto the 3 x 11 x 7 output (no bias): host-model cycles at 4 elements a cycle
    t = r.timing
    assert t is not None
    up0 = next(s for s in t.steps if s.name == "up0")
    assert up0.host == (2 * 80 + 20 * 27 + 3 * 11 * 7) / 4
    assert up0.total == up0.simulated + up0.host and up0.host_energy_pj > 0


def test_conv_transpose_sized_by_auto_pad_or_output_shape_matches(tmp_path):
    r = compile_model(conv_transposes_sized(), get_accelerator("eyeriss_like"), tmp_path, simulate=False, **FAST)
    _passes(r)
    assert [r.graph.shape(f"y{i}") for i in range(4)] == [(1, 3, 8, 10), (1, 3, 8, 10), (1, 4, 8, 13), (1, 2, 10)]
    main = (r.program.folder / "main.c").read_text()
    # total padding 1 per axis for SAME: SAME_UPPER begins with 0 of it, SAME_LOWER with 1 (ONNX, onnxruntime)
    calls = [ln for ln in main.splitlines() if ln.strip().startswith("col2im(")]
    assert calls[0].endswith("2L, 2L, 1L, 1L, 0L, 0L);") and calls[1].endswith("2L, 2L, 1L, 1L, 1L, 1L);")


def test_conv_transpose_output_shape_larger_than_the_input_gives_is_one_clear_error(tmp_path):
    m = conv_transposes_sized()
    for a in m.graph.node[3].attribute:
        if a.name == "output_shape":
            a.ints[:] = [14]
    with pytest.raises(SpecError, match=r"sized_1d.*output size 14 on axis 2 is larger than the input gives \(13\)"):
        compile_model(m, get_accelerator("eyeriss_like"), tmp_path, run=False, simulate=False, **FAST)
