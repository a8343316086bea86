"""Auto-tuner over loop order, vectorized loop, unroll-and-jam factors {1,2,4,8} and data layouts, with
Vyasa's pruning: reduction loops always fully unrolled, unroll-and-jam bounded (code size against the 16 KB
program memory), and every variant the compiler rejects (register capacity, shuffle network, alignment) pruned.
The objective is the modeled cycle count (the paper runs the AI Engine simulator instead)."""

from __future__ import annotations

import itertools
import time
from collections import Counter
from dataclasses import dataclass, replace

from accelmap.errors import AccelmapError
from accelmap.vector.compiler import CompileError, Schedule, compile_conv
from accelmap.vector.conv import OUTPUT_DIMS, ConvSpec, Layout
from accelmap.vector.cycles import CycleEstimate, estimate, lower_bound_cycles
from accelmap.vector.intrinsics import SHAPES
from accelmap.vector.machine import Core
from accelmap.vector.modulo import RegisterAllocationError
from accelmap.vector.program import VectorProgram
from accelmap.vector.tiling import TiledCycles, tile_conv, tile_counts, tiled_cycles

UNROLL_FACTORS = (1, 2, 4, 8)
MAX_GROUPS = 8          # unroll-and-jam product bound (the paper bounds it for code size and compile time)


class TuneError(AccelmapError):
    """No schedule compiles for the workload."""


@dataclass(frozen=True)
class TuneResult:
    schedule: Schedule
    program: VectorProgram       # the kernel of one K tile when ``tiles`` > 1
    cost: CycleEstimate          # of that kernel
    evaluated: int
    rejected: tuple[tuple[str, int], ...]
    seconds: float
    tiles: int = 1               # K tiles run one after another (the tensors exceed the data memory)
    pruned: int = 0              # loop orders whose cycle lower bound exceeded the best found (not scheduled)
    # The best on the first intrinsic tried (mac16 at int16: the 16 x 2 datapath of Vyasa's evaluation, Table V,
    # before mac8's 8 x 4 is tried); None when that intrinsic compiles nothing.
    first_shape_best: tuple[Schedule, CycleEstimate] | None = None

    @property
    def tiled(self) -> TiledCycles | None:
        return tiled_cycles(self.conv, self.tiles, self.cost.cycles) if self.tiles > 1 else None

    @property
    def conv(self) -> ConvSpec:
        return replace(self.program.conv, name=self.program.conv.name.split("[")[0],
                       k=self.program.conv.k * self.tiles)


def shapes_for(bits: int) -> tuple[str, ...]:
    return ("mac16", "mac8") if bits == 16 else ("lmac8",)


def layout_candidates(conv: ConvSpec, vector_dim: str, lanes: int, cols: int) -> list[tuple[tuple[str, Layout], ...]]:
    """(O, W, I) layouts: row-major permutations with the vector loop innermost in O, plus channel blocking by the
    column count (fusion along channels, Vyasa's (C/2)Y'X'(2)) or by the lane count for a k-vectorized filter."""
    z = "Z " if conv.is_3d else ""
    t = "T " if conv.is_3d else ""
    L = Layout.parse
    cands: list[tuple[str, str, str]] = []
    if vector_dim == "x":
        o = f"K {z}Y X"
        if conv.depthwise:
            cands.append((o, f"K {t}S R", f"C {z}Y X"))
        else:
            cands.append((o, f"K C {t}S R", f"C {z}Y X"))
            if cols > 1 and conv.c % cols == 0:
                cands.append((o, f"K C/{cols} {t}S R C%{cols}", f"C/{cols} {z}Y X C%{cols}"))
    elif not conv.depthwise:
        o = f"{z}Y X K"
        if cols > 1:
            if conv.c % cols == 0:
                cands.append((o, f"K/{lanes} {t}S R C/{cols} K%{lanes} C%{cols}", f"{z}Y X C"))
        else:
            cands.append((o, f"K/{lanes} C {t}S R K%{lanes}", f"{z}Y X C"))
            if conv.c % 8 == 0:
                cands.append((o, f"K/{lanes} C/8 {t}S R C%8 K%{lanes}", f"C/8 {z}Y X C%8"))
    return [(("O", L(a)), ("W", L(b)), ("I", L(c))) for a, b, c in cands]


