"""What a sweep writes: every design as CSV and JSON, the Pareto fronts, the chosen designs'
mappings, and a plot of EDP against area and energy against latency."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import yaml

from accelmap.dse.pareto import pareto_front
from accelmap.dse.sweep import Outcome, SweepResult
from accelmap.file_io import write_folder_atomic


def summary(res: SweepResult) -> dict[str, Any]:
    full = pareto_front(res.outcomes, ("energy", "latency", "area"))
    edp_area = pareto_front(res.outcomes, ("edp", "area"))
    best = res.best("edp")
    outs = [o.to_dict(res.objective) for o in res.outcomes]
    return {
        "space": res.space, "model": res.model, "engine": res.engine, "workers": res.workers,
        "store": res.store, "wall_seconds": res.wall_seconds,
        "designs": len(res.outcomes), "mapped": len(res.mapped), "mapped_now": res.mapped_now,
        "from_store": sum(1 for o in res.outcomes if o.cached),
        "excluded": sum(1 for o in res.outcomes if o.status == "excluded"),
        "invalid": sum(1 for o in res.outcomes if o.status == "invalid"),
        "failed": sum(1 for o in res.outcomes if o.status == "failed"),
        "pruned": sum(1 for o in res.outcomes if o.status == "pruned"),
        # Pruned by rule D on the EDP-area front only: the energy-latency-area front may miss these.
        "pruned_maybe_on_three_metric_front": sum(1 for o in res.outcomes if o.status == "pruned" and o.run
                                                  and not o.run.result.get("off_three_metric_front")),
        "designs_per_minute": (60.0 * res.mapped_now / res.wall_seconds) if res.wall_seconds and res.mapped_now
        else None,
        "best_edp": best.design.label if best else None,
        "front_energy_latency_area": [o.design.label for o in full],
        "front_edp_area": [o.design.label for o in edp_area],
        "proven": sum(1 for d in outs if d.get("proven")),
        "max_gap": max((d["gap"] for d in outs if d.get("gap") is not None), default=None),
        "without_gap": sum(1 for d in outs if d["status"] == "mapped" and d.get("gap") is None),
        "outcomes": outs,
    }


def format_summary(res: SweepResult) -> str:
    s = summary(res)
    lines = [f"{res.space}: {s['designs']} designs of {res.model} on engine {res.engine} ({res.workers} workers): "
             f"{s['mapped']} mapped ({s['mapped_now']} now, {s['from_store']} from the store), "
             f"{s['excluded']} excluded by the constraints, {s['invalid']} invalid, {s['failed']} with layers "
             f"not mapped" + (f", {s['pruned']} pruned by their certified bound (rule D; "
                                f"{s['pruned_maybe_on_three_metric_front']} of them may be on the energy-latency-"
                                f"area front)" if s["pruned"] else "") + f"; {res.wall_seconds:.1f} s"]
    if s["mapped"]:
        # Which results are optima and which are best found: a budgeted search must not pass for an exact one.
        gap = f"; the others are best found, {res.objective} at most {s['max_gap']:.1%} above their optimum " \
            "(certified gap)" if s["max_gap"] else ""
        unknown = f"; {s['without_gap']} without a certified bound" if s["without_gap"] else ""
        lines.append(f"{s['proven']} of {s['mapped']} mapped designs proven optimal (every layer){gap}{unknown}")
    edp_area = pareto_front(res.outcomes, ("edp", "area"))
    if edp_area:
        lines.append("")
        lines.append("EDP-area Pareto front:")
        lines.append(f"  {'area mm2':>9} {'energy uJ':>11} {'latency Mcyc':>13} {'EDP':>11}  design")
        for o in edp_area:
            lines.append(f"  {o.area:9.3f} {o.energy / 1e6:11.3f} {o.latency / 1e6:13.4f} {o.edp:11.4g}  "
                         f"{o.design.label}")
    best = res.best("edp")
    if best is not None:
        lines.append(f"\nlowest EDP: {best.design.label} (area {best.area:.3f} mm2)")
    return "\n".join(lines)


def _row(o: Outcome, objective: str) -> dict[str, Any]:
    d = o.to_dict(objective)
    out = {"design": d["design"], "status": d["status"], "cached": d["cached"], "area_mm2": d["area_mm2"],
           "sram_bits": d["sram_bits"], "energy_pj": d.get("energy_pj"), "latency_cycles": d.get("latency_cycles"),
           "edp": d.get("edp"), "utilization": d.get("utilization"), "seconds": d.get("seconds"),
           "proven": d.get("proven"), "gap": d.get("gap"), "reason": d["reason"]}
    out.update({f"param.{k}": v for k, v in d["point"].items()})
    return out


def plot(res: SweepResult, path: Path, marks: tuple[tuple[str, float, float, float], ...] = ()) -> None:
    """EDP vs area and energy vs latency (colour: area), the fronts drawn; ``marks`` are
    (label, area mm2, energy pJ, latency cycles) points to show (a published design)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = res.mapped
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 5))
    if ok:
        a1.scatter([o.area for o in ok], [o.edp for o in ok], s=12, c="0.6", label="designs")
        f = pareto_front(ok, ("edp", "area"))
        a1.plot([o.area for o in sorted(f, key=lambda o: o.area)], [o.edp for o in sorted(f, key=lambda o: o.area)],
                "o-", c="C0", label="EDP-area front")
        sc = a2.scatter([o.latency for o in ok], [o.energy for o in ok], s=12, c=[o.area for o in ok], cmap="viridis")
        fig.colorbar(sc, ax=a2, label="area (mm$^2$)")
        f3 = pareto_front(ok, ("energy", "latency", "area"))
        a2.scatter([o.latency for o in f3], [o.energy for o in f3], s=40, facecolors="none", edgecolors="C3",
                   label="energy-latency-area front")
    for label, area, energy, latency in marks:
        a1.scatter([area], [energy * latency], marker="*", s=200, c="C1", label=label, zorder=5)
        a2.scatter([latency], [energy], marker="*", s=200, c="C1", label=label, zorder=5)
    for ax in (a1, a2):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.legend(fontsize=8)
    a1.set_xlabel("area (mm$^2$)")
    a1.set_ylabel("EDP (pJ x cycles)")
    a2.set_xlabel("latency (cycles)")
    a2.set_ylabel("energy (pJ)")
    fig.suptitle(f"{res.space}: {res.model}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(res: SweepResult, out: Path, plots: bool = True) -> list[Path]:
    """Write the sweep's files into ``out`` (replaced whole); returns their paths."""
    def fill(tmp: Path) -> list[str]:
        files: list[str] = []
        (tmp / "summary.json").write_text(json.dumps(summary(res), indent=2, default=str))
        files.append("summary.json")
        rows = [_row(o, res.objective) for o in res.outcomes]
        keys: list[str] = []
        for r in rows:
            keys.extend(k for k in r if k not in keys)
        with open(tmp / "designs.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            for r in rows:
                w.writerow({k: ("" if v is None or (isinstance(v, float) and math.isnan(v)) else v)
                            for k, v in r.items()})
        files.append("designs.csv")
        chosen = pareto_front(res.outcomes, ("edp", "area"))
        if chosen:
            (tmp / "designs").mkdir()
            for k, o in enumerate(chosen):
                d = tmp / "designs" / f"{k:02d}"
                d.mkdir()
                assert o.design.accelerator is not None and o.run is not None
                (d / "design.txt").write_text(f"{o.design.label}\n\n{o.design.accelerator}\n")
                for l in o.run.result.get("layers", []):
                    if "mapping" in l:
                        name = "".join(c if c.isalnum() or c in "._-" else "_" for c in l["name"])
                        (d / f"{name}.mapping.yaml").write_text(yaml.safe_dump({"mapping": l["mapping"]},
                                                                                sort_keys=False))
            files.append("designs")
        if plots and res.mapped:
            plot(res, tmp / "pareto.png")
            files.append("pareto.png")
        return files

    return write_folder_atomic(out, fill)
