"""Modulo scheduling and register allocation of the software-pipelined loop body on the VLIW core.

The operations of one body iteration are: 256-bit load parts (a grouped register of w bits takes ceil(w/256) of
the two load slots), vector MACs (one slot) and stores (one slot). Latencies: load to use, MAC to the next MAC of
the same accumulator chain (forwarding, 1 cycle), last MAC to the store that reads the accumulator (the MAC
pipeline). No value is carried from one iteration to the next (every iteration starts its accumulators with
``mul``, and the kernels store to O what they never load), so the recurrence bound RecMII is 1 and the II starts at
the resource bound ResMII (Rau, "Iterative modulo scheduling").

At a given II, MACs are placed in program order on consecutive cycles (optionally with a bubble of idle cycles
wherever the X register or the accumulator changes, which shortens how long two registers overlap), stores as
early as their accumulator is ready, and load parts as late as their first use allows (ALAP: short
register lifetimes). The register allocator then assigns every value of the flat kernel to physical registers:

* vector registers: the 16 x 128-bit file; a grouped register of 2^n x 128 bits is an aligned group of 2^n
  physical registers (the AI Engine composes its 256/512/1024-bit registers from 128-bit ones, AM009; the
  aligned-group rule is our simplification). Each 256-bit part of a value holds its registers from the cycle it
  arrives to the value's last use.
* accumulators: the accumulator file in 384-bit units; a 16-lane 48-bit or an 8-lane 80-bit accumulator takes
  an aligned pair. A value occupies them from its first MAC to its store.

A value that lives longer than II overlaps its own next instance; modulo variable expansion unrolls the kernel
u = max ceil(lifetime / II) times so the copies get distinct registers, and each value's copies are circular arcs
over u x II cycles, allocated greedily (in start order, packing narrow values beside busy registers, then widest
first if that fails). When allocation fails, the search inserts bubbles, raises II (fewer overlapping
iterations) or splits vector values at their long idle gaps between uses into separate loads (rematerialization:
every vector value is a copy of data memory, so a spill is one more load and no store), keeping the feasible
schedule of smallest II. A body that fits at no II up to the length of one unpipelined iteration is rejected.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from accelmap.vector.intrinsics import REGISTER_BITS, MacShape
from accelmap.vector.machine import (
    ACC_UNIT_BITS,
    LOAD_PORTS,
    LOAD_TO_USE_CYCLES,
    MAC_PIPELINE_CYCLES,
    STORE_CYCLES,
    STORE_PORTS,
    Core,
)
from accelmap.vector.program import Mac, Register, Store, VectorProgram

MAC_BUBBLES = (0, 1, 2, 4)


class RegisterAllocationError(ValueError):
    """The body fits the register files at no initiation interval."""


@dataclass(frozen=True)
class Value:
    """One register value of the kernel: a load instance (vector) or a lazy-store group (accumulator)."""

    kind: str               # "vec" or "acc"
    name: str               # for reports: "r3", "r3'" (a reload), "acc1"
    units: int              # physical registers it takes (128-bit vector registers / 384-bit accumulator units)
    start: int              # first cycle it occupies (iteration-relative)
    end: int                # last cycle it occupies
    arrivals: tuple[int, ...] = ()   # vector values: the cycle each 256-bit part arrives (occupies its half)
    reg: int = -1           # the program's register id (vector) or lazy-store group (accumulator)
    uses: tuple[int, ...] = ()       # vector values: indices of the MACs (program order) that read this instance


@dataclass(frozen=True)
class ModuloSchedule:
    ii: int
    res_mii: int
    rec_mii: int
    load_parts: int                 # load slots per iteration (reloads included)
    reloads: int                    # extra load instances from splitting long-lived values
    mac_times: tuple[int, ...]      # per MAC, in program order (iteration-relative cycles)
    load_times: tuple[tuple[str, int], ...]    # (value name, issue cycle) per 256-bit load part
    store_times: tuple[int, ...]
    length: int                     # one iteration, first issue to last completion
    issue_span: int                 # one iteration, first issue to last issue (both included)
    drain: int                      # cycles after the last issue until the last store has written memory
    unroll: int                     # modulo variable expansion factor
    values: tuple[Value, ...]
    assignment: tuple[tuple[int, ...], ...]     # per value, per copy: its first physical register
    pinned_vec_units: int           # 128-bit registers held by hoisted loop-invariant values for the whole loop
    bubble: int                     # idle cycles before each MAC that switches X register

    @property
    def stages(self) -> int:
        return math.ceil(self.length / self.ii)

    def loop_cycles(self, trips: int) -> int:
        """Cycles from the first issue of a modulo-scheduled loop of ``trips`` iterations (one every II) to its last
        issue: the next code issues in the cycle after (nothing waits for the last stores but the kernel's end)."""
        return (trips - 1) * self.ii + self.issue_span if trips else 0


def _load_units(bits: int) -> int:
    return bits // REGISTER_BITS


def acc_units(shape: MacShape) -> int:
    bits = shape.lanes * shape.acc_bits
    n = math.ceil(bits / ACC_UNIT_BITS)
    return 1 << (n - 1).bit_length()


@dataclass(frozen=True)
class _Body:
    """The body as the scheduler sees it: MAC operands and chains, load instances with their uses."""

    macs: tuple[tuple[int, int, int], ...]          # (acc group, xreg, zreg) in program order
    stores: tuple[tuple[int, int], ...]             # (acc group, index of its last MAC)
    reg_bits: dict[int, int]
    uses: dict[int, tuple[int, ...]]                # register -> MAC indices reading it (sorted)


def _body(instrs: tuple, registers: tuple[Register, ...], hoisted: frozenset[int]) -> _Body:
    macs: list[tuple[int, int, int]] = []
    stores: list[tuple[int, int]] = []
    last: dict[int, int] = {}
    for ins in instrs:
        if isinstance(ins, Mac):
            last[ins.acc] = len(macs)
            macs.append((ins.acc, ins.xreg, ins.zreg))
        elif isinstance(ins, Store):
            stores.append((ins.acc, last[ins.acc]))
    uses: dict[int, list[int]] = {}
    for i, (_a, x, z) in enumerate(macs):
        for r in {x, z}:
            if r not in hoisted:
                uses.setdefault(r, []).append(i)
    return _Body(tuple(macs), tuple(stores), {r.id: r.bits for r in registers},
                 {r: tuple(u) for r, u in uses.items()})


def _instances(body: _Body, cuts: dict[int, tuple[int, ...]]) -> list[tuple[int, tuple[int, ...]]]:
    """Load instances: a register's uses split at the cut positions (indices into its use list)."""
    out = []
    for r, u in body.uses.items():
        bounds = (0, *cuts.get(r, ()), len(u))
        out += [(r, u[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)]
    return out


def _parts(bits: int, core: Core) -> int:
    return math.ceil(bits / core.load_port_bits)


def _mac_times(body: _Body, bubble: int) -> tuple[int, ...]:
    """MACs in program order, back to back, with ``bubble`` idle cycles before each MAC that switches to another
    X register or starts another accumulator (time for the next grouped register to arrive while the previous one
    is still held, or for an accumulator to be stored and freed)."""
    return _mac_times_of(body.macs, bubble)


@lru_cache(maxsize=1024)
def _mac_times_of(macs: tuple[tuple[int, int, int], ...], bubble: int) -> tuple[int, ...]:
    out: list[int] = []
    for n, (acc, x, _z) in enumerate(macs):
        switch = n and (x != macs[n - 1][1] or acc != macs[n - 1][0])
        out.append(0 if not n else out[-1] + 1 + (bubble if switch else 0))
    return tuple(out)


def _schedule(body: _Body, insts: list[tuple[int, tuple[int, ...]]], ii: int, core: Core, acc_u: int,
              bubble: int = 0):
    """Place the ops on the modulo reservation table at this II; the iteration's times and values."""
    mac_t = list(_mac_times(body, bubble))
    if mac_t and mac_t[-1] >= ii:
        raise ValueError(f"II {ii} is below the {mac_t[-1] + 1} cycles of the MAC sequence")
    prev: dict[int, int] = {}
    for (acc, _x, _z), t in zip(body.macs, mac_t, strict=True):
        assert t > prev.get(acc, -1)        # the chain order is program order
        prev[acc] = t
    # Python lists, not arrays: the reservation tables are probed one cell at a time (the tuner's hot loop).
    store_row = [0] * ii
    store_t = []
    for _acc, last in body.stores:
        t = mac_t[last] + MAC_PIPELINE_CYCLES
        while store_row[t % ii] >= STORE_PORTS:
            t += 1
        store_row[t % ii] += 1
        store_t.append(t)
    load_row = [0] * ii
    load_times: list[tuple[str, int]] = []
    values: list[Value] = []
    seen: dict[int, int] = {}
    # Latest deadline first, so the loads of late uses take the late slots and earlier ones move up.
    # (a use list is sorted and MAC times increase in program order: its first use is its earliest)
    order = sorted(range(len(insts)), key=lambda n: -mac_t[insts[n][1][0]])
    for n in order:
        r, uses = insts[n]
        k = seen.get(r, 0)
        seen[r] = k + 1
        name = f"r{r}" + "'" * k
        t = mac_t[uses[0]] - LOAD_TO_USE_CYCLES
        arrivals = []
        for _p in range(_parts(body.reg_bits[r], core)):
            while load_row[t % ii] >= LOAD_PORTS:
                t -= 1
            load_row[t % ii] += 1
            load_times.append((name, t))
            arrivals.append(t + LOAD_TO_USE_CYCLES)
        values.append(Value("vec", name, _load_units(body.reg_bits[r]), min(arrivals), mac_t[uses[-1]],
                            tuple(arrivals), r, uses))
    first_mac: dict[int, int] = {}
    for (acc, _x, _z), t in zip(body.macs, mac_t, strict=True):
        first_mac.setdefault(acc, t)
    for (acc, _last), t in zip(body.stores, store_t, strict=True):
        values.append(Value("acc", f"acc{acc}", acc_u, first_mac[acc], t, reg=acc))
    starts = [t for _n, t in load_times] + mac_t
    ends = [t + STORE_CYCLES for t in store_t] + [t + MAC_PIPELINE_CYCLES for t in mac_t]
    length = max(ends) - min(starts) + 1 if starts else 1
    last_issue = max(starts + store_t) if starts else 0
    span = last_issue - min(starts) + 1 if starts else 1
    drain = max([0] + [t + STORE_CYCLES - last_issue - 1 for t in store_t])
    return tuple(mac_t), tuple(load_times), tuple(store_t), (length, span, drain), values


def _allocate(values: list[Value], ii: int, vec_regs: int, acc_regs: int, pinned_units: int):
    """Circular-arc allocation with modulo variable expansion; None when some value does not fit. Two greedy
    orders are tried: by start cycle (linear scan), widest and longest first, widest first then by start."""
    if pinned_units > vec_regs:
        return None
    u = max([math.ceil((v.end - v.start + 1) / ii) for v in values] + [1])
    by_start = sorted(range(len(values)), key=lambda n: (values[n].start, -values[n].units, n))
    by_width = sorted(range(len(values)), key=lambda n: (-values[n].units, -(values[n].end - values[n].start),
                                                         values[n].start, n))
    wide_then_start = sorted(range(len(values)), key=lambda n: (-values[n].units, values[n].start, n))
    for order in (by_start, by_width, wide_then_start):
        got = _allocate_in_order(values, order, ii, u, vec_regs, acc_regs, pinned_units)
        if got is not None:
            return u, got
    return None


def _allocate_in_order(values: list[Value], order: list[int], ii: int, u: int, vec_regs: int, acc_regs: int,
                       pinned_units: int) -> tuple[tuple[int, ...], ...] | None:
    span = u * ii
    occ = {"vec": np.zeros((span, vec_regs), dtype=bool), "acc": np.zeros((span, acc_regs), dtype=bool)}
    # Loop-invariant (hoisted) values hold the top of the vector file for the whole loop.
    if pinned_units:
        occ["vec"][:, vec_regs - pinned_units:] = True
    assignment: list[tuple[int, ...]] = [()] * len(values)
    for n in order:
        v = values[n]
        grid = occ[v.kind]
        width = grid.shape[1]
        got = []
        pieces = _pieces(v)
        block = min(width, 8)
        for copy in range(u):
            cells = [((np.arange(a, v.end + 1) + copy * ii) % span, lo, hi) for a, lo, hi in pieces]
            # Per piece, the registers taken at any of its cycles; per register, its busy cycles in the first piece.
            taken = [(np.asarray(grid[cyc].any(axis=0)).tolist(), lo, hi) for cyc, lo, hi in cells]
            busy_cycles = np.asarray(grid[cells[0][0]].sum(axis=0)).tolist()
            best = None
            for g in range(0, width - v.units + 1, v.units):
                if any(any(t[g + lo:g + hi]) for t, lo, hi in taken):
                    continue
                # Pack narrow values beside busy registers: keep the widest aligned groups free for wide ones.
                b0 = g // block * block
                busy = sum(busy_cycles[b0:b0 + block])
                if best is None or busy > best[0]:
                    best = (busy, g)
            if best is None:
                return None
            g = best[1]
            for cyc, lo, hi in cells:
                grid[cyc, g + lo:g + hi] = True
            got.append(g)
        assignment[n] = tuple(got)
    return tuple(assignment)


def _pieces(v: Value) -> list[tuple[int, int, int]]:
    """(first cycle, first and past-last register within the group) of each part of a value: a grouped vector
    register fills one 256-bit load part at a time, and each part's registers are taken from its arrival."""
    if v.kind != "vec" or len(v.arrivals) <= 1:
        return [(v.start, 0, v.units)]
    per = v.units // len(v.arrivals)
    return [(a, k * per, (k + 1) * per) for k, a in enumerate(v.arrivals)]


def _max_live(values: list[Value], ii: int, kind: str) -> int:
    """Registers the kernel needs at its busiest modulo cycle (a lower bound on any allocation)."""
    pieces = [(a0, hi - lo, v.end - a0 + 1) for v in values if v.kind == kind for a0, lo, hi in _pieces(v)]
    return _circular_max(pieces, ii)


def _circular_max(pieces: list[tuple[int, int, int]], ii: int) -> int:
    """The most units live in one cycle of the modulo table, for pieces (first cycle, units, cycles live)."""
    if not pieces:
        return 0
    a0, units, n = (np.array(c, dtype=np.int64) for c in zip(*pieces, strict=True))
    # Every piece covers n // ii whole turns of the modulo table, then n % ii cycles from a0 mod ii (a circular
    # range): summed with a difference array over two turns, folded back onto one.
    diff = np.zeros(2 * ii + 1, dtype=np.int64)
    a = a0 % ii
    np.add.at(diff, a, units)
    np.add.at(diff, a + n % ii, -units)
    twice = np.cumsum(diff)[:2 * ii]
    count = twice[:ii] + twice[ii:] + int(((n // ii) * units).sum())
    return int(count.max())


def _least_vec_live(body: _Body, insts: list[tuple[int, tuple[int, ...]]], mac_t: tuple[int, ...], ii: int) -> int:
    """A lower bound on the vector registers any placement of the loads needs at this II: every load instance
    holds its registers at least from its first use to its last (its data arrives no later than the first use)."""
    return _circular_max([(mac_t[u[0]], _load_units(body.reg_bits[r]), mac_t[u[-1]] - mac_t[u[0]] + 1)
                          for r, u in insts], ii)


def _split_sequence(body: _Body, mac_t: tuple[int, ...]) -> list[dict[int, tuple[int, ...]]]:
    """Ever finer splits of the load instances: for each gap length between consecutive uses of a register, from
    the longest down to 2 cycles, every register is cut at every gap at least that long (rematerialization of the
    values that are idle longest first)."""
    gaps: dict[int, list[tuple[int, int]]] = {}
    for r, u in body.uses.items():
        for i in range(len(u) - 1):
            gaps.setdefault(mac_t[u[i + 1]] - mac_t[u[i]], []).append((r, i + 1))
    out = []
    cuts: dict[int, list[int]] = {}
    for g in sorted((g for g in gaps if g >= 2), reverse=True):
        for r, at in gaps[g]:
            cuts.setdefault(r, []).append(at)
        out.append({r: tuple(sorted(c)) for r, c in cuts.items()})
    return out


def modulo_schedule(prog: VectorProgram, core: Core, hoisted: frozenset[int], max_bundles: int) -> ModuloSchedule:
    """The smallest-II schedule whose values fit the register files (see the module docstring). When its kernel,
    unrolled by modulo variable expansion, with prologue and epilogue exceeds ``max_bundles``, II is raised to the
    longest lifetime instead, so the kernel needs no unrolling."""
    return _modulo_schedule(prog.body, prog.registers, prog.shape, prog.out_bits, core, hoisted, max_bundles)


# Loop orders of one compiled body share it (only the pipelined loop's invariant registers differ): cache by body.
@lru_cache(maxsize=4096)
def _modulo_schedule(instrs: tuple, registers: tuple[Register, ...], shape: MacShape, out_bits: int, core: Core,
                     hoisted: frozenset[int], max_bundles: int) -> ModuloSchedule:
    body = _body(instrs, registers, hoisted)
    vec_regs = core.vrf_bits // REGISTER_BITS
    acc_regs = core.acc_bits // ACC_UNIT_BITS
    acc_u = acc_units(shape)
    pinned = sum(_load_units(r.bits) for r in registers if r.id in hoisted)
    out_slots = math.ceil(shape.lanes * out_bits / core.store_port_bits)
    n_store = len(body.stores) * out_slots

    inst_memo: dict[tuple, list[tuple[int, tuple[int, ...]]]] = {}

    def instances(cuts):
        key = tuple(sorted(cuts.items()))
        if key not in inst_memo:
            inst_memo[key] = _instances(body, cuts)
        return inst_memo[key]

    def res_mii(cuts, bubble=0):
        parts = sum(_parts(body.reg_bits[r], core) for r, _u in instances(cuts))
        macs = _mac_times(body, bubble)
        span = macs[-1] + 1 if macs else 0
        return max(1, span, math.ceil(parts / LOAD_PORTS), math.ceil(n_store / STORE_PORTS)), parts

    base_mii, _ = res_mii({})

    def attempt(cuts, ii, bubble):
        insts = instances(cuts)
        mac_t = _mac_times(body, bubble)
        # Most attempts fail for the vector registers: a bound from the MAC times alone rejects many without placing
        # the loads (the same attempts fail either way, so the search and its result do not change).
        if mac_t and mac_t[-1] < ii and _least_vec_live(body, insts, mac_t, ii) > vec_regs - pinned:
            return None
        mac_t, load_t, store_t, (length, span, drain), values = _schedule(body, insts, ii, core, acc_u, bubble)
        if _max_live(values, ii, "vec") > vec_regs - pinned or _max_live(values, ii, "acc") > acc_regs:
            return None
        got = _allocate(values, ii, vec_regs, acc_regs, pinned)
        if got is None:
            return None
        u, assignment = got
        return ModuloSchedule(ii, base_mii, 1, res_mii(cuts)[1], len(insts) - len(body.uses), mac_t, load_t,
                              store_t, length, span, drain, u, tuple(values), assignment, pinned, bubble)

    # MAC times do not depend on II, so neither does the split sequence. For each bubble (0, then 1, 2 and 4 idle
    # cycles at X-register and accumulator switches) and split level, bisect the smallest feasible II below the best
    # found so far
    # (feasibility is taken as monotone in II for the bisection; every returned schedule is an allocated one).
    best: ModuloSchedule | None = None
    best_level: tuple[dict[int, tuple[int, ...]], int] = ({}, 0)
    ii_cap = 0
    for bubble in MAC_BUBBLES:
        mac_t0 = _mac_times(body, bubble)
        first_ii = res_mii({}, bubble)[0]
        solo_len = _schedule(body, instances({}), first_ii, core, acc_u, bubble)[3][0]
        # With II past one whole iteration's length no two iterations overlap: raising II further cannot help.
        cap = max(first_ii, solo_len) + 1
        ii_cap = max(ii_cap, cap)
        for cuts in [{}, *_split_sequence(body, mac_t0)]:
            lo = res_mii(cuts, bubble)[0]
            hi = (best.ii - 1) if best else cap
            if lo > hi:
                break
            first = attempt(cuts, lo, bubble)
            if first is not None:
                best, best_level = first, (cuts, bubble)
                if best.ii == base_mii:      # the resource bound: nothing can be better
                    return _fit_code(best, best_level, attempt, max_bundles)
                continue
            top = attempt(cuts, hi, bubble) if hi > lo else None
            if top is None:
                continue
            lo += 1
            while lo < top.ii:
                mid = (lo + top.ii) // 2
                got = attempt(cuts, mid, bubble)
                if got is None:
                    lo = mid + 1
                else:
                    top = got
            best, best_level = top, (cuts, bubble)
    if best is None:
        raise RegisterAllocationError(f"the loop body does not fit {vec_regs} x {REGISTER_BITS}-bit vector and "
                                      f"{acc_regs} x {ACC_UNIT_BITS}-bit accumulator registers at any II up to "
                                      f"{ii_cap}" + (f" ({pinned} registers held by hoisted values)" if pinned else ""))
    return _fit_code(best, best_level, attempt, max_bundles)


def kernel_bundles(ms: ModuloSchedule) -> int:
    """The unrolled kernel plus prologue and epilogue, in VLIW bundles."""
    return ms.unroll * ms.ii + 2 * max(0, ms.length - ms.ii)


def _fit_code(best: ModuloSchedule, level, attempt, max_bundles: int) -> ModuloSchedule:
    if best.unroll == 1 or kernel_bundles(best) <= max_bundles:
        return best
    longest = max(v.end - v.start + 1 for v in best.values)
    got = attempt(level[0], max(best.ii, longest), level[1])
    return got if got is not None and kernel_bundles(got) < kernel_bundles(best) else best


def check_schedule(ms: ModuloSchedule, core: Core, trips: int) -> None:
    """Expand ``trips`` iterations of the schedule into absolute cycles and assert what a machine would need:
    slot capacities per cycle and no two live values on one physical register. (A test's brute-force check.)"""
    loads: dict[int, int] = {}
    macs: dict[int, int] = {}
    stores: dict[int, int] = {}
    for i in range(trips):
        for _n, t in ms.load_times:
            loads[t + i * ms.ii] = loads.get(t + i * ms.ii, 0) + 1
        for t in ms.mac_times:
            macs[t + i * ms.ii] = macs.get(t + i * ms.ii, 0) + 1
        for t in ms.store_times:
            stores[t + i * ms.ii] = stores.get(t + i * ms.ii, 0) + 1
    assert max(loads.values(), default=0) <= LOAD_PORTS
    assert max(macs.values(), default=0) <= 1
    assert max(stores.values(), default=0) <= STORE_PORTS
    owner: dict[tuple[str, int, int], tuple[int, int]] = {}
    vec_top = core.vrf_bits // REGISTER_BITS - ms.pinned_vec_units
    for i in range(trips):
        for n, v in enumerate(ms.values):
            g = ms.assignment[n][i % ms.unroll]
            assert v.kind == "acc" or g + v.units <= vec_top
            for a, lo, hi in _pieces(v):
                for t in range(a + i * ms.ii, v.end + i * ms.ii + 1):
                    for p in range(g + lo, g + hi):
                        key = (v.kind, p, t)
                        assert key not in owner, (key, owner[key], (i, n))
                        owner[key] = (i, n)
