"""Layer tables: convolution lists in DeepBench's column format (CSV).

Columns (DeepBench's ``conv_problems.h`` order): w, h, c, n, k, filter_w,
filter_h, pad_w, pad_h, stride_w, stride_h, optionally preceded by ``index``.
Lines starting with ``#`` are comments. Each row is one conv2d layer; identical
rows become one layer with a count.
"""

from __future__ import annotations

import csv
from pathlib import Path

from accelmap.errors import SpecError
from accelmap.workload.constructors import conv2d
from accelmap.workload.models.result import ModelImport, group_layers

COLUMNS = ("w", "h", "c", "n", "k", "filter_w", "filter_h", "pad_w", "pad_h", "stride_w", "stride_h")


def load_conv_table(path: str | Path, *, batch: int | None = None, bits: dict | None = None,
                    name: str | None = None, prefix: str = "conv") -> ModelImport:
    """Read a conv layer table. ``batch`` replaces every row's n when given."""
    p = Path(path)
    try:
        lines = p.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(f"cannot read the layer table: {e.__class__.__name__}", where=str(p)) from None
    body = [(i + 1, ln) for i, ln in enumerate(lines) if ln.strip() and not ln.lstrip().startswith("#")]
    if not body:
        raise SpecError("the layer table has no header and no rows", where=str(p))
    header_line, header = body[0][0], [h.strip() for h in next(csv.reader([body[0][1]]))]
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise SpecError(f"columns {missing} missing; a conv table has columns {', '.join(COLUMNS)}",
                        where=f"{p}:{header_line}")
    if batch is not None and batch < 1:
        raise SpecError(f"batch must be positive, got {batch}", where=str(p))
    entries: list[tuple] = []   # group_layers' (node name, operator, source op, bias)
    for lineno, ln in body[1:]:
        row = [v.strip() for v in next(csv.reader([ln]))]
        if len(row) != len(header):
            raise SpecError(f"{len(row)} values for {len(header)} columns", where=f"{p}:{lineno}")
        rec = dict(zip(header, row, strict=True))
        try:
            v = {c: int(rec[c]) for c in COLUMNS}
        except ValueError:
            bad = next(c for c in COLUMNS if not rec[c].lstrip("-").isdigit())
            raise SpecError(f"column {bad} is {rec[bad]!r}; expected a whole number", where=f"{p}:{lineno}") from None
        label = f"{prefix}{rec['index']}" if "index" in rec else f"{prefix}{len(entries)}"
        try:
            op = conv2d(label, n=batch or v["n"], c=v["c"], h=v["h"], w=v["w"], k=v["k"],
                        r=v["filter_h"], s=v["filter_w"], stride=(v["stride_h"], v["stride_w"]),
                        padding=(v["pad_h"], v["pad_w"]), bits=bits)
        except SpecError as e:
            raise SpecError(str(e), where=f"{p}:{lineno}") from None
        entries.append((label, op, "table", False))
    if not entries:
        raise SpecError("the layer table has a header but no rows", where=str(p))
    params = (("batch", batch),) if batch is not None else ()
    return ModelImport(name or p.stem, str(p), group_layers(entries), (), params)
