"""Whole models: map every distinct layer once, in parallel, with a resumable cache.

A model import already groups identical nodes into one ``Layer`` with a count;
each such layer is searched once (``map_operator``) and its result stands for
every occurrence. Layers run in worker processes (the search is pure Python,
so threads would not help); the parent writes each result to the cache the
moment it arrives, which is what makes an interrupted sweep resumable.

Model totals treat layers as running one after another on the accelerator:
energy and latency are summed over every occurrence, and the model's EDP is
total energy times total latency (not the sum of per-layer EDPs).

A layer that cannot be mapped (precision the datapath lacks, buffers too
small, constraints it cannot meet) is kept with its reason; the other layers
are still mapped and reported.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import signal
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from accelmap.arch.accelerator import Accelerator, adopt_precision
from accelmap.cost.model import CostResult, evaluate
from accelmap.errors import AccelmapError, SpecError
from accelmap.mapping.forms import mapping_from_yaml, mapping_to_yaml
from accelmap.mapping.loopnest import Mapping
from accelmap.mapping.sampling import divisors
from accelmap.search.cache import CachedResult, ResultCache, result_key
from accelmap.search.mapper import STRATEGIES, map_operator
from accelmap.search.objective import certificate_gap, check_objective
from accelmap.search.space import Constraints
from accelmap.workload.models.result import Layer, ModelImport
from accelmap.workload.operator import Operator

# Relative difference beyond which a cached objective no longer matches a fresh evaluation.
_STALE_TOLERANCE = 1e-9


@dataclass(frozen=True)
class LayerMapping:
    """The outcome for one distinct layer (all ``layer.count`` occurrences share it)."""

    layer: Layer                         # operator at the precision it was mapped at
    result: CostResult | None
    mapping: Mapping | None
    strategy: str                        # strategy that ran: optimal, exhaustive, heuristic, random
    proven_optimal: bool
    cached: bool
    search_seconds: float
    evaluated: int                       # complete mappings costed by the search
    notes: tuple[str, ...] = ()
    error: str | None = None             # why the layer cannot be mapped
    lower_bound: float | None = None     # of the objective over every mapping the constraints allow
    timed_out: bool = False              # the search stopped at its time limit
    objective: str = "edp"
    # Pareto objective: the layer's energy-latency front, lowest energy first; ``result`` is its EDP-best point.
    front: tuple[tuple[CostResult, Mapping], ...] = ()

    @property
    def name(self) -> str:
        return self.layer.name

    @property
    def count(self) -> int:
        return self.layer.count

    @property
    def ok(self) -> bool:
        return self.result is not None

    @property
    def cost(self) -> CostResult:
        """The result of a mapped layer (``ok``)."""
        if self.result is None:
            raise ValueError(f"layer {self.name} has no mapping: {self.error}")
        return self.result

    @property
    def mapping_found(self) -> Mapping:
        """The mapping of a mapped layer (``ok``)."""
        if self.mapping is None:
            raise ValueError(f"layer {self.name} has no mapping: {self.error}")
        return self.mapping

    @property
    def how(self) -> str:
        """How good the mapping is known to be: 'optimal' (proven) or the strategy that found it."""
        if not self.ok:
            return "failed"
        return "optimal" if self.proven_optimal else self.strategy

    @property
    def gap(self) -> float | None:
        """best / lower bound - 1: how much better than this mapping any mapping can be (0 if proven)."""
        return certificate_gap(self.value, self.lower_bound, self.proven_optimal) if self.ok else None

    @property
    def value(self) -> float:
        if self.result is None:
            return math.nan
        return self.result.objective("edp" if self.objective == "pareto" else self.objective)

    def to_dict(self) -> dict[str, Any]:
        op = self.layer.operator
        d: dict[str, Any] = {
            "name": self.name, "kind": op.kind, "source_op": self.layer.source_op, "count": self.count,
            "nodes": list(self.layer.nodes), "dims": dict(op.dims), "macs_each": op.macs,
            "macs": self.layer.macs, "bits": {o.name: o.bits for o in op.operands},
            "strategy": self.strategy, "proven_optimal": self.proven_optimal, "cached": self.cached,
            "search_seconds": self.search_seconds, "evaluated": self.evaluated, "notes": list(self.notes),
            "error": self.error, "timed_out": self.timed_out, "lower_bound": self.lower_bound,
            "gap": self.gap,
        }
        if self.front:
            d["front"] = [{"energy_pj": r.energy_total, "latency_cycles": r.latency, "edp": r.edp}
                          for r, _ in self.front]
        if self.result is not None:
            r = self.result
            d.update({"energy_pj_each": r.energy_total, "latency_cycles_each": r.latency,
                      "edp_each": r.edp, "utilization": r.utilization,
                      "spatial_utilization": r.spatial_utilization,
                      "energy_pj": r.energy_total * self.count, "latency_cycles": r.latency * self.count,
                      "cost": r.to_dict()})
        return d


@dataclass(frozen=True)
class ModelMapping:
    model: ModelImport
    arch: Accelerator
    objective: str
    strategy: str                        # as requested ('auto' resolves per layer)
    layers: tuple[LayerMapping, ...]
    wall_seconds: float
    cache_path: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def mapped(self) -> list[LayerMapping]:
        return [l for l in self.layers if l.ok]

    @property
    def failed(self) -> list[LayerMapping]:
        return [l for l in self.layers if not l.ok]

    @property
    def complete(self) -> bool:
        return not self.failed

    @property
    def macs_not_mapped(self) -> int:
        return sum(l.layer.macs for l in self.failed)

    @property
    def proven(self) -> list[LayerMapping]:
        return [l for l in self.mapped if l.proven_optimal]

    @property
    def energy_total(self) -> float:
        return sum(l.cost.energy_total * l.count for l in self.mapped)

    @property
    def latency_total(self) -> float:
        return sum(l.cost.latency * l.count for l in self.mapped)

    @property
    def edp_total(self) -> float:
        return self.energy_total * self.latency_total

    @property
    def macs_mapped(self) -> int:
        return sum(l.layer.macs for l in self.mapped)

    @property
    def utilization(self) -> float:
        """MACs of the mapped layers over what the array could do in their total latency."""
        denom = self.latency_total * self.arch.peak_macs_per_cycle
        return self.macs_mapped / denom if denom else 0.0

    @property
    def searched(self) -> int:
        return sum(1 for l in self.layers if not l.cached)

    @property
    def cache_hits(self) -> int:
        return sum(1 for l in self.layers if l.cached)

    def front(self) -> list[tuple[float, float, tuple[int, ...]]]:
        """The whole model's energy-latency front under the Pareto objective: (energy, latency, the
        point each layer takes), lowest energy first. Layers run one after another, so a model point
        is a sum of one point per layer (times its count); every layer's front is folded in and the
        dominated sums dropped after each, which keeps every non-dominated sum."""
        points: list[tuple[float, float, tuple[int, ...]]] = [(0.0, 0.0, ())]
        for l in self.mapped:
            options = l.front or ((l.cost, l.mapping_found),)
            sums = [(e + r.energy_total * l.count, t + r.latency * l.count, pick + (j,))
                    for e, t, pick in points for j, (r, _) in enumerate(options)]
            points = pareto_points(sums)
        return points if self.mapped else []

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.name, "source": self.model.source, "params": dict(self.model.params),
            "accelerator": self.arch.name, "objective": self.objective, "strategy": self.strategy,
            "wall_seconds": self.wall_seconds, "cache": self.cache_path,
            "distinct_layers": len(self.layers), "accelerator_nodes": sum(l.count for l in self.layers),
            "mapped_layers": len(self.mapped), "failed_layers": [l.name for l in self.failed],
            "searched_layers": self.searched, "cache_hits": self.cache_hits,
            "proven_optimal_layers": len(self.proven),
            "complete": self.complete,
            "not_mapped": {"layers": len(self.failed), "nodes": sum(l.count for l in self.failed),
                           "macs": self.macs_not_mapped},
            "totals": {"macs": self.macs_mapped, "energy_pj": self.energy_total,
                       "latency_cycles": self.latency_total, "edp_pj_cycles": self.edp_total,
                       "utilization": self.utilization},
            "notes": list(self.notes),
            "model_front": [{"energy_pj": e, "latency_cycles": t, "layer_points": list(pick)}
                            for e, t, pick in self.front()] if self.objective == "pareto" else None,
            "layers": [l.to_dict() for l in self.layers],
            "host_ops": [h.to_dict() for h in self.model.host_ops],
        }


def pareto_points(points: list) -> list:
    """The points (energy, latency, ...) no other point is at least as good as in both, by energy."""
    out: list = []
    for p in sorted(points, key=lambda p: (p[0], p[1])):
        if not out or p[1] < out[-1][1]:
            out.append(p)
    return out


def check_model_constraints(cons: Constraints, model: ModelImport, arch: Accelerator) -> None:
    """Names in the constraints must exist: axes and levels on the accelerator, dims in some layer."""
    axes = arch.fanout_axes()
    levels = {lv.name for lv in arch.levels}
    dims = {d for l in model.layers for d in l.operator.dim_names}
    for ax, ds in cons.spatial.items():
        if ax not in axes:
            raise SpecError(f"unknown fan-out axis {ax!r}; {arch.name} has {', '.join(axes) or 'none'}",
                            where="constraints.spatial")
        for d, b in ds.items():
            if d not in dims:
                raise SpecError(f"axis {ax}: no layer of {model.name} has a dimension {d!r}; its layers have "
                                f"{', '.join(sorted(dims))}", where="constraints.spatial")
            if b < 1 or b > axes[ax][1].size:
                raise SpecError(f"axis {ax}: {d}={b} must be within 1..{axes[ax][1].size}",
                                where="constraints.spatial")
    for key in (*cons.orders, *cons.forbid_orders, *cons.keep):
        if key not in levels:
            raise SpecError(f"unknown level {key!r}; {arch.name} has {', '.join(levels)}", where="constraints")
    if not 0.0 <= cons.min_utilization <= 1.0:
        raise SpecError(f"min_utilization must be within 0..1, got {cons.min_utilization}", where="constraints")


def fit_constraints(cons: Constraints, op: Operator,
                    arch: Accelerator | None = None) -> tuple[Constraints, tuple[str, ...]]:
    """The model-wide constraints as they apply to one layer, and notes on every change.

    A spatial unrolling names a bound for the whole model. A layer whose
    dimension is smaller unrolls all of it; an output dimension the bound does
    not divide is padded to whole spatial rounds (the last one partial, as
    ZigZag does); a reduced dimension unrolls the largest divisor of its size
    within the bound (a spatial reduction must be complete); a layer without
    the dimension leaves it out, and so does a layer that reduces over it where the axis
    cannot reduce (a GEMM's K on a column axis meant for a convolution's K). Orders and kept operands
    drop names the layer does not have.
    """
    notes: list[str] = []
    spatial: dict[str, dict[str, int]] = {}
    for ax, ds in cons.spatial.items():
        spatial[ax] = {}
        for d, b in ds.items():
            if d not in op.sizes:
                notes.append(f"constraint {ax}: {d}={b} dropped (no dimension {d})")
                continue
            axis = arch.fanout_axes().get(ax, (None, None))[1] if arch is not None else None
            if d not in op.output.dims and axis is not None and not axis.reduce:
                notes.append(f"constraint {ax}: {d}={b} dropped ({d} is reduced here and {ax} cannot reduce)")
                continue
            # An output dim pads to whole spatial rounds (as ZigZag does); a reduced dim must
            # divide (spatial reductions are complete), so it takes the largest divisor.
            fit = min(b, op.sizes[d]) if d in op.output.dims else max(x for x in divisors(op.sizes[d]) if x <= b)
            if fit != b:
                notes.append(f"constraint {ax}: {d}={b} unrolls {d}={fit} ({d} is {op.sizes[d]})")
            elif op.sizes[d] % b:
                notes.append(f"constraint {ax}: {d}={b} pads {d}={op.sizes[d]} to {-(-op.sizes[d] // b) * b}")
            spatial[ax][d] = fit
    names = set(op.dim_names)
    orders = {lv: tuple(d for d in o if d in names) for lv, o in cons.orders.items()}
    forbid = {lv: tuple(t for t in (tuple(d for d in s if d in names) for s in seqs) if t)
              for lv, seqs in cons.forbid_orders.items()}
    operands = {o.name for o in op.operands}
    keep = {lv: frozenset(k & operands) for lv, k in cons.keep.items()}
    if orders != cons.orders or forbid != cons.forbid_orders or keep != cons.keep:
        notes.append("orders/keep constraints restricted to this layer's dimensions and operands")
    return replace(cons, spatial=spatial, orders=orders, forbid_orders=forbid, keep=keep), tuple(notes)


@dataclass
class _Task:
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


def _search(task: _Task) -> tuple[int, dict[str, Any]]:
    """Run in a worker: map one layer; a user-facing failure becomes the layer's error."""
    t0 = time.perf_counter()
    try:
        res = map_operator(task.op, task.arch, task.objective, constraints=task.cons, strategy=task.strategy,
                           time_limit=task.time_limit, seed=task.seed)
    except AccelmapError as e:
        return task.index, {"error": str(e), "deterministic": True, "strategy": task.strategy,
                            "seconds": time.perf_counter() - t0, "evaluated": 0, "proven": False, "notes": (),
                            "lower_bound": None, "timed_out": False}
    notes = tuple(res.notes)
    if res.best is None and not res.proven_optimal and res.strategy == "heuristic":
        # The heuristic packs greedily and can miss every valid tiling under tight buffers or fixed
        # spatial unrolling; random sampling of valid mappings still finds one. Said in the notes.
        first = res
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


