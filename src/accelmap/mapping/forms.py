"""Readable text form (a Timeloop-like loop nest print) and YAML form of a mapping.

Both round-trip: ``parse_text(format_text(m)) == m`` and
``mapping_from_yaml(mapping_to_yaml(m)) == m``.
"""

from __future__ import annotations

import re
from typing import Any

from accelmap.arch.accelerator import Accelerator
from accelmap.errors import SpecError
from accelmap.mapping.loopnest import Loop, Mapping
from accelmap.workload.layouts import layouts_from_names
from accelmap.workload.operator import Operator


def format_text(m: Mapping, arch: Accelerator, op: Operator | None = None) -> str:
    order = [o.name for o in op.operands] if op else None
    lines = []
    for i, lv in enumerate(arch.levels):
        kept = sorted(m.keep[i], key=(order.index if order else str))
        lines.append(f"{'  ' * i}{lv.name} [ {' '.join(kept)} ]")
        for l in m.loops_at(i):
            kw = "spatial-for" if l.spatial else "for"
            axis = f" @{l.axis}" if l.spatial else ""
            lines.append(f"{'  ' * i}| {kw} {l.dim} in [0:{l.bound}){axis}")
    lines.append(f"{'  ' * len(arch.levels)}<< MAC >>")
    return "\n".join(lines)


_HEAD = re.compile(r"^([A-Za-z_][\w.-]*)\s*\[\s*([^\]]*)\]\s*$")
_LOOP = re.compile(r"^\|?\s*(for|spatial-for)\s+([A-Za-z_]\w*)\s+in\s+\[\s*0\s*:\s*(\d+)\s*\)\s*(?:@\s*(\w+))?\s*$")


def parse_text(text: str, arch: Accelerator, source: str = "<text>") -> Mapping:
    keep: dict[int, frozenset[str]] = {}
    loops: list[Loop] = []
    level = None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#") or line == "<< MAC >>":
            continue
        where = f"{source}: line {n}"
        h = _HEAD.match(line)
        if h:
            try:
                level = arch.level_index(h.group(1))
            except KeyError:
                raise SpecError(f"unknown level {h.group(1)!r}; {arch.name} has "
                                f"{', '.join(lv.name for lv in arch.levels)}", where=where) from None
            if level in keep:
                raise SpecError(f"level {h.group(1)} appears twice", where=where)
            keep[level] = frozenset(h.group(2).split())
            continue
        lm = _LOOP.match(line)
        if not lm:
            raise SpecError(f"cannot read {line!r}; expected 'LEVEL [ operands ]', "
                            "'for D in [0:B)' or 'spatial-for D in [0:B) @AXIS'", where=where)
        if level is None:
            raise SpecError("a loop before any level header", where=where)
        kw, dim, bound, axis = lm.groups()
        if (kw == "spatial-for") != (axis is not None):
            raise SpecError("a spatial-for needs '@AXIS' and a plain for must not have one", where=where)
        loops.append(Loop(dim, int(bound), level, axis))
    missing = [lv.name for i, lv in enumerate(arch.levels) if i not in keep]
    if missing:
        raise SpecError(f"no header for levels {missing}; every level of {arch.name} needs "
                        "'NAME [ kept operands ]'", where=source)
    return Mapping(tuple(loops), tuple(keep[i] for i in range(len(arch.levels))))


def mapping_to_yaml(m: Mapping, arch: Accelerator) -> dict[str, Any]:
    out = []
    for i, lv in enumerate(arch.levels):
        ent: dict[str, Any] = {"level": lv.name, "keep": sorted(m.keep[i])}
        t = [[l.dim, l.bound] for l in m.loops_at(i) if not l.spatial]
        s = [[l.dim, l.bound, l.axis] for l in m.loops_at(i) if l.spatial]
        if t:
            ent["temporal"] = t
        if s:
            ent["spatial"] = s
        out.append(ent)
    return {"mapping": out}


