"""Auto-tuning benchmark: Rieber's dissertation, ch. 5 protocol (Tables 5.1 and 5.4) on vta_like.

For each DeepBench layer of Table 5.1:

* the exhaustive ground truth of its knob space (AutoTVM's VTA conv2d template with four loop
  permutations: the space sizes equal the table's): every configuration's validity (building its
  program) and latency (the analytical model; the simulator is run on the best configurations and a
  random sample of valid ones, and the largest difference is reported; with ``--ground-truth sim`` the
  latency is the simulator's, run on every valid configuration, and the model's difference from it over all
  of them is reported), and the shape of the valid region (its connected parts, how much of it lies on its
  edge, and along which knobs);
* ``--runs`` runs of ``--trials`` trials of every tuner, measurement and validity replaced by lookup in
  the ground truth (the dissertation's protocol); convergence = trials until the best configuration is
  measured (a run that never finds it counts ``--trials``, and how many did is reported);
* median and IQR of convergence relative to AutoTVM with random initialisation (the baseline),
  per layer and mean, next to Table 5.4's columns, with 95% bootstrap intervals of the means over the
  runs. Also trials to within 1% of the best and to the first valid configuration; per run, the valid
  trials, the first batch's valid count and how many points of model-guided batches were random.
* ``VARIANTS``: tuner variants for finding what separates the results from Table 5.4 (``--baseline`` and
  ``--baseline-runs`` compare them with a baseline of their own or an earlier sweep's).

``--host`` / ``--host-only``: hardware in the loop on this CPU: Table 5.1 layers (``--host-layers``), each
tuner ``--host-runs`` times, the emitted C timed (median of ``--host-repeats``): per run and over the
runs, trials and wall time to within 5% of the best time, and the best time reached.

    python benchmarks/tuning.py [--runs 20] [--trials 750] [--layers 3,8,...] [--jobs 2] [--resume]
                                [--ground-truth model|sim]
    python benchmarks/tuning.py --ground-truth-only | --from-runs | --host-only

Prints tables and writes benchmarks/results/tuning.json.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import statistics
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from accelmap.arch.accelerator import adopt_precision
from accelmap.arch.presets import get_accelerator
from accelmap.tune.knobs import on_edge, regions
from accelmap.tune.loop import run_tuner
from accelmap.tune.measure import Measurement, Measurer, lookup_measurer, measure_one, template_key
from accelmap.tune.template import ScheduleTemplate
from accelmap.tune.tuners import (
    DEFAULT_ANNEALING,
    EDGE_PLATEAU,
    TUNERS,
    XGB3_MODEL,
    ModelTuner,
    ValiditySettings,
    ValidityTuner,
    edge_neighbours,
    make_tuner,
)
from accelmap.workload.constructors import conv2d
from accelmap.workload.models.bundled import load_model

RESULTS = Path(__file__).parent / "results"
BASELINE = "autotvm"
SIM_CHECK_TOP = 5         # best configurations run on the simulator
SIM_CHECK_SAMPLE = 15     # random valid configurations run on the simulator
NEAR = 0.01               # "within 1% of the best"
EPOCH = 50                # the dissertation's epoch: the model is retrained after every 50 trials
STEP = 50                 # configurations measured at a time (AutoTVM's n_parallel); --step sets it

# Table 5.1: thesis ID -> (batch, out-ch, image HxW, kernel rows x columns, in-ch, stride, pad, space size,
# valid ratio)
TABLE_5_1 = {
    3: (1, 32, (79, 341), (10, 5), 32, 2, 0, 768, 0.06),
    5: (4, 32, (79, 341), (10, 5), 32, 2, 0, 3072, 0.068),
    8: (1, 64, (12, 120), (3, 3), 32, 1, 1, 9216, 0.067),
    17: (1, 256, (56, 56), (3, 3), 128, 1, 1, 20480, 0.027),
    42: (1, 64, (56, 56), (3, 3), 64, 1, 1, 9216, 0.047),
    48: (1, 1024, (14, 14), (1, 1), 256, 2, 0, 2240, 0.151),
    53: (2, 128, (28, 28), (3, 3), 128, 1, 1, 18433, 0.035),
    59: (2, 512, (7, 7), (1, 1), 2048, 2, 3, 6145, 0.008),
    76: (1, 64, (112, 112), (1, 1), 64, 1, 0, 14400, 0.088),
    78: (1, 64, (56, 56), (1, 1), 256, 1, 0, 15361, 0.099),
    92: (2, 64, (112, 112), (1, 1), 64, 1, 0, 28800, 0.082),
    106: (2, 2048, (14, 14), (1, 1), 1024, 2, 0, 7169, 0.122),
    107: (2, 512, (7, 7), (1, 1), 2048, 1, 0, 6144, 0.231),
}
# Table 5.4, "Full" method relative to the baseline: (convergence, IQR)
TABLE_5_4_FULL = {3: (0.305, 0.345), 5: (0.460, 0.362), 8: (0.433, 0.375), 17: (0.438, 0.580),
                  42: (0.319, 0.177), 48: (0.270, 0.333), 53: (0.480, 0.333), 59: (0.120, 0.861),
                  76: (0.460, 0.251), 78: (0.447, 0.176), 92: (0.492, 0.269), 106: (0.403, 0.631),
                  107: (0.786, 0.815)}
TABLE_5_4_NO_SSDM = {3: (0.223, 0.282), 5: (0.668, 0.426), 8: (0.548, 0.453), 17: (0.479, 0.593),
                     42: (0.312, 0.157), 48: (0.390, 0.251), 53: (0.491, 0.367), 59: (0.111, 1.238),
                     76: (0.530, 0.364), 78: (0.557, 0.353), 92: (0.518, 0.453), 106: (0.720, 0.938),
                     107: (0.735, 1.164)}
TABLE_5_4_NO_BSA = {3: (0.308, 0.452), 5: (0.540, 0.289), 8: (0.412, 0.288), 17: (0.537, 0.491),
                    42: (0.455, 0.408), 48: (0.284, 0.350), 53: (0.571, 0.599), 59: (0.120, 0.879),
                    76: (0.493, 0.325), 78: (0.457, 0.271), 92: (0.604, 0.194), 106: (0.456, 0.788),
                    107: (0.857, 1.178)}
TABLE_5_4 = {"validity": TABLE_5_4_FULL, "validity-no-ssdm": TABLE_5_4_NO_SSDM, "validity-no-bsa": TABLE_5_4_NO_BSA}


def csv_index(thesis_id: int) -> int:
    """Our bundled DeepBench list has 107 rows; the dissertation's had one more between its IDs 17 and 42."""
    return thesis_id if thesis_id <= 17 else thesis_id - 1


def table_layer(thesis_id: int, arch):
    """The layer as Table 5.1 gives it, checked against the bundled DeepBench row. For IDs 3 and 5 the
    dissertation's space sizes (768, 3072) need the 10x5 kernel 10 rows high: DeepBench's row says 10
    wide (filter_w), so the dissertation read the two filter columns the other way round; we follow it."""
    n, k, (h, w), (kh, kw), c, stride, pad, *_ = TABLE_5_1[thesis_id]
    model = load_model("deepbench_conv")
    label = f"db{csv_index(thesis_id)}"
    row = next(layer.operator for layer in model.layers if label in layer.nodes)
    got = (row.sizes["N"], row.sizes["K"], row.attr("input_hw"), sorted((row.sizes.get("R", 1), row.sizes.get("S", 1))),
           row.sizes["C"], row.attr("stride")[0], row.attr("padding")[0])
    if got != (n, k, (h, w), sorted((kh, kw)), c, stride, pad):
        raise SystemExit(f"DeepBench row {label} is {got}, not Table 5.1's ID {thesis_id}")
    return adopt_precision(conv2d(f"db{thesis_id}", n=n, k=k, h=h, w=w, r=kh, s=kw, c=c, stride=stride,
                                  padding=pad), arch)


def ground_truth(template: ScheduleTemplate) -> dict[tuple[int, ...], Measurement]:
    return {tuple(int(v) for v in p): measure_one(template, "model", tuple(int(v) for v in p))
            for p in template.space.all_points()}


