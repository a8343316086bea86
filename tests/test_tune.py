"""Auto-tuning: knob spaces, the dissertation's algorithms on small synthetic spaces, tuners, the command."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest
from click.testing import CliRunner

from accelmap.arch.accelerator import adopt_precision
from accelmap.arch.presets import get_accelerator
from accelmap.cli import main
from accelmap.cost.model import evaluate
from accelmap.errors import SpecError
from accelmap.tune.annealing import Annealer, AnnealingSettings
from accelmap.tune.knobs import Knob, KnobSpace, divisors, manhattan, on_edge, regions
from accelmap.tune.limits import VTA_LIMITS, ProgramLimits, dma_runs
from accelmap.tune.loop import run_tuner
from accelmap.tune.measure import Measurement, Measurer, lookup_measurer, measure_one
from accelmap.tune.presample import presample, select_spread
from accelmap.tune.template import ScheduleTemplate, TemplateError, ordered_factorizations
from accelmap.tune.tuners import TUNERS, ValidityTuner, make_tuner
from accelmap.workload.constructors import conv2d, gemm

VTA = get_accelerator("vta_like")


def _db(thesis_id: int):
    """Three of the DeepBench layers of the dissertation's Table 5.1 (its IDs), small enough to enumerate."""
    rows = {3: dict(n=1, k=32, h=79, w=341, r=10, s=5, c=32, stride=2, padding=0),
            8: dict(n=1, k=64, h=12, w=120, r=3, s=3, c=32, stride=1, padding=1),
            48: dict(n=1, k=1024, h=14, w=14, r=1, s=1, c=256, stride=2, padding=0)}
    return adopt_precision(conv2d(f"db{thesis_id}", **rows[thesis_id]), VTA)


@pytest.mark.parametrize("thesis_id,size", [(3, 768), (8, 9216), (48, 2240)])
def test_vta_conv_space_has_the_dissertations_size(thesis_id, size):
    # Table 5.1's space sizes: AutoTVM's VTA template (five two-way splits, two thread knobs) with four
    # loop permutations added.
    space = ScheduleTemplate(_db(thesis_id), VTA).space
    assert space.size == size
    assert [k.name for k in space.knobs][-3:] == ["reorder", "oc_nthread", "h_nthread"]


def test_neighbours_are_manhattan_distance_one():
    space = KnobSpace((Knob("a", (1, 2, 4), "split"), Knob("b", ("x", "y")), Knob("c", (1, 3), "split")))
    assert space.size == 12
    assert sorted(space.neighbours((0, 0, 0))) == [(0, 0, 1), (0, 1, 0), (1, 0, 0)]
    assert sorted(space.neighbours((1, 1, 1))) == [(0, 1, 1), (1, 0, 1), (1, 1, 0), (2, 1, 1)]
    pts = space.all_points()
    assert [space.flat(tuple(p)) for p in pts] == list(range(12))
    d = manhattan(pts, pts)
    for i, p in enumerate(pts):
        assert sorted(space.flat(q) for q in space.neighbours(tuple(p))) == sorted(np.flatnonzero(d[i] == 1))


def test_ordered_factorizations_and_divisors():
    assert divisors(12) == (1, 2, 3, 4, 6, 12)
    f = ordered_factorizations(12, 2)
    assert len(f) == 18          # sum over divisors d of 12 of the number of divisors of 12/d
    assert all(12 % (a * b) == 0 for a, b in f)


def test_every_valid_configuration_builds_a_mapping_the_model_accepts():
    t = ScheduleTemplate(_db(3), VTA)
    valid = 0
    for p in t.space.all_points():
        b = t.build(tuple(p))
        if b.valid:
            valid += 1
            evaluate(t.op, b.arch, b.mapping)           # validates: raises on an overflow
            assert b.arch.levels[1].double_buffered == (math.prod(
                v for k, v in t.space.values(tuple(p)).items() if k.endswith("nthread")) > 1)
    assert 0 < valid < t.space.size


