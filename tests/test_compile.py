"""accelmap compile: tiny float and int8 QDQ networks to one C program, checked against onnxruntime."""

from __future__ import annotations

import dataclasses
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).parent))
from accelmap.arch.intrinsics import get_intrinsic  # noqa: E402
from accelmap.arch.presets import get_accelerator  # noqa: E402
from accelmap.compile import compile_model  # noqa: E402
from accelmap.compile.graph import load_graph  # noqa: E402
from accelmap.compile.verify import random_inputs, run_program, verify  # noqa: E402
from accelmap.errors import SpecError  # noqa: E402
from accelmap.report.compile_report import report_html  # noqa: E402
from compile_models import quantize_qdq, tiny_attention, tiny_classifier, tiny_cnn, tiny_pools  # noqa: E402

pytest.importorskip("onnxruntime")

FAST = {"time_limit_per_layer": 0.3}


@pytest.fixture(scope="module")
def cnn_vta(tmp_path_factory):
    return compile_model(tiny_cnn(), get_accelerator("vta_like"), tmp_path_factory.mktemp("cnn"), **FAST)


@pytest.fixture(scope="module")
def qdq_tpu(tmp_path_factory):
    q = quantize_qdq(tiny_cnn())
    return compile_model(q, get_accelerator("tpu_like"), tmp_path_factory.mktemp("qdq"), **FAST)


def test_float_cnn_matches_onnxruntime(cnn_vta):
    r = cnn_vta
    assert r.verification is not None and r.verification.ok
    # conv1, dw2 and fc on the accelerator, everything else on the host
    assert [s.name for s in r.steps if s.placement == "accelerator"] == ["conv1", "dw2", "fc"]
    assert {s.op_type for s in r.steps if s.placement == "host"} == {
        "Relu", "MaxPool", "Add", "Clip", "GlobalAveragePool", "Flatten", "Softmax"}
    # the emitted tile programs moved exactly what the cost model counts
    assert r.counts_checked == {"conv1": True, "dw2": True, "fc": True}
    # vta_like's GEMM intrinsic multiplies integers: a float network is not embedded (see the QDQ tests)
    assert r.intrinsics == []
    # one build command, a Makefile, and the program's files
    names = {p.name for p in r.program.folder.iterdir()}
    assert {"main.c", "weights.bin", "Makefile", "net", "layer_0.c", "layer_1.c", "layer_2.c"} <= names


@pytest.fixture(scope="module")
def qdq_vta(tmp_path_factory):
    return compile_model(quantize_qdq(tiny_cnn()), get_accelerator("vta_like"), tmp_path_factory.mktemp("qvta"),
                         **FAST)


def test_float_layers_run_tile_programs_even_where_the_intrinsic_embeds(cnn_vta):
    assert {s: (c.runs, c.reason) for s, c in cnn_vta.program.layers.items()} == {
        "conv1": ("tile program (mapper)", "a float step: the intrinsic multiplies integers"),
        "dw2": ("tile program (mapper)", "a float step: the intrinsic multiplies integers"),
        "fc": ("tile program (mapper)", "a float step: the intrinsic multiplies integers")}
    assert not cnn_vta.calls_checked


