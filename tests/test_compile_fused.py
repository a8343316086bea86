"""accelmap compile --fuse: the fusion search's groups run as fused tile loops inside the network program,
bit-exact (int8 QDQ) or within tolerance (float) against onnxruntime, their counters equal to the fusion model."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from accelmap.arch.presets import get_accelerator  # noqa: E402
from accelmap.codegen.fused_weights import model_weight_bits  # noqa: E402
from accelmap.compile import compile_model  # noqa: E402
from accelmap.fusion.geometry import fused_counts  # noqa: E402
from accelmap.fusion.group_cost import store_index  # noqa: E402
from accelmap.fusion.search import FusionConfig  # noqa: E402
from accelmap.report.compile_report import report_html  # noqa: E402
from compile_models import quantize_qdq, tiny_attention, tiny_chain, tiny_ffn, tiny_grouped, tiny_mlp  # noqa: E402

pytest.importorskip("onnxruntime")

# A small search: groups of up to three operators, two row tiles per mode, the whole width. Half a second per tile
# mapping (wall clock), a ceiling these small spaces rarely reach: a search cut short by a busy machine (CI's two
# workers compiling C beside the searches) can still end before any mapping at all. A weight kept on no on-chip level
# is now read from memory at each multiply-accumulate (tested on its own in test_fusion_codegen_weights.py).
FAST = {"time_limit_per_layer": 0.3, "fuse": True, "fuse_tile_time_limit": 0.5,
        "fuse_config": FusionConfig(max_group=3, row_tiles=2, col_tiles=1, per_mode=1), "c_opt": "-O0"}


@pytest.fixture(scope="module")
def qdq_tpu_fused(tmp_path_factory):
    return compile_model(quantize_qdq(tiny_chain()), get_accelerator("tpu_like"), tmp_path_factory.mktemp("fq"), **FAST)


def test_qdq_groups_run_fused_and_bit_exact(qdq_tpu_fused):
    r = qdq_tpu_fused
    assert r.verification is not None and r.verification.ok
    assert r.verification.quantized and all(c.ok for c in r.verification.quantized)
    assert r.groups, "the fusion search's plan has groups on this chain"
    names = {s.name: i for i, s in enumerate(r.steps)}
    for grp in r.groups:
        # a group starts and ends with a convolution; the steps it covers include every host step between them
        assert grp.stages[0].name in names and grp.stages[-1].name in names
        assert grp.at == names[grp.stages[-1].name] == max(grp.members)
        covered = {r.steps[i].op_type for i in grp.members}
        assert "Conv (QDQ)" in covered and {"DequantizeLinear", "Relu", "QuantizeLinear"} <= covered
        # what the emitted tile loop fetched, wrote and multiplied is what the fusion model counts
        want = fused_counts(grp.stages, grp.cost.tile_rows, grp.cost.tile_cols, grp.cost.policies)
        got = r.run.fused_counters[grp.index]
        assert [int(v) for v in got] == [want.input_fetched, want.output_written, 0, *want.macs, *model_weight_bits(grp.cost)]
        assert grp.counters_ok is True
        # the intermediates stay in the group: only its output is a value of the program
        assert grp.output in {n for n, _, _ in r.program.values}
        inner = {o for i in grp.members if i != grp.at for o in r.steps[i].outputs}
        assert not inner & {n for n, _, _ in r.program.values}
    # the max pool between conv2 and dw3 is a stage of a group (max_group 3 lets conv1..dw3 fuse)
    assert any(st.name == "pool2" for grp in r.groups for st in grp.stages)


def test_fused_groups_are_timed_by_the_simulator_and_the_fusion_model(qdq_tpu_fused):
    r = qdq_tpu_fused
    t = r.timing
    assert t is not None
    fused = [s for s in t.steps if s.runs == "fused group"]
    assert len(fused) == len(r.groups)
    for s, grp in zip(fused, r.groups, strict=True):
        assert grp.sim is not None
        assert s.simulated == grp.sim.cycles and s.modeled == grp.cost.latency
        assert s.energy_pj == grp.cost.energy and s.offchip_bits == grp.cost.offchip_bits
        assert grp.sim.input_fetched == grp.cost.counts.input_fetched
        assert grp.sim.output_written == grp.cost.counts.output_written
        assert s.host > 0          # the epilogues on every block are host work
    covered = {r.steps[i].name for grp in r.groups for i in grp.members}
    assert not covered & {s.name for s in t.steps}
    d = json.loads(json.dumps(r.to_dict()))
    assert len(d["fused_groups"]) == len(r.groups) and d["fused_groups"][0]["counters_equal_model"] is True
    assert d["fusion_search"]["groups_run"] == len(r.groups) and d["offchip_bits"] == t.offchip_bits
    plan = d["fusion_search"]["plan"]
    assert plan["fused"]["edp"] <= plan["unfused"]["edp"]      # the search's plan is never worse than layer by layer
    assert "fusion search:" in r.summary() and "counters equal to the fusion model" in r.summary()
    html = report_html(r)
    assert 'id="fused-groups"' in html and r.groups[0].name in html and "fused group 0" in html


def test_float_chain_fused_matches_onnxruntime(tmp_path):
    # Longer searches than FAST: at 0.3 s per layer and 0.1 s per tile mapping whether a group beats the layers
    # depended on the machine's speed (no group in 2 of 3 runs on an idle machine); at 5 s and 2 s, 3 of 3.
    slower = dict(FAST, time_limit_per_layer=5.0, fuse_tile_time_limit=2.0)
    r = compile_model(tiny_chain(), get_accelerator("eyeriss_like"), tmp_path, simulate=False, **slower)
    assert r.verification is not None and r.verification.ok
    assert r.groups and all(grp.counters_ok for grp in r.groups)
    # the groups of convolutions without groups run their blocks' tile programs, per level the cost model's counts
    assert all(grp.level_counters_ok is (True if grp.programs is not None else None) for grp in r.groups)


def test_an_accelerator_without_a_shared_store_runs_layer_by_layer(tmp_path):
    r = compile_model(tiny_chain(), get_accelerator("vta_like"), tmp_path, run=False, simulate=False, **FAST)
    assert r.groups == [] and r.fusion is None
    assert any("no fused groups" in n and "partitioned" in n for n in r.program.notes)


def test_float_matrix_product_chain_fused_matches_onnxruntime(tmp_path):
    """A transformer's feed-forward chain (MatMul, bias Add, GELU, MatMul; tokens x features, token-major as ONNX
    stores them): the two products run as one fused group, the bias adds and the GELU on each block, within
    tolerance of onnxruntime; its counters and the simulator's off-chip bits equal the fusion model's."""
    r = compile_model(tiny_ffn(seq=16, d=16, hidden=32), get_accelerator("eyeriss_like"), tmp_path, **FAST)
    assert r.verification is not None and r.verification.ok, r.verification.summary() if r.verification else ""
    assert not any("runs layer by layer" in n for n in r.program.notes), r.program.notes
    assert [grp.label for grp in r.groups] == ["ffn1 -> ffn2"]
    grp = r.groups[0]
    assert grp.channel_axis == -1 and grp.counters_ok is True
    assert sorted(r.steps[i].name for i in grp.members) == ["ffn1", "ffn1.bias", "ffn2", "gelu"]
    c = grp.cost
    want = fused_counts(grp.stages, c.tile_rows, c.tile_cols, c.policies)
    assert [int(v) for v in r.run.fused_counters[grp.index]] == [want.input_fetched, want.output_written, 0,
                                                                  *want.macs, *model_weight_bits(grp.cost)]
    assert want.macs == (16 * 16 * 32, 16 * 32 * 16)
    assert grp.sim is not None and grp.sim.offchip_bits == c.offchip_bits
    html = report_html(r)
    assert grp.name in html and "ffn1 -&gt; ffn2" in html


def test_dense_gemm_chain_fused_matches_onnxruntime(tmp_path):
    """Two fully connected layers as ONNX Gemms (transB=1, a bias per output feature) with a ReLU between them, on
    16 rows: one fused group, each weight read as stored ([out][in]), each block computed by its tile program, the
    biases and the ReLU on each block, within tolerance of onnxruntime; its counters, the blocks' counters per
    level and the simulator's off-chip bits equal the models'."""
    r = compile_model(tiny_mlp(rows=16, d=16, hidden=32), get_accelerator("eyeriss_like"), tmp_path, **FAST)
    assert r.verification is not None and r.verification.ok, r.verification.summary() if r.verification else ""
    assert [grp.label for grp in r.groups] == ["fc1 -> fc2"], r.program.notes
    grp = r.groups[0]
    assert grp.channel_axis == -1 and grp.counters_ok is True
    assert sorted(r.steps[i].name for i in grp.members) == ["fc1", "fc2", "relu"]
    c = grp.cost
    want = fused_counts(grp.stages, c.tile_rows, c.tile_cols, c.policies)
    assert want.macs == (16 * 16 * 32, 16 * 32 * 16)
    assert [int(v) for v in r.run.fused_counters[grp.index]] == [want.input_fetched, want.output_written, 0,
                                                                  *want.macs, *model_weight_bits(grp.cost)]
    assert grp.sim is not None and grp.sim.offchip_bits == c.offchip_bits
    # every block runs its tile program (its mapping's loops and buffers): counters per level the cost model's
    assert grp.programs is not None and sorted(grp.programs.programs) == [0, 1] and grp.level_counters_ok is True
    assert "counters per level equal to the cost model's" in r.summary()


def test_attention_scores_softmax_context_fused_matches_onnxruntime(tmp_path):
    """Attention's QK^T -> scale -> softmax -> PV per head (batched products whose second operand, K^T or V, is a
    computed tensor read from memory) -> the heads' merge -> the residual add of the block's input -> the layer norm
    -> the feed-forward's first product: one fused group, the scale and the softmax over each block's keys, the
    merge (a transpose and a reshape) no work on chip, the add reading the block's input from memory at each block's
    tokens (the fusion model leaves it to the host: counted apart, last), the layer norm over each block's features;
    within tolerance of onnxruntime, its counters the fusion model's, K and V kept in the store by their
    projections. (Before, the search cut the chain at the add and the layer norm and noted the link lost.)"""
    r = compile_model(tiny_attention(seq=8), get_accelerator("tpu_like"), tmp_path, **FAST)
    assert r.verification is not None and r.verification.ok, r.verification.summary() if r.verification else ""
    assert [grp.label for grp in r.groups] == ["scores -> context -> ffn1"], r.program.notes
    assert not any(n.startswith("no fused group spans") for n in r.program.notes), r.program.notes
    grp = r.groups[0]
    assert sorted(r.steps[i].name for i in grp.members) == ["c.reshape", "c.t", "context", "ffn1", "ln", "residual",
                                                            "scale", "scores", "softmax"]
    assert [(x.skip, x.host) for x in grp.inner] == [("x", True)]
    c = grp.cost
    want = fused_counts(grp.stages, c.tile_rows, c.tile_cols, c.policies)
    assert want.macs == (2 * 8 * 8 * 8, 2 * 8 * 8 * 8, 8 * 16 * 32)      # 2 heads, 8 tokens, 8 features per head
    assert [int(v) for v in r.run.fused_counters[grp.index]] == [want.input_fetched, want.output_written, 0,
                                                                  *want.macs, *model_weight_bits(grp.cost), 8 * 16]
    # K and V: their projections run before the group, as their own layer programs, and write their outputs to the
    # store for it (the group keeps its weights there or streams them: the plan's choice): the model credits the
    # saved writes and fetches to the group, the simulator counts what the producers still move apart; the two agree
    # on the sum
    assert c.producers_on_chip == ("k", "v")
    # the products reading K and V fetch no weights from memory in the model nor in the C (the counters above)
    assert model_weight_bits(c)[:2] == [0, 0] and model_weight_bits(c)[2] > 0
    assert {j: p.node for j, p in grp.produced.items()} == {0: "k", 1: "v"}
    sim = grp.sim
    # Exact on most runs (112 and 114 cycles both ways); the tile mappings come from wall-clock limited searches, and
    # one run's streamed plan had a block the single-operator latency model puts 2 cycles below its simulation (104
    # against 106): the fused model's error is its blocks' (docs/fusion.md), held to the issue's 2%.
    assert sim is not None and sim.cycles == pytest.approx(c.latency, rel=0.02)
    d = r.to_dict()["fused_groups"][0]
    assert d["producers_on_chip"] == ["k", "v"]
    assert sim.offchip_bits + sim.producer_offchip_bits == c.offchip_bits + d["producers_offchip_bits_alone"]
    assert not any("write their outputs to memory" in n for n in r.program.notes), r.program.notes
    assert "k, v written to the store for it" in r.summary()
    # the report's off-chip cell (drawing the whole page costs about a CPU second; other tests draw it)
    from accelmap.report.compile_report import _offchip_cell
    both = (c.offchip_bits + d["producers_offchip_bits_alone"]) / 8e6
    assert _offchip_cell(grp, r.arch.levels[0].name) == f"{both:,.3f} / {both:,.3f} (with k, v)"


def _qdq_one_group_bit_exact(model, label, tmp_path) -> set[str]:
    """Compile ``model`` quantized (int8 QDQ, 7-bit weights) on tpu_like with --fuse; check that the plan's one
    group ``label`` runs fused with the model's counters and every value the program keeps is bit-exact on the
    integer form and on the file run with onnxruntime's int8 kernels; return the op types the group covers."""
    r = compile_model(quantize_qdq(model, reduce_range=True), get_accelerator("tpu_like"), tmp_path,
                      simulate=False, **FAST)
    v = r.verification
    assert v is not None and v.ok and v.quantized and all(c.ok for c in v.quantized), v.summary() if v else ""
    assert v.file_int8_quantized and all(c.ok for c in v.file_int8_quantized + v.file_int8_outputs)
    assert [grp.label for grp in r.groups] == [label], r.program.notes
    assert r.groups[0].counters_ok is True
    # blocks of convolutions without groups and dense layers run their tile programs, per level the model's counts
    assert r.groups[0].level_counters_ok is (True if r.groups[0].programs is not None else None)
    return {r.steps[i].op_type for i in r.groups[0].members}


