"""Reading an ONNX file for its graph and shapes only, without its tensor data."""

from __future__ import annotations

from pathlib import Path

import onnx

from accelmap.errors import SpecError


def read_onnx(path: str | Path) -> onnx.ModelProto:
    """Parse an ONNX file without touching external weight data."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise SpecError(f"cannot read the model: {e.strerror or e.__class__.__name__}", where=str(p)) from None
    try:
        model = onnx.load_from_string(raw)
    except Exception as e:  # protobuf raises DecodeError, or RuntimeWarning-like errors on garbage
        raise SpecError(f"not a valid ONNX file ({e.__class__.__name__}: {str(e)[:80] or 'parse failed'}); "
                        "the file may be truncated or of another format", where=str(p)) from None
    # Protobuf accepts many byte strings as an (almost empty) message; a model
    # needs at least an IR version and a graph with nodes.
    if model.ir_version <= 0 or not model.graph.node:
        raise SpecError("not an ONNX model: no IR version or no graph nodes "
                        "(the file may be truncated or of another format)", where=str(p))
    return model
