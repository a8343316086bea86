"""The weights' transfers of a fused group in C, as the fusion model charges them (``fusion.group_cost``).

A group keeping its weights resident fetches every operator's weights (its operands other than the chained
input) into the store once, before its first tile, and its blocks read them there; a group streaming them
fetches, at every block, what the block's own mapping (the tile mapping the model costed the block with) moves
from off-chip memory: the DMA tiles of the weights into the first on-chip level keeping them, as that mapping's
loops above the level walk them (``codegen.c_source.generate_c`` with ``fetched_only``, the single-operator
program's tile runtime restricted to those tiles); a weight the block's mapping keeps on no on-chip level has no
tile: it is read from memory at each multiply-accumulate (once per multicast group), so its fetch program runs
every loop of the mapping and reads it there, as the block's whole program does and the cost model charges. A
second operand a producer left in the store (attention's K
or V, ``GroupCost.producers_on_chip``) is not fetched at all.

The emitted C counts the bits it fetches per stage, so the group's counters compare with the model's per-stage
off-chip weight bits (``model_weight_bits``). The blocks' multiply-accumulates through the inner mapping's loops
and buffers are ``codegen.fused_blocks``' (where covered); elsewhere they run in the block's own order reading the
weights from the tensor in memory (resident: from their copy in the store), and the fetched tiles land in the
level's buffer and are counted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from accelmap.arch.accelerator import Accelerator
from accelmap.codegen.c_source import generate_c, stored_shape
from accelmap.codegen.fused_blocks import block_mappings
from accelmap.errors import SpecError
from accelmap.fusion.geometry import Stage
from accelmap.fusion.group_cost import GroupCost, InnerMappings
from accelmap.fusion.stages import MacStage, tile_operator


@dataclass(frozen=True)
class BlockFetch:
    """The weight fetches of one block shape of a stage: a C translation unit of its own (the tile runtime's
    globals are per program) with entry point ``int FUNCTION(void **T, long long *counters)``, ``T`` the tile
    operator's tensors in operand order (only the fetched ones read), counters ``[levels][operands][4]``."""

    function: str
    operands: int
    levels: int
    fetched: tuple[tuple[int, int], ...]    # (operand index in the tile operator, bits) of the fetched operands
    source: str

    def counted_bits(self, counters: str) -> str:
        """A C expression: the bits the outermost level moved for the fetched operands (every counter, as the
        cost model's off-chip bits sum them)."""
        terms = [f"{bits}LL * ({' + '.join(f'{counters}[{(k * 4 + c)}]' for c in range(4))})"
                 for k, bits in self.fetched]
        return " + ".join(terms) or "0"


@dataclass(frozen=True)
class WeightTransfers:
    """Per multiply-accumulate stage of a group: its weight elements copied into the store once (resident), or
    its blocks' fetch programs by block shape (streamed); ``bits[j]``: bits of one weight element of stage j."""

    resident: dict[int, int]
    streamed: dict[int, dict[tuple[int, int], BlockFetch]]
    bits: dict[int, int]

    def units(self) -> list[tuple[str, str]]:
        """(function, C source) of every fetch program."""
        return [(b.function, b.source) for by in self.streamed.values() for b in by.values()]


def weight_operands(ms: MacStage) -> tuple[str, ...]:
    """The operands of a stage's operator other than its chained input and its output."""
    return tuple(x.name for x in ms.operator.inputs[1:])


def plan_weight_transfers(name: str, stages: tuple[Stage, ...], macs: dict[int, MacStage], arch: Accelerator,
                          cost: GroupCost, inner: InnerMappings, in_store: frozenset[int] = frozenset(),
                          dtypes: dict[int, str] | None = None) -> WeightTransfers:
    """How the C of group ``name`` moves its weights, from the plan's ``cost`` (its tile, halos, joins, head tile,
    weight residency and the store room it reserved) and the tile mappings ``inner`` found for it (the same
    object the model used: each block gets the mapping it was costed with). ``in_store``: the stages whose second
    operand a producer left in the store. ``dtypes[j]``: ``int`` or ``fp32``, stage j's element type (the fetch
    copies elements of its size)."""
    dtypes = dtypes or {}
    bits = {j: ms.operator.inputs[1].bits for j, ms in macs.items()}
    for ms in macs.values():
        if len(ms.operator.inputs) != 2:
            raise SpecError(f"fused group {name}: {ms.operator.name} has {len(ms.operator.inputs) - 1} operands "
                            "besides its chained input; a fused block reads one (its weight)")
    if cost.weights_resident:
        resident = {}
        for j, ms in macs.items():
            if j in in_store:
                continue            # its producer's output is in the store already
            resident[j] = math.prod(stored_shape(ms.operator, ms.operator.inputs[1])[0])
        return WeightTransfers(resident, {}, bits)
    bm = block_mappings(name, stages, macs, arch, cost, inner)
    streamed: dict[int, dict[tuple[int, int], BlockFetch]] = {}
    for j, by_shape in bm.shapes.items():
        ms = bm.stages[j]
        fetched_names = [x for k, x in enumerate(weight_operands(ms)) if not (k == 0 and j in in_store)]
        if not fetched_names or not by_shape:
            continue
        streamed[j] = {}
        for (r, c), (_, m) in by_shape.items():
            tile = tile_operator(ms, r, c)
            fn = f"{name}_fetch{j}_{r}x{c}"
            src = generate_c(tile, bm.arch, m, dtypes.get(j, "int"), fetched_only=frozenset(fetched_names))
            names = [o.name for o in tile.operands]
            fetched = tuple((names.index(x), tile.operands[names.index(x)].bits) for x in fetched_names)
            streamed[j][(r, c)] = BlockFetch(fn, len(tile.operands), len(bm.arch.levels), fetched,
                                             src.replace("int accelmap_run(", f"int {fn}(", 1))
    return WeightTransfers({}, streamed, bits)


def model_weight_bits(cost: GroupCost) -> list[int]:
    """Per stage, the off-chip bits the fusion model charges for its weights (its transfers less the group's
    input fetched and output written, which the stage's feature-map bits are)."""
    return [s.offchip_bits - s.fmap_bits for s in cost.stages]
