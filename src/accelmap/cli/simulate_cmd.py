"""``accelmap simulate``: run a mapping's tile program on the accelerator model."""

from __future__ import annotations

import click

from accelmap.cli import main
from accelmap.cli.codegen_cmd import check_executable, load_problem
from accelmap.errors import SpecError
from accelmap.file_io import atomic_path, check_output_file
from accelmap.mapping.forms import format_text
from accelmap.mapping.validate import validate
from accelmap.sim.program import tile_steps
from accelmap.sim.simulate import FUNCTIONAL_MAX_MACS, simulate
from accelmap.sim.timeline import plot_timeline

MAX_STEPS = 1_000_000


@main.command("simulate")
@click.option("--workload", "-w", required=True, help="Workload YAML.")
@click.option("--arch", "-a", required=True, help="Preset name, accelerator YAML or ZigZag hardware YAML.")
@click.option("--mapping", "-m", required=True, help="Mapping YAML or loop-nest text.")
@click.option("--timeline", default=None, help="Write a timeline plot of the first instructions to this .png file.")
@click.option("--functional/--no-functional", default=None,
              help="Also execute the data and compare with NumPy (default: for operators up to 2M MACs).")
def simulate_cmd(workload, arch, mapping, timeline, functional):
    """Cycles, per-unit utilization and a timeline of a mapping; compares with the analytical model."""
    if timeline is not None:
        check_output_file(timeline, "--timeline", ".png")
    op, acc, m = load_problem(workload, arch, mapping)
    validate(op, acc, m)
    steps = tile_steps(op, acc, m)
    if steps > MAX_STEPS:
        raise SpecError(f"the simulator walks every tile step: this mapping has {steps:,}, at most {MAX_STEPS:,} "
                        "(about 10 s and 800 MiB); use 'accelmap evaluate' for its analytical cost", where=str(mapping))
    if functional or (functional is None and op.macs <= FUNCTIONAL_MAX_MACS):
        check_executable(op, "--functional")
    res = simulate(op, acc, m, functional=functional)
    click.echo(f"{op}\non {acc.name}:\n")
    click.echo(format_text(m, acc, op))
    click.echo("")
    click.echo(res.summary())
    if timeline is not None:
        with atomic_path(timeline) as tmp:
            plot_timeline(res.timing, tmp, f"{op.name} on {acc.name}")
        click.echo(f"wrote {timeline}")
