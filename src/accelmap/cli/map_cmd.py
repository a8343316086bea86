"""``accelmap map``: map every layer of a model (or one operator) and report the whole model."""

from __future__ import annotations

import logging
import math
import sys
from pathlib import Path

import click

from accelmap.cli import main
from accelmap.cli.arch_cmd import resolve_accelerator
from accelmap.cli.import_cmd import parse_dims, parse_precision
from accelmap.cli.interrupt import stop_cleanly
from accelmap.cost.model import check_countable
from accelmap.errors import SpecError
from accelmap.file_io import check_output_dir
from accelmap.report.model_report import format_summary, write_report
from accelmap.search.cache import default_cache_path
from accelmap.search.mapper import STRATEGIES
from accelmap.search.model_mapper import map_model
from accelmap.search.objective import OBJECTIVES
from accelmap.search.space import Constraints, constraints_from_yaml
from accelmap.workload import files as workload_files
from accelmap.workload.models import BUNDLED, Layer, ModelImport, load_model
from accelmap.yaml_io import load_yaml


def _fuse(mm, time_limit: float | None, tile_time: float | None, fuse_time_limit: float | None, exact: bool = False,
          span: bool = False, shared_port: bool = False):
    """The fused plan on top of the layer-by-layer mapping, printed; the tiles' searches take
    ``tile_time`` each (default a tenth of the per-layer time limit, at least 0.1 s); ``span``: groups may
    span residual blocks; ``shared_port``: one off-chip port for reads and writes, in both plans."""
    from dataclasses import replace

    from accelmap.fusion.model_fusion import fuse_model
    from accelmap.fusion.search import DEFAULT_FUSION, EXACT_FUSION
    from accelmap.report.fusion_report import format_fusion

    tile = tile_time if tile_time is not None else max(0.1, (time_limit or 20.0) / 10)
    fm = fuse_model(mm, tile_time_limit=tile, time_limit=fuse_time_limit,
                    config=replace(EXACT_FUSION if exact else DEFAULT_FUSION, span_residuals=span,
                                   shared_offchip_port=shared_port))
    click.echo(format_fusion(fm))
    return fm


def _log_to_stderr(verbosity: int) -> logging.Handler | None:
    """Send the package's log to stderr: INFO at -v, DEBUG at -vv; nothing without -v."""
    if not verbosity:
        return None
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    logger = logging.getLogger("accelmap")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO if verbosity == 1 else logging.DEBUG)
    return handler


def load_constraints(path: str | None) -> Constraints:
    """A YAML file holding the ``constraints:`` section of a mapping file (or just its body)."""
    if path is None:
        return Constraints()
    data = load_yaml(path)
    if isinstance(data, dict) and "constraints" in data:
        extra = set(data) - {"constraints", "mapping", "comment"}
        if extra:
            raise SpecError(f"unknown top-level keys {sorted(extra)}; allowed: constraints, mapping, comment",
                            where=path)
        data = data["constraints"]
    return constraints_from_yaml(data, f"{path}: constraints")


def load_workload(model: str, batch, seq_len, bits, dims=None, lenient: bool = False) -> tuple[ModelImport, bool]:
    """MODEL -> (import, whether it states its own precision)."""
    p = Path(model)
    if model not in BUNDLED and p.suffix in (".yaml", ".yml"):
        for flag, v in (("--batch", batch), ("--seq-len", seq_len)):
            if v is not None:
                raise SpecError("applies to models; a workload YAML gives its sizes itself", where=flag)
        if bits is not None:
            raise SpecError("applies to models; a workload YAML states its precision itself",
                            where="--precision")
        if dims:
            raise SpecError("applies to models; a workload YAML gives its sizes itself", where="--dim")
        op, stated = workload_files.load_workload(p)
        check_countable(op)
        layer = Layer(op, (op.name,), "yaml")
        return ModelImport(p.stem, str(p), (layer,)), stated
    return load_model(model, batch=batch, seq_len=seq_len, dims=dims, bits=bits, allow_unknown=lenient), \
        bits is not None


@main.command("map")
@click.argument("model")
@click.option("--arch", "-a", required=True, help="Preset name, accelerator YAML or ZigZag hardware YAML.")
@click.option("--objective", default="edp", show_default=True,
              type=click.Choice(OBJECTIVES),
              help="What each layer minimizes; pareto: each layer's energy-latency front and the model's.")
