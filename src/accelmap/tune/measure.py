"""Measuring configurations: backends behind one interface, parallel workers with timeouts, a resumable log.

Backends (``BACKENDS``):

* ``model``: the analytical model's latency in cycles (``cost.model.evaluate``): cheap, for presampling
  and comparison;
* ``sim``: the accelerator simulator's cycles for the configuration's tile program (``sim.simulate``);
* ``host``: hardware in the loop on the host CPU: the emitted C program of the configuration is
  compiled and run ``repeats`` times on random inputs; the cost is the median wall time in seconds,
  and the noise (interquartile range over the median) is recorded with it. A configuration whose
  program computes a wrong result is reported as an error, never timed.

Every measurement of a run is appended to a log, one JSON object per line (as AutoTVM's log), as soon
as it is made; a run given an existing log takes the configurations measured there from it instead of
measuring them again, so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import pickle
import time
import traceback
from dataclasses import asdict, dataclass
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any, Callable

import numpy as np

from accelmap.errors import AccelmapError, SpecError
from accelmap.tune.template import ScheduleTemplate, shared_outer_bandwidth
from accelmap.worker_pool import reset_worker_signals
from accelmap.workload.layouts import laid_out

BACKENDS = ("model", "sim", "host")
HOST_REPEATS = 7          # timed runs per configuration on the host (median and IQR over them)
HOST_MAX_MACS = 60_000_000  # above this the host backend refuses an operator (runs would take seconds each)


@dataclass(frozen=True)
class Measurement:
    point: tuple[int, ...]
    valid: bool
    cost: float | None        # cycles (model, sim) or seconds (host); None when invalid or failed
    error: str | None = None
    wall_s: float = 0.0       # time the measurement took
    noise: float | None = None  # host: interquartile range / median of the repeats

    def to_json(self, template_key: str, backend: str, knobs: dict) -> str:
        rec = asdict(self)
        rec["point"] = list(self.point)
        rec.update(template=template_key, backend=backend, config={k: _plain(v) for k, v in knobs.items()},
                   time=time.time())
        return json.dumps(rec)


def _plain(v):
    return list(v) if isinstance(v, tuple) else v


def template_key(template: ScheduleTemplate) -> str:
    """What a logged measurement belongs to: the operator, the accelerator and the knob space."""
    t = template
    text = repr((t.op.signature(), t.arch.levels, t.arch.compute, t.space.knobs, t.spatial))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def measure_one(template: ScheduleTemplate, backend: str, point: tuple[int, ...],
                repeats: int = HOST_REPEATS) -> Measurement:
    """Build the configuration's program and measure it with ``backend`` (``repeats``: timed runs on the host)."""
    t0 = time.perf_counter()
    built = template.build(point)
    if not built.valid:
        return Measurement(point, False, None, built.error, time.perf_counter() - t0)
    assert built.arch is not None and built.mapping is not None
    # split over cores: every core runs its share at the same time, on its share of the DRAM bandwidth
    op = built.share if built.share is not None else template.op
    # the configuration's DRAM layouts: the rows its tile loads read (the host's C reads them itself)
    op = laid_out(op, built.layout_map)
    arch = shared_outer_bandwidth(built.arch, built.cores)
    try:
        if backend == "model":
            from accelmap.cost.model import evaluate
            cost = float(evaluate(op, arch, built.mapping, check=False).latency)
            return Measurement(point, True, cost, None, time.perf_counter() - t0)
        if backend == "sim":
            from accelmap.sim.simulate import simulate
            cost = float(simulate(op, arch, built.mapping, functional=False).cycles)
            return Measurement(point, True, cost, None, time.perf_counter() - t0)
        if backend == "host":
            if built.cores > 1:
                raise SpecError("the host backend runs one program on one CPU thread; a configuration split "
                                "over cores needs --backend sim or model")
            cost, noise = _host_time(template, built, repeats)
            return Measurement(point, True, cost, None, time.perf_counter() - t0, noise)
    except AccelmapError as e:
        return Measurement(point, False, None, str(e), time.perf_counter() - t0)
    raise SpecError(f"backend {backend!r} unknown; use one of {', '.join(BACKENDS)}")


