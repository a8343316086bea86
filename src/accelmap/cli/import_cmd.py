"""``accelmap import``: the accelerator operators and the host work of a model."""

from __future__ import annotations

import json
import sys
from collections import OrderedDict
from pathlib import Path

import click

from accelmap.arch.presets import get_accelerator
from accelmap.cli import main
from accelmap.errors import SpecError
from accelmap.file_io import check_output_file, write_atomic
from accelmap.workload.models import BUNDLED, ModelImport, load_model, unknown_ops_message


def parse_precision(text: str | None) -> dict | str | None:
    """'I=8,W=8,O=32' -> dict; 'onnx' -> 'onnx'; None -> None (int8/int8/int32)."""
    if text is None or text == "onnx":
        return text
    out = {}
    for part in text.split(","):
        key, sep, val = part.partition("=")
        key = key.strip()
        if not sep or key not in ("I", "W", "O") or not val.strip().isdigit() or int(val) < 1:
            raise SpecError(f"{text!r} is not a precision; write I=8,W=8,O=32 (bits per operand class) "
                            "or 'onnx'", where="--precision")
        out[key] = int(val)
    return out


def parse_dims(items) -> dict[str, int]:
    """('height=224', 'width=224') -> {'height': 224, 'width': 224}."""
    out: dict[str, int] = {}
    for text in items or ():
        key, sep, val = text.partition("=")
        key, val = key.strip(), val.strip()
        if not sep or not key or not val.isdigit():
            raise SpecError(f"{text!r} is not NAME=VALUE with an integer VALUE", where="--dim")
        if key in out and out[key] != int(val):
            raise SpecError(f"{key} given twice ({out[key]} and {val})", where="--dim")
        out[key] = int(val)
    return out


def check_precision(model: ModelImport, arch) -> None:
    """Every operand's bit width must be one the accelerator computes at."""
    for layer in model.layers:
        for o in layer.operator.operands:
            ok = arch.compute.supported_bits(o.cls)
            if o.bits not in ok:
                raise SpecError(f"layer {layer.name!r}: operand {o.name} (class {o.cls}) is {o.bits}-bit, but "
                                f"{arch.name} computes class {o.cls} at {'/'.join(map(str, ok))} bits; "
                                "choose --precision accordingly", where=model.source)


def _shape(op) -> str:
    return " ".join(f"{d}{s}" for d, s in op.dims)


def _attrs(op) -> str:
    a = dict(op.attrs)
    parts = []
    if any(v != 1 for v in a.get("stride", ())):
        parts.append("s" + "x".join(map(str, a["stride"])))
    if any(v != 1 for v in a.get("dilation", ())):
        parts.append("d" + "x".join(map(str, a["dilation"])))
    if any(a.get("padding", ())):
        parts.append("p" + ",".join(map(str, a["padding"])))
    if a.get("bias"):
        parts.append("bias")
    return " ".join(parts)


