"""``accelmap match``: top-down instruction matching on a tensor compute graph (Rieber's 2022 dissertation, ch. 3)."""

from __future__ import annotations

import os

import click

from accelmap.cli import main
from accelmap.embed.tcg import (
    THESIS_OPERATORS,
    Program,
    build_tcg,
    parse_program,
    program_from_operator,
)
from accelmap.embed.tcg_match import get_isa
from accelmap.embed.tcg_rewrite import CONFIGS, canonicalise, search
from accelmap.embed.tcg_tiling import instruction_calls
from accelmap.errors import SpecError
from accelmap.workload.files import load_operator
from accelmap.workload.models.bundled import BUNDLED, load_model


def _sizes(text: str | None) -> dict[str, int]:
    out: dict[str, int] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        name, eq, value = part.partition("=")
        if not eq or not value.strip().isdigit() or int(value) < 1:
            raise SpecError(f"{part.strip()!r} is not name=positive integer (e.g. i=16,j=16,k=16)", where="--sizes")
        out[name.strip()] = int(value)
    return out


def _model_layer(model: str, layer: str) -> Program:
    """One layer of an ONNX model (a bundled name or an .onnx file) as a program: its operator's
    multiply-accumulate (a bias is an epilogue of the import, not part of the operator)."""
    m = load_model(model, allow_unknown=True)
    for lay in m.layers:
        if layer == lay.name or layer in lay.nodes:
            return program_from_operator(lay.operator)
    names = [lay.name for lay in m.layers]
    raise SpecError(f"{model} has no layer {layer!r}; its layers ({len(names)}): {', '.join(names[:12])}"
                    + (", ..." if len(names) > 12 else ""), where="--layer")


def _workload(workload: str, sizes: str | None, layer: str | None = None) -> Program:
    is_model = workload in BUNDLED or workload.endswith(".onnx")
    if layer is not None or is_model:
        if not (is_model and layer):
            raise SpecError("--layer NAME goes with a model (a bundled name or an .onnx file) as --workload, "
                            f"got --workload {workload!r}" + ("" if layer else " without --layer"), where="--layer")
        if sizes:
            raise SpecError("a model layer has its own sizes", where="--sizes")
        return _model_layer(workload, layer)
    given = _sizes(sizes)
    if workload in THESIS_OPERATORS:
        text, default = THESIS_OPERATORS[workload]
        unknown = sorted(set(given) - set(default))
        if unknown:
            raise SpecError(f"{workload} has no dimensions {unknown}; its dimensions: {', '.join(default)}",
                            where="--sizes")
        return parse_program(text, {**default, **given}, workload)
    if "=" in workload:
        return parse_program(workload, given, "program")
    if os.path.exists(workload):
        return program_from_operator(load_operator(workload))
    raise SpecError(f"{workload!r} is neither an operator of Table 3.3 ({', '.join(THESIS_OPERATORS)}), "
                    "a program like 'c[i,j] = sum(a[i,k]*b[k,j], k)' nor a workload file", where="--workload")


@main.command("match")
@click.option("--workload", "-w", required=True,
              help=f"An operator of Table 3.3 ({', '.join(THESIS_OPERATORS)}), a program text, a workload YAML, "
                   "or a model with --layer.")
@click.option("--sizes", default=None, help="Dimension sizes for a program text, e.g. i=16,j=16,k=16.")
@click.option("--layer", default=None,
              help="With a model as --workload (a bundled name such as resnet18, or an .onnx file): the layer to "
                   "match, by operator or ONNX node name (`accelmap import MODEL` lists them).")
@click.option("--isa", default="table3.1", show_default=True,
              help="table3.1 (Rieber's Table 3.1), library (our intrinsics), or one intrinsic (name or YAML).")
@click.option("--config", "config", default=4, show_default=True, type=click.IntRange(1, 4),
              help="Search configuration of Table 3.4: " + "; ".join(f"{k} = {v}" for k, v in CONFIGS.items()))
@click.option("--transposes/--no-transposes", default=True, show_default=True,
              help="Also try every access order of the graph inputs (input transposes).")
@click.option("--output-transposes/--no-output-transposes", default=False, show_default=True,
              help="Also try every result order of every statement (output transposes; grows the search fast).")
@click.option("--layouts/--no-layouts", default=False, show_default=True,
              help="Also try the global layout permutations of Table 3.5 (one order for all top-rank tensors).")
@click.option("--limit", default=100_000, show_default=True, type=click.IntRange(1),
              help="Stop after this many candidate graphs.")
@click.option("--show", default=3, show_default=True, type=click.IntRange(0), help="How many solutions to print.")
@click.option("--tree/--no-tree", default=True, show_default=True, help="Print the canonical TCG.")
@click.option("--lanes", default=None, type=click.IntRange(1),
              help="Size of a Table 3.1 instruction along each of its dimensions (an intrinsic keeps its own): print "
                   "tiling and padding (eq. 3.5/3.6) and issue cycles (calls x issue interval, 1 for Table 3.1).")
def match_cmd(workload, sizes, layer, isa, config, transposes, output_transposes, layouts, limit, show, tree, lanes):
    """Match hardware instructions top-down on a tensor compute graph and search rewrites (Rieber, ch. 3)."""
    prog = _workload(workload, sizes, layer)
    instructions = get_isa(isa)
    click.echo(f"program: {prog}")
    if tree:
        click.echo(build_tcg(canonicalise(prog)).pretty())
    res = search(prog, instructions, config, input_transposes=transposes, output_transposes=output_transposes,
                 layouts=layouts, limit=limit)
    med = res.median_transformations()
    extra = (", input transposes" if transposes else "") + (", output transposes" if output_transposes else "") + (
        ", global layouts" if layouts else "")
    click.echo(f"config {config} ({CONFIGS[config]}{extra}), "
               f"{len(instructions)} instruction{'s' if len(instructions) != 1 else ''}: {res.nodes} nodes, "
               f"{len(res.candidates):,} candidates"
               f"{' (limit reached)' if len(res.candidates) >= limit else ''}, {len(res.solutions):,} solutions "
               f"({res.solutions_up_to_swaps:,} with operand-swap twins counted once), "
               f"hit rate {res.hit_rate:.1%}, median transformations {'-' if med is None else f'{med:g}'}, "
               f"{res.seconds:.2f} s")
    for k, cand in enumerate(res.solutions[:show], 1):
        click.echo(f"\n#{k} ({cand.transformations} transformations) {cand.program}")
        click.echo(f"   {cand.selection}")
        if lanes:
            issued = instruction_calls(cand.program, cand.tcg, cand.selection, instructions, lanes)
            click.echo("   tiling: " + "; ".join(str(t) for c in issued for t in c.dims))
            click.echo(f"   cycles: {sum(c.cycles for c in issued):,} issue cycles (" + " + ".join(
                f"{c.instruction} {c.calls:,} x {c.cycles_per_call}" for c in issued) + ")")
    if not res.solutions:
        best = max(res.candidates, key=lambda c: (c.selection.algebraic_covered, c.selection.covered))
        click.echo(f"\nno candidate is fully covered; best: {best.program}\n   {best.selection}")
        raise SystemExit(1)
