"""Polyhedral flow (AKG, PLDI 2021): DSL, isl scheduling, reverse-strategy tiling and fusion, C, timing."""

import islpy as isl
import numpy as np
import pytest
from click.testing import CliRunner

from accelmap.arch.presets import get_accelerator
from accelmap.cli import main
from accelmap.codegen.c_tensors import random_inputs as op_inputs
from accelmap.codegen.c_tensors import reference as op_reference
from accelmap.errors import MappingError, SpecError
from accelmap.poly.c_code import generate_c, run_and_check
from accelmap.poly.compile import compile_subgraph
from accelmap.poly.dsl import parse_subgraph
from accelmap.poly.from_operator import kernel_from_operator
from accelmap.poly.library import library_names, library_subgraph
from accelmap.poly.reference import random_inputs, reference
from accelmap.poly.schedule import group_nodes, group_statements
from accelmap.poly.tiling import parse_tile_spec
from accelmap.poly.timing import TileWork, simulate_kernel, time_compiled
from accelmap.workload.constructors import batched_matmul, conv2d, gemm

ASCEND = get_accelerator("ascend_like")


def fig3(h=66, w=66):
    return parse_subgraph(library_subgraph("fig3", H=h, W=w), "fig3")


def test_dsl_builds_the_papers_statements():
    k = fig3(10, 12)
    assert [(s.name, s.kind) for s in k.statements] == [
        ("S0", "assign"), ("S1", "init"), ("S2", "update"), ("S3", "assign"), ("S4", "assign")]
    assert k.statement("S2").dims == (("h", 8), ("w", 10), ("kh", 3), ("kw", 3))
    assert [t.name for t in k.live_out] == ["E"]
    assert k.statement("S2").is_cube and not k.statement("S3").is_cube


def test_reference_matches_a_direct_numpy_formula():
    k = fig3(10, 12)
    x = random_inputs(k, seed=3)
    a1 = x["A"].astype(np.int64) + 1
    c = sum(a1[i:i + 8, j:j + 10] * x["B"][i, j] for i in range(3) for j in range(3))
    assert np.array_equal(reference(k, x)["E"], np.maximum(np.abs(c), 0))


@pytest.mark.parametrize("text, message", [
    ("input A[4] int32\nB[i:4] = A[i+1]", "outside the shape"),
    ("input A[4] int32\nB[i:4] = Z[i]", "line 2: tensor 'Z' is used before it is defined"),
    ("input A[4] int32\nB[i:4] = A[i*i]", "line 2: index 'i * i' is not affine"),
    ("input A[4] float32\nB[i:4] = A[i] + cast(A[i], int32)", "line 2: mixing float32 and int32"),
    ("input A[4] int9", "line 1: input takes"),
    ("input A[4] int32\nB[i:0] = A[i]", "line 2: extent of i must be a positive integer"),
])
def test_dsl_errors_name_the_line(text, message):
    from accelmap.poly.compile import compile_subgraph as cs
    with pytest.raises(SpecError, match=message.replace("(", r"\(").replace("*", r"\*")):
        cs(parse_subgraph(text, "t.sg"), ASCEND)


def test_akg_option_set_gives_fig3c_groups():
    c = compile_subgraph(fig3(), ASCEND, fuse=False)
    assert [group_statements(n) for n in group_nodes(c.scheduled)] == [("S0",), ("S1", "S2", "S3", "S4")]
    # the default isl options fuse everything into one skewed band instead
    # (without fusion: cost-driven fusion may pick another option set's grouping)
    assert len(group_nodes(compile_subgraph(fig3(), ASCEND, option_set="pluto", fuse=False).scheduled)) == 1


def test_overlapped_producer_tile_of_the_3x3_stencil():
    """The reverse strategy's extension equals the hand-derived overlapped tile (Sec. 4.2):
    tile (t0, t1) of the 64x64 output needs S0 on rows t0..t0+33 and columns t1..t1+33."""
    c = compile_subgraph(fig3(66, 66), ASCEND, fuse=True, tile_spec=parse_tile_spec("S_2: 32@UB, 32@UB"))
    (plan,) = c.plans
    assert plan.group == ("S1", "S2", "S3", "S4") and [g for _, g in plan.fused] == [("S0",)]
    ext = plan.extensions[0]
    want = isl.UnionMap("{ [t0, t1, 0] -> S0[h, w] : (t0 = 0 or t0 = 32) and (t1 = 0 or t1 = 32) "
                        "and t0 <= h <= t0 + 33 and t1 <= w <= t1 + 33 }", context=c.program.ctx)
    assert ext.is_equal(want)
    a1 = plan.footprints["A1"]
    assert a1.local and a1.box == (34, 34)
    assert plan.footprints["E"].box == (32, 32) and not plan.footprints["E"].local
    assert plan.n_tiles == 4
    tree = str(c.schedule.get_root())
    assert 'mark: "skipped"' in tree and "extension:" in tree


