"""AKG's tile-size tuner (PLDI 2021, Sec. 5.3) over the simulated cycles of the DAE model.

Round 1 measures random valid tile sizes. A model is fitted to them (here: least squares of log cycles on
the log tile sizes and their squares; the paper does not name its model). Each later round draws a sample
either (probability p) by moving one of the N best measured points one step along one member, in the
direction the model predicts is faster, or (1 - p) uniformly from the whole space; it is measured and the
model refitted. The paper's p follows an unstated formula; we keep p = 0.5, its stated parameter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from accelmap.arch.accelerator import Accelerator
from accelmap.errors import MappingError
from accelmap.poly.compile import CUBE, compile_subgraph
from accelmap.poly.kernel import Kernel, dtype_bytes
from accelmap.poly.timing import time_compiled

Point = tuple[int, ...]


@dataclass
class TuneResult:
    best_sizes: dict[str, tuple[int, ...]]          # tiled statement -> sizes
    best_cycles: int
    auto_cycles: int                                # auto-tiling's choice, for comparison
    history: list[tuple[Point, int | None]] = field(default_factory=list)   # None: does not fit

    @property
    def spec(self) -> str:
        return "; ".join(f"S_{s[1:]}: " + ", ".join(f"{t}@UB" for t in sz) for s, sz in self.best_sizes.items())


def _choices(extent: int, step: int) -> list[int]:
    out = []
    t = step
    while t < extent:
        out.append(t)
        t *= 2
    return out + [extent]


def tune(k: Kernel, arch: Accelerator, *, fuse: bool = True, rounds: int = 4, per_round: int = 8,
         n_best: int = 64, p: float = 0.5, seed: int = 0) -> TuneResult:
    auto = compile_subgraph(k, arch, fuse=fuse)
    auto_cycles = time_compiled(auto).cycles
    members: list[tuple[str, int, list[int]]] = []     # (statement naming the kernel, member, choices)
    for plan in auto.plans:
        if not plan.extents:
            continue
        cube = any(k.statement(s).is_cube for s in plan.statements)
        elem = min(dtype_bytes(k.tensors[k.statement(s).out.tensor].dtype) for s in plan.group)
        for i, e in enumerate(plan.extents):
            step = CUBE if cube and e >= CUBE else max(1, 32 // elem) if i == len(plan.extents) - 1 else 1
            members.append((plan.group[-1], i, _choices(e, step)))
    rng = np.random.default_rng(seed)
    measured: dict[Point, int | None] = {}
    history: list[tuple[Point, int | None]] = []

    def sizes_of(pt: Point) -> dict[str, tuple[int, ...]]:
        out: dict[str, list[int]] = {}
        for (stmt, _i, ch), j in zip(members, pt, strict=True):
            out.setdefault(stmt, []).append(ch[j])
        return {s: tuple(v) for s, v in out.items()}

    def measure(pt: Point) -> None:
        if pt in measured:
            return
        spec = {s: tuple((t, "UB") for t in v) for s, v in sizes_of(pt).items()}
        try:
            cyc: int | None = time_compiled(compile_subgraph(k, arch, fuse=fuse, tile_spec=spec)).cycles
        except MappingError:
            cyc = None
        measured[pt] = cyc
        history.append((pt, cyc))

    def random_point() -> Point:
        return tuple(int(rng.integers(len(ch))) for _s, _i, ch in members)

    def features(pt: Point) -> np.ndarray:
        x = np.array([math.log2(ch[j]) for (_s, _i, ch), j in zip(members, pt, strict=True)], dtype=float)
        return np.concatenate([[1.0], x, x * x])

    if not members:
        return TuneResult({}, auto_cycles, auto_cycles, [])
    for _ in range(per_round):
        measure(random_point())
    for _ in range(rounds - 1):
        good = [(c, pt) for pt, c in measured.items() if c is not None]
        coef = None
        if len(good) >= 3:
            X = np.array([features(pt) for _c, pt in good])
            y = np.log(np.array([c for c, _pt in good], dtype=float))
            coef = np.linalg.lstsq(X, y, rcond=None)[0]
        best = [pt for _c, pt in sorted(good)[:n_best]]
        for _ in range(per_round):
            if best and coef is not None and rng.random() < p:
                base = best[int(rng.integers(len(best)))]
                m = int(rng.integers(len(members)))
                cands = [tuple(j + d if i == m else j for i, j in enumerate(base)) for d in (-1, 1)]
                cands = [c for c in cands if 0 <= c[m] < len(members[m][2])]
                pt = min(cands, key=lambda c: float(features(c) @ coef)) if cands else random_point()
            else:
                pt = random_point()
            measure(pt)
    good = [(c, pt) for pt, c in measured.items() if c is not None]
    if not good:
        return TuneResult({}, auto_cycles, auto_cycles, history)
    cyc, pt = min(good)
    if cyc >= auto_cycles:   # the tuner keeps auto-tiling's choice when it found nothing better
        return TuneResult({p.group[-1]: p.sizes for p in auto.plans if p.extents}, auto_cycles, auto_cycles,
                          history)
    return TuneResult(sizes_of(pt), cyc, auto_cycles, history)
