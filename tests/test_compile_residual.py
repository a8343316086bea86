"""Residual adds in the compiled program: a QDQ Add runs as onnxruntime's QLinearAdd, bit for bit (ties
included), and ``--fuse`` runs a group ending in its chain's residual join inside the tile loop, the skip kept
on chip or re-read per tile as the fusion plan chose, its counters equal to the fusion model's."""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).parent))
from accelmap.arch.presets import get_accelerator  # noqa: E402
from accelmap.codegen.build import compile_shared  # noqa: E402
from accelmap.codegen.fused_weights import model_weight_bits  # noqa: E402
from accelmap.compile import compile_model  # noqa: E402
from accelmap.compile.host_runtime import HOST_C  # noqa: E402
from accelmap.compile.integer_form import integer_form  # noqa: E402
from accelmap.fusion.geometry import fused_counts  # noqa: E402
from accelmap.fusion.search import FusionConfig  # noqa: E402
from compile_models import quantize_qdq, tiny_residual  # noqa: E402

ort = pytest.importorskip("onnxruntime")

# Half a second per tile mapping (wall clock), a ceiling these small spaces rarely reach: a search cut short by a busy
# machine can still end before any mapping at all, and the group would then run layer by layer.
FAST = {"time_limit_per_layer": 0.1, "fuse": True, "fuse_tile_time_limit": 0.5,
        "fuse_config": FusionConfig(max_group=3, row_tiles=2, col_tiles=1, per_mode=1), "c_opt": "-O0"}

PROBE = HOST_C + r"""
void probe(const void *a, const void *b, void *y, int t, long n, float sa, int za, float sb, int zb, float sc, int zc,
           int lo, int hi) {
    qlinear_add(a, t, b, t, y, t, n, sa, za, sb, zb, sc, zc, lo, hi);
}
"""


def onnxruntime_qlinear_add(a, b, sa, za, sb, zb, sc, zc):
    elem = TensorProto.INT8 if a.dtype == np.int8 else TensorProto.UINT8
    dt = a.dtype
    inits = [numpy_helper.from_array(np.array(v, dtype=d), n) for v, d, n in
             [(sa, np.float32, "sa"), (za, dt, "za"), (sb, np.float32, "sb"), (zb, dt, "zb"), (sc, np.float32, "sc"),
              (zc, dt, "zc")]]
    node = helper.make_node("QLinearAdd", ["a", "sa", "za", "b", "sb", "zb", "sc", "zc"], ["y"], domain="com.microsoft")
    g = helper.make_graph([node], "qadd", [helper.make_tensor_value_info("a", elem, [a.size]),
                                           helper.make_tensor_value_info("b", elem, [b.size])],
                          [helper.make_tensor_value_info("y", elem, [a.size])], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)])
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, {"a": a, "b": b})[0]


@pytest.mark.parametrize("dtype,zero_points", [(np.int8, (0, 0, 0)), (np.int8, (-7, 11, 3)), (np.uint8, (120, 131, 127))])
def test_qlinear_add_equals_onnxruntime_on_every_pair_ties_included(dtype, zero_points):
    """The program's QLinearAdd against onnxruntime's kernel on all 65,536 input pairs, with scale ratios at and
    near 1.5 and 0.75 (half-way values everywhere); the float reading (dequantize, add, quantize) differs."""
    lib = ctypes.CDLL(str(compile_shared(PROBE)))
    lo, hi = (-128, 127) if dtype == np.int8 else (0, 255)
    vals = np.arange(lo, hi + 1).astype(dtype)
    a, b = np.repeat(vals, 256), np.tile(vals, 256)
    za, zb, zc = zero_points
    t = 1 if dtype == np.int8 else 2
    float_reading_differs = 0
    for sc, ra, rb in [(0.0371, 1.5, 0.75), (0.0123, 1.5 * (1 + 2e-7), 0.5), (0.05, 2.5, 1.25)]:
        sc = np.float32(sc)
        sa, sb = np.float32(sc * ra), np.float32(sc * rb)
        want = onnxruntime_qlinear_add(a, b, sa, za, sb, zb, sc, zc)
        got = np.zeros_like(a)
        lib.probe(a.ctypes.data_as(ctypes.c_void_p), b.ctypes.data_as(ctypes.c_void_p),
                  got.ctypes.data_as(ctypes.c_void_p), t, ctypes.c_long(a.size), ctypes.c_float(sa), za,
                  ctypes.c_float(sb), zb, ctypes.c_float(sc), zc, lo, hi)
        assert (got == want).all()
        fl = (a.astype(np.float32) - za) * sa + (b.astype(np.float32) - zb) * sb
        ref = np.clip(np.rint(fl / sc) + zc, lo, hi).astype(dtype)
        float_reading_differs += int((ref != want).sum())
    assert float_reading_differs > 0


@pytest.fixture(scope="module")
def qdq_residual_fused(tmp_path_factory):
    # 7-bit weights: onnxruntime's u8 x s8 kernel on the file is exact (not needed for the integer form)
    m = quantize_qdq(tiny_residual(size=6, channels=4), reduce_range=True)
    return compile_model(m, get_accelerator("tpu_like"), tmp_path_factory.mktemp("res"), **FAST)


def test_qdq_residual_adds_are_qlinear_add_in_program_and_integer_form(qdq_residual_fused):
    r = qdq_residual_fused
    adds = [s for s in r.steps if s.op_type == "Add (QDQ)"]
    assert [s.name for s in adds] == ["b1.add", "b2.add"]
    intf = integer_form(r.graph, r.steps)
    assert intf is not None
    assert sorted(n.name for n in intf.graph.node if n.op_type == "QLinearAdd") == ["b1.add", "b2.add"]


