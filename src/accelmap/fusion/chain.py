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
    # Residual adds after operators inside the chain (``Join.at``: the tensor they add to, by the chain's
    # tensor index), where the chain spans residual blocks (``span_residual_blocks``).
    inner_joins: tuple[Join, ...] = ()
    feeds: str | None = None                 # the next block's first operator, reading the join's result
    # Per operator, the normalizations over token rows (softmax, layer norm) between it and the previous one:
    # inside a group they apply as that operator's input tile is written; a plan cutting there runs them alone.
    norms: tuple[tuple[str, ...], ...] = ()
    # Per operator, the operator (outside the chain) whose output alone is its second operand (attention's K, V).
    producers: tuple[str | None, ...] = ()
    # Per operator, the tensor it reads first and the tensor its producer reads first (ONNX names; None: unknown):
    # a group starting at operator k whose input is a producer's input may let that producer read it in the store.
    inputs: tuple[str | None, ...] = ()
    producer_inputs: tuple[str | None, ...] = ()

    def producer_reads_input(self, first: int, k: int) -> bool:
        """Whether operator ``k``'s producer reads the input of the group starting at operator ``first``."""
        if not self.inputs or not self.producer_inputs:
            return False
        return self.inputs[first] is not None and self.producer_inputs[k] == self.inputs[first]

    def norms_before(self, k: int) -> tuple[str, ...]:
        """The normalizations between operator ``k - 1`` and operator ``k``."""
        return self.norms[k] if self.norms else ()

    def norm_elements(self, k: int) -> int:
        """Elements one normalization before operator ``k`` normalizes (the previous stage's output)."""
        prev = self.stages[self.mac_at[k] - 1]
        return prev.out_rows * prev.out_cols * prev.out_depth

    def norm_bits(self, k: int) -> tuple[int, int]:
        """Bits one normalization before operator ``k`` reads (the previous operator's output) and writes
        (the operator's input), each element once."""
        prev, nxt = self.stages[self.mac_at[k] - 1], self.stages[self.mac_at[k]]
        elems = self.norm_elements(k)
        return elems * prev.out_bits, elems * nxt.in_bits

    def group_norms(self, first: int, last: int) -> tuple[tuple[int, int], ...]:
        """The normalizations inside the group of operators ``first..last``: (the stage whose output they
        normalize, by the group's stage index; how many), applied as that stage's blocks are written."""
        a = self.mac_at[first]
        return tuple((self.mac_at[k] - 1 - a, len(self.norms_before(k))) for k in range(first + 1, last + 1)
                     if self.norms_before(k))

    def group(self, first: int, last: int) -> tuple[tuple[Stage, ...], dict[int, MacStage]]:
        """The stages of operators ``first..last`` (inclusive) and their operators by stage index."""
        a, b = self.mac_at[first], self.mac_at[last]
        return self.stages[a:b + 1], {self.mac_at[k] - a: self.mac_stages[k] for k in range(first, last + 1)}

    def joins_after(self) -> dict[int, Join]:
        """Every join of the chain by the index of the operator it follows."""
        out = {self.mac_at.index(j.at - 1): j for j in self.inner_joins if j.at is not None}
        if self.join is not None:
            out[len(self.nodes) - 1] = self.join
        return out

    def group_join(self, first: int, last: int) -> Join | None:
        """The join after operator ``last`` as the group ``first..last`` sees it (ending the group); its
        skip is a tensor of the group, or (before the group's first stage) from outside."""
        j = self.joins_after().get(last)
        if j is None:
            return None
        a = self.mac_at[first]
        return replace(j, skip=None if j.skip is None or j.skip < a else j.skip - a, at=None)

    def group_inner_joins(self, first: int, last: int) -> tuple[Join, ...]:
        """The joins after operators ``first..last-1``: inside the group, by its tensor indices."""
        a = self.mac_at[first]
        return tuple(replace(j, skip=None if j.skip is None or j.skip < a else j.skip - a, at=self.mac_at[m] + 1 - a)
                     for m, j in sorted(self.joins_after().items()) if first <= m < last)

    def join_bits_of(self, join: Join) -> int:
        """Bits of a join's skip, all of it (what its add reads, each position once)."""
        t = self.stages[join.target(len(self.stages)) - 1]
        return t.out_rows * t.out_cols * t.out_depth * join.bits

    @property
    def join_bits(self) -> int:
        """Bits of the join's skip, all of it (what the add reads)."""
        return self.join_bits_of(self.join) if self.join else 0


