"""Running a selected instruction program with NumPy emulations of the instructions (Rieber, ch. 3).

Each statement of a solution is computed by the one match that covers its algebraic nodes. The
instruction is emulated from its *pattern*: the pattern tree is evaluated with NumPy, its inputs
bound to the workload operands the match pairs them with (masked accesses fixed at the outer loop
point, the unmasked ones ranging over the pattern's own iterators), its immediates to the workload's
constants, once per point of the outer loops the match leaves. A wrong pairing in the matcher
(operand order, access order, masking) therefore gives a wrong result, which is what the tests check.
"""

from __future__ import annotations

import itertools
from typing import Mapping

import numpy as np

from accelmap.embed.tcg import TCG, UNARY, Node, Program, tensor_array
from accelmap.embed.tcg_match import Instruction, _masked_accesses, _region
from accelmap.embed.tcg_select import Selection
from accelmap.errors import SpecError


def _pair(w: Node, p: Node, inside: set[int], pairs: dict[int, tuple[Node, int]]) -> None:
    """Walk workload and pattern together: pattern node id -> (workload node, masked accesses)."""
    k = _masked_accesses(w, inside) if w.kind == "input" and w.children else 0
    pairs[id(p)] = (w, k)
    kids = w.children[:1] if w.kind == "tensor" else w.children[:len(w.children) - k]
    for a, b in zip(kids, p.children, strict=False):
        _pair(a, b, inside, pairs)


def statement_of(tcg: TCG, index: int) -> int:
    """The statement a node computes: walk up to one of the statement's own tensor nodes (a loop it
    shares with a neighbour is never a match root: its right-hand subgraph holds the neighbour too)."""
    prog = tcg.program
    own = {ix: si for si, lv in enumerate(tcg.levels) for ix in lv[max(prog.shared(si), prog.shared(si + 1)):]}
    n = tcg.nodes[index]
    while n.index not in own:
        assert n.parent is not None
        n = n.parent
    return own[n.index]


