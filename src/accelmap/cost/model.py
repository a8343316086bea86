"""Energy, latency, utilization and EDP of a mapping, from exact access counts.

Counters per (level, operand), in elements:
  fills    written into the level from its parent (input data, or partial sums coming back down)
  reads    read from the level for its child or the compute unit (data, or partial sums sent down)
  updates  output values written into the level by its child or the compute unit
  drains   output values read from the level to send to its parent

Energy: reads+drains at the level's read energy, fills+updates at its write
energy, each scaled by operand bits / word width, every access (the compute side's
and each tile transfer) rounded up to the level's access granularity (``level_energy``);
MACs at the MAC energy; and every element crossing a fan-out pays that fan-out's
transfer energy.

Latency: see ``latency.py``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from itertools import pairwise

from accelmap.arch.accelerator import Accelerator
from accelmap.cost.access_counts import NestInfo, compute_groups, entering, entering_perfect
from accelmap.cost.latency import latency_terms
from accelmap.cost.level_energy import fanout_element_energy, level_energy, stream_accesses
from accelmap.cost.nest_rows import NestRows, final_outputs
from accelmap.errors import SpecError
from accelmap.mapping.loopnest import Mapping
from accelmap.mapping.validate import validate
from accelmap.workload.operator import Operand, Operator

COUNTERS = ("fills", "reads", "updates", "drains")

# The batch model counts in 64-bit integers (numpy), bits of data included. These limits keep every
# count far from 2^63, so none overflows (a 10^12-cubed GEMM was an OverflowError under ``map``).
MAX_COUNT = 10**15
MAX_BITS = 256


_COUNTABLE: dict[int, Operator] = {}   # operators already checked, by identity (the entry keeps it alive)


def check_countable(op: Operator) -> None:
    """Refuse, with one line, an operator whose counts would not fit the cost model's integers."""
    if _COUNTABLE.get(id(op)) is op:      # searches evaluate one operator thousands of times
        return
    if op.macs > MAX_COUNT:
        raise SpecError(f"operator {op.name!r}: {op.macs:.3g} MACs is too large; the cost model handles at "
                        f"most {MAX_COUNT:.0e} MACs per operator")
    for o in op.operands:
        if o.bits > MAX_BITS:
            raise SpecError(f"operator {op.name!r}: operand {o.name} has {o.bits} bits; the cost model "
                            f"handles at most {MAX_BITS}")
        n = math.prod(op.index_extent(o))
        if n > MAX_COUNT:
            raise SpecError(f"operator {op.name!r}: operand {o.name} spans {n:.3g} elements, too large; the "
                            f"cost model handles at most {MAX_COUNT:.0e} elements per operand")
    if len(_COUNTABLE) > 256:
        _COUNTABLE.clear()
    _COUNTABLE[id(op)] = op


@dataclass
class Counts:
    fills: int = 0
    reads: int = 0
    updates: int = 0
    drains: int = 0

    def as_tuple(self) -> tuple[int, int, int, int]:
        return (self.fills, self.reads, self.updates, self.drains)