def _norms(c: FusableChain) -> tuple[tuple[str, ...], ...]:
    return c.norms or ((),) * len(c.nodes)


def _producers(c: FusableChain) -> tuple[str | None, ...]:
    return c.producers or (None,) * len(c.nodes)


def _inputs(c: FusableChain) -> tuple[tuple[str | None, ...], tuple[str | None, ...]]:
    return c.inputs or (None,) * len(c.nodes), c.producer_inputs or (None,) * len(c.nodes)


def _shifted(j: Join, off: int) -> Join:
    """A join of a chain placed after ``off`` stages of another."""
    return replace(j, skip=None if j.skip is None else j.skip + off, at=None if j.at is None else j.at + off)


def span_residual_blocks(chains: list[FusableChain]) -> list[FusableChain]:
    """Chains of consecutive residual blocks joined into one: where a chain's add result is read only
    by the next chain's first operator and by the next chain's add (as its skip, the next block's
    input), the two become one chain whose first add is a join inside it. A group of it may then span
    both blocks, keeping the add's result on chip for the next block and for the next add."""
    out: list[FusableChain] = []
    for c in chains:
        prev = out[-1] if out else None
        if (prev is not None and prev.join is not None and prev.feeds == c.nodes[0] and c.join is not None
                and c.join.skip == c.mac_at[0] and (prev.stages[-1].out_rows, prev.stages[-1].out_cols,
                                                    prev.stages[-1].out_depth)
                == (c.stages[0].in_rows, c.stages[0].in_cols, c.stages[0].in_depth)):
            off = len(prev.stages)
            out[-1] = FusableChain(prev.nodes + c.nodes, prev.stages + c.stages,
                                   prev.mac_at + tuple(x + off for x in c.mac_at), prev.mac_stages + c.mac_stages,
                                   _shifted(c.join, off), prev.inner_joins + (replace(prev.join, at=off),)
                                   + tuple(_shifted(j, off) for j in c.inner_joins), c.feeds,
                                   _norms(prev) + _norms(c), _producers(prev) + _producers(c),
                                   _inputs(prev)[0] + _inputs(c)[0], _inputs(prev)[1] + _inputs(c)[1])
        else:
            out.append(c)
    return out


def fusable_chains(links: tuple[ChainLink, ...], operators: dict[str, Operator]) -> list[FusableChain]:
    """``links`` cut into the runs whose neighbours can share a tile loop (two operators or more)."""
    out: list[FusableChain] = []
    nodes: list[str] = []
    stages: list[Stage] = []
    mac_at: list[int] = []
    macs: list[MacStage] = []
    norms: list[tuple[str, ...]] = []
    producers: list[str | None] = []
    inputs: list[str | None] = []
    producer_inputs: list[str | None] = []

    def close() -> None:
        if len(nodes) >= 2:
            jn = chain_join()
            feeds = links[-1].join.feeds if jn is not None and links[-1].join is not None else None
            out.append(FusableChain(tuple(nodes), tuple(stages), tuple(mac_at), tuple(macs), jn, (), feeds,
                                    ((),) + tuple(norms[1:]), tuple(producers), tuple(inputs),
                                    tuple(producer_inputs)))
        nodes.clear()
        stages.clear()
        mac_at.clear()
        macs.clear()
        norms.clear()
        producers.clear()
        inputs.clear()
        producer_inputs.clear()

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
        norms.append(link.normalizations)
        producers.append(link.operand_producer)
        inputs.append(link.input_tensor)
        producer_inputs.append(link.operand_producer_input)
    close()
    return out
