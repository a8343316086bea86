"""A design space in YAML: a base accelerator, the parameters swept over it, and constraints.

    name: eyeriss_sweep
    base: eyeriss_like                  # a preset, or an accelerator YAML (relative to this file)
    energy: derived                     # derived (from the component table) or base (keep the base's)
    parameters:
      - name: glb
        set: levels.GLB.capacity        # a field of the base's YAML; list items by name or [index]
        values: [32 KiB, 64 KiB, 128 KiB]
      - name: array                     # one parameter may set several fields together
        set: [levels.GLB.fanout.axes.X.size, levels.GLB.fanout.axes.Y.size]
        values: [[8, 8], [16, 16]]
    constraints: {max_area: 4 mm2, max_sram: 512 KiB}
    search: {method: grid}              # or {method: random, samples: 50, seed: 0}, or {method: sunstone}
    mapper: {strategy: auto, objective: edp, time_limit: 10}

Every value is checked at load time by applying it alone to the base and validating the
accelerator it gives, so a bad value is reported once, naming the space file, the parameter,
the value and what the accelerator schema accepts (exit status 2 in the CLI).
"""

from __future__ import annotations

import copy
import itertools
import math
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from accelmap.arch.accelerator import Accelerator
from accelmap.arch.presets import preset_names, preset_path
from accelmap.arch.schema import accelerator_from_dict
from accelmap.arch.units import UnitError, parse_size_bits
from accelmap.errors import SpecError
from accelmap.search.mapper import STRATEGIES
from accelmap.yaml_io import load_yaml

METHODS = ("grid", "random", "sunstone")
OBJECTIVES = ("edp", "energy", "latency")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ParameterSpec(_Strict):
    name: str = Field(min_length=1)
    set: Union[str, list[str]]
    values: list[Any] = Field(min_length=1)


class ConstraintsSpec(_Strict):
    max_area: Union[str, None] = None
    max_sram: Union[str, None] = None


class SearchSpec(_Strict):
    method: Literal["grid", "random", "sunstone"] = "grid"
    samples: Union[int, None] = Field(default=None, ge=1)
    seed: int = 0


class MapperSpec(_Strict):
    strategy: str = "auto"
    objective: Literal["edp", "energy", "latency"] = "edp"
    time_limit: Union[float, None] = Field(default=None, gt=0)


class SpaceSpec(_Strict):
    name: str
    description: str = ""
    base: str
    energy: Literal["derived", "base"] = "derived"
    parameters: list[ParameterSpec] = Field(min_length=1)
    constraints: ConstraintsSpec = ConstraintsSpec()
    search: SearchSpec = SearchSpec()
    mapper: MapperSpec = MapperSpec()


@dataclass(frozen=True)
class Parameter:
    name: str
    paths: tuple[str, ...]
    values: tuple[Any, ...]          # one value per path for each choice (a tuple when several paths)

    def assignments(self, value: Any) -> list[tuple[str, Any]]:
        vals = value if len(self.paths) > 1 else (value,)
        return list(zip(self.paths, vals, strict=True))


@dataclass(frozen=True)
class DesignSpace:
    name: str
    source: str
    base_name: str
    base: dict                       # the base accelerator's YAML form
    parameters: tuple[Parameter, ...]
    derive_energy: bool = True
    max_area_mm2: float | None = None
    max_sram_bits: int | None = None
    method: str = "grid"
    samples: int | None = None
    seed: int = 0
    strategy: str = "auto"
    objective: str = "edp"
    time_limit: float | None = None
    description: str = ""

    @property
    def size(self) -> int:
        """Points of the full grid (before constraints)."""
        return math.prod(len(p.values) for p in self.parameters)

    def point(self, choice: tuple[int, ...]) -> tuple[tuple[str, Any], ...]:
        return tuple((p.name, p.values[i]) for p, i in zip(self.parameters, choice, strict=True))

    def grid(self) -> Iterator[tuple[tuple[str, Any], ...]]:
        for choice in itertools.product(*(range(len(p.values)) for p in self.parameters)):
            yield self.point(choice)

    def sample(self, n: int, seed: int) -> list[tuple[tuple[str, Any], ...]]:
        """``n`` distinct points drawn uniformly from the grid (all of it when n >= its size)."""
        if n >= self.size:
            return list(self.grid())
        rng = random.Random(seed)
        picks = rng.sample(range(self.size), n)
        out = []
        for flat in picks:
            choice = []
            for p in reversed(self.parameters):
                flat, i = divmod(flat, len(p.values))
                choice.append(i)
            out.append(self.point(tuple(reversed(choice))))
        return out

    def points(self) -> list[tuple[tuple[str, Any], ...]]:
        """The points the space's search method visits."""
        if self.method == "random":
            return self.sample(self.samples or min(self.size, 32), self.seed)
        return list(self.grid())

    def accelerator_dict(self, point: tuple[tuple[str, Any], ...]) -> dict:
        data = copy.deepcopy(self.base)
        by_name = {p.name: p for p in self.parameters}
        for name, value in point:
            for path, v in by_name[name].assignments(value):
                set_path(data, path, v)
        return data

    def accelerator(self, point: tuple[tuple[str, Any], ...]) -> Accelerator:
        label = ", ".join(f"{n}={v}" for n, v in point)
        data = self.accelerator_dict(point)
        data["name"] = f"{self.base.get('name', 'design')}[{label}]"
        data["description"] = f"{self.name}: {label}"
        return accelerator_from_dict(data, f"{self.source}: design {label}")


