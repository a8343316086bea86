"""The fused model's counts against the point walk of ``accelmap.fusion.brute_force``, field by field."""

from __future__ import annotations


def assert_counts_equal_walk(model, ref) -> None:
    assert model.macs == ref.macs
    assert model.input_fetched == ref.input_fetched
    # Kept, a skip's tensor lives until the add reads it: its buffer is the walk's live maximum.
    assert model.buffer_bits == ref.live_bits
    assert model.skip_fetched == ref.skip_fetched
    assert model.skip_buffer_bits == ref.skip_live_bits
