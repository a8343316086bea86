"""Bounded on-chip buffers in the emitted C of a fused group: a tensor whose rows are recomputed at every tile
row lives in a circular buffer of the tile's window of it (a ring along rows and columns, and along the channels
of a head tile), exactly the model's reservation for it; each slot is tagged with the element it holds, so a read
of an element the ring no longer (or not yet) holds is counted."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import accelmap.codegen.fused_c as fused_c  # noqa: E402
from accelmap.codegen.fused_c import buffer_shapes, run_fused  # noqa: E402
from accelmap.fusion.geometry import fused_counts  # noqa: E402
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
    assert all(bounded for *_, bounded in shapes)
    assert [k * r * c for k, r, c, _ in shapes] == _model_elements(stages, model)
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
        k, r, c, bounded = out[1]
        return [*out[:1], (k, r - 1, c, bounded), *out[2:]]
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
    assert shapes[2][3] and shapes[2][0] == stages[1].out_depth // 4
    assert shapes[2][0] * shapes[2][1] * shapes[2][2] == _model_elements(stages, model)[2]
    run, ref = run_fused(stages, macs, 2, 1, policies, head_tile=1)
    assert run.invalid_reads == 0 and (run.output == ref).all()
