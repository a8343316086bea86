"""``accelmap codegen``: emit C for a mapped operator; ``--run`` compiles it and checks it."""

from __future__ import annotations

import math
from pathlib import Path

import click

from accelmap.arch.accelerator import adopt_precision
from accelmap.cli import main
from accelmap.cli.arch_cmd import resolve_accelerator
from accelmap.cli.evaluate_cmd import load_laid_out
from accelmap.codegen.c_source import DTYPES, generate_c
from accelmap.codegen.execute import check_mapping
from accelmap.errors import SpecError
from accelmap.file_io import check_output_file, write_atomic
from accelmap.workload.files import load_workload

# Executing a mapped operator (codegen --run, simulate --functional) runs generated C that counts
# every transfer, about 10^7 MACs a second, on random tensors held in memory.
RUN_MAX_MACS = 1 << 28
RUN_MAX_ELEMENTS = 1 << 25


def check_executable(op, option: str) -> None:
    """Refuse, with one line and before any work, an operator too large to execute."""
    if op.macs > RUN_MAX_MACS:
        raise SpecError(f"{op.name}: {op.macs:.3g} MACs is too many to execute (at most {RUN_MAX_MACS:.3g}, "
                        "about half a minute)", where=option)
    for o in op.operands:
        n = math.prod(op.index_extent(o))
        if n > RUN_MAX_ELEMENTS:
            raise SpecError(f"{op.name}: operand {o.name} has {n:.3g} elements, too many to execute (at most "
                            f"{RUN_MAX_ELEMENTS:.3g})", where=option)


def load_problem(workload: str, arch: str, mapping: str):
    """Operator (with the DRAM layouts the mapping file states), accelerator and mapping from CLI arguments
    (shared with ``simulate``)."""
    acc = resolve_accelerator(arch)
    op, stated = load_workload(workload)
    if not stated:
        op = adopt_precision(op, acc)
    op, m = load_laid_out(mapping, acc, op)
    return op, acc, m


@main.command("codegen")
@click.option("--workload", "-w", required=True, help="Workload YAML.")
@click.option("--arch", "-a", required=True, help="Preset name, accelerator YAML or ZigZag hardware YAML.")
@click.option("--mapping", "-m", required=True, help="Mapping YAML or loop-nest text.")
@click.option("--output", "-o", default=None, help="C file to write (default: print to stdout unless --run).")
@click.option("--dtype", type=click.Choice(DTYPES), default="int", show_default=True,
              help="int: int8 x int8 -> int32 (by operand precision); fp32: float everywhere.")
@click.option("--run", is_flag=True, help="Compile, run on random inputs, compare with NumPy and the cost model.")
@click.option("--seed", default=0, show_default=True, help="Seed of the random inputs.")
def codegen_cmd(workload, arch, mapping, output, dtype, run, seed):
    """Emit C with explicit tile transfers for a mapping (refused if the mapping does not fit)."""
    if output is not None:
        check_output_file(output, "--output")
    op, acc, m = load_problem(workload, arch, mapping)
    if run:
        check_executable(op, "--run")
    src = generate_c(op, acc, m, dtype)   # validates first: nothing is written for a bad mapping
    if output is not None:
        write_atomic(Path(output), src)
        click.echo(f"wrote {output} ({len(src.splitlines())} lines)")
    elif not run:
        click.echo(src, nl=False)
        return
    if not run:
        return
    rep = check_mapping(op, acc, m, dtype=dtype, seed=seed, c_path=output)
    click.echo(f"{op}\non {acc.name}, dtype {dtype}: generated in {rep.generate_s * 1e3:.0f} ms, "
               f"compiled in {rep.compile_s:.2f} s, ran in {rep.run_s * 1e3:.1f} ms ({rep.library})")
    click.echo(rep.table())
    verdict = "bit-exact" if dtype == "int" else "within fp32 tolerance"
    click.echo(f"output vs NumPy: {verdict if rep.exact else 'MISMATCH'} (max abs error {rep.max_abs_error:g}); "
               f"transfer counts vs cost model: {'equal' if rep.counts_equal else 'DIFFERENT'}")
    if not rep.ok:
        raise SpecError("generated code disagrees: " + "; ".join(rep.mismatches or ["output differs from NumPy"]),
                        where=str(rep.c_file))
