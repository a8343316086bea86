"""Whole-network time: the simulator runs every accelerator layer's program; the host has a simple model.

Steps run one after another (the program's order; no overlap of host work and accelerator layers).
An accelerator step takes the simulated cycles of the program it runs (each distinct program is
simulated once): the mapper's tile program, or the intrinsic program written as an operator (its
outer loops plus the intrinsic's dimensions, each operand in its packed layout) with the mapper's
searched loop nest under the constraint that keeps the intrinsic's dimensions whole on the PE array
(``intrinsic_choice.ProgramNest``, with the mapper's certificate), or where the search finds none
better, the nest the embedding ranking builds (intrinsic dimensions on the PE array, outer loops moved
on chip while the tiles fit).

Host work is every host step plus, inside an accelerator step, what its C does on the host around the
layer call (``Program.host_work``: operand conversion, bias or requantization epilogue, a transposed
convolution's transpose and scatter; ``Program.packing``: an intrinsic program's operand packing and
unpacking, the weights included, as the C repeats it every inference). The host model (stated, not
measured) prices what that work reads and writes:

- time: (elements read + elements written) / ``HOST_ELEMENTS_PER_CYCLE`` cycles of the accelerator's
  clock: a host core streaming 4 elements a cycle, every transcendental function (exp, erf, tanh)
  costing as much as a plain element;
- energy: ``HOST_PJ_PER_BYTE`` per byte read or written plus ``HOST_PJ_PER_RESULT`` per element written,
  from Horowitz, "Computing's energy problem (and what we can do about it)", ISSCC 2014 (45 nm): a
  64-bit read of a 32 KB SRAM (an L1 cache) costs 20 pJ, so 2.5 pJ a byte, and a 32-bit float add
  0.9 pJ (one operation per result). DRAM traffic of the host is not priced (the values are taken
  to sit in the cache), nor instruction overhead, so this is a lower bound.

Accelerator energy is the cost model's (the simulator shares the model's access counts, so it times but
does not re-count). Host work and accelerator layers do not overlap.

A fused group (``--fuse``) is one accelerator step: simulated by ``sim.fused`` (its tile loop, each block's
tile program with the fusion model's mapping, the off-chip transfers around them), modeled by the fusion
model (``GroupCost``: energy, the load/compute/write-back pipeline's latency, off-chip bits); its host work is
its epilogues (every host op folded into it, on every computed element, recomputed halos included).
Off-chip traffic (bits the outermost level moves) is the cost model's per step: a layer's accesses of the
outermost level, a group's input fetched, weights and output written.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from accelmap.arch.accelerator import Accelerator
from accelmap.compile.fused_groups import FusedGroup
from accelmap.compile.graph import NetGraph
from accelmap.compile.host_ops import HostWork, host_work
from accelmap.compile.intrinsic_choice import ProgramNest
from accelmap.compile.partition import Step
from accelmap.compile.program import LayerCode
from accelmap.cost.model import CostResult, evaluate
from accelmap.embed.rank import costs, program_mapping
from accelmap.errors import AccelmapError
from accelmap.fusion.group_cost import offchip_bits
from accelmap.search.model_result import LayerMapping
from accelmap.sim.simulate import SimResult, simulate
from accelmap.workload.operator import Operator

HOST_ELEMENTS_PER_CYCLE = 4
HOST_PJ_PER_BYTE = 20.0 / 8      # Horowitz, ISSCC 2014, 45 nm: 64-bit read of a 32 KB SRAM, 20 pJ
HOST_PJ_PER_RESULT = 0.9         # same source: a 32-bit float add
HOST_MODEL = (f"host model: (elements read + written) / {HOST_ELEMENTS_PER_CYCLE} cycles of the accelerator clock; "
              f"{HOST_PJ_PER_BYTE:g} pJ per byte read or written (a 64-bit read of a 32 KB SRAM, 20 pJ) and "
              f"{HOST_PJ_PER_RESULT:g} pJ per element written (a 32-bit float add), the 45 nm figures of Horowitz, "
              f"\"Computing's energy problem\", ISSCC 2014; host DRAM traffic and instruction overhead not priced")


def host_cycles(w: HostWork) -> float:
    return (w.read + w.written) / HOST_ELEMENTS_PER_CYCLE


def host_energy_pj(w: HostWork) -> float:
    return w.bytes * HOST_PJ_PER_BYTE + w.written * HOST_PJ_PER_RESULT


@dataclass
class StepTime:
    name: str
    placement: str
    simulated: float        # cycles: simulator (accelerator) or host model
    modeled: float          # cycles: analytical model (accelerator) or host model
    energy_pj: float        # analytical (accelerator steps), 0 for host steps
    runs: str = "host"      # host | tile program | intrinsic program
    sim_key: str = ""       # the program's key in NetworkTiming.sims and .costs
    host: float = 0.0       # host-model cycles of the step's host work (a host step: all of it, = simulated)
    host_energy_pj: float = 0.0
    packing: float = 0.0    # of ``host``: an intrinsic program's operand packing and unpacking
    offchip_bits: int = 0   # bits the accelerator's outermost level moves (cost model); 0 for host steps

    @property
    def total(self) -> float:
        """Cycles of the step: the accelerator's (simulated) plus its host work, or the host step's."""
        return self.simulated + self.host if self.placement == "accelerator" else self.simulated


@dataclass
class NetworkTiming:
    steps: list[StepTime]
    sims: dict[str, SimResult] = field(default_factory=dict)    # program key -> its simulation
    # program key -> the cost model's result of what runs (the layer's mapping, or the intrinsic program's nest)
    costs: dict[str, CostResult] = field(default_factory=dict)
    transform_bytes: dict[str, int] = field(default_factory=dict)   # intrinsic program key -> runtime packing bytes
    operators: dict[str, Operator] = field(default_factory=dict)    # program key -> the operator its cost is of

    @staticmethod
    def key(layer: str, code: LayerCode | None) -> str:
        """A tile program is keyed by its layer, an intrinsic program by ``layer@intrinsic``."""
        return f"{layer}@{code.intrinsic.intrinsic}" if code is not None and code.intrinsic else layer

    @property
    def offchip_bits(self) -> int:
        return sum(s.offchip_bits for s in self.steps)

    @property
    def accelerator_simulated(self) -> float:
        return sum(s.simulated for s in self.steps if s.placement == "accelerator")

    @property
    def accelerator_modeled(self) -> float:
        return sum(s.modeled for s in self.steps if s.placement == "accelerator")

    @property
    def host_cycles(self) -> float:
        """Host-model cycles of all host work: host steps and the host work inside accelerator steps."""
        return sum(s.host for s in self.steps)

    @property
    def packing_cycles(self) -> float:
        return sum(s.packing for s in self.steps)

    @property
    def simulated_cycles(self) -> float:
        return self.accelerator_simulated + self.host_cycles

    @property
    def modeled_cycles(self) -> float:
        return self.accelerator_modeled + self.host_cycles

    @property
    def accelerator_energy_pj(self) -> float:
        return sum(s.energy_pj for s in self.steps)

    @property
    def host_energy_pj(self) -> float:
        return sum(s.host_energy_pj for s in self.steps)

    @property
    def energy_pj(self) -> float:
        return self.accelerator_energy_pj + self.host_energy_pj

    def summary(self) -> str:
        acc_sim, acc_mod = self.accelerator_simulated, self.accelerator_modeled
        err = (acc_mod - acc_sim) / acc_sim if acc_sim else 0.0
        text = (f"network latency: simulated {self.simulated_cycles:,.0f} cycles (accelerator {acc_sim:,.0f} + host "
                f"model {self.host_cycles:,.0f}); analytical {self.modeled_cycles:,.0f} (accelerator layers "
                f"{err:+.2%} against the simulator); energy {self.energy_pj:,.0f} pJ (accelerator "
                f"{self.accelerator_energy_pj:,.0f} by the cost model + host {self.host_energy_pj:,.0f} by the host "
                f"model); accelerator off-chip traffic {self.offchip_bits / 8e6:,.3f} MB by the cost model"
                f"\n  {HOST_MODEL}")
        intr = [s for s in self.steps if s.runs == "intrinsic program"]
        if intr:
            text += (f"\n  {len(intr)} of {sum(s.placement == 'accelerator' for s in self.steps)} accelerator steps run "
                     f"intrinsic programs: their cycles and energy are those of the intrinsic program's loop nest "
                     f"(searched under the intrinsic's shape, or built by the embedding ranking); their operand packing and unpacking on "
                     f"the host (weights included, every inference; {sum(self.transform_bytes[s.sim_key] for s in intr):,} "
                     f"bytes of layout change by the embedding's count) takes {self.packing_cycles:,.0f} host-model "
                     f"cycles of the host's {self.host_cycles:,.0f}")
        return text


def time_network(steps: list[Step], layer_of: dict[str, LayerMapping], g: NetGraph,
                 arch: Accelerator, codes: dict[str, LayerCode] | None = None,
                 host_work_of: dict[str, HostWork] | None = None,
                 packing_of: dict[str, HostWork] | None = None,
                 groups: list[FusedGroup] | None = None,
                 nests: dict[str, ProgramNest] | None = None) -> NetworkTiming:
    """``nests``: the loop nest that times each intrinsic program (by program key; ``intrinsic_choice.program_nest``),
    default the embedding ranking's built nest.
