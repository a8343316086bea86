"""Rule D: a design left unmapped because a design already mapped beats every mapping it could have.

A design's certified bounds over every mapping of every layer: per distinct layer i (c_i occurrences) the
bounds the mapper proves optimality with (``search.spatial.certified_lower_bound``: objective b_i, energy e_i
and latency l_i, each over every unrolling, tiling, order and bypass choice), so the model's energy
E = sum_i c_i E_i >= sum_i c_i e_i = E_lb and latency L >= sum_i c_i l_i = L_lb, and its EDP

    E L >= max(E_lb L_lb, (sum_i c_i sqrt(b_i))^2)

(the second by Cauchy-Schwarz, ``dse.certificate``; neither form is always the larger). A design d is
*dominated* by a mapped design d' when area(d') <= area(d) and EDP(d') <= EDP_lb(d) (within float rounding,
``TOLERANCE``), one of them strictly:
whatever mappings d's layers get, d' has no more area and no more EDP, so d is on no EDP-area Pareto front
and not the lowest-EDP design. The sweep then skips mapping d (``run_sweep(..., prune=True)``). Whether d is
also off the energy-latency-area front (E(d') <= E_lb, L(d') <= L_lb, area(d') <= area(d)) is recorded: a pruned
design that is not may be missing from that front, and the summary counts those.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from accelmap.arch.accelerator import Accelerator, adopt_precision
from accelmap.search.bounds import chain_options
from accelmap.search.space import Constraints, keep_options
from accelmap.search.spatial import certified_lower_bound
from accelmap.workload.models.result import ModelImport


@dataclass(frozen=True)
class DesignBounds:
    energy: float          # pJ, over every mapping of every layer (occurrences counted)
    latency: float         # cycles
    edp: float


@dataclass(frozen=True)
class MappedPoint:
    """What rule D needs of a mapped design."""
    label: str
    area_mm2: float
    energy: float
    latency: float

    @property
    def edp(self) -> float:
        return self.energy * self.latency


def design_bounds(model: ModelImport, arch: Accelerator) -> DesignBounds:
    """The certified energy, latency and EDP bounds of ``model`` on ``arch`` (module docstring). Layers are
    costed at the accelerator's precision, as the sweep maps them (``map_model``)."""
    energy = latency = root_sum = 0.0
    cons = Constraints()
    for layer in model.layers:
        op = adopt_precision(layer.operator, arch)
        b, e, lat = certified_lower_bound(op, arch, cons, chain_options(op, keep_options(op, arch, cons)), "edp")
        energy += layer.count * e
        latency += layer.count * lat
        root_sum += layer.count * math.sqrt(max(b, 0.0))
    return DesignBounds(energy, latency, max(energy * latency, root_sum ** 2))


# A bound met within float rounding counts as met, as the mapper's proofs of optimality count it: a layer whose
# proven optimum is its bound sums to a model bound a few ulps below the same model's total.
TOLERANCE = 1e-9


def dominator(bounds: DesignBounds, area_mm2: float, mapped: tuple[MappedPoint, ...]) -> MappedPoint | None:
    """The mapped design of least EDP among those that dominate a design of ``bounds`` and ``area_mm2`` on the
    EDP-area front (no more area, EDP at most the bound (``TOLERANCE``), one strictly), or None."""
    edp = bounds.edp * (1 + TOLERANCE)
    # Strictly better in one (the bound itself, not its rounding allowance): an equal design is not dominated.
    hits = [p for p in mapped if p.area_mm2 <= area_mm2 and p.edp <= edp
            and (p.area_mm2 < area_mm2 or p.edp < bounds.edp)]
    return min(hits, key=lambda p: (p.edp, p.area_mm2)) if hits else None


def off_three_metric_front(bounds: DesignBounds, area_mm2: float, mapped: tuple[MappedPoint, ...]) -> bool:
    """Whether a mapped design also rules the design out of the energy-latency-area front."""
    return any(p.area_mm2 <= area_mm2 and p.energy <= bounds.energy and p.latency <= bounds.latency and (
        p.area_mm2 < area_mm2 or p.energy < bounds.energy or p.latency < bounds.latency) for p in mapped)
