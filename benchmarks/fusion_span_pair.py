"""ResNet-18's two residual blocks of one stage on tpu_like: one group spanning both (the first add's
result kept on chip for the second block and the second add) against the two blocks as two groups, at
the same tile and halo mode, each costed by the fusion model and run by the simulator.

    python benchmarks/fusion_span_pair.py STAGE TILE_ROWS TILE_COLS MODE WEIGHTS_RESIDENT
    e.g. python benchmarks/fusion_span_pair.py layer1 28 28 fully-cached 1

Tile mappings: the single-operator mapper at 1 s (wall) per tile, as ``benchmarks/fusion.py``.
"""
import sys
import time

from accelmap.arch.presets import get_accelerator
from accelmap.fusion.chain import fusable_chains, span_residual_blocks
from accelmap.fusion.group_cost import InnerMappings, group_cost
from accelmap.fusion.model_fusion import mapper_search
from accelmap.sim.fused import simulate_fused
from accelmap.workload.models import load_model
from accelmap.workload.models.bundled import bundled_model_path
from accelmap.workload.models.chains import model_chains

stage, tr, tc, mode, wres = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5] == "1"
arch = get_accelerator("tpu_like")
m = load_model("resnet18")
ops = {n: lm.operator for lm in m.layers for n in lm.nodes}
links = model_chains(bundled_model_path("resnet18"), set(ops))
chains = [c for ls in links for c in fusable_chains(ls, ops)]
spanned = next(c for c in span_residual_blocks(chains) if c.nodes[0] == f"{stage}.0.conv1")
inner = InnerMappings(mapper_search("edp", 1.0))
c0 = time.process_time()
rows = []
def run(label, chain, first, last, skip_end):
    stages, macs = chain.group(first, last)
    join = chain.group_join(first, last)
    ij = tuple((j, "kept" if j.skip is not None else "re-read") for j in chain.group_inner_joins(first, last))
    g = group_cost(stages, macs, arch, tr, tc, (mode,) * len(stages), inner, wres, join, skip_end if join.skip is not None else "re-read", ij)
    if isinstance(g, str):
        print(label, g); return None
    sim = simulate_fused(stages, macs, arch, tr, tc, (mode,) * len(stages), inner, wres, g.latency, join=join,
                         skip_policy=skip_end if join.skip is not None else "re-read", inner_joins=ij)
    print(f"{label}: off-chip {g.offchip_bits/8e6:.3f} MB, fmaps {g.fmap_bits/8e6:.3f} MB, energy {g.energy/1e6:.2f} uJ, "
          f"latency {g.latency:,.0f} (simulated {sim.cycles:,.0f}, {sim.model_error:+.2%}), off-chip equal {sim.offchip_bits == g.offchip_bits}, "
          f"buffers {g.counts.buffer_total_bits/8192:.0f} KiB, joins inside {[(j.name, sp) for j, sp in g.inner_joins]}, end {g.join.name} {g.skip_policy}")
    return g
a = run("one group, two blocks", spanned, 0, 3, "kept")
b1 = run("block 1", spanned, 0, 1, "kept")
b2 = run("block 2", next(c for c in chains if c.nodes[0] == f"{stage}.1.conv1"), 0, 1, "kept")
if a and b1 and b2:
    print(f"two groups: off-chip {(b1.offchip_bits + b2.offchip_bits)/8e6:.3f} MB, energy {(b1.energy + b2.energy)/1e6:.2f} uJ, latency {b1.latency + b2.latency:,.0f}")
print("cpu", time.process_time() - c0)
