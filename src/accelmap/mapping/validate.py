"""Validity of a mapping for an operator on an accelerator, with precise errors."""

from __future__ import annotations

import math
from collections import defaultdict

from accelmap.arch.accelerator import Accelerator
from accelmap.arch.units import format_bits
from accelmap.errors import MappingError
from accelmap.mapping.loopnest import Mapping
from accelmap.workload.index_sets import tile_size
from accelmap.workload.operator import Operator


def dim_loops(mapping: Mapping, dim: str) -> list:
    return [l for l in mapping.loops if l.dim == dim]


def check_structure(op: Operator, arch: Accelerator, m: Mapping) -> None:
    """Everything but capacity: names, order, coverage, fan-outs, bypass, precision."""
    nlev = len(arch.levels)
    if len(m.keep) != nlev:
        raise MappingError(f"mapping keeps operands for {len(m.keep)} levels; {arch.name} has {nlev} "
                           f"({', '.join(lv.name for lv in arch.levels)})")
    names = {o.name for o in op.operands}
    for i, (lv, keep) in enumerate(zip(arch.levels, m.keep, strict=True)):
        unknown = set(keep) - names
        if unknown:
            raise MappingError(f"level {lv.name} keeps {sorted(unknown)}, which {op.name} does not have "
                               f"(operands: {', '.join(sorted(names))})")
        for o in op.operands:
            if o.name in keep and o.cls not in lv.holds:
                raise MappingError(f"level {lv.name} cannot keep {o.name}: it holds classes "
                                   f"{'/'.join(lv.holds)}, {o.name} is class {o.cls}")
            if i == 0 and o.name not in keep:
                raise MappingError(f"the outermost level {lv.name} must keep every operand; {o.name} is missing")
            if not lv.bypass and o.cls in lv.holds and o.name not in keep:
                raise MappingError(f"level {lv.name} cannot be bypassed, but {o.name} (class {o.cls}) is not kept")
    axes = arch.fanout_axes()
    prev = (-1, False)
    per_axis: dict[str, int] = defaultdict(lambda: 1)
    for k, l in enumerate(m.loops):
        if l.dim not in op.sizes:
            raise MappingError(f"loop {k + 1} iterates {l.dim!r}, which is not a dimension of {op.name} "
                               f"({', '.join(op.dim_names)})")
        if not isinstance(l.bound, int) or l.bound < 1:
            raise MappingError(f"loop {k + 1} ({l.dim}) has bound {l.bound!r}; bounds are positive integers")
        if not 0 <= l.level < nlev:
            raise MappingError(f"loop {k + 1} ({l.dim}) is at level {l.level}; levels are 0..{nlev - 1}")
        lv = arch.levels[l.level]
        if l.spatial:
            if lv.fanout is None:
                raise MappingError(f"spatial loop {l.dim}{l.bound} at level {lv.name}, which has no fan-out below it")
            if l.axis not in {a.name for a in lv.fanout.axes}:
                raise MappingError(f"spatial loop {l.dim}{l.bound} at level {lv.name} uses axis {l.axis!r}; "
                                   f"that fan-out has axes {', '.join(a.name for a in lv.fanout.axes)}")
            per_axis[l.axis] *= l.bound
        pos = (l.level, l.spatial)
        if pos < prev:
            raise MappingError(f"loop {k + 1} ({l.dim}{l.bound} at {lv.name}) is out of order: loops go outermost "
                               "level first, and within a level temporal loops come before spatial ones")
        prev = pos
    for ax, prod in per_axis.items():
        size = axes[ax][1].size
        if prod > size:
            raise MappingError(f"fan-out exceeded: spatial loops on axis {ax} multiply to {prod}, "
                               f"the axis has {size} instances")
        if not axes[ax][1].reduce:
            red = [l.dim for l in m.loops if l.axis == ax and l.bound > 1 and l.dim not in op.output.dims]
            if red:
                raise MappingError(f"axis {ax} cannot reduce partial sums, but spatial loops over "
                                   f"{', '.join(red)} (not indices of {op.output.name}) are placed on it")
    for d, size in op.dims:
        loops = dim_loops(m, d)
        prod = math.prod(l.bound for l in loops)
        if prod < size:
            raise MappingError(f"dimension {d} has size {size} but its loops multiply to {prod}: "
                               f"factors {[l.bound for l in loops]} do not cover it")
        # An iteration that is never valid (its first point is already past the
        # end of the dimension) does no work at any time: it would only inflate
        # the schedule. Partial tiles and idle instances in the last round are fine.
        stride = prod
        for l in loops:
            stride //= l.bound
            if (l.bound - 1) * stride >= size:
                raise MappingError(
                    f"dimension {d} (size {size}): loop {d}{l.bound} at {arch.levels[l.level].name} has "
                    f"iterations that never touch a valid {d} (iteration {l.bound - 1} starts at "
                    f"{(l.bound - 1) * stride}); use a bound of at most {-(-size // stride)}")
    for l in m.loops:
        if l.spatial and l.bound > 1 and l.dim in shared_axis_dims(op, arch, l.axis):
            holders = [lv.name for lv in arch.levels if l.axis in lv.shared_axes]
            raise MappingError(
                f"spatial loop {l.dim}{l.bound} on axis {l.axis}: {', '.join(holders)} is shared along {l.axis}, one "
                f"instance holding one tile for the whole axis, so the axis may only run over dims its operands "
                f"do not use (a reduction into it, an input multicast from it); {l.dim} indexes them")
    out_dims = op.output.dims
    for k, l in enumerate(m.loops):
        if not l.spatial or l.bound == 1 or l.dim in out_dims:
            continue
        # A spatial reduction whose last round leaves some PEs idle would drain
        # their partial sums at other times than their neighbours', splitting
        # one reduced update into several: the reduction must be complete.
        span = math.prod(x.bound for x in m.loops[k:] if x.dim == l.dim)
        if op.sizes[l.dim] % span:
            raise MappingError(
                f"spatial reduction over {l.dim} on axis {l.axis} must be complete: the {l.dim} loops from "
                f"{l.dim}{l.bound}@{l.axis} inward span {span}, which does not divide {l.dim}={op.sizes[l.dim]}")
    check_precision(op, arch)


