"""Pictures of an accelerator: its levels outer to inner and the fan-outs between them.

``arch_text`` draws boxes in plain text for a terminal; ``arch_png`` draws the
same hierarchy with matplotlib (Agg), each fan-out as a grid of instances.
"""

from __future__ import annotations

import math
from pathlib import Path

from accelmap.arch.accelerator import Accelerator, Fanout, Level


def _bw(v: float | None, width: int) -> str:
    if v is None:
        return "unbounded"
    words = v / width
    return f"{words:g} words/cycle ({v:g} bit)"


def _level_lines(lv: Level) -> list[str]:
    cap = ("partitions " + lv.describe_capacity()) if lv.partitions else f"capacity {lv.describe_capacity()}"
    flags = []
    if lv.double_buffered:
        flags.append("double-buffered")
    if not lv.bypass:
        flags.append("no bypass")
    return [
        f"holds {' '.join(lv.holds)}   {cap}" + (f"   [{', '.join(flags)}]" if flags else ""),
        f"{lv.width_bits}-bit words   read {lv.read_energy_pj:g} pJ, write {lv.write_energy_pj:g} pJ per word",
        f"bandwidth per instance: read {_bw(lv.read_bw_bits, lv.width_bits)}, "
        f"write {_bw(lv.write_bw_bits, lv.width_bits)}",
    ]


def _axis_text(fan: Fanout) -> str:
    parts = []
    for a in fan.axes:
        caps = [c for c, on in (("multicast", a.multicast), ("reduce", a.reduce)) if on]
        parts.append(f"{a.name}={a.size} [{', '.join(caps) or 'unicast, no reduction'}]")
    return " x ".join(parts)


def _compute_line(acc: Accelerator) -> str:
    c = acc.compute
    prec = " ".join(f"{k}:{'/'.join(map(str, v))}" for k, v in c.precision)
    return (f"MAC x{acc.num_pes}: {c.macs_per_cycle} MAC/cycle each, {c.mac_energy_pj:g} pJ/MAC, "
            f"precision bits {prec}")


def arch_text(acc: Accelerator) -> str:
    """Boxes per level, outer to inner, with the fan-outs between them."""
    out = [f"accelerator {acc.name}" + (f": {acc.description}" if acc.description else ""),
           f"{acc.num_pes} compute instances, peak {acc.peak_macs_per_cycle} MACs/cycle, "
           f"{len(acc.levels)} levels", ""]
    blocks = []
    for lv in acc.levels:
        blocks.append((f" {lv.name} (x{lv.instances}) ", _level_lines(lv)))
    width = max(max(len(t) + 4 for t, _ in blocks),
                max(len(l) for _, ls in blocks for l in ls) + 4, len(_compute_line(acc)) + 4)
    for lv, (title, lines) in zip(acc.levels, blocks, strict=True):
        out.append("+--" + title + "-" * (width - len(title) - 3) + "+")
        out += [f"| {l:<{width - 2}}|" for l in lines]
        out.append("+" + "-" * (width - 1) + "+")
        out.append("     |")
        if lv.fanout:
            f = lv.fanout
            out.append(f"     v  fan-out x{f.size}: {_axis_text(f)}"
                       + (f", {f.transfer_energy_pj:g} pJ per word" if f.transfer_energy_pj else ""))
            out.append("     |")
    out.append("[ " + _compute_line(acc) + " ]")
    return "\n".join(out)


def _grid_shape(fan: Fanout) -> tuple[int, int, str, str]:
    """Columns x rows to draw an array: first axis across, the rest down."""
    cols = fan.axes[0].size
    rows = math.prod(a.size for a in fan.axes[1:]) if len(fan.axes) > 1 else 1
    col_label = f"{fan.axes[0].name}={fan.axes[0].size}"
    row_label = " x ".join(f"{a.name}={a.size}" for a in fan.axes[1:])
    return cols, rows, col_label, row_label