def test_fused_ast_is_one_nest():
    c = compile_subgraph(fig3(66, 66), ASCEND, fuse=True, tile_spec=parse_tile_spec("S_2: 32@UB, 32@UB"))
    from accelmap.poly.c_code import ast_code
    code = ast_code(c)
    assert code.startswith("for (int c0 = 0; c0 <= 63; c0 += 32)")
    assert code.count("S0(") == 1 and "c0 + 33" in code


@pytest.mark.parametrize("fuse", [True, False])
@pytest.mark.parametrize("tiles", ["S_2: 32@UB, 32@UB", "S_2: 5@UB, 7@UB", None])
def test_fig3_code_is_bit_exact(fuse, tiles):
    c = compile_subgraph(fig3(20, 23), ASCEND, fuse=fuse, tile_spec=parse_tile_spec(tiles) if tiles else None)
    r = run_and_check(c, seed=1)
    assert r.ok and r.exact, r.detail


@pytest.mark.parametrize("name", library_names())
def test_library_subgraphs_run(name):
    k = parse_subgraph(library_subgraph(name), name)
    c = compile_subgraph(k, ASCEND, fuse=True)
    r = run_and_check(c, seed=2)
    assert r.ok, r.detail
    if all(not t.dtype.startswith("float") for t in k.inputs + k.computed):
        assert r.exact


def test_chain_fuses_into_one_kernel_and_saves_traffic():
    k = parse_subgraph(library_subgraph("chain", N=64, D=512), "chain")
    fused = compile_subgraph(k, ASCEND, fuse=True)
    apart = compile_subgraph(k, ASCEND, fuse=False, option_set="distribute")
    assert len(fused.plans) == 1 and len(apart.plans) == 4
    tf, ta = time_compiled(fused), time_compiled(apart)
    # fused: X, R and Y once plus a Bias slice per tile; apart: also T1, T2, T3 out and back in
    def bias(plan):
        return plan.n_tiles * plan.sizes[1] * 2
    assert tf.offchip_bytes == 64 * 512 * 2 * 3 + bias(fused.plans[0])
    assert ta.offchip_bytes == 64 * 512 * 2 * 9 + bias(apart.plans[0])
    assert tf.cycles < ta.cycles


@pytest.mark.parametrize("op", [
    conv2d(c=8, h=10, w=9, k=16, r=3, s=3, stride=2),
    gemm(m=40, n=24, k=33),
    batched_matmul(batch=3, m=8, n=16, k=12),
])
def test_operators_compile_and_match_the_operator_reference(op):
    k = kernel_from_operator(op)
    x = op_inputs(op, "int", np.random.default_rng(4))
    want = op_reference(op, x)
    got = reference(k, {t.name: x[t.name].astype(np.dtype(t.dtype)) for t in k.inputs})[op.output.name]
    assert np.array_equal(got.astype(np.int64), want.astype(np.int64))
    assert run_and_check(compile_subgraph(k, ASCEND)).exact


def test_padded_operator_is_refused():
    with pytest.raises(SpecError, match="zero-padded"):
        kernel_from_operator(conv2d(c=4, h=6, w=6, k=4, r=3, s=3, padding=1))


def test_tile_spec_language():
    assert parse_tile_spec("S_2: 32@UB, 16@L1; S_0: 8@UB") == {"S2": ((32, "UB"), (16, "L1")), "S0": ((8, "UB"),)}
    with pytest.raises(SpecError, match="buffer 'L2' unknown"):
        parse_tile_spec("S_1: 4@L2")
    with pytest.raises(SpecError, match="SIZE@BUFFER"):
        parse_tile_spec("S_1: 4")
    with pytest.raises(SpecError, match="not a statement"):
        compile_subgraph(fig3(), ASCEND, tile_spec=parse_tile_spec("S_9: 4@UB"))


