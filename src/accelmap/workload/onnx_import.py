"""ONNX models -> accelerator operators plus host work.

Conv (also ConvInteger, QLinearConv), Gemm and MatMul (also MatMulInteger,
QLinearMatMul) become operators through the constructors; every other node is
host work, listed with its output element count. Shapes come from the model's
own annotations completed by ONNX shape inference, after the symbolic batch and
sequence dimensions of the graph inputs are bound to numbers.

Weights never need to be present: a weight-free model (initializers stored as
external data that is not shipped, or weights declared as graph inputs) imports
the same, because only shapes are read.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, shape_inference

from accelmap.errors import SpecError
from accelmap.workload.constructors import _bits, batched_matmul, conv2d, dense, gemm
from accelmap.workload.models.result import HostOp, ModelImport, element_count, group_layers
from accelmap.workload.operator import Operator
from accelmap.workload.text_form import parse_expression

# op type -> positions of (data input, weight input) among the node inputs
_CONV_INPUTS = {"Conv": (0, 1, 2), "ConvInteger": (0, 1, None), "QLinearConv": (0, 3, 8)}
_MATMUL_INPUTS = {"MatMul": (0, 1), "MatMulInteger": (0, 1), "QLinearMatMul": (0, 3)}
# Nodes that carry multiply-accumulates we do not map: they must not pass
# quietly as host work.
_UNSUPPORTED_MAC_OPS = {"ConvTranspose", "Einsum", "LSTM", "GRU", "RNN", "Attention", "DeformConv",
                        "com.microsoft.Attention", "com.microsoft.MultiHeadAttention",
                        "com.microsoft.FusedConv", "com.microsoft.FusedMatMul"}

_SEQ_WORDS = ("seq", "len", "token", "sentence", "time")
_BATCH_WORDS = ("batch",)
# Metadata keys through which a bundled model names defaults for its parameters.
META_DEFAULT = "accelmap.default."

_FLOAT_TYPES = {TensorProto.FLOAT: 32, TensorProto.FLOAT16: 16, TensorProto.BFLOAT16: 16,
                TensorProto.DOUBLE: 64}
_INT_TYPES = {TensorProto.INT8: 8, TensorProto.UINT8: 8, TensorProto.INT16: 16, TensorProto.UINT16: 16,
              TensorProto.INT32: 32, TensorProto.UINT32: 32, TensorProto.INT64: 64}
for _n in ("INT4", "UINT4"):
    if hasattr(TensorProto, _n):
        _INT_TYPES[getattr(TensorProto, _n)] = 4
for _n in ("FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ"):
    if hasattr(TensorProto, _n):
        _FLOAT_TYPES[getattr(TensorProto, _n)] = 8


class _NodeProblem(Exception):
    """A node that cannot be imported; becomes an error naming node, op type and reason."""


def read_onnx(path: str | Path) -> onnx.ModelProto:
    """Parse an ONNX file without touching external weight data."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise SpecError(f"cannot read the model: {e.strerror or e.__class__.__name__}", where=str(p)) from None
    try:
        model = onnx.load_from_string(raw)
    except Exception as e:  # protobuf raises DecodeError, or RuntimeWarning-like errors on garbage
        raise SpecError(f"not a valid ONNX file ({e.__class__.__name__}: {str(e)[:80] or 'parse failed'}); "
                        "the file may be truncated or of another format", where=str(p)) from None
    # Protobuf accepts many byte strings as an (almost empty) message; a model
    # needs at least an IR version and a graph with nodes.
    if model.ir_version <= 0 or not model.graph.node:
        raise SpecError("not an ONNX model: no IR version or no graph nodes "
                        "(the file may be truncated or of another format)", where=str(p))
    return model


def _dims(vi) -> list:
    t = vi.type
    if not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
        return []
    return list(t.tensor_type.shape.dim)