def test_qdq_matrix_product_chain_fused_bit_exact(tmp_path):
    """The feed-forward chain quantized (int8 QDQ, 7-bit weights): its integer products fused, each block
    requantized per output feature, then dequantized, the bias added, quantized, GELU between dequantize and
    quantize, all on the block; every value the program keeps bit-exact on the integer form and on the file run
    with onnxruntime's int8 kernels, the counters the model's."""
    ops = _qdq_one_group_bit_exact(tiny_ffn(seq=16, d=16, hidden=32), "ffn1 -> ffn2", tmp_path)
    assert ops == {"MatMul (QDQ)", "DequantizeLinear", "Add", "QuantizeLinear", "Gelu"}


def test_qdq_attention_fused_with_onnxruntimes_integer_softmax_bit_exact(tmp_path):
    """The tiny attention block quantized (int8 QDQ, 7-bit weights): the Q projection an integer product, its
    heads' split no work on chip; scores and context multiply two computed
    tensors, so they run in float between DequantizeLinear and QuantizeLinear; the group runs them with the
    quantize / dequantize steps, the scale and the softmax as onnxruntime's QLinearSoftmax on each block; every
    value the program keeps is bit-exact on the integer form and on the file with onnxruntime's int8 kernels."""
    ops = _qdq_one_group_bit_exact(tiny_attention(seq=8), "scores -> context -> ffn1", tmp_path)
    assert {"Softmax (QDQ)", "MatMul (QDQ)", "Reshape", "Transpose", "Add (QDQ)", "LayerNormalization"} <= ops, ops


