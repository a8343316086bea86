"""If / Loop / Scan bodies are imported (a Loop's trips multiply its body) or refused clearly."""

from __future__ import annotations

import pytest
from onnx import TensorProto, helper

from accelmap.errors import SpecError
from accelmap.workload.onnx_import import import_onnx
from onnx_graphs import F, I64, const, graph_model, init, node, weight

B = TensorProto.BOOL
vi = helper.make_tensor_value_info


def loop_model(trips_from_input=False, cond_input=""):
    """h <- Conv(h) three times (the trip count a constant, or a graph input)."""
    body = helper.make_graph(
        [node("Identity", ["c_in"], ["c_out"]), node("Conv", ["h", "w"], ["h2"], pads=[1, 1, 1, 1])],
        "body", [vi("i", I64, []), vi("c_in", B, []), vi("h", F, None)],
        [vi("c_out", B, []), vi("h2", F, None)])
    nodes = ([] if trips_from_input else [const("M", 3)]) + [node("Loop", ["M", cond_input, "x"], ["y"], name="rep",
                                                                  body=body)]
    ins = [("x", F, [1, 4, 6, 6])] + ([("M", I64, [])] if trips_from_input else [])
    return graph_model(nodes, ins, inits=[weight("w", [4, 4, 3, 3])])


CONV = 4 * 4 * 36 * 9


def test_loop_with_a_constant_trip_count_counts_its_body_per_trip():
    m = import_onnx(loop_model())
    assert m.total_macs == 3 * CONV
    layer = m.layers[0]
    assert layer.nodes == ("rep/h2",) and layer.count == 3 and layer.repeats == (3,)
    assert any("rep x3" in n for n in m.notes)


def test_loop_with_a_dynamic_trip_count_is_refused_or_bound():
    with pytest.raises(SpecError, match=r"node 'rep' \(Loop\): its trip count 'M' is not a constant; "
                                        r"bind it with --dim rep=COUNT"):
        import_onnx(loop_model(trips_from_input=True))
    assert import_onnx(loop_model(trips_from_input=True), dims={"rep": 5}).total_macs == 5 * CONV
    # A while loop: exporters give the largest int64 as the trip count and end it by the condition.
    while_loop = loop_model(cond_input="go")
    while_loop.graph.input.append(vi("go", B, []))
    while_loop.graph.node[0].CopyFrom(const("M", 2**63 - 1))
    with pytest.raises(SpecError, match=r"node 'rep' \(Loop\): its trip count is 9,223,372,036,854,775,807: a while "
                                        r"loop that its condition ends; bind the number of trips with --dim rep=COUNT"):
        import_onnx(while_loop)
    assert import_onnx(while_loop, dims={"rep": 2}).total_macs == 2 * CONV


def if_model():
    then = helper.make_graph([node("MatMul", ["x", "w"], ["t"])], "then", [], [vi("t", F, None)])
    other = helper.make_graph([node("Relu", ["x"], ["e"])], "else", [], [vi("e", F, None)])
    return graph_model([node("If", ["flag"], ["y"], name="branch", then_branch=then, else_branch=other)],
                       [("x", F, [4, 8]), ("flag", B, [])], inits=[weight("w", [8, 2])])


def test_if_takes_the_branch_the_condition_or_dim_picks():
    with pytest.raises(SpecError, match=r"node 'branch' \(If\): its condition is not a constant.*"
                                        r"--dim branch=1 \(then\) or --dim branch=0 \(else\)"):
        import_onnx(if_model())
    assert import_onnx(if_model(), dims={"branch": 1}).total_macs == 4 * 8 * 2
    with pytest.raises(SpecError, match="no accelerator operator"):
        import_onnx(if_model(), dims={"branch": 0})     # the else branch is host work only
    static = if_model()
    static.graph.input.pop()                             # the condition becomes a constant
    static.graph.initializer.append(helper.make_tensor("flag", B, [], [True]))
    assert import_onnx(static).layers[0].nodes == ("branch/t",)


def test_scan_counts_its_body_per_slice():
    body = helper.make_graph([node("MatMul", ["xs", "w"], ["ys"])], "body",
                             [vi("xs", F, None)], [vi("ys", F, None)])
    m = graph_model([node("Scan", ["x"], ["y"], name="scan", body=body, num_scan_inputs=1,
                          scan_input_axes=[1])],
                    [("x", F, [4, 6, 8])], inits=[weight("w", [8, 2])])
    out = import_onnx(m)
    assert out.total_macs == 6 * (4 * 8 * 2) and out.layers[0].count == 6


