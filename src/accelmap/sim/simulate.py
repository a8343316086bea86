"""Simulate a mapped operator: timing of its tile program, and its data for small operators."""

from __future__ import annotations

import time
from dataclasses import dataclass

from accelmap.arch.accelerator import Accelerator
from accelmap.codegen.execute import check_mapping
from accelmap.cost.model import access_counts, evaluate
from accelmap.mapping.loopnest import Mapping
from accelmap.mapping.validate import validate
from accelmap.sim.engine import Timing, run_timing
from accelmap.sim.program import TileProgram, build_program
from accelmap.workload.operator import Operator

# Functional execution runs the generated C program element by element; above
# this many MACs it is skipped unless asked for.
FUNCTIONAL_MAX_MACS = 2_000_000


@dataclass
class SimResult:
    program: TileProgram
    timing: Timing
    model_latency: float
    wall_s: float
    functional: bool | None = None      # output equal to NumPy (None: not executed)
    functional_note: str = ""

    @property
    def cycles(self) -> float:
        return self.timing.cycles

    @property
    def model_error(self) -> float:
        """(model - simulator) / simulator."""
        return (self.model_latency - self.cycles) / self.cycles if self.cycles else 0.0

    def summary(self) -> str:
        p = self.program
        lines = [f"simulated {self.cycles:,.0f} cycles in {self.wall_s:.2f} s "
                 f"({p.n_steps:,} steps, {self.timing.instructions:,} instructions); "
                 f"analytical model {self.model_latency:,.0f} ({self.model_error:+.1%})"]
        for u, v in sorted(self.timing.utilization().items()):
            lines.append(f"  {u:<16} busy {self.timing.busy[u]:>14,.0f} cycles  {v:6.1%}")
        for port, b in sorted(self.timing.port_busy.items()):
            lines.append(f"  port {port:<11} busy {b:>14,.0f} cycles  {b / self.cycles if self.cycles else 0:6.1%}")
        odd = [f"{s.operand}@{self.program.arch.levels[s.level].name} x{s.scale:.3f}" for s in p.transfers
               if abs(s.scale - 1) > 1e-9]
        if odd:
            lines.append("  edge tiles move less than the first instance's pattern; volumes scaled: " + ", ".join(odd))
        if self.functional is not None:
            lines.append(f"  functional: {'output equal to NumPy' if self.functional else 'MISMATCH with NumPy'}"
                         f"{self.functional_note}")
        elif self.functional_note:
            lines.append(f"  functional: {self.functional_note}")
        return "\n".join(lines)


def simulate(op: Operator, arch: Accelerator, m: Mapping, *, functional: bool | None = None,
             keep_events: int = 4000) -> SimResult:
    """``functional``: None runs the data for operators up to FUNCTIONAL_MAX_MACS."""
    validate(op, arch, m)
    t0 = time.perf_counter()
    counts = access_counts(op, arch, m)
    prog = build_program(op, arch, m, counts)
    timing = run_timing(prog, keep_events)
    wall = time.perf_counter() - t0
    res = SimResult(prog, timing, evaluate(op, arch, m, check=False).latency, wall)
    run_data = functional if functional is not None else op.macs <= FUNCTIONAL_MAX_MACS
    if run_data:
        rep = check_mapping(op, arch, m)
        res.functional = rep.exact
        res.functional_note = (f" (generated tile program, {rep.run_s * 1e3:.0f} ms; transfer counts "
                               f"{'equal to' if rep.counts_equal else 'DIFFERENT from'} the model)")
    elif functional is None:
        res.functional_note = f"skipped ({op.macs:,} MACs > {FUNCTIONAL_MAX_MACS:,}; pass --functional to force)"
    return res
