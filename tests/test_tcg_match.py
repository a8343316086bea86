"""The Aho-Corasick matcher and Algorithm 1 selection, each against a brute-force twin."""

import itertools
import random

import pytest

from accelmap.embed.tcg import TCG, Node, build_tcg, parse_program, thesis_program
from accelmap.embed.tcg_match import PathAutomaton, _masked_accesses, _region, match, table_3_1
from accelmap.embed.tcg_rewrite import search
from accelmap.embed.tcg_select import select

ISA = table_3_1()


def test_automaton_finds_every_occurrence_like_a_naive_scan():
    rng = random.Random(7)
    alphabet = ["a", "b", "c"]
    for _ in range(50):
        pats = {tuple(rng.choice(alphabet) for _ in range(rng.randint(1, 4))) for _ in range(6)}
        text = [rng.choice(alphabet) for _ in range(30)]
        auto = PathAutomaton((p, p) for p in pats)
        s, found = 0, set()
        for end, tok in enumerate(text):
            s = auto.step(s, tok)
            found |= {(tag, end - length + 1) for tag, length in auto.out[s]}
        naive = {(p, i) for p in pats for i in range(len(text) - len(p) + 1) if tuple(text[i:i + len(p)]) == p}
        assert found == naive


def _same_tree(w: Node, p: Node, inside: set[int]) -> bool:
    """Direct tree comparison of a (masked) workload subtree with a pattern."""
    if w.label != p.label:
        return False
    kids = w.children[:1] if w.kind == "tensor" else w.children
    if w.kind == "input" and w.children:
        k = _masked_accesses(w, inside)
        kids = w.children[:len(w.children) - k]
        if not kids and not p.children:
            return True
    return len(kids) == len(p.children) and all(_same_tree(a, b, inside) for a, b in zip(kids, p.children, strict=True))


def brute_matches(g: TCG) -> set[tuple[int, str]]:
    out = set()
    for n in g.nodes:
        inside = {x.index for x in _region(n)}
        for ins in ISA:
            if n.kind in ("tensor", "reduction", "compute") and _same_tree(n, ins.pattern, inside):
                out.add((n.index, ins.name))
    return out


def _candidates(name, limit):
    return search(thesis_program(name), ISA, 4, input_transposes=True, limit=limit).candidates


@pytest.mark.parametrize("name", ["gemm", "fc_bias", "attention", "conv2d", "fc_bias_sigmoid"])
def test_matcher_equals_direct_tree_comparison(name):
    for cand in _candidates(name, 300)[::7]:
        assert {(m.root, m.instruction) for m in match(cand.tcg, ISA)} == brute_matches(cand.tcg)


def test_gemm_matches():
    plain = build_tcg(thesis_program("gemm"))
    assert match(plain, ISA) == []   # b[k,j] has j inside k: no Table 3.1 pattern fits without a transpose
    bt = build_tcg(parse_program("c[i,j] = sum(bt[j,k] * a[i,k], k)", {"i": 4, "j": 4, "k": 4}))
    got = {(m.instruction, m.root, tuple(sorted(m.masked))) for m in match(bt, ISA)}
    assert got == {("mv_mul_add", 1, ("i",)), ("dot_mul_add", 2, ("i", "j"))}


def test_fc_bias_full_match_needs_equal_leaf_counts():
    g = build_tcg(thesis_program("fc_bias"))
    names = {m.instruction for m in match(g, ISA)}
    assert names == {"vv_add", "dot_mul_add"}
    # at tensor j, b[j] is a vector, so the vector-scalar add does not fit; at tensor n the subtree
    # still holds tensor j, so a one-dimensional pattern would leave part of it uncovered
    assert "vs_add" not in names and "vs_add_imm" not in names


def test_scalar_operand_matches_a_fully_masked_input():
    g = build_tcg(parse_program("y[i,j] = x[i,j] * s[i]", {"i": 4, "j": 4}))
    got = {(m.instruction, m.root) for m in match(g, ISA)}
    assert ("vs_mul", 1) in got and ("vv_mul", 1) not in got


def test_selection_equals_brute_force_over_subsets():
    checked = 0
    for name in ("gemm", "fc_bias", "fc_bias_sigmoid", "conv2d_relu"):
        for cand in _candidates(name, 200)[::5]:
            ms = match(cand.tcg, ISA)
            if len(ms) > 12:
                continue
            best = 0
            for r in range(len(ms) + 1):
                for combo in itertools.combinations(ms, r):
                    sets = [m.covered for m in combo]
                    if sum(map(len, sets)) == len(set().union(*sets)):
                        best = max(best, sum(map(len, sets)))
            sel = select(cand.tcg, ms)
            assert sel.covered == best
            assert not any(a.covered & b.covered for a, b in itertools.combinations(sel.matches, 2))
            checked += 1
    assert checked > 20


def test_selection_of_an_unmatched_graph_is_empty():
    g = build_tcg(thesis_program("gemm"))
    sel = select(g, [])
    assert sel.matches == () and sel.covered == 0 and not sel.full


def test_our_intrinsics_as_patterns():
    from accelmap.embed.tcg_match import get_isa

    vta, = get_isa("vta_gemm")
    assert vta.text == "c[y] = sum(a[z] * b[z,y], z)"   # x has size 1: no loop of the intrinsic
    cube, = get_isa("ascend_cube")
    gemm = build_tcg(thesis_program("gemm"))
    assert [(m.instruction, m.root, m.masked) for m in match(gemm, (vta, cube))] == [
        ("ascend_cube", 0, ()), ("vta_gemm", 1, ("i",))]
    assert len(get_isa("library")) == 6
