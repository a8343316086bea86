"""From an embedding to a program: features, layout rewrites, the intrinsic loop nest, and running it.

A solution maps every intrinsic axis onto pieces ``(dim, length, step)`` of
operator dimensions. Extrapolating the single embedded instance over the
operator splits each mapped dimension ``d`` as ``d = phase + step*(block*length + j)``:
``j`` runs inside the intrinsic, ``block`` and ``phase`` become outer loops next
to the unmapped dimensions. Each operand gets the Table 4.1 rewrites that
make every intrinsic call read one dense tile, and the program is the outer
loop nest around one intrinsic call.
"""

from __future__ import annotations

import math
import string
from dataclasses import dataclass

import numpy as np

from accelmap.embed.csp import Solution
from accelmap.embed.dataflow import Dataflow, overlap_kind
from accelmap.embed.rewrites import Rewrite
from accelmap.errors import SpecError
from accelmap.workload.numpy_reference import stored_shape
from accelmap.workload.operator import Operator

MAX_CHUNK_ELEMS = 1 << 22
# Running a program (``embed --run``) holds every tensor, packed and unpacked, as int64 arrays and
# issues every call: beyond these it would take minutes and gigabytes (a 10^8-row image took 24 GiB).
MAX_RUN_ELEMENTS = 1 << 25
MAX_RUN_MACS = 1 << 31


def check_runnable(op: Operator, layouts=()) -> None:
    """Refuse, with one line, an operator (or program layouts) too large to execute on random data."""
    if op.macs > MAX_RUN_MACS:
        raise SpecError(f"operator {op.name!r}: {op.macs:.3g} MACs is too many to execute (at most "
                        f"{MAX_RUN_MACS:.3g}); leave out --run", where="--run")
    sizes = [(o.name, math.prod(op.index_extent(o))) for o in op.operands]
    sizes += [(f"{lay.operand} packed", math.prod(lay.packed)) for lay in layouts]
    for name, n in sizes:
        if n > MAX_RUN_ELEMENTS:
            raise SpecError(f"operator {op.name!r}: {name} has {n:.3g} elements, too many to execute (at most "
                            f"{MAX_RUN_ELEMENTS:.3g}); leave out --run", where="--run")


@dataclass(frozen=True)
class Feature:
    """Rieber's 2022 dissertation, Fig. 4.10: one operand axis an intrinsic axis walks, with its length and stride."""

    intrinsic_axis: str
    tensor_axis: int
    dim: str
    length: int
    stride: int

    def __str__(self) -> str:
        return f"({self.tensor_axis},{self.length},{self.stride})"


@dataclass(frozen=True)
class OuterAxis:
    kind: str                               # affine | dim | phase0 | phase | block | tile (intrinsic; not outer)
    terms: tuple[tuple[str, int], ...] = ()
    dim: str = ""

    def loop_terms(self) -> tuple[tuple[str, int], ...]:
        """Index of this axis as a sum over the program's loop variables."""
        if self.kind == "affine":
            return self.terms
        if self.kind == "dim":
            return ((self.dim, 1),)
        if self.kind == "phase":
            return ((f"{self.dim}_ph", 1),)
        if self.kind == "block":
            return ((f"{self.dim}_blk", 1),)
        return ()


@dataclass(frozen=True)
class OperandLayout:
    operand: str
    intrinsic_operand: str
    rewrites: tuple[Rewrite, ...]
    outer: tuple[OuterAxis, ...]
    tile_shape: tuple[int, ...]             # shape of the intrinsic operand
    pieces: tuple[tuple[int, bool], ...]    # (length, indexes this operand) per piece, tile order
    stored: tuple[int, ...]
    packed: tuple[int, ...]
    bits: int

    @property
    def transformed(self) -> bool:
        return bool(self.rewrites)

    def bytes(self, shape: tuple[int, ...]) -> int:
        return math.prod(shape) * self.bits // 8


@dataclass(frozen=True)
class Program:
    op: Operator
    intrinsic: Operator
    solution: Solution
    loops: tuple[tuple[str, int], ...]      # outer loops, outermost first
    layouts: tuple[OperandLayout, ...]      # output first
    features: tuple[tuple[str, tuple[Feature, ...]], ...]
    rules: tuple[str, ...]                  # Table 4.1 rules used, in order

    @property
    def calls(self) -> int:
        return math.prod(n for _, n in self.loops)

    @property
    def utilization(self) -> float:
        return self.op.macs / (self.calls * self.intrinsic.macs)

    def layout(self, operand: str) -> OperandLayout:
        return next(l for l in self.layouts if l.operand == operand)

    def text(self) -> str:
        lines = []
        ind = ""
        for name, n in self.loops:
            lines.append(f"{ind}for {name} in range({n}):")
            ind += "  "
        args = []
        for lay in self.layouts:
            idx = ", ".join(_fmt_terms(a.loop_terms()) for a in lay.outer if a.kind != "phase0")
            args.append(f"{lay.operand}_packed[{idx}{', ' if idx else ''}:]")
        lines.append(f"{ind}{self.intrinsic.name}({', '.join(args)})   # {self.intrinsic.expression()}")
        return "\n".join(lines)


