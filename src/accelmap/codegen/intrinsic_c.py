"""Emit one C file that runs an intrinsic program: pack the operands, issue every intrinsic call, unpack.

An intrinsic program (``embed.program.Program``, Rieber's 2022 dissertation, ch. 4) rewrites each
operand with the layout rewrites of Table 4.1 so that every intrinsic call reads one dense tile,
then runs an outer loop nest around one call. The file holds

- one packed buffer per operand (the rewritten layout, in the intrinsic's operand type);
- one packing loop per input: for every packed element, the rewrites are undone one by one on its
  index (fuse -> mixed-radix split, reorder -> permutation, split -> ``block*inner + tile``,
  pad -> shift with a bounds test, image/dilate pack -> ``q*factor + phase``, stencil unroll
  (im2col) -> ``sum c_k*i_k``) down to the stored tensor; an index that leaves the tensor
  reads zero, so padding, im2col and the packs are one gather;
- the intrinsic as a C function with its exact semantics: its products summed over the
  reduction axes and added to the accumulator tile, wrapping at the accumulator's width as the
  hardware register does (VTA GEMM: int8 x int8 summed into int32);
- the outer loop nest, each call's tile offsets an affine function of the loop variables;
- the unpacking of the output: the same index chain, scattering the packed accumulator back.

The exported entry point follows ``codegen.c_source``:

    int accelmap_run(void **tensors, long long *counters)

with ``tensors`` in operand order (stored shapes, row-major, the C types of ``c_source.c_type``).
The program has no memory hierarchy and so no transfer counters: ``counters[0]`` receives the number
of intrinsic calls issued, ``counters[1 + k]`` the elements of operand ``k``'s packed buffer walked
by its packing (inputs) or unpacking (output).
"""

from __future__ import annotations

import ctypes
import math

import numpy as np

from accelmap.codegen.build import compile_shared, load_run
from accelmap.codegen.c_source import c_type
from accelmap.embed.program import OperandLayout, Program
from accelmap.embed.rewrites import Rewrite
from accelmap.errors import SpecError
from accelmap.workload.operator import Operand, Operator


def intrinsic_type(bits: int) -> str:
    """C storage type of an intrinsic operand of ``bits`` bits."""
    for width, name in ((8, "int8_t"), (16, "int16_t"), (32, "int32_t"), (64, "int64_t")):
        if bits <= width:
            return name
    raise SpecError(f"an intrinsic operand of {bits} bits has no C integer type (at most 64)", where="intrinsic")


def _storage_bits(ctype: str) -> int:
    return {"int8_t": 8, "int16_t": 16, "int32_t": 32, "int64_t": 64}[ctype]


def _ident(name: str) -> str:
    return "l_" + "".join(ch if ch.isalnum() else "_" for ch in name)


def _strides(shape: tuple[int, ...]) -> list[int]:
    out = [1] * len(shape)
    for k in range(len(shape) - 2, -1, -1):
        out[k] = out[k + 1] * shape[k + 1]
    return out


def _wrap(expr: str, bits: int, ctype: str) -> str:
    """``expr`` (an int64 sum) reduced to a two's-complement ``bits``-bit value, as an accumulator register wraps."""
    if bits >= 64:
        return f"(int64_t)((uint64_t)({expr}))"
    if bits == _storage_bits(ctype):
        return f"({ctype})(u{ctype})(uint64_t)({expr})"
    sh = 64 - bits
    return f"({ctype})((int64_t)((uint64_t)({expr}) << {sh}) >> {sh})"