def run_selection(program: Program, tcg: TCG, selection: Selection, isa: tuple[Instruction, ...],
                  inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every statement's result, computed only by the selected instructions, in the program's loop order.

    Fused statements run interleaved inside their shared loops (Fig. 3.12), and results start as
    NaN, so a statement that read an element before it was written would show it."""
    if not selection.full:
        raise SpecError("only a fully covered selection can run as an instruction program")
    by_name = {ins.name: ins for ins in isa}
    sizes = dict(program.sizes)
    sizes["_"] = 1
    calls: dict[int, list] = {}
    for m in selection.matches:
        calls.setdefault(statement_of(tcg, m.root), []).append(m)
    env: dict[str, np.ndarray] = {
        st.out: np.full([sizes[d] for d in st.dims], np.nan) if st.dims else np.asarray(np.nan)
        for st in program.statements}
    plans = []
    for si, st in enumerate(program.statements):
        ms = calls.get(si, [])
        if len(ms) != 1:
            raise SpecError(f"statement {st} is covered by {len(ms)} instructions; expected one")
        root = tcg.nodes[ms[0].root]
        lv = list(tcg.levels[si])
        outer = lv[:lv.index(root.index)] if root.index in lv else lv   # loops around the instruction
        pairs: dict[int, tuple[Node, int]] = {}
        ins = by_name[ms[0].instruction]
        _pair(root, ins.pattern, {x.index for x in _region(root)}, pairs)
        plans.append((ins, pairs, [tcg.nodes[o] for o in outer] if st.dims else []))

    def call(si: int, point: tuple[int, ...]) -> None:
        ins, pairs, outer = plans[si]
        at = {o.index: v for o, v in zip(outer, point, strict=True)}
        val = _emulate(ins.pattern, pairs, at, sizes, program, inputs, env)
        if program.statements[si].dims:
            env[program.statements[si].out][point] = val
        else:
            env[program.statements[si].out] = np.asarray(val)

    def run(first: int, last: int, depth: int, point: tuple[int, ...]) -> None:
        """Statements first..last share their outer ``depth`` loops, fixed at ``point``."""
        si = first
        while si <= last:
            group_end = si
            while group_end < last and program.shared(group_end + 1) > depth:
                group_end += 1
            if group_end == si:   # on its own below this depth: all its remaining outer loops at once
                rest = plans[si][2][depth:]
                for inner in itertools.product(*(range(sizes[o.defines or "_"]) for o in rest)):
                    call(si, point + inner)
            else:                 # the next shared loop, then the group inside it in program order
                loop = tcg.nodes[tcg.levels[si][depth]]
                for v in range(sizes[loop.defines or "_"]):
                    run(si, group_end, depth + 1, point + (v,))
            si = group_end + 1

    run(0, len(program.statements) - 1, 0, ())
    return env


def _emulate(p: Node, pairs, at: dict[int, int], sizes: dict[str, int], program: Program,
             inputs: Mapping[str, np.ndarray], env: dict[str, np.ndarray]) -> np.ndarray:
    """The instruction's result at one outer point: an array over the pattern's tensor dimensions."""
    axes: list[Node] = []
    stack = [p]
    while stack:   # the pattern's iterators, in pre-order, one NumPy axis each
        n = stack.pop()
        if n.kind in ("tensor", "reduction"):
            axes.append(n)
        stack.extend(reversed(n.children))
    size = {id(a): sizes[pairs[id(a)][0].defines or "_"] for a in axes}

    def axis(owner: Node) -> np.ndarray:
        shape = [1] * len(axes)
        k = next(i for i, a in enumerate(axes) if a is owner)
        shape[k] = size[id(owner)]
        return np.arange(size[id(owner)]).reshape(shape)

    def outer_index(a: Node) -> int:
        if a.owner is not None:
            return at[a.owner.index]
        if a.label.startswith("A="):
            return int(a.label[2:])
        left, right = outer_index(a.children[1]), outer_index(a.children[0])
        return left + right if a.label == "Aadd" else left * right

    def ev(n: Node) -> np.ndarray:
        w, masked = pairs[id(n)]
        if n.kind == "input":
            if n.label == "K":
                assert w.value is not None
                return np.full([1] * len(axes), w.value)
            assert w.tensor is not None
            arr = tensor_array(program, w.tensor, inputs, env)
            outer_axes = list(reversed(w.children))[:masked]
            idx: list[np.ndarray | int] = [outer_index(a) for a in outer_axes]
            # the pattern's accesses, outermost first, range over the pattern's own iterators
            idx += [axis(pa.owner) for pa in reversed(n.children) if pa.owner is not None]
            if not idx:
                return np.asarray(arr).reshape([1] * len(axes))
            got = np.asarray(arr[tuple(np.broadcast_arrays(*[np.asarray(i) for i in idx]))])
            return got if got.ndim == len(axes) else got.reshape([1] * len(axes))
        if n.kind == "compute":
            if len(n.children) == 1:
                return UNARY[n.label[1:]](ev(n.children[0]))
            a, b = ev(n.children[1]), ev(n.children[0])
            op = n.label[1:]
            return {"add": np.add, "mul": np.multiply, "sub": np.subtract, "div": np.divide,
                    "max": np.maximum}[op](a, b)
        if n.kind == "reduction":
            k = next(i for i, a in enumerate(axes) if a is n)
            body = ev(n.children[1])
            shape = list(body.shape)
            shape[k] = size[id(n)]
            body = np.broadcast_to(body, shape)
            init = ev(n.children[0])
            op = n.label[1:]
            if op == "add":
                return np.sum(body, axis=k, keepdims=True) + init
            if op == "mul":
                return np.prod(body, axis=k, keepdims=True) * init
            return np.maximum(np.max(body, axis=k, keepdims=True), init)
        return ev(n.children[0])   # a tensor node: its dimension is an axis of the result

    res = ev(p)
    res = np.broadcast_to(res, [size[id(a)] if a.kind == "tensor" else 1 for a in axes])
    keep = [i for i, a in enumerate(axes) if a.kind == "tensor"]
    return res.reshape([res.shape[i] for i in keep]) if keep else res.reshape(())
