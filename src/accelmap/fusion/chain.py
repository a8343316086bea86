"""A model's chains as fused-stage lists: operators at the precision they are mapped at, pooling
windows between them, split wherever two neighbours cannot share a tile loop."""

from __future__ import annotations

from dataclasses import dataclass, replace

from accelmap.errors import SpecError
from accelmap.fusion.geometry import Stage
from accelmap.fusion.stages import MacStage, mac_stage, pool_stage
from accelmap.workload.models.chains import ChainLink
from accelmap.workload.operator import Operator


@dataclass(frozen=True)
class FusableChain:
    """Consecutive operators (``ops``, by node name) and every stage of the tile loop between them."""

    nodes: tuple[str, ...]
    stages: tuple[Stage, ...]
    mac_at: tuple[int, ...]                  # stage index of each operator
    mac_stages: tuple[MacStage, ...]

    def group(self, first: int, last: int) -> tuple[tuple[Stage, ...], dict[int, MacStage]]:
        """The stages of operators ``first..last`` (inclusive) and their operators by stage index."""
        a, b = self.mac_at[first], self.mac_at[last]
        return self.stages[a:b + 1], {self.mac_at[k] - a: self.mac_stages[k] for k in range(first, last + 1)}


def fusable_chains(links: tuple[ChainLink, ...], operators: dict[str, Operator]) -> list[FusableChain]:
    """``links`` cut into the runs whose neighbours can share a tile loop (two operators or more)."""
    out: list[FusableChain] = []
    nodes: list[str] = []
    stages: list[Stage] = []
    mac_at: list[int] = []
    macs: list[MacStage] = []

    def close() -> None:
        if len(nodes) >= 2:
            out.append(FusableChain(tuple(nodes), tuple(stages), tuple(mac_at), tuple(macs)))
        nodes.clear()
        stages.clear()
        mac_at.clear()
        macs.clear()

    for link in links:
        # A layer stands for all its nodes under its first node's name; each stage is named by its own node.
        op = replace(operators[link.node], name=link.node)
        try:
            ms = mac_stage(op)
        except SpecError:
            close()
            continue
        if link.row_local and op.kind not in ("matmul", "batched_matmul", "dense"):
            close()                 # a normalization over the last axis of an image is over its columns
        pending: list[Stage] = []
        ok = bool(stages)
        for w in link.windows:
            prev = pending[-1] if pending else stages[-1] if stages else None
            if prev is None:
                ok = False
                break
            pending.append(pool_stage(w.name, channels=prev.out_depth, in_rows=prev.out_rows, in_cols=prev.out_cols,
                                      kernel=w.kernel, stride=w.stride, pads=w.pads, bits=prev.out_bits))
        if ok:
            prev = pending[-1] if pending else stages[-1]
            s = ms.stage
            ok = (prev.out_rows, prev.out_cols, prev.out_depth) == (s.in_rows, s.in_cols, s.in_depth) and all(
                p.rows.stride <= p.rows.span and p.cols.stride <= p.cols.span for p in pending)
        if not ok:
            close()
            pending = []
        stages.extend(pending)
        mac_at.append(len(stages))
        stages.append(ms.stage)
        macs.append(ms)
        nodes.append(link.node)
    close()
    return out
