"""How much: exact access counts, energy, latency, utilization, EDP."""

from accelmap.cost.model import CostResult, access_counts, evaluate
from accelmap.heap_trim import keep_freed_heap

# Every call of the model allocates and frees many small arrays: keep the freed heap (``heap_trim``).
keep_freed_heap()

__all__ = ["CostResult", "access_counts", "evaluate"]
