"""``accelmap dse``: map a model on every design of a design space; Pareto fronts, mappings, plot."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from accelmap.cli import main
from accelmap.cli.interrupt import stop_cleanly
from accelmap.cli.map_cmd import load_workload
from accelmap.dse.arch_search import format_sunstone, run_sunstone, write_sunstone
from accelmap.dse.engines import ENGINES
from accelmap.dse.layer_budget import BUDGET_WEIGHTS
from accelmap.dse.report import format_summary, write_report
from accelmap.dse.space import METHODS, OBJECTIVES, load_space
from accelmap.dse.sweep import WARM_NEIGHBOURS, run_sweep
from accelmap.errors import SpecError
from accelmap.file_io import check_output_dir
from accelmap.search.cache import default_cache_path
from accelmap.search.mapper import STRATEGIES


def default_store_path() -> Path:
    return default_cache_path().parent / "designs.sqlite"


@main.command("dse")
@click.argument("space_file", metavar="SPACE.yaml")
@click.option("--model", "-m", required=True, help="Bundled model name, .onnx file, .csv conv table or workload YAML.")
@click.option("--engine", default="local", show_default=True, type=click.Choice(ENGINES),
              help="local: worker processes here; dask/ray: a cluster at --address (or one started on loopback).")
@click.option("--address", default=None, help="Scheduler address of the dask (tcp://host:8786) or ray cluster.")
@click.option("--workers", "-j", type=int, default=None,
              help="Worker processes of the local pool or local cluster (default: every core).")
@click.option("--method", type=click.Choice(METHODS), default=None, help="Override the space's search method.")
@click.option("--samples", type=int, default=None, help="Designs a random search draws.")
@click.option("--seed", type=int, default=None, help="Seed of the random search (and of the mapper's heuristic).")
@click.option("--strategy", type=click.Choice(STRATEGIES), default=None, help="Override the space's mapper strategy.")
@click.option("--objective", type=click.Choice(OBJECTIVES), default=None, help="What each layer's mapping minimises.")
@click.option("--time-limit", type=float, default=None, help="Seconds per layer for the mapper.")
@click.option("--store", "store_file", default=None,
              help=f"Result store (SQLite; default {default_store_path()}); a sweep resumes from it.")
@click.option("--no-store", is_flag=True, help="Map every design again and store nothing.")
@click.option("--batch", type=int, default=None, help="Bind the model's symbolic batch dimension (default 1).")
@click.option("--out", "out_dir", default=None, help="Output folder (default out/dse-SPACE-MODEL); replaced whole.")
@click.option("--no-progress", is_flag=True, help="No progress bar (it is off anyway when not on a terminal).")
@click.option("--no-plots", is_flag=True, help="Skip the plot.")
@click.option("--tile-dominance", is_flag=True,
              help="Sunstone co-search only: also drop configurations by the thesis' Observation 4 (a larger tile "
                   "that fits the same memory is assumed never worse). Not certified: it may lose the optimum.")
@click.option("--root-bounds", is_flag=True,
              help="Sunstone co-search only: before mapping a configuration, drop it when the exact search's own "
                   "unrolling and root bounds show no mapping of it beats the best value found so far (rule R; "
                   "certified; a few tenths of a CPU second per configuration).")
@click.option("--root-order", is_flag=True,
              help="Sunstone co-search only: raise every configuration's bound to the exact search's unrolling and "
                   "root bounds before mapping any, and map them in that order, so the bound's stop cuts every "
                   "configuration it can (certified; a few tenths of a CPU second per configuration).")
@click.option("--warm-start", is_flag=True,
              help="Start each design's layers (with --method sunstone, each configuration's) from the best mappings "
                   "of the nearest designs already mapped, validated and re-costed on it; designs go to workers one "
                   "at a time.")
@click.option("--cpu-clock", is_flag=True,
              help="Grid/random sweeps: the heuristic's --time-limit per layer counts the worker's CPU seconds, a "
                   "budget that does not shrink with the machine's load. Each design is then reported as proven or "
                   "best found with its certified gap.")
@click.option("--design-budget", type=float, default=None,
              help="Grid/random sweeps with the heuristic: CPU seconds per design, split over the model's distinct "
                   "layers by their MACs (instead of --time-limit per layer).")
@click.option("--budget-weight", type=click.Choice(BUDGET_WEIGHTS), default="even", show_default=True,
              help="With --design-budget: even, the same seconds for every design; unrollings, in proportion to the "
                   "spatial unrollings the heuristic ranks on each design, the same average over the space.")
@click.option("--warm-neighbours", type=int, default=None,
              help="With --warm-start: how many of the nearest mapped designs give their mappings (default 2).")
@click.option("--prune-dominated", is_flag=True,
              help="Grid/random sweeps: map designs in order of area and skip one whose certified EDP bound is not "
                   "below the EDP of a mapped design of no more area (it is on no EDP-area front).")
def dse_cmd(space_file, model, engine, address, workers, method, samples, seed, strategy, objective, time_limit,
            store_file, no_store, batch, out_dir, no_progress, no_plots, tile_dominance, root_bounds, root_order, warm_start,
            cpu_clock,
            design_budget, budget_weight, warm_neighbours, prune_dominated):
    """Map MODEL on the designs of SPACE.yaml and report the Pareto fronts of energy, latency and area."""
    for flag, v in (("--workers", workers), ("--samples", samples), ("--batch", batch),
                    ("--warm-neighbours", warm_neighbours)):
        if v is not None and v < 1:
            raise SpecError(f"must be a positive integer, got {v}", where=flag)
    if time_limit is not None and not time_limit > 0:
        raise SpecError(f"must be positive seconds, got {time_limit}", where="--time-limit")
    if design_budget is not None and time_limit is not None:
        raise SpecError("a budget per design replaces the time limit per layer; give one of them",
                        where="--design-budget")
    if budget_weight != "even" and design_budget is None:
        raise SpecError("shares the budget per design between the designs; add --design-budget S",
                        where="--budget-weight")
    if design_budget is not None and not design_budget > 0:
        raise SpecError(f"must be positive CPU seconds, got {design_budget}", where="--design-budget")
    if address and engine == "local":
        raise SpecError("applies to the dask and ray engines; add --engine dask", where="--address")
    space = load_space(space_file)
    from dataclasses import replace
    if method or samples or seed is not None:
        space = replace(space, method=method or ("random" if samples else space.method),
                        samples=samples or space.samples, seed=seed if seed is not None else space.seed)
    if space.method == "sunstone":
        # The co-search visits configurations in order of their bounds and prunes on what it found so far:
        # it runs in this process, and its answers are per layer, not designs for the store.
        for flag, given in (("--engine", engine != "local"), ("--address", address), ("--workers", workers),
                            ("--store", store_file), ("--samples", samples), ("--cpu-clock", cpu_clock),
                            ("--design-budget", design_budget), ("--warm-neighbours", warm_neighbours),
                            ("--prune-dominated", prune_dominated)):
            if given:
                raise SpecError("applies to grid and random sweeps; search method sunstone runs in this process "
                                "and stores nothing", where=flag)
    for flag, given in (("--tile-dominance", tile_dominance), ("--root-bounds", root_bounds),
                        ("--root-order", root_order)):
        if given and space.method != "sunstone":
            raise SpecError("applies to search method sunstone only (--method sunstone)", where=flag)
    m, _ = load_workload(model, batch, None, None)
    out = Path(out_dir) if out_dir else Path("out") / f"dse-{space.name}-{m.name}"
    check_output_dir(out, "--out")
    if space.method == "sunstone":
        sres = run_sunstone(space, m, strategy=strategy, objective=objective, time_limit=time_limit,
                            seed=seed or 0, tile_dominance=tile_dominance, warm_start=warm_start,
                            root_bounds=root_bounds, root_order=root_order)
        click.echo(format_sunstone(sres))
        files = write_sunstone(sres, out)
        click.echo(f"\nwrote {', '.join(f.name for f in files)} to {out}/")
        return
    store = None if no_store else (store_file or default_store_path())
    import os
    with stop_cleanly(store, "mapped designs"):
        res = run_sweep(space, m, engine=engine, workers=workers or os.cpu_count() or 1, address=address,
                        store_path=store, progress=False if no_progress else None, strategy=strategy,
                        objective=objective, time_limit=time_limit, seed=seed or 0, warm_start=warm_start,
                        cpu_clock=cpu_clock, design_budget=design_budget,
                        warm_neighbours=warm_neighbours if warm_neighbours is not None else WARM_NEIGHBOURS,
                        prune=prune_dominated, budget_weight=budget_weight)
    click.echo(format_summary(res))
    files = write_report(res, out, plots=not no_plots)
    click.echo(f"\nwrote {', '.join(f.name for f in files)} to {out}/")
    if not any(o.status == "mapped" for o in res.outcomes):
        # A sweep with no fully mapped design has no front: say so in the exit code, not only in the table.
        click.echo("error: no design of the space mapped every layer of the model; see the reasons above", err=True)
        sys.exit(1)
