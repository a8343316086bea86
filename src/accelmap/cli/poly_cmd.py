"""``accelmap poly``: polyhedral compilation of a fused subgraph for an Ascend-like core (AKG, PLDI 2021)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from accelmap.arch.presets import get_accelerator
from accelmap.cli import main
from accelmap.errors import SpecError
from accelmap.poly.c_code import code_schedule, generate_c, run_and_check
from accelmap.poly.compile import compile_subgraph
from accelmap.poly.dsl import load_subgraph, parse_subgraph
from accelmap.poly.from_onnx import kernel_from_onnx, onnx_node_names
from accelmap.poly.img2col import conv_fractal_kernel
from accelmap.poly.library import LIBRARY, library_names, library_subgraph
from accelmap.poly.schedule import OPTION_SETS
from accelmap.poly.tiling import parse_tile_spec
from accelmap.poly.timing import time_compiled
from accelmap.poly.vector_intrinsics import instructions
from accelmap.tune.akg_tuner import tune_poly


def _sizes(items: tuple[str, ...]) -> dict[str, int]:
    out = {}
    for it in items:
        name, _, val = it.partition("=")
        if not val.strip().isdigit() or int(val) < 1:
            raise SpecError(f"expected NAME=positive integer, got {it!r}", where="--size")
        out[name.strip()] = int(val)
    return out


def _builder_sizes(sizes: dict[str, int]) -> dict[str, Any]:
    known = ("N", "C1", "H", "W", "Co", "KH", "KW", "SH", "SW")
    bad = sorted(set(sizes) - set(known))
    if bad:
        raise SpecError(f"conv_img2col has no size {bad[0]!r}; sizes: {', '.join(known)}", where="--size")
    return sizes


def _node_selection(path: str, nodes: str | None) -> list[str] | None:
    if nodes is None:
        return None
    if ":" in nodes:
        names = onnx_node_names(path)
        first, _, end = nodes.partition(":")
        try:
            a, b = int(first or 0), int(end) if end else len(names)
        except ValueError:
            raise SpecError(f"expected FIRST:END node positions, got {nodes!r}", where="--nodes") from None
        if not 0 <= a < b <= len(names):
            raise SpecError(f"positions {nodes!r} select no nodes; the model has nodes 0..{len(names) - 1}",
                            where="--nodes")
        return names[a:b]
    return [n.strip() for n in nodes.split(",") if n.strip()]


@main.command("poly")
@click.argument("subgraph")
@click.option("--arch", "-a", default="ascend_like", show_default=True, help="Accelerator preset or YAML.")
@click.option("--fuse/--no-fuse", default=False, show_default=True,
              help="Post-tiling fusion of intermediate groups into the live-out tiles.")
@click.option("--fusion", type=click.Choice(["cost", "greedy"]), default="cost", show_default=True,
              help="With --fuse: fuse a producer only when the simulated cycles drop (cost), or every producer "
                   "whose consumers share a kernel, as the paper does (greedy).")
@click.option("--run", "run_it", is_flag=True, help="Compile the C with the host compiler, run, compare with NumPy.")
@click.option("--tiles", default=None, help="Tile spec (Fig. 4), e.g. 'S_2: 32@UB, 32@UB'; default: auto-tiling.")
@click.option("--size", "sizes", multiple=True, help="A size of a built-in subgraph, e.g. --size M=128 (repeatable).")
@click.option("--options", "option_set", default="akg", show_default=True,
              type=click.Choice(sorted(OPTION_SETS)), help="isl scheduler option set.")
@click.option("--code/--no-code", default=True, show_default=True, help="Print the generated C.")
@click.option("--nodes", default=None,
              help="For an ONNX file: the subgraph's nodes, as names 'a,b,c' or positions 'FIRST:END' (END excluded).")
@click.option("--tune", "tune_rounds", default=0, show_default=True, type=int,
              help="Tune tile sizes for this many rounds of 8 samples (AKG's tuner on simulated cycles).")
def poly_cmd(subgraph, arch, fuse, fusion, run_it, tiles, sizes, option_set, code, nodes, tune_rounds):
    """Compile SUBGRAPH (a DSL file, an ONNX file or a built-in name) with isl: schedule tree, C code, buffers,
    cycles.

    Built-in subgraphs: fig3 (the paper's running example), the Fig. 9 operator kinds, and conv_img2col
    (convolution as img2col + GEMM on the NC1HWC0 layout, Eq. 1)."""
    acc = get_accelerator(arch)
    if nodes is not None and not subgraph.endswith(".onnx"):
        raise SpecError("--nodes selects nodes of an ONNX file (SUBGRAPH ending in .onnx)", where="--nodes")
    if subgraph.endswith(".onnx"):
        if sizes:
            raise SpecError("--size applies to built-in subgraphs, not to an ONNX file", where="--size")
        k = kernel_from_onnx(subgraph, _node_selection(subgraph, nodes))
    elif subgraph == "conv_img2col":
        k = conv_fractal_kernel(**_builder_sizes(_sizes(sizes)))
    elif subgraph in LIBRARY:
        k = parse_subgraph(library_subgraph(subgraph, **_sizes(sizes)), f"built-in {subgraph}")
    elif Path(subgraph).exists():
        if sizes:
            raise SpecError("--size applies to built-in subgraphs; edit the params of a DSL file", where="--size")
        k = load_subgraph(subgraph)
    else:
        raise SpecError(f"{subgraph!r} is neither a file nor a built-in subgraph ({', '.join(library_names() + ['conv_img2col'])})",
                        where="SUBGRAPH")
    spec = parse_tile_spec(tiles) if tiles else None
    if tune_rounds < 0:
        raise SpecError(f"must be >= 0, got {tune_rounds}", where="--tune")
    if tune_rounds and tiles:
        raise SpecError("give either --tiles or --tune, not both", where="--tune")
    if tune_rounds:
        tr = tune_poly(k, acc, fuse=fuse, rounds=tune_rounds)
        click.echo(f"tuner: {len(tr.history)} samples, best {tr.best_cycles:,} simulated cycles "
                   f"(auto-tiling {tr.auto_cycles:,}); tile spec {tr.spec or 'auto'}")
        spec = parse_tile_spec(tr.spec) if tr.spec else None
    c = compile_subgraph(k, acc, fuse=fuse, option_set=option_set, tile_spec=spec, fusion=fusion)
    click.echo(str(k))
    click.echo(f"\nschedule after the isl scheduler (option set {c.option_set}):")
    click.echo(str(c.scheduled.get_root()))
    click.echo(f"\nschedule after tiling{' and post-tiling fusion' if fuse else ''}:")
    click.echo(str(c.schedule.get_root()))
    click.echo("\nkernels:")
    if c.fusion_notes:
        click.echo(f"  fusion (schedule {c.option_set}): " + "; ".join(c.fusion_notes))
    elif c.kept_apart:
        click.echo(f"  not fused: {', '.join(sorted(c.kept_apart))} (the fused kernel fits the buffers at no tile "
                   "size; kept as separate kernels)")
    for p in c.plans:
        click.echo("  " + p.describe())
        for f in p.footprints.values():
            where = "on chip only (promoted)" if f.local else "off-chip tensor, tile staged"
            click.echo(f"    {f.tensor}: per-tile box {list(f.box)}, {f.bytes:,} B in {'+'.join(f.buffers)}, {where}")
        caps = {b: (acc.level(b).capacity_bits or 0) // 16 for b in p.buffer_bytes}
        click.echo("    buffer use (of half capacity): " + ", ".join(
            f"{b} {n:,}/{caps[b]:,} B" for b, n in p.buffer_bytes.items() if n))
        if p.l0_k_chunk:
            where = ("emitted: " + ", ".join(f"{t} -> {b} chunk {list(box)}" for t, (b, box, _) in p.l0_copies.items())
                     if p.l0_copies else "timing model only (the reduction's loops are inner bands)")
            click.echo(f"    L0 reduction chunk (second-level tiling) {p.l0_k_chunk} of {p.l0_k_extent}; {where}")
    _c, _sched, _flags, blocks, rows = code_schedule(c)
    for b in blocks.blocks:
        click.echo(f"  {b.stmt}: cube block mmad over M {b.dims[0]}, N {b.dims[1]}, K {b.dims[2]} into {b.l0c()} "
                   f"(L0C), init {b.init} folded in")
    for row in rows.rows:
        st = k.statement(row.stmt)
        click.echo(f"  {row.stmt}: vector instructions per row of {row.dim}: "
                   f"{', '.join(instructions(st, row.dim))} ({row.nbytes}-byte elements, 256 bytes per repeat)")
    for note in blocks.notes + rows.notes:
        click.echo(f"  {note}")
    if code:
        click.echo("\ngenerated C:")
        click.echo(generate_c(c)[0])
    click.echo("\nDAE timing (simulated on the model, not measured on hardware):")
    timing = time_compiled(c)
    click.echo(timing.table())
    if run_it:
        r = run_and_check(c)
        model = (sum(kt.vector_instructions for kt in timing.kernels), sum(kt.vector_repeats for kt in timing.kernels))
        click.echo(f"\nrun on the host: {'OK' if r.ok else 'MISMATCH'} ({r.detail}); "
                   f"compile {r.compile_s:.2f} s, run {r.run_s * 1e3:.1f} ms; issued {r.counts['mmad']:,} mmad "
                   f"blocks (model {timing.cube_blocks:,}), {r.counts['vector_instructions']:,} vector instructions "
                   f"of {r.counts['vector_repeats']:,} repeats (model {model[0]:,} of {model[1]:,}), "
                   f"{r.counts['flags']:,} set/wait flags (model {sum(kt.flags for kt in timing.kernels):,})")
        if not r.ok:
            raise SystemExit(1)
