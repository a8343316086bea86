"""A sweep: map a model on every design of a space (or a list of its points), resumably.

Designs that are not valid accelerators or break the space's constraints are listed with the
reason and not mapped. The others are looked up in the store; the rest are mapped on the chosen
engine, one design per task (its layers one after another in that worker), and each result is
stored the moment it comes back. Points that give the same accelerator are mapped once.

With ``warm_start``, a design is handed to a worker only when one is free (``workers`` in flight), with
the best mapping of each layer on the nearest designs already mapped (fewest steps through the
parameters' value lists; from this run or the store); the worker validates and re-costs them on its
design (``search.mapper.map_operator``), and the valid ones start its search: the exact search's initial
incumbents, which its bounds prune against from the first node, and candidates of any other strategy.
"""

from __future__ import annotations

import math
import os
import socket
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from accelmap.arch.accelerator import Accelerator
from accelmap.dse.certificate import DesignCertificate, design_certificate
from accelmap.dse.design import Design, make_design, violation
from accelmap.dse.design_bound import MappedPoint, design_bounds, dominator, off_three_metric_front
from accelmap.dse.engines import run_tasks
from accelmap.dse.layer_budget import BUDGET_WEIGHTS, design_budgets, layer_budgets
from accelmap.dse.progress import SweepProgress
from accelmap.dse.space import DesignSpace
from accelmap.dse.store import DesignStore, StoredRun, run_key
from accelmap.errors import AccelmapError, SpecError
from accelmap.mapping.forms import mapping_from_yaml, mapping_to_yaml
from accelmap.mapping.loopnest import Mapping
from accelmap.search.cache import code_fingerprint
from accelmap.search.heuristic_config import DEFAULT_HEURISTIC, HeuristicConfig
from accelmap.search.mapper import valid_warm_start
from accelmap.search.model_mapper import map_model
from accelmap.search.model_result import LayerMapping, ModelMapping
from accelmap.search.space import Constraints
from accelmap.workload.models.result import ModelImport


@dataclass(frozen=True)
class DesignTask:
    key: str
    accelerator: Accelerator
    model: ModelImport
    strategy: str
    objective: str
    time_limit: float | None
    seed: int
    # Per layer name, mappings of neighbouring designs (YAML form) to start from; empty: a cold start.
    warm_start: tuple[tuple[str, tuple[dict, ...]], ...] = ()
    warm_from: tuple[str, ...] = ()            # the labels of those designs
    # The heuristic's time limit counts this worker's CPU seconds, not wall time: a budget per layer that
    # does not shrink with the machine's load (``HeuristicConfig.cpu_clock``).
    cpu_clock: bool = False
    # Per distinct layer name, its CPU seconds (``dse.layer_budget``); empty: ``time_limit`` for every layer.
    layer_limits: tuple[tuple[str, float], ...] = ()
    # Rule D (``dse.design_bound``): the design's area and the mapped designs of no more area; with ``prune`` the
    # worker first bounds the design and returns it unmapped when one of them dominates it.
    prune: bool = False
    area_mm2: float = math.nan
    dominators: tuple[MappedPoint, ...] = ()


def warm_mappings(task: DesignTask) -> dict[str, tuple[Mapping, ...]]:
    """The task's warm-start mappings that read on its accelerator (level and axis names may differ between
    designs of a space: those do not), per layer name; validity and cost are checked by the mapper."""
    out: dict[str, tuple[Mapping, ...]] = {}
    for name, forms in task.warm_start:
        ms = []
        for form in forms:
            try:
                ms.append(mapping_from_yaml(form, task.accelerator, f"warm start {name}"))
            except AccelmapError:
                continue
        if ms:
            out[name] = tuple(ms)
    return out


