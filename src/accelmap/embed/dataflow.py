"""Polyhedral dataflow graph of a multiply-accumulate operator (Rieber's 2022 dissertation, sec. 4.2).

The body ``O[..] += A[..] * B[..]`` is split into two two-operand statements,
``S1: t = A[..] * B[..]`` and ``S2: O[..] += t``. Instance sets, tensor boxes,
access relations and dependence relations are isl sets and maps over the
loop dimensions, so the graph has a fixed number of nodes and edges whatever
the tensor sizes; padding, strides, dilation, groups and batch are in the
affine access functions. isl computes exact integer sets (no 32-bit limit).

Point-wise evaluation (the hot path of the constraint search) uses the same
affine coefficients directly instead of building an isl point per query.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import islpy as isl

from accelmap.workload.operator import Operator


def _box(name: str, dims: tuple[str, ...], extents: tuple[int, ...]) -> str:
    ids = ", ".join(f"i{k}" for k in range(len(dims)))
    cons = " and ".join(f"0 <= i{k} < {e}" for k, e in enumerate(extents)) or "true"
    return f"{{ {name}[{ids}] : {cons} }}"


@dataclass(frozen=True)
class Dataflow:
    """Coarse dependence graph: statement and tensor nodes hold sets, edges hold relations."""

    op: Operator
    extents: tuple[tuple[str, int], ...]       # loop dimension -> number of iterations searched
    inputs: tuple[str, str]                    # the two multiplied operands, in body order
    sets: dict = field(compare=False, repr=False, hash=False)       # node name -> isl.Set
    relations: dict = field(compare=False, repr=False, hash=False)  # (src, dst, kind) -> isl.Map

    @property
    def dims(self) -> tuple[str, ...]:
        return self.op.dim_names

    output_dims: tuple[str, ...] = ()
    reduction_dims: tuple[str, ...] = ()
    memo: dict = field(default_factory=dict, compare=False, repr=False, hash=False)  # overlap answers

    def access(self, operand: str, point: dict[str, int]) -> tuple[int, ...]:
        """Tensor element (index space, padding included) a loop point reads or writes."""
        o = self.op.operand(operand)
        return tuple(sum(c * point[d] for d, c in ix.terms) for ix in o.indices)

    def access_set(self, operand: str, out_point: tuple[int, ...]) -> isl.Set:
        """Def. 4.5: elements of ``operand`` one output element needs, all reductions iterated."""
        sel = self.sets["S1"]
        for d, v in zip(self.output_dims, out_point, strict=True):
            sel = sel.fix_val(isl.dim_type.set, self.dims.index(d), isl.Val(str(v)))   # str: any size
        return sel.apply(self.relations[("S1", operand, "access")])

    def size(self) -> tuple[int, int]:
        """Nodes and edges of the coarse graph (independent of tensor sizes)."""
        return len(self.sets), len(self.relations)


def dataflow(op: Operator, pad_to: dict[str, int] | None = None) -> Dataflow:
    """Build the graph. ``pad_to`` widens a dimension's instance set to admit zero-padded instances."""
    if len(op.inputs) != 2:
        raise ValueError("dataflow graphs are built for two-operand multiply-accumulates")
    extents = {d: max(s, (pad_to or {}).get(d, 0)) for d, s in op.dims}
    dims = op.dim_names
    space = ", ".join(dims)
    cons = " and ".join(f"0 <= {d} < {extents[d]}" for d in dims)
    sets = {"S1": isl.Set(f"{{ S1[{space}] : {cons} }}"), "S2": isl.Set(f"{{ S2[{space}] : {cons} }}")}
    rel = {}
    for o in op.operands:
        ext = tuple(sum(c * (extents[d] - 1) for d, c in ix.terms) + 1 for ix in o.indices)
        sets[o.name] = isl.Set(_box(o.name, tuple(str(i) for i in range(len(ext))), ext))
        expr = ", ".join("+".join(f"{c}*{d}" for d, c in ix.terms) for ix in o.indices)
        stmt = "S2" if o.is_output else "S1"
        rel[(stmt, o.name, "access")] = isl.Map(f"{{ {stmt}[{space}] -> {o.name}[{expr}] }}").intersect_domain(sets[stmt])
    primed = ", ".join(f"{d}_" for d in dims)
    out_dims = [ix.dims[0] for ix in op.output.indices]
    red = [d for d in dims if d not in out_dims]
    same_out = " and ".join(f"{d} = {d}_" for d in out_dims) or "true"
    same_red = " and ".join(f"{d} = {d}_" for d in red) or "true"
    diff_red = " or ".join(f"{d} != {d}_" for d in red) or "false"
    diff_out = " or ".join(f"{d} != {d}_" for d in out_dims) or "false"
    ident = " and ".join(f"{d} = {d}_" for d in dims)
    rel[("S2", "S1", "raw")] = isl.Map(f"{{ S2[{space}] -> S1[{primed}] : {ident} }}")
    # Reduction chain: the sum is commutative, so k' = k+1 relaxes to k' != k (eq. 4.10).
    rel[("S2", "S2", "reduction")] = isl.Map(f"{{ S2[{space}] -> S2[{primed}] : {same_out} and ({diff_red}) }}")
    # Spatial edges: the same computation for another output element.
    rel[("S1", "S1", "spatial")] = isl.Map(f"{{ S1[{space}] -> S1[{primed}] : {same_red} and ({diff_out}) }}")
    for k in list(rel):
        if k[2] in ("raw", "reduction", "spatial"):
            src = sets[k[0]]
            rel[k] = rel[k].intersect_domain(src).intersect_range(sets[k[1]])
    ins = tuple(o.name for o in op.inputs)
    return Dataflow(op, tuple(extents.items()), (ins[0], ins[1]), sets, rel, tuple(out_dims), tuple(red))


def _overlap_isl(df: Dataflow, operand: str, p0: tuple[int, ...], p1: tuple[int, ...]) -> str:
    a0, a1 = df.access_set(operand, p0), df.access_set(operand, p1)
    if a0.is_equal(a1):
        return "full"
    return "none" if a0.intersect(a1).is_empty() else "partial"


def overlap_kind(df: Dataflow, operand: str, p0: tuple[int, ...], p1: tuple[int, ...]) -> str:
    """Def. 4.6 between two output elements: 'none' (disjoint), 'full' (identical) or 'partial'.

    isl decides, once per class of equal answers: the instance set is a box, so for an
    output point inside it the access set is ``c(p) + T`` with ``T`` the (non-empty)
    image of the reduction box and ``c`` the output dims' part of the access function,
    and outside it the set is empty. Two such sets are equal iff the shift
    ``c(p1) - c(p0)`` is zero and disjoint iff the shift is not in ``T - T``, so the
    kind depends only on which points are inside and, when both are, on that shift.
    """
    memo = df.memo
    fast = (operand, tuple(p0), tuple(p1))
    if fast in memo:
        return memo[fast]
    ext = dict(df.extents)
    inside0 = all(0 <= x < ext[d] for d, x in zip(df.output_dims, p0, strict=True))
    inside1 = all(0 <= x < ext[d] for d, x in zip(df.output_dims, p1, strict=True))
    shift = None
    if inside0 and inside1:
        delta = {d: b - a for d, a, b in zip(df.output_dims, p0, p1, strict=True)}
        shift = tuple(sum(c * delta.get(d, 0) for d, c in ix.terms) for ix in df.op.operand(operand).indices)
    key = ("shift", operand, inside0, inside1, shift)
    if key not in memo:
        memo[key] = _overlap_isl(df, operand, tuple(p0), tuple(p1))
    memo[fast] = memo[key]
    return memo[key]
