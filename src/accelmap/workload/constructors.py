"""Constructors for the common DNN operators.

Dimension names follow Timeloop: N batch, G groups, K output channels,
C input channels, P/Q output rows/columns, R/S kernel rows/columns,
M/N/K for matrix products are named M, N, K (batch B).
"""

from __future__ import annotations

from accelmap.errors import SpecError
from accelmap.workload.operator import AffineIndex, InitOutput, Operator, make_operand

DEFAULT_BITS = {"I": 8, "W": 8, "O": 32}


def _bits(bits: object) -> dict:
    out = dict(DEFAULT_BITS)
    if bits is None:
        return out
    if not isinstance(bits, dict):
        raise SpecError(f"precision must map operand classes to bits, e.g. {{I: 8, W: 8, O: 32}}; got {bits!r}")
    unknown = set(bits) - set(out)
    if unknown:
        raise SpecError(f"precision keys {sorted(unknown)} unknown; use I, W and O")
    out.update(bits)
    return out


def _pos(name: str, **vals: int) -> None:
    for k, v in vals.items():
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise SpecError(f"{name}: {k} must be a positive integer, got {v!r}")


def _int(v, what: str) -> int:
    """A whole number from a file: no silent truncation of 1.5, no ValueError on 'two'."""
    if isinstance(v, bool) or not hasattr(v, "__index__"):   # ints, numpy ints; not floats or strings
        raise SpecError(f"{what} must be whole numbers, got {v!r}")
    return int(v)


def _pair(v, what: str = "stride and dilation") -> tuple[int, int]:
    if isinstance(v, (tuple, list)):
        if len(v) != 2:
            raise SpecError(f"expected one value or two (rows, columns), got {v!r}")
        return _int(v[0], what), _int(v[1], what)
    return _int(v, what), _int(v, what)


def _pads(v) -> tuple[int, int, int, int]:
    """Padding as (top, left, bottom, right); one value, (rows, cols) or four values."""
    if isinstance(v, (tuple, list)):
        if len(v) == 2:
            return _int(v[0], "padding"), _int(v[1], "padding"), _int(v[0], "padding"), _int(v[1], "padding")
        if len(v) == 4:
            top, left, bottom, right = (_int(x, "padding") for x in v)
            return top, left, bottom, right
        raise SpecError(f"padding takes 1, 2 or 4 values, got {v!r}")
    return _int(v, "padding"), _int(v, "padding"), _int(v, "padding"), _int(v, "padding")


def conv_output_size(size: int, kernel: int, stride: int, dilation: int, pad_lo: int, pad_hi: int) -> int:
    return (size + pad_lo + pad_hi - dilation * (kernel - 1) - 1) // stride + 1


