"""Timeline plot of a simulated run: one row per unit, one bar per instruction."""

from __future__ import annotations

from pathlib import Path

from accelmap.sim.engine import Timing


def plot_timeline(t: Timing, path: str | Path, title: str = "") -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    units = sorted({e.unit for e in t.events}, key=lambda u: (u != "compute", u))
    colors = {"load": "tab:blue", "store": "tab:orange", "compute": "tab:green"}
    fig, ax = plt.subplots(figsize=(11, 1 + 0.5 * len(units)))
    for row, u in enumerate(units):
        bars = [(e.start, e.end - e.start) for e in t.events if e.unit == u]
        ax.broken_barh(bars, (row - 0.4, 0.8), color=colors.get(u.split()[0], "gray"))
    ax.set_yticks(range(len(units)))
    ax.set_yticklabels(units)
    ax.set_xlabel("cycle")
    shown = f" (first {len(t.events)} of {t.instructions} instructions)" if len(t.events) < t.instructions else ""
    util = ", ".join(f"{u} {v:.0%}" for u, v in sorted(t.utilization().items()))
    ax.set_title((title + "\n" if title else "") + f"{t.cycles:,.0f} cycles; utilization {util}{shown}", fontsize=9)
    fig.tight_layout()
    p = Path(path)
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p