def _table(header: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    fmt = lambda r: "  ".join(str(v).rjust(w) if i in right else str(v).ljust(w)
                              for i, (v, w) in enumerate(zip(r, widths, strict=True))).rstrip()
    return [fmt(header), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows]


def format_import(m: ModelImport) -> str:
    lines = [f"model {m.name}  ({m.source})"]
    if m.params:
        lines.append("bound: " + ", ".join(f"{k}={v}" for k, v in m.params))
    lines.append("")
    rows = []
    for l in m.layers:
        op = l.operator
        bits = "/".join(str(o.bits) for o in op.operands)
        rows.append([l.name, op.kind, _shape(op), _attrs(op), bits, f"{op.macs:,}", str(l.count), f"{l.macs:,}"])
    lines += _table(["layer", "type", "shape", "attrs", "bits O/in", "MACs each", "count", "MACs"], rows, {5, 6, 7})
    lines.append(f"total: {m.node_count} accelerator nodes, {len(m.layers)} distinct layers, {m.total_macs:,} MACs")
    if m.host_ops:
        lines.append("")
        groups: OrderedDict[str, list] = OrderedDict()
        for h in m.host_ops:
            groups.setdefault(h.op_type, []).append(h)
        hrows = []
        for op_type, hs in groups.items():
            known = [h.elements for h in hs if h.elements is not None]
            unknown = len(hs) - len(known)
            notes = sorted({h.note for h in hs if h.note})
            hrows.append([op_type, str(len(hs)), f"{sum(known):,}" + (f" (+{unknown} unknown)" if unknown else ""),
                          "; ".join(notes)])
        lines += _table(["host op", "nodes", "output elements", "note"], hrows, {1, 2})
        unk = f" (+{m.host_unknown} nodes of unknown size)" if m.host_unknown else ""
        lines.append(f"total: {len(m.host_ops)} host nodes, {m.host_elements:,} output elements{unk}")
    if m.unknown_ops:
        lines.append("")
        urows = [[h.name, h.op_type, "?" if h.elements is None else f"{h.elements:,}"] for h in m.unknown_ops]
        lines += _table(["unknown op node", "op type", "output elements"], urows, {2})
        lines.append(f"total: {len(m.unknown_ops)} nodes of op types the importer does not know; "
                     "their MACs, if any, are not counted")
    for n in m.notes:
        lines.append(f"note: {n}")
    return "\n".join(lines)


@main.command("import")
@click.argument("model", required=False)
@click.option("--batch", type=int, default=None, help="Bind the model's symbolic batch dimension (default 1).")
@click.option("--seq-len", type=int, default=None, help="Bind the model's symbolic sequence length.")
@click.option("--dim", "dim_items", multiple=True, metavar="NAME=VALUE",
              help="Bind a symbolic dimension by name (repeatable); also a Loop's trip count or an If's "
                   "branch (1/0) by node name.")
@click.option("--precision", default=None,
              help="Operand bits, e.g. I=8,W=8,O=32 (the default), or 'onnx' for the model's own "
                   "(quantized) types.")
@click.option("--arch", "-a", default=None,
              help="Accelerator whose precision the operands take (default) or are checked against (--precision).")
@click.option("--lenient", is_flag=True,
              help="List nodes that cannot be imported as host work instead of failing, and accept nodes of "
                   "unknown op types (listed apart) with exit status 0.")
@click.option("--json", "as_json", is_flag=True, help="Print the import as JSON.")
@click.option("--output", "-o", default=None,
              help="Also write the JSON to this file (only when the import succeeds).")
@click.option("--list", "list_models", is_flag=True, help="List the bundled models.")
def import_cmd(model, batch, seq_len, dim_items, precision, arch, lenient, as_json, output, list_models):
    """Import MODEL (a bundled name, an .onnx file or a .csv conv table) and list its operators."""
    if list_models:
        for b in BUNDLED.values():
            click.echo(f"{b.name:<16} {b.description}")
        return
    if model is None:
        raise SpecError(f"give a model: a bundled name ({', '.join(BUNDLED)}), an .onnx file or a .csv table",
                        where="MODEL")
    for flag, v in (("--batch", batch), ("--seq-len", seq_len)):
        if v is not None and v < 1:
            raise SpecError(f"must be a positive integer, got {v}", where=flag)
    if output is not None:
        check_output_file(output, "--output")
    dims = parse_dims(dim_items)
    acc = get_accelerator(arch) if arch else None
    bits = parse_precision(precision)
    if acc is not None and bits is None:
        # Without an explicit precision the operands take the accelerator's own.
        bits = {cls: acc.compute.supported_bits(cls)[0] for cls in ("I", "W", "O")}
    m = load_model(model, batch=batch, seq_len=seq_len, dims=dims, bits=bits, strict=not lenient,
                   allow_unknown=True)
    if acc is not None:
        check_precision(m, acc)
    text = json.dumps(m.to_dict(), indent=2)
    incomplete = bool(m.unknown_ops) and not lenient
    if output and not incomplete:
        write_atomic(Path(output), text + "\n")
    click.echo(text if as_json else format_import(m))
    if incomplete:
        # The import is shown, but its MAC total may be short: fail unless the user accepts that.
        click.echo(f"error: {m.source}: {unknown_ops_message(m)}; pass --lenient to accept the import "
                   "without them", err=True)
        sys.exit(1)
