"""The tuner's pruning is exact: its choice, and its best mac16 schedule at int16, are the minima of a brute-force
evaluation of every variant and loop order it enumerates."""

from __future__ import annotations

import itertools
from dataclasses import replace

from accelmap.arch.presets import get_accelerator
from accelmap.vector.compiler import CompileError, Schedule, compile_conv
from accelmap.vector.conv import OUTPUT_DIMS, ConvSpec
from accelmap.vector.cycles import estimate
from accelmap.vector.intrinsics import SHAPES
from accelmap.vector.machine import core_from_accelerator
from accelmap.vector.modulo import RegisterAllocationError
from accelmap.vector.tuner import MAX_GROUPS, UNROLL_FACTORS, layout_candidates, tune

CORE = core_from_accelerator(get_accelerator("aie_like"))


def _all_cycles(conv: ConvSpec) -> dict[str, list[int]]:
    """Modeled cycles of every variant that compiles and fits, per intrinsic, without any pruning."""
    sizes = conv.sizes
    out: dict[str, list[int]] = {}
    for shape_name in ("mac16", "mac8"):
        shape = SHAPES[shape_name]
        for v in ("x", "k"):
            if sizes[v] % shape.lanes:
                continue
            for layouts in layout_candidates(conv, v, shape.lanes, shape.cols):
                for u in itertools.product(UNROLL_FACTORS, repeat=len(OUTPUT_DIMS)):
                    unroll = dict(zip(OUTPUT_DIMS, u, strict=True))
                    if any(sizes[d] % (f * (shape.lanes if d == v else 1)) for d, f in unroll.items()) \
                            or u[0] * u[1] * u[2] * u[3] > MAX_GROUPS:
                        continue
                    dims = [d for d in OUTPUT_DIMS if sizes[d] // (unroll[d] * (shape.lanes if d == v else 1)) > 1]
                    sched = Schedule(v, shape_name, tuple((d, f) for d, f in unroll.items() if f > 1), tuple(dims),
                                     layouts)
                    try:
                        prog = compile_conv(conv, sched, CORE.data_mem_bits)
                    except CompileError:
                        continue
                    by_dim = {lp.dim: lp for lp in prog.loops}
                    for order in itertools.permutations(dims):
                        try:
                            c = estimate(replace(prog, loops=tuple(by_dim[d] for d in order)), CORE)
                        except RegisterAllocationError:
                            continue
                        if c.fits_program_memory:
                            out.setdefault(shape_name, []).append(c.cycles)
    return out


def test_pruned_tuning_finds_the_brute_force_minima():
    conv = ConvSpec("t", x=32, y=2, k=16, c=8, r=1, s=1)   # mac8 beats mac16 here (310 against 357 cycles)
    cycles = _all_cycles(conv)
    res = tune(conv, CORE)
    assert res.pruned > 0
    assert res.cost.cycles == min(cycles["mac16"] + cycles["mac8"]) < min(cycles["mac16"])
    assert res.first_shape_best is not None
    sched16, cost16 = res.first_shape_best
    assert sched16.shape == "mac16" and cost16.cycles == min(cycles["mac16"])