def _map_with_layer_limits(task: DesignTask, limits: dict[str, float], warm: dict[str, tuple[Mapping, ...]],
                           config: HeuristicConfig) -> ModelMapping:
    """``map_model`` with each distinct layer's own time limit: the layers that share a limit mapped together, the
    results put back in the model's order."""
    groups: dict[float, list[int]] = {}
    for i, layer in enumerate(task.model.layers):
        groups.setdefault(limits[layer.name], []).append(i)
    by_index: dict[int, LayerMapping] = {}
    parts = []
    for limit, idx in groups.items():
        part = map_model(replace(task.model, layers=tuple(task.model.layers[i] for i in idx)), task.accelerator,
                         task.objective, strategy=task.strategy, time_limit_per_layer=limit, jobs=1, cache_path=None,
                         progress=False, seed=task.seed, warm_start=warm, heuristic_config=config)
        by_index.update(zip(idx, part.layers, strict=True))
        parts.append(part)
    return replace(parts[0], model=task.model, layers=tuple(by_index[i] for i in range(len(task.model.layers))),
                   wall_seconds=sum(p.wall_seconds for p in parts))


def map_design(task: DesignTask) -> tuple[str, StoredRun, str]:
    """Run in a worker: map every layer of the model on one design (key, result, code fingerprint)."""
    t0, c0 = time.perf_counter(), time.process_time()
    if task.prune:
        bounds = design_bounds(task.model, task.accelerator)
        by = dominator(bounds, task.area_mm2, task.dominators)
        if by is not None:
            return task.key, StoredRun(None, None, False, None, time.perf_counter() - t0,
                                       f"{socket.gethostname()}:{os.getpid()}",
                                       {"pruned_by": {"design": by.label, "area_mm2": by.area_mm2, "edp": by.edp},
                                        "bounds": asdict(bounds), "cpu_seconds": time.process_time() - c0,
                                        "off_three_metric_front": off_three_metric_front(bounds, task.area_mm2,
                                                                                         task.dominators)}), \
                code_fingerprint()
    warm = warm_mappings(task)
    config = HeuristicConfig(cpu_clock=True) if task.cpu_clock else DEFAULT_HEURISTIC
    if task.layer_limits:
        mm = _map_with_layer_limits(task, dict(task.layer_limits), warm, config)
    else:
        mm = map_model(task.model, task.accelerator, task.objective, strategy=task.strategy,
                       time_limit_per_layer=task.time_limit, jobs=1, cache_path=None, progress=False, seed=task.seed,
                       warm_start=warm, heuristic_config=config)
    layers = []
    for l in mm.layers:
        ent: dict[str, Any] = {"name": l.name, "count": l.count, "how": l.how, "error": l.error,
                               "proven_optimal": l.proven_optimal, "timed_out": l.timed_out,
                               "seconds": l.search_seconds, "lower_bound": l.lower_bound}
        if task.warm_start:
            # How many of the neighbours' mappings were valid here (costed again: a few evaluations).
            ent["warm_start_valid"] = len(valid_warm_start(l.layer.operator, task.accelerator, Constraints(),
                                                           warm.get(l.name, ())))
        if l.ok:
            ent.update(energy_pj=l.cost.energy_total, latency_cycles=l.cost.latency,
                       mapping=mapping_to_yaml(l.mapping_found, task.accelerator))
        layers.append(ent)
    failed = [l.name for l in mm.failed]
    run = StoredRun(mm.energy_total if mm.complete else None, mm.latency_total if mm.complete else None,
                    mm.complete, f"layers not mapped: {', '.join(failed)}" if failed else None,
                    time.perf_counter() - t0, f"{socket.gethostname()}:{os.getpid()}",
                    {"utilization": mm.utilization, "cpu_seconds": time.process_time() - c0, "layers": layers,
                     "warm_from": list(task.warm_from),
                     "design_budget_cpu_s": sum(v for _, v in task.layer_limits) if task.layer_limits else None})
    return task.key, run, code_fingerprint()


