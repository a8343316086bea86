"""``accelmap arch``: list, show and convert accelerator descriptions (ours or ZigZag's)."""

from __future__ import annotations

from pathlib import Path

import click
import yaml

from accelmap.arch.accelerator import Accelerator
from accelmap.arch.presets import get_accelerator, preset_names
from accelmap.arch.schema import accelerator_from_dict
from accelmap.arch.zigzag_import import is_zigzag_hardware, zigzag_operand_links, zigzag_to_dict
from accelmap.cli import main
from accelmap.errors import SpecError
from accelmap.file_io import atomic_path, check_output_file, write_atomic
from accelmap.report.arch_diagram import arch_png, arch_text
from accelmap.yaml_io import load_yaml


def _links(mapping: str | None):
    return zigzag_operand_links(load_yaml(mapping, []), mapping) if mapping else None


def resolve_accelerator(name_or_path: str, zigzag_mapping: str | None = None) -> Accelerator:
    """A preset, our YAML, or a ZigZag hardware YAML (detected by its keys); notes go to stderr."""
    if name_or_path in preset_names() or not Path(name_or_path).exists():
        return get_accelerator(name_or_path)
    dups: list[str] = []
    data = load_yaml(name_or_path, dups)
    if is_zigzag_hardware(data):
        d, notes = zigzag_to_dict(data, name_or_path, _links(zigzag_mapping))
        for n in dups + list(notes):
            click.echo(f"note: {name_or_path}: {n}", err=True)
        return accelerator_from_dict(d, f"{name_or_path} (converted from ZigZag)")
    if dups:
        load_yaml(name_or_path)      # our own format is strict: the duplicate is the error
    return accelerator_from_dict(data, name_or_path)


@main.group("arch")
def arch_group() -> None:
    """Accelerator descriptions: bundled presets, pictures, ZigZag conversion."""


@arch_group.command("list")
def list_cmd():
    """Bundled presets: name, compute instances, levels, description."""
    rows = []
    for n in preset_names():
        a = get_accelerator(n)
        rows.append((n, str(a.num_pes), " > ".join(lv.name for lv in a.levels), a.description))
    w = [max(len(r[i]) for r in rows + [("name", "PEs", "levels", "")]) for i in range(3)]
    click.echo(f"{'name':<{w[0]}}  {'PEs':>{w[1]}}  {'levels':<{w[2]}}  description")
    for r in rows:
        click.echo(f"{r[0]:<{w[0]}}  {r[1]:>{w[1]}}  {r[2]:<{w[2]}}  {r[3]}")


@arch_group.command("show")
@click.argument("name_or_path")
@click.option("--png", default=None, help="Also draw the hierarchy into this .png file.")
@click.option("--zigzag-mapping", default=None,
              help="ZigZag mapping YAML whose memory_operand_links tell which of I1/I2 is the weight.")
def show_cmd(name_or_path, png, zigzag_mapping):
    """Picture of a preset or accelerator file (ours or ZigZag's): levels, capacities, fan-outs."""
    if png is not None:
        check_output_file(png, "--png", ".png")
    acc = resolve_accelerator(name_or_path, zigzag_mapping)
    click.echo(arch_text(acc))
    if png is not None:
        with atomic_path(png) as tmp:
            arch_png(acc, tmp)
        click.echo(f"\nwrote {png}")


@arch_group.command("convert")
@click.argument("zigzag_yaml")
@click.option("-o", "--output", required=True, help="Our accelerator YAML to write.")
@click.option("--zigzag-mapping", default=None,
              help="ZigZag mapping YAML whose memory_operand_links tell which of I1/I2 is the weight.")
def convert_cmd(zigzag_yaml, output, zigzag_mapping):
    """Convert a ZigZag hardware YAML into our accelerator format."""
    check_output_file(output, "--output")
    dups: list[str] = []
    data = load_yaml(zigzag_yaml, dups)
    if not is_zigzag_hardware(data):
        raise SpecError("not a ZigZag hardware file: it needs top-level 'memories' and 'operational_array'",
                        where=zigzag_yaml)
    d, notes = zigzag_to_dict(data, zigzag_yaml, _links(zigzag_mapping))
    notes = dups + list(notes)
    acc = accelerator_from_dict(d, f"{zigzag_yaml} (converted from ZigZag)")   # validate before writing
    header = "".join(f"# note: {n}\n" for n in notes)
    text = (f"# Converted by 'accelmap arch convert' from the ZigZag hardware file {Path(zigzag_yaml).name}.\n"
            + header + yaml.safe_dump(d, sort_keys=False, width=120))
    write_atomic(Path(output), text)
    for n in notes:
        click.echo(f"note: {zigzag_yaml}: {n}", err=True)
    click.echo(f"wrote {output}: {acc.name}, {len(acc.levels)} levels, {acc.num_pes} PEs")