def test_qdq_on_vta_runs_the_intrinsic_programs_bit_exact(qdq_vta, tmp_path):
    r = qdq_vta
    v = r.verification
    assert v is not None and v.ok and v.quantized and all(c.ok and c.max_abs_diff == 0 for c in v.quantized)
    # the GEMM intrinsic embeds in every layer: TVM-like (strict) where that fills it, else the relaxed search's
    # im2col programs (conv1 has 3 input channels; the depthwise dw2 has no channel reduction for the z axis)
    assert {s: c.runs for s, c in r.program.layers.items()} == dict.fromkeys(["conv1", "dw2", "fc"],
                                                                            "intrinsic program (vta_gemm)")
    # the programs run in NumPy equal the operator; the depthwise convolution has no input-channel reduction for
    # the intrinsic's z axis, so only the relaxed search (im2col) embeds it
    modes = {c.layer: (c.mode, c.selected, c.checked) for c in r.intrinsics}
    assert modes == {"conv1": ("relaxed", True, True), "dw2": ("relaxed", True, True), "fc": ("strict", True, True)}
    src = (r.program.folder / r.program.layers["conv1"].file).read_text()
    assert "static void intrinsic_vta_gemm(" in src and "static long long pack_I(" in src
    assert "stencil unroll (im2col)" in src
    # the intrinsic programs issued exactly their planned calls; there are no transfer counters to compare
    assert r.calls_checked == {"conv1": True, "dw2": True, "fc": True} and r.counts_checked == {}
    assert r.run is not None
    k = [s.name for s in r.steps].index("conv1")
    prog = r.program.layers["conv1"].intrinsic.program
    assert r.run.counters[k][0] == prog.calls and r.run.counters[k].size == 1 + 3
    # the time and energy of an intrinsic step are its program's, not the unused mapping's
    t = r.timing
    assert t is not None
    st = {s.name: s for s in t.steps}
    assert st["conv1"].runs == "intrinsic program" and st["conv1"].simulated == t.sims["conv1@vta_gemm"].cycles
    assert st["conv1"].modeled == t.costs["conv1@vta_gemm"].latency
    assert st["conv1"].energy_pj == t.costs["conv1@vta_gemm"].energy_total != r.layer_of["conv1"].cost.energy_total
    assert "3 of 3 accelerator steps run intrinsic programs" in t.summary()
    # the packing C walks every packed element of each input (one read, one write) and scatters every packed
    # output element to the cleared stored output: that host work is timed by the host model
    walked = sum(math.prod(lay.packed) + (math.prod(lay.stored) if k == 0 else math.prod(lay.packed))
                 for k, lay in enumerate(prog.layouts))
    assert st["conv1"].packing == walked / 4 > 0
    # plus the requantization epilogue: the int32 sums read, the int8 outputs written
    n_out = math.prod(r.graph.shape(r.steps[k].outputs[0]))
    assert st["conv1"].host == st["conv1"].packing + 2 * n_out / 4
    assert f"takes {t.packing_cycles:,.0f} host-model cycles" in t.summary()
    page = report_html(r)
    assert "<td>intrinsic program (vta_gemm): vta_gemm embeds" in page and "searched under the intrinsic" in page
    assert "issued the planned number of intrinsic calls" in page and "(intrinsic program)</summary>" in page
    # the same network with tile programs only computes the same integers
    # (test_a_layer_the_intrinsic_cannot_embed_falls_back_to_its_tile_program mixes the two)
    tiles = compile_model(quantize_qdq(tiny_cnn()), get_accelerator("vta_like"), tmp_path, **FAST, simulate=False,
                          intrinsics="never")
    assert {c.runs for c in tiles.program.layers.values()} == {"tile program (mapper)"}
    assert tiles.run is not None and all(np.array_equal(tiles.run.outputs[k], r.run.outputs[k])
                                         for k in r.run.outputs)


def test_intrinsic_programs_are_timed_with_a_searched_nest_that_carries_a_certificate(qdq_vta):
    from accelmap.cost.model import evaluate
    from accelmap.embed.rank import intrinsic_constraints
    from accelmap.mapping.validate import validate

    r = qdq_vta
    arch = r.arch
    t = r.timing
    assert t is not None and set(r.nests) == {"conv1@vta_gemm", "dw2@vta_gemm", "fc@vta_gemm"}
    for key, n in r.nests.items():
        prog = r.program.layers[key.split("@")[0]].intrinsic.program
        pop, built, cons = intrinsic_constraints(prog, arch)
        validate(n.operator, arch, n.mapping)
        # every intrinsic dim stays whole on the PE array where the built nest puts it: one array step per call
        spatial = {(lp.axis, lp.dim): lp.bound for lp in n.mapping.loops if lp.axis is not None}
        assert all(spatial.get((ax, d)) == b for ax, dims in cons.spatial.items() for d, b in dims.items())
        assert not any(lp.dim.startswith("i_") and lp.axis is None and lp.bound > 1 for lp in n.mapping.loops)
        # the nest that times the program is never worse than the built one, and its certificate bounds it
        c = evaluate(n.operator, arch, n.mapping)
        assert n.value == pytest.approx(c.energy_total * c.latency) and n.value <= n.built_value
        assert n.searched and n.lower_bound is not None and n.lower_bound <= n.value * (1 + 1e-9)
        assert n.gap == pytest.approx(0.0 if n.proven else n.value / n.lower_bound - 1)
        assert t.costs[key].latency == c.latency and t.sims[key].cycles > 0
    d = r.to_dict()
    assert len(d["intrinsic_nests"]) == 3 and all(x["searched"] for x in d["intrinsic_nests"])
    assert "3 of 3 searched under the intrinsic's shape" in r.summary()


