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
bandwidth of the destination). A port serves one transfer at a time. The
compute unit's streaming reads and writes set its step time (bits over the
bandwidth of the level it streams from, if longer than the MAC schedule) but
do not lock the port: they are spread over the whole step, and a transfer
interleaves with them. A port's total work (transfers plus streaming) still
bounds the run: the end is never earlier than the busiest port's total.
Because every queue is in order and every dependency points backward, event
times follow from one pass over the program.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

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
    arch = prog.arch
    levels = arch.levels
    port_free: dict[str, float] = defaultdict(float)
    port_busy: dict[str, float] = defaultdict(float)
    unit_free: dict[str, float] = defaultdict(float)
    busy: dict[str, float] = defaultdict(float)
    events: list[Event] = []
    n_instr = 0

    def issue(unit: str, ready: float, ports: list[tuple[str, float]], setup: float, label: str) -> float:
        nonlocal n_instr
        start = max(ready, unit_free[unit], *(port_free[p] for p, t in ports if t > 0)) if ports else \
            max(ready, unit_free[unit])
        dur = setup + max((t for _, t in ports), default=0.0)
        for p, t in ports:
            if t > 0:
                port_free[p] = start + t + setup
                port_busy[p] += t
        end = start + dur
        unit_free[unit] = end
        busy[unit] += dur
        n_instr += 1
        if len(events) < keep_events:
            events.append(Event(unit, start, end, label))
        return end

    # per stream: index of its current tile, end times of loads/stores per tile, last compute per tile
    streams = prog.transfers
    tile_idx = [-1] * len(streams)
    load_end = [np.zeros(len(s.step)) for s in streams]
    store_end = [np.zeros(len(s.step)) for s in streams]
    last_compute = [np.zeros(len(s.step)) for s in streams]
    by_step: dict[int, list[int]] = defaultdict(list)
    for k, s in enumerate(streams):
        for t in s.step:
            by_step[int(t)].append(k)
    order_store = sorted(range(len(streams)), key=lambda k: -streams[k].level)
    order_load = sorted(range(len(streams)), key=lambda k: streams[k].level)
    parent_stream = {}
    for k, s in enumerate(streams):
        for k2, s2 in enumerate(streams):
            if s2.level == s.parent and s2.operand == s.operand:
                parent_stream[k] = k2

    def store(k: int, j: int, after: float) -> float:
        s = streams[k]
        c, p = levels[s.level], levels[s.parent]
        ports = [(f"{c.name}.read", _port_time(s.store_bits[j], c.read_bw_bits)),
                 (f"{p.name}.write", _port_time(s.store_parent_bits[j], p.write_bw_bits))]
        setup = c.transfer_setup_cycles if s.store_bits[j] > 0 else 0
        end = issue(f"store {c.name}", max(after, last_compute[k][j]), ports, setup,
                    f"store {s.operand} tile {j}")
        store_end[k][j] = end
        return end

    compute_end = 0.0
    stream_ports = []
    for lvl, (rd, wr) in prog.stream_bits.items():
        lv = levels[lvl]
        stream_ports.append((f"{lv.name}.read", _port_time(rd, lv.read_bw_bits)))
        stream_ports.append((f"{lv.name}.write", _port_time(wr, lv.write_bw_bits)))
    stream_time = max((t for _, t in stream_ports), default=0.0)
    compute_dur = max(float(prog.mac_cycles), stream_time) + prog.pipeline_cycles

    for s_idx in range(prog.n_steps):
        active = by_step.get(s_idx, ())
        # stores of the tiles that leave, deepest level first
        drained_at = 0.0
        for k in order_store:
            if k in active and streams[k].is_output and tile_idx[k] >= 0:
                drained_at = max(drained_at, store(k, tile_idx[k], drained_at))
        # loads of the new tiles, outermost level first
        need = 0.0
        for k in order_load:
            if k not in active:
                continue
            s = streams[k]
            j = tile_idx[k] = tile_idx[k] + 1
            lv, pv = levels[s.level], levels[s.parent]
            back = 2 if lv.double_buffered else 1
            ready = 0.0
            if j - back >= 0:
                ready = max(last_compute[k][j - back], store_end[k][j - back])
            if k in parent_stream:
                pk = parent_stream[k]
                ready = max(ready, load_end[pk][max(tile_idx[pk], 0)])
            if s.load_bits[j] > 0 or s.load_parent_bits[j] > 0:
                ports = [(f"{pv.name}.read", _port_time(s.load_parent_bits[j], pv.read_bw_bits)),
                         (f"{lv.name}.write", _port_time(s.load_bits[j], lv.write_bw_bits))]
                load_end[k][j] = issue(f"load {lv.name}", ready, ports, lv.transfer_setup_cycles,
                                       f"load {s.operand} tile {j}")
            else:
                load_end[k][j] = ready
            need = max(need, load_end[k][j])
        for k, s in enumerate(streams):
            if tile_idx[k] >= 0:
                need = max(need, load_end[k][tile_idx[k]])
                if s.is_output and k in active:
                    # the output half this tile accumulates into must have been drained
                    lv = levels[s.level]
                    back = 2 if lv.double_buffered else 1
                    if tile_idx[k] - back >= 0:
                        need = max(need, store_end[k][tile_idx[k] - back])
        if not compute_dur:
            continue
        compute_end = issue("compute", need, [], compute_dur, f"step {s_idx}")
        for k in range(len(streams)):
            if tile_idx[k] >= 0:
                last_compute[k][tile_idx[k]] = compute_end
    # the last tiles of every output level drain at the end, deepest first
    end = compute_end
    drained_at = 0.0
    for k in order_store:
        if streams[k].is_output and tile_idx[k] >= 0:
            drained_at = max(drained_at, store(k, tile_idx[k], drained_at))
            end = max(end, drained_at)
    for p, t in stream_ports:
        port_busy[p] += t * prog.n_steps
    end = max([end] + list(unit_free.values()) + list(port_busy.values()))
    return Timing(end, dict(busy), dict(port_busy), events, n_instr)
