"""Tiling and padding annotations of a selection (Rieber's 2022 dissertation, eq. 3.5 and 3.6).

They are applied after selection: every workload dimension an instruction covers is padded up to a
multiple of the instruction's size along it and split into that many instruction-sized tiles.
Eq. 3.5 is printed as ``dim_loop / dim_instr``; we read it on the padded extent, so the tile count
is a whole number, ``(dim_loop + padding) / dim_instr``, and 0 (no tiling loop) when one call fits.
"""

from __future__ import annotations

from dataclasses import dataclass

from accelmap.embed.tcg import TCG, Program
from accelmap.embed.tcg_execute import _pair
from accelmap.embed.tcg_match import Instruction, _region
from accelmap.embed.tcg_select import Selection
from accelmap.errors import SpecError


def padding(dim_loop: int, dim_instr: int) -> int:
    """Eq. 3.6: elements added so the loop is a multiple of the instruction size."""
    if dim_loop < 1 or dim_instr < 1:
        raise SpecError(f"loop size {dim_loop} and instruction size {dim_instr} must be positive")
    return dim_instr * -(-dim_loop // dim_instr) - dim_loop if dim_loop % dim_instr else 0


def tiling(dim_loop: int, dim_instr: int) -> int:
    """Eq. 3.5: instruction-sized tiles of the padded loop, 0 when one call covers it."""
    padded = dim_loop + padding(dim_loop, dim_instr)
    return padded // dim_instr if padded > dim_instr else 0


@dataclass(frozen=True)
class DimensionTiling:
    instruction: str
    dim: str
    size: int
    tiles: int
    padding: int

    def __str__(self) -> str:
        return f"{self.instruction}.{self.dim}={self.size}: " + (
            f"{self.tiles} tiles" if self.tiles else "one call") + (f", pad {self.padding}" if self.padding else "")


def annotate(program: Program, tcg: TCG, selection: Selection, isa: tuple[Instruction, ...],
             lanes: int) -> list[DimensionTiling]:
    """Tiling and padding of every dimension an instruction of the selection covers, for an
    instruction of ``lanes`` elements along each of its dimensions."""
    by_name = {ins.name: ins for ins in isa}
    sizes = dict(program.sizes)
    out = []
    for m in selection.matches:
        root = tcg.nodes[m.root]
        pairs: dict[int, tuple] = {}
        ins = by_name[m.instruction]
        _pair(root, ins.pattern, {x.index for x in _region(root)}, pairs)
        stack = [ins.pattern]
        while stack:
            p = stack.pop()
            stack.extend(reversed(p.children))
            if p.kind in ("tensor", "reduction"):
                dim = pairs[id(p)][0].defines
                if dim in sizes:
                    n = sizes[dim]
                    out.append(DimensionTiling(m.instruction, dim, n, tiling(n, lanes), padding(n, lanes)))
    return out