_SIM_TEMPLATE: list[ScheduleTemplate] = []     # the template the forked simulator workers measure


def _simulate_point(point: tuple[int, ...]) -> tuple[tuple[int, ...], Measurement, float]:
    t0 = time.process_time()
    m = measure_one(_SIM_TEMPLATE[0], "sim", point)
    return point, m, time.process_time() - t0


def sim_ground_truth(template: ScheduleTemplate, model_table: dict[tuple[int, ...], Measurement], jobs: int,
                     cached: dict | None = None) -> tuple[dict[tuple[int, ...], Measurement], dict]:
    """The ground truth with the simulator as the measurement: every configuration the model's table holds as
    valid (building its program: the same build both backends run first) run on the simulator backend
    (``measure_one(template, "sim", point)``, as a tuner's measurement is), on ``jobs`` forked workers; the
    invalid ones are the model table's (their build failed, neither backend runs them). ``cached``: a record this
    function returned before for the same template (``template_key``), whose cycles are taken instead of simulating
    again. Returns the table and its record: CPU seconds of the simulator runs (summed over the workers), the
    cycles per valid point, and the configurations the simulator refused (kept invalid, counted, never dropped)."""
    key = template_key(template)
    valid = [p for p, m in model_table.items() if m.valid]
    if cached is not None and cached.get("template") == key:
        cycles = {tuple(row[:-1]): row[-1] for row in cached["cycles"]}
        refused = {tuple(r["point"]): r["error"] for r in cached["refused"]}
        if set(cycles) | set(refused) != set(valid):
            raise SystemExit("the cached simulator cycles do not cover this space's valid configurations: "
                             "delete the cache file's entry for this layer")
        record = cached
    else:
        _SIM_TEMPLATE[:] = [template]
        cycles, refused, cpu = {}, {}, 0.0
        # the slowest simulations (smallest tiles: most tile steps) first, so no worker is left with a long one
        order = sorted(valid, key=lambda p: model_table[p].cost or 0.0, reverse=True)
        if jobs > 1:
            with multiprocessing.get_context("fork").Pool(jobs) as pool:
                done = list(pool.imap_unordered(_simulate_point, order, chunksize=4))
        else:
            done = [_simulate_point(p) for p in order]
        for p, m, secs in done:
            cpu += secs
            if m.valid:
                cycles[p] = m.cost
            else:
                refused[p] = m.error
        record = {"template": key, "cpu_s": cpu, "jobs": jobs,
                  "cycles": [[*p, c] for p, c in sorted(cycles.items())],
                  "refused": [{"point": list(p), "error": e} for p, e in sorted(refused.items())]}
    table = {p: (replace(m, cost=cycles[p]) if p in cycles
                 else replace(m, valid=False, cost=None, error=refused[p]) if p in refused else m)
             for p, m in model_table.items()}
    return table, record


def model_vs_sim(model_table: dict, sim_table: dict, threaded: set | None = None) -> dict:
    """The simulator's cycles against the model's over every configuration valid on both: how many differ, the
    largest differences either way, the mean absolute one, and whether the two bests are the same configurations;
    with ``threaded`` (the points with a virtual thread: double-buffered), how many of those differ and how many
    single-buffered ones do."""
    both = [p for p, m in sim_table.items() if m.valid and model_table[p].valid]
    rel = np.array([sim_table[p].cost / model_table[p].cost - 1 for p in both])
    split = {}
    if threaded is not None:
        differ = {p for p, r in zip(both, rel, strict=True) if abs(r) > 1e-9}
        split = {"threaded": len(threaded & set(both)), "threaded_differ": len(differ & threaded),
                 "single_differ": len(differ - threaded)}
    m_best = min(model_table[p].cost for p in both)
    s_best = min(sim_table[p].cost for p in both)
    at_m = {p for p in both if model_table[p].cost <= m_best * (1 + 1e-9)}
    at_s = {p for p in both if sim_table[p].cost <= s_best * (1 + 1e-9)}
    return {"configs": len(both), "differ": int((np.abs(rel) > 1e-9).sum()), "sim_faster": int((rel < -1e-9).sum()),
            "sim_slower": int((rel > 1e-9).sum()), "min_rel": float(rel.min()), "max_rel": float(rel.max()),
            "mean_abs_rel": float(np.abs(rel).mean()), "model_best": m_best, "sim_best": s_best,
            "model_cycles_of_sim_best": min(model_table[p].cost for p in at_s),
            "sim_cycles_of_model_best": min(sim_table[p].cost for p in at_m),
            "same_best_configs": at_m == at_s, "best_configs_shared": len(at_m & at_s), **split}


def region_shape(template: ScheduleTemplate, table: dict, best: float) -> dict:
    """The dissertation's Sec. 5.1.1 analysis of the valid region: its connected parts (Manhattan
    neighbours), how much of it lies on its edge, and whether the best configurations do."""
    space = template.space
    points = [tuple(int(v) for v in p) for p in space.all_points()]
    valid = np.array([table[p].valid for p in points])
    cost = np.array([table[p].cost if table[p].valid else np.inf for p in points])
    lab = regions(space.shape, valid)
    sizes = np.bincount(lab[valid]) if valid.any() else np.array([])
    edge = on_edge(space.shape, valid)
    at_best = cost <= best * (1 + 1e-9)
    near = cost <= best * (1 + NEAR)
    # which knobs a valid configuration's invalid neighbours lie along: tile sizes alone (the dissertation's
    # "buffers as full as possible" edge), or the loop order and thread knobs
    grid = valid.reshape(space.shape)
    by_other = np.zeros(space.shape, dtype=bool)
    for axis, knob in enumerate(space.knobs):
        if knob.kind == "split" or space.shape[axis] < 2:
            continue
        n = space.shape[axis]
        lo, hi = [slice(None)] * grid.ndim, [slice(None)] * grid.ndim
        lo[axis], hi[axis] = slice(0, n - 1), slice(1, n)
        by_other[tuple(lo)] |= grid[tuple(lo)] & ~grid[tuple(hi)]
        by_other[tuple(hi)] |= grid[tuple(hi)] & ~grid[tuple(lo)]
    tiles_only = edge & ~by_other.reshape(-1)
    return {"valid_regions": int((sizes > 0).sum()), "largest_region_share": float(sizes.max() / valid.sum()),
            "edge_share_of_valid": float(edge[valid].mean()), "best_on_edge": int((edge & at_best).sum()),
            "near_best_on_edge_share": float(edge[near].mean()),
            "edge_by_tile_sizes_only_share": float(tiles_only.sum() / max(1, edge.sum()))}


def simulator_check(template, table, rng) -> dict:
    valid = sorted((m for m in table.values() if m.valid), key=lambda m: m.cost)
    sample = valid[:SIM_CHECK_TOP]
    rest = valid[SIM_CHECK_TOP:]
    if rest:
        sample += [rest[int(i)] for i in rng.choice(len(rest), size=min(SIM_CHECK_SAMPLE, len(rest)), replace=False)]
    t0 = time.perf_counter()
    dev = [abs(measure_one(template, "sim", m.point).cost / m.cost - 1) for m in sample]
    return {"configs": len(sample), "max_rel_dev": max(dev), "seconds": time.perf_counter() - t0}


