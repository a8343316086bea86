"""``accelmap vectorize``: tune and compile a convolution for a 2D-SIMD core with a shuffle network."""

from __future__ import annotations

import time
from pathlib import Path

import click

from accelmap.arch.presets import get_accelerator
from accelmap.cli import main
from accelmap.errors import AccelmapError, SpecError
from accelmap.file_io import check_output_file, write_atomic
from accelmap.vector.compiler import compile_conv, describe_math
from accelmap.vector.cycle_sim import simulate
from accelmap.vector.cycles import estimate
from accelmap.vector.emit_cpp import emit_cpp, run_kernel
from accelmap.vector.machine import core_from_accelerator
from accelmap.vector.tiling import tiled_cycles
from accelmap.vector.tuner import tune
from accelmap.vector.workloads import conv_from_operator, paper_rows, paper_workload
from accelmap.vector.workloads import paper_schedule as paper_schedule_of
from accelmap.workload.files import load_workload

PRECISIONS = {"int16": 16, "int32": 32}


def resolve_workload(workload: str, bits: int):
    """A paper workload name (CV-3x3, REG-5x5, FC, CONV3D-3x3x3, ...) or a conv2d workload YAML; with the paper's
    row when it is one."""
    p = Path(workload)
    if p.suffix in (".yaml", ".yml") or p.exists():
        op, _ = load_workload(p)
        return conv_from_operator(op, bits, workload), None
    conv = paper_workload(workload, bits)
    return conv, next(r for r in paper_rows() if r.conv.name == conv.name)


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
@click.option("--paper-schedule", is_flag=True, help="Compile the schedule the paper reports (Tables VI/VII) "
                                                     "instead of tuning.")
def vectorize_cmd(workload, arch, precision, emit, run, seed, paper_schedule):
    """Tune loop order, vector loop, unroll-and-jam and layouts; print the schedule and its modeled cycles.
    A schedule the compiler rejects (with --paper-schedule) is one error line naming the reason."""
    if emit is not None:
        check_output_file(emit, "--emit", ".cpp")
    core = core_from_accelerator(get_accelerator(arch))
    bits = PRECISIONS[precision]
    conv, row = resolve_workload(workload, bits)
    if paper_schedule:
        sched = paper_schedule_of(row, bits) if row is not None else None
        if sched is None:
            raise SpecError(f"{conv.name}: the paper reports no schedule for it (Tables VI and VII only)",
                            where="--paper-schedule")
        t0 = time.perf_counter()
        prog = compile_conv(conv, sched, core.data_mem_bits)
        tiles = 1
        note = f"the paper's schedule, compiled in {time.perf_counter() - t0:.2f} s (not tuned)"
    else:
        res = tune(conv, core)
        sched, prog, tiles = res.schedule, res.program, res.tiles
        rej = ", ".join(f"{k} {n}" for k, n in res.rejected) or "none"
        note = f"{res.evaluated} variants compiled in {res.seconds:.2f} s; rejected: {rej}"
    c = estimate(prog, core)
    click.echo(str(conv))
    click.echo(f"schedule: {sched}   (loop order outermost first)")
    if row is not None:
        click.echo(f"paper's:  {row.paper_schedule[bits]}")
    click.echo(f"program:  {describe_math(prog)}")
    click.echo(f"modeled:  {c.cycles:,} cycles, {c.macs_per_cycle:.2f} MACs/cycle = {c.percent_of_peak:.1f}% of "
               f"the {c.peak_macs_per_cycle} peak (II {c.ii}, {c.bound}-bound, resource bound {c.res_mii}; "
               f"{c.load_ops} load / {c.store_ops} store slots per iteration; {c.reloads} reloads; "
               f"{c.hoisted_bits} loop-invariant bits hoisted; one iteration {c.length} cycles; kernel unrolled "
               f"x{c.unroll}; code {c.code_bytes:,} B)")
    if tiles > 1:
        tc = tiled_cycles(conv, tiles, c.cycles)
        click.echo(f"tiles:    the tensors exceed the data memory: K in {tiles} tiles of {conv.k // tiles}, the "
                   f"kernel above once per tile: {tc.kernel_cycles:,} cycles with each tile's data preloaded "
                   f"(the paper's method); {tc.streamed_cycles:,} cycles ({conv.macs / tc.streamed_cycles:.2f} "
                   f"MACs/cycle) with each next {tc.filter_bits_per_tile // 8:,} B filter tile streamed in by DMA")
    click.echo(f"tuner:    {note}")
    if emit is not None:
        write_atomic(Path(emit), emit_cpp(prog, str(conv)))
        click.echo(f"wrote {emit}")
    if run:
        rep = run_kernel(prog, seed=seed, cpp_path=emit, tiles=tiles)
        click.echo(f"run:      C++ kernel {'bit-exact' if rep.exact_cpp else 'MISMATCH'}, NumPy emulator "
                   f"{'bit-exact' if rep.exact_emulator else 'MISMATCH'} vs NumPy reference "
                   + ("(build reused)" if rep.reused_build else f"(compiled in {rep.compile_s:.2f} s)"))
        if not rep.ok:
            raise AccelmapError(f"{conv.name}: the vectorized kernel disagrees with NumPy ({rep.library})")
        sim = simulate(prog, core, c, seed=seed)
        click.echo(f"simulated: {sim.cycles:,} cycles cycle by cycle (the model: {c.cycles:,}); every operand read in "
                   f"time and unclobbered: {'yes' if not sim.errors else 'NO'}; output "
                   f"{'bit-exact' if sim.exact else 'MISMATCH'}")
        if not sim.ok or sim.cycles != c.cycles:
            raise AccelmapError(f"{conv.name}: the cycle-level simulation disagrees with the model: "
                                f"{sim.cycles} against {c.cycles} cycles; {'; '.join(sim.errors[:3])}")

