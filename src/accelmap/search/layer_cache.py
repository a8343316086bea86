"""A layer's result in the SQLite cache: read back only if it still costs what it did, and stored.

A cached mapping is re-evaluated by the current cost model; if its objective
moved (the model changed, or the row was edited) the row is dropped and the
layer searched again, so the cache can never serve a stale number.
"""

from __future__ import annotations

from dataclasses import replace

from accelmap.arch.accelerator import Accelerator
from accelmap.cost.model import evaluate
from accelmap.errors import AccelmapError
from accelmap.mapping.forms import mapping_from_yaml, mapping_to_yaml
from accelmap.search.cache import CachedResult, ResultCache
from accelmap.search.model_result import LayerMapping
from accelmap.workload.models.result import Layer
from accelmap.workload.operator import Operator

# Relative difference beyond which a cached objective no longer matches a fresh evaluation.
_STALE_TOLERANCE = 1e-9


def cached_layer(cache: ResultCache, key: str, layer: Layer, op: Operator, arch: Accelerator,
                objective: str) -> LayerMapping | None:
    hit = cache.get(key)
    if hit is None:
        return None
    lay = replace(layer, operator=op)
    if hit.error is not None:
        return LayerMapping(lay, None, None, hit.strategy, hit.proven_optimal, True, hit.search_seconds,
                            hit.evaluated, hit.notes, hit.error, hit.lower_bound, hit.timed_out, objective)
    try:
        m = mapping_from_yaml(hit.mapping, arch, "cache")
        r = evaluate(op, arch, m)
    except AccelmapError:
        cache.delete(key)
        return None
    fresh = r.objective("edp" if objective == "pareto" else objective)
    if hit.value is None or abs(fresh - hit.value) > _STALE_TOLERANCE * max(abs(fresh), abs(hit.value), 1.0):
        cache.delete(key)
        return None
    front = []
    try:
        for fy in hit.front:
            fm = mapping_from_yaml(fy, arch, "cache")
            front.append((evaluate(op, arch, fm), fm))
    except AccelmapError:
        cache.delete(key)
        return None
    return LayerMapping(lay, r, m, hit.strategy, hit.proven_optimal, True, hit.search_seconds, hit.evaluated,
                        hit.notes, None, hit.lower_bound, hit.timed_out, objective, tuple(front))


def store_layer(cache: ResultCache, key: str, lm: LayerMapping, arch: Accelerator) -> None:
    """Cache a layer's outcome (a result or a deterministic failure) under ``key``."""
    value = lm.value if lm.ok else None
    stored = CachedResult(mapping_to_yaml(lm.mapping, arch) if lm.mapping else None, value,
                          lm.strategy, lm.proven_optimal, lm.search_seconds, lm.evaluated,
                          lm.notes, lm.error, lm.lower_bound, lm.timed_out)
    summary = None if lm.result is None else {
        "energy_pj": lm.result.energy_total, "latency_cycles": lm.result.latency,
        "edp": lm.result.edp, "utilization": lm.result.utilization,
        "front": [mapping_to_yaml(fm, arch) for _, fm in lm.front]}
    cache.put(key, lm.layer.operator.name, arch.name, lm.objective, stored, summary)