@dataclass(frozen=True)
class Outcome:
    design: Design
    # mapped, failed (a layer did not map), excluded (constraints), invalid, pruned (rule D: a mapped design of no
    # more area has no more EDP than any mapping of this one could; ``dse.design_bound``)
    status: str
    run: StoredRun | None = None
    cached: bool = False
    reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "mapped"

    @property
    def energy(self) -> float:
        return self.run.energy_pj if self.run and self.run.energy_pj is not None else math.nan

    @property
    def latency(self) -> float:
        return self.run.latency_cycles if self.run and self.run.latency_cycles is not None else math.nan

    @property
    def edp(self) -> float:
        return self.energy * self.latency

    @property
    def area(self) -> float:
        return self.design.area_mm2

    def certificate(self, objective: str) -> DesignCertificate | None:
        """Proven optimal, or best found with a certified gap (``dse.certificate``); None if not mapped."""
        if not self.ok or self.run is None:
            return None
        return design_certificate(self.run.result.get("layers", []), objective)

    def to_dict(self, objective: str = "edp") -> dict[str, Any]:
        d: dict[str, Any] = {"design": self.design.label, "point": {n: v if not isinstance(v, tuple) else list(v)
                                                                   for n, v in self.design.point},
                             "status": self.status, "cached": self.cached, "reason": self.reason,
                             "area_mm2": self.design.area_mm2, "sram_bits": self.design.sram_bits,
                             "area_parts_mm2": dict(self.design.area_parts), "notes": list(self.design.notes)}
        if self.run is not None:
            d.update(energy_pj=self.run.energy_pj, latency_cycles=self.run.latency_cycles,
                     edp=self.edp if self.ok else None, seconds=self.run.seconds, worker=self.run.worker,
                     utilization=self.run.result.get("utilization"), cpu_seconds=self.run.result.get("cpu_seconds"))
        cert = self.certificate(objective)
        if cert is not None:
            value = self.edp if objective == "edp" else self.energy if objective == "energy" else self.latency
            d.update(proven=cert.proven, proven_layers=cert.proven_layers, objective_lower_bound=cert.lower_bound,
                     gap=cert.gap(value))
        return d


def _outcome(design: Design, run: StoredRun, cached: bool) -> Outcome:
    by = run.result.get("pruned_by")
    if by is not None:
        return Outcome(design, "pruned", run, cached,
                       f"rule D: EDP at least {run.result['bounds']['edp']:.4g} (certified) >= {by['edp']:.4g} of "
                       f"{by['design']} at area {by['area_mm2']:.4g} mm2")
    return Outcome(design, "mapped" if run.complete else "failed", run, cached, run.error)


@dataclass
class SweepResult:
    space: str
    model: str
    engine: str
    workers: int
    outcomes: list[Outcome]
    wall_seconds: float
    store: str | None
    mapped_now: int = 0                # designs mapped by this run (not found in the store)
    map_seconds: list[float] = field(default_factory=list)
    objective: str = "edp"             # what each design's layers were mapped for (its certificate's objective)

    @property
    def mapped(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.ok]

    def best(self, metric: str = "edp") -> Outcome | None:
        ok = self.mapped
        return min(ok, key=lambda o: getattr(o, metric)) if ok else None


# How many of the nearest mapped designs give their mappings to a warm start.
WARM_NEIGHBOURS = 2


def point_distance(space: DesignSpace, a: tuple[tuple[str, Any], ...], b: tuple[tuple[str, Any], ...]) -> int:
    """Steps between two points through each parameter's list of values."""
    return sum(abs(p.values.index(va) - p.values.index(vb))
               for p, (_, va), (_, vb) in zip(space.parameters, a, b, strict=True))


def with_warm_start(task: DesignTask, space: DesignSpace, point: tuple[tuple[str, Any], ...],
                    mapped: list[tuple[tuple[tuple[str, Any], ...], str, StoredRun]],
                    neighbours: int = WARM_NEIGHBOURS) -> DesignTask:
    """``task`` with each layer's best mappings on the ``neighbours`` designs of ``mapped`` (point, label,
    result) nearest to ``point`` (ties: the one mapped first); a mapping two of them share is given once."""
    near = sorted(range(len(mapped)), key=lambda j: (point_distance(space, point, mapped[j][0]), j))[:neighbours]
    per_layer: dict[str, list[dict]] = {}
    for j in near:
        for ly in mapped[j][2].result.get("layers", []):
            form = ly.get("mapping")
            if form is not None and form not in per_layer.get(ly["name"], []):
                per_layer.setdefault(ly["name"], []).append(form)
    return replace(task, warm_start=tuple((n, tuple(ms)) for n, ms in per_layer.items()),
                   warm_from=tuple(mapped[j][1] for j in near))


