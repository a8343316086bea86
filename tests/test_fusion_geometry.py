"""The fused tile loop's closed forms against a point-by-point walk of the same loop."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelmap.errors import SpecError
from accelmap.fusion.brute_force import walk
from accelmap.fusion.geometry import MODES, SKIP_POLICIES, AxisMap, Join, Stage, fused_counts
from accelmap.fusion.stages import mac_stage, pool_stage
from accelmap.workload import conv2d, gemm
from fusion_walk import assert_counts_equal_walk


def random_chain(rng: random.Random):
    """2-3 convolutions (random kernel, stride, dilation, padding), maybe a pooling window between."""
    h, w, c = rng.randint(5, 12), rng.randint(4, 10), rng.randint(1, 3)
    stages = []
    for i in range(rng.randint(2, 3)):
        if i and rng.random() < 0.3 and h >= 2 and w >= 2:
            p = pool_stage(f"pool{i}", channels=c, in_rows=h, in_cols=w, kernel=(2, 2), stride=(2, 2),
                           pads=(0, 0, 0, 0), bits=8)
            stages.append(p)
            h, w = p.out_rows, p.out_cols
        r, s = rng.randint(1, min(3, h)), rng.randint(1, min(3, w))
        pad = rng.randint(0, 1) if r > 1 and s > 1 else 0
        stride = rng.choice([1, 1, 2]) if min(r, s) > 1 else 1   # a window skipping rows cannot be fused
        k = rng.randint(1, 3)
        op = conv2d(f"c{i}", c=c, h=h, w=w, k=k, r=r, s=s, stride=stride, padding=pad)
        st_ = mac_stage(op).stage
        stages.append(st_)
        h, w, c = st_.out_rows, st_.out_cols, k
    return tuple(stages)


@settings(max_examples=200)
@given(st.integers(0, 10**9))
def test_closed_forms_equal_the_walk(seed):
    rng = random.Random(seed)
    stages = random_chain(rng)
    last = stages[-1]
    ty, tx = rng.randint(1, last.out_rows), rng.randint(1, last.out_cols)
    policies = tuple(rng.choice(list(MODES)) for _ in stages)
    model = fused_counts(stages, ty, tx, policies)
    ref = walk(stages, ty, tx, policies)
    assert model.tiles == ref.tiles
    assert model.macs == ref.macs
    assert model.input_fetched == ref.input_fetched
    assert model.output_written == ref.output_written
    # The buffers the model reserves are exactly the most elements on chip at once.
    assert model.buffer_bits == ref.live_bits


def test_one_tile_computes_everything_once():
    op1 = conv2d("a", c=2, h=8, w=8, k=3, r=3, s=3, padding=1)
    op2 = conv2d("b", c=3, h=8, w=8, k=2, r=3, s=3, padding=1)
    stages = (mac_stage(op1).stage, mac_stage(op2).stage)
    c = fused_counts(stages, 8, 8, ("fully-recompute",) * 2)
    assert c.macs == (op1.macs, op2.macs)
    assert c.input_fetched == 2 * 8 * 8
    assert c.buffer_bits == (2 * 64 * 8, 3 * 64 * 32, 2 * 64 * 32)


def test_row_tiles_recompute_exactly_the_halo():
    # Two 3x3 convolutions, padded, 8 rows, tiles of 2 output rows: the first layer's windows
    # are 4 rows (3 at the borders), so 3+4+4+3 = 14 rows computed instead of 8.
    op1 = conv2d("a", c=1, h=8, w=5, k=1, r=3, s=3, padding=1)
    op2 = conv2d("b", c=1, h=8, w=5, k=1, r=3, s=3, padding=1)
    stages = (mac_stage(op1).stage, mac_stage(op2).stage)
    rec = fused_counts(stages, 2, 5, ("fully-recompute",) * 2)
    assert rec.macs == (14 * 5 * 9, op2.macs)
    cached = fused_counts(stages, 2, 5, ("fully-cached",) * 2)
    assert cached.macs == (op1.macs, op2.macs)
    assert cached.input_fetched == 8 * 5


def test_token_tiles_of_matrix_products_need_no_halo():
    a = gemm("ffn1", m=16, n=12, k=8)
    b = gemm("ffn2", m=16, n=8, k=12)
    stages = (mac_stage(a).stage, mac_stage(b).stage)
    c = fused_counts(stages, 4, 1, ("fully-recompute",) * 2)
    assert c.tiles == 4 and c.macs == (a.macs, b.macs) and c.input_fetched == 16 * 8
    assert c.buffer_bits[1] == 4 * 12 * 32


def test_cached_rows_with_tiled_columns_keep_a_line_buffer_beside_the_window():
    # One padded 3x3 convolution, 6x6, output tiles of 2x2, its input fully cached. At the middle
    # tile the input window is rows 1-4 x columns 1-4; rows 1-2 (last needed in this tile row) are
    # still kept over columns 1-5 (5 columns not done with yet) and rows 3-4 (needed by the next
    # tile row) over columns 0-4 (5 columns computed so far): 2*5 + 2*5 = 20 elements, not the
    # window (16) plus two rows over the full width (12).
    op = conv2d("a", c=1, h=6, w=6, k=1, r=3, s=3, padding=1)
    stages = (mac_stage(op).stage,)
    c = fused_counts(stages, 2, 2, ("fully-cached",))
    assert c.buffer_bits[0] == 20 * 8
    assert walk(stages, 2, 2, ("fully-cached",)).live_bits[0] == 20 * 8


def random_same_shape_chain(rng: random.Random):
    """2-3 stride-1 stages keeping an h x w x c shape, their windows shifted at random (a pad past the
    window's span shifts it off the output position), so that a residual join's skip may or may not lie
    in the window a tile needs anyway."""
    h, w, c = rng.randint(3, 9), rng.randint(2, 8), rng.randint(1, 3)
    stages = []
    for i in range(rng.randint(2, 3)):
        maps = []
        for _ in range(2):
            span = rng.randint(1, 3)
            maps.append(AxisMap(1, span, rng.randint(0, span)))
        stages.append(Stage(f"s{i}", h, w, c, h, w, c, maps[0], maps[1], c * maps[0].span * maps[1].span, 8, 8))
    return tuple(stages)


@settings(max_examples=200)
@given(st.integers(0, 10**9))
def test_residual_join_counts_equal_the_walk(seed):
    rng = random.Random(seed)
    stages = random_same_shape_chain(rng)
    last = stages[-1]
    ty, tx = rng.randint(1, last.out_rows), rng.randint(1, last.out_cols)
    policies = tuple(rng.choice(list(MODES)) for _ in stages)
    join = Join("add", rng.randrange(len(stages)), rng.choice([8, 16]))
    skip_policy = rng.choice(SKIP_POLICIES)
    ref = walk(stages, ty, tx, policies, join, skip_policy)
    try:
        model = fused_counts(stages, ty, tx, policies, join, skip_policy)
    except SpecError:
        # Refused exactly when a tile adds the skip but needs nothing else of its tensor.
        assert skip_policy == "kept" and ref.skip_window_empty
        return
    assert not ref.skip_window_empty
    assert_counts_equal_walk(model, ref)


def test_resnet_block_keeps_its_skip_for_free_or_re_reads_it_once():
    a = mac_stage(conv2d("conv1", c=4, h=6, w=6, k=4, r=3, s=3, padding=1)).stage
    b = mac_stage(conv2d("conv2", c=4, h=6, w=6, k=4, r=3, s=3, padding=1)).stage
    join = Join("add", 0, 8)
    kept = fused_counts((a, b), 2, 3, ("fully-cached",) * 2, join, "kept")
    again = fused_counts((a, b), 2, 3, ("fully-cached",) * 2, join, "re-read")
    plain = fused_counts((a, b), 2, 3, ("fully-cached",) * 2)
    # Two padded 3x3 convolutions: a tile's input window holds its output positions, so keeping the skip
    # costs no buffer and no work.
    assert kept.skip_fetched == 0 and kept.buffer_total_bits == plain.buffer_total_bits and kept.macs == plain.macs
    assert again.skip_fetched == 6 * 6 * 4                    # every element once
    assert again.skip_buffer_bits == 2 * 3 * 4 * 8            # one output tile of it staged
    with pytest.raises(SpecError, match="outside the group"):
        fused_counts((a, b), 2, 3, ("fully-cached",) * 2, Join("add", None, 8), "kept")


def test_a_kept_skip_behind_two_cached_halos_lives_longer():
    """1x1 > 3x3 > 1x1 (a MobileNetV2 block), fully cached: at an inner tile the first 1x1 computes only
    the new rows and columns, so its input window has moved past the tile's first output row and column;
    keeping the skip keeps them until the add: more buffer, the same work."""
    c = 2
    s1 = mac_stage(conv2d("expand", c=c, h=6, w=6, k=c, r=1, s=1)).stage
    s2 = mac_stage(conv2d("dw", c=c, h=6, w=6, k=c, r=3, s=3, padding=1)).stage
    s3 = mac_stage(conv2d("project", c=c, h=6, w=6, k=c, r=1, s=1)).stage
    stages, pol = (s1, s2, s3), ("fully-cached",) * 3
    plain = fused_counts(stages, 2, 2, pol)
    kept = fused_counts(stages, 2, 2, pol, Join("add", 0, 8), "kept")
    assert kept.macs == plain.macs and kept.buffer_bits[0] > plain.buffer_bits[0]
    assert kept.buffer_bits == walk(stages, 2, 2, pol, Join("add", 0, 8), "kept").live_bits
