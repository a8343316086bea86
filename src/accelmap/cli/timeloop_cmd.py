"""``accelmap export-timeloop``: a mapping (and its problem) in Timeloop's YAML, to check it there."""

from __future__ import annotations

from pathlib import Path

import click

from accelmap.cli import main
from accelmap.cli.codegen_cmd import load_problem
from accelmap.errors import SpecError
from accelmap.file_io import check_output_file, write_atomic
from accelmap.mapping.timeloop_export import check_names, timeloop_names, timeloop_problem_yaml, timeloop_yaml
from accelmap.mapping.validate import validate


def parse_renames(items) -> dict[str, str]:
    """('K=M', 'I=Inputs') -> {'K': 'M', 'I': 'Inputs'}."""
    out: dict[str, str] = {}
    for text in items or ():
        key, sep, val = text.partition("=")
        key, val = key.strip(), val.strip()
        if not sep or not key or not val or not val.replace("_", "").isalnum():
            raise SpecError(f"{text!r} is not OURS=THEIRS with a name made of letters, digits and _",
                            where="--rename")
        if key in out and out[key] != val:
            raise SpecError(f"{key} renamed twice ({out[key]} and {val})", where="--rename")
        out[key] = val
    return out


@main.command("export-timeloop")
@click.option("--workload", "-w", required=True, help="Workload YAML.")
@click.option("--arch", "-a", required=True, help="Preset name, accelerator YAML or ZigZag hardware YAML.")
@click.option("--mapping", "-m", required=True, help="Mapping YAML or loop-nest text.")
@click.option("--output", "-o", default=None, help="Mapping file to write (default: print it).")
@click.option("--problem", default=None, help="Also write the operator as a Timeloop problem YAML to this file.")
@click.option("--rename", "renames", multiple=True, metavar="OURS=THEIRS",
              help="Rename an operand or dimension (repeatable), e.g. --rename K=M for Timeloop's cnn-layer, "
                   "whose output channels are M. Operands are named Inputs, Weights and Outputs by default "
                   "when the operator has one of each class.")
@click.option("--our-names", is_flag=True, help="Keep our operand names (no Inputs/Weights/Outputs).")
def export_timeloop_cmd(workload, arch, mapping, output, problem, renames, our_names):
    """Write a mapping as Timeloop's mapping YAML (per level: temporal factors and permutation, spatial
    factors with the X/Y split, bypass), and optionally the problem, for timeloop-model."""
    for opt, path in (("--output", output), ("--problem", problem)):
        if path is not None:
            check_output_file(path, opt)
    if output is not None and problem is not None and Path(output).resolve() == Path(problem).resolve():
        raise SpecError("is the same file as --output", where="--problem")
    op, acc, m = load_problem(workload, arch, mapping)
    validate(op, acc, m)
    names = {} if our_names else timeloop_names(op)
    names.update(parse_renames(renames))
    check_names(op, names, "--rename")
    text = timeloop_yaml(op, acc, m, names)
    problem_text = timeloop_problem_yaml(op, names) if problem is not None else None
    if output is None:
        click.echo(text, nl=False)
    else:
        write_atomic(Path(output), text)
        click.echo(f"wrote {output}")
    if problem_text is not None:
        write_atomic(Path(problem), problem_text)
        click.echo(f"wrote {problem}", err=output is None)
