"""ONNX nodes with multiply-accumulates -> accelerator operators.

``MAC_OPS`` maps an op (``OpType`` in the standard domain, ``domain.OpType``
otherwise) to a converter that returns the node's operators; ``REFUSED_MAC_OPS``
names the ops that carry multiply-accumulates but have no mapping here, with the
reason; ``classify`` tells an op's class for the importer. An op that is none of
these and not a known host op is *unknown*: it may carry multiply-accumulates,
so the importer lists it apart instead of passing it as host work.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from typing import Callable

import numpy as np
import onnx

from accelmap.errors import SpecError
from accelmap.workload.constructors import batched_matmul, conv2d, conv_output_size, dense, gemm
from accelmap.workload.onnx_precision import FLOAT_BITS, precision
from accelmap.workload.onnx_shapes import Shapes
from accelmap.workload.operator import AffineIndex, Operator, make_operand
from accelmap.workload.text_form import parse_expression


class NodeProblem(Exception):
    """A node that cannot be imported; becomes an error naming node, op type and reason."""


# (name suffix, operator, has bias[, runs]); the suffix is "" for a node that is one operator;
# runs (default 1) is how often the node computes the operator (a recurrent step per time step).
# An empty list: this node computes no products (host work).
Converted = list[tuple]


def op_key(node) -> str:
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"


def attrs(node) -> dict:
    out = {}
    for a in node.attribute:
        v = onnx.helper.get_attribute_value(a)
        out[a.name] = v.decode() if isinstance(v, bytes) else v
    return out


def _input(node, pos: int | None) -> str | None:
    if pos is None or pos >= len(node.input) or not node.input[pos]:
        return None
    return node.input[pos]


class Context:
    """What a converter reads: shapes and element types, and the precision mode."""

    def __init__(self, shapes: Shapes, bits):
        self.shapes = shapes
        self.bits = bits

    def of(self, name: str, what: str) -> tuple[int, ...]:
        return self.shapes.of(name, what)

    def prec(self, x: str, w: str | None, y: str, **kw) -> dict:
        return precision(self.bits, self.shapes, x, w, y, **kw)


# ---- convolutions ---------------------------------------------------------------------------

# op -> positions of (data input, weight input, bias input)
_CONV_INPUTS = {"Conv": (0, 1, 2), "ConvInteger": (0, 1, None), "QLinearConv": (0, 3, 8),
                "com.microsoft.FusedConv": (0, 1, 2), "com.microsoft.QLinearConv": (0, 3, 8)}


def _same_pads(size: int, k: int, stride: int, dilation: int, mode: str) -> tuple[int, int]:
    out = -(-size // stride)
    total = max((out - 1) * stride + (k - 1) * dilation + 1 - size, 0)
    small, big = total // 2, total - total // 2
    return (small, big) if mode == "SAME_UPPER" else (big, small)


def _conv(node, name: str, ctx: Context) -> Converted:
    xi, wi, bi = _CONV_INPUTS[op_key(node)]
    x, w = _input(node, xi), _input(node, wi)
    if x is None or w is None:
        raise NodeProblem("needs a data and a weight input")
    xs, ws = ctx.of(x, "input"), ctx.of(w, "weight")
    a = attrs(node)
    nsp = len(xs) - 2
    if nsp not in (1, 2, 3) or len(ws) != len(xs):
        raise NodeProblem(f"{nsp}-D convolution (input {list(xs)}, weight {list(ws)}); "
                          "1-D, 2-D and 3-D convolutions are mapped")
    group = int(a.get("group", 1))
    n, c = xs[0], xs[1]
    k, cg = ws[0], ws[1]
    kernel = list(ws[2:])
    if "kernel_shape" in a and list(a["kernel_shape"]) != kernel:
        raise NodeProblem(f"kernel_shape {list(a['kernel_shape'])} differs from the weight shape {list(ws)}")
    if cg * group != c:
        raise NodeProblem(f"weight has {cg} channels per group x group={group}, but the input has {c} channels")
    strides = list(a.get("strides", [1] * nsp))
    dil = list(a.get("dilations", [1] * nsp))
    if len(strides) != nsp or len(dil) != nsp:
        raise NodeProblem(f"strides {strides} or dilations {dil} do not have {nsp} entries (a {nsp}-D kernel)")
    spatial = list(xs[2:])
    auto = a.get("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        lohi = [_same_pads(spatial[i], kernel[i], strides[i], dil[i], auto) for i in range(nsp)]
        pads = [lo for lo, _ in lohi] + [hi for _, hi in lohi]
    elif auto == "VALID":
        pads = [0] * (2 * nsp)
    elif auto == "NOTSET":
        pads = list(a.get("pads", [0] * (2 * nsp)))
    else:
        raise NodeProblem(f"auto_pad {auto!r} is not an ONNX auto_pad mode")
    if len(pads) != 2 * nsp:
        raise NodeProblem(f"pads {pads} do not have {2 * nsp} entries (begin and end of a {nsp}-D kernel)")
    if nsp == 3:
        op = _conv3d_operator(name, xs, ws, group, strides, dil, pads, ctx.prec(x, w, node.output[0]))
        y = ctx.shapes.get(node.output[0])
        mine = (xs[0], ws[0], *(op.sizes.get(d, 1) for d in ("D", "P", "Q")))
        if y is not None and tuple(y) != mine:
            raise NodeProblem(f"output shape {list(y)} from the model disagrees with {list(mine)} "
                              "computed from the attributes")
        return [("", op, _input(node, bi) is not None)]
    if nsp == 1:
        # A 1-D convolution is a 2-D one over a single row.
        spatial, kernel, strides, dil = [1] + spatial, [1] + kernel, [1] + strides, [1] + dil
        pads = [0, pads[0], 0, pads[1]]
    if len(strides) != 2 or len(dil) != 2 or len(pads) != 4:
        raise NodeProblem(f"strides {strides}, dilations {dil} or pads {pads} do not match a 2-D kernel")
    try:
        op = conv2d(name, n=n, c=c, h=spatial[0], w=spatial[1], k=k, r=kernel[0], s=kernel[1],
                    stride=tuple(strides), dilation=tuple(dil), padding=tuple(pads), groups=group,
                    bits=ctx.prec(x, w, node.output[0]))
    except SpecError as e:
        raise NodeProblem(str(e)) from None
    y = ctx.shapes.get(node.output[0])
    if y is not None:
        sz = op.sizes
        mine = (n, k, sz.get("P", 1), sz.get("Q", 1))
        theirs = tuple(y) if len(y) == 4 else (y[0], y[1], 1, y[2])
        if mine != theirs:
            raise NodeProblem(f"output shape {list(y)} from the model disagrees with {list(mine)} "
                              "computed from the attributes")
    return [("", op, _input(node, bi) is not None)]


def _conv3d_operator(name: str, xs, ws, group: int, strides, dil, pads, b: dict) -> Operator:
    """A 3-D convolution as an affine loop nest (the conv2d layout with a depth axis D/T)."""
    n, c, *spatial = xs
    k, cg, *kernel = ws
    if min(pads) < 0:
        raise NodeProblem(f"pads {pads} are negative")
    outs = [conv_output_size(spatial[i], kernel[i], strides[i], dil[i], pads[i], pads[i + 3]) for i in range(3)]
    if min(outs) < 1:
        raise NodeProblem(f"kernel {kernel} does not fit input {spatial} with pads {pads}")
    kg = k // group
    win = []
    for o, kk, st, dl, sz in zip(("D", "P", "Q"), ("T", "R", "S"), strides, dil, kernel, strict=True):
        win.append(AffineIndex(((o, st), (kk, dl))) if sz > 1 else AffineIndex(((o, st),)))
    kdims = [(kk, sz) for kk, sz in zip(("T", "R", "S"), kernel, strict=True) if sz > 1]
    odims = list(zip(("D", "P", "Q"), outs, strict=True))
    i_idx: list[AffineIndex | str]
    i_shape: tuple[int, ...]
    if group == 1:
        dims = [("N", n), ("K", k), ("C", c)] + odims + kdims
        i_idx, w_idx, o_idx, i_shape, kind = ["N", "C", *win], ["K", "C"], ["N", "K", "D", "P", "Q"], tuple(xs), "conv3d"
    elif cg == 1 and kg == 1:
        dims = [("N", n), ("G", group)] + odims + kdims
        i_idx, w_idx, o_idx = ["N", "G", *win], ["G"], ["N", "G", "D", "P", "Q"]
        i_shape, kind = tuple(xs), "depthwise_conv3d"
    else:
        dims = [("N", n), ("G", group), ("K", kg), ("C", cg)] + odims + kdims
        i_idx, w_idx, o_idx = ["N", "G", "C", *win], ["G", "K", "C"], ["N", "G", "K", "D", "P", "Q"]
        i_shape, kind = (n, group, cg, *spatial), "grouped_conv3d"
    w_idx = w_idx + [kk for kk, _ in kdims]
    pad_lo = tuple([0] * (len(i_idx) - 3) + list(pads[:3]))
    ops = (make_operand("O", o_idx, "output", b["O"], "O"),
           make_operand("I", i_idx, "input", b["I"], "I", pad_lo=pad_lo, shape=i_shape),
           make_operand("W", w_idx, "input", b["W"], "W"))
    attrs = (("stride", tuple(strides)), ("dilation", tuple(dil)), ("padding", tuple(pads)), ("groups", group),
             ("input_dhw", tuple(spatial)))
    return Operator(name, tuple(dims), ops, kind=kind, attrs=attrs)


def _conv_transpose(node, name: str, ctx: Context) -> Converted:
    """A transposed convolution as the GEMM it is computed with (col2im, an add, stays on the host).

    Every input pixel meets every kernel tap: O[n*h*w, k*r*s] += I[n*h*w, c] * W[c, k*r*s] per
    group, which is N*C*H*W*(K/G)*R*S MACs whatever the strides, pads and output padding.
    """
    x, w = _input(node, 0), _input(node, 1)
    if x is None or w is None:
        raise NodeProblem("needs a data and a weight input")
    xs, ws = ctx.of(x, "input"), ctx.of(w, "weight")
    if len(xs) not in (3, 4) or len(ws) != len(xs):
        raise NodeProblem(f"{len(xs) - 2}-D transposed convolution (input {list(xs)}, weight {list(ws)}); "
                          "only 1-D and 2-D ones are mapped")
    group = int(attrs(node).get("group", 1))
    c, kg = xs[1], ws[1]
    if ws[0] != c or c % group:
        raise NodeProblem(f"weight {list(ws)} does not match input channels {c} with group={group}")
    rows = math.prod(xs[:1] + xs[2:])
    taps = kg * math.prod(ws[2:])
    b = ctx.prec(x, w, node.output[0])
    if group == 1:
        op = gemm(name, m=rows, n=taps, k=c, bits=b)
    else:
        op = batched_matmul(name, batch=group, m=rows, n=taps, k=c // group, bits=b)
    return [("", replace(op, attrs=op.attrs + (("lowered_from", "ConvTranspose"),)), _input(node, 2) is not None)]


# ---- matrix products -------------------------------------------------------------------------

def _gemm_core(node, name: str, ctx: Context, a_pos: int, b_pos: int, c_pos: int | None) -> Converted:
    a_name, b_name = _input(node, a_pos), _input(node, b_pos)
    if a_name is None or b_name is None:
        raise NodeProblem("needs inputs A and B")
    sa, sb = ctx.of(a_name, "input A"), ctx.of(b_name, "input B")
    if len(sa) != 2 or len(sb) != 2:
        raise NodeProblem(f"Gemm takes 2-D inputs, got {list(sa)} and {list(sb)}")
    at = attrs(node)
    ta, tb = int(at.get("transA", 0)), int(at.get("transB", 0))
    m, k = (sa[1], sa[0]) if ta else sa
    k2, n = (sb[1], sb[0]) if tb else sb
    if k != k2:
        raise NodeProblem(f"inner sizes differ: A {list(sa)} (transA={ta}), B {list(sb)} (transB={tb})")
    b = ctx.prec(a_name, b_name, node.output[0])
    if not ta and tb:
        op = dense(name, n=m, c=k, k=n, bits=b)   # FC layer: weights stored [out, in]
    elif not ta and not tb:
        op = gemm(name, m=m, n=n, k=k, bits=b)
    else:
        expr = f"O[m,n] += A[k,m] * B[{'n,k' if tb else 'k,n'}]"
        op = parse_expression(expr, {"m": m, "n": n, "k": k}, name=name,
                              bits={"O": b["O"], "A": b["I"], "B": b["W"]})
        op = replace(op, kind="matmul")
    return [("", op, _input(node, c_pos) is not None)]


def _matmul_shapes(sa: list[int], sb: list[int], trans_a: bool = False, trans_b: bool = False):
    if not sa or not sb:
        raise NodeProblem("MatMul of a scalar")
    if len(sa) == 1:
        sa = [1] + sa
    if len(sb) == 1:
        sb = sb + [1]
    if trans_a:
        sa = sa[:-2] + [sa[-1], sa[-2]]
    if trans_b:
        sb = sb[:-2] + [sb[-1], sb[-2]]
    return sa, sb


def matmul_operator(name: str, sa: list[int], sb: list[int], b: dict) -> Operator:
    """A (batched, broadcast) matrix product of operands of shapes ``sa`` x ``sb``."""
    m, k = sa[-2:]
    k2, n = sb[-2:]
    if k != k2:
        raise NodeProblem(f"inner sizes differ: A {sa}, B {sb}")
    ba, bb = sa[:-2], sb[:-2]
    try:
        out_batch = list(np.broadcast_shapes(tuple(ba), tuple(bb)))
    except ValueError:
        raise NodeProblem(f"batch dimensions {ba} and {bb} do not broadcast") from None
    ba = [1] * (len(out_batch) - len(ba)) + ba
    bb = [1] * (len(out_batch) - len(bb)) + bb
    axes = [(i, s) for i, s in enumerate(out_batch) if s > 1]
    a_has = all(ba[i] > 1 for i, _ in axes)
    b_has = all(bb[i] > 1 for i, _ in axes)
    b_none = not any(bb[i] > 1 for i, _ in axes)
    batch = math.prod(s for _, s in axes)
    if not axes:
        return gemm(name, m=m, n=n, k=k, bits=b)
    if b_none:
        # A shared right operand (a projection weight): batch rows are more rows of A.
        return gemm(name, m=batch * m, n=n, k=k, bits=b)
    if a_has and b_has:
        return batched_matmul(name, batch=batch, m=m, n=n, k=k, bits=b)
    # Broadcast on some batch axes: each operand is indexed only by its own axes,
    # so the reuse of the broadcast operand is visible to the cost model.
    sizes = {f"b{j}": s for j, (_, s) in enumerate(axes)}
    a_ix = [f"b{j}" for j, (i, _) in enumerate(axes) if ba[i] > 1]
    b_ix = [f"b{j}" for j, (i, _) in enumerate(axes) if bb[i] > 1]
    o_ix = list(sizes)
    expr = (f"O[{','.join(o_ix + ['m', 'n'])}] += A[{','.join(a_ix + ['m', 'k'])}] * "
            f"B[{','.join(b_ix + ['k', 'n'])}]")
    op = parse_expression(expr, {**sizes, "m": m, "n": n, "k": k}, name=name,
                          bits={"O": b["O"], "A": b["I"], "B": b["W"]})
    return replace(op, kind="batched_matmul")


def _matmul_core(node, name: str, ctx: Context, a_pos: int, b_pos: int, bias_pos: int | None = None,
                 transposes: bool = False) -> Converted:
    a_name, b_name = _input(node, a_pos), _input(node, b_pos)
    if a_name is None or b_name is None:
        raise NodeProblem("needs inputs A and B")
    at = attrs(node) if transposes else {}
    if at.get("transBatchA", 0) or at.get("transBatchB", 0):
        raise NodeProblem("transBatchA/transBatchB (batch axes moved into the matrix) are not mapped")
    sa, sb = _matmul_shapes(list(ctx.of(a_name, "input A")), list(ctx.of(b_name, "input B")),
                            bool(at.get("transA", 0)), bool(at.get("transB", 0)))
    op = matmul_operator(name, sa, sb, ctx.prec(a_name, b_name, node.output[0]))
    return [("", op, _input(node, bias_pos) is not None)]


def _matmul_nbits(node, name: str, ctx: Context) -> Converted:
    """Block-quantized weights [N, K] (4-bit by default) times activations [..., K]."""
    a = attrs(node)
    x = _input(node, 0)
    if x is None or "K" not in a or "N" not in a:
        raise NodeProblem("needs input A and attributes K and N")
    xs = ctx.of(x, "input A")
    k, n = int(a["K"]), int(a["N"])
    if xs[-1] != k:
        raise NodeProblem(f"input A {list(xs)} does not end in K={k}")
    rows = math.prod(xs[:-1])
    b = ctx.prec(x, None, node.output[0], w_bits=int(a.get("bits", 4)))
    return [("", dense(name, n=rows, c=k, k=n, bits=b), _input(node, 5) is not None)]


def _einsum(node, name: str, ctx: Context) -> Converted:
    eq = attrs(node).get("equation", "").replace(" ", "")
    ins = [i for i in node.input]
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ins):
        raise NodeProblem(f"equation {eq!r} names {len(terms)} operands, the node has {len(ins)}")
    if len(ins) == 1:
        return []   # a transpose, trace or sum of one operand: no products
    if len(ins) != 2:
        raise NodeProblem(f"einsum of {len(ins)} operands ({eq!r}); only two-operand einsums are mapped "
                          "(split it into pairwise products)")
    shapes = [ctx.of(i, f"operand {k}") for k, i in enumerate(ins)]
    # Expand '...' into named axes, aligned from the right as numpy broadcasts.
    ell = max((len(s) - (len(t) - 3) for t, s in zip(terms, shapes, strict=True) if "..." in t), default=0)
    ell_names = [f"e{j}" for j in range(ell)]
    axes_of: list[list[str]] = []
    for t, s in zip(terms, shapes, strict=True):
        letters = re.findall(r"\.\.\.|[A-Za-z]", t)
        out = []
        for tok in letters:
            if tok == "...":
                n_ell = len(s) - (len(letters) - 1)
                out += ell_names[ell - n_ell:]
            else:
                out.append(tok)
        if len(out) != len(s):
            raise NodeProblem(f"equation term {t!r} does not match the operand shape {list(s)}")
        if len(set(out)) != len(out):
            raise NodeProblem(f"equation {eq!r} repeats an index within one operand (a diagonal); not mapped")
        axes_of.append(out)
    if arrow:
        out_axes: list[str] = []
        for tok in re.findall(r"\.\.\.|[A-Za-z]", rhs):
            out_axes += ell_names if tok == "..." else [tok]
    else:
        counts: dict[str, int] = {}
        for ax in axes_of:
            for d in ax:
                if not d.startswith("e"):
                    counts[d] = counts.get(d, 0) + 1
        out_axes = ell_names + sorted(d for d, c in counts.items() if c == 1)
    sizes: dict[str, int] = {}
    for ax, s in zip(axes_of, shapes, strict=True):
        for d, v in zip(ax, s, strict=True):
            if d in sizes and sizes[d] != v:
                if 1 in (sizes[d], v):
                    raise NodeProblem(f"equation {eq!r}: index {d!r} broadcasts ({sizes[d]} vs {v}); not mapped")
                raise NodeProblem(f"equation {eq!r}: index {d!r} has sizes {sizes[d]} and {v}")
            sizes[d] = v
    if not out_axes:
        raise NodeProblem(f"equation {eq!r} has a scalar output; not mapped")
    if any(d not in sizes for d in out_axes):
        raise NodeProblem(f"equation {eq!r}: an output index appears in no operand")
    # Loop dims are named d_<letter> so that case-distinct letters stay distinct names.
    dn = {d: (d if d.startswith("e") else ("u_" if d.isupper() else "l_") + d) for d in sizes}
    expr = (f"O[{','.join(dn[d] for d in out_axes)}] += A[{','.join(dn[d] for d in axes_of[0])}] * "
            f"B[{','.join(dn[d] for d in axes_of[1])}]")
    b = ctx.prec(ins[0], ins[1], node.output[0])
    try:
        op = parse_expression(expr, {dn[d]: v for d, v in sizes.items()}, name=name,
                              bits={"O": b["O"], "A": b["I"], "B": b["W"]})
    except SpecError as e:
        raise NodeProblem(str(e)) from None
    return [("", op, False)]


def _attention_ops(name: str, batch_heads: int, s: int, l: int, dk: int, dv: int, b: dict) -> Converted:
    return [(".scores", batched_matmul(f"{name}.scores", batch=batch_heads, m=s, n=l, k=dk, bits=b), False),
            (".context", batched_matmul(f"{name}.context", batch=batch_heads, m=s, n=dv, k=l, bits=b), False)]


def _past_len(ctx: Context, node, pos: int, axis: int) -> int:
    p = _input(node, pos)
    return 0 if p is None else ctx.of(p, "past key/value")[axis]


def _qkv_inputs(node, ctx: Context):
    """Attributes, input, packed QKV weights and their shapes of com.microsoft (Q)Attention."""
    a = attrs(node)
    x, w = _input(node, 0), _input(node, 1)
    if x is None or w is None or "num_heads" not in a:
        raise NodeProblem("needs input, weights and num_heads")
    xs, ws = ctx.of(x, "input"), ctx.of(w, "weights")
    if len(xs) != 3 or len(ws) != 2 or ws[0] != xs[2]:
        raise NodeProblem(f"input {list(xs)} and weights {list(ws)} are not [B, S, D] and [D, 3*H]")
    return a, x, w, xs, ws


def _ms_attention(node, name: str, ctx: Context) -> Converted:
    """com.microsoft.Attention: the QKV projection and the two attention products."""
    a, x, w, xs, ws = _qkv_inputs(node, ctx)
    heads = int(a["num_heads"])
    qk = list(a.get("qkv_hidden_sizes", [])) or [ws[1] // 3] * 3
    bsz, s = xs[0], xs[1]
    if sum(qk) != ws[1] or qk[0] % heads or qk[2] % heads:
        raise NodeProblem(f"qkv hidden sizes {qk} do not fit weights {list(ws)} and {heads} heads")
    l = s + _past_len(ctx, node, 4, 3)
    b = ctx.prec(x, w, node.output[0])
    proj = ("", gemm(f"{name}.qkv", m=bsz * s, n=ws[1], k=ws[0], bits=b), _input(node, 2) is not None)
    return [proj] + _attention_ops(name, bsz * heads, s, l, qk[0] // heads, qk[2] // heads, b)


def _float_prec(ctx: Context, y: str) -> dict:
    """The attention products of QAttention run in the float type of its output."""
    if ctx.bits != "onnx":
        return precision(ctx.bits, ctx.shapes, y, y, y)
    width = FLOAT_BITS.get(ctx.shapes.elem.get(y, 0), 32)
    return {"I": width, "W": width, "O": width}


def _ms_qattention(node, name: str, ctx: Context) -> Converted:
    """com.microsoft.QAttention: the int8 QKV projection and the two (float) attention products."""
    a, x, w, xs, ws = _qkv_inputs(node, ctx)
    if ws[1] % 3:
        raise NodeProblem(f"weights {list(ws)} are not [D, 3*H]")
    heads, hidden = int(a["num_heads"]), ws[1] // 3
    if hidden % heads:
        raise NodeProblem(f"hidden size {hidden} is not a multiple of {heads} heads")
    bsz, s = xs[0], xs[1]
    l = s + _past_len(ctx, node, 8, 3)
    proj = ("", gemm(f"{name}.qkv", m=bsz * s, n=ws[1], k=ws[0], bits=ctx.prec(x, w, node.output[0])),
            _input(node, 2) is not None)
    return [proj] + _attention_ops(name, bsz * heads, s, l, hidden // heads, hidden // heads,
                                   _float_prec(ctx, node.output[0]))


def _ms_gqa(node, name: str, ctx: Context) -> Converted:
    """com.microsoft.GroupQueryAttention: Q K^T and P V per query head over the total sequence length
    (the value of its total_sequence_length input); key/value heads are shared by groups of query heads."""
    a = attrs(node)
    q = _input(node, 0)
    if q is None or "num_heads" not in a or "kv_num_heads" not in a:
        raise NodeProblem("needs query, num_heads and kv_num_heads")
    heads, kv_heads = int(a["num_heads"]), int(a["kv_num_heads"])
    qs = ctx.of(q, "query")
    if len(qs) != 3:
        raise NodeProblem(f"query {list(qs)} is not [B, S, D]")
    packed = _input(node, 1) is None
    width = heads + 2 * kv_heads if packed else heads
    if qs[2] % width:
        raise NodeProblem(f"query width {qs[2]} is not a multiple of {width} heads")
    head = qs[2] // width
    total_name = _input(node, 6)
    total = ctx.shapes.values.get(total_name) if total_name else None
    if total is None or total.size != 1:
        raise NodeProblem(f"its total sequence length {total_name!r} is not a constant; bind the symbolic "
                          "dims it is computed from (--dim NAME=VALUE)")
    return _attention_ops(name, qs[0] * heads, qs[1], int(total.reshape(-1)[0]), head, head,
                          ctx.prec(q, q, node.output[0]))


def _ms_mha(node, name: str, ctx: Context) -> Converted:
    """com.microsoft.MultiHeadAttention: the two attention products (projections are separate nodes)."""
    a = attrs(node)
    q, k, v = _input(node, 0), _input(node, 1), _input(node, 2)
    if q is None or k is None or v is None or "num_heads" not in a:
        raise NodeProblem("packed query/key/value (no separate key and value inputs) are not mapped")
    heads = int(a["num_heads"])
    qs, ks, vs = ctx.of(q, "query"), ctx.of(k, "key"), ctx.of(v, "value")
    if len(qs) != 3:
        raise NodeProblem(f"query {list(qs)} is not [B, S, D]")
    bsz, s, d = qs
    if len(ks) == 3:
        l, dk = ks[1], ks[2] // heads
    elif len(ks) == 4:
        l, dk = ks[2], ks[3]
    else:
        raise NodeProblem(f"key {list(ks)} is neither [B, L, D] nor [B, N, L, H]")
    dv = vs[2] // heads if len(vs) == 3 else vs[3]
    l += _past_len(ctx, node, 6, 2)
    if d != dk * heads:
        raise NodeProblem(f"query width {d} is not {heads} heads x key head size {dk}")
    return _attention_ops(name, bsz * heads, s, l, dk, dv, ctx.prec(q, k, node.output[0]))


def _onnx_attention(node, name: str, ctx: Context) -> Converted:
    """ONNX Attention (opset 23): Q K^T and P V per query head (grouped-query heads share K, V)."""
    a = attrs(node)
    q, k, v = _input(node, 0), _input(node, 1), _input(node, 2)
    if q is None or k is None or v is None:
        raise NodeProblem("needs Q, K and V")
    qs, ks, vs = ctx.of(q, "Q"), ctx.of(k, "K"), ctx.of(v, "V")
    if len(qs) == 4:
        bsz, qn, s, dk = qs
        l, dv = ks[2], vs[3]
    elif len(qs) == 3 and "q_num_heads" in a and "kv_num_heads" in a:
        qn, kvn = int(a["q_num_heads"]), int(a["kv_num_heads"])
        bsz, s = qs[0], qs[1]
        dk, l, dv = qs[2] // qn, ks[1], vs[2] // kvn
    else:
        raise NodeProblem(f"Q {list(qs)} is neither [B, N, S, H] nor [B, S, D] with q_num_heads/kv_num_heads")
    l += _past_len(ctx, node, 4, 2)
    return _attention_ops(name, bsz * qn, s, l, dk, dv, ctx.prec(q, k, node.output[0]))


_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def _recurrent(node, name: str, ctx: Context) -> Converted:
    """LSTM / GRU / RNN: per direction, the input projection of all time steps at once
    (rows seq*batch) and the recurrent product once per time step (rows batch).

    X[seq, batch, input] (layout 0) or [batch, seq, input] (layout 1); W[dirs, gates*hidden, input];
    R[dirs, gates*hidden, hidden]. Peepholes and gate activations are elementwise, not MACs;
    with sequence_lens the count is that of the full length, an upper bound.
    """
    a = attrs(node)
    x, w, r = _input(node, 0), _input(node, 1), _input(node, 2)
    if x is None or w is None or r is None:
        raise NodeProblem("needs inputs X, W and R")
    xs, ws, rs = ctx.of(x, "input X"), ctx.of(w, "weight W"), ctx.of(r, "recurrence weight R")
    if len(xs) != 3 or len(ws) != 3 or len(rs) != 3:
        raise NodeProblem(f"X {list(xs)}, W {list(ws)}, R {list(rs)} are not 3-D")
    seq, batch = (xs[1], xs[0]) if int(a.get("layout", 0)) else (xs[0], xs[1])
    dirs, gh, inp = ws
    hidden = int(a.get("hidden_size", rs[2]))
    if gh != _GATES[node.op_type] * hidden or rs[1] != gh or rs[2] != hidden or inp != xs[2]:
        raise NodeProblem(f"W {list(ws)} and R {list(rs)} do not fit {_GATES[node.op_type]} gates of hidden size "
                          f"{hidden} over input {list(xs)}")
    b = ctx.prec(x, w, node.output[0] if node.output and node.output[0] else x)
    bias = _input(node, 3) is not None
    proj = dense(f"{name}.input", n=seq * batch, c=inp, k=gh, bits=b)
    step = dense(f"{name}.recurrent", n=batch, c=hidden, k=gh, bits=b)
    return [(".input", proj, bias, dirs), (".recurrent", step, False, dirs * seq)]


MAC_OPS: dict[str, Callable[..., Converted]] = {
    **{op: _conv for op in _CONV_INPUTS},
    "ConvTranspose": _conv_transpose,
    "Gemm": lambda n, nm, c: _gemm_core(n, nm, c, 0, 1, 2),
    "com.microsoft.FusedGemm": lambda n, nm, c: _gemm_core(n, nm, c, 0, 1, 2),
    "com.microsoft.QGemm": lambda n, nm, c: _gemm_core(n, nm, c, 0, 3, 6),
    "MatMul": lambda n, nm, c: _matmul_core(n, nm, c, 0, 1),
    "MatMulInteger": lambda n, nm, c: _matmul_core(n, nm, c, 0, 1),
    "QLinearMatMul": lambda n, nm, c: _matmul_core(n, nm, c, 0, 3),
    "com.microsoft.FusedMatMul": lambda n, nm, c: _matmul_core(n, nm, c, 0, 1, transposes=True),
    "com.microsoft.TransposeMatMul": lambda n, nm, c: _matmul_core(n, nm, c, 0, 1, transposes=True),
    "com.microsoft.MatMulInteger16": lambda n, nm, c: _matmul_core(n, nm, c, 0, 1),
    "com.microsoft.MatMulIntegerToFloat": lambda n, nm, c: _matmul_core(n, nm, c, 0, 1, bias_pos=6),
    "com.microsoft.DynamicQuantizeMatMul": lambda n, nm, c: _matmul_core(n, nm, c, 0, 1, bias_pos=4),
    "com.microsoft.GemmFastGelu": lambda n, nm, c: _matmul_core(n, nm, c, 0, 1, bias_pos=2),
    "com.microsoft.MatMulNBits": _matmul_nbits,
    "Einsum": _einsum,
    "Attention": _onnx_attention,
    "com.microsoft.Attention": _ms_attention,
    "com.microsoft.MultiHeadAttention": _ms_mha,
    "com.microsoft.QAttention": _ms_qattention,
    "com.microsoft.GroupQueryAttention": _ms_gqa,
    **{op: _recurrent for op in _GATES},
}

_NOT_MAPPED = "has multiply-accumulates but no mapping onto accelerator operators yet"
REFUSED_MAC_OPS: dict[str, str] = {
    **{op: _NOT_MAPPED for op in (
        "DeformConv", "DFT", "STFT", "AffineGrid",
        "com.microsoft.PackedAttention",
        "com.microsoft.PackedMultiHeadAttention", "com.microsoft.DecoderAttention",
        "com.microsoft.DecoderMaskedMultiHeadAttention", "com.microsoft.DecoderMaskedSelfAttention",
        "com.microsoft.LongformerAttention", "com.microsoft.SparseAttention", "com.microsoft.PagedAttention",
        "com.microsoft.NhwcConv", "com.microsoft.NhwcFusedConv", "com.microsoft.ConvTransposeWithDynamicPads",
        "com.microsoft.QOrderedMatMul", "com.microsoft.QOrderedAttention", "com.microsoft.QOrderedLongformerAttention",
        "com.microsoft.MatMulBnb4", "com.microsoft.MatMulFpQ4", "com.microsoft.MoE", "com.microsoft.QMoE",
        "com.microsoft.Rfft", "com.microsoft.Irfft", "com.microsoft.DynamicQuantizeLSTM",
        "com.microsoft.QLinearConvTranspose", "com.microsoft.FusedConvTranspose", "com.microsoft.WordConvEmbedding",
        "com.microsoft.CDist")},
    "com.microsoft.nchwc.Conv": "a layout-specific op of onnxruntime's ORT_ENABLE_ALL optimization (channels "
                                "blocked for one CPU, padded); save the optimized model with ORT_ENABLE_EXTENDED "
                                "instead",
}

# onnxruntime contrib ops without multiply-accumulates (elementwise, normalization, (de)quantization, pooling).
_MS_HOST = {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QLinearAdd", "QLinearMul",
            "QLinearSigmoid", "QLinearLeakyRelu", "QLinearSoftmax", "QLinearAveragePool",
            "QLinearGlobalAveragePool", "QLinearConcat", "QLinearReduceMean", "QLinearWhere", "Gelu", "FastGelu",
            "BiasGelu", "QuickGelu", "BiasAdd", "BiasSoftmax", "BiasDropout", "BiasSplitGelu",
            "SkipLayerNormalization", "SkipSimplifiedLayerNormalization", "SimplifiedLayerNormalization",
            "LayerNormalization", "EmbedLayerNormalization", "RotaryEmbedding", "GatherBlockQuantized", "Range",
            "Trilu", "NhwcMaxPool", "MaxpoolWithMask", "Crop", "ImageScaler", "Affine", "ParametricSoftplus",
            "ScaledTanh", "ThresholdedRelu", "Unique", "ExpandDims", "GridSample", "GatedRelu",
            "RemovePadding", "RestorePadding", "GroupNorm", "SkipGroupNorm", "NGramRepeatBlock", "MurmurHash3"}


def _standard_ops() -> set[str]:
    names = {s.name for s in onnx.defs.get_all_schemas_with_history() if s.domain in ("", "ai.onnx")}
    return names - set(MAC_OPS) - set(REFUSED_MAC_OPS)


_STANDARD_HOST = _standard_ops()
KNOWN_HOST = _STANDARD_HOST | {f"com.microsoft.{o}" for o in _MS_HOST}
CONTROL_OPS = {"If", "Loop", "Scan"}


def classify(key: str) -> str:
    """'mac' (mapped), 'refused' (has MACs, not mapped), 'control' (If/Loop/Scan), 'host', or 'unknown'."""
    if key in MAC_OPS:
        return "mac"
    if key in REFUSED_MAC_OPS:
        return "refused"
    if key in CONTROL_OPS:
        return "control"
    if key in KNOWN_HOST:
        return "host"
    return "unknown"
