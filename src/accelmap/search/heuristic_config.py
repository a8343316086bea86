"""The heuristic mapper's knobs, named in one place.

Each field bounds how much of some part of the space the heuristic looks at
(``heuristic.py`` describes the steps). None of them makes a result wrong,
only more or less likely to be the best; the certificate's lower bound does
not depend on them. The whole config is part of the cache key
(``cache.result_key``), so a run with other knobs never reads a result
another config found.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class HeuristicConfig:
    # Step 1, spatial candidates (spatial.py).
    max_dims_per_axis: int = 2          # dims one axis unrolls at most (ZigZag's and Timeloop's array specs use 1-2)
    # Candidates using fewer PEs than this fraction of the fullest one's are left out (each halving of the PEs
    # doubles the MAC schedule). The certificate's bound still covers them, so a better one left out shows as a gap.
    min_pe_fraction: float = 1 / 8
    spatial_candidates: int = 256       # candidates ranked by their lower bound, best first
    tied_unrollings: int = 1            # unrollings of one bound ranked at its place (the others after every bound)
    max_probes: int = 48                # candidates probed at most
    probe_share: float = 0.4            # share of the time limit the probes may use
    probe_rows_per_level: int = 150     # maximal tilings a probe keeps per level
    probe_random_tilings: int = 200     # random tilings a probe adds
    # Step 2, tilings of the best probed candidates (tilings.py).
    full_searches: int = 2              # best probed candidates searched in full
    # Bypass choices (fullest first) searched per candidate; the climbs' bypass toggles reach the others. Two, not
    # one: the BERT-base layer 2.2-17.5% better whole-model EDP on eyeriss_like, simba_like and ascend_like, ResNet-18
    # 0.02-0.36% better on five presets, the README job's time unchanged; eight find a little more at 1.2-1.9x the
    # CPU (docs/mapper.md, "Knobs and logging").
    bypass_choices: int = 2
    rows_per_level: int = 4000          # maximal tilings kept per level (a deterministic sample beyond)
    random_tilings: int = 500           # random tilings sampled per (candidate, bypass choice)
    starts_per_group: int = 2           # best maximal and best random tilings kept as climb starts, each
    greedy_unrollings: int = 3          # probed candidates given LOMA's greedy allocation per operand priority
    greedy_bypass_choices: int = 2      # bypass choices (fullest first) the greedy allocation uses
    # Step 3, the climb. Each step is one call of the vectorized model (about 11 ms of overhead plus 0.1 ms per
    # row on ZigZag's ascend_like), so the number of climbs and of orders tried sets the search's time. Cut from 4
    # plain + 2 packing climbs, toggles in every climb and every order, ZigZag's ResNet-18 on its three machines
    # kept every layer at least as good as ZigZag's mapping at 3-4x less CPU (docs/mapper.md).
    climbs: int = 1                     # best starts climbed
    climb_steps: int = 60               # steps a climb takes at most
    packing_climbs: int = 1             # best starts of the other packings (tilings.Packing) climbed besides
    toggle_climbs: int = 1              # best climb ends that climb on with one-level bypass toggles too
    climb_orders: int = 2               # per-level orders a climb tries at a local optimum (best seeds' orders first)
    # Step 4, exact orders and the scalar model.
    exact_candidates: int = 4           # best candidates given exact per-level orders
    orders_per_candidate: int = 4       # order combinations costed per candidate
    # The time limit's clock: False, wall clock (what a user waits); True, the search process's CPU seconds, so a
    # result does not depend on the machine's load (benchmarks on a shared machine).
    cpu_clock: bool = False

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            least = 0 if name.startswith("greedy_") or name in ("packing_climbs", "toggle_climbs") else 1
            if isinstance(value, int) and not isinstance(value, bool) and value < least:
                raise ValueError(f"HeuristicConfig.{name} must be an integer >= {least}, got {value}")
        if not 0.0 <= self.min_pe_fraction <= 1.0 or not 0.0 < self.probe_share <= 1.0:
            raise ValueError("HeuristicConfig: min_pe_fraction must be within 0..1 and probe_share within (0, 1]")

    def key(self) -> str:
        """A canonical text of every knob, for the cache key. A knob added later is left out at its default, so
        that the results cached before it was added (found with that default) stay valid."""
        knobs = asdict(self)
        for name, default in _LATER_KNOBS.items():
            if knobs[name] == default:
                del knobs[name]
        return json.dumps(knobs, sort_keys=True)


# Knobs added after results were cached, with the default every earlier search had.
_LATER_KNOBS = {"tied_unrollings": 1}


DEFAULT_HEURISTIC = HeuristicConfig()