def test_policy_faster_keeps_the_intrinsic_only_where_it_is_modeled_faster(qdq_vta):
    from accelmap.compile.intrinsic_choice import intrinsic_choices

    layers = list(qdq_vta.mapping.layers)
    always = {c.layer: c for c in qdq_vta.intrinsics}
    faster = {c.layer: c for c in intrinsic_choices(layers, qdq_vta.arch, "faster")}
    assert set(faster) == set(always) == {"conv1", "dw2", "fc"}
    for lm in layers:
        c = faster[lm.name]
        assert c.latency == always[lm.name].latency
        assert c.selected == (c.latency < lm.cost.latency)
        if not c.selected:
            assert c.reason.startswith("the mapper's tile program is modeled faster")
    # on the tiny CNN every tile program is modeled well ahead (conv1: ~300 against ~780 cycles)
    assert not any(c.selected for c in faster.values())
    assert intrinsic_choices(layers, qdq_vta.arch, "never") == []


def test_a_layer_the_intrinsic_cannot_embed_falls_back_to_its_tile_program(tmp_path):
    """VTA's 8x8x8 GEMM variant cannot take the depthwise layer (its y axis needs an output dim in the weights
    but not in the data, and every output channel reads its own input channel): dw2 runs its tile program, says
    why, and the mixed program is still bit-exact."""
    arch = dataclasses.replace(get_accelerator("vta_like"),
                               intrinsics=(("vta_gemm_8x8x8", get_intrinsic("vta_gemm_8x8x8")),))
    r = compile_model(quantize_qdq(tiny_cnn()), arch, tmp_path, **FAST, simulate=False)
    assert r.verification is not None and r.verification.ok
    codes = r.program.layers
    assert codes["dw2"].runs == "tile program (mapper)"
    assert codes["dw2"].reason.startswith("vta_gemm_8x8x8: no embedding: axis y of vta_gemm_8x8x8 (size 8) must "
                                          "walk an output dimension of dw2")
    assert codes["conv1"].runs == codes["fc"].runs == "intrinsic program (vta_gemm_8x8x8)"
    assert r.counts_checked == {"dw2": True} and r.calls_checked == {"conv1": True, "fc": True}
    assert "runs the mapper's tile program (vta_gemm_8x8x8" not in r.summary()
    assert "layer_1 (dw2, int): tile program (mapper): vta_gemm_8x8x8: no embedding" in r.summary()


def test_program_runs_from_the_command_line_on_an_input_file(cnn_vta, tmp_path):
    r = cnn_vta
    x = random_inputs(r.graph, 5)["x"]
    (tmp_path / "in.bin").write_bytes(x.tobytes())
    subprocess.run([str(r.program.executable), str(r.program.folder / "weights.bin"), str(tmp_path / "in.bin"),
                    str(tmp_path / "out.bin")], check=True, capture_output=True)
    y = np.fromfile(tmp_path / "out.bin", dtype=np.float32)
    import onnxruntime as ort

    want = ort.InferenceSession(r.graph.model.SerializeToString()).run(None, {"x": x})[0].reshape(-1)
    assert y.shape == want.shape and np.allclose(y, want, rtol=0, atol=1e-5 * np.abs(want).max())