def test_groups_with_residual_joins_run_fused_bit_exact_with_the_models_counts(qdq_residual_fused):
    r = qdq_residual_fused
    assert r.verification is not None and r.verification.ok
    assert r.verification.quantized and all(c.ok for c in r.verification.quantized)
    assert not any("runs layer by layer" in n for n in r.program.notes)
    joins = {grp.cost.join.name: grp for grp in r.groups if grp.cost.join is not None}
    assert set(joins) == {"b1.add", "b2.add"}
    # b1's skip is the group's input (kept on chip or re-read), b2's the projection shortcut (only re-read)
    assert joins["b1.add"].skip == joins["b1.add"].input and joins["b1.add"].cost.join.skip == 0
    assert joins["b2.add"].cost.skip_policy == "re-read" and joins["b2.add"].cost.join.skip is None
    names = {s.name: i for i, s in enumerate(r.steps)}
    for name, grp in joins.items():
        c = grp.cost
        assert grp.at == names[name] == max(grp.members) and grp.output == r.steps[names[name]].outputs[0]
        want = fused_counts(grp.stages, c.tile_rows, c.tile_cols, c.policies, c.join, c.skip_policy)
        got = [int(v) for v in r.run.fused_counters[grp.index]]
        assert got == [want.input_fetched, want.output_written, 0, *want.macs, want.skip_fetched, *model_weight_bits(grp.cost)]
        assert grp.counters_ok is True
        assert want.skip_fetched == (0 if c.skip_policy == "kept" else want.output_written)
        # the simulator moves the skip as the model does, and its off-chip traffic is the model's
        assert grp.sim is not None and grp.sim.offchip_bits == c.offchip_bits
        assert grp.sim.skip_bits == want.skip_fetched * c.join.bits
    step_names = {s.name for s in r.timing.steps} if r.timing else set()
    assert not {"b1.add", "b2.add"} & step_names
    assert "+ b1.add (skip" in r.summary() and "+ b2.add (skip re-read)" in r.summary()


def test_float_residual_joins_fused_match_onnxruntime(tmp_path):
    r = compile_model(tiny_residual(size=6, channels=4), get_accelerator("eyeriss_like"), tmp_path, simulate=False, **FAST)
    assert r.verification is not None and r.verification.ok
    assert {grp.cost.join.name for grp in r.groups if grp.cost.join is not None} == {"b1.add", "b2.add"}
    assert all(grp.counters_ok for grp in r.groups)


SPAN = {**FAST, "fuse_config": FusionConfig(max_group=4, row_tiles=2, col_tiles=1, per_mode=1, span_residuals=True)}


@pytest.mark.parametrize("qdq", [False, True])
def test_a_group_spanning_two_residual_blocks_runs_fused_bit_exact_with_the_models_counts(tmp_path, qdq):
    """Two identity blocks as one group: the first add (and its ReLU) inside the tile loop, its skip the group's
    input kept or re-read, the second add ending the group with the first add's result as its skip, kept on
    chip. The program is bit-exact against onnxruntime (the float model, or the QDQ model's integer form), its
    counters equal the fusion model's, and the simulator moves what the model counts."""
    m = tiny_residual(size=6, channels=4, shortcut=False)
    if qdq:
        m = quantize_qdq(m, reduce_range=True)
    r = compile_model(m, get_accelerator("tpu_like" if qdq else "eyeriss_like"), tmp_path, simulate=qdq, **SPAN)
    assert r.verification is not None and r.verification.ok
    assert not any("runs layer by layer" in n for n in r.program.notes), r.program.notes
    (grp,) = [grp for grp in r.groups if grp.inner]
    c = grp.cost
    assert [jn.name for jn, _ in c.inner_joins] == ["b1.add"] and c.join is not None and c.join.name == "b2.add"
    assert c.join.skip == 2 and c.skip_policy == "kept" and grp.inner[0].skip == grp.input
    names = {s.name: i for i, s in enumerate(r.steps)}
    assert {names["b1.add"], names["b1.relu"], names["b2.add"]} <= set(grp.members)
    want = fused_counts(grp.stages, c.tile_rows, c.tile_cols, c.policies, c.join, c.skip_policy, c.inner_joins)
    assert [int(v) for v in r.run.fused_counters[grp.index]] == [want.input_fetched, want.output_written, 0,
                                                                 *want.macs, want.skip_fetched, *model_weight_bits(grp.cost)]
    assert grp.counters_ok is True
    assert "b1.add inside (skip" in r.summary()
    # the JSON summary (accelmap compile --json, benchmarks/compile_e2e.py) names the add inside and its policy
    assert [gd["inner_joins"] for gd in r.to_dict()["fused_groups"] if gd["inner_joins"]] == [
        [{"join": "b1.add", "skip_policy": c.inner_joins[0][1]}]]
    if qdq:
        assert r.verification.quantized and all(q.ok for q in r.verification.quantized)
        assert grp.sim is not None and grp.sim.offchip_bits == c.offchip_bits


def test_compile_span_flag_needs_fuse(tmp_path):
    from click.testing import CliRunner

    from accelmap.cli import main
    r = CliRunner().invoke(main, ["compile", "resnet18", "--arch", "tpu_like", "--out", str(tmp_path / "o"),
                                  "--fuse-span-residuals"])
    assert r.exit_code == 2 and "need --fuse" in r.output and not (tmp_path / "o").exists()
