"""How much: exact access counts, energy, latency, utilization, EDP."""

from accelmap.cost.model import CostResult, access_counts, evaluate

__all__ = ["CostResult", "access_counts", "evaluate"]