_TOKEN = re.compile(r"^([^\[\]]+)?((?:\[\d+\])*)$")


def path_steps(path: str) -> list[str | int]:
    steps: list[str | int] = []
    for tok in path.split("."):
        m = _TOKEN.match(tok)
        if not tok or m is None:
            raise ValueError(f"bad path segment {tok!r}")
        if m.group(1):
            steps.append(m.group(1))
        steps.extend(int(i) for i in re.findall(r"\[(\d+)\]", m.group(2)))
    return steps


def set_path(data: dict, path: str, value: Any) -> None:
    """Set ``path`` (``levels.GLB.capacity``, ``levels[1].fanout.axes.X.size``) in ``data``.

    In a list, a name step picks the item whose ``name`` it is. Every step but the last must
    exist; the last may be a key the base leaves at its default."""
    steps = path_steps(path)
    node: Any = data
    for k, step in enumerate(steps):
        last = k == len(steps) - 1
        where = ".".join(str(s) for s in steps[:k]) or "(top level)"
        if isinstance(node, list):
            if isinstance(step, int):
                if not 0 <= step < len(node):
                    raise ValueError(f"{where} has {len(node)} items; no index {step}")
                idx = step
            else:
                names = [it.get("name") for it in node if isinstance(it, dict)]
                if step not in names:
                    raise ValueError(f"{where} has no item named {step!r}; items: {', '.join(map(str, names))}")
                idx = names.index(step)
            if last:
                node[idx] = value
            else:
                node = node[idx]
        elif isinstance(node, dict):
            if isinstance(step, int):
                raise ValueError(f"{where} is a mapping, not a list; no index [{step}]")
            if last:
                node[step] = value
            elif step not in node:
                raise ValueError(f"{where} has no key {step!r}; keys: {', '.join(map(str, node))}")
            else:
                node = node[step]
        else:
            raise ValueError(f"{where} is a value ({node!r}), not a mapping or list")


@dataclass(frozen=True)
class SearchedLevels:
    levels: tuple[str, ...]                 # one level per parameter, in parameter order
    words: tuple[tuple[int, ...], ...]      # each parameter value's capacity in words of its level


