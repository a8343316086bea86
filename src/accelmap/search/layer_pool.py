"""Searching the layers of a model in worker processes.

Layers run in worker processes (the search is pure Python, so threads would
not help). Each worker maps one layer and sends back a plain result; the
parent turns it into a ``LayerMapping`` and owns the cache, writing each
result the moment it arrives, which is what makes an interrupted sweep
resumable.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from accelmap.arch.accelerator import Accelerator
from accelmap.errors import AccelmapError
from accelmap.search.heuristic_config import DEFAULT_HEURISTIC, HeuristicConfig
from accelmap.search.mapper import map_operator
from accelmap.search.model_result import LayerMapping
from accelmap.search.space import Constraints
from accelmap.worker_pool import run_in_processes
from accelmap.workload.models.result import Layer
from accelmap.workload.operator import Operator

log = logging.getLogger(__name__)


@dataclass
class LayerTask:
    index: int
    op: Operator
    arch: Accelerator
    objective: str
    strategy: str
    cons: Constraints
    time_limit: float | None
    seed: int
    key: str
    notes: tuple[str, ...] = field(default=())
    heuristic_config: HeuristicConfig = DEFAULT_HEURISTIC
    imperfect: bool | str = False
    warm_start: tuple = ()        # mappings to validate and start from (``map_operator``)


def search_layer(task: LayerTask) -> tuple[int, dict[str, Any]]:
    """Run in a worker: map one layer; a user-facing failure becomes the layer's error."""
    t0 = time.perf_counter()
    try:
        res = map_operator(task.op, task.arch, task.objective, constraints=task.cons, strategy=task.strategy,
                           time_limit=task.time_limit, seed=task.seed, heuristic_config=task.heuristic_config,
                           imperfect=task.imperfect, warm_start=task.warm_start)
    except AccelmapError as e:
        return task.index, {"error": str(e), "deterministic": True, "strategy": task.strategy,
                            "seconds": time.perf_counter() - t0, "evaluated": 0, "proven": False, "notes": (),
                            "lower_bound": None, "timed_out": False}
    notes = tuple(res.notes)
    if res.best is None and not res.proven_optimal and res.strategy == "heuristic":
        # The heuristic packs greedily and can miss every valid tiling under tight buffers or fixed
        # spatial unrolling; random sampling of valid mappings still finds one. Said in the notes.
        first = res
        log.info("%s: the heuristic found no valid mapping; trying random sampling", task.op.name)
        res = map_operator(task.op, task.arch, task.objective, constraints=task.cons, strategy="random",
                           time_limit=task.time_limit, seed=task.seed)
        res.stats.evaluated += first.stats.evaluated
        notes = ("the heuristic found no valid mapping; random sampling used",) + tuple(res.notes)
    best = res.best
    out = {"strategy": res.strategy, "proven": res.proven_optimal, "seconds": time.perf_counter() - t0,
           "evaluated": res.stats.evaluated, "notes": notes, "lower_bound": res.lower_bound,
           "timed_out": res.timed_out}
    if best is None:
        # A failure is cached like a result: its key holds the time limit, so a longer limit searches again.
        out.update(error="; ".join(notes) or "no valid mapping found", deterministic=True, notes=())
    elif task.objective == "pareto":
        # The front, lowest energy first; the layer stands in the totals by its EDP-best point.
        rep = min(res.results, key=lambda f: f.result.edp)
        out.update(error=None, mapping=rep.mapping, result=rep.result, value=rep.result.edp,
                   front=tuple((f.result, f.mapping) for f in res.results))
    else:
        out.update(error=None, mapping=best.mapping, result=best.result, value=best.value)
    return task.index, out


def layer_outcome(layer: Layer, op: Operator, out: dict[str, Any], notes: tuple[str, ...],
             objective: str) -> LayerMapping:
    lay = replace(layer, operator=op)
    allnotes = notes + tuple(out["notes"])
    if out["error"] is not None:
        return LayerMapping(lay, None, None, out["strategy"], False, False, out["seconds"], out["evaluated"],
                            allnotes, out["error"], out["lower_bound"], out["timed_out"], objective)
    return LayerMapping(lay, out["result"], out["mapping"], out["strategy"], out["proven"], False,
                        out["seconds"], out["evaluated"], allnotes, None, out["lower_bound"], out["timed_out"],
                        objective, out.get("front", ()))


def run_pool(tasks: list[LayerTask], workers: int, done: Callable[[int, dict], None]) -> None:
    run_in_processes(search_layer, tasks, workers, lambda indexed: done(*indexed))
