"""``search: {method: sunstone}``: Sunstone-arch's co-search of a design space's buffer sizes, layer by layer.

Each parameter of such a space sets one level's capacity (``levels.NAME.capacity``); the space's
designs within its constraints are the configurations (rule B), and ``memory_search.co_search``
finds each distinct layer's best configuration and mapping with rules H, C and S (R and T when asked),
mapping fewer configurations than a grid. Like the thesis (Ng, UBC 2022, Ch. 7), the answer is per layer.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from accelmap.arch.accelerator import Accelerator, adopt_precision
from accelmap.cost.model import evaluate
from accelmap.dse.design import make_design, violation
from accelmap.dse.memory_search import Config, MemorySearch, co_search
from accelmap.dse.space import DesignSpace, searched_levels
from accelmap.errors import SpecError
from accelmap.file_io import write_folder_atomic
from accelmap.mapping.forms import mapping_to_yaml
from accelmap.search.mapper import map_operator
from accelmap.workload.models.result import ModelImport


@dataclass
class LayerSearch:
    name: str
    count: int
    search: MemorySearch
    labels: dict[Config, str]
    energy_pj: float | None = None
    latency_cycles: float | None = None
    mapping: dict | None = None             # the best mapping, in the mapping-file form

    def to_dict(self) -> dict[str, Any]:
        s = self.search
        return {"layer": self.name, "count": self.count,
                "best": self.labels.get(s.best) if s.best is not None else None,
                "best_words": list(s.best) if s.best is not None else None,
                "value": s.value if s.best is not None else None,
                "energy_pj": self.energy_pj, "latency_cycles": self.latency_cycles,
                "configs": s.configs, "mapped": len(s.mapped), "pruned_by_bound": len(s.pruned_by_bound),
                "proven_by_incumbent": len(s.proven_by_incumbent), "dominated": len(s.dominated),
                "pruned_by_tiles": len(s.pruned_by_tiles), "pruned_by_root_bounds": len(s.pruned_by_root_bounds),
                "root_bound_pruned_designs": [self.labels[c] for c in s.pruned_by_root_bounds],
                "raised_by_root_bounds": len(s.raised_by_root_bounds), "bound_cpu_seconds": s.bound_seconds,
                "pruned_fraction": s.pruned_fraction,
                "seconds": s.seconds}


@dataclass
class SunstoneResult:
    space: str
    model: str
    levels: tuple[str, ...]
    objective: str
    layers: list[LayerSearch] = field(default_factory=list)
    excluded: list[tuple[str, str]] = field(default_factory=list)    # (design, reason) outside rule B
    wall_seconds: float = 0.0
    tile_dominance: bool = False            # rule T (uncertified) was applied
    root_bounds: bool = False               # rule R (certified, opt-in) was applied
    root_order: bool = False                # rule R's bounds ordered the configurations (certified, opt-in)

    def to_dict(self) -> dict[str, Any]:
        return {"space": self.space, "model": self.model, "method": "sunstone", "levels": list(self.levels),
                "objective": self.objective, "wall_seconds": self.wall_seconds,
                "tile_dominance": self.tile_dominance, "root_bounds": self.root_bounds, "root_order": self.root_order,
                "excluded": [{"design": d, "reason": r} for d, r in self.excluded],
                "layers": [ly.to_dict() for ly in self.layers]}


def run_sunstone(space: DesignSpace, model: ModelImport, *, strategy: str | None = None,
                 objective: str | None = None, time_limit: float | None = None, seed: int = 0,
                 tile_dominance: bool = False, warm_start: bool = False, root_bounds: bool = False,
                 root_order: bool = False, on_layer: Callable[[LayerSearch], None] | None = None) -> SunstoneResult:
    """Co-search every distinct layer of ``model`` over the buffer sizes of ``space`` (in this process).

    ``tile_dominance`` adds rule T (the thesis' Observation 4), which is not certified: it may lose the optimum.
    ``root_bounds`` adds rule R (certified): a configuration the exact search's own bounds show no better than the
    best value found so far is not mapped. ``root_order`` raises every configuration's bound to rule R's before any
    mapping and visits them in that order (certified), so rule H's stop cuts every configuration those bounds can.
    ``warm_start``: each configuration's search starts from the best mappings of its nearest mapped configurations
    and rule S's incumbent (``co_search``), validated and re-costed by ``map_operator``."""
    t0 = time.perf_counter()
    sl = searched_levels(space)
    strategy = strategy or space.strategy
    objective = objective or space.objective
    time_limit = time_limit if time_limit is not None else space.time_limit
    res = SunstoneResult(space.name, model.name, sl.levels, objective, tile_dominance=tile_dominance,
                         root_bounds=root_bounds, root_order=root_order)
    archs: dict[Config, Accelerator] = {}
    labels: dict[Config, str] = {}
    for pt in space.grid():
        d = make_design(space, pt)
        why = violation(space, d)
        if why is not None or d.accelerator is None:
            res.excluded.append((d.label, why or "invalid"))
            continue
        idx = [p.values.index(v) for p, (_, v) in zip(space.parameters, pt, strict=True)]
        c = tuple(sl.words[k][j] for k, j in enumerate(idx))
        archs[c], labels[c] = d.accelerator, d.label
    if not archs:
        raise SpecError("no design of the space is within its constraints; nothing to search",
                        where=f"{space.source}: constraints")
    configs = sorted(archs)
    first = archs[configs[0]]
    for layer in model.layers:
        op = adopt_precision(layer.operator, first)

        def mapper(c: Config, arch: Accelerator, warm: tuple = (), op=op) -> tuple[float, Any] | None:
            r = map_operator(op, arch, objective, strategy=strategy, time_limit=time_limit, seed=seed,
                             warm_start=warm)
            return (r.best.value, r.best.mapping) if r.best is not None else None

        s = co_search(op, first, sl.levels, sl.words, configs, mapper, objective, archs=archs,
                      tile_dominance=tile_dominance, warm_start=warm_start, root_bounds=root_bounds,
                      root_order=root_order)
        ly = LayerSearch(layer.name, layer.count, s, labels)
        if s.best is not None and s.mapping is not None:
            cost = evaluate(op, archs[s.best], s.mapping)
            ly.energy_pj, ly.latency_cycles = cost.energy_total, cost.latency
            ly.mapping = mapping_to_yaml(s.mapping, archs[s.best])
        res.layers.append(ly)
        if on_layer:
            on_layer(ly)
    res.wall_seconds = time.perf_counter() - t0
    return res


def format_sunstone(res: SunstoneResult) -> str:
    head = (f"Sunstone-arch co-search of {', '.join(res.levels)} on {res.space}, {res.model} "
            f"({len(res.excluded)} designs outside the constraints), objective {res.objective}"
            f"{' (with the uncertified tile-dominance rule)' if res.tile_dominance else ''}"
            f"{' (with the root-bound rule)' if res.root_bounds else ''}"
            f"{' (in the order of the root bounds)' if res.root_order else ''}:")
    lines = [head, f"{'layer':<24} {'best':>12} {'mapped':>7} {'of':>4} {'pruned':>7} {'dominated':>9}  design"]
    for ly in res.layers:
        s = ly.search
        val = f"{s.value:.4g}" if s.best is not None else "not mapped"
        lines.append(f"{ly.name[:24]:<24} {val:>12} {len(s.mapped):>7} {s.configs:>4} "
                     f"{s.configs - len(s.mapped):>7} "
                     f"{len(s.dominated):>9}  "
                     f"{ly.labels.get(s.best, '-') if s.best is not None else '-'}")
    return "\n".join(lines)


def write_sunstone(res: SunstoneResult, out: Path) -> list[Path]:
    """``summary.json`` and each layer's best mapping (``mappings/LAYER.mapping.yaml``), ``out`` replaced whole."""
    def fill(tmp: Path) -> list[str]:
        (tmp / "summary.json").write_text(json.dumps(res.to_dict(), indent=2, default=str))
        files = ["summary.json"]
        (tmp / "mappings").mkdir()
        for ly in res.layers:
            if ly.mapping is not None:
                name = "".join(c if c.isalnum() or c in "._-" else "_" for c in ly.name)
                (tmp / "mappings" / f"{name}.mapping.yaml").write_text(
                    yaml.safe_dump({"design": ly.labels.get(ly.search.best) if ly.search.best else None,
                                    "mapping": ly.mapping}, sort_keys=False))
        files.append("mappings")
        return files

    return write_folder_atomic(out, fill)