def simulator_scan(template, table, limit: int) -> dict:
    """The simulator against the model on the ``limit`` valid configurations of lowest model cost (all with
    ``limit`` 0): how many differ, split by whether the configuration has virtual threads (the double-buffered
    ones, where the model's ``_burst`` window is known to be pessimistic), and the largest differences."""
    valid = sorted((m for m in table.values() if m.valid), key=lambda m: (m.cost, m.point))
    valid = valid[:limit] if limit else valid
    t0 = time.process_time()
    rows = []
    for m in valid:
        values = template.space.values(m.point)
        threaded = any(int(v) > 1 for k, v in values.items() if k.endswith("nthread"))
        rows.append((measure_one(template, "sim", m.point).cost / m.cost - 1, threaded, m.cost,
                     template.describe(m.point)))
    differ = [r for r in rows if abs(r[0]) > 1e-9]
    return {"configs": len(rows), "of_valid": sum(m.valid for m in table.values()),
            "largest_model_cost": valid[-1].cost if valid else None, "cpu_s": time.process_time() - t0,
            "threaded": sum(r[1] for r in rows), "threaded_differ": sum(r[1] for r in differ),
            "single_differ": sum(not r[1] for r in differ), "sim_faster": sum(r[0] < 0 for r in differ),
            "sim_faster_over_5pct": sum(r[0] < -0.05 for r in differ), "sim_slower": sum(r[0] > 0 for r in differ),
            "worst": [{"rel_dev": r[0], "model": r[2], "config": r[3]} for r in sorted(rows, key=lambda r: r[0])[:3]],
            "largest_slower": max((r[0] for r in rows), default=0.0)}


def edge_local_optima(template, table, best: float) -> dict:
    """How the edge steps of the exhausting tuners see the valid region: per step set (``validity-edge-exhaust``'s,
    and with the constant-area reshape of ``validity-edge-reshape``), the valid configurations none of whose valid
    edge steps is cheaper (local optima: a run whose best-so-far sits on one has nothing to exhaust its way out
    with), how many of them are within 1% of the best without being at it (the near-ties a run sits on), and the
    share of valid configurations from which always stepping to the cheapest valid edge step ends at a best."""
    space = template.space
    points = [tuple(int(v) for v in p) for p in space.all_points()]
    cost = np.array([table[p].cost if table[p].valid else np.inf for p in points])
    valid = np.flatnonzero(np.isfinite(cost))
    at_best = cost <= best * (1 + 1e-9)
    out = {}
    for label, reshape in (("exhaust", False), ("reshape", True)):
        nxt = {}
        steps_per = []
        for f in valid:
            steps = {space.flat(q) for q in edge_neighbours(space, points[f], any_order=True, reshape=reshape)}
            steps_per.append(len(steps))
            g = min(steps, key=lambda s: cost[s], default=None)
            nxt[int(f)] = int(g) if g is not None and cost[g] < cost[f] else None
        optima = [f for f, g in nxt.items() if g is None]
        ends = {}
        for f in nxt:
            path = [f]
            while nxt[path[-1]] is not None and path[-1] not in ends:
                path.append(nxt[path[-1]])
            end = ends.get(path[-1], path[-1])
            for q in path:
                ends[q] = end
        out[label] = {"edge_steps_median": float(np.median(steps_per)), "local_optima": len(optima),
                      "local_optima_near_not_best": sum(1 for f in optima if not at_best[f]
                                                        and cost[f] <= best * (1 + NEAR)),
                      "descent_to_best_share": float(np.mean([at_best[ends[f]] for f in nxt])),
                      "near_descent_to_best_share": float(np.mean([at_best[ends[f]] for f in nxt
                                                                   if cost[f] <= best * (1 + NEAR)]))}
    return out


_JOB: dict = {}

# Variants of the tuners, for finding what separates our results from the dissertation's (not tuners of
# the command): AutoTVM's annealer returns only configurations the model scores at least 0 and fills
# the rest of a batch at random; "-sa-all" takes the annealer's best 50 whatever their sign.
SA_ALL = replace(DEFAULT_ANNEALING, min_score=None)
# "-xgb3": the tuners as the protocol's first 20 runs ran them (tuning_runs.jsonl): XGBoost 3's
# rank:pairwise defaults and 100 rounds, the annealer's knobs drawn uniformly, no redraw of an all-invalid
# first batch. They reproduce that file's runs trial for trial.
FIRST_SA = replace(DEFAULT_ANNEALING, uniform_knobs=True)
VARIANTS = {
    "autotvm-xgb3": lambda space, seed, is_valid: ModelTuner(space, seed, model=XGB3_MODEL, annealing=FIRST_SA),
    "validity-xgb3": lambda space, seed, is_valid: ValidityTuner(space, seed, is_valid, model=XGB3_MODEL,
                                                                 annealing=FIRST_SA),
    # the baseline of the fixed tuners without the dissertation's redraw of an all-invalid first batch
    "autotvm-no-redraw": lambda space, seed, is_valid: ModelTuner(space, seed),
    "autotvm-sa-all": lambda space, seed, is_valid: ModelTuner(space, seed, annealing=SA_ALL),
    "validity-sa-all": lambda space, seed, is_valid: ValidityTuner(space, seed, is_valid, annealing=SA_ALL),
    "validity-parallel-1": lambda space, seed, is_valid: ValidityTuner(
        space, seed, is_valid, validity=replace(ValiditySettings(), parallel=1)),
    "validity-parallel-64": lambda space, seed, is_valid: ValidityTuner(
        space, seed, is_valid, validity=replace(ValiditySettings(), parallel=64)),
}


class LocalValidityTuner(ValidityTuner):
    """The full method, its model-guided batches starting with up to ``LOCAL`` unmeasured Manhattan
    neighbours of the best configuration measured so far that are not known to be invalid (then the
    model's picks): whether the exact best is a neighbour of a near-best the ranking model leaves
    unmeasured."""

    LOCAL = 10

    def __init__(self, space, seed, is_valid):
        super().__init__(space, seed, is_valid)
        self.name = "validity-local"
        self.best_point, self.best_cost = None, math.inf

    def update(self, points, results) -> None:
        for p, r in zip(points, results, strict=True):
            if r.valid and r.cost is not None and r.cost < self.best_cost:
                self.best_point, self.best_cost = p, r.cost
        super().update(points, results)

    def next_batch(self, n: int):
        if not self.xs or self.first or self.best_point is None:
            return super().next_batch(n)
        near = [q for q in self.space.neighbours(self.best_point)
                if self.space.flat(q) not in self.visited and self.space.flat(q) not in self.known_invalid]
        local = [near[int(i)] for i in self.rng.permutation(len(near))[:self.LOCAL]]
        self.visited.update(self.space.flat(q) for q in local)     # the model's picks skip them
        return local + super().next_batch(n - len(local))


VARIANTS["validity-local"] = lambda space, seed, is_valid: LocalValidityTuner(space, seed, is_valid)
# following an improvement inside an epoch (``validity-edge-follow`` is 5 edge steps after a new best, from the
# first epoch on): 10 or 5 steps from the first retraining on, and 10 from the first epoch on
# edge steps built before they are measured (5 or 10 followed steps, no exhausting), and the best's edge
# exhausted from the first retraining on only (``validity-edge-exhaust`` does from the first improvement on)
for _name, _settings in (("validity-edge-check", ValiditySettings(edge_walk=10, edge_follow=5,
                                                                  follow_first_epoch=True, edge_check=True)),
                         ("validity-edge-check-10", ValiditySettings(edge_walk=10, edge_follow=10,
                                                                     follow_first_epoch=True, edge_check=True)),
                         ("validity-edge-exhaust-late", ValiditySettings(edge_walk=10, edge_follow=5,
                                                                         follow_first_epoch=True, edge_check=True,
                                                                         edge_exhaust="late", edge_any_order=True)),
                         ("validity-edge-follow-late", ValiditySettings(edge_walk=10, edge_follow=10)),
                         ("validity-edge-follow-late-5", ValiditySettings(edge_walk=10, edge_follow=5)),
                         ("validity-edge-follow-10", ValiditySettings(edge_walk=10, edge_follow=10,
                                                                      follow_first_epoch=True))):
    VARIANTS[_name] = (lambda settings, name: lambda space, seed, is_valid: _named(
        ValidityTuner(space, seed, is_valid, validity=settings), name))(_settings, _name)


# leaving a plateau with AutoTVM's diversity filter at another ratio than ``validity-edge-plateau``'s 2
VARIANTS["validity-edge-plateau-4"] = lambda space, seed, is_valid: _named(ValidityTuner(
    space, seed, is_valid, validity=replace(EDGE_PLATEAU, plateau_diversity=4.0)), "validity-edge-plateau-4")


def _named(tuner, name: str):
    tuner.name = name
    return tuner