def _ignore_sigint() -> None:
    # The parent handles Ctrl-C and SIGTERM (it owns the cache); workers just stop when terminated,
    # so they must not inherit a handler the parent installed for SIGTERM.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _from_cache(cache: ResultCache, key: str, layer: Layer, op: Operator, arch: Accelerator,
                objective: str) -> LayerMapping | None:
    hit = cache.get(key)
    if hit is None:
        return None
    lay = replace(layer, operator=op)
    if hit.error is not None:
        return LayerMapping(lay, None, None, hit.strategy, hit.proven_optimal, True, hit.search_seconds,
                            hit.evaluated, hit.notes, hit.error, hit.lower_bound, hit.timed_out, objective)
    try:
        m = mapping_from_yaml(hit.mapping, arch, "cache")
        r = evaluate(op, arch, m)
    except AccelmapError:
        cache.delete(key)
        return None
    fresh = r.objective("edp" if objective == "pareto" else objective)
    if hit.value is None or abs(fresh - hit.value) > _STALE_TOLERANCE * max(abs(fresh), abs(hit.value), 1.0):
        cache.delete(key)
        return None
    front = []
    try:
        for fy in hit.front:
            fm = mapping_from_yaml(fy, arch, "cache")
            front.append((evaluate(op, arch, fm), fm))
    except AccelmapError:
        cache.delete(key)
        return None
    return LayerMapping(lay, r, m, hit.strategy, hit.proven_optimal, True, hit.search_seconds, hit.evaluated,
                        hit.notes, None, hit.lower_bound, hit.timed_out, objective, tuple(front))


