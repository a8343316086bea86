"""Chains of accelerator operators in an ONNX graph: where one operator's output is the next one's
input and nothing else reads it, so the two can run fused.

Between two linked operators only element-wise host work (activations, bias or batch-norm, an add
of a tensor no operator of the chain produced), normalizations over the last axis of a token
matrix, and pooling windows may sit; every tensor on the way has exactly one reader. Residual
joins (an add of two operator outputs), reshapes and transposes end a chain. Only the top-level
graph is walked (not the bodies of If, Loop and Scan).

A chain whose last operator's output flows (through element-wise work) into such an add carries
it as its *join*: the add's other operand is the skip tensor, named by the chain link whose
operator reads exactly that tensor as its first input (a ResNet block's or a transformer FFN's
input), or by none when it comes from elsewhere (a projection shortcut).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from accelmap.workload.onnx_ops import attrs, classify, op_key
from accelmap.workload.onnx_read import read_onnx

# Host ops that keep every element where it is (per-element, or broadcast against a constant).
ELEMENTWISE = frozenset({
    "Relu", "LeakyRelu", "PRelu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Gelu", "Erf", "Elu",
    "Selu", "Softplus", "Mish", "BatchNormalization", "Add", "Sub", "Mul", "Div", "Identity", "Dropout", "Cast",
    "QuantizeLinear", "DequantizeLinear", "Sqrt", "Pow", "Neg", "Abs", "Exp", "Log"})
# Normalizations over the last axis: a whole token row at a time, which a tile of tokens holds.
ROW_LOCAL = frozenset({"LayerNormalization", "Softmax", "SkipLayerNormalization"})
POOLS = frozenset({"MaxPool", "AveragePool"})


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
    g = read_onnx(path).graph
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

    def trace(tensor: str) -> tuple[int, tuple[Window, ...], bool] | None:
        """The operator whose output alone reaches ``tensor``, through single-reader tensors."""
        if readers.get(tensor, 0) != 1:
            return None
        i = producer.get(tensor)
        if i is None:
            return None
        if is_operator(i):
            return (i, (), False)
        n = g.node[i]
        t = op_type = op_key(n)
        if t in POOLS:
            w = _window(n)
            if w is None:
                return None
            got = trace(n.input[0])
            return None if got is None else (got[0], got[1] + (w,), got[2])
        if op_type in ELEMENTWISE or op_type in ROW_LOCAL:
            inner = [x for x in n.input if x and derives(x)]
            if len(inner) != 1:
                return None        # a join of two operators' outputs (a residual) or nothing chained
            got = trace(inner[0])
            return None if got is None else (got[0], got[1], got[2] or op_type in ROW_LOCAL)
        return None

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
    nxt: dict[int, tuple[int, tuple[Window, ...], bool]] = {}
    has_prev: set[int] = set()
    for i, n in enumerate(g.node):
        if not is_operator(i) or not n.input:
            continue
        got = trace(n.input[0])
        if got is not None:
            nxt[got[0]] = (i, got[1], got[2])
            has_prev.add(i)
    chains = []
    for i in range(len(g.node)):
        if i in nxt and i not in has_prev:
            links = [ChainLink(names[i])]
            j = i
            while j in nxt:
                k, wins, row_local = nxt[j]
                links.append(ChainLink(names[k], wins, row_local))
                j = k
            last = links[-1]
            join = join_after(g.node[j].output[0], {g.node[by_name[lk.node]].input[0]: lk.node for lk in links})
            if join is not None:
                links[-1] = replace(last, join=join)
            chains.append(tuple(links))
    return chains
