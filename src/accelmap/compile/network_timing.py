"""Whole-network time: the simulator runs every accelerator layer's program; the host has a simple model.

Steps run one after another (the program's order; no overlap of host work and accelerator layers).
An accelerator step takes the simulated cycles of the program it runs (each distinct program is
simulated once): the mapper's tile program, or the intrinsic program written as an operator (its
outer loops plus the intrinsic's dimensions, each operand in its packed layout) with the loop nest
the embedding ranking builds for it (intrinsic dimensions on the PE array, outer loops moved on chip
while the tiles fit; not a searched mapping). The intrinsic program's operand packing (the layout
rewrites of the data and the unpacking of the result, done by the host in the emitted C) is not on
that timeline; its bytes are reported beside it.
A host step takes (elements it reads + elements it writes) / ``HOST_ELEMENTS_PER_CYCLE`` cycles of the
accelerator's clock: a host core streaming 4 elements a cycle, with every transcendental function
(exp, erf, tanh) costing as much as a plain element. Energy is the cost model's for the accelerator
layers (the simulator shares the model's access counts, so it times but does not re-count); host
energy is not modeled.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from accelmap.arch.accelerator import Accelerator
from accelmap.compile.graph import NetGraph
from accelmap.compile.host_ops import host_elements
from accelmap.compile.partition import Step
from accelmap.compile.program import LayerCode
from accelmap.cost.model import CostResult, evaluate
from accelmap.embed.rank import costs, program_mapping
from accelmap.errors import AccelmapError
from accelmap.search.model_result import LayerMapping
from accelmap.sim.simulate import SimResult, simulate

HOST_ELEMENTS_PER_CYCLE = 4


@dataclass
class StepTime:
    name: str
    placement: str
    simulated: float        # cycles: simulator (accelerator) or host model
    modeled: float          # cycles: analytical model (accelerator) or host model
    energy_pj: float        # analytical (accelerator steps), 0 for host steps
    runs: str = "host"      # host | tile program | intrinsic program
    sim_key: str = ""       # the program's key in NetworkTiming.sims and .costs


@dataclass
class NetworkTiming:
    steps: list[StepTime]
    sims: dict[str, SimResult] = field(default_factory=dict)    # program key -> its simulation
    # program key -> the cost model's result of what runs (the layer's mapping, or the intrinsic program's nest)
    costs: dict[str, CostResult] = field(default_factory=dict)
    transform_bytes: dict[str, int] = field(default_factory=dict)   # intrinsic program key -> runtime packing bytes

    @staticmethod
    def key(layer: str, code: LayerCode | None) -> str:
        """A tile program is keyed by its layer, an intrinsic program by ``layer@intrinsic``."""
        return f"{layer}@{code.intrinsic.intrinsic}" if code is not None and code.intrinsic else layer

    @property
    def simulated_cycles(self) -> float:
        return sum(s.simulated for s in self.steps)

    @property
    def modeled_cycles(self) -> float:
        return sum(s.modeled for s in self.steps)

    @property
    def host_cycles(self) -> float:
        return sum(s.simulated for s in self.steps if s.placement == "host")

    @property
    def energy_pj(self) -> float:
        return sum(s.energy_pj for s in self.steps)

    def summary(self) -> str:
        acc_sim = self.simulated_cycles - self.host_cycles
        acc_mod = self.modeled_cycles - self.host_cycles
        err = (acc_mod - acc_sim) / acc_sim if acc_sim else 0.0
        text = (f"network latency: simulated {self.simulated_cycles:,.0f} cycles (accelerator {acc_sim:,.0f} + host "
                f"model {self.host_cycles:,.0f}); analytical {self.modeled_cycles:,.0f} (accelerator layers "
                f"{err:+.2%} against the simulator); energy {self.energy_pj:,.0f} pJ (cost model, accelerator only)")
        intr = [s for s in self.steps if s.runs == "intrinsic program"]
        if intr:
            text += (f"\n  {len(intr)} of {sum(s.placement == 'accelerator' for s in self.steps)} accelerator steps run "
                     f"intrinsic programs: their cycles and energy are those of the intrinsic program's loop nest "
                     f"built by the embedding ranking (not a searched mapping); their operand packing and unpacking on "
                     f"the host ({sum(self.transform_bytes[s.sim_key] for s in intr):,} bytes read and written per "
                     f"inference) is not timed")
        return text


def time_network(steps: list[Step], layer_of: dict[str, LayerMapping], g: NetGraph,
                 arch: Accelerator, codes: dict[str, LayerCode] | None = None) -> NetworkTiming:
    """``codes``: the program each accelerator step runs (step name -> its code); a step without one is timed
    as its layer's tile program."""
    codes = codes or {}
    out = NetworkTiming([])
    for s in steps:
        if s.placement == "accelerator":
            lm = layer_of[s.name]
            code = codes.get(s.name)
            key = NetworkTiming.key(lm.name, code)
            if key not in out.sims:
                if code is not None and code.intrinsic is not None:
                    prog = code.intrinsic.program
                    assert prog is not None
                    pm = program_mapping(prog, arch)
                    if pm is None:
                        raise AccelmapError(f"layer {lm.name}: the intrinsic program has no loop nest on {arch.name}")
                    out.sims[key] = simulate(pm[0], arch, pm[1], functional=False)
                    out.costs[key] = evaluate(pm[0], arch, pm[1])
                    out.transform_bytes[key] = costs(prog).transform_bytes
                else:
                    out.sims[key] = simulate(lm.layer.operator, arch, lm.mapping_found, functional=False)
                    out.costs[key] = lm.cost
            sim, cost = out.sims[key], out.costs[key]
            runs = "intrinsic program" if code is not None and code.intrinsic else "tile program"
            out.steps.append(StepTime(s.name, "accelerator", sim.cycles, cost.latency, cost.energy_total, runs, key))
        else:
            c = host_elements(s, g) / HOST_ELEMENTS_PER_CYCLE
            out.steps.append(StepTime(s.name, "host", c, c, 0.0))
    return out
