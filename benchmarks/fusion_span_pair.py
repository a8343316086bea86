"""Two consecutive residual blocks of a model: one group spanning both (the first add's result kept on chip
for the second block and the second add) against the two blocks as two groups, at the same tile and halo
mode, each costed by the fusion model (every treatment of its joins the search offers, the best EDP kept)
and run by the simulator.

    python benchmarks/fusion_span_pair.py STAGE TILE_ROWS TILE_COLS MODE WEIGHTS_RESIDENT [MODEL [ARCH]]
    e.g. python benchmarks/fusion_span_pair.py layer1 28 28 fully-cached 1
         python benchmarks/fusion_span_pair.py features.5 14 14 fully-cached 1 mobilenetv2 tpu_like

STAGE: the prefix of the first block's nodes (ResNet-18: layer1 spans layer1.0 and layer1.1). Tile mappings:
the single-operator mapper at 1 s (wall) per tile, as ``benchmarks/fusion.py``. Prints CPU seconds.
"""
import sys
import time

from fusion import block_errors  # benchmarks/fusion.py, next to this file

from accelmap.arch.accelerator import adopt_precision
from accelmap.arch.presets import get_accelerator
from accelmap.fusion.chain import fusable_chains, span_residual_blocks
from accelmap.fusion.group_cost import InnerMappings, group_cost
from accelmap.fusion.model_fusion import mapper_search
from accelmap.fusion.search import inner_join_variants, join_variants
from accelmap.sim.fused import simulate_fused
from accelmap.workload.models import load_model
from accelmap.workload.models.bundled import bundled_model_path
from accelmap.workload.models.chains import model_chains

stage, tr, tc, mode, wres = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5] == "1"
model = sys.argv[6] if len(sys.argv) > 6 else "resnet18"
arch = get_accelerator(sys.argv[7] if len(sys.argv) > 7 else "tpu_like")
m = load_model(model)
ops = {n: adopt_precision(lm.operator, arch) for lm in m.layers for n in lm.nodes}   # as the mapper maps them
links = model_chains(bundled_model_path(model), set(ops))
chains = [c for ls in links for c in fusable_chains(ls, ops)]
spanned = next(c for c in span_residual_blocks(chains) if c.nodes[0].startswith(f"{stage}.") and c.inner_joins)
ends = sorted(spanned.joins_after())          # the operator each block's add follows
inner = InnerMappings(mapper_search("edp", 1.0))
c0 = time.process_time()


def run(label, first, last):
    """The group's best EDP over the treatments of its joins (the join ending it kept in the group)."""
    stages, macs = spanned.group(first, last)
    pol = (mode,) * len(stages)
    best, why = None, []
    for ij in inner_join_variants(spanned.group_inner_joins(first, last)):
        for j, sp in join_variants(spanned.group_join(first, last)):
            if j is None:
                continue
            g = group_cost(stages, macs, arch, tr, tc, pol, inner, wres, j, sp, ij)
            if isinstance(g, str):
                why.append(g)
            elif best is None or g.edp < best.edp:
                best = g
    if best is None:
        print(label, "no treatment of its joins runs at this tile:", "; ".join(dict.fromkeys(why)))
        return None
    g = best
    sim = simulate_fused(stages, macs, arch, tr, tc, pol, inner, wres, g.latency, join=g.join,
                         skip_policy=g.skip_policy or "re-read", inner_joins=g.inner_joins)
    print(f"{label}: off-chip {g.offchip_bits / 8e6:.3f} MB, fmaps {g.fmap_bits / 8e6:.3f} MB, energy "
          f"{g.energy / 1e6:.2f} uJ, latency {g.latency:,.0f} (simulated {sim.cycles:,.0f}, {sim.model_error:+.2%}), "
          f"off-chip equal {sim.offchip_bits == g.offchip_bits}, buffers {g.counts.buffer_total_bits / 8192:.0f} KiB, "
          f"joins inside {[(j.name, sp) for j, sp in g.inner_joins]}, end {g.join.name} {g.skip_policy}")
    for b in block_errors(g, stages, sim)[:3]:
        print(f"    block {b['stage']} {b['rows']}x{b['cols']} x{b['runs']}: model {b['model_cycles']:,.1f}, simulated "
              f"{b['sim_cycles']:,.1f} ({b['error']:+.2%})")
    return g


a = run("one group, two blocks", 0, ends[1])
b1 = run("block 1", 0, ends[0])
b2 = run("block 2", ends[0] + 1, ends[1])
if a and b1 and b2:
    print(f"two groups: off-chip {(b1.offchip_bits + b2.offchip_bits) / 8e6:.3f} MB, energy "
          f"{(b1.energy + b2.energy) / 1e6:.2f} uJ, latency {b1.latency + b2.latency:,.0f}")
print("cpu", time.process_time() - c0)