@dataclass(frozen=True)
class CostResult:
    operator: str
    accelerator: str
    macs: int
    mac_slots: int                                   # product of every loop bound
    counts: dict[tuple[str, str], tuple[int, int, int, int]]   # (level, operand) -> COUNTERS
    energy: dict[tuple[str, str], float]             # (level or 'MAC' or 'NoC:level', operand) -> pJ
    energy_total: float
    compute_cycles: int
    transfer_cycles: dict[str, float]
    stall_cycles: float
    latency: float
    utilization: float                               # MACs / (latency * peak MACs per cycle)
    spatial_utilization: float                       # spatial instances used / available
    levels: tuple[str, ...] = field(default=())
    latency_parts: tuple[tuple[str, float], ...] = ()  # what the latency is made of; sums to it

    @property
    def edp(self) -> float:
        return self.energy_total * self.latency

    def objective(self, name: str) -> float:
        return {"energy": self.energy_total, "latency": self.latency, "edp": self.edp}[name]

    def energy_by_level(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for (lv, _), e in self.energy.items():
            out[lv] = out.get(lv, 0.0) + e
        return out

    def to_dict(self) -> dict:
        return {
            "operator": self.operator, "accelerator": self.accelerator,
            "macs": self.macs, "mac_slots": self.mac_slots,
            "counts": [{"level": lv, "operand": o, **dict(zip(COUNTERS, c, strict=True))}
                       for (lv, o), c in self.counts.items()],
            "energy_pj": [{"component": lv, "operand": o, "pj": e} for (lv, o), e in self.energy.items()],
            "energy_total_pj": self.energy_total,
            "compute_cycles": self.compute_cycles,
            "transfer_cycles": self.transfer_cycles,
            "stall_cycles": self.stall_cycles,
            "latency_cycles": self.latency,
            "latency_parts": dict(self.latency_parts),
            "edp_pj_cycles": self.edp,
            "utilization": self.utilization,
            "spatial_utilization": self.spatial_utilization,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def table(self) -> str:
        lines = [f"{'level':<8} {'operand':<8} {'fills':>12} {'reads':>12} {'updates':>12} {'drains':>12} "
                 f"{'energy pJ':>14}"]
        for (lv, o), c in self.counts.items():
            lines.append(f"{lv:<8} {o:<8} " + " ".join(f"{v:>12,}" for v in c) + f" {self.energy[(lv, o)]:>14,.1f}")
        for (lv, o), e in self.energy.items():
            if (lv, o) not in self.counts:
                lines.append(f"{lv:<8} {o:<8} {'':>12} {'':>12} {'':>12} {'':>12} {e:>14,.1f}")
        lines.append("")
        lines.append(f"MACs {self.macs:,} (slots {self.mac_slots:,}, {self.mac_slots - self.macs:,} wasted by "
                     f"partial tiles); energy {self.energy_total:,.1f} pJ ({self.energy_total / self.macs:.3f} pJ/MAC)")
        lines.append(f"latency {self.latency:,.0f} cycles = " + " + ".join(
            f"{name} {v:,}" for name, v in rounded_parts(self.latency_parts) if v) if self.latency_parts
            else f"latency {self.latency:,.0f} cycles")
        tc = ", ".join(f"{k} {v:,.0f}" for k, v in self.transfer_cycles.items())
        lines.append(f"  transfer units busy per level (overlapping the above): {tc}")
        lines.append(f"utilization {self.utilization:.1%} (spatial {self.spatial_utilization:.1%}); "
                     f"EDP {self.edp:.4g} pJ*cycles")
        return "\n".join(lines)


def rounded_parts(parts: tuple[tuple[str, float], ...]) -> list[tuple[str, int]]:
    """Parts rounded to whole cycles so that they still add up to the rounded total: each is the
    rounded running sum minus the rounded running sum before it."""
    out, before, running = [], 0, 0.0
    for name, v in parts:
        running += v
        now = round(running)
        out.append((name, now - before))
        before = now
    return out


def access_counts(op: Operator, arch: Accelerator, m: Mapping) -> dict[tuple[int, str], Counts]:
    """Exact counters per (level index, operand name); the mapping must be valid."""
    info = NestInfo(op, m, arch)
    nlev = len(arch.levels)
    counts = {(i, o.name): Counts() for i in range(nlev) for o in op.operands if o.name in m.keep[i]}
    n_out = op.footprint(op.output)
    init_read = 1 if op.init_output == "read" else 0
    for X in op.operands:
        chain = [i for i in range(nlev) if X.name in m.keep[i]]

        def merged(lo: int, hi: int, *, X: Operand = X) -> frozenset[int]:
            # Spatial loops between lo and hi over dims X does not use: inputs are
            # multicast along them (if the axis can), outputs reduced (validated).
            out = set()
            for l in info.loops:
                if l.spatial and info.inside(l, lo) and not info.inside(l, hi) and l.dim not in X.dims:
                    ax = arch.fanout_axis(l.level, l.axis)
                    if X.is_output or ax.multicast:
                        out.add(l.idx)
            return frozenset(out)

        def lineages(level: int, *, X: Operand = X) -> int:
            # Branches of a spatial reduction above ``level``: each starts its partial sums at zero.
            return math.prod(l.bound for l in info.loops
                             if l.spatial and not info.inside(l, level) and l.dim not in X.dims)

        for p, c in pairwise(chain):
            if info.all_perfect:
                member = entering_perfect(info, X, c)
                coll = merged(p, c)
                # Perfect nests: merged instances are identical, so a group is a member.
                group = member // math.prod(info.loops[k].bound for k in coll) if coll else member
            else:
                member = entering(info, X, c)
                coll = merged(p, c)
                group = entering(info, X, c, coll) if coll else member
            if X.is_output:
                fresh = n_out * (lineages(p) - init_read)
                counts[(c, X.name)].fills += group - fresh
                counts[(p, X.name)].reads += group - fresh
                counts[(c, X.name)].drains += member
                counts[(p, X.name)].updates += group
            else:
                counts[(c, X.name)].fills += member
                counts[(p, X.name)].reads += group
        last = chain[-1]
        g = compute_groups(info, merged(last, nlev))
        if X.is_output:
            counts[(last, X.name)].updates += g
            counts[(last, X.name)].reads += g - n_out * (lineages(last) - init_read)
        else:
            counts[(last, X.name)].reads += g
    return counts


def _fanouts_between(arch: Accelerator, lo: int, hi: int) -> list[int]:
    return [i for i in range(lo, hi) if arch.levels[i].fanout is not None]


def evaluate(op: Operator, arch: Accelerator, m: Mapping, check: bool = True) -> CostResult:
    check_countable(op)
    if check:
        validate(op, arch, m)
    nlev = len(arch.levels)
    raw = access_counts(op, arch, m)
    bits = {o.name: o.bits for o in op.operands}
    energy: dict[tuple[str, str], float] = {}
    counts_out: dict[tuple[str, str], tuple[int, int, int, int]] = {}
    fb = arch.compute.final_output_bits
    granular = any(lv.access_granularity_bits is not None for lv in arch.levels)
    nest = NestRows.of_mapping(op, arch, m) if fb is not None or granular else None
    # finished outputs move at the output stage's precision, partial sums at the operand's
    finals = {i: (int(u[0]), int(d[0])) for i, (u, d) in final_outputs(nest, m.keep).items()} \
        if nest is not None and fb is not None else {}
    for (i, name), cnt in raw.items():
        lv = arch.levels[i]
        out = name == op.output.name
        acc = (tuple(None if a is None else (a[0][:, 0], a[1][:, 0]) if isinstance(a, tuple) else int(a[0])
                     for a in stream_accesses(nest, m.keep, op.operand(name), i))
               if nest is not None and lv.access_granularity_bits is not None else None)
        energy[(lv.name, name)] = float(level_energy(lv, bits[name], cnt.as_tuple(), finals.get(i) if out else None,
                                                     fb, out, acc))
        counts_out[(lv.name, name)] = cnt.as_tuple()
    # Network energy: every element delivered across a fan-out, down or up.
    for X in op.operands:
        chain = [i for i in range(nlev) if X.name in m.keep[i]] + [nlev]
        for p, c in pairwise(chain):
            fans = _fanouts_between(arch, p, c)
            if not fans:
                continue
            if c == nlev:
                moved = op.macs * (2 if X.is_output else 1)
            else:
                cc = raw[(c, X.name)]
                moved = cc.fills + cc.drains
            for f in fans:
                lv = arch.levels[f]
                unit = fanout_element_energy(lv, X.bits)
                if unit:
                    key = (f"NoC:{lv.name}", X.name)
                    energy[key] = energy.get(key, 0.0) + moved * unit
    energy[("MAC", "-")] = op.macs * arch.compute.mac_energy_pj
    total_e = sum(energy.values())

    lat = latency_terms(op, arch, m, raw, nest)
    compute, transfer, stall, latency = lat.compute_cycles, lat.transfer_cycles, lat.stall_cycles, lat.latency
    peak = arch.peak_macs_per_cycle
    return CostResult(
        operator=op.name, accelerator=arch.name, macs=op.macs, mac_slots=m.temporal_product() * m.spatial_product(),
        counts=counts_out, energy=energy, energy_total=total_e, compute_cycles=compute,
        transfer_cycles=transfer, stall_cycles=stall, latency=latency,
        utilization=op.macs / (latency * peak) if latency else 0.0,
        spatial_utilization=m.spatial_product() / arch.num_pes,
        levels=tuple(lv.name for lv in arch.levels), latency_parts=lat.parts)