def _fmt_terms(terms) -> str:
    return "+".join(d if c == 1 else f"{c}*{d}" for d, c in terms) or "0"


def _dim_plan(op: Operator, sol: Solution) -> dict[str, tuple[str, int, int, int]]:
    """Mapped dim -> (intrinsic axis, length, step, blocks)."""
    out = {}
    for axis, pieces in sol.axes:
        for pc in pieces:
            positions = -(-op.sizes[pc.dim] // pc.step)      # ceiling divisions
            blocks = -(-positions // pc.length)
            out[pc.dim] = (axis, pc.length, pc.step, blocks)
    return out


def features(op: Operator, intr: Operator, sol: Solution) -> dict[str, tuple[Feature, ...]]:
    roles = dict(sol.roles)
    out = {}
    for io in intr.operands:
        t = op.operand(roles[io.name])
        feats = []
        for ix in io.indices:
            for pc in sol.pieces(ix.dims[0]):
                for k, tix in enumerate(t.indices):
                    if pc.dim in tix.dims:
                        feats.append(Feature(ix.dims[0], k, pc.dim, pc.length, tix.coeff(pc.dim) * pc.step))
        out[io.name] = tuple(feats)
    return out


def _rule1_name(op: Operator, odf: Dataflow | None, operand: str, mapped_out: list[tuple[str, int]]) -> str:
    """Table 4.1 rule 1 from the overlap of consecutive mapped outputs and their input distance."""
    if not mapped_out:
        return "stencil unroll (im2col)"
    d, dist = mapped_out[0]
    if odf is not None:
        p0 = tuple(0 for _ in odf.output_dims)
        plan_step = dist
        p1 = tuple(plan_step if x == d else 0 for x in odf.output_dims)
        kind = overlap_kind(odf, operand, p0, p1)
    else:
        kind = "partial"
    coeff = next(ix.coeff(d) for ix in op.operand(operand).indices if d in ix.dims)
    if kind != "none":
        return "stencil unroll (im2col)" if coeff * dist == 1 else "dilate pack"
    return "image pack"


def build_program(op: Operator, intr: Operator, sol: Solution, odf: Dataflow | None = None) -> Program:
    roles = dict(sol.roles)
    plan = _dim_plan(op, sol)
    layouts = []
    rules_used: list[str] = []
    for io in [intr.output] + list(intr.inputs):
        t = op.operand(roles[io.name])
        # A piece whose dim does not index the operand is a broadcast (Vyasa's scalar broadcast).
        mine = {d for ix in io.indices for d in (pc.dim for pc in sol.pieces(ix.dims[0])) if d in t.dims}
        shape = list(stored_shape(op, t))
        stored = tuple(shape)
        rw: list[Rewrite] = []
        axes: list[OuterAxis] = [OuterAxis("affine", ix.terms) for ix in t.indices]
        ext = op.index_extent(t)
        lo = t.pad_lo or (0,) * len(ext)

        def add(rule, detail, params, fn_shape, *, rw: list[Rewrite] = rw):
            nonlocal shape
            rw.append(Rewrite(rule, detail, params, tuple(shape), tuple(fn_shape)))
            shape = list(fn_shape)

        # Operator padding first: the rewrites below address the padded index space.
        for k in range(len(ext)):
            if lo[k] or ext[k] != shape[k]:
                hi = ext[k] - shape[k] - lo[k]
                new = list(shape)
                new[k] = ext[k]
                add("pad", f"axis {k}: operator zero padding {lo[k]}+{max(hi, 0)}", (k, lo[k], hi), new)
        # Rule 1: give every mapped dim an axis of its own.
        k = 0
        while k < len(axes):
            a = axes[k]
            if a.kind == "affine" and any(d in mine for d, _ in a.terms):
                if len(a.terms) > 1:
                    sizes = tuple(plan[d][2] * plan[d][3] * plan[d][1] if d in plan else op.sizes[d]
                                  for d, _ in a.terms)
                    coeffs = tuple(c for _, c in a.terms)
                    mapped_out = [(d, plan[d][2]) for d, _ in a.terms if d in plan and d in op.output.dims]
                    name = _rule1_name(op, odf, t.name, mapped_out)
                    new = shape[:k] + list(sizes) + shape[k + 1:]
                    add(name, f"axis {k} [{'+'.join(f'{c}*{d}' for d, c in a.terms)}] -> "
                              f"[{','.join(d for d, _ in a.terms)}]", (k, coeffs, sizes), new)
                    axes[k:k + 1] = [OuterAxis("dim", dim=d) for d, _ in a.terms]
                    continue
                d, c = a.terms[0]
                if c > 1:
                    name = "image pack" if d in op.output.dims else "dilate pack"
                    new = shape[:k] + [-(-shape[k] // c), c] + shape[k + 1:]
                    add(name, f"axis {k} [{c}*{d}] -> [{d}, phase]", (k, c), new)
                    axes[k:k + 1] = [OuterAxis("dim", dim=d), OuterAxis("phase0")]
                    continue
                axes[k] = OuterAxis("dim", dim=d)
            k += 1
        # Strided pieces: pack the phase out so the intrinsic walks a dense axis.
        for d in sorted(mine):
            step = plan[d][2]
            if step > 1:
                k = axes.index(OuterAxis("dim", dim=d))
                new = shape[:k] + [-(-shape[k] // step), step] + shape[k + 1:]
                add("image pack", f"axis {k} [{d}] -> [{d}/{step}, {d}%{step}]", (k, step), new)
                axes[k:k + 1] = [OuterAxis("dim", dim=d), OuterAxis("phase", dim=d)]
        # Rules 2 and 3: pad to whole tiles, split into (block, tile).
        for d in sorted(mine):
            _, L, step, blocks = plan[d]
            k = axes.index(OuterAxis("dim", dim=d))
            want = blocks * L
            if shape[k] != want:
                new = list(shape)
                new[k] = want
                add("pad", f"axis {k} [{d}] to {want}", (k, 0, want - shape[k]), new)
            if blocks > 1 or L > 1:
                new = shape[:k] + [blocks, L] + shape[k + 1:]
                add("split", f"axis {k} [{d}] -> [{d}_blk {blocks}, {L}]", (k, L), new)
            axes[k:k + 1] = [OuterAxis("block", dim=d), OuterAxis("tile", dim=d)]
        # Rule 4: outer axes first, then the intrinsic axes in the intrinsic's order.
        tile_pos = []
        piece_list = []
        for ix in io.indices:
            for pc in reversed(sol.pieces(ix.dims[0])):
                piece_list.append((pc.length, pc.dim in mine))
                if pc.dim in mine:
                    tile_pos.append(axes.index(OuterAxis("tile", dim=pc.dim)))
        outer_pos = [i for i, a in enumerate(axes) if a.kind != "tile"]
        perm = tuple(outer_pos + tile_pos)
        if perm != tuple(range(len(perm))):
            add("reorder", f"to ({', '.join(str(p) for p in perm)})", (perm,), [shape[p] for p in perm])
        outer = [axes[i] for i in outer_pos]
        # Rule 5: fuse the pieces of each intrinsic axis.
        k = len(outer)
        for ix in io.indices:
            n = sum(1 for pc in sol.pieces(ix.dims[0]) if pc.dim in mine)
            if n > 1:
                new = shape[:k] + [math.prod(shape[k:k + n])] + shape[k + n:]
                add("fuse", f"axes {k}..{k + n - 1} -> intrinsic axis {ix.dims[0]}", (k, n), new)
            k += 1 if n else 0
        tile_shape = tuple(intr.sizes[ix.dims[0]] for ix in io.indices)
        layouts.append(OperandLayout(t.name, io.name, tuple(rw), tuple(outer), tile_shape, tuple(piece_list), stored,
                                     tuple(shape), t.bits))
        rules_used += [r.rule for r in rw]
    loops = []
    for d in op.dim_names:
        if d in plan:
            loops.append((f"{d}_blk", plan[d][3]))
            if plan[d][2] > 1:
                loops.append((f"{d}_ph", plan[d][2]))
        else:
            loops.append((d, op.sizes[d]))
    # Output loops outside, reductions inside: one output tile stays in the accumulator.
    out_dims = set(op.output.dims)
    key = lambda l: 0 if l[0].split("_")[0] in out_dims else 1
    loops.sort(key=key)
    order = []
    for r in ("stencil unroll (im2col)", "dilate pack", "image pack", "pad", "split", "reorder", "fuse"):
        if r in rules_used:
            order.append(r)
    feats = features(op, intr, sol)
    return Program(op, intr, sol, tuple(loops), tuple(layouts), tuple(feats.items()), tuple(order))


# ---- execution ---------------------------------------------------------------

def transform(lay: OperandLayout, arr: np.ndarray) -> np.ndarray:
    for r in lay.rewrites:
        arr = r.apply(arr)
    return arr


def untransform(lay: OperandLayout, arr: np.ndarray) -> np.ndarray:
    for r in reversed(lay.rewrites):
        arr = r.inverse(arr)
    return arr


def _intrinsic_subscripts(intr: Operator) -> str:
    letters = {d: string.ascii_lowercase[k] for k, (d, _) in enumerate(intr.dims)}
    sub = lambda o: "..." + "".join(letters[ix.dims[0]] for ix in o.indices)
    return f"{sub(intr.inputs[0])},{sub(intr.inputs[1])}->{sub(intr.output)}"


def run(prog: Program, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """Pack the inputs, issue every intrinsic call (NumPy emulation, batched over outer loops), unpack."""
    intr = prog.intrinsic
    roles = dict(prog.solution.roles)
    packed = {}
    for lay in prog.layouts[1:]:
        packed[lay.intrinsic_operand] = transform(lay, inputs[lay.operand].astype(np.int64))
    out_lay = prog.layouts[0]
    out_packed = np.zeros(out_lay.packed, dtype=np.int64)
    names = [n for n, _ in prog.loops]
    extents = [n for _, n in prog.loops]
    subs = _intrinsic_subscripts(intr)
    acc_bits = intr.output.bits
    tile = max(math.prod(l.tile_shape) for l in prog.layouts)
    # Chunk the outermost loops so a batch of calls stays within memory.
    split_at = 0
    while split_at < len(extents) and math.prod(extents[split_at:]) * tile > MAX_CHUNK_ELEMS:
        split_at += 1
    head = extents[:split_at]
    for head_vals in np.ndindex(*head) if head else [()]:
        grids = {}
        tail = extents[split_at:]
        for k, name in enumerate(names):
            if k < split_at:
                grids[name] = np.asarray(head_vals[k])
            else:
                shape = [1] * len(tail)
                shape[k - split_at] = extents[k]
                grids[name] = np.arange(extents[k]).reshape(shape)
        full = tuple(tail)

        def fetch(lay: OperandLayout, arr: np.ndarray | None, *, grids: dict = grids, full: tuple = full) -> tuple:
            idx = []
            for a in lay.outer:
                terms = a.loop_terms()
                idx.append(np.broadcast_to(sum(c * grids[d] for d, c in terms) if terms else np.asarray(0), full))
            return tuple(idx)

        def tiles(lay: OperandLayout, *, full: tuple = full) -> np.ndarray:
            got = packed[lay.intrinsic_operand][fetch(lay, None)]
            parts = tuple(L if present else 1 for L, present in lay.pieces)
            got = got.reshape(full + parts)
            got = np.broadcast_to(got, full + tuple(L for L, _ in lay.pieces))
            return got.reshape(full + lay.tile_shape)

        a_lay, b_lay = prog.layouts[1], prog.layouts[2]
        a, b = tiles(a_lay), tiles(b_lay)
        if (a_lay.intrinsic_operand, b_lay.intrinsic_operand) != (intr.inputs[0].name, intr.inputs[1].name):
            a, b = b, a
        res = np.einsum(subs, a, b)
        if np.abs(res).max(initial=0) >= (1 << (acc_bits - 1)):
            raise OverflowError(f"an intrinsic call overflows the {acc_bits}-bit accumulator")
        oidx = fetch(out_lay, None)
        res = res.reshape(full + (-1,))
        flat = out_packed.reshape(out_lay.packed[:len(out_lay.outer)] + (-1,))
        np.add.at(flat, oidx, res)
    del roles
    return untransform(out_lay, out_packed)


def verify_program(prog: Program, seed: int = 0) -> tuple[bool, str]:
    """Run the program on random integers and compare with the reference operator exactly."""
    from accelmap.embed.integer_inputs import random_inputs
    from accelmap.workload.numpy_reference import reference

    check_runnable(prog.op, prog.layouts)
    inputs = random_inputs(prog.op, seed)
    want = reference(prog.op, inputs)
    got = run(prog, inputs)
    if got.shape != want.shape:
        return False, f"shape {got.shape} != reference {want.shape}"
    bad = int(np.count_nonzero(got != want))
    if bad:
        return False, f"{bad} of {want.size} output elements differ from the reference"
    if np.abs(want).max(initial=0) >= (1 << (prog.op.output.bits - 1)):
        return False, f"the reference overflows the {prog.op.output.bits}-bit output"
    return True, f"all {want.size} output elements equal the reference"
