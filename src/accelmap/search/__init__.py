"""Which mapping: exhaustive reference, pruned optimal search, baselines, objectives."""

from accelmap.search.exhaustive import search_exhaustive, space_size
from accelmap.search.optimal import SearchStats, search_optimal
from accelmap.search.space import Constraints, constraints_from_yaml

__all__ = ["search_optimal", "search_exhaustive", "space_size", "SearchStats", "Constraints",
           "constraints_from_yaml"]
