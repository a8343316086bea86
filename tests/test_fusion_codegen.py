"""Emitted C of a fused group: bit-exact against NumPy, its counters equal to the model's, and no read
of anything its halo policy has evicted."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelmap.codegen.fused_c import run_fused
from accelmap.fusion.geometry import MODES, Join, fused_counts
from accelmap.fusion.stages import mac_stage, pool_stage
from accelmap.workload import batched_matmul, conv2d, dense, depthwise_conv2d, gemm


def random_group(rng: random.Random):
    h, w, c = rng.randint(5, 10), rng.randint(5, 10), rng.randint(1, 3)
    stages, macs = [], {}
    for i in range(rng.randint(2, 3)):
        if i and rng.random() < 0.35 and h >= 4 and w >= 4:
            p = pool_stage(f"pool{i}", channels=c, in_rows=h, in_cols=w, kernel=(2, 2), stride=(2, 2),
                           pads=(0, 0, 0, 0), bits=16)
            stages.append(p)
            h, w = p.out_rows, p.out_cols
        r, s = rng.randint(1, min(3, h)), rng.randint(1, min(3, w))
        stride = rng.choice([1, 1, 2]) if min(r, s) > 1 else 1
        dil = rng.choice([1, 1, 2]) if stride == 1 and r == 3 and s == 3 and h >= 5 and w >= 5 else 1
        k = rng.randint(1, 3)
        op = conv2d(f"c{i}", c=c, h=h, w=w, k=k, r=r, s=s, stride=stride, dilation=dil,
                    padding=rng.randint(0, 1) if r > 1 and s > 1 else 0)
        ms = mac_stage(op)
        macs[len(stages)] = ms
        stages.append(ms.stage)
        h, w, c = ms.stage.out_rows, ms.stage.out_cols, k
    return tuple(stages), macs


@settings(max_examples=15)
@given(st.integers(0, 10**9))
def test_fused_c_is_bit_exact_and_counts_what_the_model_counts(seed):
    rng = random.Random(seed)
    stages, macs = random_group(rng)
    last = stages[-1]
    ty, tx = rng.randint(1, last.out_rows), rng.randint(1, last.out_cols)
    policies = tuple(rng.choice(list(MODES)) for _ in stages)
    run, ref = run_fused(stages, macs, ty, tx, policies, seed=seed % 1000)
    assert run.invalid_reads == 0
    assert (run.output == ref).all()
    model = fused_counts(stages, ty, tx, policies)
    assert run.input_fetched == model.input_fetched
    assert run.output_written == model.output_written
    assert run.macs == model.macs


# (kernels, h x w x c, tile, halo policies, skip tensor, skip policy): the skip kept as the group's input behind
# cached halos (MobileNetV2's expand > depthwise > project), kept as an intermediate, re-read as the input, and from outside the group.
JOIN_CASES = [
    ((1, 3, 1), (6, 6, 2), (2, 2), ("fully-cached", "fully-cached", "fully-cached"), 0, "kept"),
    ((1, 3, 1), (5, 4, 2), (2, 4), ("H-cached-V-recompute", "fully-recompute", "fully-cached"), 1, "kept"),
    ((3, 1), (5, 6, 3), (3, 2), ("fully-recompute", "H-cached-V-recompute"), 0, "re-read"),
    ((3, 3), (4, 4, 2), (1, 4), ("fully-cached", "fully-recompute"), None, "re-read"),
]


@pytest.mark.parametrize("kernels,shape,tile,policies,skip,skip_policy", JOIN_CASES)
def test_fused_c_with_a_residual_join_is_bit_exact_and_counts_the_skip(kernels, shape, tile, policies, skip,
                                                                        skip_policy):
    """A group ending with a residual add (ResNet-like: stride-1 convolutions keeping the shape, 3x3 padded or
    1x1), its skip kept on chip or re-read per tile: the output equals NumPy's chain plus the skip, nothing
    evicted is read, and the input fetched, MACs and skip elements fetched equal the model's (``fused_counts``
    with the join). (80 random draws of this kind passed when it was written; four fixed ones here.)"""
    h, w, c = shape
    macs = {i: mac_stage(conv2d(f"c{i}", c=c, h=h, w=w, k=c, r=r, s=r, padding=r // 2)) for i, r in enumerate(kernels)}
    stages = tuple(ms.stage for ms in macs.values())
    join = Join("add", skip, 16)
    model = fused_counts(stages, *tile, policies, join, skip_policy)
    run, ref = run_fused(stages, macs, *tile, policies, seed=len(kernels), join=join, skip_policy=skip_policy)
    assert run.invalid_reads == 0
    assert (run.output == ref).all()
    assert (run.input_fetched, run.output_written, run.macs) == (model.input_fetched, model.output_written,
                                                                   model.macs)
    assert run.skip_fetched == model.skip_fetched == (0 if skip_policy == "kept" else ref.size)


# (rows, features through the chain, tile rows, halo policies, skip tensor, skip policy): a transformer's
# feed-forward chain (d -> hidden -> d), several row tiles; its residual skip kept as the input or re-read.
MATMUL_CASES = [
    (9, (6, 10, 6), 2, ("fully-cached", "fully-recompute"), 0, "kept"),
    (7, (5, 8, 5), 3, ("H-cached-V-recompute", "fully-cached"), 0, "re-read"),
    (8, (4, 6, 3), 5, ("fully-recompute", "fully-recompute"), None, None),
]


def _row_tiles_match_the_model(stages, macs, tile, policies, seed, join=None, skip_policy="re-read"):
    """Run a group of matrix products tiled along its rows: bit-exact against NumPy, nothing evicted read, the
    input fetched, output written, MACs and skip fetched equal to the model's; returns the run."""
    model = fused_counts(stages, tile, 1, policies, join, skip_policy)
    run, ref = run_fused(stages, macs, tile, 1, policies, seed=seed, join=join, skip_policy=skip_policy)
    assert run.invalid_reads == 0
    assert (run.output == ref).all()
    assert (run.input_fetched, run.output_written, run.macs, run.skip_fetched) == (
        model.input_fetched, model.output_written, model.macs, model.skip_fetched)
    return run


