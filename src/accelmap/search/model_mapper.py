"""Whole models: map every distinct layer once, in parallel, with a resumable cache.

A model import already groups identical nodes into one ``Layer`` with a count;
each such layer is searched once (``map_operator``) and its result stands for
every occurrence. This module orders that work; its parts live apart:
``model_result`` (what a sweep gives), ``layer_constraints`` (model-wide
constraints fitted to each layer), ``layer_cache`` (cached results, checked
for staleness), ``layer_pool`` (the worker processes) and ``progress_bar``.

A layer that cannot be mapped (precision the datapath lacks, buffers too
small, constraints it cannot meet) is kept with its reason; the other layers
are still mapped and reported.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

from accelmap.arch.accelerator import Accelerator, adopt_precision
from accelmap.errors import SpecError
from accelmap.mapping.loopnest import Mapping
from accelmap.search.cache import ResultCache, result_key
from accelmap.search.heuristic_config import DEFAULT_HEURISTIC, HeuristicConfig
from accelmap.search.layer_cache import cached_layer, store_layer
from accelmap.search.layer_constraints import check_model_constraints, fit_constraints
from accelmap.search.layer_pool import LayerTask, layer_outcome, run_pool, search_layer
from accelmap.search.mapper import STRATEGIES
from accelmap.search.model_result import LayerMapping, ModelMapping
from accelmap.search.objective import check_objective
from accelmap.search.progress_bar import ProgressBar
from accelmap.search.space import Constraints
from accelmap.workload.models.result import ModelImport


def map_model(model: ModelImport, arch: Accelerator, objective: str = "edp", *,
              constraints: Constraints | None = None, strategy: str = "auto",
              time_limit_per_layer: float | None = None, jobs: int | None = None,
              cache_path: str | Path | None = None, progress: bool | None = None,
              keep_precision: bool = False, seed: int = 0,
              heuristic_config: HeuristicConfig = DEFAULT_HEURISTIC,
              on_layer: Callable[[LayerMapping], None] | None = None, imperfect: bool | str = False,
              warm_start: dict[str, tuple[Mapping, ...]] | None = None) -> ModelMapping:
    """Map every distinct layer of ``model`` on ``arch``.

    ``keep_precision`` keeps the operand bits the import chose; by default the
    operands take the accelerator's precision. ``jobs`` worker processes
    (default: every core); ``cache_path`` None disables the cache; ``progress``
    None shows a bar only when stderr is a terminal. ``on_layer`` is called in
    the parent after each layer is known (cached or searched). ``heuristic_config`` sets the
    heuristic's knobs; it is part of every cache key. ``imperfect``: the exact searches cover imperfect
    factorizations too (the last tile partial; ``map_operator``). ``warm_start``: per layer name, mappings
    to start that layer's search from (``map_operator``); such a layer is neither looked up in nor written to
    the cache, whose key does not hold them.
    """
    check_objective(objective)
    if strategy not in STRATEGIES:
        raise SpecError(f"unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}", where="--strategy")
    if jobs is not None and jobs < 1:
        raise SpecError(f"must be a positive integer, got {jobs}", where="--jobs")
    if time_limit_per_layer is not None and time_limit_per_layer <= 0:
        raise SpecError(f"must be positive seconds, got {time_limit_per_layer}", where="--time-limit")
    cons = constraints or Constraints()
    check_model_constraints(cons, model, arch)
    t0 = time.perf_counter()
    cache = ResultCache(cache_path) if cache_path is not None else None
    outcomes: dict[int, LayerMapping] = {}
    tasks: list[LayerTask] = []
    try:
        for i, layer in enumerate(model.layers):
            op = layer.operator if keep_precision else adopt_precision(layer.operator, arch)
            lcons, notes = fit_constraints(cons, op, arch)
            key = result_key(op, arch, objective, strategy, lcons, time_limit_per_layer, seed, heuristic_config,
                             imperfect)
            warm = (warm_start or {}).get(layer.name, ())
            hit = cached_layer(cache, key, layer, op, arch, objective) if cache and not warm else None
            if hit is not None:
                outcomes[i] = hit
                if on_layer:
                    on_layer(hit)
            else:
                tasks.append(LayerTask(i, op, arch, objective, strategy, lcons, time_limit_per_layer, seed, key, notes,
                                       heuristic_config, imperfect, warm))

        def record(index: int, out: dict[str, Any]) -> LayerMapping:
            task = tasks_by_index[index]
            lm = layer_outcome(model.layers[index], task.op, out, task.notes, objective)
            outcomes[index] = lm
            if cache is not None and not task.warm_start and (out["error"] is None or out.get("deterministic")):
                store_layer(cache, task.key, lm, arch)
            if on_layer:
                on_layer(lm)
            return lm

        tasks_by_index = {t.index: t for t in tasks}
        # Biggest layers first, so the last worker to finish is not the one given the largest layer.
        tasks.sort(key=lambda t: -t.op.macs)
        workers = min(jobs or os.cpu_count() or 1, len(tasks))
        show = progress if progress is not None else sys.stderr.isatty()
        bar = ProgressBar(show, len(tasks), f"mapping {model.name} on {arch.name}")
        try:
            if workers <= 1:
                for task in tasks:
                    lm = record(*search_layer(task))
                    bar.advance(lm.name)
            else:
                run_pool(tasks, workers, lambda idx, out: bar.advance(record(idx, out).name))
        finally:
            bar.close()
    finally:
        if cache is not None:
            cache.close()
    layers = tuple(outcomes[i] for i in range(len(model.layers)))
    notes = tuple(model.notes)
    if not keep_precision:
        # The import's default precision was replaced by the accelerator's: say that instead.
        # adopt_precision takes each class's first supported width.
        prec = ", ".join(f"{c} {b[0]}" for c, b in arch.compute.precision if b)
        notes = tuple(n for n in notes if not n.startswith("precision:")) + (
            f"precision: the accelerator's ({prec} bits)",)
    return ModelMapping(model, arch, objective, strategy, layers, time.perf_counter() - t0,
                        str(cache_path) if cache_path is not None else None, notes)
