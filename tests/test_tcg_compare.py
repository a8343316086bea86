"""Top-down matching and the dataflow embedding on the same operator and intrinsic (the benchmark's second table)."""

import numpy as np

from accelmap.arch.intrinsics import get_intrinsic
from accelmap.embed.program import verify_program
from accelmap.embed.search import embed
from accelmap.embed.tcg import evaluate, operator_from_statement, program_from_operator
from accelmap.embed.tcg_execute import run_selection
from accelmap.embed.tcg_match import intrinsic_instruction
from accelmap.embed.tcg_rewrite import search
from tcg_programs import random_inputs, small_program


def test_gemm_with_dot_both_methods_find_verified_programs():
    op = operator_from_statement(small_program("gemm"))
    intr = get_intrinsic("dot_16")
    isa = (intrinsic_instruction(intr),)
    prog = program_from_operator(op)
    td = search(prog, isa, 4, input_transposes=True)
    # dot needs k innermost in both operands: b[k,j] only after its one transpose, and the product's
    # two operand orders are two graphs, so exactly 2 of the 24 candidates are covered (the fissioned and
    # fused graphs have no reduction-free multiply for a dot to cover)
    assert (len(td.candidates), len(td.solutions)) == (24, 2)
    data = random_inputs(prog, np.random.default_rng(0))
    ref = evaluate(prog, data)["c"]
    for c in td.solutions:
        np.testing.assert_allclose(run_selection(c.program, c.tcg, c.selection, isa, data)["c"], ref)
    df = embed(op, intr, "relaxed", processes=1)
    assert df.found and all(verify_program(e.program)[0] for e in df.embeddings)


def test_conv2d_has_no_top_down_solution_with_an_intrinsic_but_a_dataflow_embedding():
    # The limitation of chapter 3 that chapter 4 removes: one workload dimension per instruction
    # dimension leaves kh and kw uncovered, while the dataflow embedding fuses them into the reduction.
    op = operator_from_statement(small_program("conv2d"))
    intr = get_intrinsic("vta_gemm")
    td = search(program_from_operator(op), (intrinsic_instruction(intr),), 4, input_transposes=False)
    assert len(td.candidates) == 394 and not td.solutions
    df = embed(op, intr, "relaxed", processes=1)
    assert df.found and verify_program(df.embeddings[0].program)[0]
