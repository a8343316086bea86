"""Loop fusion of sibling statements (Rieber's 2022 dissertation, Fig. 3.12 and Algorithm 3)."""

import itertools

import numpy as np
import pytest

from accelmap.embed.tcg import build_tcg, evaluate, parse_program, with_fused
from accelmap.embed.tcg_execute import run_selection
from accelmap.embed.tcg_match import Matcher, table_3_1
from accelmap.embed.tcg_rewrite import (
    _graphs,
    canonicalise,
    full_fission,
    fuse,
    fusion_options,
    fusion_problem,
    graph_key,
    inline,
    inline_options,
    search,
)
from accelmap.embed.tcg_select import select
from accelmap.errors import SpecError
from tcg_programs import random_inputs, small_program

ISA = table_3_1()
FIG_3_12 = "t[x,y] = n[x,y] * a[x,y]; r[x,y] = t[x,y] + s"


def test_fusion_builds_the_tree_of_fig_3_12():
    prog = parse_program(FIG_3_12, {"x": 3, "y": 4})
    assert fusion_options(prog) == [1]
    fused = fuse(prog, 1)
    assert fused.fused == (0, 1) and str(fused) == "t[x,y] = (n[x,y] * a[x,y]); [fused x] r[x,y] = (t[x,y] + s)"
    g, plain = build_tcg(fused), build_tcg(prog)
    assert len(g) == len(plain) - 1   # one x loop for both
    x = g.root
    r_y = x.children[0]
    assert len(x.children) == 1 and x.defines == "x"   # no statement before the shared loop
    # below the shared x: r's own y loop, with t's y loop as its left child (the preceding computation)
    assert (r_y.defines, r_y.tensor, r_y.children[1].defines, r_y.children[1].tensor) == ("y", "r", "y", "t")
    assert g.levels == ((x.index, r_y.children[1].index), (x.index, r_y.index))
    # iterator references are upward path lengths: t's x is now reached through r's y loop, whose left
    # child t's y loop is (5 steps instead of 4); r's accesses and all y accesses are unchanged
    assert sorted(n.label for n in plain.nodes if n.kind == "access") == ["A^3"] * 3 + ["A^4"] * 3
    assert sorted(n.label for n in g.nodes if n.kind == "access") == ["A^3"] * 3 + ["A^4"] + ["A^5"] * 2
    # each statement keeps a loop of its own: no second fusion
    assert fusion_options(fused) == []
    with pytest.raises(SpecError, match="cannot fuse statement 1"):
        fuse(fused, 1)


@pytest.mark.parametrize("text, sizes, why", [
    ("t[x,y] = n[x,y] * a[x,y]; r[x,y] = t[y,x] + s", {"x": 3, "y": 3}, "reads t at another iteration"),
    ("t[x,y] = n[x,y] * a[x,y]; r[z,y] = a[z,y] + s", {"x": 3, "y": 4, "z": 2}, "different sizes"),
    ("t[x] = n[x,0] * 2; r[x,y] = t[x] + a[x,y]", {"x": 3, "y": 4}, "keep one of its own"),
])
def test_fusion_is_refused_when_the_thesis_forbids_it(text, sizes, why):
    prog = parse_program(text, sizes)
    assert fusion_options(prog) == []
    assert why in (fusion_problem(with_fused(prog, (0, 1))) or "")


def test_independent_statements_of_equal_sizes_fuse_under_their_own_names():
    prog = parse_program("t[x,y] = n[x,y] * a[x,y]; r[z,y] = a[z,y] + s", {"x": 3, "y": 4, "z": 3})
    assert fusion_options(prog) == [1]
    assert str(fuse(prog, 1)).endswith("[fused z] r[z,y] = (a[z,y] + s)")


def _solved(prog):
    tcg = build_tcg(prog)
    sel = select(tcg, Matcher(ISA).match(tcg))
    assert sel.full
    return tcg, sel


def test_fused_programs_run_in_fused_order():
    # Fig. 3.12's program fused: both statements run inside one x loop, t's row before r's row
    prog = parse_program(FIG_3_12, {"x": 3, "y": 4})
    data = random_inputs(prog, np.random.default_rng(1))
    ref = evaluate(prog, data)["r"]
    fused = fuse(prog, 1)
    tcg, sel = _solved(fused)
    np.testing.assert_allclose(run_selection(fused, tcg, sel, ISA, data)["r"], ref)
    # the same fusion with r reading t's last row would read it before it is written: the fused order shows it
    bad = parse_program("t[x,y] = n[x,y] * a[x,y]; r[x,y] = t[2,y] + s", {"x": 3, "y": 3})
    assert fusion_options(bad) == []
    forced = with_fused(bad, (0, 1))
    tcg, sel = _solved(forced)
    got = run_selection(forced, tcg, sel, ISA, random_inputs(bad, np.random.default_rng(1)))["r"]
    assert np.isnan(got).any()
    tcg, sel = _solved(bad)   # unfused it is fine
    assert not np.isnan(run_selection(bad, tcg, sel, ISA, random_inputs(bad, np.random.default_rng(1)))["r"]).any()


