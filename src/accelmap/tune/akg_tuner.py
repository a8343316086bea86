"""AKG's tile-size tuner (Zhao et al., PLDI 2021, Sec. 5.3) in the tune layer, over the polyhedral compiler.

The space: one knob per tiled band member of each kernel auto-tiling planned (powers of two from the
member's step up to its extent, plus the extent; the step is 16 on cube kernels, the fractal size, and
32 bytes on the innermost member of vector kernels, the UB alignment). A configuration is measured by
compiling the subgraph with those sizes as a tile spec and simulating it on the DAE timing model; one
that fits no buffer is an invalid measurement.

The search, as the paper describes it: round 1 measures random configurations; a model is fitted to
every valid measurement (least squares of log cycles on the knobs' log2 values and their squares: the
paper does not name its model, and XGBoost, the tune layer's model, is not installed here); every later
sample is, with probability p, one of the N best measured points moved one step along one knob in the
direction the model predicts faster (the paper: "towards higher performance in the learning model",
N = 64), and otherwise drawn uniformly from the unmeasured space; the model is refitted after each
round. The paper's p follows a formula it does not give, from a parameter it sets to 0.5; we keep p = 0.5.
The tuner runs through the tune layer's loop (``run_tuner``) and ``Measurement``s, and the result never
loses to auto-tiling (it falls back to auto-tiling's sizes).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from accelmap.arch.accelerator import Accelerator
from accelmap.errors import MappingError
from accelmap.poly.compile import Compiled, compile_subgraph
from accelmap.poly.kernel import CUBE, Kernel, dtype_bytes
from accelmap.poly.timing import time_compiled
from accelmap.tune.knobs import Knob, KnobSpace
from accelmap.tune.loop import TuneRun, run_tuner
from accelmap.tune.measure import Measurement
from accelmap.tune.tuners import Tuner

Point = tuple[int, ...]
N_BEST = 64          # the paper's N
PERTURB_P = 0.5      # the paper's pre-defined parameter of p


def _choices(extent: int, step: int) -> tuple[int, ...]:
    out, t = [], step
    while t < extent:
        out.append(t)
        t *= 2
    return tuple(out + [extent])


@dataclass(frozen=True)
class PolyTileSpace:
    """Tile-size knobs of a compiled subgraph: knob j sizes member ``members[j][1]`` of the kernel whose tiled
    group ends with statement ``members[j][0]``."""

    space: KnobSpace
    members: tuple[tuple[str, int], ...]

    def spec(self, point: Point) -> dict[str, tuple[tuple[int, str], ...]]:
        out: dict[str, list[tuple[int, str]]] = {}
        for (stmt, _i), knob, j in zip(self.members, self.space.knobs, point, strict=True):
            out.setdefault(stmt, []).append((knob.options[j], "UB"))
        return {s: tuple(v) for s, v in out.items()}

    def sizes(self, point: Point) -> dict[str, tuple[int, ...]]:
        return {s: tuple(t for t, _b in v) for s, v in self.spec(point).items()}


def poly_tile_space(k: Kernel, auto: Compiled) -> PolyTileSpace:
    """The knobs of every tiled band member of ``auto``'s kernels."""
    knobs, members = [], []
    for plan in auto.plans:
        if not plan.extents:
            continue
        cube = any(k.statement(s).is_cube for s in plan.statements)
        elem = min(dtype_bytes(k.tensors[k.statement(s).out.tensor].dtype) for s in plan.group)
        for i, e in enumerate(plan.extents):
            step = CUBE if cube and e >= CUBE else max(1, 32 // elem) if i == len(plan.extents) - 1 else 1
            knobs.append(Knob(f"{plan.group[-1]}.{i}", _choices(e, min(step, e)), kind="split"))
            members.append((plan.group[-1], i))
    return PolyTileSpace(KnobSpace(tuple(knobs)), tuple(members))


def poly_measurer(k: Kernel, arch: Accelerator, tiles: PolyTileSpace, fuse: bool = True):
    """Measure configurations by compiling with their tile sizes and simulating (cycles as the cost)."""
    def measure(points: list[Point]) -> list[Measurement]:
        out = []
        for pt in points:
            try:
                c = compile_subgraph(k, arch, fuse=fuse, tile_spec=tiles.spec(pt))
                out.append(Measurement(tuple(pt), True, float(time_compiled(c).cycles)))
            except MappingError as e:
                out.append(Measurement(tuple(pt), False, None, str(e)))
        return out
    return measure


class AkgTuner(Tuner):
    """Random first round, then N-best perturbation along the fitted model's descent, or uniform samples."""

    name = "akg"

    def __init__(self, space: KnobSpace, seed: int, first_round: int, n_best: int = N_BEST, p: float = PERTURB_P):
        super().__init__(space, seed)
        self.first_round, self.n_best, self.p = first_round, n_best, p
        self.valid: dict[Point, float] = {}
        self.coef: np.ndarray | None = None

    def _features(self, points: list[Point]) -> np.ndarray:
        x = self.space.features(np.array(points, dtype=np.int64).reshape(len(points), len(self.space.shape)))
        return np.concatenate([np.ones((len(points), 1)), x, x * x], axis=1)

    def predict(self, points: list[Point]) -> np.ndarray:
        """The model's log cycles of ``points`` (needs a fit)."""
        assert self.coef is not None
        return self._features(points) @ self.coef

    def next_batch(self, n: int) -> list[Point]:
        if len(self.visited) < self.first_round or self.coef is None:
            return self._random_unvisited(n)
        best = [pt for pt, _c in sorted(self.valid.items(), key=lambda x: x[1])[:self.n_best]]
        out: list[Point] = []
        taken = {self.space.flat(pt) for pt in out}
        for _ in range(n):
            pt = None
            if best and self.rng.random() < self.p:
                base = best[int(self.rng.integers(len(best)))]
                axis = int(self.rng.integers(len(self.space.shape)))
                steps = [base[:axis] + (base[axis] + d,) + base[axis + 1:] for d in (-1, 1)
                         if 0 <= base[axis] + d < self.space.shape[axis]]
                steps = [s for s in steps if self.space.flat(s) not in self.visited | taken]
                if steps:
                    pt = steps[int(np.argmin(self.predict(steps)))]
            if pt is None:
                drawn = self._random_unvisited(1, exclude=taken)
                if not drawn:
                    break
                pt = drawn[0]
            taken.add(self.space.flat(pt))
            out.append(pt)
        return out

    def update(self, points: list[Point], results: list[Measurement]) -> None:
        super().update(points, results)
        for m in results:
            if m.valid and m.cost is not None:
                self.valid[m.point] = m.cost
        if len(self.valid) >= 3:
            pts = list(self.valid)
            y = np.log(np.array([self.valid[p] for p in pts], dtype=float))
            self.coef = np.linalg.lstsq(self._features(pts), y, rcond=None)[0]


@dataclass
class PolyTuneResult:
    best_sizes: dict[str, tuple[int, ...]]          # tiled statement -> sizes
    best_cycles: int
    auto_cycles: int                                # auto-tiling's choice, for comparison
    run: TuneRun | None = None
    history: list[Measurement] = field(default_factory=list)

    @property
    def spec(self) -> str:
        return "; ".join(f"S_{s[1:]}: " + ", ".join(f"{t}@UB" for t in sz) for s, sz in self.best_sizes.items())


def tune_poly(k: Kernel, arch: Accelerator, *, fuse: bool = True, rounds: int = 4, per_round: int = 8,
              tuner: str = "akg", seed: int = 0) -> PolyTuneResult:
    """Tune ``k``'s tile sizes for ``rounds`` rounds of ``per_round`` samples with AKG's tuner (or ``"random"``,
    the tune layer's uniform tuner, on the same knobs and budget)."""
    auto = compile_subgraph(k, arch, fuse=fuse)
    auto_cycles = time_compiled(auto).cycles
    auto_sizes = {p.group[-1]: p.sizes for p in auto.plans if p.extents}
    tiles = poly_tile_space(k, auto)
    if not tiles.members:
        return PolyTuneResult(auto_sizes, auto_cycles, auto_cycles)
    if tuner == "akg":
        t: Tuner = AkgTuner(tiles.space, seed, first_round=per_round)
    else:
        from accelmap.tune.tuners import make_tuner
        t = make_tuner(tuner, tiles.space, seed)
    run = run_tuner(t, poly_measurer(k, arch, tiles, fuse), rounds * per_round, batch_size=per_round)
    best = run.best
    if best is None or best.cost is None or best.cost >= auto_cycles:
        return PolyTuneResult(auto_sizes, auto_cycles, auto_cycles, run, run.history)
    return PolyTuneResult(tiles.sizes(best.point), int(best.cost), auto_cycles, run, run.history)