def test_vta_program_limits():
    t = ScheduleTemplate(_db(3), VTA)
    big = {"tile_co": 2, "tile_ci": 2, "tile_h": 35, "tile_w": 169}
    point = tuple(next(i for i, v in enumerate(k.options) if v == big.get(k.name, k.options[0]))
                  for k in t.space.knobs)
    b = t.build(point)
    assert not b.valid   # 35 x 169 x ... micro-ops, or a buffer overflow
    m = b.mapping
    if m is not None:
        inner = [lp for lp in m.loops_at(1) if not lp.spatial]
        uops = math.prod(lp.bound for lp in inner[2:])
        expected = VTA_LIMITS.check(t.op, m, 1)
        assert (uops > VTA_LIMITS.uop_entries) == (expected is not None and "micro-ops" in expected)
    assert ProgramLimits().check(t.op, t.build(tuple(0 for _ in t.space.knobs)).mapping, 1) is None


def _point(t, **values):
    """The configuration with these knob values (the first option for every other knob)."""
    return tuple(next(i for i, v in enumerate(k.options) if v == values.get(k.name, k.options[0]))
                 for k in t.space.knobs)


def test_vta_partial_sums_never_leave_the_accumulator():
    t = ScheduleTemplate(_db(8), VTA)
    # weight-stationary with the input channels split in two: the reduction loop in DRAM runs outside
    # the loops over output rows, so every output tile would be stored between its two halves
    b = t.build(_point(t, tile_ci=1, tile_h=12, tile_w=30, reorder="weight-stationary"))
    assert not b.valid and "partial sums would leave the accumulator" in b.error
    # the same order with all input channels in one tile has no reduction loop in DRAM
    b = t.build(_point(t, tile_ci=2, tile_h=12, tile_w=30, reorder="weight-stationary"))
    assert b.error is None or "partial sums" not in b.error
    # output-stationary keeps the reduction innermost: never refused for this reason
    for p in t.space.all_points():
        if t.space.values(tuple(p))["reorder"] == "output-stationary":
            err = t.build(tuple(p)).error
            assert err is None or "partial sums" not in err


def test_vta_input_tile_is_a_dense_box_with_the_stride_rows():
    t = ScheduleTemplate(_db(48), VTA)      # 1x1 window at stride 2: 7x7 outputs read 13x13 input rows
    b = t.build(_point(t, tile_co=1, tile_ci=1, tile_h=7, tile_w=7))
    assert b.valid
    box = 13 * 13 * 16 * 8                   # rows x columns x channels x bits
    assert t.op.operand("I").bits == 8
    limits = ProgramLimits(dense_input_box=True)
    assert limits.check(t.op, b.mapping, 1, input_bits=box) is None
    assert f"{box:,}-bit dense box" in limits.check(t.op, b.mapping, 1, input_bits=box - 1)
    assert f"{2 * box:,}-bit" in limits.check(t.op, b.mapping, 1, input_bits=box, copies=2)
    # the model's footprint counts the 7x7 points a 1x1 window at stride 2 touches
    from accelmap.mapping.validate import capacity_usage
    assert capacity_usage(t.op, b.arch, b.mapping)[1]["I"] == 7 * 7 * 16 * 8


def test_dma_runs_fold_the_axes_contiguous_in_dram():
    # (blocks, rows, columns) of a 4 x 14 x 14 tensor: whole rows continue the run of the columns
    assert dma_runs([4, 14, 14], [4, 14, 14]) == (1, False)
    assert dma_runs([2, 7, 14], [4, 14, 14]) == (2, False)
    assert dma_runs([2, 7, 13], [4, 14, 14]) == (3, False)
    assert dma_runs([1, 7, 13], [4, 14, 14]) == (2, False)
    # one column of several rows: the run starts away from the element (TVM adds a dummy row)
    assert dma_runs([1, 7, 1], [4, 14, 14]) == (1, True)
    assert dma_runs([1, 1, 1], [4, 14, 14]) == (0, False)


