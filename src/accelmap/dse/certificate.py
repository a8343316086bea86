"""What a design's result is known to be: proven optimal, or best found with a certified gap.

Each layer's search returns its mapping's value and a lower bound of the objective over every mapping
of that layer (``search.mapper.map_operator``; proven layers have bound = value). A design's model
totals are energy E = sum_i c_i E_i and latency L = sum_i c_i L_i over its distinct layers i (c_i
occurrences each), so a bound on the model's objective follows from the layers' bounds b_i:

* energy or latency: sum_i c_i b_i;
* EDP: E L >= (sum_i c_i sqrt(E_i L_i))^2 (Cauchy-Schwarz on the vectors sqrt(c_i E_i), sqrt(c_i L_i))
  >= (sum_i c_i sqrt(b_i))^2, since every layer's E_i L_i >= b_i.

The gap (value / bound - 1) says how much better than the found mapping set any mapping set of that design
can be; a sweep that stops its searches early (a time or CPU budget) reports it per design rather than
presenting best-found designs as optima.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DesignCertificate:
    lower_bound: float | None       # of the design's objective over every mapping of every layer (None: unknown)
    proven: bool                    # every layer proven optimal
    proven_layers: int
    layers: int

    def gap(self, value: float) -> float | None:
        """value / bound - 1 (0 when proven; None without a bound)."""
        if self.proven:
            return 0.0
        if self.lower_bound is None or not self.lower_bound > 0 or not math.isfinite(value):
            return None
        return max(0.0, value / self.lower_bound - 1.0)


def design_certificate(layers: list[dict[str, Any]], objective: str) -> DesignCertificate:
    """The certificate of a design from its stored layer results (``count``, ``proven_optimal``,
    ``lower_bound``, and ``energy_pj``/``latency_cycles`` of one occurrence for proven layers)."""
    proven = sum(1 for ly in layers if ly.get("proven_optimal"))
    bounds = []
    for ly in layers:
        b = ly.get("lower_bound")
        if ly.get("proven_optimal") and ly.get("energy_pj") is not None:
            e, lat = ly["energy_pj"], ly["latency_cycles"]
            b = e * lat if objective == "edp" else e if objective == "energy" else lat
        if b is None or not b > 0:
            return DesignCertificate(None, False, proven, len(layers))
        bounds.append((ly.get("count", 1), b))
    if objective == "edp":
        lb = sum(c * math.sqrt(b) for c, b in bounds) ** 2
    else:
        lb = sum(c * b for c, b in bounds)
    return DesignCertificate(lb, proven == len(layers) and bool(layers), proven, len(layers))
