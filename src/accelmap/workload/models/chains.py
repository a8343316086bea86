"""Chains of accelerator operators in an ONNX graph: where one operator's output is the next one's
input and nothing else reads it, so the two can run fused.

Between two linked operators only element-wise host work (activations, bias or batch-norm, an add
of a tensor no operator of the chain produced), normalizations over the last axis of a token
matrix, and pooling windows may sit; every tensor on the way has exactly one reader. Between two
matrix products, reshapes and transposes that keep the token rows (a row of the next product's
input is a row of the previous one's output: attention's split into heads and merge back) may sit
too; other reshapes and transposes, and residual joins (an add of two operator outputs), end a
chain. Only the top-level graph is walked (not the bodies of If, Loop and Scan).

A chain whose last operator's output flows (through element-wise work) into such an add carries
it as its *join*: the add's other operand is the skip tensor, named by the chain link whose
operator reads exactly that tensor as its first input (a ResNet block's or a transformer FFN's
input), or by none when it comes from elsewhere (a projection shortcut).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from accelmap.errors import SpecError
from accelmap.workload.onnx_ops import attrs, classify, op_key
from accelmap.workload.onnx_read import read_onnx
from accelmap.workload.onnx_shapes import ShapeProblem, Shapes, bind_dims, infer

# Host ops that keep every element where it is (per-element, or broadcast against a constant).
ELEMENTWISE = frozenset({
    "Relu", "LeakyRelu", "PRelu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Gelu", "Erf", "Elu",
    "Selu", "Softplus", "Mish", "BatchNormalization", "Add", "Sub", "Mul", "Div", "Identity", "Dropout", "Cast",
    "QuantizeLinear", "DequantizeLinear", "Sqrt", "Pow", "Neg", "Abs", "Exp", "Log"})
# Normalizations over the last axis: a whole token row at a time, which a tile of tokens holds.
ROW_LOCAL = frozenset({"LayerNormalization", "Softmax", "SkipLayerNormalization"})
POOLS = frozenset({"MaxPool", "AveragePool"})
# Moves of elements between positions: allowed between two matrix products where they keep the rows.
RELAYOUT = frozenset({"Reshape", "Transpose"})


@dataclass(frozen=True)
class Window:
    """A pooling node between two chained operators."""

    name: str
    kernel: tuple[int, int]
    stride: tuple[int, int]
    pads: tuple[int, int, int, int]     # top, left, bottom, right


@dataclass(frozen=True)
class Join:
    """A residual add after a chain's last operator: its output plus a skip tensor."""

    name: str                           # the add node
    skip_node: str | None               # the link whose operator's first input is the skip tensor; None: elsewhere
    # The operator whose first input is the add's result (through single-reader element-wise work) when
    # that result is read by it and by one other add alone: the next residual block, whose own add
    # takes it as its skip (a group may span both blocks). None otherwise.
    feeds: str | None = None


@dataclass(frozen=True)
class ChainLink:
    node: str                           # the operator's node name, as the import names it
    windows: tuple[Window, ...] = ()    # pooling between the previous link and this one
    row_local: bool = False             # a normalization over the last axis sits before it
    join: Join | None = None            # a residual add after this (the chain's last) operator
    relayout: bool = False              # a reshape or transpose keeping the token rows sits before it
    normalizations: tuple[str, ...] = ()  # the row-local nodes before it (``row_local``), in graph order
    # The operator whose output alone (through element-wise work, reshapes and transposes, one reader each) is
    # this operator's second operand: attention's K and V projections for the scores and the context.
    operand_producer: str | None = None
    # The tensors (ONNX names) this operator and ``operand_producer`` read first: where they are the same (GPT's
    # hidden state, read by the Q projection of the chain and by the K and V projections outside it), a fused group
    # holding it whole in the store may let the producer read it there.
    input_tensor: str | None = None
    operand_producer_input: str | None = None


def _window(node) -> Window | None:
    a = attrs(node)
    k = list(a.get("kernel_shape", []))
    if len(k) != 2 or a.get("ceil_mode", 0) or any(d != 1 for d in a.get("dilations", [1, 1])):
        return None
    s = list(a.get("strides", [1, 1]))
    p = list(a.get("pads", [0, 0, 0, 0]))
    if a.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        return None
    return Window(node.name, (int(k[0]), int(k[1])), (int(s[0]), int(s[1])), (int(p[0]), int(p[1]), int(p[2]),
                                                                                int(p[3])))