def test_vta_tiles_move_in_one_2d_dma_transfer():
    t = ScheduleTemplate(_db(48), VTA)      # unpadded: channel blocks x 13 x 13 input rows of 14 x 14
    b = t.build(_point(t, tile_co=1, tile_ci=16, tile_h=7, tile_w=7))
    assert not b.valid and "3 non-contiguous runs" in b.error and "16x13x13" in b.error
    t = ScheduleTemplate(_db(8), VTA)       # padded: only rows x columns of one channel block
    assert t.build(_point(t, tile_co=1, tile_ci=1, tile_h=12, tile_w=30)).valid
    b = t.build(_point(t, tile_co=1, tile_ci=2, tile_h=12, tile_w=30))
    assert not b.valid and "padded I tile 2x14x32" in b.error
    # the output store: 2 channel blocks x 3 rows x 30 of 120 columns is three runs
    b = t.build(_point(t, tile_co=2, tile_ci=1, tile_h=3, tile_w=30))
    assert not b.valid and "O tile 2x3x30" in b.error
    assert ProgramLimits(dma_2d=False).check(t.op, b.mapping, 1) is None


def test_vta_tile_loops_follow_the_conv_schedules_order():
    t = ScheduleTemplate(_db(8), VTA)
    b = t.build(_point(t, tile_co=2, tile_ci=2, tile_h=3, tile_w=5))
    inner = [lp.dim for lp in b.mapping.loops_at(1) if not lp.spatial]
    assert inner == ["C", "Q", "S", "R", "K", "P"]     # VTA: k_o.inner, x_j, d_j, d_i, x_co, x_i


def test_template_refuses_an_operator_the_intrinsic_cannot_cover():
    op = adopt_precision(conv2d("c3", n=1, k=64, c=3, h=32, w=32, r=3, s=3), VTA)
    with pytest.raises(TemplateError, match="not a multiple of axis Z"):
        ScheduleTemplate(op, VTA)


def test_gemm_template_on_the_8x8x8_core():
    arch = get_accelerator("vta_8x8x8")
    op = adopt_precision(gemm("g", m=64, n=64, k=64), arch)
    t = ScheduleTemplate(op, arch)
    assert t.spatial == {"X": "M", "Y": "N", "Z": "K"}
    assert t.space.size == 4 * 4 * 4 * len(t.orders) * 4
    assert any(t.build(tuple(p)).valid for p in t.space.all_points())


# --- Algorithm 4: neighbourhood presampling ---------------------------------------------------------------
def _blob_space():
    """A 12x12 grid whose valid configurations are one diamond around (5, 5): |x-5| + |y-5| <= 3."""
    space = KnobSpace((Knob("x", tuple(range(1, 13)), "split"), Knob("y", tuple(range(1, 13)), "split")))
    return space, (lambda p: abs(p[0] - 5) + abs(p[1] - 5) <= 3)


def test_valid_regions_and_their_edge():
    space, is_valid = _blob_space()
    mask = np.array([is_valid(tuple(p)) for p in space.all_points()])
    lab = regions(space.shape, mask)
    assert set(lab[mask]) == {space.flat((2, 5))} and (lab[~mask] == -1).all()   # one diamond, top corner first
    edge = on_edge(space.shape, mask)
    # the diamond |x-5|+|y-5| <= 3 has 25 points; its edge is the ring at distance 3 (12 points)
    assert sorted(space.point(int(f)) for f in np.flatnonzero(edge)) == sorted(
        tuple(p) for p in space.all_points() if abs(p[0] - 5) + abs(p[1] - 5) == 3)
    two = mask.copy()
    two[space.flat((11, 11))] = True           # a second, isolated valid point
    assert len(set(regions(space.shape, two)[two])) == 2
    # a 1-D mask: regions split at the gaps, and the grid does not wrap around
    assert list(regions((6,), np.array([1, 1, 0, 1, 0, 1], dtype=bool))) == [0, 0, -1, 3, -1, 5]
    assert list(on_edge((4,), np.array([1, 1, 1, 0], dtype=bool))) == [False, False, True, False]


def test_presampling_walks_the_valid_region():
    space, is_valid = _blob_space()
    n_valid = sum(is_valid(tuple(p)) for p in space.all_points())
    assert n_valid == 25
    rng = np.random.default_rng(0)
    checked = presample(space, is_valid, 60, 4, rng)
    assert len(checked) == 60
    assert all(is_valid(p) == ok for p, ok in checked.items())
    # from valid points the walk expands through neighbours: it finds far more of the 25 valid points
    # than uniform sampling (60 / 144 x 25 = 10.4 expected)
    found = sum(checked.values())
    assert found >= 20
    # whole space when asked for more than it has
    assert len(presample(space, is_valid, 500, 4, np.random.default_rng(1))) == space.size


