"""Reports of a whole-model mapping: the per-layer table, CSV, JSON, mapping files and plots.

Per-layer numbers are per occurrence (one node of the model); totals count
every occurrence (``count``). Plots show every occurrence too, since they
answer "where does the model's energy / time go".
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
from collections import OrderedDict
from pathlib import Path

from accelmap.file_io import write_atomic, write_folder_atomic
from accelmap.mapping.forms import mapping_to_yaml
from accelmap.search.model_result import LayerMapping, ModelMapping
from accelmap.workload.files import operator_to_dict


def _table(header: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]

    def fmt(r):
        return "  ".join(str(v).rjust(w) if i in right else str(v).ljust(w)
                         for i, (v, w) in enumerate(zip(r, widths, strict=True))).rstrip()

    return [fmt(header), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows]


def _eng(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 1e4 else f"{x:.3e}".replace("e+0", "e").replace("e+", "e")


def gap_text(gap: float | None, proven: bool) -> str:
    """How far above its proven lower bound a mapping may be: '0%' only when proven optimal; a gap under 1%
    keeps a decimal, so an unproven mapping never reads as '<=0%'."""
    if gap is None:
        return "-"
    if proven:
        return "0%"
    if gap < 0.00995:
        return f"<={gap:.1%}" if gap >= 0.0005 else "<0.1%"
    return f"<={gap:.0%}" if gap < 9.995 else f"<={gap + 1:.0f}x"


def _gap(l: LayerMapping) -> str:
    return gap_text(l.gap, l.proven_optimal)


# Points of the model's front printed at most (the JSON holds all of them).
FRONT_ROWS = 12


def _front_lines(mm: ModelMapping) -> list[str]:
    """Each layer's front size and span, and the whole model's front (the table above shows each
    layer's EDP-best point)."""
    out = ["", "pareto: the table shows each layer's EDP-best point of its energy-latency front"]
    rows = []
    for l in mm.mapped:
        pts = [r for r, _ in l.front] or [l.cost]
        rows.append([l.name, str(len(pts)), f"{min(r.energy_total for r in pts) / 1e6:,.3f}-"
                     f"{max(r.energy_total for r in pts) / 1e6:,.3f}",
                     f"{min(r.latency for r in pts):,.0f}-{max(r.latency for r in pts):,.0f}"])
    out += _table(["layer", "front points", "energy uJ", "latency cyc"], rows, {1, 2, 3})
    front = mm.front()
    out.append("")
    shown = front if len(front) <= FRONT_ROWS else [front[round(i * (len(front) - 1) / (FRONT_ROWS - 1))]
                                                     for i in range(FRONT_ROWS)]
    out.append(f"model front: {len(front)} points, every occurrence counted"
               + (f"; {len(shown)} shown evenly spread, all in summary.json" if len(shown) < len(front) else "")
               + ("; leaves out the layers not mapped" if mm.failed else "") + ":")
    out += _table(["energy uJ", "latency cyc", "EDP pJ*cyc"],
                  [[f"{e / 1e6:,.3f}", f"{t:,.0f}", _eng(e * t)] for e, t, _ in shown], {0, 1, 2})
    return out


def _proof_line(mm: ModelMapping) -> str:
    proven = len(mm.proven)
    line = f"{proven} of {len(mm.mapped)} mapped layers proven optimal"
    gaps = sorted(l.gap for l in mm.mapped if not l.proven_optimal and l.gap is not None)
    if gaps:
        def pct(gap: float) -> str:
            return gap_text(gap, False).removeprefix("<=")

        line += (f"; the others within {pct(gaps[0])}-{pct(gaps[-1])} of a proven lower bound of the "
                 f"{mm.objective} (median {pct(gaps[len(gaps) // 2])}; gap = found / bound - 1)")
    return line


def format_summary(mm: ModelMapping) -> str:
    """The per-layer table, totals, failures and host work, as printed by ``accelmap map``."""
    lines = [f"model {mm.model.name} on {mm.arch.name}, objective {mm.objective}, strategy {mm.strategy}"]
    if mm.model.params:
        lines.append("bound: " + ", ".join(f"{k}={v}" for k, v in mm.model.params))
    lines.append("per occurrence; totals count every occurrence")
    lines.append("")
    rows = []
    for l in mm.layers:
        op = l.layer.operator
        if l.ok:
            r = l.cost
            rows.append([l.name, op.kind, str(l.count), f"{op.macs:,}", f"{r.energy_total / 1e6:,.3f}",
                         f"{r.latency:,.0f}", f"{r.utilization:.1%}", _eng(r.edp), _gap(l),
                         l.how + (" (timed out)" if l.timed_out else "") + (" (cached)" if l.cached else "")])
        else:
            rows.append([l.name, op.kind, str(l.count), f"{op.macs:,}", "-", "-", "-", "-", "-",
                         "failed" + (" (timed out)" if l.timed_out else "")])
    lines += _table(["layer", "type", "count", "MACs", "energy uJ", "latency cyc", "util", "EDP pJ*cyc",
                     "gap", "mapping"], rows, {2, 3, 4, 5, 6, 7, 8})
    n_nodes = sum(l.count for l in mm.mapped)
    lines.append(f"total ({n_nodes} nodes in {len(mm.mapped)} distinct layers): "
                 f"{mm.macs_mapped:,} MACs, energy {mm.energy_total / 1e6:,.3f} uJ "
                 f"({mm.energy_total / max(mm.macs_mapped, 1):.3f} pJ/MAC), latency {mm.latency_total:,.0f} cycles, "
                 f"utilization {mm.utilization:.1%}, EDP {_eng(mm.edp_total)} pJ*cycles")
    if mm.failed:
        lines.append(f"INCOMPLETE: {len(mm.failed)} layers ({sum(l.count for l in mm.failed)} nodes, "
                     f"{mm.macs_not_mapped:,} MACs) not mapped; the totals above leave them out")
    lines.append(_proof_line(mm) + f"; {mm.searched} searched, {mm.cache_hits} from the cache; "
                 f"{mm.wall_seconds:.1f} s")
    if mm.objective == "pareto":
        lines += _front_lines(mm)
    for l in mm.failed:
        lines.append(f"not mapped: {l.name} (x{l.count}): {l.error}")
    for l in mm.layers:
        for n in l.notes:
            lines.append(f"note: {l.name}: {n}")
    if mm.model.host_ops:
        lines.append("")
        groups: OrderedDict[str, list] = OrderedDict()
        for h in mm.model.host_ops:
            groups.setdefault(h.op_type, []).append(h)
        hrows = []
        for op_type, hs in groups.items():
            known = [h.elements for h in hs if h.elements is not None]
            unknown = len(hs) - len(known)
            hrows.append([op_type, str(len(hs)), f"{sum(known):,}" + (f" (+{unknown} unknown)" if unknown else "")])
        lines += _table(["host op", "nodes", "output elements"], hrows, {1, 2})
        lines.append(f"host work (not on the accelerator, not in the totals): {len(mm.model.host_ops)} nodes, "
                     f"{mm.model.host_elements:,} output elements")
    for n in mm.notes:
        lines.append(f"note: {n}")
    return "\n".join(lines)


def _levels(mm: ModelMapping) -> list[str]:
    """Energy components in a stable order: the hierarchy's levels, then NoCs, then MAC."""
    seen: list[str] = []
    for l in mm.mapped:
        for comp, _ in l.cost.energy:
            if comp not in seen:
                seen.append(comp)
    order = {lv.name: i for i, lv in enumerate(mm.arch.levels)}
    return sorted(seen, key=lambda c: (c == "MAC", c.startswith("NoC:"), order.get(c.split(":")[-1], 99), c))


def layers_csv(mm: ModelMapping) -> str:
    comps = _levels(mm)
    header = ["layer", "kind", "source_op", "count", "nodes", "macs_each", "energy_pj_each", "latency_cycles_each",
              "edp_each", "utilization", "spatial_utilization", "energy_pj_all", "latency_cycles_all",
              *[f"energy_pj_each:{c}" for c in comps], "mapping", "strategy", "proven_optimal",
              "lower_bound", "gap", "timed_out", "cached", "search_seconds", "evaluated", "error", "notes"]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    for l in mm.layers:
        op = l.layer.operator
        r = l.result
        by_level = r.energy_by_level() if r else {}
        w.writerow([l.name, op.kind, l.layer.source_op, l.count, ";".join(l.layer.nodes), op.macs,
                    r.energy_total if r else "", r.latency if r else "", r.edp if r else "",
                    r.utilization if r else "", r.spatial_utilization if r else "",
                    r.energy_total * l.count if r else "", r.latency * l.count if r else "",
                    *[by_level.get(c, 0.0) if r else "" for c in comps],
                    l.how, l.strategy, int(l.proven_optimal),
                    "" if l.lower_bound is None else l.lower_bound, "" if l.gap is None else l.gap,
                    int(l.timed_out), int(l.cached), f"{l.search_seconds:.3f}",
                    l.evaluated, l.error or "", "; ".join(l.notes)])
    return buf.getvalue()


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def mapping_file_text(l: LayerMapping, mm: ModelMapping) -> str:
    import yaml

    op = l.layer.operator
    head = (f"# {l.name}: {op.expression()}  ({', '.join(f'{d}={s}' for d, s in op.dims)})\n"
            f"# on {mm.arch.name}, objective {mm.objective}: {l.how}; used by {l.count} node(s): "
            f"{', '.join(l.layer.nodes)}\n"
            f"# its operator is {_safe(l.name)}.workload.yaml beside this file\n")
    return head + yaml.safe_dump(mapping_to_yaml(l.mapping_found, mm.arch), sort_keys=False)


def workload_file_text(l: LayerMapping, mm: ModelMapping) -> str:
    """The layer's operator as a workload file (docs/workload-format.md), at the precision it was mapped
    at, so that evaluate, simulate and codegen take it with the layer's mapping file."""
    import yaml

    name = _safe(l.name)
    head = (f"# {l.name} of {mm.model.name} ({l.layer.source_op}; {l.count} node(s)), as mapped on {mm.arch.name}.\n"
            + (f"# accelmap evaluate --workload {name}.workload.yaml --arch ARCH --mapping {name}.mapping.yaml\n"
               f"# (ARCH: the accelerator given to map; simulate and codegen take the same options)\n"
               if l.ok else f"# not mapped: {l.error}\n"))
    return head + yaml.safe_dump(operator_to_dict(l.layer.operator), sort_keys=False, default_flow_style=None)


def plot_energy(mm: ModelMapping, path: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    comps = _levels(mm)
    operands = sorted({o for l in mm.mapped for _, o in l.cost.energy})
    names = [l.name + ("" if l.ok else " (failed)") for l in mm.layers]
    x = np.arange(len(mm.layers))
    fig, ax = plt.subplots(figsize=(max(7.0, 0.45 * len(names) + 4.0), 5.0))
    cmap = plt.get_cmap("tab10")
    bottom = np.zeros(len(names))
    for ci, comp in enumerate(comps):
        for oi, opnd in enumerate(operands):
            vals = np.array([(l.cost.energy.get((comp, opnd), 0.0) * l.count / 1e6) if l.ok else 0.0
                             for l in mm.layers])
            if not vals.any():
                continue
            # One hue per component, lighter shades per operand: the level reads first, the operand second.
            base = np.array(cmap(ci % 10)[:3])
            shade = base + (1 - base) * (0.55 * oi / max(len(operands) - 1, 1))
            ax.bar(x, vals, 0.75, bottom=bottom, color=shade, edgecolor="white", linewidth=0.4,
                   label=f"{comp} {opnd}" if opnd != "-" else comp)
            bottom += vals
    ax.set_xticks(x, names, rotation=60, ha="right", fontsize=8)
    ax.set_ylabel("energy, all occurrences (uJ)")
    ax.set_title(f"{mm.model.name} on {mm.arch.name}: energy by level and operand ({mm.objective}-optimized)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    ax.margins(x=0.01)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_latency_utilization(mm: ModelMapping, path: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    names = [l.name + ("" if l.ok else " (failed)") for l in mm.layers]
    x = np.arange(len(names))
    lat = np.array([l.cost.latency * l.count if l.ok else 0.0 for l in mm.layers])
    util = np.array([l.cost.utilization * 100 if l.ok else 0.0 for l in mm.layers])
    sp = np.array([l.cost.spatial_utilization * 100 if l.ok else 0.0 for l in mm.layers])
    fig, (a1, a2) = plt.subplots(2, 1, sharex=True, figsize=(max(6.0, 0.45 * len(names) + 2.5), 6.0))
    a1.bar(x, lat, 0.75, color="#4C72B0")
    a1.set_ylabel("latency, all occurrences\n(cycles)")
    a1.set_title(f"{mm.model.name} on {mm.arch.name}: latency and utilization ({mm.objective}-optimized)")
    a2.bar(x - 0.2, sp, 0.4, color="#DD8452", label="spatial (PEs used)")
    a2.bar(x + 0.2, util, 0.4, color="#55A868", label="overall (MACs / peak x latency)")
    a2.set_ylim(0, 105)
    a2.set_ylabel("utilization (%)")
    a2.legend(fontsize=8, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=2, frameon=False)
    a2.set_xticks(x, names, rotation=60, ha="right", fontsize=8)
    a2.margins(x=0.01)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_front(mm: ModelMapping, path: Path) -> Path:
    """The whole model's energy-latency front, and the sum of the layers' EDP-best points."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    front = mm.front()
    fig, ax = plt.subplots(figsize=(6.0, 4.5))
    ax.step([t for _, t, _ in front], [e / 1e6 for e, _, _ in front], where="post", color="#4C72B0", alpha=0.5)
    ax.scatter([t for _, t, _ in front], [e / 1e6 for e, _, _ in front], color="#4C72B0", zorder=3,
               label=f"model front ({len(front)} points)")
    ax.scatter([mm.latency_total], [mm.energy_total / 1e6], marker="x", color="#C44E52", s=60, zorder=4,
               label="each layer's EDP-best point")
    ax.set_xlabel("latency, all occurrences (cycles)")
    ax.set_ylabel("energy, all occurrences (uJ)")
    ax.set_title(f"{mm.model.name} on {mm.arch.name}: energy-latency front")
    ax.legend(fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_report(mm: ModelMapping, out_dir: str | Path, plots: bool = True) -> list[Path]:
    """summary.json, layers.csv, layers/LAYER.workload.yaml and layers/LAYER.mapping.yaml, and the plots;
    returns the files written.

    The folder is written whole under a temporary name beside it and then put in place of any
    earlier one, so it never mixes two runs (no stale mapping or plot) and is never half-written."""
    out = Path(out_dir)
    return write_folder_atomic(out, lambda folder: _write_folder(mm, folder, plots))


def _write_folder(mm: ModelMapping, out: Path, plots: bool) -> list[Path]:
    (out / "layers").mkdir(parents=True, exist_ok=True)
    files = []
    p = out / "summary.json"
    write_atomic(p, json.dumps(mm.to_dict(), indent=2) + "\n")
    files.append(p)
    p = out / "layers.csv"
    write_atomic(p, layers_csv(mm))
    files.append(p)
    for l in mm.layers:
        p = out / "layers" / f"{_safe(l.name)}.workload.yaml"
        write_atomic(p, workload_file_text(l, mm))
        files.append(p)
        if l.ok:
            p = out / "layers" / f"{_safe(l.name)}.mapping.yaml"
            write_atomic(p, mapping_file_text(l, mm))
            files.append(p)
    if plots and mm.mapped:
        files.append(plot_energy(mm, out / "energy_breakdown.png"))
        files.append(plot_latency_utilization(mm, out / "latency_utilization.png"))
        if mm.objective == "pareto":
            files.append(plot_front(mm, out / "pareto_front.png"))
    # mkdtemp makes the folder 0700; the output is the user's like any file they write.
    umask = os.umask(0)
    os.umask(umask)
    for d in (out, out / "layers"):
        d.chmod(0o777 & ~umask)
    return [f.relative_to(out) for f in files]
