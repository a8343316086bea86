"""Generate, compile, run on random inputs, and check against NumPy and the cost model."""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from accelmap.arch.accelerator import Accelerator
from accelmap.codegen.build import compile_shared, load_run
from accelmap.codegen.c_source import generate_c
from accelmap.codegen.c_tensors import random_inputs, reference
from accelmap.cost.model import COUNTERS, access_counts
from accelmap.mapping.loopnest import Mapping
from accelmap.workload.operator import Operator


@dataclass
class RunReport:
    c_file: Path
    library: Path
    generate_s: float
    compile_s: float
    run_s: float
    max_abs_error: float
    exact: bool                       # output equal to NumPy (bit-exact for int, within tolerance for fp32)
    counts: dict[tuple[str, str], tuple[int, ...]]                   # from the generated code (fills, reads, ...)
    model_counts: dict[tuple[str, str], tuple[int, int, int, int]]   # from accelmap.cost
    mismatches: list[str] = field(default_factory=list)

    @property
    def counts_equal(self) -> bool:
        return not self.mismatches

    @property
    def ok(self) -> bool:
        return self.exact and self.counts_equal

    def table(self) -> str:
        lines = [f"{'level':<8} {'operand':<8} " + " ".join(f"{c:>12}" for c in COUNTERS) + "   model agrees"]
        for key, c in self.counts.items():
            mc = self.model_counts.get(key, (0, 0, 0, 0))
            lines.append(f"{key[0]:<8} {key[1]:<8} " + " ".join(f"{v:>12,}" for v in c)
                         + ("   yes" if tuple(c) == tuple(mc) else f"   NO (model {mc})"))
        return "\n".join(lines)


def run_generated(fn, op: Operator, tensors: dict[str, np.ndarray], nlev: int,
                  layouts: dict[str, tuple[int, ...]] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Run a built operator on copies of ``tensors``; returns (output, counters[level][operand][4]).
    ``layouts``: the axis orders the program was generated for (``generate_c``): each tensor is passed
    stored that way, and the output returned in its declared order."""
    layouts = layouts or {}
    bufs = [np.ascontiguousarray(np.transpose(tensors[X.name], layouts[X.name]) if X.name in layouts
                                 else tensors[X.name]).copy() for X in op.operands]
    ptrs = (ctypes.c_void_p * len(bufs))(*[b.ctypes.data for b in bufs])
    counters = np.zeros((nlev, len(op.operands), 4), dtype=np.int64)
    fn(ptrs, counters.ctypes.data_as(ctypes.POINTER(ctypes.c_longlong)))
    k = next(i for i, X in enumerate(op.operands) if X.is_output)
    out = bufs[k]
    if op.operands[k].name in layouts:
        out = np.transpose(out, np.argsort(layouts[op.operands[k].name]))
    return out, counters


def counts_by_name(op: Operator, arch: Accelerator, m: Mapping,
                   counters: np.ndarray) -> dict[tuple[str, str], tuple[int, ...]]:
    out = {}
    for i, lv in enumerate(arch.levels):
        for k, X in enumerate(op.operands):
            if X.name in m.keep[i]:
                out[(lv.name, X.name)] = tuple(int(v) for v in counters[i, k])
    return out


def check_mapping(op: Operator, arch: Accelerator, m: Mapping, *, dtype: str = "int", seed: int = 0,
                  c_path: str | Path | None = None, trials: int = 1) -> RunReport:
    if trials < 1:
        raise ValueError(f"trials must be at least 1, got {trials}")
    t0 = time.perf_counter()
    src = generate_c(op, arch, m, dtype)
    t1 = time.perf_counter()
    lib = compile_shared(src, c_path)
    t2 = time.perf_counter()
    fn = load_run(lib)
    rng = np.random.default_rng(seed)
    worst, exact = 0.0, True
    counts: dict[tuple[str, str], tuple[int, ...]] = {}
    t3 = time.perf_counter()
    for _ in range(trials):
        tensors = random_inputs(op, dtype, rng)
        got, counters = run_generated(fn, op, tensors, len(arch.levels))
        want = reference(op, tensors)
        if dtype == "fp32":
            diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
            scale = np.maximum(1.0, np.abs(want.astype(np.float64)))
            worst = max(worst, float(diff.max(initial=0.0)))
            # fp32 sums in a different order: allow a few ulps per accumulated term
            terms = max(1, op.macs // max(1, want.size))
            exact = exact and bool(np.all(diff <= scale * np.finfo(np.float32).eps * 4 * terms))
        else:
            worst = max(worst, float(np.abs(got.astype(np.int64) - want.astype(np.int64)).max(initial=0)))
            exact = exact and bool(np.array_equal(got, want))
        counts = counts_by_name(op, arch, m, counters)
    t4 = time.perf_counter()
    model = {(arch.levels[i].name, name): c.as_tuple() for (i, name), c in access_counts(op, arch, m).items()}
    mism = [f"{lv}/{o}: code {counts.get((lv, o))} model {mc}" for (lv, o), mc in model.items()
            if tuple(counts.get((lv, o), ())) != tuple(mc)]
    return RunReport(Path(lib).with_suffix("").with_suffix(".c") if c_path is None else Path(c_path), lib,
                     t1 - t0, t2 - t1, (t4 - t3) / trials, worst, exact, counts, model, mism)