def test_presampling_jumps_from_an_invalid_point():
    space, _ = _blob_space()
    rng = np.random.default_rng(3)
    checked = presample(space, lambda p: False, 30, 2, rng)
    assert len(checked) == 30 and not any(checked.values())


# --- Algorithm 5: distance-maximising selection -------------------------------------------------------
def test_selection_follows_the_dissertations_scan():
    pts = [(0, 0), (1, 0), (9, 9), (5, 5), (0, 9), (9, 0)]
    rng = np.random.default_rng(0)
    first = int(np.random.default_rng(0).integers(len(pts)))
    chosen = select_spread(pts, 3, rng)
    assert chosen[0] == pts[first]
    # by hand: each next point is the last one in list order whose mean and min distance to the chosen
    # set both beat every earlier candidate's
    def scan(chosen_pts):
        best_mean = best_min = 0.0
        pick = None
        for p in pts:
            if p in chosen_pts:
                continue
            d = [abs(p[0] - q[0]) + abs(p[1] - q[1]) for q in chosen_pts]
            if sum(d) / len(d) > best_mean and min(d) > best_min:
                best_mean, best_min, pick = sum(d) / len(d), min(d), p
        return pick
    assert chosen[1] == scan(chosen[:1])
    assert chosen[2] == scan(chosen[:2])


def test_selection_spreads_points():
    space, is_valid = _blob_space()
    pts = [tuple(int(v) for v in p) for p in space.all_points()]
    sel = select_spread(pts, 4, np.random.default_rng(2))
    arr = np.array(sel)
    assert len(set(sel)) == 4
    d = manhattan(arr, arr)
    assert d[np.triu_indices(4, 1)].min() >= 8   # four points on a 12x12 grid, far apart
    assert select_spread(pts[:3], 10, np.random.default_rng(0)) and len(select_spread(pts[:3], 10,
                                                                                    np.random.default_rng(0))) == 3


# --- biased SA ----------------------------------------------------------------------------------------
def test_biased_annealing_never_proposes_a_known_invalid_point():
    space = KnobSpace((Knob("x", tuple(range(1, 17)), "split"), Knob("y", tuple(range(1, 17)), "split")))
    # the model likes the corner (15, 15) most; it is known invalid, as is its row
    predict = lambda pts: (pts[:, 0] + pts[:, 1]).astype(float) / 30.0
    bias = np.zeros(space.size)
    invalid = [space.flat((15, y)) for y in range(16)]
    valid_known = [space.flat((3, 3))]
    bias[invalid] = -1e6
    bias[valid_known] = 1.0
    ann = Annealer(space, AnnealingSettings(parallel_size=32, n_iter=200), np.random.default_rng(0))
    top = ann.find_maximums(predict, 10, exclude=set(), bias=bias)
    assert top and not set(top) & set(invalid)
    assert space.flat((3, 3)) in top or all(predict(np.array([space.point(f)]))[0] >= 1 for f in top)
    plain = Annealer(space, AnnealingSettings(parallel_size=32, n_iter=200), np.random.default_rng(0))
    assert set(plain.find_maximums(predict, 10, exclude=set())) & set(invalid)


def test_annealer_returns_only_non_negative_scores_as_autotvm_does_unless_told():
    space = KnobSpace((Knob("x", tuple(range(1, 9)), "split"), Knob("y", tuple(range(1, 9)), "split")))
    predict = lambda pts: (pts[:, 0] + pts[:, 1]).astype(float) - 12.0      # >= 0 only where x + y >= 12
    top = Annealer(space, AnnealingSettings(), np.random.default_rng(0)).find_maximums(predict, 10, set())
    assert sorted(sum(space.point(f)) for f in top) == [12, 12, 12, 13, 13, 14]     # all six such points
    every = Annealer(space, AnnealingSettings(min_score=None), np.random.default_rng(0)).find_maximums(
        predict, 10, set())
    assert len(every) == 10 and set(top) <= set(every)


