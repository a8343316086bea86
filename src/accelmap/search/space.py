"""The mapping search space and user constraints.

A mapping is chosen level by level. At level ``i`` every dimension gets a
temporal bound and one bound per axis of the fan-out below level ``i``; the
product of a dimension's bounds over all levels is its size (perfect factors).
Bypass choices (which held operands each level keeps) are enumerated outside.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any

from accelmap.arch.accelerator import Accelerator
from accelmap.arch.units import format_bits
from accelmap.errors import SpecError
from accelmap.mapping.loopnest import Mapping
from accelmap.mapping.sampling import divisors
from accelmap.mapping.validate import level_usage, tile_fits
from accelmap.workload.operator import Operator


@dataclass(frozen=True)
class Constraints:
    """User constraints, from the ``constraints:`` section of a mapping YAML.

    spatial:        axis -> {dim: bound}; the axis unrolls exactly these (others get 1)
    orders:         level -> dims outer to inner; loops of that level follow this relative order
    forbid_orders:  level -> list of dim sequences that the level's order may not be
    keep:           level -> operands it must keep (bypass fixed)
    min_utilization: lower bound on spatial utilization (used PEs / available)
    """

    spatial: dict[str, dict[str, int]] = field(default_factory=dict)
    orders: dict[str, tuple[str, ...]] = field(default_factory=dict)
    forbid_orders: dict[str, tuple[tuple[str, ...], ...]] = field(default_factory=dict)
    keep: dict[str, frozenset[str]] = field(default_factory=dict)
    min_utilization: float = 0.0

    def check(self, op: Operator, arch: Accelerator, source: str = "constraints") -> None:
        axes = arch.fanout_axes()
        levels = {lv.name for lv in arch.levels}
        for ax, dims in self.spatial.items():
            if ax not in axes:
                raise SpecError(f"unknown fan-out axis {ax!r}; {arch.name} has {', '.join(axes) or 'none'}",
                                where=f"{source}.spatial")
            for d, b in dims.items():
                if d not in op.sizes:
                    raise SpecError(f"axis {ax}: {d!r} is not a dimension of {op.name}", where=f"{source}.spatial")
                if b > 1 and d not in op.output.dims and not axes[ax][1].reduce:
                    raise SpecError(f"axis {ax}: {d} does not index the output {op.output.name}, so unrolling it "
                                    f"reduces partial sums across the axis, and {ax} cannot reduce",
                                    where=f"{source}.spatial")
                if b > op.sizes[d]:
                    raise SpecError(f"axis {ax}: {d}={b} exceeds {d}={op.sizes[d]}", where=f"{source}.spatial")
                # A bound that does not divide pads the dim (the last spatial round is partial);
                # a spatial reduction must be complete, so reduced dims must divide.
                if op.sizes[d] % b and d not in op.output.dims:
                    raise SpecError(f"axis {ax}: {d}={b} does not divide {d}={op.sizes[d]}, and {d} is reduced "
                                    f"spatially (it does not index the output), which must be complete",
                                    where=f"{source}.spatial")
            if math.prod(dims.values()) > axes[ax][1].size:
                raise SpecError(f"axis {ax}: unrolling {dims} exceeds its {axes[ax][1].size} instances",
                                where=f"{source}.spatial")
        for key in (*self.orders, *self.forbid_orders, *self.keep):
            if key not in levels:
                raise SpecError(f"unknown level {key!r}; {arch.name} has {', '.join(levels)}", where=source)
        if not 0.0 <= self.min_utilization <= 1.0:
            raise SpecError(f"min_utilization must be within 0..1, got {self.min_utilization}", where=source)


    def violation(self, m: Mapping, arch: Accelerator) -> str | None:
        """Why mapping ``m`` breaks these constraints, or None (for searches that sample freely)."""
        got: dict[str, dict[str, int]] = {}
        for l in m.loops:
            if l.axis is not None and l.bound > 1:   # spatial
                got.setdefault(l.axis, {})[l.dim] = got.get(l.axis, {}).get(l.dim, 1) * l.bound
        for ax, want in self.spatial.items():
            if got.get(ax, {}) != {d: b for d, b in want.items() if b > 1}:
                return f"axis {ax} unrolls {got.get(ax, {})}, the constraints ask {want}"
        for i, lv in enumerate(arch.levels):
            if lv.name in self.keep and m.keep[i] != self.keep[lv.name]:
                return f"{lv.name} keeps {sorted(m.keep[i])}, the constraints ask {sorted(self.keep[lv.name])}"
            seq = tuple(l.dim for l in m.loops_at(i) if not l.spatial and l.bound > 1)
            if lv.name in self.orders:
                order = self.orders[lv.name]
                mine = [d for d in seq if d in order]
                if mine != [d for d in order if d in seq]:
                    return f"{lv.name} orders {seq}, the constraints ask {order}"
            if seq in self.forbid_orders.get(lv.name, ()):
                return f"{lv.name} orders {seq}, which the constraints forbid"
        if self.min_utilization and m.spatial_product() < self.min_utilization * arch.num_pes:
            return f"it unrolls {m.spatial_product()} PEs, under min_utilization {self.min_utilization}"
        return None


def infeasibility(op: Operator, arch: Accelerator, cons: Constraints) -> str | None:
    """Why no mapping of ``op`` can fit ``arch``, found from minimum footprints alone, or None.

    The outermost level holds every operand whole; any other level holds at least one element of
    each operand it keeps (twice if double-buffered). A level that cannot bypass, or whose bypass
    the constraints fix, and whose smallest allowed footprint exceeds its capacity, rules out every
    mapping.
    """
    per_level = keep_choices(op, arch, cons)
    for i, lv in enumerate(arch.levels):
        ext = dict(op.sizes) if i == 0 else {d: 1 for d in op.dim_names}
        fits = [k for k in per_level[i] if tile_fits(op, arch, k, i, ext)]
        if fits:
            continue
        keep = min(per_level[i], key=lambda k: sum(level_usage(op, lv, k, ext).values()))
        use = level_usage(op, lv, keep, ext)
        what = "whole operands" if i == 0 else "one element of each kept operand"
        parts = ", ".join(f"{n} {format_bits(b)}" for n, b in use.items())
        db = ", double-buffered" if lv.double_buffered else ""
        cap = lv.capacity_bits if not lv.partitions else None
        has = format_bits(cap) if cap is not None else "its partitions (" + ", ".join(
            f"{c} {format_bits(lv.capacity_for(c))}" for c in sorted({op.operand(n).cls for n in use})) + ")"
        why = "it is the outermost level" if i == 0 else (
            "the constraints fix what it keeps" if lv.name in cons.keep else "it cannot be bypassed")
        return (f"{op.name} cannot be mapped on {arch.name}: level {lv.name} must hold {what} ({why}): "
                f"{parts}{db}, {format_bits(sum(use.values()))} in all; it has {has}")
    return None


def constraints_from_yaml(data: Any, source: str = "constraints") -> Constraints:
    if data is None:
        return Constraints()
    if not isinstance(data, dict):
        raise SpecError("constraints must be a mapping", where=source)
    bad = set(data) - {"spatial", "orders", "forbid_orders", "keep", "min_utilization"}
    if bad:
        raise SpecError(f"unknown keys {sorted(bad)}; allowed: spatial, orders, forbid_orders, keep, min_utilization",
                        where=source)

    def table(key, conv):
        v = data.get(key) or {}
        if not isinstance(v, dict):
            raise SpecError(f"'{key}' must map names to values", where=f"{source}.{key}")
        try:
            return {str(k): conv(x) for k, x in v.items()}
        except (TypeError, ValueError) as e:
            raise SpecError(f"'{key}' has a malformed entry: {e}", where=f"{source}.{key}") from None

    return Constraints(
        spatial=table("spatial", lambda x: {str(d): int(b) for d, b in dict(x).items()}),
        orders=table("orders", lambda x: tuple(str(d) for d in x)),
        forbid_orders=table("forbid_orders", lambda x: tuple(tuple(str(d) for d in seq) for seq in x)),
        keep=table("keep", lambda x: frozenset(str(o) for o in x)),
        min_utilization=_fraction(data.get("min_utilization", 0.0), f"{source}.min_utilization"))


def _fraction(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(f"must be a number within 0..1, got {str(value)[:40]!r}", where=where)
    return float(value)


def keep_options(op: Operator, arch: Accelerator, cons: Constraints) -> list[tuple[frozenset[str], ...]]:
    """Every bypass configuration the accelerator and the constraints allow."""
    return [tuple(k) for k in itertools.product(*keep_choices(op, arch, cons))]


def keep_choices(op: Operator, arch: Accelerator, cons: Constraints) -> list[list[frozenset[str]]]:
    """Per level, the sets of operands it may keep."""
    per_level = []
    for i, lv in enumerate(arch.levels):
        held = [o.name for o in op.operands if o.cls in lv.holds]
        if lv.name in cons.keep:
            per_level.append([cons.keep[lv.name]])
        elif i == 0 or not lv.bypass:
            per_level.append([frozenset(held)])
        else:
            per_level.append([frozenset(c) for r in range(len(held) + 1) for c in itertools.combinations(held, r)])
    return per_level


def level_axes(arch: Accelerator, i: int) -> list[tuple[str, int, bool, bool]]:
    fan = arch.levels[i].fanout
    return [(a.name, a.size, a.multicast, a.reduce) for a in fan.axes] if fan else []


def factor_choices(remaining: int, axes: list[tuple[str, int, bool, bool]], dim: str, out_dims: frozenset[str],
                   cons: Constraints, last_level: bool) -> list[tuple[int, tuple[int, ...]]]:
    """(temporal bound, spatial bound per axis) for one dimension at one level.

    At the outermost level the temporal bound takes everything that is left.
    A dimension that does not index the output can only go on axes that reduce.
    """
    spatial_opts = []
    for name, size, _, reduce in axes:
        if name in cons.spatial:
            b = cons.spatial[name].get(dim, 1)
            spatial_opts.append([b] if remaining % b == 0 else [])
        elif dim not in out_dims and not reduce:
            spatial_opts.append([1])
        else:
            spatial_opts.append([b for b in divisors(remaining) if b <= size])
    out = []
    for sp in itertools.product(*spatial_opts):
        rest = remaining // math.prod(sp) if remaining % math.prod(sp) == 0 else 0
        if not rest:
            continue
        if last_level:
            out.append((rest, sp))
        else:
            out.extend((t, sp) for t in divisors(rest))
    return out
