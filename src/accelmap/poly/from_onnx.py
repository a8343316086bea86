"""An ONNX subgraph as a poly kernel: one or two polyhedral statements per node (AKG's front end, Sec. 3).

The nodes of a model (all of them, or the ones named) become tensor definitions over static shapes
from the workload layer's shape inference: elementwise ops with ONNX broadcasting (Add Sub Mul Div
Max Min Sum Mean Pow-by-2, Relu LeakyRelu Abs Neg Sqrt Exp Sigmoid Clip Identity), Cast, Transpose,
Squeeze Unsqueeze Reshape Flatten (regrouped axes read with floor division and modulo),
ReduceSum / ReduceMean / ReduceSumSquare / ReduceMax, Softmax (max, exp, sum, divide), MatMul (batched, broadcast batch dims), Gemm, Conv (groups,
strides, dilations; zero padding becomes a padded copy), Pad (constant), OneHot, LayerNormalization
(Y only), and BatchNormalization in inference form and in training form (batch statistics, normalization and the
running-statistics update). Tensors read from outside the selection are inputs; scalar constants
are folded into the expressions. A node of another op type is refused with its name and the list
of supported ops. Initializers are inputs too: the flow checks code, not a model's weights.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto

from accelmap.errors import SpecError
from accelmap.poly.kernel import (
    Access,
    Affine,
    Call,
    Const,
    Expr,
    FloorDiv,
    Iter,
    Kernel,
    Statement,
    Tensor,
    check_kernel,
    is_float,
    reduction_statements,
)
from accelmap.workload.onnx_ops import attrs, op_key
from accelmap.workload.onnx_read import read_onnx, strip_payloads
from accelmap.workload.onnx_shapes import ShapeProblem, Shapes, bind_dims, infer

ELEM_TYPES = {TensorProto.FLOAT: "float32", TensorProto.FLOAT16: "float16", TensorProto.INT8: "int8",
              TensorProto.INT16: "int16", TensorProto.INT32: "int32", TensorProto.INT64: "int64"}
_BINARY = {"Add": "+", "Sub": "-", "Mul": "*", "Div": "/", "Max": "max", "Min": "min", "Sum": "+"}
_UNARY = ("Relu", "LeakyRelu", "Abs", "Neg", "Sqrt", "Exp", "Sigmoid", "Clip", "Identity")
_RESHAPES = ("Squeeze", "Unsqueeze", "Reshape", "Flatten")
_REDUCE = ("ReduceSum", "ReduceMean", "ReduceSumSquare", "ReduceMax")
SUPPORTED_OPS = tuple(sorted({*_BINARY, "Mean", "Pow", *_UNARY, *_RESHAPES, *_REDUCE, "Cast", "Transpose",
                              "MatMul", "Gemm", "Conv", "Pad", "OneHot", "BatchNormalization", "LayerNormalization",
                              "Softmax", "Constant"}))
# Names isl or the generated C would read as something else; a tensor so named gets a "t_" prefix.
_RESERVED = re.compile(r"^(S\d+|d\d+|k\d+|in\d+_.*|out\d+_.*|min|max|floord|floor|ceil|mod|and|or|not|exists|"
                       r"infty|int|float|double|char|short|long|void|return|if|else|for|while|do|static|signed)$")


class _Problem(Exception):
    pass


def _affine(*terms: tuple[str, int], const: int = 0) -> Affine:
    return Affine(tuple((d, c) for d, c in terms if c), const)


def _dim(d: str) -> Affine:
    return Affine(((d, 1),))


class _Builder:
    def __init__(self, shapes: Shapes, produced: set[str], opset: int = 17):
        self.shapes = shapes
        self.opset = opset                # of the default domain: Softmax changed its axis semantics at 13
        self.produced = produced          # ONNX names computed inside the selection
        self.names: dict[str, str] = {}   # ONNX name -> tensor name
        self.tensors: dict[str, Tensor] = {}
        self.inputs: list[Tensor] = []
        self.computed: list[Tensor] = []
        self.statements: list[Statement] = []

    # ---- names, types, shapes ---------------------------------------
    def _fresh(self, onnx_name: str) -> str:
        base = re.sub(r"\W", "_", onnx_name) or "t"
        if base[0].isdigit() or _RESERVED.match(base):
            base = "t_" + base
        name, i = base, 1
        while name in self.tensors:
            name, i = f"{base}_{i}", i + 1
        return name

    def shape(self, onnx_name: str) -> tuple[int, ...]:
        try:
            return self.shapes.of(onnx_name, "tensor")
        except ShapeProblem as e:
            raise _Problem(str(e)) from None

    def dtype(self, onnx_name: str) -> str:
        elem = self.shapes.elem.get(onnx_name, 0)
        if elem not in ELEM_TYPES:
            kind = TensorProto.DataType.Name(elem) if elem else "unknown"
            raise _Problem(f"tensor {onnx_name!r} has element type {kind}; the poly flow takes "
                           f"{', '.join(ELEM_TYPES.values())}")
        return ELEM_TYPES[elem]

    def scalar(self, onnx_name: str) -> float | int | None:
        """The value of a known one-element constant (folded into expressions), else None."""
        v = self.shapes.values.get(onnx_name)
        if v is None or np.asarray(v).size != 1 or onnx_name in self.produced:
            return None
        x = np.asarray(v).reshape(-1)[0]
        return float(x) if np.issubdtype(np.asarray(v).dtype, np.floating) else int(x)

    def value(self, onnx_name: str, what: str) -> np.ndarray:
        v = self.shapes.values.get(onnx_name)
        if v is None:
            raise _Problem(f"its {what} {onnx_name!r} must be a constant the importer can read")
        return np.asarray(v)

    def tensor(self, onnx_name: str) -> Tensor:
        """The tensor of an ONNX name; a name not computed inside the selection becomes an input."""
        if onnx_name not in self.names:
            if onnx_name in self.produced:
                raise _Problem(f"reads {onnx_name!r} before the node computing it (nodes must be in order)")
            t = Tensor(self._fresh(onnx_name), self.shape(onnx_name) or (1,), self.dtype(onnx_name))
            self.names[onnx_name] = t.name
            self.tensors[t.name] = t
            self.inputs.append(t)
        return self.tensors[self.names[onnx_name]]

    # ---- definitions --------------------------------------------------
    def define(self, onnx_name: str | None, dims: Sequence[tuple[str, int]], body: Expr, dtype: str,
               reduce: Sequence[tuple[str, int]] = (), out_index: tuple[Affine, ...] | None = None,
               shape: tuple[int, ...] | None = None, combine: str = "+") -> Tensor:
        """A new computed tensor (named after ``onnx_name``, or a temporary) written by ``body`` over ``dims``
        (summed over ``reduce``); ``out_index`` and ``shape`` for a write that is not the identity on ``dims``."""
        if onnx_name is not None and onnx_name in self.names:
            t = self.tensors[self.names[onnx_name]]
        else:
            t = Tensor(self._fresh(onnx_name or "tmp"), shape or tuple(n for _, n in dims) or (1,), dtype)
            if onnx_name is not None:
                self.names[onnx_name] = t.name
            self.tensors[t.name] = t
            self.computed.append(t)
        acc = Access(t.name, out_index or tuple(_dim(d) for d, _ in dims) or (Affine((), 0),))
        n = len(self.statements)
        if reduce:
            self.statements += reduction_statements(t.name, tuple(dims), acc, body, dtype, tuple(reduce), n, combine)
        else:
            self.statements.append(Statement(f"S{n}", tuple(dims), acc, body, "assign"))
        return t

    def operand(self, onnx_name: str, out_dims: Sequence[str], out_shape: Sequence[int]) -> Expr:
        """``onnx_name`` read at the output point, with ONNX (right-aligned) broadcasting."""
        c = self.scalar(onnx_name)
        if c is not None:
            return Const(c)
        t = self.tensor(onnx_name)
        shp = self.shape(onnx_name)
        if not shp:
            return Access(t.name, (Affine((), 0),))
        lead = len(out_shape) - len(shp)
        if lead < 0:
            raise _Problem(f"input {onnx_name!r} has more axes than the output")
        idx = []
        for j, n in enumerate(shp):
            o = out_shape[lead + j]
            if n == o:
                idx.append(_dim(out_dims[lead + j]))
            elif n == 1:
                idx.append(Affine((), 0))
            else:
                raise _Problem(f"input {onnx_name!r} of shape {list(shp)} does not broadcast to {list(out_shape)}")
        return Access(t.name, tuple(idx))

    def out_dims(self, shape: Sequence[int]) -> list[tuple[str, int]]:
        return [(f"d{i}", n) for i, n in enumerate(shape)]


def _float_only(b: _Builder, node, what: str) -> None:
    if not is_float(b.dtype(node.output[0])):
        raise _Problem(f"{what} of {b.dtype(node.output[0])} values is not supported (floats only)")


def _elementwise(b: _Builder, node) -> None:
    op = node.op_type
    y = node.output[0]
    shape = b.shape(y)
    dims = b.out_dims(shape)
    names = [d for d, _ in dims]
    args = [b.operand(i, names, shape) for i in node.input if i]
    a = attrs(node)
    dtype = b.dtype(y)
    body: Expr
    if op in _BINARY or op == "Mean":
        if op in ("Div", "Mean"):
            _float_only(b, node, op)
        body = args[0]
        for x in args[1:]:
            body = Call(_BINARY.get(op, "+"), (body, x))
        if op == "Mean":
            body = Call("*", (body, Const(1.0 / len(args))))
    elif op == "Pow":
        e = b.scalar(node.input[1])
        if e not in (1, 2, 1.0, 2.0):
            raise _Problem("Pow is supported with a constant exponent 1 or 2 (a product)")
        body = args[0] if e == 1 else Call("*", (args[0], args[0]))
    elif op == "Relu":
        body = Call("max", (args[0], Const(0.0 if is_float(dtype) else 0)))
    elif op == "LeakyRelu":
        body = Call("select", (Call("<", (args[0], Const(0.0))),
                               Call("*", (Const(float(a.get("alpha", 0.01))), args[0])), args[0]))
    elif op in ("Abs", "Neg"):
        body = Call(op.lower(), (args[0],))
    elif op in ("Sqrt", "Exp"):
        _float_only(b, node, op)
        body = Call(op.lower(), (args[0],))
    elif op == "Sigmoid":
        _float_only(b, node, op)
        body = Call("/", (Const(1.0), Call("+", (Const(1.0), Call("exp", (Call("neg", (args[0],)),))))))
    elif op == "Clip":
        lo, hi = a.get("min"), a.get("max")
        for pos, which in ((1, "min"), (2, "max")):
            if len(node.input) > pos and node.input[pos]:
                v = b.scalar(node.input[pos])
                if v is None:
                    raise _Problem(f"its {which} {node.input[pos]!r} must be a constant scalar")
                lo, hi = (v, hi) if which == "min" else (lo, v)
        body = args[0]
        if lo is not None:
            body = Call("max", (body, Const(lo)))
        if hi is not None:
            body = Call("min", (body, Const(hi)))
    else:   # Identity
        body = args[0]
    b.define(y, dims, body, dtype)


def _cast(b: _Builder, node) -> None:
    y = node.output[0]
    shape = b.shape(y)
    dims = b.out_dims(shape)
    x = b.operand(node.input[0], [d for d, _ in dims], shape)
    b.define(y, dims, Call("cast", (x,), b.dtype(y)), b.dtype(y))


def _transpose(b: _Builder, node) -> None:
    x, y = node.input[0], node.output[0]
    xs = b.shape(x)
    perm = list(attrs(node).get("perm", list(reversed(range(len(xs))))))
    dims = b.out_dims(b.shape(y))
    idx: list[Affine] = [Affine((), 0)] * len(xs)
    for i, p in enumerate(perm):
        idx[p] = _dim(dims[i][0])
    b.define(y, dims, Access(b.tensor(x).name, tuple(idx)), b.dtype(y))


def reshape_index(xs: Sequence[int], ys: Sequence[int], names: Sequence[str]) -> tuple[Affine, ...]:
    """The index into a tensor of shape ``xs`` that a reshape to ``ys`` reads at the output point ``names``.

    Both shapes are cut where their prefix products agree; inside a segment the output point's row-major
    offset ``L`` gives input axis k as ``floor(L / stride_k) mod xs[k]`` (no floor for stride 1, no modulo
    for a segment's first axis), quasi-affine as img2col's indices. Axes that keep their size stay plain."""
    px = [math.prod(xs[:i]) for i in range(len(xs) + 1)]
    py = [math.prod(ys[:i]) for i in range(len(ys) + 1)]
    cuts = sorted(set(px) & set(py))
    idx: list[Affine] = []
    for k, n in enumerate(xs):
        if n == 1:
            idx.append(Affine((), 0))
            continue
        lo = max(c for c in cuts if c <= px[k])
        hi = min(c for c in cuts if c >= px[k + 1])
        offset = Affine(tuple((names[j], hi // py[j + 1]) for j in range(len(ys))
                              if ys[j] != 1 and lo <= py[j] and py[j + 1] <= hi))
        stride = hi // px[k + 1]
        ix = offset if stride == 1 else Affine(((FloorDiv(offset, stride), 1),))
        if px[k] != lo:   # not the segment's leading axis: wrap
            ix = Affine(((FloorDiv(ix, n, remainder=True), 1),))
        idx.append(ix)
    return tuple(idx) or (Affine((), 0),)


def _reshape(b: _Builder, node) -> None:
    """Squeeze, Unsqueeze, Reshape, Flatten: a copy whose read index is ``reshape_index`` (affine when only
    size-1 axes come or go, with floor division and modulo when axes are regrouped)."""
    x, y = node.input[0], node.output[0]
    xs, ys = b.shape(x), b.shape(y)
    dims = b.out_dims(ys)
    b.define(y, dims, Access(b.tensor(x).name, reshape_index(xs, ys, [d for d, _ in dims])), b.dtype(y))


def _axes(b: _Builder, node, rank: int) -> list[int]:
    a = attrs(node)
    if "axes" in a:
        axes = list(a["axes"])
    elif len(node.input) > 1 and node.input[1]:
        axes = [int(v) for v in b.value(node.input[1], "axes").reshape(-1)]
    else:
        axes = [] if a.get("noop_with_empty_axes", 0) else list(range(rank))
    return sorted({ax % rank for ax in axes})


def _reduce(b: _Builder, node) -> None:
    x, y = node.input[0], node.output[0]
    xs = b.shape(x)
    axes = _axes(b, node, len(xs))
    keep = attrs(node).get("keepdims", 1)
    dims: list[tuple[str, int]] = []
    reduce: list[tuple[str, int]] = []
    idx = []
    for i, n in enumerate(xs):
        if i in axes:
            reduce.append((f"k{i}", n))
            idx.append(_dim(f"k{i}"))
            if keep:
                dims.append((f"d{i}", 1))
        else:
            dims.append((f"d{i}", n))
            idx.append(_dim(f"d{i}"))
    v: Expr = Access(b.tensor(x).name, tuple(idx))
    combine = "max" if node.op_type == "ReduceMax" else "+"
    if node.op_type == "ReduceSumSquare":
        v = Call("*", (v, v))
    if node.op_type == "ReduceMean":
        _float_only(b, node, "ReduceMean")
        v = Call("*", (v, Const(1.0 / math.prod(n for _, n in reduce))))
    if not reduce:
        b.define(y, dims, v, b.dtype(y))
    else:
        b.define(y, dims, v, b.dtype(y), reduce, combine=combine)


def _softmax(b: _Builder, node) -> None:
    """Softmax as the numerically safe sequence of its definition: a max reduction, x - max, exp, a sum
    reduction, a division. Opset 13 normalizes along ``axis`` (default -1); earlier opsets along every axis
    from ``axis`` (default 1) on, the input seen as a 2-D matrix."""
    x, y = node.input[0], node.output[0]
    xs = b.shape(x)
    rank = len(xs)
    _float_only(b, node, "Softmax")
    a = attrs(node)
    axes = [a.get("axis", -1) % rank] if b.opset >= 13 else list(range(a.get("axis", 1) % rank, rank))
    dtype = b.dtype(y)
    dims = b.out_dims(xs)
    kept = [(d, 1) if i in axes else (d, n) for i, (d, n) in enumerate(dims)]
    red = [(f"k{i}", xs[i]) for i in axes]

    def over(t: str, reduced: bool) -> Access:   # t at the output point, or at its reduction point
        return Access(t, tuple(_dim(f"k{i}") if reduced and i in axes else Affine((), 0) if i in axes
                               else _dim(d) for i, (d, _) in enumerate(dims)))

    def point(t: str) -> Access:
        return Access(t, tuple(_dim(d) for d, _ in dims))

    xt = b.tensor(x).name
    mx = b.define(None, kept, over(xt, True), dtype, red, combine="max")
    ex = b.define(None, dims, Call("exp", (Call("-", (point(xt), over(mx.name, False))),)), dtype)
    sm = b.define(None, kept, over(ex.name, True), dtype, red)
    b.define(y, dims, Call("/", (point(ex.name), over(sm.name, False))), dtype)


def _matmul_into(b: _Builder, name: str | None, a_name: str, b_name: str, trans_a: bool = False,
                 trans_b: bool = False, dtype: str = "") -> Tensor:
    sa, sb = b.shape(a_name), b.shape(b_name)
    if len(sa) < 2 or len(sb) < 2:
        raise _Problem(f"1-D MatMul operands ({list(sa)} x {list(sb)}) are not supported; unsqueeze them first")
    m, ka = (sa[-1], sa[-2]) if trans_a else (sa[-2], sa[-1])
    kb, n = (sb[-1], sb[-2]) if trans_b else (sb[-2], sb[-1])
    if ka != kb:
        raise _Problem(f"inner dimensions differ: {list(sa)} x {list(sb)}")
    batch_a, batch_b = sa[:-2], sb[:-2]
    nb = max(len(batch_a), len(batch_b))
    batch = []
    for i in range(nb):
        x = batch_a[i - nb + len(batch_a)] if i >= nb - len(batch_a) else 1
        y = batch_b[i - nb + len(batch_b)] if i >= nb - len(batch_b) else 1
        if x != y and 1 not in (x, y):
            raise _Problem(f"batch dims do not broadcast: {list(sa)} x {list(sb)}")
        batch.append(max(x, y))
    dims = [(f"d{i}", n_) for i, n_ in enumerate(batch)] + [("i", m), ("j", n)]

    def batch_index(shp):
        lead = nb - len(shp[:-2])
        return [Affine((), 0) if shp[j] == 1 and batch[lead + j] != 1 else _dim(f"d{lead + j}")
                for j in range(len(shp) - 2)]

    ai = batch_index(sa) + ([_dim("k0"), _dim("i")] if trans_a else [_dim("i"), _dim("k0")])
    bi = batch_index(sb) + ([_dim("j"), _dim("k0")] if trans_b else [_dim("k0"), _dim("j")])
    body = Call("*", (Access(b.tensor(a_name).name, tuple(ai)), Access(b.tensor(b_name).name, tuple(bi))))
    return b.define(name, dims, body, dtype, [("k0", ka)])


def _matmul(b: _Builder, node) -> None:
    _matmul_into(b, node.output[0], node.input[0], node.input[1], dtype=b.dtype(node.output[0]))


def _gemm(b: _Builder, node) -> None:
    a = attrs(node)
    y = node.output[0]
    alpha, beta = float(a.get("alpha", 1.0)), float(a.get("beta", 1.0))
    has_c = len(node.input) > 2 and bool(node.input[2])
    dtype = b.dtype(y)
    if alpha == 1.0 and not has_c:
        _matmul_into(b, y, node.input[0], node.input[1], bool(a.get("transA", 0)), bool(a.get("transB", 0)), dtype)
        return
    t = _matmul_into(b, y + "_ab", node.input[0], node.input[1], bool(a.get("transA", 0)),
                     bool(a.get("transB", 0)), dtype)
    shape = b.shape(y)
    dims = b.out_dims(shape)
    names = [d for d, _ in dims]
    body: Expr = Access(t.name, tuple(_dim(d) for d in names))
    if alpha != 1.0:
        body = Call("*", (Const(alpha), body))
    if has_c:
        cterm = b.operand(node.input[2], names, shape)
        body = Call("+", (body, cterm if beta == 1.0 else Call("*", (Const(beta), cterm))))
    b.define(y, dims, body, dtype)


def _padded(b: _Builder, x: str, pads: Sequence[int], fill: float | int, base: str) -> Tensor:
    """A zero- (or ``fill``-) padded copy of ``x``: one statement fills, a second copies the interior."""
    xs = b.shape(x)
    r = len(xs)
    lo, hi = list(pads[:r]), list(pads[r:])
    if any(p < 0 for p in pads):
        raise _Problem(f"negative pads {list(pads)} (cropping) are not supported")
    src = b.tensor(x)
    shape = tuple(n + lo[i] + hi[i] for i, n in enumerate(xs))
    dims = b.out_dims(shape)
    t = b.define(base, dims, Const(fill), src.dtype)
    inner = b.out_dims(xs)
    out = tuple(_affine((d, 1), const=lo[i]) for i, (d, _) in enumerate(inner))
    b.define(base, inner, Access(src.name, tuple(_dim(d) for d, _ in inner)), src.dtype, out_index=out)
    return t


def _pad(b: _Builder, node) -> None:
    a = attrs(node)
    if a.get("mode", "constant") != "constant":
        raise _Problem(f"Pad mode {a.get('mode')!r} is not supported (constant only)")
    pads = list(a["pads"]) if "pads" in a else [int(v) for v in b.value(node.input[1], "pads").reshape(-1)]
    if len(node.input) > 3 and node.input[3]:
        raise _Problem("Pad with an axes input is not supported")
    fill = b.scalar(node.input[2]) if len(node.input) > 2 and node.input[2] else a.get("value", 0)
    if fill is None:
        raise _Problem(f"its constant value {node.input[2]!r} must be a known scalar")
    _padded(b, node.input[0], pads, fill, node.output[0])


def _conv(b: _Builder, node) -> None:
    a = attrs(node)
    x, w, y = node.input[0], node.input[1], node.output[0]
    xs, ws, ys = b.shape(x), b.shape(w), b.shape(y)
    if len(xs) != 4:
        raise _Problem(f"only 2-D convolutions (4-D input) are supported, got input {list(xs)}")
    if a.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        raise _Problem(f"auto_pad {a['auto_pad']!r}: give explicit pads")
    groups = int(a.get("group", 1))
    strides = list(a.get("strides", [1, 1]))
    dil = list(a.get("dilations", [1, 1]))
    pads = list(a.get("pads", [0, 0, 0, 0]))
    src = b.tensor(x)
    if any(pads):
        src = _padded(b, x, [0, 0, pads[0], pads[1], 0, 0, pads[2], pads[3]], 0, y + "_pad")
    m, cg, kh, kw = ws
    mg = m // groups
    dtype = b.dtype(y)
    dims = [("d0", ys[0])] + ([("g", groups)] if groups > 1 else []) + [("d1", mg), ("d2", ys[2]), ("d3", ys[3])]
    red = [("k0", cg), ("k1", kh), ("k2", kw)]
    chan_x = _affine(("g", cg), ("k0", 1)) if groups > 1 else _dim("k0")
    chan_y = _affine(("g", mg), ("d1", 1)) if groups > 1 else _dim("d1")
    xi = (_dim("d0"), chan_x, _affine(("d2", strides[0]), ("k1", dil[0])), _affine(("d3", strides[1]), ("k2", dil[1])))
    wi = (chan_y, _dim("k0"), _dim("k1"), _dim("k2"))
    body = Call("*", (Access(src.name, xi), Access(b.tensor(w).name, wi)))
    has_bias = len(node.input) > 2 and bool(node.input[2])
    t = b.define(y + "_conv" if has_bias else y, dims, body, dtype, red,
                 out_index=(_dim("d0"), chan_y, _dim("d2"), _dim("d3")), shape=tuple(ys))
    if has_bias:
        od = b.out_dims(ys)
        bias = Access(b.tensor(node.input[2]).name, (_dim("d1"),))
        b.define(y, od, Call("+", (Access(t.name, tuple(_dim(d) for d, _ in od)), bias)), dtype)


def _one_hot(b: _Builder, node) -> None:
    idx_name, depth_name, values_name = node.input[:3]
    y = node.output[0]
    ys = b.shape(y)
    axis = int(attrs(node).get("axis", -1)) % len(ys)
    depth = int(b.value(depth_name, "depth").reshape(-1)[0])
    dims = b.out_dims(ys)
    names = [d for d, _ in dims]
    c = names[axis]
    idx = b.tensor(idx_name)
    ia = Access(idx.name, tuple(_dim(d) for d in names if d != c) or (Affine((), 0),))
    vals = b.tensor(values_name)
    on, off = Access(vals.name, (Affine((), 1),)), Access(vals.name, (Affine((), 0),))
    # ONNX: a negative index counts from the end (index + depth)
    body = Call("select", (Call("==", (ia, Iter(c))), on,
                           Call("select", (Call("==", (ia, Call("-", (Iter(c), Const(depth))))), on, off))))
    b.define(y, dims, body, b.dtype(y))


def _batch_norm(b: _Builder, node) -> None:
    a = attrs(node)
    eps = float(a.get("epsilon", 1e-5))
    x, scale, bias, mean, var = node.input[:5]
    y = node.output[0]
    _float_only(b, node, "BatchNormalization")
    xs = b.shape(x)
    dims = b.out_dims(xs)
    names = [d for d, _ in dims]
    dtype = b.dtype(y)
    outs = [o for o in node.output[1:] if o]
    training = bool(a.get("training_mode", 0)) or bool(outs)
    xa = Access(b.tensor(x).name, tuple(_dim(d) for d in names))

    def per_c(t: Tensor) -> Access:
        return Access(t.name, (_dim("d1"),))

    if training:
        count = math.prod(n for i, n in enumerate(xs) if i != 1)
        red = [(f"k{i}", n) for i, n in enumerate(xs) if i != 1]
        xr = Access(xa.tensor, tuple(_dim("d1") if i == 1 else _dim(f"k{i}") for i in range(len(xs))))
        cdim = [("d1", xs[1])]
        mu = b.define(y + "_mean", cdim, Call("*", (xr, Const(1.0 / count))), dtype, red)
        dev = Call("-", (xr, per_c(mu)))
        sig = b.define(y + "_var", cdim, Call("*", (Call("*", (dev, dev)), Const(1.0 / count))), dtype, red)
        mean_t, var_t = mu, sig
    else:
        mean_t, var_t = b.tensor(mean), b.tensor(var)
    norm = Call("/", (Call("-", (xa, per_c(mean_t))), Call("sqrt", (Call("+", (per_c(var_t), Const(eps))),))))
    body = Call("+", (Call("*", (norm, per_c(b.tensor(scale)))), per_c(b.tensor(bias))))
    b.define(y, dims, body, dtype)
    if training:
        mom = float(a.get("momentum", 0.9))
        for out_name, run, cur in zip(node.output[1:3], (mean, var), (mean_t, var_t), strict=False):
            if out_name:
                upd = Call("+", (Call("*", (per_c(b.tensor(run)), Const(mom))), Call("*", (per_c(cur), Const(1 - mom)))))
                b.define(out_name, [("d1", xs[1])], upd, dtype)


def _layer_norm(b: _Builder, node) -> None:
    """Mean and variance over the axes from ``axis`` on (two reductions), then the normalization."""
    a = attrs(node)
    x, y = node.input[0], node.output[0]
    if any(o for o in node.output[1:]):
        raise _Problem("its Mean / InvStdDev outputs are not supported (Y only)")
    _float_only(b, node, "LayerNormalization")
    xs = b.shape(x)
    axis = int(a.get("axis", -1)) % len(xs)
    eps = float(a.get("epsilon", 1e-5))
    dtype = b.dtype(y)
    count = math.prod(xs[axis:])
    outer = [(f"d{i}", n) for i, n in enumerate(xs[:axis])]
    red = [(f"k{i}", n) for i, n in enumerate(xs) if i >= axis]
    xt = b.tensor(x).name
    xr = Access(xt, tuple(_dim(f"d{i}") if i < axis else _dim(f"k{i}") for i in range(len(xs))))
    stat = tuple(_dim(d) for d, _ in outer) or (Affine((), 0),)
    mu = b.define(y + "_mean", outer, Call("*", (xr, Const(1.0 / count))), dtype, red)
    dev = Call("-", (xr, Access(mu.name, stat)))
    var = b.define(y + "_var", outer, Call("*", (Call("*", (dev, dev)), Const(1.0 / count))), dtype, red)
    dims = b.out_dims(xs)
    names = [d for d, _ in dims]
    xa = Access(xt, tuple(_dim(d) for d in names))
    norm = Call("/", (Call("-", (xa, Access(mu.name, stat))),
                      Call("sqrt", (Call("+", (Access(var.name, stat), Const(eps))),))))
    body: Expr = Call("*", (norm, b.operand(node.input[1], names, xs)))
    if len(node.input) > 2 and node.input[2]:
        body = Call("+", (body, b.operand(node.input[2], names, xs)))
    b.define(y, dims, body, dtype)


_CONVERT = {**{op: _elementwise for op in (*_BINARY, "Mean", "Pow", *_UNARY)},
            **{op: _reshape for op in _RESHAPES}, **{op: _reduce for op in _REDUCE},
            "Cast": _cast, "Transpose": _transpose, "MatMul": _matmul, "Gemm": _gemm, "Conv": _conv, "Pad": _pad,
            "OneHot": _one_hot, "BatchNormalization": _batch_norm, "LayerNormalization": _layer_norm,
            "Softmax": _softmax}


def _node_name(node, i: int) -> str:
    return node.name or f"{node.op_type}_{i}"


def kernel_from_onnx(model: str | Path | onnx.ModelProto, nodes: Sequence[str] | None = None, *,
                     dims: dict[str, int] | None = None, batch: int | None = None,
                     name: str | None = None) -> Kernel:
    """The subgraph of ``model`` made of the nodes named in ``nodes`` (default: every node) as a kernel.

    Results are the selection's outputs that are graph outputs, are read by nodes outside it, or are
    read by nobody. ``dims``/``batch`` bind symbolic dims as the workload importer does."""
    if isinstance(model, onnx.ModelProto):
        source = name or model.graph.name or "<model>"
        proto = onnx.ModelProto()
        proto.CopyFrom(model)
        strip_payloads(proto)
    else:
        source = str(model)
        proto = read_onnx(model)
    graph_nodes = list(proto.graph.node)
    bind_dims(proto, dict(dims or {}), batch, None, source)
    _, shapes = infer(proto, source)
    all_names = [_node_name(n, i) for i, n in enumerate(graph_nodes)]
    if nodes is None:
        chosen = [n for n in graph_nodes]
    else:
        wanted = list(nodes)
        missing = [w for w in wanted if w not in all_names]
        if missing:
            shown = ", ".join(all_names[:12]) + (" ..." if len(all_names) > 12 else "")
            raise SpecError(f"no node named {missing[0]!r}; nodes: {shown}", where=source)
        chosen = [n for i, n in enumerate(graph_nodes) if all_names[i] in set(wanted)]
    chosen = [n for n in chosen if op_key(n) != "Constant"]   # constants are folded or become inputs
    if not chosen:
        raise SpecError("the selection has no node to compile (only constants)", where=source)
    produced = {o for n in chosen for o in n.output if o}
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 17)
    b = _Builder(shapes, produced, opset)
    for node in chosen:
        i = graph_nodes.index(node)
        key = op_key(node)
        where = f"node {all_names[i]!r} ({key})"
        conv = _CONVERT.get(key)
        if conv is None:
            raise SpecError(f"{where}: op type not supported by the poly front end; supported: "
                            f"{', '.join(SUPPORTED_OPS)}", where=source)
        try:
            conv(b, node)
        except (_Problem, ShapeProblem) as e:
            raise SpecError(f"{where}: {e}", where=source) from None
        except KeyError as e:
            raise SpecError(f"{where}: missing attribute {e}", where=source) from None
    outside = {i for n in graph_nodes if n not in chosen for i in n.input}
    outside |= {o.name for o in proto.graph.output}
    results = tuple(b.names[o] for o in produced if o in outside and o in b.names)
    stem = name or (Path(source).stem if not isinstance(model, onnx.ModelProto) else source)
    k = Kernel(re.sub(r"\W", "_", stem) or "onnx", tuple(b.inputs), tuple(b.computed), tuple(b.statements),
               tuple(sorted(results)))
    check_kernel(k, source)
    return k


def onnx_node_names(model: str | Path | onnx.ModelProto) -> list[str]:
    proto = model if isinstance(model, onnx.ModelProto) else read_onnx(model)
    return [_node_name(n, i) for i, n in enumerate(proto.graph.node)]