def test_qdq_int8_is_bit_exact_at_every_quantized_value(qdq_tpu):
    v = qdq_tpu.verification
    assert v is not None and v.ok
    # every Conv/Gemm runs as an integer product with its DequantizeLinear/QuantizeLinear folded in
    acc = [s for s in qdq_tpu.steps if s.placement == "accelerator"]
    assert [s.dtype for s in acc] == ["int"] * 3 and all(len(s.fused) == 2 for s in acc)
    assert len(v.quantized) >= 8 and all(c.ok and c.max_abs_diff == 0 for c in v.quantized)
    assert "integer form" in v.reference
    # every accelerator step's transfer counters equal the cost model's on tpu_like too
    assert qdq_tpu.counts_checked == {"conv1": True, "dw2": True, "fc": True}
    # a different input: still bit-exact
    assert verify(qdq_tpu.program, qdq_tpu.graph, random_inputs(qdq_tpu.graph, 7)).ok


def test_integer_form_states_each_integer_product_as_one_op(qdq_tpu):
    from accelmap.compile.integer_form import integer_form

    m = integer_form(qdq_tpu.graph, qdq_tpu.steps)
    ops = [n.op_type for n in m.graph.node]
    assert ops.count("QLinearConv") == 2 and ops.count("QGemm") == 1 and "Conv" not in ops and "Gemm" not in ops
    # the QuantizeLinear nodes folded into the products are gone; the others stay
    folded = {s.qdq_nodes[2].output[0] for s in qdq_tpu.steps if s.dtype == "int"}
    assert not any(n.op_type == "QuantizeLinear" and n.output[0] in folded for n in m.graph.node)
    onnx.checker.check_model(m)


def test_activation_zero_points_need_a_wide_operand(tmp_path):
    """Asymmetric int8 activations: exact on eyeriss_like (16-bit operands take x - zero point), refused with
    one line on vta_like (8-bit operands cannot hold it)."""
    q = quantize_qdq(tiny_cnn(), symmetric_activations=False)
    zps = [int(numpy_helper.to_array(t)) for t in q.graph.initializer if t.name.endswith("_zero_point")
           and numpy_helper.to_array(t).size == 1]
    assert any(zps)
    r = compile_model(q, get_accelerator("eyeriss_like"), tmp_path / "e", **FAST, simulate=False)
    assert r.verification is not None and r.verification.ok and all(c.ok for c in r.verification.quantized)
    with pytest.raises(SpecError, match="does not fit the accelerator's 8-bit operand"):
        compile_model(q, get_accelerator("vta_like"), tmp_path / "v", **FAST, run=False, simulate=False)


def _float_softmax_reading_misses(q: onnx.ModelProto, steps) -> int:
    """How many softmax outputs the float reading, QuantizeLinear(Softmax(DequantizeLinear(x))) in float32,
    gets wrong against onnxruntime's QLinearSoftmax on the same integer input (the integer form's)."""
    from accelmap.compile.integer_form import integer_form
    from accelmap.compile.verify import run_onnxruntime
    g = load_graph(q)
    m = integer_form(g, steps)
    sm = next(n for n in m.graph.node if n.op_type == "QLinearSoftmax")
    init = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    ref = run_onnxruntime(m, g, random_inputs(g, 0), [sm.input[0], sm.output[0]])
    xs, xz, ys, yz = (init[sm.input[i]] for i in (1, 2, 3, 4))
    x = (ref[sm.input[0]].astype(np.float32) - np.float32(xz)) * xs
    e = np.exp(x - x.max(-1, keepdims=True))
    p = (e / e.sum(-1, keepdims=True)).astype(np.float32)
    reading = np.clip(np.rint(p / ys) + yz, -128, 127)
    return int((reading != ref[sm.output[0]]).sum())


