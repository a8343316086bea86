"""The AutoTVM baseline as the dissertation ran it: XGBoost 1.x's rank:pairwise, AutoTVM's early stopping
on the training set's average recall, its annealer's random walk, and the redraw of a first batch without
a valid configuration."""

from __future__ import annotations

import numpy as np
import pytest

from accelmap.tune.annealing import Annealer, AnnealingSettings
from accelmap.tune.knobs import Knob, KnobSpace
from accelmap.tune.measure import Measurement
from accelmap.tune.tuners import XGB3_MODEL, ModelSettings, ModelTuner, average_recall


def test_average_recall_is_autotvms_curve():
    labels = np.array([3.0, 1.0, 2.0, 0.0])
    # the model's order 0, 2, 3, 1 puts true ranks 0, 1, 3, 2 first: entry i counts ranks[:i] <= i
    good = np.array([0.9, 0.1, 0.5, 0.3])
    assert average_recall(good, labels, 4) == pytest.approx((0 + 1 / 2 + 2 / 3 + 3 / 4) / 4)
    assert average_recall(good, labels, 2) == pytest.approx((0 + 1 / 2) / 2)
    # the reverse order: true ranks 2, 3, 1, 0
    assert average_recall(-good, labels, 4) == pytest.approx((0 + 0 + 1 / 3 + 3 / 4) / 4)


def _trained(model):
    space = KnobSpace((Knob("x", tuple(range(1, 13)), "split"), Knob("y", tuple(range(1, 13)), "split")))
    tuner = ModelTuner(space, 0, plan_size=20, model=model)
    pts = [space.point(int(f)) for f in np.random.default_rng(1).choice(space.size, 40, replace=False)]
    # throughput grows towards (11, 11); a third of the points invalid (throughput 0)
    tuner.update(pts, [Measurement(p, (p[0] + p[1]) % 3 != 0, 30.0 - p[0] - p[1]) for p in pts])
    return tuner


def test_the_model_stops_early_on_training_recall_and_the_first_runs_model_does_not():
    fixed = _trained(ModelSettings())
    assert fixed.train_count == 1 and 21 <= fixed.rounds[0] < 8000      # 20 rounds after the best, at least
    assert _trained(XGB3_MODEL).rounds == [100]


def test_annealers_walk_weighs_knobs_as_autotvm_does():
    space = KnobSpace((Knob("a", (1,)), Knob("b", (1, 2)), Knob("c", (1, 2, 4, 8))))
    pts = np.zeros((40_000, 3), dtype=np.int64)
    moved = Annealer(space, AnnealingSettings(), np.random.default_rng(0))._walk(pts) != pts
    assert (moved.sum(axis=1) == 1).all()                  # every point moves, in exactly one knob
    # knob weights (d - 1) / d: 0, 1/2, 3/4, normalised
    assert moved.mean(axis=0) == pytest.approx([0.0, 0.4, 0.6], abs=0.01)
    first = Annealer(space, AnnealingSettings(uniform_knobs=True), np.random.default_rng(0))._walk(pts) != pts
    assert first.mean(axis=0) == pytest.approx([0.0, 1 / 3, 1 / 3], abs=0.01)   # a third of the walks stay


def test_the_baseline_redraws_a_first_batch_without_a_valid_configuration():
    space = KnobSpace((Knob("x", tuple(range(1, 13)), "split"), Knob("y", tuple(range(1, 13)), "split")))
    only = (5, 5)
    plain = ModelTuner(space, 3, plan_size=10).next_batch(10)
    assert only not in plain                                # this seed's random batch misses it
    tuner = ModelTuner(space, 3, plan_size=10, redraw_invalid_first=lambda p: p == only)
    batch = tuner.next_batch(10)
    assert only in batch and tuner.redrawn > 0 and len(set(batch)) == 10


def test_a_loop_order_is_a_permutation_vector_to_the_model():
    space = KnobSpace((Knob("tile", (1, 2, 4), "split"),
                       Knob("reorder", ("a", "b"), "permutation", ((0, 1, 2), (2, 0, 1))),
                       Knob("nthread", (1, 2), "threads")))
    got = space.features(np.array([[2, 1, 1], [0, 0, 0]]))
    assert got.tolist() == [[2.0, 2.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 2.0, 0.0]]
    # the protocol's first runs saw the order's index
    assert space.features(np.array([[2, 1, 1]]), permutations=False).tolist() == [[2.0, 1.0, 1.0]]
    with pytest.raises(ValueError, match="one feature vector"):
        Knob("reorder", ("a", "b"), "permutation", ((0, 1), (1, 0, 2)))
