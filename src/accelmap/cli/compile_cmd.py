"""``accelmap compile MODEL --arch A [--out DIR]``: one verified C program for a whole network, and a report."""

from __future__ import annotations

import json
from pathlib import Path

import click
import numpy as np

from accelmap.cli import main
from accelmap.cli.arch_cmd import resolve_accelerator
from accelmap.cli.import_cmd import parse_dims
from accelmap.compile.flow import compile_model
from accelmap.compile.intrinsic_choice import POLICIES
from accelmap.errors import SpecError
from accelmap.file_io import check_output_dir
from accelmap.fusion.search import DEFAULT_FUSION, FusionConfig
from accelmap.search.objective import OBJECTIVES
from accelmap.workload.models import BUNDLED
from accelmap.workload.models.bundled import bundled_model_path


def _load_inputs(path: str) -> dict[str, np.ndarray]:
    """An .npz file with one array per graph input name."""
    try:
        with np.load(path) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError) as e:
        raise SpecError(f"cannot read the inputs: {e}; give an .npz file with one array per graph input",
                        where=f"--input {path}") from None


@main.command("compile")
@click.argument("model")
@click.option("-a", "--arch", "arch_name", required=True, help="Accelerator preset or YAML file.")
@click.option("-o", "--out", "out_dir", default=None, help="Output folder (default out/MODEL-ARCH-compile).")
@click.option("--batch", type=int, default=None, help="Batch size for a symbolic batch dim (default 1).")
@click.option("--seq-len", type=int, default=None, help="Sequence length for a symbolic sequence dim.")
@click.option("--dim", "dim_items", multiple=True, help="Bind a symbolic dim: NAME=VALUE (repeatable).")
@click.option("--objective", type=click.Choice(OBJECTIVES), default="edp", show_default=True)
@click.option("--time-limit", type=float, default=2.0, show_default=True, help="Mapper seconds per layer.")
@click.option("--jobs", type=int, default=1, show_default=True, help="Mapper worker processes.")
@click.option("--input", "input_path", default=None, help="Inputs (.npz, one array per graph input); default random.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of random weights, inputs and mapper.")
@click.option("--no-run", is_flag=True, help="Build only: do not run, verify or report the run.")
@click.option("--no-verify", is_flag=True, help="Run, but do not compare with onnxruntime.")
@click.option("--no-simulate", is_flag=True, help="Do not time the layers on the simulator.")
@click.option("--intrinsics", "intrinsics", type=click.Choice(POLICIES), default="always", show_default=True,
              help="always: a layer runs its intrinsic program wherever the accelerator's intrinsic embeds; faster: "
              "only where that is modeled faster than the mapper's tile program; never: tile programs only.")
@click.option("--fuse", is_flag=True, help="Run the fusion search and emit its groups as fused tile loops "
              "(intermediates on chip, halos as the plan chose); needs a shared on-chip store.")
@click.option("--fuse-tile-time", type=float, default=2.0, show_default=True,
              help="With --fuse: seconds of each tile mapping's search.")
@click.option("--fuse-time-limit", type=float, default=None, help="With --fuse: seconds of the whole fusion search.")
@click.option("--fuse-span-residuals", is_flag=True,
              help="With --fuse: groups may span consecutive residual blocks (a block's add run inside the tile loop).")
@click.option("--json", "json_path", default=None, help="Also write a JSON summary to this file.")
@click.option("--timeline-layer", default=None, help="Layer whose simulator timeline the report draws "
              "(default: the one with the most cycles).")
def compile_cmd(model, arch_name, out_dir, batch, seq_len, dim_items, objective, time_limit, jobs, input_path, seed,
                no_run, no_verify, no_simulate, intrinsics, fuse, fuse_tile_time, fuse_time_limit, fuse_span_residuals,
                json_path, timeline_layer):
    """Compile MODEL (an ONNX file or a bundled model) into one C program for ARCH and verify it.

    Writes DIR/main.c, DIR/layer_N.c, DIR/weights.bin, DIR/Makefile, the executable DIR/net and
    DIR/report.html; runs the program once and compares its outputs with onnxruntime. A layer runs as
    the accelerator's intrinsic program where an intrinsic embeds (integer layers), else as the
    mapper's tile program; the summary says which and why. With --fuse, chains of convolutions run as the
    fusion search's groups (one tile loop each), verified and simulated like the rest.
    """
    if not fuse and (fuse_time_limit is not None or fuse_tile_time != 2.0 or fuse_span_residuals):
        raise SpecError("--fuse-tile-time, --fuse-time-limit and --fuse-span-residuals need --fuse", where="--fuse")
    arch = resolve_accelerator(arch_name)
    path = bundled_model_path(model) if model in BUNDLED else Path(model)
    if not path.exists():
        raise SpecError(f"no such file; give an ONNX file or a bundled model ({', '.join(BUNDLED)})",
                        where=f"model {model}")
    out = Path(out_dir) if out_dir else Path("out") / f"{path.stem}-{arch.name}-compile"
    check_output_dir(out, "--out")
    inputs = _load_inputs(input_path) if input_path else None
    res = compile_model(path, arch, out, dims=dict(parse_dims(dim_items)), batch=batch, seq_len=seq_len,
                        objective=objective, time_limit_per_layer=time_limit, jobs=jobs, seed=seed, inputs=inputs,
                        run=not no_run, check=not (no_run or no_verify), simulate=not no_simulate,
                        intrinsics=intrinsics, fuse=fuse, fuse_tile_time_limit=fuse_tile_time,
                        fuse_time_limit=fuse_time_limit,
                        fuse_config=FusionConfig(span_residuals=True) if fuse_span_residuals else DEFAULT_FUSION)
    from accelmap.report.compile_report import write_compile_report

    report = write_compile_report(res, out, timeline_layer)
    click.echo(res.summary())
    click.echo(f"report: {report}")
    if json_path:
        Path(json_path).write_text(json.dumps(res.to_dict(), indent=2) + "\n")
    if res.verification is not None and not res.verification.ok:
        raise SystemExit(1)

