"""``accelmap embed``: every way an intrinsic computes an operator, with layouts and programs."""

from __future__ import annotations

import click

from accelmap.arch.intrinsics import get_intrinsic
from accelmap.arch.presets import get_accelerator
from accelmap.cli import main
from accelmap.embed.program import check_runnable, verify_program
from accelmap.embed.search import embed
from accelmap.embed.tcg_embed import topdown_embed, verify
from accelmap.errors import SpecError
from accelmap.examples import example_path
from accelmap.workload.files import load_operator


@main.command("embed")
@click.option("--workload", "-w", default=None, help="Workload YAML (default: the bundled example conv).")
@click.option("--method", type=click.Choice(["dataflow", "topdown"]), default="dataflow", show_default=True,
              help="dataflow: the bottom-up embedding of chapter 4; topdown: TCG matching with rewrites (chapter 3).")
@click.option("--intrinsic", "-i", "intrinsic", default="vta_gemm", show_default=True,
              help="Intrinsic: a library name, a name in --arch, or an intrinsic YAML.")
@click.option("--arch", "-a", default="vta_like", show_default=True,
              help="Accelerator for the modelled latency (preset name or YAML).")
@click.option("--mode", type=click.Choice(["strict", "relaxed"]), default="relaxed", show_default=True)
@click.option("--top", "top", default=3, show_default=True, type=int, help="How many embeddings to print.")
@click.option("--time-limit", default=30.0, show_default=True, type=float, help="Search time limit, seconds.")
@click.option("--run", "run_it", is_flag=True, help="Execute each printed program and compare with the reference.")
@click.option("--mapper/--no-mapper", "use_mapper", default=True, show_default=True,
              help="Re-cost the printed embeddings through the mapper (latency on --arch; about 1 s each).")
def embed_cmd(workload, method, intrinsic, arch, mode, top, time_limit, run_it, use_mapper):
    """Embed a hardware intrinsic into an operator (Rieber's 2022 dissertation, ch. 4; ch. 3 with --method topdown)."""
    if top < 1:
        raise SpecError(f"must be at least 1, got {top}", where="--top")
    if not (0 < time_limit < 1e9):   # also refuses nan and inf
        raise SpecError(f"must be a positive number of seconds, got {time_limit}", where="--time-limit")
    acc = get_accelerator(arch)
    intr = get_intrinsic(intrinsic, acc)
    op = load_operator(workload or example_path("conv_small.yaml"))
    if method == "topdown":
        ctx = click.get_current_context()
        for name, flag in (("mode", "--mode"), ("use_mapper", "--mapper/--no-mapper")):
            if ctx.get_parameter_source(name) != click.core.ParameterSource.DEFAULT:
                raise SpecError("applies to the dataflow method only, not to --method topdown", where=flag)
        _topdown(op, intr, top, time_limit, run_it)
        return
    if run_it:
        check_runnable(op)
    res = embed(op, intr, mode, arch=acc, time_limit=time_limit, mapper_top=top if use_mapper else 0)
    click.echo(str(op))
    click.echo(str(intr))
    click.echo(res.summary())
    if not res.found:
        raise SystemExit(1)
    ref = res.embeddings[0].costs
    for k, e in enumerate(res.embeddings[:top], 1):
        c = e.costs
        prog = e.program
        lat = f"{c.latency:,.0f} cycles on {acc.name}" if c.latency is not None else "latency n/a"
        click.echo(f"\n#{k} {e.solution}   [{e.solution.search}]")
        click.echo(f"   calls {c.calls:,} (MAC utilization {c.utilization:.1%}), {lat}, "
                   f"layout traffic {c.transform_bytes:,} B, memory {c.memory_bytes:,} B")
        click.echo("   features: " + "; ".join(f"{o}=[{', '.join(map(str, fs))}]" for o, fs in prog.features))
        click.echo("   rules: " + (", ".join(prog.rules) or "none"))
        for lay in prog.layouts:
            for r in lay.rewrites:
                click.echo(f"     {lay.operand}: {r}")
        click.echo("   program:")
        for line in prog.text().splitlines():
            click.echo("     " + line)
        if run_it:
            ok, msg = verify_program(prog)
            click.echo(f"   run: {'OK' if ok else 'MISMATCH'} - {msg}")
            if not ok:
                raise SystemExit(1)
    del ref


def _topdown(op, intr, top: int, time_limit: float, run_it: bool) -> None:
    res = topdown_embed(op, intr, time_limit=time_limit)
    click.echo(str(op))
    click.echo(str(intr))
    click.echo(res.summary())
    if not res.found:
        raise SystemExit(1)
    for k, e in enumerate(res.embeddings[:top], 1):
        cand = e.candidate
        click.echo(f"\n#{k} {cand.program}   [{cand.transformations} transformations]")
        click.echo(f"   calls {e.call_count:,} (MAC utilization {e.utilization:.1%}), {e.cycles:,} issue cycles "
                   f"(calls x {intr.name}'s issue interval {intr.cycles}; compute only, no memory model)")
        click.echo(f"   selection: {cand.selection}")
        click.echo("   layouts: " + ("; ".join(e.layouts) or "unchanged"))
        click.echo("   program:")
        for call in e.calls:
            for line in call.text():
                click.echo("     " + line)
        if run_it:
            ok, msg = verify(res, e)
            click.echo(f"   run: {'OK' if ok else 'MISMATCH'} - {msg}")
            if not ok:
                raise SystemExit(1)
