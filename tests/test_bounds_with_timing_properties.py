"""The mapper's lower bounds stay below the cost on accelerators that use the properties which can
lower it: finished outputs at fewer bits, double buffering decided per mapping, registers written
at the clock edge, tiles kept for the whole run streamed in and out during compute."""

import random
from dataclasses import replace

from accelmap.arch import accelerator_from_dict, get_accelerator
from accelmap.arch.accelerator import adopt_precision
from accelmap.cost.model import evaluate
from accelmap.errors import MappingError
from accelmap.mapping.sampling import random_mapping
from accelmap.search.bounds import BoundContext, chain_options
from accelmap.search.space import Constraints, keep_options
from accelmap.search.spatial import spatial_lower_bound

from strategies import random_operator

PRESETS = ["eyeriss_like", "tpu_like", "vta_like", "simba_like", "diana_like", "ascend_like", "edge_tpu_like"]

# ZigZag's edge_tpu_like in small: an output accumulator per array column, shared along the reducing axis A
COLUMNS = accelerator_from_dict({"name": "columns", "compute": {"mac_energy": "1 pJ"}, "levels": [
    {"name": "DRAM", "holds": ["I", "W", "O"], "capacity": "unbounded", "width": "64 bit", "read_energy": "700 pJ",
     "read_bandwidth": "64 bit/cycle"},
    {"name": "SRAM", "holds": ["I", "W", "O"], "capacity": "16 KiB", "width": "256 bit", "read_energy": "40 pJ",
     "read_bandwidth": "256 bit/cycle", "double_buffered": "when_fits",
     "fanout": {"axes": [{"name": "A", "size": 4}, {"name": "B", "size": 4}]}},
    {"name": "RF", "holds": ["W"], "capacity": "8 bit", "width": "8 bit", "read_energy": "0.01 pJ",
     "written_at_clock_edge": True},
    {"name": "ACC", "holds": ["O"], "capacity": "32 bit", "width": "32 bit", "read_energy": "0.02 pJ",
     "written_at_clock_edge": True, "shared_along": ["A"]}]})


def _variant(arch, stream: bool, refill: bool = False):
    """Finished outputs at 8 bits; every double buffer decided per mapping; single-word levels
    written at the clock edge; with ``stream``, every level streams a tile kept for the whole run;
    with ``refill``, a level whose tiles do not fit twice refills while a tile read once is read."""
    levels = []
    for lv in arch.levels:
        lv = replace(lv, stream_single_tile=stream)
        if lv.double_buffered:
            lv = replace(lv, double_buffered=False, double_buffered_when_fits=True)
        elif lv.capacity_bits is not None and lv.capacity_bits <= lv.width_bits:
            lv = replace(lv, written_at_clock_edge=True)
        if lv.double_buffered_when_fits:
            lv = replace(lv, refill_while_read=refill)
        levels.append(lv)
    return replace(arch, levels=tuple(levels), compute=replace(arch.compute, final_output_bits=8))


def test_lower_bounds_hold_with_the_timing_and_precision_properties():
    rng = random.Random(5)
    checked = 0
    for n in range(140):
        base = COLUMNS if n % (len(PRESETS) + 1) == len(PRESETS) else get_accelerator(PRESETS[n % len(PRESETS)])
        arch = _variant(base, stream=n % 3 == 0, refill=n % 4 < 2)
        op = adopt_precision(random_operator(rng), arch)
        try:
            m = random_mapping(op, arch, rng, check_fit=True, tries=30, imperfect=bool(n % 2))
        except MappingError:
            continue
        res = evaluate(op, arch, m)
        ctx = BoundContext(op, arch, m.keep)
        for level in range(len(arch.levels)) if n % 2 == 0 else ():      # the partial bound: perfect nests
            fixed = tuple(l for l in m.loops if l.level >= level)
            rem = dict(op.sizes)
            for l in fixed:
                rem[l.dim] //= l.bound
            e_lb, l_lb = ctx.lower_bound(fixed, level, rem)
            assert e_lb <= res.energy_total * (1 + 1e-12), (arch.name, level, m)
            assert l_lb <= res.latency * (1 + 1e-12), (arch.name, level, m)
        spatial = tuple(l for l in m.loops if l.spatial)
        every = chain_options(op, keep_options(op, arch, Constraints()))
        e_lb, l_lb = spatial_lower_bound(op, arch, spatial, every)
        assert e_lb <= res.energy_total * (1 + 1e-12) and l_lb <= res.latency * (1 + 1e-12), (arch.name, m)
        checked += 1
    assert checked > 60