# Variants that need the template (the model's footprint features), built from it: the dissertation's method
# with one change each, for finding what moves its convergence.
# "-valid-first": the first batch is 50 presampled-valid configurations spread by Algorithm 5 (invalid ones
# are still measured when the model picks them); "-balanced": that first batch, and known-invalid
# configurations train the model unmeasured, at most as many as the valid ones measured (the model study's
# 0.5 valid ratio); "-footprint": the model also sees each operand's log2 tile size.
TEMPLATE_VARIANTS = {
    "validity-valid-first": lambda tpl, seed, is_valid: _named(ValidityTuner(
        tpl.space, seed, is_valid, validity=replace(ValiditySettings(), valid_ratio=1.0)), "validity-valid-first"),
    "validity-balanced": lambda tpl, seed, is_valid: _named(ValidityTuner(
        tpl.space, seed, is_valid, measure_invalid=False, validity=replace(ValiditySettings(), prior_invalid_share=0.5)),
        "validity-balanced"),
    "validity-footprint": lambda tpl, seed, is_valid: _named(ValidityTuner(
        tpl.space, seed, is_valid, extra_features=tpl.footprint_features), "validity-footprint"),
    "validity-balanced-footprint": lambda tpl, seed, is_valid: _named(ValidityTuner(
        tpl.space, seed, is_valid, measure_invalid=False, extra_features=tpl.footprint_features,
        validity=replace(ValiditySettings(), prior_invalid_share=0.5)), "validity-balanced-footprint"),
    "validity-edge-25": lambda tpl, seed, is_valid: _named(ValidityTuner(
        tpl.space, seed, is_valid, validity=replace(ValiditySettings(), edge_walk=25)), "validity-edge-25"),
    "validity-edge-b10": lambda tpl, seed, is_valid: _named(ValidityTuner(
        tpl.space, seed, is_valid, validity=replace(ValiditySettings(), edge_walk=10, edge_bases=10)),
        "validity-edge-b10"),
    "autotvm-footprint": lambda tpl, seed, is_valid: _named(ModelTuner(
        tpl.space, seed, redraw_invalid_first=is_valid, extra_features=tpl.footprint_features), "autotvm-footprint"),
}


def _make(name: str, template, seed: int, is_valid):
    space = template.space
    if name in TEMPLATE_VARIANTS:
        return TEMPLATE_VARIANTS[name](template, seed, is_valid)
    if name in VARIANTS:
        return VARIANTS[name](space, seed, is_valid)
    if name == "autotvm":
        # the dissertation's baseline: a random first batch without a valid configuration is redrawn
        return ModelTuner(space, seed, redraw_invalid_first=is_valid)
    return make_tuner(name, space, seed, is_valid=is_valid)


def trace_run(thesis_id: int, tuner_name: str, seed: int, trials: int) -> dict:
    """One run with what happens at every retraining: where the best configurations rank under the score the
    annealer maximises (model plus bias) among the unmeasured ones (None once one is measured), how many of
    the 50 best-scored are valid, and per batch how many measured configurations were valid."""
    template, table, best = _JOB[thesis_id]
    space = template.space
    points = [tuple(int(v) for v in p) for p in space.all_points()]
    valid = np.array([table[p].valid for p in points])
    at_best = {i for i, p in enumerate(points) if table[p].valid and table[p].cost <= best * (1 + 1e-9)}
    tuner = _make(tuner_name, template, seed, lambda p: table[p].valid)
    ranks: list[int | None] = []
    top_valid: list[float] = []
    find = tuner.annealer.find_maximums

    def traced(predict, num, exclude, bias=None):
        score = predict(space.all_points()).astype(np.float64) + (bias if bias is not None else 0.0)
        order = [int(f) for f in np.argsort(-score, kind="stable") if int(f) not in exclude]
        ranks.append(None if at_best & exclude else min(order.index(f) for f in at_best))
        top_valid.append(float(valid[order[:50]].mean()))
        return find(predict, num, exclude, bias)

    tuner.annealer.find_maximums = traced
    run = run_tuner(tuner, lookup_measurer(table), trials, STEP)
    return {"thesis_id": thesis_id, "tuner": tuner_name, "seed": seed, "trials_to_best": run.trials_to_reach(best),
            "valid_per_batch": [sum(m.valid for m in run.history[i:i + 50]) for i in range(0, len(run.history), 50)],
            "best_rank_per_retraining": ranks, "valid_share_of_top50": top_valid}


def _run_job(args):
    """One run; besides convergence it records how many trials were valid and how many of the
    model-guided batches' points were drawn at random (the annealer found no more scored >= 0)."""
    thesis_id, tuner_name, seed, trials = args
    template, table, best = _JOB[thesis_id]
    # validity by lookup too: the ground truth holds every configuration's build result
    tuner = _make(tuner_name, template, seed, lambda p: table[p].valid)
    t0 = time.perf_counter()
    run = run_tuner(tuner, lookup_measurer(table), trials, STEP)
    hit = run.trials_to_reach(best)
    near = run.trials_to_reach(best, NEAR)
    first_valid = next((i for i, m in enumerate(run.history, 1) if m.valid), None)
    valid = sum(m.valid for m in run.history)
    first_batch_valid = sum(m.valid for m in run.history[:50])
    random_fill = getattr(tuner, "random_fill", None)
    # validity checks of edge steps beyond presampling's (validity-edge-check), a cost outside the trials
    edge_checks = getattr(tuner, "edge_checks", None)
    return (thesis_id, tuner_name, seed, hit, near, first_valid, time.perf_counter() - t0, valid,
            first_batch_valid, random_fill, edge_checks)


def read_runs(path: Path, repair: bool = False) -> list[tuple]:
    """The runs of a runs file, one JSON list a line. A sweep stopped while writing can leave its last line
    cut short: that run is dropped (and said so); with ``repair`` (``--resume``, which appends) the file is
    also truncated to its complete lines, so the run is done again and appended after a whole line."""
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    runs, keep = [], 0
    for i, line in enumerate(lines):
        if not line.strip():
            keep += len(line)
            continue
        try:
            runs.append(tuple(json.loads(line)))
        except json.JSONDecodeError:
            if i != len(lines) - 1:
                raise SystemExit(f"{path}: line {i + 1} is not a run (a JSON list): {line[:60]!r}") from None
            print(f"{path}: its last line is cut short (a stopped sweep); that run is dropped")
            if repair:
                with path.open("r+") as f:
                    f.truncate(keep)
            break
        if repair and not line.endswith("\n"):
            with path.open("a") as f:      # a whole last line without its newline: end it before appending
                f.write("\n")
        keep += len(line)
    return runs


def stats(values: list[int]) -> tuple[float, float]:
    q1, med, q3 = np.percentile(values, [25, 50, 75])
    return float(med), float(q3 - q1)


def bootstrap_means(base: dict[int, list[int]], tuner: dict[int, list[int]], reps: int = 2000,
                    seed: int = 0) -> tuple[tuple[float, float], tuple[float, float]]:
    """95% intervals of the mean over layers of the relative median and IQR, resampling each layer's
    runs of the tuner and of the baseline with replacement: how far the protocol's means can move
    with another draw of the same number of runs. The resamples are drawn one by one (per resample, per layer,
    the baseline's then the tuner's) and their quartiles taken together, row by row."""
    rng = np.random.default_rng(seed)
    lids = list(base)
    picks: dict[int, tuple[np.ndarray, np.ndarray]] = {
        lid: (np.empty((reps, len(base[lid])), dtype=np.int64), np.empty((reps, len(tuner[lid])), dtype=np.int64))
        for lid in lids}
    for r in range(reps):
        for lid in lids:
            picks[lid][0][r] = rng.integers(0, len(base[lid]), len(base[lid]))
            picks[lid][1][r] = rng.integers(0, len(tuner[lid]), len(tuner[lid]))
    med_sum, iqr_sum, iqr_layers = np.zeros(reps), np.zeros(reps), np.zeros(reps)
    for lid in lids:
        b_q1, b_med, b_q3 = np.percentile(np.asarray(base[lid])[picks[lid][0]], [25, 50, 75], axis=1)
        t_q1, t_med, t_q3 = np.percentile(np.asarray(tuner[lid])[picks[lid][1]], [25, 50, 75], axis=1)
        med_sum += t_med / b_med
        b_iqr = b_q3 - b_q1
        has = b_iqr != 0          # a resample whose baseline IQR is 0 leaves the layer out of that IQR mean
        iqr_sum[has] += (t_q3 - t_q1)[has] / b_iqr[has]
        iqr_layers += has
    meds = med_sum / len(lids)
    iqrs = np.where(iqr_layers > 0, iqr_sum / np.maximum(iqr_layers, 1), np.nan)
    lo_m, hi_m = np.percentile(meds, [2.5, 97.5])
    lo_q, hi_q = np.nanpercentile(iqrs, [2.5, 97.5])
    return (float(lo_m), float(hi_m)), (float(lo_q), float(hi_q))


