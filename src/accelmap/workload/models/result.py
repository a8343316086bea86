"""What importing a model yields: accelerator layers (deduplicated) and host work.

A model is a list of multiply-accumulate operators the accelerator runs plus
everything else (pooling, activations, adds, reshapes, softmax, ...) that stays
on the host. Both are kept, so nothing in the model is silently dropped.
Layers whose operators have the same ``Operator.signature()`` are one entry
with a count: the mapper maps them once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from accelmap.workload.operator import Operator


@dataclass(frozen=True)
class Layer:
    """One distinct accelerator operator and every model node that computes it."""

    operator: Operator
    nodes: tuple[str, ...]          # model node names, first occurrence first
    source_op: str                  # ONNX op type (Conv, Gemm, MatMul) or "table"
    bias: bool = False              # a bias is added to the output (an epilogue, not MACs)
    # How often each node runs (a node in a Loop body runs once per trip); empty: once each.
    repeats: tuple[int, ...] = ()

    @property
    def name(self) -> str:
        return self.operator.name

    @property
    def count(self) -> int:
        """Executions of the operator: one per node, times its loop trip counts."""
        return sum(self.repeats) if self.repeats else len(self.nodes)

    @property
    def macs(self) -> int:
        """MACs of all occurrences."""
        return self.operator.macs * self.count

    def to_dict(self) -> dict:
        op = self.operator
        return {"name": self.name, "kind": op.kind, "source_op": self.source_op,
                "dims": dict(op.dims), "expression": op.expression(),
                "bits": {o.name: o.bits for o in op.operands},
                "attrs": {k: list(v) if isinstance(v, tuple) else v for k, v in op.attrs},
                "bias": self.bias, "count": self.count, "nodes": list(self.nodes),
                **({"repeats": list(self.repeats)} if self.repeats else {}),
                "macs_each": op.macs, "macs": self.macs}


@dataclass(frozen=True)
class HostOp:
    """A node that is not an accelerator operator; it runs on the host."""

    name: str
    op_type: str
    shape: tuple[int, ...] | None   # shape of its first output; None when unknown
    elements: int | None            # output elements over all its outputs; None when unknown
    note: str = ""                  # why an operator-like node fell back to the host

    def to_dict(self) -> dict:
        return {"name": self.name, "op_type": self.op_type,
                "shape": list(self.shape) if self.shape is not None else None,
                "elements": self.elements, "note": self.note}


@dataclass(frozen=True)
class ModelImport:
    name: str
    source: str
    layers: tuple[Layer, ...]
    host_ops: tuple[HostOp, ...] = ()
    params: tuple[tuple[str, int], ...] = ()   # symbolic dims and the values bound to them
    notes: tuple[str, ...] = field(default=())
    # Nodes of op types the importer does not know: they may carry MACs that are not counted.
    unknown_ops: tuple[HostOp, ...] = ()

    @property
    def total_macs(self) -> int:
        return sum(l.macs for l in self.layers)

    @property
    def node_count(self) -> int:
        """Accelerator nodes in the model, counting every occurrence."""
        return sum(l.count for l in self.layers)

    @property
    def host_elements(self) -> int:
        """Output elements of the host nodes whose shape is known."""
        return sum(h.elements for h in self.host_ops if h.elements is not None)

    @property
    def host_unknown(self) -> int:
        return sum(1 for h in self.host_ops if h.elements is None)

    def operators(self) -> list[Operator]:
        """The distinct operators, in first-occurrence order (what a mapper maps)."""
        return [l.operator for l in self.layers]

    def to_dict(self) -> dict:
        return {"name": self.name, "source": self.source, "params": dict(self.params),
                "total_macs": self.total_macs, "accelerator_nodes": self.node_count,
                "distinct_layers": len(self.layers), "host_nodes": len(self.host_ops),
                "host_elements": self.host_elements, "host_elements_unknown": self.host_unknown,
                "notes": list(self.notes),
                "layers": [l.to_dict() for l in self.layers],
                "host_ops": [h.to_dict() for h in self.host_ops],
                "unknown_ops": [h.to_dict() for h in self.unknown_ops]}

    def __str__(self) -> str:
        return (f"{self.name}: {self.node_count} accelerator nodes in {len(self.layers)} distinct layers, "
                f"{self.total_macs:,} MACs; {len(self.host_ops)} host nodes"
                + (f"; {len(self.unknown_ops)} nodes of unknown op types" if self.unknown_ops else ""))


def group_layers(entries: list[tuple]) -> tuple[Layer, ...]:
    """(node name, operator, source op, bias[, repeats]) in model order -> distinct layers with counts.

    Two nodes are one layer when their operators have the same signature and the
    same bias epilogue; the first node's operator (and name) represents the group.
    ``repeats`` (default 1) is how often the node runs.
    """
    groups: dict[tuple, list] = {}
    for node, op, src, bias, *rest in entries:
        reps = rest[0] if rest else 1
        key = (op.signature(), bias)
        if key in groups:
            groups[key][1].append(node)
            groups[key][4].append(reps)
        else:
            groups[key] = [op, [node], src, bias, [reps]]
    return tuple(Layer(op, tuple(nodes), src, bias, tuple(reps) if any(r != 1 for r in reps) else ())
                 for op, nodes, src, bias, reps in groups.values())


def element_count(shape: tuple[int, ...] | None) -> int | None:
    return None if shape is None else math.prod(shape)
