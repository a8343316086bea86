"""Operators as affine loop nests with a multiply-accumulate body.

An operator is a set of named loop dimensions with sizes and a body
``out[...] += in0[...] * in1[...] * ...`` whose operand indices are tuples of
affine expressions of the dimensions. Everything downstream (mapping, cost,
codegen) reads only this structure, so conv, GEMM and tensor-algebra kernels
are the same thing to the rest of the tool.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterable, Literal, Mapping

from accelmap.errors import SpecError

Role = Literal["input", "output"]
InitOutput = Literal["zero", "read"]   # the output starts at zero, or reads its prior value
# Operand classes tie a workload operand to the buffers an accelerator provides
# (Eyeriss keeps separate input/weight/psum scratchpads). Workloads with more
# than two inputs put the extra ones in a class of the user's choosing.
OPERAND_CLASSES = ("I", "W", "O")


@dataclass(frozen=True)
class AffineIndex:
    """One tensor axis index: sum of coeff*dim, e.g. ``2*p + r``."""

    terms: tuple[tuple[str, int], ...]

    def __post_init__(self) -> None:
        if not self.terms:
            raise SpecError("an index expression needs at least one loop dimension")
        seen = set()
        for dim, coeff in self.terms:
            if dim in seen:
                raise SpecError(f"dimension {dim!r} appears twice in one index expression")
            if coeff <= 0:
                raise SpecError(f"coefficient of {dim!r} must be a positive integer, got {coeff}")
            seen.add(dim)

    @cached_property
    def dims(self) -> tuple[str, ...]:
        return tuple(d for d, _ in self.terms)

    def coeff(self, dim: str) -> int:
        for d, c in self.terms:
            if d == dim:
                return c
        return 0

    def extent(self, sizes: Mapping[str, int]) -> int:
        """Size of the index range the full loop nest touches (max + 1)."""
        return sum(c * (sizes[d] - 1) for d, c in self.terms) + 1

    def __str__(self) -> str:
        return "+".join(d if c == 1 else f"{c}*{d}" for d, c in self.terms)


@dataclass(frozen=True)
class Operand:
    name: str
    indices: tuple[AffineIndex, ...]
    role: Role
    bits: int
    cls: str
    # Zero padding is part of the operator, not of the tensor in memory: index
    # position v of axis a reads stored element v - pad_lo[a]; positions outside
    # the stored shape read zero. The cost model counts the index space, so
    # padded positions are transferred like data (as Timeloop does).
    pad_lo: tuple[int, ...] = ()
    shape: tuple[int, ...] = ()

    @cached_property
    def dims(self) -> frozenset[str]:
        return frozenset(d for ix in self.indices for d in ix.dims)

    @cached_property
    def is_output(self) -> bool:
        # (cached: the mapper's node bounds ask it hundreds of thousands of times per search)
        return self.role == "output"

    def __str__(self) -> str:
        return f"{self.name}[{','.join(str(i) for i in self.indices)}]"


@dataclass(frozen=True)
class Operator:
    """A multiply-accumulate loop nest. ``dims`` keeps declaration order."""

    name: str
    dims: tuple[tuple[str, int], ...]
    operands: tuple[Operand, ...]
    kind: str = "einsum"
    attrs: tuple[tuple[str, object], ...] = ()
    # "zero": an output element starts at zero, so its first update writes
    # without reading. "read": the output holds a prior value (bias, residual,
    # or the convention of Sunstone's worked example) that must be read first.
    init_output: InitOutput = "zero"
    sizes: Mapping[str, int] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sizes", dict(self.dims))
        _check_operator(self)

    # ---- derived facts -------------------------------------------------
    @cached_property
    def dim_names(self) -> tuple[str, ...]:
        return tuple(d for d, _ in self.dims)

    @property
    def macs(self) -> int:
        return math.prod(s for _, s in self.dims)

    @cached_property
    def output(self) -> Operand:
        # cached: the cost model asks for it thousands of times per layer searched
        return next(o for o in self.operands if o.is_output)

    @property
    def inputs(self) -> tuple[Operand, ...]:
        return tuple(o for o in self.operands if not o.is_output)

    def operand(self, name: str) -> Operand:
        for o in self.operands:
            if o.name == name:
                return o
        raise KeyError(name)

    def index_extent(self, operand: Operand | str) -> tuple[int, ...]:
        """Extent of every axis of the index space (padded tensor shape)."""
        op = self.operand(operand) if isinstance(operand, str) else operand
        return tuple(ix.extent(self.sizes) for ix in op.indices)

    def footprint(self, operand: Operand | str) -> int:
        """Distinct index points of the operand the whole nest touches."""
        from accelmap.workload.index_sets import tile_size

        op = self.operand(operand) if isinstance(operand, str) else operand
        return tile_size(op, self.sizes)

    def attr(self, key: str, default: object = None) -> object:
        return dict(self.attrs).get(key, default)

    def signature(self) -> tuple:
        """Identity of the computation, ignoring the layer name (for dedup and caches)."""
        return (self.dims, tuple((o.indices, o.role, o.bits, o.cls, o.pad_lo, o.shape)
                                 for o in self.operands), self.init_output)

    def expression(self) -> str:
        out = self.output
        body = " * ".join(str(o) for o in self.inputs)
        eq = "+=" if self.init_output == "zero" else "+=!"
        return f"{out} {eq} {body}"

    def __str__(self) -> str:
        sizes = ", ".join(f"{d}={s}" for d, s in self.dims)
        return f"{self.name}: {self.expression()}  ({sizes}; {self.macs:,} MACs)"


def _check_operator(op: Operator) -> None:
    names = [d for d, _ in op.dims]
    if len(set(names)) != len(names):
        raise SpecError(f"operator {op.name!r}: duplicate dimension names {names}")
    for d, s in op.dims:
        if not isinstance(s, int) or isinstance(s, bool) or s < 1:
            raise SpecError(f"operator {op.name!r}: dimension {d} must be a positive integer, got {s!r}")
    outs = [o for o in op.operands if o.is_output]
    if len(outs) != 1:
        raise SpecError(f"operator {op.name!r}: needs exactly one output operand, has {len(outs)}")
    if not op.inputs:
        raise SpecError(f"operator {op.name!r}: a multiply-accumulate needs at least one input operand")
    onames = [o.name for o in op.operands]
    if len(set(onames)) != len(onames):
        raise SpecError(f"operator {op.name!r}: duplicate operand names {onames}")
    used = set()
    for o in op.operands:
        if o.cls not in OPERAND_CLASSES:
            raise SpecError(f"operator {op.name!r}: operand {o.name} has class {o.cls!r}; "
                            f"allowed classes are {', '.join(OPERAND_CLASSES)}")
        if o.bits < 1:
            raise SpecError(f"operator {op.name!r}: operand {o.name} precision must be >= 1 bit, got {o.bits}")
        per_operand = set()
        for ix in o.indices:
            for d in ix.dims:
                if d not in op.sizes:
                    raise SpecError(f"operator {op.name!r}: operand {o.name} uses unknown dimension {d!r} "
                                    f"(dimensions: {', '.join(names)})")
                if d in per_operand:
                    raise SpecError(f"operator {op.name!r}: dimension {d!r} indexes two axes of {o.name}; "
                                    "each dimension may index one axis of an operand")
                per_operand.add(d)
        used |= per_operand
        if o.pad_lo and len(o.pad_lo) != len(o.indices):
            raise SpecError(f"operator {op.name!r}: operand {o.name} padding has {len(o.pad_lo)} entries "
                            f"for {len(o.indices)} axes")
        if o.shape and len(o.shape) != len(o.indices):
            raise SpecError(f"operator {op.name!r}: operand {o.name} shape has {len(o.shape)} entries "
                            f"for {len(o.indices)} axes")
    out = op.output
    for ix in out.indices:
        # A sliding output index (O[p+r]) would make different loop points write
        # the same element concurrently; the spatial-reduction model assumes not.
        if len(ix.terms) != 1 or ix.terms[0][1] != 1:
            raise SpecError(f"operator {op.name!r}: output index {ix} must be a single loop dimension")
    if out.pad_lo and any(out.pad_lo):
        raise SpecError(f"operator {op.name!r}: the output operand cannot be padded")
    unused = [d for d in names if d not in used]
    if unused:
        raise SpecError(f"operator {op.name!r}: dimensions {unused} index no operand")


def make_operand(name: str, indices: Iterable[AffineIndex | str | tuple], role: Role, bits: int,
                 cls: str, pad_lo: Iterable[int] = (), shape: Iterable[int] = ()) -> Operand:
    ixs = []
    for ix in indices:
        if isinstance(ix, AffineIndex):
            ixs.append(ix)
        elif isinstance(ix, str):
            ixs.append(AffineIndex(((ix, 1),)))
        else:
            ixs.append(AffineIndex(tuple(ix)))
    if isinstance(bits, bool) or not isinstance(bits, int) and not (hasattr(bits, "__index__")):
        raise SpecError(f"operand {name}: precision must be a whole number of bits, got {bits!r}")
    return Operand(name, tuple(ixs), role, int(bits), cls, tuple(pad_lo), tuple(shape))