def layout_report(layers: list[int], row_cycles: int, path: Path) -> list[dict]:
    """The layout knob priced: each layer's space with the input's DRAM layout as a knob, exhaustively, on
    vta_like with a DRAM read latency of ``row_cycles`` per row of a tile load (``read_row_cycles``) and
    without: per layout the valid configurations and the best cycles (model), the simulator's cycles of
    each best, and what the rows cost the best of the declared layout."""
    base = get_accelerator("vta_like")
    rows_arch = replace(base, levels=(replace(base.levels[0], read_row_cycles=row_cycles),) + base.levels[1:])
    out = []
    print(f"\nlayout knob priced: DRAM read_row_cycles = {row_cycles} (0 in the second block of columns)")
    print(f"  {'ID':>4} {'space':>7} {'layout':<6} {'valid':>6} {'best':>12} {'sim':>12} {'best, 0':>12} "
          f"{'same best':>9}  best configuration (with the rows)")
    for lid in layers:
        rec: dict = {"thesis_id": lid, "read_row_cycles": row_cycles, "layouts": {}}
        for arch, key in ((rows_arch, "rows"), (base, "no_rows")):
            template = ScheduleTemplate(table_layer(lid, arch), arch, layout_knob=True)
            table = ground_truth(template)
            rec["space"] = template.space.size
            for layout in ("NCHW", "NHWC"):
                ms = [m for m in table.values() if m.valid and template.space.values(m.point)["layout"] == layout]
                best = min(ms, key=lambda m: m.cost) if ms else None
                got = rec["layouts"].setdefault(layout, {"valid": len(ms)})
                got[f"best_{key}"] = best.cost if best else None
                got[f"best_{key}_config"] = template.describe(best.point) if best else None
                if best is not None and key == "rows":
                    got["best_rows_sim"] = measure_one(template, "sim", best.point).cost
        for layout, got in rec["layouts"].items():
            print(f"  {lid:>4} {rec['space']:>7,} {layout:<6} {got['valid']:>6} {got['best_rows'] or 0:>12,.0f} "
                  f"{got.get('best_rows_sim') or 0:>12,.0f} {got['best_no_rows'] or 0:>12,.0f} "
                  f"{str(got['best_rows_config'] == got['best_no_rows_config']):>9}  {got['best_rows_config']}")
        out.append(rec)
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({"read_row_cycles": row_cycles, "layers": out}, indent=2) + "\n")
    print(f"wrote {path}")
    return out


HOST_LAYERS = (48, 8, 78)   # the Table 5.1 layers small enough to run as C on the host many times


def host_benchmark(tuners: list[str], trials: int, layers: list[int], batch: int, repeats: int,
                   runs: int = 1) -> list[dict]:
    """Each tuner ``runs`` times per layer (seeds 0, 1, ...), measuring the emitted C on this CPU. A
    configuration is measured once per layer and its measurement shared by the tuners and runs that ask
    for it (the same noise for all of them); a run's wall time is its tuner's own time (presampling,
    model, annealing) plus the measurement time of every configuration it asked for, as if it had
    measured them itself."""
    arch = get_accelerator("vta_like")
    out = []
    for lid in layers:
        template = ScheduleTemplate(table_layer(lid, arch), arch)
        shared = Measurer(template, "host", workers=1, repeats=repeats)
        for seed, name in ((seed, name) for seed in range(runs) for name in tuners):
            t0 = time.perf_counter()
            inside = [0.0]           # real time spent in shared measurement calls
            charged = [0.0]          # measurement time charged to this tuner
            stamps: list[float] = []

            def measure(points, t0=t0, inside=inside, charged=charged, stamps=stamps, shared=shared):
                own = time.perf_counter() - t0 - inside[0]
                t1 = time.perf_counter()
                res = shared(points)
                inside[0] += time.perf_counter() - t1
                for m in res:
                    charged[0] += m.wall_s
                    stamps.append(own + charged[0])
                return res

            tuner = make_tuner(name, template.space, seed, is_valid=lambda p, t=template: t.build(p).valid,
                               plan_size=batch)
            run = run_tuner(tuner, measure, min(trials, template.space.size), batch)
            out.append({"thesis_id": lid, "space": template.space.size, "macs": template.op.macs, "tuner": name,
                        "seed": seed, "run": run, "stamps": stamps, "own_s": time.perf_counter() - t0 - inside[0]})
            print(f"  host: layer {lid} {name} run {seed}: {len(run.history)} trials, best "
                  f"{run.best.cost * 1e3 if run.best else float('nan'):.1f} ms, "
                  f"{shared.measured} configurations measured on this layer so far", flush=True)
        shared.close()
    best: dict[int, float] = {}
    for rec in out:
        b = rec["run"].best
        if b is not None and b.cost is not None:
            best[rec["thesis_id"]] = min(best.get(rec["thesis_id"], b.cost), b.cost)
    rows = []
    for rec in out:
        run, target = rec["run"], best[rec["thesis_id"]]
        hit = run.trials_to_reach(target, 0.05)
        exact = run.trials_to_reach(target)
        noise = [m.noise for m in run.history if m.noise is not None]
        rows.append({"thesis_id": rec["thesis_id"], "space": rec["space"], "macs": rec["macs"], "tuner": rec["tuner"],
                     "seed": rec["seed"], "trials": len(run.history), "valid": sum(m.valid for m in run.history),
                     "best_s": run.best.cost if run.best else None, "layer_best_s": target,
                     "trials_to_best": exact, "trials_to_5pct": hit,
                     "wall_to_5pct_s": rec["stamps"][hit - 1] if hit else None, "wall_s": rec["stamps"][-1],
                     "tuner_own_s": rec["own_s"], "median_noise": statistics.median(noise) if noise else None})
    return rows


def host_summary(rows: list[dict], trials: int) -> list[dict]:
    """Per layer and tuner over its runs: how many reached within 5% of the layer's best, the median trials
    and wall time to it (a run that did not counts ``trials`` and its whole wall time), and the median best."""
    out = []
    for lid in dict.fromkeys(r["thesis_id"] for r in rows):
        for t in dict.fromkeys(r["tuner"] for r in rows):
            rs = [r for r in rows if r["thesis_id"] == lid and r["tuner"] == t]
            if not rs:
                continue
            out.append({"thesis_id": lid, "tuner": t, "runs": len(rs),
                        "reached_5pct": sum(r["trials_to_5pct"] is not None for r in rs),
                        "median_trials_to_5pct": statistics.median(r["trials_to_5pct"] or trials for r in rs),
                        "median_wall_to_5pct_s": statistics.median(
                            r["wall_to_5pct_s"] if r["wall_to_5pct_s"] is not None else r["wall_s"] for r in rs),
                        "median_best_s": statistics.median(r["best_s"] if r["best_s"] is not None else math.inf
                                                           for r in rs),
                        "median_noise": statistics.median(r["median_noise"] for r in rs
                                                          if r["median_noise"] is not None)
                        if any(r["median_noise"] is not None for r in rs) else None})
    return out


