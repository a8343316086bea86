"""A mapping as Timeloop's mapping YAML, so a mapping found here can be checked there.

Per level, outermost first, three directives:

* ``temporal``: ``factors`` gives every dimension's loop bound at this level
  (1 when it has no loop here); ``permutation`` lists the dimensions
  innermost first, as Timeloop reads it, the level's loops first and the
  unit-factor dimensions after them.
* ``spatial`` (levels with a fan-out): the bounds of the spatial loops on that
  fan-out. Timeloop's fan-outs are 2-D meshes: loops on our first axis go to X,
  loops on every further axis to Y; ``split`` is the number of X dimensions at
  the front of the permutation.
* ``bypass``: which operands the level keeps and which pass through it.

Timeloop allows one loop per dimension per level and direction, so two loops
of one dimension at one level are merged when adjacent and rejected otherwise;
one dimension on two fan-out axes mapped to both X and Y is rejected too.
Operand names are ours unless ``names`` renames them (e.g. ``{"I": "Inputs",
"W": "Weights", "O": "Outputs"}`` for Timeloop's conv problem).
"""

from __future__ import annotations

from accelmap.arch.accelerator import Accelerator
from accelmap.errors import MappingError
from accelmap.mapping.loopnest import Loop, Mapping
from accelmap.workload.operator import Operator


def _merge(loops: list[Loop], where: str) -> list[tuple[str, int]]:
    """Adjacent loops of one dim become one factor; a dim split by another dim cannot be expressed."""
    out: list[tuple[str, int]] = []
    for l in loops:
        if out and out[-1][0] == l.dim:
            out[-1] = (l.dim, out[-1][1] * l.bound)
        elif any(d == l.dim for d, _ in out):
            raise MappingError(f"{where}: dimension {l.dim} has two loops separated by others; Timeloop allows "
                               "one loop per dimension per level")
        else:
            out.append((l.dim, l.bound))
    return out


def _perm(dims: list[str]) -> str:
    return "".join(dims) if all(len(d) == 1 for d in dims) else " ".join(dims)


def _factors(op: Operator, bounds: dict[str, int]) -> str:
    return " ".join(f"{d}={bounds.get(d, 1)}" for d in op.dim_names)


def timeloop_directives(op: Operator, arch: Accelerator, m: Mapping,
                        names: dict[str, str] | None = None) -> list[dict]:
    """The mapping as Timeloop directives (plain dicts), outermost level first."""
    names = names or {}
    rename = lambda o: names.get(o, o)   # noqa: E731
    out: list[dict] = []
    for i, lv in enumerate(arch.levels):
        here = m.loops_at(i)
        temporal = _merge([l for l in here if not l.spatial], f"level {lv.name}, temporal")
        # Our loops are outermost first; Timeloop's permutation is innermost first.
        order = [d for d, _ in reversed(temporal)]
        bounds = dict(temporal)
        out.append({"target": lv.name, "type": "temporal", "factors": _factors(op, bounds),
                    "permutation": _perm(order + [d for d in op.dim_names if d not in bounds])})
        if lv.fanout:
            axes = [a.name for a in lv.fanout.axes]
            sp = [l for l in here if l.spatial]
            x = _merge([l for l in sp if l.axis == axes[0]], f"level {lv.name}, axis {axes[0]}")
            rank: dict[str | None, int] = {a: k for k, a in enumerate(axes)}
            y = _merge(sorted((l for l in sp if l.axis != axes[0]), key=lambda l: rank[l.axis]),
                       f"level {lv.name}, axes {', '.join(axes[1:])}")
            both = {d for d, _ in x} & {d for d, _ in y}
            if both:
                raise MappingError(f"level {lv.name}: dimension {sorted(both)[0]} is on fan-out axis {axes[0]} (X) "
                                   "and on another axis (Y); Timeloop maps a dimension to one of them")
            xd = [d for d, _ in reversed(x)]
            yd = [d for d, _ in reversed(y)]
            sb = dict(x + y)
            out.append({"target": lv.name, "type": "spatial", "factors": _factors(op, sb),
                        "permutation": _perm(xd + yd + [d for d in op.dim_names if d not in sb]),
                        "split": len(xd)})
        kept = [o.name for o in op.operands if o.name in m.keep[i]]
        passed = [o.name for o in op.operands if o.name not in m.keep[i]]
        out.append({"target": lv.name, "type": "bypass", "keep": [rename(o) for o in kept],
                    "bypass": [rename(o) for o in passed]})
    return out


def timeloop_yaml(op: Operator, arch: Accelerator, m: Mapping, names: dict[str, str] | None = None) -> str:
    """Timeloop mapping YAML text (``mapping:`` followed by one entry per directive)."""
    lines = [f"# {op.name} on {arch.name}, exported by accelmap", "mapping:"]
    for d in timeloop_directives(op, arch, m, names):
        lines.append(f"  - target: {d['target']}")
        lines.append(f"    type: {d['type']}")
        if d["type"] == "bypass":
            lines.append(f"    keep: [{', '.join(d['keep'])}]")
            lines.append(f"    bypass: [{', '.join(d['bypass'])}]")
            continue
        lines.append(f"    factors: {d['factors']}")
        lines.append(f"    permutation: {d['permutation']}")
        if d["type"] == "spatial":
            lines.append(f"    split: {d['split']}")
    return "\n".join(lines) + "\n"
