"""Bounded on-chip buffers in the emitted C of a fused group: a tensor whose rows are recomputed at every tile
row lives in a circular buffer of the tile's window of it (a ring along rows and columns, and along the channels
of a head tile), a fully cached tensor in a line buffer of its most positions live at one tile (each position's
slot from a table), both exactly the model's reservation for the tensor; each slot is tagged with the element it
holds, so a read of an element the buffer no longer (or not yet) holds is counted."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import accelmap.codegen.fused_c as fused_c  # noqa: E402
from accelmap.codegen.cached_slots import CachedSlots, cached_slots  # noqa: E402
from accelmap.codegen.fused_c import buffer_shapes, run_fused  # noqa: E402
from accelmap.fusion.geometry import Join, fused_counts, live_elements, schedules  # noqa: E402
from accelmap.fusion.stages import mac_stage  # noqa: E402
from accelmap.workload import conv2d  # noqa: E402
from test_fusion_codegen import random_group  # noqa: E402
from test_fusion_codegen_heads import _attention  # noqa: E402

RECOMPUTED = ("fully-recompute", "H-cached-V-recompute")


def _model_elements(stages, counts) -> list[int]:
    bits = [stages[0].in_bits] + [s.out_bits for s in stages]
    return [b // bits[t] for t, b in enumerate(counts.buffer_bits[:len(stages)])]


@pytest.mark.parametrize("seed", range(4))
def test_rings_hold_the_models_reservation_and_run_bit_exact(seed):
    """Random chains (convolutions with kernels, strides, dilation and padding, pooling between them) whose
    tensors recompute their rows: every buffer is a ring of exactly the elements the model reserves for the
    tensor, and the group runs bit-exact with no read of an element its ring does not hold."""
    rng = random.Random(seed)
    stages, macs = random_group(rng)
    last = stages[-1]
    tile = (rng.randint(1, last.out_rows), rng.randint(1, last.out_cols))
    policies = tuple(rng.choice(RECOMPUTED) for _ in stages)
    shapes = buffer_shapes(stages, *tile, policies)
    model = fused_counts(stages, *tile, policies)
    assert all(b.bounded and b.cached is None for b in shapes)
    assert [b.channels * b.rows * b.cols for b in shapes] == _model_elements(stages, model)
    run, ref = run_fused(stages, macs, *tile, policies, seed=seed)
    assert run.invalid_reads == 0 and (run.output == ref).all()
    assert (run.input_fetched, run.macs) == (model.input_fetched, model.macs)


def test_a_ring_one_row_short_reads_what_it_no_longer_holds(monkeypatch):
    """The rings are tight: with one row fewer in the intermediate's ring, a 3x3 convolution reads a slot a later
    row has overwritten, and the tags count it (the output goes wrong too)."""
    macs = {0: mac_stage(conv2d("c0", c=2, h=8, w=6, k=3, r=3, s=3, padding=1)),
            1: mac_stage(conv2d("c1", c=3, h=8, w=6, k=2, r=3, s=3, padding=1))}
    stages = (macs[0].stage, macs[1].stage)
    policies = ("fully-recompute", "fully-recompute")
    run, ref = run_fused(stages, macs, 4, 6, policies)
    assert run.invalid_reads == 0 and (run.output == ref).all()
    real = fused_c.buffer_shapes

    def short(*a, **kw):
        out = real(*a, **kw)
        return [*out[:1], out[1]._replace(rows=out[1].rows - 1), *out[2:]]
    monkeypatch.setattr(fused_c, "buffer_shapes", short)
    run, ref = run_fused(stages, macs, 4, 6, policies)
    assert run.invalid_reads > 0 and not (run.output == ref).all()


def test_a_head_tiles_scores_ring_holds_its_heads_only():
    """Attention tiled over heads with its scores recomputed per tile: the scores' buffer holds one head tile's
    channels (the model's reservation), and the head loop runs bit-exact in it."""
    stages, macs = _attention(4, 5)
    policies = ("fully-cached", "fully-cached", "fully-recompute", "fully-cached")
    shapes = buffer_shapes(stages, 2, 1, policies, head_tile=1)
    model = fused_counts(stages, 2, 1, policies, head_tile=1)
    assert shapes[2].bounded and shapes[2].channels == stages[1].out_depth // 4
    assert shapes[2].channels * shapes[2].rows * shapes[2].cols == _model_elements(stages, model)[2]
    run, ref = run_fused(stages, macs, 2, 1, policies, head_tile=1)
    assert run.invalid_reads == 0 and (run.output == ref).all()


@pytest.mark.parametrize("seed", range(120))
def test_cached_slots_are_the_models_live_maximum_and_never_shared_by_live_positions(seed):
    """On random chains and tiles, the line buffer of a fully cached tensor has exactly the model's live maximum of
    slots, and two positions given one slot are never live at the same tile (brute force over the lifetimes)."""
    rng = random.Random(seed)
    stages, _ = random_group(rng)
    last = stages[-1]
    tile = (rng.randint(1, last.out_rows), rng.randint(1, last.out_cols))
    policies = tuple(rng.choice(("fully-cached", "fully-cached", "fully-recompute")) for _ in stages)
    rows, cols = schedules(stages, *tile, policies)
    heights = [stages[0].in_rows] + [s.out_rows for s in stages]
    widths = [stages[0].in_cols] + [s.out_cols for s in stages]
    for t, p in enumerate(policies):
        if p != "fully-cached":
            continue
        cs = cached_slots(rows, cols, t, heights[t], widths[t])
        assert cs.slots == live_elements(rows, cols, t, heights[t], widths[t], True, True)
        y0, y1 = rows.first_last(t, heights[t])
        x0, x1 = cols.first_last(t, widths[t])
        tx = len(cols.need)
        holders: dict[int, list[tuple[int, int]]] = {}
        for r in range(heights[t]):
            for c in range(widths[t]):
                s_ = cs.table[r * widths[t] + c]
                assert (s_ < 0) == (y0[r] < 0 or x0[c] < 0)
                if s_ >= 0:
                    assert s_ < cs.slots
                    holders.setdefault(s_, []).append((y0[r] * tx + x0[c], y1[r] * tx + x1[c]))
        for spans in holders.values():
            spans.sort()
            assert all(a[1] < b[0] for a, b in zip(spans, spans[1:], strict=False))


@pytest.mark.parametrize("seed", range(4))
def test_line_buffers_hold_the_models_reservation_and_run_bit_exact(seed):
    """Random chains with every tensor fully cached (and a random tile): every buffer holds exactly the elements
    the model reserves, smaller than the tensor where the model's is, and the group runs bit-exact with no read of
    an element its line buffer does not hold, the counters the model's."""
    rng = random.Random(100 + seed)
    stages, macs = random_group(rng)
    last = stages[-1]
    tile = (rng.randint(1, max(1, last.out_rows // 2)), rng.randint(1, max(1, last.out_cols // 2)))
    policies = tuple("fully-cached" for _ in stages)
    shapes = buffer_shapes(stages, *tile, policies)
    model = fused_counts(stages, *tile, policies)
    assert all(b.cached is not None for b in shapes)
    assert [b.channels * b.rows * b.cols for b in shapes] == _model_elements(stages, model)
    run, ref = run_fused(stages, macs, *tile, policies, seed=seed)
    assert run.invalid_reads == 0 and (run.output == ref).all()
    assert (run.input_fetched, run.output_written, run.macs) == (model.input_fetched, model.output_written,
                                                                 model.macs)


def test_a_line_buffer_with_a_kept_skip_holds_the_skip_until_the_add():
    """MobileNetV2's expand 1x1 > depthwise-like 3x3 > project 1x1 with the skip kept as the group's input behind
    fully cached halos: the input's line buffer (widened by the model to hold the skip until the add) is the
    model's, and the add reads every skip element from it."""
    macs = {i: mac_stage(conv2d(f"c{i}", c=2, h=8, w=6, k=2, r=r, s=r, padding=r // 2)) for i, r in enumerate((1, 3, 1))}
    stages = tuple(ms.stage for ms in macs.values())
    policies = ("fully-cached",) * 3
    join = Join("add", 0, 16)
    shapes = buffer_shapes(stages, 2, 2, policies, join, "kept")
    model = fused_counts(stages, 2, 2, policies, join, "kept")
    assert [b.channels * b.rows * b.cols for b in shapes] == _model_elements(stages, model)
    assert all(b.bounded for b in shapes)
    run, ref = run_fused(stages, macs, 2, 2, policies, join=join, skip_policy="kept")
    assert run.invalid_reads == 0 and (run.output == ref).all()
    assert (run.input_fetched, run.macs, run.skip_fetched) == (model.input_fetched, model.macs, 0)


def test_a_line_buffer_one_slot_short_reads_what_it_no_longer_holds(monkeypatch):
    """The line buffers are tight: folding the intermediate's last slot onto another (one slot fewer) makes a 3x3
    convolution read a slot a newer position has overwritten, and the tags count it."""
    macs = {0: mac_stage(conv2d("c0", c=2, h=8, w=6, k=3, r=3, s=3, padding=1)),
            1: mac_stage(conv2d("c1", c=3, h=8, w=6, k=2, r=3, s=3, padding=1))}
    stages = (macs[0].stage, macs[1].stage)
    policies = ("fully-cached", "fully-cached")
    run, ref = run_fused(stages, macs, 3, 2, policies)
    assert run.invalid_reads == 0 and (run.output == ref).all()
    real = fused_c.buffer_shapes

    def short(*a, **kw):
        out = real(*a, **kw)
        b = out[1]
        assert b.cached is not None
        fewer = b.rows - 1
        table = tuple(s if s < fewer else s % fewer for s in b.cached.table)
        return [*out[:1], b._replace(rows=fewer, cached=CachedSlots(table, fewer)), *out[2:]]
    monkeypatch.setattr(fused_c, "buffer_shapes", short)
    run, ref = run_fused(stages, macs, 3, 2, policies)
    assert run.invalid_reads > 0