def _pair(x, where: str, spatial: bool) -> tuple:
    n = 3 if spatial else 2
    form = "[DIM, BOUND, AXIS]" if spatial else "[DIM, BOUND]"
    if not isinstance(x, (list, tuple)) or len(x) != n:
        raise SpecError(f"{x!r} is not a loop; write {form}", where=where)
    if not isinstance(x[0], str) or not isinstance(x[1], int) or isinstance(x[1], bool) or x[1] < 1:
        raise SpecError(f"{x!r} is not a loop; write {form} with a positive integer bound", where=where)
    if spatial and not isinstance(x[2], str):
        raise SpecError(f"{x!r}: the axis must be a name", where=where)
    return tuple(x)


def mapping_from_yaml(data: Any, arch: Accelerator, source: str = "<yaml>", op: Operator | None = None) -> Mapping:
    """A mapping from its YAML form. An entry without ``keep`` keeps every operand of ``op`` whose class
    the level holds; without ``op`` the default is the class names, which are the operand names of a
    convolution but not of a gemm (A, B, O), so callers that know the operator should pass it."""
    if not isinstance(data, dict) or "mapping" not in data:
        raise SpecError("a mapping file needs a top-level key 'mapping' with one entry per level", where=source)
    extra = set(data) - {"mapping", "constraints", "comment", "layouts"}
    if extra:
        raise SpecError(f"unknown top-level keys {sorted(extra, key=str)}; allowed: mapping, constraints, comment, "
                        "layouts", where=source)
    entries = data["mapping"]
    if not isinstance(entries, list):
        raise SpecError("'mapping' must be a list, one entry per level", where=f"{source}: mapping")
    keep: dict[int, frozenset[str]] = {}
    loops: list[Loop] = []
    seen_level = -1
    for k, ent in enumerate(entries):
        where = f"{source}: mapping[{k}]"
        if not isinstance(ent, dict):
            raise SpecError("each entry must be a mapping with keys level, keep, temporal, spatial", where=where)
        bad = set(ent) - {"level", "keep", "temporal", "spatial"}
        if bad:
            raise SpecError(f"unknown keys {sorted(bad, key=str)}; allowed: level, keep, temporal, spatial", where=where)
        if "level" not in ent:
            raise SpecError("'level' is required", where=where)
        try:
            li = arch.level_index(ent["level"])
        except KeyError:
            raise SpecError(f"unknown level {ent['level']!r}; {arch.name} has "
                            f"{', '.join(lv.name for lv in arch.levels)}", where=f"{where}.level") from None
        if li <= seen_level:
            raise SpecError(f"level {ent['level']} is listed out of order or twice; list levels outermost first",
                            where=f"{where}.level")
        seen_level = li
        if "keep" in ent:
            kp = ent["keep"]
        elif op is not None:
            kp = [o.name for o in op.operands if o.cls in arch.levels[li].holds]
        else:
            kp = list(arch.levels[li].holds)
        if not isinstance(kp, list) or not all(isinstance(x, str) for x in kp):
            raise SpecError(f"'keep' must be a list of operand names, got {kp!r}", where=f"{where}.keep")
        keep[li] = frozenset(kp)
        for kind in ("temporal", "spatial"):
            if not isinstance(ent.get(kind) or [], list):
                raise SpecError(f"'{kind}' must be a list of loops, got {ent[kind]!r}", where=f"{where}.{kind}")
        for x in ent.get("temporal", []) or []:
            d, b = _pair(x, f"{where}.temporal", False)
            loops.append(Loop(d, b, li))
        for x in ent.get("spatial", []) or []:
            d, b, a = _pair(x, f"{where}.spatial", True)
            loops.append(Loop(d, b, li, a))
    missing = [lv.name for i, lv in enumerate(arch.levels) if i not in keep]
    if missing:
        raise SpecError(f"no entry for levels {missing}; list every level of {arch.name}", where=source)
    return Mapping(tuple(loops), tuple(keep[i] for i in range(len(arch.levels))))


def mapping_layouts(data: Any, op: Operator, source: str = "<yaml>") -> dict[str, tuple[int, ...]]:
    """The DRAM layouts a mapping file states (its optional ``layouts`` key: per operand its axes, named by their
    indices, outermost first), checked against ``op``; empty when it states none (the workload's order)."""
    if not isinstance(data, dict) or data.get("layouts") is None:
        return {}
    return layouts_from_names(op, data["layouts"], f"{source}: layouts")
