"""A cycle-level cross-check of the modulo schedule: list-schedule the instructions of consecutive trips of the
pipelined loop onto the VLIW slots (one vector MAC, two 256-bit loads, one 256-bit store per cycle) with the same
latencies, and count cycles. Instructions issue in program order per slot class at the earliest cycle their operands
are ready and their slot is free, which overlaps trips the way a software pipeliner does. Registers are not
allocated here (the modulo scheduler's allocation is checked cycle by cycle by ``modulo.check_schedule``); hoisted
loads, as the cycle model chose them, issue in the first trip only. Tests compare the two schedules."""

from __future__ import annotations

import math

from accelmap.vector.cycles import estimate
from accelmap.vector.machine import LOAD_PORTS, LOAD_TO_USE_CYCLES, MAC_PIPELINE_CYCLES, STORE_CYCLES, Core
from accelmap.vector.program import Load, Mac, Store, VectorProgram


def scheduled_loop_cycles(prog: VectorProgram, core: Core, trips: int) -> int:
    """Cycles of ``trips`` trips of the loop body, from the first issue to the last store's completion."""
    regs = {r.id: r for r in prog.registers}
    out_bits = prog.shape.lanes * prog.out_bits
    used: dict[tuple[str, int], int] = {}           # (slot class, cycle) -> slots taken
    cap = {"load": LOAD_PORTS, "mac": 1, "store": 1}
    last_issue = {"load": 0, "mac": 0, "store": 0}  # in-order issue within each slot class
    end = 0

    def issue(kind: str, ready: int) -> int:
        t = max(ready, last_issue[kind])
        while used.get((kind, t), 0) >= cap[kind]:
            t += 1
        used[(kind, t)] = used.get((kind, t), 0) + 1
        last_issue[kind] = t
        return t

    hoisted = estimate(prog, core).hoisted
    ready_reg: dict[int, int] = {}
    for trip in range(trips):
        acc_ready: dict[int, int] = {}
        for ins in prog.body:
            if isinstance(ins, Load):
                if trip and ins.reg in hoisted:
                    continue
                t = 0
                for _part in range(math.ceil(regs[ins.reg].bits / core.load_port_bits)):
                    t = issue("load", 0)
                ready_reg[ins.reg] = t + LOAD_TO_USE_CYCLES
            elif isinstance(ins, Mac):
                t = issue("mac", max(ready_reg[ins.xreg], ready_reg[ins.zreg], acc_ready.get(ins.acc, 0)))
                acc_ready[ins.acc] = t + 1        # accumulator forwarding: the next MAC of a chain one cycle later
                end = max(end, t + MAC_PIPELINE_CYCLES)
            elif isinstance(ins, Store):
                t = 0
                for _part in range(math.ceil(out_bits / core.store_port_bits)):
                    t = issue("store", acc_ready[ins.acc] - 1 + MAC_PIPELINE_CYCLES)
                end = max(end, t + STORE_CYCLES)
    return end
