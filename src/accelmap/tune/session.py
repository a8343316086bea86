"""Tune one operator on one accelerator: the Python entry point that ``accelmap tune`` is a thin layer over."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from accelmap.arch.accelerator import Accelerator
from accelmap.errors import SpecError
from accelmap.tune.loop import TuneRun, measured_cost, run_tuner
from accelmap.tune.measure import Measurement, Measurer
from accelmap.tune.template import Built, ScheduleTemplate
from accelmap.tune.tuners import TUNERS, make_tuner
from accelmap.workload.operator import Operator


@dataclass
class TuneReport:
    template: ScheduleTemplate
    backend: str
    runs: list[TuneRun]
    measured: int                 # measurements made (the rest came from the log)
    from_log: int                 # configurations the log already held when the run started
    seconds: float
    unit: str
    notes: list[str] = field(default_factory=list)

    @property
    def best(self) -> Measurement | None:
        found = [r.best for r in self.runs if r.best is not None]
        return min(found, key=measured_cost) if found else None

    def best_built(self) -> Built | None:
        best = self.best
        return self.template.build(best.point) if best is not None else None

    def to_dict(self) -> dict:
        best = self.best
        t = self.template
        return {
            "operator": t.op.name, "expression": t.op.expression(), "macs": t.op.macs,
            "accelerator": t.arch.name, "backend": self.backend, "unit": self.unit,
            "space": {"size": t.space.size, "knobs": {k.name: [list(v) if isinstance(v, tuple) else v
                                                              for v in k.options] for k in t.space.knobs}},
            "best": None if best is None else {"cost": best.cost, "config": {
                k: list(v) if isinstance(v, tuple) else v for k, v in t.space.values(best.point).items()}},
            "tuners": [{"tuner": r.tuner, "trials": len(r.history), "valid": sum(m.valid for m in r.history),
                        "best": r.best.cost if r.best else None, "exhausted": r.exhausted,
                        "best_so_far": r.best_so_far()} for r in self.runs],
            "measured": self.measured, "from_log": self.from_log, "seconds": self.seconds, "notes": self.notes,
        }


def tune_operator(op: Operator, arch: Accelerator, *, backend: str = "sim", tuners: tuple[str, ...] = ("validity",),
                  trials: int = 200, batch_size: int = 50, step: int | None = None, seed: int = 0,
                  workers: int = 1, timeout: float = 60.0,
                  log: str | Path | None = None, spatial: dict[str, str] | None = None,
                  template: ScheduleTemplate | None = None, measurer: Measurer | None = None,
                  on_batch: Callable[[str, TuneRun], None] | None = None) -> TuneReport:
    """Tune ``op``'s schedule knobs on ``arch`` with each tuner in turn, measuring with ``backend``.
    ``template``: one already built for ``op`` and ``arch`` (else built here, with ``spatial``);
    ``measurer``: one already built for that template and ``backend`` (else built here from the other options).
    ``step``: configurations measured at a time (AutoTVM's ``n_parallel``), a divisor of ``batch_size``, the
    epoch the model is retrained after (default: the batch)."""
    for name in tuners:
        if name not in TUNERS:
            raise SpecError(f"tuner {name!r} unknown; use one of {', '.join(TUNERS)}")
    if trials < 1 or batch_size < 1:
        raise SpecError(f"trials and batch size must be positive, got {trials} and {batch_size}")
    step = batch_size if step is None else step
    if step < 1 or batch_size % step:
        # a step across the end of a batch would retrain the model later than after every batch
        raise SpecError(f"the measurement step must divide the batch of {batch_size}, got {step}", where="--step")
    template = template if template is not None else ScheduleTemplate(op, arch, spatial=spatial)
    if measurer is None:
        measurer = Measurer(template, backend, workers=workers, timeout=timeout, log=log)
    from_log = len(measurer.log.known)
    t0 = time.perf_counter()
    runs = []
    try:
        for name in tuners:
            tuner = make_tuner(name, template.space, seed, is_valid=lambda p: template.build(p).valid,
                               plan_size=batch_size)
            callback = (lambda run, name=name: on_batch(name, run)) if on_batch is not None else None
            runs.append(run_tuner(tuner, measurer, trials, step, callback))
    finally:
        measurer.close()
    notes = []
    if any(r.exhausted for r in runs):
        notes.append(f"the space has {template.space.size:,} configurations; a tuner measured them all "
                     f"before its {trials} trials")
    failed = sum(1 for m in measurer.log.known.values() if m.error and m.error.startswith("timed out"))
    if failed:
        notes.append(f"{failed} configurations timed out after {timeout:g} s and count as invalid")
    died = sum(1 for m in measurer.log.known.values() if m.error and m.error.startswith("the measuring process died"))
    if died:
        notes.append(f"{died} configurations ended their measuring process (a crash) and count as invalid")
    unit = "s" if backend == "host" else "cycles"
    return TuneReport(template, backend, runs, measurer.measured, from_log, time.perf_counter() - t0, unit, notes)
