"""Paths of the example files bundled with the package."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def example_path(name: str) -> str:
    return str(Path(str(resources.files("accelmap") / "data" / "examples" / name)))