@pytest.mark.parametrize("axes,extra_input,said", [
    ([1, 0], False, r"Scan 'scan': scan_input_axes \[1, 0\] has 2 entries for 1 scan inputs"),
    ([1], True, r"subgraph 'body' has 2 inputs; its node gives it 1"),
])
def test_scan_whose_counts_do_not_match_is_refused(axes, extra_input, said):
    body = helper.make_graph([node("MatMul", ["xs", "w"], ["ys"])], "body",
                             [vi("xs", F, None)] + ([vi("extra", F, None)] if extra_input else []),
                             [vi("ys", F, None)])
    m = graph_model([node("Scan", ["x"], ["y"], name="scan", body=body, num_scan_inputs=1, scan_input_axes=axes)],
                    [("x", F, [4, 6, 8])], inits=[weight("w", [8, 2])])
    with pytest.raises(SpecError, match=said):
        import_onnx(m)


def test_nested_body_reads_outer_scope_and_unknown_ops_inside_are_listed():
    inner = helper.make_graph([node("Mystery", ["x"], ["z"], domain="com.vendor"), node("Gemm", ["x", "w"], ["t"])],
                              "then", [], [vi("t", F, None)])
    other = helper.make_graph([node("Gemm", ["x", "w"], ["e"])], "else", [], [vi("e", F, None)])
    m = graph_model([const("c", True, bool), node("If", ["c"], ["y"], name="br", then_branch=inner,
                                                   else_branch=other)],
                    [("x", F, [3, 5])], inits=[weight("w", [5, 7])])
    m.opset_import.append(helper.make_opsetid("com.vendor", 1))
    out = import_onnx(m)
    assert out.total_macs == 3 * 5 * 7 and [u.name for u in out.unknown_ops] == ["br/z"]


def test_a_loop_with_a_condition_counts_at_most_its_trips_and_lenient_lists_the_loop_once():
    m = loop_model(cond_input="go")
    m.graph.input.append(vi("go", B, []))
    out = import_onnx(m)
    assert out.total_macs == 3 * CONV and any("rep x3 (at most" in n for n in out.notes)
    dyn = loop_model(trips_from_input=True)
    dyn.graph.node.append(node("Conv", ["x", "w"], ["z"]))
    lenient = import_onnx(dyn, strict=False)
    assert [(h.name, h.note[:40]) for h in lenient.host_ops] == [("rep", "not imported: its trip count 'M' is not ")]


def test_other_ops_with_mac_bodies_are_refused():
    body = helper.make_graph([node("MatMul", ["s", "w"], ["t"])], "body", [vi("s", F, [2, 3])], [vi("t", F, None)])
    m = graph_model([node("SequenceConstruct", ["x"], ["seq"]),
                     node("SequenceMap", ["seq"], ["out"], body=body)],
                    [("x", F, [2, 3])], outputs=[("out", TensorProto.UNDEFINED, None)], inits=[weight("w", [3, 4])])
    with pytest.raises(SpecError, match=r"node 'out' \(SequenceMap\): has subgraphs with MAC ops"):
        import_onnx(m)


def test_shapes_continue_after_control_flow():
    # After the Loop: the carried value keeps its shape, so the next Conv imports.
    m = loop_model()
    m.graph.node.append(node("Conv", ["y", "w"], ["z"]))
    assert import_onnx(m).total_macs == 3 * CONV + 4 * 4 * 16 * 9
    # After a Scan: per-slice outputs stacked along axis 0 ([6, 4, 2]), then a MatMul.
    body = helper.make_graph([node("MatMul", ["xs", "w"], ["ys"])], "body", [vi("xs", F, None)], [vi("ys", F, None)])
    scan = graph_model([node("Scan", ["x"], ["y"], name="scan", body=body, num_scan_inputs=1, scan_input_axes=[1]),
                        node("MatMul", ["y", "w2"], ["z"])],
                       [("x", F, [4, 6, 8])], inits=[weight("w", [8, 2]), weight("w2", [2, 3])])
    assert import_onnx(scan).total_macs == 6 * (4 * 8 * 2) + 6 * 4 * 2 * 3
    # After an If whose branches agree on the shape.
    other = helper.make_graph([node("MatMul", ["x", "w"], ["e"])], "else", [], [vi("e", F, None)])
    cond = if_model()
    next(a for a in cond.graph.node[0].attribute if a.name == "else_branch").g.CopyFrom(other)
    cond.graph.node.append(node("MatMul", ["y", "w3"], ["z"]))
    cond.graph.initializer.append(weight("w3", [2, 5]))
    assert import_onnx(cond, dims={"branch": 0}).total_macs == 4 * 8 * 2 + 4 * 2 * 5