def tune(conv: ConvSpec, core: Core) -> TuneResult:
    """The best schedule; when no variant fits the data memory, the fewest K tiles whose kernel does."""
    t0 = time.perf_counter()
    try:
        return _tune(conv, core, t0)
    except TuneError as e:
        if "data memory" not in str(e):
            raise
        for tiles in tile_counts(conv, tuple(SHAPES[s].lanes for s in shapes_for(conv.bits))):
            try:
                res = _tune(tile_conv(conv, tiles), core, t0)
            except TuneError as e2:
                if "data memory" in str(e2):
                    continue
                raise
            return replace(res, tiles=tiles)
        raise


def _tune(conv: ConvSpec, core: Core, t0: float) -> TuneResult:
    sizes = conv.sizes
    rejected: Counter[str] = Counter()
    example: dict[str, str] = {}           # the first full message of each rejection reason
    evaluated = 0
    first_shape = shapes_for(conv.bits)[0]
    # Every body is compiled first; its loop orders are then scheduled in the order of their cycle lower bounds, so
    # the best is found early and the bound prunes the most. A pruned variant's bound exceeds a schedule found, so
    # no order of evaluation changes the choice; the first intrinsic's own best (the 16 x 2 datapath at int16) is
    # kept exact by pruning its variants only against a schedule of that intrinsic.
    candidates: list[tuple[int, int, Schedule, VectorProgram, tuple[int, ...], tuple[str, ...]]] = []
    for shape_name in shapes_for(conv.bits):
        shape = SHAPES[shape_name]
        for v in ("x", "k"):
            if sizes[v] % shape.lanes:
                continue
            for layouts in layout_candidates(conv, v, shape.lanes, shape.cols):
                for u in itertools.product(UNROLL_FACTORS, repeat=len(OUTPUT_DIMS)):
                    unroll = dict(zip(OUTPUT_DIMS, u, strict=True))
                    if any(sizes[d] % (f * (shape.lanes if d == v else 1)) for d, f in unroll.items()):
                        continue
                    if u[0] * u[1] * u[2] * u[3] > MAX_GROUPS:
                        continue
                    dims = [d for d in OUTPUT_DIMS if sizes[d] // (unroll[d] * (shape.lanes if d == v else 1)) > 1]
                    sched = Schedule(v, shape_name, tuple((d, f) for d, f in unroll.items() if f > 1), tuple(dims),
                                     layouts)
                    evaluated += 1
                    try:
                        prog = compile_conv(conv, sched, core.data_mem_bits)
                    except CompileError as e:
                        rejected[_reason(str(e))] += 1
                        example.setdefault(_reason(str(e)), str(e))
                        continue
                    by_dim = {lp.dim: lp for lp in prog.loops}
                    for order in itertools.permutations(dims) if dims else [()]:
                        variant = replace(prog, loops=tuple(by_dim[d] for d in order))
                        candidates.append((lower_bound_cycles(variant, core), len(candidates), sched, variant, u,
                                           order))
    best: tuple | None = None
    first_best: tuple | None = None
    pruned = 0
    for bound, n, sched, variant, u, order in sorted(candidates, key=lambda c: c[:2]):
        first = sched.shape == first_shape
        if best is not None and bound > best[0][0] and not (first and (first_best is None or
                                                                         bound <= first_best[0][0])):
            pruned += 1
            continue
        try:
            cost = estimate(variant, core)
        except RegisterAllocationError as e:
            rejected["registers"] += 1
            example.setdefault("registers", str(e))
            continue
        if not cost.fits_program_memory:
            rejected["code size over 16 KB"] += 1
            continue
        # (ties, down to layouts, go to the first variant enumerated)
        key = (cost.cycles, cost.code_bytes, sched.shape != "mac16", sched.vector_dim, u, order, n)
        found = (key, replace(sched, order=order), variant, cost)
        if best is None or key < best[0]:
            best = found
        if first and (first_best is None or key < first_best[0]):
            first_best = found
    if best is None:
        if not evaluated:
            raise TuneError(f"{conv.name}: no vector loop fits: x={sizes['x']} and k={sizes['k']} are not multiples "
                            f"of the lane counts {sorted({SHAPES[s].lanes for s in shapes_for(conv.bits)})}")
        why = "; ".join(f"{n} x {example.get(k, k)}" for k, n in sorted(rejected.items()))
        raise TuneError(f"{conv.name}: no schedule compiles ({evaluated} tried): {why}")
    return TuneResult(best[1], best[2], best[3], evaluated, tuple(sorted(rejected.items())),
                      time.perf_counter() - t0, pruned=pruned,
                      first_shape_best=None if first_best is None else (first_best[1], first_best[3]))


def _reason(msg: str) -> str:
    for key in ("shuffle network", "widest register", "multiple of", "data memory", "aligned", "two registers",
                "contiguous"):
        if key in msg:
            return key
    return msg[:40]
