"""C for a fused group of convolutions (and max-pooling windows): one tile loop, each stage computing
its block of the tile into an on-chip buffer, halos recomputed or cached as the policy says.

Every on-chip tensor carries a valid flag per element, cleared as its policy evicts it: at every
tile (fully recompute), at every tile row (H-cached-V-recompute) or never (fully cached); the group's
input is fetched from off-chip memory into its buffer the same way. A read of an element that is not
valid is counted, so a schedule that relies on something its policy does not keep shows up as a
nonzero count (and, since buffers start filled with a poison value, as a wrong result). Counters:
input elements fetched, output elements written, MACs per stage (every tap of every computed output,
padded taps included, as the model counts them) and invalid reads. Arithmetic is 64-bit integer, so
the result is compared bit for bit with NumPy.

The buffers here are whole tensors (with the flags telling what a real buffer would hold); the
bounded buffers' sizes are the model's (``fusion.geometry``), checked against a point walk.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from accelmap.codegen.build import compile_shared
from accelmap.errors import SpecError
from accelmap.fusion.geometry import MODES, Stage, schedules
from accelmap.fusion.stages import MacStage
from accelmap.workload.numpy_reference import reference

POISON = -7777777


@dataclass(frozen=True)
class FusedRun:
    output: np.ndarray
    input_fetched: int
    output_written: int
    macs: tuple[int, ...]
    invalid_reads: int


def _table(name: str, vals: list[int]) -> str:
    return f"static const int {name}[{max(1, len(vals))}] = {{{', '.join(map(str, vals or [0]))}}};"


def _conv_shape(ms: MacStage) -> tuple[int, int, int, int]:
    """(kernel rows, kernel columns, dilation rows, dilation columns) of a single-image convolution."""
    op = ms.operator
    if op.kind != "conv2d" or op.sizes.get("N", 1) != 1:
        raise SpecError(f"fused C covers single-image convolutions (groups 1); {op.name} is {op.kind}")
    r, s = op.sizes.get("R", 1), op.sizes.get("S", 1)
    dh = (ms.stage.rows.span - 1) // (r - 1) if r > 1 else 1
    dw = (ms.stage.cols.span - 1) // (s - 1) if s > 1 else 1
    return r, s, dh, dw


def generate_fused_c(stages: tuple[Stage, ...], macs: dict[int, MacStage], tile_rows: int, tile_cols: int,
                     policies: tuple[str, ...]) -> str:
    """C source of ``accelmap_fused(x, weights, y, counters)`` for the group (see the module doc)."""
    rows, cols = schedules(stages, tile_rows, tile_cols, policies)
    n = len(stages)
    depth = [stages[0].in_depth] + [st.out_depth for st in stages]
    height = [stages[0].in_rows] + [st.out_rows for st in stages]
    width = [stages[0].in_cols] + [st.out_cols for st in stages]
    size = [depth[t] * height[t] * width[t] for t in range(n + 1)]
    w = ["#include <string.h>", "#include <limits.h>", "typedef long long i64;", ""]
    for t in range(n + 1):
        w.append(_table(f"RLO{t}", [tile[t][0] for tile in rows.comp]))
        w.append(_table(f"RHI{t}", [tile[t][1] for tile in rows.comp]))
        w.append(_table(f"CLO{t}", [tile[t][0] for tile in cols.comp]))
        w.append(_table(f"CHI{t}", [tile[t][1] for tile in cols.comp]))
    for t in range(n):
        w.append(f"static i64 b{t}[{size[t]}]; static unsigned char v{t}[{size[t]}];")
    w += ["", "int accelmap_fused(const i64 *x, const i64 *const *wts, i64 *y, i64 *cnt) {",
          "  /* cnt: 0 input fetched, 1 output written, 2 invalid reads, 3.. MACs per stage */",
          f"  memset(cnt, 0, sizeof(i64) * {3 + n});"]
    for t in range(n):
        w.append(f"  for (long i = 0; i < {size[t]}; i++) {{ b{t}[i] = {POISON}; v{t}[i] = 0; }}")
    w.append(f"  for (int ty = 0; ty < {len(rows.comp)}; ty++) {{")
    for t in range(n):
        if policies[t] == "H-cached-V-recompute":
            w.append(f"    memset(v{t}, 0, {size[t]});   /* tensor {t}: rows recomputed, a new tile row */")
    w.append(f"    for (int tx = 0; tx < {len(cols.comp)}; tx++) {{")
    for t in range(n):
        if policies[t] == "fully-recompute":
            w.append(f"      memset(v{t}, 0, {size[t]});   /* tensor {t}: recomputed at every tile */")
    w += [f"      for (int d = 0; d < {depth[0]}; d++)",
          "        for (int r = RLO0[ty]; r < RHI0[ty]; r++)",
          "          for (int c = CLO0[tx]; c < CHI0[tx]; c++) {",
          f"            long i = ((long)d * {height[0]} + r) * {width[0]} + c;",
          "            b0[i] = x[i]; v0[i] = 1; cnt[0]++;", "          }"]
    for j, st in enumerate(stages):
        src, dst = f"b{j}", (f"b{j + 1}" if j + 1 < n else "y")
        hin, win = height[j], width[j]
        store = (f"{dst}[o] = acc;" + (f" v{j + 1}[o] = 1;" if j + 1 < n else " cnt[1]++;"))
        w += [f"      /* stage {j}: {st.name} */",
              f"      for (int k = 0; k < {depth[j + 1]}; k++)",
              f"        for (int r = RLO{j + 1}[ty]; r < RHI{j + 1}[ty]; r++)",
              f"          for (int c = CLO{j + 1}[tx]; c < CHI{j + 1}[tx]; c++) {{",
              f"            long o = ((long)k * {height[j + 1]} + r) * {width[j + 1]} + c;"]
        ms = macs.get(j)
        if ms is None:
            kh, kw = st.rows.span, st.cols.span
            w += ["            i64 acc = LLONG_MIN;",
                  f"            for (int kr = 0; kr < {kh}; kr++) for (int kc = 0; kc < {kw}; kc++) {{",
                  f"              int ir = r * {st.rows.stride} - {st.rows.pad} + kr, "
                  f"ic = c * {st.cols.stride} - {st.cols.pad} + kc;",
                  f"              if (ir < 0 || ir >= {hin} || ic < 0 || ic >= {win}) continue;",
                  f"              long i = ((long)k * {hin} + ir) * {win} + ic;",
                  f"              if (!v{j}[i]) cnt[2]++;",
                  f"              if ({src}[i] > acc) acc = {src}[i];", "            }"]
        else:
            kr_, ks_, dh, dw = _conv_shape(ms)
            cin = depth[j]
            w += ["            i64 acc = 0;",
                  f"            for (int ci = 0; ci < {cin}; ci++) for (int kr = 0; kr < {kr_}; kr++) "
                  f"for (int kc = 0; kc < {ks_}; kc++) {{",
                  f"              cnt[{3 + j}]++;",
                  f"              int ir = r * {st.rows.stride} - {st.rows.pad} + kr * {dh}, "
                  f"ic = c * {st.cols.stride} - {st.cols.pad} + kc * {dw};",
                  f"              if (ir < 0 || ir >= {hin} || ic < 0 || ic >= {win}) continue;",
                  f"              long i = ((long)ci * {hin} + ir) * {win} + ic;",
                  f"              if (!v{j}[i]) cnt[2]++;",
                  f"              acc += {src}[i] * wts[{j}][((k * {cin} + ci) * {kr_} + kr) * {ks_} + kc];",
                  "            }"]
        w += [f"            {store}", "          }"]
    w += ["    }", "  }", "  return 0;", "}", ""]
    return "\n".join(w)


def numpy_chain(stages: tuple[Stage, ...], macs: dict[int, MacStage], x: np.ndarray,
                weights: dict[int, np.ndarray]) -> np.ndarray:
    """The group computed layer by layer by NumPy (64-bit integers): the reference."""
    a = x.astype(np.int64)
    for j, st in enumerate(stages):
        ms = macs.get(j)
        if ms is not None:
            wop = ms.operator.inputs[1]   # kernel dims of size 1 are not in the operator's weight index
            a = reference(ms.operator, {ms.operator.inputs[0].name: a[None],
                                        wop.name: weights[j].reshape(ms.operator.index_extent(wop))})[0]
            continue
        out = np.full((st.out_depth, st.out_rows, st.out_cols), np.iinfo(np.int64).min, dtype=np.int64)
        for kr in range(st.rows.span):
            for kc in range(st.cols.span):
                for r in range(st.out_rows):
                    ir = r * st.rows.stride - st.rows.pad + kr
                    if not 0 <= ir < st.in_rows:
                        continue
                    for c in range(st.out_cols):
                        ic = c * st.cols.stride - st.cols.pad + kc
                        if 0 <= ic < st.in_cols:
                            out[:, r, c] = np.maximum(out[:, r, c], a[:, ir, ic])
        a = out
    return a


def run_fused(stages: tuple[Stage, ...], macs: dict[int, MacStage], tile_rows: int, tile_cols: int,
              policies: tuple[str, ...], seed: int = 0) -> tuple[FusedRun, np.ndarray]:
    """Build and run the group's C on random integers; returns its run and NumPy's output."""
    for p in policies:
        if p not in MODES:
            raise SpecError(f"halo policy {p!r} unknown; choose one of {', '.join(MODES)}")
    rng = np.random.default_rng(seed)
    x = rng.integers(-8, 8, size=(stages[0].in_depth, stages[0].in_rows, stages[0].in_cols), dtype=np.int64)
    weights = {}
    for j, ms in macs.items():
        r, s, _, _ = _conv_shape(ms)
        weights[j] = rng.integers(-4, 4, size=(stages[j].out_depth, stages[j].in_depth, r, s), dtype=np.int64)
    lib = ctypes.CDLL(str(compile_shared(generate_fused_c(stages, macs, tile_rows, tile_cols, policies))))
    fn = lib.accelmap_fused
    p64 = ctypes.POINTER(ctypes.c_longlong)
    fn.argtypes = [p64, ctypes.POINTER(p64), p64, p64]
    fn.restype = ctypes.c_int
    last = stages[-1]
    y = np.zeros((last.out_depth, last.out_rows, last.out_cols), dtype=np.int64)
    cnt = np.zeros(3 + len(stages), dtype=np.int64)
    wl = [np.ascontiguousarray(weights.get(j, np.zeros(1, dtype=np.int64))) for j in range(len(stages))]
    warr = (p64 * len(wl))(*[a.ctypes.data_as(p64) for a in wl])
    fn(np.ascontiguousarray(x).ctypes.data_as(p64), warr, y.ctypes.data_as(p64), cnt.ctypes.data_as(p64))
    ref = numpy_chain(stages, macs, x, weights)
    return FusedRun(y, int(cnt[0]), int(cnt[1]), tuple(int(c) for c in cnt[3:]), int(cnt[2])), ref
