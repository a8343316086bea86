"""The latency model against the simulator on VTA configurations with virtual threads.

Two virtual threads double-buffer VTA's SRAM (the tuning template sets ``double_buffered`` on it, as
here): the thread loop is the innermost DRAM loop, so an input tile that the thread loop does not index
stays for several steps while the weights or the outputs change at every step. Shapes and loop nests
are those of Rieber's Table 5.1 layers 5, 8 and 107 (DeepBench convolutions) as the tuning template
builds them; the simulator's cycles are the reference and were checked by tracing its events.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from accelmap.arch.accelerator import adopt_precision
from accelmap.arch.presets import get_accelerator
from accelmap.cost.model import evaluate
from accelmap.mapping.loopnest import Loop, Mapping
from accelmap.sim.simulate import simulate
from accelmap.workload.constructors import conv2d

KEEP = (frozenset("IWO"), frozenset("IWO"))
# the GEMM intrinsic: 16 output channels by 16 input channels per cycle, inside every step
INTRINSIC = (Loop("K", 16, 1, "Y"), Loop("C", 16, 1, "Z"))


def _threaded_vta():
    a = get_accelerator("vta_like")
    return replace(a, levels=(a.levels[0], replace(a.levels[1], double_buffered=True)) + a.levels[2:])


def _run(shape: dict, loops: list[tuple[str, int, int]]) -> tuple[float, float, dict]:
    a = _threaded_vta()
    op = adopt_precision(conv2d("layer", **shape), a)
    m = Mapping(tuple(Loop(d, b, lvl) for d, b, lvl in loops) + INTRINSIC, KEEP)
    r = evaluate(op, a, m, check=False)
    return r.latency, simulate(op, a, m, functional=False).cycles, dict(r.latency_parts)


LAYER_8 = dict(n=1, k=64, h=12, w=120, r=3, s=3, c=32, stride=1, padding=1)
LAYER_107 = dict(n=2, k=512, h=7, w=7, r=1, s=1, c=2048, stride=1, padding=0)
LAYER_5 = dict(n=4, k=32, h=79, w=341, r=10, s=5, c=32, stride=2, padding=0)


@pytest.mark.parametrize("outer, tile_q, cycles", [
    # tile_h=1, tile_w=60, output-stationary with rows outer: the K thread loop innermost, the P one outside it
    ([("P", 6, 0), ("Q", 2, 0), ("K", 2, 0), ("C", 2, 0), ("P", 2, 0), ("K", 2, 0)], 60, 130_620),
    # ... output-stationary: the P thread loop innermost, the K one outside it
    ([("K", 2, 0), ("P", 6, 0), ("Q", 2, 0), ("C", 2, 0), ("K", 2, 0), ("P", 2, 0)], 60, 130_620),
    # ... tile_w=120
    ([("P", 6, 0), ("K", 2, 0), ("C", 2, 0), ("P", 2, 0), ("K", 2, 0)], 120, 124_440),
])
def test_layer_8_sliding_rows_after_a_whole_tile(outer, tile_q, cycles):
    # Outputs change at every step and are reloaded (C outside) and drained: the output halves' walk
    # binds. The input tile changes when the walk starts over (or at every step), and its load is not
    # the same at every pass: two rows' new halo after a P thread step, a whole 3-row tile after C or K.
    # The load unit runs in order, so the whole tile's load holds back the reload queued behind it.
    # The walk took the input's mean load at every pass (-3.2% and -2.3% against the simulator at
    # tile_w=60, -1.2% at 120); it now walks the passes of the loop outside it one by one.
    model, sim, _ = _run(LAYER_8, outer + [("Q", tile_q, 1), ("S", 3, 1), ("R", 3, 1)])
    assert sim == cycles
    assert model == cycles


@pytest.mark.parametrize("loops, cycles", [
    # tile_b=2, tile_co=2, tile_ci=1, weight-stationary: the input tile stays two steps, weights change every step
    ([("K", 8, 0), ("C", 128, 0), ("K", 2, 0), ("N", 2, 1), ("Q", 7, 1), ("K", 2, 1), ("P", 7, 1)], 3_519_716),
    # tile_b=1, tile_co=8, tile_ci=4, output-stationary with rows outer
    ([("N", 2, 0), ("K", 2, 0), ("C", 32, 0), ("K", 2, 0), ("C", 4, 1), ("Q", 7, 1), ("K", 8, 1), ("P", 7, 1)],
     1_094_752),
])
def test_layer_107_input_stays_two_steps(loops, cycles):
    # The loads bind (most of the run is double-buffered transfers not hidden): the input's load is
    # queued before the first weight load of its two steps and starts a window early.
    model, sim, parts = _run(LAYER_107, loops)
    assert sim == cycles
    assert model == cycles
    assert parts["double-buffered transfers not hidden"] > parts["MAC schedule"]


@pytest.mark.parametrize("shape, loops, model_cycles, sim_cycles", [
    # Table 5.1 layer 107, tile_b=2, tile_co=2, tile_ci=32, tile_h=7, tile_w=7, oc_nthread=2 (the model
    # was 18.5% above the simulator when the burst window let no load run more than one step ahead)
    (LAYER_107, [("K", 8, 0), ("C", 4, 0), ("K", 2, 0), ("N", 2, 1), ("C", 32, 1), ("Q", 7, 1), ("K", 2, 1),
                 ("P", 7, 1)], 418_320, 417_928),
    # layer 5, tile_b=4, tile_co=1, tile_ci=1, tile_h=1, tile_w=13, output-stationary, oc_nthread=2 (was 11.8%)
    (LAYER_5, [("P", 35, 0), ("Q", 13, 0), ("C", 2, 0), ("K", 2, 0), ("N", 4, 1), ("Q", 13, 1), ("S", 5, 1),
               ("R", 10, 1)], 5_405_776, 5_405_568),
])
def test_input_that_stays_is_prefetched_a_window_early(shape, loops, model_cycles, sim_cycles):
    # What is left is the partial sums' first reload before the first step: the model charges a whole
    # output tile, the simulator's program spreads the counted reloads over every visit of the tile
    # (a quarter of a tile less here); the double-buffered transfers themselves agree.
    model, sim, _ = _run(shape, loops)
    assert sim == sim_cycles
    assert model == model_cycles