@pytest.mark.parametrize("seed", [0, 2])
def test_qdq_softmax_and_global_pool_are_onnxruntimes_integer_kernels(seed, tmp_path):
    """DequantizeLinear -> Softmax / GlobalAveragePool -> QuantizeLinear run as onnxruntime's QLinearSoftmax and
    QLinearGlobalAveragePool compute them, so the program equals onnxruntime on the file as written, not only
    on the integer form. With the float softmax (the ONNX reading), seeds 0 and 2 end 2 of 10 outputs one step
    apart. 7-bit weights (reduce_range): on x86 without VNNI onnxruntime's uint8 x int8 kernel saturates pairs
    of products in int16 (``onnxruntime_u8s8_saturates``), so with full-range weights its run of the file is
    not the exact integer computation there, and the file comparison would test that CPU, not the softmax."""
    q = quantize_qdq(tiny_cnn(seed), seed=seed, symmetric_activations=False, reduce_range=True)
    r = compile_model(q, get_accelerator("eyeriss_like"), tmp_path, **FAST, simulate=False)
    kinds = {s.op_type: s.placement for s in r.steps}
    assert kinds["Softmax (QDQ)"] == "host" and kinds["GlobalAveragePool (QDQ)"] == "host"
    assert "Softmax" not in kinds and "GlobalAveragePool" not in kinds
    v = r.verification
    assert v is not None and v.ok and all(c.ok for c in v.quantized), v.summary()
    assert v.file_outputs and all(c.ok and c.max_abs_diff == 0 for c in v.file_outputs), v.summary()
    from accelmap.compile.integer_form import integer_form
    m = integer_form(load_graph(q), r.steps)
    assert m is not None
    ops = [(n.domain, n.op_type) for n in m.graph.node]
    assert ("com.microsoft", "QLinearSoftmax") in ops and ("com.microsoft", "QLinearGlobalAveragePool") in ops
    assert _float_softmax_reading_misses(q, r.steps) == 2      # the file comparison tells the readings apart


def test_qdq_softmax_over_long_rows_is_bit_exact(tmp_path):
    """300 classes in 6 rows: the kernel's shifted exp table, float sum and floor(1 / y_scale) at length (7-bit
    weights: see the test above; the float reading differs in 4 of 1,800 outputs)."""
    q = quantize_qdq(tiny_classifier(), symmetric_activations=False, reduce_range=True)
    r = compile_model(q, get_accelerator("eyeriss_like"), tmp_path, **FAST, simulate=False)
    v = r.verification
    assert v is not None and v.ok and v.file_outputs and all(c.ok and c.max_abs_diff == 0 for c in v.file_outputs)
    assert _float_softmax_reading_misses(q, r.steps) == 4


def test_qdq_file_comparison_names_onnxruntimes_u8s8_saturation(tmp_path):
    """Full-range int8 weights: the program still equals the integer form bit for bit; onnxruntime's run of the
    file equals it too unless its uint8 x int8 kernel saturates on this CPU, and then the report says so."""
    from accelmap.compile.verify import U8S8_SATURATION_NOTE, onnxruntime_u8s8_saturates
    q = quantize_qdq(tiny_cnn(0), seed=0, symmetric_activations=False)
    v = compile_model(q, get_accelerator("eyeriss_like"), tmp_path, **FAST, simulate=False).verification
    assert v is not None and v.ok and all(c.ok for c in v.quantized), v.summary()
    file_exact = all(c.ok and c.max_abs_diff == 0 for c in v.file_outputs)
    if not onnxruntime_u8s8_saturates():
        assert file_exact and v.file_note is None, v.summary()
    elif not file_exact:
        assert v.file_note is not None and U8S8_SATURATION_NOTE in v.file_note and v.file_note in v.summary()
    # onnxruntime's int8 kernels (session.qdqisint8allowed=1) run the file as the exact integer computation
    assert v.file_int8_outputs and all(c.ok and c.max_abs_diff == 0 for c in v.file_int8_outputs), v.summary()
    assert len(v.file_int8_quantized) == len(v.quantized) and all(c.ok for c in v.file_int8_quantized)


@pytest.mark.parametrize("size", [8, 11])
def test_pooling_with_ceil_mode_matches_onnxruntime(size, tmp_path):
    """ceil_mode: the last window runs past the padded input; an average that counts padding counts the
    declared pads only (sizes 8 and 11 end with such a window; counting every window position fails)."""
    r = compile_model(tiny_pools(size), get_accelerator("eyeriss_like"), tmp_path, **FAST, simulate=False)
    assert r.verification is not None and r.verification.ok, r.verification.summary()
    assert {o.name for o in r.verification.outputs} == {"a1", "a0"}