@pytest.mark.parametrize("rows,features,tile,policies,skip,skip_policy", MATMUL_CASES)
def test_fused_c_of_matrix_products_is_bit_exact_token_major(rows, features, tile, policies, skip, skip_policy):
    """Matrix products fused along their rows (tokens), tensors token-major in memory as ONNX stores them, the
    weight [K][N]: the output equals NumPy's chain (plus the skip), nothing evicted is read, and the input
    fetched, output written, MACs and skip fetched equal the model's."""
    macs = {i: mac_stage(gemm(f"mm{i}", m=rows, n=n, k=k)) for i, (k, n) in enumerate(itertools.pairwise(features))}
    stages = tuple(ms.stage for ms in macs.values())
    join = Join("add", skip, 16) if skip_policy else None
    run = _row_tiles_match_the_model(stages, macs, tile, policies, rows, join, skip_policy or "re-read")
    assert run.macs == tuple(rows * k * n for k, n in itertools.pairwise(features))


@pytest.mark.parametrize("batch,rows,tile,policies", [(2, 6, 4, ("fully-cached", "fully-recompute")),
                                                      (3, 5, 2, ("H-cached-V-recompute", "fully-cached"))])
def test_fused_c_of_batched_products_is_bit_exact_batch_major(batch, rows, tile, policies):
    """Attention's two products per head (scores = Q K^T, context = P V: [b][M][K] x [b][K][N], the second
    operand a tensor in memory like a weight), fused along the query rows: each head a group of the on-chip
    channels, tensors batch-major then token-major in memory; bit-exact against NumPy, counters the model's."""
    d, n = 4, rows
    macs = {0: mac_stage(batched_matmul("scores", batch=batch, m=rows, n=n, k=d)),
            1: mac_stage(batched_matmul("context", batch=batch, m=rows, n=d, k=n))}
    stages = (macs[0].stage, macs[1].stage)
    model = fused_counts(stages, tile, 1, policies)
    run, ref = run_fused(stages, macs, tile, 1, policies, seed=batch)
    assert run.invalid_reads == 0
    assert (run.output == ref).all()
    assert (run.input_fetched, run.output_written, run.macs) == (model.input_fetched, model.output_written, model.macs)
    assert run.macs == (batch * rows * n * d, batch * rows * d * n)


