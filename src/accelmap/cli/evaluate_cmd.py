"""``accelmap evaluate``: cost of one mapping of one operator on one accelerator."""

from __future__ import annotations

from pathlib import Path

import click

from accelmap.arch.accelerator import adopt_precision
from accelmap.cli import main
from accelmap.cli.arch_cmd import resolve_accelerator
from accelmap.cost.model import evaluate
from accelmap.errors import SpecError
from accelmap.examples import example_path
from accelmap.mapping.forms import format_text, mapping_from_yaml, mapping_layouts, parse_text
from accelmap.workload.files import load_workload
from accelmap.workload.layouts import laid_out
from accelmap.yaml_io import load_yaml


def load_mapping(path: str, arch, op=None):
    """A mapping file (YAML or loop-nest text); ``op`` gives the operand names a YAML entry without
    ``keep`` defaults to."""
    p = Path(path)
    if p.suffix in (".yaml", ".yml"):
        return mapping_from_yaml(load_yaml(p), arch, str(p), op)
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(f"cannot read: {e.__class__.__name__}", where=str(p)) from None
    return parse_text(text, arch, str(p))


def load_laid_out(path: str, arch, op):
    """``op`` with the DRAM layouts a mapping YAML states (``layouts``; the loop-nest text states none), and the
    mapping."""
    p = Path(path)
    if p.suffix in (".yaml", ".yml"):
        data = load_yaml(p)
        return laid_out(op, mapping_layouts(data, op, str(p))), mapping_from_yaml(data, arch, str(p), op)
    return op, load_mapping(path, arch, op)


@main.command("evaluate")
@click.option("--workload", "-w", default=None, help="Workload YAML (default: the bundled example conv).")
@click.option("--arch", "-a", default="eyeriss_like", show_default=True, help="Preset name, accelerator YAML or ZigZag hardware YAML.")
@click.option("--mapping", "-m", default=None, help="Mapping YAML or loop-nest text (default: the bundled example).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def evaluate_cmd(workload, arch, mapping, as_json):
    """Predict energy, latency and access counts of a mapping."""
    acc = resolve_accelerator(arch)
    wpath = workload or example_path("conv_small.yaml")
    op, stated = load_workload(wpath)
    if not stated:
        op = adopt_precision(op, acc)
    if mapping is None:
        mapping = example_path(f"conv_small.{acc.name}.mapping.yaml")
        if not Path(mapping).exists():
            raise SpecError(f"no bundled example mapping for {acc.name}; pass --mapping", where="--mapping")
    op, m = load_laid_out(mapping, acc, op)
    res = evaluate(op, acc, m)
    if as_json:
        click.echo(res.to_json())
        return
    click.echo(str(op))
    click.echo(f"on {acc.name}:\n")
    click.echo(format_text(m, acc, op))
    click.echo("")
    click.echo(res.table())
