"""Convolution workloads for the vectorizer: the paper's Tables VI and VII and its CONV3D filters, and
accelmap conv2d operators.

Sizes are Vyasa's (Chatarasi et al.). Two deviations, both forced by the text: the input width is the one the
output and filter need (the paper's 264 is short for 10x10 and 11x11 filters; our row pitch is padded to 128-bit
alignment anyway), and the CONV3D sizes are ours (output 128x2x2 by 8 channels, 2 input channels), because the
paper gives output "168x2x16" in one place, "same as Table VII" in another, and no channel counts."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from accelmap.errors import SpecError
from accelmap.vector.conv import ConvSpec
from accelmap.workload.operator import Operator


@dataclass(frozen=True)
class PaperRow:
    """A workload of the paper with the schedule it reports (loop order, vector loop, U&J, layouts)."""

    table: str
    conv: ConvSpec
    paper_schedule: dict[int, str]      # bits -> the paper's tuned schedule, as printed


def _cv(f: int) -> ConvSpec:
    return ConvSpec(f"CV-{f}x{f}", x=256, y=16, k=1, c=1, r=f, s=f)


# Table VI: unroll-and-jam (x, y) at 32 bit and 16 bit; loop order xy for all.
_T6 = {2: ((1, 4), (1, 8)), 3: ((1, 4), (1, 2)), 4: ((1, 2), (1, 1)), 5: ((1, 2), (1, 1)), 6: ((1, 1), (1, 1)),
       7: ((1, 1), (1, 1)), 8: ((1, 4), (1, 1)), 9: ((1, 4), (1, 1)), 10: ((1, 4), (1, 4)), 11: ((1, 4), (1, 4))}

# Table VII: per bits, "O layout / W layout / I layout, vec, U&J x,y,k, order".
_T7: dict[str, tuple[dict[str, Any], dict[int, str]]] = {
    "REG-3x3": (dict(r=3, s=3, c=8), {32: "XYK / (K/8)(C/8)SR(8)(8) / (C/8)Y'X'(8), vec k, U&J 1,2,1, kyx",
                                      16: "KYX / K(C/2)SR(2) / (C/2)Y'X'(2), vec x, U&J 1,1,1, yxk"}),
    "REG-5x5": (dict(r=5, s=5, c=8), {32: "KYX / KCSR / CY'X', vec x, U&J 1,1,1, kyx",
                                      16: "KYX / K(C/2)SR(2) / (C/2)Y'X'(2), vec x, U&J 1,2,1, kyx"}),
    "REG-7x7": (dict(r=7, s=7, c=8), {32: "KYX / KCSR / CY'X', vec x, U&J 1,2,1, kyx",
                                      16: "KYX / K(C/2)SR(2) / (C/2)Y'X'(2), vec x, U&J 1,2,1, kyx"}),
    "PW-1x1": (dict(r=1, s=1, c=8), {32: "XYK / (K/8)(C/8)SR(8)(8) / (C/8)Y'X'(8), vec k, U&J 1,2,1, kyx",
                                     16: "YXK / (K/16)SR(C/2)(16)(2) / Y'X'C, vec k, U&J 1,2,1, xyk"}),
    "SS-1x3": (dict(r=1, s=3, c=8), {32: "XYK / (K/8)(C/8)SR(8)(8) / (C/8)Y'X'(8), vec k, U&J 1,2,1, kyx",
                                     16: "KYX / K(C/2)SR(2) / (C/2)Y'X'(2), vec x, U&J 1,2,1, kyx"}),
    "SS-3x1": (dict(r=3, s=1, c=8), {32: "XYK / (K/8)(C/8)SR(8)(8) / (C/8)Y'X'(8), vec k, U&J 1,1,1, kyx",
                                     16: "YXK / (K/16)SR(C/2)(16)(2) / Y'X'C, vec k, U&J 1,2,1, xyk"}),
    "DS-3x3": (dict(r=3, s=3, c=1, depthwise=True), {32: "KYX / KCSR / CY'X', vec x, U&J 1,2,1, kyx",
                                                     16: "KYX / KCSR / CY'X', vec x, U&J 1,2,1, kyx"}),
}

PAPER_GEOMEANS = {"VI": {32: 7.67, 16: 25.92}, "VII": {32: 7.67, 16: 22.53}, "3D": {32: 7.55, 16: 21.60}}


def paper_rows() -> list[PaperRow]:
    rows = []
    for f, (u32, u16) in _T6.items():
        sched = {32: f"vec x, U&J x,y {u32[0]},{u32[1]}, order xy", 16: f"vec x, U&J x,y {u16[0]},{u16[1]}, order xy"}
        rows.append(PaperRow("VI", _cv(f), sched))
    for name, (kw, sched) in _T7.items():
        rows.append(PaperRow("VII", ConvSpec(name, x=128, y=2, k=16, **kw), sched))
    rows.append(PaperRow("VII", ConvSpec("FC", x=1, y=1, k=4096, c=8, r=1, s=1),
                         {32: "XYK / (K/8)(C/8)SR(8)(8) / (C/8)Y'X'(8), vec k, U&J 1,1,1, kyx",
                          16: "YXK / (K/16)SR(C/2)(16)(2) / Y'X'C, vec k, U&J 1,1,1, xyk"}))
    for f in (3, 5, 7):
        rows.append(PaperRow("3D", ConvSpec(f"CONV3D-{f}x{f}x{f}", x=128, y=2, z=2, k=8, c=2, r=f, s=f, t=f),
                             {32: "(not in the text)", 16: "(not in the text)"}))
    return rows


def paper_workload(name: str, bits: int) -> ConvSpec:
    for row in paper_rows():
        if row.conv.name.lower() == name.lower():
            return replace(row.conv, bits=bits)
    names = ", ".join(r.conv.name for r in paper_rows())
    raise SpecError(f"no paper workload named {name!r}; known: {names}", where="--workload")


def conv_from_operator(op: Operator, bits: int, where: str) -> ConvSpec:
    """An accelmap conv2d operator (N=1, equal strides and dilations, any zero padding) as a vectorizer workload."""
    attrs: dict[str, Any] = dict(op.attrs)
    if op.kind not in ("conv2d", "depthwise_conv2d"):
        raise SpecError(f"vectorize takes a conv2d or depthwise conv2d workload, got {op.kind}", where=where)
    sz = op.sizes
    if sz.get("N", 1) != 1:
        raise SpecError(f"batch N={sz['N']}: vectorize compiles single-image kernels (N=1)", where=where)
    (sh, sw), (dh, dw) = attrs.get("stride", (1, 1)), attrs.get("dilation", (1, 1))
    if sh != sw or dh != dw:
        raise SpecError(f"stride {sh}x{sw} / dilation {dh}x{dw}: vectorize takes equal height and width values",
                        where=where)
    dw_kind = op.kind == "depthwise_conv2d"
    k = sz["G"] if dw_kind else sz["K"]
    conv = ConvSpec(op.name, x=sz["Q"], y=sz["P"], k=k, c=1 if dw_kind else sz["C"], r=sz.get("S", 1),
                    s=sz.get("R", 1), stride=sh, dilation=dh, depthwise=dw_kind, bits=bits)
    top, left, bottom, right = attrs.get("padding", (0, 0, 0, 0))
    if not (top or left or bottom or right):
        return conv
    # The halo the kernel reads: lo as given; hi only as far as the last output reaches (floor in P and Q).
    inp = next(o for o in op.inputs if o.name == "I")
    stored_h, stored_w = inp.shape[-2:] if inp.shape else (None, None)
    ext = conv.extents("I")
    pads = []
    for lo, hi, n, stored in ((left, right, ext["X"], stored_w), (top, bottom, ext["Y"], stored_h)):
        pads.append((lo, min(hi, max(0, n - lo - stored)) if stored is not None else hi))
    return replace(conv, pad=tuple(pads))


# The paper's layout strings (outermost first; primes mark input extents) in our layout notation. "(K/8)(C/8)SR(8)(8)"
# does not say which inner block is K's; we read it as C's block outside K's, the one that gives the lanes a
# contiguous filter vector (the other reading needs a 2048-bit register for 8 lanes and cannot compile).
_PAPER_LAYOUTS = {
    "XYK": "X Y K", "YXK": "Y X K", "KYX": "K Y X",
    "(K/8)(C/8)SR(8)(8)": "K/8 C/8 S R C%8 K%8", "(C/8)Y'X'(8)": "C/8 Y X C%8",
    "K(C/2)SR(2)": "K C/2 S R C%2", "(C/2)Y'X'(2)": "C/2 Y X C%2",
    "(K/16)SR(C/2)(16)(2)": "K/16 S R C/2 K%16 C%2", "Y'X'C": "Y X C", "KCSR": "K C S R", "CY'X'": "C Y X",
}


def paper_schedule(row: PaperRow, bits: int):
    """The schedule the paper reports for a Table VI/VII row as our ``Schedule`` (None for CONV3D). Loop orders
    are read innermost first, Halide's ``reorder`` convention (Vyasa's schedules are Halide schedules)."""
    from accelmap.vector.compiler import Schedule
    from accelmap.vector.conv import Layout
    text = row.paper_schedule[bits]
    if row.table == "3D":
        return None
    shape = "mac16" if bits == 16 else "lmac8"
    if row.table == "VI":
        uj = text.split("U&J x,y ")[1].split(", order")[0].split(",")
        order = text.split("order ")[1]
        unroll: tuple[tuple[str, int], ...] = (("x", int(uj[0])), ("y", int(uj[1])))
        layouts = (("O", "K Y X"), ("W", "K C S R"), ("I", "C Y X"))
        vec = "x"
    else:
        lay, vec_part, uj_part, order = (p.strip() for p in text.split(", "))
        o, w, i = (s.strip() for s in lay.split(" / "))
        layouts = (("O", _PAPER_LAYOUTS[o]), ("W", _PAPER_LAYOUTS[w]), ("I", _PAPER_LAYOUTS[i]))
        if row.conv.depthwise:
            layouts = (("O", "K Y X"), ("W", "K S R"), ("I", "C Y X"))
        vec = vec_part.split()[1]
        u = [int(v) for v in uj_part.split()[1].split(",")]
        unroll = (("x", u[0]), ("y", u[1]), ("k", u[2]))
    ud = dict(unroll)
    lanes = 16 if bits == 16 else 8
    outer = [d for d in reversed(order) if row.conv.sizes[d] // (ud.get(d, 1) * (lanes if d == vec else 1)) > 1]
    return Schedule(vec, shape, tuple((d, f) for d, f in unroll if f > 1), tuple(outer),
                    tuple((t, Layout.parse(s)) for t, s in layouts))