def _host_time(template: ScheduleTemplate, built, repeats: int) -> tuple[float, float]:
    from accelmap.codegen.build import compile_shared, load_run
    from accelmap.codegen.c_source import generate_c
    from accelmap.codegen.c_tensors import random_inputs, reference
    from accelmap.codegen.execute import run_generated

    op = template.op
    layouts = built.layout_map
    lib = compile_shared(generate_c(op, built.arch, built.mapping, "int", layouts))
    fn = load_run(lib)
    tensors = random_inputs(op, "int", np.random.default_rng(0))
    got, _ = run_generated(fn, op, tensors, len(built.arch.levels), layouts)
    if not np.array_equal(got, reference(op, tensors)):
        raise AccelmapError("the configuration's program computes a wrong result")
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run_generated(fn, op, tensors, len(built.arch.levels), layouts)
        times.append(time.perf_counter() - t0)
    q1, med, q3 = np.percentile(times, [25, 50, 75])
    return float(med), float((q3 - q1) / med) if med else 0.0


class MeasureLog:
    """Append-only JSON-lines log; the measurements of one template and backend are read back on open."""

    def __init__(self, path: str | Path | None, template: ScheduleTemplate, backend: str):
        self.path = Path(path) if path else None
        self.template = template
        self.backend = backend
        self.key = template_key(template)
        self.known: dict[tuple[int, ...], Measurement] = {}
        if self.path is not None and self.path.exists():
            self._read()

    def _read(self) -> None:
        assert self.path is not None
        for lineno, line in enumerate(self.path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                if rec.get("template") != self.key or rec.get("backend") != self.backend:
                    continue
                point = tuple(int(v) for v in rec["point"])
                self.known[point] = Measurement(point, bool(rec["valid"]), rec["cost"], rec["error"],
                                                float(rec["wall_s"]), rec.get("noise"))
            except (ValueError, KeyError, TypeError) as e:
                raise SpecError(f"line {lineno} is not a measurement record ({e.__class__.__name__}: {e}); "
                                f"use a new log file or remove the line", where=str(self.path)) from None

    def append(self, results: list[Measurement]) -> None:
        for r in results:
            self.known[r.point] = r
        if self.path is None or not results:
            return
        with self.path.open("a") as f:
            for r in results:
                f.write(r.to_json(self.key, self.backend, self.template.space.values(r.point)) + "\n")
            f.flush()
            os.fsync(f.fileno())


# --- parallel measurement --------------------------------------------------------------------------------
@dataclass(frozen=True)
class _WorkerFailure:
    """An exception a worker raised while measuring (a bug, not an invalid configuration): raised again here."""
    error: BaseException
    trace: str


def _serve(conn, template: ScheduleTemplate, backend: str, repeats: int) -> None:
    """A worker's loop: measure each point sent until the measurer closes its end of the pipe."""
    # A forked worker inherits the parent's SIGTERM handler (Ray's driver installs one); reset it so that a
    # worker stopped from outside simply ends.
    reset_worker_signals()
    while True:
        try:
            point = conn.recv()
        except (EOFError, OSError):
            return
        try:
            result: Measurement | _WorkerFailure = measure_one(template, backend, point, repeats)
        except Exception as e:   # noqa: BLE001  (handed back to the measurer, which raises it)
            try:
                pickle.dumps(e)
                result = _WorkerFailure(e, traceback.format_exc())
            except Exception:   # noqa: BLE001  (an exception that does not pickle: its text)
                result = _WorkerFailure(RuntimeError(traceback.format_exc()), traceback.format_exc())
        conn.send(result)


class _Worker:
    """One measuring process with a pipe of its own. Workers share no queue and no lock, so one that runs past
    its timeout is killed (SIGKILL, which it cannot ignore or delay) without waiting for or blocking the
    others; ``multiprocessing.Pool.terminate()`` could hang on a replacement worker forked after it had
    taken its list of workers."""

    def __init__(self, ctx, template: ScheduleTemplate, backend: str, repeats: int):
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(child, template, backend, repeats), daemon=True)
        self.process.start()
        child.close()           # only the worker holds its end: its exit is an end of file here
        self.point: tuple[int, ...] | None = None
        self.started = 0.0

    def stop(self) -> int | None:
        """Kill the process (if it still runs) and reap it; its exit code."""
        self.conn.close()
        if self.process.is_alive():
            self.process.kill()
        self.process.join()
        return self.process.exitcode


