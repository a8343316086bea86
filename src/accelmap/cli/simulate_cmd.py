"""``accelmap simulate``: run a mapping's tile program on the accelerator model."""

from __future__ import annotations

import click

from accelmap.cli import main
from accelmap.cli.codegen_cmd import load_problem
from accelmap.mapping.forms import format_text
from accelmap.sim.simulate import simulate
from accelmap.sim.timeline import plot_timeline


@main.command("simulate")
@click.option("--workload", "-w", required=True, help="Workload YAML.")
@click.option("--arch", "-a", required=True, help="Preset name or accelerator YAML.")
@click.option("--mapping", "-m", required=True, help="Mapping YAML or loop-nest text.")
@click.option("--timeline", default=None, help="Write a timeline plot (PNG) of the first instructions.")
@click.option("--functional/--no-functional", default=None,
              help="Also execute the data and compare with NumPy (default: for operators up to 2M MACs).")
def simulate_cmd(workload, arch, mapping, timeline, functional):
    """Cycles, per-unit utilization and a timeline of a mapping; compares with the analytical model."""
    op, acc, m = load_problem(workload, arch, mapping)
    res = simulate(op, acc, m, functional=functional)
    click.echo(f"{op}\non {acc.name}:\n")
    click.echo(format_text(m, acc, op))
    click.echo("")
    click.echo(res.summary())
    if timeline:
        plot_timeline(res.timing, timeline, f"{op.name} on {acc.name}")
        click.echo(f"wrote {timeline}")