def _bind_params(model: onnx.ModelProto, batch: int | None, seq_len: int | None,
                 source: str) -> dict[str, int]:
    """Replace symbolic input dims by numbers; return {param: value}."""
    g = model.graph
    meta = {p.key: p.value for p in model.metadata_props}
    defaults = {"batch": int(meta.get(META_DEFAULT + "batch", 1)),
                "seq_len": int(meta[META_DEFAULT + "seq_len"]) if META_DEFAULT + "seq_len" in meta else None}
    init_names = {t.name for t in g.initializer}
    bound: dict[str, int] = {}
    kinds_used: set[str] = set()

    def value_for(param: str, axis: int, inp: str) -> int:
        low = param.lower()
        if any(w in low for w in _BATCH_WORDS) or (axis == 0 and not any(w in low for w in _SEQ_WORDS)):
            kinds_used.add("batch")
            return batch if batch is not None else defaults["batch"]
        if any(w in low for w in _SEQ_WORDS):
            kinds_used.add("seq_len")
            v = seq_len if seq_len is not None else defaults["seq_len"]
            if v is None:
                raise SpecError(f"input {inp!r} axis {axis} is the sequence length {param!r}; pass --seq-len",
                                where=source)
            return v
        raise SpecError(f"input {inp!r} axis {axis} has symbolic size {param!r} that is neither the batch "
                        f"(axis 0 or a name with 'batch') nor a sequence length (a name with "
                        f"{', '.join(repr(w) for w in _SEQ_WORDS)}); give the model static shapes",
                        where=source)

    for inp in g.input:
        if inp.name in init_names:
            continue
        for axis, d in enumerate(_dims(inp)):
            if d.HasField("dim_value") and d.dim_value > 0:
                continue
            param = d.dim_param if d.HasField("dim_param") and d.dim_param else f"{inp.name}[{axis}]"
            if param not in bound:
                bound[param] = value_for(param, axis, inp.name)
    for key, given in (("batch", batch), ("seq_len", seq_len)):
        if given is not None and key not in kinds_used:
            flag = "--batch" if key == "batch" else "--seq-len"
            raise SpecError(f"{flag} {given} given, but no input of the model has a symbolic "
                            f"{'batch' if key == 'batch' else 'sequence-length'} dimension to bind", where=source)
    for v in bound.values():
        if v < 1:
            raise SpecError(f"batch and sequence length must be positive, got {v}", where=source)
    # The same names may appear in annotated intermediate and output shapes.
    for coll in (g.input, g.value_info, g.output):
        for vi in coll:
            for axis, d in enumerate(_dims(vi)):
                key = d.dim_param if d.HasField("dim_param") and d.dim_param else f"{vi.name}[{axis}]"
                if key in bound and not (d.HasField("dim_value") and d.dim_value > 0):
                    d.Clear()
                    d.dim_value = bound[key]
    return bound


class _Shapes:
    """Static shapes and element types of every tensor the model annotates."""

    def __init__(self, model: onnx.ModelProto):
        self.shape: dict[str, tuple[int, ...] | None] = {}
        self.elem: dict[str, int] = {}
        g = model.graph
        inits = {t.name for t in g.initializer}
        for t in g.initializer:
            self.shape[t.name] = tuple(int(x) for x in t.dims)
            self.elem[t.name] = t.data_type
        for coll in (g.input, g.value_info, g.output):
            for vi in coll:
                if vi.name in inits:
                    continue
                tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
                if tt is None:
                    continue
                self.elem[vi.name] = tt.elem_type
                if not tt.HasField("shape"):
                    self.shape[vi.name] = None
                    continue
                dims = []
                for d in tt.shape.dim:
                    dims.append(int(d.dim_value) if d.HasField("dim_value") and d.dim_value > 0 else None)
                self.shape[vi.name] = None if None in dims else tuple(dims)
        for n in g.node:
            if n.op_type == "Constant" and n.output:
                for a in n.attribute:
                    if a.name == "value":
                        self.shape[n.output[0]] = tuple(int(x) for x in a.t.dims)
                        self.elem[n.output[0]] = a.t.data_type

    def of(self, name: str, what: str) -> tuple[int, ...]:
        s = self.shape.get(name)
        if s is None:
            raise _NodeProblem(f"shape of {what} {name!r} is unknown after shape inference "
                               "(bind symbolic dims with --batch/--seq-len, or give the model static shapes)")
        return s


def _attrs(node) -> dict:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _input(node, pos: int | None) -> str | None:
    if pos is None or pos >= len(node.input) or not node.input[pos]:
        return None
    return node.input[pos]


