"""Tiling and padding annotations of a selection (Rieber's 2022 dissertation, eq. 3.5 and 3.6).

They are applied after selection: every workload dimension an instruction covers is padded up to a
multiple of the instruction's size along it and split into that many instruction-sized tiles.
Eq. 3.5 is printed as ``dim_loop / dim_instr``; we read it on the padded extent, so the tile count
is a whole number, ``(dim_loop + padding) / dim_instr``, and 0 (no tiling loop) when one call fits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from accelmap.embed.tcg import TCG, Program
from accelmap.embed.tcg_execute import _pair, statement_of
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
    dim: str            # the workload dimension
    size: int
    tiles: int          # eq. 3.5 (0: one call covers it)
    padding: int        # eq. 3.6
    lanes: int = 0      # the instruction's extent along it
    instruction_dim: str = ""

    @property
    def calls(self) -> int:
        return max(1, self.tiles)

    def __str__(self) -> str:
        return f"{self.instruction}.{self.dim}={self.size}: " + (
            f"{self.tiles} tiles" if self.tiles else "one call") + (f", pad {self.padding}" if self.padding else "")


@dataclass(frozen=True)
class InstructionCalls:
    """One selected instruction as issued: the loops around it, its tiled dimensions, its cost per call."""

    statement: int
    instruction: str
    loops: tuple[tuple[str, int], ...]     # outer loops (masked or shared dimensions), outermost first
    dims: tuple[DimensionTiling, ...]
    cycles_per_call: int

    @property
    def calls(self) -> int:
        return math.prod(n for _, n in self.loops) * math.prod(d.calls for d in self.dims)

    @property
    def cycles(self) -> int:
        return self.calls * self.cycles_per_call


def instruction_calls(program: Program, tcg: TCG, selection: Selection, isa: tuple[Instruction, ...],
                      lanes: int | None = None) -> list[InstructionCalls]:
    """Every instruction of a selection with its outer loops and the tiling and padding (eq. 3.5/3.6) of
    every dimension it covers: along the instruction's own extent for a fixed-size instruction (our
    intrinsics), ``lanes`` elements for a variable-size one (Table 3.1 gives none)."""
    by_name = {ins.name: ins for ins in isa}
    sizes = dict(program.sizes)
    out = []
    for m in selection.matches:
        si = statement_of(tcg, m.root)
        root = tcg.nodes[m.root]
        lv = list(tcg.levels[si])
        outer = lv[:lv.index(root.index)] if root.index in lv else lv
        pairs: dict[int, tuple] = {}
        ins = by_name[m.instruction]
        fixed = dict(ins.sizes)
        _pair(root, ins.pattern, {x.index for x in _region(root)}, pairs)
        dims = []
        stack = [ins.pattern]
        while stack:
            p = stack.pop()
            stack.extend(reversed(p.children))
            if p.kind in ("tensor", "reduction"):
                dim = pairs[id(p)][0].defines
                if dim not in sizes:   # a scalar result's length-1 tensor
                    continue
                k = fixed.get(p.defines or "", lanes)
                if k is None:
                    raise SpecError(f"{ins.name} has no fixed size along {p.defines}: give the instruction's lanes",
                                    where="--lanes")
                n = sizes[dim]
                dims.append(DimensionTiling(m.instruction, dim, n, tiling(n, k), padding(n, k), k, p.defines or ""))
        loops = tuple((tcg.nodes[o].defines or "_", sizes.get(tcg.nodes[o].defines or "_", 1)) for o in outer)
        out.append(InstructionCalls(si, m.instruction, loops, tuple(dims), ins.cycles))
    return out


def annotate(program: Program, tcg: TCG, selection: Selection, isa: tuple[Instruction, ...],
             lanes: int) -> list[DimensionTiling]:
    """Tiling and padding of every dimension an instruction of the selection covers, for an
    instruction of ``lanes`` elements along each of its dimensions."""
    return [d for c in instruction_calls(program, tcg, selection, isa, lanes) for d in c.dims]


def cycle_estimate(program: Program, tcg: TCG, selection: Selection, isa: tuple[Instruction, ...],
                   lanes: int | None = None) -> int:
    """Issue cycles of the instruction program: every call of every instruction times its issue interval
    (an intrinsic's ``cycles``; 1 for a Table 3.1 instruction, which the thesis gives no timing). Compute
    issue only: no memory traffic, no overlap between instructions."""
    return sum(c.cycles for c in instruction_calls(program, tcg, selection, isa, lanes))
