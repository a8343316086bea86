"""Analytical VLIW cycle model of a vector program on the core (a model, not the AI Engine simulator).

Per body iteration the slots bound the initiation interval of the software-pipelined innermost loop:
one vector MAC, two 256-bit loads and one 256-bit store per cycle (Vyasa: 6-way VLIW with two vector loads,
one vector store and one vector operation; 96 B/cycle scratchpad). Registers live beyond the vector register
file spill: each spilled 256 bits cost one store and one reload per iteration. The innermost loop pays its
pipeline depth (prologue and epilogue) once per outer trip; outer trips pay pointer updates and a branch.
Loads of a tensor that does not move in the pipelined loop (the filter of an x-vectorized kernel) are hoisted
out of it, as loop-invariant code motion does, when their registers fit beside the body's peak; they are then
issued in the prologue's free load slots.
Code size (kernel plus prologue and epilogue bundles) must fit the 16 KB program memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from accelmap.vector.machine import (
    BUNDLE_BYTES,
    CALL_CYCLES,
    LOAD_PORTS,
    LOAD_TO_USE_CYCLES,
    MAC_PIPELINE_CYCLES,
    OUTER_LOOP_CYCLES,
    PROGRAM_MEMORY_BYTES,
    STORE_CYCLES,
    STORE_PORTS,
    Core,
)
from accelmap.vector.program import Load, Mac, Store, VectorProgram


@dataclass(frozen=True)
class CycleEstimate:
    macs_per_body: int
    load_ops: int                # 256-bit load slots per iteration, spill reloads included
    store_ops: int
    spill_bits: int
    hoisted_bits: int            # loop-invariant registers loaded once per execution of the pipelined loop
    ii: int                      # initiation interval of the pipelined loop (cycles per iteration)
    bound: str                   # which slot sets ii: mac, load or store
    depth: int                   # prologue + epilogue cycles of one pipelined loop execution
    inner_trips: int
    outer_trips: int
    cycles: int
    code_bytes: int
    useful_macs: int
    peak_macs_per_cycle: int

    @property
    def macs_per_cycle(self) -> float:
        return self.useful_macs / self.cycles

    @property
    def percent_of_peak(self) -> float:
        return 100.0 * self.macs_per_cycle / self.peak_macs_per_cycle

    @property
    def fits_program_memory(self) -> bool:
        return self.code_bytes <= PROGRAM_MEMORY_BYTES


def hoisted_registers(prog: VectorProgram, core: Core) -> set[int]:
    """Registers of tensors that do not move in the pipelined loop, if they all fit beside the body's peak."""
    still = {n for n, d in prog.loops[-1].deltas if d == 0} if prog.loops else set()
    invariant = [r for r in prog.registers if r.tensor in still]
    if not invariant or prog.peak_live_bits + sum(r.bits for r in invariant) > core.vrf_bits:
        return set()
    return {r.id for r in invariant}


def estimate(prog: VectorProgram, core: Core) -> CycleEstimate:
    regs = {r.id: r for r in prog.registers}
    n_mac = sum(1 for i in prog.body if isinstance(i, Mac))
    load_regs = [regs[i.reg] for i in prog.body if isinstance(i, Load)]
    inv_ids = hoisted_registers(prog, core)
    invariant = [r for r in load_regs if r.id in inv_ids]
    hoisted = sum(r.bits for r in invariant)
    depth = LOAD_TO_USE_CYCLES + MAC_PIPELINE_CYCLES + STORE_CYCLES
    hoisted_slots = sum(math.ceil(r.bits / core.load_port_bits) for r in invariant)
    preheader = max(0, math.ceil(hoisted_slots / LOAD_PORTS) - depth)   # beyond the prologue's free load slots
    loads = sum(math.ceil(r.bits / core.load_port_bits) for r in load_regs if r.id not in inv_ids)
    out_bits = prog.shape.lanes * prog.out_bits
    stores = sum(math.ceil(out_bits / core.store_port_bits) for i in prog.body if isinstance(i, Store))
    spill = max(0, prog.peak_live_bits + hoisted - core.vrf_bits)
    # One lazy-store group's accumulator is live at a time; a wider one than the accumulator file spills too.
    spill += max(0, prog.shape.lanes * prog.shape.acc_bits - core.acc_bits)
    spill_ops = math.ceil(spill / core.load_port_bits)
    loads += spill_ops
    stores += spill_ops
    slots = {"mac": n_mac, "load": math.ceil(loads / LOAD_PORTS), "store": math.ceil(stores / STORE_PORTS)}
    bound = max(slots, key=lambda k: slots[k])
    ii = max(1, slots[bound])
    inner = prog.loops[-1].trips if prog.loops else 1
    outer = prog.iterations // inner
    cycles = outer * (inner * ii + depth + preheader + OUTER_LOOP_CYCLES) + CALL_CYCLES
    code = (ii + 2 * depth + OUTER_LOOP_CYCLES * len(prog.loops)) * BUNDLE_BYTES
    peak = prog.shape.lanes * prog.shape.cols
    return CycleEstimate(n_mac, loads, stores, spill, hoisted, ii, bound, depth, inner, outer, cycles, code,
                         prog.conv.macs, peak)