def _precision(bits, shapes: _Shapes, x: str, w: str, y: str) -> dict:
    """bits: None (int8 in, int32 out), a dict override, or "onnx" (the tensors' own types)."""
    if bits != "onnx":
        return _bits(bits)

    def of(name: str, table: dict, what: str) -> int:
        t = shapes.elem.get(name)
        if t not in table:
            raise _NodeProblem(f"precision 'onnx': {what} {name!r} has element type "
                               f"{TensorProto.DataType.Name(t) if t else 'unknown'}, which has no bit width here")
        return table[t]

    both = {**_INT_TYPES, **_FLOAT_TYPES}
    bi, bw = of(x, both, "input"), of(w, both, "weight")
    if shapes.elem.get(x) in _INT_TYPES:
        # Integer products accumulate in 32 bits whatever the stored output type.
        return {"I": bi, "W": bw, "O": 32}
    return {"I": bi, "W": bw, "O": of(y, _FLOAT_TYPES, "output")}


def _same_pads(size: int, k: int, stride: int, dilation: int, mode: str) -> tuple[int, int]:
    out = -(-size // stride)
    total = max((out - 1) * stride + (k - 1) * dilation + 1 - size, 0)
    small, big = total // 2, total - total // 2
    return (small, big) if mode == "SAME_UPPER" else (big, small)


def _conv(node, name: str, shapes: _Shapes, bits) -> tuple[Operator, bool]:
    xi, wi, bi = _CONV_INPUTS[node.op_type]
    x, w = _input(node, xi), _input(node, wi)
    if x is None or w is None:
        raise _NodeProblem("needs a data and a weight input")
    xs, ws = shapes.of(x, "input"), shapes.of(w, "weight")
    a = _attrs(node)
    nsp = len(xs) - 2
    if nsp not in (1, 2) or len(ws) != len(xs):
        raise _NodeProblem(f"{nsp}-D convolution (input {list(xs)}, weight {list(ws)}); "
                           "only 1-D and 2-D convolutions map onto conv2d")
    group = int(a.get("group", 1))
    n, c = xs[0], xs[1]
    k, cg = ws[0], ws[1]
    kernel = list(ws[2:])
    if "kernel_shape" in a and list(a["kernel_shape"]) != kernel:
        raise _NodeProblem(f"kernel_shape {list(a['kernel_shape'])} differs from the weight shape {list(ws)}")
    if cg * group != c:
        raise _NodeProblem(f"weight has {cg} channels per group x group={group}, but the input has {c} channels")
    strides = list(a.get("strides", [1] * nsp))
    dil = list(a.get("dilations", [1] * nsp))
    spatial = list(xs[2:])
    auto = a.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else str(auto)
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        lohi = [_same_pads(spatial[i], kernel[i], strides[i], dil[i], auto) for i in range(nsp)]
        pads = [lo for lo, _ in lohi] + [hi for _, hi in lohi]
    elif auto == "VALID":
        pads = [0] * (2 * nsp)
    elif auto == "NOTSET":
        pads = list(a.get("pads", [0] * (2 * nsp)))
    else:
        raise _NodeProblem(f"auto_pad {auto!r} is not an ONNX auto_pad mode")
    if nsp == 1:
        # A 1-D convolution is a 2-D one over a single row.
        spatial, kernel, strides, dil = [1] + spatial, [1] + kernel, [1] + strides, [1] + dil
        pads = [0, pads[0], 0, pads[1]]
    if len(strides) != 2 or len(dil) != 2 or len(pads) != 4:
        raise _NodeProblem(f"strides {strides}, dilations {dil} or pads {pads} do not match a 2-D kernel")
    try:
        op = conv2d(name, n=n, c=c, h=spatial[0], w=spatial[1], k=k, r=kernel[0], s=kernel[1],
                    stride=tuple(strides), dilation=tuple(dil), padding=tuple(pads), groups=group,
                    bits=_precision(bits, shapes, x, w, node.output[0]))
    except SpecError as e:
        raise _NodeProblem(str(e)) from None
    y = shapes.shape.get(node.output[0])
    if y is not None:
        sz = op.sizes
        mine = (n, k, sz.get("P", 1), sz.get("Q", 1))
        theirs = tuple(y) if len(y) == 4 else (y[0], y[1], 1, y[2])
        if mine != theirs:
            raise _NodeProblem(f"output shape {list(y)} from the model disagrees with {list(mine)} "
                               "computed from the attributes")
    return op, _input(node, bi) is not None


def _gemm(node, name: str, shapes: _Shapes, bits) -> tuple[Operator, bool]:
    a_name, b_name = _input(node, 0), _input(node, 1)
    if a_name is None or b_name is None:
        raise _NodeProblem("needs inputs A and B")
    sa, sb = shapes.of(a_name, "input A"), shapes.of(b_name, "input B")
    if len(sa) != 2 or len(sb) != 2:
        raise _NodeProblem(f"Gemm takes 2-D inputs, got {list(sa)} and {list(sb)}")
    at = _attrs(node)
    ta, tb = int(at.get("transA", 0)), int(at.get("transB", 0))
    m, k = (sa[1], sa[0]) if ta else sa
    k2, n = (sb[1], sb[0]) if tb else sb
    if k != k2:
        raise _NodeProblem(f"inner sizes differ: A {list(sa)} (transA={ta}), B {list(sb)} (transB={tb})")
    b = _precision(bits, shapes, a_name, b_name, node.output[0])
    if not ta and tb:
        op = dense(name, n=m, c=k, k=n, bits=b)   # FC layer: weights stored [out, in]
    elif not ta and not tb:
        op = gemm(name, m=m, n=n, k=k, bits=b)
    else:
        expr = f"O[m,n] += A[k,m] * B[{'n,k' if tb else 'k,n'}]"
        op = parse_expression(expr, {"m": m, "n": n, "k": k}, name=name,
                              bits={"O": b["O"], "A": b["I"], "B": b["W"]})
        op = replace(op, kind="matmul")
    return op, _input(node, 2) is not None


def _matmul(node, name: str, shapes: _Shapes, bits) -> tuple[Operator, bool]:
    ai, bi = _MATMUL_INPUTS[node.op_type]
    a_name, b_name = _input(node, ai), _input(node, bi)
    if a_name is None or b_name is None:
        raise _NodeProblem("needs inputs A and B")
    sa, sb = list(shapes.of(a_name, "input A")), list(shapes.of(b_name, "input B"))
    if not sa or not sb:
        raise _NodeProblem("MatMul of a scalar")
    if len(sa) == 1:
        sa = [1] + sa
    if len(sb) == 1:
        sb = sb + [1]
    m, k = sa[-2:]
    k2, n = sb[-2:]
    if k != k2:
        raise _NodeProblem(f"inner sizes differ: A {sa}, B {sb}")
    ba, bb = sa[:-2], sb[:-2]
    try:
        out_batch = list(np.broadcast_shapes(tuple(ba), tuple(bb)))
    except ValueError:
        raise _NodeProblem(f"batch dimensions {ba} and {bb} do not broadcast") from None
    ba = [1] * (len(out_batch) - len(ba)) + ba
    bb = [1] * (len(out_batch) - len(bb)) + bb
    axes = [(i, s) for i, s in enumerate(out_batch) if s > 1]
    b = _precision(bits, shapes, a_name, b_name, node.output[0])
    a_has = all(ba[i] > 1 for i, _ in axes)
    b_has = all(bb[i] > 1 for i, _ in axes)
    b_none = not any(bb[i] > 1 for i, _ in axes)
    batch = math.prod(s for _, s in axes)
    if not axes:
        return gemm(name, m=m, n=n, k=k, bits=b), False
    if b_none:
        # A shared right operand (a projection weight): batch rows are more rows of A.
        return gemm(name, m=batch * m, n=n, k=k, bits=b), False
    if a_has and b_has:
        return batched_matmul(name, batch=batch, m=m, n=n, k=k, bits=b), False
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
    return replace(op, kind="batched_matmul"), False


def _host(node, name: str, op_type: str, shapes: _Shapes, note: str = "") -> HostOp:
    outs = [o for o in node.output if o]
    out_shapes = [shapes.shape.get(o) for o in outs]
    first = out_shapes[0] if out_shapes else None
    elements = None if any(s is None for s in out_shapes) else sum(element_count(s) for s in out_shapes)
    return HostOp(name, op_type, first, elements, note)


def import_onnx(model: str | Path | onnx.ModelProto, *, batch: int | None = None, seq_len: int | None = None,
                bits: dict | str | None = None, strict: bool = True, name: str | None = None) -> ModelImport:
    """Import an ONNX model (path or ModelProto).

    ``batch``/``seq_len`` bind the symbolic input dims (default batch 1, and the
    model's own default sequence length if it names one). ``bits`` is None for
    int8 inputs and int32 outputs, a dict {I, W, O} to override, or "onnx" to
    take each operand's width from its ONNX element type. With ``strict`` a node
    that cannot be imported is an error; otherwise it is listed as host work
    with the reason.
    """
    if isinstance(model, onnx.ModelProto):
        source = name or model.graph.name or "<model>"
        proto = onnx.ModelProto()
        proto.CopyFrom(model)   # binding edits shapes in place; leave the caller's model alone
    else:
        source = str(model)
        proto = read_onnx(model)
    model_name = name or (Path(source).stem if not isinstance(model, onnx.ModelProto) else source)
    if isinstance(bits, str) and bits != "onnx":
        raise SpecError(f"precision {bits!r} unknown; give bits for I, W, O or 'onnx'", where=source)
    bound = _bind_params(proto, batch, seq_len, source)
    try:
        inferred = shape_inference.infer_shapes(proto, check_type=False, strict_mode=False, data_prop=True)
    except Exception as e:
        raise SpecError(f"ONNX shape inference failed: {str(e).splitlines()[0][:160]}", where=source) from None
    shapes = _Shapes(inferred)
    entries: list[tuple[str, Operator, str, bool]] = []
    host: list[HostOp] = []
    problems: list[str] = []
    used: set[str] = set()
    for i, node in enumerate(inferred.graph.node):
        nname = node.name or f"{node.op_type}_{i}"
        if nname in used:
            nname = f"{nname}_{i}"
        used.add(nname)
        op_type = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
        try:
            if op_type in _CONV_INPUTS:
                op, bias = _conv(node, nname, shapes, bits)
            elif op_type == "Gemm":
                op, bias = _gemm(node, nname, shapes, bits)
            elif op_type in _MATMUL_INPUTS:
                op, bias = _matmul(node, nname, shapes, bits)
            elif op_type in _UNSUPPORTED_MAC_OPS:
                raise _NodeProblem("this operator has multiply-accumulates but no mapping onto "
                                   "conv2d/gemm/batched_matmul yet")
            else:
                host.append(_host(node, nname, op_type, shapes))
                continue
        except _NodeProblem as e:
            if strict:
                problems.append(f"node {nname!r} ({op_type}): {e}")
            else:
                host.append(_host(node, nname, op_type, shapes, note=f"not imported: {e}"))
            continue
        if bias:
            op = replace(op, attrs=op.attrs + (("bias", True),))
        entries.append((nname, op, op_type, bias))
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise SpecError(f"cannot import {problems[0]}{more}", where=source)
    if not entries:
        kinds: dict[str, int] = {}
        for h in host:
            kinds[h.op_type] = kinds.get(h.op_type, 0) + 1
        found = ", ".join(f"{k} x{v}" for k, v in kinds.items()) or "nothing"
        raise SpecError(f"no accelerator operator (Conv, Gemm, MatMul and their integer forms) in the model; "
                        f"it has only host work: {found}", where=source)
    if bits is None:
        notes = ["precision: int8 inputs and weights, int32 outputs (the ONNX element types are not used)"]
    elif bits == "onnx":
        notes = ["precision: each operand's ONNX element type (integer products accumulate in 32 bits)"]
    else:
        b = _bits(bits)
        notes = [f"precision: I {b['I']}, W {b['W']}, O {b['O']} bits (the ONNX element types are not used)"]
    return ModelImport(model_name, source, group_layers(entries), tuple(host),
                       tuple(sorted(bound.items())), tuple(notes))
