"""A design's mapping budget split over its model's distinct layers.

With a budget per design (``run_sweep(..., design_budget=S)``, ``accelmap dse --design-budget S``) the heuristic
gets S CPU seconds for the whole model, and each distinct layer a share of them: an equal floor
(``FLOOR_SHARE`` of an even split) plus the rest in proportion to the layer's work in the model, its occurrences
x MACs. Why by work: the model's energy and latency are sums over its layers (``dse.certificate``), and a
layer's part of each grows with its MACs, so a percent lost on a layer that does a quarter of the model's MACs
costs the design far more than a percent on the classifier (ResNet-18: 0.03% of the MACs). The floor keeps a
real search on every layer: the heuristic's result on a small layer still counts in the totals, and below a few
hundredths of a second it returns its first candidates only.
"""

from __future__ import annotations

from accelmap.errors import SpecError
from accelmap.workload.models.result import ModelImport

# Share of an even split every distinct layer gets whatever its size.
FLOOR_SHARE = 0.25


def layer_budgets(model: ModelImport, budget: float) -> dict[str, float]:
    """CPU seconds per distinct layer (by name) summing to ``budget``: ``FLOOR_SHARE`` x budget / layers each,
    the rest by occurrences x MACs."""
    if not budget > 0:
        raise SpecError(f"must be positive CPU seconds per design, got {budget}", where="--design-budget")
    layers = model.layers
    if not layers:
        return {}
    floor = FLOOR_SHARE * budget / len(layers)
    work = [l.macs for l in layers]      # occurrences x MACs each
    total = sum(work)
    rest = budget - floor * len(layers)
    return {l.name: floor + (rest * w / total if total else rest / len(layers)) for l, w in zip(layers, work, strict=True)}