def searched_levels(space: DesignSpace) -> SearchedLevels:
    """The levels a sunstone space sizes, and each value in words; one clear error if it is not one."""
    names: list[str] = []
    words: list[tuple[int, ...]] = []
    base_levels = [lv.get("name") for lv in space.base.get("levels", []) if isinstance(lv, dict)]
    for i, p in enumerate(space.parameters):
        where = f"{space.source}: parameters[{i}].set"
        path = p.paths[0]
        st = path_steps(path)
        if len(p.paths) != 1 or len(st) != 3 or st[0] != "levels" or st[2] != "capacity":
            raise SpecError(f"{p.paths[0] if len(p.paths) == 1 else list(p.paths)!r}: search method sunstone sizes "
                            "buffers, so each parameter must set one field levels.NAME.capacity", where=where)
        level = st[1] if isinstance(st[1], str) else base_levels[st[1]]
        if level in names:
            raise SpecError(f"level {level!r} is sized by two parameters", where=where)
        ws = []
        for j, v in enumerate(p.values):
            trial = copy.deepcopy(space.base)
            set_path(trial, path, v)
            lv = accelerator_from_dict(trial, f"{space.source}: parameters[{i}].values[{j}]").level(str(level))
            if lv.capacity_bits is None or lv.capacity_bits % lv.width_bits or lv.partitions:
                raise SpecError(f"{v!r} is not a whole number of {lv.width_bits}-bit words in one unpartitioned "
                                "buffer, which search method sunstone needs", where=f"{space.source}: "
                                f"parameters[{i}].values[{j}]")
            ws.append(lv.capacity_bits // lv.width_bits)
        names.append(str(level))
        words.append(tuple(ws))
    return SearchedLevels(tuple(names), tuple(words))


def _parse_area_mm2(text: str, where: str) -> float:
    m = re.fullmatch(r"\s*([0-9.eE+-]+)\s*(mm2|mm\^2|um2|um\^2)\s*", str(text))
    if m is None:
        raise SpecError(f"{text!r} is not an area; write e.g. '4 mm2' or '250000 um2'", where=where)
    try:
        v = float(m.group(1))
    except ValueError:
        raise SpecError(f"{text!r} is not an area; write e.g. '4 mm2'", where=where) from None
    if not v > 0 or not math.isfinite(v):
        raise SpecError(f"must be a positive area, got {text!r}", where=where)
    return v if m.group(2).startswith("mm") else v / 1e6


def _first_error(e: ValidationError, source: str) -> SpecError:
    err = e.errors()[0]
    loc = ".".join(str(p) if not isinstance(p, int) else f"[{p}]" for p in err["loc"]).replace(".[", "[")
    kind, value = err["type"], err.get("input")
    if kind == "extra_forbidden":
        msg = f"unknown key {err['loc'][-1]!r} (see docs/dse.md for the keys of a design space)"
    elif kind == "missing":
        msg = "is required"
    else:
        msg = f"{err['msg']} (got {value!r})" if not isinstance(value, dict) else err["msg"]
    return SpecError(msg, where=f"{source}: {loc or '(top level)'}")


def _base(ref: str, space_path: Path | None, where: str) -> tuple[str, dict]:
    if ref in preset_names():
        return ref, load_yaml(preset_path(ref))
    p = Path(ref)
    if not p.is_absolute() and space_path is not None:
        p = space_path.parent / p
    if not p.exists():
        raise SpecError(f"{ref!r} is neither a preset ({', '.join(preset_names())}) nor an existing file",
                        where=where)
    data = load_yaml(p)
    if not isinstance(data, dict):
        raise SpecError(f"{p} is not an accelerator file (a mapping with name, compute, levels)", where=where)
    return str(p), data


def space_from_dict(data: Any, source: str = "<dict>", path: Path | None = None) -> DesignSpace:
    if not isinstance(data, dict):
        raise SpecError(f"a design space must be a mapping with keys name, base, parameters; "
                        f"got {type(data).__name__}", where=source)
    try:
        spec = SpaceSpec.model_validate(data)
    except ValidationError as e:
        raise _first_error(e, source) from None
    if spec.mapper.strategy not in STRATEGIES:
        raise SpecError(f"unknown strategy {spec.mapper.strategy!r}; choose one of {', '.join(STRATEGIES)}",
                        where=f"{source}: mapper.strategy")
    base_name, base = _base(spec.base, path, f"{source}: base")
    accelerator_from_dict(copy.deepcopy(base), f"{source}: base {base_name}")
    params: list[Parameter] = []
    for i, ps in enumerate(spec.parameters):
        where = f"{source}: parameters[{i}]"
        if ps.name in {p.name for p in params}:
            raise SpecError(f"parameter name {ps.name!r} is used twice; names must be unique", where=f"{where}.name")
        paths = tuple([ps.set] if isinstance(ps.set, str) else ps.set)
        if not paths:
            raise SpecError("names no field; give a path such as levels.GLB.capacity", where=f"{where}.set")
        values = []
        for j, v in enumerate(ps.values):
            if len(paths) > 1:
                if not isinstance(v, list) or len(v) != len(paths):
                    raise SpecError(f"{v!r} must be a list of {len(paths)} values, one per field in 'set'",
                                    where=f"{where}.values[{j}]")
                v = tuple(v)
            if v in values:
                raise SpecError(f"{v!r} is listed twice", where=f"{where}.values[{j}]")
            values.append(v)
        param = Parameter(ps.name, paths, tuple(values))
        for j, v in enumerate(values):
            trial = copy.deepcopy(base)
            for k, (p, x) in enumerate(param.assignments(v)):
                try:
                    set_path(trial, p, x)
                except ValueError as e:
                    raise SpecError(f"path {p!r}: {e}",
                                    where=f"{where}.set" + (f"[{k}]" if len(paths) > 1 else "")) from None
            # One value on the base alone must make a valid accelerator: the schema names the field.
            accelerator_from_dict(trial, f"{where}.values[{j}] = {v!r} applied to {base_name}")
        params.append(param)
    area = sram = None
    if spec.constraints.max_area is not None:
        area = _parse_area_mm2(spec.constraints.max_area, f"{source}: constraints.max_area")
    if spec.constraints.max_sram is not None:
        try:
            sram = parse_size_bits(spec.constraints.max_sram, None)
        except UnitError as e:
            raise SpecError(str(e), where=f"{source}: constraints.max_sram") from None
        if sram is None:
            raise SpecError("must be a size such as 512 KiB, not unbounded (leave it out for no limit)",
                            where=f"{source}: constraints.max_sram")
    space = DesignSpace(spec.name, source, base_name, base, tuple(params), spec.energy == "derived", area, sram,
                        spec.search.method, spec.search.samples, spec.search.seed, spec.mapper.strategy,
                        spec.mapper.objective, spec.mapper.time_limit, spec.description)
    if space.method == "sunstone":
        searched_levels(space)          # the parameters must be buffer sizes: say so now, not mid-run
    return space


def load_space(path: str | Path) -> DesignSpace:
    p = Path(path)
    return space_from_dict(load_yaml(p), str(p), p)