def arch_png(acc: Accelerator, path: str | Path) -> Path:
    """Draw the hierarchy: one box per level, each fan-out as a grid of instances."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch, Rectangle

    box_h, fan_h, gap = 1.25, 2.2, 0.45
    heights = [box_h + (fan_h + gap if lv.fanout else 0) + gap for lv in acc.levels] + [0.8]
    total = sum(heights) + 1.8
    fig, ax = plt.subplots(figsize=(9.5, max(3.0, total * 0.62)))
    ax.set_xlim(0, 10)
    ax.set_ylim(0, total)
    ax.axis("off")
    cls_color = {"I": "#4C72B0", "W": "#DD8452", "O": "#55A868"}
    y = total - 0.3
    ax.text(5, y, f"{acc.name}", ha="center", va="top", fontsize=13, weight="bold")
    if acc.description:
        ax.text(5, y - 0.42, acc.description, ha="center", va="top", fontsize=8.5, color="#444")
    y -= 1.1
    for lv in acc.levels:
        top = y
        # Replicated levels are drawn as a stack of cards.
        if lv.instances > 1:
            for k in (2, 1):
                ax.add_patch(FancyBboxPatch((1 + 0.08 * k, top - box_h - 0.08 * k), 8, box_h,
                                            boxstyle="round,pad=0.02", fc="#f4f4f4", ec="#999", lw=0.8))
        ax.add_patch(FancyBboxPatch((1, top - box_h), 8, box_h, boxstyle="round,pad=0.02",
                                    fc="#eef3fb", ec="#333", lw=1.2))
        ax.text(1.15, top - 0.12, f"{lv.name}", ha="left", va="top", fontsize=11, weight="bold")
        ax.text(8.85, top - 0.12, f"x{lv.instances}", ha="right", va="top", fontsize=10)
        # Badges start after the name (long converted names like 'sram_1KB_W.sram_1KB_I' push them right).
        bx = max(2.9, 1.4 + 0.16 * len(lv.name))
        for j, c in enumerate(lv.holds):
            ax.add_patch(Rectangle((bx + 0.42 * j, top - 0.42), 0.34, 0.28, fc=cls_color.get(c, "#888"), ec="none"))
            ax.text(bx + 0.17 + 0.42 * j, top - 0.28, c, ha="center", va="center", fontsize=8, color="white",
                    weight="bold")
        cap = lv.describe_capacity()
        ax.text(max(4.3, bx + 0.42 * len(lv.holds) + 0.2), top - 0.28, cap + ("  (double-buffered)" if lv.double_buffered else ""),
                ha="left", va="center", fontsize=8.5)
        ax.text(1.15, top - 0.68, f"{lv.width_bits}-bit words; read {lv.read_energy_pj:g} pJ, "
                f"write {lv.write_energy_pj:g} pJ per word", ha="left", va="center", fontsize=8.5)
        ax.text(1.15, top - 1.0, f"BW read {_bw(lv.read_bw_bits, lv.width_bits)}, "
                f"write {_bw(lv.write_bw_bits, lv.width_bits)}", ha="left", va="center", fontsize=8)
        y = top - box_h - gap
        if lv.fanout:
            f = lv.fanout
            cols, rows, col_label, row_label = _grid_shape(f)
            dc, dr = min(cols, 32), min(rows, 16)
            cell = min(5.0 / dc, (fan_h - 0.7) / dr)
            gx0 = 5 - dc * cell / 2
            gy_top = y - 0.35
            for r in range(dr):
                for col in range(dc):
                    ax.add_patch(Rectangle((gx0 + col * cell, gy_top - (r + 1) * cell), cell * 0.85, cell * 0.85,
                                           fc="#c9d9ee", ec="#4a6d99", lw=0.5))
            if dc < cols:
                ax.text(gx0 + dc * cell + 0.05, gy_top - dr * cell / 2, f"... {cols}", va="center", fontsize=8)
            if dr < rows:
                ax.text(5, gy_top - dr * cell - 0.05, f"... {rows} rows", ha="center", va="top", fontsize=8)
            ax.text(5, gy_top + 0.05, f"fan-out x{f.size}:  {col_label} across" +
                    (f",  {row_label} down" if row_label else ""), ha="center", va="bottom", fontsize=9)
            notes = "; ".join(f"{a.name}: {'multicast' if a.multicast else 'unicast'}"
                              f"{', reduce' if a.reduce else ''}" for a in f.axes)
            if f.transfer_energy_pj:
                notes += f"; {f.transfer_energy_pj:g} pJ per word"
            ax.text(9.6, gy_top - dr * cell / 2, notes.replace("; ", "\n"), ha="right", va="center",
                    fontsize=7.5, color="#333")
            ax.annotate("", xy=(1.6, y - fan_h + 0.05), xytext=(1.6, y + gap), arrowprops=dict(arrowstyle="->"))
            y -= fan_h + gap
        else:
            ax.annotate("", xy=(5, y + 0.02), xytext=(5, y + gap), arrowprops=dict(arrowstyle="->"))
    ax.add_patch(FancyBboxPatch((2.5, y - 0.6), 5, 0.6, boxstyle="round,pad=0.02", fc="#fbeee6", ec="#333"))
    comp = acc.compute
    ax.text(5, y - 0.3, f"MAC x{acc.num_pes}  ({comp.macs_per_cycle}/cycle each, {comp.mac_energy_pj:g} pJ)",
            ha="center", va="center", fontsize=9.5)
    p = Path(path)
    fig.savefig(p, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return p
