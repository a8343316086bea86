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
Operand and dimension names are ours unless ``names`` renames them (e.g.
``{"I": "Inputs", "W": "Weights", "O": "Outputs", "K": "M"}`` for Timeloop's
cnn-layer problem, whose output channels are M). ``timeloop_names`` gives the
data-space renames Timeloop's built-in problems expect.

``timeloop_problem_yaml`` writes the operator as a Timeloop problem (shape and
instance): each operand is a data space whose projection is its affine
index, one term list per axis, with every coefficient other than 1 declared
as a named coefficient. Timeloop reads padding and bit widths from elsewhere
(the index space is what both tools count; widths are the architecture's).
"""

from __future__ import annotations

from accelmap.arch.accelerator import Accelerator
from accelmap.errors import MappingError, SpecError
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


def _perm(dims: list[str], names: dict[str, str]) -> str:
    dims = [names.get(d, d) for d in dims]
    return "".join(dims) if all(len(d) == 1 for d in dims) else " ".join(dims)


def _factors(op: Operator, bounds: dict[str, int], names: dict[str, str]) -> str:
    return " ".join(f"{names.get(d, d)}={bounds.get(d, 1)}" for d in op.dim_names)


# Timeloop's built-in problems (cnn-layer and its variants) call the three data spaces these.
TIMELOOP_DATA_SPACES = {"I": "Inputs", "W": "Weights", "O": "Outputs"}


def timeloop_names(op: Operator) -> dict[str, str]:
    """Operand renames to Timeloop's data-space names, by class, when each class has one operand
    (a convolution, a dense layer, a GEMM); none otherwise."""
    classes = [o.cls for o in op.operands]
    if sorted(classes) != sorted(TIMELOOP_DATA_SPACES):
        return {}
    return {o.name: TIMELOOP_DATA_SPACES[o.cls] for o in op.operands}


def check_names(op: Operator, names: dict[str, str], where: str = "names") -> None:
    """Renames must name our operands or dims and give distinct names."""
    ours = [o.name for o in op.operands] + list(op.dim_names)
    unknown = sorted(set(names) - set(ours))
    if unknown:
        raise SpecError(f"cannot rename {', '.join(unknown)}: {op.name} has operands "
                        f"{', '.join(o.name for o in op.operands)} and dimensions {', '.join(op.dim_names)}",
                        where=where)
    final = [names.get(x, x) for x in ours]
    clash = sorted({x for x in final if final.count(x) > 1})
    if clash:
        raise SpecError(f"after renaming, {', '.join(clash)} names two operands or dimensions of {op.name}",
                        where=where)


def timeloop_directives(op: Operator, arch: Accelerator, m: Mapping,
                        names: dict[str, str] | None = None) -> list[dict]:
    """The mapping as Timeloop directives (plain dicts), outermost level first."""
    names = names or {}
    check_names(op, names)
    rename = lambda o: names.get(o, o)   # noqa: E731
    out: list[dict] = []
    for i, lv in enumerate(arch.levels):
        here = m.loops_at(i)
        temporal = _merge([l for l in here if not l.spatial], f"level {lv.name}, temporal")
        # Our loops are outermost first; Timeloop's permutation is innermost first.
        order = [d for d, _ in reversed(temporal)]
        bounds = dict(temporal)
        out.append({"target": lv.name, "type": "temporal", "factors": _factors(op, bounds, names),
                    "permutation": _perm(order + [d for d in op.dim_names if d not in bounds], names)})
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
            out.append({"target": lv.name, "type": "spatial", "factors": _factors(op, sb, names),
                        "permutation": _perm(xd + yd + [d for d in op.dim_names if d not in sb], names),
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


def timeloop_problem(op: Operator, names: dict[str, str] | None = None) -> dict:
    """The operator as Timeloop's problem description (a plain dict: ``{"problem": {shape, instance}}``)."""
    names = names or {}
    check_names(op, names)
    dim = lambda d: names.get(d, d)   # noqa: E731
    coefficients: dict[int, str] = {}
    spaces = []
    for o in sorted(op.operands, key=lambda o: o.is_output):    # Timeloop lists the output last
        projection = []
        for ix in o.indices:
            terms = []
            for d, c in ix.terms:
                if c == 1:
                    terms.append([dim(d)])
                else:
                    terms.append([dim(d), coefficients.setdefault(c, f"coef{c}")])
            projection.append(terms)
        space: dict = {"name": names.get(o.name, o.name), "projection": projection}
        if o.is_output:
            space["read-write"] = True
        spaces.append(space)
    shape = {"name": op.name, "dimensions": [dim(d) for d in op.dim_names],
             "coefficients": [{"name": n, "default": c} for c, n in sorted(coefficients.items())],
             "data-spaces": spaces}
    return {"problem": {"shape": shape, "instance": {dim(d): s for d, s in op.dims}}}


def timeloop_problem_yaml(op: Operator, names: dict[str, str] | None = None) -> str:
    import yaml

    head = (f"# {op.name}: {op.expression()}, exported by accelmap\n"
            "# (padding and bit widths are not part of a Timeloop problem; the index space is what both count)\n")
    return head + yaml.safe_dump(timeloop_problem(op, names), sort_keys=False, default_flow_style=None)
