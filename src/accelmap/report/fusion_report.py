"""The fused plan of a model: its groups as a table, ``fusion.json`` and a plot of off-chip traffic
per layer, fused against layer by layer."""

from __future__ import annotations

import json
from pathlib import Path

from accelmap.file_io import write_atomic
from accelmap.fusion.group_cost import GroupCost
from accelmap.fusion.model_fusion import FusedModel
from accelmap.report.model_report import _eng, _table


def _mib(bits: float) -> str:
    return f"{bits / 8 / 2**20:,.2f}"


def format_fusion(fm: FusedModel) -> str:
    """The groups chosen (tile, halo policy per intermediate, buffers) and the totals against layer by layer."""
    spanning = sum(1 for g in fm.groups if g.inner_joins)
    lines = ["", f"fused plan ({fm.objective}): {len(fm.chains)} chains, {len(fm.groups)} fused groups"
             + (f", {spanning} spanning residual blocks" if fm.span_residuals else "")]
    rows = []
    for g in fm.groups:
        policies = ", ".join(f"{name}: {p}" for name, p in zip(("input", *g.names[:-1]), g.policies, strict=True))
        join = "" if g.join is None else f" + {g.join.name} (skip {g.skip_policy})"
        heads = f" ({g.head_tile} heads a step)" if g.head_tile else ""       # attention tiled over heads
        rows.append([group_label(g) + join, f"{g.tile_rows}x{g.tile_cols}{heads}", str(g.counts.tiles),
                     ("kept" if g.weights_resident else "per tile")
                     + ("".join(f", {n} in store" for n in g.producers_on_chip))
                     + ("".join(f", input read by {n}" for n in g.input_readers))
                     + (" (held whole for them)" if g.input_held else ""),
                     f"{g.counts.buffer_total_bits / 8192:,.1f}", f"{sum(g.counts.macs) / sum(g.macs_once) - 1:.1%}",
                     f"{g.energy / 1e6:,.3f}", f"{g.latency:,.0f}", _mib(g.offchip_bits), policies])
    if rows:
        lines += _table(["group", "tile", "tiles", "weights", "buffers KiB", "recomputed", "energy uJ", "latency cyc",
                         "off-chip MiB", "halo policy per tensor"], rows, {1, 2, 4, 5, 6, 7, 8})
    else:
        lines.append("no fused group beats running its layers one by one")
    b, u = fm.best, fm.unfused
    lines.append(f"model, layer by layer: energy {u.energy / 1e6:,.3f} uJ, latency {u.latency:,.0f} cycles, "
                 f"EDP {_eng(u.energy * u.latency)}, off-chip {_mib(u.offchip_bits)} MiB")
    lines.append(f"model, fused:          energy {b.energy / 1e6:,.3f} uJ, latency {b.latency:,.0f} cycles, "
                 f"EDP {_eng(b.energy * b.latency)}, off-chip {_mib(b.offchip_bits)} MiB "
                 f"({_ratio(u.energy * u.latency, b.energy * b.latency)} EDP, "
                 f"{_ratio(u.offchip_bits, b.offchip_bits)} off-chip traffic)")
    lines.append(f"fusion search: {fm.stats.groups_tried} groups, {fm.stats.candidates_costed} plans costed, "
                 f"{fm.stats.candidates_rejected} rejected, {fm.tile_searches} tile mappings searched, "
                 f"{fm.seconds:.1f} s"
                 + (f" (limit {fm.time_limit:g} s, reached: {fm.stats.groups_skipped} groups not fully tried)"
                    if fm.stats.timed_out else f" (limit {fm.time_limit:g} s, not reached)" if fm.time_limit else "")
                 + (f", {fm.tile_time_limit:g} s per tile mapping" if fm.tile_time_limit else "")
                 + (", one off-chip port for reads and writes" if fm.shared_offchip_port else ""))
    if fm.certificate is not None:
        gap = fm.gap
        lines.append(f"exact tile search: {fm.certificate}"
                     + (f", lower bound {_eng(fm.lower_bound)} of the {fm.objective}" if fm.lower_bound else "")
                     + (f", gap {gap:.1%}" if gap is not None else "")
                     + f" ({fm.stats.candidates_costed} plans costed, {fm.stats.candidates_pruned} pruned by their "
                       f"bound, {fm.stats.candidates_unresolved} unresolved"
                     + (f", {fm.stats.inexact_groups} groups with too many tile sizes" if fm.stats.inexact_groups
                        else "")
                     + (", a Pareto front thinned" if fm.stats.fronts_thinned else "") + ")")
    for n in fm.notes:
        lines.append(f"note: {n}")
    return "\n".join(lines)


def group_label(g: GroupCost) -> str:
    """The group's stages in order, each residual add inside it (spanning two blocks) after the stage whose
    output it adds to, with its skip policy."""
    after = {j.target(len(g.names)) - 1: f"{j.name} inside (skip {sp})" for j, sp in g.inner_joins}
    return " > ".join(name + (f" + {after[k]}" if k in after else "") for k, name in enumerate(g.names))


def _ratio(before: float, after: float) -> str:
    return f"{before / after:.2f}x lower" if after else "all removed"


def plot_offchip(fm: FusedModel, title: str, path: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    names = [n for n, _, _ in fm.layer_offchip]
    x = np.arange(len(names))
    fig, axes = plt.subplots(2, 1, sharex=True, figsize=(max(6.0, 0.4 * len(names) + 2.5), 6.5))
    for ax, rows, what in ((axes[0], fm.layer_offchip, "all off-chip traffic"),
                           (axes[1], fm.layer_fmap, "feature maps only")):
        ax.bar(x - 0.2, np.array([u for _, u, _ in rows]) / 8 / 2**20, 0.4, color="#C44E52", label="layer by layer")
        ax.bar(x + 0.2, np.array([f for _, _, f in rows]) / 8 / 2**20, 0.4, color="#4C72B0", label="fused")
        ax.set_ylabel(f"{what}\nper occurrence (MiB)")
        ax.margins(x=0.01)
    axes[0].set_title(title)
    axes[0].legend(fontsize=8, frameon=False)
    axes[1].set_xticks(x, names, rotation=60, ha="right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_fusion(fm: FusedModel, title: str, out: Path, plots: bool = True) -> list[Path]:
    p = out / "fusion.json"
    write_atomic(p, json.dumps(fm.to_dict(), indent=2) + "\n")
    files = [p]
    if plots:
        files.append(plot_offchip(fm, title, out / "offchip_fused_vs_unfused.png"))
    return files