def _weighted_budgets(space: DesignSpace, model: ModelImport, budget: float, weight: str,
                      points: list) -> dict[str, float]:
    """Each design's CPU seconds by ``weight`` (``dse.layer_budget.design_budgets``) over the space's designs within
    its constraints (and ``points``, when some are not the space's), by design key."""
    ds: dict[str, Accelerator] = {}
    own = space.points()
    for pt in own + [p for p in points if p not in own]:
        d = make_design(space, pt)
        if violation(space, d) is None and d.accelerator is not None:
            ds[d.key] = d.accelerator
    return dict(zip(ds, design_budgets(model, list(ds.values()), budget, weight), strict=True))


def run_sweep(space: DesignSpace, model: ModelImport, *, points: list | None = None, engine: str = "local",
              workers: int = 1, address: str | None = None, store_path: str | Path | None = None,
              progress: bool | None = None, strategy: str | None = None, objective: str | None = None,
              time_limit: float | None = None, seed: int = 0, warm_start: bool = False, cpu_clock: bool = False,
              design_budget: float | None = None, warm_neighbours: int = WARM_NEIGHBOURS, prune: bool = False,
              budget_weight: str = "even", on_outcome: Callable[[Outcome], None] | None = None) -> SweepResult:
    """Map ``model`` on the designs of ``space`` (its search's points unless ``points`` is given).
    ``warm_start``: start each design's layers from the nearest mapped designs' mappings (module docstring).
    ``cpu_clock``: the heuristic's ``time_limit`` per layer counts the worker's CPU seconds (a budget that does not
    depend on the load); each design's result then says whether it is proven or its certified gap (``to_dict``).
    ``design_budget``: instead of a limit per layer, the heuristic's CPU seconds for each whole design, split over
    the model's distinct layers by their work (``dse.layer_budget``; implies ``cpu_clock``, needs the heuristic).
    ``budget_weight``: how ``design_budget`` is shared between the designs (``dse.layer_budget``): ``even``, or
    ``unrollings``, each design in proportion to the spatial unrollings the heuristic ranks on it, the average over
    the space's designs within its constraints (all of them, not only ``points``) staying ``design_budget``.
    ``warm_neighbours``: how many of the nearest mapped designs give their mappings to a warm start.
    ``prune``: rule D (``dse.design_bound``): designs are mapped in order of area, and one that a mapped design of
    no more area beats whatever its mappings is listed as ``pruned`` instead of mapped."""
    t0 = time.perf_counter()
    strategy = strategy or space.strategy
    objective = objective or space.objective
    time_limit = time_limit if time_limit is not None else space.time_limit
    pts = points if points is not None else space.points()
    layer_limits: tuple[tuple[str, float], ...] = ()
    per_design: dict[str, float] = {}
    if budget_weight not in BUDGET_WEIGHTS:
        raise SpecError(f"must be one of {', '.join(BUDGET_WEIGHTS)}, got {budget_weight!r}", where="--budget-weight")
    if budget_weight != "even" and design_budget is None:
        raise SpecError("shares the budget per design between the designs; add --design-budget S",
                        where="--budget-weight")
    if design_budget is not None:
        if strategy != "heuristic":
            raise SpecError(f"a budget per design splits the heuristic's CPU seconds over the layers; the strategy is "
                            f"{strategy!r}", where="--design-budget")
        layer_limits = tuple(layer_budgets(model, design_budget).items())
        if budget_weight != "even":
            per_design = _weighted_budgets(space, model, design_budget, budget_weight, pts)
        cpu_clock = True
        time_limit = None
    if warm_neighbours < 1:
        raise SpecError(f"must be a positive integer, got {warm_neighbours}", where="--warm-neighbours")
    outcomes: dict[int, Outcome] = {}
    todo: dict[str, list[int]] = {}            # run key -> indices of the points that give that design
    designs: list[Design] = []
    tasks: list[DesignTask] = []
    finished: list[tuple[int, StoredRun]] = []     # complete designs (point index, result): warm starts
    store = DesignStore(store_path) if store_path is not None else None
    res = SweepResult(space.name, model.name, engine, workers, [], 0.0, str(store_path) if store_path else None,
                      objective=objective)
    bar: SweepProgress | None = None
    try:
        for i, pt in enumerate(pts):
            d = make_design(space, pt)
            designs.append(d)
            why = violation(space, d)
            if why is not None or d.accelerator is None:
                outcomes[i] = Outcome(d, "invalid" if d.error else "excluded", reason=why)
                continue
            budget = design_budget
            limits = layer_limits
            if design_budget is not None and budget_weight != "even":
                budget = per_design[d.key]
                limits = tuple(layer_budgets(model, budget).items())
            key = run_key(d.key, model, strategy, objective, time_limit, seed, warm_start, cpu_clock, budget,
                          warm_neighbours, prune, budget_weight)
            hit = store.get(key) if store is not None else None
            if hit is not None:
                outcomes[i] = _outcome(d, hit, True)
                if hit.complete:
                    finished.append((i, hit))
                if on_outcome:
                    on_outcome(outcomes[i])
                continue
            if key not in todo:
                tasks.append(DesignTask(key, d.accelerator, model, strategy, objective, time_limit, seed,
                                        cpu_clock=cpu_clock, layer_limits=limits, prune=prune,
                                        area_mm2=d.area_mm2))
            todo.setdefault(key, []).append(i)
        show = progress if progress is not None else sys.stderr.isatty()
        bar = SweepProgress(show, len(tasks), f"{space.name}: {model.name}")
        fingerprint = code_fingerprint()

        def done(out: tuple[str, StoredRun, str]) -> None:
            key, run, fp = out
            if fp != fingerprint:
                raise SpecError(f"worker {run.worker} runs different accelmap code (fingerprint {fp}, here "
                                f"{fingerprint}); install the same version on every worker", where="--address")
            if store is not None:
                store.put(key, designs[todo[key][0]].label, model.name, run)
            if run.result.get("pruned_by") is None:      # a design rule D pruned was not mapped
                res.mapped_now += 1
                res.map_seconds.append(run.seconds)
            if run.complete:
                finished.append((todo[key][0], run))
            for i in todo[key]:
                outcomes[i] = _outcome(designs[i], run, False)
                if on_outcome:
                    on_outcome(outcomes[i])
            assert bar is not None
            bar.advance(designs[todo[key][0]].label)

        if tasks or engine not in ("dask", "ray"):   # everything stored: no cluster to reach
            prepare = None
            if prune:
                # Smallest designs first: a design can only be dominated by one of no more area.
                tasks.sort(key=lambda t: t.area_mm2)
            if warm_start or prune:
                index_of = {key: idx[0] for key, idx in todo.items()}

                def prepare(task: DesignTask) -> DesignTask:
                    if warm_start:
                        task = with_warm_start(task, space, pts[index_of[task.key]],
                                               [(pts[i], designs[i].label, r) for i, r in finished], warm_neighbours)
                    if prune:
                        task = replace(task, dominators=tuple(
                            MappedPoint(designs[i].label, designs[i].area_mm2, r.energy_pj, r.latency_cycles)
                            for i, r in finished if designs[i].area_mm2 <= task.area_mm2
                            and r.energy_pj is not None and r.latency_cycles is not None))
                    return task

            run_tasks(engine, map_design, tasks, done, workers=workers, address=address, prepare=prepare)
    finally:
        if bar is not None:
            bar.close()
        if store is not None:
            store.close()
    res.outcomes = [outcomes[i] for i in range(len(pts))]
    res.wall_seconds = time.perf_counter() - t0
    return res
