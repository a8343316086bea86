"""A cycle-level simulation of the kernel the cycle model describes: the modulo schedule and its register
allocation lowered to timed VLIW bundles on physical registers, executed cycle by cycle with operand data.

This is a check of the cycle model by execution, not an AI Engine simulator (none is available here, nor hardware).
The machine is an exposed-pipeline VLIW core, as the AI Engine is (the compiler, not interlocks, keeps operands in
time): per cycle at most two 256-bit load parts, one vector MAC and one 256-bit store issue. A load part writes
its physical registers LOAD_TO_USE_CYCLES after issue; a MAC reads its X and Z registers and its accumulator when
it issues, its result can feed the next MAC of the chain one cycle later and the store MAC_PIPELINE_CYCLES later;
a store writes memory STORE_CYCLES after issue. A read before the data arrived, or after another value overwrote
the register, sees the wrong contents: every register carries a tag (which program register, which loop
iteration, which accumulation step) that is checked on every read, and the data itself is computed with the
intrinsic emulator and compared with NumPy's convolution at the end. Cycles are counted from the bundles issued
(entry, each outer trip's preheader and pipelined loop, the outer loop's overhead bundles, exit) plus the drain of
the last stores, independently of the model's closed formula (``cycles.estimate``), which tests compare it with.

Outer trips run the same static code, so one trip is simulated with the data of every outer trip at once (a
leading batch axis); nothing is in flight across a trip boundary but the last stores (asserted)."""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

from accelmap.vector import intrinsics as it
from accelmap.vector.cycles import CycleEstimate, estimate
from accelmap.vector.machine import (
    CALL_CYCLES,
    LOAD_PORTS,
    LOAD_TO_USE_CYCLES,
    MAC_PIPELINE_CYCLES,
    OUTER_LOOP_CYCLES,
    STORE_CYCLES,
    STORE_PORTS,
    Core,
)
from accelmap.vector.program import (
    Mac,
    Store,
    VectorProgram,
    dtype_of,
    execute_mac,
    expected_output,
    output_of,
    packed_operands,
)


@dataclass(frozen=True)
class SimReport:
    cycles: int                 # the whole kernel: entry and exit, every outer trip, the last stores' drain
    trip_cycles: int            # one outer trip: preheader and pipelined loop, first issue to last issue
    loop_start: int             # cycle of the trip at which the pipelined loop's first bundle issues
    drain: int                  # cycles after the last issue until the last store has written memory
    outer_trips: int
    slot_peaks: tuple[tuple[str, int], ...]   # the most operations of each class issued in one cycle
    errors: tuple[str, ...]     # reads that found the wrong value (first few), slot overflows
    exact: bool                 # the output equals NumPy's convolution

    @property
    def ok(self) -> bool:
        return self.exact and not self.errors


# Operation records of the bundle stream (plain tuples: the stream of a large kernel has ~10^5 of them).
# load part:  ("L", cycle, phys, units, tag, reg id, first element, elements, inner iteration or -1 if hoisted)
# mac:        ("M", cycle, mac index, iteration, x phys, x units, z phys, z units, acc phys)
# store:      ("S", cycle, store index, iteration, acc phys)


