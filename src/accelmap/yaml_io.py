"""Reading YAML files with errors that name the file, line and column."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from accelmap.errors import SpecError


def load_yaml(path: str | Path) -> Any:
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise SpecError("file not found", where=str(p)) from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as e:
        raise SpecError(f"cannot read: {e.__class__.__name__}", where=str(p)) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise SpecError(f"{line}not valid YAML: {problem}", where=str(p)) from None
