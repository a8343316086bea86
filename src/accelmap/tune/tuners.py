"""Tuners: which configurations to measure next.

* ``random``: uniformly random unmeasured configurations.
* ``autotvm``: AutoTVM's XGBoost tuner (Chen et al., NeurIPS 2018): a gradient-boosted ranking model
  (``rank:pairwise``) on knob features, retrained after every batch, and simulated annealing over the
  grid for the batch the model ranks highest; the first batch is random, and the last 5% of every batch
  is random (epsilon-greedy). Invalid configurations train the model with throughput 0.
* ``validity``: Rieber's validity-driven initialisation (dissertation, ch. 5) on top of ``autotvm``:
  neighbourhood presampling of validity (Algorithm 4), a first batch of half valid, half invalid
  configurations chosen by distance maximisation (Algorithm 5), and biased SA (known-invalid
  configurations scored -1e6, known-valid ones +1). ``validity-no-ssdm`` and ``validity-no-bsa`` are
  the dissertation's ablations. ``validity-plus`` is ours: a validity check is a build, not a
  measurement, so the known-invalid configurations train the model (throughput 0) without being
  measured, and the first batch is all presampled-valid configurations, spread by Algorithm 5.
  ``validity-edge`` is ours too: the full method, every model-guided batch led by an edge walk (the model's
  best-scored configurations one step from the best measured ones, a step being one knob +-1 or a trade of
  two tile sizes; ``ValiditySettings.edge_walk``); ``validity-edge-follow`` also follows a new best inside an
  epoch, and ``validity-edge-exhaust`` builds edge steps before measuring them and leads every step with the
  best's unmeasured edge steps until none is left; ``validity-edge-reshape`` adds steps that keep a tile's area in
  another shape (``edge_neighbours``), and ``validity-edge-reshape-threads`` counts the virtual threads as tile sizes.
  ``validity-edge-plateau`` makes the model's plan diverse (AutoTVM's diversity filter) after an epoch without a new
  best; ``validity-edge-fill`` adds edge steps that set the virtual threads otherwise and fit the tile to the buffers.
* ``optuna``: Optuna's TPE sampler with its ``constraints_func`` (invalid configurations are infeasible
  trials), as a modern constraint-aware baseline.

Every tuner sees only what was measured (and, for ``validity``, the validity checks it made itself).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from accelmap.errors import SpecError
from accelmap.tune.annealing import Annealer, AnnealingSettings
from accelmap.tune.knobs import KnobSpace
from accelmap.tune.measure import Measurement
from accelmap.tune.presample import presample, select_spread

Point = tuple[int, ...]
TUNERS = ("random", "autotvm", "validity", "validity-no-ssdm", "validity-no-bsa", "validity-plus", "validity-edge",
          "validity-edge-follow", "validity-edge-exhaust", "validity-edge-reshape",
          "validity-edge-reshape-threads", "validity-edge-plateau", "validity-edge-fill", "optuna")


@dataclass(frozen=True)
class ModelSettings:
    """The XGBoost ranking model, with AutoTVM's parameters for ``rank`` loss.

    AutoTVM (and so the dissertation) trained with XGBoost 1.x, whose ``rank:pairwise`` paired every
    sample with one random sample of another label and took the plain pairwise logistic gradient.
    XGBoost 2.0 changed the objective's defaults: pairs only among the top 32 of the current ranking
    (``lambdarank_pair_method=topk``), each pair's gradient divided by the score difference
    (``lambdarank_score_normalization``, 3.0) and the leaves normalised by the lambda gradient
    (``lambdarank_normalization``, 2.1). The ``xgboost1`` settings restore the 1.x objective; without
    them the model ranks the top of its own list, not the whole training set."""

    max_rounds: int = 8000        # AutoTVM: up to 8000 rounds, ...
    early_stop: int | None = 20   # ... stopped 20 rounds after the training set's average recall@plan_size
    #                               last improved (None: exactly ``max_rounds`` rounds)
    max_depth: int = 3
    eta: float = 0.3
    gamma: float = 1e-4
    epsilon_greedy: float = 0.05  # share of a batch drawn at random
    xgboost1: bool = True         # XGBoost 1.x's rank:pairwise (above); False: the installed version's defaults
    permutation_features: bool = True   # a loop order as its permutation vector (AutoTVM), else its index


# The model of the protocol's first 20 runs (before the deviations above were fixed): 100 rounds with
# XGBoost 3's rank:pairwise defaults, the loop order's index as its feature. Kept to compare against (benchmarks/tuning.py's "-xgb3" tuners).
XGB3_MODEL = ModelSettings(max_rounds=100, early_stop=None, xgboost1=False, permutation_features=False)


@dataclass(frozen=True)
class ValiditySettings:
    presamples: int = 1000        # the dissertation's |N| = min(1000, |S|)
    parallel: int = 16            # Algorithm 4's n_parallel (not given in the dissertation)
    valid_ratio: float = 0.5      # of the first batch (the nDCG peak the dissertation found)
    invalid_score: float = -1e6   # biased SA
    valid_bonus: float = 1.0
    # ``measure_invalid=False`` only: the largest share of known-invalid rows in the model's training set
    # (None: every known-invalid configuration). The dissertation's model study found the ranking best
    # (nDCG) with half the training samples valid; more invalid ones rank valid against invalid, not
    # valid against valid.
    prior_invalid_share: float | None = None
    # Edge walk (ours): the first ``edge_walk`` points of every model-guided batch are the model's best-scored
    # unmeasured, not-known-invalid configurations one step from the ``edge_bases`` best measured ones, a step
    # being one knob +-1 or a trade of two tile sizes (one split knob +1, another -1): the best configurations
    # fill the buffers (the valid region's edge, the dissertation's Sec. 5.1), and along that edge a larger
    # tile of one dim is paid for with a smaller one of another. 0: off (the dissertation's method).
    edge_walk: int = 0
    edge_bases: int = 3
    # Following an improvement (ours): when a measurement step inside an epoch measures a configuration better
    # than every earlier one, the next step starts with up to ``edge_follow`` of its edge steps (the model's
    # best-scored first), instead of waiting for the next retraining. The model is still retrained once per
    # epoch; this needs a loop that measures an epoch in several steps (AutoTVM's ``n_parallel``). 0: off.
    edge_follow: int = 0
    # follow improvements in the first epoch too, before there is a model: the edge steps ranked by the bias alone
    # (presampled-valid first), ties in random order; the first batch's points not measured by the end of the
    # epoch are dropped (the epoch stays ``plan_size`` trials)
    follow_first_epoch: bool = False
    # Check the edge steps (ours): an edge step is built before it is measured (a validity check, like
    # presampling's, not a trial) and only the ones that build are measured; what the checks learn joins the
    # known valid and invalid configurations (and so the biased SA's scores). The best configurations sit on
    # the valid region's edge, so about half of an edge step's neighbours do not build.
    edge_check: bool = False
    # Exhaust the best's edge (ours): every step, not only the one after an improvement, starts with up to
    # ``edge_follow`` unmeasured edge steps of the best configuration measured so far, until none is left (a
    # local search beside the model's plan): near-ties of the best differ from it by one tile step (a tile of
    # the same area in another shape, one virtual thread), which the model does not rank apart. "late": from the
    # first retraining on; "all": from the first improvement of the first epoch on; None: off.
    edge_exhaust: str | None = None
    # a loop order (a knob of kind "permutation", whose options have no order) steps to any other order, not only to
    # the next index: a near-tie of the best often has the same tiles in another order
    edge_any_order: bool = False
    # a pair of tile sizes steps to any other pair of the same product (``edge_neighbours``' reshape): the tile keeps
    # its area, and so stays on the valid region's edge, in another shape; "threads": the virtual threads too
    edge_reshape: bool | str = False
    # Leaving a plateau (ours, with AutoTVM's diversity filter): when a whole epoch measured no new best, the next
    # plan is the ``plan_size`` most diverse (``submodular_pick``: the most knob values not yet in the plan) of the
    # annealer's ``plateau_diversity x plan_size`` best-scored configurations, instead of its ``plan_size`` best. A
    # model retrained on a plateau ranks the plateau's own kind of configuration first (on a VTA layer: small
    # tiles with two virtual threads), so its plan stays there while the best is a configuration of another kind
    # (one large single-threaded tile) on another part of the valid region's edge. None: off.
    plateau_diversity: float | None = None
    # Fill the buffers after a thread step (ours): the edge steps also hold the base with its virtual threads set to
    # every other setting and its tiles then fitted to the buffers (``ValidityTuner.fill_steps``). One thread fewer
    # leaves a buffer half empty (a thread owns a tile, and with one thread a level is single-buffered), so the
    # configuration of the new setting that lies on the valid region's edge, where the dissertation finds the best
    # ones, has a larger tile, often several tile steps away (on Table 5.1's layer 17: from 7x14 rows x columns of 1
    # output block on 2 x 2 threads, 7.8% above the best, to the best, 8x56 of 4 blocks on one thread).
    edge_fill: bool = False


DEFAULT_ANNEALING = AnnealingSettings()
EDGE_WALK = ValiditySettings(edge_walk=10)   # the ``validity-edge`` tuner: 10 of every model-guided batch of 50
# ``validity-edge-follow``: and every new best followed by 5 of its edge steps, from the first epoch on
EDGE_FOLLOW = ValiditySettings(edge_walk=10, edge_follow=5, follow_first_epoch=True)
# ``validity-edge-exhaust``: ``validity-edge-follow`` measuring only edge steps that build, every step led by the
# best's unmeasured edge steps until none is left (from the first improvement on), a loop order stepping to any other
EDGE_EXHAUST = replace(EDGE_FOLLOW, edge_check=True, edge_exhaust="all", edge_any_order=True)
# ``validity-edge-reshape``: ``validity-edge-exhaust`` whose edge steps also reshape a tile at constant area
EDGE_RESHAPE = replace(EDGE_EXHAUST, edge_reshape=True)
# ``validity-edge-reshape-threads``: and the reshape over the virtual threads too
EDGE_RESHAPE_THREADS = replace(EDGE_EXHAUST, edge_reshape="threads")
# ``validity-edge-plateau``: and a plan made diverse after an epoch without a new best (AutoTVM's filter ratio 2)
EDGE_PLATEAU = replace(EDGE_RESHAPE_THREADS, plateau_diversity=2.0)
# ``validity-edge-fill``: ``validity-edge-reshape-threads`` whose edge steps also fill the buffers after a thread step
EDGE_FILL = replace(EDGE_RESHAPE_THREADS, edge_fill=True)


def submodular_pick(knobs: np.ndarray, n_pick: int, scores: np.ndarray | None = None,
                    knob_weight: float = 1.0) -> list[int]:
    """AutoTVM's ``submodular_pick`` (Apache TVM, ``autotvm/tuner/model_based_tuner.py``): greedily the rows of
    ``knobs`` (one configuration's option indices a row) maximising the sum of their ``scores`` plus ``knob_weight``
    for every knob value not yet in the picked set (a monotone submodular objective); ties go to the earliest row.
    AutoTVM's diversity filter calls it with every score 0, so the order of the rows (best-scored first) only
    breaks ties."""
    knobs = np.asarray(knobs, dtype=np.int64)
    n = len(knobs)
    gain = np.zeros(n) if scores is None else np.asarray(scores, dtype=np.float64).copy()
    seen: list[set[int]] = [set() for _ in range(knobs.shape[1])] if n else []
    left = np.ones(n, dtype=bool)
    picked: list[int] = []
    for _ in range(min(n_pick, n)):
        new = np.array([sum(int(v) not in seen[i] for i, v in enumerate(row)) for row in knobs])
        delta = np.where(left, gain + knob_weight * new, -np.inf)
        x = int(np.argmax(delta))        # the first of equal maxima, as AutoTVM's strict ``>``
        picked.append(x)
        left[x] = False
        for i, v in enumerate(knobs[x]):
            seen[i].add(int(v))
    return picked


def edge_neighbours(space: KnobSpace, base: Point, *, any_order: bool = False, reshape: bool | str = False) -> list[Point]:
    """The configurations one edge step from ``base`` (in this order, repeats possible): one knob +-1 (a Manhattan
    neighbour); with ``any_order`` a loop order (a knob of kind "permutation") set to any other order; a trade of two
    tile sizes (one split knob's option index +1, another's -1); with ``reshape`` two tile sizes set to any other
    pair of options whose product is the same at every tile level (the tile keeps its area in another shape).

    Why a reshape: the valid region's edge is where a buffer is full (the dissertation's Sec. 5.1: the best
    configurations lie on it), and a buffer's use grows with the product of the tile sizes, so the edge is, in
    the log of the tile sizes, close to a plane of constant sum. An index trade moves along that plane only where
    the two knobs' divisors grow at the same rate; a reshape moves along it exactly, by any ratio (a 3x20 tile of
    rows and columns to 6x10, 12x5 or 4x15), so that a run on a near-best tile reaches the best tile of the same
    area in one step instead of several steps off the edge. With ``reshape="threads"`` the knobs of kind "threads"
    join the pairs: a virtual thread owns a tile of its own, so two threads of a tile fill a buffer as one thread of a
    tile twice as large (on a target with ``cores`` that knob is of that kind too, and a reshape over it is one more
    step, not one of constant area)."""
    steps = list(space.neighbours(base))
    if any_order:
        steps += [base[:a] + (v,) + base[a + 1:] for a, knob in enumerate(space.knobs) if knob.kind == "permutation"
                  for v in range(space.shape[a]) if abs(v - base[a]) > 1]
    splits = [a for a, knob in enumerate(space.knobs) if knob.kind == "split" and space.shape[a] > 1]
    for i in splits:
        for j in splits:
            if i != j and base[i] + 1 < space.shape[i] and base[j] >= 1:
                trade = list(base)
                trade[i] += 1
                trade[j] -= 1
                steps.append(tuple(trade))
    if reshape:
        sized = splits + ([a for a, knob in enumerate(space.knobs) if knob.kind == "threads" and space.shape[a] > 1]
                          if reshape == "threads" else [])
        for x, i in enumerate(sized):
            for j in sized[x + 1:]:
                steps += _reshapes(space, base, i, j)
    return steps


def _levels(option) -> tuple[int, ...]:
    """A split option's factors per tile level (one level: the factor itself)."""
    return tuple(option) if isinstance(option, tuple) else (int(option),)