``groups``: fused groups, each timed as one step where it runs (``FusedGroup.sim`` must be set); the
    steps they cover are not timed alone.
``codes``: the program each accelerator step runs (step name -> its code); a step without one is timed
    as its layer's tile program. ``host_work_of`` / ``packing_of``: the host work inside each accelerator
    step (``Program.host_work`` / ``Program.packing``); a step without one has none."""
    codes = codes or {}
    host_work_of, packing_of = host_work_of or {}, packing_of or {}
    out = NetworkTiming([])
    group_of = {i: grp for grp in groups or [] for i in grp.members}
    top = arch.levels[0].name
    for i, s in enumerate(steps):
        grp = group_of.get(i)
        if grp is not None:
            if i == grp.at:
                if grp.sim is None:
                    raise AccelmapError(f"fused group {grp.label} has not been simulated")
                gc = grp.cost
                out.steps.append(StepTime(f"fused {grp.index}", "accelerator", grp.sim.cycles, gc.latency, gc.energy,
                                          "fused group", grp.name, host_cycles(grp.host_work),
                                          host_energy_pj(grp.host_work), offchip_bits=gc.offchip_bits))
            continue
        if s.placement == "accelerator":
            lm = layer_of[s.name]
            code = codes.get(s.name)
            key = NetworkTiming.key(lm.name, code)
            if key not in out.sims:
                if code is not None and code.intrinsic is not None:
                    prog = code.intrinsic.program
                    assert prog is not None
                    nest = (nests or {}).get(key)
                    pm = (nest.operator, nest.mapping) if nest is not None else program_mapping(prog, arch)
                    if pm is None:
                        raise AccelmapError(f"layer {lm.name}: the intrinsic program has no loop nest on {arch.name}")
                    out.sims[key] = simulate(pm[0], arch, pm[1], functional=False)
                    out.costs[key] = evaluate(pm[0], arch, pm[1])
                    out.transform_bytes[key] = costs(prog).transform_bytes
                    out.operators[key] = pm[0]
                else:
                    out.sims[key] = simulate(lm.layer.operator, arch, lm.mapping_found, functional=False)
                    out.costs[key] = lm.cost
                    out.operators[key] = lm.layer.operator
            sim, cost = out.sims[key], out.costs[key]
            runs = "intrinsic program" if code is not None and code.intrinsic else "tile program"
            w, pk = host_work_of.get(s.name, HostWork()), packing_of.get(s.name, HostWork())
            out.steps.append(StepTime(s.name, "accelerator", sim.cycles, cost.latency, cost.energy_total, runs, key,
                                      host_cycles(w) + host_cycles(pk), host_energy_pj(w) + host_energy_pj(pk),
                                      host_cycles(pk), offchip_bits(out.operators[key], cost, top)))
        else:
            w = host_work(s, g)
            c = host_cycles(w)
            out.steps.append(StepTime(s.name, "host", c, c, 0.0, host=c, host_energy_pj=host_energy_pj(w)))
    return out
