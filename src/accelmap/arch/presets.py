"""Bundled accelerator presets, and resolving a name or a path to an accelerator."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from accelmap.arch.accelerator import Accelerator
from accelmap.arch.schema import accelerator_from_dict, load_accelerator
from accelmap.errors import SpecError
from accelmap.yaml_io import load_yaml


def _preset_dir():
    return resources.files("accelmap") / "data" / "arch"


def preset_names() -> list[str]:
    return sorted(p.name[:-5] for p in _preset_dir().iterdir() if p.name.endswith(".yaml"))


def preset_path(name: str) -> Path:
    return Path(str(_preset_dir() / f"{name}.yaml"))


def get_accelerator(name_or_path: str | Path) -> Accelerator:
    """A preset name (``eyeriss_like``) or the path of an accelerator YAML."""
    s = str(name_or_path)
    if s in preset_names():
        p = preset_path(s)
        return accelerator_from_dict(load_yaml(p), f"preset {s}")
    p = Path(s)
    if p.suffix in (".yaml", ".yml") or p.exists():
        return load_accelerator(p)
    raise SpecError(f"no preset named {s!r} and no such file; presets: {', '.join(preset_names())}",
                    where="--arch")