# drawn so that the inner skip is kept (2), re-read from the group's input (3) and from outside (12)
@pytest.mark.parametrize("seed", [2, 3, 12])
def test_fused_c_spanning_two_blocks_is_bit_exact_and_counts_what_the_model_counts(seed):
    """Two residual blocks (stride-1 convolutions, kernels 1 or 3) as one group: the first add inside it, its skip
    the group's input kept or re-read, or from outside; the second add ending it, its skip the first add's result
    kept on chip. Output bit-exact against NumPy layer by layer, no invalid read, and the input fetched, MACs and
    skip elements fetched equal to the model's (``fused_counts`` with the inner join)."""
    rng = random.Random(seed)
    h, w, c = rng.randint(3, 7), rng.randint(3, 7), rng.randint(1, 3)
    stages, macs = [], {}
    for i in range(4):
        r = rng.choice([1, 3])
        ms = mac_stage(conv2d(f"c{i}", c=c, h=h, w=w, k=c, r=r, s=r, padding=r // 2))
        macs[i] = ms
        stages.append(ms.stage)
    stages = tuple(stages)
    inner = ((Join("add1", rng.choice([0, None]), 16, 2), ""),)
    inner = ((inner[0][0], "re-read" if inner[0][0].skip is None else rng.choice(["kept", "re-read"])),)
    end = Join("add2", 2, 16)
    tr, tc = rng.randint(1, h), rng.randint(1, w)
    policies = tuple(rng.choice(list(MODES)) for _ in stages)
    want = fused_counts(stages, tr, tc, policies, end, "kept", inner)
    run, ref = run_fused(stages, macs, tr, tc, policies, seed, end, "kept", inner)
    assert (run.output == ref).all() and run.invalid_reads == 0
    assert (run.input_fetched, run.output_written, run.macs, run.skip_fetched) == (
        want.input_fetched, want.output_written, want.macs, want.skip_fetched)
    if inner[0][1] == "re-read":
        assert want.skip_fetched > 0


@pytest.mark.parametrize("rows,tile,policies,skip_policy", [(7, 3, ("fully-cached", "fully-recompute"), "kept"),
                                                            (6, 4, ("H-cached-V-recompute", "fully-cached"), None)])
def test_fused_c_of_dense_layers_reads_their_output_major_weights(rows, tile, policies, skip_policy):
    """Dense layers (ONNX Gemm with transB=1: O[N, K] += I[N, C] * W[K, C]) fused along their rows, the weight read
    as stored, output-major: bit-exact against NumPy, the counters the model's."""
    macs = {0: mac_stage(dense("fc0", n=rows, c=5, k=8)), 1: mac_stage(dense("fc1", n=rows, c=8, k=5))}
    stages = (macs[0].stage, macs[1].stage)
    join = Join("add", 0, 16) if skip_policy else None
    run = _row_tiles_match_the_model(stages, macs, tile, policies, rows, join, skip_policy or "re-read")
    assert run.macs == (rows * 5 * 8, rows * 8 * 5)


@pytest.mark.parametrize("heads,rows,tile,policies", [(2, 6, 4, ("fully-cached",) * 4),
                                                      (3, 5, 2, ("H-cached-V-recompute", "fully-recompute",
                                                                 "fully-cached", "fully-recompute"))])
def test_fused_c_of_attention_with_its_projections_is_bit_exact(heads, rows, tile, policies):
    """FLAT's attention chain with its projections: Q projection (one batch) > scores and context per head >
    output projection (one batch). The heads' split and merge keep the on-chip channels (feature h * X + x is head
    h's x), so the projections' token-major tensors and the heads' batch-major ones meet on chip; the input is read
    token-major, the output written so, the residual skip re-read token-major: bit-exact, counters the model's."""
    d, dh = 4 * heads, 4
    macs = {0: mac_stage(gemm("q", m=rows, n=d, k=d)),
            1: mac_stage(batched_matmul("scores", batch=heads, m=rows, n=rows, k=dh)),
            2: mac_stage(batched_matmul("context", batch=heads, m=rows, n=dh, k=rows)),
            3: mac_stage(gemm("out", m=rows, n=d, k=d))}
    stages = tuple(macs[j].stage for j in range(4))
    run = _row_tiles_match_the_model(stages, macs, tile, policies, heads, Join("residual", 0, 16))
    assert run.macs == (rows * d * d, heads * rows * rows * dh, heads * rows * dh * rows, rows * d * d)


# (pooling, its kernel / stride / pads, tile, halo policies of conv > pool > depthwise > project)
POOL_CASES = [
    ("avg", (3, 1, 1), (2, 3), ("fully-cached", "H-cached-V-recompute", "fully-recompute", "fully-cached")),
    ("avg-pad", (3, 1, 1), (3, 2), ("fully-recompute", "fully-cached", "fully-cached", "H-cached-V-recompute")),
    ("avg", (2, 2, 0), (1, 2), ("H-cached-V-recompute", "fully-recompute", "fully-cached", "fully-cached")),
    ("max", (3, 2, 1), (2, 2), ("fully-cached", "fully-cached", "H-cached-V-recompute", "fully-recompute")),
]


@pytest.mark.parametrize("pool,window,tile,policies", POOL_CASES)
def test_fused_c_with_average_pooling_and_a_depthwise_convolution(pool, window, tile, policies):
    """A 3x3 convolution, a pooling window (average over the taps inside the input or over the whole window, or max;
    padded windows included), a depthwise 3x3 convolution and a 1x1 projection: bit-exact against NumPy (an average
    truncates as C's division does), nothing evicted read, the counters the model's."""
    k, stride, pad = window
    conv = mac_stage(conv2d("conv", c=2, h=8, w=7, k=3, r=3, s=3, padding=1))
    p = pool_stage("pool", channels=3, in_rows=8, in_cols=7, kernel=(k, k), stride=(stride, stride),
                   pads=(pad, pad, pad, pad), bits=16)
    dw = mac_stage(depthwise_conv2d("dw", c=3, h=p.out_rows, w=p.out_cols, r=3, s=3, padding=1))
    proj = mac_stage(conv2d("proj", c=3, h=p.out_rows, w=p.out_cols, k=2, r=1, s=1))
    stages = (conv.stage, p, dw.stage, proj.stage)
    macs = {0: conv, 2: dw, 3: proj}
    run, ref = run_fused(stages, macs, *tile, policies, seed=k + stride, pools={1: pool})
    model = fused_counts(stages, *tile, policies)
    assert run.invalid_reads == 0
    assert (run.output == ref).all()
    assert (run.input_fetched, run.output_written, run.macs) == (model.input_fetched, model.output_written, model.macs)
