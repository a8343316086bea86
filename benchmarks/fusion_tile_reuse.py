"""One MobileNetV2 chain spanning residual blocks, its fusion search with tile mappings searched per store room
or reused across rooms where they fit (``InnerMappings(reuse_across_room=True)``): tile searches, CPU seconds
and the best plan's EDP.

    python benchmarks/fusion_tile_reuse.py [--chain features.5.expand] [--tile-time-limit 0.2] [--reuse]

Each operator alone is mapped by the heuristic at 1 CPU s, each tile at ``--tile-time-limit`` CPU seconds (the
limits count CPU seconds, so the mappings do not depend on the machine's load).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

from accelmap.arch.presets import get_accelerator
from accelmap.fusion.chain import fusable_chains, span_residual_blocks
from accelmap.fusion.group_cost import InnerMappings, fmap_bits, offchip_bits
from accelmap.fusion.model_fusion import TILE_HEURISTIC, mapper_search
from accelmap.fusion.search import DEFAULT_FUSION, SearchLog, Single, chain_front, joins_alone
from accelmap.search.mapper import map_operator
from accelmap.workload.models.bundled import bundled_model_path, load_model
from accelmap.workload.models.chains import model_chains


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--chain", default="features.5.expand", help="the spanning chain's first operator")
    ap.add_argument("--arch", default="tpu_like")
    ap.add_argument("--tile-time-limit", type=float, default=0.2)
    ap.add_argument("--reuse", action="store_true", help="reuse tile mappings across store rooms where they fit")
    a = ap.parse_args()
    arch = get_accelerator(a.arch)
    m = load_model("mobilenetv2")
    ops = {n: l.operator for l in m.layers for n in l.nodes}
    links = model_chains(bundled_model_path("mobilenetv2"), set(ops))
    chains = span_residual_blocks([c for ls in links for c in fusable_chains(ls, ops)])
    (chain,) = [c for c in chains if c.nodes[0] == a.chain]
    cfg = replace(TILE_HEURISTIC, cpu_clock=True)
    top = arch.levels[0].name
    singles = {}
    for n in chain.nodes:
        op = replace(ops[n], name=n)
        r = map_operator(op, arch, "edp", strategy="heuristic", time_limit=1.0, heuristic_config=cfg,
                         lower_bound=False).best
        assert r is not None, f"{n} not mapped"
        singles[n] = Single(n, r.result.energy_total, r.result.latency, offchip_bits(op, r.result, top),
                            fmap_bits(op, r.result, top))
    for j in joins_alone(chain, arch).values():
        singles[j.node] = j
    inner = InnerMappings(mapper_search("edp", a.tile_time_limit, cfg), reuse_across_room=a.reuse)
    c0 = time.process_time()
    st = SearchLog()
    front = chain_front(chain, singles, arch, inner, DEFAULT_FUSION, st)
    cpu = time.process_time() - c0
    best = min(front, key=lambda p: p.energy * p.latency)
    alone = sum(s.energy for s in singles.values()) * sum(s.latency for s in singles.values())
    print(f"{a.chain} ({len(chain.nodes)} operators) on {a.arch}, reuse={a.reuse}: {st.groups_tried} groups, "
          f"{st.candidates_costed} candidates costed, {inner.searched} tile searches, {inner.reused} reused, "
          f"{cpu:.1f} CPU s; best EDP {best.energy * best.latency:.4e} (layer by layer {alone:.4e})")


if __name__ == "__main__":
    main()
