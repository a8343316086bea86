"""DRAM layouts of an operator's operands: the order its axes are stored in, outermost first.

An operand declares its axes in one order (the workload's); a layout states another (e.g. a convolution's
input channels-last, NHWC, where the workload declares NCHW). ``laid_out`` gives the same computation with the
operand's axes declared in that order, which is what the model and the simulator read a layout from (the rows a
tile transfer reads, ``cost.dma_rows``). A mapping file states layouts by naming each axis by its index as the
workload states it (``I: [N, P+R, Q+S, C]``); ``layout_names`` and ``layouts_from_names`` convert.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from accelmap.errors import SpecError
from accelmap.workload.operator import Operator


def laid_out(op: Operator, layouts: dict[str, tuple[int, ...]]) -> Operator:
    """``op`` with each operand of ``layouts`` declaring its axes in that DRAM order (outermost first): the
    same computation, and the order the model and the simulator read a tensor's layout from."""
    if not layouts:
        return op
    ops = []
    for X in op.operands:
        order = layouts.get(X.name)
        if order is not None:
            pick = lambda t, order=order: tuple(t[a] for a in order) if t else t  # noqa: E731
            X = replace(X, indices=pick(X.indices), pad_lo=pick(X.pad_lo), shape=pick(X.shape))
        ops.append(X)
    return replace(op, operands=tuple(ops))


def layout_names(op: Operator, layouts: dict[str, tuple[int, ...]]) -> dict[str, list[str]]:
    """``layouts`` as a mapping file states them: per operand its axes, each named by its index, in DRAM order."""
    out = {}
    for X in op.operands:
        if X.name in layouts:
            out[X.name] = [str(X.indices[a]) for a in layouts[X.name]]
    return out


def layouts_from_names(op: Operator, data: Any, where: str) -> dict[str, tuple[int, ...]]:
    """The layouts a mapping file's ``layouts`` entry states (``layout_names``' form), checked against ``op``:
    each operand named once, its axes a permutation of the ones the workload declares."""
    if not isinstance(data, dict):
        raise SpecError(f"'layouts' must map operand names to their axes in DRAM order, got {data!r}", where=where)
    operands = {X.name: X for X in op.operands}
    out: dict[str, tuple[int, ...]] = {}
    for name, axes in data.items():
        if name not in operands:
            raise SpecError(f"unknown operand {name!r}; {op.name} has {', '.join(operands)}", where=where)
        declared = [str(ix) for ix in operands[name].indices]
        if not isinstance(axes, list) or sorted(map(str, axes)) != sorted(declared) or len(set(map(str, axes))) != len(axes):
            raise SpecError(f"{axes!r} is not an order of its axes; write each of {declared} once, "
                            "outermost first", where=f"{where}.{name}")
        out[name] = tuple(declared.index(str(a)) for a in axes)
    return out
