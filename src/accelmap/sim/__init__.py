"""The accelerator as a machine: timing simulation of a mapping's tile program, plus its data."""

from accelmap.sim.engine import Timing, run_timing
from accelmap.sim.program import TileProgram, build_program
from accelmap.sim.simulate import SimResult, simulate
from accelmap.sim.timeline import plot_timeline

__all__ = ["Timing", "run_timing", "TileProgram", "build_program", "SimResult", "simulate", "plot_timeline"]
