"""Timing of a tile program on decoupled load / compute / store units (VTA-style).

Every level below the top that receives tiles has a load unit (its DMA in)
and, if it keeps an output, a store unit (its DMA out); one compute unit runs
the steps. Each unit executes its queue in program order; an instruction
starts when its unit is free and its dependency tokens have arrived:

* load (c, k) waits for the buffer half it overwrites to be released: the
  computes and the store of tile k-2 of level c if c is double-buffered (or a register written at the clock edge,
  or a level refilled while a tile read once is read: ``latency.double_buffers``), tile k-1 otherwise; and for the parent's tile that contains it. A level's
  load queue holds its inputs before its returning partial sums, so a load
  that waits for a drain does not hold back the loads that need not wait;
* compute (s) waits for every level's current tile to be loaded and for the
  output buffer half to be drained;
* store (c, k) waits for the last compute of tile k, and for the stores of
  deeper levels issued at the same step (data drains upward).

A transfer takes ``transfer_setup_cycles`` of its level (DMA programming, no
memory traffic) and a load also ``read_row_cycles`` of its source per row of
its tile (``cost.dma_rows``: the request latency a 2-D DMA pays per row), then moves its data for the longest of its port times (bits
over the read bandwidth of the source and the write bandwidth of the
destination). The slower side's port paces the data: a port moves one burst at
a time, and the bursts of transfers from different DMA engines interleave in
time, each taking the port's free cycles from the moment it is ready (a
prefetch issued early fills the gaps between the transfers already placed, it
does not queue behind them). The faster side's accesses are spread over the
transfer. The compute unit's streaming reads and writes set its step time
(bits over the bandwidth of the level it streams from, if longer than the MAC
schedule) but do not lock the port: they are spread over the whole step, and
a transfer interleaves with them. A port's total work (transfers plus
streaming) still bounds the run: the end is never earlier than the busiest
port's total.

Because every queue is in order and every dependency points backward, event
times follow from one pass over the program. Runs of identical steps (same
transfers of the same volumes) settle into a steady state in which every step
is the previous one shifted by a constant period; once two consecutive steps
show the same shift of the whole live state, the rest of the run is advanced
by that period in one go (``_Skip``), with identical results.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field

import numpy as np

from accelmap.cost.dma_rows import load_setup_cycles
from accelmap.cost.latency import double_buffers
from accelmap.cost.nest_rows import NestRows
from accelmap.sim.program import TileProgram


@dataclass
class Event:
    unit: str
    start: float
    end: float
    label: str


@dataclass
class Timing:
    cycles: float
    busy: dict[str, float]                      # unit -> busy cycles
    port_busy: dict[str, float]                 # "LEVEL.read"/"LEVEL.write" ("LEVEL.port" if shared) -> busy cycles
    events: list[Event] = field(default_factory=list)   # the first ``keep_events`` instructions
    instructions: int = 0
    skipped_steps: int = 0                      # steps advanced in steady-state runs, not one by one

    def utilization(self) -> dict[str, float]:
        return {u: (b / self.cycles if self.cycles else 0.0) for u, b in self.busy.items()}


# at most this many busy intervals of a port after the oldest live time are compared and repeated
MAX_TAIL = 64


def _port_time(bits: float, bw: float | None) -> float:
    return 0.0 if bw is None or bits <= 0 else bits / bw


class _Port:
    """The busy intervals of one memory port, sorted and disjoint (adjacent ones merged)."""

    __slots__ = ("starts", "ends")

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []

    def occupy(self, t0: float, dur: float) -> float:
        """Move ``dur`` cycles of data from ``t0`` on, in the port's free time; returns the end."""
        starts, ends = self.starts, self.ends
        if not ends or t0 >= ends[-1]:
            if ends and t0 == ends[-1]:
                ends[-1] = t0 + dur
            else:
                starts.append(t0)
                ends.append(t0 + dur)
            return t0 + dur
        i = bisect_right(ends, t0)          # first interval that ends after t0
        pieces_s, pieces_e = [], []
        cur, left, k = t0, dur, i
        while left > 0:
            if k < len(starts) and starts[k] <= cur:
                cur = max(cur, ends[k])
                k += 1
                continue
            gap_end = starts[k] if k < len(starts) else float("inf")
            take = min(left, gap_end - cur)
            pieces_s.append(cur)
            pieces_e.append(cur + take)
            cur += take
            left -= take
        # merge the new pieces with the intervals they were placed between
        seg = sorted(zip(starts[i:k] + pieces_s, ends[i:k] + pieces_e, strict=True))
        ms, me = [seg[0][0]], [seg[0][1]]
        for s, e in seg[1:]:
            if s <= me[-1]:
                me[-1] = max(me[-1], e)
            else:
                ms.append(s)
                me.append(e)
        starts[i:k] = ms
        ends[i:k] = me
        return cur

    def count_after(self, t: float) -> int:
        return len(self.ends) - bisect_right(self.ends, t)

    def tail(self, t: float) -> list[float]:
        i = bisect_right(self.ends, t)
        return [x - t for pair in zip(self.starts[i:], self.ends[i:], strict=True) for x in pair]

    def repeat_tail(self, t: float, delta: float, r: int) -> None:
        """The intervals that end after ``t``, repeated r more times, each ``delta`` later (merged)."""
        i = bisect_right(self.ends, t)
        if i == len(self.ends) or r <= 0:
            return
        shifts = delta * np.arange(r + 1)
        st = (np.array(self.starts[i:])[None, :] + shifts[:, None]).ravel()
        en = (np.array(self.ends[i:])[None, :] + shifts[:, None]).ravel()
        order = np.argsort(st, kind="stable")
        st, en = st[order], en[order]
        reach = np.maximum.accumulate(en)
        new = np.r_[True, st[1:] > reach[:-1]]
        last = np.r_[np.flatnonzero(new)[1:] - 1, len(st) - 1]
        self.starts[i:] = st[new].tolist()
        self.ends[i:] = reach[last].tolist()