def _reshapes(space: KnobSpace, base: Point, i: int, j: int) -> list[Point]:
    """``base`` with knobs ``i`` and ``j`` set to every other pair of options whose factors multiply to the same
    product at every tile level."""
    area = [a * b for a, b in zip(_levels(space.knobs[i].options[base[i]]),
                                  _levels(space.knobs[j].options[base[j]]), strict=True)]
    index_j = {_levels(o): c for c, o in enumerate(space.knobs[j].options)}
    out = []
    for c_i, option in enumerate(space.knobs[i].options):
        f_i = _levels(option)
        if c_i == base[i] or any(p % f for p, f in zip(area, f_i, strict=True)):
            continue
        c_j = index_j.get(tuple(p // f for p, f in zip(area, f_i, strict=True)))
        if c_j is not None:
            step = list(base)
            step[i], step[j] = c_i, c_j
            out.append(tuple(step))
    return out


class Tuner:
    name = "tuner"

    def __init__(self, space: KnobSpace, seed: int):
        self.space = space
        self.rng = np.random.default_rng(seed)
        self.visited: set[int] = set()

    def _random_unvisited(self, n: int, exclude: set[int] | frozenset[int] = frozenset()) -> list[Point]:
        """Up to ``n`` distinct uniformly random points neither visited nor in ``exclude``."""
        out: list[Point] = []
        taken: set[int] = set()

        def used(f: int) -> bool:
            return f in self.visited or f in exclude or f in taken

        while len(out) < n:
            busy = len(self.visited) + len(exclude) + len(taken)
            if busy >= self.space.size:
                rest = [i for i in range(self.space.size) if not used(i)]
                if not rest:
                    break
                f = int(self.rng.choice(rest))
            else:
                f = int(self.rng.integers(self.space.size))
                if used(f):
                    if busy > 0.5 * self.space.size:   # rejection would be slow: draw from what is left
                        rest = [i for i in range(self.space.size) if not used(i)]
                        if not rest:
                            break
                        f = int(self.rng.choice(rest))
                    else:
                        continue
            taken.add(f)
            out.append(self.space.point(f))
        return out

    def next_batch(self, n: int) -> list[Point]:
        raise NotImplementedError

    def update(self, points: list[Point], results: list[Measurement]) -> None:
        for p in points:
            self.visited.add(self.space.flat(p))


class RandomTuner(Tuner):
    name = "random"

    def next_batch(self, n: int) -> list[Point]:
        return self._random_unvisited(n)


class ModelTuner(Tuner):
    """AutoTVM's model-based tuner with an XGBoost ranking model and simulated annealing."""

    name = "autotvm"

    REDRAWS = 100   # random first batches drawn at most while looking for one with a valid configuration

    def __init__(self, space: KnobSpace, seed: int, plan_size: int = 50,
                 model: ModelSettings = ModelSettings(), annealing: AnnealingSettings = DEFAULT_ANNEALING,
                 redraw_invalid_first: Callable[[Point], bool] | None = None,
                 extra_features: Callable[[np.ndarray], np.ndarray] | None = None):
        super().__init__(space, seed)
        # columns the model sees besides the knob features (e.g. ``ScheduleTemplate.footprint_features``)
        self.extra_features = extra_features
        # The dissertation's baseline redraws a random first batch that holds no valid configuration
        # (Sec. 5.3; its protocol knows every configuration's validity): given the check, so does this one.
        self.redraw_invalid_first = redraw_invalid_first
        self.redrawn = 0
        self.plan_size = plan_size
        self.model = model
        self.annealer = Annealer(space, annealing, self.rng)
        self.xs: list[int] = []
        self.ys: list[float] = []
        self.trials: list[int] = []
        self.trial_pt = 0
        self.train_count = 0
        self.seed = seed
        self.first: list[Point] = []
        self.measured = 0                 # trials told to the tuner (the retraining schedule counts these)
        self.prior_xs: list[int] = []     # training rows that were never measured (known-invalid, throughput 0)
        self.random_fill = 0              # points of model-guided batches drawn at random (SA had no more)
        self.rounds: list[int] = []       # boosting rounds of every retraining
        self.predict: Callable[[np.ndarray], np.ndarray] | None = None   # the last model trained

    def first_batch(self, n: int) -> list[Point]:
        batch = self._random_unvisited(n)
        check = self.redraw_invalid_first
        while check is not None and self.redrawn < self.REDRAWS and not any(check(p) for p in batch):
            self.redrawn += 1
            batch = self._random_unvisited(n)
        return batch

    def bias(self) -> np.ndarray | None:
        return None

    def next_batch(self, n: int) -> list[Point]:
        if not self.xs and not self.first:
            # the whole first epoch at once, measured in as many steps as the loop asks for (AutoTVM's loop
            # measures ``n_parallel`` at a time; the epoch is ``plan_size``)
            self.first = self.first_batch(max(n, self.plan_size))
        if self.first:
            batch, self.first = self.first[:n], self.first[n:]
            return batch
        out: list[Point] = []
        taken: set[int] = set()
        random_tail = int(self.model.epsilon_greedy * self.plan_size)
        while len(out) < n and len(self.visited) + len(taken) < self.space.size:
            while self.trial_pt < len(self.trials) and (self.trials[self.trial_pt] in self.visited
                                                        or self.trials[self.trial_pt] in taken):
                self.trial_pt += 1
            if self.trial_pt >= len(self.trials) - random_tail:
                extra = self._random_unvisited(1, taken)
                if not extra:
                    break
                p = extra[0]
                self.random_fill += 1
            else:
                p = self.space.point(self.trials[self.trial_pt])
                self.trial_pt += 1
            taken.add(self.space.flat(p))
            out.append(p)
        return out

    def update(self, points: list[Point], results: list[Measurement]) -> None:
        super().update(points, results)
        for p, r in zip(points, results, strict=True):
            self.xs.append(self.space.flat(p))
            self.ys.append(1.0 / r.cost if r.valid and r.cost else 0.0)
        self.measured += len(points)
        if self.measured >= self.plan_size * (self.train_count + 1) and max(self.ys) > 0:
            predict = self._fit()
            self.predict = predict
            self.trials = self._plan(predict)
            self.trial_pt = 0
            self.train_count += 1
            self.first = []     # an epoch is over: first-batch points it did not reach are not measured

    def diversity_ratio(self) -> float | None:
        """AutoTVM's ``diversity_filter_ratio`` for the plan being made (None: the annealer's best, as AutoTVM's
        default)."""
        return None

    def _plan(self, predict: Callable[[np.ndarray], np.ndarray]) -> list[int]:
        """The next epoch's configurations: the annealer's ``plan_size`` best-scored, or with a diversity filter
        ratio r the ``plan_size`` most diverse of its ``r x plan_size`` best (AutoTVM's ``ModelBasedTuner``)."""
        ratio = self.diversity_ratio()
        if not ratio:
            return self.annealer.find_maximums(predict, self.plan_size, self.visited, self.bias())
        candidates = self.annealer.find_maximums(predict, int(round(self.plan_size * ratio)), self.visited,
                                                 self.bias())
        if not candidates:
            return candidates
        rows = self.space.all_points()[np.array(candidates, dtype=np.int64)]
        return [candidates[i] for i in submodular_pick(rows, self.plan_size)]

    def _fit(self) -> Callable[[np.ndarray], np.ndarray]:
        import xgboost as xgb

        measured = set(self.xs)
        prior = [f for f in self.prior_xs if f not in measured]
        pts = np.array([self.space.point(f) for f in self.xs + prior], dtype=np.int64)
        y = np.array(self.ys + [0.0] * len(prior), dtype=np.float64)
        y = y / y.max()
        dtrain = xgb.DMatrix(np.ascontiguousarray(self._features(pts), dtype=np.float32), label=y, nthread=1)
        params = {"max_depth": self.model.max_depth, "gamma": self.model.gamma, "min_child_weight": 1,
                  "subsample": 1.0, "eta": self.model.eta, "lambda": 1.0, "alpha": 0.0,
                  "objective": "rank:pairwise", "nthread": 1, "seed": int(self.rng.integers(2 ** 31)),
                  "verbosity": 0}
        if self.model.xgboost1:
            params.update(XGBOOST1_PAIRWISE)
        if self.model.early_stop is None:
            booster = xgb.train(params, dtrain, num_boost_round=self.model.max_rounds)
        else:
            # AutoTVM's fit: early stopping on the training set's a-recall@plan_size; the booster keeps
            # every round it trained (AutoTVM predicts with all of them)
            params["disable_default_eval_metric"] = 1
            booster = xgb.train(params, dtrain, num_boost_round=self.model.max_rounds, evals=[(dtrain, "tr")],
                                custom_metric=average_recall_metric(self.plan_size), maximize=True,
                                early_stopping_rounds=self.model.early_stop, verbose_eval=False)
        self.rounds.append(booster.num_boosted_rounds())
        return lambda points: booster.inplace_predict(self._features(points))

    def _features(self, points: np.ndarray) -> np.ndarray:
        knob = self.space.features(points, self.model.permutation_features)
        if self.extra_features is None:
            return knob
        return np.concatenate([knob, self.extra_features(points)], axis=1)


# XGBoost 1.x's rank:pairwise in XGBoost >= 2's parameters: one random pair per sample, the plain
# pairwise gradient (no division by the score difference, no lambda normalisation of the leaves)
XGBOOST1_PAIRWISE = {"lambdarank_pair_method": "mean", "lambdarank_num_pair_per_sample": 1,
                     "lambdarank_normalization": False, "lambdarank_score_normalization": False}


def average_recall(preds: np.ndarray, labels: np.ndarray, n: int) -> float:
    """AutoTVM's ``xgb_average_recalln_curve_score``: the mean over the model's first ``n`` picks of the
    recall curve, entry i being the share of the first i picks (sic: i, not i + 1) whose true rank is at
    most i, over i + 1."""
    order = np.argsort(preds)[::-1]
    ranks = np.empty(len(labels), dtype=np.int64)
    ranks[np.argsort(-labels[order])] = np.arange(len(labels))
    m = min(n, len(ranks))
    curve = [np.count_nonzero(ranks[:i] <= i) / (i + 1) for i in range(m)]
    return float(np.sum(curve)) / n


def average_recall_metric(n: int):
    def metric(preds: np.ndarray, dtrain) -> tuple[str, float]:
        return f"a-recall@{n}", average_recall(preds, dtrain.get_label(), n)
    return metric


class ValidityTuner(ModelTuner):
    """The dissertation's method: presampling, distance-maximising first batch, biased SA."""

    name = "validity"

    def __init__(self, space: KnobSpace, seed: int, is_valid: Callable[[Point], bool], *, ssdm: bool = True,
                 bsa: bool = True, measure_invalid: bool = True, plan_size: int = 50,
                 validity: ValiditySettings = ValiditySettings(),
                 model: ModelSettings = ModelSettings(), annealing: AnnealingSettings = DEFAULT_ANNEALING,
                 extra_features: Callable[[np.ndarray], np.ndarray] | None = None):
        super().__init__(space, seed, plan_size, model, annealing, extra_features=extra_features)
        self.is_valid = is_valid
        self.ssdm = ssdm
        self.bsa = bsa
        self.validity = validity
        self.measure_invalid = measure_invalid
        if not ssdm:
            self.name = "validity-no-ssdm"
        elif not bsa:
            self.name = "validity-no-bsa"
        elif not measure_invalid:
            self.name = "validity-plus"
        self.presampled = presample(space, is_valid, validity.presamples, validity.parallel, self.rng)
        self.known_invalid: set[int] = {space.flat(p) for p, ok in self.presampled.items() if not ok}
        self.known_valid: set[int] = {space.flat(p) for p, ok in self.presampled.items() if ok}
        if not measure_invalid:
            # A validity check is a build, not a measurement: known-invalid points train the model as
            # throughput 0 without spending trials on them.
            self.prior_xs = sorted(self.known_invalid)
        # the order the known-invalid rows join a capped training set in: presampling's (no random draw, so
        # the other tuners' streams stay as they were), fixed, so a retraining keeps the last one's rows
        self.prior_order = [space.flat(p) for p, ok in self.presampled.items() if not ok]
        self.costs: list[float | None] = []   # of the measured configurations, in the order of ``xs``
        self.edge_epoch = 0                   # the retraining whose epoch the edge walk last led
        self.improved: Point | None = None    # a new best measured in the last step, to follow (``edge_follow``)
        self.best_point: Point | None = None  # the best configuration measured so far
        self.ever_improved = False            # a measurement has bettered an earlier valid one
        self.best_cost = float("inf")
        self.best_trial = 0                   # how many measurements had been told when the best was measured
        self.plateau_plans = 0                # plans made diverse on a plateau (``plateau_diversity``)
        self.fills: dict[Point, list[Point]] = {}   # ``fill_steps`` of the bases met so far
        self.edge_checks = 0                  # validity checks of edge steps (beyond presampling's)

    def first_batch(self, n: int) -> list[Point]:
        valid = [p for p, ok in self.presampled.items() if ok]
        invalid = [p for p, ok in self.presampled.items() if not ok]
        ratio = self.validity.valid_ratio if self.measure_invalid else 1.0
        n_valid = min(len(valid), round(n * ratio))
        n_invalid = min(len(invalid), n - n_valid)
        n_valid = min(len(valid), n - n_invalid)
        if self.ssdm:
            chosen = select_spread(valid, n_valid, self.rng) + select_spread(invalid, n_invalid, self.rng)
        else:
            chosen = self._pick(valid, n_valid) + self._pick(invalid, n_invalid)
        chosen = chosen + self._random_unvisited(n - len(chosen), {self.space.flat(p) for p in chosen})
        order = self.rng.permutation(len(chosen))
        return [chosen[int(i)] for i in order]

    def _pick(self, points: list[Point], k: int) -> list[Point]:
        """``k`` of ``points`` uniformly at random (the ablation without distance maximisation)."""
        if k <= 0:
            return []
        return [points[int(i)] for i in self.rng.choice(len(points), size=k, replace=False)]

    def update(self, points: list[Point], results: list[Measurement]) -> None:
        for p, r in zip(points, results, strict=True):
            (self.known_valid if r.valid else self.known_invalid).add(self.space.flat(p))
            self.costs.append(r.cost if r.valid else None)
            if r.valid and r.cost is not None and r.cost < self.best_cost:
                # the first valid measurement is no improvement to follow: there was nothing before it
                self.improved = p if self.best_cost < float("inf") else None
                self.best_point = p
                self.ever_improved = self.ever_improved or self.improved is not None
                self.best_cost = r.cost
                self.best_trial = len(self.costs)
        super().update(points, results)

    def diversity_ratio(self) -> float | None:
        ratio = self.validity.plateau_diversity
        if ratio is None or not self.costs or len(self.costs) - self.best_trial < self.plan_size:
            return None
        self.plateau_plans += 1
        return ratio

    def next_batch(self, n: int) -> list[Point]:
        follow = self.validity.edge_follow
        exhaust = self.validity.edge_exhaust
        base = self.improved or (self.best_point if exhaust == "all" and self.ever_improved else None)
        if self.predict is None and self.xs and self.validity.follow_first_epoch and follow > 0 and base is not None:
            walk = self.edge_steps(min(n, follow), [base])
            self.improved = None
            taken = {self.space.flat(q) for q in walk}
            self.first = [p for p in self.first if self.space.flat(p) not in taken]
            self.visited.update(taken)
            return walk + super().next_batch(n - len(walk))
        if self.predict is None or self.first:
            return super().next_batch(n)
        lead: list[Point] = []
        if self.validity.edge_walk > 0 and self.edge_epoch != self.train_count:
            # the first step of an epoch: the edge walk from the best measured ones
            self.edge_epoch = self.train_count
            lead = self.edge_steps(min(n, self.validity.edge_walk))
        elif self.validity.edge_follow > 0 and self.improved is not None:
            lead = self.edge_steps(min(n, self.validity.edge_follow), [self.improved])
        elif self.validity.edge_follow > 0 and exhaust is not None and self.best_point is not None:
            lead = self.edge_steps(min(n, self.validity.edge_follow), [self.best_point])
        self.improved = None
        self.visited.update(self.space.flat(q) for q in lead)     # the model's picks skip them
        return lead + super().next_batch(n - len(lead))

    def edge_steps(self, k: int, bases: list[Point] | None = None) -> list[Point]:
        """Up to ``k`` unmeasured, not-known-invalid configurations one edge step from ``bases`` (by default the
        ``edge_bases`` best measured ones), the model's (biased) best-scored first."""
        if bases is None:
            ranked = sorted((c, f) for f, c in zip(self.xs, self.costs, strict=True) if c is not None)
            bases = [self.space.point(f) for _, f in ranked[:self.validity.edge_bases]]
        cand: dict[int, None] = {}
        for b in bases:
            for q in edge_neighbours(self.space, b, any_order=self.validity.edge_any_order,
                                     reshape=self.validity.edge_reshape) + \
                    (self.fill_steps(b) if self.validity.edge_fill else []):
                f = self.space.flat(q)
                if f not in self.visited and f not in self.known_invalid:
                    cand[f] = None
        if not cand:
            return []
        flat = np.fromiter(cand, dtype=np.int64)
        if self.predict is not None:
            score = self.predict(self.space.all_points()[flat]).astype(np.float64)
        else:   # before the first model: the bias alone, ties in random order
            flat = flat[self.rng.permutation(len(flat))]
            score = np.zeros(len(flat))
        bias = self.bias()
        if bias is not None:
            score = score + bias[flat]
        order = np.argsort(-score, kind="stable")
        if not self.validity.edge_check:
            return [self.space.point(int(flat[i])) for i in order[:k]]
        out: list[Point] = []
        for i in order:
            p = self.space.point(int(flat[i]))
            if not self._builds(p):
                continue
            out.append(p)
            if len(out) == k:
                break
        return out

    def _builds(self, p: Point) -> bool:
        """Whether ``p`` builds: known from presampling, a measurement or an earlier check, else checked now (a
        validity check like presampling's, not a trial; counted in ``edge_checks``)."""
        f = self.space.flat(p)
        if f in self.known_valid:
            return True
        if f in self.known_invalid:
            return False
        self.edge_checks += 1
        ok = self.is_valid(p)
        (self.known_valid if ok else self.known_invalid).add(f)
        return ok

    def _best_scored(self, points: list[Point]) -> Point:
        """The model's best-scored of ``points`` (before the first model the first listed; ties to the first)."""
        if self.predict is None or len(points) == 1:
            return points[0]
        return points[int(np.argmax(self.predict(np.array(points, dtype=np.int64))))]

    def fill_steps(self, base: Point) -> list[Point]:
        """``base`` with its virtual threads (the knobs of kind "threads") set to every other setting, each then
        fitted to the buffers: while it does not build, one split knob one option smaller; then, while a tile one
        option larger in one split knob builds, that one; the model's best-scored step first each time. The result
        lies on the valid region's edge: a larger tile in any one dim does not build (``ValiditySettings.edge_fill``).
        Computed once per base."""
        if base in self.fills:
            return self.fills[base]
        shape = self.space.shape
        threads = [a for a, knob in enumerate(self.space.knobs) if knob.kind == "threads" and shape[a] > 1]
        splits = [a for a, knob in enumerate(self.space.knobs) if knob.kind == "split" and shape[a] > 1]
        out: list[Point] = []
        for setting in itertools.product(*(range(shape[a]) for a in threads)):
            if all(base[a] == v for a, v in zip(threads, setting, strict=True)):
                continue
            q = list(base)
            for a, v in zip(threads, setting, strict=True):
                q[a] = v
            point: Point | None = tuple(q)
            while point is not None and not self._builds(point):
                smaller = [point[:a] + (point[a] - 1,) + point[a + 1:] for a in splits if point[a] > 0]
                point = self._best_scored(smaller) if smaller else None
            if point is None:
                continue
            while True:
                larger = [r for r in (point[:a] + (point[a] + 1,) + point[a + 1:] for a in splits
                                      if point[a] + 1 < shape[a]) if self._builds(r)]
                if not larger:
                    break
                point = self._best_scored(larger)
            out.append(point)
        self.fills[base] = out
        return out

    def _fit(self) -> Callable[[np.ndarray], np.ndarray]:
        share = self.validity.prior_invalid_share
        if not self.measure_invalid and share is not None:
            valid = sum(1 for y in self.ys if y > 0)
            invalid = len(self.ys) - valid
            # priors p with (invalid + p) / (valid + invalid + p) <= share
            room = max(0, int(share * (valid + invalid) / (1 - share)) - invalid) if share < 1 else len(self.known_invalid)
            measured = set(self.xs)
            self.prior_xs = [f for f in self.prior_order if f not in measured][:room]
        return super()._fit()

    def bias(self) -> np.ndarray | None:
        if not self.bsa:
            return None
        b = np.zeros(self.space.size, dtype=np.float64)
        if self.known_valid:
            b[np.fromiter(self.known_valid, dtype=np.int64)] = self.validity.valid_bonus
        if self.known_invalid:
            b[np.fromiter(self.known_invalid, dtype=np.int64)] = self.validity.invalid_score
        return b


class OptunaTuner(Tuner):
    """Optuna's TPE sampler, ask-and-tell, invalid configurations as infeasible trials."""

    name = "optuna"
    MAX_REPEATS = 20   # asks in a row that land on measured points before a random point is taken instead
    INFEASIBLE_VALUE = 1e30   # TPE ranks infeasible trials below feasible ones; the value need only be finite

    def __init__(self, space: KnobSpace, seed: int):
        super().__init__(space, seed)
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.optuna = optuna
        sampler = optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True)
        self.study = optuna.create_study(direction="minimize", sampler=sampler)
        self.pending: dict[int, list] = {}
        self.known: dict[int, tuple[float, float]] = {}

    def _ask_point(self):
        trial = self.study.ask()
        point = tuple(trial.suggest_int(k.name, 0, len(k.options) - 1) for k in self.space.knobs)
        return trial, point

    def next_batch(self, n: int) -> list[Point]:
        out: list[Point] = []
        taken: set[int] = set()
        repeats = 0
        while len(out) < n and len(self.visited) + len(taken) < self.space.size:
            trial, point = self._ask_point()
            f = self.space.flat(point)
            if f in self.known or f in taken:
                if f in self.known:
                    value, violation = self.known[f]
                    trial.set_constraint("valid", violation)
                    self.study.tell(trial, value)
                else:
                    self.pending.setdefault(f, []).append(trial)
                repeats += 1
                if repeats < self.MAX_REPEATS:
                    continue
                fresh = self._random_unvisited(1, taken)
                if not fresh:
                    break
                self.study.enqueue_trial({k.name: v for k, v in zip(self.space.knobs, fresh[0], strict=True)})
                trial, point = self._ask_point()
                f, repeats = self.space.flat(point), 0
            taken.add(f)
            self.pending.setdefault(f, []).append(trial)
            out.append(point)
        return out

    def update(self, points: list[Point], results: list[Measurement]) -> None:
        super().update(points, results)
        for p, r in zip(points, results, strict=True):
            f = self.space.flat(p)
            value, violation = (float(r.cost), 0.0) if r.valid and r.cost else (self.INFEASIBLE_VALUE, 1.0)
            self.known[f] = (value, violation)
            for trial in self.pending.pop(f, []):
                trial.set_constraint("valid", violation)
                self.study.tell(trial, value)


def _require(module: str, tuner: str) -> None:
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise SpecError(f"the {tuner} tuner needs the {module} package: pip install 'accelmap[tune]'")


def make_tuner(name: str, space: KnobSpace, seed: int, is_valid: Callable[[Point], bool] | None = None,
               plan_size: int = 50) -> Tuner:
    if name in ("autotvm",) or name.startswith("validity"):
        _require("xgboost", name)
    if name == "optuna":
        _require("optuna", name)
    if name == "random":
        return RandomTuner(space, seed)
    if name == "autotvm":
        return ModelTuner(space, seed, plan_size)
    if name.startswith("validity"):
        if is_valid is None:
            raise ValueError("the validity tuner needs a validity check")
        edge_settings = {"validity-edge": EDGE_WALK, "validity-edge-follow": EDGE_FOLLOW,
                         "validity-edge-exhaust": EDGE_EXHAUST, "validity-edge-reshape": EDGE_RESHAPE,
                         "validity-edge-reshape-threads": EDGE_RESHAPE_THREADS, "validity-edge-plateau": EDGE_PLATEAU,
                         "validity-edge-fill": EDGE_FILL}
        if name in edge_settings:
            edge = ValidityTuner(space, seed, is_valid, plan_size=plan_size, validity=edge_settings[name])
            edge.name = name
            return edge
        return ValidityTuner(space, seed, is_valid, ssdm=name != "validity-no-ssdm", bsa=name != "validity-no-bsa",
                             measure_invalid=name != "validity-plus", plan_size=plan_size)
    if name == "optuna":
        return OptunaTuner(space, seed)
    raise ValueError(f"tuner {name!r} unknown; use one of {', '.join(TUNERS)}")