@click.option("--strategy", default="auto", show_default=True, type=click.Choice(STRATEGIES),
              help="auto: exact search where the space is small enough, else the heuristic.")
@click.option("--imperfect", is_flag=True,
              help="Search imperfect factorizations too (Ruby-style: any tile size, the last tile partial) in the "
                   "exact strategies (optimal, exhaustive) and random; a proof then covers that larger space. "
                   "Tractable on small layers; see --imperfect-spatial for full-size ones.")
@click.option("--imperfect-spatial", is_flag=True,
              help="Imperfect factorization of the spatial loops only (Ruby-S): any unrolling bound, the last "
                   "round partial; temporal loops divide what is left.")
@click.option("--constraints", "constraints_file", default=None,
              help="YAML with a 'constraints:' section (spatial, orders, forbid_orders, keep, min_utilization).")
@click.option("--jobs", "-j", type=int, default=None, help="Worker processes (default: every core).")
@click.option("--time-limit", type=float, default=None, help="Seconds per layer for the search.")
@click.option("--out", "out_dir", default=None,
              help="Output folder (default out/MODEL-ARCH-OBJECTIVE); replaced whole, never left half-written.")
@click.option("--cache", "cache_file", default=None,
              help=f"Result cache (SQLite; default {default_cache_path()}).")
@click.option("--no-cache", is_flag=True, help="Search every layer again and store nothing.")
@click.option("--batch", type=int, default=None, help="Bind the model's symbolic batch dimension (default 1).")
@click.option("--seq-len", type=int, default=None, help="Bind the model's symbolic sequence length.")
@click.option("--dim", "dim_items", multiple=True, metavar="NAME=VALUE",
              help="Bind a symbolic dimension by name (repeatable); also a Loop's trip count or an If's "
                   "branch (1/0) by node name.")
@click.option("--lenient", is_flag=True,
              help="Map a model that has nodes of op types the importer does not know (listed apart).")
@click.option("--precision", default=None,
              help="Operand bits (I=8,W=8,O=32 or 'onnx'); default: the accelerator's precision.")
@click.option("--no-progress", is_flag=True, help="No progress bar (it is off anyway when not on a terminal).")
@click.option("--no-plots", is_flag=True, help="Skip the PNG plots.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the heuristic and random strategies.")
@click.option("--fuse", is_flag=True,
              help="Also fuse chains of layers (a tile loop over output rows or tokens, intermediates kept on "
                   "chip, halos recomputed or cached): groups, tiles and halo policies, fusion.json and a plot "
                   "of off-chip traffic per layer fused vs unfused.")
@click.option("--fuse-tile-time", type=float, default=None, metavar="SECONDS",
              help="With --fuse: time limit of each fused tile's mapping search (default: a tenth of --time-limit, "
                   "at least 0.1 s).")
@click.option("--fuse-time-limit", type=float, default=None, metavar="SECONDS",
              help="With --fuse: time limit of the whole fusion search; past it no further group is tried, the "
                   "plan is the best over the groups tried and the output says so (default: none).")
@click.option("--fuse-exact", is_flag=True,
              help="With --fuse: search every tile size of each group (up to 4096 output positions), pruned by "
                   "lower bounds, and print a certificate: optimal, or the best found with a proven lower bound "
                   "and gap (each group stops after 60 s).")
@click.option("--fuse-span-residuals", is_flag=True,
              help="With --fuse: groups may span consecutive residual blocks (a block's add inside the group, its "
                   "result kept on chip for the next block and its add; each inner skip kept or re-read by cost).")
@click.option("--fuse-shared-offchip-port", is_flag=True,
              help="With --fuse: the off-chip memory has one port that reads and writes take turns on (as "
                   "AccelForge's main memory), in the fused and the layer-by-layer totals alike; its read and write "
                   "bandwidths must be equal. Default: a port each way, as the architecture format has them.")
@click.option("--verbose", "-v", count=True,
              help="Log the search's decisions to stderr: -v the strategy per layer, the unrollings probed and "
                   "skipped, the climbs and time limits; -vv also every candidate. Implies --no-progress.")
