"""What computes: memory levels, fan-outs, compute unit; YAML schema and presets."""

from accelmap.arch.accelerator import Accelerator, Compute, Fanout, FanoutAxis, Level
from accelmap.arch.presets import get_accelerator, preset_names
from accelmap.arch.schema import accelerator_from_dict, load_accelerator

__all__ = ["Accelerator", "Compute", "Fanout", "FanoutAxis", "Level", "get_accelerator",
           "preset_names", "accelerator_from_dict", "load_accelerator"]