def _outcome(layer: Layer, op: Operator, out: dict[str, Any], notes: tuple[str, ...],
             objective: str) -> LayerMapping:
    lay = replace(layer, operator=op)
    allnotes = notes + tuple(out["notes"])
    if out["error"] is not None:
        return LayerMapping(lay, None, None, out["strategy"], False, False, out["seconds"], out["evaluated"],
                            allnotes, out["error"], out["lower_bound"], out["timed_out"], objective)
    return LayerMapping(lay, out["result"], out["mapping"], out["strategy"], out["proven"], False,
                        out["seconds"], out["evaluated"], allnotes, None, out["lower_bound"], out["timed_out"],
                        objective, out.get("front", ()))


class _Progress:
    """A rich progress bar on stderr, or nothing."""

    def __init__(self, enabled: bool, total: int, label: str):
        self.bar = None
        if enabled and total:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), TextColumn("{task.fields[last]}"),
                                console=Console(stderr=True), transient=True)
            self.task = self.bar.add_task(label, total=total, last="")
            self.bar.start()

    def advance(self, last: str) -> None:
        if self.bar is not None:
            self.bar.update(self.task, advance=1, last=last)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def map_model(model: ModelImport, arch: Accelerator, objective: str = "edp", *,
              constraints: Constraints | None = None, strategy: str = "auto",
              time_limit_per_layer: float | None = None, jobs: int | None = None,
              cache_path: str | Path | None = None, progress: bool | None = None,
              keep_precision: bool = False, seed: int = 0,
              on_layer: Callable[[LayerMapping], None] | None = None) -> ModelMapping:
    """Map every distinct layer of ``model`` on ``arch``.

    ``keep_precision`` keeps the operand bits the import chose; by default the
    operands take the accelerator's precision. ``jobs`` worker processes
    (default: every core); ``cache_path`` None disables the cache; ``progress``
    None shows a bar only when stderr is a terminal. ``on_layer`` is called in
    the parent after each layer is known (cached or searched).
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
    tasks: list[_Task] = []
    try:
        for i, layer in enumerate(model.layers):
            op = layer.operator if keep_precision else adopt_precision(layer.operator, arch)
            lcons, notes = fit_constraints(cons, op, arch)
            key = result_key(op, arch, objective, strategy, lcons, time_limit_per_layer, seed)
            hit = _from_cache(cache, key, layer, op, arch, objective) if cache else None
            if hit is not None:
                outcomes[i] = hit
                if on_layer:
                    on_layer(hit)
            else:
                tasks.append(_Task(i, op, arch, objective, strategy, lcons, time_limit_per_layer, seed, key, notes))

        def record(index: int, out: dict[str, Any]) -> LayerMapping:
            task = tasks_by_index[index]
            lm = _outcome(model.layers[index], task.op, out, task.notes, objective)
            outcomes[index] = lm
            if cache is not None and (out["error"] is None or out.get("deterministic")):
                value = out.get("value")
                stored = CachedResult(mapping_to_yaml(lm.mapping, arch) if lm.mapping else None, value,
                                      lm.strategy, lm.proven_optimal, lm.search_seconds, lm.evaluated,
                                      lm.notes, lm.error, lm.lower_bound, lm.timed_out)
                summary = None if lm.result is None else {
                    "energy_pj": lm.result.energy_total, "latency_cycles": lm.result.latency,
                    "edp": lm.result.edp, "utilization": lm.result.utilization,
                    "front": [mapping_to_yaml(fm, arch) for _, fm in lm.front]}
                cache.put(task.key, task.op.name, arch.name, objective, stored, summary)
            if on_layer:
                on_layer(lm)
            return lm

        tasks_by_index = {t.index: t for t in tasks}
        # Biggest layers first, so the last worker to finish is not the one given the largest layer.
        tasks.sort(key=lambda t: -t.op.macs)
        workers = min(jobs or os.cpu_count() or 1, len(tasks))
        show = progress if progress is not None else sys.stderr.isatty()
        bar = _Progress(show, len(tasks), f"mapping {model.name} on {arch.name}")
        try:
            if workers <= 1:
                for task in tasks:
                    lm = record(*_search(task))
                    bar.advance(lm.name)
            else:
                _run_pool(tasks, workers, lambda idx, out: bar.advance(record(idx, out).name))
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


def _run_pool(tasks: list[_Task], workers: int, done: Callable[[int, dict], None]) -> None:
    # fork starts workers at once without re-importing the package; spawn elsewhere.
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_ignore_sigint)
    try:
        pending = {pool.submit(_search, t) for t in tasks}
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for f in finished:
                done(*f.result())
    except BaseException:
        # Interrupted (or a bug): results so far are cached; stop the searches still running.
        for p in list(getattr(pool, "_processes", {}).values()):
            p.terminate()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
