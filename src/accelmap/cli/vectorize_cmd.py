"""``accelmap vectorize``: tune and compile a convolution for a 2D-SIMD core with a shuffle network."""

from __future__ import annotations

from pathlib import Path

import click

from accelmap.arch.presets import get_accelerator
from accelmap.cli import main
from accelmap.errors import AccelmapError
from accelmap.file_io import check_output_file, write_atomic
from accelmap.vector.compiler import describe_math
from accelmap.vector.emit_cpp import emit_cpp, run_kernel
from accelmap.vector.machine import core_from_accelerator
from accelmap.vector.tuner import tune
from accelmap.vector.workloads import conv_from_operator, paper_rows, paper_workload
from accelmap.workload.files import load_workload

PRECISIONS = {"int16": 16, "int32": 32}


def resolve_workload(workload: str, bits: int):
    """A paper workload name (CV-3x3, REG-5x5, FC, CONV3D-3x3x3, ...) or a conv2d workload YAML."""
    p = Path(workload)
    if p.suffix in (".yaml", ".yml") or p.exists():
        op, _ = load_workload(p)
        return conv_from_operator(op, bits, workload), None
    conv = paper_workload(workload, bits)
    row = next(r for r in paper_rows() if r.conv.name == conv.name)
    return conv, row.paper_schedule[bits]


@main.command("vectorize")
@click.option("--workload", "-w", required=True,
              help="Paper workload name (CV-2x2..CV-11x11, REG-3x3, PW-1x1, SS-1x3, DS-3x3, FC, CONV3D-3x3x3, ...) "
                   "or a conv2d workload YAML.")
@click.option("--arch", "-a", default="aie_like", show_default=True, help="Preset name or accelerator YAML.")
@click.option("--precision", type=click.Choice(sorted(PRECISIONS)), default="int16", show_default=True)
@click.option("--emit", default=None, help="Write the kernel C++ to this .cpp file.")
@click.option("--run", is_flag=True, help="Compile the C++ on the host against the intrinsic emulation, run it and "
                                          "compare with NumPy bit for bit.")
@click.option("--seed", default=0, show_default=True, help="Seed of the random inputs of --run.")
def vectorize_cmd(workload, arch, precision, emit, run, seed):
    """Tune loop order, vector loop, unroll-and-jam and layouts; print the schedule and its modeled cycles."""
    if emit is not None:
        check_output_file(emit, "--emit", ".cpp")
    core = core_from_accelerator(get_accelerator(arch))
    conv, paper = resolve_workload(workload, PRECISIONS[precision])
    res = tune(conv, core)
    c = res.cost
    click.echo(str(conv))
    click.echo(f"schedule: {res.schedule}")
    if paper:
        click.echo(f"paper's:  {paper}")
    click.echo(f"program:  {describe_math(res.program)}")
    click.echo(f"modeled:  {c.cycles:,} cycles, {c.macs_per_cycle:.2f} MACs/cycle = {c.percent_of_peak:.1f}% of "
               f"the {c.peak_macs_per_cycle} peak (II {c.ii}, {c.bound}-bound; {c.load_ops} load / {c.store_ops} "
               f"store slots per iteration; spill {c.spill_bits} bits; code {c.code_bytes:,} B)")
    rej = ", ".join(f"{k} {n}" for k, n in res.rejected) or "none"
    click.echo(f"tuner:    {res.evaluated} variants compiled in {res.seconds:.2f} s; rejected: {rej}")
    if emit is not None:
        write_atomic(Path(emit), emit_cpp(res.program, str(conv)))
        click.echo(f"wrote {emit}")
    if run:
        rep = run_kernel(res.program, seed=seed, cpp_path=emit)
        click.echo(f"run:      C++ kernel {'bit-exact' if rep.exact_cpp else 'MISMATCH'}, NumPy emulator "
                   f"{'bit-exact' if rep.exact_emulator else 'MISMATCH'} vs NumPy reference "
                   f"(compiled in {rep.compile_s:.2f} s)")
        if not rep.ok:
            raise AccelmapError(f"{conv.name}: the vectorized kernel disagrees with NumPy ({rep.library})")

