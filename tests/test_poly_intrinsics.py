"""The cube's block mmad with an L0C accumulator in the emitted C: bit-exact results, and the mmad calls the C
issues equal the timing model's cube blocks."""

import pytest

from accelmap.arch.presets import get_accelerator
from accelmap.poly.c_code import generate_c, run_and_check
from accelmap.poly.compile import compile_subgraph
from accelmap.poly.dsl import parse_subgraph
from accelmap.poly.img2col import conv_fractal_kernel
from accelmap.poly.intrinsics import block_dims, cube_blocks
from accelmap.poly.library import library_subgraph
from accelmap.poly.tiling import parse_tile_spec
from accelmap.poly.timing import time_compiled

ASCEND = get_accelerator("ascend_like")


def _gemm(spec=None, **sizes):
    k = parse_subgraph(library_subgraph("matmul_int", **sizes), "mm")
    return compile_subgraph(k, ASCEND, fuse=True, tile_spec=parse_tile_spec(spec) if spec else None)


@pytest.mark.parametrize("sizes,spec,blocks", [
    ({"M": 32, "N": 48, "K": 40}, None, 2 * 3 * 3),                  # K = 40: the last block is partial
    ({"M": 64, "N": 64, "K": 1024}, None, 4 * 4 * 64),               # two L0 chunks of 512
    ({"M": 64, "N": 48, "K": 64}, "S_1: 32@UB, 32@UB, 16@UB", 4 * 3 * 4),   # K split over 4 tiles, L0C resident
])
def test_gemm_runs_as_block_mmads_counted_like_the_model(sizes, spec, blocks):
    c = _gemm(spec, **sizes)
    assert not cube_blocks(c, c.ast_schedule()).notes
    src, _ = generate_c(c)
    assert "static void mmad_S1(" in src and "C_l0c0[" in src
    r = run_and_check(c)
    assert r.exact, r.detail
    t = time_compiled(c)
    assert r.counts["mmad"] == blocks == t.cube_blocks
    # set/wait flags: those between an L1 -> L0 load and the cube run once per reduction chunk, in the code
    # as in the model
    assert r.counts["flags"] == sum(kt.flags for kt in t.kernels)
    # every output element leaves L0C once, after its whole reduction (also when K spans several tiles)
    assert r.counts["l0c_drained"] == sizes["M"] * sizes["N"]


def test_fractal_conv_runs_one_mmad_per_fractal_block():
    k = conv_fractal_kernel(N=2, C1=2, H=9, W=11, Co=32, KH=3, KW=2, SH=2, SW=1, dtype="int8")
    assert block_dims(k.statement("S4")) == ("mi", "ni", "ki")
    c = compile_subgraph(k, ASCEND, fuse=True, tile_spec=parse_tile_spec("S_4: 1@UB, 1@L0B, 1@L0A, 5@L0A"),
                         fusion="greedy")
    r = run_and_check(c, seed=5)
    assert r.exact, r.detail
    # N=2 images x 3 M_o blocks x 2 N_o blocks x 12 K_o blocks (C1*KH*KW)
    assert r.counts["mmad"] == 2 * 3 * 2 * 12 == time_compiled(c).cube_blocks


def test_float_gemm_within_tolerance_and_a_straddling_tile_stays_scalar():
    k = parse_subgraph(library_subgraph("matmul", M=64, N=32, K=48), "mm")
    c = compile_subgraph(k, ASCEND, fuse=True)
    r = run_and_check(c)
    assert r.ok and r.counts["mmad"] == 4 * 2 * 3
    # tiles of 24 rows cut 16-row blocks: the statement stays element by element, and says why
    odd = _gemm("S_1: 24@UB, 48@UB, 40@UB", M=64, N=48, K=64)
    (note,) = cube_blocks(odd, odd.ast_schedule()).notes
    assert "straddle" in note
    r = run_and_check(odd)
    assert r.exact and r.counts["mmad"] == 0


def test_flags_inside_the_l0_chunk_loop_are_placed_and_counted_per_chunk():
    """A K = 1024 int8 GEMM tile runs its reduction in two L0 chunks: the flag from the L0B load to the cube sits
    inside the chunk loop (issued twice per tile), none is left unplaced, and the C issues as many flags as the
    timing model counts."""
    from accelmap.poly.c_code import with_flags
    c = _gemm(None, M=64, N=64, K=1024)
    assert c.plans[0].l0_chunks == {"S1": 2}
    _, flags, skipped = with_flags(c)
    assert skipped == 0
    src, _ = generate_c(c)
    body = src[src.index("int accelmap_run"):]
    chunk_loop = body.index("+= 512)")
    inner = [f for f in flags if f.producer_instr == "load B to L0" and f.consumer_instr == "S1"]
    assert len(inner) == 1 and chunk_loop < body.index(f"{inner[0].set_stmt}();") < body.index("S1(")
    r = run_and_check(c)
    assert r.exact and r.counts["flags"] == time_compiled(c).kernels[0].flags == len(flags) + 1


def test_a_fused_gemm_producer_stays_element_by_element():
    """Greedy fusion recomputes the first GEMM of E = (A B) D inside E's tiles: its instances come from an
    extension node, which the block-origin restriction does not reach, so it keeps element-by-element code
    (and says why) while the consumer GEMM runs as mmads; the result stays bit-exact."""
    from test_poly import TWO_GEMMS
    k = parse_subgraph(TWO_GEMMS, "mm2")
    c = compile_subgraph(k, ASCEND, tile_spec=parse_tile_spec("S_3: 32@UB, 16@UB"), fusion="greedy")
    blocks = cube_blocks(c, c.ast_schedule())
    assert [b.stmt for b in blocks.blocks] == ["S3"] and "fused producer" in blocks.notes[0]
    r = run_and_check(c, seed=2)
    assert r.exact and r.counts["mmad"] > 0

