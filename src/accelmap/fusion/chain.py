"""A model's chains as fused-stage lists: operators at the precision they are mapped at, pooling
windows between them, split wherever two neighbours cannot share a tile loop."""

from __future__ import annotations

from dataclasses import dataclass, replace

from accelmap.errors import SpecError
from accelmap.fusion.geometry import Join, Stage
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
    join: Join | None = None                 # a residual add after the last operator; skip: a stage index

    def group(self, first: int, last: int) -> tuple[tuple[Stage, ...], dict[int, MacStage]]:
        """The stages of operators ``first..last`` (inclusive) and their operators by stage index."""
        a, b = self.mac_at[first], self.mac_at[last]
        return self.stages[a:b + 1], {self.mac_at[k] - a: self.mac_stages[k] for k in range(first, last + 1)}

    def group_join(self, first: int, last: int) -> Join | None:
        """The chain's join as the group ``first..last`` sees it: only a group ending the chain has it;
        its skip is a tensor of the group, or (before the group's first stage) from outside."""
        if self.join is None or last != len(self.nodes) - 1:
            return None
        a = self.mac_at[first]
        skip = self.join.skip
        return replace(self.join, skip=None if skip is None or skip < a else skip - a)

    @property
    def join_bits(self) -> int:
        """Bits of the join's skip, all of it (what the add reads)."""
        last = self.stages[-1]
        return last.out_rows * last.out_cols * last.out_depth * self.join.bits if self.join else 0


def fusable_chains(links: tuple[ChainLink, ...], operators: dict[str, Operator]) -> list[FusableChain]:
    """``links`` cut into the runs whose neighbours can share a tile loop (two operators or more)."""
    out: list[FusableChain] = []
    nodes: list[str] = []
    stages: list[Stage] = []
    mac_at: list[int] = []
    macs: list[MacStage] = []

    def close() -> None:
        if len(nodes) >= 2:
            out.append(FusableChain(tuple(nodes), tuple(stages), tuple(mac_at), tuple(macs), chain_join()))
        nodes.clear()
        stages.clear()
        mac_at.clear()
        macs.clear()

    def chain_join() -> Join | None:
        """The residual add after the last link, if it is this run's last operator; its skip by stage
        index when an operator of the run reads it first and it has the output's shape, else from outside."""
        j = links[-1].join if links else None
        if j is None or nodes[-1] != links[-1].node:
            return None
        last = stages[-1]
        out_bits = last.out_bits
        if j.skip_node in nodes:
            s = stages[mac_at[nodes.index(j.skip_node)]]
            if (s.in_rows, s.in_cols, s.in_depth) == (last.out_rows, last.out_cols, last.out_depth):
                return Join(j.name, mac_at[nodes.index(j.skip_node)], s.in_bits)
        return Join(j.name, None, out_bits)

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
