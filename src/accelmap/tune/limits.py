"""Program limits of a target beyond buffer capacity: what makes a tile program impossible to build.

VTA's limits come from its hardware configuration (``vta_config.json`` and ``hw_spec.h`` in Apache
TVM's VTA): a GEMM instruction iterates two hardware loops (``VTA_LOOP_ITER_WIDTH`` = 14 bits, so an
extent of at most 16,383 each) over a micro-op kernel held in the micro-op buffer
(``LOG_UOP_BUFF_SIZE`` = 15: 32 KiB of 32-bit micro-ops, 8,192 entries). The compute of one tile is
that instruction: the two outermost temporal loops of the tile level are its hardware loops, and
every iteration of the loops inside them is one micro-op. A tile whose inner loops need more
micro-ops than the buffer holds, or a hardware loop longer than its counter, cannot be built, which
is what the dissertation counts as an invalid configuration (instruction-buffer overflow).
Accumulator capacity is the accelerator's output partition (checked with every other capacity).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from accelmap.arch.accelerator import Accelerator
from accelmap.mapping.loopnest import Mapping
from accelmap.workload.operator import Operator

VTA_UOP_BUFFER_ENTRIES = 2 ** 15 // 4
VTA_LOOP_EXTENT_MAX = 2 ** 14 - 1
VTA_HARDWARE_LOOPS = 2


@dataclass(frozen=True)
class ProgramLimits:
    uop_entries: int | None = None        # micro-ops one tile's compute may use; None: no limit
    loop_extent_max: int | None = None    # largest extent of a hardware loop; None: no limit
    hardware_loops: int = 0               # outermost tile-level loops run by the instruction itself

    def check(self, op: Operator, mapping: Mapping, tile_level: int) -> str | None:
        """Why the tile program of ``mapping`` cannot be built, or None."""
        temporal = [lp for lp in mapping.loops_at(tile_level) if not lp.spatial]
        hw, body = temporal[:self.hardware_loops], temporal[self.hardware_loops:]
        if self.loop_extent_max is not None:
            for lp in hw:
                if lp.bound > self.loop_extent_max:
                    return (f"hardware loop over {lp.dim} has extent {lp.bound:,}; "
                            f"the loop counter allows {self.loop_extent_max:,}")
        if self.uop_entries is not None:
            uops = math.prod(lp.bound for lp in body)
            if uops > self.uop_entries:
                return f"the tile's compute needs {uops:,} micro-ops; the micro-op buffer holds {self.uop_entries:,}"
        return None


NO_LIMITS = ProgramLimits()
VTA_LIMITS = ProgramLimits(VTA_UOP_BUFFER_ENTRIES, VTA_LOOP_EXTENT_MAX, VTA_HARDWARE_LOOPS)


def limits_for(arch: Accelerator) -> ProgramLimits:
    """The VTA presets' limits; none known for other accelerators (capacity alone decides)."""
    return VTA_LIMITS if arch.name.startswith("vta") else NO_LIMITS
