"""Vector block instructions in the emitted C: one instruction per operation and row of a tile, its repeats of
256 bytes counted by the C and equal to what the timing model charges; results identical to NumPy (bit-exact
for integers, within the float tolerance otherwise); statements left element by element say why."""

import pytest

from accelmap.arch.presets import get_accelerator
from accelmap.poly.c_code import generate_c, run_and_check
from accelmap.poly.compile import compile_subgraph
from accelmap.poly.dsl import parse_subgraph
from accelmap.poly.kernel import Access, Affine, Statement
from accelmap.poly.library import library_subgraph
from accelmap.poly.tiling import parse_tile_spec
from accelmap.poly.timing import time_compiled
from accelmap.poly.vector_intrinsics import instructions, row_repeats, vector_work

ASCEND = get_accelerator("ascend_like")


def _compiled(text: str, spec: str | None = None, fuse: bool = True):
    k = parse_subgraph(text, "test")
    return compile_subgraph(k, ASCEND, fuse=fuse, tile_spec=parse_tile_spec(spec) if spec else None)


def _model(c) -> tuple[int, int]:
    t = time_compiled(c)
    return sum(k.vector_instructions for k in t.kernels), sum(k.vector_repeats for k in t.kernels)


def test_vector_work_charges_rows_of_repeats():
    st = Statement("S0", (("n", 16), ("d", 1000)), Access("Y", (Affine((("n", 1),)), Affine((("d", 1),)))),
                   Access("X", (Affine((("n", 1),)), Affine((("d", 1),)))), "assign")
    k = parse_subgraph("name t\ninput X[16, 1000] float32\nY[n:16, d:1000] = X[n, d]", "t")
    # 16 rows of 1000 fp32 = 4000 bytes: 16 repeats each (the last one masked); one copy instruction per row
    assert vector_work(k, st, {"n": 16, "d": 1000}, True, "d") == (16, 16 * 16)
    assert row_repeats(40, 4) == 1 and row_repeats(64, 4) == 1 and row_repeats(65, 4) == 2
    # strided: one element per 32-byte block, 8 per repeat
    assert vector_work(k, st, {"n": 16, "d": 1000}, False, None) == (2000, 2000)


def test_instructions_follow_the_operations():
    k = parse_subgraph("name t\ninput X[4, 64] float32\nS[n:4] = sum(exp(X[n, d]) * 2.0, d=64)\n"
                       "Y[n:4, d:64] = max(X[n, d] - S[n], 0.0)", "t")
    init, upd, y = k.statements
    assert instructions(init, "n") == ["vector_dup"]
    assert instructions(upd, "d") == ["vexp", "vmul", "vcadd"]        # the row is reduced into S[n]
    assert instructions(upd, "n") == ["vexp", "vmul", "vadd"]         # rows along n accumulate elementwise
    assert instructions(y, "d") == ["vsub", "vmax"]


@pytest.mark.parametrize("name, sizes, instrs, repeats", [
    # 16 rows of 1024 elements per tile: fp16 add is 8 repeats per row, one instruction per row
    ("add", {}, 16, 16 * 8),
    ("relu", {}, 16, 16 * 8),             # fp16 relu: 1024 x 2 B = 8 repeats; max(x, 0) is one vmax
    ("cast", {}, 16, 16 * 16),            # fp32 -> fp16: the widest type sets 64 elements per repeat
    ("one_hot", {}, 256, 256),            # select(idx == c, 1, 0): vcmp + vsel over rows of 64 int32
])
def test_library_kinds_issue_the_models_vector_instructions(name, sizes, instrs, repeats):
    c = compile_subgraph(parse_subgraph(library_subgraph(name, **sizes), name), ASCEND, fuse=True)
    src, _ = generate_c(c)
    assert "static void vec_S0(" in src
    r = run_and_check(c)
    assert r.ok, r.detail
    n_ops = len(instructions(c.kernel.statements[0], c.vector_row_dims["S0"]))
    assert (r.counts["vector_instructions"], r.counts["vector_repeats"]) == _model(c) \
        == (instrs * n_ops, repeats * n_ops)