def test_validity_tuner_scores_and_first_batch():
    space, is_valid = _blob_space()
    tuner = ValidityTuner(space, 0, is_valid, plan_size=10)
    batch = tuner.next_batch(10)
    assert sum(is_valid(p) for p in batch) == 5          # half valid, half invalid
    bias = tuner.bias()
    assert bias is not None
    for p, ok in tuner.presampled.items():
        assert bias[space.flat(p)] == (1.0 if ok else -1e6)


def test_validity_plus_trains_on_known_invalid_points_without_measuring_them():
    space, is_valid = _blob_space()
    tuner = make_tuner("validity-plus", space, 0, is_valid=is_valid, plan_size=10)
    assert isinstance(tuner, ValidityTuner)
    batch = tuner.next_batch(10)
    assert all(is_valid(p) for p in batch)                 # no trial spent on a known-invalid point
    assert set(tuner.prior_xs) == tuner.known_invalid and tuner.prior_xs
    tuner.update(batch, [Measurement(p, True, 1.0 + i) for i, p in enumerate(batch)])
    assert tuner.train_count == 1 and tuner.measured == 10


# --- tuners end to end on a synthetic space with a known optimum --------------------------------------
def _synthetic_table():
    space, is_valid = _blob_space()
    table = {}
    for p in space.all_points():
        p = tuple(int(v) for v in p)
        ok = is_valid(p)
        # best on the edge of the valid region, at (8, 5)
        table[p] = Measurement(p, ok, float(1 + abs(p[0] - 8) + abs(p[1] - 5)) if ok else None)
    return space, is_valid, table


@pytest.mark.parametrize("name", TUNERS)
def test_every_tuner_finds_the_optimum_of_a_small_space(name):
    space, is_valid, table = _synthetic_table()
    tuner = make_tuner(name, space, 0, is_valid=is_valid, plan_size=20)
    # Optuna's sampler costs grow with the trials told (6.5 s of CPU for all 144): it gets 60, and finds the
    # optimum at trial 45 with this seed
    run = run_tuner(tuner, lookup_measurer(table), 60 if name == "optuna" else space.size, 20)
    assert len({m.point for m in run.history}) == len(run.history)     # never measures a point twice
    assert run.best is not None and run.best.cost == 1.0
    assert run.trials_to_reach(1.0) is not None


def test_measuring_with_the_model_and_the_simulator_agree_and_the_log_resumes(tmp_path):
    t = ScheduleTemplate(_db(8), VTA)
    pts = [tuple(int(v) for v in p) for p in t.space.all_points()]
    valid = [p for p in pts if t.build(p).valid][:2]
    invalid = next(p for p in pts if not t.build(p).valid)
    log = tmp_path / "m.jsonl"
    meas = Measurer(t, "sim", workers=2, timeout=120, log=log)
    try:
        res = meas(valid + [invalid])
    finally:
        meas.close()
    assert [r.valid for r in res] == [True, True, False] and res[2].error
    for r in res[:2]:
        model = measure_one(t, "model", r.point)
        assert abs(r.cost - model.cost) / r.cost < 0.02       # the model within 2% of the simulator
    lines = log.read_text().splitlines()
    assert len(lines) == 3 and json.loads(lines[0])["config"]["tile_co"] in (1, 2, 4)
    again = Measurer(t, "sim", log=log)
    assert again(valid) == res[:2] and again.measured == 0     # read back, not measured again


def _first_valid_points(t, n):
    from itertools import islice

    pts = (tuple(int(v) for v in q) for q in t.space.all_points())
    return list(islice((p for p in pts if t.build(p).valid), n))


