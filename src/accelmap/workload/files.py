"""Workload files (YAML): one operator, by constructor or by expression."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Callable

from accelmap.errors import SpecError
from accelmap.workload import constructors
from accelmap.workload.operator import Operator
from accelmap.workload.text_form import operator_text, parse_expression
from accelmap.yaml_io import load_yaml

CONSTRUCTORS: dict[str, Callable[..., Operator]] = {
    "conv2d": constructors.conv2d,
    "depthwise_conv2d": constructors.depthwise_conv2d,
    "dense": constructors.dense,
    "gemm": constructors.gemm,
    "matmul": constructors.gemm,
    "batched_matmul": constructors.batched_matmul,
}
_COMMON = {"name", "precision", "init_output", "comment"}


def operator_from_dict(data: Any, source: str = "<dict>") -> Operator:
    if not isinstance(data, dict):
        raise SpecError("a workload file must be a mapping", where=source)
    name = str(data.get("name", Path(source).stem))
    init = data.get("init_output", "zero")
    if init not in ("zero", "read"):
        raise SpecError(f"init_output is {init!r}; allowed: zero, read", where=f"{source}: init_output")
    kinds = [k for k in CONSTRUCTORS if k in data]
    if "expression" in data:
        kinds.append("expression")
    if len(kinds) != 1:
        raise SpecError(f"give exactly one of 'expression' or a constructor ({', '.join(CONSTRUCTORS)}); "
                        f"found {kinds or 'none'}", where=source)
    kind = kinds[0]
    try:
        if kind == "expression":
            allowed = _COMMON | {"expression", "dims", "classes", "padding", "shapes"}
            bad = set(data) - allowed
            if bad:
                raise SpecError(f"unknown keys {sorted(bad, key=str)}; allowed: {', '.join(sorted(allowed))}")
            dims = data.get("dims")
            if not isinstance(dims, dict):
                raise SpecError("'dims' must map every dimension of the expression to its size")
            return parse_expression(str(data["expression"]), dims, name=name, bits=data.get("precision"),
                                    classes=data.get("classes"), init_output=init, pad_lo=data.get("padding"),
                                    shapes=data.get("shapes"))
        bad = set(data) - _COMMON - {kind}
        if bad:
            raise SpecError(f"unknown keys {sorted(bad, key=str)}; allowed: {kind}, {', '.join(sorted(_COMMON))}")
        args = data[kind]
        fn = CONSTRUCTORS[kind]
        params = set(inspect.signature(fn).parameters) - {"name", "bits", "init_output"}
        if not isinstance(args, dict):
            raise SpecError(f"'{kind}' takes a mapping of {', '.join(sorted(params))}")
        unknown = set(args) - params
        if unknown:
            raise SpecError(f"{kind} does not take {sorted(unknown, key=str)}; it takes {', '.join(sorted(params))}")
        try:
            op = fn(name, bits=data.get("precision"), **args)
        except TypeError as e:
            raise SpecError(f"{kind}: {e}") from None
        if init != "zero":
            from dataclasses import replace
            op = replace(op, init_output=init)
        return op
    except SpecError as e:
        if e.where:
            raise
        raise SpecError(str(e), where=source) from None


def load_operator(path: str | Path) -> Operator:
    return load_workload(path)[0]


def load_workload(path: str | Path) -> tuple[Operator, bool]:
    """The operator of a workload file, and whether the file states its own precision
    (if not, commands give it the accelerator's)."""
    data = load_yaml(path)
    return operator_from_dict(data, str(path)), isinstance(data, dict) and "precision" in data



def operator_to_dict(op: Operator) -> dict[str, Any]:
    """``op`` in the expression form of a workload file, which ``operator_from_dict`` reads back as an
    operator equal to ``op`` in everything but its kind label: dims in order, every operand's
    precision and class, input padding, stored shapes and the output's initial value."""
    d: dict[str, Any] = {"name": op.name, "expression": operator_text(op), "dims": dict(op.dims),
                         "precision": {o.name: o.bits for o in op.operands},
                         "classes": {o.name: o.cls for o in op.operands}}
    padding = {o.name: list(o.pad_lo) for o in op.inputs if any(o.pad_lo)}
    if padding:
        d["padding"] = padding
    shapes = {o.name: list(o.shape) for o in op.operands if o.shape}
    if shapes:
        d["shapes"] = shapes
    if op.init_output != "zero":
        d["init_output"] = op.init_output
    return d
