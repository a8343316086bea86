"""One design point: the accelerator a point of the space gives, with its area and derived energies.

Energies follow the parameters (a design's energy table is computed, never written per point):

- the outermost unbounded level is off-chip DRAM (LPDDR4, per bit);
- a register written at the clock edge costs Aladdin's flip-flop per bit;
- every other level is SRAM: one array per instance and per partition, priced by CACTI for its
  capacity and word width. The cost model has one energy per level, so a partitioned level is
  charged at its largest partition (to price each class apart, split it into one level per class);
- a fan-out's transfer energy is a wire across the array: half the sum of its axes' sizes
  times the pitch of one instance (the square root of its area), per bit moved;
- the MAC is a multiplier of the widest operand and an adder of the output's width.

Area is the sum of every on-chip SRAM, register and MAC (DRAM and wires count zero).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from accelmap.arch.accelerator import Accelerator, Fanout, Level
from accelmap.dse import components
from accelmap.dse.space import DesignSpace
from accelmap.errors import AccelmapError
from accelmap.search.cache import accelerator_key


@dataclass(frozen=True)
class Design:
    point: tuple[tuple[str, Any], ...]
    accelerator: Accelerator | None      # None when the point is not a valid accelerator
    area_mm2: float = math.nan
    sram_bits: int = 0
    area_parts: tuple[tuple[str, float], ...] = ()   # (level or 'MAC', mm2)
    error: str | None = None             # why the point is not a design
    notes: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return ", ".join(f"{n}={v}" for n, v in self.point)

    @property
    def key(self) -> str:
        """What decides the design's results: its accelerator's content (not its name)."""
        if self.accelerator is None:
            return "invalid:" + self.label
        return accelerator_key(self.accelerator)


def _level_buffers(lv: Level) -> list[int]:
    if lv.partitions:
        return [b for _, b in lv.partitions]
    return [lv.capacity_bits] if lv.capacity_bits is not None else []


def derive(arch: Accelerator, derive_energy: bool = True) -> tuple[Accelerator, float, int,
                                                                    tuple[tuple[str, float], ...], tuple[str, ...]]:
    """(accelerator with derived energies, area mm2, on-chip bits, area per part, notes)."""
    notes: list[str] = []
    prec = dict(arch.compute.precision)
    op_bits = max(prec["I"][0], prec["W"][0])
    mac_pj, mac_um2 = components.mac(op_bits, prec["O"][0])
    # Walk innermost first: a fan-out's wire length needs the area of one instance below it.
    below_um2 = mac_um2 * arch.compute.macs_per_cycle      # area of one instance below the current level
    parts: dict[str, float] = {"MAC": mac_um2 * arch.compute.macs_per_cycle * arch.num_pes}
    new_levels: list[Level] = []
    sram_bits = 0
    reg_pj, reg_um2 = components.register_bit()
    for lv in reversed(arch.levels):
        fan = lv.fanout
        if fan is not None:
            pitch_mm = math.sqrt(below_um2) / 1000.0
            dist_mm = sum(a.size for a in fan.axes) / 2 * pitch_mm
            te = components.wire_pj_per_bit_mm() * dist_mm * lv.width_bits
            if derive_energy:
                fan = Fanout(fan.axes, te)
            below_um2 *= fan.size
        bufs = _level_buffers(lv)
        rd, wr = lv.read_energy_pj, lv.write_energy_pj
        own_um2 = 0.0
        if not bufs:
            d = components.dram_pj_per_bit() * lv.width_bits
            rd, wr = (d, d) if derive_energy else (rd, wr)
        elif lv.written_at_clock_edge:
            own_um2 = reg_um2 * sum(bufs)
            if derive_energy:
                rd = wr = reg_pj * lv.width_bits
        else:
            prices = [components.sram(b, lv.width_bits) for b in bufs if b > 0]
            own_um2 = sum(p[2] for p in prices)
            for b in bufs:
                if b > 0 and not components.sram_in_table(b, lv.width_bits):
                    notes.append(f"{lv.name}: {b} bits x {lv.width_bits}-bit words is outside the CACTI table; "
                                 "extrapolated")
            if derive_energy and prices:
                rd, wr = max(p[0] for p in prices), max(p[1] for p in prices)
        sram_bits += sum(bufs) * lv.instances
        parts[lv.name] = own_um2 * lv.instances
        below_um2 += own_um2
        new_levels.append(replace(lv, read_energy_pj=rd, write_energy_pj=wr, fanout=fan))
    new_levels.reverse()
    comp = replace(arch.compute, mac_energy_pj=mac_pj) if derive_energy else arch.compute
    out = replace(arch, levels=tuple(new_levels), compute=comp)
    area = {k: v / 1e6 for k, v in parts.items()}
    return out, sum(area.values()), sram_bits, tuple(area.items()), tuple(notes)


def make_design(space: DesignSpace, point: tuple[tuple[str, Any], ...]) -> Design:
    """The design of one point; a point that is not a valid accelerator carries its error."""
    try:
        arch = space.accelerator(point)
    except AccelmapError as e:
        return Design(point, None, error=str(e))
    arch, area, bits, parts, notes = derive(arch, space.derive_energy)
    return Design(point, arch, area, bits, parts, None, notes)


def violation(space: DesignSpace, d: Design) -> str | None:
    """Why a design breaks the space's constraints (None: it meets them)."""
    if d.error is not None:
        return d.error
    if space.max_area_mm2 is not None and d.area_mm2 > space.max_area_mm2:
        return f"area {d.area_mm2:.4g} mm2 > max_area {space.max_area_mm2:.4g} mm2"
    if space.max_sram_bits is not None and d.sram_bits > space.max_sram_bits:
        return f"on-chip storage {d.sram_bits} bits > max_sram {space.max_sram_bits} bits"
    return None