def _run_starts(prog: TileProgram) -> np.ndarray:
    """First step of every run of identical steps: steps that start tiles of the same streams
    with the same volumes as the step before them."""
    n = prog.n_steps
    new = np.zeros(n, dtype=bool)
    new[0] = True
    for s in prog.transfers:
        act = np.zeros(n, dtype=bool)
        act[s.step] = True
        vol = np.column_stack([s.load_bits, s.load_parent_bits, s.store_bits, s.store_parent_bits])
        moved = np.r_[True, np.any(vol[1:] != vol[:-1], axis=1)]      # tile j differs from tile j-1
        tile = np.cumsum(act) - 1
        new[1:] |= act[1:] != act[:-1]
        both = act[1:] & act[:-1]
        new[1:] |= both & moved[np.maximum(tile[1:], 0)]
    return np.flatnonzero(new)


def _checkpoint(offset: int) -> bool:
    """Offsets into a run where the state is compared with the step before: 2^k - 2 and 2^k - 1."""
    a, b = offset + 2, offset + 1
    return offset >= 2 and (a & (a - 1) == 0 or b & (b - 1) == 0)


def run_timing(prog: TileProgram, keep_events: int = 4000, skip: bool = True) -> Timing:
    """One pass over the program; ``skip`` advances steady-state runs of identical steps at once."""
    levels = prog.arch.levels
    streams = prog.transfers
    ns = len(streams)
    port_names: list[str] = []

    def port(name: str) -> int:
        if name not in port_names:
            port_names.append(name)
        return port_names.index(name)

    unit_names: list[str] = ["compute"]

    def unit(name: str) -> int:
        if name not in unit_names:
            unit_names.append(name)
        return unit_names.index(name)

    # static facts of every stream
    st_steps = [s.step.tolist() for s in streams]
    lb = [s.load_bits.tolist() for s in streams]
    lpb = [s.load_parent_bits.tolist() for s in streams]
    sb = [s.store_bits.tolist() for s in streams]
    spb = [s.store_parent_bits.tolist() for s in streams]
    c_lv = [levels[s.level] for s in streams]
    p_lv = [levels[s.parent] for s in streams]
    # a double buffer, or a register written at the clock edge, refills while its tile is read
    db = double_buffers(prog.op, prog.arch, prog.mapping)
    back = [2 if db[s.level] else 1 for s in streams]
    out = [s.is_output for s in streams]
    u_load = [unit(f"load {lv.name}") for lv in c_lv]
    u_store = [unit(f"store {lv.name}") if s.is_output else -1 for s, lv in zip(streams, c_lv, strict=True)]
    pr_load = [(port(p.port("read")), p.read_bw_bits, port(c.port("write")), c.write_bw_bits)
               for c, p in zip(c_lv, p_lv, strict=True)]
    pr_store = [(port(c.port("read")), c.read_bw_bits, port(p.port("write")), p.write_bw_bits)
                for c, p in zip(c_lv, p_lv, strict=True)]
    setup = [float(lv.transfer_setup_cycles) for lv in c_lv]
    # a load also pays its source's latency per row it reads: the model's definition, on the mapping's tiles
    nest = NestRows.of_mapping(prog.op, prog.arch, prog.mapping) if any(lv.read_row_cycles for lv in p_lv) else None
    setup_load = [float(load_setup_cycles(nest, prog.op.operand(s.operand), s.level, s.parent)[0]) if nest else su
                  for s, su in zip(streams, setup, strict=True)]
    parent = [next((k2 for k2, s2 in enumerate(streams) if s2.level == s.parent and s2.operand == s.operand), -1)
              for s in streams]
    order_store = sorted(range(ns), key=lambda k: -streams[k].level)
    order_load = sorted(range(ns), key=lambda k: (streams[k].level, streams[k].is_output))

    ports = [_Port() for _ in port_names]
    port_busy = [0.0] * len(port_names)
    unit_free = [0.0] * len(unit_names)
    busy = [0.0] * len(unit_names)
    events: list[Event] = []
    n_instr = 0

    def transfer(u: int, ready: float, pa: int, ta: float, pb: int, tb: float, su: float, label: str) -> float:
        nonlocal n_instr
        # the slower side paces the data and occupies its port; the faster side's accesses are
        # spread over the transfer and interleave with others (they count toward its port's total)
        t, hold = (ta, pa) if ta >= tb else (tb, pb)
        start = max(ready, unit_free[u])
        end = ports[hold].occupy(start + su, t) if t > 0 else start + su
        port_busy[pa] += ta
        port_busy[pb] += tb
        unit_free[u] = end
        busy[u] += su + t
        n_instr += 1
        if len(events) < keep_events:
            events.append(Event(unit_names[u], start, end, label))
        return end

    tile_idx = [-1] * ns
    nxt = [steps[0] if steps else -1 for steps in st_steps]
    load_end = [[0.0] * len(x) for x in st_steps]
    store_end = [[0.0] * len(x) for x in st_steps]
    last_compute = [[0.0] * len(x) for x in st_steps]
    cur_load = [0.0] * ns          # load end of every stream's current tile

    def store(k: int, j: int, after: float) -> float:
        """Drain tile ``j``: as much as entered it. Consecutive output tiles do not overlap (an
        output index is a plain dim), so that is the whole tile, an edge tile's included."""
        pa, bwa, pb, bwb = pr_store[k]
        ta, tb = _port_time(sb[k][j], bwa), _port_time(spb[k][j], bwb)
        # a streamed drain's pieces are one DMA: its setup goes with the last piece
        su = setup[k] if sb[k][j] > 0 and (not streams[k].streamed or j == len(sb[k]) - 1) else 0.0
        end = transfer(u_store[k], max(after, last_compute[k][j]), pa, ta, pb, tb, su,
                       f"store {streams[k].operand} tile {j}")
        store_end[k][j] = end
        return end

    stream_ports = []
    for lvl, (rd, wr) in prog.stream_bits.items():
        lv = levels[lvl]
        stream_ports.append((lv.port("read"), _port_time(rd, lv.read_bw_bits)))
        stream_ports.append((lv.port("write"), _port_time(wr, lv.write_bw_bits)))
    per_port: dict[str, float] = {}
    for p_name, t in stream_ports:
        per_port[p_name] = per_port.get(p_name, 0.0) + t     # a shared port carries both sides
    stream_time = max(per_port.values(), default=0.0)
    compute_dur = max(float(prog.mac_cycles), stream_time) + prog.pipeline_cycles

    try_skip = skip and compute_dur > 0
    if try_skip:
        starts = _run_starts(prog)
        run_end = np.repeat(np.r_[starts[1:], prog.n_steps] - 1, np.diff(np.r_[starts, prog.n_steps])).tolist()
        run_start = np.repeat(starts, np.diff(np.r_[starts, prog.n_steps])).tolist()

    def snapshot(A: list[int]):
        """The live state a step of the current run reads, and the totals it adds to."""
        live = [unit_free[0]]
        for k in A:
            j = tile_idx[k]
            live += [cur_load[k], last_compute[k][j], last_compute[k][j - 1]]
            if back[k] == 2:
                # a prefetch placed at this step started after this: its port time is in the tails
                live.append(last_compute[k][j - 2])
            if lb[k][j] > 0 or lpb[k][j] > 0:
                live.append(unit_free[u_load[k]])
            if out[k]:
                live += [unit_free[u_store[k]], store_end[k][j - 1]]
        wm = min(live)
        if any(cur_load[k] > wm for k in range(ns) if k not in A):
            return None          # a load outside the run could still hold a step back
        ref = unit_free[0]
        held = sorted({h for k in A for h in held_ports[k]})
        if any(ports[h].count_after(wm) > MAX_TAIL for h in held):
            return None          # not a short periodic pattern: not worth comparing or repeating
        tails = [ports[h].tail(wm) for h in held]
        return ref, wm, held, [x - ref for x in live], tails, busy[:], port_busy[:], n_instr

    def same(a: list[float], b: list[float], scale: float) -> bool:
        tol = 1e-9 * max(1.0, abs(scale))
        return len(a) == len(b) and all(abs(x - y) <= tol for x, y in zip(a, b, strict=True))

    # ports each stream's transfers may occupy
    held_ports = [{pr_load[k][0], pr_load[k][2]} | ({pr_store[k][0], pr_store[k][2]} if out[k] else set())
                  for k in range(ns)]

    prev = None
    skipped = 0
    compute_end = 0.0
    s_idx = 0
    while s_idx < prog.n_steps:
        act = [nxt[k] == s_idx for k in range(ns)]
        if any(act):
            drained_at = 0.0
            for k in order_store:
                if act[k] and out[k] and tile_idx[k] >= 0:
                    drained_at = max(drained_at, store(k, tile_idx[k], drained_at))
            for k in order_load:
                if not act[k]:
                    continue
                j = tile_idx[k] = tile_idx[k] + 1
                nxt[k] = st_steps[k][j + 1] if j + 1 < len(st_steps[k]) else -1
                ready = 0.0
                if j - back[k] >= 0 and not streams[k].streamed:
                    ready = max(last_compute[k][j - back[k]], store_end[k][j - back[k]])
                if parent[k] >= 0:
                    ready = max(ready, cur_load[parent[k]])
                if lb[k][j] > 0 or lpb[k][j] > 0:
                    pa, bwa, pb, bwb = pr_load[k]
                    su = 0.0 if streams[k].streamed and j else setup_load[k]
                    end = transfer(u_load[k], ready, pa, _port_time(lpb[k][j], bwa), pb, _port_time(lb[k][j], bwb),
                                   su, f"load {streams[k].operand} tile {j}")
                else:
                    end = ready
                load_end[k][j] = cur_load[k] = end
        need = max(cur_load, default=0.0)
        for k in range(ns):
            if act[k] and out[k] and tile_idx[k] - back[k] >= 0 and not streams[k].streamed:
                # the output half this tile accumulates into must have been drained
                need = max(need, store_end[k][tile_idx[k] - back[k]])
        if not compute_dur:
            s_idx += 1
            continue
        start = max(need, unit_free[0])
        compute_end = unit_free[0] = start + compute_dur
        busy[0] += compute_dur
        n_instr += 1
        if len(events) < keep_events:
            events.append(Event("compute", start, compute_end, f"step {s_idx}"))
        for k in range(ns):
            if tile_idx[k] >= 0:
                last_compute[k][tile_idx[k]] = compute_end
        # Steady state: once two consecutive steps of a run of identical steps shifted the whole
        # live state by the same period, every later step of the run does the same.
        # checked at offsets 2-3, 6-7, 14-15, ... into a run: a run that does not settle costs little
        if try_skip and len(events) >= keep_events and run_end[s_idx] > s_idx \
                and _checkpoint(s_idx - run_start[s_idx]):
            A = [k for k in range(ns) if act[k]]
            cur = snapshot(A)
            if cur is not None and prev is not None and prev[0] == s_idx - 1:
                ref, wm, held, rel, tails, b1, pb1, ni1 = cur
                _, _, held0, rel0, tails0, b0, pb0, ni0 = prev[1]
                delta = ref - prev[1][0]
                if delta > 0 and held == held0 and same(rel, rel0, ref) and \
                        all(same(x, y, ref) for x, y in zip(tails, tails0, strict=True)):
                    r = run_end[s_idx] - s_idx
                    shift = r * delta
                    for h in held:
                        ports[h].repeat_tail(wm, delta, r)
                    for u in {0} | {u_load[k] for k in A if lb[k][tile_idx[k]] > 0 or lpb[k][tile_idx[k]] > 0} \
                            | {u_store[k] for k in A if out[k]}:
                        unit_free[u] += shift
                    busy[:] = [x + r * (x - y) for x, y in zip(b1, b0, strict=True)]
                    port_busy[:] = [x + r * (x - y) for x, y in zip(pb1, pb0, strict=True)]
                    n_instr += r * (ni1 - ni0)
                    compute_end = unit_free[0]
                    for k in A:
                        j, jn = tile_idx[k], tile_idx[k] + r
                        last_compute[k][jn - 1] = last_compute[k][j - 1] + shift
                        store_end[k][jn - 1] = store_end[k][j - 1] + shift
                        load_end[k][jn] = cur_load[k] = cur_load[k] + shift
                        tile_idx[k] = jn
                        nxt[k] = st_steps[k][jn + 1] if jn + 1 < len(st_steps[k]) else -1
                    for k in range(ns):
                        if tile_idx[k] >= 0:
                            last_compute[k][tile_idx[k]] = compute_end
                    skipped += r
                    s_idx += r
                    prev = None
                    s_idx += 1
                    continue
            prev = (s_idx, cur) if cur is not None else None
        s_idx += 1
    # the last tiles of every output level drain at the end, deepest first
    end = compute_end
    drained_at = 0.0
    for k in order_store:
        if out[k] and tile_idx[k] >= 0:
            drained_at = max(drained_at, store(k, tile_idx[k], drained_at))
            end = max(end, drained_at)
    pb_all = dict(zip(port_names, port_busy, strict=True))
    for p, t in stream_ports:
        pb_all[p] = pb_all.get(p, 0.0) + t * prog.n_steps
    end = max([end] + unit_free + list(pb_all.values()))
    return Timing(end, dict(zip(unit_names, busy, strict=True)), pb_all, events, n_instr, skipped)