class Measurer:
    """Measures batches of configurations in ``workers`` processes, each within ``timeout`` seconds.

    Every configuration is handed to one worker process of its own pipe. A configuration that runs past its
    timeout is recorded as failed ("timed out"), its worker is killed and a new one started when needed; a
    worker that dies while measuring (a crash in a compiled program) is recorded as failed with its exit
    code. With one worker (the host backend's default, so that two timed runs never share the CPU)
    measurement runs in this process and the timeout is not enforced.
    """

    def __init__(self, template: ScheduleTemplate, backend: str, *, workers: int = 1, timeout: float = 60.0,
                 log: str | Path | None = None, repeats: int = HOST_REPEATS):
        if backend not in BACKENDS:
            raise SpecError(f"backend {backend!r} unknown; use one of {', '.join(BACKENDS)}")
        if backend == "host" and len(template.core_counts) > 1:
            raise SpecError(f"{template.arch.name} has {template.arch.cores} cores; the host backend runs one "
                            f"program on one CPU thread (use --backend sim or model)")
        if backend == "host" and template.op.macs > HOST_MAX_MACS:
            raise SpecError(f"{template.op.name} has {template.op.macs:,} MACs; the host backend times operators "
                            f"up to {HOST_MAX_MACS:,} (use --backend sim or model)")
        self.template = template
        self.backend = backend
        self.workers = max(1, workers)
        self.timeout = timeout
        if repeats < 1:
            raise SpecError(f"repeats must be at least 1, got {repeats}")
        self.repeats = repeats
        self.log = MeasureLog(log, template, backend)
        self.measured = 0          # new measurements made by this measurer (not read from the log)
        self._idle: list[_Worker] = []     # started workers waiting for a configuration

    def close(self) -> None:
        """Stop every worker (measurements never outlive the call that asked for them, so none is busy)."""
        idle, self._idle = self._idle, []
        for worker in idle:
            worker.stop()

    def __call__(self, points: list[tuple[int, ...]]) -> list[Measurement]:
        fresh = [p for p in dict.fromkeys(points) if p not in self.log.known]
        results: list[Measurement] = []
        if self.workers == 1:
            results = [measure_one(self.template, self.backend, p, self.repeats) for p in fresh]
        elif fresh:
            results = self._in_workers(fresh)
        self.measured += len(results)
        self.log.append(results)
        return [self.log.known[p] for p in points]

    def _worker(self) -> _Worker:
        if self._idle:
            return self._idle.pop()
        ctx = multiprocessing.get_context("fork")
        return _Worker(ctx, self.template, self.backend, self.repeats)

    def _in_workers(self, points: list[tuple[int, ...]]) -> list[Measurement]:
        """Each point measured by one worker, up to ``workers`` at a time, each within ``timeout`` seconds of
        being handed over; the results in the order of ``points``."""
        todo = list(reversed(points))
        done: dict[tuple[int, ...], Measurement] = {}
        busy: dict[Any, _Worker] = {}
        try:
            while todo or busy:
                while todo and len(busy) < self.workers:
                    worker, point = self._worker(), todo.pop()
                    try:
                        worker.conn.send(point)
                    except OSError:        # it died while idle: a new one takes the point
                        worker.stop()
                        todo.append(point)
                        continue
                    worker.point, worker.started = point, time.monotonic()
                    busy[worker.conn] = worker
                first_deadline = min(w.started for w in busy.values()) + self.timeout
                ready = wait(list(busy), timeout=max(0.0, first_deadline - time.monotonic()))
                for conn in ready:
                    worker = busy.pop(conn)
                    assert worker.point is not None
                    try:
                        got = worker.conn.recv()
                    except (EOFError, OSError):
                        code = worker.stop()
                        done[worker.point] = Measurement(worker.point, False, None,
                                                         f"the measuring process died (exit code {code})",
                                                         time.monotonic() - worker.started)
                        continue
                    if isinstance(got, _WorkerFailure):
                        worker.stop()
                        got.error.add_note(f"raised in the worker measuring {worker.point}:\n{got.trace}")
                        raise got.error
                    done[worker.point] = got
                    self._idle.append(worker)
                now = time.monotonic()
                for conn, worker in list(busy.items()):
                    if now - worker.started >= self.timeout:
                        del busy[conn]
                        worker.stop()
                        assert worker.point is not None
                        done[worker.point] = Measurement(worker.point, False, None,
                                                         f"timed out after {self.timeout:g} s", self.timeout)
        finally:
            for worker in busy.values():     # interrupted (or a worker's exception): stop what still runs
                worker.stop()
        return [done[p] for p in points]


def lookup_measurer(table: dict[tuple[int, ...], Measurement]) -> Callable[[list[tuple[int, ...]]], list[Measurement]]:
    """Measurement replaced by lookup in an exhaustive ground-truth table (the dissertation's protocol)."""
    return lambda points: [table[p] for p in points]