def _stream(prog: VectorProgram, core: Core, est: CycleEstimate) -> tuple[list[tuple], int]:
    """The timed operations of one outer trip (preheader, then the pipelined loop) and the loop's start cycle:
    what a software pipeliner emits for the schedule, with the allocator's physical registers."""
    ms = est.schedule
    regs = {r.id: r for r in prog.registers}
    macs = [i for i in prog.body if isinstance(i, Mac)]
    vec_regs = core.vrf_bits // it.REGISTER_BITS
    units = {r.id: r.bits // it.REGISTER_BITS for r in prog.registers}
    part_units = {r: max(1, u // math.ceil(regs[r].bits / core.load_port_bits)) for r, u in units.items()}
    ops: list[tuple] = []

    # Preheader: hoisted (loop-invariant) registers from the top of the file down, two load parts per cycle.
    hoisted_phys: dict[int, int] = {}
    top = vec_regs
    n_parts = 0
    for r in sorted(est.hoisted):
        top -= units[r]
        hoisted_phys[r] = top
        for k in range(units[r] // part_units[r]):
            ops.append(("L", n_parts // LOAD_PORTS, top + k * part_units[r], part_units[r], (r, -1), r,
                        k * part_units[r], part_units[r], -1))
            n_parts += 1
    if top < vec_regs - ms.pinned_vec_units:
        raise AssertionError("hoisted registers exceed the pinned part of the register file")
    preheader = math.ceil(n_parts / LOAD_PORTS)

    # The loop: the schedule's times per iteration, shifted so its first operation issues at the loop start.
    instance: dict[tuple[int, int], int] = {}       # (register, mac index) -> value index
    acc_value: dict[int, int] = {}
    issue_times: dict[str, list[int]] = {}
    for name, t in ms.load_times:
        issue_times.setdefault(name, []).append(t)
    for n, v in enumerate(ms.values):
        if v.kind == "vec":
            for m in v.uses:
                instance[(v.reg, m)] = n
        else:
            acc_value[v.reg] = n
    first = min([t for _n, t in ms.load_times] + list(ms.mac_times))
    # The loop may start when every hoisted value has arrived by its first use (a bubble of empty bundles if not).
    start = preheader
    for r in hoisted_phys:
        first_use = min(ms.mac_times[m] for m, ins in enumerate(macs) if r in (ins.xreg, ins.zreg)) - first
        start = max(start, (preheader - 1) + LOAD_TO_USE_CYCLES - first_use)
    stores = [i for i in prog.body if isinstance(i, Store)]
    for i in range(est.inner_trips):
        base = start - first + i * ms.ii
        copy = i % ms.unroll
        for n, v in enumerate(ms.values):
            if v.kind != "vec":
                continue
            g = ms.assignment[n][copy]
            pu = part_units[v.reg]
            for k, t in enumerate(issue_times[v.name]):
                ops.append(("L", base + t, g + k * pu, pu, (v.reg, i), v.reg, k * pu, pu, i))
        for m, (ins, t) in enumerate(zip(macs, ms.mac_times, strict=True)):
            xp, zp = (hoisted_phys[r] if r in hoisted_phys else ms.assignment[instance[(r, m)]][copy]
                      for r in (ins.xreg, ins.zreg))
            ops.append(("M", base + t, m, i, xp, units[ins.xreg], zp, units[ins.zreg],
                        ms.assignment[acc_value[ins.acc]][copy]))
        for s, (st, t) in enumerate(zip(stores, ms.store_times, strict=True)):
            ops.append(("S", base + t, s, i, ms.assignment[acc_value[st.acc]][copy]))
    order = {"L": 0, "M": 1, "S": 2}
    ops.sort(key=lambda o: (o[1], order[o[0]]))
    return ops, start


def simulate(prog: VectorProgram, core: Core, est: CycleEstimate | None = None, seed: int = 0) -> SimReport:
    """Run the modulo-scheduled kernel cycle by cycle (see the module docstring)."""
    est = est or estimate(prog, core)
    ms = est.schedule
    ops, loop_start = _stream(prog, core, est)
    regs = {r.id: r for r in prog.registers}
    macs = [i for i in prog.body if isinstance(i, Mac)]
    stores = [i for i in prog.body if isinstance(i, Store)]
    chain_step: list[int] = []
    chain_len: dict[int, int] = {}
    for ins in macs:
        chain_step.append(chain_len.get(ins.acc, 0))
        chain_len[ins.acc] = chain_len.get(ins.acc, 0) + 1
    acc_units = ms.values[next(n for n, v in enumerate(ms.values) if v.kind == "acc")].units if stores else 1

    inp, wgt, ibuf, wbuf = packed_operands(prog, seed)
    mem = {"I": ibuf, "W": wbuf}
    outer, inner = est.outer_trips, est.inner_trips
    bases = {k: b.reshape(outer, inner) for k, b in prog.bases().items()}
    out = np.zeros(prog.tensor("O").size, dtype=dtype_of(prog.out_bits))
    elems_per_unit = it.REGISTER_BITS // prog.conv.bits

    vec: dict[int, tuple] = {}                      # phys -> (tag, unit, data) now readable
    pending: list[tuple[int, int, int, tuple, int, np.ndarray]] = []  # heap: (arrival, seq, phys, tag, unit, data)
    acc: dict[int, list[tuple[int, tuple, np.ndarray]]] = {}    # acc unit -> writes (issue cycle, tag, data)
    errors: list[str] = []
    per_cycle: dict[tuple[str, int], int] = {}
    last_issue = 0
    done = 0
    seq = 0

    def err(msg: str) -> None:
        if len(errors) < 10:
            errors.append(msg)

    def read_vec(phys: int, n_units: int, want: tuple, cyc: int) -> np.ndarray:
        parts = []
        for u in range(n_units):
            got = vec.get(phys + u)
            if got is None or got[0] != want or got[1] != u:
                err(f"cycle {cyc}: register v{phys + u} holds {None if got is None else got[:2]}, wanted {want} "
                    f"part {u}")
                return np.zeros((outer, n_units * elems_per_unit), dtype=dtype_of(prog.conv.bits))
            parts.append(got[2])
        return np.concatenate(parts, axis=1)

    def read_acc(phys: int, latency: int, want: tuple, cyc: int) -> np.ndarray | None:
        """The accumulator as a MAC (latency 1, forwarding) or a store (the MAC pipeline) issued now sees it."""
        data = None
        for u in range(acc_units):
            found = next(((tag, d) for t, tag, d in reversed(acc.get(phys + u, [])) if t + latency <= cyc), None)
            if found is None or found[0] != want:
                err(f"cycle {cyc}: accumulator a{phys + u} holds {None if found is None else found[0]}, "
                    f"wanted {want}")
                return None
            data = found[1]
        return data

    for op in ops:
        kind, cyc = op[0], op[1]
        while pending and pending[0][0] <= cyc:
            _t, _seq, phys, tag, unit, data = heapq.heappop(pending)
            vec[phys] = (tag, unit, data)
        key = (kind, cyc)
        per_cycle[key] = per_cycle.get(key, 0) + 1
        last_issue = max(last_issue, cyc)
        if kind == "L":
            _k, _c, phys, n_units, tag, rid, u0, _n, i = op
            r = regs[rid]
            addr = bases[r.tensor][:, 0 if i < 0 else i] + r.start
            full = it.aligned_load(mem[r.tensor], addr, r.elems)
            for u in range(n_units):
                lo = (u0 + u) * elems_per_unit
                seq += 1
                heapq.heappush(pending, (cyc + LOAD_TO_USE_CYCLES, seq, phys + u, tag, u0 + u,
                                         full[:, lo:lo + elems_per_unit]))
        elif kind == "M":
            _k, _c, m, i, xp, xu, zp, zu, ap = op
            ins = macs[m]
            x = read_vec(xp, xu, (ins.xreg, -1 if ins.xreg in est.hoisted else i), cyc)
            z = read_vec(zp, zu, (ins.zreg, -1 if ins.zreg in est.hoisted else i), cyc)
            prev = None
            if not ins.first:
                prev = read_acc(ap, 1, (ins.acc, i, chain_step[m]), cyc)
                if prev is None:
                    prev = np.zeros((outer, prog.shape.lanes), dtype=np.int64)
            res = execute_mac(prog.shape, ins, x[:, :regs[ins.xreg].elems], z[:, :regs[ins.zreg].elems], prev)
            for u in range(acc_units):
                writes = acc.setdefault(ap + u, [])
                writes.append((cyc, (ins.acc, i, chain_step[m] + 1), res))
                del writes[:-8]
        else:
            _k, _c, s, i, ap = op
            st = stores[s]
            result = read_acc(ap, MAC_PIPELINE_CYCLES, (st.acc, i, chain_len[st.acc]), cyc)
            if result is not None:
                it.aligned_store(out, bases["O"][:, i] + st.offset, it.srs(result, 0, prog.out_bits))
            done = max(done, cyc + STORE_CYCLES)
    if pending:
        err(f"{len(pending)} register writes still in flight after the trip's last bundle")
    caps = {"L": LOAD_PORTS, "M": 1, "S": STORE_PORTS}
    peaks = {k: 0 for k in caps}
    for (k, cyc), n in per_cycle.items():
        peaks[k] = max(peaks[k], n)
        if n > caps[k]:
            err(f"cycle {cyc}: {n} {k} operations issued, the core has {caps[k]} slots")
    trip = last_issue + 1
    drain = max(0, done - trip)
    cycles = CALL_CYCLES + outer * (trip + OUTER_LOOP_CYCLES) + drain
    exact = bool(np.array_equal(output_of(prog, out), expected_output(prog, inp, wgt)))
    names = {"L": "load parts", "M": "macs", "S": "stores"}
    return SimReport(cycles, trip, loop_start, drain, outer, tuple((names[k], p) for k, p in peaks.items()),
                     tuple(errors), exact)