def shared_axis_dims(op: Operator, arch: Accelerator, axis: str | None) -> frozenset[str]:
    """Dims a spatial loop on ``axis`` may not run over: those used by an operand of a class that a level
    shared along the axis holds (``shared_along``: its one instance holds one tile for the whole axis)."""
    classes = {c for lv in arch.levels if axis in lv.shared_axes for c in lv.holds}
    return frozenset(d for o in op.operands if o.cls in classes for d in o.dims)


def check_precision(op: Operator, arch: Accelerator) -> None:
    """Every operand at a precision the compute unit supports for its class."""
    for o in op.operands:
        ok = arch.compute.supported_bits(o.cls)
        if o.bits not in ok:
            raise MappingError(f"operand {o.name} is {o.bits}-bit, but {arch.name} computes class {o.cls} "
                               f"at {'/'.join(map(str, ok))} bits")


def tile_extents(op: Operator, m: Mapping, level: int, arch: Accelerator | None = None) -> dict[str, int]:
    """Largest extent of every dim inside ``level`` (its own loops and below, and with ``arch`` the
    spatial loops on axes the level is shared along, ``Accelerator.inside``)."""
    ext = {d: 1 for d in op.dim_names}
    for l in m.loops:
        if l.level >= level if arch is None else arch.inside(level, l.level, l.axis):
            ext[l.dim] *= l.bound
    return {d: min(e, op.sizes[d]) for d, e in ext.items()}


def level_usage(op: Operator, lv, keep: frozenset[str], ext: dict[str, int],
                output_bits: int | None = None) -> dict[str, int]:
    """Bits a level must hold per kept operand for tile extents ``ext`` (double buffering counted).
    ``output_bits``: the output's bits per element there when the level holds it only as finished
    values (``finished_output_levels``); without it, the operand's own precision (partial sums), which
    is never less."""
    mult = 2 if lv.double_buffered else 1
    return {o.name: tile_size(o, ext) * (min(o.bits, output_bits) if o.is_output and output_bits else o.bits) * mult
            for o in op.operands if o.name in keep}


