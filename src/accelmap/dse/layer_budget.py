"""A design's mapping budget split over its model's distinct layers.

With a budget per design (``run_sweep(..., design_budget=S)``, ``accelmap dse --design-budget S``) the heuristic
gets S CPU seconds for the whole model, and each distinct layer a share of them: an equal floor
(``FLOOR_SHARE`` of an even split) plus the rest in proportion to the layer's work in the model, its occurrences
x MACs. Why by work: the model's energy and latency are sums over its layers (``dse.certificate``), and a
layer's part of each grows with its MACs, so a percent lost on a layer that does a quarter of the model's MACs
costs the design far more than a percent on the classifier (ResNet-18: 0.03% of the MACs). The floor keeps a
real search on every layer: the heuristic's result on a small layer still counts in the totals, and below a few
hundredths of a second it returns its first candidates only.

How the sweep's seconds are shared between its designs (``run_sweep(..., budget_weight=...)``,
``--budget-weight``): ``even``, S each (the default), or ``unrollings``, in proportion to the spatial unrollings
the heuristic ranks on the design (``unrolling_candidates``) with the same total over the space's designs. Why:
the heuristic's first step probes those unrollings one by one within a share of its time limit, and a larger PE
array has more of them, so at an even budget a 32x32 array's best unrolling is the likelier one to go unprobed.
"""

from __future__ import annotations

from accelmap.arch.accelerator import Accelerator
from accelmap.errors import SpecError
from accelmap.search.heuristic_config import DEFAULT_HEURISTIC, HeuristicConfig
from accelmap.search.space import Constraints
from accelmap.search.spatial import enumerate_spatial
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


# How a sweep's design budget is shared between its designs (module docstring).
BUDGET_WEIGHTS = ("even", "unrollings")


def unrolling_candidates(model: ModelImport, arch: Accelerator, config: HeuristicConfig = DEFAULT_HEURISTIC,
                         memo: dict | None = None) -> int:
    """The spatial unrollings the heuristic chooses its candidates from on ``arch``, summed over the model's
    distinct layers: every unrolling of up to ``config.max_dims_per_axis`` dims per axis using at least
    ``config.min_pe_fraction`` of the fullest one's PEs, which ``search.spatial.ranked_spatial`` ranks by their bound
    before keeping the best ``config.spatial_candidates``. (Not that cut: on ResNet-18 nearly every layer has more
    than 256 on every array of the 504-design space, so the cut count hardly grows with the array, while the count
    it is cut from grows fourfold from 8x8 to 32x32, and with it the near-ties the probes must tell apart.) They
    depend on the fan-outs and on which levels hold what and are shared along which axis, not on sizes or
    energies, so ``memo`` keeps them by that structure: a sweep over buffer sizes enumerates them once per array."""
    key = repr([(lv.holds, lv.shared_axes, lv.fanout.axes if lv.fanout else None) for lv in arch.levels])
    if memo is not None and key in memo:
        return memo[key]
    n = sum(len(enumerate_spatial(l.operator, arch, Constraints(), max_dims=config.max_dims_per_axis,
                                  min_pe_fraction=config.min_pe_fraction).pes) for l in model.layers)
    if memo is not None:
        memo[key] = n
    return n


def design_budgets(model: ModelImport, archs: list[Accelerator], budget: float, weight: str) -> list[float]:
    """CPU seconds for each of ``archs`` (the designs a sweep may map), ``budget`` on average: the same for each
    (``even``), or in proportion to its ``unrolling_candidates`` (``unrollings``)."""
    if weight not in BUDGET_WEIGHTS:
        raise SpecError(f"must be one of {', '.join(BUDGET_WEIGHTS)}, got {weight!r}", where="--budget-weight")
    if weight == "even" or not archs:
        return [budget] * len(archs)
    memo: dict = {}
    w = [max(1, unrolling_candidates(model, a, memo=memo)) for a in archs]
    return [budget * len(w) * x / sum(w) for x in w]