def test_measurer_times_out_and_goes_on_with_new_workers(tmp_path):
    t = ScheduleTemplate(_db(8), VTA)
    p, q = _first_valid_points(t, 2)
    bad = next(tuple(int(v) for v in x) for x in t.space.all_points() if not t.build(tuple(int(v) for v in x)).valid)
    meas = Measurer(t, "sim", workers=2, timeout=1e-3)
    try:
        got = meas([p, q])
        assert all(not m.valid and m.error.startswith("timed out") for m in got)
        assert meas._idle == []                       # both workers were killed
        meas.timeout = 120
        again = meas([bad])[0]                        # measured by a new worker (a build that fails: fast)
    finally:
        meas.close()
    assert again == replace(measure_one(t, "sim", bad), wall_s=again.wall_s)
    assert not again.valid and not again.error.startswith("timed out")


def test_a_worker_that_dies_or_raises_is_reported(monkeypatch):
    import os

    import accelmap.tune.measure as measure_module

    t = ScheduleTemplate(_db(8), VTA)
    p, q = _first_valid_points(t, 2)
    # the workers fork from this process, so they run the patched function
    monkeypatch.setattr(measure_module, "measure_one", lambda *a: os._exit(3))
    meas = Measurer(t, "model", workers=2, timeout=120)
    try:
        got = meas([p, q])
    finally:
        meas.close()
    assert [m.error for m in got] == ["the measuring process died (exit code 3)"] * 2
    assert not any(m.valid for m in got)
    from accelmap.tune.session import tune_operator

    rep = tune_operator(_db(8), VTA, backend="model", tuners=("random",), trials=4, batch_size=4, workers=2)
    assert rep.best is None
    assert "4 configurations ended their measuring process (a crash) and count as invalid" in rep.notes

    def broken(*a):
        raise ZeroDivisionError("a bug in the backend")

    monkeypatch.setattr(measure_module, "measure_one", broken)
    meas = Measurer(t, "model", workers=2, timeout=120)
    try:
        with pytest.raises(ZeroDivisionError, match="a bug in the backend"):
            meas([p])
    finally:
        meas.close()


def test_host_backend_times_a_small_operator():
    op = adopt_precision(gemm("g", m=16, n=32, k=32), VTA)
    t = ScheduleTemplate(op, VTA)
    p = next(tuple(int(v) for v in q) for q in t.space.all_points() if t.build(tuple(int(v) for v in q)).valid)
    r = measure_one(t, "host", p)
    assert r.valid and r.cost > 0 and r.noise is not None and r.noise >= 0
    once = measure_one(t, "host", p, repeats=1)
    assert once.valid and once.noise == 0.0          # one timed run: no spread
    with pytest.raises(SpecError, match="repeats must be at least 1"):
        Measurer(t, "host", repeats=0)


