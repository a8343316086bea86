"""How many padded unrollings the exact search must list past rule E2's budget, with rules B38 and B39 of docs/mapper.md.

For every layer of a model on one preset whose every-padded space passes ``exact.EVERY_PADDED_ROWS``, with a
``mapper_scaling.py`` run's result (EDP) as the incumbent: the class rows of rule B38 (``padded_classes.PaddedClasses``),
the CPU seconds of building and bounding them, the rows where rule S6 is left out (a member may pad a dim past its
size), the classes whose bound is below the incumbent (rule B39 opens only those) and how many members they hold at
most, against the every-padded candidates (``enumerate_spatial(pad="every")``, counted here in full).

    python benchmarks/padded_classes.py --arch edge_tpu_like --results benchmarks/results/FILE.json
"""

from __future__ import annotations

import argparse
import time

from scaling_incumbents import parse_with_incumbents


def main() -> None:
    from accelmap.arch.accelerator import adopt_precision
    from accelmap.arch.presets import get_accelerator
    from accelmap.search.bounds import chain_options
    from accelmap.search.exact import EVERY_PADDED_ROWS
    from accelmap.search.padded_classes import PaddedClasses
    from accelmap.search.space import Constraints, keep_options
    from accelmap.search.spatial import enumerate_spatial
    from accelmap.workload.models import load_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    a, incumbent = parse_with_incumbents(ap)
    arch = get_accelerator(a.arch)
    cons = Constraints()
    print(f"{'layer':<22} {'candidates':>10} {'classes':>8} {'loose':>7} {'CPU s':>6} {'below':>7} {'members':>8}")
    for layer in load_model(a.model).layers:
        if incumbent.get(layer.name) is None or (a.layers and layer.name not in a.layers):
            continue
        op = adopt_precision(layer.operator, arch)
        candidates = len(enumerate_spatial(op, arch, cons, max_dims=len(op.dim_names), pad="every").pes)
        if candidates <= EVERY_PADDED_ROWS:
            continue
        chains = chain_options(op, keep_options(op, arch, cons))
        t = time.process_time()
        classes = PaddedClasses(op, arch, cons, chains, "edp")
        cpu = time.process_time() - t
        below = classes.value < incumbent[layer.name]
        print(f"{layer.name:<22} {candidates:>10} {len(classes):>8} {int(classes.loose.sum()):>7} {cpu:>6.2f} "
              f"{int(below.sum()):>7} {int(classes.counts[below].sum()):>8}", flush=True)


if __name__ == "__main__":
    main()