def test_auto_tiling_fits_half_capacity_and_aligns():
    k = parse_subgraph(library_subgraph("add", N=256, D=4096), "add")
    c = compile_subgraph(k, ASCEND)
    (plan,) = c.plans
    assert plan.buffer_bytes["UB"] <= 256 * 1024 // 2
    assert plan.sizes[-1] % 16 == 0          # 32 bytes of fp16
    assert plan.n_tiles > 1
    # three fp16 tiles (X, Z, Y) of the chosen sizes, each rounded to 32 bytes
    assert plan.buffer_bytes["UB"] == 3 * -(-plan.sizes[0] * plan.sizes[1] * 2 // 32) * 32


def test_too_large_tile_is_refused():
    k = parse_subgraph(library_subgraph("add", N=256, D=4096), "add")
    with pytest.raises(MappingError, match=r"UB .* > 131,072 B"):
        compile_subgraph(k, ASCEND, tile_spec=parse_tile_spec("S_0: 256@UB, 4096@UB"))


def test_dae_queue_timing_by_hand():
    w = TileWork({"MTE-in": 10, "MTE-L1L0": 0, "cube": 0, "vector": 5, "MTE-out": 3})
    # double buffered: loads back to back (10 each), the last tile's vector 30..35 and store 35..38
    assert simulate_kernel(w, 3, double_buffer=True) == (38, {"MTE-in": 30, "MTE-L1L0": 0, "cube": 0,
                                                              "vector": 15, "MTE-out": 9}, 6)
    assert simulate_kernel(w, 3, double_buffer=False)[0] == 48
    assert simulate_kernel(w, 3, double_buffer=True, serialize=True)[0] == 54


def test_cube_blocks_of_a_gemm():
    k = parse_subgraph(library_subgraph("matmul", M=64, N=48, K=40), "mm")
    t = time_compiled(compile_subgraph(k, ASCEND))
    assert t.cube_blocks == 4 * 3 * 3      # ceil(64/16) * ceil(48/16) * ceil(40/16)


def test_generated_c_names_promoted_buffers():
    c = compile_subgraph(fig3(), ASCEND, fuse=True, tile_spec=parse_tile_spec("S_2: 32@UB, 32@UB"))
    src, args = generate_c(c)
    assert args == ["A", "B", "E"]
    assert "static int A1_local[1156];" in src
    # the MTE's copies of the staged tiles: A's 34x34 input tile in, then S0, the point loops, E's tile out
    assert "static int A_s1[1156];" in src and "static int E_s1[1024];" in src
    body = src[src.index("int accelmap_run"):]
    assert body.index("in1_A(") < body.index("S0(") < body.index("S4(") < body.index("out1_E(")


def test_cli_poly_runs_and_reports():
    r = CliRunner().invoke(main, ["poly", "fig3", "--fuse", "--run", "--tiles", "S_2: 16@UB, 16@UB"])
    assert r.exit_code == 0, r.output
    assert "run on the host: OK (bit-exact)" in r.output
    assert "simulated" in r.output and 'mark: "skipped"' in r.output


def test_cli_poly_bad_subgraph_is_one_line():
    r = CliRunner().invoke(main, ["poly", "nosuch"])
    assert r.exit_code == 2
    assert r.output.count("\n") == 1 and "neither a file nor a built-in subgraph" in r.output


def test_reduction_producers_fuse_with_their_whole_group():
    """A LayerNorm-like chain: the fused tile must recompute both reductions, not just their last statement."""
    k = parse_subgraph(library_subgraph("t1_p4", N=16, D=64), "ln")
    c = compile_subgraph(k, ASCEND, fuse=True, tile_spec=parse_tile_spec("S_7: 8@UB, 32@UB"))
    (plan,) = c.plans
    assert set(plan.statements) == {f"S{i}" for i in range(8)}
    ext = plan.extensions
    sq = [i for i, g in plan.fused if "S5" in g][0]
    # tile (t0, t1) recomputes the squared-deviation reduction over all 64 columns of its 8 rows
    want = isl.UnionMap("{ [t0, t1] -> S5[n, d] : t0 mod 8 = 0 and 0 <= t0 <= 8 and (t1 = 0 or t1 = 32) "
                        "and t0 <= n < t0 + 8 and 0 <= d < 64 }", context=c.program.ctx)
    assert ext[sq].intersect_range(c.program.stmt_set(["S5"])).is_equal(want)
    assert run_and_check(c).ok


def test_tuner_never_loses_to_auto_tiling_and_its_spec_reproduces():
    from accelmap.tune.akg_tuner import tune_poly
    k = parse_subgraph(library_subgraph("matmul", M=256, N=128, K=256), "mm")
    r = tune_poly(k, ASCEND, rounds=2, per_round=4, seed=1)
    assert r.best_cycles <= r.auto_cycles
    assert len(r.history) >= 4
    again = time_compiled(compile_subgraph(k, ASCEND, tile_spec=parse_tile_spec(r.spec))).cycles
    assert again == r.best_cycles


@pytest.mark.parametrize("args", [dict(N=2, C1=2, H=9, W=11, Co=32, KH=3, KW=2, SH=2, SW=1),
                                  dict(N=1, C1=3, H=12, W=7, Co=16, KH=1, KW=3, SH=1, SW=2)])
def test_img2col_statement_is_the_papers_eq1(args):
    """Eq. (1) (with '* s_h'), as an isl map from the fractal index (N, M_o, K_o, M_i, K_i) of X to the input
    index, equals the relation of our img2col statement from the fractal buffer Xf to X."""
    from accelmap.poly.img2col import conv_fractal_kernel, eq1_map
    from accelmap.poly.program import build_program
    k = conv_fractal_kernel(**args, dtype="int8")
    p = build_program(k)
    w1 = p.writes.intersect_domain(p.stmt_set(["S1"]))
    r1 = p.reads.intersect_domain(p.stmt_set(["S1"]))
    eq1 = eq1_map(*(args[x] for x in ("N", "C1", "H", "W", "KH", "KW", "SH", "SW")), ctx=p.ctx)
    assert w1.reverse().apply_range(r1).is_equal(isl.UnionMap.from_map(eq1.set_tuple_name(isl.dim_type.in_, "Xf")))


def direct_conv_nc1hwc0(x, ho, wo, sh, kh_, kw_):
    X, Wt = x["X"].astype(np.int64), x["Wt"].astype(np.int64)
    y = np.zeros((X.shape[0], Wt.shape[0], ho, wo), np.int64)
    for kh in range(kh_):
        for kw in range(kw_):
            y += np.einsum("nchwz,kcz->nkhw", X[:, :, kh:kh + sh * (ho - 1) + 1:sh, kw:kw + wo, :], Wt[:, :, kh, kw, :])
    return y


def test_fractal_conv_matches_a_direct_convolution():
    """The fractal GEMM's output Y[N, Co/16, 16*M_o, 16] holds the convolution in its first Ho*Wo rows; the
    rows that pad M to a multiple of 16 stay zero."""
    from accelmap.poly.img2col import conv_fractal_kernel
    k = conv_fractal_kernel(N=2, C1=2, H=9, W=11, Co=32, KH=3, KW=2, SH=2, SW=1, dtype="int8")
    x = random_inputs(k, seed=5)
    y = reference(k, x)["Y"].astype(np.int64)
    assert y.shape == (2, 2, 48, 16)
    assert np.array_equal(y[:, :, :40, :].transpose(0, 1, 3, 2).reshape(2, 32, 4, 10),
                          direct_conv_nc1hwc0(x, 4, 10, 2, 3, 2))
    assert not y[:, :, 40:, :].any()


@pytest.mark.parametrize("fuse", [True, False])
def test_fractal_conv_code_is_bit_exact(fuse):
    from accelmap.poly.img2col import conv_fractal_kernel
    k = conv_fractal_kernel(N=2, C1=2, H=9, W=11, Co=32, KH=3, KW=2, SH=2, SW=1, dtype="int8")
    c = compile_subgraph(k, ASCEND, fuse=fuse)
    assert run_and_check(c, seed=5).exact
    # tiles of single fractal blocks in N_o and M_o and of 5 blocks of K_o, with img2col and the weight
    # blocks fused into every tile (the cube's operand tiles built on the fly)
    # (greedy fusion: at these tiny tiles the cost model would keep the layout statements apart)
    tiled = compile_subgraph(k, ASCEND, fuse=fuse, tile_spec=parse_tile_spec("S_4: 1@UB, 1@L0B, 1@L0A, 5@L0A"),
                             fusion="greedy")
    assert tiled.plans[-1].n_tiles == 2 * 2 * 3 * 3
    if fuse:
        assert [g for _, g in tiled.plans[0].fused] == [("S0",), ("S1",), ("S2",)]
    assert run_and_check(tiled, seed=5).exact


def test_an_illegal_external_schedule_is_refused():
    from dataclasses import replace

    from accelmap.poly.img2col import conv_fractal_kernel
    k = conv_fractal_kernel(N=1, C1=1, H=5, W=5, Co=16, KH=3, KW=3, dtype="int8")
    tree = k.external_schedule
    first = tree.index("{ filter")
    gemm = tree.index('{ filter: "{ S3')
    # the GEMM moved before img2col reads Xf before it is written
    bad = tree[:first] + tree[gemm:-6] + ", " + tree[first:gemm - 2] + " ] } }"
    with pytest.raises(SpecError, match="violates a dependence"):
        compile_subgraph(replace(k, external_schedule=bad), ASCEND)


def test_an_assignment_writing_an_element_twice_is_refused():
    from accelmap.poly.kernel import Access, Affine, Kernel, Statement, Tensor
    from accelmap.poly.program import build_program
    a, b = Tensor("A", (4,), "int32"), Tensor("B", (4,), "int32")
    s = Statement("S0", (("i", 4), ("j", 2)), Access("B", (Affine((("i", 1),)),)),
                  Access("A", (Affine((("i", 1),)),)), "assign")
    with pytest.raises(SpecError, match="writes some element of B twice"):
        build_program(Kernel("k", (a,), (b,), (s,)))


def test_cli_conv_img2col_runs():
    r = CliRunner().invoke(main, ["poly", "conv_img2col", "--size", "H=8", "--size", "W=8", "--size", "C1=2", "--run", "--no-code"])
    assert r.exit_code == 0, r.output
    assert "run on the host: OK" in r.output


def test_intra_tile_distribution_of_vector_statements():
    """Fig. 3(f): inside a tile the cube part (S1, S2) and each vector statement get their own point loops,
    the vector ones under a "local_UB" mark; the result stays bit-exact."""
    from accelmap.poly.c_code import ast_code
    # the paper's greedy fusion on the "akg" groups (cost-driven fusion keeps one 32 x 32 tile of the distributed
    # groups here: rows of 16 int32 fill a quarter of a vector repeat)
    c = compile_subgraph(fig3(34, 34), ASCEND, fuse=True, tile_spec=parse_tile_spec("S_2: 16@UB, 16@UB"),
                         fusion="greedy")
    code = ast_code(c)
    assert code.count("// local_UB") == 2
    after_s2 = code[code.index("S2("):]
    assert after_s2.index("// local_UB") < after_s2.index("S3(") < after_s2.rindex("// local_UB") < after_s2.index("S4(")
    assert str(c.schedule.get_root()).count('mark: "local_UB"') == 2
    assert run_and_check(c).exact


def test_sync_flags_of_the_fused_fig3_tile():
    """Per tile: copy A, B in; S0 (vector) waits for A; the L1->L0 loads wait for A1 (vector) and B (MTE-in);
    the cube waits for both loads (one flag covers both: same queue, in order); S3 waits for the cube; S4
    follows S3 on the vector queue; the copy-out waits for S4. Seven dependences, six flags."""
    from accelmap.poly.sync import plan_flags, tile_program
    c = compile_subgraph(fig3(34, 34), ASCEND, fuse=True)
    (plan,) = c.plans
    prog = tile_program(c, plan)
    assert [(i.queue, i.text) for i in prog] == [
        ("MTE-in", "copy A in"), ("MTE-in", "copy B in"), ("vector", "S0"), ("MTE-L1L0", "load A1 to L0"),
        ("MTE-L1L0", "load B to L0"), ("cube", "S2"), ("vector", "S3"), ("vector", "S4"), ("MTE-out", "copy E out")]
    assert plan_flags(prog) == (7, 6)
    t = time_compiled(c)
    assert t.kernels[0].flags_covered == 6 * plan.n_tiles
    # the flags left after the DP are issued every tile: SYNC_FLAG_CYCLES per set/wait pair, in the cycles
    assert t.kernels[0].flag_cycles == 16 * t.kernels[0].flags > 0


def test_sync_flags_cost_cycles(monkeypatch):
    import accelmap.poly.timing as timing
    c = compile_subgraph(fig3(34, 34), ASCEND, fuse=True)
    with_flags = time_compiled(c)
    monkeypatch.setattr(timing, "SYNC_FLAG_CYCLES", 0)
    free = time_compiled(c)
    assert free.kernels[0].flag_cycles == 0 and free.cycles < with_flags.cycles
    # per queue the busy cycles grow by exactly the flags' issue cycles
    assert sum(with_flags.kernels[0].busy.values()) - sum(free.kernels[0].busy.values()) \
        == with_flags.kernels[0].flag_cycles


def test_l0_tiling_is_in_the_emitted_code():
    """Second-level tiling (Sec. 4.4): a K = 1024 int8 GEMM tile's operands exceed half of L0A/L0B, so the
    reduction runs in chunks of 512 with the chunk's operand footprints copied from L1 to L0A / L0B before
    each chunk; the cube reads only the L0 buffers and the result stays bit-exact."""
    from accelmap.poly.c_code import ast_code
    k = parse_subgraph(library_subgraph("matmul_int", M=64, N=64, K=1024), "mm")
    c = compile_subgraph(k, ASCEND, fuse=True)
    (plan,) = c.plans
    assert (plan.l0_k_chunk, plan.l0_k_extent) == (512, 1024)
    assert plan.l0_copies == {"A": ("L0A", (64, 512), "l00_A"), "B": ("L0B", (512, 64), "l00_B")}
    code = ast_code(c)
    chunk_loop = code.index("+= 512)")
    assert chunk_loop < code.index("l00_A(") < code.index("l00_B(") < code.index("S1(")
    src, _ = generate_c(c)
    s1 = src[src.index("static void mmad_S1("):src.index("#define S1(")]   # the cube's block mmad
    assert "A_l00[" in s1 and "B_l00[" in s1 and "A_s0" not in s1
    assert run_and_check(c).exact


def test_l0_chunks_of_the_fractal_gemm_run_bit_exact():
    from accelmap.poly.img2col import conv_fractal_kernel
    k = conv_fractal_kernel(N=1, C1=16, H=6, W=6, Co=16, KH=3, KW=3, dtype="int8")
    c = compile_subgraph(k, ASCEND, fuse=True, tile_spec=parse_tile_spec("S_4: 1@UB, 1@L0B, 1@L0A, 144@L0A"))
    plan = c.plans[-1]
    buf, box, _ = plan.l0_copies["Xf"]
    assert buf == "L0A" and box[2] < 144 and 144 % box[2] == 0   # K_o blocks per chunk
    assert run_and_check(c).exact


def _partitions(items):
    if not items:
        yield []
        return
    for p in _partitions(items[1:]):
        for i in range(len(p)):
            yield p[:i] + [[items[0]] + p[i]] + p[i + 1:]
        yield [[items[0]]] + p


def _brute_force_grouping(program, weights, flag_cost):
    """The cheapest partition of each queue pair's dependences into groups, one flag per group (set after the
    group's last producer, wait before its first consumer, which must come later in program order), at
    flag_cost each plus the producer work between what the first consumer needs and what it waits for."""
    from accelmap.poly.sync import dependences, producer_work
    pairs: dict = {}
    for j, i in dependences(program):
        pairs.setdefault((program[j].queue, program[i].queue), []).append((j, i))
    total = 0.0
    for (pq, _), deps in pairs.items():
        best = float("inf")
        for part in _partitions(deps):
            cost = 0.0
            for g in part:
                w, s = min(i for _, i in g), max(j for j, _ in g)
                if s >= w:
                    cost = float("inf")
                    break
                cost += flag_cost + producer_work(program, weights, pq, max(j for j, i in g if i == w), s)
            best = min(best, cost)
        total += best
    return total


def test_dp_grouping_of_sync_flags_equals_brute_force():
    import random

    from accelmap.poly.sync import Instr, dependences, group_flags
    rng = random.Random(7)
    checked = merged = 0
    while checked < 60:
        n = rng.randint(3, 8)
        queues = ["MTE-in", "cube", "vector"][:rng.randint(2, 3)]
        prog = [Instr(rng.choice(queues), f"i{i}",
                      tuple(sorted({f"t{rng.randrange(i)}" for _ in range(rng.randint(0, 2))})) if i else (), (f"t{i}",))
                for i in range(n)]
        deps = dependences(prog)
        if not deps or len(deps) > 7:
            continue
        weights = [rng.randint(1, 10) for _ in range(n)]
        flag_cost = rng.choice([0.5, 4.0, 12.0, 40.0])
        flags, cost = group_flags(prog, weights, flag_cost)
        assert cost == pytest.approx(_brute_force_grouping(prog, weights, flag_cost))
        for j, i in deps:   # every dependence is covered by a flag of its queue pair, without deadlock
            assert any(f.producer == prog[j].queue and f.consumer == prog[i].queue and f.set_after >= j
                       and f.wait_before <= i and f.set_after < f.wait_before for f in flags)
        merged += len(flags) < len({(j, i) for j, i in deps})
        checked += 1
    assert merged > 0


def test_dp_grouping_trades_delay_for_flags():
    """Two loads each feeding the cube: separate flags cost 2 x 16; one flag after the second load delays the
    cube by that load's 10 cycles: 16 + 10 is cheaper. With 4-cycle flags it is not."""
    from accelmap.poly.sync import Instr, group_flags
    prog = [Instr("MTE-in", "load a", (), ("a",)), Instr("MTE-in", "load b", (), ("b",)),
            Instr("cube", "mul a", ("a",), ("x",)), Instr("cube", "mul b", ("b",), ("y",))]
    flags, cost = group_flags(prog, [10, 10, 5, 5], 16)
    assert (len(flags), cost) == (1, 26) and flags[0].set_after == 1 and flags[0].wait_before == 2
    flags, cost = group_flags(prog, [10, 10, 5, 5], 4)
    assert (len(flags), cost) == (2, 8)


def test_sibling_fusion_of_two_reductions_of_one_input():
    """BatchNorm's statistics: sum(X) and sum(X*X) are independent groups reading X; fused horizontally they
    share one band and every tile loads X once: half the off-chip traffic of two kernels, same results."""
    k = parse_subgraph(library_subgraph("bn_reduce", N=4, C=32, H=16, W=16), "bn")
    apart = compile_subgraph(k, ASCEND, fuse=False)
    fused = compile_subgraph(k, ASCEND, fuse=True)
    assert [p.group for p in apart.plans] == [("S0", "S1"), ("S2", "S3")]
    assert [p.group for p in fused.plans] == [("S0", "S1", "S2", "S3")]
    x_bytes = 4 * 32 * 16 * 16 * 4
    ta, tf = time_compiled(apart), time_compiled(fused)
    assert sum(k_.in_bytes for k_ in ta.kernels) == 2 * x_bytes and sum(k_.in_bytes for k_ in tf.kernels) == x_bytes
    assert tf.cycles < ta.cycles
    assert run_and_check(fused).ok


def test_dependent_groups_are_not_fused_as_siblings():
    from accelmap.poly.compile import fuse_siblings
    from accelmap.poly.program import build_program
    from accelmap.poly.schedule import compute_schedule, make_context
    text = """
        input X[8, 32] float32
        M[n:8] = sum(X[n, d], d=32)
        V[n:8] = sum(X[n, d] * M[n], d=32)
    """
    k = parse_subgraph(text, "dep")
    prog = build_program(k, make_context("distribute"))
    sched = compute_schedule(prog.domain, prog.deps, prog.raw)
    assert fuse_siblings(prog, sched) is sched   # V reads M: a dependence between the groups


def test_img2col_runs_on_the_mte_not_the_vector_unit():
    """The MTE does img2col and the fractal layout while loading cube operands (Sec. 2): the layout statements
    sit on the L1->L0 queue of the tile program and add no vector work."""
    from accelmap.poly.img2col import conv_fractal_kernel
    from accelmap.poly.sync import tile_program
    k = conv_fractal_kernel(N=1, C1=1, H=6, W=6, Co=16, KH=3, KW=3, dtype="int8")
    assert k.layout_statements() == {"S0", "S1", "S2"}
    c = compile_subgraph(k, ASCEND, fuse=True, fusion="greedy")   # all in one kernel's tile program
    queues = {i.text: i.queue for i in tile_program(c, c.plans[0])}
    assert queues["S1"] == queues["S2"] == "MTE-L1L0" and queues["S4"] == "cube"
    assert time_compiled(c).kernels[0].busy["vector"] == 1024 // 256   # only the L0C -> UB drain of Y (1 KiB)


TWO_GEMMS = """name mm2
input A[32, 1024] int8
input B[1024, 64] int8
input D[64, 256] int8
C[i:32, j:64] = sum(cast(A[i, k], int32) * cast(B[k, j], int32), k=1024)
E[i:32, p:256] = sum(C[i, j] * cast(D[j, p], int32), j=64)
"""


def test_cost_driven_fusion_keeps_a_recomputed_gemm_apart():
    """E = (A B) D with tiles of 16 columns of E: greedy post-tiling fusion recomputes the K = 1024 GEMM in
    each of E's 16 tiles; the cost-driven choice keeps it as its own kernel, is faster than both greedy
    fusion and one kernel per statement, and its note's numbers are the two groupings' simulated totals
    (a kernel's cost does not depend on how the other kernels are grouped, so the sums are exact)."""
    k = parse_subgraph(TWO_GEMMS, "mm2")
    spec = parse_tile_spec("S_3: 32@UB, 16@UB")
    cost = compile_subgraph(k, ASCEND, tile_spec=spec)
    greedy = compile_subgraph(k, ASCEND, tile_spec=spec, fusion="greedy")
    per_op = compile_subgraph(k, ASCEND, tile_spec=spec, fuse=False, option_set="distribute")
    assert [p.group for p in greedy.plans] == [("S2", "S3")] and greedy.plans[0].fused == [(0, ("S0", "S1"))]
    assert [(p.group, p.fused) for p in cost.plans] == [(("S0", "S1"), []), (("S2", "S3"), [])]
    t_cost, t_greedy, t_per_op = (time_compiled(c).cycles for c in (cost, greedy, per_op))
    assert t_cost < t_per_op < t_greedy
    assert cost.fusion_notes == (f"{{S0,S1}} not fused: fused {t_greedy:,} vs apart {t_cost:,} cycles (simulated)",)
    assert cost.kept_apart == {"S0", "S1"}
    assert run_and_check(cost, seed=2).exact


def test_cost_driven_fusion_fuses_what_pays():
    """Without the tile spec one tile holds everything: fusing the first GEMM saves its off-chip round trip."""
    k = parse_subgraph(TWO_GEMMS, "mm2")
    cost = compile_subgraph(k, ASCEND)
    greedy = compile_subgraph(k, ASCEND, fusion="greedy")
    assert [(p.group, p.fused) for p in cost.plans] == [(("S2", "S3"), [(0, ("S0", "S1"))])]
    assert time_compiled(cost).cycles == time_compiled(greedy).cycles \
        < time_compiled(compile_subgraph(k, ASCEND, fuse=False, option_set="distribute")).cycles
    with pytest.raises(SpecError, match="fusion mode 'eager'"):
        compile_subgraph(k, ASCEND, fusion="eager")


def test_dsl_max_reduction_is_a_vector_reduction_and_bit_exact():
    k = parse_subgraph("input X[6, 40] int16\nM[n:6] = max(X[n, d] * 3, d=40)\nY[n:6, d:40] = X[n, d] - M[n]\n", "mx")
    init, update = k.statements[:2]
    assert init.body.value == -32768 and update.combine == "max" and not update.is_cube
    assert update.text().startswith("S1: M[n] max= ")
    x = random_inputs(k, seed=1)
    assert np.array_equal(reference(k, x)["Y"], x["X"] - (3 * x["X"].astype(np.int64)).max(axis=1, keepdims=True))
    for fuse in (True, False):
        assert run_and_check(compile_subgraph(k, ASCEND, fuse=fuse)).exact
    with pytest.raises(SpecError, match="max takes the body and its reduction dims"):
        parse_subgraph("input X[6, 4] int16\nM[n:6] = max(X[n, d], X[n, 0], d=4)\n", "bad")


def test_sinking_the_fast_dimension_makes_a_column_sum_contiguous():
    """S[d] = sum over n of X[n, d]: the scheduler runs n innermost, a stride of D elements through X; sinking
    puts d innermost (the band is permutable), so the vector repeats are full, and the code stays exact."""
    import islpy as isl

    from accelmap.poly.simd import contiguous_along
    k = parse_subgraph("input X[256, 128] int32\nS[d:128] = sum(X[n, d], n=256)\n", "colsum")
    sunk, plain = compile_subgraph(k, ASCEND), compile_subgraph(k, ASCEND, sink=False)
    assert sunk.vector_contiguous == {"S0": True, "S1": True} and plain.vector_contiguous == {"S0": True, "S1": False}
    assert "S1[d, n] -> [(n)]" in str(sunk.scheduled.get_root()).split("S1[d, n] -> [(d)]")[0]
    t_sunk, t_plain = time_compiled(sunk), time_compiled(plain)
    vector = [sum(kt.busy["vector"] for kt in t.kernels) for t in (t_sunk, t_plain)]
    # int32: 64 elements per 256-byte repeat when contiguous, 8 (one per 32-byte block) when strided
    assert t_sunk.cycles < t_plain.cycles and vector[0] * 4 < vector[1]
    assert run_and_check(sunk).exact and run_and_check(plain).exact
    sched = isl.Map("{ S[n, d] -> [d, n] : 0 <= n < 4 and 0 <= d < 3 }")
    acc = isl.Map("{ S[n, d] -> X[n, d] : 0 <= n < 4 and 0 <= d < 3 }")
    assert not contiguous_along(sched, acc, 1) and contiguous_along(sched, acc, 0)


def test_sync_flags_are_emitted_in_the_c_and_checked_when_it_runs():
    """The six DP-grouped flags of the fused Fig. 3 tile are set/wait statements in the code, each set after
    its producer's loops and the wait before its consumer's; the emulation counts a wait that finds its flag
    unset, so dropping a set makes every tile report one."""
    import ctypes

    from accelmap.codegen.build import compile_shared, load_run
    from accelmap.poly.c_code import with_flags
    c = compile_subgraph(fig3(66, 66), ASCEND, fuse=True, tile_spec=parse_tile_spec("S_2: 32@UB, 32@UB"),
                         fusion="greedy")
    _, flags, skipped = with_flags(c)
    assert skipped == 0 and [(f.producer_instr, f.consumer_instr) for f in flags] == [
        ("copy A in", "S0"), ("S0", "load A1 to L0"), ("copy B in", "load B to L0"), ("load B to L0", "S2"),
        ("S2", "S3"), ("S4", "copy E out")]
    assert len(flags) == time_compiled(c).kernels[0].flags // c.plans[0].n_tiles
    src, args = generate_c(c)
    body = src[src.index("int accelmap_run"):]
    for f in flags:
        assert body.index(f"{f.set_stmt}();") < body.index(f"{f.wait_stmt}();")
    assert body.index("in1_B(") < body.index("set1_2();") < body.index("wait1_2();") < body.index("l01_B(")
    assert run_and_check(c).exact

    def run(code):
        fn = load_run(compile_shared(code))
        x = random_inputs(c.kernel, seed=0)
        arrays = [np.ascontiguousarray(x[n]) if n in x else np.zeros(c.kernel.tensors[n].shape, np.int32)
                  for n in args]
        return fn((ctypes.c_void_p * len(args))(*[a.ctypes.data for a in arrays]), (ctypes.c_longlong * 1)(0))

    assert run(src) == 0
    assert run(src.replace("      set1_2();\n", "", 1)) == c.plans[0].n_tiles == 4


def test_flags_of_a_fused_cube_producers_loads_sit_before_its_cube_statement():
    """Cost-driven fusion of Fig. 3 with 16 x 16 tiles of S_2 fuses the convolution (S2) into the tiles of S4 as a
    producer: it reads its operands from L1, so its L1 -> L0 loads have no statement. Their flags go just before
    S2's loops, where the loads are issued: every DP-grouped flag is placed, and the C issues the model's count."""
    from accelmap.poly.c_code import with_flags
    c = compile_subgraph(fig3(66, 66), ASCEND, fuse=True, tile_spec=parse_tile_spec("S_2: 16@UB, 16@UB"))
    (plan,) = [p for p in c.plans if p.sizes]
    assert plan.l0_copies == {} and "S2" in plan.statements   # the cube is a fused producer
    _, flags, skipped = with_flags(c)
    assert skipped == 0 and [(f.producer_instr, f.consumer_instr) for f in flags] == [
        ("copy A in", "S0"), ("S0", "load A1 to L0"), ("copy B in", "load B to L0"), ("load B to L0", "S2"),
        ("S2", "S3"), ("S4", "copy E out")]
    src, _ = generate_c(c)
    body = src[src.index("int accelmap_run"):]
    s0, s2 = body.index("S0("), body.index("S2(")
    # the waits for S0 and copy B (before the loads), then the loads' set and the cube's wait, then the cube
    assert s0 < body.index("set4_1();") < body.index("wait4_1();") < body.index("wait4_2();") \
        < body.index("set4_3();") < body.index("wait4_3();") < s2
    r = run_and_check(c)
    assert r.exact, r.detail
    assert r.counts["flags"] == time_compiled(c).kernels[-1].flags == 6