def test_average_pool_inside_a_fused_group_bit_exact(tmp_path):
    """The small chain (8x8, int8 QDQ) with a padded 3x3 average pool (stride 1) where the max pool was: it runs
    inside a fused group, in float between its DequantizeLinear and QuantizeLinear,
    summing in the host's order and dividing by the taps inside the input (9 inside, 4 or 6 at the borders):
    bit-exact on the integer form, the counters the model's. (Dividing by the whole window is the 64-bit
    harness's ``avg-pad`` case.)"""
    model = tiny_chain(size=8, pool="AveragePool", kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
    r = compile_model(quantize_qdq(model), get_accelerator("tpu_like"), tmp_path, simulate=False, **FAST)
    v = r.verification
    assert v is not None and v.ok and v.quantized and all(c.ok for c in v.quantized), v.summary() if v else ""
    # Which chain the plan fuses around the pool depends on the layers' mappings, found under wall-clock limits (on
    # CI's two busy workers conv2 -> pool2 -> dw3 -> conv4, alone conv1 -> conv2 -> pool2 -> dw3): the pool runs inside
    # whichever group holds it.
    (grp,) = [grp for grp in r.groups if "pool2" in grp.label]
    assert list(grp.pools.values()) == ["avg"] and grp.label.split(" -> ")[next(iter(grp.pools))] == "pool2", \
        r.program.notes
    c = grp.cost
    want = fused_counts(grp.stages, c.tile_rows, c.tile_cols, c.policies)
    assert [int(x) for x in r.run.fused_counters[grp.index]] == [want.input_fetched, want.output_written, 0,
                                                                  *want.macs, *model_weight_bits(grp.cost)]


@pytest.mark.parametrize("perm,keeps", [([0, 2, 1, 3], True), ([0, 3, 1, 2], False)])
def test_a_relayout_between_products_runs_on_chip_only_where_it_keeps_tokens_and_channels(perm, keeps):
    """Between a projection and a product per head: the heads' split (reshape to [1, M, 2, 8], transpose to
    [1, 2, M, 8]) keeps every element's token and on-chip channel, so a block needs no lines for it; a transpose to
    [1, 8, M, 2] keeps the tokens (second-to-last) but swaps the channels' order, which no block keeps: one clear
    line, and the group runs layer by layer."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from accelmap.compile.fused_groups import _check_relayout
    from accelmap.compile.graph import load_graph
    from accelmap.compile.partition import partition
    from accelmap.errors import SpecError

    nodes = [helper.make_node("MatMul", ["x", "w"], ["q"], name="q"),
             helper.make_node("Reshape", ["q", "heads"], ["qr"], name="split"),
             helper.make_node("Transpose", ["qr"], ["qt"], name="t", perm=perm),
             helper.make_node("MatMul", ["qt", "k"], ["y"], name="scores")]
    heads = numpy_helper.from_array(np.array([1, 6, 2, 8], dtype=np.int64), "heads")
    w = numpy_helper.from_array(np.ones((16, 16), dtype=np.float32), "w")
    kshape = [1, 2, 8, 4] if keeps else [1, 8, 2, 4]
    graph = helper.make_graph(nodes, "split", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6, 16]),
                                               helper.make_tensor_value_info("k", TensorProto.FLOAT, kshape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=[heads, w])
    g = load_graph(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    steps = partition(g, {"q", "scores"})
    at = {s.name: i for i, s in enumerate(steps)}
    path = [at["split"], at["t"]]
    if keeps:
        _check_relayout(steps, path, at["q"], "qt", g, -1)
    else:
        with pytest.raises(SpecError, match="move elements between tokens or channels"):
            _check_relayout(steps, path, at["q"], "qt", g, -1)
    with pytest.raises(SpecError, match="between two convolutions"):
        _check_relayout(steps, path, at["q"], "qt", g, 1)


def test_qdq_dense_gemm_chain_fused_bit_exact(tmp_path):
    """The two Gemm layers quantized (int8 QDQ, 7-bit weights): integer products (onnxruntime's QGemm on the
    integer form) with their output-major weights, requantized per block, the ReLU between dequantize and quantize;
    bit-exact on the integer form and on the file with onnxruntime's int8 kernels, the counters the model's; each
    block computed by its tile program on the integer operands (counters per level the cost model's)."""
    ops = _qdq_one_group_bit_exact(tiny_mlp(rows=16, d=16, hidden=32), "fc1 -> fc2", tmp_path)
    assert ops == {"Gemm (QDQ)", "DequantizeLinear", "Relu", "QuantizeLinear"}


def _with_head_tiles(monkeypatch, head_tile: int):
    """The fusion search's plan with each group holding a head-split run (attention's scores and context) re-costed
    with ``head_tile`` heads per head tile (the same tile, halos and weight residency; on the tiny block the search
    needs none, the store holding every head's scores), so that the program's head loop runs whatever the search's
    wall-clock limits find."""
    import dataclasses

    import accelmap.compile.fused_groups as fg
    from accelmap.fusion.geometry import head_runs
    from accelmap.fusion.group_cost import GroupCost, group_cost

    real = fg.fuse_model

    def fuse_model(mm, **kw):
        fm = real(mm, **kw)
        choices = []
        for c in fm.best.choices:
            if isinstance(c, GroupCost) and c.join is None and not c.inner_joins:
                chain = next(ch for ch in fm.chains if c.names[0] in ch.nodes and c.names[-1] in ch.nodes)
                stages, macs = chain.group(chain.nodes.index(c.names[0]), chain.nodes.index(c.names[-1]))
                if len(head_runs(stages)) == 1:
                    c2 = group_cost(stages, macs, mm.arch, c.tile_rows, c.tile_cols, c.policies, kw["inner"],
                                    c.weights_resident, head_tile=head_tile)
                    assert not isinstance(c2, str), c2
                    c = c2
            choices.append(c)
        return dataclasses.replace(fm, best=dataclasses.replace(fm.best, choices=tuple(choices)))
    monkeypatch.setattr(fg, "fuse_model", fuse_model)


@pytest.mark.parametrize("qdq", [False, True])
def test_attention_tiled_over_heads_runs_in_the_program(tmp_path, monkeypatch, qdq):
    """Four heads of 8 tokens, the plan's attention group tiled over heads (one head at a time): the program runs the
    head loop inside each tile (the scores, softmax and context per head tile), within tolerance of onnxruntime
    (float) or bit-exact on the integer form (QDQ); every counter (MACs, transfers, the weights' bits) equals the
    fusion model's with the head tile, and the simulator runs the same head tiles (its MACs and weight bits the
    model's)."""
    _with_head_tiles(monkeypatch, 1)
    m = tiny_attention(seq=8, heads=4)
    if qdq:
        m = quantize_qdq(m, reduce_range=True)
    r = compile_model(m, get_accelerator("tpu_like"), tmp_path, simulate=not qdq, **FAST)
    v = r.verification
    assert v is not None and v.ok, v.summary() if v else ""
    if qdq:
        assert v.quantized and all(c.ok for c in v.quantized)
    (grp,) = [g for g in r.groups if g.cost.head_tile is not None]
    assert "scores -> context" in grp.label and grp.cost.counts.head_tiles == 4
    assert grp.counters_ok is True
    # the products per head run the tile programs of one head's share, once per head tile, as the projections run
    # theirs: every level's counters the cost model's
    heads = [j for j, st in enumerate(grp.stages) if st.heads > 1]
    assert heads and grp.programs is not None and set(heads) <= set(grp.programs.programs)
    assert not grp.programs.plain and grp.level_counters_ok is True
    c = grp.cost
    want = fused_counts(grp.stages, c.tile_rows, c.tile_cols, c.policies, head_tile=1)
    host = [sum(grp.computed(x.tensor - 1) for x in grp.host_adds)] if grp.host_adds else []
    assert [int(x) for x in r.run.fused_counters[grp.index]] == [want.input_fetched, want.output_written, 0,
                                                                  *want.macs, *model_weight_bits(c), *host]
    if not qdq:
        assert grp.sim is not None and grp.sim.macs == c.counts.macs
        assert grp.sim.weight_bits == sum(model_weight_bits(c))     # the C, the model and the simulator agree
        assert "head tiles of 1" in r.summary()


def test_a_fused_programs_integer_reference_is_the_unfused_ones(tmp_path):
    """The integer-form reference asks onnxruntime for every quantized value of the steps, not only those the program
    dumps: with fewer graph outputs (a fused group's intermediates) onnxruntime fused more float operators around the
    integer ones and rounded otherwise, and this block (4 heads of 16 tokens, QDQ) failed fused (4 of 256 values of
    the context's output, by up to 21 steps) though its values equal the unfused program's."""
    m = quantize_qdq(tiny_attention(seq=16, heads=4), reduce_range=True)
    r = compile_model(m, get_accelerator("tpu_like"), tmp_path, simulate=False, **FAST)
    v = r.verification
    assert v is not None and v.ok and v.quantized and all(c.ok for c in v.quantized), v.summary() if v else ""
    assert any("scores -> context" in g.label for g in r.groups), r.program.notes


def test_the_attention_to_ffn_link_runs_fused_over_several_tiles(tmp_path):
    """The tiny attention block of 32 tokens on tpu_like with a store of 90,000 bits: the plan's group runs the
    scores, context, the add of the block's input, the layer norm and the feed-forward's first product in tiles of
    16 tokens (two tiles), each tile's add reading its tokens of the input from memory (32 x 16 elements in all);
    within tolerance of onnxruntime, every counter the fusion model's."""
    arch = get_accelerator("tpu_like")
    s = store_index(arch)
    small = dataclasses.replace(arch, levels=arch.levels[:s] + (dataclasses.replace(arch.levels[s], capacity_bits=90_000),)
                                + arch.levels[s + 1:])
    cfg = dict(FAST, fuse_config=dataclasses.replace(FAST["fuse_config"], row_tiles=4, per_mode=2, head_tiles=False))
    r = compile_model(tiny_attention(seq=32), small, tmp_path, simulate=False, **cfg)
    assert r.verification is not None and r.verification.ok, r.verification.summary() if r.verification else ""
    (grp,) = r.groups
    assert grp.label == "scores -> context -> ffn1" and grp.cost.tile_rows == 16 and grp.counters_ok is True
    assert r.run.fused_counters[grp.index][-1] == 32 * 16


def _weights_off_chip(name: str):
    """Preset ``name`` with no on-chip level holding weights: every mapping reads them from memory at each
    multiply-accumulate (once per multicast group)."""
    a = get_accelerator(name)
    levels = tuple(dataclasses.replace(lv, holds=tuple(h for h in lv.holds if h != "W")) if i else lv
                   for i, lv in enumerate(a.levels))
    return dataclasses.replace(a, levels=levels, name=f"{name}_weights_off_chip")


@pytest.mark.parametrize("qdq", [False, True])
def test_weights_kept_on_no_on_chip_level_run_fused_as_the_model_charges(tmp_path, qdq):
    """The two Gemms of the tiny MLP on eyeriss_like with no on-chip level holding weights: the group runs fused
    (before, the weights' fetch had no tile to stage and the group ran layer by layer), each block's fetch reading
    the weights at every multiply-accumulate as its tile mapping does and its tile program reading them from
    memory: the weight bits per stage the model's, every level's counters the cost model's, the output within
    tolerance of onnxruntime (float) or bit-exact (QDQ, on the integer form and with onnxruntime's int8 kernels)."""
    model = tiny_mlp(rows=16, d=16, hidden=32)
    arch = _weights_off_chip("eyeriss_like")
    assert not any("W" in lv.holds for lv in arch.levels[1:])
    r = compile_model(quantize_qdq(model, reduce_range=True) if qdq else model, arch, tmp_path, simulate=False, **FAST)
    v = r.verification
    assert v is not None and v.ok, v.summary() if v else ""
    if qdq:
        assert v.quantized and all(c.ok for c in v.quantized)
    assert [grp.label for grp in r.groups] == ["fc1 -> fc2"], r.program.notes
    grp = r.groups[0]
    assert grp.weights is not None and not grp.cost.weights_resident and sorted(grp.weights.streamed) == [0, 1]
    c = grp.cost
    want = fused_counts(grp.stages, c.tile_rows, c.tile_cols, c.policies)
    assert [int(x) for x in r.run.fused_counters[grp.index]] == [want.input_fetched, want.output_written, 0,
                                                                 *want.macs, *model_weight_bits(grp.cost)]
    assert grp.counters_ok is True and grp.level_counters_ok is True
    assert grp.programs is not None and grp.level_counts is not None
    for j, ms in grp.macs.items():
        k_w = [o.name for o in ms.operator.operands].index(ms.operator.inputs[1].name)
        # the weights move only between memory and the MACs, and every bit the stage fetches is such a read
        assert grp.level_counts[j][1:, k_w].sum() == 0
        assert model_weight_bits(grp.cost)[j] == grp.level_counts[j][0, k_w].sum() * ms.operator.inputs[1].bits > 0


@pytest.mark.parametrize("qdq", [False, True])
def test_grouped_convolutions_run_their_blocks_tile_programs(tmp_path, qdq):
    """conv 3x3 > grouped conv 3x3 (2 groups) > grouped 1x1 conv (4 groups), float on eyeriss_like or int8 QDQ on
    tpu_like: one fused group whose every stage's blocks run their tile programs (the grouped ones too, none in plain
    loops), every level's counters the cost model's, within tolerance of onnxruntime (float) or bit-exact on the
    integer form and with onnxruntime's int8 kernels (QDQ)."""
    model, arch = (quantize_qdq(tiny_grouped(), reduce_range=True), "tpu_like") if qdq else (tiny_grouped(), "eyeriss_like")
    r = compile_model(model, get_accelerator(arch), tmp_path, simulate=False, **FAST)
    v = r.verification
    assert v is not None and v.ok, v.summary() if v else ""
    if qdq:
        assert v.quantized and all(c.ok for c in v.quantized)
        assert v.file_int8_quantized and all(c.ok for c in v.file_int8_quantized + v.file_int8_outputs)
    assert [grp.label for grp in r.groups] == ["conv1 -> gconv2 -> gconv3"], r.program.notes
    grp = r.groups[0]
    assert [ms.operator.kind for ms in grp.macs.values()] == ["conv2d", "grouped_conv2d", "grouped_conv2d"]
    assert grp.programs is not None and sorted(grp.programs.programs) == [0, 1, 2] and not grp.programs.plain
    assert grp.counters_ok is True and grp.level_counters_ok is True
    assert not any("plain loops" in n for n in r.program.notes), r.program.notes
