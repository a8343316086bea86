"""``accelmap compile``: an ONNX model to one verified C program for the whole network.

import -> map every distinct accelerator layer -> partition -> emit and build the C program ->
run it and compare with onnxruntime -> time every layer on the simulator -> report.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from accelmap.arch.accelerator import Accelerator
from accelmap.codegen.fused_weights import model_weight_bits
from accelmap.compile.fused_groups import FusedGroup, fuse_network, plan_groups
from accelmap.compile.graph import NetGraph, load_graph
from accelmap.compile.intrinsic_choice import POLICIES, IntrinsicChoice, ProgramNest, intrinsic_choices, program_nest
from accelmap.compile.network_timing import HOST_ELEMENTS_PER_CYCLE, NetworkTiming, time_network
from accelmap.compile.partition import ACCEL_OPS, Step, partition
from accelmap.compile.program import Program, build_program, emit_program
from accelmap.compile.verify import RunOutput, Verification, random_inputs, run_program, verify
from accelmap.cost.model import access_counts
from accelmap.errors import SpecError
from accelmap.fusion.group_cost import InnerMappings
from accelmap.fusion.model_fusion import FusedModel
from accelmap.fusion.search import DEFAULT_FUSION, FusionConfig
from accelmap.search.model_mapper import map_model
from accelmap.search.model_result import LayerMapping, ModelMapping
from accelmap.sim.fused import simulate_fused
from accelmap.workload.onnx_import import import_onnx


@dataclass
class CompileResult:
    graph: NetGraph
    mapping: ModelMapping
    steps: list[Step]
    program: Program
    layer_of: dict[str, LayerMapping]            # accelerator step name -> its layer
    run: RunOutput | None
    verification: Verification | None
    timing: NetworkTiming | None
    counts_checked: dict[str, bool] = field(default_factory=dict)   # tile-program step -> counters equal to the model
    calls_checked: dict[str, bool] = field(default_factory=dict)    # intrinsic-program step -> calls as planned
    intrinsics: list[IntrinsicChoice] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    fusion: FusedModel | None = None             # the fusion search's plan (``--fuse``)
    cpu_seconds: dict[str, float] = field(default_factory=dict)   # this process's CPU time of the searches
    nests: dict[str, ProgramNest] = field(default_factory=dict)   # intrinsic program key -> the nest timing it

    @property
    def groups(self) -> list[FusedGroup]:
        return self.program.groups

    @property
    def arch(self) -> Accelerator:
        return self.mapping.arch

    def to_dict(self) -> dict:
        """The numbers of a compile run (``--json`` and the benchmark)."""
        t, v = self.timing, self.verification
        return {
            "model": self.mapping.model.name, "arch": self.arch.name, "folder": str(self.program.folder),
            "steps": len(self.steps), "accelerator_steps": sum(1 for s in self.steps if s.placement == "accelerator"),
            "seconds": self.seconds, "cpu_seconds": self.cpu_seconds, "host_run_s": self.run.wall_s if self.run else None,
            "verification": None if v is None else {
                "ok": v.ok, "reference": v.reference, "outputs": [c.line() for c in v.outputs],
                "quantized_exact": sum(c.ok for c in v.quantized), "quantized": len(v.quantized),
                "first_bad_step": v.first_bad_step},
            "intrinsics": [c.line() for c in self.intrinsics],
            "layer_programs": [{"function": c.function, "layer": c.layer.name, "dtype": c.dtype, "runs": c.runs,
                                "why": c.reason} for c in {c.function: c for c in self.program.layers.values()}.values()],
            "counters_equal_model": sum(self.counts_checked.values()), "counters_checked": len(self.counts_checked),
            "intrinsic_calls_as_planned": sum(self.calls_checked.values()),
            "intrinsic_steps": len(self.calls_checked),
            "simulated_cycles": t.simulated_cycles if t else None, "modeled_cycles": t.modeled_cycles if t else None,
            "host_model_cycles": t.host_cycles if t else None, "energy_pj": t.energy_pj if t else None,
            "accelerator_energy_pj": t.accelerator_energy_pj if t else None,
            "host_energy_pj": t.host_energy_pj if t else None,
            "packing_host_cycles": t.packing_cycles if t else None,
            "offchip_bits": t.offchip_bits if t else None,
            "fusion_search": None if self.fusion is None else {
                "seconds": self.fusion.seconds, "groups_tried": self.fusion.stats.groups_tried,
                "tile_searches": self.fusion.tile_searches, "timed_out": self.fusion.stats.timed_out,
                "groups_in_plan": len(self.fusion.groups), "groups_run": len(self.groups),
                # the plan's totals and layer by layer, by the same run's mappings (the fusion model)
                "plan": {k: v for k, v in self.fusion.to_dict().items() if k in ("fused", "unfused")}},
            "fused_groups": [_group_dict(grp, self.arch.levels[0].name) for grp in self.groups],
            "intrinsic_nests": [{"program": k, "searched": n.searched, "strategy": n.strategy, "value": n.value,
                                 "built_value": n.built_value, "lower_bound": n.lower_bound, "proven": n.proven,
                                 "gap": n.gap, "why": n.why} for k, n in self.nests.items()],
        }

    def summary(self) -> str:
        p = self.program
        acc = sum(1 for s in self.steps if s.placement == "accelerator")
        lines = [f"compiled {self.mapping.model.name} for {self.arch.name}: {acc} accelerator steps "
                 f"({len(p.layers and {c.function for c in p.layers.values()})} distinct layer programs), "
                 f"{len(self.steps) - acc} host steps -> {p.folder}"]
        lines.append("  " + ", ".join(f"{k} {v:.2f} s" for k, v in self.seconds.items()))
        if self.run is not None:
            lines.append(f"  the program ran in {self.run.wall_s:.3f} s on the host")
        if self.counts_checked:
            bad = [k for k, v in self.counts_checked.items() if not v]
            lines.append(f"  transfer counters of the emitted tile programs: {len(self.counts_checked) - len(bad)} of "
                         f"{len(self.counts_checked)} tile-program steps equal to the cost model"
                         + (f" (differ: {', '.join(bad)})" if bad else ""))
        if self.calls_checked:
            bad = [k for k, v in self.calls_checked.items() if not v]
            lines.append(f"  intrinsic programs of the emitted code: {len(self.calls_checked) - len(bad)} of "
                         f"{len(self.calls_checked)} accelerator steps issued the planned number of intrinsic calls"
                         + (f" (differ: {', '.join(bad)})" if bad else "")
                         + "; they have no transfer counters (no memory hierarchy in the C)")
        if self.intrinsics:
            found = [c for c in self.intrinsics if c.found]
            lines.append(f"  intrinsic embedding ({', '.join(sorted({c.intrinsic for c in self.intrinsics}))}): "
                         f"{len({c.layer for c in found})} of {len({c.layer for c in self.intrinsics})} layers embed; "
                         f"programs checked in NumPy: {sum(c.checked is True for c in found)} equal, "
                         f"{sum(c.checked is False for c in found)} differ, {sum(c.checked is None for c in found)} "
                         f"too large to run there")
        codes = list({c.function: c for c in p.layers.values()}.values())
        if codes:
            lines.append(f"  layer programs: {sum(c.intrinsic is not None for c in codes)} intrinsic programs, "
                         f"{sum(c.intrinsic is None for c in codes)} tile programs")
            for c in codes:
                lines.append(f"    {c.function} ({c.layer.name}, {c.dtype}): {c.runs}: {c.reason}")
        if self.nests:
            ns = list(self.nests.values())
            gaps = [n.gap for n in ns if n.gap is not None]
            lines.append(f"  intrinsic programs' loop nests: {sum(n.searched for n in ns)} of {len(ns)} searched under the "
                         f"intrinsic's shape ({sum(n.proven for n in ns)} proven optimal"
                         + (f", largest certified gap {max(gaps):.0%}" if gaps else "")
                         + f"), {sum(not n.searched for n in ns)} built by the embedding ranking; objective {sum(n.value for n in ns):,.4g} against "
                         f"{sum(n.built_value for n in ns):,.4g} with the built nests (each program once)")
        if self.fusion is not None:
            f = self.fusion
            lines.append(f"  fusion search: {len(f.groups)} groups in the plan ({f.stats.groups_tried} tried, "
                         f"{f.tile_searches} tile mappings searched, {f.seconds:.1f} s"
                         + (", stopped at its time limit" if f.stats.timed_out else "")
                         + f"); {len(self.groups)} run fused")
            for grp in self.groups:
                gc = grp.cost
                sim = grp.sim
                kept = (f", {', '.join(gc.producers_on_chip)} written to the store for it"
                        if gc.producers_on_chip else "")
                lines.append(f"    {grp.name}: {grp.label}, tile {gc.tile_rows}x{gc.tile_cols}, halos "
                             f"{'/'.join(gc.policies)}{', weights kept in the store' if gc.weights_resident else ''}"
                             f"{f', head tiles of {gc.head_tile}' if gc.head_tile else ''}{kept}; "
                             f"modeled {gc.latency:,.0f} cycles"
                             + (f", simulated {sim.cycles:,.0f} ({sim.model_error:+.2%})" if sim and sim.model_error
                                is not None else "")
                             + f", off-chip {gc.offchip_bits / 8e6:,.3f} MB"
                             + ("" if grp.counters_ok is None else
                                f"; counters {'equal to' if grp.counters_ok else 'DIFFER from'} the fusion model")
                             + ("" if grp.level_counters_ok is None else
                                f"; blocks through their tile mappings, counters per level "
                                f"{'equal to' if grp.level_counters_ok else 'DIFFER from'} the cost model's"))
        if self.verification is not None:
            lines.append(self.verification.summary())
        if self.timing is not None:
            lines.append(self.timing.summary())
        for n in self.graph.notes + list(self.mapping.notes) + p.notes:
            lines.append(f"  note: {n}")
        return "\n".join(lines)


def _group_dict(grp: FusedGroup, top: str) -> dict:
    c, sim = grp.cost, grp.sim
    return {"function": grp.name, "stages": [st.name for st in grp.stages], "tile": [c.tile_rows, c.tile_cols],
            "tiles": c.counts.tiles, "policies": dict(zip(["input", *c.names[:-1]], c.policies, strict=True)),
            "weights_resident": c.weights_resident, "head_tile": c.head_tile, "steps_covered": len(grp.members),
            "weight_bits_per_stage": model_weight_bits(c),
            "modeled_cycles": c.latency, "simulated_cycles": sim.cycles if sim else None,
            "energy_pj": c.energy, "offchip_bits_modeled": c.offchip_bits,
            "offchip_bits_simulated": sim.offchip_bits if sim else None,
            # producers kept in the store: the model credits their saved writes to the group (its off-chip bits may
            # be negative), the simulator counts what they still move apart
            "producers_on_chip": list(c.producers_on_chip),
            "producer_offchip_bits_simulated": sim.producer_offchip_bits if sim else None,
            "producers_offchip_bits_alone": grp.producers_alone_bits(top),
            "macs_computed": list(c.counts.macs), "macs_once": list(c.macs_once),
            "join": c.join.name if c.join else None, "skip_policy": c.skip_policy,
            "skip_fetched": c.counts.skip_fetched if c.join else None,
            # residual adds inside the group (it spans blocks) and each one's skip policy
            "inner_joins": [{"join": jn.name, "skip_policy": sp} for jn, sp in c.inner_joins],
            "buffer_bits": c.counts.buffer_total_bits, "host_model_cycles": (grp.host_work.read + grp.host_work.written)
            / HOST_ELEMENTS_PER_CYCLE, "counters_equal_model": grp.counters_ok,
            "block_tile_programs": grp.programs is not None, "level_counters_equal_model": grp.level_counters_ok}


def _check_counts(res: CompileResult) -> None:
    arch = res.arch
    if res.run is None:
        return
    for grp in res.groups:
        got = res.run.fused_counters.get(grp.index)
        cnt = grp.cost.counts
        want = [cnt.input_fetched, cnt.output_written, 0, *cnt.macs]
        if grp.has_joins:
            want.append(cnt.skip_fetched)
        want += model_weight_bits(grp.cost)
        if grp.host_adds:       # the skips of the adds left to the host: each computed element's, read once
            want.append(sum(grp.computed(x.tensor - 1) for x in grp.host_adds))
        grp.counters_ok = got is not None and [int(v) for v in got] == want
        if grp.programs is not None:        # the blocks' tile programs: every level's counters the model's
            ran = res.run.fused_level_counters
            grp.level_counters_ok = all((grp.index, j) in ran and ran[(grp.index, j)].tolist() == want_j.ravel().tolist()
                                        for j, want_j in grp.level_counts.items())
    for i, s in enumerate(res.steps):
        if s.placement != "accelerator" or i not in res.run.counters:
            continue
        lm = res.layer_of[s.name]
        op = lm.layer.operator
        code = res.program.layers[s.name]
        if code.intrinsic is not None:
            assert code.intrinsic.program is not None
            res.calls_checked[s.name] = int(res.run.counters[i][0]) == code.intrinsic.program.calls
            continue
        got = res.run.counters[i].reshape(len(arch.levels), len(op.operands), 4)
        model = access_counts(op, arch, lm.mapping_found)
        ok = True
        for (lv, name), c in model.items():
            k = next(j for j, X in enumerate(op.operands) if X.name == name)
            ok = ok and tuple(int(v) for v in got[lv, k]) == c.as_tuple()
        res.counts_checked[s.name] = bool(ok)


def compile_model(model: str | Path | onnx.ModelProto, arch: Accelerator, out_dir: str | Path, *,
                  dims: dict[str, int] | None = None, batch: int | None = None, seq_len: int | None = None,
                  objective: str = "edp", time_limit_per_layer: float | None = 2.0, jobs: int | None = 1,
                  seed: int = 0, inputs: dict[str, np.ndarray] | None = None, run: bool = True,
                  check: bool = True, simulate: bool = True, intrinsics: str = "always", fuse: bool = False,
                  fuse_tile_time_limit: float = 2.0, fuse_time_limit: float | None = None,
                  fuse_config: FusionConfig = DEFAULT_FUSION, c_opt: str = "-O2") -> CompileResult:
    """Compile ``model`` for ``arch`` into ``out_dir`` (C files, weights, Makefile, the executable).

    ``run`` executes the program once on ``inputs`` (random, seeded, when None); ``check``
    compares it with onnxruntime; ``simulate`` times every accelerator layer on the simulator;
    ``intrinsics`` is the policy of ``intrinsic_choice.py``: ``always`` runs a layer as its intrinsic
    program wherever the accelerator's intrinsic embeds usably, ``faster`` only where that program is
    modeled faster than the mapper's tile program, ``never`` runs tile programs only. ``fuse`` runs the
    fusion search (``fuse_tile_time_limit`` seconds per tile mapping, ``fuse_time_limit`` in all) and emits
    its groups as fused steps (``fused_groups.py``). ``c_opt`` is the C compiler's optimization level (the
    Makefile keeps -O2; the results are the same bits at every level).
    """
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    g = load_graph(model, dims=dims, batch=batch, seq_len=seq_len, seed=seed)
    name = Path(str(model)).stem if not isinstance(model, onnx.ModelProto) else (model.graph.name or "model")
    imp = import_onnx(g.model, name=name)
    other = [l for l in imp.layers if l.source_op not in ACCEL_OPS]
    if other:
        raise SpecError(f"node {other[0].nodes[0]!r} ({other[0].source_op}) carries multiply-accumulates; the "
                        f"compiler runs {', '.join(ACCEL_OPS)} on the accelerator and nothing else with MACs",
                        where=g.source)
    seconds["import"] = time.perf_counter() - t0
    t0, c0 = time.perf_counter(), time.process_time()
    mm = map_model(imp, arch, objective, time_limit_per_layer=time_limit_per_layer, jobs=jobs, cache_path=None,
                   progress=False, seed=seed)
    seconds["map"] = time.perf_counter() - t0
    cpu = {"map": time.process_time() - c0}
    failed = [l for l in mm.layers if not l.ok]
    if failed:
        raise SpecError(f"layer {failed[0].name} has no mapping on {arch.name}: {failed[0].error}", where=g.source)
    layer_of_node = {n: lm for lm in mm.layers for n in lm.layer.nodes}
    t0 = time.perf_counter()
    steps = partition(g, set(layer_of_node))
    partition_s = time.perf_counter() - t0
    # The intrinsics multiply integers: only layers with an integer step are embedded.
    int_layers = {layer_of_node[s.name].name for s in steps if s.placement == "accelerator" and s.dtype == "int"}
    if intrinsics not in POLICIES:
        raise SpecError(f"intrinsic policy {intrinsics!r}; valid: {', '.join(POLICIES)}", where="--intrinsics")
    t0 = time.perf_counter()
    choices = intrinsic_choices([lm for lm in mm.layers if lm.name in int_layers], arch, intrinsics)
    if choices:
        seconds["embed"] = time.perf_counter() - t0
    fusion: FusedModel | None = None
    inner: InnerMappings | None = None
    groups: list[FusedGroup] = []
    fuse_notes: list[str] = []
    if fuse:
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            fusion, inner, search_notes, producers = fuse_network(g, mm, objective, fuse_tile_time_limit,
                                                                  fuse_time_limit, fuse_config, steps)
        except SpecError as e:
            fuse_notes.append(f"no fused groups: {e}")
        else:
            groups, fuse_notes = plan_groups(fusion, steps, g, producers, arch, inner)
            fuse_notes = search_notes + fuse_notes
        seconds["fuse"] = time.perf_counter() - t0
        cpu["fuse"] = time.process_time() - c0
    t0 = time.perf_counter()
    prog = emit_program(g, steps, layer_of_node, arch, out_dir, None if intrinsics == "never" else choices, groups)
    prog.notes += fuse_notes
    seconds["emit"] = partition_s + time.perf_counter() - t0
    build_program(prog, c_opt)
    seconds["build"] = prog.build_s
    res = CompileResult(g, mm, steps, prog, {s.name: layer_of_node[s.name] for s in steps
                                             if s.placement == "accelerator"}, None, None, None, seconds=seconds,
                        intrinsics=choices, fusion=fusion, cpu_seconds=cpu)
    if run:
        data = inputs if inputs is not None else random_inputs(g, seed)
        for x in g.inputs:
            if x not in data:
                raise SpecError(f"no value for graph input {x!r}", where="--input")
            if tuple(data[x].shape) != g.shape(x):
                raise SpecError(f"graph input {x!r} has shape {list(g.shape(x))}, the value given "
                                f"{list(data[x].shape)}", where="--input")
        res.run = run_program(prog, data, dump=check)    # the step outputs serve the comparison
        seconds["run"] = res.run.wall_s
        _check_counts(res)
        if check:
            t0 = time.perf_counter()
            res.verification = verify(prog, g, data, res.run)
            seconds["verify"] = time.perf_counter() - t0
    if simulate:
        t0, c0 = time.perf_counter(), time.process_time()
        goal = "edp" if objective == "pareto" else objective
        for code in prog.layers.values():
            key = NetworkTiming.key(code.layer.name, code)
            if code.intrinsic is not None and code.intrinsic.program is not None and key not in res.nests:
                res.nests[key] = program_nest(code.intrinsic.program, arch, goal, time_limit_per_layer)
        if res.nests:
            seconds["nest"] = time.perf_counter() - t0
            cpu["nest"] = time.process_time() - c0
        t0 = time.perf_counter()
        for grp in groups:
            assert inner is not None
            c = grp.cost
            grp.sim = simulate_fused(grp.stages, grp.macs, arch, c.tile_rows, c.tile_cols, c.policies, inner,
                                     c.weights_resident, model_latency=c.latency, join=c.join,
                                     skip_policy=c.skip_policy or "re-read", inner_joins=c.inner_joins,
                                     producers=grp.produced, head_tile=c.head_tile, norms=c.norms,
                                     input_held=c.input_held)
        res.timing = time_network(res.steps, res.layer_of, g, arch, prog.layers, prog.host_work, prog.packing,
                                  groups, res.nests)
        seconds["simulate"] = time.perf_counter() - t0
    return res
