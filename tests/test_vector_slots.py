"""The modulo schedule with register allocation: valid cycle by cycle (slots and physical registers), and against a
list schedule of the same instructions on the VLIW slots that ignores registers."""

from __future__ import annotations

import itertools

from accelmap.arch.presets import get_accelerator
from accelmap.vector.compiler import CompileError, Schedule, compile_conv
from accelmap.vector.conv import ConvSpec
from accelmap.vector.cycles import estimate
from accelmap.vector.machine import core_from_accelerator
from accelmap.vector.modulo import RegisterAllocationError, check_schedule
from accelmap.vector.slot_schedule import scheduled_loop_cycles
from accelmap.vector.tuner import layout_candidates


def test_modulo_schedules_are_valid_and_match_the_slot_schedule():
    core = core_from_accelerator(get_accelerator("aie_like"))
    devs: dict[str, list[int]] = {"mac": [], "load": [], "store": [], "registers": []}
    rejected = 0
    for conv in (ConvSpec("a", x=64, y=4, k=16, c=4, r=3, s=3), ConvSpec("b", x=32, y=2, k=32, c=8, r=1, s=1),
                 ConvSpec("c", x=64, y=4, k=1, c=1, r=2, s=2), ConvSpec("d", x=32, y=2, k=16, c=8, r=1, s=1, bits=32)):
        for shape, lanes, cols in (("mac16", 16, 2), ("mac8", 8, 4), ("lmac8", 8, 1)):
            for v in ("x", "k"):
                for lay in layout_candidates(conv, v, lanes, cols):
                    for ux, uy, uk in itertools.product((1, 2, 4), (1, 2, 4), (1, 2)):
                        sched = Schedule(v, shape, (("x", ux), ("y", uy), ("k", uk)), ("k", "y", "x"), lay)
                        try:
                            prog = compile_conv(conv, sched, core.data_mem_bits)
                        except CompileError:
                            continue
                        try:
                            c = estimate(prog, core)
                        except RegisterAllocationError:
                            rejected += 1
                            continue
                        n = c.inner_trips
                        # every trip's slots and every live value's physical registers, cycle by cycle
                        check_schedule(c.schedule, core, min(n, 2 * c.schedule.unroll + 3))
                        assert c.ii >= c.res_mii and (c.bound == "registers") == (c.ii > c.res_mii)
                        devs[c.bound].append(c.schedule.loop_cycles(n) + c.schedule.drain - scheduled_loop_cycles(prog, core, n))
    assert len(devs["mac"]) >= 40 and len(devs["registers"]) >= 40 and rejected <= 4
    # Both count from the first issue to the last store's completion. At the resource bound they agree within a
    # few cycles per loop execution: the modulo schedule loads as late as possible, the list schedule as early as
    # possible (both within slot limits).
    assert min(devs["mac"]) >= -6 and max(devs["mac"]) <= 0
    # Load-bound: II is a whole number of cycles per trip; the list schedule packs an odd slot count across trips.
    assert all(0 <= d <= 16 for d in devs["load"])
    # Raised for the registers, which the list schedule ignores: at most the one cycle that late loads save.
    assert min(devs["registers"]) >= -1
