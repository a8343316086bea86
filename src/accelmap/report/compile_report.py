"""``DIR/report.html`` of a compiled network: one self-contained page (no network access needed).

It holds the verification result, the network's simulated and analytical time, the model graph
with each node's placement (an inline SVG and a table), the per-layer table (mapping, energy by
level and operand, latency, utilization, certificate), each layer's loop nest, and plots embedded
as base64 PNG: energy by level and operand, per-step latency, and the simulator timeline of the
layer with the most simulated cycles.
"""

from __future__ import annotations

import base64
import html
import tempfile
from pathlib import Path

from accelmap.compile.flow import CompileResult
from accelmap.compile.program import LayerCode
from accelmap.errors import SpecError
from accelmap.file_io import write_atomic
from accelmap.mapping.forms import format_text
from accelmap.report.model_report import _gap, gap_text, plot_energy
from accelmap.search.model_result import LayerMapping
from accelmap.sim.timeline import plot_timeline

_CSS = """
body { font-family: sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; font-size: 13px; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #ccc; padding: 3px 7px; text-align: left; vertical-align: top; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
.pass { color: #0a7a0a; font-weight: bold; } .fail { color: #b00; font-weight: bold; }
.accelerator { background: #e3efff; } .host { background: #f4f4f4; }
pre { background: #f8f8f8; padding: 6px; font-size: 12px; }
img { max-width: 100%; }
"""


def _e(x) -> str:
    return html.escape(str(x))


def _png(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()


def graph_svg(res: CompileResult) -> str:
    """The steps top to bottom, coloured by placement, with an edge from each value's producer to its readers."""
    steps = res.steps
    row, width = 26, 460
    producer = {o: i for i, s in enumerate(steps) for o in s.outputs}
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width + 140}" height="{row * len(steps) + 10}" '
             f'role="img" aria-label="model graph with placement">']
    for i, s in enumerate(steps):
        for x in s.inputs:
            j = producer.get(x)
            if j is not None and j != i - 1:
                y1, y2 = j * row + 14, i * row + 14
                bend = 20 + 6 * min(i - j, 20)
                parts.append(f'<path d="M {width} {y1} C {width + bend} {y1}, {width + bend} {y2}, {width} {y2}" '
                             f'fill="none" stroke="#999"/>')
        fill = "#9cc3ff" if s.placement == "accelerator" else "#dddddd"
        parts.append(f'<rect x="4" y="{i * row + 3}" width="{width - 4}" height="{row - 6}" rx="4" fill="{fill}"/>')
        label = f"{i}: {s.name} ({s.op_type}) - {s.placement}"
        parts.append(f'<text x="10" y="{i * row + 18}" font-size="12">{_e(label[:70])}</text>')
        if i:
            parts.append(f'<line x1="30" y1="{i * row - 3}" x2="30" y2="{i * row + 3}" stroke="#666"/>')
    parts.append("</svg>")
    return "\n".join(parts)


def _plots(res: CompileResult, tmp: Path, timeline_layer: str | None) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    title = "Energy by level and operand (cost model)"
    if any(c.intrinsic for c in res.program.layers.values()):
        title += " of the mapper's mappings; layers that run intrinsic programs have theirs in the layer table"
    out = [(title, _png(plot_energy(res.mapping, tmp / "energy.png")))]
    if res.timing is not None:
        t = res.timing
        fig, ax = plt.subplots(figsize=(max(7.0, 0.3 * len(t.steps) + 3), 4.0))
        xs = range(len(t.steps))
        host_in = [s.host if s.placement == "accelerator" else 0.0 for s in t.steps]   # host work of a layer step
        ax.bar([x - 0.2 for x in xs], [s.total for s in t.steps], 0.4, label="simulated (+ host model)")
        ax.bar([x + 0.2 for x in xs], [s.modeled + h for s, h in zip(t.steps, host_in, strict=True)], 0.4,
               label="analytical model (+ host model)")
        ax.set_xticks(list(xs), [s.name for s in t.steps], rotation=70, ha="right", fontsize=7)
        ax.set_ylabel("cycles")
        ax.set_yscale("symlog")
        ax.legend(fontsize=8)
        ax.set_title("latency per step")
        fig.tight_layout()
        fig.savefig(tmp / "steps.png", dpi=100)
        plt.close(fig)
        out.append(("Latency per step", _png(tmp / "steps.png")))
        if t.sims:
            if timeline_layer is None:
                name, sim = max(t.sims.items(), key=lambda kv: kv[1].cycles)
                why = "the most cycles"
            else:
                name, sim, why = timeline_layer, t.sims[timeline_layer], "chosen"
            plot_timeline(sim.timing, tmp / "timeline.png", f"{name} on {res.arch.name}")
            out.append((f"Simulator timeline of layer {name} ({why}; first instructions)" if "@" not in name else
                        f"Simulator timeline of layer {name.split('@')[0]}'s intrinsic program "
                        f"({name.split('@')[1]}; {why}; first instructions)",
                        _png(tmp / "timeline.png")))
    return out


