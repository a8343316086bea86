"""Whole-network time: the simulator runs every accelerator layer's tile program; the host has a simple model.

Steps run one after another (the program's order; no overlap of host work and accelerator layers).
An accelerator step takes its layer's simulated cycles (each distinct layer is simulated once).
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


@dataclass
class NetworkTiming:
    steps: list[StepTime]
    sims: dict[str, SimResult] = field(default_factory=dict)    # layer name -> its simulation

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
        return (f"network latency: simulated {self.simulated_cycles:,.0f} cycles (accelerator {acc_sim:,.0f} + host "
                f"model {self.host_cycles:,.0f}); analytical {self.modeled_cycles:,.0f} (accelerator layers "
                f"{err:+.2%} against the simulator); energy {self.energy_pj:,.0f} pJ (cost model, accelerator only)")


def time_network(steps: list[Step], layer_of: dict[str, LayerMapping], g: NetGraph,
                 arch: Accelerator) -> NetworkTiming:
    out = NetworkTiming([])
    for s in steps:
        if s.placement == "accelerator":
            lm = layer_of[s.name]
            if lm.name not in out.sims:
                out.sims[lm.name] = simulate(lm.layer.operator, arch, lm.mapping_found, functional=False)
            sim = out.sims[lm.name]
            out.steps.append(StepTime(s.name, "accelerator", sim.cycles, lm.cost.latency, lm.cost.energy_total))
        else:
            c = host_elements(s, g) / HOST_ELEMENTS_PER_CYCLE
            out.steps.append(StepTime(s.name, "host", c, c, 0.0))
    return out