def test_attention_block_float_matches_on_eyeriss(tmp_path):
    r = compile_model(tiny_attention(), get_accelerator("eyeriss_like"), tmp_path, **FAST)
    assert r.verification is not None and r.verification.ok, r.verification.summary()
    kinds = {r.layer_of[s].layer.operator.kind for s in r.layer_of}
    assert kinds == {"matmul", "batched_matmul"}
    assert {"Transpose", "Reshape", "Softmax", "LayerNormalization", "Gelu"} <= {s.op_type for s in r.steps}


def _quant_model(scale: float, zp: int, elem: int) -> onnx.ModelProto:
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], name="q")]
    z = np.array(zp, dtype=np.int8 if elem == TensorProto.INT8 else np.uint8)
    g = helper.make_graph(nodes, "q", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 12])],
                          [helper.make_tensor_value_info("y", elem, [1, 12])],
                          initializer=[numpy_helper.from_array(np.array(scale, dtype=np.float32), "s"),
                                       numpy_helper.from_array(z, "z")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])


def test_quantize_rounds_half_to_even_and_saturates(tmp_path):
    """ONNX QuantizeLinear on ties and out-of-range values, against values worked out by hand, built at -O0 and
    -O2 (the tests build at -O0 to save time; the bits must not depend on it)."""
    from accelmap.compile.partition import partition
    from accelmap.compile.program import build_program, emit_program

    x = np.array([[0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.49, 1000.0, -1000.0, 63.5, 64.5, 0.0]], dtype=np.float32)
    for elem, zp, want, opt in [
        (TensorProto.INT8, 0, [0, 2, 2, 0, -2, -2, 3, 127, -128, 64, 64, 0], "-O0"),
        (TensorProto.UINT8, 10, [10, 12, 12, 10, 8, 8, 13, 255, 0, 74, 74, 10], "-O2"),
    ]:
        g = load_graph(_quant_model(1.0, zp, elem))
        prog = emit_program(g, partition(g, set()), {}, get_accelerator("vta_like"), tmp_path / str(elem))
        with pytest.raises(SpecError, match="C optimization level '-O9'; valid: -O0, -O1, -O2, -O3, -Os"):
            build_program(prog, "-O9")
        build_program(prog, opt)
        got = run_program(prog, {"x": x}).outputs["y"]
        assert got.reshape(-1).tolist() == want
        assert verify(prog, g, {"x": x}).ok      # onnxruntime agrees


def test_mismatch_names_the_first_step_that_differs(cnn_vta, tmp_path):
    """Corrupt conv1's weights in the weights file: the comparison must fail and name conv1."""
    import shutil

    from accelmap.compile.program import Program

    folder = tmp_path / "bad"
    shutil.copytree(cnn_vta.program.folder, folder)
    raw = bytearray((folder / "weights.bin").read_bytes())
    w1 = np.frombuffer(bytes(raw[:4]), dtype=np.float32)[0]
    raw[:4] = np.float32(w1 + 1.0).tobytes()       # the first constant main reads is conv1's weight
    (folder / "weights.bin").write_bytes(bytes(raw))
    p = cnn_vta.program
    bad = Program(folder, p.steps, p.layers, p.values, p.inputs, p.outputs, folder / "net")
    v = verify(bad, cnn_vta.graph, random_inputs(cnn_vta.graph, 0))
    assert not v.ok
    assert v.first_bad_step is not None and v.first_bad_step.startswith("conv1 ")


