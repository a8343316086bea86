"""Our workload operators (affine multiply-accumulate nests) as poly kernels.

An ``Operator`` ``O[...] += I0[...] * I1[...] * ...`` becomes a reduction over the dims that do
not index the output: an init statement and an update whose body multiplies the inputs, each
cast to the output's integer type (operands carry bit widths, not number formats).
"""

from __future__ import annotations

from accelmap.errors import SpecError
from accelmap.poly.kernel import Access, Affine, Call, Const, Expr, Kernel, Statement, Tensor, check_kernel
from accelmap.workload.operator import Operator

_INT_OF_BITS = {8: "int8", 16: "int16", 32: "int32", 64: "int64"}


def _dtype(bits: int, what: str) -> str:
    if bits not in _INT_OF_BITS:
        raise SpecError(f"{what}: {bits}-bit operands have no C integer type here; use 8, 16, 32 or 64 bits")
    return _INT_OF_BITS[bits]


def kernel_from_operator(op: Operator) -> Kernel:
    where = f"operator {op.name}"
    if op.init_output != "zero":
        raise SpecError("an output that reads its prior value (init_output: read) is not supported by the "
                        "poly flow; use init_output: zero", where=where)
    inputs = []
    for o in op.inputs:
        if o.pad_lo and any(o.pad_lo):
            raise SpecError(f"operand {o.name} is zero-padded {list(o.pad_lo)}; the poly flow takes unpadded "
                            "operators (pad the tensor beforehand, as AKG requires)", where=where)
        extents = op.index_extent(o)
        shape = tuple(max(a, b) for a, b in zip(extents, o.shape, strict=True)) if o.shape else extents
        inputs.append(Tensor(o.name, shape, _dtype(o.bits, f"{where}, operand {o.name}")))
    out = op.output
    out_t = Tensor(out.name, op.index_extent(out), _dtype(out.bits, f"{where}, operand {out.name}"))
    out_dims = [ix.terms[0][0] for ix in out.indices]
    reduce = [d for d in op.dim_names if d not in out_dims]
    body: Expr | None = None
    for o in op.inputs:
        acc = Access(o.name, tuple(Affine(tuple(ix.terms)) for ix in o.indices))
        term = Call("cast", (acc,), out_t.dtype)
        body = term if body is None else Call("*", (body, term))
    assert body is not None
    out_acc = Access(out.name, tuple(Affine(((d, 1),)) for d in out_dims))
    sizes = op.sizes
    out_dims_sz = tuple((d, sizes[d]) for d in out_dims)
    stmts: tuple[Statement, ...]
    if reduce:
        stmts = (Statement("S0", out_dims_sz, out_acc, Const(0), "init"),
                 Statement("S1", out_dims_sz + tuple((d, sizes[d]) for d in reduce), out_acc, body, "update",
                           tuple(reduce)))
    else:
        stmts = (Statement("S0", out_dims_sz, out_acc, body, "assign"),)
    k = Kernel(op.name, tuple(inputs), (out_t,), stmts)
    check_kernel(k, where)
    return k
