"""Which way an accelerator layer runs: the accelerator's intrinsic (embedding) or the mapper's tile program.

For an accelerator with intrinsics, each distinct layer is embedded TVM-style first (strict mode:
NCHW, input channels padded up to the intrinsic; Rieber's 2022 dissertation, ch. 4). Where that
pads the intrinsic (utilization below 1) or finds nothing, the relaxed search runs too (im2col,
image and dilate packs, fused axes; at most ``RELAXED_SECONDS``), and the embedding with the fewest
modeled cycles is taken. A layer runs its intrinsic program (``codegen.intrinsic_c``) when

- an intrinsic embeds (of several intrinsics, the one with the fewest modeled cycles),
- the program has a loop nest on the accelerator (the one the embedding ranking builds: outer
  loops moved on chip while the tiles fit, the intrinsic on the PE array), which gives it modeled
  and simulated time and energy,
- its NumPy execution equals the operator (run for layers up to ``CHECK_MAX_MACS``; larger ones are
  checked by the whole-network comparison with onnxruntime),
- the C emitter accepts it,
- the layer runs on integers: the intrinsics multiply integers, so a float step of the layer
  runs the mapper's tile program,
- and, under the policy ``faster`` (not the default ``always``), the intrinsic program is modeled
  faster than the mapper's tile program.

Otherwise it runs the mapper's tile program, and the reason is recorded.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from accelmap.arch.accelerator import Accelerator
from accelmap.arch.intrinsics import Intrinsic
from accelmap.codegen.intrinsic_c import generate_intrinsic_c
from accelmap.cost.model import evaluate
from accelmap.embed.program import Program as IntrinsicProgram
from accelmap.embed.program import verify_program
from accelmap.embed.rank import intrinsic_constraints, program_mapping
from accelmap.embed.search import Embedding, default_embedding, embed
from accelmap.errors import AccelmapError
from accelmap.mapping.loopnest import Mapping
from accelmap.search.mapper import map_operator
from accelmap.search.model_result import LayerMapping
from accelmap.search.objective import certificate_gap, scalar
from accelmap.workload.operator import Operator

CHECK_MAX_MACS = 2_000_000
RELAXED_SECONDS = 5.0
# always: an intrinsic program wherever one is usable (intrinsic first, then the mapper);
# faster: only where it is modeled faster than the mapper's tile program; never: tile programs only.
POLICIES = ("always", "faster", "never")


@dataclass(frozen=True)
class IntrinsicChoice:
    layer: str
    intrinsic: str
    found: bool
    calls: int = 0
    utilization: float = 0.0
    # the embedding's modeled cycles with the loop nest it builds to rank embeddings, not a searched one
    latency: float | None = None
    mapping_latency: float = 0.0       # the mapper's modeled cycles, for comparison
    checked: bool | None = None        # intrinsic program equal to NumPy (None: not run, too large)
    reason: str = ""                   # why it does not embed, or why the program is not used
    program: IntrinsicProgram | None = None
    selected: bool = False             # the layer's integer steps run this intrinsic program
    mode: str = ""                     # embedding search mode: strict (TVM-like) or relaxed

    def line(self) -> str:
        if not self.found:
            return f"{self.layer}: {self.intrinsic} does not embed ({self.reason}); runs the mapper's tile program"
        chk = {None: "not run in NumPy (large layer; the network comparison checks it)", True: "equal to NumPy",
               False: "MISMATCH with NumPy"}[self.checked]
        head = (f"{self.layer}: {self.intrinsic} embeds ({self.mode}) with {self.calls:,} calls at {self.utilization:.0%} "
                f"utilization, modeled {'-' if self.latency is None else f'{self.latency:,.0f}'} cycles with the loop "
                f"nest the embedding builds (the mapper's tile program: {self.mapping_latency:,.0f}); program {chk}; ")
        if self.selected:
            return head + "the emitted C runs the intrinsic program"
        return head + f"runs the mapper's tile program ({self.reason})"


def best_embedding(op: Operator, intr: Intrinsic, arch: Accelerator) -> tuple[Embedding | None, str]:
    """The strict embedding, or a relaxed one with fewer modeled cycles where strict pads or fails; and its mode
    (or, with no embedding, why)."""
    strict = default_embedding(op, intr, arch)
    if strict is not None and strict.program.utilization >= 1:
        return strict, "strict"
    relaxed = embed(op, intr, "relaxed", arch=arch, processes=1, time_limit=RELAXED_SECONDS)
    found = [(e.costs.latency, e.costs.combined_cost, k, e) for k, e in enumerate(relaxed.embeddings)
             if e.costs.latency is not None]
    best = min(found, default=None)
    if best is None:
        return (strict, "strict") if strict is not None else (None, f"no embedding: {relaxed.reason}")
    lat, _, _, e = best
    if strict is None or strict.costs.latency is None or lat < strict.costs.latency:
        return e, "relaxed"
    return strict, "strict"


def _usable(lm: LayerMapping, name: str, e: Embedding, arch: Accelerator, mode: str) -> IntrinsicChoice:
    prog = e.program
    op = lm.layer.operator
    checked, why = None, ""
    if op.macs <= CHECK_MAX_MACS:
        checked, why = verify_program(prog)
    base = IntrinsicChoice(lm.name, name, True, prog.calls, prog.utilization, e.costs.latency, lm.cost.latency,
                           checked, "", prog, mode=mode)
    if checked is False:
        return _with(base, f"its NumPy execution differs from the operator: {why}")
    if e.costs.latency is None:
        return _with(base, f"the program has no loop nest that fits {arch.name}'s buffers, so no time or energy")
    try:
        generate_intrinsic_c(prog)
    except AccelmapError as err:
        return _with(base, f"no C form: {err}")
    return base


def _with(c: IntrinsicChoice, reason: str) -> IntrinsicChoice:
    return replace(c, reason=reason, selected=False)


def intrinsic_choices(layers: list[LayerMapping], arch: Accelerator, policy: str = "always") -> list[IntrinsicChoice]:
    """Every (intrinsic, layer) pair tried; per layer at most one is ``selected`` (the fewest modeled cycles)."""
    if policy not in POLICIES:
        raise ValueError(f"policy {policy!r}; valid: {', '.join(POLICIES)}")
    out: list[IntrinsicChoice] = []
    if policy == "never":
        return out
    for lm in layers:
        mine: list[IntrinsicChoice] = []
        for name, intr in arch.intrinsics:
            if not isinstance(intr, Intrinsic):
                continue
            try:
                e, mode = best_embedding(lm.layer.operator, intr, arch)
            except AccelmapError as err:
                mine.append(IntrinsicChoice(lm.name, name, False, reason=str(err)))
                continue
            if e is None:
                mine.append(IntrinsicChoice(lm.name, name, False, reason=mode))
                continue
            mine.append(_usable(lm, name, e, arch, mode))
        usable = [c for c in mine if c.found and not c.reason and c.latency is not None]
        if policy == "faster":
            slower = [c for c in usable if c.latency is not None and c.latency >= lm.cost.latency]
            mine = [_with(c, f"the mapper's tile program is modeled faster ({lm.cost.latency:,.0f} against "
                             f"{c.latency:,.0f} cycles)") if c in slower else c for c in mine]
            usable = [c for c in usable if c not in slower]
        if usable:
            best = min(usable, key=lambda c: (c.latency, c.intrinsic))
            others = [_with(c, f"{best.intrinsic} has fewer modeled cycles") if c in usable and c is not best else c
                      for c in mine]
            mine = [replace(c, selected=True) if c is best else c for c in others]
        out += mine
    return out


def selected_programs(choices: list[IntrinsicChoice]) -> dict[str, IntrinsicChoice]:
    """Layer name -> the intrinsic program its integer steps run."""
    return {c.layer: c for c in choices if c.selected}


def why_not(choices: list[IntrinsicChoice], layer: str) -> str:
    """Why a layer runs its tile program although the accelerator has intrinsics."""
    return "; ".join(f"{c.intrinsic}: {c.reason}" for c in choices if c.layer == layer and not c.selected)


@dataclass(frozen=True)
class ProgramNest:
    """The loop nest that times an intrinsic program on the accelerator (``network_timing``).

    ``searched``: the mapper's mapping of the program's operator under the constraint that keeps every
    intrinsic dim whole on the PE array where the embedding ranking's nest puts it (so each intrinsic call
    is one step of the array, as the C calls it); it carries the mapper's lower bound over every mapping
    that constraint allows, hence a certificate. Otherwise the ranking's built nest (``why`` says why);
    the bound, when the search gave one, still bounds it.
    """

    operator: Operator
    mapping: Mapping
    searched: bool
    value: float                  # the objective's value of this nest
    built_value: float            # ... of the embedding ranking's nest
    lower_bound: float | None
    proven: bool
    strategy: str = ""
    why: str = ""

    @property
    def gap(self) -> float | None:
        return certificate_gap(self.value, self.lower_bound, self.proven)


def program_nest(prog: IntrinsicProgram, arch: Accelerator, objective: str, time_limit: float | None) -> ProgramNest:
    """The searched nest of ``prog`` (see ``ProgramNest``), or its built nest where no better one is found."""
    got = intrinsic_constraints(prog, arch)
    if got is None:
        pm = program_mapping(prog, arch)
        if pm is None:
            raise AccelmapError(f"the intrinsic program of {prog.op.name} has no loop nest on {arch.name}")
        c = evaluate(pm[0], arch, pm[1])
        v = scalar(objective, c.energy_total, c.latency)
        return ProgramNest(pm[0], pm[1], False, v, v, None, False,
                           why="its built nest runs an intrinsic dim in time: a search could tile it")
    pop, built, cons = got
    c = evaluate(pop, arch, built)
    bv = scalar(objective, c.energy_total, c.latency)
    try:
        res = map_operator(pop, arch, objective, constraints=cons, strategy="auto", time_limit=time_limit)
    except AccelmapError as e:
        return ProgramNest(pop, built, False, bv, bv, None, False, why=f"the search failed: {e}")
    if res.best is None or res.best.value > bv:
        return ProgramNest(pop, built, False, bv, bv, res.lower_bound, bool(res.lower_bound and bv <= res.lower_bound),
                           res.strategy, why="the search found no better nest than the built one"
                           + (" within its time limit" if res.timed_out else ""))
    return ProgramNest(pop, res.best.mapping, True, res.best.value, bv, res.lower_bound, res.proven_optimal,
                       res.strategy)