def test_inlining_a_fused_statement_keeps_the_shared_loops():
    prog = parse_program("t[x,y] = n[x,y] * a[x,y]; u[x,y] = t[x,y] + s; r[x,y] = u[x,y] * a[x,y]",
                         {"x": 3, "y": 4})
    g = fuse(fuse(prog, 1), 2)
    assert g.fused == (0, 1, 1)
    h = inline(g, 1)   # u into r: r now follows t and keeps the x loop they all shared
    assert h.fused == (0, 1) and fusion_problem(h) is None
    data = random_inputs(prog, np.random.default_rng(2))
    np.testing.assert_allclose(evaluate(h, data)["r"], evaluate(prog, data)["r"])


def _algorithm_3_with_combinations(start):
    """Algorithm 3 as printed: every conflict-free combination of options (Definition 3.2) per popped graph."""
    def domain(g, tcg, option):
        kind, i = option
        if kind == "fuse":
            return {tcg.levels[i][g.shared(i)], tcg.levels[i - 1][g.shared(i)]}
        return set(tcg.levels[i])

    seen = {graph_key(build_tcg(start))}
    queue = [start]
    while queue:
        g = queue.pop(0)
        tcg = build_tcg(g)
        opts = [("fuse", i) for i in fusion_options(g)] + [("inline", i) for i in inline_options(g)]
        for r in range(1, len(opts) + 1):
            for combo in itertools.combinations(opts, r):
                if any(domain(g, tcg, a) & domain(g, tcg, b)
                       for a, b in itertools.combinations(combo, 2) if not (a[0] == b[0] == "inline")):
                    continue
                depths = list(g.fused or [0] * len(g.statements))
                for kind, i in combo:
                    depths[i] += kind == "fuse"
                h = with_fused(g, depths)
                if fusion_problem(h) is not None:
                    continue
                for si in sorted((i for kind, i in combo if kind == "inline"), reverse=True):
                    h = inline(h, si)
                h = canonicalise(h)
                key = graph_key(build_tcg(h))
                if key not in seen:
                    seen.add(key)
                    queue.append(h)
    return seen


@pytest.mark.parametrize("name", ["fc_bias", "attention", "conv2d"])
def test_one_option_per_step_reaches_the_graphs_of_all_combinations(name):
    base = canonicalise(small_program(name))
    start = canonicalise(full_fission(base))
    ours = {graph_key(build_tcg(g)) for g, _ in _graphs(base, 4)}   # base, fissioned, then Algorithm 3
    printed = _algorithm_3_with_combinations(start)
    assert printed <= ours and ours <= printed | {graph_key(build_tcg(base))}
    assert len(ours) == {"fc_bias": 9, "attention": 9, "conv2d": 197}[name]


def test_fusion_adds_candidates_and_solutions_to_the_search():
    plain = search(small_program("fc_bias"), ISA, 2, input_transposes=True)
    full = search(small_program("fc_bias"), ISA, 4, input_transposes=True)
    fused = [c for c in full.solutions if c.program.fused]
    assert len(full.candidates) > len(plain.candidates) and fused
    data = random_inputs(small_program("fc_bias"), np.random.default_rng(3))
    ref = evaluate(small_program("fc_bias"), data)["y"]
    for cand in fused:
        np.testing.assert_allclose(run_selection(cand.program, cand.tcg, cand.selection, ISA, data)["y"], ref)


def test_output_transposes_reorder_a_result_and_its_readers():
    from accelmap.embed.tcg_rewrite import output_orders

    # y reduces t over its outer dimension: no pattern reduces across an inner one, and an intermediate
    # is no graph input, so input transposes cannot help; storing t as t[j,i] does (Sec. 3.3.1)
    prog = parse_program("t[i,j] = a[i,j] * 2; y[j] = sum(t[i,j], i)", {"i": 3, "j": 4})
    orders = list(output_orders(prog, 100))
    assert [str(p) for p in orders] == ["t[i,j] = (a[i,j] * 2); y[j] = sum(t[i,j], i)",
                                        "t[j,i] = (a[i,j] * 2); y[j] = sum(t[j,i], i)"]
    assert not search(prog, ISA, 1, input_transposes=True).solutions
    res = search(prog, ISA, 1, input_transposes=True, output_transposes=True)
    assert (len(res.candidates), len(res.solutions)) == (4, 1)
    sol = res.solutions[0]
    assert str(sol.program) == "t[j,i] = (a^T10[j,i] * 2); y[j] = sum(t[j,i], i)"
    data = random_inputs(prog, np.random.default_rng(4))
    np.testing.assert_allclose(run_selection(sol.program, sol.tcg, sol.selection, ISA, data)["y"],
                               evaluate(prog, data)["y"])
    # shared loops keep their place: only t's own inner loops of the fused GEMM reorder
    fused = fuse(full_fission(small_program("gemm")), 1)
    assert {p.statements[0].dims for p in output_orders(fused, 100)} == {("i", "j", "k"), ("i", "k", "j")}
    assert all(fusion_problem(p) is None for p in output_orders(fused, 100))
