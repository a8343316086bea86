"""The fused model's counts against the point walk of ``accelmap.fusion.brute_force``, field by field."""

from __future__ import annotations


def assert_counts_equal_walk(model, ref) -> None:
    assert model.macs == ref.macs
    assert model.input_fetched == ref.input_fetched
    # Kept, a skip's tensor lives until the add reads it: its buffer is the walk's live maximum.
    assert model.buffer_bits == ref.live_bits
    assert model.skip_fetched == ref.skip_fetched
    assert model.skip_buffer_bits == ref.skip_live_bits


def simulated_blocks(sim, macs) -> dict[int, dict[tuple[int, int], tuple[float, int]]]:
    """The simulator's (cycles, off-chip weight bits) per stage and block shape, as ``pipeline_latency`` takes them."""
    blocks: dict[int, dict[tuple[int, int], tuple[float, int]]] = {j: {} for j in macs}
    for (j, r, c), got in sim.programs.items():
        blocks[j][(r, c)] = got
    return blocks


def blocks_agree(g, sim) -> bool:
    """Whether every block's modeled cycles equal the simulator's (then the group's latency must too)."""
    model = {(j, r, c): lat for j, sc in enumerate(g.stages) for r, c, _, lat, _ in sc.blocks}
    return all(model[k] == cyc for k, (cyc, _) in sim.programs.items())
