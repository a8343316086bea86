"""The tensor compute graph IR: node counts, iterator labels, the program parser and the NumPy semantics."""

import numpy as np
import pytest

from accelmap.embed.tcg import (
    THESIS_OPERATORS,
    build_tcg,
    evaluate,
    operator_from_statement,
    parse_program,
    program_from_operator,
    routing_host_inputs,
    thesis_program,
)
from accelmap.embed.tcg_rewrite import graph_key
from accelmap.errors import SpecError
from accelmap.workload.constructors import gemm
from tcg_programs import random_inputs, small_program


def test_gemm_has_the_11_nodes_of_table_3_3():
    g = build_tcg(thesis_program("gemm"))
    assert len(g) == 11
    assert [n.kind for n in g.nodes] == ["tensor", "tensor", "reduction", "input", "compute",
                                         "input", "access", "access", "input", "access", "access"]
    # right-to-left pre-order: the reduction's init (right child) before its body, b before a
    assert g.nodes[3].text == "const 0" and g.nodes[5].text == "input b" and g.nodes[8].text == "input a"
    # iterator references are upward distances: a's k is 3 steps below the reduction, b's j 4 below tensor j
    assert g.nodes[9].label == "A^3" and g.nodes[6].label == "A^4" and g.nodes[10].label == "A^5"
    assert len(g.algebraic) == 2


def test_node_counts_by_hand():
    # conv2d: 4 tensors, 3 reductions with 3 init constants, mul, x with accesses n, h+kh (3 nodes),
    # w+kw (3 nodes), ic, f with 4 accesses = 4+3+3+1+1+8+1+4
    counts = {k: len(build_tcg(thesis_program(k))) for k in THESIS_OPERATORS}
    assert counts["conv2d"] == 25
    # fc_bias: t (2 tensors, reduction, init, mul, x+2, w+2 = 11) then y (2 tensors, add, t+2, b+1 = 8)
    assert counts["fc_bias"] == 19
    # attention: t as GEMM (11) then r = s * t (2 tensors, mul, scalar s, t+2 = 7)
    assert counts["attention"] == 18


def test_statements_chain_through_left_children():
    g = build_tcg(thesis_program("fc_bias"))
    root = g.root
    assert root.text == "tensor y:n" and root.children[1].text == "tensor t:n"
    dep = next(n for n in g.nodes if n.text.startswith("input t"))
    assert dep.producer is root.children[1]


def test_our_gemm_operator_gives_the_thesis_gemm_graph():
    op = gemm(m=4, n=5, k=6)
    ours = build_tcg(program_from_operator(op))
    assert graph_key(ours) == graph_key(build_tcg(thesis_program("gemm")))


def test_pretty_print_names_every_node():
    text = build_tcg(thesis_program("gemm")).pretty()
    assert text.splitlines()[2] == "  2     R: reduction add:k"
    assert len(text.splitlines()) == 11


@pytest.mark.parametrize("text, what", [
    ("y[i] = ", "cannot read"),
    ("y[i] = foo(x[i])", "cannot read 'foo(x[i])'"),
    ("y[i+1] = x[i]", "plain dimensions"),
    ("y[i] = x[i] + z[q]", "no size given"),
    ("y[i] = x[i*i-1]", "not an affine expression"),
])
def test_bad_programs_say_what_is_wrong(text, what):
    with pytest.raises(SpecError, match=what.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")
                       .replace("*", r"\*").replace("+", r"\+")):
        parse_program(text, {"i": 4})


def test_evaluate_matches_numpy_for_conv_fc_and_sigmoid():
    rng = np.random.default_rng(1)
    conv = parse_program(THESIS_OPERATORS["conv2d"][0], dict(n=2, h=4, w=3, c=5, kh=3, kw=2, ic=3))
    x, f = rng.standard_normal((2, 6, 4, 3)), rng.standard_normal((3, 2, 3, 5))
    ref = sum(np.einsum("nhwi,ic->nhwc", x[:, a:a + 4, b:b + 3, :], f[a, b]) for a in range(3) for b in range(2))
    np.testing.assert_allclose(evaluate(conv, {"x": x, "f": f})["y"], ref, rtol=1e-12)
    fc = parse_program(THESIS_OPERATORS["fc_bias_sigmoid"][0], dict(n=3, j=4, k=5))
    xx, w, b = rng.standard_normal((3, 5)), rng.standard_normal((4, 5)), rng.standard_normal(4)
    np.testing.assert_allclose(evaluate(fc, {"x": xx, "w": w, "b": b})["y"], 1 / (1 + np.exp(-(xx @ w.T + b))),
                               rtol=1e-12)


