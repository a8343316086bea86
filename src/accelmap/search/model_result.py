"""What mapping a whole model gives: one ``LayerMapping`` per distinct layer and the model's totals.

Model totals treat layers as running one after another on the accelerator:
energy and latency are summed over every occurrence, and the model's EDP is
total energy times total latency (not the sum of per-layer EDPs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from accelmap.arch.accelerator import Accelerator
from accelmap.cost.model import CostResult
from accelmap.mapping.loopnest import Mapping
from accelmap.search.objective import certificate_gap
from accelmap.workload.models.result import Layer, ModelImport


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
        """The cost of a mapped layer's mapping (a failed layer has none)."""
        if self.result is None:
            raise ValueError(f"layer {self.name} is not mapped: {self.error}")
        return self.result

    @property
    def mapping_found(self) -> Mapping:
        """The mapping of a mapped layer (a failed layer has none)."""
        if self.mapping is None:
            raise ValueError(f"layer {self.name} is not mapped: {self.error}")
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
        return sum((l.cost.energy_total * l.count for l in self.mapped), 0.0)

    @property
    def latency_total(self) -> float:
        return sum((l.cost.latency * l.count for l in self.mapped), 0.0)

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
