"""ONNX models -> accelerator operators, host work and unknown ops.

The steps, one module each: read the file without tensor data (``onnx_read``);
bind symbolic dims and compute every shape (``onnx_shapes``, with
``onnx_contrib`` for onnxruntime's contrib ops and ``onnx_fold`` for shape
arithmetic); turn each node with multiply-accumulates into operators
(``onnx_ops``) at the precision of ``onnx_precision``. This module walks the
graph, including the bodies of If, Loop and Scan, and collects the result.

Nothing is dropped silently: a node with multiply-accumulates becomes operators
or is an error naming it (``strict=False`` lists it as host work with the
reason); a node of an op type the importer does not know goes to the result's
``unknown_ops``, since it may carry multiply-accumulates.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import onnx

from accelmap.errors import SpecError
from accelmap.workload.constructors import _bits
from accelmap.workload.models.result import HostOp, ModelImport, element_count, group_layers
from accelmap.workload.onnx_ops import MAC_OPS, REFUSED_MAC_OPS, Context, NodeProblem, attrs, classify, op_key
from accelmap.workload.onnx_read import read_onnx, strip_payloads
from accelmap.workload.onnx_shapes import META_DEFAULT, ShapeProblem, Shapes, bind_dims, infer
from accelmap.workload.onnx_subgraphs import body_inputs, body_model

__all__ = ["import_onnx", "read_onnx", "META_DEFAULT"]


# Exporters write a while loop as a Loop with this (or a larger) trip count and a condition.
_WHILE_LOOP = 2**31 - 1


@dataclass
class _Walk:
    """What walking the graphs collects."""

    source: str
    bits: object
    strict: bool
    dims: dict[str, int]
    opsets: list
    entries: list = field(default_factory=list)
    host: list = field(default_factory=list)
    unknown: list = field(default_factory=list)
    problems: list = field(default_factory=list)
    used_names: set = field(default_factory=set)
    used_dims: set = field(default_factory=set)
    loops: list = field(default_factory=list)


def _host(node, name: str, op_type: str, shapes: Shapes, note: str = "") -> HostOp:
    outs = [o for o in node.output if o]
    out_shapes = [shapes.get(o) for o in outs]
    first = out_shapes[0] if out_shapes else None
    counts = [element_count(s) for s in out_shapes]
    elements = None if None in counts else sum(n for n in counts if n is not None)
    return HostOp(name, op_type, first, elements, note)


def _graph_needs_walk(g: onnx.GraphProto) -> bool:
    """Whether a subgraph holds (at any depth) a node that is not plain host work."""
    for n in g.node:
        if classify(op_key(n)) in ("mac", "refused", "unknown"):
            return True
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH and _graph_needs_walk(a.g):
                return True
    return False


def _lookup(shapes: Shapes):
    return lambda name: (shapes.elem.get(name, 0), shapes.get(name), shapes.values.get(name))


def _subgraph_shapes(node, body: onnx.GraphProto, outer: Shapes, w: _Walk,
                     where: str) -> tuple[onnx.GraphProto, Shapes]:
    """A body's nodes and the shapes inside it (reading the enclosing scopes' shapes)."""
    try:
        g, model = body_model(body, body_inputs(node, _lookup(outer)), _lookup(outer), w.opsets)
    except SpecError as e:   # a malformed node or body: name the file
        raise SpecError(str(e), where=w.source) from None
    _, shapes = infer(model, f"{w.source} ({where})", outer=outer)
    shapes.producer = {o: n for n in g.node for o in n.output if o}
    return g, shapes


def _static_scalar(shapes: Shapes, name: str | None):
    if not name:
        return None
    v = shapes.values.get(name)
    if v is None or v.size != 1:
        return None
    return v.reshape(-1)[0].item()


def _bound(w: _Walk, *keys: str):
    for k in keys:
        if k and k in w.dims:
            w.used_dims.add(k)
            return w.dims[k]
    return None


def _control(node, nname: str, shapes: Shapes, w: _Walk, reps: int) -> str:
    """If / Loop / Scan: walk the body that runs, times how often it runs, or refuse clearly.

    Returns the note for the control node's own host-work entry.
    """
    a = {x.name: x for x in node.attribute}
    bodies = [x.g for x in node.attribute if x.type == onnx.AttributeProto.GRAPH]
    if not any(_graph_needs_walk(b) for b in bodies):
        return "control flow; no MAC ops inside"
    if node.op_type == "If":
        cond = _bound(w, nname)          # the user's choice first
        if cond is None:
            cond = _static_scalar(shapes, node.input[0])
        if cond is None:
            raise NodeProblem(f"its condition is not a constant and a branch has MAC ops; choose the branch with "
                              f"--dim {nname}=1 (then) or --dim {nname}=0 (else)")
        branch = a["then_branch"].g if cond else a["else_branch"].g
        g, sub = _subgraph_shapes(node, branch, shapes, w, f"If {nname!r}")
        _walk(g, sub, w, f"{nname}/", reps)
        return f"control flow; {'then' if cond else 'else'} branch imported"
    if node.op_type == "Loop":
        m_name = node.input[0] if node.input else ""
        trips = _bound(w, nname, m_name)     # the user's count first
        if trips is None:
            trips = _static_scalar(shapes, m_name)
            if trips is not None and int(trips) >= _WHILE_LOOP:
                raise NodeProblem(f"its trip count is {int(trips):,}: a while loop that its condition ends; bind "
                                  f"the number of trips with --dim {nname}=COUNT")
        if trips is None:
            raise NodeProblem(f"its trip count {'is not given' if not m_name else repr(m_name) + ' is not a constant'}"
                              f"; bind it with --dim {nname}=COUNT")
        trips = int(trips)
        cond_name = node.input[1] if len(node.input) > 1 else ""
        early = bool(cond_name) and _static_scalar(shapes, cond_name) is not True
        g, sub = _subgraph_shapes(node, a["body"].g, shapes, w, f"Loop {nname!r}")
        w.loops.append(f"{nname} x{trips}" + (" (at most: it also has a condition)" if early else ""))
        if trips > 0:
            _walk(g, sub, w, f"{nname}/", reps * trips)
        return f"control flow; body imported x{trips}"
    # Scan: the last num_scan_inputs inputs are sliced along their scan axis.
    at = attrs(node)
    n_scan = int(at["num_scan_inputs"])
    first_scan = shapes.of(node.input[len(node.input) - n_scan], "scan input")
    iters = first_scan[int(list(at.get("scan_input_axes", [0]))[0]) % len(first_scan)]
    g, sub = _subgraph_shapes(node, a["body"].g, shapes, w, f"Scan {nname!r}")
    w.loops.append(f"{nname} x{iters}")
    _walk(g, sub, w, f"{nname}/", reps * iters)
    return f"control flow; body imported x{iters}"


def _walk(graph: onnx.GraphProto, shapes: Shapes, w: _Walk, prefix: str, reps: int) -> None:
    ctx = Context(shapes, w.bits)
    for i, node in enumerate(graph.node):
        nname = prefix + (node.name or f"{node.op_type}_{i}")
        if nname in w.used_names:
            nname = f"{nname}_{i}"
        w.used_names.add(nname)
        key = op_key(node)
        kind = classify(key)
        try:
            if kind in ("host", "unknown") and any(
                    a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
                if any(_graph_needs_walk(g) for a in node.attribute for g in ([a.g] if a.g.node else list(a.graphs))):
                    raise NodeProblem("has subgraphs with MAC ops or unknown ops, and only the bodies of If, "
                                      "Loop and Scan are imported")
            if kind == "host":
                w.host.append(_host(node, nname, key, shapes))
                continue
            if kind == "unknown":
                w.unknown.append(_host(node, nname, key, shapes,
                                       note="op type unknown to the importer; it may carry MACs"))
                continue
            if kind == "control":
                note = _control(node, nname, shapes, w, reps)
                w.host.append(_host(node, nname, key, shapes, note=note))
                continue
            if kind == "refused":
                raise NodeProblem(REFUSED_MAC_OPS[key])
            converted = MAC_OPS[key](node, nname, ctx)
            if not converted:
                w.host.append(_host(node, nname, key, shapes, note="no products in this form"))
            for suffix, op, bias, *runs in converted:
                if bias:
                    op = replace(op, attrs=op.attrs + (("bias", True),))
                w.entries.append((nname + suffix, op, key, bias, reps * (runs[0] if runs else 1)))
        except (NodeProblem, ShapeProblem) as e:
            if w.strict:
                w.problems.append(f"node {nname!r} ({key}): {e}")
            else:
                w.host.append(_host(node, nname, key, shapes, note=f"not imported: {e}"))


def import_onnx(model: str | Path | onnx.ModelProto, *, batch: int | None = None, seq_len: int | None = None,
                dims: dict[str, int] | None = None, bits: dict | str | None = None, strict: bool = True,
                name: str | None = None) -> ModelImport:
    """Import an ONNX model (path or ModelProto).

    ``dims`` binds symbolic dimensions by name ({"height": 224}); it also gives
    the trip count of a Loop (by node name) whose count is not a constant, and
    picks the branch of an If (1: then, 0: else). ``batch``/``seq_len`` are
    shorthands for the batch and sequence-length dims (default batch 1, and the
    model's own default sequence length if it names one). ``bits`` is None for
    int8 inputs and int32 outputs, a dict {I, W, O} to override, or "onnx" to
    read each operand's width from the file (QDQ and QOperator forms included).
    With ``strict`` a node with multiply-accumulates that cannot be imported is
    an error; otherwise it is listed as host work with the reason. Nodes of
    unknown op types are always listed in ``unknown_ops``.
    """
    dims = dict(dims or {})
    if isinstance(model, onnx.ModelProto):
        source = name or model.graph.name or "<model>"
        proto = onnx.ModelProto()
        proto.CopyFrom(model)   # binding and folding edit the model; leave the caller's alone
        strip_payloads(proto)   # only shapes are needed: shape inference rounds copy the model
    else:
        source = str(model)
        proto = read_onnx(model)
    model_name = name or (Path(source).stem if not isinstance(model, onnx.ModelProto) else source)
    if isinstance(bits, str) and bits != "onnx":
        raise SpecError(f"precision {bits!r} unknown; give bits for I, W, O or 'onnx'", where=source)
    nodes = onnx.GraphProto()
    nodes.node.extend(proto.graph.node)      # the nodes as written, before folding replaces any
    bound = bind_dims(proto, dims, batch, seq_len, source)
    inferred, shapes = infer(proto, source)
    # Walk the original nodes with the shapes computed on the working copy.
    shapes.producer = {o: n for n in nodes.node for o in n.output if o}
    w = _Walk(source, bits, strict, dims, list(proto.opset_import), used_dims=set(bound))
    _walk(nodes, shapes, w, "", 1)
    if w.problems:
        more = f" (and {len(w.problems) - 1} more)" if len(w.problems) > 1 else ""
        raise SpecError(f"cannot import {w.problems[0]}{more}", where=source)
    unused = sorted(set(dims) - w.used_dims)
    if unused:
        raise SpecError(f"--dim {unused[0]} given, but the model has no symbolic dimension, Loop or If of that "
                        f"name (symbolic dims: {', '.join(bound) or 'none'})", where=source)
    if not w.entries:
        kinds: dict[str, int] = {}
        for h in w.host + w.unknown:
            kinds[h.op_type] = kinds.get(h.op_type, 0) + 1
        found = ", ".join(f"{k} x{v}" for k, v in kinds.items()) or "nothing"
        raise SpecError(f"no accelerator operator (Conv, Gemm, MatMul and their integer forms) in the model; "
                        f"it has only host work: {found}", where=source)
    if bits is None:
        notes = ["precision: int8 inputs and weights, int32 outputs (the ONNX element types are not used)"]
    elif bits == "onnx":
        notes = ["precision: each operand's width from the file (a dequantized operand takes its quantized "
                 "type; integer products accumulate in 32 bits)"]
    else:
        b = _bits(bits)
        notes = [f"precision: I {b['I']}, W {b['W']}, O {b['O']} bits (the ONNX element types are not used)"]
    if w.loops:
        notes.append("loop bodies counted per trip: " + ", ".join(w.loops))
    params = {**bound, **{k: v for k, v in dims.items() if k in w.used_dims}}
    return ModelImport(model_name, source, group_layers(w.entries), tuple(w.host),
                       tuple(sorted(params.items())), tuple(notes), tuple(w.unknown))
