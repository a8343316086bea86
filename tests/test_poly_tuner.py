"""AKG's tile-size tuner in the tune layer: random first round, a model, N-best perturbation."""

from accelmap.arch.presets import get_accelerator
from accelmap.poly.compile import compile_subgraph
from accelmap.poly.dsl import parse_subgraph
from accelmap.poly.library import library_subgraph
from accelmap.tune.akg_tuner import AkgTuner, poly_tile_space, tune_poly
from accelmap.tune.knobs import Knob, KnobSpace
from accelmap.tune.loop import run_tuner
from accelmap.tune.measure import Measurement

ASCEND = get_accelerator("ascend_like")


def test_tile_space_knobs_are_fractal_multiples_on_the_cube():
    k = parse_subgraph(library_subgraph("matmul", M=256, N=128, K=64), "mm")
    tiles = poly_tile_space(k, compile_subgraph(k, ASCEND))
    assert [kn.options for kn in tiles.space.knobs] == [(16, 32, 64, 128, 256), (16, 32, 64, 128), (16, 32, 64)]
    assert tiles.spec((0, 3, 2)) == {"S1": ((16, "UB"), (128, "UB"), (64, "UB"))}


def test_second_round_perturbs_the_best_point_along_the_model():
    """On a separable cost (the model fits it exactly), with p = 1 and N = 1 every later sample is a neighbour
    of the best point so far, one step downhill: the tuner walks to the optimum of a 16x16 grid from its random
    first round."""
    space = KnobSpace((Knob("a", tuple(2 ** i for i in range(16)), "split"), Knob("b", tuple(2 ** i for i in range(16)), "split")))
    target = (11, 3)

    def cost(pt):
        return 2.0 ** ((pt[0] - target[0]) ** 2 + (pt[1] - target[1]) ** 2)

    def measure(points):
        return [Measurement(p, True, cost(p)) for p in points]

    t = AkgTuner(space, seed=3, first_round=4, n_best=1, p=1.0)
    run = run_tuner(t, measure, 60, batch_size=4)
    best = run.best
    assert best is not None and best.point == target
    steps = sum(any(sum(abs(a - b) for a, b in zip(m.point, e.point, strict=True)) == 1 for e in run.history[:i])
                for i, m in enumerate(run.history) if i >= 4)
    assert steps >= 28   # most second-round samples are one-step moves (the others: both moves measured)
    # the tune layer's uniform tuner with the same seed and budget misses the optimum
    from accelmap.tune.tuners import make_tuner
    rnd = run_tuner(make_tuner("random", space, 3), measure, 60, batch_size=4).best
    assert rnd is not None and rnd.point != target


def test_tuner_result_reproduces_and_never_loses():
    k = parse_subgraph(library_subgraph("matmul", M=256, N=128, K=256), "mm")
    r = tune_poly(k, ASCEND, rounds=2, per_round=4, seed=1)
    assert r.best_cycles <= r.auto_cycles and len(r.history) == 8
