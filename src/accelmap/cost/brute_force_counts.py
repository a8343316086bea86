"""Brute-force twin of the analytical access counts.

Runs the mapped loop nest point by point on a small problem, keeps the
resident set of every buffer instance, and counts fills, reads, updates and
drains by watching those sets change. It shares no counting code with
``access_counts.py``; the property tests require both to agree exactly.
Cost grows with the number of iteration points: use it on small problems.
"""

from __future__ import annotations

import itertools
from collections import defaultdict

from accelmap.arch.accelerator import Accelerator
from accelmap.cost.model import Counts
from accelmap.mapping.loopnest import Mapping, loop_strides
from accelmap.workload.operator import Operand, Operator


def _points(op: Operator, m: Mapping):
    """Yield (loop index values, dim values or None if invalid) in execution order."""
    strides = loop_strides(m)
    for idx in itertools.product(*(range(l.bound) for l in m.loops)):
        x = dict.fromkeys(op.dim_names, 0)
        for l, i, s in zip(m.loops, idx, strides, strict=True):
            x[l.dim] += i * s
        valid = all(x[d] < op.sizes[d] for d in op.dim_names)
        yield idx, (x if valid else None)


def _element(X: Operand, x: dict) -> tuple:
    return tuple(sum(c * x[d] for d, c in ix.terms) for ix in X.indices)


def _without_spanned_halo(X: Operand, els: set, axis_values: list[set]) -> set:
    """A tile's elements less the padded halo of every axis the tile spans whole (``padding: generated``:
    such a tile moves the stored rows only)."""
    for k, values in enumerate(axis_values):
        if {e[k] for e in els} == values:
            lo, n = X.pad_lo[k], X.shape[k] if X.shape else max(values) + 1
            els = {e for e in els if lo <= e[k] < lo + n}
    return els


def reference_counts(op: Operator, arch: Accelerator, m: Mapping) -> dict[tuple[int, str], Counts]:
    nlev = len(arch.levels)
    loops = m.loops
    pts = list(_points(op, m))
    counts = {(i, o.name): Counts() for i in range(nlev) for o in op.operands if o.name in m.keep[i]}
    init_read = op.init_output == "read"

    for X in op.operands:
        chain = [i for i in range(nlev) if X.name in m.keep[i]]
        # every value each axis of X takes over the whole run
        axis_values = [{_element(X, x)[k] for _, x in pts if x is not None} for k in range(len(X.indices))]

        def mergeable(k: int, lo: int, hi: int, *, X: Operand = X) -> bool:
            l = loops[k]
            # between lo and hi: inside lo's tiles, above hi's (a shared level holds its axes' loops)
            if not l.spatial or not arch.inside(lo, l.level, l.axis) or arch.inside(hi, l.level, l.axis) \
                    or l.dim in X.dims:
                return False
            return X.is_output or arch.fanout_axis(l.level, l.axis).multicast

        def lineage(idx: tuple, level: int, *, X: Operand = X) -> tuple:
            # Branch of spatial reductions above ``level``; the all-zero branch
            # is the one that carries an initial output value in.
            return tuple(i for k, i in enumerate(idx)
                         if loops[k].spatial and not arch.inside(level, loops[k].level, loops[k].axis)
                         and loops[k].dim not in X.dims)

        started: dict[int, set] = defaultdict(set)   # per level: (lineage, element) with a partial sum

        def needs_read(level: int, lin: tuple, e: tuple, *, started: dict[int, set] = started) -> bool:
            """Does entering (lin, e) below ``level`` need the partial sum or initial value from above?"""
            key = (lin, e)
            if key in started[level]:
                return True
            started[level].add(key)
            return init_read and all(v == 0 for v in lin)

        for p, c in itertools.pairwise(chain):
            outer = [k for k, l in enumerate(loops) if not arch.inside(c, l.level, l.axis)]
            t_pos = [k for k in outer if not loops[k].spatial]
            s_pos = [k for k in outer if loops[k].spatial]
            g_pos = [k for k in s_pos if not mergeable(k, p, c)]
            tiles: dict[tuple, dict[tuple, set]] = defaultdict(lambda: defaultdict(set))
            times = sorted(set(tuple(idx[k] for k in t_pos) for idx, _ in pts))
            insts = sorted(set(tuple(idx[k] for k in s_pos) for idx, _ in pts))
            for idx, x in pts:
                when = tuple(idx[k] for k in t_pos)
                inst = tuple(idx[k] for k in s_pos)
                tiles[when][inst]  # an instance with no valid point holds an empty tile
                if x is not None:
                    tiles[when][inst].add(_element(X, x))
            if arch.padding_generated and X.pad_lo and any(X.pad_lo):
                for per_inst in tiles.values():
                    for inst, els in per_inst.items():
                        per_inst[inst] = _without_spanned_halo(X, els, axis_values)
            resident: dict[tuple, set] = {inst: set() for inst in insts}
            group_of = {inst: tuple(v for k, v in zip(s_pos, inst, strict=True) if k in g_pos) for inst in insts}
            for t in times + [None]:    # None: the end of the run, when every tile leaves
                arrivals: dict[tuple, set] = defaultdict(set)
                leaving: dict[tuple, set] = defaultdict(set)
                for inst in insts:
                    new = tiles[t][inst] if t is not None else set()
                    old = resident[inst]
                    arr, lev = new - old, old - new
                    g = group_of[inst]
                    arrivals[g] |= arr
                    leaving[g] |= lev
                    if X.is_output:
                        counts[(c, X.name)].drains += len(lev)
                    elif t is not None:
                        counts[(c, X.name)].fills += len(arr)
                    resident[inst] = new
                for els in leaving.values():
                    if X.is_output:
                        counts[(p, X.name)].updates += len(els)
                if t is None:
                    continue
                for g, els in arrivals.items():
                    if not X.is_output:
                        counts[(p, X.name)].reads += len(els)
                        continue
                    # Any member's index suffices for the lineage: members differ only in merged loops.
                    member = next(i for i in insts if group_of[i] == g)
                    full = [0] * len(loops)
                    for k, v in zip(s_pos, member, strict=True):
                        full[k] = v
                    lin = lineage(tuple(full), p)
                    for e in els:
                        if needs_read(c, lin, e):
                            counts[(p, X.name)].reads += 1
                            counts[(c, X.name)].fills += 1

        # The compute unit: one access per MAC per group, no stationarity.
        last = chain[-1]
        t_pos = [k for k, l in enumerate(loops) if not l.spatial]
        g_pos = [k for k, l in enumerate(loops) if l.spatial and not mergeable(k, last, nlev)]
        seen = set()
        for idx, x in pts:
            if x is None:
                continue
            key = (tuple(idx[k] for k in t_pos), tuple(idx[k] for k in g_pos))
            if key in seen:
                continue
            seen.add(key)
            if X.is_output:
                counts[(last, X.name)].updates += 1
                if needs_read(nlev, lineage(idx, last), _element(X, x)):
                    counts[(last, X.name)].reads += 1
            else:
                counts[(last, X.name)].reads += 1
    return counts
