"""What a tuning run shows and writes: the summary table, the convergence plot, the output folder."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from accelmap.arch.accelerator import Accelerator
from accelmap.arch.schema import accelerator_from_dict
from accelmap.file_io import write_atomic, write_folder_atomic
from accelmap.mapping.forms import mapping_to_yaml
from accelmap.tune.session import TuneReport
from accelmap.workload.layouts import layout_names


def format_summary(rep: TuneReport) -> str:
    t = rep.template
    lines = [f"{t.op.name}: {t.op.expression()} ({t.op.macs:,} MACs) on {t.arch.name}, backend {rep.backend}",
             f"knob space: {t.space.describe()}"]
    header = f"{'tuner':<18} {'trials':>6} {'valid':>6} {'best ' + rep.unit:>16} {'trial of best':>13}"
    lines += [header, "-" * len(header)]
    for r in rep.runs:
        best = r.best
        at = r.trials_to_reach(best.cost) if best and best.cost is not None else None
        cost = "none valid" if best is None else (f"{best.cost:,.0f}" if rep.unit == "cycles" else f"{best.cost:.3e}")
        lines.append(f"{r.tuner:<18} {len(r.history):>6} {sum(m.valid for m in r.history):>6} {cost:>16} "
                     f"{at if at else '-':>13}")
    best = rep.best
    if best is None:
        lines.append("NO VALID CONFIGURATION FOUND: every configuration measured overflows a buffer or a program "
                     "limit (see the log for each one's reason)")
    else:
        noise = f", noise (IQR/median) {best.noise:.1%}" if best.noise is not None else ""
        lines.append(f"best: {t.describe(best.point)}{noise}")
    lines.append(f"{rep.measured} measurements made, {rep.from_log} read from the log, {rep.seconds:.1f} s")
    lines += [f"note: {n}" for n in rep.notes]
    return "\n".join(lines)


def plot_convergence(rep: TuneReport, path: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.0, 4.2))
    for r in rep.runs:
        ys = r.best_so_far()
        xs = [i + 1 for i, y in enumerate(ys) if y is not None]
        ax.step(xs, [y for y in ys if y is not None], where="post", label=r.tuner)
    ax.set_xlabel("trials (measurements)")
    ax.set_ylabel(f"best so far ({rep.unit})")
    ax.set_yscale("log")
    t = rep.template
    ax.set_title(f"{t.op.name} on {t.arch.name}: tuning convergence ({rep.backend})", fontsize=10)
    ax.legend(fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def accelerator_variant_yaml(arch_source: dict, original: Accelerator, variant: Accelerator) -> str | None:
    """The accelerator YAML of ``variant`` written from ``original``'s YAML data, when they differ only in
    double buffering (the virtual-thread knobs); None when they are equal."""
    if variant.levels == original.levels:
        return None
    data = json.loads(json.dumps(arch_source))   # a deep copy of plain YAML data
    for i, (a, b) in enumerate(zip(original.levels, variant.levels, strict=True)):
        if a.double_buffered != b.double_buffered:
            data["levels"][i]["double_buffered"] = b.double_buffered
    data["name"] = f"{original.name}-tuned"
    rebuilt = accelerator_from_dict(data, "tuned accelerator")
    if rebuilt.levels != variant.levels:
        raise AssertionError("the tuned accelerator's YAML does not describe the tuned accelerator")
    return yaml.safe_dump(data, sort_keys=False)


def write_tuning_folder(rep: TuneReport, out: Path, arch_source: dict | None, plots: bool = True) -> list[Path]:
    """summary.json, best.mapping.yaml (and best.arch.yaml when the best needs other buffering), the plot."""

    def fill(folder: Path) -> list[str]:
        names = ["summary.json"]
        write_atomic(folder / "summary.json", json.dumps(rep.to_dict(), indent=2) + "\n")
        built, best = rep.best_built(), rep.best
        if built is not None and built.valid and best is not None:
            assert built.arch is not None and built.mapping is not None
            mapping = {"mapping": mapping_to_yaml(built.mapping, built.arch)["mapping"]}
            if built.layouts:
                # the layout knob's choice when it is not the workload's order: evaluate, simulate and codegen
                # read the operand stored this way
                mapping["layouts"] = layout_names(rep.template.op, built.layout_map)
            comment = f"# tuned by accelmap tune ({rep.backend}): {rep.template.describe(best.point)}\n"
            if built.share is not None:
                comment += (f"# split over {built.cores} cores: the mapping of one core's share, "
                            f"{built.share.expression()} with {dict(built.share.sizes)}\n")
            write_atomic(folder / "best.mapping.yaml", comment + yaml.safe_dump(mapping, sort_keys=False))
            names.append("best.mapping.yaml")
            if arch_source is not None:
                text = accelerator_variant_yaml(arch_source, rep.template.arch, built.arch)
                if text is not None:
                    write_atomic(folder / "best.arch.yaml", text)
                    names.append("best.arch.yaml")
        if plots:
            plot_convergence(rep, folder / "convergence.png")
            names.append("convergence.png")
        return names

    return write_folder_atomic(out, fill)