def intrinsic_function(intr: Operator, name: str) -> list[str]:
    """The intrinsic as a C function over dense row-major tiles: ``out += sum over reductions of in0 * in1``."""
    if len(intr.inputs) != 2:
        raise SpecError(f"intrinsic {intr.name} multiplies {len(intr.inputs)} operands; C emission handles two",
                        where="intrinsic")
    sizes = intr.sizes
    out = intr.output
    t_out = intrinsic_type(out.bits)
    t_in = [intrinsic_type(x.bits) for x in intr.inputs]

    def offset(o: Operand) -> str:
        dims = [ix.dims[0] for ix in o.indices]
        st = _strides(tuple(sizes[d] for d in dims))
        return " + ".join(f"{s}*{_ident(d)}" for d, s in zip(dims, st, strict=True)) or "0"

    lines = [f"/* {intr.name}: {intr.expression()}  ({', '.join(f'{d}={n}' for d, n in intr.dims)}); "
             f"inputs {intr.inputs[0].bits}/{intr.inputs[1].bits} bits, {out.bits}-bit accumulator */",
             f"static void {name}({t_out} *restrict {out.name}, const {t_in[0]} *restrict {intr.inputs[0].name}, "
             f"const {t_in[1]} *restrict {intr.inputs[1].name}) {{"]
    ind = "    "
    for d in out.dims:
        lines.append(f"{ind}for (long {_ident(d)} = 0; {_ident(d)} < {sizes[d]}; {_ident(d)}++) {{")
        ind += "    "
    lines.append(f"{ind}int64_t s = 0;")
    red = [d for d, _ in intr.dims if d not in out.dims]
    inner = ind
    for d in red:
        lines.append(f"{inner}for (long {_ident(d)} = 0; {_ident(d)} < {sizes[d]}; {_ident(d)}++)")
        inner += "    "
    a, b = intr.inputs
    lines.append(f"{inner}s += (int64_t){a.name}[{offset(a)}] * (int64_t){b.name}[{offset(b)}];")
    o = f"{out.name}[{offset(out)}]"
    lines.append(f"{ind}{o} = {_wrap(f'(int64_t){o} + s', out.bits, t_out)};")
    for _ in out.dims:
        ind = ind[:-4]
        lines.append(f"{ind}}}")
    lines.append("}")
    return lines


def _index_chain(lay: OperandLayout, packed_vars: list[str]) -> tuple[list[str], list[str], list[str]]:
    """C statements that undo the rewrites on a packed index: (statements, stored index, validity tests)."""
    cur = list(packed_vars)
    stmts: list[str] = []
    conds: list[str] = []
    n = 0

    def fresh() -> str:
        nonlocal n
        n += 1
        return f"i{n}"

    for r in reversed(lay.rewrites):
        shape_in = r.shape_in
        prev: list[str]
        kind = _kind(r)
        if kind == "fuse":
            axis, count = r.params
            parts = shape_in[axis:axis + count]
            st = _strides(tuple(parts))
            new = []
            for k, (s, p) in enumerate(zip(st, parts, strict=True)):
                v = fresh()
                expr = f"{cur[axis]} / {s}" if k == 0 else f"({cur[axis]} / {s}) % {p}"
                stmts.append(f"long {v} = {expr};")
                new.append(v)
            prev = cur[:axis] + new + cur[axis + 1:]
        elif kind == "reorder":
            (perm,) = r.params
            prev = [""] * len(perm)
            for i, p in enumerate(perm):
                prev[p] = cur[i]
        elif kind == "split":
            axis, inner = r.params
            v = fresh()
            stmts.append(f"long {v} = {cur[axis]} * {inner} + {cur[axis + 1]};")
            prev = cur[:axis] + [v] + cur[axis + 2:]
        elif kind == "pad":
            axis, lo, _hi = r.params
            v = fresh()
            stmts.append(f"long {v} = {cur[axis]} - {lo};")
            if lo:
                conds.append(f"{v} >= 0")
            conds.append(f"{v} < {shape_in[axis]}")
            prev = cur[:axis] + [v] + cur[axis + 1:]
        elif kind == "pack":
            axis, factor = r.params
            v = fresh()
            stmts.append(f"long {v} = {cur[axis]} * {factor} + {cur[axis + 1]};")
            conds.append(f"{v} < {shape_in[axis]}")
            prev = cur[:axis] + [v] + cur[axis + 2:]
        else:                                   # stencil unroll: one axis per affine term
            axis, coeffs, sizes = r.params
            k = len(sizes)
            v = fresh()
            stmts.append(f"long {v} = " + " + ".join(f"{c}*{cur[axis + j]}" for j, c in enumerate(coeffs)) + ";")
            conds.append(f"{v} < {shape_in[axis]}")
            prev = cur[:axis] + [v] + cur[axis + k:]
        cur = prev
    return stmts, cur, conds


def _kind(r: Rewrite) -> str:
    k = r.kind
    if k == "pack_or_unroll":
        return "pack" if len(r.params) == 2 else "unroll"
    return k


def _gather_loops(lay: OperandLayout, src: str, dst: str, scatter: bool) -> list[str]:
    """Loops over every packed element, reading from (or, ``scatter``, writing to) the stored tensor."""
    pv = [f"p{k}" for k in range(len(lay.packed))]
    stmts, idx, conds = _index_chain(lay, pv)
    st = _strides(lay.stored)
    off = " + ".join(f"{s}*{v}" for s, v in zip(st, idx, strict=True)) or "0"
    lines = ["long o = 0;"]
    ind = ""
    for v, n in zip(pv, lay.packed, strict=True):
        lines.append(f"{ind}for (long {v} = 0; {v} < {n}; {v}++) {{")
        ind += "    "
    lines += [ind + s for s in stmts]
    ok = " && ".join(conds)
    if scatter:
        lines.append(f"{ind}{f'if ({ok}) ' if ok else ''}{dst}[{off}] = {src}[o];")
    else:
        lines.append(f"{ind}{dst}[o] = " + (f"({ok}) ? {src}[{off}] : 0;" if ok else f"{src}[{off}];"))
    lines.append(f"{ind}o++;")
    for _ in pv:
        ind = ind[:-4]
        lines.append(f"{ind}}}")
    return lines