def _fused_section(res: CompileResult) -> str:
    """The fusion search's plan and every fused group the program runs: its plan, modeled against simulated."""
    f = res.fusion
    assert f is not None
    out = [f"<h2>Fused groups</h2><p>The fusion search (Stream-like depth-first tiles, DeFiNES' halo modes) chose "
           f"{len(f.groups)} groups ({f.stats.groups_tried} tried, {f.tile_searches} tile mappings searched, "
           f"{f.seconds:.1f} s{', stopped at its time limit' if f.stats.timed_out else ''}); the program runs "
           f"{len(res.groups)} of them fused. A group's C walks its tile loop: every operator computes its block "
           "into an on-chip buffer, followed by the host steps folded into it (requantization, activation, "
           "quantization) on the block; intermediates never leave the chip. Modeled: the fusion model "
           "(energy, the load/compute/write-back pipeline's latency, off-chip bits); simulated: the simulator "
           "running the group's tile loop with each block's tile program.</p>",
           '<table id="fused-groups"><tr><th>function</th><th>stages</th><th>tile</th><th>halos (input, '
           "intermediates)</th><th>weights in the store</th><th>tiles</th><th>MACs computed / once</th>"
           "<th>buffers KiB</th><th>cycles (model)</th><th>cycles (sim)</th><th>model err</th><th>energy pJ</th>"
           "<th>off-chip MB (model / sim)</th><th>counters = model</th></tr>"]
    for grp in res.groups:
        c, sim = grp.cost, grp.sim
        err = sim.model_error if sim else None
        cells = [grp.name, grp.label, f"{c.tile_rows}x{c.tile_cols}", ", ".join(c.policies),
                 ("yes" if c.weights_resident else "no")
                 + (f", {', '.join(c.producers_on_chip)} too" if c.producers_on_chip else ""), f"{c.counts.tiles:,}",
                 f"{sum(c.counts.macs):,} / {sum(c.macs_once):,}", f"{c.counts.buffer_total_bits / 8192:,.1f}",
                 f"{c.latency:,.0f}", f"{sim.cycles:,.0f}" if sim else "", f"{err:+.2%}" if err is not None else "",
                 f"{c.energy:,.0f}",
                 _offchip_cell(grp, res.arch.levels[0].name),
                 "" if grp.counters_ok is None else ("yes" if grp.counters_ok else "NO")]
        out.append("<tr>" + "".join(f"<td>{_e(x)}</td>" for x in cells) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


def _offchip_cell(grp, top: str) -> str:
    """Off-chip MB of a group, modeled / simulated; where it keeps producers' outputs in the store (K and V), the
    group's and its producers' together (the model credits their saving to the group, the simulator counts them
    apart), named."""
    c, sim = grp.cost, grp.sim
    if not grp.produced:
        return f"{c.offchip_bits / 8e6:,.3f} / " + (f"{sim.offchip_bits / 8e6:,.3f}" if sim else "")
    model = c.offchip_bits + grp.producers_alone_bits(top)
    got = f"{(sim.offchip_bits + sim.producer_offchip_bits) / 8e6:,.3f}" if sim else ""
    return f"{model / 8e6:,.3f} / {got} (with {', '.join(c.producers_on_chip)})"


def report_html(res: CompileResult, timeline_layer: str | None = None) -> str:
    """The page; ``timeline_layer`` names the layer whose simulator timeline is drawn (default: the one with
    the most simulated cycles)."""
    mm = res.mapping
    if timeline_layer is not None and (res.timing is None or timeline_layer not in res.timing.sims):
        names = ", ".join(res.timing.sims) if res.timing else ", ".join(lm.name for lm in mm.layers)
        raise SpecError(f"no simulated layer {timeline_layer!r}; the layers are {names}", where="--timeline-layer")
    p: list[str] = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
                    f"<title>accelmap compile: {_e(mm.model.name)} on {_e(res.arch.name)}</title>",
                    f"<style>{_CSS}</style></head><body>",
                    f"<h1>{_e(mm.model.name)} on {_e(res.arch.name)}</h1>"]
    v = res.verification
    p.append("<h2>Verification</h2>")
    if v is None:
        p.append("<p>not verified (run with verification to compare with onnxruntime)</p>")
    else:
        cls = "pass" if v.ok else "fail"
        p.append(f'<p id="verification" class="{cls}">{"PASS" if v.ok else "FAIL"}: against {_e(v.reference)}</p>')
        p.append("<pre>" + _e(v.summary()) + "</pre>")
    if res.counts_checked:
        good = sum(res.counts_checked.values())
        p.append(f"<p>Transfer counters of the emitted tile programs equal to the cost model: {good} of "
                 f"{len(res.counts_checked)} accelerator steps.</p>")
    if res.calls_checked:
        good = sum(res.calls_checked.values())
        p.append(f"<p>Intrinsic programs: {good} of {len(res.calls_checked)} accelerator steps issued the planned "
                 f"number of intrinsic calls. An intrinsic program has no transfer counters: its C packs the operands "
                 f"on the host and calls the intrinsic, with no memory hierarchy to count transfers in.</p>")
    if res.timing is not None:
        p.append("<h2>Network time</h2><pre>" + _e(res.timing.summary()) + "</pre>")
        from accelmap.compile.network_timing import HOST_MODEL

        p.append(f"<p>Host work: every host step, and in an accelerator step the host's operand conversion, "
                 f"epilogue, transposed-convolution scatter and intrinsic operand packing. The {_e(HOST_MODEL)}. "
                 "Steps run one after another.</p>")
    if res.run is not None:
        p.append(f"<p>The emitted program ran in {res.run.wall_s:.3f} s on the host.</p>")
    p.append("<h2>Model graph and placement</h2>")
    p.append(graph_svg(res))
    times = {s.name: s for s in res.timing.steps} if res.timing else {}
    p.append("<table><tr><th>#</th><th>node</th><th>op</th><th>placement</th><th>runs as</th><th>layer</th>"
             "<th>inputs</th><th>outputs</th><th>folded</th><th>cycles (sim / host model)</th><th>of which host work</th>"
             "<th>host energy pJ</th><th>host run s</th></tr>")
    group_of = {i: grp for grp in res.groups for i in grp.members}
    for i, s in enumerate(res.steps):
        lm = res.layer_of.get(s.name)
        t = times.get(s.name)
        code = res.program.layers.get(s.name)
        runs = f"{code.runs}: {code.reason}" if code else "host C"
        grp = group_of.get(i)
        if grp is not None:
            runs = f"fused group {grp.index} ({grp.name}), on its blocks"
            t = times.get(f"fused {grp.index}") if i == grp.at else None
        secs = res.run.step_seconds[i] if res.run else None
        p.append(f'<tr class="{s.placement}"><td class="n">{i}</td><td>{_e(s.name)}</td><td>{_e(s.op_type)}</td>'
                 f"<td>{s.placement}</td><td>{_e(runs)}</td><td>{_e(lm.name) if lm else ''}</td>"
                 f"<td>{_e(', '.join(s.inputs))}</td>"
                 f"<td>{_e(', '.join(s.outputs))}</td><td>{_e(', '.join(s.fused))}</td>"
                 f'<td class="n">{f"{t.total:,.0f}" if t else ""}</td>'
                 f'<td class="n">{f"{t.host:,.0f}" if t else ""}</td>'
                 f'<td class="n">{f"{t.host_energy_pj:,.0f}" if t else ""}</td>'
                 f'<td class="n">{f"{secs:.4f}" if secs is not None else ""}</td></tr>')
    p.append("</table>")
    if res.fusion is not None:
        p.append(_fused_section(res))
    p.append("<h2>Accelerator layers</h2>")
    levels = list(dict.fromkeys(c for l in mm.mapped for c, _ in l.cost.energy))
    operands = list(dict.fromkeys(o for l in mm.mapped for _, o in l.cost.energy))
    head = ["layer", "nodes", "runs as", "how", "certificate", "MACs", "latency (model)", "latency (sim)",
            "utilization", "energy pJ"] + [f"E {c}" for c in levels] + [f"E {o}" for o in operands]
    p.append("<p>A layer that runs its intrinsic program shows that program's numbers: its loop nest is the mapper's "
             "search under the constraint that keeps the intrinsic's dims whole on the PE array (its certificate "
             "bounds every mapping that constraint allows), or where that search finds nothing better, the one the "
             "embedding ranking builds (intrinsic on the PE array, outer loops on chip while the tiles fit); its MACs "
             "and utilization count the padded intrinsic calls. Each other layer shows its mapping's.</p>")
    p.append("<table><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>")
    codes: dict[str, dict[str, LayerCode]] = {}
    for code in res.program.layers.values():
        codes.setdefault(code.layer.name, {})[code.function] = code
    rows: list[tuple[LayerMapping, LayerCode | None]] = []
    for l in mm.layers:
        mine: list[LayerCode | None] = list(codes.get(l.name, {}).values()) or [None]
        for code in mine:
            rows.append((l, code))
    fused_steps = {res.steps[i].name for grp in res.groups for i in grp.members}
    for l, code in rows:
        key = f"{l.name}@{code.intrinsic.intrinsic}" if code is not None and code.intrinsic else l.name
        c = res.timing.costs.get(key, l.cost) if res.timing else l.cost
        sim = res.timing.sims.get(key) if res.timing else None
        intr = code is not None and code.intrinsic is not None
        runs = code.runs if code else ("in fused groups (table above)" if set(l.layer.nodes) <= fused_steps
                                       else "tile program (mapper)")
        nest = res.nests.get(key) if intr else None
        how, cert = l.how, _gap(l)
        if intr:
            how = ("built by the embedding ranking" if nest is None else
                   f"searched under the intrinsic's shape ({nest.strategy})" if nest.searched else
                   f"built by the embedding ranking: {nest.why}")
            g = nest.gap if nest is not None else None
            cert = "none (not searched)" if g is None else gap_text(g, bool(nest and nest.proven))
        macs = c.macs if intr else l.layer.operator.macs
        by_lv = c.energy_by_level()
        by_op: dict[str, float] = {}
        for (_, o), e in c.energy.items():
            by_op[o] = by_op.get(o, 0.0) + e
        cells = [_e(l.name), _e(", ".join(l.layer.nodes)), _e(runs), _e(how), _e(cert), f"{macs:,}",
                 f"{c.latency:,.0f}", f"{sim.cycles:,.0f}" if sim else "", f"{c.utilization:.1%}",
                 f"{c.energy_total:,.0f}"] + [f"{by_lv.get(x, 0.0):,.0f}" for x in levels] + \
            [f"{by_op.get(x, 0.0):,.0f}" for x in operands]
        p.append("<tr>" + "".join(f'<td class="n">{x}</td>' if k >= 5 else f"<td>{x}</td>"
                                  for k, x in enumerate(cells)) + "</tr>")
    p.append("</table>")
    if res.intrinsics:
        p.append("<h2>Intrinsic embedding</h2><ul>" + "".join(f"<li>{_e(c.line())}</li>" for c in res.intrinsics)
                 + "</ul>")
    p.append("<h2>Loop nests</h2>")
    for l, code in rows:
        op = l.layer.operator
        if code is not None and code.intrinsic is not None and code.intrinsic.program is not None:
            prog = code.intrinsic.program
            text = (prog.text() + "\n\nlayout rewrites (Table 4.1 of Rieber's 2022 dissertation):\n"
                    + "\n".join(f"  {lay.operand}: {r}" for lay in prog.layouts for r in lay.rewrites))
            p.append(f"<details><summary>{_e(l.name)}: {_e(op.expression())} (intrinsic program)</summary><pre>"
                     + _e(text) + "</pre></details>")
        else:
            p.append(f"<details><summary>{_e(l.name)}: {_e(op.expression())}</summary><pre>"
                     + _e(format_text(l.mapping_found, res.arch, op)) + "</pre></details>")
    p.append("<h2>Plots</h2>")
    with tempfile.TemporaryDirectory(prefix="accelmap-report-") as td:
        for title, uri in _plots(res, Path(td), timeline_layer):
            p.append(f"<h3>{_e(title)}</h3><img alt=\"{_e(title)}\" src=\"{uri}\">")
    notes = res.graph.notes + list(mm.notes) + res.program.notes
    if notes:
        p.append("<h2>Notes</h2><ul>" + "".join(f"<li>{_e(n)}</li>" for n in notes) + "</ul>")
    p.append("</body></html>")
    return "\n".join(p) + "\n"


def write_compile_report(res: CompileResult, out_dir: str | Path, timeline_layer: str | None = None) -> Path:
    path = Path(out_dir) / "report.html"
    write_atomic(path, report_html(res, timeline_layer))
    return path