def finished_output_levels(op: Operator, arch: Accelerator, m: Mapping) -> tuple[bool, ...]:
    """Per level: does it hold the output only as finished values, stored at the output stage's precision
    (``compute.final_output_bits``), as ZigZag sizes them (a memory with no reduction loop at or above it
    holds final outputs, ``Mapping.get_psum_flags``)? Only with ``final_output_bits``. A level of the
    output's chain holds finished values iff no partial sum ever reaches it: every temporal loop of bound
    above 1 over a dim the output does not use lies inside the next level of the chain below it (which
    accumulates and hands up finished values; at the innermost level of the chain the compute accumulates
    into it, so there may be none), and every such spatial loop lies inside it (reduced in a fan-out
    below it, not across instances of it)."""
    n = len(arch.levels)
    X = op.output
    if arch.compute.final_output_bits is None:
        return (False,) * n
    chain = [i for i in range(n) if X.name in m.keep[i]]
    reductions = [l for l in m.loops if l.bound > 1 and l.dim not in X.dims]
    out = [False] * n
    for k, i in enumerate(chain):
        below = chain[k + 1] if k + 1 < len(chain) else None
        out[i] = all(arch.inside(i, l.level, l.axis) if l.spatial else below is not None and l.level >= below
                     for l in reductions)
    return tuple(out)


def tile_fits(op: Operator, arch: Accelerator, keep: frozenset[str], level: int, ext: dict[str, int]) -> bool:
    """Does a tile of these extents fit the level (per partition, or in its shared capacity)?"""
    lv = arch.levels[level]
    use = level_usage(op, lv, keep, ext)
    if lv.partitions:
        by_cls: dict[str, int] = defaultdict(int)
        for name, bits in use.items():
            by_cls[op.operand(name).cls] += bits
        return all(bits <= lv.partition_bits(c) for c, bits in by_cls.items())
    return lv.capacity_bits is None or sum(use.values()) <= lv.capacity_bits


def capacity_usage(op: Operator, arch: Accelerator, m: Mapping) -> list[dict[str, int]]:
    """Bits each level must hold per kept operand (double buffering counted; finished outputs at the output
    stage's precision, ``finished_output_levels``)."""
    fb = arch.compute.final_output_bits
    finished = finished_output_levels(op, arch, m)
    return [level_usage(op, lv, m.keep[i], tile_extents(op, m, i, arch), fb if finished[i] else None)
            for i, lv in enumerate(arch.levels)]


def check_capacity(op: Operator, arch: Accelerator, m: Mapping) -> None:
    for lv, use in zip(arch.levels, capacity_usage(op, arch, m), strict=True):
        db = " (double-buffered: 2 tiles)" if lv.double_buffered else ""
        if lv.partitions:
            by_cls: dict[str, int] = defaultdict(int)
            for name, bits in use.items():
                by_cls[op.operand(name).cls] += bits
            for cls, bits in by_cls.items():
                cap = lv.partition_bits(cls)
                if bits > cap:
                    who = ", ".join(n for n in use if op.operand(n).cls == cls)
                    raise MappingError(f"capacity exceeded at {lv.name}, partition {cls} ({who}): needs "
                                       f"{bits} bits ({format_bits(bits)}){db}, has {cap} bits ({format_bits(cap)})")
        elif lv.capacity_bits is not None:
            total = sum(use.values())
            if total > lv.capacity_bits:
                parts = ", ".join(f"{n} {b}" for n, b in use.items())
                raise MappingError(f"capacity exceeded at {lv.name}: needs {total} bits ({parts}){db}, "
                                   f"has {lv.capacity_bits} bits ({format_bits(lv.capacity_bits)})")


def validate(op: Operator, arch: Accelerator, m: Mapping) -> None:
    check_structure(op, arch, m)
    check_capacity(op, arch, m)
