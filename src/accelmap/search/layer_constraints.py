"""Model-wide constraints: checked against the model, then fitted to each layer."""

from __future__ import annotations

from dataclasses import replace

from accelmap.arch.accelerator import Accelerator
from accelmap.errors import SpecError
from accelmap.mapping.sampling import divisors
from accelmap.search.space import Constraints
from accelmap.workload.models.result import ModelImport
from accelmap.workload.operator import Operator


def check_model_constraints(cons: Constraints, model: ModelImport, arch: Accelerator) -> None:
    """Names in the constraints must exist: axes and levels on the accelerator, dims in some layer."""
    axes = arch.fanout_axes()
    levels = {lv.name for lv in arch.levels}
    dims = {d for l in model.layers for d in l.operator.dim_names}
    for ax, ds in cons.spatial.items():
        if ax not in axes:
            raise SpecError(f"unknown fan-out axis {ax!r}; {arch.name} has {', '.join(axes) or 'none'}",
                            where="constraints.spatial")
        for d, b in ds.items():
            if d not in dims:
                raise SpecError(f"axis {ax}: no layer of {model.name} has a dimension {d!r}; its layers have "
                                f"{', '.join(sorted(dims))}", where="constraints.spatial")
            if b < 1 or b > axes[ax][1].size:
                raise SpecError(f"axis {ax}: {d}={b} must be within 1..{axes[ax][1].size}",
                                where="constraints.spatial")
    for key in (*cons.orders, *cons.forbid_orders, *cons.keep):
        if key not in levels:
            raise SpecError(f"unknown level {key!r}; {arch.name} has {', '.join(levels)}", where="constraints")
    if not 0.0 <= cons.min_utilization <= 1.0:
        raise SpecError(f"min_utilization must be within 0..1, got {cons.min_utilization}", where="constraints")


def fit_constraints(cons: Constraints, op: Operator,
                    arch: Accelerator | None = None) -> tuple[Constraints, tuple[str, ...]]:
    """The model-wide constraints as they apply to one layer, and notes on every change.

    A spatial unrolling names a bound for the whole model. A layer whose
    dimension is smaller unrolls all of it; an output dimension the bound does
    not divide is padded to whole spatial rounds (the last one partial, as
    ZigZag does); a reduced dimension unrolls the largest divisor of its size
    within the bound (a spatial reduction must be complete); a layer without
    the dimension leaves it out, and so does a layer that reduces over it where the axis
    cannot reduce (a GEMM's K on a column axis meant for a convolution's K). Orders and kept operands
    drop names the layer does not have.
    """
    notes: list[str] = []
    spatial: dict[str, dict[str, int]] = {}
    for ax, ds in cons.spatial.items():
        spatial[ax] = {}
        for d, b in ds.items():
            if d not in op.sizes:
                notes.append(f"constraint {ax}: {d}={b} dropped (no dimension {d})")
                continue
            axis = arch.fanout_axes().get(ax, (None, None))[1] if arch is not None else None
            if d not in op.output.dims and axis is not None and not axis.reduce:
                notes.append(f"constraint {ax}: {d}={b} dropped ({d} is reduced here and {ax} cannot reduce)")
                continue
            # An output dim pads to whole spatial rounds (as ZigZag does); a reduced dim must
            # divide (spatial reductions are complete), so it takes the largest divisor.
            fit = min(b, op.sizes[d]) if d in op.output.dims else max(x for x in divisors(op.sizes[d]) if x <= b)
            if fit != b:
                notes.append(f"constraint {ax}: {d}={b} unrolls {d}={fit} ({d} is {op.sizes[d]})")
            elif op.sizes[d] % b:
                notes.append(f"constraint {ax}: {d}={b} pads {d}={op.sizes[d]} to {-(-op.sizes[d] // b) * b}")
            spatial[ax][d] = fit
    names = set(op.dim_names)
    orders = {lv: tuple(d for d in o if d in names) for lv, o in cons.orders.items()}
    forbid = {lv: tuple(t for t in (tuple(d for d in s if d in names) for s in seqs) if t)
              for lv, seqs in cons.forbid_orders.items()}
    operands = {o.name for o in op.operands}
    keep = {lv: frozenset(k & operands) for lv, k in cons.keep.items()}
    if orders != cons.orders or forbid != cons.forbid_orders or keep != cons.keep:
        notes.append("orders/keep constraints restricted to this layer's dimensions and operands")
    return replace(cons, spatial=spatial, orders=orders, forbid_orders=forbid, keep=keep), tuple(notes)
