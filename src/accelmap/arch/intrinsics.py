"""Hardware intrinsics: a fixed-size multiply-accumulate an accelerator runs as one instruction.

An intrinsic is written in the operator text form (``c[x,y] += a[x,z] * b[z,y]``)
with fixed sizes and a precision per operand, so it is itself a small
``Operator``: the embedding search reads its dataflow exactly like an
operator's. Intrinsics appear in an accelerator YAML under ``intrinsics:`` or
as files in the bundled library ``data/intrinsics/*.yaml``.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from accelmap.errors import SpecError
from accelmap.workload.operator import Operator
from accelmap.workload.text_form import parse_expression
from accelmap.yaml_io import load_yaml

KINDS = ("gemm", "gemv", "dot", "simd2d")
_KEYS = {"name", "kind", "expression", "sizes", "precision", "description", "comment", "cycles"}


@dataclass(frozen=True)
class Intrinsic:
    name: str
    kind: str
    expression: str
    sizes: tuple[tuple[str, int], ...]
    precision: tuple[tuple[str, int], ...]   # operand name -> bits
    description: str = ""
    cycles: int = 1                           # issue interval of one call
    source: str = ""

    @property
    def operator(self) -> Operator:
        bits = dict(self.precision)
        return parse_expression(self.expression, dict(self.sizes), name=self.name, bits=bits)

    @property
    def macs(self) -> int:
        return self.operator.macs

    def __str__(self) -> str:
        sizes = ", ".join(f"{d}={s}" for d, s in self.sizes)
        bits = ", ".join(f"{o}:{b}" for o, b in self.precision)
        return f"{self.name} ({self.kind}): {self.expression}  ({sizes}; bits {bits})"


def intrinsic_from_dict(data: Any, where: str) -> Intrinsic:
    if not isinstance(data, dict):
        raise SpecError(f"an intrinsic must be a mapping with keys name, kind, expression, sizes, precision; "
                        f"got {type(data).__name__}", where=where)
    unknown = sorted(set(data) - _KEYS, key=str)
    if unknown:
        raise SpecError(f"unknown keys {unknown}; allowed: {', '.join(sorted(_KEYS))}", where=where)
    for key in ("name", "kind", "expression", "sizes", "precision"):
        if key not in data:
            raise SpecError("is required", where=f"{where}.{key}")
    name = data["name"]
    if not isinstance(name, str) or not name:
        raise SpecError(f"must be a non-empty string, got {name!r}", where=f"{where}.name")
    kind = data["kind"]
    if kind not in KINDS:
        raise SpecError(f"{kind!r} is not an intrinsic kind; allowed: {', '.join(KINDS)}", where=f"{where}.kind")
    sizes = data["sizes"]
    if not isinstance(sizes, dict) or not sizes:
        raise SpecError("must map every intrinsic dimension to its size", where=f"{where}.sizes")
    for d, s in sizes.items():
        if not isinstance(s, int) or isinstance(s, bool) or s < 1:
            raise SpecError(f"dimension {d} must be a positive integer, got {s!r}", where=f"{where}.sizes.{d}")
    prec = data["precision"]
    if not isinstance(prec, dict):
        raise SpecError("must map every operand of the expression to its bits", where=f"{where}.precision")
    for o, b in prec.items():
        if not isinstance(b, int) or isinstance(b, bool) or b < 1:
            raise SpecError(f"operand {o} bits must be a positive integer, got {b!r}", where=f"{where}.precision.{o}")
    cycles = data.get("cycles", 1)
    if not isinstance(cycles, int) or isinstance(cycles, bool) or cycles < 1:
        raise SpecError(f"must be a positive integer, got {cycles!r}", where=f"{where}.cycles")
    try:
        op = parse_expression(str(data["expression"]), sizes, name=name, bits=prec)
    except SpecError as e:
        raise SpecError(str(e), where=f"{where}.expression") from None
    if len(op.inputs) != 2:
        raise SpecError(f"an intrinsic multiplies exactly two operands; {data['expression']!r} has "
                        f"{len(op.inputs)}", where=f"{where}.expression")
    missing = [o.name for o in op.operands if o.name not in prec]
    if missing:
        raise SpecError(f"no precision for operands {missing}", where=f"{where}.precision")
    for o in op.operands:
        if any(ix.terms[0][1] != 1 or len(ix.terms) != 1 for ix in o.indices):
            raise SpecError(f"operand {o} must be indexed by plain dimensions (an intrinsic reads dense tiles)",
                            where=f"{where}.expression")
    order = [o.name for o in op.operands]
    return Intrinsic(name, kind, str(data["expression"]), tuple(sizes.items()),
                     tuple((n, int(prec[n])) for n in order), str(data.get("description", "")),
                     int(cycles), where)


def _library_dir():
    return resources.files("accelmap") / "data" / "intrinsics"


def library_names() -> list[str]:
    return sorted(p.name[:-5] for p in _library_dir().iterdir() if p.name.endswith(".yaml"))


def get_intrinsic(name_or_path: str | Path, arch=None) -> Intrinsic:
    """A library name (``vta_gemm``), an intrinsic named in ``arch``, or a YAML file."""
    s = str(name_or_path)
    if arch is not None:
        for n, intr in arch.intrinsics:
            if n == s and isinstance(intr, Intrinsic):
                return intr
    if s in library_names():
        p = Path(str(_library_dir() / f"{s}.yaml"))
        return intrinsic_from_dict(load_yaml(p), f"intrinsic library {s}")
    p = Path(s)
    if p.suffix in (".yaml", ".yml") and p.exists():
        return intrinsic_from_dict(load_yaml(p), str(p))
    raise SpecError(f"no intrinsic named {s!r} and no such file; library: {', '.join(library_names())}",
                    where="--intrinsic")