def conv2d(name: str = "conv2d", *, n: int = 1, c: int, h: int, w: int, k: int, r: int, s: int,
           stride=1, dilation=1, padding=0, groups: int = 1, bits: dict | None = None,
           init_output: InitOutput = "zero") -> Operator:
    """2-D convolution, NCHW semantics. ``groups == c == k`` is depthwise."""
    _pos(name, n=n, c=c, h=h, w=w, k=k, r=r, s=s, groups=groups)
    sh, sw = _pair(stride, "stride")
    dh, dw = _pair(dilation, "dilation")
    _pos(name, stride_h=sh, stride_w=sw, dilation_h=dh, dilation_w=dw)
    pt, pl, pb, pr = _pads(padding)
    if min(pt, pl, pb, pr) < 0:
        raise SpecError(f"{name}: padding must be >= 0, got {padding!r}")
    if c % groups or k % groups:
        raise SpecError(f"{name}: groups={groups} must divide input channels c={c} and output channels k={k}")
    p = conv_output_size(h, r, sh, dh, pt, pb)
    q = conv_output_size(w, s, sw, dw, pl, pr)
    if p < 1 or q < 1:
        raise SpecError(f"{name}: kernel {r}x{s} (dilation {dh}x{dw}) does not fit input {h}x{w} "
                        f"with padding {padding}")
    b = _bits(bits)
    cg, kg = c // groups, k // groups
    hix = AffineIndex((("P", sh), ("R", dh))) if r > 1 else AffineIndex((("P", sh),))
    wix = AffineIndex((("Q", sw), ("S", dw))) if s > 1 else AffineIndex((("Q", sw),))
    attrs = (("stride", (sh, sw)), ("dilation", (dh, dw)), ("padding", (pt, pl, pb, pr)),
             ("groups", groups), ("input_hw", (h, w)))
    i_idx: list[AffineIndex | str]
    i_shape: tuple[int, ...]
    if groups == 1:
        dims = [("N", n), ("K", k), ("C", c), ("P", p), ("Q", q), ("R", r), ("S", s)]
        i_idx, w_idx, o_idx = ["N", "C", hix, wix], ["K", "C", "R", "S"], ["N", "K", "P", "Q"]
        i_shape = (n, c, h, w)
        kind = "conv2d"
    elif cg == 1 and kg == 1:
        dims = [("N", n), ("G", groups), ("P", p), ("Q", q), ("R", r), ("S", s)]
        i_idx, w_idx, o_idx = ["N", "G", hix, wix], ["G", "R", "S"], ["N", "G", "P", "Q"]
        i_shape = (n, groups, h, w)
        kind = "depthwise_conv2d"
    else:
        dims = [("N", n), ("G", groups), ("K", kg), ("C", cg), ("P", p), ("Q", q), ("R", r), ("S", s)]
        i_idx, w_idx, o_idx = ["N", "G", "C", hix, wix], ["G", "K", "C", "R", "S"], ["N", "G", "K", "P", "Q"]
        i_shape = (n, groups, cg, h, w)
        kind = "grouped_conv2d"
    # Kernel dims of size 1 are dropped from the nest; they would only add loops.
    dims = [(d, v) for d, v in dims if not (d in ("R", "S") and v == 1)]
    w_idx = [x for x in w_idx if not (x == "R" and r == 1) and not (x == "S" and s == 1)]
    pad_lo = tuple([0] * (len(i_idx) - 2) + [pt, pl])
    ops = (
        make_operand("O", o_idx, "output", b["O"], "O"),
        make_operand("I", i_idx, "input", b["I"], "I", pad_lo=pad_lo, shape=i_shape),
        make_operand("W", w_idx, "input", b["W"], "W"),
    )
    return Operator(name, tuple(dims), ops, kind=kind, attrs=attrs, init_output=init_output)


def depthwise_conv2d(name: str = "dwconv", *, n: int = 1, c: int, h: int, w: int, r: int, s: int,
                     stride=1, dilation=1, padding=0, bits: dict | None = None) -> Operator:
    return conv2d(name, n=n, c=c, h=h, w=w, k=c, r=r, s=s, stride=stride, dilation=dilation,
                  padding=padding, groups=c, bits=bits)


def dense(name: str = "dense", *, n: int = 1, c: int, k: int, bits: dict | None = None) -> Operator:
    """Fully connected layer: O[n,k] += I[n,c] * W[k,c]."""
    _pos(name, n=n, c=c, k=k)
    b = _bits(bits)
    ops = (make_operand("O", ["N", "K"], "output", b["O"], "O"),
           make_operand("I", ["N", "C"], "input", b["I"], "I"),
           make_operand("W", ["K", "C"], "input", b["W"], "W"))
    return Operator(name, (("N", n), ("K", k), ("C", c)), ops, kind="dense")


def gemm(name: str = "gemm", *, m: int, n: int, k: int, bits: dict | None = None) -> Operator:
    """Matrix product O[m,n] += A[m,k] * B[k,n]; A is the input class, B the weight class."""
    _pos(name, m=m, n=n, k=k)
    b = _bits(bits)
    ops = (make_operand("O", ["M", "N"], "output", b["O"], "O"),
           make_operand("A", ["M", "K"], "input", b["I"], "I"),
           make_operand("B", ["K", "N"], "input", b["W"], "W"))
    return Operator(name, (("M", m), ("N", n), ("K", k)), ops, kind="matmul")


matmul = gemm


def batched_matmul(name: str = "bmm", *, batch: int, m: int, n: int, k: int,
                   bits: dict | None = None) -> Operator:
    """O[b,m,n] += A[b,m,k] * B[b,k,n] (attention scores and context)."""
    _pos(name, batch=batch, m=m, n=n, k=k)
    b = _bits(bits)
    ops = (make_operand("O", ["B", "M", "N"], "output", b["O"], "O"),
           make_operand("A", ["B", "M", "K"], "input", b["I"], "I"),
           make_operand("Bm", ["B", "K", "N"], "input", b["W"], "W"))
    return Operator(name, (("B", batch), ("M", m), ("N", n), ("K", k)), ops, kind="batched_matmul")