def test_tune_command_writes_the_best_mapping_and_plot(tmp_path):
    wl = tmp_path / "db8.yaml"
    wl.write_text("name: db8\nconv2d: {n: 1, c: 32, h: 12, w: 120, k: 64, r: 3, s: 3, stride: 1, padding: 1}\n")
    out = tmp_path / "out"
    res = CliRunner().invoke(main, ["tune", "-w", str(wl), "-a", "vta_like", "--backend", "model", "--trials", "60",
                                    "--batch", "20", "--tuner", "validity", "--tuner", "random", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "validity" in res.output and "random" in res.output
    names = sorted(p.name for p in out.iterdir())
    assert {"summary.json", "best.mapping.yaml", "convergence.png"} <= set(names)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["space"]["size"] == 9216 and len(summary["tuners"]) == 2
    arch = str(out / "best.arch.yaml") if (out / "best.arch.yaml").exists() else "vta_like"
    ev = CliRunner().invoke(main, ["evaluate", "-w", str(wl), "-a", arch, "-m", str(out / "best.mapping.yaml"),
                                   "--json"])
    assert ev.exit_code == 0, ev.output
    assert json.loads(ev.output)["latency_cycles"] == summary["best"]["cost"]


def test_tune_command_refuses_bad_input(tmp_path):
    wl = tmp_path / "c3.yaml"
    wl.write_text("name: c3\nconv2d: {n: 1, c: 3, h: 32, w: 32, k: 64, r: 3, s: 3}\n")
    res = CliRunner().invoke(main, ["tune", "-w", str(wl), "-a", "vta_like", "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and res.output.count("\n") == 1 and "not a multiple of axis Z" in res.output
    assert not (tmp_path / "o").exists()


def test_diana_template_tiles_both_on_chip_levels():
    arch = get_accelerator("diana_like")
    op = adopt_precision(conv2d("c", n=1, k=32, c=16, h=16, w=16, r=3, s=3, padding=1), arch)
    t = ScheduleTemplate(op, arch)
    assert t.tile_levels == [1, 2] and t.spatial == {"OX": "Q", "K": "K"}
    # ordered two-level factorizations: C=16 -> 15, P=16 -> 15, K/16=2 -> 3; three stationary orders
    assert t.space.shape == (3, 15, 15, 3) and not t.thread_knobs
    b = t.build((1, 4, 4, 0))
    assert b.valid
    assert measure_one(t, "sim", (1, 4, 4, 0)).cost == pytest.approx(measure_one(t, "model", (1, 4, 4, 0)).cost)


def test_layout_knob_changes_which_tiles_one_dma_transfer_moves():
    t = ScheduleTemplate(_db(48), VTA, layout_knob=True)
    assert t.space.knobs[-1].name == "layout" and t.space.knobs[-1].options == ("NCHW", "NHWC")
    assert t.space.size == 2 * ScheduleTemplate(_db(48), VTA).space.size
    # 16 channel blocks x 13 x 13 of 14 x 14 rows: three runs channels-first, two with the channels innermost
    nchw = t.build(_point(t, tile_co=1, tile_ci=16, tile_h=7, tile_w=7, layout="NCHW"))
    nhwc = t.build(_point(t, tile_co=1, tile_ci=16, tile_h=7, tile_w=7, layout="NHWC"))
    assert not nchw.valid and "3 non-contiguous runs" in nchw.error
    assert nhwc.valid and nhwc.layout_map == {"I": (0, 2, 3, 1)} and nchw.layout_map == {}
    # a padded input in NHWC with its channels split is never rows x columns
    t8 = ScheduleTemplate(_db(8), VTA, layout_knob=True)
    assert "padded I tile" in t8.build(_point(t8, tile_ci=1, tile_h=12, tile_w=30, layout="NHWC")).error
    assert t8.build(_point(t8, tile_ci=1, tile_h=12, tile_w=30, layout="NCHW")).valid


def test_emitted_c_reads_an_input_stored_channels_last():
    from accelmap.codegen.build import compile_shared, load_run
    from accelmap.codegen.c_source import dram_strides, generate_c
    from accelmap.codegen.c_tensors import random_inputs, reference
    from accelmap.codegen.execute import run_generated

    assert dram_strides((2, 3, 4, 5), (0, 2, 3, 1)) == [60, 1, 15, 3]
    assert dram_strides((2, 3, 4, 5), None) == [60, 20, 5, 1]
    op = adopt_precision(conv2d("c", n=1, k=16, c=32, h=6, w=5, r=3, s=3), VTA)      # 4 x 3 outputs
    t = ScheduleTemplate(op, VTA, layout_knob=True)
    point = _point(t, tile_ci=2, tile_h=2, tile_w=3, layout="NHWC")     # channels whole: one run
    b = t.build(point)
    assert b.valid and b.layout_map == {"I": (0, 2, 3, 1)}
    fn = load_run(compile_shared(generate_c(op, b.arch, b.mapping, "int", b.layout_map)))
    tensors = random_inputs(op, "int", np.random.default_rng(1))
    got, _ = run_generated(fn, op, tensors, len(b.arch.levels), b.layout_map)
    assert np.array_equal(got, reference(op, tensors))
    # the same program reading the declared layout computes something else
    wrong, _ = run_generated(fn, op, tensors, len(b.arch.levels))
    assert not np.array_equal(wrong, got)
    assert measure_one(t, "host", point, repeats=1).valid


def test_dense_tiles_are_checked_as_one_2d_dma_transfer_and_always_are_one():
    # VTA's packed dense: data (batch blocks, input blocks), weights (output blocks, input blocks), both
    # copied as a box of the two outer axes: every tiling of a 2-D blocked matrix is one 2-D transfer
    from accelmap.tune.limits import DMA_OUTSIDE_COPY
    from accelmap.workload.constructors import dense

    assert DMA_OUTSIDE_COPY["dense"] == () and DMA_OUTSIDE_COPY["conv2d"] == ("N",)
    op = adopt_precision(dense("fc", n=4, c=256, k=64), VTA)
    t = ScheduleTemplate(op, VTA)
    built = [t.build(tuple(int(v) for v in p)) for p in t.space.all_points()]
    assert sum(b.valid for b in built) > 0
    assert not any("DMA" in b.error for b in built if b.error)


def test_cores_knob_splits_an_output_dim_over_the_cores():
    from dataclasses import replace

    from accelmap.tune.template import core_share, shared_outer_bandwidth

    assert "cores" not in ScheduleTemplate(_db(3), VTA).space.names        # one core: the dissertation's space
    quad = replace(VTA, cores=4)
    t = ScheduleTemplate(adopt_precision(_db(3), quad), quad)
    # batch 1: only the 2 output-channel blocks split (rows and columns reach the input through the window)
    assert t.core_dims == ["K"] and t.space.knobs[-1].options == (1, 2, 4)
    assert t.space.size == 3 * 768
    b = t.build(_point(t, tile_co=1, tile_ci=1, tile_h=1, tile_w=1, cores=2))
    assert b.valid and b.cores == 2 and b.share is not None and b.share.sizes["K"] == 16
    assert b.share.index_extent("W")[0] == 16 and b.share == core_share(t.op, "K", 2)
    padded = adopt_precision(conv2d("c", n=4, k=32, c=16, h=6, w=6, r=3, s=3, padding=1), quad)
    assert ScheduleTemplate(padded, quad).core_dims == ["N", "K"]
    assert core_share(padded, "N", 2).operand("I").shape == (2, 16, 6, 6)
    assert "2 blocks of 16 cannot be split evenly over 4 cores" in t.build(_point(t, cores=4)).error
    assert "tile_co=2 does not divide the 1 blocks of K" in t.build(_point(t, tile_co=2, cores=2)).error
    assert "oc_nthread=2: one of 2 cores has no loop over K" in t.build(_point(t, oc_nthread=2, cores=2)).error
    # the cores run their shares at once on an equal share of DRAM's bandwidth: simulator and model agree,
    # and with unbounded bandwidth two cores take exactly the time one core takes for half the channels
    point = _point(t, tile_co=1, tile_ci=1, tile_h=1, tile_w=1, cores=2)
    assert measure_one(t, "sim", point).cost == pytest.approx(measure_one(t, "model", point).cost)
    half = shared_outer_bandwidth(b.arch, 2)
    assert half.levels[0].read_bw_bits == VTA.levels[0].read_bw_bits / 2
    free = replace(quad, levels=(replace(quad.levels[0], read_bw_bits=None, write_bw_bits=None),) + quad.levels[1:])
    tf = ScheduleTemplate(adopt_precision(_db(3), free), free)
    one = _point(tf, tile_co=1, tile_ci=1, tile_h=1, tile_w=1)
    share = ScheduleTemplate(core_share(tf.op, "K", 2), replace(free, cores=1))
    assert measure_one(tf, "model", _point(tf, tile_co=1, tile_ci=1, tile_h=1, tile_w=1, cores=2)).cost == \
        measure_one(share, "model", _point(share, tile_ci=1, tile_h=1, tile_w=1)).cost
    assert measure_one(tf, "model", one).cost > measure_one(share, "model", _point(share, tile_ci=1, tile_h=1,
                                                                                      tile_w=1)).cost
    with pytest.raises(SpecError, match="4 cores; the host backend runs one program"):
        Measurer(t, "host")


def test_accelerator_file_states_its_cores():
    import yaml

    from accelmap.arch.presets import preset_path
    from accelmap.arch.schema import accelerator_from_dict

    data = yaml.safe_load(preset_path("vta_like").read_text())
    assert accelerator_from_dict(data).cores == 1
    assert accelerator_from_dict({**data, "cores": 2}).cores == 2
    with pytest.raises(SpecError, match="cores"):
        accelerator_from_dict({**data, "cores": 0}, "x.yaml")
