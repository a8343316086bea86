"""Variants of the validity-driven tuner: the model's footprint features and a training set whose
known-invalid rows are capped at the dissertation's 0.5 valid ratio (exact counts on small spaces)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from accelmap.arch.accelerator import adopt_precision
from accelmap.arch.presets import get_accelerator
from accelmap.tune.knobs import Knob, KnobSpace
from accelmap.tune.measure import Measurement
from accelmap.tune.template import ScheduleTemplate
from accelmap.tune.tuners import ValiditySettings, ValidityTuner
from accelmap.workload.constructors import conv2d

VTA = get_accelerator("vta_like")


def test_footprint_features_are_the_log2_tile_blocks_of_each_operand():
    op = adopt_precision(conv2d("t", n=2, k=32, h=4, w=4, r=3, s=3, c=32, stride=1, padding=1), VTA)
    t = ScheduleTemplate(op, VTA)
    pts = t.space.all_points()
    got = t.footprint_features(pts)
    names = [X.name for X in op.operands]
    assert got.shape == (t.space.size, len(names))
    for p, row in zip(pts, got, strict=True):
        v = t.space.values(tuple(int(i) for i in p))
        lg = {k: math.log2(v[k]) for k in ("tile_b", "tile_co", "tile_ci", "tile_h", "tile_w", "oc_nthread",
                                           "h_nthread")}
        # output (N, K, P, Q), input (N, C, P, Q and the window), weights (K, C and the window); each
        # virtual thread owns a tile of the operands indexed by the dim it splits (oc: K, h: P)
        want = {"O": lg["tile_b"] + lg["tile_co"] + lg["tile_h"] + lg["tile_w"] + lg["oc_nthread"] + lg["h_nthread"],
                "I": lg["tile_b"] + lg["tile_ci"] + lg["tile_h"] + lg["tile_w"] + lg["h_nthread"],
                "W": lg["tile_co"] + lg["tile_ci"] + lg["oc_nthread"]}
        assert [row[names.index(n)] for n in ("O", "I", "W")] == [want["O"], want["I"], want["W"]]


def _strip_space():
    """A 10x10 grid, valid where the option index of x is at most 2 (x in 1..3: 30 of 100 points)."""
    space = KnobSpace((Knob("x", tuple(range(1, 11)), "split"), Knob("y", tuple(range(1, 11)), "split")))
    return space, (lambda p: p[0] <= 2)


def test_capped_priors_keep_half_the_training_set_valid():
    space, is_valid = _strip_space()
    tuner = ValidityTuner(space, 0, is_valid, measure_invalid=False, plan_size=10,
                          validity=ValiditySettings(presamples=100, prior_invalid_share=0.5))
    assert len(tuner.known_invalid) == 70 and len(tuner.known_valid) == 30      # the whole grid presampled
    batch = tuner.next_batch(10)
    assert all(is_valid(p) for p in batch)                  # all valid: no trial on a known-invalid point
    tuner.update(batch, [Measurement(p, True, 100.0 - sum(p)) for p in batch])
    # 10 valid measured, none invalid: 10 known-invalid rows join, in presampling's order
    order = [space.flat(p) for p, ok in tuner.presampled.items() if not ok]
    assert tuner.prior_xs == order[:10]
    batch = tuner.next_batch(10)
    results = [Measurement(p, is_valid(p), 100.0 - sum(p) if is_valid(p) else None) for p in batch]
    tuner.update(batch, results)
    valid = sum(y > 0 for y in tuner.ys)
    invalid = len(tuner.ys) - valid
    assert len(tuner.prior_xs) == max(0, valid - invalid)
    assert not set(tuner.prior_xs) & set(tuner.xs)          # a row is measured or a prior, not both


def test_uncapped_priors_are_every_known_invalid_point():
    space, is_valid = _strip_space()
    tuner = ValidityTuner(space, 0, is_valid, measure_invalid=False, plan_size=10,
                          validity=ValiditySettings(presamples=100))
    batch = tuner.next_batch(10)
    tuner.update(batch, [Measurement(p, True, 100.0 - sum(p)) for p in batch])
    assert set(tuner.prior_xs) == tuner.known_invalid and len(tuner.prior_xs) == 70


def test_extra_features_reach_the_model():
    space, is_valid = _strip_space()
    seen: list[int] = []

    def extra(points: np.ndarray) -> np.ndarray:
        seen.append(len(points))
        return (points[:, :1] * 2.0).astype(np.float64)

    tuner = ValidityTuner(space, 0, is_valid, plan_size=10, validity=ValiditySettings(presamples=40),
                          extra_features=extra)
    assert tuner._features(space.all_points()).shape == (100, 3)
    batch = tuner.next_batch(10)
    tuner.update(batch, [Measurement(p, is_valid(p), 100.0 - sum(p) if is_valid(p) else None) for p in batch])
    assert tuner.train_count == 1 and 10 in seen and 100 in seen   # trained on the batch, scored the grid


def test_edge_steps_are_one_knob_or_a_trade_of_two_tiles_from_the_best_measured():
    space, is_valid = _strip_space()
    tuner = ValidityTuner(space, 0, is_valid, plan_size=10,
                          validity=ValiditySettings(presamples=100, edge_walk=5, edge_bases=2))
    assert len(tuner.known_invalid) == 70                               # the whole grid presampled
    # measured: (1, 4) the best, (2, 7) the second; (0, 3) the worst, so not a base
    pts = [(1, 4), (2, 7), (0, 3), (1, 5)]
    tuner.update(pts, [Measurement(p, True, c) for p, c in zip(pts, (1.0, 2.0, 4.0, 3.0), strict=True)])
    tuner.predict = lambda points: points[:, 1].astype(np.float64)     # the model prefers large y
    steps = tuner.edge_steps(100)
    # (1, 4): one knob +-1 (0,4) (2,4) (1,3) [(1,5) measured]; trades x+1,y-1 (2,3) and y+1,x-1 (0,5).
    # (2, 7): (1,7) (2,6) (2,8) [(3,7) known invalid]; trades (1,8) [(3,6) known invalid]
    assert set(steps) == {(0, 4), (2, 4), (1, 3), (2, 3), (0, 5), (1, 7), (2, 6), (2, 8), (1, 8)}
    scores = [p[1] + 1.0 for p in steps]                               # every step is known valid: +1
    assert scores == sorted(scores, reverse=True)                      # the model's order
    assert tuner.edge_steps(2) == steps[:2] and [p[1] for p in steps[:2]] == [8, 8]


def test_checked_edge_steps_are_built_before_they_are_measured():
    space, is_valid = _strip_space()
    tuner = ValidityTuner(space, 0, is_valid, plan_size=10,
                          validity=ValiditySettings(presamples=1, edge_walk=5, edge_bases=2, edge_check=True))
    tuner.known_valid, tuner.known_invalid = set(), set()      # forget the presample: nothing known but the measured
    pts = [(1, 4), (2, 7), (0, 3), (1, 5)]
    tuner.update(pts, [Measurement(p, True, c) for p, c in zip(pts, (1.0, 2.0, 4.0, 3.0), strict=True)])
    tuner.predict = lambda points: points[:, 1].astype(np.float64)     # the model prefers large y
    steps = tuner.edge_steps(100)
    # the 11 edge steps of (1, 4) and (2, 7) (the test above, with (3, 7) and (3, 6) not known): each built once,
    # the two that do not build (x index 3) learnt as invalid and not returned
    assert set(steps) == {(0, 4), (2, 4), (1, 3), (2, 3), (0, 5), (1, 7), (2, 6), (2, 8), (1, 8)}
    assert [p[1] for p in steps] == sorted((p[1] for p in steps), reverse=True)
    assert tuner.edge_checks == 11
    assert tuner.known_invalid == {space.flat((3, 7)), space.flat((3, 6))}
    assert {space.flat(p) for p in steps} <= tuner.known_valid
    assert tuner.edge_steps(2) == steps[:2] and tuner.edge_checks == 11     # known now: not built again
    unchecked = ValidityTuner(space, 0, is_valid, plan_size=10,
                              validity=ValiditySettings(presamples=1, edge_walk=5, edge_bases=2))
    unchecked.known_valid, unchecked.known_invalid = set(), set()
    unchecked.update(pts, [Measurement(p, True, c) for p, c in zip(pts, (1.0, 2.0, 4.0, 3.0), strict=True)])
    unchecked.predict = tuner.predict
    assert {(3, 7), (3, 6)} <= set(unchecked.edge_steps(100)) and unchecked.edge_checks == 0


def test_exhausting_the_best_edge_leads_every_step_until_none_is_left():
    space, is_valid = _strip_space()
    settings = ValiditySettings(presamples=100, edge_follow=2, edge_exhaust="late")
    tuner = ValidityTuner(space, 0, is_valid, plan_size=50, validity=settings)     # no retraining in this test
    pts = [(1, 4), (2, 7)]
    tuner.update(pts, [Measurement(p, True, c) for p, c in zip(pts, (1.0, 2.0), strict=True)])
    assert tuner.best_point == (1, 4) and tuner.improved is None     # the first valid one is no improvement
    tuner.predict = lambda points: points[:, 1].astype(np.float64)     # a model (it prefers large y)
    tuner.first = []
    steps = []
    for _ in range(3):
        batch = tuner.next_batch(2)
        tuner.update(batch, [Measurement(p, True, 9.0) for p in batch])   # none better
        steps.append(batch)
    # the six edge steps of (1, 4) (one knob +-1 or a trade of the two tiles), two a step, the model's order
    # (large y first; ties in the order the steps are listed)
    assert steps == [[(1, 5), (0, 5)], [(0, 4), (2, 4)], [(1, 3), (2, 3)]]
    assert tuner.random_fill == 0                                      # every point so far an edge step
    # a better configuration becomes the base at once: its unmeasured steps not known invalid, (2, 6) and (1, 6)
    tuner.update([(2, 5)], [Measurement((2, 5), True, 0.5)])
    assert tuner.next_batch(2) == [(2, 6), (1, 6)]
    tuner.update([(2, 6), (1, 6)], [Measurement(p, True, 9.0) for p in ((2, 6), (1, 6))])
    tuner.next_batch(2)
    assert tuner.random_fill == 2                                      # its edge is exhausted: the plan's points
    # without exhausting, a step after no improvement has no lead
    plain = ValidityTuner(space, 0, is_valid, plan_size=50, validity=replace(settings, edge_exhaust=None))
    plain.update(pts, [Measurement(p, True, c) for p, c in zip(pts, (1.0, 2.0), strict=True)])
    plain.predict, plain.first = tuner.predict, []
    plain.next_batch(2)
    assert plain.random_fill == 2


def test_a_loop_order_steps_to_any_other_order_when_told():
    space = KnobSpace((Knob("x", (1, 2, 3), "split"), Knob("order", ("a", "b", "c", "d"), "permutation")))
    always = lambda p: True                                   # noqa: E731
    for any_order, expected in ((False, {(0, 0), (2, 0), (1, 1)}), (True, {(0, 0), (2, 0), (1, 1), (1, 2), (1, 3)})):
        tuner = ValidityTuner(space, 0, always, plan_size=4,
                              validity=ValiditySettings(presamples=1, edge_follow=1, edge_any_order=any_order))
        tuner.update([(1, 0)], [Measurement((1, 0), True, 1.0)])
        assert set(tuner.edge_steps(100, [(1, 0)])) == expected


def _trials(tuner, is_valid, cost, trials: int, step: int) -> list[tuple[int, ...]]:
    """The configurations a tuner measures, ``step`` at a time, on a synthetic space."""
    out: list[tuple[int, ...]] = []
    while len(out) < trials:
        batch = tuner.next_batch(min(step, trials - len(out)))
        tuner.update(batch, [Measurement(p, is_valid(p), cost(p) if is_valid(p) else None) for p in batch])
        out += batch
    return out


def test_measuring_an_epoch_in_steps_changes_nothing_without_following():
    # AutoTVM's loop measures n_parallel configurations at a time and retrains every plan_size: the baseline,
    # the dissertation's method and the edge walk measure the same configurations in steps of 5 as of 10 (a
    # step that divides the epoch)
    space, is_valid = _strip_space()
    cost = lambda p: 1.0 + abs(p[0] - 2) + abs(p[1] - 6)      # noqa: E731  (best (2, 6), on the edge)
    from accelmap.tune.annealing import AnnealingSettings
    from accelmap.tune.tuners import ModelSettings, ModelTuner
    # the model's and the annealer's quality are not the point here
    fast = dict(plan_size=10, model=ModelSettings(max_rounds=10, early_stop=None),
                annealing=AnnealingSettings(parallel_size=16, n_iter=40))
    for make in (lambda: ModelTuner(space, 3, **fast),
                 lambda: ValidityTuner(space, 3, is_valid, validity=ValiditySettings(presamples=60), **fast),
                 lambda: ValidityTuner(space, 3, is_valid, validity=ValiditySettings(presamples=60, edge_walk=3),
                                       **fast)):
        assert _trials(make(), is_valid, cost, 30, 5) == _trials(make(), is_valid, cost, 30, 10)


def test_a_new_best_is_followed_by_its_edge_steps_in_the_next_step():
    space, is_valid = _strip_space()
    tuner = ValidityTuner(space, 0, is_valid, plan_size=10,
                          validity=ValiditySettings(presamples=100, edge_follow=3, follow_first_epoch=True))
    batch = tuner.next_batch(4)
    plan = list(tuner.first)
    assert len(plan) == 6                          # the first epoch's 10 are planned, 4 measured now
    valid = [p for p in batch if is_valid(p)]
    assert len(valid) == 2
    # the first valid result is no improvement to follow; the better second one is
    costs = {valid[0]: 5.0, valid[1]: 3.0}
    tuner.update(batch, [Measurement(p, is_valid(p), costs.get(p)) for p in batch])
    assert tuner.improved == valid[1]
    follow = tuner.next_batch(4)
    # before a model: up to three edge steps of the new best (a knob +-1 or a trade of two tiles), not measured,
    # presampled-valid first; from the corner (0, 0) there are two, (1, 0) and (0, 1) (no trade stays on the
    # grid); then the plan goes on
    assert valid[1] == (0, 0)
    assert set(follow[:2]) == {(1, 0), (0, 1)} and follow[2:] == plan[:2]
    rest = plan[2:]
    tuner.update(follow, [Measurement(p, is_valid(p), 9.0 if is_valid(p) else None) for p in follow])
    assert tuner.next_batch(2) == rest[:2]         # no improvement: the plan's next
    # the epoch ends after 10 trials: the model is trained and the plan's last two points are dropped
    tuner.update(rest[:2], [Measurement(p, is_valid(p), 9.0 if is_valid(p) else None) for p in rest[:2]])
    assert tuner.train_count == 1 and tuner.first == []


def test_a_measurement_step_that_does_not_divide_the_batch_is_refused():
    import pytest

    from accelmap.errors import SpecError
    from accelmap.tune.session import tune_operator

    op = adopt_precision(conv2d("t", n=1, k=32, h=8, w=8, r=3, s=3, c=64, stride=1, padding=0), VTA)
    with pytest.raises(SpecError, match=r"--step: the measurement step must divide the batch of 50, got 15"):
        tune_operator(op, VTA, backend="model", batch_size=50, step=15)


def test_a_reshape_keeps_the_tile_area_in_another_shape():
    from accelmap.tune.tuners import edge_neighbours

    # rows (divisors of 12) and columns (some divisors of 120): the 3x20 tile of 60 reshapes to 6x10 and 12x5 (4x15
    # and 2x30 have no column option), which no index trade reaches (rows +2, columns -1 or rows +3, columns -2)
    space = KnobSpace((Knob("tile_h", (1, 2, 3, 4, 6, 12), "split"), Knob("tile_w", (1, 2, 4, 5, 10, 20), "split"),
                       Knob("order", ("a", "b"), "permutation")))
    base = (2, 5, 0)
    plain = edge_neighbours(space, base, any_order=True)
    assert plain == [(1, 5, 0), (3, 5, 0), (2, 4, 0), (2, 5, 1), (3, 4, 0)]   # +-1 per knob, then the one trade
    reshaped = edge_neighbours(space, base, any_order=True, reshape=True)
    assert reshaped == plain + [(4, 4, 0), (5, 3, 0)]
    # two tile levels: the product is kept level by level
    two = KnobSpace((Knob("x", ((1, 2), (2, 1), (2, 2)), "split"), Knob("y", ((2, 1), (1, 2), (1, 1), (4, 1)), "split")))
    assert edge_neighbours(two, (0, 0)) == [(1, 0), (0, 1)]
    assert edge_neighbours(two, (0, 0), reshape=True) == [(1, 0), (0, 1), (1, 1), (2, 2)]   # (2,1)x(1,2), (2,2)x(1,1)


def test_the_reshaping_tuner_exhausts_the_same_area_tiles_of_the_best():
    space = KnobSpace((Knob("tile_h", (1, 2, 3, 4, 6, 12), "split"), Knob("tile_w", (1, 2, 4, 5, 10, 20), "split")))
    always = lambda p: True                                   # noqa: E731
    for reshape, expected in ((False, {(1, 5), (3, 5), (2, 4), (3, 4)}),
                              (True, {(1, 5), (3, 5), (2, 4), (3, 4), (4, 4), (5, 3)})):
        tuner = ValidityTuner(space, 0, always, plan_size=50,
                              validity=ValiditySettings(presamples=1, edge_follow=2, edge_reshape=reshape))
        tuner.update([(2, 5)], [Measurement((2, 5), True, 1.0)])
        assert set(tuner.edge_steps(100, [(2, 5)])) == expected


def test_a_reshape_over_the_threads_trades_a_thread_for_a_tile_twice_as_large():
    from accelmap.tune.tuners import edge_neighbours

    # each virtual thread owns a tile: 2 threads of 1 output block use the buffer as 1 thread of 2 blocks
    space = KnobSpace((Knob("tile_co", (1, 2, 4), "split"), Knob("tile_h", (1, 7), "split"),
                       Knob("oc_nthread", (1, 2), "threads")))
    base = (0, 1, 1)
    assert (1, 1, 0) not in edge_neighbours(space, base, reshape=True)
    assert set(edge_neighbours(space, base, reshape="threads")) - set(edge_neighbours(space, base, reshape=True)) \
        == {(1, 1, 0)}


def test_submodular_pick_is_autotvms_greedy_diversity():
    from accelmap.tune.tuners import submodular_pick

    knobs = np.array([[0, 0], [0, 1], [1, 0], [0, 0], [1, 1]])
    # by hand, AutoTVM's greedy: (0, 0) brings two new values (the first of five such rows), then (1, 1) two more,
    # then nothing is new and the earliest row left, (0, 1), is taken
    assert submodular_pick(knobs, 3) == [0, 4, 1]
    # a score adds to the new values: (1, 1) scores 3 + 2 first; then (0, 0) and (1, 0) both gain 2, the earlier wins
    assert submodular_pick(knobs, 3, scores=np.array([0, 0, 0, 0, 3.0])) == [4, 0, 1]
    assert submodular_pick(knobs, 9) == [0, 4, 1, 2, 3]        # never more than the rows


def test_a_plan_after_an_epoch_without_a_new_best_is_made_diverse():
    space, is_valid = _strip_space()
    tuner = ValidityTuner(space, 0, is_valid, plan_size=4,
                          validity=ValiditySettings(presamples=100, plateau_diversity=2.0))
    tuner.update([(0, 0), (1, 1)], [Measurement((0, 0), True, 5.0), Measurement((1, 1), True, 3.0)])
    assert tuner.best_trial == 2 and tuner.diversity_ratio() is None       # the best is 0 trials old
    three = [(2, 2), (2, 3), (2, 4)]
    tuner.update(three, [Measurement(p, True, 9.0) for p in three])
    assert tuner.diversity_ratio() is None                                 # 3 trials without a new best
    tuner.update([(0, 5)], [Measurement((0, 5), True, 9.0)])
    assert tuner.diversity_ratio() == 2.0                                  # a whole epoch (4) without one
    # the plan: the 4 most diverse of the annealer's 8 best-scored (here a fixed list, best first)
    best_scored = [space.flat(p) for p in ((1, 2), (1, 3), (1, 4), (0, 2), (2, 9), (0, 3), (1, 8), (2, 7))]
    tuner.annealer.find_maximums = lambda predict, num, exclude, bias=None: best_scored[:num]   # noqa: E731
    # (1, 2) and (2, 9) bring two new values each, then (0, 3) two (x = 0, y = 3), then (1, 4) the first with one
    assert [space.point(f) for f in tuner._plan(lambda pts: pts[:, 0])] == [(1, 2), (2, 9), (0, 3), (1, 4)]
    tuner.update([(1, 6)], [Measurement((1, 6), True, 1.0)])               # a new best: the plan is the best again
    assert tuner.diversity_ratio() is None
    assert [space.point(f) for f in tuner._plan(lambda pts: pts[:, 0])] == [space.point(f) for f in best_scored[:4]]


def _threaded_space():
    """Rows and columns 1-8 and one thread knob; a thread owns its tile and two or more threads double-buffer, so a
    configuration builds when rows x columns x threads x (2 with threads, else 1) is at most 16."""
    space = KnobSpace((Knob("tile_h", (1, 2, 4, 8), "split"), Knob("tile_w", (1, 2, 4, 8), "split"),
                       Knob("nthread", (1, 2), "threads")))

    def is_valid(p):
        v = space.values(p)
        return v["tile_h"] * v["tile_w"] * v["nthread"] * (2 if v["nthread"] > 1 else 1) <= 16
    return space, is_valid


def test_a_thread_step_is_filled_up_to_the_valid_edge():
    space, is_valid = _threaded_space()
    tuner = ValidityTuner(space, 0, is_valid, plan_size=50, validity=ValiditySettings(presamples=1, edge_fill=True))
    # 2x2 on two threads fills the buffer (16); on one thread it uses 4: grown one option at a time while it
    # builds, the first listed knob first before a model (rows), to 8x2, whose larger tiles (16x2 is no option,
    # 8x4 uses 32) do not build
    assert tuner.fill_steps((1, 1, 1)) == [(3, 1, 0)]
    # with a model that prefers wide tiles: 2x8
    fresh = ValidityTuner(space, 0, is_valid, plan_size=50, validity=ValiditySettings(presamples=1, edge_fill=True))
    fresh.predict = lambda points: points[:, 1].astype(np.float64)
    assert fresh.fill_steps((1, 1, 1)) == [(1, 3, 0)]
    # the other way: 8x2 on one thread does not build on two (64); shrunk one option at a time until it builds
    # (4x2: 32, then 2x2: 16), then no larger tile builds
    assert tuner.fill_steps((3, 1, 0)) == [(1, 1, 1)]
    assert all(is_valid(space.point(f)) for f in tuner.known_valid)
    assert not any(is_valid(space.point(f)) for f in tuner.known_invalid)
    assert tuner.edge_checks > 0
    # the edge steps hold the fill (and without edge_fill they do not)
    assert (3, 1, 0) in tuner.edge_steps(100, [(1, 1, 1)])
    plain = ValidityTuner(space, 0, is_valid, plan_size=50, validity=ValiditySettings(presamples=1, edge_check=True))
    assert (3, 1, 0) not in plain.edge_steps(100, [(1, 1, 1)])