def report_host(tuners: list[str], trials: int, layers: list[int], batch: int, repeats: int,
                path: Path | None, runs: int = 1) -> list[dict]:
    t0 = time.perf_counter()
    rows = host_benchmark(tuners, trials, layers, batch, repeats, runs)
    print(f"\nhost CPU in the loop (emitted C, median of {repeats} runs), {trials} trials per tuner in batches of "
          f"{batch}: trials and wall time to within 5% of the best time any tuner measured on the layer")
    print(f"  {'ID':>4} {'space':>6} {'tuner':<18} {'run':>3} {'valid':>5} {'to 5%':>5} {'wall s':>7} {'to best':>7} "
          f"{'best ms':>8} {'noise':>6}")
    for r in rows:
        wall = f"{r['wall_to_5pct_s']:.1f}" if r["wall_to_5pct_s"] is not None else "-"
        print(f"  {r['thesis_id']:>4} {r['space']:>6} {r['tuner']:<18} {r['seed']:>3} {r['valid']:>5} "
              f"{r['trials_to_5pct'] or '-':>5} {wall:>7} {r['trials_to_best'] or '-':>7} "
              f"{(r['best_s'] or float('nan')) * 1e3:>8.1f} {r['median_noise'] or 0:>6.1%}")
    summary = host_summary(rows, trials)
    print(f"\n  over {runs} runs (a run that did not reach 5% counts {trials} trials and its whole wall time)")
    print(f"  {'ID':>4} {'tuner':<18} {'reached':>7} {'med trials':>10} {'med wall s':>10} {'med best ms':>11}")
    for r in summary:
        print(f"  {r['thesis_id']:>4} {r['tuner']:<18} {r['reached_5pct']:>3}/{r['runs']:<3} "
              f"{r['median_trials_to_5pct']:>10.1f} {r['median_wall_to_5pct_s']:>10.1f} "
              f"{r['median_best_s'] * 1e3:>11.1f}")
    if path is not None:
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps({"trials": trials, "batch": batch, "repeats": repeats, "layers": layers,
                                    "runs": runs, "wall_s": time.perf_counter() - t0, "rows": rows,
                                    "summary": summary}, indent=2) + "\n")
        print(f"wrote {path}")
    return rows


