"""One entry point for mapping an operator: pick a strategy, return the best mappings."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from accelmap.arch.accelerator import Accelerator
from accelmap.cost.latency import shared_port_crossings
from accelmap.cost.model import CostResult, evaluate
from accelmap.errors import AccelmapError, MappingError, SpecError
from accelmap.mapping.loopnest import Mapping
from accelmap.mapping.validate import check_precision
from accelmap.search.certificate import RELAXED, certificate
from accelmap.search.exact import search_exact
from accelmap.search.exhaustive import search_exhaustive, space_size
from accelmap.search.heuristic_config import DEFAULT_HEURISTIC, HeuristicConfig
from accelmap.search.objective import Found, certificate_gap, check_objective, collector
from accelmap.search.optimal import SearchStats
from accelmap.search.space import Constraints, infeasibility
from accelmap.workload.operator import Operator

log = logging.getLogger(__name__)

STRATEGIES = ("auto", "optimal", "exhaustive", "heuristic", "random")
# Spaces up to this many tilings x bypass choices are searched exactly by default
# (the exact search visits a few thousand nodes per second), within AUTO_EXACT_SECONDS.
EXACT_SPACE_LIMIT = 30_000
AUTO_EXACT_SECONDS = 30.0
# Seconds a strategy runs when no time limit is given.
DEFAULT_TIME_LIMITS = {"optimal": 60.0, "exhaustive": 120.0, "heuristic": 60.0, "random": 60.0}
# Share of a strategy's time limit its certificate's full bound may take (what it does not use goes to the search);
# past it the certificate is the relaxed bound (certificate.py). The full bound takes 0.01-0.6 s of CPU on most
# layers of the bundled models, up to 4.3 s on ascend_like's BERT attention.scores.
CERTIFICATE_SHARE = 0.5
# Relative slack under which a best found value counts as equal to its lower bound (float rounding).
_PROOF_TOLERANCE = 1e-9


@dataclass
class MapResult:
    operator: str
    accelerator: str
    objective: str
    strategy: str
    results: list[Found]
    stats: SearchStats
    proven_optimal: bool          # the search covered the whole space, or the best meets the lower bound
    notes: list[str] = field(default_factory=list)
    lower_bound: float | None = None   # of the objective, over every mapping the constraints allow
    timed_out: bool = False
    bound_kind: str | None = None      # certificate.FULL or certificate.RELAXED (None: no bound, a Pareto front)

    @property
    def best(self) -> Found | None:
        return self.results[0] if self.results else None

    @property
    def gap(self) -> float | None:
        """How far the best found may be above the optimum: best / lower bound - 1 (0 when proven)."""
        return certificate_gap(self.best.value if self.best else None, self.lower_bound, self.proven_optimal)


def _heuristic_front(op: Operator, arch: Accelerator, cons: Constraints, limit: float, seed: int,
                     config: HeuristicConfig):
    """The energy-latency front of the mappings found by three heuristic searches, ranking by energy,
    by EDP and by latency (a third of the time each): each reaches its own end of the front."""
    from accelmap.search.heuristic import search_heuristic

    front = collector("pareto", 1)
    total = SearchStats()
    for rank_by in ("energy", "edp", "latency"):
        res, stats = search_heuristic(op, arch, "pareto", constraints=cons, time_limit=limit / 3, seed=seed,
                                      config=config, rank_by=rank_by)
        for f in res:
            front.offer(f.result, f.mapping)
        total.evaluated += stats.evaluated
        total.seconds += stats.seconds
        total.extra["timed_out"] = total.extra.get("timed_out", False) or stats.extra.get("timed_out", False)
    return front.results(), total


def valid_warm_start(op: Operator, arch: Accelerator, cons: Constraints,
                      mappings: tuple[Mapping, ...]) -> tuple[tuple[CostResult, Mapping], ...]:
    """The warm-start mappings that are valid on ``arch`` under ``cons``, each costed there (the others dropped:
    a mapping of another design may overflow this one's buffers or unroll past its array)."""
    out = []
    for m in mappings:
        if cons.violation(m, arch) is not None:
            continue
        try:
            out.append((evaluate(op, arch, m), m))
        except AccelmapError:
            continue
    return tuple(out)


def map_operator(op: Operator, arch: Accelerator, objective: str = "edp", *, k: int = 1,
                 constraints: Constraints | None = None, strategy: str = "auto",
                 time_limit: float | None = None, seed: int = 0,
                 heuristic_config: HeuristicConfig = DEFAULT_HEURISTIC, imperfect: bool | str = False,
                 warm_start: tuple[Mapping, ...] = (), lower_bound: bool = True) -> MapResult:
    """Best ``k`` mappings of ``op`` on ``arch`` by ``objective`` (or the Pareto front).

    Every strategy stops at ``time_limit`` seconds (``DEFAULT_TIME_LIMITS`` when None). The result
    carries a lower bound of the objective over every mapping the constraints allow (none for the
    Pareto front) and says whether the best is proven optimal. ``heuristic_config`` sets the
    heuristic's knobs. ``imperfect``: the exact searches (``optimal``, ``exhaustive``) and ``random`` cover
    imperfect factorizations too, Ruby-style (True: any tile size, the last tile partial; "spatial": only the
    spatial loops, Ruby-S), and a proof of optimality then holds over that larger space; the heuristic
    already searches padded unrollings. ``warm_start``: mappings known elsewhere (e.g. the best of a neighbouring
    design in a sweep); each is validated and costed on ``arch`` under the constraints, and the valid ones are the
    exact search's initial incumbents (its bounds prune against them from the first node) and candidates of every
    other strategy's answer; ``stats.extra["warm_start_valid"]`` counts them.
    ``lower_bound`` False skips the certified bound (a caller that uses only the mapping, such as
    a fused group's tile searches, saves its time; the result then carries none and proves only what the search did).
    Raises MappingError when the operator
    cannot be mapped at all (precision not supported, a level too small for its smallest footprint),
    which is proven before any search.
    """
    check_objective(objective)
    if strategy not in STRATEGIES:
        raise SpecError(f"unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}", where="--strategy")
    if time_limit is not None and not time_limit > 0:
        raise SpecError(f"must be positive seconds, got {time_limit}", where="--time-limit")
    cons = constraints or Constraints()
    cons.check(op, arch)
    check_precision(op, arch)
    why = infeasibility(op, arch, cons)
    if why is not None:
        raise MappingError(why)
    notes: list[str] = []
    padded = any(op.sizes[d] % b for ax in cons.spatial.values() for d, b in ax.items() if d in op.sizes)
    # The exact search searches a padded unrolling over Ruby-S tiles (rule E2); the exhaustive one enumerates
    # perfect factorizations unless told to enumerate imperfect ones.
    if strategy == "exhaustive" and padded and not imperfect:
        raise SpecError(f"the exhaustive search covers perfect factorizations only, and the spatial constraints "
                        f"pad {op.name}; use --strategy optimal, --strategy heuristic or --imperfect spatial",
                        where="--strategy")
    if strategy == "auto":
        size = space_size(op, arch)
        strategy = "optimal" if size <= EXACT_SPACE_LIMIT else "heuristic"
        if strategy == "optimal" and time_limit is None:
            time_limit = AUTO_EXACT_SECONDS
        log.info("%s: strategy auto -> %s (%d tilings x bypass choices, %s the exact search's %d)", op.name,
                 strategy, size, "within" if size <= EXACT_SPACE_LIMIT else "over", EXACT_SPACE_LIMIT)
    if imperfect and strategy == "heuristic":
        notes.append("imperfect factorization is not searched by the heuristic (it covers perfect factors and padded "
                     "unrollings); use --strategy optimal or random for it")
    limit = time_limit if time_limit is not None else DEFAULT_TIME_LIMITS[strategy]
    # The time limit covers everything the strategy does: the certificate first (its full bound within
    # CERTIFICATE_SHARE of the limit, else the relaxed one), then the search in what is left. The clock is the
    # heuristic's (CPU seconds with ``cpu_clock``); the other searches read time.perf_counter.
    clock = time.process_time if heuristic_config.cpu_clock else time.perf_counter
    t0 = clock()
    cert = None
    if objective != "pareto" and lower_bound:
        cert = certificate(op, arch, cons, objective, deadline=t0 + CERTIFICATE_SHARE * limit, clock=clock)
    left = max(limit - (clock() - t0), 1e-6)      # (a search reads a limit of 0 as none)
    warm = valid_warm_start(op, arch, cons, warm_start)
    log.info("%s on %s: %s search, %s, time limit %g s (%.3g s left after the certificate)", op.name, arch.name,
             strategy, objective, limit, left)
    if strategy == "exhaustive":
        res, stats = search_exhaustive(op, arch, objective, k=k, constraints=cons, time_limit=left,
                                       imperfect=bool(imperfect))
        complete = not stats.extra.get("timed_out", False)
    elif strategy == "optimal":
        res, stats = search_exact(op, arch, objective, k=k, constraints=cons, time_limit=left, seed=seed,
                                  imperfect=imperfect, incumbents=warm, heuristic_config=heuristic_config)
        complete = bool(stats.extra.get("proven"))
        if stats.extra.get("orders_restricted"):
            notes.append("a level had more loops than orders are enumerated for: optimality not proven")
        if stats.extra.get("spatial_every_padded") is False:
            notes.append("too many padded spatial unrollings to enumerate every bound (only the fewest-rounds one "
                         "was searched): optimality not proven over the others")
    elif strategy == "heuristic" and objective == "pareto":
        res, stats = _heuristic_front(op, arch, cons, left, seed, heuristic_config)
        complete = False
    elif strategy == "heuristic":
        from accelmap.search.heuristic import search_heuristic
        res, stats = search_heuristic(op, arch, objective, k=k, constraints=cons, time_limit=left, seed=seed,
                                      config=heuristic_config)
        complete = False
    else:
        from accelmap.search.baselines import search_random
        res, stats = search_random(op, arch, objective, k=k, constraints=cons, seed=seed, time_limit=left,
                                   imperfect=bool(imperfect))
        complete = False
    if warm and strategy != "optimal":
        merged = collector(objective, k)
        for f in res:
            merged.offer(f.result, f.mapping)
        for r, m in warm:
            merged.offer(r, m)
        res = merged.results()
    stats.extra["warm_start_valid"] = len(warm)
    timed_out = bool(stats.extra.get("timed_out", False))
    # The exact searches cover perfect factorizations (imperfect ones too when asked); their completeness
    # proves optimality there.
    proven = complete and strategy in ("optimal", "exhaustive")
    lower = None
    if cert is not None:
        lower = cert.value
        stats.extra["seconds_certificate"] = cert.seconds
        if res and k == 1 and res[0].value <= lower * (1 + _PROOF_TOLERANCE):
            proven = True
        log.info("%s: best %s, lower bound %.4g (%s, %.3g s)%s", op.name, f"{res[0].value:.4g}" if res else "none",
                 lower, cert.kind, cert.seconds, ", proven optimal" if proven else "")
        if cert.kind == RELAXED:
            notes.append(f"the certificate's full bound {cert.why}: the lower bound is the relaxed one (every fan-out "
                         f"at its full size), weaker")
    if timed_out:
        log.info("%s: the %s search stopped at its time limit of %g s", op.name, strategy, limit)
        notes.append(f"time limit {limit:g} s reached" + (": best found, optimality not proven" if res else
                                                           " before any valid mapping was found (not proven "
                                                           "infeasible; a longer --time-limit may find one)"))
    elif not res:
        notes.append("no valid mapping: every candidate overflowed a buffer or broke a constraint" if complete
                     else f"the {strategy} search found no valid mapping (not proven infeasible)")
    if res and shared_port_crossings(op, arch, res[0].mapping) == {"input", "output"}:
        # The format accepts this machine, but the model's latency is optimistic there (up to 35.5% below the
        # simulator on random vta_like mappings): said, not hidden.
        notes.append("the best mapping moves a double-buffered level's inputs and its output through one shared port: "
                     "the model's latency can be below the simulator's there (accelmap simulate runs it)")
    return MapResult(op.name, arch.name, objective, strategy, res, stats, proven, notes, lower, timed_out,
                     None if cert is None else cert.kind)