def test_network_timing_adds_simulated_layers_and_host_model(cnn_vta):
    t = cnn_vta.timing
    assert t is not None
    sims = {s.name: s for s in t.steps}
    for name, lm in cnn_vta.layer_of.items():
        assert sims[name].simulated == t.sims[lm.name].cycles
        assert sims[name].modeled == lm.cost.latency
    # GlobalAveragePool reads 8x4x4 and writes 8 float32 elements: 136 / 4 cycles; 544 bytes at 2.5 pJ plus
    # 8 results at 0.9 pJ (Horowitz's 45 nm figures)
    assert sims["gap"].simulated == sims["gap"].host == (8 * 4 * 4 + 8) / 4
    assert sims["gap"].host_energy_pj == pytest.approx(136 * 4 * 2.5 + 8 * 0.9)
    # conv1's float bias epilogue on the host: reads and writes its 8x8x8 output
    assert sims["conv1"].host == 2 * 8 * 8 * 8 / 4
    assert sims["conv1"].host_energy_pj == pytest.approx(2 * 512 * 4 * 2.5 + 512 * 0.9)
    assert sims["conv1"].total == sims["conv1"].simulated + sims["conv1"].host
    assert t.simulated_cycles == pytest.approx(sum(s.total for s in t.steps))
    assert t.accelerator_energy_pj == pytest.approx(sum(lm.cost.energy_total for lm in cnn_vta.layer_of.values()))
    assert t.energy_pj == pytest.approx(t.accelerator_energy_pj + sum(s.host_energy_pj for s in t.steps))


def test_report_is_self_contained_and_complete(cnn_vta):
    page = report_html(cnn_vta)
    assert 'id="verification" class="pass"' in page
    for s in cnn_vta.steps:
        assert f"<td>{s.name}</td>" in page
    assert "<svg" in page and page.count("data:image/png;base64,") == 3
    # the host model is stated with its constants and source, and each step's host work is a column
    assert "2.5 pJ per byte" in page and "Horowitz" in page and "<th>host energy pJ</th>" in page
    # no resource fetched from the network: only the SVG namespace names a URL
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    for lm in cnn_vta.mapping.layers:
        assert f"<summary>{lm.name}:" in page          # the loop nest of every layer
    assert "Simulator timeline of layer" in page
    assert "Simulator timeline of layer dw2 (chosen" in report_html(cnn_vta, "dw2")
    with pytest.raises(SpecError, match="no simulated layer 'nope'; the layers are conv1, dw2, fc"):
        report_html(cnn_vta, "nope")
    for lm in cnn_vta.mapping.layers:      # energy columns by level and by operand
        for comp, operand in lm.cost.energy:
            assert f"<th>E {comp}</th>" in page and f"<th>E {operand}</th>" in page


def test_unsupported_host_op_is_one_clear_error(tmp_path):
    m = tiny_cnn()
    m.graph.node[1].op_type = "Elu"        # relu1 -> an op the host does not run
    with pytest.raises(SpecError, match=r"node 'relu1' \(Elu\): no host implementation"):
        compile_model(m, get_accelerator("vta_like"), tmp_path, run=False, simulate=False, **FAST)


def test_cli_compile_and_bad_model(tmp_path):
    from click.testing import CliRunner

    from accelmap.cli import main

    p = tmp_path / "att.onnx"
    onnx.save(tiny_attention(), p)
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["compile", str(p), "--arch", "tpu_like", "--out", str(out), "--time-limit", "0.3",
                                  "--json", str(tmp_path / "s.json")])
    assert r.exit_code == 0, r.output
    assert "PASS" in r.output and (out / "report.html").exists() and (out / "net").exists()
    # given inputs (.npz), and a missing graph input named
    np.savez(tmp_path / "x.npz", x=np.full((1, 4, 16), 0.5, dtype=np.float32))
    r = CliRunner().invoke(main, ["compile", str(p), "--arch", "tpu_like", "--out", str(out), "--time-limit", "0.3",
                                  "--input", str(tmp_path / "x.npz"), "--no-simulate"])
    assert r.exit_code == 0 and "PASS" in r.output, r.output
    np.savez(tmp_path / "z.npz", z=np.zeros(3, dtype=np.float32))
    r = CliRunner().invoke(main, ["compile", str(p), "--arch", "tpu_like", "--out", str(out), "--time-limit", "0.3",
                                  "--input", str(tmp_path / "z.npz"), "--no-simulate"])
    assert r.exit_code == 2 and "no value for graph input 'x'" in r.output
    r = CliRunner().invoke(main, ["compile", str(tmp_path / "missing.onnx"), "--arch", "tpu_like"])
    assert r.exit_code == 2 and r.output.count("\n") == 1 and "missing.onnx" in r.output
