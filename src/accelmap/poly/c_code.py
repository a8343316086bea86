"""C from the isl AST of a compiled subgraph, built and run on the host, checked against NumPy.

Each statement becomes a macro the AST's calls expand (``S2(c0 + c3, ...)``). Tensors promoted
to an on-chip buffer (a per-tile footprint, Sec. 4.4) are emulated by a static array of the
footprint's bounding box, indexed modulo the box: inside one tile the footprint spans less than
the box on every axis, so the modular index is one-to-one there. Global tensors are the caller's
arrays. Cube and vector operations are emulated element by element in plain C.
"""

from __future__ import annotations

import ctypes
import math
import time
from dataclasses import dataclass

import islpy as isl
import numpy as np

from accelmap.codegen.build import compile_shared, load_run
from accelmap.poly.compile import Compiled, copy_name
from accelmap.poly.kernel import DTYPES, Access, Affine, Call, Const, Expr, Iter, Kernel, is_float
from accelmap.poly.reference import random_inputs, reference

_PRELUDE = """#include <math.h>
#include <stdlib.h>
#define floord(n, d) (((n) < 0) ? -((-(n) + (d) - 1) / (d)) : (n) / (d))
#define min(a, b) ((a) < (b) ? (a) : (b))
#define max(a, b) ((a) > (b) ? (a) : (b))
/* max/min of values propagate NaN as NumPy's maximum/minimum do (loop bounds use the plain ones) */
#define vmax(a, b) ((((a) != (a)) || ((a) > (b))) ? (a) : (b))
#define vmin(a, b) ((((a) != (a)) || ((a) < (b))) ? (a) : (b))
"""


DIM = "d_"   # macro parameters get a prefix so a dim never shadows a tensor of the same name


def ast_code(c: Compiled) -> str:
    build = isl.AstBuild.from_context(isl.Set("{ : }", context=c.program.ctx))
    return build.node_from_schedule(c.ast_schedule()).to_C_str()


def _wide(dtype: str) -> str:
    return "double" if is_float(dtype) else "long long"


def _expr(e: Expr, k: Kernel, access) -> str:
    if isinstance(e, Const):
        if isinstance(e.value, float) and math.isinf(e.value):
            return "INFINITY" if e.value > 0 else "(-INFINITY)"
        return repr(float(e.value)) if isinstance(e.value, float) else f"{e.value}LL"
    if isinstance(e, Iter):
        return f"((long long)({DIM}{e.dim}))"
    if isinstance(e, Access):
        return f"(({_wide(k.tensors[e.tensor].dtype)}){access(e)})"
    assert isinstance(e, Call)
    a = [_expr(x, k, access) for x in e.args]
    if e.op == "cast":
        ctype = DTYPES[e.dtype][0]
        return f"(({_wide(e.dtype)})({ctype})({a[0]}))"
    if e.op == "neg":
        return f"(-{a[0]})"
    if e.op in ("sqrt", "exp"):
        return f"{e.op}({a[0]})"
    if e.op == "abs":
        return f"(({a[0]}) < 0 ? -({a[0]}) : ({a[0]}))"
    if e.op == "select":
        return f"(({a[0]}) ? ({a[1]}) : ({a[2]}))"
    if e.op in ("max", "min"):
        return f"v{e.op}({a[0]}, {a[1]})"
    return f"({a[0]} {e.op} {a[1]})"


def _flat(a: Access, dims, wrap: bool) -> str:
    flat = "0"
    for ix, n in zip(a.index, dims, strict=True):
        term = f"(({ix.c(DIM)}) % {n})" if wrap else f"({ix.c(DIM)})"
        flat = f"({flat}) * {n} + {term}"
    return flat