def _check(prog: Program) -> None:
    """Refuse, with one line, a program the C form cannot run as the NumPy execution does."""
    loops = dict(prog.loops)
    out = prog.layouts[0]
    if not all(present for _, present in out.pieces):
        raise SpecError(f"program of {prog.op.name}: the output tile broadcasts over an intrinsic axis",
                        where="intrinsic program")
    for lay in prog.layouts:
        k = len(lay.outer)
        if math.prod(lay.packed[k:]) != math.prod(L for L, present in lay.pieces if present):
            raise SpecError(f"program of {prog.op.name}: operand {lay.operand}'s packed tile "
                            f"{lay.packed[k:]} does not hold its pieces {lay.pieces}", where="intrinsic program")
        if math.prod(L for L, _ in lay.pieces) != math.prod(lay.tile_shape):
            raise SpecError(f"program of {prog.op.name}: operand {lay.operand}'s pieces {lay.pieces} do not fill "
                            f"the intrinsic tile {lay.tile_shape}", where="intrinsic program")
        for j, a in enumerate(lay.outer):
            terms = a.loop_terms()
            hi = sum(c * (loops[d] - 1) for d, c in terms if c > 0)
            lo = sum(c * (loops[d] - 1) for d, c in terms if c < 0)
            if lo < 0 or hi >= lay.packed[j]:
                raise SpecError(f"program of {prog.op.name}: operand {lay.operand}'s axis {j} is indexed "
                                f"{lo}..{hi}, outside its packed extent {lay.packed[j]}", where="intrinsic program")


def _tile_offset(lay: OperandLayout) -> str:
    st = _strides(lay.packed)
    coeff: dict[str, int] = {}
    for j, a in enumerate(lay.outer):
        for d, c in a.loop_terms():
            coeff[d] = coeff.get(d, 0) + c * st[j]
    return " + ".join(f"{c}*{_ident(d)}" for d, c in coeff.items() if c) or "0"


def _broadcast_lines(lay: OperandLayout, src: str, dst: str) -> list[str]:
    """Expand a packed tile that omits broadcast pieces into the intrinsic's dense tile."""
    full = [L for L, _ in lay.pieces]
    present = [L if p else 1 for L, p in lay.pieces]
    st_full = _strides(tuple(full))
    st_pack = _strides(tuple(present))
    lines = []
    ind = ""
    for k, L in enumerate(full):
        lines.append(f"{ind}for (long b{k} = 0; b{k} < {L}; b{k}++)")
        ind += "    "
    d_off = " + ".join(f"{s}*b{k}" for k, s in enumerate(st_full)) or "0"
    s_off = " + ".join(f"{s}*b{k}" for k, (s, (_, p)) in enumerate(zip(st_pack, lay.pieces, strict=True)) if p) or "0"
    lines.append(f"{ind}{dst}[{d_off}] = {src}[{s_off}];")
    return lines


def _rewrites_comment(lay: OperandLayout) -> str:
    body = "\n".join(f"   {r}" for r in lay.rewrites) or "   no rewrite"
    return f"/* {lay.operand}, stored {list(lay.stored)} -> packed {list(lay.packed)}:\n{body}\n*/"