def main() -> None:
    global NEAR, STEP
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--trials", type=int, default=750)
    ap.add_argument("--layers", default=",".join(map(str, TABLE_5_1)))
    ap.add_argument("--tuners", default=",".join(TUNERS))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seed-from", type=int, default=0,
                    help="run only the seeds from this one up to --runs (a sweep split over several commands, each "
                         "with its own --out: join their runs files and summarise with --from-runs)")
    ap.add_argument("--host", action="store_true", help="also tune three Table 5.1 layers on this CPU")
    ap.add_argument("--host-trials", type=int, default=30)
    ap.add_argument("--host-layers", default=",".join(map(str, HOST_LAYERS)))
    ap.add_argument("--host-batch", type=int, default=10)
    ap.add_argument("--host-repeats", type=int, default=3)
    ap.add_argument("--host-runs", type=int, default=3, help="runs (seeds) per tuner on the host")
    ap.add_argument("--host-only", action="store_true", help="only the host-in-the-loop part")
    ap.add_argument("--out", default="tuning", help="name of the result files in benchmarks/results/")
    ap.add_argument("--resume", action="store_true",
                    help="keep the runs the runs file already holds and append the missing ones")
    ap.add_argument("--from-runs", action="store_true",
                    help="summarise the runs file of an earlier (or interrupted) sweep instead of running one")
    ap.add_argument("--complete-seeds", action="store_true",
                    help="with --from-runs: summarise the seeds below --runs that every layer and tuner has (a split "
                         "or stopped sweep), instead of requiring all --runs of them")
    ap.add_argument("--baseline", default=BASELINE, help="the tuner the others are relative to")
    ap.add_argument("--baseline-runs", help="a runs file of an earlier sweep to take the baseline's runs from")
    ap.add_argument("--step", type=int, default=STEP,
                    help="configurations measured at a time (AutoTVM's n_parallel); the model is still retrained "
                         f"every {EPOCH} trials. Only the tuners that follow an improvement inside an epoch "
                         "(validity-edge-follow) depend on it")
    ap.add_argument("--near", type=float, default=NEAR,
                    help="the tolerance of 'trials to within' (0.01: 1%%; the *_within_1pct fields then hold it)")
    ap.add_argument("--layout-only", action="store_true",
                    help="only the layout knob priced with a DRAM read latency per row (--row-cycles) on --layers")
    ap.add_argument("--row-cycles", type=int, default=16,
                    help="DRAM read_row_cycles for --layout-only (16: VTA's simulated DRAM latency per request)")
    ap.add_argument("--sim-scan", type=int, metavar="N",
                    help="run the simulator on the N valid configurations of lowest model cost of each of --layers "
                         "(0: all) and compare it with the model (no sweep)")
    ap.add_argument("--trace", action="store_true",
                    help="run --runs seeds of --tuners on --layers one by one and print, per retraining, where the "
                         "best configurations rank under the annealer's score (no sweep)")
    ap.add_argument("--edge-optima", action="store_true",
                    help="per layer of --layers, the edge steps' local optima and greedy descents, with and without "
                         "the constant-area reshape (no sweep)")
    ap.add_argument("--ground-truth", choices=("model", "sim"), default="model",
                    help="what a configuration's latency is in the ground truth: the analytical model, or the "
                         "simulator run on every valid configuration (on --jobs workers; cached in --sim-cycles)")
    ap.add_argument("--sim-cycles", default=str(RESULTS / "tuning_sim_cycles.json"),
                    help="the simulator's cycles of every valid configuration per layer, written as each layer is "
                         "done and read instead of simulating again (--ground-truth sim)")
    ap.add_argument("--ground-truth-only", action="store_true",
                    help="only the exhaustive ground truth and the shape of the valid region per layer")
    args = ap.parse_args()
    NEAR = args.near          # set before the workers fork: their runs read it
    STEP = args.step
    layers = [int(x) for x in args.layers.split(",")]
    tuners = args.tuners.split(",")
    host_layers = [int(x) for x in args.host_layers.split(",")]
    if args.layout_only:
        layout_report(layers, args.row_cycles, RESULTS / f"{args.out}_layout.json")
        return
    if args.host_only:
        report_host(tuners, args.host_trials, host_layers, args.host_batch, args.host_repeats,
                    RESULTS / f"{args.out}_host.json", args.host_runs)
        return
    baseline = args.baseline
    if baseline not in tuners:
        raise SystemExit(f"--tuners must include the baseline {baseline}")
    arch = get_accelerator("vta_like")
    rng = np.random.default_rng(0)
    spaces = {}
    spaces_path = RESULTS / f"{args.out}_spaces.json"
    if args.from_runs and spaces_path.exists():
        # the ground truth's summary a --ground-truth-only run wrote: no need to enumerate the spaces again
        spaces = {int(k): v for k, v in json.loads(spaces_path.read_text())["layers"].items()}
        layers = [lid for lid in layers if lid in spaces]
        print(f"spaces from {spaces_path}")
    print(f"{'ID':>4} {'space':>7} {'thesis':>7} {'valid':>6} {'thesis':>7} {'best cycles':>12} "
          f"{'at best':>7} {'<1%':>5} {'sim dev':>8} {'regions':>7} {'edge':>5} {'best@edge':>9} {'<1%@edge':>8}")
    sim_cache_path = Path(args.sim_cycles)
    sim_cache = json.loads(sim_cache_path.read_text()) if sim_cache_path.exists() else {}
    for lid in [lid for lid in layers if lid not in spaces]:
        op = table_layer(lid, arch)
        template = ScheduleTemplate(op, arch)
        t0 = time.perf_counter()
        table = ground_truth(template)
        gt_s = time.perf_counter() - t0
        sim_record = None
        if args.ground_truth == "sim":
            model_table = table
            cached = sim_cache.get(str(lid))
            table, sim_record = sim_ground_truth(template, model_table, args.jobs, cached)
            if sim_record is not cached:
                sim_cache[str(lid)] = sim_record
                sim_cache_path.write_text(json.dumps(sim_cache) + "\n")     # per layer: a stop loses one layer
            threaded = {p for p in table if any(int(v) > 1 for k, v in template.space.values(p).items()
                                                if k.endswith("nthread"))}
            diff = model_vs_sim(model_table, table, threaded)
            check = {"configs": diff["configs"], "max_rel_dev": max(-diff["min_rel"], diff["max_rel"]),
                     "seconds": None}
        costs = np.array([m.cost for m in table.values() if m.valid])
        best = float(costs.min())
        if sim_record is None:
            check = simulator_check(template, table, rng)
        shape = region_shape(template, table, best)
        _JOB[lid] = (template, table, best)
        spaces[lid] = {"thesis_id": lid, "deepbench_index": csv_index(lid), "space": template.space.size,
                       "thesis_space": TABLE_5_1[lid][7], "valid_ratio": len(costs) / template.space.size,
                       "thesis_valid_ratio": TABLE_5_1[lid][8], "best_cycles": best,
                       "configs_at_best": int((costs <= best * (1 + 1e-9)).sum()),
                       "configs_within_1pct": int((costs <= best * (1 + NEAR)).sum()),
                       "ground_truth_s": gt_s, "simulator_check": check, "region": shape}
        if sim_record is not None:
            spaces[lid].update(ground_truth="simulator", sim_cpu_s=sim_record["cpu_s"], sim_jobs=sim_record["jobs"],
                               sim_refused=len(sim_record["refused"]), model_vs_sim=diff)
            print(f"     simulator: {sim_record['cpu_s']:.0f} CPU s for {diff['configs']} valid configurations; differs "
                  f"from the model on {diff['differ']} (faster on {diff['sim_faster']}, down to {diff['min_rel']:+.2%}; "
                  f"slower on {diff['sim_slower']}, up to {diff['max_rel']:+.2%}); model best {diff['model_best']:,.0f}"
                  f", simulator best {diff['sim_best']:,.0f}, same best configurations: {diff['same_best_configs']}; "
                  f"differ with a virtual thread {diff['threaded_differ']} of {diff['threaded']}, single-buffered "
                  f"{diff['single_differ']}"
                  + (f"; {len(sim_record['refused'])} refused by the simulator (invalid here)"
                     if sim_record["refused"] else ""), flush=True)
        s = spaces[lid]
        print(f"{lid:>4} {s['space']:>7,} {s['thesis_space']:>7,} {s['valid_ratio']:>6.3f} "
              f"{s['thesis_valid_ratio']:>7.3f} {best:>12,.0f} {s['configs_at_best']:>7} "
              f"{s['configs_within_1pct']:>5} {check['max_rel_dev']:>8.2%} {shape['valid_regions']:>7} "
              f"{shape['edge_share_of_valid']:>5.2f} {shape['best_on_edge']:>4}/{s['configs_at_best']:<4} "
              f"{shape['near_best_on_edge_share']:>8.2f}")
    if args.sim_scan is not None:
        scans = {}
        for lid in layers:
            template, table, _best = _JOB[lid]
            scans[lid] = scan = simulator_scan(template, table, args.sim_scan)
            print(f"{lid}: {scan['configs']} of {scan['of_valid']} valid configurations (model cost up to "
                  f"{scan['largest_model_cost']:,.0f}), {scan['cpu_s']:.0f} CPU s: simulator differs on "
                  f"{scan['single_differ']} single-threaded and {scan['threaded_differ']} of {scan['threaded']} "
                  f"with virtual threads; faster on {scan['sim_faster']} ({scan['sim_faster_over_5pct']} by over "
                  f"5%), slower on {scan['sim_slower']} (at most {scan['largest_slower']:.2%})")
            for w in scan["worst"]:
                print(f"    {w['rel_dev']:+.2%} (model {w['model']:,.0f})  {w['config']}")
        (RESULTS / f"{args.out}_simscan.json").write_text(json.dumps(scans, indent=2) + "\n")
        print(f"wrote {RESULTS / (args.out + '_simscan.json')}")
        return
    if args.edge_optima:
        found = {}
        print(f"\nedge steps (validity-edge-exhaust's; with the constant-area reshape): local optima among the valid "
              f"configurations, those within {NEAR:.0%} of the best but not at it, and the share of valid (and of "
              f"within-{NEAR:.0%}) configurations whose steepest descent over valid edge steps ends at a best")
        for lid in layers:
            template, table, best = _JOB[lid]
            t0 = time.process_time()
            found[lid] = got = edge_local_optima(template, table, best)
            for label, r in got.items():
                print(f"  {lid:>4} {label:<8} steps {r['edge_steps_median']:>5.0f}  local optima {r['local_optima']:>5}"
                      f"  near, not best {r['local_optima_near_not_best']:>4}  descent to best "
                      f"{r['descent_to_best_share']:>6.1%} (from within {NEAR:.0%}: {r['near_descent_to_best_share']:.1%})")
            print(f"        ({time.process_time() - t0:.0f} CPU s)", flush=True)
        (RESULTS / f"{args.out}_edge_optima.json").write_text(json.dumps(found, indent=2) + "\n")
        print(f"wrote {RESULTS / (args.out + '_edge_optima.json')}")
        return
    if args.trace:
        traces = [trace_run(lid, t, seed, args.trials) for lid in layers for t in tuners for seed in range(args.runs)]
        for tr in traces:
            print(f"{tr['thesis_id']:>4} {tr['tuner']:<16} seed {tr['seed']:>2}: best at {tr['trials_to_best']}; "
                  f"valid per batch {tr['valid_per_batch'][:8]}; the best's rank per retraining "
                  f"{tr['best_rank_per_retraining'][:8]}; valid share of the top 50 "
                  f"{[round(v, 2) for v in tr['valid_share_of_top50'][:8]]}")
        (RESULTS / f"{args.out}_trace.json").write_text(json.dumps(traces, indent=2) + "\n")
        print(f"wrote {RESULTS / (args.out + '_trace.json')}")
        return
    if args.ground_truth_only or (args.ground_truth == "sim" and not args.from_runs):
        RESULTS.mkdir(exist_ok=True)
        spaces_path.write_text(json.dumps({"layers": spaces}, indent=2) + "\n")
        print(f"wrote {spaces_path}")
        if args.ground_truth_only:
            return
    # seed-major: an interrupted sweep holds the same number of runs of every layer and tuner
    jobs = [(lid, t, seed, args.trials) for seed in range(args.seed_from, args.runs) for lid in layers for t in tuners]
    t0 = time.perf_counter()
    RESULTS.mkdir(exist_ok=True)
    runs_path = RESULTS / f"{args.out}_runs.jsonl"
    if args.from_runs:
        # the runs a sweep already wrote (an interrupted one too): the layers and tuners with all their runs
        # one run per layer, tuner and seed (the runs files of a split sweep joined may repeat one)
        results = list({(r[0], r[1], r[2]): r for r in read_runs(runs_path)}.values())
        if args.complete_seeds:
            # a sweep split over --seed-from ranges and stopped: the seeds below --runs that every layer and tuner has
            have = {(r[0], r[1], r[2]) for r in results}
            seeds = {s for s in range(args.runs) if all((lid, t, s) in have for lid in layers for t in tuners)}
            if not seeds:
                raise SystemExit(f"{runs_path} holds no seed below {args.runs} with a run of every layer and tuner")
            results = [r for r in results if r[0] in layers and r[1] in tuners and r[2] in seeds]
            print(f"\nfrom {runs_path}: the {len(seeds)} seeds every layer and tuner has: {sorted(seeds)}")
        else:
            done = {(r[0], r[1]) for r in results}
            # the seeds below --runs only: a later seed's runs of an interrupted sweep do not stand in for them
            count = {k: len({r[2] for r in results if (r[0], r[1]) == k and r[2] < args.runs}) for k in done}
            layers = [lid for lid in layers if all(count.get((lid, t), 0) >= args.runs for t in tuners)]
            results = [r for r in results if r[0] in layers and r[1] in tuners and r[2] < args.runs]
            if not layers:
                raise SystemExit(f"{runs_path} holds no layer with {args.runs} runs of every tuner")
            print(f"\nfrom {runs_path}: layers {', '.join(map(str, layers))} complete")
    else:
        ctx = multiprocessing.get_context("fork")
        results, base = [], []
        if args.resume and runs_path.exists():
            # keep the runs an interrupted sweep finished (a run is deterministic in its seed) and do the rest
            wanted = {(lid, t, seed) for lid, t, seed, _ in jobs}
            results = [r for r in read_runs(runs_path, repair=True) if (r[0], r[1], r[2]) in wanted]
            have = {(r[0], r[1], r[2]) for r in results}
            jobs = [j for j in jobs if (j[0], j[1], j[2]) not in have]
            print(f"\nresuming: {len(results)} runs from {runs_path}, {len(jobs)} to do")
        if args.baseline_runs:
            # the baseline's runs of an earlier sweep with the same seeds, instead of running them again
            base = [r for r in read_runs(Path(args.baseline_runs)) if r[1] == baseline and (r[0], r[1], r[2]) in
                    {(lid, t, seed) for lid, t, seed, _ in jobs}]
            have = {(r[0], r[1], r[2]) for r in base}
            jobs = [j for j in jobs if (j[0], j[1], j[2]) not in have]
            results += base
            print(f"{len(base)} {baseline} runs from {args.baseline_runs}")
        with ctx.Pool(args.jobs) as pool, runs_path.open("a" if args.resume else "w") as partial:
            for rec in base:
                partial.write(json.dumps(rec) + "\n")
            # each run as it ends, so a long sweep can be read before it finishes
            for rec in pool.imap_unordered(_run_job, jobs, chunksize=1):
                results.append(rec)
                partial.write(json.dumps(rec) + "\n")
                partial.flush()
    wall = time.perf_counter() - t0
    by: dict = {}
    for lid, t, _seed, hit, near, first_valid, secs, *extra in results:
        by.setdefault((lid, t), []).append((hit, near, first_valid, secs, *extra))
    per_layer = []
    print(f"\nconvergence (trials to the best; a run that never finds it counts {args.trials}), "
          f"{len({r[2] for r in results})} runs x {args.trials} trials; relative = median or IQR / the {baseline} baseline's")
    print(f"{'ID':>4} {'tuner':<18} {'median':>7} {'IQR':>6} {'missed':>6} {'<1%':>5} {'rel med':>7} "
          f"{'rel IQR':>7} {'thesis':>13}  95% intervals of rel med / rel IQR")
    for lid in layers:
        base_med, base_iqr = stats([h or args.trials for h, *_ in by[(lid, baseline)]])
        base_near, _ = stats([n or args.trials for _, n, *_ in by[(lid, baseline)]])
        for t in tuners:
            rows = by[(lid, t)]
            med, iqr = stats([h or args.trials for h, *_ in rows])
            near_med, _ = stats([n or args.trials for _, n, *_ in rows])
            first_valid_med, _ = stats([r[2] or args.trials for r in rows])
            extra = [r[4:] for r in rows if len(r) > 4]       # runs files before these fields lack them
            # how far this layer's relative median and IQR move with another draw of as many runs
            layer_ci = bootstrap_means({lid: [h or args.trials for h, *_ in by[(lid, baseline)]]},
                                       {lid: [h or args.trials for h, *_ in rows]})
            rec = {"thesis_id": lid, "tuner": t, "median": med, "iqr": iqr,
                   "missed": sum(1 for h, *_ in rows if h is None), "median_within_1pct": near_med,
                   "median_first_valid": first_valid_med,
                   "rel_median": med / base_med if base_med else None,
                   "rel_iqr": iqr / base_iqr if base_iqr else None,
                   "rel_median_95ci": layer_ci[0], "rel_iqr_95ci": layer_ci[1],
                   "rel_median_within_1pct": near_med / base_near,
                   "median_seconds_per_run": statistics.median(r[3] for r in rows),
                   "median_valid_trials": statistics.median(e[0] for e in extra) if extra else None,
                   "median_first_batch_valid": statistics.median(e[1] for e in extra) if extra else None,
                   "median_random_fill": statistics.median(e[2] for e in extra)
                   if extra and all(e[2] is not None for e in extra) else None,
                   "median_edge_checks": statistics.median(e[3] for e in extra)
                   if extra and all(len(e) > 3 and e[3] is not None for e in extra) else None}
            per_layer.append(rec)
            table = TABLE_5_4.get(t)
            rec["thesis_rel_median"], rec["thesis_rel_iqr"] = table[lid] if table else (None, None)
            thesis = f"{table[lid][0]:.3f}/{table[lid][1]:.3f}" if table else ""
            rel = lambda v: f"{v:.3f}" if v is not None else "-"
            print(f"{lid:>4} {t:<18} {med:>7.0f} {iqr:>6.0f} {rec['missed']:>6} {near_med:>5.0f} "
                  f"{rel(rec['rel_median']):>7} {rel(rec['rel_iqr']):>7} {thesis:>13}  "
                  f"[{rec['rel_median_95ci'][0]:.2f}, {rec['rel_median_95ci'][1]:.2f}] / "
                  f"[{rec['rel_iqr_95ci'][0]:.2f}, {rec['rel_iqr_95ci'][1]:.2f}]")
    print("\nmean over layers of the relative median and IQR (the dissertation's Table 5.4: Full 0.416 / 0.424, "
          "no SSDM 0.483 / 0.541, no BSA 0.469 / 0.501)")
    means = {}
    for t in tuners:
        recs = [r for r in per_layer if r["tuner"] == t]
        med = [r["rel_median"] for r in recs if r["rel_median"] is not None]
        iqr = [r["rel_iqr"] for r in recs if r["rel_iqr"] is not None]
        ci = bootstrap_means({lid: [h or args.trials for h, *_ in by[(lid, baseline)]] for lid in layers},
                             {lid: [h or args.trials for h, *_ in by[(lid, t)]] for lid in layers})
        means[t] = {"rel_median": statistics.mean(med) if med else None,
                    "rel_iqr": statistics.mean(iqr) if iqr else None,
                    "rel_median_within_1pct": statistics.mean(r["rel_median_within_1pct"] for r in recs),
                    "layers_iqr_defined": len(iqr),
                    "rel_median_95ci": ci[0], "rel_iqr_95ci": ci[1]}
        print(f"  {t:<18} {means[t]['rel_median']:.3f} / "
              + (f"{means[t]['rel_iqr']:.3f}" if means[t]["rel_iqr"] is not None else "-")
              + f"   95% bootstrap over runs: [{ci[0][0]:.3f}, {ci[0][1]:.3f}] / [{ci[1][0]:.3f}, {ci[1][1]:.3f}]"
              + f"; to within {NEAR:.2%} of the best {means[t]['rel_median_within_1pct']:.3f}"
              + (f" (IQR over {len(iqr)} layers: the baseline's IQR is 0 on the others)"
                 if len(iqr) < len(recs) else ""))
    host_rows = (report_host(tuners, args.host_trials, host_layers, args.host_batch, args.host_repeats, None,
                             args.host_runs)
                 if args.host else [])
    RESULTS.mkdir(exist_ok=True)
    out = {"protocol": {"runs": args.runs, "seeds": sorted({r[2] for r in results}), "trials": args.trials, "batch": EPOCH, "step": STEP, "baseline": baseline, "near": NEAR,
                        "ground_truth": "analytical model (checked against the simulator per layer)"
                        if args.ground_truth == "model" else "simulator (every valid configuration run on it)",
                        "wall_s": None if args.from_runs else wall, "jobs": args.jobs,
                        "summarised_from_runs_file": args.from_runs},
           "layers": spaces, "per_layer": per_layer, "means": means, "host": host_rows}
    (RESULTS / f"{args.out}.json").write_text(json.dumps(out, indent=2) + "\n")
    print(f"\nwrote {RESULTS / (args.out + '.json')} ({wall:.0f} s of tuning on {args.jobs} processes)")


if __name__ == "__main__":
    main()
