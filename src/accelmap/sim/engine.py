"""Timing of a tile program on decoupled load / compute / store units (VTA-style).

Every level below the top that receives tiles has a load unit (its DMA in)
and, if it keeps an output, a store unit (its DMA out); one compute unit runs
the steps. Each unit executes its queue in program order; an instruction
starts when its unit is free, its dependency tokens have arrived, and the
memory ports it uses are free:

* load (c, k) waits for the buffer half it overwrites to be released: the
  computes and the store of tile k-2 of level c if c is double-buffered,
  tile k-1 otherwise; and for the parent's tile that contains it;
* compute (s) waits for every level's current tile to be loaded and for the
  output buffer half to be drained;
* store (c, k) waits for the last compute of tile k, and for the stores of
  deeper levels issued at the same step (data drains upward).

A transfer takes ``transfer_setup_cycles`` of its level plus the longest of
its port times (bits over the read bandwidth of the source and the write
bandwidth of the destination). The slower side's port serves one transfer at
a time; the faster side's accesses are spread over the transfer. The
compute unit's streaming reads and writes set its step time (bits over the
bandwidth of the level it streams from, if longer than the MAC schedule) but
do not lock the port: they are spread over the whole step, and a transfer
interleaves with them. A port's total work (transfers plus streaming) still
bounds the run: the end is never earlier than the busiest port's total.
Because every queue is in order and every dependency points backward, event
times follow from one pass over the program.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
    port_busy: dict[str, float]                 # "LEVEL.read"/"LEVEL.write" -> busy cycles
    events: list[Event] = field(default_factory=list)   # the first ``keep_events`` instructions
    instructions: int = 0

    def utilization(self) -> dict[str, float]:
        return {u: (b / self.cycles if self.cycles else 0.0) for u, b in self.busy.items()}


def _port_time(bits: float, bw: float | None) -> float:
    return 0.0 if bw is None or bits <= 0 else bits / bw


def run_timing(prog: TileProgram, keep_events: int = 4000) -> Timing:
    """One pass over the program; plain lists and floats keep a step to a few microseconds."""
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
    back = [2 if levels[s.level].double_buffered else 1 for s in streams]
    out = [s.is_output for s in streams]
    u_load = [unit(f"load {lv.name}") for lv in c_lv]
    u_store = [unit(f"store {lv.name}") if s.is_output else -1 for s, lv in zip(streams, c_lv)]
    pr_load = [(port(f"{p.name}.read"), p.read_bw_bits, port(f"{c.name}.write"), c.write_bw_bits)
               for c, p in zip(c_lv, p_lv)]
    pr_store = [(port(f"{c.name}.read"), c.read_bw_bits, port(f"{p.name}.write"), p.write_bw_bits)
                for c, p in zip(c_lv, p_lv)]
    setup = [float(lv.transfer_setup_cycles) for lv in c_lv]
    parent = [next((k2 for k2, s2 in enumerate(streams) if s2.level == s.parent and s2.operand == s.operand), -1)
              for s in streams]
    order_store = sorted(range(ns), key=lambda k: -streams[k].level)
    order_load = sorted(range(ns), key=lambda k: streams[k].level)

    port_free = [0.0] * len(port_names)
    port_busy = [0.0] * len(port_names)
    unit_free = [0.0] * len(unit_names)
    busy = [0.0] * len(unit_names)
    events: list[Event] = []
    n_instr = 0

    def transfer(u: int, ready: float, pa: int, ta: float, pb: int, tb: float, su: float, label: str) -> float:
        nonlocal n_instr
        # the slower side paces the transfer and holds its port; the faster side's accesses are
        # spread over the transfer and interleave with others (they count toward its port's total)
        if ta >= tb:
            t, hold = ta, pa
        else:
            t, hold = tb, pb
        start = max(ready, unit_free[u], port_free[hold] if t > 0 else 0.0)
        end = start + su + t
        if t > 0:
            port_free[hold] = end
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

    def store(k: int, j: int, after: float, v: int) -> float:
        """Drain what leaves tile ``j``: as much as enters at transition ``v`` (the next tile's
        delta), or the whole tile at the end (the first tile's delta is a whole tile)."""
        pa, bwa, pb, bwb = pr_store[k]
        ta, tb = _port_time(sb[k][v], bwa), _port_time(spb[k][v], bwb)
        su = setup[k] if sb[k][v] > 0 else 0.0
        end = transfer(u_store[k], max(after, last_compute[k][j]), pa, ta, pb, tb, su,
                       f"store {streams[k].operand} tile {j}")
        store_end[k][j] = end
        return end

    stream_ports = []
    for lvl, (rd, wr) in prog.stream_bits.items():
        lv = levels[lvl]
        stream_ports.append((f"{lv.name}.read", _port_time(rd, lv.read_bw_bits)))
        stream_ports.append((f"{lv.name}.write", _port_time(wr, lv.write_bw_bits)))
    stream_time = max((t for _, t in stream_ports), default=0.0)
    compute_dur = max(float(prog.mac_cycles), stream_time) + prog.pipeline_cycles

    compute_end = 0.0
    for s_idx in range(prog.n_steps):
        act = [nxt[k] == s_idx for k in range(ns)]
        if any(act):
            drained_at = 0.0
            for k in order_store:
                if act[k] and out[k] and tile_idx[k] >= 0:
                    drained_at = max(drained_at, store(k, tile_idx[k], drained_at, tile_idx[k] + 1))
            for k in order_load:
                if not act[k]:
                    continue
                j = tile_idx[k] = tile_idx[k] + 1
                nxt[k] = st_steps[k][j + 1] if j + 1 < len(st_steps[k]) else -1
                ready = 0.0
                if j - back[k] >= 0:
                    ready = max(last_compute[k][j - back[k]], store_end[k][j - back[k]])
                if parent[k] >= 0:
                    ready = max(ready, cur_load[parent[k]])
                if lb[k][j] > 0 or lpb[k][j] > 0:
                    pa, bwa, pb, bwb = pr_load[k]
                    end = transfer(u_load[k], ready, pa, _port_time(lpb[k][j], bwa), pb, _port_time(lb[k][j], bwb),
                                   setup[k], f"load {streams[k].operand} tile {j}")
                else:
                    end = ready
                load_end[k][j] = cur_load[k] = end
        need = max(cur_load, default=0.0)
        for k in range(ns):
            if act[k] and out[k] and tile_idx[k] - back[k] >= 0:
                # the output half this tile accumulates into must have been drained
                need = max(need, store_end[k][tile_idx[k] - back[k]])
        if not compute_dur:
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
    # the last tiles of every output level drain at the end, deepest first
    end = compute_end
    drained_at = 0.0
    for k in order_store:
        if out[k] and tile_idx[k] >= 0:
            drained_at = max(drained_at, store(k, tile_idx[k], drained_at, 0))
            end = max(end, drained_at)
    pb_all = dict(zip(port_names, port_busy))
    for p, t in stream_ports:
        pb_all[p] = pb_all.get(p, 0.0) + t * prog.n_steps
    end = max([end] + unit_free + list(pb_all.values()))
    return Timing(end, dict(zip(unit_names, busy)), pb_all, events, n_instr)