def generate_intrinsic_c(prog: Program, function: str = "accelmap_run") -> str:
    """The C file of an intrinsic program (module docstring); entry point ``function``."""
    _check(prog)
    op, intr = prog.op, prog.intrinsic
    k_of = {X.name: k for k, X in enumerate(op.operands)}
    out_lay, a_lay, b_lay = prog.layouts
    if (a_lay.intrinsic_operand, b_lay.intrinsic_operand) != (intr.inputs[0].name, intr.inputs[1].name):
        raise SpecError(f"program of {op.name}: input layouts are not in the intrinsic's operand order",
                        where="intrinsic program")
    w: list[str] = []
    w.append(f"/* Intrinsic program of {op.name}: {op.expression()} */")
    w.append(f"/* {intr.name} calls: {prog.calls:,}; utilization {prog.utilization:.1%}; rewrites: "
             f"{', '.join(prog.rules) or 'none'} */")
    w.append("/*\n" + "\n".join("   " + ln for ln in prog.text().splitlines()) + "\n*/")
    w.append("#include <stdint.h>\n#include <string.h>\n")
    pk_type = {lay.operand: intrinsic_type(intr.operand(lay.intrinsic_operand).bits) for lay in prog.layouts}
    for lay in prog.layouts:
        w.append(f"static {pk_type[lay.operand]} pk_{lay.operand}[{math.prod(lay.packed)}];  "
                 f"/* {lay.operand} packed {list(lay.packed)} */")
    dense = {}
    for lay in (a_lay, b_lay):
        if any(L > 1 and not p for L, p in lay.pieces):
            dense[lay.operand] = f"tile_{lay.operand}"
            w.append(f"static {pk_type[lay.operand]} tile_{lay.operand}[{math.prod(lay.tile_shape)}];  "
                     f"/* {lay.operand} broadcast to the intrinsic tile */")
    w.append("")
    fn = f"intrinsic_{''.join(ch if ch.isalnum() else '_' for ch in intr.name)}"
    w += intrinsic_function(intr, fn)
    w.append("")
    for lay in (a_lay, b_lay):
        X = op.operand(lay.operand)
        ct = c_type(X, "int")[0]
        w.append(_rewrites_comment(lay))
        w.append(f"static long long pack_{lay.operand}(const {ct} *src) {{")
        w += ["    " + ln for ln in _gather_loops(lay, "src", f"pk_{lay.operand}", scatter=False)]
        w.append("    return o;\n}\n")
    X = op.operand(out_lay.operand)
    ct_out = c_type(X, "int")[0]
    w.append(_rewrites_comment(out_lay))
    w.append(f"static long long unpack_{out_lay.operand}({ct_out} *dst) {{")
    w.append(f"    memset(dst, 0, sizeof(*dst) * {math.prod(out_lay.stored)});")
    w += ["    " + ln for ln in _gather_loops(out_lay, f"pk_{out_lay.operand}", "dst", scatter=True)]
    w.append("    return o;\n}\n")
    w.append(f"int {function}(void **T, long long *counters) {{")
    w.append("    long long calls = 0;")
    w.append(f"    memset(pk_{out_lay.operand}, 0, sizeof pk_{out_lay.operand});")
    for lay in (a_lay, b_lay):
        ct = c_type(op.operand(lay.operand), "int")[0]
        w.append(f"    counters[{1 + k_of[lay.operand]}] += pack_{lay.operand}((const {ct} *)T[{k_of[lay.operand]}]);")
    ind = "    "
    for name, n in prog.loops:
        v = _ident(name)
        w.append(f"{ind}for (long {v} = 0; {v} < {n}; {v}++) {{")
        ind += "    "
    args = []
    for lay in prog.layouts:
        ptr = f"pk_{lay.operand} + {_tile_offset(lay)}"
        if lay.operand in dense:
            w += [ind + ln for ln in _broadcast_lines(lay, f"({ptr})", dense[lay.operand])]
            ptr = dense[lay.operand]
        args.append(ptr)
    w.append(f"{ind}{fn}({', '.join(args)});")
    w.append(f"{ind}calls++;")
    for _ in prog.loops:
        ind = ind[:-4]
        w.append(f"{ind}}}")
    w.append(f"    counters[{1 + k_of[out_lay.operand]}] += unpack_{out_lay.operand}(({ct_out} *)T[{k_of[out_lay.operand]}]);")
    w.append("    counters[0] += calls;")
    w.append("    return 0;\n}")
    return "\n".join(w) + "\n"


def run_intrinsic_c(prog: Program, inputs: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Build the program's C file as a shared library and run it once on ``inputs`` (stored shapes).

    Returns the output (in the output operand's C type) and the counters (calls, then per operand).
    """
    op = prog.op
    fn = load_run(compile_shared(generate_intrinsic_c(prog)))
    bufs = []
    for X in op.operands:
        dt = np.dtype(_NUMPY_OF_C[c_type(X, "int")[0]])
        if X.is_output:
            bufs.append(np.zeros(prog.layout(X.name).stored, dtype=dt))
        else:
            bufs.append(np.ascontiguousarray(inputs[X.name], dtype=dt))
    ptrs = (ctypes.c_void_p * len(bufs))(*[b.ctypes.data for b in bufs])
    counters = np.zeros(1 + len(bufs), dtype=np.int64)
    fn(ptrs, counters.ctypes.data_as(ctypes.POINTER(ctypes.c_longlong)))
    k = next(i for i, X in enumerate(op.operands) if X.is_output)
    return bufs[k], counters


_NUMPY_OF_C = {"int8_t": np.int8, "int16_t": np.int16, "int32_t": np.int32, "int64_t": np.int64}
