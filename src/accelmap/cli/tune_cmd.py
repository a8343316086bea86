"""``accelmap tune``: tune an operator's schedule knobs by measuring configurations."""

from __future__ import annotations

from pathlib import Path

import click

from accelmap.arch.accelerator import adopt_precision
from accelmap.arch.presets import get_accelerator, preset_names, preset_path
from accelmap.cli import main
from accelmap.errors import SpecError
from accelmap.file_io import check_output_dir, check_output_file
from accelmap.tune.measure import BACKENDS, Measurer
from accelmap.tune.template import ScheduleTemplate
from accelmap.tune.tuners import TUNERS
from accelmap.workload.files import load_workload
from accelmap.yaml_io import load_yaml


def _arch_source(arch: str) -> dict | None:
    """The accelerator's YAML data, to write the tuned variant from (None for a ZigZag file)."""
    path = preset_path(arch) if arch in preset_names() else Path(arch)
    data = load_yaml(path)
    return data if isinstance(data, dict) and "levels" in data and "compute" in data else None


@main.command("tune")
@click.option("--workload", "-w", required=True, help="Workload YAML (a conv2d, dense or matmul operator).")
@click.option("--arch", "-a", required=True, help="Preset name or accelerator YAML.")
@click.option("--backend", type=click.Choice(BACKENDS), default="sim", show_default=True,
              help="sim: the accelerator simulator; host: the emitted C timed on this CPU; model: the analytical model.")
@click.option("--tuner", "tuners", type=click.Choice(TUNERS), multiple=True,
              help="Tuner to run (repeat to compare several; default: validity).")
@click.option("--trials", default=200, show_default=True, type=click.IntRange(min=1),
              help="Measurements per tuner.")
@click.option("--batch", default=50, show_default=True, type=click.IntRange(min=1),
              help="Configurations per batch (the model is retrained after each).")
@click.option("--step", default=None, type=click.IntRange(min=1),
              help="Configurations measured at a time, a divisor of --batch (AutoTVM's n_parallel; default: the "
                   "batch). Only validity-edge-follow uses the steps: it follows a new best in the next one.")
@click.option("--workers", default=None, type=click.IntRange(min=1),
              help="Parallel measurement processes (default: 2 for sim and model, 1 for host).")
@click.option("--timeout", default=60.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Seconds one measurement may take before it counts as failed.")
@click.option("--log", "log_path", default=None,
              help="JSON-lines measurement log; an existing one is resumed (default: OUT/measurements.jsonl).")
@click.option("--out", "-o", "out_dir", default=None, help="Output folder (default: out/tune-WORKLOAD-ARCH-BACKEND).")
@click.option("--seed", default=0, show_default=True, help="Seed of the tuners.")
@click.option("--layout-knob", is_flag=True,
              help="Also tune the input's DRAM layout (NCHW or NHWC, conv2d): it decides which tiles one DMA "
                   "transfer moves and the host's memory strides; the model and simulator price it by the rows a tile load reads "
                   "when the accelerator states read_row_cycles.")
@click.option("--no-plots", is_flag=True, help="Skip the convergence plot.")
def tune_cmd(workload, arch, backend, tuners, trials, batch, step, workers, timeout, log_path, out_dir, seed,
             layout_knob, no_plots):
    """Tune tiling, loop order and virtual threads of one operator by measuring configurations."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from accelmap.report.tuning_report import format_summary, write_tuning_folder
    from accelmap.tune.session import tune_operator

    acc = get_accelerator(arch)
    op, stated = load_workload(workload)
    if not stated:
        op = adopt_precision(op, acc)
    out = Path(out_dir) if out_dir else Path("out") / f"tune-{op.name}-{acc.name}-{backend}"
    check_output_dir(out, "--out")
    if log_path is not None:
        check_output_file(log_path, "--log")
        log = Path(log_path)
    else:
        log = out.parent / f"{out.name}.measurements.jsonl"
    tuners = tuners or ("validity",)
    workers = workers or (1 if backend == "host" else 2)
    template = ScheduleTemplate(op, acc, layout_knob=layout_knob)   # refuses an operator the template cannot express, at once
    # refuses a bad backend, a too-large operator or an unreadable log before the progress bar
    measurer = Measurer(template, backend, workers=workers, timeout=timeout, log=log)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  transient=True) as progress:
        tasks = {name: progress.add_task(f"{name:<18}", total=trials) for name in tuners}

        def on_batch(name, run):
            best = run.best
            label = f"{name:<18} best {best.cost:,.4g}" if best is not None else f"{name:<18} no valid yet"
            progress.update(tasks[name], completed=len(run.history), description=label)

        rep = tune_operator(op, acc, backend=backend, tuners=tuple(tuners), trials=trials, batch_size=batch,
                            step=step, seed=seed, workers=workers, timeout=timeout, log=log, template=template,
                            measurer=measurer, on_batch=on_batch)
    click.echo(format_summary(rep))
    files = write_tuning_folder(rep, out, _arch_source(arch), plots=not no_plots)
    click.echo(f"wrote {out}/ ({', '.join(p.name for p in files)}); measurement log {log}")
    if rep.best is None:
        raise SpecError(f"no valid configuration among the {sum(len(r.history) for r in rep.runs)} measured "
                        f"(see {log})", where=op.name)