def model_chains(path: str | Path, operator_nodes: set[str]) -> list[tuple[ChainLink, ...]]:
    """Maximal chains (two links or more) of the nodes in ``operator_nodes``, in graph order."""
    proto = read_onnx(path)
    g = proto.graph
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 13)
    names: dict[int, str] = {}
    used: set[str] = set()
    for i, n in enumerate(g.node):        # the importer's naming, so links name the imported operators
        nm = n.name or f"{n.op_type}_{i}"
        if nm in used:
            nm = f"{nm}_{i}"
        used.add(nm)
        names[i] = nm
    producer = {o: i for i, n in enumerate(g.node) for o in n.output if o}
    readers: dict[str, int] = {}
    for n in g.node:
        for x in n.input:
            readers[x] = readers.get(x, 0) + 1
    for o in g.output:
        readers[o.name] = readers.get(o.name, 0) + 1

    def is_operator(i: int) -> bool:
        return classify(op_key(g.node[i])) == "mac" and names[i] in operator_nodes

    def derives(tensor: str, seen: frozenset[int] = frozenset()) -> bool:
        """Whether an operator's output flows into ``tensor`` (then it is no outside operand)."""
        i = producer.get(tensor)
        if i is None or i in seen:
            return False
        return is_operator(i) or any(derives(x, seen | {i}) for x in g.node[i].input if x)

    def trace(tensor: str) -> tuple[int, tuple[Window, ...], tuple[str, ...], bool] | None:
        """The operator whose output alone reaches ``tensor``, through single-reader tensors: (its node,
        the pooling windows, the normalizations on the way, a reshape or transpose on the way)."""
        if readers.get(tensor, 0) != 1:
            return None
        i = producer.get(tensor)
        if i is None:
            return None
        if is_operator(i):
            return (i, (), (), False)
        n = g.node[i]
        t = op_type = op_key(n)
        if t in POOLS:
            w = _window(n)
            if w is None:
                return None
            got = trace(n.input[0])
            return None if got is None else (got[0], got[1] + (w,), got[2], got[3])
        if op_type in RELAYOUT:
            got = trace(n.input[0])
            return None if got is None else (got[0], got[1], got[2], True)
        if op_type in ELEMENTWISE or op_type in ROW_LOCAL:
            inner = [x for x in n.input if x and derives(x)]
            if len(inner) != 1:
                return None        # a join of two operators' outputs (a residual) or nothing chained
            got = trace(inner[0])
            return None if got is None else (got[0], got[1], got[2] + ((names[i],) if op_type in ROW_LOCAL else ()),
                                             got[3])
        return None

    shapes: list[Shapes | None] = []

    def shape(tensor: str) -> tuple[int, ...] | None:
        if not shapes:
            shapes.append(_static_shapes(path))
        return None if shapes[0] is None else shapes[0].get(tensor)

    def rows_line_up(i: int, k: int) -> bool:
        """Whether matrix product ``k`` reads, as the rows of its first input, the rows of matrix product
        ``i``'s output (through the single-reader path ``trace`` walked): each reshape keeps every axis up to
        the row axis, a transpose moves the row axis whole, element-wise work keeps the shape, and a
        normalization is over another axis. Then a tile of rows of ``k`` reads the same rows of ``i``."""
        if op_key(g.node[i]) != "MatMul" or op_key(g.node[k]) != "MatMul":
            return False
        tensor = g.node[k].input[0]
        s = shape(tensor)
        if s is None or len(s) < 2:
            return False
        axis = len(s) - 2
        while producer.get(tensor) != i:
            n = g.node[producer[tensor]]
            t = op_key(n)
            out = shape(tensor)
            if t == "Transpose":
                perm = list(attrs(n).get("perm", range(len(out or ()))[::-1]))
                if out is None or len(perm) != len(out):
                    return False
                axis, tensor = int(perm[axis]), n.input[0]
            elif t == "Reshape":
                src = shape(n.input[0])
                if src is None or out is None or axis >= len(src) or tuple(src[:axis + 1]) != tuple(out[:axis + 1]):
                    return False
                tensor = n.input[0]
            elif t in ELEMENTWISE or t in ROW_LOCAL:
                inner = next(x for x in n.input if x and derives(x))
                if out is None or shape(inner) != out:
                    return False
                if t in ROW_LOCAL:
                    # Softmax before opset 13 normalizes over every axis from ``axis`` (default 1) on.
                    first = int(attrs(n).get("axis", -1 if t != "Softmax" or opset >= 13 else 1))
                    over = first if first >= 0 else first + len(out)
                    if t == "Softmax" and opset < 13 and over != len(out) - 1:
                        return False
                    # Softmax (opset 13 on) normalizes over one axis, a layer norm over every axis from its own.
                    if over == axis or (t != "Softmax" and over < axis):
                        return False      # a normalization along the rows: no tile of rows holds it
                tensor = inner
            else:
                return False            # pooling: windows over image rows, not token rows
        s = shape(tensor)
        return s is not None and len(s) >= 2 and axis == len(s) - 2

    def join_after(tensor: str, links_by_input: dict[str, str]) -> Join | None:
        """The residual add ``tensor`` reaches through single-reader element-wise work, if any."""
        while readers.get(tensor, 0) == 1:
            k = next((i for i, n in enumerate(g.node) if tensor in n.input), -1)
            if k < 0:
                return None         # read by the graph's output alone
            n = g.node[k]
            if op_key(n) not in ELEMENTWISE:
                return None
            others = [x for x in n.input if x and x != tensor and derives(x)]
            if not others:
                tensor = n.output[0]
                continue
            if op_key(n) != "Add" or len(others) != 1 or list(n.input).count(tensor) != 1:
                return None
            return Join(names[k], links_by_input.get(others[0]), next_block(n.output[0]))
        return None

    def next_block(tensor: str) -> str | None:
        """The operator reading an add's result (through single-reader element-wise work) when one
        operator and one other add are its only readers."""
        while readers.get(tensor, 0) == 1:
            k = next((i for i, n in enumerate(g.node) if tensor in n.input), -1)
            n = g.node[k] if k >= 0 else None
            if n is None or op_key(n) not in ELEMENTWISE or any(x != tensor and derives(x) for x in n.input if x):
                return None
            tensor = n.output[0]
        if readers.get(tensor, 0) != 2:
            return None
        users = [i for i, n in enumerate(g.node) if tensor in n.input]
        ops = [i for i in users if is_operator(i) and g.node[i].input[0] == tensor]
        adds = [i for i in users if op_key(g.node[i]) == "Add"]
        return names[ops[0]] if len(ops) == 1 and len(adds) == 1 and len(users) == 2 else None

    by_name = {nm: i for i, nm in names.items()}
    nxt: dict[int, tuple[int, tuple[Window, ...], tuple[str, ...], bool]] = {}
    producer_of: dict[int, str] = {}
    producer_input: dict[int, str] = {}
    has_prev: set[int] = set()
    for i, n in enumerate(g.node):
        if not is_operator(i) or not n.input:
            continue
        got = trace(n.input[0])
        if got is not None and got[3] and (got[1] or not rows_line_up(got[0], i)):
            got = None
        elif (got is not None and got[2] and op_key(g.node[got[0]]) == op_key(n) == "MatMul"
              and shape(n.input[0]) is not None and not rows_line_up(got[0], i)):
            got = None          # a normalization along the token rows (where the shapes tell)
        if got is not None:
            nxt[got[0]] = (i, got[1], got[2], got[3])
            has_prev.add(i)
        second = trace(n.input[1]) if len(n.input) > 1 and n.input[1] else None
        if second is not None and not second[1] and not second[2]:
            producer_of[i] = names[second[0]]
            producer_input[i] = g.node[second[0]].input[0]
    chains = []
    for i in range(len(g.node)):
        if i in nxt and i not in has_prev:
            links = [ChainLink(names[i], operand_producer=producer_of.get(i), input_tensor=g.node[i].input[0],
                               operand_producer_input=producer_input.get(i))]
            j = i
            while j in nxt:
                k, wins, norms, relayout = nxt[j]
                links.append(ChainLink(names[k], wins, bool(norms), relayout=relayout, normalizations=norms,
                                       operand_producer=producer_of.get(k), input_tensor=g.node[k].input[0],
                                       operand_producer_input=producer_input.get(k)))
                j = k
            last = links[-1]
            join = join_after(g.node[j].output[0], {g.node[by_name[lk.node]].input[0]: lk.node for lk in links})
            if join is not None:
                links[-1] = replace(last, join=join)
            chains.append(tuple(links))
    return chains


def _static_shapes(path: str | Path) -> Shapes | None:
    """Every tensor's shape, the symbolic input dims bound as the importer binds them by default; None
    when that needs a value the file does not name (then no reshape or transpose joins a chain)."""
    proto = read_onnx(path)
    try:
        bind_dims(proto, {}, None, None, str(path))
        return infer(proto, str(path))[1]
    except (SpecError, ShapeProblem):
        return None