def map_cmd(model, arch, objective, strategy, constraints_file, jobs, time_limit, out_dir, cache_file, no_cache,
            batch, seq_len, dim_items, lenient, precision, no_progress, no_plots, seed, fuse, fuse_tile_time,
            fuse_time_limit, fuse_exact, fuse_span_residuals, fuse_shared_offchip_port, verbose, imperfect,
            imperfect_spatial):
    """Map every layer of MODEL (a bundled name, an .onnx file, a .csv conv table or a workload YAML)."""
    if imperfect and imperfect_spatial:
        raise SpecError("--imperfect and --imperfect-spatial exclude each other (--imperfect already covers the "
                        "spatial-only space); give one", where="--imperfect")
    for flag, v in (("--batch", batch), ("--seq-len", seq_len), ("--jobs", jobs)):
        if v is not None and v < 1:
            raise SpecError(f"must be a positive integer, got {v}", where=flag)
    if time_limit is not None and not (0 < time_limit < math.inf):
        raise SpecError(f"must be positive, finite seconds, got {time_limit}", where="--time-limit")
    for flag, on in (("--fuse-exact", fuse_exact), ("--fuse-span-residuals", fuse_span_residuals),
                     ("--fuse-shared-offchip-port", fuse_shared_offchip_port)):
        if on and not fuse:
            raise SpecError("applies only with --fuse", where=flag)
    for flag, t in (("--fuse-tile-time", fuse_tile_time), ("--fuse-time-limit", fuse_time_limit)):
        if t is not None and not fuse:
            raise SpecError("applies only with --fuse", where=flag)
        if t is not None and not (0 < t < math.inf):
            raise SpecError(f"must be positive, finite seconds, got {t}", where=flag)
    acc = resolve_accelerator(arch)
    if fuse:
        from accelmap.fusion.group_cost import shared_port_bandwidth, store_index

        store_index(acc)    # an accelerator with no level to keep intermediates in is refused before the search
        if fuse_shared_offchip_port:
            shared_port_bandwidth(acc.levels[0], where="--fuse-shared-offchip-port")     # refused before the search
    cons = load_constraints(constraints_file)
    m, keep_bits = load_workload(model, batch, seq_len, parse_precision(precision), parse_dims(dim_items), lenient)
    # The output folder is checked before the search, not after it.
    out = Path(out_dir) if out_dir else Path("out") / f"{m.name}-{acc.name}-{objective}"
    check_output_dir(out, "--out")
    cache = None if no_cache else (cache_file or default_cache_path())
    handler = _log_to_stderr(verbose)
    try:
        with stop_cleanly(cache, "finished layers"):
            mm = map_model(m, acc, objective, constraints=cons, strategy=strategy, time_limit_per_layer=time_limit,
                           jobs=jobs, cache_path=cache, progress=False if no_progress or verbose else None,
                           keep_precision=keep_bits, seed=seed,
                           imperfect=True if imperfect else "spatial" if imperfect_spatial else False)
    finally:
        if handler is not None:
            logging.getLogger("accelmap").removeHandler(handler)
    click.echo(format_summary(mm))
    fused = None
    if fuse:
        with stop_cleanly(cache, "the layers' mappings"):
            fused = _fuse(mm, time_limit, fuse_tile_time, fuse_time_limit, fuse_exact, fuse_span_residuals,
                          fuse_shared_offchip_port)
    files = write_report(mm, out, plots=not no_plots)
    if fused is not None:
        from accelmap.report.fusion_report import write_fusion

        files += write_fusion(fused, f"{mm.model.name} on {mm.arch.name}: off-chip traffic per layer",
                              out, plots=not no_plots)
    click.echo(f"\nwrote {len(files)} files to {out}/ (summary.json, layers.csv, layers/ with each layer's workload and mapping"
               + ("" if no_plots or not mm.mapped else ", energy_breakdown.png, latency_utilization.png"
                  + (", pareto_front.png" if objective == "pareto" else ""))
               + ("" if fused is None else ", fusion.json" + ("" if no_plots else ", offchip_fused_vs_unfused.png"))
               + ")")
    if mm.failed:
        # Incomplete totals are not a result to build on: say so in the exit code too.
        click.echo(f"error: {len(mm.failed)} of {len(mm.layers)} layers not mapped "
                   f"({mm.macs_not_mapped:,} MACs); see 'not mapped' above", err=True)
        sys.exit(1)
