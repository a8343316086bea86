"""The cycle model checked by execution: the modulo-scheduled kernels, lowered to timed bundles on physical
registers and run cycle by cycle with data, take exactly the modeled cycles, read every operand in time and
unclobbered, and compute the convolution bit for bit; a schedule broken on purpose is caught."""

from __future__ import annotations

import functools
import itertools
from dataclasses import replace

import pytest

from accelmap.arch.presets import get_accelerator
from accelmap.vector.compiler import CompileError, Schedule, compile_conv
from accelmap.vector.conv import ConvSpec
from accelmap.vector.cycle_sim import simulate
from accelmap.vector.cycles import estimate
from accelmap.vector.machine import core_from_accelerator
from accelmap.vector.modulo import RegisterAllocationError
from accelmap.vector.tuner import layout_candidates

CORE = core_from_accelerator(get_accelerator("aie_like"))


@functools.cache
def _variants() -> list:
    return list(_compiled())


def _compiled():
    for conv in (ConvSpec("a", x=32, y=4, k=16, c=4, r=3, s=3), ConvSpec("b", x=32, y=2, k=32, c=8, r=1, s=1),
                 ConvSpec("c", x=64, y=4, k=1, c=1, r=2, s=2), ConvSpec("d", x=16, y=2, k=16, c=8, r=3, s=1, bits=32)):
        for shape, lanes, cols in (("mac16", 16, 2), ("mac8", 8, 4), ("lmac8", 8, 1)):
            for v in ("x", "k"):
                for lay in layout_candidates(conv, v, lanes, cols):
                    for ux, uy, uk in itertools.product((1, 2, 4), (1, 2), (1, 2)):
                        sched = Schedule(v, shape, (("x", ux), ("y", uy), ("k", uk)), ("k", "y", "x"), lay)
                        try:
                            prog = compile_conv(conv, sched, CORE.data_mem_bits)
                            yield prog, estimate(prog, CORE)
                        except (CompileError, RegisterAllocationError):
                            continue


def test_simulated_cycles_equal_the_model_on_every_variant():
    seen = {"hoisted": 0, "reloads": 0, "unrolled": 0, "registers": 0}
    n = 0
    for prog, est in _variants():
        rep = simulate(prog, CORE, est)
        assert rep.ok, (prog.conv.name, rep.errors)
        assert rep.cycles == est.cycles, (prog.conv.name, rep.cycles, est.cycles)
        seen["hoisted"] += bool(est.hoisted)
        seen["reloads"] += bool(est.reloads)
        seen["unrolled"] += est.unroll > 1
        seen["registers"] += est.bound == "registers"
        n += 1
    assert n >= 60 and all(v >= 3 for v in seen.values()), (n, seen)


def _shared(ms):
    """The schedule with one vector value moved onto the registers of another that is live at the same time."""
    vals = ms.values
    for a, b in itertools.permutations(range(len(vals)), 2):
        va, vb = vals[a], vals[b]
        if va.kind == vb.kind == "vec" and va.units == vb.units and ms.assignment[a] != ms.assignment[b] \
                and va.start <= vb.end and vb.start <= va.end:
            return replace(ms, assignment=tuple(ms.assignment[a] if n == b else x for n, x in enumerate(ms.assignment)))
    return None


@pytest.mark.parametrize("hoisted", [False, True])
def test_a_broken_schedule_is_caught(hoisted):
    prog, est = next((p, e) for p, e in _variants()
                     if bool(e.hoisted) == hoisted and e.inner_trips > 2 and _shared(e.schedule) is not None)
    ms = est.schedule
    assert simulate(prog, CORE, est).ok
    # Every load one cycle late: its first use reads the register before the data arrives.
    late = replace(ms, load_times=tuple((n, t + 1) for n, t in ms.load_times))
    assert simulate(prog, CORE, replace(est, schedule=late)).errors
    # Two values live at once in one register: a load overwrites a value MACs still read.
    assert simulate(prog, CORE, replace(est, schedule=_shared(ms))).errors
    # One cycle too short an interval: iterations collide in a slot or a register.
    assert simulate(prog, CORE, replace(est, schedule=replace(ms, ii=ms.ii - 1))).errors