def generate_c(c: Compiled) -> tuple[str, list[str]]:
    """The C file, and the order of the tensors ``accelmap_run`` takes (inputs, then global results).

    Buffers: a promoted tensor is ``T_local``; a tiled kernel stages the tiles of every off-chip tensor it
    touches in ``T_s<kernel>``, filled and drained by the copy statements ``in<kernel>_T``/``out<kernel>_T``
    (the MTE's work); untiled kernels use the caller's arrays directly.
    """
    k = c.kernel
    promoted: dict[str, tuple[int, ...]] = {}
    staged: dict[tuple[int, str], tuple[int, ...]] = {}
    owner: dict[str, int] = {}
    for plan in c.plans:
        for name in plan.statements:
            owner[name] = plan.index
        for name, f in plan.footprints.items():
            if f.local:
                promoted[name] = f.box
            elif name in plan.copy_in or name in plan.copy_out:
                staged[(plan.index, name)] = f.box
    args = [t.name for t in k.inputs] + [t.name for t in k.computed if t.name not in promoted]
    lines = [_PRELUDE]
    for name, box in promoted.items():
        lines.append(f"static {DTYPES[k.tensors[name].dtype][0]} {name}_local[{math.prod(box)}];"
                     f"  /* promoted, per-tile box {list(box)} */")
    for (idx, name), box in staged.items():
        lines.append(f"static {DTYPES[k.tensors[name].dtype][0]} {name}_s{idx}[{math.prod(box)}];"
                     f"  /* staged tile of kernel {idx}, box {list(box)} */")
    for name in args:
        lines.append(f"static {DTYPES[k.tensors[name].dtype][0]} *{name};")

    l0: dict[tuple[int, str], tuple[str, tuple[int, ...], str]] = {
        (plan.index, t): v for plan in c.plans for t, v in plan.l0_copies.items()}
    for (idx, name), (buf, box, _) in l0.items():
        lines.append(f"static {DTYPES[k.tensors[name].dtype][0]} {name}_l0{idx}[{math.prod(box)}];"
                     f"  /* {buf} chunk of kernel {idx}, box {list(box)} */")

    def access_in(kernel: int | None, cube: bool = False):
        def access(a: Access) -> str:
            if cube and kernel is not None and (kernel, a.tensor) in l0:
                return f"{a.tensor}_l0{kernel}[{_flat(a, l0[(kernel, a.tensor)][1], True)}]"
            if a.tensor in promoted:
                return f"{a.tensor}_local[{_flat(a, promoted[a.tensor], True)}]"
            if kernel is not None and (kernel, a.tensor) in staged:
                return f"{a.tensor}_s{kernel}[{_flat(a, staged[(kernel, a.tensor)], True)}]"
            return f"{a.tensor}[{_flat(a, k.tensors[a.tensor].shape, False)}]"
        return access

    for s in k.statements:
        access = access_in(owner.get(s.name))
        out_t = k.tensors[s.out.tensor]
        ctype = DTYPES[out_t.dtype][0]
        if s.kind == "init":
            rhs = _expr(s.body, k, access)   # the reduction's identity
        elif s.kind == "update":
            operand = access_in(owner.get(s.name), cube=s.is_cube)   # the cube reads its operands from L0A/L0B
            acc, body = f"(({_wide(out_t.dtype)}){access(s.out)})", _expr(s.body, k, operand)
            rhs = f"vmax({acc}, {body})" if s.combine == "max" else f"({acc} + {body})"
        else:
            rhs = _expr(s.body, k, access)
        lines.append(f"#define {s.name}({', '.join(DIM + d for d in s.dim_names)}) "
                     f"do {{ {access(s.out)} = ({ctype})({rhs}); }} while (0)  /* {s.text()} */")
    for (idx, name), box in staged.items():
        plan = next(p for p in c.plans if p.index == idx)
        dims = [f"a{i}" for i in range(len(box))]
        el = Access(name, tuple(Affine(((d, 1),)) for d in dims))
        local = f"{name}_s{idx}[{_flat(el, box, True)}]"
        glob = f"{name}[{_flat(el, k.tensors[name].shape, False)}]"
        params = ", ".join(DIM + d for d in dims)
        if name in plan.copy_in:
            lines.append(f"#define {copy_name('in', plan, name)}({params}) do {{ {local} = {glob}; }} while (0)")
        if name in plan.copy_out:
            lines.append(f"#define {copy_name('out', plan, name)}({params}) do {{ {glob} = {local}; }} while (0)")
    for (idx, name), (buf, box, stmt) in l0.items():
        dims = [f"a{i}" for i in range(len(box))]
        el = Access(name, tuple(Affine(((d, 1),)) for d in dims))
        lines.append(f"#define {stmt}({', '.join(DIM + d for d in dims)}) do {{ "
                     f"{name}_l0{idx}[{_flat(el, box, True)}] = {access_in(idx)(el)}; }} while (0)  /* L1 -> {buf} */")
    lines.append("int accelmap_run(void **bufs, long long *dims) {")
    lines.append("  (void)dims;")
    for i, name in enumerate(args):
        lines.append(f"  {name} = ({DTYPES[k.tensors[name].dtype][0]} *)bufs[{i}];")
    lines += ["  " + ln for ln in ast_code(c).splitlines()]
    lines += ["  return 0;", "}", ""]
    return "\n".join(lines), args


@dataclass
class RunResult:
    ok: bool
    max_abs_error: float
    exact: bool
    compile_s: float
    run_s: float
    detail: str


def run_and_check(c: Compiled, seed: int = 0) -> RunResult:
    """Compile the generated C, run it on random inputs, compare every global result with NumPy."""
    k = c.kernel
    src, args = generate_c(c)
    t0 = time.perf_counter()
    fn = load_run(compile_shared(src))
    t1 = time.perf_counter()
    inputs = random_inputs(k, seed)
    ref = reference(k, inputs)
    arrays = {}
    for name in args:
        t = k.tensors[name]
        host = "float32" if t.dtype == "float16" else DTYPES[t.dtype][2]
        arrays[name] = np.ascontiguousarray(inputs[name] if name in inputs else np.zeros(t.shape), dtype=host)
    ptrs = (ctypes.c_void_p * len(args))(*[a.ctypes.data for a in arrays.values()])
    dims = (ctypes.c_longlong * 1)(0)
    fn(ptrs, dims)
    t2 = time.perf_counter()
    worst, exact, bad = 0.0, True, []
    for t in k.live_out:
        got, want = arrays[t.name], ref[t.name]
        if is_float(t.dtype):
            g64, w64 = got.astype(np.float64), want.astype(np.float64)
            # NaN (a square root of a negative random input) must come out at the same places
            nan_g, nan_w = np.isnan(g64), np.isnan(w64)
            err = float(np.max(np.abs(g64 - w64)[~nan_w], initial=0.0)) if np.array_equal(nan_g, nan_w) \
                else float("inf")
            scale = float(np.max(np.abs(w64[~nan_w]), initial=1.0))
            tol = (1e-2 if t.dtype == "float16" else 1e-5) * max(1.0, scale)
            same = err <= tol
            exact = exact and bool(np.array_equal(got, want.astype(got.dtype), equal_nan=True))
        else:
            err = float(np.max(np.abs(got.astype(np.int64) - want.astype(np.int64)), initial=0))
            same = err == 0
            exact = exact and same
        worst = max(worst, err)
        if not same:
            bad.append(f"{t.name}: max |error| {err:g}")
    detail = "; ".join(bad) if bad else ("bit-exact" if exact else f"within tolerance (max |error| {worst:.3g})")
    return RunResult(not bad, worst, exact, t1 - t0, t2 - t1, detail)