def test_integer_chain_with_tiles_and_a_partial_repeat_is_bit_exact():
    """Tiles of 24 columns of int32 (96 bytes: one masked repeat per row) over 72 columns; the rows of the last
    tile are as long as the others; the C's counts equal the model's."""
    c = _compiled("name t\ninput X[8, 72] int32\ninput B[72] int32\n"
                  "Y[n:8, d:72] = X[n, d] * 3 + B[d]\nZ[n:8, d:72] = max(Y[n, d], 7)", "S_0: 8@UB, 24@UB; S_1: 8@UB, 24@UB",
                  fuse=False)
    r = run_and_check(c)
    assert r.exact and r.counts["vector_repeats"] > 0
    assert (r.counts["vector_instructions"], r.counts["vector_repeats"]) == _model(c)


def test_row_reduction_is_a_vcadd_and_bit_exact():
    c = _compiled("name t\ninput X[32, 64] int32\nS[n:32] = sum(X[n, d] * X[n, d], d=64)", fuse=False)
    src, _ = generate_c(c)
    assert "vcadd" in src and "vec_S1(" in src
    r = run_and_check(c)
    assert r.exact, r.detail
    assert (r.counts["vector_instructions"], r.counts["vector_repeats"]) == _model(c)


def test_strided_and_misaligned_statements_say_why():
    from accelmap.poly.c_code import with_flags
    from accelmap.poly.vector_intrinsics import vector_rows
    c = compile_subgraph(parse_subgraph(library_subgraph("transpose"), "transpose"), ASCEND, fuse=True)
    rows = vector_rows(c, with_flags(c)[0], set(), "d_")
    assert not rows.rows and "a stride" in rows.notes[0]
    for shift, why in ((1, "a row of X[n, d + 1] starts at an element that is not 32-byte aligned"),
                       (8, "a row of X[n, d + 8] wraps around its buffer's box")):   # the box is indexed modulo
        c = _compiled(f"name t\ninput X[8, 72] int32\nY[n:8, d:64] = X[n, d + {shift}]", fuse=False)
        assert vector_rows(c, with_flags(c)[0], set(), "d_").notes == [f"S0 stays element by element: {why}"]
        r = run_and_check(c)
        assert r.exact and r.counts["vector_instructions"] == 0


def test_fused_producers_run_in_rows_of_their_tiles():
    """A LayerNorm-like row: the mean's reduction and the centred values are fused producers of the output's
    tiles, distributed inside the tiles like the tile's own statements; their extensions bring them in at row
    origins. Every statement runs in rows and the C's counts are the model's."""
    from accelmap.poly.c_code import code_schedule
    c = _compiled("name t\ninput X[64, 128] float32\nS[n:64] = sum(X[n, d], d=128)\n"
                  "Y[n:64, d:128] = X[n, d] - S[n] * 0.0078125\nZ[n:64, d:128] = Y[n, d] * Y[n, d]")
    assert any(p.fused for p in c.plans)
    rows = code_schedule(c)[4]
    assert sorted(row.stmt for row in rows.rows) == ["S0", "S1", "S2", "S3"] and not rows.notes
    r = run_and_check(c)
    assert r.ok, r.detail
    assert (r.counts["vector_instructions"], r.counts["vector_repeats"]) == _model(c)


def test_auto_tiling_keeps_rows_of_a_repeat_between_equal_data_moved():
    """A max over the middle axis moves the same data whether auto-tiling halves c or w; halving w to 16 fp32
    (64 bytes) would make every instruction a quarter of a repeat, so c is halved and w stays whole."""
    c = _compiled("name t\ninput X[16, 64, 32] float32\nM[n:16, w:32] = max(X[n, c, w], c=64)", fuse=False)
    assert [p.sizes for p in c.plans] == [(16, 32, 32)] and c.vector_row_dims["S1"] == "w"
    r = run_and_check(c)
    assert r.exact and (r.counts["vector_instructions"], r.counts["vector_repeats"]) == _model(c)