@pytest.mark.parametrize("name", ["gemm", "fc_bias", "attention", "conv2d", "conv2d_relu"])
def test_operator_from_statement_is_the_inverse_of_program_from_operator(name):
    prog = small_program(name)
    op = operator_from_statement(prog)
    assert op is not None and len(op.inputs) == 2
    mac = program_from_operator(op)
    assert str(mac.statements[0]) == str(prog.statements[0])
    data = random_inputs(prog, np.random.default_rng(1))
    out = prog.statements[0].out
    np.testing.assert_allclose(evaluate(mac, {o.name: data[o.name] for o in op.inputs})[out], evaluate(prog, data)[out])


def test_operator_from_statement_refuses_what_is_no_multiply_accumulate():
    fc = thesis_program("fc_bias")
    assert operator_from_statement(fc, 1) is None          # y = t + b
    assert operator_from_statement(thesis_program("attention"), 1) is None   # r = s * t, s a scalar
    assert operator_from_statement(parse_program("y[i] = sum(a[i,k] * b[k] * c[k], k)", dict(i=2, k=3))) is None
    assert operator_from_statement(parse_program("y[i] = sum(max(a[i,k], b[k]), k)", dict(i=2, k=3))) is None


def _routing(w, u, bl):
    """Sabour, Frosst and Hinton (2017), procedure 1, one iteration, written independently with einsum."""
    uh = np.einsum("ijde,ie->ijd", w, u)
    c = np.exp(bl) / np.exp(bl).sum(axis=1, keepdims=True)
    s = np.einsum("ij,ijd->jd", c, uh)
    n2 = (s * s).sum(axis=1, keepdims=True)
    v = n2 / (1 + n2) * s / np.sqrt(n2)                 # squash
    return v, bl + np.einsum("ijd,jd->ij", uh, v)


def test_capsule_routing_is_one_dynamic_routing_iteration():
    prog = small_program("capsule_routing_sqrt")
    data = random_inputs(prog, np.random.default_rng(2))
    v, want = _routing(data["w"], data["u"], data["bl"])
    got = evaluate(prog, data)
    np.testing.assert_allclose(got["v"], v, rtol=1e-12)
    np.testing.assert_allclose(got["bn"], want, rtol=1e-12)
    # nodes per statement by hand (tensors, reductions with their init, computes, inputs with accesses):
    # uh 14, eb 6, z 6, c 8, s 12, n2 10, v 14, ag 12, bn 9; algebraic: 2+1+1+1+2+2+4+2+1
    g = build_tcg(prog)
    assert (len(g), len(g.algebraic)) == (91, 16)


def test_capsule_routing_in_table_3_3_setting_is_the_same_iteration_with_the_host_norm():
    prog = small_program("capsule_routing")
    data = random_inputs(prog, np.random.default_rng(4))
    host = routing_host_inputs(prog, data)
    # w is stored [j,d,i,e] for the prediction vectors' layouts; the routing reads it as [i,j,d,e]
    v, want = _routing(host["w"].transpose(2, 0, 1, 3), host["u"], host["bl"])
    got = evaluate(prog, host)
    np.testing.assert_allclose(got["v"], v, rtol=1e-12)
    np.testing.assert_allclose(got["bn"], want, rtol=1e-12)
    assert not np.allclose(evaluate(prog, dict(host, nr=host["nr"] + 1))["bn"], want)   # nr is really read
    # the nodes of the square-root form (91) plus ut (14) and ec (6), c and sc/v in place of c and v
    # (8 and 8 + 5 against 8 and 14)
    g = build_tcg(prog)
    assert (len(g), len(g.algebraic)) == (113, 18)
