"""VLIW cycle model of a vector program on the core (a model, not the AI Engine simulator).

The innermost loop is software-pipelined by the modulo scheduler (``modulo``): the initiation interval II starts
at the resource bound (one vector MAC, two 256-bit loads and one 256-bit store per cycle; Vyasa: 6-way VLIW with
two vector loads, one vector store and one vector operation, 96 B/cycle scratchpad) and rises until the kernel's
values fit the 16 x 128-bit vector register file and the accumulator registers, splitting long-lived vector values
into reloads where that reaches a smaller II. A loop of N trips issues for (N - 1) x II + one iteration's issue span
cycles; the kernel's end also waits for its last stores (``cycle_sim`` checks these counts by execution).
Loads of a tensor that does not move in the pipelined loop (the filter of an x-vectorized kernel) are hoisted out
of it when that gives fewer cycles: their registers are then held for the whole loop, and they are loaded before
it. Outer trips pay pointer updates and a branch. Code size (the kernel, unrolled by modulo variable expansion,
plus prologue and epilogue bundles) must fit the 16 KB program memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from accelmap.vector.machine import (
    BUNDLE_BYTES,
    CALL_CYCLES,
    LOAD_PORTS,
    LOAD_TO_USE_CYCLES,
    OUTER_LOOP_CYCLES,
    PROGRAM_MEMORY_BYTES,
    STORE_PORTS,
    Core,
)
from accelmap.vector.modulo import ModuloSchedule, RegisterAllocationError, kernel_bundles, modulo_schedule
from accelmap.vector.program import Load, Mac, Store, VectorProgram


@dataclass(frozen=True)
class CycleEstimate:
    macs_per_body: int
    load_ops: int                # 256-bit load slots per iteration, reloads included
    store_ops: int
    reloads: int                 # load instances added by splitting long-lived values (the cost of spilling)
    hoisted_bits: int            # loop-invariant registers loaded once per execution of the pipelined loop
    hoisted: frozenset[int]      # their register ids
    res_mii: int                 # resource bound on the initiation interval
    ii: int                      # initiation interval the modulo schedule and register allocation reach
    bound: str                   # what sets ii: mac, load, store (the resource bound) or registers
    length: int                  # cycles of one iteration, first issue to last completion
    unroll: int                  # modulo variable expansion of the kernel
    inner_trips: int
    outer_trips: int
    cycles: int
    code_bytes: int
    useful_macs: int
    peak_macs_per_cycle: int
    schedule: ModuloSchedule

    @property
    def depth(self) -> int:
        """Cycles a loop execution adds to inner_trips x II (prologue and epilogue)."""
        return self.length - self.ii

    @property
    def macs_per_cycle(self) -> float:
        return self.useful_macs / self.cycles

    @property
    def percent_of_peak(self) -> float:
        return 100.0 * self.macs_per_cycle / self.peak_macs_per_cycle

    @property
    def fits_program_memory(self) -> bool:
        return self.code_bytes <= PROGRAM_MEMORY_BYTES


def invariant_registers(prog: VectorProgram) -> frozenset[int]:
    """Registers of tensors that do not move in the pipelined loop."""
    still = {n for n, d in prog.loops[-1].deltas if d == 0} if prog.loops else set()
    return frozenset(r.id for r in prog.registers if r.tensor in still)


def lower_bound_cycles(prog: VectorProgram, core: Core) -> int:
    """No schedule of the program is faster: every pipelined trip issues its MACs, its loads of moving tensors and
    its stores at the slot rates, and one iteration is at least that long too (the tuner prunes with it)."""
    regs = {r.id: r for r in prog.registers}
    inv = invariant_registers(prog)
    n_mac = sum(1 for i in prog.body if isinstance(i, Mac))
    loads = sum(math.ceil(regs[i.reg].bits / core.load_port_bits) for i in prog.body
                if isinstance(i, Load) and i.reg not in inv)
    out_slots = math.ceil(prog.shape.lanes * prog.out_bits / core.store_port_bits)
    stores = sum(out_slots for i in prog.body if isinstance(i, Store))
    rate = max(1, n_mac, math.ceil(loads / LOAD_PORTS), math.ceil(stores / STORE_PORTS))
    inner = prog.loops[-1].trips if prog.loops else 1
    return prog.iterations // inner * (inner * rate + OUTER_LOOP_CYCLES) + CALL_CYCLES


def estimate(prog: VectorProgram, core: Core) -> CycleEstimate:
    """Modeled cycles; raises ``RegisterAllocationError`` when the body fits the registers at no II."""
    options = []
    invariant = invariant_registers(prog)
    for hoisted in ([invariant, frozenset()] if invariant else [frozenset()]):
        try:
            options.append(_estimate(prog, core, hoisted))
        except RegisterAllocationError:
            if not hoisted:
                raise
    return min(options, key=lambda c: (c.cycles, -c.hoisted_bits))


def _estimate(prog: VectorProgram, core: Core, hoisted: frozenset[int]) -> CycleEstimate:
    loop_bundles = OUTER_LOOP_CYCLES * len(prog.loops)
    ms = modulo_schedule(prog, core, hoisted, PROGRAM_MEMORY_BYTES // BUNDLE_BYTES - loop_bundles)
    regs = {r.id: r for r in prog.registers}
    n_mac = len(ms.mac_times)
    hoisted_bits = sum(regs[r].bits for r in hoisted)
    hoisted_slots = sum(math.ceil(regs[r].bits / core.load_port_bits) for r in hoisted)
    preheader = 0
    if hoisted_slots:
        # Issued before the loop, two parts a cycle; the loop starts after them, or later if a hoisted value would
        # not have arrived by its first use (the last part issues in the preheader's last cycle).
        macs = [i for i in prog.body if isinstance(i, Mac)]
        first = min([t for _n, t in ms.load_times] + list(ms.mac_times))
        first_use = min(t for ins, t in zip(macs, ms.mac_times, strict=True)
                        if ins.xreg in hoisted or ins.zreg in hoisted) - first
        issue = math.ceil(hoisted_slots / LOAD_PORTS)
        preheader = max(issue, issue - 1 + LOAD_TO_USE_CYCLES - first_use)
    stores = len(ms.store_times)
    slots = {"mac": n_mac, "load": math.ceil(ms.load_parts / LOAD_PORTS), "store": math.ceil(stores / STORE_PORTS)}
    bound = max(slots, key=lambda k: slots[k]) if ms.ii == ms.res_mii else "registers"
    inner = prog.loops[-1].trips if prog.loops else 1
    outer = prog.iterations // inner
    # Outer trips issue back to back; only the kernel's end waits for the last stores to write memory.
    cycles = outer * (ms.loop_cycles(inner) + preheader + OUTER_LOOP_CYCLES) + CALL_CYCLES + ms.drain
    code = (kernel_bundles(ms) + loop_bundles) * BUNDLE_BYTES
    peak = prog.shape.lanes * prog.shape.cols
    return CycleEstimate(n_mac, ms.load_parts, stores, ms.reloads, hoisted_bits, hoisted, ms.res_mii, ms.ii, bound,
                         ms.length, ms.unroll, inner, outer, cycles, code, prog.conv.macs, peak, ms)
