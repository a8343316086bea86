"""Strict YAML schema of an accelerator file and its conversion to ``Accelerator``.

Every error names the file, the field path (``levels[2].capacity``), the value,
and what would be valid. Unknown keys are errors: a typo must not silently
fall back to a default.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal, Union, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from accelmap.arch.accelerator import Accelerator, Compute, Fanout, FanoutAxis, Level, Pipeline, shared_port_refusal
from accelmap.arch.intrinsics import intrinsic_from_dict
from accelmap.arch.units import UnitError, parse_bandwidth_bits, parse_energy_pj, parse_size_bits, parse_width_bits
from accelmap.errors import SpecError
from accelmap.workload.operator import OPERAND_CLASSES
from accelmap.yaml_io import load_yaml

Quantity = Union[str, int, float]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)


class AxisSpec(_Strict):
    name: str
    size: int = Field(ge=1)
    multicast: bool = True
    reduce: bool = True


class FanoutSpec(_Strict):
    axes: list[AxisSpec] = Field(min_length=1)
    transfer_energy: Quantity = "0 pJ"


class LevelSpec(_Strict):
    name: str
    holds: list[Literal["I", "W", "O"]] = Field(min_length=1)
    capacity: Quantity | None = None
    partitions: dict[Literal["I", "W", "O"], Quantity] | None = None
    width: Quantity = "8 bit"
    read_energy: Quantity = "0 pJ"
    write_energy: Quantity | None = None
    read_bandwidth: Quantity = "unbounded"
    write_bandwidth: Quantity | None = None
    double_buffered: Union[bool, Literal["when_fits"]] = False
    written_at_clock_edge: bool = False
    refill_while_read: bool = False
    bypass: bool = True
    fanout: FanoutSpec | None = None
    transfer_setup_cycles: int = Field(default=0, ge=0)
    read_row_cycles: int = Field(default=0, ge=0)
    shared_port: bool = False
    access_granularity: Quantity | None = None
    stream_single_tile: bool = False
    shared_along: list[str] = []
    comment: str | None = None

    @field_validator("double_buffered", mode="before")
    @classmethod
    def _buffering(cls, v):
        if v is True or v is False or v == "when_fits":
            return v
        raise ValueError("must be true, false or when_fits (double-buffered when two of the mapping's tiles fit)")

    @field_validator("holds")
    @classmethod
    def _unique(cls, v):
        if len(set(v)) != len(v):
            raise ValueError(f"lists an operand class twice: {v}")
        return v


class PipelineSpec(_Strict):
    row_setup_cycles: int = Field(default=0, ge=0)
    result_overhead_cycles: int = Field(default=0, ge=0)
    streamed_dims: list[str] = []


class ComputeSpec(_Strict):
    mac_energy: Quantity
    macs_per_cycle: int = Field(default=1, ge=1)
    precision: dict[Literal["I", "W", "O"], Union[int, list[int]]] = {"I": 8, "W": 8, "O": 32}
    pipeline: PipelineSpec | None = None
    final_output_bits: int | None = Field(default=None, ge=1)
    vector_elements_per_cycle: int | None = Field(default=None, ge=1)


class AcceleratorSpec(_Strict):
    name: str
    description: str = ""
    compute: ComputeSpec
    levels: list[LevelSpec] = Field(min_length=1)
    intrinsics: list[dict[str, Any]] = []
    cores: int = Field(default=1, ge=1)
    padding: Literal["moved", "generated"] = "moved"


def _loc(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _allowed_keys(loc: tuple) -> list[str]:
    """Keys of the spec model at ``loc`` (walking list indices and nested models)."""
    model: Any = AcceleratorSpec
    for part in loc:
        if isinstance(part, int):
            continue
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return []
        todo, model = [field.annotation], None
        while todo:
            t = todo.pop()
            if isinstance(t, type) and issubclass(t, BaseModel):
                model = t
                break
            todo.extend(get_args(t))
        if model is None:
            return []
    return list(model.model_fields)


def _first_error(e: ValidationError, source: str) -> SpecError:
    err = e.errors()[0]
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith(("function-", "union["))))
    # pydantic reports the branch name of a union (e.g. 'str'); drop type-tag segments.
    loc = tuple(p for p in loc if p not in ("str", "int", "float", "list[int]", "literal['I','W','O']"))
    field = _loc(loc) or "(top level)"
    kind, msg, value = err["type"], err["msg"], err.get("input")
    if kind == "extra_forbidden":
        allowed = _allowed_keys(loc[:-1])
        msg = (f"unknown key {loc[-1]!r}; allowed: {', '.join(allowed)}" if allowed else
               f"unknown key {loc[-1]!r}") + " (see docs/accelerator-format.md)"
    elif kind == "missing":
        msg = "is required"
    elif kind == "literal_error" and loc == ("padding",):
        msg = f"{value!r} is not valid; use moved (the halo moves like data) or generated"
    elif kind == "literal_error":
        msg = f"{value!r} is not an operand class; allowed: I, W, O"
    else:
        msg = f"{msg} (got {value!r})" if value is not None and not isinstance(value, dict) else msg
    extra = f" ({len(e.errors()) - 1} more problem(s) after fixing this)" if len(e.errors()) > 1 else ""
    return SpecError(msg + extra, where=f"{source}: {field}")


def _conv(fn, value, where: str, *args):
    try:
        return fn(value, *args)
    except UnitError as exc:
        raise SpecError(str(exc), where=where) from None


def _precision(values) -> tuple[int, ...]:
    vals = values if isinstance(values, list) else [values]
    return tuple(int(v) for v in vals)


def _shared_axes(ls: LevelSpec, above: list[Level], where: str) -> list[FanoutAxis]:
    """The fan-out axes ``ls.shared_along`` names, checked: each an axis of a fan-out above the level,
    named once, and shared by every level above that keeps a class with it and sits below the axis
    (one instance of that level must hold the whole of this level's tile)."""
    axes = {a.name: (i, a) for i, lv in enumerate(above) if lv.fanout for a in lv.fanout.axes}
    out: list[FanoutAxis] = []
    for name in ls.shared_along:
        if name not in axes:
            raise SpecError(f"{name!r} is not an axis of a fan-out above level {ls.name!r}; valid: "
                            f"{', '.join(axes) or 'none (no fan-out above it)'}", where=where)
        if name in {a.name for a in out}:
            raise SpecError(f"names axis {name!r} twice", where=where)
        i, a = axes[name]
        for lv in above[i + 1:]:
            if set(lv.holds) & set(ls.holds) and name not in lv.shared_axes:
                raise SpecError(f"axis {name!r}: level {lv.name!r} above holds {'/'.join(set(lv.holds) & set(ls.holds))} "
                                f"too and sits below the axis, so it must be shared along {name!r} as well "
                                f"(one instance of it holds the whole of this level's tile)", where=where)
        out.append(a)
    return out


def build_accelerator(spec: AcceleratorSpec, source: str) -> Accelerator:
    levels: list[Level] = []
    instances = 1
    names = set()
    for i, ls in enumerate(spec.levels):
        where = f"{source}: levels[{i}]"
        if ls.name in names:
            raise SpecError(f"level name {ls.name!r} is used twice; names must be unique", where=f"{where}.name")
        names.add(ls.name)
        if ls.double_buffered is not False and ls.written_at_clock_edge:
            raise SpecError("double_buffered and written_at_clock_edge exclude each other: a register written "
                            "at the clock edge holds one tile and refills while it is read; set one of them",
                            where=f"{where}.written_at_clock_edge")
        if ls.refill_while_read and ls.double_buffered != "when_fits":
            raise SpecError("refill_while_read applies to a level double-buffered when two tiles fit "
                            "(double_buffered: when_fits): it says how such a level refills when they do not",
                            where=f"{where}.refill_while_read")
        width = _conv(parse_width_bits, ls.width, f"{where}.width")
        if (ls.capacity is None) == (ls.partitions is None):
            raise SpecError("give exactly one of 'capacity' (shared by the held operands) or "
                            "'partitions' (one capacity per operand class)", where=where)
        cap = None
        parts: tuple[tuple[str, int], ...] = ()
        if ls.capacity is not None:
            cap = _conv(parse_size_bits, ls.capacity, f"{where}.capacity", width)
        else:
            assert ls.partitions is not None
            missing = [c for c in ls.holds if c not in ls.partitions]
            extra = [c for c in ls.partitions if c not in ls.holds]
            if extra:
                raise SpecError(f"partition for {', '.join(extra)}, which the level does not hold "
                                f"(holds: {', '.join(ls.holds)}); give one partition per held class",
                                where=f"{where}.partitions")
            if missing:
                raise SpecError(f"no partition for {', '.join(missing)}, which the level holds; "
                                f"give one partition per held class ({', '.join(ls.holds)})",
                                where=f"{where}.partitions")
            parts_l = []
            for c in ls.holds:
                b = _conv(parse_size_bits, ls.partitions[c], f"{where}.partitions.{c}", width)
                if b is None:
                    raise SpecError("a partition cannot be unbounded; use 'capacity: unbounded'",
                                    where=f"{where}.partitions.{c}")
                parts_l.append((c, b))
            parts = tuple(parts_l)
        rd = _conv(parse_energy_pj, ls.read_energy, f"{where}.read_energy", width)
        wr = rd if ls.write_energy is None else _conv(parse_energy_pj, ls.write_energy, f"{where}.write_energy", width)
        rbw = _conv(parse_bandwidth_bits, ls.read_bandwidth, f"{where}.read_bandwidth", width)
        wbw = rbw if ls.write_bandwidth is None else _conv(parse_bandwidth_bits, ls.write_bandwidth,
                                                           f"{where}.write_bandwidth", width)
        gran = None
        if ls.access_granularity is not None:
            gran = _conv(parse_width_bits, ls.access_granularity, f"{where}.access_granularity",
                         "an access granularity")
            if gran > width:
                raise SpecError(f"{ls.access_granularity!r} is wider than the level's width ({width} bit); "
                                f"valid: 1 bit up to the width", where=f"{where}.access_granularity")
        fan = None
        if ls.fanout is not None:
            axes: list[FanoutAxis] = []
            for j, a in enumerate(ls.fanout.axes):
                if a.name in {x.name for x in axes} or any(
                        lv.fanout and a.name in {x.name for x in lv.fanout.axes} for lv in levels):
                    raise SpecError(f"axis name {a.name!r} is used twice; axis names must be unique",
                                    where=f"{where}.fanout.axes[{j}].name")
                axes.append(FanoutAxis(a.name, a.size, a.multicast, a.reduce))
            te = _conv(parse_energy_pj, ls.fanout.transfer_energy, f"{where}.fanout.transfer_energy", width)
            fan = Fanout(tuple(axes), te)
        shared = _shared_axes(ls, levels, f"{where}.shared_along")
        levels.append(Level(ls.name, tuple(ls.holds), cap, parts, width, rd, wr, rbw, wbw,
                            ls.double_buffered is True, ls.bypass, fan,
                            instances // math.prod(a.size for a in shared), ls.transfer_setup_cycles,
                            ls.written_at_clock_edge, ls.double_buffered == "when_fits", gran,
                            ls.stream_single_tile, tuple(a.name for a in shared),
                            read_row_cycles=ls.read_row_cycles, refill_while_read=ls.refill_while_read,
                            shared_port=ls.shared_port))
        if fan:
            instances *= fan.size
    for i, lv in enumerate(levels):
        refusal = shared_port_refusal(tuple(levels), i) if lv.shared_port else None
        if refusal:
            raise SpecError(refusal, where=f"{source}: levels[{i}].shared_port")
    top = levels[0]
    absent = [cls for cls in OPERAND_CLASSES if cls not in top.holds]
    if absent:
        raise SpecError(f"the outermost level {top.name!r} must hold every operand class "
                        f"(I, W, O); it does not hold {', '.join(absent)}", where=f"{source}: levels[0].holds")
    comp = spec.compute
    mac_e = _conv(parse_energy_pj, comp.mac_energy, f"{source}: compute.mac_energy")
    prec = []
    for cls in OPERAND_CLASSES:
        if cls not in comp.precision:
            raise SpecError(f"no precision for operand class {cls}; give bits for I, W and O",
                            where=f"{source}: compute.precision")
        bits = _precision(comp.precision[cls])
        if not bits or min(bits) < 1:
            raise SpecError(f"precision must be positive bit counts, got {comp.precision[cls]!r}",
                            where=f"{source}: compute.precision.{cls}")
        prec.append((cls, bits))
    intr_list = [intrinsic_from_dict(d, f"{source}: intrinsics[{k}]") for k, d in enumerate(spec.intrinsics)]
    seen: set[str] = set()
    for k, it in enumerate(intr_list):
        if it.name in seen:
            raise SpecError(f"intrinsic name {it.name!r} is used twice", where=f"{source}: intrinsics[{k}].name")
        seen.add(it.name)
    intr = tuple((it.name, it) for it in intr_list)
    pipe = None
    if comp.pipeline is not None:
        pipe = Pipeline(comp.pipeline.row_setup_cycles, comp.pipeline.result_overhead_cycles,
                        tuple(comp.pipeline.streamed_dims))
    return Accelerator(spec.name, tuple(levels), Compute(mac_e, comp.macs_per_cycle, tuple(prec), pipe,
                                                         comp.final_output_bits, comp.vector_elements_per_cycle),
                       spec.description, source, intr, spec.cores, spec.padding == "generated")


def accelerator_from_dict(data: Any, source: str = "<dict>") -> Accelerator:
    if not isinstance(data, dict):
        raise SpecError(f"an accelerator file must be a mapping with keys name, compute, levels; "
                        f"got {type(data).__name__}", where=source)
    try:
        spec = AcceleratorSpec.model_validate(data)
    except ValidationError as e:
        raise _first_error(e, source) from None
    return build_accelerator(spec, source)


def load_accelerator(path: str | Path) -> Accelerator:
    return accelerator_from_dict(load_yaml(path), str(path))
