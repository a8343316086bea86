"""Rewrites keep the computation (checked with NumPy) and the search shows Table 3.3's trends."""

import numpy as np
import pytest
from click.testing import CliRunner

from accelmap.cli import main
from accelmap.embed.tcg import THESIS_OPERATORS, Binary, Load, build_tcg, evaluate, parse_program
from accelmap.embed.tcg_match import table_3_1
from accelmap.embed.tcg_rewrite import (
    canonicalise,
    full_fission,
    inline,
    inline_options,
    search,
)
from tcg_programs import random_inputs, small_program

ISA = table_3_1()
@pytest.mark.parametrize("name", list(THESIS_OPERATORS))
def test_every_candidate_computes_the_operator(name):
    rng = np.random.default_rng(3)
    prog = small_program(name)
    data = random_inputs(prog, rng)
    out = prog.statements[-1].out
    ref = evaluate(prog, data)[out]
    if name.startswith("capsule_routing"):   # nine and twelve statements: swaps, fission and inlinings, without the transposes
        cands = search(prog, ISA, 4, limit=150).candidates
        assert max(c.transformations for c in cands) >= 3
    else:
        # the convolutions without input transposes, so that the limit leaves room for their fused graphs
        cands = search(prog, ISA, 4, input_transposes=not name.startswith("conv"), limit=1500).candidates
        assert any(c.program.fused for c in cands)
    for cand in cands[::max(1, len(cands) // 60)]:
        np.testing.assert_allclose(evaluate(cand.program, data)[out], ref, rtol=1e-10, atol=1e-12)


def test_canonicalisation_follows_table_3_2():
    p = parse_program("t[i] = 2 * x[i]; y[i] = x[i] + t[i]; z[i] = (3 + x[i]) + y[i]", {"i": 4})
    c = canonicalise(p)
    assert str(c.statements[0]) == "t[i] = (x[i] * 2)"          # constants to the right
    assert str(c.statements[1]) == "y[i] = (t[i] + x[i])"       # the dependent value to the left
    assert str(c.statements[2]) == "z[i] = ((x[i] + 3) + y[i])"  # both dependent: unchanged
    sub = parse_program("y[i] = 1 - x[i]", {"i": 4})
    assert canonicalise(sub) == sub   # non-commutative: unchanged


def test_full_fission_leaves_one_operation_per_statement_and_inlining_undoes_it():
    conv = small_program("conv2d")
    f = full_fission(conv)
    assert len(f.statements) == 4
    for st in f.statements:
        assert isinstance(st.expr, Binary) or isinstance(st.expr.body, Load)
    assert f.statements[0].dims == ("n", "h", "w", "c", "kh", "kw", "ic")   # reduction fission adds the dims
    g = f
    while inline_options(g):
        g = inline(g, inline_options(g)[0])
    assert build_tcg(g).nodes[0].label == build_tcg(conv).nodes[0].label and len(build_tcg(g)) == len(build_tcg(conv))


def test_gemm_finds_the_4_solutions_of_table_3_3_and_their_fused_twins():
    res = search(small_program("gemm"), ISA, 4, input_transposes=True)
    assert res.nodes == 11
    # 24 candidates here against the thesis' 35: we count graphs, deduplicated, after swaps and transposes
    assert (len(res.candidates), len(res.solutions)) == (24, 6)
    used = sorted((sorted(m.instruction for m in c.selection.matches), bool(c.program.fused)) for c in res.solutions)
    assert used == [(["dot_mul_add"], False), (["mv_mul_add"], False),
                    (["red_add", "vv_mul"], False), (["red_add", "vv_mul"], False),
                    (["red_add", "vv_mul"], True), (["red_add", "vv_mul"], True)]


def test_configurations_and_the_candidate_explosion():
    counts = {}
    for name in ("gemm", "fc_bias", "attention", "conv2d"):
        for config in (1, 2, 3, 4):
            # Conv2D's configuration 4 with input transposes is up to 226,944 graphs: the benchmark's job
            r = search(small_program(name), ISA, config, input_transposes=(name, config) != ("conv2d", 4))
            counts[name, config] = (len(r.candidates), len(r.solutions))
    # config 3 adds nothing to config 1 for GEMM and Conv2D (one loop nest: nothing to fuse), as in Fig. 3.15
    assert counts["gemm", 3] == counts["gemm", 1] and counts["conv2d", 3] == counts["conv2d", 1]
    # FC + Bias and Attention have two statements: loop fusion of the two is what config 3 adds
    assert counts["fc_bias", 3][0] > counts["fc_bias", 1][0] and counts["attention", 3][0] > counts["attention", 1][0]
    # Conv2D needs fission to find anything (Fig. 3.15); config 4 finds the most
    assert counts["conv2d", 1][1] == 0 and counts["conv2d", 2] == (2304, 72)
    assert counts["gemm", 4][1] > counts["gemm", 2][1] and counts["fc_bias", 4][1] > counts["fc_bias", 2][1]
    # fission then fusion: Conv2D's four statements fuse into 394 loop structures and inlinings, without
    # any transposes; the dense operators have a few dozen graphs with them
    assert counts["conv2d", 4][0] == 394
    assert max(counts[n, 4][0] for n in ("gemm", "fc_bias", "attention")) == 144
    hit = {n: counts[n, 2][1] / counts[n, 2][0] for n in ("gemm", "attention", "conv2d")}
    assert hit["gemm"] > hit["attention"] > hit["conv2d"]


def test_cli_match_prints_counts_and_solutions():
    r = CliRunner().invoke(main, ["match", "--workload", "gemm", "--isa", "table3.1", "--no-tree"])
    assert r.exit_code == 0, r.output
    assert "11 nodes, 24 candidates, 6 solutions" in r.output and "dot_mul_add" in r.output
    bad = CliRunner().invoke(main, ["match", "--workload", "nonsense"])
    assert bad.exit_code == 2 and "--workload" in bad.output
    none = CliRunner().invoke(main, ["match", "--workload", "conv2d", "--config", "1", "--no-tree"])
    assert none.exit_code == 1 and "no candidate is fully covered" in none.output


@pytest.mark.parametrize("args, message", [
    (["-w", "gemm", "--sizes", "i=x"], "--sizes: 'i=x' is not name=positive integer"),
    (["-w", "gemm", "--sizes", "q=3"], "--sizes: gemm has no dimensions ['q']"),
    (["-w", "y[i] = x[j]", "--sizes", "i=2,j=2"], "statement 'y[i] = x[j]': index 'j' is neither"),
    (["-w", "gemm", "--isa", "nope"], "--isa: unknown instruction set 'nope'"),
])
def test_cli_match_bad_input_is_one_line(args, message):
    r = CliRunner().invoke(main, ["match", "--no-tree", *args])
    assert r.exit_code == 2
    err = [line for line in r.output.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and message in err[0]


def test_cli_match_an_onnx_layer():
    # ResNet-18's classifier (ONNX Gemm, 512 -> 1000) as a TCG: the dot product covers it natively
    r = CliRunner().invoke(main, ["match", "-w", "resnet18", "--layer", "fc", "--config", "1", "--no-tree"])
    assert r.exit_code == 0, r.output
    assert "program: O[N,K] = sum((I[N,C] * W[K,C]), C)" in r.output and "11 nodes" in r.output
    assert "dot_mul_add@2 (7 nodes, masked N,K)" in r.output
    bad = CliRunner().invoke(main, ["match", "-w", "resnet18", "--layer", "nope", "--no-tree"])
    assert bad.exit_code == 2 and "--layer: resnet18 has no layer 'nope'; its layers (" in bad.output
    alone = CliRunner().invoke(main, ["match", "-w", "gemm", "--layer", "fc", "--no-tree"])
    assert alone.exit_code == 2 and "--layer: --layer NAME goes with a model" in alone.output


def test_cli_match_lanes_and_sizes():
    r = CliRunner().invoke(main, ["match", "-w", "gemm", "--sizes", "j=20,k=40", "--lanes", "16", "--no-tree"])
    assert r.exit_code == 0 and "tiling: dot_mul_add.k=40: 3 tiles, pad 8" in r.output
    # i = 64 and j = 20 stay loops around the dot product, k = 40 is three 16-lane calls, one cycle each
    assert "cycles: 3,840 issue cycles (dot_mul_add 3,840 x 1)" in r.output
    # an intrinsic keeps its own sizes (VTA's 16x16 along j and k), whatever --lanes says: 64 x 4 x 4 calls
    vta = CliRunner().invoke(main, ["match", "-w", "gemm", "--isa", "vta_gemm", "--lanes", "8", "--no-tree"])
    assert "tiling: vta_gemm.j=64: 4 tiles; vta_gemm.k=64: 4 tiles" in vta.output
    assert "cycles: 1,024 issue cycles (vta_gemm 1,024 x 1)" in vta.output


@pytest.mark.parametrize("name", ["fc_bias", "conv2d_relu"])
def test_global_layouts_keep_the_computation(name):
    rng = np.random.default_rng(4)
    prog = small_program(name)
    data = random_inputs(prog, rng)
    final = prog.statements[-1]
    ref = evaluate(prog, data)[final.out]
    cands = search(prog, ISA, 4, layouts=True, limit=3000).candidates
    assert len({c.program.statements[-1].dims for c in cands}) > 1   # the result layout does change
    for cand in cands[::max(1, len(cands) // 60)]:
        dims = cand.program.statements[-1].dims
        got = evaluate(cand.program, data)[final.out].transpose([dims.index(d) for d in final.dims])
        np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12)


def test_global_layouts_count():
    from accelmap.embed.tcg_rewrite import global_layouts

    assert len(global_layouts(small_program("conv2d"))) == 24   # Table 3.5: 24 permutations of 4 dimensions
    # GEMM's transposed layout is the operand-swapped GEMM under renaming, so it adds no new graph
    plain = search(small_program("gemm"), ISA, 4, input_transposes=True)
    glob = search(small_program("gemm"), ISA, 4, input_transposes=True, layouts=True)
    assert len(glob.candidates) == len(plain.candidates) == 24


def test_table_3_3_setting_with_the_thesis_operand_layouts():
    # Without transposes (Table 3.3) and with the second operand's reduced dimension innermost (eq. 3.2's k^T),
    # Fig. 3.15's findings hold: configuration 1 covers GEMM natively, Conv2D needs fission, configuration 3
    # adds nothing to 1 for either, and GEMM's solutions are Table 3.3's 4 once swap twins count once.
    gemm = parse_program("c[i,j] = sum(a[i,k] * b[j,k], k)", {"i": 3, "j": 4, "k": 5})
    conv = parse_program("y[n,h,w,c] = sum(x[n,h+kh,w+kw,ic] * f[c,kh,kw,ic], kh, kw, ic)",
                         {"n": 1, "h": 3, "w": 2, "c": 2, "kh": 2, "kw": 2, "ic": 2})
    got = {(name, cfg): search(p, ISA, cfg) for name, p in (("gemm", gemm), ("conv2d", conv)) for cfg in (1, 2, 3)}
    assert [(len(got["gemm", c].candidates), len(got["gemm", c].solutions)) for c in (1, 2, 3)] == [
        (2, 2), (4, 4), (2, 2)]
    assert [(len(got["conv2d", c].candidates), len(got["conv2d", c].solutions)) for c in (1, 2, 3)] == [
        (2, 0), (4, 2), (2, 0)]
    full = search(gemm, ISA, 4)
    assert (len(full.candidates), len(full.solutions), full.solutions_up_to_swaps) == (6, 6, 4)


def test_capsule_routing_in_table_3_3_setting_follows_fig_3_15():
    # no solution without fission (configurations 1 and 3, Fig. 3.15: only GEMM and Attention are covered
    # natively, fusion alone does not help Capsule Routing), one instruction program after full fission
    # (its 16 operand orders), and fused solutions in configuration 4
    prog = small_program("capsule_routing")
    got = {cfg: search(prog, ISA, cfg, limit=200) for cfg in (1, 2, 3)}
    assert (len(got[1].candidates), len(got[1].solutions)) == (32, 0)
    assert (len(got[2].candidates), len(got[2].solutions), got[2].solutions_up_to_swaps) == (64, 16, 1)
    assert len(got[3].candidates) == 200 and not got[3].solutions
    assert {m.instruction for m in got[2].solutions[0].selection.matches} == {
        "vv_mul", "red_add", "vexp", "vv_div", "vs_add_imm", "vs_mul", "vv_add"}
